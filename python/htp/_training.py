"""Training through ``htp.torch.offload(model, ..., training=True)`` and
:func:`offload_activations` (docs/python.md, "Training").

Weights. Autograd keeps, for each op, the tensors its backward needs; for a paged module these
include its weights (``W.t()`` for a linear layer), which are zero-copy views of htp memory that
the pager reuses once the module's forward has released them. While a unit's forward runs, a
saved-tensor pack hook turns every saved tensor that lies in one of its acquired weights into a
token (the pager tensor, the view's layout and the parameter's version). In backward, the first
gradient to reach a unit's output (a hook on that tensor) acquires the unit's weights again and
holds them while the next unit's backward starts (the pager's schedule, recorded over the first
step, runs forward then backward, so they are prefetched in reverse order); the unpack hook
rebuilds the saved tensor on the held memory. A token unpacked while its unit is not held is
served from a copy taken under a short acquire, so a saved weight is never read from memory the
pager has reused. Module full backward hooks are not used: they put nodes into the graph that
change the order autograd sums gradients in, so the gradients would not be bit-identical.

Gradients need no routing: during its forward the module runs with the model's own Parameter
(its ``.data`` pointed at the acquired view), so autograd accumulates ``.grad`` into that
Parameter. Between forwards each paged Parameter's ``.data`` is its host copy (registered with the
pager without a copy), so ``optimizer.step()`` updates the host copies in place; the forward
pre-hook sees the Parameter's version counter moved and evicts the stale HBM copy before
acquiring, so the next page-in brings the new bytes. An optimizer step pre-hook waits for the
pager's copies first (a page-in must not read a host copy the step is writing).

Activations. :func:`offload_activations` is a ``saved_tensors_hooks`` context: each saved
activation is copied into a pager tensor of kind ``'activation'`` (a slot, reused by position from
step to step, so the schedule the first step records holds from then on), acquired fresh (nothing
paged in) and released dirty; the pager keeps it in HBM while there is room and writes it back
only when it evicts it while live. Backward acquires the slot (paged in if it was evicted,
prefetched in backward order), copies the bytes out (the saved layout kept) and releases it. When
autograd drops the saved tensor the slot is discarded (``Pager.discard``): its HBM is free at
once and its dead bytes are never written back.
"""
from __future__ import annotations

import threading
import weakref
from dataclasses import dataclass, field
from typing import Any, Callable

import torch
from torch.optim.optimizer import register_optimizer_step_pre_hook

from ._htp import InvalidArgumentError, Pager, Tensor
from ._offloaded import OffloadedError, tensors_in

__all__ = ["TrainingState", "offload_activations"]

_HELD_UNITS = 2  # units whose weights backward holds at once (the unit running, the one before)


# ---- saved-tensor hooks stacking ----------------------------------------------------------------
class _Outer:
    """What the hooks below ours packed (ours only take the tensors they own)."""
    __slots__ = ("packed", "unpack")

    def __init__(self, packed: Any, unpack: Callable[[Any], torch.Tensor]) -> None:
        self.packed, self.unpack = packed, unpack


def _push(pack: Callable[[torch.Tensor, Any], Any]) -> None:
    """Pushes saved-tensor hooks whose pack is ``pack(t, outer)``: tensors it does not take go to
    the hooks that were active before (``outer``), or stay with autograd (detached)."""
    outer = torch._C._autograd._top_saved_tensors_default_hooks(False)

    def default(t: torch.Tensor) -> Any:
        if outer is None:
            return t.detach()
        return _Outer(outer[0](t), outer[1])

    torch._C._autograd._push_saved_tensors_default_hooks(lambda t: pack(t, default), _unpack)


def _pop() -> None:
    torch._C._autograd._pop_saved_tensors_default_hooks()


def _unpack(packed: Any) -> torch.Tensor:
    if isinstance(packed, _Outer):
        return packed.unpack(packed.packed)
    if isinstance(packed, (_WeightToken, _Packed)):
        return packed.unpack()
    return packed


def _rebuild(view: torch.Tensor, dtype: torch.dtype, byte_offset: int, size, stride) -> torch.Tensor:
    """A tensor of `dtype`, `size`, `stride` at `byte_offset` bytes into `view`'s storage."""
    esize = torch.empty((), dtype=dtype).element_size()
    start = view.storage_offset() * view.element_size() + byte_offset
    out = torch.empty((0,), dtype=dtype, device=view.device)
    with torch.no_grad():
        out.set_(view.untyped_storage(), start // esize, size, stride)
    return out


# ---- weights -------------------------------------------------------------------------------------
@dataclass
class _Live:
    """A weight acquired for a unit's forward: where its view is, which parameter it is."""
    tensor: Tensor
    param: torch.nn.Parameter
    name: str
    base_bytes: int   # the view's offset into its storage, in bytes


class _WeightToken:
    """A saved tensor that lies in a paged weight: rebuilt on that weight's memory in backward."""
    __slots__ = ("state", "live", "dtype", "byte_offset", "size", "stride", "version")

    def __init__(self, state: "TrainingState", live: _Live, t: torch.Tensor) -> None:
        self.state, self.live = state, live
        self.dtype, self.size, self.stride = t.dtype, t.size(), t.stride()
        self.byte_offset = t.storage_offset() * t.element_size() - live.base_bytes
        self.version = live.param._version

    def unpack(self) -> torch.Tensor:
        return self.state._unpack_weight(self)


@dataclass
class _Held:
    views: dict = field(default_factory=dict)   # Tensor -> torch.Tensor (the acquired view)
    count: int = 0


class TrainingState:
    """The training side of an :class:`htp.torch.Offload` made with ``training=True``: the
    saved-tensor hooks around each unit's forward, the backward hooks, the stale-copy check, the
    step's schedule and the activation slots (see the module's docstring)."""

    def __init__(self, handle: Any) -> None:
        self._handle = weakref.ref(handle)
        self.pager: Pager = handle._pager
        self.execution_device: torch.device = handle.execution_device
        self._live: dict[int, _Live] = {}          # storage data_ptr -> weight, while acquired
        self._held: dict[Tensor, _Held] = {}        # weights held for backward
        self._held_units: list[list[Tensor]] = []    # what backward_starts acquired, oldest first
        self._on_demand = 0                          # tokens served outside their unit's backward
        self._synced: dict[Tensor, int] = {}         # tensor -> its Parameter's version in HBM
        self._params: dict[Tensor, torch.nn.Parameter] = {}
        self._order: list[Tensor] = []               # the step being recorded (None once set)
        self._recording: list[Tensor] | None = None
        self._schedule_set = False
        self._step_order: list[Tensor] = []          # the first step's accesses, once recorded
        self._callback_queued = False
        self._backward_seen = False
        self.activations: ActivationStore | None = None
        for unit in handle.units:
            for p in unit.params:
                self._params.setdefault(p.tensor, p.param)
                self._synced.setdefault(p.tensor, p.param._version)
        _live_states[id(self)] = self
        _ensure_step_hook()

    # ---- forward ---------------------------------------------------------------------------------
    def model_forward_starts(self) -> None:
        """Starts recording the step's access order at the first forward with autograd on."""
        if self._callback_queued:  # the last backward raised: its end never came
            self._backward_ended()
        if not torch.is_grad_enabled():
            return
        if self._schedule_set:
            # Not cyclic: at the end of a backward the next accesses are the next forward's, but
            # an optimizer step comes between that makes every weight's HBM copy stale, so
            # prefetching them then would be wasted. Each step starts the schedule afresh.
            self.pager.set_schedule(self._step_order, cyclic=False)
            return
        if self._recording is None or not self._backward_seen:
            self._recording = []  # (again: a forward with no backward after it is not a step)

    def record(self, tensors) -> None:
        if self._recording is not None:
            self._recording.extend(tensors)

    def before_acquire(self, unit: Any) -> None:
        """Evicts the HBM copy of each weight of ``unit`` whose Parameter changed since it was
        paged in (an optimizer step, or any in-place update of the host copy through the
        Parameter), so the acquire pages in the new bytes."""
        stale = [t for t in unit.tensors if self._params[t]._version != self._synced[t]]
        if not stale:
            return
        self.pager.synchronize()
        for t in stale:
            info = self.pager.info(t)
            if info["where"] != "host":
                if info["pins"]:
                    raise OffloadedError(
                        f"parameter {info['name']!r} changed while another module holds it "
                        "acquired (a tied weight updated during a forward); update weights between "
                        "steps")
                self.pager.evict(t)
            self._synced[t] = self._params[t]._version

    def forward_entered(self, unit: Any) -> None:
        """After the unit's weights are acquired and its Parameters point at them: note where each
        view is and push the pack hook that turns saved weights into tokens."""
        for p in unit.params:
            ptr = p.param.untyped_storage().data_ptr()
            self._live[ptr] = _Live(p.tensor, p.param, p.name,
                                    p.param.storage_offset() * p.param.element_size())
        self.record(unit.tensors)
        if torch.is_grad_enabled():
            _push(self._pack)
            unit._htp_pushed = getattr(unit, "_htp_pushed", 0) + 1

    def forward_left(self, unit: Any) -> None:
        if getattr(unit, "_htp_pushed", 0):
            unit._htp_pushed -= 1
            _pop()
        for p in unit.params:
            self._live.pop(p.param.untyped_storage().data_ptr(), None)

    def _pack(self, t: torch.Tensor, default: Callable[[torch.Tensor], Any]) -> Any:
        if t.device == self.execution_device and t.layout == torch.strided:
            live = self._live.get(t.untyped_storage().data_ptr())
            if live is not None:
                return _WeightToken(self, live, t)
        return default(t)

    # ---- backward --------------------------------------------------------------------------------
    def _queue_end_of_backward(self) -> None:
        self._backward_seen = True
        if not self._callback_queued:
            self._callback_queued = True
            torch.autograd.Variable._execution_engine.queue_callback(self._backward_ended)

    def watch_output(self, unit: Any, output: Any) -> None:
        """Forward hook: the first gradient that reaches the unit's output (a hook on the tensor,
        which changes nothing in how autograd sums gradients, where module backward hooks would)
        acquires its weights for its backward."""
        if not torch.is_grad_enabled():
            return
        fired = [False]

        def starts(grad: torch.Tensor) -> None:
            if not fired[0]:
                fired[0] = True
                self.backward_starts(unit)
        for t in tensors_in(output):
            if t.requires_grad:
                t.register_hook(starts)

    def backward_starts(self, unit: Any) -> None:
        """Acquires the unit's weights for its backward and holds them, with the last few units'
        (older ones are released: a token whose weights are no longer held is served by a copy)."""
        self._queue_end_of_backward()
        views = self.pager.acquire(unit.tensors)
        for t, v in zip(unit.tensors, views):
            held = self._held.setdefault(t, _Held())
            if held.count == 0:
                held.views[t] = torch.from_dlpack(v)
            held.count += 1
        self._held_units.append(unit.tensors)
        self.record(unit.tensors)
        while len(self._held_units) > _HELD_UNITS:
            self._let_go(self._held_units.pop(0))

    def _let_go(self, tensors) -> None:
        for t in tensors:
            held = self._held[t]
            held.count -= 1
            if held.count == 0:
                del self._held[t]
        self.pager.release(tensors)

    def _unpack_weight(self, token: _WeightToken) -> torch.Tensor:
        live = token.live
        if live.param._version != token.version:
            raise OffloadedError(
                f"backward: parameter {live.name!r} was modified in place after the forward that "
                "saved it (an optimizer step between forward and backward?); run backward before "
                "changing weights")
        self._queue_end_of_backward()
        held = self._held.get(live.tensor)
        if held is not None:
            return _rebuild(held.views[live.tensor], token.dtype, token.byte_offset, token.size,
                            token.stride)
        # Not held (its module's hooks did not bracket this use): a copy under a short acquire.
        self._on_demand += 1
        view = torch.from_dlpack(self.pager.acquire(live.tensor))
        try:
            out = _rebuild(view, token.dtype, token.byte_offset, token.size, token.stride).clone()
        finally:
            self.pager.release(live.tensor)
        self.record([live.tensor])
        return out

    def _backward_ended(self) -> None:
        self._callback_queued = False
        while self._held_units:
            self._let_go(self._held_units.pop(0))
        if self._recording is not None:
            order, self._recording = self._recording, None
            if order:
                self._step_order = order
                self._schedule_set = True

    # ---- after an optimizer step, by hand ---------------------------------------------------------
    def refresh(self) -> None:
        """Evicts every unpinned HBM copy, so the next acquires page in the host copies as they
        are now (after writing them in a way the Parameters' version counters do not see:
        through ``.data`` or ``handle.host_copies``)."""
        self.pager.synchronize()
        for t, param in self._params.items():
            info = self.pager.info(t)
            if info["where"] != "host" and not info["pins"]:
                self.pager.evict(t)
            self._synced[t] = param._version

    def close(self) -> None:
        """Releases what a backward that raised left held (remove() unregisters next)."""
        while self._held_units:
            self._let_go(self._held_units.pop(0))
        _live_states.pop(id(self), None)
        if self.activations is not None:
            self.activations.close()
            self.activations = None


_live_states: "weakref.WeakValueDictionary[int, TrainingState]" = weakref.WeakValueDictionary()
_step_hook: Any = None


def _ensure_step_hook() -> None:
    global _step_hook
    if _step_hook is None:
        _step_hook = register_optimizer_step_pre_hook(_before_step)


def _before_step(optimizer: Any, args: Any, kwargs: Any) -> None:
    """A step writes host copies in place: the pagers' copies that may read them finish first."""
    for state in list(_live_states.values()):
        state.pager.synchronize()


def state_of_pager(pager: Pager) -> TrainingState | None:
    for state in _live_states.values():
        if state.pager is pager:
            return state
    return None


# ---- activations ---------------------------------------------------------------------------------
class _Slot:
    __slots__ = ("tensor", "host", "nbytes", "live", "seq")

    def __init__(self, tensor: Tensor, host: torch.Tensor, nbytes: int) -> None:
        self.tensor, self.host, self.nbytes, self.live, self.seq = tensor, host, nbytes, False, -1


class _Packed:
    """A saved activation in a pager slot."""
    __slots__ = ("store", "slot", "dtype", "size", "stride", "numel", "seq", "__weakref__")

    def __init__(self, store: "ActivationStore", slot: _Slot, t: torch.Tensor, seq: int) -> None:
        self.store, self.slot, self.seq = store, slot, seq
        self.dtype, self.size, self.stride, self.numel = t.dtype, t.size(), t.stride(), t.numel()

    def unpack(self) -> torch.Tensor:
        return self.store._unpack(self)

    def __del__(self) -> None:
        store = self.store
        if store is not None:
            store._free(self.slot)


def _dense(t: torch.Tensor) -> bool:
    """The tensor's elements fill one block of memory, each once (any order of dimensions)."""
    expected = 1
    for stride, size in sorted((st, s) for s, st in zip(t.shape, t.stride()) if s != 1):
        if stride != expected:
            return False
        expected *= size
    return True


def _bytes_of(t: torch.Tensor) -> torch.Tensor:
    """The memory block of a non-overlapping dense tensor, as bytes, in memory order."""
    return t.detach().as_strided((t.numel(),), (1,), t.storage_offset()).view(torch.uint8)


class ActivationStore:
    """A pager's activation slots: pager tensors of kind ``'activation'``, reused by position from
    step to step. Each slot's host extent is a buffer of this store (pinned on cuda) lent to the
    pager, which writes it only when it evicts the slot while its content is live.

    A slot's life per saved tensor: pack acquires it (fresh: its content is dead, so nothing is
    paged in), copies the saved bytes in and releases it dirty (live); unpack acquires it (paged
    in if it was evicted, prefetched in backward order by the recorded schedule), copies the bytes
    out and releases it (not its last use: with ``retain_graph=True`` a saved tensor is unpacked
    again); when autograd drops the saved tensor, the slot is discarded (``Pager.discard``): its
    HBM is free at once, it is never written back, and the slot is free for the next pack."""

    def __init__(self, pager: Pager, execution_device: torch.device,
                 state: TrainingState | None, min_bytes: int) -> None:
        self.pager, self.execution_device, self.state = pager, execution_device, state
        self.min_bytes = min_bytes
        self.max_bytes = pager.config.hbm_budget_bytes // 4
        self._slots: list[_Slot] = []
        self._cursor = 0
        self._live = 0
        self._seq = 0
        self._by_seq: dict[int, "weakref.ref[_Packed]"] = {}
        self._lock = threading.Lock()
        self.packed_bytes = 0       # bytes put into slots
        self.kept_bytes = 0         # saved bytes left with autograd (too small, not dense, params)
        self._closed = False

    @property
    def host_write_bytes(self) -> int:
        """Bytes of saved activations written to host memory: the pager's
        ``activation_write_back_bytes`` (slots evicted while live; part of its
        ``write_back_bytes``), since the pager's last ``reset_metrics``."""
        return self.pager.metrics()["activation_write_back_bytes"]

    def reset_counters(self) -> None:
        """Starts packed_bytes and kept_bytes afresh (with the pager's reset_metrics, which starts
        host_write_bytes afresh, e.g. after the first step)."""
        self.packed_bytes = self.kept_bytes = 0

    def _take(self, nbytes: int) -> _Slot:
        slots = self._slots
        if self._cursor < len(slots):
            s = slots[self._cursor]
            if not s.live and s.nbytes == nbytes:
                self._cursor += 1
                return s
        for i, s in enumerate(slots):
            if not s.live and s.nbytes == nbytes:
                self._cursor = i + 1
                return s
        pin = self.execution_device.type == "cuda"
        host = torch.empty(nbytes, dtype=torch.uint8, pin_memory=pin)
        t = self.pager.register(f"htp.activation.{len(slots)}", host, kind="activation",
                                copy=False)
        slots.append(_Slot(t, host, nbytes))
        self._cursor = len(slots)
        return slots[-1]

    def pack(self, t: torch.Tensor, default: Callable[[torch.Tensor], Any]) -> Any:
        nbytes = t.numel() * t.element_size()
        base = t._base if t._base is not None else t
        if (self._closed or t.device != self.execution_device or t.layout != torch.strided or
                (base.is_leaf and base.requires_grad) or nbytes < self.min_bytes or
                nbytes > self.max_bytes or not _dense(t)):
            self.kept_bytes += nbytes
            return default(t)
        with self._lock:
            slot = self._take(nbytes)
            slot.live = True
            self._live += 1
            seq = self._seq
            self._seq += 1
        try:
            # Fresh: the slot's content is dead (discarded when its last saved tensor was
            # dropped), so the acquire pages nothing in; the bytes are written in HBM.
            view = torch.from_dlpack(self.pager.acquire(slot.tensor))
            try:
                with torch.no_grad():
                    view.copy_(_bytes_of(t))
            except BaseException:
                self.pager.release(slot.tensor)  # not written: its content stays dead
                raise
            self.pager.release(slot.tensor, dirty=True)
        except BaseException:
            self._release_slot(slot)
            raise
        if self.state is not None:
            self.state.record([slot.tensor])
        self.packed_bytes += nbytes
        packed = _Packed(self, slot, t, seq)
        slot.seq = seq
        self._by_seq[seq] = weakref.ref(packed)
        return packed

    def _unpack(self, p: _Packed) -> torch.Tensor:
        if self.state is not None:
            self.state._queue_end_of_backward()
        view = torch.from_dlpack(self.pager.acquire(p.slot.tensor))
        try:
            out = torch.empty_strided(p.size, p.stride, dtype=p.dtype, device=view.device)
            with torch.no_grad():
                _bytes_of(out).copy_(view)
        finally:
            self.pager.release(p.slot.tensor)  # not its last use: it may be unpacked again
        if self.state is not None:
            self.state.record([p.slot.tensor])
        return out

    def _free(self, slot: _Slot) -> None:
        """Autograd dropped the saved tensor in `slot`: its content dies now (HBM freed, never
        written back), then the slot is free (after the discard, so no pack takes it before)."""
        try:
            if slot.live:
                self.pager.discard(slot.tensor)
        finally:
            self._release_slot(slot)

    def _release_slot(self, slot: _Slot) -> None:
        with self._lock:
            if slot.live:
                slot.live = False
                self._live -= 1
                self._by_seq.pop(slot.seq, None)
                if self._live == 0:
                    self._cursor = 0
            orphan = self._closed and slot in self._slots  # close() kept it while it was live
            if orphan:
                self._slots.remove(slot)
        if orphan:
            self.pager.unregister(slot.tensor)

    def close(self) -> None:
        """Unregisters the free slots; live ones are unregistered when autograd drops them."""
        self._closed = True
        keep = []
        for s in self._slots:
            if s.live:
                keep.append(s)
            else:
                self.pager.unregister(s.tensor)
        self._slots = keep


class offload_activations(torch.autograd.graph.saved_tensors_hooks):
    """``with htp.torch.offload_activations(handle):`` around a forward: every activation autograd
    saves (outside the paged weights, which ``training=True`` handles) goes into an activation
    tensor of ``handle``'s pager (``kind='activation'``), which keeps it in HBM while there is
    room, writes it back when it needs the room and brings it back for backward, prefetched in
    backward order (the schedule the first step records); once autograd drops the saved tensor
    its content is discarded (HBM freed, never written back). ``pager``: the
    :class:`htp.torch.Offload` handle of a model offloaded with ``training=True`` (or its pager); a
    bare :class:`htp.Pager` works too, without the schedule (make it once and enter it each step so
    its slots are reused). Tensors under ``min_bytes``, over a quarter of the HBM budget, not
    dense, or that are parameters stay with autograd. Store statistics: ``.store.packed_bytes``,
    ``.store.kept_bytes``, ``.store.host_write_bytes`` (the pager's
    ``activation_write_back_bytes``)."""

    def __init__(self, pager: Any, min_bytes: int = 512) -> None:
        handle = pager if hasattr(pager, "_train") else None
        if handle is not None:
            if handle._pager is None:
                raise InvalidArgumentError(
                    "offload_activations: this offload was removed (handle.remove()); offload the "
                    "model again")
            pager = handle._pager
        if not isinstance(pager, Pager):
            raise InvalidArgumentError(
                "offload_activations: expected the htp.torch.Offload handle of a model offloaded "
                f"with training=True, or an htp.Pager; got {type(pager).__name__}")
        state = handle._train if handle is not None else state_of_pager(pager)
        if state is not None:
            if state.activations is None:
                state.activations = ActivationStore(pager, state.execution_device, state, min_bytes)
            store = state.activations
        else:  # slots reused while this object is (enter it again each step)
            dev = pager.device
            exec_device = (torch.device("cuda", dev.ordinal) if dev.backend == "cuda"
                           else torch.device("cpu"))
            store = ActivationStore(pager, exec_device, None, min_bytes)
        self.store = store
        super().__init__(lambda t: store.pack(t, _detached), _unpack)


def _detached(t: torch.Tensor) -> torch.Tensor:
    return t.detach()
