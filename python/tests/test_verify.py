"""Verified page-ins (PagerConfig.verify_page_ins, on by default): a safetensors file whose bytes
change on disk after registration fails the acquire of that tensor with htp.CorruptDataError
naming the tensor and the file; the other tensors still acquire, and the tensor acquires again
once its bytes are restored."""
from __future__ import annotations

import json
import struct

import numpy as np
import pytest

import htp

safetensors_numpy = pytest.importorskip("safetensors.numpy")


def data_offset(path, name: str) -> int:
    """Where tensor `name`'s bytes start in the safetensors file at `path`."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
    return 8 + n + header[name]["data_offsets"][0]


def flip_byte(path, offset: int) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        b = f.read(1)[0]
        f.seek(offset)
        f.write(bytes([b ^ 0x08]))


def test_a_changed_safetensors_file_fails_that_acquire_only(sim, tmp_path):
    rng = np.random.default_rng(7)
    w = {f"layer.{i}.w": rng.standard_normal((128, 256)).astype(np.float32) for i in range(3)}
    path = tmp_path / "ckpt.safetensors"
    safetensors_numpy.save_file(w, str(path))
    # 16 KiB chunks: each 128 KiB tensor is 8 of them.
    pager = htp.Pager(sim, hbm_budget="1MiB", host_budget=0, slab_bytes="1MiB", page_bytes=4096,
                      chunk_bytes="16KiB")
    assert pager.config.verify_page_ins
    ts = pager.register_safetensors(str(path))
    at = data_offset(path, "layer.1.w") + 40_000
    flip_byte(path, at)
    for _ in range(2):  # the same, typed, while the file stays changed
        with pytest.raises(htp.CorruptDataError, match=r"acquire\('layer\.1\.w'") as e:
            pager.acquire(ts["layer.1.w"], wait=True)
        assert str(path) in str(e.value) and "checksum" in str(e.value)
        assert isinstance(e.value, ValueError)  # CorruptDataError(htp.Error, ValueError)
    for name in ("layer.0.w", "layer.2.w"):
        with pager.acquired(ts[name]) as view:
            assert np.array_equal(np.from_dlpack(view), w[name])
    flip_byte(path, at)  # restored
    with pager.acquired(ts["layer.1.w"]) as view:
        assert np.array_equal(np.from_dlpack(view), w["layer.1.w"])


def test_verification_can_be_turned_off(sim, tmp_path):
    w = {"w": np.arange(8192, dtype=np.float32)}
    path = tmp_path / "ckpt.safetensors"
    safetensors_numpy.save_file(w, str(path))
    pager = htp.Pager(sim, hbm_budget="1MiB", slab_bytes="1MiB", page_bytes=4096,
                      verify_page_ins=False)
    t = pager.register_safetensors(str(path))["w"]
    flip_byte(path, data_offset(path, "w") + 3)
    with pager.acquired(t) as view:  # trusted: the changed bytes arrive
        assert not np.array_equal(np.from_dlpack(view), w["w"])
