"""Where :func:`htp.torch.offload` takes a model's bytes from other than its own parameters:

- ``weights="dir/"``: the model's safetensors files, each mapped read-only and lent to the pager,
  every parameter registered at its offset with ``copy=False``. The bytes are the file's pages in
  the page cache, shared by every process that maps them: no rank holds a private copy. The
  headers are read and checked in C++ (:func:`htp.safetensors_header`).
- ``tier=``: a node's :class:`htp.SharedTier`: the parameters are published into it by name
  (``tier_prefix`` + parameter name, all or nothing) and registered ``copy=False`` from it.

See docs/python.md, "A process per GPU (torchrun)".
"""
from __future__ import annotations

import json
import os
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

import numpy as np
import torch

from ._htp import InvalidArgumentError, Pager, SharedTier, safetensors_header

_DTYPES = {
    "F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
    "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8,
    "U8": torch.uint8, "BOOL": torch.bool,
}
_NAMES = {v: k for k, v in _DTYPES.items()}


def torch_view(buffer: np.ndarray, dtype: torch.dtype, shape: Iterable[int]) -> torch.Tensor:
    """A torch tensor of ``dtype`` and ``shape`` over the bytes of the numpy uint8 array
    ``buffer`` (no copy; it keeps ``buffer`` alive). A read-only buffer (a file mapped 'r', a tier
    entry) gives a tensor that must not be written: htp only reads weights."""
    shape = tuple(int(d) for d in shape)
    if buffer.size == 0:
        return torch.empty(shape, dtype=dtype)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # torch's note that the buffer is read-only
        flat = torch.frombuffer(buffer, dtype=torch.uint8)
    return flat.view(dtype).view(shape)


@dataclass
class Entry:
    """One tensor of a checkpoint: the file it lives in and its header entry."""
    name: str
    file: Path
    dtype: str
    shape: tuple[int, ...]
    begin: int
    end: int


class Checkpoint:
    """The safetensors files of a directory (those ``model.safetensors.index.json`` names when it
    is there, else every ``*.safetensors``), or one file; headers read in C++, files mapped
    read-only on first use."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)
        index = self.path / "model.safetensors.index.json"
        owner: dict[str, str] | None = None
        if self.path.is_file():
            files = [self.path]
        elif index.is_file():
            owner = json.loads(index.read_text())["weight_map"]
            files = [self.path / f for f in sorted(set(owner.values()))]
        else:
            files = sorted(self.path.glob("*.safetensors"))
        if not files:
            raise InvalidArgumentError(
                f"offload(weights={str(path)!r}): no *.safetensors file there; save the model with "
                "save_pretrained(dir, safe_serialization=True) or pass the file itself")
        self.entries: dict[str, Entry] = {}
        self._maps: dict[Path, np.memmap] = {}
        for f in files:
            for name, e in safetensors_header(str(f))["tensors"].items():
                if owner is not None and owner.get(name) != f.name:
                    continue  # the index places it in another file
                if name in self.entries:
                    raise InvalidArgumentError(
                        f"offload(weights={str(path)!r}): tensor {name!r} is in both "
                        f"{self.entries[name].file.name} and {f.name}; write an index "
                        "(model.safetensors.index.json) or remove one")
                self.entries[name] = Entry(name, f, e["dtype"], tuple(e["shape"]), e["begin"],
                                           e["end"])

    def mapping(self, file: Path) -> np.memmap:
        """The whole file, mapped read-only (once)."""
        if file not in self._maps:
            self._maps[file] = np.memmap(file, dtype=np.uint8, mode="r")
        return self._maps[file]

    def tensor(self, e: Entry) -> torch.Tensor:
        """The entry's bytes in the mapped file, as a read-only torch tensor (no copy)."""
        return torch_view(self.mapping(e.file)[e.begin:e.end], _DTYPES[e.dtype], e.shape)

    def entry_for(self, names: list[str], like: torch.Tensor, what: str) -> Entry:
        """The entry of the first of ``names`` (a parameter and its tied aliases) the files hold,
        checked against ``like``'s dtype and shape. Raises InvalidArgumentError naming the tensor
        when none is there or it differs."""
        e = next((self.entries[n] for n in names if n in self.entries), None)
        if e is None:
            aka = f" (tied: {', '.join(map(repr, names[1:]))})" if len(names) > 1 else ""
            raise InvalidArgumentError(
                f"offload(weights={str(self.path)!r}): {what} {names[0]!r}{aka} is in none of its "
                f"{len({x.file for x in self.entries.values()})} safetensors files; pass the "
                "directory the model was saved to, or name its module in keep= only if it has "
                "real bytes")
        want = _NAMES.get(like.dtype)
        if e.dtype != want or e.shape != tuple(like.shape):
            raise InvalidArgumentError(
                f"offload(weights={str(self.path)!r}): {what} {e.name!r} is {like.dtype} of shape "
                f"{tuple(like.shape)} in the model but {e.dtype} of shape {list(e.shape)} in "
                f"{e.file.name}; build the model with the checkpoint's dtype (torch_dtype=) and "
                "config")
        return e


def aliases(model: torch.nn.Module) -> dict[int, list[str]]:
    """Every name of each parameter (tied ones have several), by id, in the model's order."""
    out: dict[int, list[str]] = {}
    for name, p in model.named_parameters(remove_duplicate=False):
        out.setdefault(id(p), []).append(name)
    return out


def replace_everywhere(model: torch.nn.Module, old: torch.Tensor, new: torch.Tensor,
                       buffers: bool = False) -> None:
    """Puts ``new`` wherever ``old`` is a parameter (or a buffer) of a module of ``model``, so
    ties stay ties."""
    for module in model.modules():
        table = module._buffers if buffers else module._parameters
        for k, v in list(table.items()):
            if v is old:
                table[k] = new


def materialize_from(ckpt: Checkpoint, model: torch.nn.Module, kept_modules: list,
                     paged: Iterable[torch.nn.Parameter], exec_device: torch.device) -> dict:
    """Checks that the files hold every paged parameter, every parameter of the kept modules and
    every buffer on the meta device, with the model's dtypes and shapes, before changing anything;
    then copies the kept parameters and meta buffers from the files onto ``exec_device`` and gives
    each paged parameter on the meta device a CPU placeholder (its bytes will be the file's).
    Returns {id(new parameter): entry} for the paged ones."""
    names = aliases(model)
    kept = {id(p): p for _, m in kept_modules for p in m.parameters()}
    paged = {id(p): p for p in paged}
    entries = {i: ckpt.entry_for(names[i], p, "parameter") for i, p in {**paged, **kept}.items()}
    meta_buffers, missing = {}, []
    for name, module in model.named_modules():
        for bname, b in module._buffers.items():
            if b is not None and b.is_meta and id(b) not in meta_buffers:
                full = f"{name}.{bname}" if name else bname
                if full in ckpt.entries:
                    meta_buffers[id(b)] = (b, ckpt.entry_for([full], b, "buffer"))
                else:
                    missing.append(full)
    if missing:
        raise InvalidArgumentError(
            f"offload(weights={str(ckpt.path)!r}): buffers {missing} are on the meta device and "
            "not in the files (computed at construction, such as rotary tables); build the model "
            "under accelerate.init_empty_weights(), which keeps buffers real, rather than "
            "torch.device('meta')")
    for b, e in meta_buffers.values():
        replace_everywhere(model, b, ckpt.tensor(e).to(exec_device, copy=True), buffers=True)
    out = {}
    for i, p in {**paged, **kept}.items():
        if i in kept:
            data = ckpt.tensor(entries[i]).to(exec_device, copy=True)
        elif p.is_meta:
            data = torch.zeros((), dtype=p.dtype).expand(p.shape)
        else:
            out[i] = entries[i]
            continue
        new = torch.nn.Parameter(data, requires_grad=p.requires_grad)
        replace_everywhere(model, p, new)
        if i in paged:
            out[id(new)] = entries[i]
    return out


def file_sources(ckpt: Checkpoint, pager: Pager, entries: dict[int, Entry]
                 ) -> Callable[[torch.nn.Parameter], torch.Tensor]:
    """Lends every file that holds a paged parameter to ``pager`` read-only (one region each) and
    returns the function that gives a parameter's bytes in its mapped file."""
    for f in sorted({e.file for e in entries.values()}):
        if ckpt.mapping(f).size:
            pager.lend(ckpt.mapping(f), read_only=True)
    return lambda p: ckpt.tensor(entries[id(p)])


# Tier entries each offload of this process holds, by tier handle: the tier counts one hold per
# process, so a second offload of the same names would be freed by the first one's remove().
_HELD: dict[tuple[str, int, int], set[str]] = {}


def release_held(tier: SharedTier, names: list[str]) -> None:
    """Releases entries an offload published (on remove, or when it failed)."""
    key = (tier.name, tier.slot, id(tier))
    held = _HELD.get(key, set())
    for n in names:
        held.discard(n)
        tier.release(n)
    if not held:
        _HELD.pop(key, None)  # no set left behind per tier handle


def _check_same_bytes(tier: SharedTier, names: list[str], arrays: list[np.ndarray],
                      params: list[tuple[str, torch.nn.Parameter]]) -> None:
    """Another process published these names first: its bytes must be this process's, or a rank
    would page another rank's weights (tensor-parallel shards share names and shapes) silently."""
    for n, a, (_, p) in zip(names, arrays, params):
        nbytes = p.numel() * p.element_size()
        mine = p.detach().contiguous().reshape(-1).view(torch.uint8).numpy()
        if not np.array_equal(a[:nbytes], mine):
            raise InvalidArgumentError(
                f"offload(tier=...): tier {tier.name!r} already holds entry {n!r}, published by "
                "another process, with other bytes than this process's parameter: ranks with "
                "different weights (tensor-parallel shards) need their own tier_prefix, e.g. "
                "tier_prefix=f'rank{rank}/'")


def tier_sources(tier: SharedTier, prefix: str, pager: Pager,
                 params: list[tuple[str, torch.nn.Parameter]]
                 ) -> tuple[Callable[[torch.nn.Parameter], torch.Tensor], list[str]]:
    """Publishes ``params`` (full name, parameter; one per tensor) into ``tier`` as ``prefix`` +
    name, all or nothing (a rank that races another on the same names gets the bytes the other
    wrote), lends the tier's data area to ``pager`` and returns the function that gives a
    parameter's bytes in the tier, and the entry names (to release on remove)."""
    for name, p in params:
        if p.is_meta:
            raise InvalidArgumentError(
                f"offload(tier=...): parameter {name!r} is on the meta device and has no bytes to "
                "publish; load it first, or pass weights= to page it from its files")
    names = [prefix + n for n, _ in params]
    key = (tier.name, tier.slot, id(tier))
    held = _HELD.setdefault(key, set())
    twice = held.intersection(names)
    if twice:
        raise InvalidArgumentError(
            f"offload(tier=...): this process already holds tier entry {sorted(twice)[0]!r} of "
            f"tier {tier.name!r} for another offload; give each offload its own tier_prefix")
    batch = [(n, max(1, p.numel() * p.element_size())) for n, (_, p) in zip(names, params)]
    filled = [False]

    def fill(arrays: list[np.ndarray]) -> None:
        filled[0] = True
        for a, (_, p) in zip(arrays, params):
            if p.numel():
                torch_view(a, p.dtype, p.shape).copy_(p.detach())
    arrays = tier.publish(batch, fill)
    try:
        if not filled[0]:
            _check_same_bytes(tier, names, arrays, params)
        pager.lend(tier.data)
    except BaseException:
        for n in names:
            tier.release(n)
        raise
    held.update(names)
    by_id = {id(p): torch_view(a[:p.numel() * p.element_size()], p.dtype, p.shape)
             for a, (_, p) in zip(arrays, params)}
    return (lambda p: by_id[id(p)]), names
