"""Page the weights of any ``torch.nn.Module`` through htp, with no change to the model's code.

``handle = htp.torch.offload(model, hbm_budget="8GiB", keep=["model.embed_tokens", "lm_head"])``
registers every parameter with a :class:`htp.Pager` and installs forward pre/post hooks: before a
module runs, its parameters are acquired as one block and pointed at the acquired views (no copy);
after it ran they are released on the current stream. The first forward's call order becomes the
pager's cyclic schedule, so prefetch and Belady's rule work from the second step on (also under
``model.generate()``). ``handle.remove()`` restores the model. :func:`accelerate_weights` gives an
unmodified ``accelerate.cpu_offload`` the same paging. Inference by default: a backward through a
paged module is refused (autograd would read views past their release); ``training=True`` pages the
weights for backward too and :func:`offload_activations` pages saved activations (htp._training).
See docs/python.md.
"""
from __future__ import annotations

import fnmatch
import os
import weakref
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator

import torch

from . import _weights
from ._htp import (Device, InvalidArgumentError, Pager, SharedTier, Tensor, make_device,
                   parse_bytes)
from ._offloaded import (OffloadedError, OffloadedParameter, OffloadedTensor, guard_optimizer,
                         map_tensors, refuse_backward, unguard_optimizer)
from ._static import StaticOffload, static_offload
from ._training import TrainingState, offload_activations

__all__ = ["AccelerateWeights", "Offload", "OffloadedError", "OffloadedParameter",
           "OffloadedTensor", "StaticOffload", "accelerate_weights", "offload",
           "offload_activations"]

_SMALL_MODEL = 256 << 20  # below this HBM budget: 4 KiB pages and slabs sized to the budget


@dataclass
class _Param:
    name: str                       # full name in the model
    local: str                      # its name in the unit's module (module._parameters key)
    param: torch.nn.Parameter       # the model's own Parameter, in place while its module runs
    tensor: Tensor
    stand_in: OffloadedParameter | None = None  # in place between forwards


@dataclass
class _Unit:
    """A module with parameters of its own: acquired as one block around its forward."""
    name: str
    module: torch.nn.Module
    params: list[_Param]
    tensors: list[Tensor] = field(default_factory=list)  # unique, in acquire order


def _placeholder(p: torch.Tensor) -> torch.Tensor:
    """One element broadcast to the parameter's shape: what the model's own Parameter holds
    between forwards (the module holds its OffloadedParameter stand-in then, so only references
    taken before offload() see it; the guards refuse backward and optimizer steps over them)."""
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
    """``obj`` with its tensors on ``device``, every container keeping its type (map_tensors)."""
    return map_tensors(obj, lambda t: t.to(device, non_blocking=True))


class Offload:
    """What :func:`offload` returns: the pager, the paged units, ``metrics()`` and ``remove()``.

    While it is live, each paged module holds an :class:`OffloadedParameter` stand-in for each
    paged parameter between forwards, and its own Parameter (pointing at htp's view) during its
    forward. ``model.state_dict()`` (and so ``save_pretrained``) gives the true bytes, copied out
    of htp; a dtype or device conversion, ``load_state_dict``, a backward pass through a paged
    module and an optimizer step over paged parameters raise :class:`OffloadedError`.
    """

    def __init__(self, model: torch.nn.Module, pager: Pager, units: list[_Unit],
                 kept: list[tuple[torch.nn.Module, torch.device]],
                 host_copies: dict[str, torch.Tensor], training: bool = False) -> None:
        self.model, self._pager, self.units, self._kept = model, pager, units, kept
        #: copy=False: the CPU tensors that are the host copies, by parameter name (tests corrupt them)
        self.host_copies = host_copies
        self.execution_device = _execution_device(pager.device)
        self.schedule: list[Tensor] = []   # the call order recorded on the first forward
        self._recording = True
        self._spans: dict[int, tuple[int, int]] = {}  # id(param) -> (data_ptr, nbytes) while acquired
        self._hooks: list[Any] = []
        self._on_remove: list[Any] = []  # run at the end of remove() (tier entries to release)
        self._patched: list[torch.nn.Module] = []  # modules whose _apply is guarded
        # The last state_dict() call's copies, weakly (they live as long as that state dict).
        self._state_dict_copies: tuple[int, Any] = (0, weakref.WeakValueDictionary())
        #: training=True: the backward side (htp._training); None for inference
        self._train: TrainingState | None = TrainingState(self) if training else None
        self._install()
        model._htp_offload = weakref.ref(self)

    # ---- hooks ----------------------------------------------------------------------------------
    def _install(self) -> None:
        stand_ins: dict[int, OffloadedParameter] = {}  # a tied Parameter gets one, in every unit
        for unit in self.units:
            for p in unit.params:
                if id(p.param) not in stand_ins:
                    stand_ins[id(p.param)] = OffloadedParameter(p.param, p.name,
                                                                self.execution_device)
                p.stand_in = stand_ins[id(p.param)]
                if self._train is None:
                    unit.module._parameters[p.local] = p.stand_in
                    p.param.data = _placeholder(p.param)
                else:  # the module keeps its Parameter, holding its host copy between forwards
                    p.param.data = self.host_copies[p.name]
            self._hooks.append(unit.module.register_forward_pre_hook(self._pre_hook(unit)))
            self._hooks.append(unit.module.register_forward_hook(
                self._post_hook(unit), always_call=self._train is not None))
            self._hooks.append(unit.module.register_state_dict_post_hook(self._state_dict_hook(unit)))

        self._hooks.append(self.model.register_forward_pre_hook(self._model_pre, with_kwargs=True))
        self._hooks.append(self.model.register_forward_hook(self._model_post))
        for name, module, stand_ins in self._subtrees():
            self._hooks.append(module.register_load_state_dict_pre_hook(
                self._load_refusal(stand_ins)))
            module._apply = self._guarded_apply(module, stand_ins)
            self._patched.append(module)
        if self._train is None:
            guard_optimizer([p.param for unit in self.units for p in unit.params])
        elif self.execution_device.type == "cuda":
            # Gradients reach the Parameters on the GPU; the Parameters (and the optimizer's
            # step) live in the host copies, so each gradient is copied there first.
            for param in {id(p.param): p.param for u in self.units for p in u.params}.values():
                self._hooks.append(param.register_hook(
                    lambda g, param=param: g.to(param.device, non_blocking=False)))

    def _subtrees(self):
        """(name, module, {relative name: stand-in}) for every module with paged parameters in
        its subtree: where load_state_dict and conversions are refused."""
        paged = [(p.name, p.stand_in) for unit in self.units for p in unit.params]
        for name, module in self.model.named_modules():
            prefix = f"{name}." if name else ""
            mine = {n[len(prefix):]: s for n, s in paged if n.startswith(prefix)}
            if mine:
                yield name, module, mine

    def _pre_hook(self, unit: _Unit):
        def pre(module, args):
            if self._train is not None:
                self._train.before_acquire(unit)
            views = self._pager.acquire(unit.tensors)
            by_tensor = {t: torch.from_dlpack(v) for t, v in zip(unit.tensors, views)}
            for p in unit.params:
                p.param.data = by_tensor[p.tensor]
                p.param.requires_grad_(p.stand_in.requires_grad)
                module._parameters[p.local] = p.param
                self._spans[id(p.param)] = (p.param.data_ptr(), p.tensor.nbytes)
            if self._recording:
                self.schedule.extend(unit.tensors)
            if self._train is not None:
                self._train.forward_entered(unit)
        return pre

    def _post_hook(self, unit: _Unit):
        def post(module, args, output):
            if self._train is not None:
                self._train.forward_left(unit)
            for p in unit.params:
                if self._train is None:
                    module._parameters[p.local] = p.stand_in
                    p.param.data = _placeholder(p.param)
                else:
                    p.param.data = self.host_copies[p.name]
                self._spans.pop(id(p.param), None)
            self._pager.release(unit.tensors)
            if self._train is None:
                refuse_backward(output, unit.name)
            else:
                self._train.watch_output(unit, output)
        return post

    def _model_pre(self, module, args, kwargs):
        if self._train is not None:
            self._train.model_forward_starts()
        return _move(args, self.execution_device), _move(kwargs, self.execution_device)

    def _model_post(self, module, args, output):
        if self._recording and self.schedule:
            self._recording = False
            # A training step's schedule (forward, then backward) is set after its backward.
            if self._train is None or not torch.is_grad_enabled():
                self._pager.set_schedule(self.schedule, cyclic=True)

    def _state_dict_hook(self, unit: _Unit):
        def hook(module, state_dict, prefix, local_metadata):
            # One copy per htp tensor per state_dict() call, so tied parameters stay one tensor.
            key, copies = self._state_dict_copies
            if key != id(state_dict):
                copies = weakref.WeakValueDictionary()
                self._state_dict_copies = (id(state_dict), copies)
            for p in unit.params:
                entry = state_dict.get(prefix + p.local)
                if entry is None:
                    continue
                true = copies.get(p.tensor)
                if true is None:
                    host = self.host_copies.get(p.name)
                    true = host.detach() if host is not None else self._pager.copy_to_host(p.tensor)
                    copies[p.tensor] = true
                keep_vars = isinstance(entry, torch.nn.Parameter)
                state_dict[prefix + p.local] = torch.nn.Parameter(
                    true, requires_grad=entry.requires_grad) if keep_vars else true
        return hook

    def _load_refusal(self, stand_ins: dict[str, OffloadedParameter]):
        def hook(module, state_dict, prefix, *args):
            for name, s in stand_ins.items():
                if prefix + name in state_dict:
                    raise OffloadedError(
                        f"load_state_dict: parameter {s._htp_name!r} is paged by htp.torch.offload"
                        "; its host copy is htp's. Call handle.remove(), load the state dict, and "
                        "offload again")
        return hook

    def _guarded_apply(self, module: torch.nn.Module, stand_ins: dict[str, OffloadedParameter]):
        apply = type(module)._apply
        # training=True: the module holds its own Parameters (host copies); a conversion that
        # passes the stand-ins' check must not move them, so the stand-ins stand in during it.
        own = [(p.local, p.param, p.stand_in) for u in self.units if u.module is module
               for p in u.params] if self._train is not None else []

        def guarded(fn, *args, **kwargs):
            for s in stand_ins.values():
                fn(s)  # a conversion that changes a stand-in raises here, before anything moved
            for local, _, stand_in in own:
                module._parameters[local] = stand_in
            try:
                return apply(module, fn, *args, **kwargs)
            finally:
                for local, param, _ in own:
                    module._parameters[local] = param
        return guarded

    # ---- what a caller asks ---------------------------------------------------------------------
    def __deepcopy__(self, memo: Any) -> Any:
        raise OffloadedError("copy.deepcopy of an offloaded model: its weights live in htp. Call "
                             "handle.remove() first, copy, and offload each copy")

    def __reduce__(self) -> Any:
        raise OffloadedError("pickling an offloaded model (torch.save(model)): its weights live in "
                             "htp. Save model.state_dict() or use save_pretrained(), which give "
                             "the true bytes, or call handle.remove() first")

    def _live(self, call: str) -> Pager:
        if self._pager is None:
            raise InvalidArgumentError(
                f"Offload.{call}: this offload was removed (handle.remove()); the model holds its "
                "own weights again and no pager remains. Offload it again for a new handle")
        return self._pager

    @property
    def pager(self) -> Pager:
        """The pager the model pages through. Raises InvalidArgumentError after remove()."""
        return self._live("pager")

    def span_of(self, param: torch.nn.Parameter) -> tuple[int, int] | None:
        """(address, bytes) of the view a parameter points into while its module runs, else None."""
        return self._spans.get(id(param))

    def refresh(self) -> None:
        """training=True: drops the pager's HBM copies of the weights so the next forward pages
        in the host copies as they are now. Needed only after writing weights in a way their
        Parameters' version counters do not see (through ``.data`` or ``host_copies``);
        optimizer steps and other in-place updates of the Parameters are seen by themselves."""
        pager = self._live("refresh()")
        if self._train is None:
            raise InvalidArgumentError("Offload.refresh(): this offload pages read-only weights "
                                       "(offload(..., training=True) makes them trainable)")
        del pager
        self._train.refresh()

    def metrics(self) -> dict[str, Any]:
        """The pager's metrics (htp.Pager.metrics). Raises InvalidArgumentError after remove()."""
        return self._live("metrics()").metrics()

    def remove(self) -> None:
        """Removes the hooks and guards, gives every parameter its bytes back in CPU memory
        (copied out of htp; with copy=False its own tensor) and its place in its module, moves
        kept modules back, unregisters every tensor once (tied ones too) and drops the pager, so
        its pinned memory is freed now. A second call does nothing. Must not be called from inside
        the model's forward."""
        if self._pager is None:
            return
        pager = self._pager
        try:
            for h in self._hooks:
                h.remove()
            for module in self._patched:
                del module._apply
            unguard_optimizer([p.param for unit in self.units for p in unit.params])
            if self._train is not None:
                self._train.close()
            pager.synchronize()
            self._restore_parameters(pager)
            for module, device in self._kept:
                module.to(device)
            for t in {t: None for unit in self.units for t in unit.tensors}:
                pager.unregister(t)
            for done in self._on_remove:
                done()
        finally:
            self._on_remove = []
            self._hooks, self._patched = [], []
            self.units, self._pager, self.host_copies = [], None, {}
            self._spans.clear()
            if getattr(self.model, "_htp_offload", None) is not None:
                del self.model._htp_offload

    def _restore_parameters(self, pager: Pager) -> None:
        restored: dict[int, torch.Tensor] = {}
        for unit in self.units:
            for p in unit.params:
                if id(p.param) not in restored:
                    # copy=False: the caller's tensor is the authoritative copy (weights are never
                    # written back), so it is given back as it is, still pinned if it was.
                    host = self.host_copies.get(p.name)
                    restored[id(p.param)] = host if host is not None else pager.copy_to_host(p.tensor)
                p.param.data = restored[id(p.param)]
                unit.module._parameters[p.local] = p.param


def _check_not_offloaded(model: torch.nn.Module) -> None:
    """An offloaded model (or a part of one) holds stand-ins, not weights: say so."""
    live = getattr(model, "_htp_offload", None)
    if live is not None and live() is not None:
        raise InvalidArgumentError(
            "offload: this model is already offloaded by htp (a live htp.torch.Offload handle); "
            "call handle.remove() before offloading it again")
    for name, p in model.named_parameters():
        if isinstance(p, OffloadedParameter):
            raise InvalidArgumentError(
                f"offload: parameter {name!r} is already paged by htp (it is part of an offloaded "
                f"model, as {p._htp_name!r}); remove() that offload first")


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
                    compress: bool = False, source: Any = None) -> list[_Unit]:
    """Registers each unit's parameters once (tied ones too). ``source``: a function giving a
    parameter's bytes elsewhere (a mapped file, a shared tier), registered with copy=False."""
    registered: dict[int, Tensor] = {}
    host_of: dict[int, torch.Tensor] = {}  # copy=False: a Parameter's host copy, tied ones once
    units = []
    for name, module, own in raw_units:
        unit = _Unit(name, module, [])
        for pname, p in own:
            full = f"{name}.{pname}" if name else pname
            if id(p) not in registered and source is not None:
                registered[id(p)] = pager.register(full, source(p), copy=False, read_only=True)
            elif id(p) not in registered:
                src = p.detach()
                if not copy and pager.device.backend == "cuda" and not src.is_pinned():
                    src = src.pin_memory()
                registered[id(p)] = pager.register(
                    full, src, copy=copy, compress=compress and src.dtype in _COMPRESSIBLE)
                if not copy:
                    host_of[id(p)] = src
            if id(p) in host_of:  # under every name of a tied Parameter (lm_head and the embedding)
                hosts[full] = host_of[id(p)]
            t = registered[id(p)]
            unit.params.append(_Param(full, pname, p, t))
            if t not in unit.tensors:
                unit.tensors.append(t)
        units.append(unit)
    return units


def _place_kept(model: torch.nn.Module, kept, exec_device: torch.device) -> list:
    """Moves kept modules, and the buffers (rotary tables) of every module, to the execution
    device; returns (module, where it was) for remove()."""
    moved = []
    for _, module in kept:
        first = next(module.parameters(), None)
        moved.append((module, first.device if first is not None else torch.device("cpu")))
        module.to(exec_device)
    for module in model.modules():
        for bname, b in module.named_buffers(recurse=False):
            if b is not None and b.device != exec_device:
                module._buffers[bname] = b.to(exec_device)
    return moved


def offload(model: torch.nn.Module, hbm_budget: int | str, keep: Iterable[str] = (),
            device: Device | None = None, copy: bool = True, compress: bool = False,
            static: bool = False, example_inputs: Any = None,
            link_bytes_per_second: float = 25e9, weights: str | os.PathLike | None = None,
            tier: SharedTier | None = None, tier_prefix: str = "", training: bool = False,
            **config: Any) -> "Offload | StaticOffload":
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

    ``static=True``: every parameter gets one fixed address for the life of the offload, so CUDA
    graphs and ``torch.compile`` can use the model (:class:`htp._static.StaticOffload`). It needs
    ``example_inputs`` (positional args, or ``(args, kwargs)``): one forward of them records the
    module order a static plan is made for, at ``link_bytes_per_second``. ``compress=True``
    streams bfloat16, float16 and float32 parameters coded and decodes them inside the step. Not
    with ``copy=False`` or pager ``config``.

    ``weights="dir/"``: the model may be built on the meta device (under
    ``accelerate.init_empty_weights()``); its bytes come from the directory's safetensors files
    (those ``model.safetensors.index.json`` names, else every ``*.safetensors``), each mapped
    read-only and lent to the pager, every parameter registered at its offset with no copy: the
    file's page cache is the host copy, shared by every process on the machine. Parameters are
    matched by name (a tied one by any of its names), dtype and shape are checked against the
    headers; ``keep`` modules and meta buffers are copied from the files onto the execution device.

    ``tier=``: an :class:`htp.SharedTier` (:func:`htp.distributed.node_tier`): the parameters are
    published into it as ``tier_prefix`` + name (all or nothing; ranks publishing the same names
    share one copy) and paged from it with no private host copy; their own CPU memory is let go as
    with ``copy=True``. ``remove()`` gives the model copies and releases the entries.

    ``training=True``: backward and optimizer steps work (htp._training). Each paged module's
    weights are acquired again for its backward (when a gradient reaches its output: reverse order, prefetched
    from the second step on: the first step's forward and backward become the cyclic schedule);
    gradients accumulate into the model's own Parameters; between forwards each Parameter holds
    its host copy (the parameter's own CPU memory, pinned on cuda, registered without a second
    copy), which the optimizer updates in place and the next forward pages in. Not with
    ``static``, ``compress``, ``weights=`` or ``tier=`` (their host bytes are read-only). Saved
    activations: :func:`offload_activations`.
    """
    if training and (static or compress or weights is not None or tier is not None):
        raise InvalidArgumentError(
            "offload(training=True): the optimizer updates the host copies in place, so they must "
            "be the parameters' own memory; drop static=True, compress=True, weights= and tier= "
            f"(got static={static}, compress={compress}, weights={weights!r}, "
            f"tier={'set' if tier is not None else None})")
    if weights is not None or tier is not None:
        _check_sources(weights, tier, tier_prefix, copy, compress, static)
    if static:
        return _offload_static(model, hbm_budget, keep, device, copy, compress, example_inputs,
                               link_bytes_per_second, config)
    if compress and not copy:
        raise InvalidArgumentError("offload: compress=True keeps compressed copies; it needs "
                                   "copy=True")
    _check_not_offloaded(model)
    keep = list(keep)
    dev = device if device is not None else make_device("auto")
    raw_units, kept = _units_of(model, keep)
    if not raw_units:
        raise InvalidArgumentError("offload: the model has no parameters outside `keep` to page")
    unique = {id(p): p for _, _, own in raw_units for _, p in own}
    budget = parse_bytes(hbm_budget, "hbm_budget")
    _check_units_fit(raw_units, budget)
    if weights is None:
        _check_no_meta(raw_units, kept)
    if weights is not None or tier is not None:
        return _offload_from(model, dev, budget, keep, raw_units, kept, weights, tier,
                             tier_prefix, config)
    copy = copy and not training  # training: the parameters' own memory is the host copy
    pager = _make_pager(dev, budget, unique.values() if copy else (), config)
    hosts: dict[str, torch.Tensor] = {}
    units = _register_units(pager, raw_units, copy, hosts, compress)
    moved = _place_kept(model, kept, _execution_device(dev))
    return Offload(model, pager, units, moved, hosts, training=training)


def _check_no_meta(raw_units, kept) -> None:
    """A parameter on the meta device has no bytes: only weights= can page it."""
    for name, module, own in raw_units + [(n, m, list(m.named_parameters())) for n, m in kept]:
        for pname, p in own:
            if p.is_meta:
                full = ".".join(x for x in (name, pname) if x)
                raise InvalidArgumentError(
                    f"offload: parameter {full!r} is on the meta device (no bytes); pass "
                    "weights='dir/' to page the model from its safetensors files")


def _check_sources(weights: Any, tier: Any, tier_prefix: str, copy: bool, compress: bool,
                   static: bool) -> None:
    what = "weights=" if weights is not None else "tier="
    if weights is not None and tier is not None:
        raise InvalidArgumentError(
            "offload: weights= and tier= are two sources of the same bytes; pass one (the files "
            "are already shared between processes through the page cache)")
    if static or compress or not copy:
        raise InvalidArgumentError(
            f"offload({what}...): the bytes are registered in place, with no copy, for the dynamic "
            f"pager; drop static=True, compress=True and copy=False (got static={static}, "
            f"compress={compress}, copy={copy})")
    if tier is not None and not isinstance(tier, SharedTier):
        raise InvalidArgumentError(
            f"offload(tier=...): expected an htp.SharedTier (htp.distributed.node_tier()), not "
            f"{type(tier).__name__}")
    if not isinstance(tier_prefix, str):
        raise InvalidArgumentError(f"offload: tier_prefix must be a str, not {tier_prefix!r}")


def _offload_from(model: torch.nn.Module, dev: Device, budget: int, keep: list[str], raw_units,
                  kept, weights: Any, tier: SharedTier | None, tier_prefix: str,
                  config: dict[str, Any]) -> Offload:
    """offload(weights=...) or offload(tier=...): parameters registered copy=False from mapped
    files or from a node's shared tier (htp._weights)."""
    exec_device = _execution_device(dev)
    released: list[str] = []
    if weights is not None and callable(getattr(model, "tie_weights", None)):
        # A Hugging Face model made under init_empty_weights has its tied parameters apart (and
        # its checkpoint holds one of them): tie them as from_pretrained does.
        model.tie_weights()
        raw_units, kept = _units_of(model, keep)
    paged = {id(p): p for _, _, own in raw_units for _, p in own}
    if weights is not None:
        ckpt = _weights.Checkpoint(weights)
        entries = _weights.materialize_from(ckpt, model, kept, paged.values(), exec_device)
        raw_units, kept = _units_of(model, keep)  # the parameters were replaced
        pager = _make_pager(dev, budget, (), config)
        source = _weights.file_sources(ckpt, pager, entries)
    else:
        names = {}
        for name, _, own in raw_units:
            for pname, p in own:
                names.setdefault(id(p), f"{name}.{pname}" if name else pname)
        pager = _make_pager(dev, budget, (), config)
        source, released = _weights.tier_sources(
            tier, tier_prefix, pager, [(names[i], p) for i, p in paged.items()])
    try:
        units = _register_units(pager, raw_units, False, {}, source=source)
        moved = _place_kept(model, kept, exec_device)
        handle = Offload(model, pager, units, moved, {})
    except BaseException:
        if released:
            _weights.release_held(tier, released)
        raise
    if released:
        handle._on_remove.append(lambda: _weights.release_held(tier, released))
    return handle


def _offload_static(model: torch.nn.Module, hbm_budget: int | str, keep: Iterable[str],
                    device: Device | None, copy: bool, compress: bool, example_inputs: Any,
                    link_bytes_per_second: float, config: dict[str, Any]) -> StaticOffload:
    if not copy or config:
        raise InvalidArgumentError(
            "offload(static=True): copy=False and pager options are for the dynamic pager (got "
            f"copy={copy}, options {sorted(config)}); drop them, or use static=False")
    if example_inputs is None:
        raise InvalidArgumentError(
            "offload(static=True) needs example_inputs=: one forward of them records the order "
            "the modules run in, which the static plan is made for")
    _check_not_offloaded(model)
    dev = device if device is not None else make_device("auto")
    raw_units, kept = _units_of(model, list(keep))
    if not raw_units:
        raise InvalidArgumentError("offload: the model has no parameters outside `keep` to page")
    exec_device = _execution_device(dev)
    moved = _place_kept(model, kept, exec_device)
    try:
        return static_offload(model, dev, parse_bytes(hbm_budget, "hbm_budget"), raw_units,
                              moved, example_inputs, link_bytes_per_second, exec_device,
                              compress)
    except BaseException:
        for module, where in moved:
            module.to(where)
        raise


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
