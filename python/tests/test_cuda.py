"""The Python API on a real GPU (skipped without one): views on torch's streams, the legacy default
stream bridged, a model offloaded on cuda giving the resident model's logits and tokens, and
compressed weights decoded bit-exact by the GPU's decode kernel (alone and in an offloaded model)."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
import htp  # noqa: E402

if htp.cuda_device_count() == 0 or not torch.cuda.is_available():
    pytest.skip("no GPU visible to htp and torch", allow_module_level=True)


@pytest.fixture(scope="module")
def gpu():
    return htp.make_device("cuda")


def small_pager(gpu, **config):
    return htp.Pager(gpu, hbm_budget="64MiB", host_budget="128MiB", **config)


def test_views_are_cuda_tensors_ordered_on_the_default_stream(gpu):
    p = small_pager(gpu)
    x = torch.arange(1 << 20, dtype=torch.float32)
    t = p.register("x", x)
    with p.acquired(t) as v:  # torch's current stream: the legacy default stream, bridged
        y = torch.from_dlpack(v)
        assert y.device.type == "cuda" and y.data_ptr() == v.data_ptr
        assert torch.equal(y.cpu(), x)
        total = y.sum()
    assert total.item() == x.sum().item()


def test_views_on_a_side_stream_and_a_raw_handle(gpu):
    p = small_pager(gpu)
    x = torch.randn(4096, 256, dtype=torch.bfloat16)
    t = p.register("x", x)
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        with p.acquired(t, stream=s) as v:
            out = (torch.from_dlpack(v).float() * 2).cpu()
    assert torch.equal(out, x.float() * 2)
    with p.acquired(t, stream=s.cuda_stream) as v:
        with torch.cuda.stream(s):
            assert torch.equal(torch.from_dlpack(v).cpu(), x)
    with pytest.raises(htp.InvalidArgumentError, match="cudaStreamPerThread"):
        p.acquire(t, stream=2)


def test_mutable_tensor_written_by_a_kernel_is_written_back(gpu):
    p = small_pager(gpu)
    kv = p.register("kv", torch.zeros(1 << 16, dtype=torch.float16), kind="mutable")
    with p.acquired(kv, dirty=True) as v:
        torch.from_dlpack(v).fill_(3.0)
    p.evict(kv)
    assert (p.copy_to_host(kv) == 3.0).all()


@pytest.mark.parametrize("kind,compress", [("llama", False), ("mixtral", True)],
                         ids=["llama", "mixtral-compressed"])
def test_offloaded_model_matches_the_resident_one_on_cuda(gpu, kind, compress):
    import copy

    from conftest import build_model, check_compressed_paging
    import htp.torch as ht

    model, keep = build_model(kind, torch.bfloat16)
    ref = copy.deepcopy(model).cuda()
    ids = torch.randint(0, 512, (2, 12), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        want = ref(ids.cuda()).logits
        want_tokens = ref.generate(ids.cuda(), max_new_tokens=32, do_sample=False, pad_token_id=0)
    paged = sum(p.numel() * 2 for n, p in model.named_parameters() if "embed" not in n and "lm_head" not in n)
    handle = ht.offload(model, hbm_budget=max(paged * 3 // 10, 1 << 20), keep=keep, device=gpu,
                        compress=compress)
    with torch.no_grad():
        assert torch.equal(model(ids).logits, want)
        assert torch.equal(model.generate(ids, max_new_tokens=32, do_sample=False, pad_token_id=0),
                           want_tokens)
    assert handle.metrics()["evictions"] > 0
    if compress:  # decoded by the GPU's kernel at every page-in
        check_compressed_paging(handle.metrics())
    handle.remove()


def test_compressed_weights_are_decoded_bit_exact_by_the_gpu(gpu):
    p = small_pager(gpu)
    g = torch.Generator().manual_seed(11)
    w = (torch.randn(3 << 20, generator=g) * 0.02).to(torch.bfloat16)  # 6 MiB: several pieces
    t = p.register("w", w, compress=True)
    for _ in range(2):  # a decode on the GPU, an eviction, and another
        with p.acquired(t) as v:
            got = torch.from_dlpack(v)
            assert got.device.type == "cuda"
            assert torch.equal(got.view(torch.int16).cpu(), w.view(torch.int16))
        p.evict(t)
    m = p.metrics()
    assert m["compressed_tensors"] == 1 and m["page_ins"] == 2
    assert m["page_in_wire_bytes"] < 0.75 * m["page_in_bytes"]


def test_tensor_parallel_example_on_nccl_with_world_size_1(monkeypatch, capsys):
    """examples/python/tensor_parallel.py as torchrun starts it (env:// variables), on NCCL with
    one rank: the shard is the whole tiny Llama, published into the node's shared tier and paged
    into the GPU at 30% of it; its logits are allclose to the resident model's."""
    import json
    import os
    import runpy
    import socket
    import sys
    from pathlib import Path

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = dict(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", LOCAL_WORLD_SIZE="1", GROUP_RANK="0",
               MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), HTP_TIER=f"tp-check-{os.getpid()}")
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    example = Path(__file__).resolve().parents[2] / "examples" / "python" / "tensor_parallel.py"
    monkeypatch.setattr(sys, "argv", [str(example), "--backend", "cuda"])
    assert runpy.run_path(str(example), run_name="tensor_parallel")["main"]() == 0
    line = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert line["backend"] == "cuda" and line["allclose"] and line["world_size"] == 1
    assert line["page_ins"] > 0  # paged, not resident

