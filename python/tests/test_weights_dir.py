"""htp.torch.offload(model, budget, weights="dir/"): a model built on the meta device is paged
straight from its safetensors files, mapped read-only and lent to the pager, every parameter
registered at its offset with no copy: identical logits to the resident model, no private copy of
the weights (the file's pages are the page cache), tied and sharded checkpoints, and typed errors
naming the tensor for what the files do not hold or hold otherwise."""
from __future__ import annotations

import gc

import pytest

torch = pytest.importorskip("torch")
tf = pytest.importorskip("transformers")
accelerate = pytest.importorskip("accelerate")

import htp  # noqa: E402
import htp.torch as ht  # noqa: E402

KEEP = ["model.embed_tokens", "lm_head"]


def llama_config(**overrides):
    cfg = dict(vocab_size=512, hidden_size=128, intermediate_size=256, num_hidden_layers=4,
               num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256)
    cfg.update(overrides)
    return tf.LlamaConfig(**cfg)


def prompt(vocab=512, batch=2, length=12):
    g = torch.Generator().manual_seed(7)
    return torch.randint(0, vocab, (batch, length), generator=g)


def saved(path, cfg, dtype=torch.float32, **save):
    """A seeded random Llama of `cfg` saved to `path` as safetensors; returns its logits."""
    torch.manual_seed(1234)
    model = tf.LlamaForCausalLM(cfg).to(dtype).eval()
    model.save_pretrained(path, safe_serialization=True, **save)
    with torch.no_grad():
        logits = model(prompt(cfg.vocab_size)).logits
    del model
    gc.collect()
    return logits


def empty(cfg, dtype=torch.float32):
    """The model on the meta device, buffers real (rotary tables)."""
    with accelerate.init_empty_weights():
        model = tf.LlamaForCausalLM(cfg)
    return model.to(dtype).eval()


def paged_budget(cfg, fraction=0.3, dtype_bytes=4):
    per_layer = (2 * cfg.hidden_size * cfg.hidden_size
                 + 2 * cfg.hidden_size * cfg.num_key_value_heads * cfg.hidden_size
                 // cfg.num_attention_heads + 3 * cfg.hidden_size * cfg.intermediate_size)
    return max(int(per_layer * cfg.num_hidden_layers * dtype_bytes * fraction), 256 << 10)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_logits_equal_the_resident_model(tmp_path, dtype):
    cfg = llama_config()
    want = saved(tmp_path, cfg, dtype)
    model = empty(cfg, dtype)
    handle = ht.offload(model, paged_budget(cfg, dtype_bytes=dtype.itemsize), keep=KEEP,
                        device=htp.make_device("sim"), weights=tmp_path)
    with torch.no_grad():
        for _ in range(2):  # the second on the recorded schedule
            assert torch.equal(model(prompt()).logits, want)
    assert handle.metrics()["evictions"] > 0
    assert handle.host_copies == {}  # the file is the host copy
    handle.remove()
    with torch.no_grad():  # the parameters hold copies of the file's bytes now
        assert torch.equal(model(prompt()).logits, want)


def test_tied_lm_head_missing_from_the_files_pages_once(tmp_path):
    cfg = llama_config(tie_word_embeddings=True)
    want = saved(tmp_path, cfg)
    names = htp.safetensors_header(str(tmp_path / "model.safetensors"))["tensors"]
    assert "lm_head.weight" not in names and "model.embed_tokens.weight" in names
    model = empty(cfg)
    handle = ht.offload(model, paged_budget(cfg, 0.6), device=htp.make_device("sim"),
                        weights=tmp_path)  # embeddings and lm_head paged too: one tensor
    with torch.no_grad():
        assert torch.equal(model(prompt()).logits, want)
    tensors = {t for unit in handle.units for t in unit.tensors}
    assert len(tensors) == len({id(p) for p in model.parameters()})
    handle.remove()
    assert model.lm_head.weight is model.model.embed_tokens.weight


def test_a_sharded_checkpoint_follows_its_index(tmp_path):
    cfg = llama_config()
    want = saved(tmp_path, cfg, max_shard_size="300KB")
    assert (tmp_path / "model.safetensors.index.json").exists()
    assert len(list(tmp_path.glob("*.safetensors"))) > 2
    model = empty(cfg)
    ht.offload(model, paged_budget(cfg), keep=KEEP, device=htp.make_device("sim"),
               weights=tmp_path)
    with torch.no_grad():
        assert torch.equal(model(prompt()).logits, want)


def test_a_model_made_under_torch_device_meta_names_its_meta_buffers(tmp_path):
    cfg = llama_config()
    saved(tmp_path, cfg)
    with torch.device("meta"):
        model = tf.LlamaForCausalLM(cfg).eval()
    with pytest.raises(htp.InvalidArgumentError, match=r"rotary_emb\.inv_freq.*init_empty_weights"):
        ht.offload(model, "1MiB", keep=KEEP, device=htp.make_device("sim"), weights=tmp_path)


@pytest.mark.parametrize("change, needle", [
    (dict(dtype=torch.bfloat16), r"'model\.layers\.0\.self_attn\.q_proj\.weight' is torch\.bfloat16"
                                 r".*F32"),
    (dict(intermediate_size=320), r"'model\.layers\.0\.mlp\.gate_proj\.weight'.*shape \(320, 128\)"),
    (dict(num_hidden_layers=5), r"'model\.layers\.4\.self_attn\.q_proj\.weight'.* is in none"),
])
def test_what_the_files_lack_or_hold_otherwise_is_named(tmp_path, change, needle):
    cfg = llama_config()
    saved(tmp_path, cfg)
    dtype = change.pop("dtype", torch.float32)
    model = empty(llama_config(**change), dtype)
    with pytest.raises(htp.InvalidArgumentError, match=needle):
        ht.offload(model, "4MiB", keep=KEEP, device=htp.make_device("sim"), weights=tmp_path)
    assert getattr(model, "_htp_offload", None) is None


def test_no_files_and_meta_without_weights_are_refused(tmp_path):
    model = empty(llama_config())
    with pytest.raises(htp.InvalidArgumentError, match="no \\*.safetensors"):
        ht.offload(model, "4MiB", keep=KEEP, device=htp.make_device("sim"), weights=tmp_path)
    with pytest.raises(htp.InvalidArgumentError, match="meta device.*weights="):
        ht.offload(model, "4MiB", keep=KEEP, device=htp.make_device("sim"))
    with pytest.raises(htp.InvalidArgumentError, match="static=True"):
        ht.offload(model, "4MiB", device=htp.make_device("sim"), weights=tmp_path, compress=True)


def anonymous() -> int:
    """Bytes of this process's anonymous memory (/proc/self/smaps_rollup): every private copy
    (malloc, pinned buffers, copy-on-write pages) and nothing of the page cache. Private_* would
    count a file page mapped by this process alone, or one it wrote and the kernel has not yet
    written back, although it is the page cache, not a copy."""
    with open("/proc/self/smaps_rollup") as f:
        for line in f:
            if line.startswith("Anonymous:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no Anonymous in /proc/self/smaps_rollup")


def test_no_private_copy_of_the_weights(tmp_path):
    cfg = llama_config(hidden_size=512, intermediate_size=2048, num_hidden_layers=4,
                       num_attention_heads=8, num_key_value_heads=8, vocab_size=512)
    want = saved(tmp_path, cfg)
    weights = (tmp_path / "model.safetensors").stat().st_size  # about 70 MB
    model = empty(cfg)
    gc.collect()
    before = anonymous()
    budget = paged_budget(cfg, 0.3)
    handle = ht.offload(model, budget, keep=KEEP, device=htp.make_device("sim"), weights=tmp_path)
    with torch.no_grad():
        got = model(prompt()).logits
    grew = anonymous() - before
    print(f"weights {weights} B, hbm budget {budget} B, anonymous memory grew {grew} B")
    assert torch.equal(got, want)
    # What grows: the sim device's HBM (the budget), the kept embeddings and activations; not the
    # paged weights, which stay the file's shared pages.
    assert grew < budget + weights // 4, (grew, budget, weights)
    handle.remove()
