"""Models no one here wrote, paged through htp.torch on sim: identical logits and tokens at
30%, 50% and 100% of the paged weights, zero copy, faults no worse than demand paging, a clean
remove, a corrupted host page that is seen, and the accelerate path."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import htp  # noqa: E402
import htp.torch as ht  # noqa: E402
from conftest import build_model, check_compressed_paging  # noqa: E402
from yardsticks import belady_page_in_bytes  # noqa: E402

MODELS = ["llama", "mixtral", "opt"]
FRACTIONS = [0.3, 0.5, 1.0]
DTYPES = [torch.float32, torch.bfloat16]


def paged_bytes(model, keep):
    kept = {id(p) for name, m in model.named_modules() if name in keep for p in m.parameters()}
    unique = {id(p): p for p in model.parameters() if id(p) not in kept}
    return sum(p.numel() * p.element_size() for p in unique.values())


def prompt(batch=2, length=12):
    g = torch.Generator().manual_seed(7)
    return torch.randint(0, 512, (batch, length), generator=g)


def offload(model, keep, fraction, **config):
    budget = max(int(paged_bytes(model, keep) * fraction), 64 << 10)
    return ht.offload(model, hbm_budget=budget, keep=keep, device=htp.make_device("sim"),
                      eviction="belady", **config)


@pytest.mark.parametrize("kind", MODELS)
@pytest.mark.parametrize("fraction", FRACTIONS)
@pytest.mark.parametrize("dtype", DTYPES, ids=["fp32", "bf16"])
def test_logits_and_tokens_match_the_resident_model(kind, fraction, dtype, clone):
    model, keep = build_model(kind, dtype)
    ref = clone(model)
    ids = prompt()
    with torch.no_grad():
        want = ref(ids).logits
        want_tokens = ref.generate(ids, max_new_tokens=32, do_sample=False, pad_token_id=0)
    handle = offload(model, keep, fraction)
    with torch.no_grad():
        assert torch.equal(model(ids).logits, want)
        assert torch.equal(model(ids).logits, want)  # again, with the schedule set
        tokens = model.generate(ids, max_new_tokens=32, do_sample=False, pad_token_id=0)
    assert torch.equal(tokens, want_tokens)
    m = handle.metrics()
    assert m["faults"] > 0 and m["acquires"] > 0
    if fraction < 0.5:
        assert m["evictions"] > 0, "at 30% of the weights the pager must evict"
    handle.remove()


@pytest.mark.parametrize("kind", MODELS)
def test_every_parameter_points_into_its_acquired_span(kind):
    model, keep = build_model(kind, torch.float32)
    handle = offload(model, keep, 0.3)
    checked = []

    def check(module, args):
        for name, p in module.named_parameters(recurse=False):
            span = handle.span_of(p)
            if span is None:  # kept resident
                continue
            ptr, nbytes = span
            assert ptr <= p.data_ptr() and p.data_ptr() + p.numel() * p.element_size() <= ptr + nbytes
            checked.append(name)

    hooks = [m.register_forward_pre_hook(check) for m in model.modules()]
    with torch.no_grad():
        model(prompt())
    for h in hooks:
        h.remove()
    assert len(checked) >= len(handle.units)
    handle.remove()


def faults_from_step_two(kind, lookahead, steps=4):
    model, keep = build_model(kind, torch.float32)
    handle = offload(model, keep, 0.3, prefetch_lookahead=lookahead)
    ids = prompt(batch=1)
    with torch.no_grad():
        model(ids)  # step 1 records the schedule
        handle.pager.synchronize()
        handle.pager.reset_metrics()
        for _ in range(steps):
            model(ids)
    handle.pager.synchronize()
    m = handle.metrics()
    schedule, budget = list(handle.schedule), handle.pager.config.hbm_budget_bytes
    handle.remove()
    return m, schedule, budget


@pytest.mark.parametrize("kind", MODELS)
def test_prefetch_never_faults_more_than_demand_paging(kind):
    steps = 4
    with_prefetch, schedule, budget = faults_from_step_two(kind, 8, steps)
    demand, _, _ = faults_from_step_two(kind, 0, steps)
    assert with_prefetch["faults"] <= demand["faults"]
    assert demand["faults"] > 0
    minimum = belady_page_in_bytes(schedule, budget, steps)
    ratio = with_prefetch["page_in_bytes"] / max(minimum, 1)
    print(f"{kind}: {with_prefetch['page_in_bytes'] / steps:.0f} B paged per step, "
          f"{ratio:.2f}x Belady's minimum; faults per step {with_prefetch['faults'] / steps:.1f} "
          f"(demand paging {demand['faults'] / steps:.1f}); page-ins {with_prefetch['page_ins']} "
          f"(demand {demand['page_ins']}, wasted prefetches {with_prefetch['wasted_prefetches']})")
    assert with_prefetch["prefetches"] > 0


@pytest.mark.parametrize("copy", [True, False])
def test_remove_restores_the_model_and_frees_pinned_memory(copy, clone):
    model, keep = build_model("llama", torch.float32)
    ref = clone(model)
    params_before = [id(p) for p in model.parameters()]
    dev = htp.make_device("sim")
    handle = ht.offload(model, hbm_budget=paged_bytes(model, keep) // 3, keep=keep, device=dev,
                        copy=copy)
    # htp's own pinned memory: the host tier (copy=True) or only the engine's small buffers.
    assert (dev.sim_pinned_bytes >= paged_bytes(model, keep)) == copy
    with torch.no_grad():
        model(prompt())
    handle.remove()
    assert [id(p) for p in model.parameters()] == params_before
    for (n, a), b in zip(model.state_dict().items(), ref.state_dict().values()):
        assert torch.equal(a, b), n
        assert a.device.type == "cpu" and not a.is_pinned()
    assert dev.sim_pinned_bytes == 0
    handle.remove()  # twice is a no-op


def test_a_corrupted_host_page_changes_the_logits(clone):
    model, keep = build_model("llama", torch.float32)
    ref = clone(model)
    ids = prompt()
    handle = offload(model, keep, 0.3, copy=False)
    with torch.no_grad():
        want = ref(ids).logits
        assert torch.equal(model(ids).logits, want)
        handle.pager.synchronize()
        name = "model.layers.2.mlp.down_proj.weight"
        handle.host_copies[name].view(-1)[:1024] += 1.0  # the host copy htp pages in from
        for unit in handle.units:
            for t in unit.tensors:
                if handle.pager.info(t)["where"] == "resident":
                    handle.pager.evict(t)
        assert not torch.equal(model(ids).logits, want)
    handle.remove()


@pytest.mark.parametrize("kind", MODELS)
def test_accelerate_cpu_offload_fetches_through_htp(kind, clone):
    accelerate = pytest.importorskip("accelerate")
    model, _ = build_model(kind, torch.float32)
    ref = clone(model)
    ids = prompt()
    budget = max(paged_bytes(model, []) // 3, 64 << 10)
    weights = ht.accelerate_weights(model, hbm_budget=budget, device=htp.make_device("sim"))
    accelerate.cpu_offload(model, execution_device=torch.device("cpu"), state_dict=weights)
    with torch.no_grad():
        want = ref(ids).logits
        assert torch.equal(model(ids).logits, want)
        assert torch.equal(model(ids).logits, want)
    m = weights.pager.metrics()
    assert m["acquires"] >= 2 * len(weights) - 2 and m["faults"] > 0 and m["evictions"] > 0
    assert all(i["pins"] == 0 for i in (weights.pager.info(t) for t in set(weights._tensors.values())))


def test_offload_refuses_a_budget_no_unit_fits_and_leaves_the_model_alone(clone):
    model, keep = build_model("mixtral", torch.float32)
    ref = clone(model)
    with pytest.raises(htp.InvalidArgumentError, match="needs .* bytes at once"):
        ht.offload(model, hbm_budget=256 << 10, keep=keep, device=htp.make_device("sim"))
    for a, b in zip(model.state_dict().values(), ref.state_dict().values()):
        assert torch.equal(a, b)
    with pytest.raises(htp.InvalidArgumentError, match="no parameters outside"):
        ht.offload(model, hbm_budget="1MiB", keep=["*"], device=htp.make_device("sim"))


@pytest.mark.parametrize("kind", ["llama", "mixtral"])
def test_compressed_offload_gives_identical_logits_with_fewer_bytes_on_the_link(kind, clone):
    model, keep = build_model(kind, torch.bfloat16)
    ref = clone(model)
    ids = prompt()
    with torch.no_grad():
        want = ref(ids).logits
    handle = offload(model, keep, 0.3, compress=True)
    with torch.no_grad():
        for _ in range(2):
            assert torch.equal(model(ids).logits, want)
    m = handle.metrics()
    check_compressed_paging(m)
    print(f"{kind} bf16 compressed: {m['compressed_wire_bytes'] / m['compressed_bytes']:.3f} of the "
          f"bytes on the wire ({m['compressed_tensors']} tensors)")
    handle.remove()
    with pytest.raises(htp.InvalidArgumentError, match="copy=True"):
        ht.offload(model, hbm_budget="1MiB", device=htp.make_device("sim"), copy=False, compress=True)
