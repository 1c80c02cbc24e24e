"""Training through htp.torch on sim: offload(training=True) with offload_activations gives the
resident model's gradients and AdamW steps bit for bit (Llama and OPT, 30% and 50% of the paged
weights, fp32 and bf16), as does the save_on_cpu anchor on the same offload, and htp moves fewer
bytes per step than that anchor; a model offloaded for inference refuses backward."""
from __future__ import annotations

import functools

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import htp  # noqa: E402
import htp.torch as ht  # noqa: E402
from conftest import build_model  # noqa: E402

MODELS = ["llama", "opt"]
FRACTIONS = [0.3, 0.5]
DTYPES = [torch.float32, torch.bfloat16]
STEPS = 3


def paged_bytes(model, keep):
    kept = {id(p) for name, m in model.named_modules() if name in keep for p in m.parameters()}
    unique = {id(p): p for p in model.parameters() if id(p) not in kept}
    return sum(p.numel() * p.element_size() for p in unique.values())


def batch(batch=2, length=12):
    g = torch.Generator().manual_seed(7)
    return torch.randint(0, 512, (batch, length), generator=g)


def offload(model, keep, fraction, **config):
    budget = max(int(paged_bytes(model, keep) * fraction), 64 << 10)
    return ht.offload(model, hbm_budget=budget, keep=keep, device=htp.make_device("sim"),
                      eviction="belady", training=True, **config)


class CountingSaveOnCpu(torch.autograd.graph.save_on_cpu):
    """torch's save_on_cpu, counting the bytes it copies to the CPU and back (on sim the tensors
    are CPU tensors already, so these are the bytes it would move on a GPU). `param_bytes`: of
    those, the bytes of parameters (leaf tensors that need a gradient, and views of them)."""

    def __init__(self):
        super().__init__()
        self.bytes = self.param_bytes = 0
        pack, unpack = self.pack_hook, self.unpack_hook

        def counted_pack(t):
            n = t.numel() * t.element_size()
            self.bytes += n
            base = t._base if t._base is not None else t
            if base.is_leaf and base.requires_grad:
                self.param_bytes += 2 * n
            return pack(t)

        def counted_unpack(packed):
            self.bytes += packed[1].numel() * packed[1].element_size()
            return unpack(packed)
        self.pack_hook, self.unpack_hook = counted_pack, counted_unpack


def train(model, steps, context=lambda: None, after_first=lambda: None):
    """`steps` AdamW steps on one batch: each step's loss and gradients, and the parameters."""
    ids = batch()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    trace = []
    for step in range(steps):
        ctx = context()
        if ctx is None:
            out = model(ids, labels=ids)
        else:
            with ctx:
                out = model(ids, labels=ids)
        out.loss.backward()
        grads = {n: p.grad.detach().clone() for n, p in model.named_parameters()
                 if p.grad is not None}
        opt.step()
        opt.zero_grad()
        trace.append((out.loss.detach(), grads))
        if step == 0:
            after_first()
    return trace, {n: p.detach().clone() for n, p in model.named_parameters()}


@functools.lru_cache(maxsize=None)
def resident(kind, dtype):
    model, _ = build_model(kind, dtype)
    return train(model, STEPS)


def check_same(got, want, what):
    (trace, params), (want_trace, want_params) = got, want
    for step, ((loss, grads), (want_loss, want_grads)) in enumerate(zip(trace, want_trace)):
        assert torch.equal(loss, want_loss), f"{what}: step {step + 1}: loss"
        assert grads.keys() == want_grads.keys(), f"{what}: step {step + 1}: which have grads"
        for n, g in want_grads.items():
            assert grads[n].dtype == g.dtype and grads[n].device == g.device, (what, n)
            assert torch.equal(grads[n], g), f"{what}: step {step + 1}: grad of {n}"
    assert params.keys() == want_params.keys()
    for n, p in want_params.items():
        assert torch.equal(params[n], p), f"{what}: {n} after the AdamW steps"


def link_bytes(m):
    return m["page_in_bytes"] + m["write_back_bytes"]


@pytest.mark.parametrize("kind", MODELS)
@pytest.mark.parametrize("fraction", FRACTIONS)
@pytest.mark.parametrize("dtype", DTYPES, ids=["fp32", "bf16"])
def test_training_matches_the_resident_model_and_moves_fewer_bytes_than_save_on_cpu(
        kind, fraction, dtype):
    want = resident(kind, dtype)

    # htp: weights paged for backward, activations paged through the same pager.
    model, keep = build_model(kind, dtype)
    handle = offload(model, keep, fraction)
    acts = ht.offload_activations(handle)
    got = train(model, STEPS, lambda: acts,
                lambda: (handle.pager.reset_metrics(), acts.store.reset_counters()))
    check_same(got, want, f"htp {kind} {fraction} {dtype}")
    m = handle.metrics()
    htp_bytes = (link_bytes(m) + acts.store.host_write_bytes) / (STEPS - 1)
    assert m["prefetches"] > 0, "backward must prefetch"
    handle.remove()

    # The anchor: the same offload, activations through torch's save_on_cpu.
    model, keep = build_model(kind, dtype)
    handle = offload(model, keep, fraction)
    counters = []

    def anchor():
        counters.append(CountingSaveOnCpu())
        return counters[-1]
    got = train(model, STEPS, anchor, handle.pager.reset_metrics)
    check_same(got, want, f"save_on_cpu {kind} {fraction} {dtype}")
    weights = link_bytes(handle.metrics()) / (STEPS - 1)
    saved = sum(c.bytes for c in counters[1:]) / (STEPS - 1)
    params = sum(c.param_bytes for c in counters[1:]) / (STEPS - 1)
    handle.remove()

    anchor_bytes = weights + saved
    print(f"{kind} {fraction:.0%} {str(dtype)[6:]}: htp {htp_bytes / 1e6:.2f} MB/step "
          f"(host writes {acts.store.host_write_bytes / (STEPS - 1) / 1e6:.2f}); save_on_cpu "
          f"{anchor_bytes / 1e6:.2f} MB/step (weights {weights / 1e6:.2f}, saved tensors "
          f"{saved / 1e6:.2f}, of which resident parameters {params / 1e6:.2f})")
    assert htp_bytes < anchor_bytes - params, "htp must move fewer bytes than save_on_cpu"


def test_backward_of_a_model_offloaded_for_inference_is_refused():
    model, keep = build_model("llama", torch.float32)
    budget = paged_bytes(model, keep) // 3
    handle = ht.offload(model, hbm_budget=budget, keep=keep, device=htp.make_device("sim"))
    out = model(batch(), labels=batch())
    with pytest.raises(ht.OffloadedError, match="training=True"):
        out.loss.backward()
    handle.remove()


def test_training_keeps_the_guards_and_remove_gives_the_trained_weights():
    model, keep = build_model("llama", torch.float32)
    handle = offload(model, keep, 0.3)
    trace, params = train(model, 1)
    sd = model.state_dict()
    for n, p in params.items():
        assert torch.equal(sd[n], p), n  # the true bytes, after the step
    with pytest.raises(ht.OffloadedError):
        model.half()
    model.to("cpu")  # changes nothing (the execution device on sim)
    with pytest.raises(ht.OffloadedError):
        model.load_state_dict(sd)
    handle.remove()
    for n, p in model.named_parameters():
        assert torch.equal(p, params[n]) and type(p) is torch.nn.Parameter, n
    with pytest.raises(htp.InvalidArgumentError, match="training=True"):
        ht.offload(model, hbm_budget="1MiB", keep=keep, device=htp.make_device("sim"),
                   compress=True, training=True)


def test_an_update_between_forward_and_backward_is_refused():
    model, keep = build_model("llama", torch.float32)
    handle = offload(model, keep, 0.5)
    out = model(batch(), labels=batch())
    with torch.no_grad():
        model.model.layers[3].mlp.down_proj.weight.mul_(2)
    with pytest.raises(ht.OffloadedError, match="modified in place"):
        out.loss.backward()
    handle.remove()


def test_offload_activations_alone_gives_the_resident_gradients():
    """A resident model with its activations paged through a bare pager that must evict."""
    want = train(build_model("opt", torch.float32)[0], 2)
    model, _ = build_model("opt", torch.float32)
    pager = htp.Pager(htp.make_device("sim"), hbm_budget="256KiB", slab_bytes="128KiB",
                      page_bytes=4096)
    acts = ht.offload_activations(pager)
    check_same(train(model, 2, lambda: acts), want, "activations alone")
    assert acts.store.packed_bytes > 0 and pager.metrics()["write_back_bytes"] > 0
