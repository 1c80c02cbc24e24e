"""Training through htp.torch on sim: offload(training=True) with offload_activations gives the
resident model's gradients and AdamW steps bit for bit (Llama and OPT, 30% and 50% of the paged
weights, fp32 and bf16), as does the save_on_cpu anchor on the same offload, and htp moves fewer
bytes per step than that anchor; activation slots are dead after each backward (discarded, never
written back where there is room) and survive a second backward with retain_graph=True; a model
offloaded for inference refuses backward."""
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


def train(model, steps, context=lambda: None, after_first=lambda: None, forward=None):
    """`steps` AdamW steps on one batch: each step's loss and gradients, and the parameters.
    `forward(model)` runs the model on its batch (default: a causal LM on batch())."""
    if forward is None:
        ids = batch()

        def forward(m):
            return m(ids, labels=ids)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    trace = []
    for step in range(steps):
        ctx = context()
        if ctx is None:
            out = forward(model)
        else:
            with ctx:
                out = forward(model)
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
    htp_bytes = link_bytes(m) / (STEPS - 1)  # activation write-backs are part of write_back_bytes
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


def slot_states(pager, acts):
    return [pager.info(s.tensor) for s in acts.store._slots]


def test_after_each_backward_every_activation_slot_is_dead_and_none_was_written_back():
    """A bare pager with room for every activation: the slots are discarded as autograd drops
    them, so nothing crosses the link in either direction, step after step."""
    want = train(build_model("opt", torch.float32)[0], 2)
    model, _ = build_model("opt", torch.float32)
    pager = htp.Pager(htp.make_device("sim"), hbm_budget="8MiB", slab_bytes="1MiB",
                      page_bytes=4096, checked=True)
    acts = ht.offload_activations(pager)
    states = []
    check_same(train(model, 2, lambda: acts, lambda: states.append(slot_states(pager, acts))),
               want, "activations with room")
    states.append(slot_states(pager, acts))
    for step, infos in enumerate(states):
        assert infos, "no activation was packed"
        for info in infos:
            assert info["dead"] and info["where"] == "host", (step, info)
    m = pager.metrics()
    assert m["activation_write_back_bytes"] == 0 and m["write_back_bytes"] == 0
    assert m["page_in_bytes"] == 0  # every pack was a fresh acquire
    assert m["activation_fresh_acquires"] == m["activation_discards"] > 0
    assert m["activation_fresh_acquires"] == 2 * len(states[0])  # the slots reused in step 2
    assert acts.store.host_write_bytes == 0


def test_retain_graph_unpacks_twice_and_gives_equal_gradients():
    """backward(retain_graph=True) then backward again: each saved activation is unpacked twice
    (paged in again where the pager evicted it) and both give the resident model's gradients."""
    def grads_of_two_backwards(model, context):
        ids = batch()
        with context:
            loss = model(ids, labels=ids).loss
        out = []
        for retain in (True, False):
            loss.backward(retain_graph=retain)
            out.append({n: p.grad.detach().clone() for n, p in model.named_parameters()
                        if p.grad is not None})
            model.zero_grad()
        return out

    import contextlib
    want = grads_of_two_backwards(build_model("opt", torch.float32)[0], contextlib.nullcontext())
    model, _ = build_model("opt", torch.float32)
    pager = htp.Pager(htp.make_device("sim"), hbm_budget="256KiB", slab_bytes="128KiB",
                      page_bytes=4096, checked=True)
    acts = ht.offload_activations(pager)
    got = grads_of_two_backwards(model, acts)
    for k in range(2):
        assert got[k].keys() == want[k].keys()
        for n, g in want[k].items():
            assert torch.equal(got[k][n], g), f"backward {k + 1}: grad of {n}"
    for n in want[0]:
        assert torch.equal(got[0][n], got[1][n]), n
    m = pager.metrics()
    assert m["write_back_bytes"] > 0, "the budget must make the pager evict live activations"
    assert all(i["dead"] for i in slot_states(pager, acts)), "dropped after the second backward"


def test_pager_discard_kills_an_unpinned_activation_and_refuses_what_it_cannot():
    """Pager.discard, the binding ActivationStore frees its slots with: a live activation's HBM
    freed and never written back, its next acquire fresh; typed errors for a pinned one (nothing
    changed) and a weight."""
    pager = htp.Pager(htp.make_device("sim"), hbm_budget="1MiB", host_budget="1MiB",
                      slab_bytes="256KiB", page_bytes=4096, checked=True)
    a = pager.register("act", torch.zeros(1024, dtype=torch.float32), kind="activation")
    torch.from_dlpack(pager.acquire(a)).copy_(torch.arange(1024, dtype=torch.float32))
    with pytest.raises(htp.InvalidArgumentError, match="release it first"):
        pager.discard(a)
    assert pager.info(a)["pins"] == 1
    pager.release(a, dirty=True)
    assert not pager.info(a)["dead"] and pager.metrics()["hbm"]["used_bytes"] > 0
    pager.discard(a)
    info, m = pager.info(a), pager.metrics()
    assert info["dead"] and info["where"] == "host" and m["hbm"]["used_bytes"] == 0
    assert m["activation_discards"] == 1
    pager.evict(a)  # dead: nothing to write back
    pager.acquire(a)
    pager.release(a)
    m = pager.metrics()
    assert m["write_back_bytes"] == 0 and m["page_in_bytes"] == 0
    assert m["activation_fresh_acquires"] == 2
    w = pager.register("w", torch.ones(16))
    with pytest.raises(htp.InvalidArgumentError, match="activation"):
        pager.discard(w)
