"""htp.torch.offload(static=True) on sim: fixed parameter addresses for the life of the offload,
identical logits eager and under torch.compile (inductor on the CPU, fullgraph), the true bytes
from state_dict, conversions refused, a clean remove, and the typed errors."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import htp  # noqa: E402
import htp.torch as ht  # noqa: E402
from conftest import build_model  # noqa: E402


def prompt(batch=2, length=12):
    g = torch.Generator().manual_seed(7)
    return torch.randint(0, 512, (batch, length), generator=g)


def paged_bytes(model, keep):
    kept = {id(p) for name, m in model.named_modules() if name in keep for p in m.parameters()}
    unique = {id(p): p for p in model.parameters() if id(p) not in kept}
    return sum(p.numel() * p.element_size() for p in unique.values())


def static(model, keep, fraction, ids, **options):
    budget = int(paged_bytes(model, keep) * fraction)
    return ht.offload(model, hbm_budget=budget, keep=keep, device=htp.make_device("sim"),
                      static=True, example_inputs=(ids,), link_bytes_per_second=8e9, **options)


@pytest.mark.parametrize("kind", ["llama", "opt", "gpt2"])
def test_addresses_fixed_and_logits_identical_over_ten_steps(kind, clone):
    model, keep = build_model(kind, torch.float32)
    ref = clone(model)
    ids = prompt()
    with torch.no_grad():
        want = ref(ids).logits
    handle = static(model, keep, 0.3, ids)
    assert handle.plan["streamed"], "at 30% the plan must stream some parameters"
    addresses = {n: p.data_ptr() for n, p in model.named_parameters()}
    with torch.no_grad():
        for _ in range(10):
            assert torch.equal(model(ids).logits, want)
            assert {n: p.data_ptr() for n, p in model.named_parameters()} == addresses
    handle.remove()
    with torch.no_grad():
        assert torch.equal(model(ids).logits, want), "remove() gives the weights back"


@pytest.mark.parametrize("kind", ["llama", "opt"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_compressed_static_logits_identical(kind, dtype, clone):
    model, keep = build_model(kind, dtype)
    ref = clone(model)
    ids = prompt()
    with torch.no_grad():
        want = ref(ids).logits
    handle = static(model, keep, 0.3, ids, compress=True)
    assert handle.plan["streamed"]
    with torch.no_grad():
        for _ in range(3):
            assert torch.equal(model(ids).logits, want)
    assert handle.step.take_decode_failures() == []
    handle.remove()


@pytest.mark.parametrize("kind", ["llama", "opt"])
@pytest.mark.parametrize("fraction", [0.3, 0.5])
def test_torch_compile_fullgraph_matches_the_compiled_resident_model(kind, fraction, clone):
    # Both sides compiled by inductor: the same kernels over the same bytes, so the logits are
    # equal bit for bit (fp32; the ops htp adds sit between modules, where no fusion crosses).
    # The resident model is compiled first on purpose: dynamo must not reuse its graph (it does
    # not guard on submodule hooks; offload drops the cached graphs of the model's classes).
    torch._dynamo.reset()
    model, keep = build_model(kind, torch.float32)
    ref = clone(model)
    ids = prompt()
    with torch.no_grad():
        want = torch.compile(ref, fullgraph=True)(ids).logits
    handle = static(model, keep, fraction, ids)
    addresses = {n: p.data_ptr() for n, p in model.named_parameters()}
    compiled = torch.compile(model, fullgraph=True)
    with torch.no_grad():
        for _ in range(3):
            assert torch.equal(compiled(ids).logits, want)
    assert {n: p.data_ptr() for n, p in model.named_parameters()} == addresses
    handle.remove()
    with torch.no_grad():  # compiled again after remove(): no graph of the offload is reused
        assert torch.equal(torch.compile(model, fullgraph=True)(ids).logits, want)
    torch._dynamo.reset()


def test_state_dict_gives_the_true_bytes_and_conversions_are_refused(clone):
    model, keep = build_model("llama", torch.float32)
    ref = clone(model)
    ids = prompt()
    handle = static(model, keep, 0.3, ids)
    with torch.no_grad():
        model(ids)  # the ring now holds the last positions' tensors
    got, want = model.state_dict(), ref.state_dict()
    assert got.keys() == want.keys()
    for k in want:
        assert torch.equal(got[k], want[k]), k
    with pytest.raises(ht.OffloadedError, match="static=True"):
        model.to(torch.float64)
    name = handle.plan["streamed"][0]
    assert torch.equal(handle.host_copy(name), dict(ref.named_parameters())[name])
    handle.remove()
    handle.remove()  # a second call does nothing
    model.to(torch.float64)  # and conversions work again


def test_backward_and_optimizer_steps_are_refused():
    model, keep = build_model("llama", torch.float32)
    ids = prompt()
    handle = static(model, keep, 0.3, ids)
    out = model(ids).logits  # autograd on: the forward runs, its backward is refused
    with pytest.raises(ht.OffloadedError, match="backward"):
        out.sum().backward()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(ht.OffloadedError):
        opt.step()
    handle.remove()
    opt.step()  # after remove() the parameters are the model's own again


def test_the_ops_are_torch_library_custom_ops():
    assert hasattr(torch.ops.htp, "static_enter") and hasattr(torch.ops.htp, "static_exit")
    schema = str(torch.ops.htp.static_enter.default._schema)
    assert "Tensor(a0!) token" in schema and "Tensor(a1!) x" in schema, schema


def test_typed_errors(clone):
    model, keep = build_model("llama", torch.float32)
    sim = htp.make_device("sim")
    with pytest.raises(htp.InvalidArgumentError, match="example_inputs"):
        ht.offload(model, hbm_budget="1MiB", device=sim, static=True)
    with pytest.raises(htp.InvalidArgumentError, match="copy=False"):
        ht.offload(model, hbm_budget="1MiB", device=sim, static=True, copy=False,
                   example_inputs=(prompt(),))
    with pytest.raises(htp.OutOfMemoryError, match="raise the budget"):
        ht.offload(model, hbm_budget=4096, keep=keep, device=sim, static=True,
                   example_inputs=(prompt(),))
    with torch.no_grad():  # nothing was left behind by the failures
        assert torch.equal(model(prompt()).logits, clone(model)(prompt()).logits)


def test_a_forward_that_raised_does_not_break_the_next(clone):
    model, keep = build_model("llama", torch.float32)
    ref = clone(model)
    ids = prompt()
    with torch.no_grad():
        want = ref(ids).logits
    handle = static(model, keep, 0.3, ids)
    mlp = model.model.layers[2].mlp
    forward = mlp.forward

    def boom(*args, **kwargs):
        raise RuntimeError("a kernel failed")
    mlp.forward = boom
    with torch.no_grad(), pytest.raises(RuntimeError, match="kernel failed"):
        model(ids)
    mlp.forward = forward
    with torch.no_grad():  # the step starts over: what a step starts with is loaded again
        assert torch.equal(model(ids).logits, want)
        assert torch.equal(model(ids).logits, want)
    handle.remove()


def test_a_module_with_parameters_inside_another_is_named():
    class Outer(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.scale = torch.nn.Parameter(torch.ones(16))
            self.inner = torch.nn.Linear(16, 16)

        def forward(self, x):
            return self.inner(x) * self.scale

    model = torch.nn.Sequential(Outer(), torch.nn.Linear(16, 16))
    x = torch.randn(2, 16)
    with pytest.raises(htp.InvalidArgumentError, match="runs inside '0'"):
        ht.offload(model, hbm_budget=4096, device=htp.make_device("sim"), static=True,
                   example_inputs=(x,))
    with torch.no_grad():  # nothing was left behind
        model(x)
