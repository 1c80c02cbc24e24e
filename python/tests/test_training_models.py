"""Training through htp.torch beyond Llama and OPT, as users bring models: GPT-2 (Conv1D layers,
lm_head tied to the token embedding), Mixtral (a mixture of experts: experts a batch never routes
to get no gradient) and T5 (an encoder-decoder, both embeddings and lm_head tied to one weight).
offload(training=True) with offload_activations at 30% of the paged weights (Mixtral also at 20%,
where two expert modules do not fit at once) gives the resident model's loss, gradients (which
parameters have one, and their bits) and AdamW parameters."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import htp.torch as ht  # noqa: E402
from conftest import build_model  # noqa: E402
from test_training import check_same, offload, train  # noqa: E402

STEPS = 2


def seq2seq_train(model, steps, context=lambda: None):
    """train() for an encoder-decoder: the decoder reads the shifted labels."""
    g = torch.Generator().manual_seed(11)
    ids = torch.randint(0, 512, (2, 10), generator=g)
    labels = torch.randint(0, 512, (2, 6), generator=g)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    trace = []
    for _ in range(steps):
        ctx = context()
        with ctx if ctx is not None else torch.enable_grad():
            out = model(input_ids=ids, labels=labels)
        out.loss.backward()
        grads = {n: p.grad.detach().clone() for n, p in model.named_parameters()
                 if p.grad is not None}
        opt.step()
        opt.zero_grad()
        trace.append((out.loss.detach(), grads))
    return trace, {n: p.detach().clone() for n, p in model.named_parameters()}


@pytest.mark.parametrize("kind,fraction", [("gpt2", 0.3), ("mixtral", 0.3), ("mixtral", 0.2),
                                           ("t5", 0.3)])
def test_training_other_architectures_matches_the_resident_model(kind, fraction):
    run = seq2seq_train if kind == "t5" else train
    model, _ = build_model(kind, torch.float32)
    want = run(model, STEPS)
    model, keep = build_model(kind, torch.float32)
    handle = offload(model, keep, fraction)
    try:
        acts = ht.offload_activations(handle)
        got = run(model, STEPS, lambda: acts)
        check_same(got, want, f"htp {kind} {fraction:.0%}")
        assert handle.metrics()["page_in_bytes"] > 0, "the weights were paged"
    finally:
        handle.remove()
