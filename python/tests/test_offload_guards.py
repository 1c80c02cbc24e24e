"""Around the paging, nothing silent: an offloaded model gives its true bytes (state_dict,
save_pretrained) or a typed error (reads, conversions, load_state_dict, backward, optimizer steps),
inputs keep their types, and remove() works on tied weights. On sim, on architectures the
paging tests do not use: GPT-2 (tied embeddings), T5 (encoder-decoder, tied), BART."""
from __future__ import annotations

import collections
import copy
import dataclasses
import gc
import weakref

import pytest

torch = pytest.importorskip("torch")
tf = pytest.importorskip("transformers")

import htp  # noqa: E402
import htp.torch as ht  # noqa: E402
from conftest import build_model  # noqa: E402

TIED = ["gpt2", "t5"]           # one decoder-only and one encoder-decoder, both tied
ARCHS = ["gpt2", "t5", "bart"]


def paged_bytes(model, keep):
    kept = {id(p) for name, m in model.named_modules() if name in keep for p in m.parameters()}
    unique = {id(p): p for p in model.parameters() if id(p) not in kept}
    return sum(p.numel() * p.element_size() for p in unique.values())


def offload(model, keep, fraction=0.3, **config):
    budget = max(int(paged_bytes(model, keep) * fraction), 256 << 10)
    return ht.offload(model, hbm_budget=budget, keep=keep, device=htp.make_device("sim"),
                      eviction="belady", **config)


def ids(batch=2, length=10, seed=7):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(3, 512, (batch, length), generator=g)


def run(model, kind, x):
    """Logits of one forward (an encoder-decoder gets a short decoder input)."""
    if kind in ("t5", "bart"):
        return model(input_ids=x, decoder_input_ids=x[:, :4]).logits
    return model(x).logits


# ---- 1. remove() on tied weights ----------------------------------------------------------------
@pytest.mark.parametrize("kind", TIED)
def test_remove_unregisters_a_tied_tensor_once_and_frees_the_pager_at_once(kind):
    model, keep = build_model(kind, torch.float32)
    ref = copy.deepcopy(model)
    tied = model.get_output_embeddings().weight is model.get_input_embeddings().weight
    assert tied, "the model must tie its head to its embedding for this test"
    handle = offload(model, keep)
    with torch.no_grad():
        run(model, kind, ids())
    pager = weakref.ref(handle.pager)
    dev = handle.pager.device
    handle.remove()
    assert pager() is None, "the pager (and its pinned tier) must be gone when remove() returns"
    assert dev.sim_pinned_bytes == 0
    handle.remove()  # a second remove() is a no-op
    assert model.get_output_embeddings().weight is model.get_input_embeddings().weight
    for (n, a), b in zip(model.state_dict().items(), ref.state_dict().values()):
        assert torch.equal(a, b), n
    with torch.no_grad():
        assert torch.equal(run(model, kind, ids()), run(ref, kind, ids()))


# ---- 2. inputs keep their types -----------------------------------------------------------------
Pair = collections.namedtuple("Pair", "a b")


@dataclasses.dataclass(frozen=True)
class Frozen:
    x: torch.Tensor
    label: str = "kept"


def test_moved_inputs_keep_their_container_types():
    from transformers.modeling_outputs import BaseModelOutput
    from transformers.tokenization_utils_base import BatchEncoding

    t = torch.ones(2, 3)
    meta = torch.device("meta")
    dd = collections.defaultdict(list, {"t": t})
    obj = {"out": BaseModelOutput(last_hidden_state=t), "pair": Pair(t, [t, 1]),
           "frozen": Frozen(t), "batch": BatchEncoding({"input_ids": t}), "dd": dd,
           "od": collections.OrderedDict(t=t), "plain": (t, "x", None),
           "dq": collections.deque([t], maxlen=3)}
    moved = ht._move(obj, meta)
    assert type(moved["out"]) is BaseModelOutput and moved["out"].last_hidden_state.is_meta
    assert moved["out"][0].is_meta  # ModelOutput's tuple view agrees with its field
    assert type(moved["pair"]) is Pair and moved["pair"].a.is_meta and moved["pair"].b[0].is_meta
    assert type(moved["frozen"]) is Frozen and moved["frozen"].x.is_meta
    assert moved["frozen"].label == "kept"
    assert type(moved["batch"]) is BatchEncoding and moved["batch"]["input_ids"].is_meta
    assert type(moved["dd"]) is collections.defaultdict and moved["dd"].default_factory is list
    assert type(moved["od"]) is collections.OrderedDict and moved["plain"][1:] == ("x", None)
    assert type(moved["dq"]) is collections.deque and moved["dq"].maxlen == 3 and moved["dq"][0].is_meta
    assert not t.is_meta and obj["pair"].a is t, "the caller's objects are not changed"
    # Nothing to move: the very same objects come back (a KV cache keeps its identity).
    assert ht._move(obj, torch.device("cpu")) is obj


@pytest.mark.parametrize("kind", ["t5", "bart"])
def test_encoder_decoder_generate_and_encoder_outputs_match_the_resident_model(kind):
    from transformers.modeling_outputs import BaseModelOutput

    model, keep = build_model(kind, torch.float32)
    ref = copy.deepcopy(model)
    x = ids()
    with torch.no_grad():
        want = ref.generate(x, max_new_tokens=12, do_sample=False)
        enc = ref.get_encoder()(input_ids=x)
        want_logits = ref(encoder_outputs=enc, decoder_input_ids=x[:, :4]).logits
    handle = offload(model, keep)
    with torch.no_grad():
        assert torch.equal(model.generate(x, max_new_tokens=12, do_sample=False), want)
        given = BaseModelOutput(last_hidden_state=enc.last_hidden_state.clone())
        assert torch.equal(model(encoder_outputs=given, decoder_input_ids=x[:, :4]).logits,
                           want_logits)
    assert handle.metrics()["evictions"] > 0
    handle.remove()


# ---- 3. nothing silent while offloaded ----------------------------------------------------------
@pytest.mark.parametrize("kind", ARCHS)
@pytest.mark.parametrize("compress", [False, True], ids=["raw", "compressed"])
def test_state_dict_gives_the_true_bytes_with_ties_kept(kind, compress):
    dtype = torch.bfloat16 if compress else torch.float32
    model, keep = build_model(kind, dtype)
    want = {k: v.clone() for k, v in model.state_dict().items()}
    handle = offload(model, keep, compress=compress)
    with torch.no_grad():
        run(model, kind, ids())
    got = model.state_dict()
    assert list(got) == list(want)
    for k in want:
        assert torch.equal(got[k], want[k]), k
        assert not isinstance(got[k], ht.OffloadedParameter), k
    if kind in TIED:  # tied entries are one tensor, as in the resident model's state dict
        head = model.get_output_embeddings()
        names = [k for k in got if k.endswith("weight") and got[k] is got.get(
            next(n for n, m in model.named_modules() if m is head) + ".weight")]
        assert len(names) >= 2, names
    kept = model.state_dict(keep_vars=True)
    params = {n for n, _ in model.named_parameters(remove_duplicate=False)}
    for k, v in kept.items():
        assert torch.equal(v, want[k]) and isinstance(v, torch.nn.Parameter) == (k in params), k
    handle.remove()


@pytest.mark.parametrize("kind", TIED)
def test_save_pretrained_writes_the_true_weights(kind, tmp_path):
    model, keep = build_model(kind, torch.float32)
    ref = copy.deepcopy(model)
    handle = offload(model, keep)
    with torch.no_grad():
        run(model, kind, ids())
    model.save_pretrained(tmp_path)
    loaded = type(ref).from_pretrained(tmp_path).eval()
    for (n, a), b in zip(loaded.state_dict().items(), ref.state_dict().values()):
        assert torch.equal(a, b), n
    torch.save(model.state_dict(), tmp_path / "sd.pt")
    for (n, a), b in zip(torch.load(tmp_path / "sd.pt").items(), ref.state_dict().values()):
        assert torch.equal(a, b), n
    from safetensors.torch import load_model, save_model
    save_model(model, str(tmp_path / "model.safetensors"))  # state_dict() and its tie handling
    fresh = copy.deepcopy(ref)
    for p in fresh.parameters():
        torch.nn.init.zeros_(p)
    load_model(fresh, str(tmp_path / "model.safetensors"))
    for (n, a), b in zip(fresh.state_dict().items(), ref.state_dict().values()):
        assert torch.equal(a, b), n
    with torch.inference_mode():  # still pages after all that, under inference_mode too
        assert torch.equal(run(model, kind, ids()), run(ref, kind, ids()))
    handle.remove()


@pytest.mark.parametrize("kind", TIED)
def test_reading_a_paged_parameter_outside_its_forward_raises(kind):
    model, keep = build_model(kind, torch.float32)
    handle = offload(model, keep)
    name, p = next((n, p) for n, p in model.named_parameters() if p.dim() == 2)
    assert isinstance(p, ht.OffloadedParameter) and p.shape == p.shape and p.numel() > 0
    for read in (lambda: p.sum(), lambda: p.clone(), lambda: p.detach().cpu().numpy(),
                 lambda: p.data, lambda: p + 1, lambda: copy.deepcopy(p),
                 lambda: torch.nn.utils.parameters_to_vector(model.parameters())):
        with pytest.raises(ht.OffloadedError, match="paged by htp"):
            read()
    with pytest.raises(ht.OffloadedError, match="deepcopy of an offloaded model"):
        copy.deepcopy(model)
    with pytest.raises(ht.OffloadedError, match="pickling an offloaded model"):
        torch.save(model, "/dev/null")
    assert sum(q.numel() for q in model.parameters()) > 0  # metadata still answers
    assert next(model.parameters()).dtype == torch.float32
    handle.remove()
    assert not any(isinstance(q, ht.OffloadedParameter) for q in model.parameters())


@pytest.mark.parametrize("kind", TIED)
@pytest.mark.parametrize("convert", ["half", "to_bf16", "double", "to_meta"])
def test_a_dtype_or_device_change_raises_and_changes_nothing(kind, convert):
    model, keep = build_model(kind, torch.float32)
    ref = copy.deepcopy(model)
    handle = offload(model, keep)
    calls = {"half": lambda: model.half(), "to_bf16": lambda: model.to(torch.bfloat16),
             "double": lambda: model.double(), "to_meta": lambda: model.to("meta")}
    with pytest.raises(ht.OffloadedError, match="remove"):
        calls[convert]()
    assert all(b.dtype == torch.float32 for b in model.buffers() if b.is_floating_point())
    model.to("cpu")  # the execution device on sim: nothing to change, allowed
    model.float()
    with torch.no_grad():
        assert torch.equal(run(model, kind, ids()), run(ref, kind, ids()))
    handle.remove()
    assert next(model.parameters()).dtype == torch.float32


@pytest.mark.parametrize("kind", TIED)
def test_backward_through_an_offloaded_module_raises(kind):
    model, keep = build_model(kind, torch.float32)
    ref = copy.deepcopy(model)
    handle = offload(model, keep)
    logits = run(model, kind, ids())  # a forward with autograd on still gives the right answer
    assert torch.equal(logits, run(ref, kind, ids()))
    with pytest.raises(ht.OffloadedError, match="backward through"):
        logits.float().pow(2).mean().backward()
    for p in model.parameters():  # frozen weights (a LoRA-style run) are refused the same way
        p.requires_grad_(False)
    x = model.get_input_embeddings()(ids()) if kind == "gpt2" else None
    if x is not None:
        x.requires_grad_(True)
        out = model(inputs_embeds=x).logits
        with pytest.raises(ht.OffloadedError, match="backward through"):
            out.sum().backward()
    handle.remove()
    # After remove() the model trains: the same gradients as the resident model.
    for p in model.parameters():
        p.requires_grad_(True)
    run(model, kind, ids()).float().pow(2).mean().backward()
    run(ref, kind, ids()).float().pow(2).mean().backward()
    graded = 0
    for (n, a), b in zip(model.named_parameters(), ref.parameters()):
        assert (a.grad is None) == (b.grad is None), n
        if a.grad is not None:
            assert torch.equal(a.grad, b.grad), n
            graded += 1
    assert graded > len(list(ref.parameters())) // 2


@pytest.mark.parametrize("kind", TIED)
def test_an_optimizer_step_over_paged_parameters_raises(kind):
    model, keep = build_model(kind, torch.float32)
    before = torch.optim.AdamW(model.parameters(), lr=1e-3)  # made before the offload
    handle = offload(model, keep)
    after = torch.optim.AdamW(model.parameters(), lr=1e-3)   # over the stand-ins
    for opt in (before, after):
        with pytest.raises(ht.OffloadedError, match="step"):
            opt.step()
    handle.remove()
    before.step()  # after remove() nothing is refused (no gradients: a no-op)


@pytest.mark.parametrize("kind", TIED)
def test_load_state_dict_raises_and_loads_nothing(kind):
    model, keep = build_model(kind, torch.float32)
    ref = copy.deepcopy(model)
    zeros = {k: torch.zeros_like(v) for k, v in ref.state_dict().items()}
    handle = offload(model, keep)
    with pytest.raises(ht.OffloadedError, match="load_state_dict"):
        model.load_state_dict(zeros)
    with torch.no_grad():
        assert torch.equal(run(model, kind, ids()), run(ref, kind, ids()))
    handle.remove()
    model.load_state_dict(zeros)  # after remove() it loads
    assert all(torch.count_nonzero(p) == 0 for p in model.parameters())


# ---- 6. messages ---------------------------------------------------------------------------------
def test_offloading_an_offloaded_model_and_calls_after_remove_say_what_happened():
    model, keep = build_model("gpt2", torch.float32)
    handle = offload(model, keep)
    with pytest.raises(htp.InvalidArgumentError, match="already offloaded"):
        offload(model, keep)
    with pytest.raises(htp.InvalidArgumentError, match="already paged by htp"):
        offload(model.transformer.h[0], [])
    handle.remove()
    for call in (handle.metrics, lambda: handle.pager):
        with pytest.raises(htp.InvalidArgumentError, match="was removed"):
            call()
    assert handle.span_of(next(model.parameters())) is None
    again = offload(model, keep)  # after remove() it offloads again
    with torch.no_grad():
        run(model, "gpt2", ids())
    again.remove()
    del again, handle
    gc.collect()
