"""A process per GPU: htp.SharedTier (a node's tier in shared memory), htp.distributed.node_tier
and htp.torch.offload(tier=...), and examples/python/tensor_parallel.py under torchrun on sim
(gloo): two ranks on one node share one tier, two simulated nodes get one tier each, and every
rank's logits match the resident model's. Every subprocess runs under a timeout and is killed
with its process group on failure."""
from __future__ import annotations

import contextlib
import hashlib
import json
import multiprocessing as mp
import os
import signal
import socket
import subprocess
import sys
import uuid
from pathlib import Path

import numpy as np
import pytest

import htp
import htp.distributed

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "python" / "tensor_parallel.py"
TIMEOUT = 240


@pytest.fixture
def tier_name():
    """A fresh tier name; any segment of it left behind is removed afterwards."""
    name = f"pytest-{uuid.uuid4().hex[:12]}"
    yield name
    with contextlib.suppress(htp.Error):
        htp.remove_shared_tier(name, force=True)


def pattern(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8)


# ---- SharedTier ---------------------------------------------------------------------------------
def test_publish_find_release(tier_name):
    tier = htp.SharedTier(tier_name, "1MiB", page_bytes="4KiB")
    assert tier.created and tier.name == tier_name and tier.data_bytes >= 1 << 20
    calls = []

    def fill(arrays):
        calls.append([a.nbytes for a in arrays])
        arrays[0][:] = pattern(100, 1)
        arrays[1][:] = pattern(5000, 2)
    a, b = tier.publish([("a", 100), ("b", "5000B")], fill)
    assert calls == [[100, 5000]]
    assert a.dtype == np.uint8 and not a.flags.writeable
    assert np.array_equal(a, pattern(100, 1)) and np.array_equal(b, pattern(5000, 2))
    again = tier.publish([("a", 100), ("b", 5000)], fill)  # exists: not filled again
    assert len(calls) == 1 and np.array_equal(again[1], b)
    assert np.array_equal(tier.find("a"), a) and tier.find("missing") is None
    d = tier.describe()
    assert (d["entries"], d["entry_bytes"], d["live_ranks"]) == (2, 5100, 1)
    assert any(t["name"] == tier_name for t in htp.list_shared_tiers())
    tier.release("a")  # one hold per process, however often it published or found the entry
    assert tier.find("a") is None and tier.describe()["entries"] == 1
    with pytest.raises(htp.InvalidArgumentError, match="'a'"):
        tier.release("a")


def test_typed_errors(tier_name):
    with pytest.raises(htp.InvalidArgumentError):
        htp.SharedTier("no spaces allowed", "1MiB")
    with pytest.raises(htp.InvalidArgumentError):
        htp.SharedTier(tier_name, 0)
    tier = htp.SharedTier(tier_name, "1MiB", page_bytes="4KiB")
    with pytest.raises(htp.InvalidArgumentError):
        htp.SharedTier(tier_name, "2MiB", page_bytes="4KiB")  # another size than the segment's
    tier.publish([("w", 100)], None)
    with pytest.raises(htp.InvalidArgumentError, match="'w'"):
        tier.publish([("w", 200)], None)  # exists with another size
    with pytest.raises(htp.InvalidArgumentError, match="'w'"):
        tier.publish([("w", 100), ("new", 10)], None)  # only partly exists
    with pytest.raises(htp.InvalidArgumentError):
        tier.publish([], None)
    with pytest.raises(htp.InvalidArgumentError):
        tier.publish([("zero", 0)], None)
    with pytest.raises(htp.InvalidArgumentError, match="pair"):
        tier.publish(["w"], None)
    with pytest.raises(htp.OutOfMemoryError):
        tier.publish([("huge", "2MiB")], None)
    with pytest.raises(htp.LogicError):
        htp.remove_shared_tier(tier_name)  # this process is attached


def test_a_fill_that_raises_publishes_nothing(tier_name):
    tier = htp.SharedTier(tier_name, "1MiB", page_bytes="4KiB")

    def fail(arrays):
        raise RuntimeError("the bytes could not be read")
    with pytest.raises(RuntimeError, match="could not be read"):
        tier.publish([("x", 64), ("y", 64)], fail)
    assert tier.find("x") is None and tier.describe()["entries"] == 0
    x, = tier.publish([("x", 64)], lambda arrays: arrays[0].fill(7))
    assert (x == 7).all()


def racer(name: str, start, results) -> None:
    """A process that opens the tier and publishes the batch every racer publishes."""
    tier = htp.SharedTier(name, "4MiB", page_bytes="4KiB")
    filled = []

    def fill(arrays):
        filled.append(os.getpid())
        for i, a in enumerate(arrays):
            a[:] = pattern(a.nbytes, i)
    start.wait(timeout=60)
    arrays = tier.publish([("p0", 70000), ("p1", 12345)], fill)
    digest = hashlib.sha256(b"".join(a.tobytes() for a in arrays)).hexdigest()
    results.put((bool(filled), digest))
    start.wait(timeout=60)  # both have published before either closes the tier


def test_two_processes_publish_one_batch_one_fills(tier_name):
    ctx = mp.get_context("spawn")
    start, results = ctx.Barrier(2), ctx.Queue()
    procs = [ctx.Process(target=racer, args=(tier_name, start, results)) for _ in range(2)]
    for p in procs:
        p.start()
    try:
        got = [results.get(timeout=120) for _ in procs]
        for p in procs:
            p.join(timeout=60)
            assert p.exitcode == 0
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
    assert sorted(f for f, _ in got) == [False, True]  # exactly one filled
    want = hashlib.sha256(pattern(70000, 0).tobytes() + pattern(12345, 1).tobytes()).hexdigest()
    assert [d for _, d in got] == [want, want]


def test_a_pager_pages_from_the_tier(tier_name, sim):
    import torch
    from htp._weights import torch_view
    tier = htp.SharedTier(tier_name, "1MiB", page_bytes="4KiB")
    w = torch.randn(64, 32)
    entry, = tier.publish([("w", w.nbytes)], lambda a: torch_view(a[0], w.dtype, w.shape).copy_(w))
    pager = htp.Pager(sim, hbm_budget="256KiB", slab_bytes="256KiB", page_bytes=4096)
    pager.lend(tier.data)
    t = pager.register("w", torch_view(entry, w.dtype, w.shape), copy=False)
    with pager.acquired(t) as view:
        assert torch.equal(torch.from_dlpack(view), w)


def test_node_tier_name_from_torchrun_environment(monkeypatch, tier_name):
    for k in ("HTP_TIER", "MASTER_ADDR", "MASTER_PORT", "GROUP_RANK"):
        monkeypatch.delenv(k, raising=False)
    with pytest.raises(htp.InvalidArgumentError, match="MASTER_ADDR"):
        htp.distributed.tier_name()
    monkeypatch.setenv("MASTER_ADDR", "10.0.0.1")
    monkeypatch.setenv("MASTER_PORT", "29500")
    monkeypatch.setenv("GROUP_RANK", "3")
    assert htp.distributed.tier_name() == "torchrun-10.0.0.1-29500-node3"
    monkeypatch.setenv("HTP_TIER", tier_name)
    tier = htp.distributed.node_tier("64KiB", page_bytes="4KiB")
    assert tier.name == tier_name


def test_offload_through_the_tier_matches_and_releases(tier_name):
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    import htp.torch as ht
    from conftest import build_model
    model, keep = build_model("llama", torch.float32)
    ids = torch.randint(0, 512, (2, 12), generator=torch.Generator().manual_seed(7))
    with torch.no_grad():
        want = model(ids).logits
    tier = htp.SharedTier(tier_name, "8MiB", page_bytes="4KiB")
    handle = ht.offload(model, "512KiB", keep=keep, device=htp.make_device("sim"), tier=tier,
                        tier_prefix="rank0/")
    paged = {id(p) for unit in handle.units for p in (q.param for q in unit.params)}
    d = tier.describe()
    assert d["entries"] == len(paged)
    assert tier.find("rank0/model.layers.0.mlp.up_proj.weight") is not None
    with torch.no_grad():
        for _ in range(2):
            assert torch.equal(model(ids).logits, want)
    handle.remove()
    assert tier.describe()["entries"] == 0
    with torch.no_grad():
        assert torch.equal(model(ids).logits, want)


def test_a_tier_entry_of_other_bytes_or_held_twice_is_refused(tier_name):
    """Tensor-parallel shards share names and shapes: a rank attaching to entries another process
    published with other bytes gets a typed error, never the other rank's weights; and a second
    offload of the same names in one process is refused (the first one's remove() would free
    them under it)."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    import htp.torch as ht
    from conftest import build_model
    first, keep = build_model("llama", torch.float32)
    second, _ = build_model("llama", torch.float32)
    with torch.no_grad():
        second.model.layers[0].mlp.up_proj.weight[0, 0] += 1  # one element differs
    publisher = htp.SharedTier(tier_name, "8MiB", page_bytes="4KiB")  # another rank's slot
    attacher = htp.SharedTier(tier_name, "8MiB", page_bytes="4KiB")
    dev = htp.make_device("sim")
    handle = ht.offload(first, "512KiB", keep=keep, device=dev, tier=publisher, tier_prefix="r/")
    entries = publisher.describe()["entries"]
    with pytest.raises(htp.InvalidArgumentError, match="other bytes.*tier_prefix"):
        ht.offload(second, "512KiB", keep=keep, device=dev, tier=attacher, tier_prefix="r/")
    third, _ = build_model("llama", torch.float32)
    with pytest.raises(htp.InvalidArgumentError, match="already holds"):
        ht.offload(third, "512KiB", keep=keep, device=dev, tier=publisher, tier_prefix="r/")
    assert publisher.describe()["entries"] == entries  # the refusals took nothing away
    handle.remove()
    assert publisher.describe()["entries"] == 0


# ---- the example under torchrun -----------------------------------------------------------------
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def torchrun(port: int, nproc: int, nnodes: int = 1, node_rank: int = 0) -> subprocess.Popen:
    env = dict(os.environ, OMP_NUM_THREADS="1", GLOO_SOCKET_IFNAME="lo",
               PYTHONPATH=os.pathsep.join(sys.path))
    env.pop("HTP_TIER", None)
    cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={nproc}",
           f"--nnodes={nnodes}", f"--node-rank={node_rank}", "--master-addr=127.0.0.1",
           f"--master-port={port}", str(EXAMPLE)]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env, cwd=str(ROOT), start_new_session=True)


def finish(procs: list[subprocess.Popen]) -> list[dict]:
    """Every launch's JSON lines, each launch having exited 0 within TIMEOUT seconds (all are
    killed, with their process groups, otherwise)."""
    rows, logs = [], []
    try:
        for p in procs:
            out, err = p.communicate(timeout=TIMEOUT)
            logs.append(err[-4000:])
            assert p.returncode == 0, f"torchrun exited {p.returncode}:\n{out}\n{err[-4000:]}"
            rows += [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    finally:
        for p in procs:
            if p.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(p.pid, signal.SIGKILL)
                p.wait(timeout=30)
    for r in rows:
        print(json.dumps(r))
    return rows


def check_node(rows: list[dict]) -> None:
    """The ranks of one node: one tier, holding the sum of their shards once."""
    assert len({r["tier"] for r in rows}) == 1
    for r in rows:
        assert r["allclose"] and r["max_abs_diff"] <= 1e-4, r
        assert r["equal_to_resident_shard"], r
        assert r["tier_entry_bytes"] == sum(x["shard_bytes"] for x in rows), r
        assert r["tier_live_ranks"] == len(rows)


def test_tensor_parallel_two_ranks_share_one_tier():
    rows = finish([torchrun(free_port(), nproc=2)])
    assert sorted(r["rank"] for r in rows) == [0, 1]
    check_node(rows)


def test_two_simulated_nodes_get_a_tier_each():
    port = free_port()
    rows = finish([torchrun(port, nproc=2, nnodes=2, node_rank=n) for n in (0, 1)])
    assert sorted(r["rank"] for r in rows) == [0, 1, 2, 3]
    assert {r["world_size"] for r in rows} == {4}
    by_node = {}
    for r in rows:
        by_node.setdefault(r["node"], []).append(r)
    assert sorted(by_node) == [0, 1]
    assert len({r["tier"] for r in rows}) == 2
    for node_rows in by_node.values():
        check_node(node_rows)
