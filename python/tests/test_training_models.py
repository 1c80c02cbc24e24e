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


def seq2seq_forward():
    """An encoder-decoder's batch: the decoder reads the shifted labels."""
    g = torch.Generator().manual_seed(11)
    ids = torch.randint(0, 512, (2, 10), generator=g)
    labels = torch.randint(0, 512, (2, 6), generator=g)
    return lambda m: m(input_ids=ids, labels=labels)


@pytest.mark.parametrize("kind,fraction", [("gpt2", 0.3), ("mixtral", 0.3), ("mixtral", 0.2),
                                           ("t5", 0.3)])
def test_training_other_architectures_matches_the_resident_model(kind, fraction):
    forward = seq2seq_forward() if kind == "t5" else None
    model, _ = build_model(kind, torch.float32)
    want = train(model, STEPS, forward=forward)
    model, keep = build_model(kind, torch.float32)
    handle = offload(model, keep, fraction)
    try:
        acts = ht.offload_activations(handle)
        got = train(model, STEPS, lambda: acts, forward=forward)
        check_same(got, want, f"htp {kind} {fraction:.0%}")
        assert handle.metrics()["page_in_bytes"] > 0, "the weights were paged"
    finally:
        handle.remove()
