"""offload(training=True) refuses, before anything is registered, a budget whose backward could not
hold two modules' weights at once (htp._training keeps the unit running and the one before it)."""
import pytest

torch = pytest.importorskip("torch")
import htp  # noqa: E402
import htp.torch as ht  # noqa: E402


def model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(1024, 1024), torch.nn.ReLU(),
                               torch.nn.Linear(1024, 1024), torch.nn.ReLU(),
                               torch.nn.Linear(1024, 512))


UNIT = 1024 * 1024 * 4 + 1024 * 4  # one 1024 x 1024 float32 Linear with its bias


def test_a_budget_under_two_modules_is_refused_for_training_only():
    budget = UNIT * 3 // 2  # 3/4 of it holds one module, not two
    m = model()
    with pytest.raises(htp.InvalidArgumentError) as e:
        ht.offload(m, budget, device=htp.make_device("sim"), training=True)
    what = str(e.value)
    assert "two modules" in what and "'0'" in what and "'2'" in what, what
    assert f"at least {(2 * UNIT) * 4 // 3 + 1}" in what, what
    assert all(p.device.type == "cpu" for p in m.parameters()), "nothing was offloaded"
    handle = ht.offload(m, budget, device=htp.make_device("sim"))  # inference holds one
    handle.remove()


def test_the_budget_the_message_names_is_enough_to_train():
    ref, m = model(), model()
    x = torch.randn(4, 1024)
    want = ref(x).sum()
    want.backward()
    handle = ht.offload(m, (2 * UNIT) * 4 // 3 + 1, device=htp.make_device("sim"), training=True)
    try:
        got = m(x).sum()
        got.backward()
        assert torch.equal(got.detach(), want.detach())
        for a, b in zip(ref.parameters(), m.parameters()):
            assert torch.equal(a.grad, b.grad)
    finally:
        handle.remove()
