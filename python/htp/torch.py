"""Page the weights of any ``torch.nn.Module`` through htp, with no change to the model's code.

``handle = htp.torch.offload(model, hbm_budget="8GiB", keep=["model.embed_tokens", "lm_head"])``
registers every parameter with a :class:`htp.Pager` and installs forward pre/post hooks: before a
module runs, its parameters are acquired as one block and pointed at the acquired views (no copy);
after it ran they are released on the current stream. The first forward's call order becomes the
pager's cyclic schedule, so prefetch and Belady's rule work from the second step on (also under
``model.generate()``). ``handle.remove()`` restores the model. :func:`accelerate_weights` gives an
unmodified ``accelerate.cpu_offload`` the same paging. Inference only (``torch.no_grad``): autograd
would keep views past their release. See docs/python.md.
"""
from __future__ import annotations

import fnmatch
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator

import torch

from ._config import parse_bytes
from ._htp import Device, InvalidArgumentError, Tensor
from ._config import make_device
from ._pager import Pager

_SMALL_MODEL = 256 << 20  # below this HBM budget: 4 KiB pages and slabs sized to the budget


@dataclass
class _Param:
    name: str
    param: torch.nn.Parameter
    tensor: Tensor


@dataclass
class _Unit:
    """A module with parameters of its own: acquired as one block around its forward."""
    name: str
    module: torch.nn.Module
    params: list[_Param]
    tensors: list[Tensor] = field(default_factory=list)  # unique, in acquire order


def _placeholder(p: torch.Tensor) -> torch.Tensor:
    """One element broadcast to the parameter's shape: dtype and shape stay, the bytes go."""
    return torch.zeros((), dtype=p.dtype, device="cpu").expand(p.shape)


def _make_pager(dev: Device, hbm_budget: int, host_params: Iterable[torch.Tensor],
                config: dict[str, Any]) -> Pager:
    """A pager for a model: lookahead 8, small slabs and pages under a small budget, and a host tier
    that holds `host_params` (none: caller memory only) with room for page and bin rounding."""
    host_bytes = sum(((p.numel() * p.element_size() + 4095) // 4096) * 4096 for p in host_params)
    opts = dict(prefetch_lookahead=8)
    if hbm_budget < _SMALL_MODEL:
        slab = 1 << max(16, (hbm_budget // 2).bit_length() - 1)
        opts.update(slab_bytes=slab, page_bytes=4096)
    opts.update(config)
    page = parse_bytes(opts.get("page_bytes") or 65536)
    slab = parse_bytes(opts.get("slab_bytes", 64 << 20))
    opts.setdefault("host_budget", host_bytes * 5 // 4 + 2 * page + slab if host_bytes else 0)
    return Pager(dev, hbm_budget, **opts)


def _is_kept(name: str, keep: Iterable[str]) -> bool:
    return any(name == k or name.startswith(k + ".") or fnmatch.fnmatch(name, k) for k in keep)


def _execution_device(dev: Device) -> torch.device:
    return torch.device("cuda", dev.ordinal) if dev.backend == "cuda" else torch.device("cpu")


def _move(obj: Any, device: torch.device) -> Any:
    if isinstance(obj, torch.Tensor):
        return obj.to(device, non_blocking=True)
    if isinstance(obj, (list, tuple)):
        return type(obj)(_move(o, device) for o in obj)
    if isinstance(obj, dict):
        return {k: _move(v, device) for k, v in obj.items()}
    return obj


class Offload:
    """What :func:`offload` returns: the pager, the paged units, ``metrics()`` and ``remove()``."""

    def __init__(self, model: torch.nn.Module, pager: Pager, units: list[_Unit],
                 kept: list[tuple[torch.nn.Module, torch.device]],
                 host_copies: dict[str, torch.Tensor]) -> None:
        self.model, self.pager, self.units, self._kept = model, pager, units, kept
        #: copy=False: the CPU tensors that are the host copies, by parameter name (tests corrupt them)
        self.host_copies = host_copies
        self.execution_device = _execution_device(pager.device)
        self.schedule: list[Tensor] = []   # the call order recorded on the first forward
        self._recording = True
        self._spans: dict[int, tuple[int, int]] = {}  # id(param) -> (data_ptr, nbytes) while acquired
        self._hooks: list[Any] = []
        self._install()

    # ---- hooks ----------------------------------------------------------------------------------
    def _install(self) -> None:
        for unit in self.units:
            self._hooks.append(unit.module.register_forward_pre_hook(self._pre_hook(unit)))
            self._hooks.append(unit.module.register_forward_hook(self._post_hook(unit)))
        self._hooks.append(self.model.register_forward_pre_hook(self._model_pre, with_kwargs=True))
        self._hooks.append(self.model.register_forward_hook(self._model_post))

    def _pre_hook(self, unit: _Unit):
        def pre(module, args):
            views = self.pager.acquire(unit.tensors)
            by_tensor = {t: torch.from_dlpack(v) for t, v in zip(unit.tensors, views)}
            for p in unit.params:
                p.param.data = by_tensor[p.tensor]
                self._spans[id(p.param)] = (p.param.data_ptr(), p.tensor.nbytes)
            if self._recording:
                self.schedule.extend(unit.tensors)
        return pre

    def _post_hook(self, unit: _Unit):
        def post(module, args, output):
            for p in unit.params:
                p.param.data = _placeholder(p.param)
                self._spans.pop(id(p.param), None)
            self.pager.release(unit.tensors)
        return post

    def _model_pre(self, module, args, kwargs):
        return _move(args, self.execution_device), _move(kwargs, self.execution_device)

    def _model_post(self, module, args, output):
        if self._recording and self.schedule:
            self._recording = False
            self.pager.set_schedule(self.schedule, cyclic=True)

    # ---- what a caller asks ---------------------------------------------------------------------
    def span_of(self, param: torch.nn.Parameter) -> tuple[int, int] | None:
        """(address, bytes) of the view a parameter points into while its module runs, else None."""
        return self._spans.get(id(param))

    def metrics(self) -> dict[str, Any]:
        """The pager's metrics (htp.Pager.metrics)."""
        return self.pager.metrics()

    def remove(self) -> None:
        """Removes the hooks, gives every parameter its bytes back in CPU memory (copied out of
        htp; with copy=False its own tensor), moves kept modules back, and drops the pager (its
        pinned memory is freed)."""
        if self.pager is None:
            return
        for h in self._hooks:
            h.remove()
        self.pager.synchronize()
        for unit in self.units:
            for p in unit.params:
                # copy=False: the caller's tensor is the authoritative copy (weights are never
                # written back), so it is given back as it is, still pinned if it was.
                host = self.host_copies.get(p.name)
                p.param.data = host if host is not None else self.pager.copy_to_host(p.tensor)
        for module, device in self._kept:
            module.to(device)
        for unit in self.units:
            for t in unit.tensors:
                self.pager.unregister(t)
        self.units, self.pager, self.host_copies = [], None, {}


def _units_of(model: torch.nn.Module, keep: Iterable[str]):
    units, kept, kept_params = [], [], set()
    for name, module in model.named_modules():
        if _is_kept(name, keep) and not any(_is_kept(n, keep) for n in _parents(name)):
            kept.append((name, module))
            kept_params.update(id(p) for p in module.parameters())
    for name, module in model.named_modules():
        own = [(n, p) for n, p in module.named_parameters(recurse=False) if id(p) not in kept_params]
        if own and not _is_kept(name, keep):
            units.append((name, module, own))
    return units, kept


def _parents(name: str) -> list[str]:
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def _check_units_fit(raw_units, budget: int) -> None:
    """Every unit is acquired whole, so each must fit the budget with room to spare for the
    allocator's rounding and the next unit's prefetch; say which one does not, and what to do."""
    for name, _, own in raw_units:
        need = sum(p.numel() * p.element_size() for _, p in own)
        if need > budget * 3 // 4:
            raise InvalidArgumentError(
                f"offload: module {name!r} needs {need} bytes at once, over 3/4 of hbm_budget "
                f"({budget}); raise hbm_budget or name it in keep= to hold it resident")


_COMPRESSIBLE = (torch.bfloat16, torch.float16, torch.float32)


def _register_units(pager: Pager, raw_units, copy: bool, hosts: dict[str, torch.Tensor],
                    compress: bool = False) -> list[_Unit]:
    registered: dict[int, Tensor] = {}
    units = []
    for name, module, own in raw_units:
        unit = _Unit(name, module, [])
        for pname, p in own:
            full = f"{name}.{pname}" if name else pname
            if id(p) not in registered:
                src = p.detach()
                if not copy and pager.device.backend == "cuda" and not src.is_pinned():
                    src = src.pin_memory()
                registered[id(p)] = pager.register(
                    full, src, copy=copy, compress=compress and src.dtype in _COMPRESSIBLE)
                if not copy:
                    hosts[full] = src
            t = registered[id(p)]
            unit.params.append(_Param(full, p, t))
            if t not in unit.tensors:
                unit.tensors.append(t)
        units.append(unit)
    return units


def offload(model: torch.nn.Module, hbm_budget: int | str, keep: Iterable[str] = (),
            device: Device | None = None, copy: bool = True, compress: bool = False,
            **config: Any) -> Offload:
    """Pages ``model``'s parameters through a new pager of ``hbm_budget`` bytes of GPU memory.

    ``keep``: module names (or fnmatch patterns: ``"*norm"``) whose parameters stay resident on the
    execution device (embeddings, lm_head, norms). ``device``: an htp device (default
    ``htp.make_device("auto")``): the model runs on its GPU (``cuda:ordinal``) on cuda and on the
    CPU on sim. ``copy=True``: the parameters are copied into htp's pinned tier and their CPU
    memory is let go; ``copy=False``: their CPU memory (pinned first on cuda) is the host copy,
    without a second one. ``compress=True`` (with ``copy=True``): bfloat16, float16 and float32
    parameters are kept entropy-coded and decoded on the GPU at each page-in (about two thirds of
    the bytes cross the link for bf16); others are kept as they are. ``config``: any PagerConfig
    field by name (``prefetch_lookahead``,
    ``eviction``, ``checked``, ``host_budget``, ...). Tensors are registered now; hooks do the rest.
    """
    if compress and not copy:
        raise InvalidArgumentError("offload: compress=True keeps compressed copies; it needs "
                                   "copy=True")
    keep = list(keep)
    dev = device if device is not None else make_device("auto")
    raw_units, kept = _units_of(model, keep)
    if not raw_units:
        raise InvalidArgumentError("offload: the model has no parameters outside `keep` to page")
    unique = {id(p): p for _, _, own in raw_units for _, p in own}
    budget = parse_bytes(hbm_budget, "hbm_budget")
    _check_units_fit(raw_units, budget)
    pager = _make_pager(dev, budget, unique.values() if copy else (), config)
    hosts: dict[str, torch.Tensor] = {}
    units = _register_units(pager, raw_units, copy, hosts, compress)
    for unit in units:
        for p in unit.params:
            p.param.data = _placeholder(p.param)
    exec_device = _execution_device(dev)
    moved = []
    for _, module in kept:
        first = next(module.parameters(), None)
        moved.append((module, first.device if first is not None else torch.device("cpu")))
        module.to(exec_device)
    for module in model.modules():  # buffers (rotary tables) of paged modules live on the GPU
        for bname, b in module.named_buffers(recurse=False):
            if b is not None and b.device != exec_device:
                module._buffers[bname] = b.to(exec_device)
    return Offload(model, pager, units, moved, hosts)


class AccelerateWeights(Mapping):
    """A state-dict-like mapping for ``accelerate.cpu_offload(model, execution_device=...,
    state_dict=weights)``: each lookup acquires the parameter through htp and returns a zero-copy
    view on the execution device; a forward hook releases it after accelerate's own post-forward
    has dropped it. Make it before calling cpu_offload (it reads the parameters' bytes)."""

    def __init__(self, model: torch.nn.Module, pager: Pager) -> None:
        self.pager = pager
        self._tensors: dict[str, Tensor] = {}
        self._held: dict[str, list[Tensor]] = {}
        self._hooks = []
        registered: dict[int, Tensor] = {}
        for name, p in model.named_parameters(remove_duplicate=False):
            if id(p) not in registered:
                registered[id(p)] = pager.register(name, p.detach())
            self._tensors[name] = registered[id(p)]
        for mname, module in model.named_modules():
            if any(True for _ in module.parameters(recurse=False)):
                self._hooks.append(module.register_forward_hook(self._releaser(mname)))

    def _releaser(self, prefix: str):
        def post(module, args, output):
            held = self._held.pop(prefix, [])
            if held:
                self.pager.release(held)
        return post

    def __getitem__(self, key: str) -> torch.Tensor:
        t = self._tensors[key]
        prefix = key.rpartition(".")[0]
        view = self.pager.acquire(t)
        self._held.setdefault(prefix, []).append(t)
        return torch.from_dlpack(view)

    def __iter__(self) -> Iterator[str]:
        return iter(self._tensors)

    def __len__(self) -> int:
        return len(self._tensors)

    def close(self) -> None:
        """Removes the release hooks and drops every tensor (call after accelerate's hooks are gone)."""
        for h in self._hooks:
            h.remove()
        for prefix, held in self._held.items():
            self.pager.release(held)
        self._held.clear()
        for t in set(self._tensors.values()):
            self.pager.unregister(t)
        self._tensors.clear()


def accelerate_weights(model: torch.nn.Module, hbm_budget: int | str, device: Device | None = None,
                       **config: Any) -> AccelerateWeights:
    """An :class:`AccelerateWeights` over a new pager (options as for :func:`offload`)."""
    dev = device if device is not None else make_device("auto")
    budget = parse_bytes(hbm_budget, "hbm_budget")
    return AccelerateWeights(model, _make_pager(dev, budget, model.parameters(), config))


def belady_page_in_bytes(schedule: list[Tensor], capacity: int, steps: int) -> int:
    """Bytes Belady's rule pages in over ``steps`` repetitions of ``schedule`` after the first (a
    warm cache), with ``capacity`` bytes of HBM and no page rounding: the yardstick the bench
    reports htp's page-in bytes against (for equal sizes it is the minimum)."""
    seq = schedule * (steps + 1)
    n = len(schedule)
    next_use: list[int] = [0] * len(seq)
    last: dict[Tensor, int] = {}
    for i in range(len(seq) - 1, -1, -1):
        next_use[i] = last.get(seq[i], 1 << 62)
        last[seq[i]] = i
    resident: dict[Tensor, int] = {}  # tensor -> its next use
    used, paged = 0, 0
    for i, t in enumerate(seq):
        if t not in resident:
            while used + t.nbytes > capacity and resident:
                victim = max(resident, key=resident.get)
                used -= victim.nbytes
                del resident[victim]
            if i >= n:
                paged += t.nbytes
            used += t.nbytes
        resident[t] = next_use[i]
    return paged
