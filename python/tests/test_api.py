"""htp's Python API on sim: registration forms, views, streams, config by name, reports, and
misuse that must raise typed exceptions and leave nothing behind."""
from __future__ import annotations

import json
import struct
import threading

import numpy as np
import pytest

import htp


def test_errors_are_typed_and_derive_from_the_builtins():
    assert issubclass(htp.OutOfMemoryError, MemoryError) and issubclass(htp.OutOfMemoryError, htp.Error)
    assert issubclass(htp.InvalidArgumentError, ValueError)
    assert issubclass(htp.CudaError, RuntimeError)
    assert issubclass(htp.IoError, OSError) and issubclass(htp.IoError, htp.Error)
    assert issubclass(htp.CorruptDataError, ValueError) and issubclass(htp.CorruptDataError, htp.Error)
    with pytest.raises(htp.InvalidArgumentError, match="backend"):
        htp.make_device("tpu")


def test_cuda_without_a_gpu_says_why():
    if htp.cuda_device_count() > 0:
        pytest.skip("a GPU is present")
    with pytest.raises(htp.CudaError):
        htp.make_device("cuda")
    assert htp.make_device("auto").backend == "sim"


def test_every_config_field_is_settable_by_name(sim):
    fields = [n for n in dir(htp.PagerConfig) if not n.startswith("_")]
    assert {"hbm_budget_bytes", "prefetch_lookahead", "eviction", "checked", "h2d"} <= set(fields)
    cfg = htp.pager_config(hbm_budget="2MiB", host_budget=4 << 20, slab_bytes="1MiB",
                           page_bytes=4096, eviction="belady", prefetch="pipeline",
                           on_oom="allow_degraded", latency_budget_ms=50, trace=True,
                           h2d={"rate_bytes_per_second": "1GB"}, prefetch_lookahead=4)
    assert cfg.hbm_budget_bytes == 2 << 20 and cfg.eviction == htp.EvictionRule.belady
    assert cfg.h2d.rate_bytes_per_second == 10**9 and cfg.latency_budget_ms == 50
    with pytest.raises(htp.InvalidArgumentError, match="no option 'hbm'"):
        htp.pager_config(hbm=1)
    with pytest.raises(htp.InvalidArgumentError, match="none of"):
        htp.pager_config(eviction="fifo")
    with pytest.raises(htp.InvalidArgumentError, match="not a size"):
        htp.pager_config(hbm_budget="lots")
    with pytest.raises(htp.InvalidArgumentError):  # C++ checks the values: slab below 64 KiB
        htp.Pager(sim, hbm_budget="1MiB", slab_bytes=1000)


def test_register_from_numpy_buffer_and_torch_keeps_dtype_and_shape(pager):
    a = np.arange(24, dtype=np.float16).reshape(2, 3, 4)
    t = pager.register("a", a)
    assert (t.dtype, t.shape, t.nbytes) == ("float16", (2, 3, 4), 48)
    with pager.acquired(t) as v:
        assert np.array_equal(np.from_dlpack(v), a)
        assert v.__dlpack_device__() == (1, 0)  # kDLCPU on sim
    b = pager.register("b", bytearray(b"0123456789"))
    assert (b.dtype, b.shape) == ("uint8", (10,))
    torch = pytest.importorskip("torch")
    x = torch.randn(5, 7, dtype=torch.bfloat16)
    tx = pager.register("x", x)
    assert tx.dtype == "bfloat16" and tx.shape == (5, 7)
    with pager.acquired(tx) as v:
        assert torch.equal(torch.from_dlpack(v), x)
    assert torch.equal(pager.copy_to_host(tx), x)


def test_zero_copy_registration_uses_the_callers_memory(pager, tmp_path):
    torch = pytest.importorskip("torch")  # numpy's from_dlpack views are read-only
    a = np.arange(4096, dtype=np.int32)
    t = pager.register("a", a, kind="mutable", copy=False)
    with pager.acquired(t, dirty=True) as v:
        torch.from_dlpack(v).fill_(-1)  # a kernel writing the tensor
    pager.evict(t)  # written back into the caller's array
    assert (a == -1).all()
    pager.unregister(t)
    path = tmp_path / "weights.bin"
    np.arange(8192, dtype=np.float32).tofile(path)
    mm = np.memmap(path, dtype=np.float32, mode="r")
    pager.lend(mm, read_only=True)
    first, second = pager.register("m0", mm[:4096], copy=False), pager.register("m1", mm[4096:], copy=False)
    with pager.acquired([first, second]) as (v0, v1):
        assert np.from_dlpack(v1)[0] == 4096.0 and np.from_dlpack(v0)[-1] == 4095.0
    with pytest.raises(htp.InvalidArgumentError):  # a read-only region holds weights only
        pager.register("m2", mm[:16], kind="mutable", copy=False)
    pager.unregister(first)
    pager.unregister(second)
    pager.unlend(mm)


def write_safetensors(path, tensors):
    header, blobs, offset = {}, [], 0
    for name, (dtype, arr) in tensors.items():
        raw = arr.tobytes()
        header[name] = {"dtype": dtype, "shape": list(arr.shape), "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    text = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def test_safetensors_tensors_are_file_backed(pager, tmp_path):
    path = tmp_path / "model.safetensors"
    w = np.random.default_rng(0).standard_normal((64, 32)).astype(np.float32)
    bias = np.arange(32, dtype=np.int64)
    write_safetensors(path, {"w": ("F32", w), "b": ("I64", bias)})
    ts = pager.register_safetensors(str(path))
    assert ts["w"].shape == (64, 32) and ts["b"].dtype == "int64"
    with pager.acquired([ts["w"], ts["b"]]) as (vw, vb):
        assert np.array_equal(np.from_dlpack(vw), w) and np.array_equal(np.from_dlpack(vb), bias)
    assert pager.metrics()["file_backed_tensors"] == 2
    with pytest.raises(htp.InvalidArgumentError, match="no tensor named"):
        pager.register_safetensors(str(path), ["missing"])


def test_misuse_raises_typed_errors_and_leaks_nothing(sim):
    before = sim.sim_pinned_bytes
    p = htp.Pager(sim, hbm_budget="1MiB", host_budget="2MiB", slab_bytes="1MiB", page_bytes=4096)
    t = p.register("t", np.zeros(1024, dtype=np.float32))
    with pytest.raises(htp.InvalidArgumentError, match="without a matching acquire"):
        p.release(t)
    with pytest.raises(htp.InvalidArgumentError):  # larger than the HBM budget
        p.register("big", np.zeros(2 << 20, dtype=np.uint8))
    fills = []
    with pytest.raises(htp.OutOfMemoryError):  # more than the host tier holds
        for i in range(3):
            fills.append(p.register(f"fill{i}", np.zeros(900 << 10, dtype=np.uint8)))
    assert len(fills) == 2 and p.metrics()["registered_tensors"] == 3
    for f in fills:
        p.unregister(f)
    with pytest.raises(htp.InvalidArgumentError, match="not C-contiguous"):
        p.register("strided", np.zeros((8, 8), dtype=np.float32)[:, ::2])
    with pytest.raises(htp.InvalidArgumentError, match="unsupported dtype"):
        p.register("c", np.zeros(4, dtype=np.complex64))
    with pytest.raises(htp.InvalidArgumentError, match="kind"):
        p.register("k", np.zeros(4), kind="kv")
    with pytest.raises(htp.InvalidArgumentError, match="not an array"):
        p.register("s", "not an array")
    with pytest.raises(htp.InvalidArgumentError, match="sim device takes stream=None"):
        p.acquire(t, stream=12345)
    with pytest.raises(htp.InvalidArgumentError, match="dirty"):
        with p.acquired(t, dirty=True):
            pass
    assert p.info(t)["pins"] == 0  # the context manager released despite the error
    p.unregister(t)
    with pytest.raises(htp.InvalidArgumentError, match="stale"):
        p.acquire(t)
    assert p.metrics()["registered_tensors"] == 0
    del p
    assert sim.sim_pinned_bytes == before


def test_checked_mode_poisons_a_view_used_after_its_extent_is_freed(sim):
    # Checked mode fills freed HBM extents with htp's poison pattern (fill_pattern(0xDBDBDBDB)).
    p = htp.Pager(sim, hbm_budget="1MiB", host_budget="2MiB", slab_bytes="1MiB", page_bytes=4096,
                  checked=True)
    t = p.register("t", np.full(4096, 7, dtype=np.uint8))
    view = p.acquire(t)
    stale = np.from_dlpack(view)
    p.release(t)
    p.evict(t)
    sim.synchronize()  # the poison is queued on the pager's own stream
    assert (stale != 7).mean() > 0.9


def test_reports_metrics_prometheus_and_trace(sim, tmp_path):
    p = htp.Pager(sim, hbm_budget="1MiB", host_budget="2MiB", slab_bytes="1MiB", page_bytes=4096,
                  trace=True)
    t = p.register("t", np.ones(1000, dtype=np.float32))
    with p.acquired(t):
        pass
    m = p.metrics()
    assert m["faults"] == 1 and m["acquires"] == 1 and isinstance(m["transfers"], dict)
    assert "htp_pager_faults" in p.to_prometheus() or "faults" in p.to_prometheus()
    p.write_trace(str(tmp_path / "trace.json"))
    assert json.loads((tmp_path / "trace.json").read_text())["traceEvents"]
    p.reset_metrics()
    assert p.metrics()["faults"] == 0


def _flat(tree, prefix=""):
    out = {}
    for key, value in tree.items():
        out.update(_flat(value, f"{prefix}{key}.") if isinstance(value, dict) else {prefix + key: value})
    return out


def test_metrics_is_the_json_as_a_dict_built_without_json(pager):
    # metrics() is built in C++ from the counter lists; metrics_json() is to_json (what files get).
    # Same keys, nesting, types and values; only what the clock moves between the two snapshots
    # may differ.
    t = pager.register("m", np.arange(1024, dtype=np.float32))
    with pager.acquired(t):
        pass
    pager.evict(t)
    pager.synchronize()
    d, j = _flat(pager.metrics()), _flat(json.loads(pager.metrics_json()))
    assert d.keys() == j.keys()
    assert d["acquires"] == 1 and d["oom_ladder.thrown"] == 0 and d["transfers.h2d.bytes"] == 4096
    timed = {"elapsed_ms", "fault_rate_per_ms", "hbm.mean_pct", "host.mean_pct", "transfers.elapsed_ns"}
    for key in d:
        assert type(d[key]) is type(j[key]), key
        if key not in timed:
            assert d[key] == j[key], key


def test_threads_share_a_pager_with_the_gil_released(sim):
    p = htp.Pager(sim, hbm_budget="1MiB", host_budget="4MiB", slab_bytes="1MiB", page_bytes=4096)
    arrays = [np.full(64 << 10, i, dtype=np.uint8) for i in range(24)]  # 1.5 MiB: evictions
    ts = [p.register(f"t{i}", a) for i, a in enumerate(arrays)]
    errors = []

    def worker(k):
        try:
            for r in range(30):
                i = (k * 7 + r) % len(ts)
                with p.acquired(ts[i]) as v:
                    if not (np.from_dlpack(v) == i).all():
                        errors.append(f"tensor {i} has wrong bytes")
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(repr(e))

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=120)
    assert not any(th.is_alive() for th in threads) and not errors
    assert p.metrics()["evictions"] > 0


def test_node_shares_one_host_copy(sim):
    devices = [htp.make_device("sim") for _ in range(2)]
    n = htp.Node(devices, host_budget="4MiB", host_slab_bytes="1MiB", gpu=dict(hbm_budget="1MiB", slab_bytes="1MiB", page_bytes=4096))
    w = n.register_replicated("w", np.arange(256, dtype=np.float32))
    for g in range(n.gpu_count):
        pg = n.gpu(g)
        t = n.on(w, g)
        with pg.acquired(t) as v:
            assert np.from_dlpack(v)[255] == 255.0
    n.unregister(w)
    with pytest.raises(htp.InvalidArgumentError, match="not C-contiguous"):
        n.register_replicated("strided", np.zeros((8, 8), dtype=np.float32)[:, ::2])


def test_node_keeps_compressed_weights_replicated_and_sharded(sim):
    devices = [htp.make_device("sim") for _ in range(2)]
    n = htp.Node(devices, host_budget="4MiB", host_slab_bytes="1MiB",
                 gpu=dict(hbm_budget="1MiB", slab_bytes="1MiB", page_bytes=4096))
    rng = np.random.default_rng(6)
    w = (rng.standard_normal(65536) * 0.02).astype(np.float16)
    shards = [(rng.standard_normal(32768) * 0.02).astype(np.float16) for _ in range(2)]
    r = n.register_replicated("w", w, compress=True)
    s = n.register_sharded("s", shards, compress=True)
    for g in range(n.gpu_count):
        pg = n.gpu(g)
        with pg.acquired([n.on(r, g), n.on(s, g)]) as (vr, vs):
            assert np.array_equal(np.from_dlpack(vr), w)
            assert np.array_equal(np.from_dlpack(vs), shards[g])
        assert pg.metrics()["compressed_tensors"] == 2
    with pytest.raises(htp.InvalidArgumentError, match="bfloat16, float16 or float32"):
        n.register_replicated("ids", np.arange(64, dtype=np.int64), compress=True)
    with pytest.raises(htp.InvalidArgumentError, match="only weights"):
        n.register_sharded("kv", shards, kind="mutable", compress=True)
    n.unregister(r)
    n.unregister(s)


def test_import_htp_works_without_torch(tmp_path):
    import subprocess
    import sys
    code = ("import sys; sys.modules['torch'] = None\n"
            "import htp, numpy as np\n"
            "p = htp.Pager(htp.make_device('sim'), hbm_budget='1MiB', host_budget='2MiB', "
            "slab_bytes='1MiB', page_bytes=4096)\n"
            "t = p.register('a', np.arange(8, dtype=np.float32))\n"
            "out = p.copy_to_host(t)\n"
            "assert out.tolist() == list(range(8)), out\n")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=tmp_path)


def test_a_wrong_size_or_shape_is_refused(pager, tmp_path):
    t = pager.register("a", np.zeros((4, 4), dtype=np.float32))
    with pytest.raises(htp.InvalidArgumentError, match="the tensor has 64 bytes"):
        pager.copy_to_host(t, np.zeros(3, dtype=np.float32))
    path = tmp_path / "short.safetensors"
    write_safetensors(path, {"w": ("F32", np.zeros(16, dtype=np.float32))})
    header = json.loads(path.read_bytes()[8:8 + struct.unpack("<Q", path.read_bytes()[:8])[0]])
    header["w"]["shape"] = [1024]  # a header that claims more bytes than the file has
    text = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(text)) + text + np.zeros(16, dtype=np.float32).tobytes())
    with pytest.raises(htp.CorruptDataError, match="spans 64 bytes, but F32 \\[1024\\] takes 4096"):
        pager.register_safetensors(str(path))
    with pytest.raises(htp.InvalidArgumentError, match="unknown dtype"):
        pager.register_file("x", str(path), 0, "F8_E4M3", [4])


def test_compressed_weights_page_in_bit_exact_and_refuse_what_they_cannot_hold(sim):
    p = htp.Pager(sim, hbm_budget="1MiB", host_budget="4MiB", slab_bytes="1MiB", page_bytes=4096)
    w = (np.random.default_rng(3).standard_normal(65536) * 0.02).astype(np.float16)
    t = p.register("w", w, compress=True)
    assert (t.dtype, t.shape) == ("float16", (65536,))
    for _ in range(2):  # a page-in, an eviction, and a second page-in from the compressed bytes
        with p.acquired(t) as v:
            assert np.array_equal(np.from_dlpack(v), w)
        p.evict(t)
    assert np.array_equal(p.copy_to_host(t), w)
    m = p.metrics()
    assert m["compressed_tensors"] == 1 and m["page_ins"] == 2
    assert m["compressed_wire_bytes"] < m["compressed_bytes"] == w.nbytes
    assert m["page_in_wire_bytes"] < m["page_in_bytes"]
    with pytest.raises(htp.InvalidArgumentError, match="bfloat16, float16 or float32"):
        p.register("ids", np.arange(1024, dtype=np.int32), compress=True)
    with pytest.raises(htp.InvalidArgumentError, match="mutable"):
        p.register("kv", w, kind="mutable", compress=True)
    with pytest.raises(htp.InvalidArgumentError, match="copy=True"):
        p.register("w2", w, copy=False, compress=True)
    assert p.metrics()["registered_tensors"] == 1, "refusals register nothing"


def test_a_companion_is_written_registered_by_name_and_checked(pager, tmp_path):
    src, out = tmp_path / "model.safetensors", tmp_path / "model.htpz"
    w = (np.random.default_rng(4).standard_normal((128, 256)) * 0.02).astype(np.float16)
    bias = np.arange(32, dtype=np.int64)
    write_safetensors(src, {"w": ("F16", w), "b": ("I64", bias)})
    totals = htp.write_companion(src, out, pager.config.chunk_bytes)
    assert totals["tensors"] == 1 and totals["skipped"] == ["b"]
    assert totals["wire_bytes"] < totals["logical_bytes"] == w.nbytes
    with pytest.raises(htp.InvalidArgumentError, match="it was skipped"):
        pager.register_companion(out, ["w", "b"])
    assert pager.metrics()["registered_tensors"] == 0, "all or nothing"
    ts = pager.register_companion(out)
    assert list(ts) == ["w"] and (ts["w"].dtype, ts["w"].shape) == ("float16", (128, 256))
    with pager.acquired(ts["w"]) as v:
        assert np.array_equal(np.from_dlpack(v), w)
    assert pager.metrics()["compressed_tensors"] == 1
    pager.unregister(ts["w"])
    raw = bytearray(out.read_bytes())
    raw[-100] ^= 0xFF  # inside w's last piece
    out.write_bytes(bytes(raw))
    with pytest.raises(htp.CorruptDataError):
        pager.register_companion(out)
    assert pager.metrics()["registered_tensors"] == 0
    with pytest.raises(htp.InvalidArgumentError, match="not a companion"):
        pager.register_companion(src)
    with pytest.raises(htp.IoError):
        htp.write_companion(src, tmp_path / "missing-dir" / "x.htpz")


def test_python_m_htp_compress_writes_a_companion(tmp_path):
    import subprocess
    import sys
    src, out = tmp_path / "m.safetensors", tmp_path / "m.htpz"
    write_safetensors(src, {"w": ("F32", np.random.default_rng(5).standard_normal(4096).astype(np.float32))})
    r = subprocess.run([sys.executable, "-m", "htp.compress", str(src), str(out)],
                       capture_output=True, text=True, check=False)
    assert r.returncode == 0, r.stderr
    assert "1 tensors compressed (0 skipped)" in r.stdout and out.stat().st_size > 0
    bad = subprocess.run([sys.executable, "-m", "htp.compress", str(out), str(tmp_path / "x")],
                         capture_output=True, text=True, check=False)
    assert bad.returncode == 1 and "htp.compress:" in bad.stderr


def test_routed_groups_rank_experts_by_popularity_from_python(sim):
    # Four 256 KiB experts after a router, in 1 MiB of HBM with the router: room for three.
    p = htp.Pager(sim, hbm_budget="1MiB", host_budget="4MiB", slab_bytes="1MiB", page_bytes=4096,
                  lookahead="automatic", popularity_half_life=1000)
    assert p.config.lookahead == htp.LookaheadMode.automatic and p.config.popularity_half_life == 1000
    router = p.register("router", np.zeros(1024, dtype=np.uint8))
    experts = [p.register(f"e{i}", np.full(256 << 10, i, dtype=np.uint8)) for i in range(4)]
    p.set_schedule([router], cyclic=True)
    p.set_routed_group(router, experts, 1)
    for i in (1, 2, 2, 1, 2, 0):  # expert 0 least popular, though most recent
        with p.acquired(experts[i]):
            pass
    p.synchronize()
    p.expect([experts[3]])  # the router chose 3: room is made from the least popular
    p.synchronize()
    where = [p.info(e)["where"] for e in experts]
    assert where[0] == "host" and where[1] != "host" and where[2] != "host" and where[3] != "host"
    with pytest.raises(htp.InvalidArgumentError, match="k is 5"):
        p.set_routed_group(router, experts, 5)
    with pytest.raises(htp.InvalidArgumentError, match="none of"):
        htp.pager_config(lookahead="eager")


def test_an_activation_is_written_fresh_kept_through_an_eviction_and_dead_after_its_last_use(pager):
    """kind='activation': the first acquire copies nothing in (the kernels write it), an eviction
    while it is live writes it back and a page-in brings it back, and release_last_use frees it
    for good: it is never written back again and its next acquire is fresh."""
    torch = pytest.importorskip("torch")  # numpy's from_dlpack views are read-only
    a = pager.register("act", np.zeros(1024, dtype=np.float32), kind="activation")
    assert pager.info(a)["dead"]
    view = torch.from_dlpack(pager.acquire(a))
    assert pager.metrics()["page_in_bytes"] == 0  # fresh: nothing crossed the link
    view.copy_(torch.arange(1024, dtype=torch.float32))
    pager.release(a, dirty=True)
    pager.evict(a)
    assert pager.metrics()["activation_write_back_bytes"] == 4096
    back = np.from_dlpack(pager.acquire(a))
    assert np.array_equal(back, np.arange(1024, dtype=np.float32))
    pager.release_last_use(a)
    assert pager.info(a)["dead"]
    written = pager.metrics()["write_back_bytes"]
    pager.evict(a)  # dead: nothing to write back
    assert pager.metrics()["write_back_bytes"] == written
    np.from_dlpack(pager.acquire(a))
    assert pager.metrics()["activation_fresh_acquires"] == 2
    pager.release_last_use(a)
    w = pager.register("w", np.ones(16, dtype=np.float32))
    pager.acquire(w)
    with pytest.raises(htp.InvalidArgumentError, match="activation"):
        pager.release_last_use(w)
    pager.release(w)
