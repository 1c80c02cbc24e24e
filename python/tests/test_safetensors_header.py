"""Pager.register_safetensors reads and checks the header in C++ (htp/safetensors.hpp): each broken
rule is an htp.CorruptDataError naming the tensor and the field, a missing file an htp.IoError (an
OSError) naming the path, nothing stays registered after an error, and a valid file's tensors page
in bit-exact on sim."""
from __future__ import annotations

import errno
import json
import re
import struct

import numpy as np
import pytest

import htp


def write_raw(path, header, data: bytes = b"", length: int | None = None) -> None:
    """A file of an 8-byte length (``length`` or the header's), the header (a dict as JSON, or
    text as it is) and ``data``."""
    text = (json.dumps(header) if isinstance(header, dict) else header).encode()
    path.write_bytes(struct.pack("<Q", len(text) if length is None else length) + text + data)


def u8(begin: int, end: int, shape=None) -> dict:
    return {"dtype": "U8", "shape": [end - begin] if shape is None else shape,
            "data_offsets": [begin, end]}


def refuses(pager, path, *needles: str) -> None:
    with pytest.raises(htp.CorruptDataError) as e:
        pager.register_safetensors(str(path))
    for n in (str(path),) + needles:
        assert n in str(e.value), (n, str(e.value))
    assert pager.metrics()["registered_tensors"] == 0


def test_a_short_data_span_is_refused_naming_the_tensor_and_field(pager, tmp_path):
    path = tmp_path / "short.safetensors"  # F32 [64, 32] is 8192 bytes; the span is 16
    write_raw(path, {"w": {"dtype": "F32", "shape": [64, 32], "data_offsets": [0, 16]}}, bytes(16))
    refuses(pager, path, "tensor 'w'", '"data_offsets"', "spans 16 bytes", "takes 8192 bytes")


def test_reversed_offsets_are_refused_not_dropped(pager, tmp_path):
    path = tmp_path / "reversed.safetensors"
    write_raw(path, {"a": u8(0, 16), "b": {"dtype": "U8", "shape": [0], "data_offsets": [32, 16]}},
              bytes(32))
    refuses(pager, path, "tensor 'b'", '"data_offsets"', "begin > end")


def test_a_negative_offset_is_refused(pager, tmp_path):
    path = tmp_path / "negative.safetensors"  # would read the JSON header as weights
    write_raw(path, {"w": {"dtype": "U8", "shape": [24], "data_offsets": [-8, 16]}}, bytes(16))
    refuses(pager, path, "tensor 'w'", '"data_offsets"', "non-negative")


@pytest.mark.parametrize("header, data, needles", [
    ({"a": u8(0, 16), "b": u8(8, 24)}, 24, ("tensor 'b'", "overlaps tensor 'a'")),
    ({"a": u8(0, 16), "b": u8(20, 36)}, 36, ("tensor 'b'", "gap of 4 bytes")),
    ({"a": u8(0, 16)}, 20, ("tensor 'a'", '"data_offsets"', "end of the file")),
    ({"a": u8(0, 64)}, 16, ("tensor 'a'", '"data_offsets"', "past the end of the file")),
    ({"a": {"dtype": "F31", "shape": [4], "data_offsets": [0, 16]}}, 16, ("tensor 'a'", '"dtype"')),
    ({"a": u8(0, 16, shape=[4, -4])}, 16, ("tensor 'a'", '"shape"', "dimension 1 is -4")),
    ({"a": u8(0, 16, shape="16")}, 16, ("tensor 'a'", '"shape"')),
    ({"__metadata__": {"n": 1}, "a": u8(0, 16)}, 16, ('"__metadata__"', "'n'")),
])
def test_each_broken_rule_is_a_corrupt_data_error(pager, tmp_path, header, data, needles):
    path = tmp_path / "bad.safetensors"
    write_raw(path, header, bytes(data))
    refuses(pager, path, *needles)


def test_a_four_byte_file_is_refused(pager, tmp_path):
    path = tmp_path / "tiny.safetensors"
    path.write_bytes(b"abcd")
    refuses(pager, path, '"header length"', "4 bytes")


def test_a_truncated_header_is_refused(pager, tmp_path):
    path = tmp_path / "truncated.safetensors"
    text = json.dumps({"w": u8(0, 16)})
    write_raw(path, text[:20], length=len(text))  # the length claims more than the file holds
    refuses(pager, path, '"header length"', "does not fit")
    write_raw(path, text[:20])  # the JSON itself ends early
    refuses(pager, path, '"header"', "not valid JSON")
    write_raw(path, "not json", bytes(8))
    refuses(pager, path, '"header"')


def test_a_missing_file_is_an_io_error_naming_the_path(pager, tmp_path):
    path = tmp_path / "absent.safetensors"
    with pytest.raises(htp.IoError) as e:
        pager.register_safetensors(str(path))
    assert isinstance(e.value, OSError) and isinstance(e.value, htp.Error)
    assert str(path) in str(e.value) and e.value.errno == errno.ENOENT
    with pytest.raises(OSError, match=re.escape(str(path))):
        pager.register_companion(str(path))


def test_a_valid_file_pages_in_bit_exact_on_sim(sim, tmp_path):
    torch = pytest.importorskip("torch")
    safetensors_torch = pytest.importorskip("safetensors.torch")
    gen = torch.Generator().manual_seed(7)
    tensors = {
        "w": torch.randn(64, 32, generator=gen).to(torch.bfloat16),
        "f": torch.randn(300, generator=gen),
        "ids": torch.arange(17, dtype=torch.int64),
        "mask": torch.rand(5, 3, generator=gen) > 0.5,
        "empty": torch.zeros(0, 4),
    }
    path = tmp_path / "model.safetensors"
    safetensors_torch.save_file(tensors, str(path), metadata={"format": "pt"})
    p = htp.Pager(sim, hbm_budget="1MiB", host_budget="4MiB", slab_bytes="1MiB", page_bytes=4096)
    ts = p.register_safetensors(path)
    assert sorted(ts) == ["f", "ids", "mask", "w"]  # no elements: skipped
    assert ts["w"].dtype == "bfloat16" and ts["w"].shape == (64, 32)
    assert p.metrics()["file_backed_tensors"] == 4
    for _ in range(2):  # a page-in from the file, an eviction, and a second page-in
        for name, t in ts.items():
            with p.acquired(t) as v:
                got = torch.from_dlpack(v)
                assert got.dtype == tensors[name].dtype and got.shape == tensors[name].shape
                assert torch.equal(got.view(torch.uint8), tensors[name].view(torch.uint8)), name
            p.evict(t)
    assert p.register_safetensors(path, ["empty"]) == {}


def test_registration_is_all_or_nothing(pager, tmp_path):
    path = tmp_path / "mixed.safetensors"
    header = {"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},
              "z": {"dtype": "F8_E4M3", "shape": [16], "data_offsets": [16, 32]}}
    write_raw(path, header, np.arange(8, dtype=np.float32).tobytes())
    with pytest.raises(htp.InvalidArgumentError, match="tensor 'z'.*F8_E4M3"):
        pager.register_safetensors(str(path))
    with pytest.raises(htp.InvalidArgumentError, match="has no tensor named 'nope'"):
        pager.register_safetensors(str(path), ["a", "nope"])
    assert pager.metrics()["registered_tensors"] == 0
    ts = pager.register_safetensors(str(path), ["a"])
    with pager.acquired(ts["a"]) as v:
        assert np.array_equal(np.from_dlpack(v), np.arange(4, dtype=np.float32))
