"""htp.Pager and htp.Node: the C++ pager (htp._htp) with Python habits: options by name, views
that torch, numpy or any DLPack consumer takes without a copy, streams from torch."""
from __future__ import annotations

import contextlib
import json
from typing import Any, Iterable, Iterator, Sequence

from . import _htp
from ._config import node_config, pager_config, parse_bytes
from ._htp import InvalidArgumentError, Tensor
from ._streams import stream_handle

_KINDS = {"weight": _htp.TensorKind.weight, "mutable": _htp.TensorKind.mutable_state,
          "mutable_state": _htp.TensorKind.mutable_state}


def _kind(kind: str | _htp.TensorKind) -> _htp.TensorKind:
    if isinstance(kind, _htp.TensorKind):
        return kind
    if kind not in _KINDS:
        raise InvalidArgumentError(f"kind {kind!r} is none of 'weight', 'mutable'")
    return _KINDS[kind]


def _exportable(source: Any) -> Any:
    """What nanobind's ndarray caster takes: torch tensors detached (DLPack refuses ones that
    require grad), anything else as it is (numpy arrays, buffers, DLPack producers)."""
    detach = getattr(source, "detach", None)
    return detach() if callable(detach) else source


def _as_list(ts: Tensor | Sequence[Tensor]) -> tuple[list[Tensor], bool]:
    if isinstance(ts, Tensor):
        return [ts], True
    ts = list(ts)
    if not all(isinstance(t, Tensor) for t in ts):
        raise InvalidArgumentError("pass an htp.Tensor or a list of them (from Pager.register)")
    return ts, False


def _data_range(source: Any) -> tuple[int, int]:
    """(address, bytes) of a CPU array or tensor, for matching it to a lent region."""
    if hasattr(source, "data_ptr"):
        return source.data_ptr(), source.numel() * source.element_size()
    iface = getattr(source, "__array_interface__", None)
    if iface is not None:
        return iface["data"][0], source.nbytes
    mv = memoryview(source)
    import ctypes
    return ctypes.addressof(ctypes.c_char.from_buffer(mv)) if not mv.readonly else 0, mv.nbytes


class Pager:
    """Pages registered tensors between pinned host memory and one GPU's HBM (pager.hpp).

    ``Pager(device, hbm_budget, host_budget=0, **config)``: ``config`` is every PagerConfig field
    by name (``prefetch_lookahead=4``, ``eviction="belady"``, ``checked=True``, ...). Every method
    may be called from any thread; those that can block release the GIL.
    """

    def __init__(self, device: _htp.Device, hbm_budget: int | str, host_budget: int | str = 0,
                 **config: Any) -> None:
        if not isinstance(device, _htp.Device):
            raise InvalidArgumentError("Pager: device must come from htp.make_device()")
        cfg = pager_config(hbm_budget=hbm_budget, host_budget=host_budget, **config)
        self._p = _htp.Pager(device, cfg)
        self._lent: list[tuple[int, int, Any]] = []

    @classmethod
    def _of(cls, native: _htp.Pager) -> "Pager":
        self = cls.__new__(cls)
        self._p, self._lent = native, []
        return self

    @property
    def device(self) -> _htp.Device:
        return self._p.device

    @property
    def config(self) -> _htp.PagerConfig:
        return self._p.config

    # ---- registration ---------------------------------------------------------------------------
    def register(self, name: str, source: Any, kind: str = "weight", copy: bool = True,
                 read_only: bool | None = None, compress: bool = False) -> Tensor:
        """Registers a tensor from a CPU torch tensor, numpy array, buffer or DLPack producer,
        keeping its dtype and shape.

        ``copy=True``: its bytes are copied into htp's pinned tier (host_budget); the source may
        be dropped afterwards. ``copy=False``: no copy; the source's memory is the tensor's host
        copy (a pinned torch tensor is used as it is; other memory is registered with the driver,
        read-only when ``read_only`` or when a numpy array is not writeable, e.g. a memmap opened
        'r'). The pager keeps the source alive until unregister. Several tensors of one buffer:
        ``lend`` it first. ``kind``: 'weight' or 'mutable' (written back when evicted dirty).
        ``compress=True`` (bfloat16, float16 or float32 weights, with ``copy=True``): the bytes are
        entropy-coded now (a few hundred MB/s per core) and only the compressed bytes are kept;
        each page-in copies them and decodes on the GPU (docs/pager.md, "Compressed weights").

        Raises InvalidArgumentError (bad dtype, not contiguous, not CPU memory, too large for
        the HBM budget, compress with a mutable tensor, another dtype or copy=False),
        OutOfMemoryError (host tier full).
        """
        src = _exportable(source)
        if compress and not copy:
            raise InvalidArgumentError(
                f"register {name!r}: compress=True keeps a compressed copy; it cannot use the "
                "source's memory (copy=False). Pass copy=True, or write a companion file "
                "(htp.write_companion) and use register_companion")
        try:
            if compress:
                return self._p.register_compressed(name, src, _kind(kind))
            if copy:
                return self._p.register_copy(name, src, _kind(kind))
            if read_only is None:
                flags = getattr(source, "flags", None)
                read_only = bool(flags is not None and not flags.writeable)
            addr, nbytes = _data_range(src)
            lent = any(lo <= addr and addr + nbytes <= hi for lo, hi, _ in self._lent)
            return self._p.register_at(name, src, _kind(kind), read_only, not lent, source)
        except TypeError as e:
            raise InvalidArgumentError(
                f"register {name!r}: the source is not an array htp can read ({e}); pass a torch "
                "tensor, a numpy array or an object with __dlpack__ or the buffer protocol") from None

    def lend(self, source: Any, read_only: bool = False) -> None:
        """Lends a whole CPU buffer (a numpy memmap of a checkpoint, a pinned torch tensor) so that
        several tensors inside it register with ``copy=False``. Kept alive until ``unlend``."""
        addr, nbytes = _data_range(_exportable(source))
        kind = _htp.HostRegionKind.pageable_read_only if read_only else _htp.HostRegionKind.pageable
        if getattr(source, "is_pinned", lambda: False)():
            kind = _htp.HostRegionKind.pinned
        self._p.lend(addr, nbytes, kind)
        self._lent.append((addr, addr + nbytes, source))

    def unlend(self, source: Any) -> None:
        """Takes back a buffer given to ``lend`` (no tensor may still live in it)."""
        addr, _ = _data_range(_exportable(source))
        self._p.unlend(addr)
        self._lent = [r for r in self._lent if r[0] != addr]

    def register_safetensors(self, path: str, names: Iterable[str] | None = None) -> dict[str, Tensor]:
        """Registers tensors of a ``.safetensors`` file as file-backed weights: no host copy; each
        page-in reads the file. The header is read and checked in C++ (offsets in order, inside
        the file, matching dtype x shape, no gap or overlap); no byte of the file passes through
        Python. ``names``: all when None. Tensors with no elements are skipped. All or nothing:
        on an error none stays registered.

        Raises CorruptDataError (a header that breaks the format: the tensor and the field),
        IoError (the file cannot be read: the path), InvalidArgumentError (a name the file does
        not hold, a dtype views cannot describe, a tensor larger than the HBM budget)."""
        return dict(self._p.register_safetensors(str(path), None if names is None else list(names)))

    def register_companion(self, path: str, names: Iterable[str] | None = None) -> dict[str, Tensor]:
        """Registers tensors of a compressed companion (``htp.write_companion`` or htp-compress
        wrote it) as compressed file-backed weights: each is verified now, and each page-in reads
        its compressed bytes and decodes them on the GPU. ``names``: all when None. All or nothing:
        on an error none stays registered.

        Raises InvalidArgumentError (not a companion, an unknown name, pieces larger than this
        pager's chunk_bytes), CorruptDataError (a truncated or malformed index, a sequence that
        fails its checks), IoError (the file cannot be read)."""
        return dict(self._p.register_companion(str(path), [] if names is None else list(names)))

    def unregister(self, tensor: Tensor) -> None:
        """Drops a tensor (it must not be acquired). A stale handle raises InvalidArgumentError."""
        self._p.unregister(tensor)

    # ---- acquire / release ----------------------------------------------------------------------
    def acquire(self, tensors: Tensor | Sequence[Tensor], stream: Any = None, wait: bool = False):
        """Pages the tensor(s) in if needed and pins them; returns a zero-copy view (a list for a
        list), usable on ``stream``: a torch.cuda.Stream, a raw cudaStream_t int, or None for
        torch's current stream on cuda (the host waits for the bytes when torch is not in use; on
        sim always). Turn a view into a tensor with torch.from_dlpack(view) or
        numpy.from_dlpack(view). A view used after its release reads whatever the pager put there
        next (in checked mode, htp's poison pattern once its extent is freed): keep views inside acquire/release,
        or use ``acquired``."""
        ts, single = _as_list(tensors)
        views = self._p.acquire(ts, stream_handle(stream, self.device), wait)
        return views[0] if single else views

    def release(self, tensors: Tensor | Sequence[Tensor], stream: Any = None, dirty: bool = False) -> None:
        """Unpins the tensor(s), ordered after the work queued on ``stream`` so far (one event).
        ``dirty``: kernels wrote them (mutable tensors only)."""
        ts, _ = _as_list(tensors)
        self._p.release(ts, stream_handle(stream, self.device), dirty)

    @contextlib.contextmanager
    def acquired(self, tensors: Tensor | Sequence[Tensor], stream: Any = None,
                 dirty: bool = False) -> Iterator[Any]:
        """``with pager.acquired(ts) as views:`` acquire on entry, release on exit (also on error).
        ``dirty`` is checked before the acquire (weights cannot be dirty), so the exit's release
        cannot fail on it and leave the tensors pinned."""
        if dirty:
            ts, _ = _as_list(tensors)
            weights = [t.name for t in ts if t.kind == _htp.TensorKind.weight]
            if weights:
                raise InvalidArgumentError(
                    f"acquired({weights[0]!r}, dirty=True): a weight is never dirty; register "
                    "kernel-written tensors with kind='mutable'")
        views = self.acquire(tensors, stream)
        try:
            yield views
        finally:
            self.release(tensors, stream, dirty)

    # ---- schedule, maintenance ------------------------------------------------------------------
    def prefetch(self, tensor: Tensor) -> None:
        """Hint: bring the tensor in at prefetch priority; never blocks, never evicts sooner-needed."""
        self._p.prefetch(tensor)

    def set_schedule(self, tensors: Sequence[Tensor], cyclic: bool = False) -> None:
        """Declares the access order (Belady's rule, prefetch); ``cyclic`` for decode steps."""
        self._p.set_schedule(list(tensors), cyclic)

    def set_routed_group(self, anchor: Tensor, members: Sequence[Tensor], k: int) -> None:
        """Declares tensors used in a data-dependent way after ``anchor`` (a mixture-of-experts
        layer's expert weights after its router, ``k`` chosen each time), kept out of the
        schedule: htp ranks them by popularity, guesses the ``k`` most popular ahead of the
        router (into free room only) and evicts the least popular first. An empty ``members``
        removes the group. Raises InvalidArgumentError for a member in two groups, an anchor
        that is a member, or k outside [1, len(members)]."""
        self._p.set_routed_group(anchor, list(members), k)

    def expect(self, tensors: Tensor | Sequence[Tensor]) -> None:
        """The router chose ``tensors`` (members of a routed group): load them now, ahead of
        their acquire, evicting the least popular other members if room is short."""
        ts, _ = _as_list(tensors)
        self._p.expect(ts)

    def evict(self, tensor: Tensor) -> None:
        """Evicts an unpinned tensor now (writing it back if dirty), blocking."""
        self._p.evict(tensor)

    def compact(self) -> int:
        """Compacts HBM now, blocking; returns the moves made."""
        return self._p.compact()

    def copy_to_host(self, tensor: Tensor, out: Any = None) -> Any:
        """The tensor's current bytes, copied into ``out`` (a writable CPU array of its size) or
        into a new torch tensor (numpy array without torch) of its dtype and shape."""
        if out is None:
            out = _empty_like(tensor)
        self._p.copy_to_host(tensor, _exportable(out))
        return out

    def synchronize(self) -> None:
        """Blocks until every copy the pager started has completed."""
        self._p.synchronize()

    def info(self, tensor: Tensor) -> dict[str, Any]:
        """The tensor's state: where ('host', 'loading', 'resident', 'writing_back'), pins, dirty."""
        return self._p.info(tensor)

    # ---- reports --------------------------------------------------------------------------------
    def metrics(self) -> dict[str, Any]:
        """The metrics as a plain dict (the field names of htp/metrics.hpp)."""
        return json.loads(self._p.metrics_json())

    def to_prometheus(self) -> str:
        """The metrics in Prometheus' text exposition format."""
        return self._p.prometheus()

    def reset_metrics(self) -> None:
        """Starts counters, histograms and the trace afresh (e.g. after warm-up)."""
        self._p.reset_metrics()

    def write_trace(self, path: str) -> None:
        """Writes the Chrome/Perfetto trace (needs ``trace=True``)."""
        self._p.write_trace(path)


def write_companion(source: str, out: str, pager_chunk_bytes: int | str | None = None,
                    threads: int = 1) -> dict[str, Any]:
    """Writes the compressed companion of the safetensors file ``source`` to ``out``: every
    bfloat16, float16 and float32 tensor entropy-coded, cut for a pager whose chunk_bytes is
    ``pager_chunk_bytes`` (default: PagerConfig's). Others are listed as skipped. Returns the
    totals: tensors, skipped, logical_bytes, wire_bytes, chunk_bytes. Same as
    ``python -m htp.compress source out``.

    Raises CorruptDataError (a header that breaks the safetensors format: the tensor and the
    field), IoError (``source`` cannot be read or ``out`` written)."""
    chunk = _htp.PagerConfig().chunk_bytes if pager_chunk_bytes is None else parse_bytes(
        pager_chunk_bytes, "pager_chunk_bytes")
    if threads < 1:
        raise InvalidArgumentError(f"write_companion: threads must be at least 1, not {threads}")
    return dict(_htp.write_companion(str(source), str(out), chunk, threads))


def _empty_like(tensor: Tensor) -> Any:
    try:
        import torch
        return torch.empty(tensor.shape, dtype=getattr(torch, tensor.dtype))
    except ImportError:
        import numpy
        if tensor.dtype == "bfloat16":
            return numpy.empty(tensor.nbytes, dtype=numpy.uint8)
        return numpy.empty(tensor.shape, dtype=tensor.dtype)


class Node:
    """N GPUs over one pinned host tier (node.hpp): weights held once for all GPUs, shards, and
    each GPU's own tensors. ``Node(devices, host_budget, gpu=dict(hbm_budget=...), **config)``."""

    def __init__(self, devices: Sequence[_htp.Device], host_budget: int | str,
                 gpu: dict[str, Any] | _htp.PagerConfig, **config: Any) -> None:
        cfg = node_config(host_budget_bytes=parse_bytes(host_budget, "host_budget"), gpu=gpu, **config)
        self._n = _htp.Node(list(devices), cfg)

    @property
    def gpu_count(self) -> int:
        return self._n.gpu_count

    def gpu(self, g: int) -> Pager:
        """GPU g's pager: acquire, release, schedules, metrics as for one GPU."""
        return Pager._of(self._n.gpu(g))

    def register_replicated(self, name: str, source: Any, compress: bool = False) -> _htp.NodeTensor:
        """A weight any GPU may page in, with one host copy (``compress=True``: one compressed
        copy that every GPU decodes; bfloat16, float16 or float32)."""
        return self._n.register_replicated(name, _exportable(source), compress)

    def register_sharded(self, name: str, shards: Sequence[Any], kind: str = "weight",
                         compress: bool = False) -> _htp.NodeTensor:
        """One shard per GPU (shard g pages into GPU g only); ``compress=True`` keeps each
        weight shard compressed, as ``Pager.register`` does."""
        return self._n.register_sharded(name, [_exportable(s) for s in shards], _kind(kind), compress)

    def register_local(self, g: int, name: str, source: Any, kind: str = "mutable") -> _htp.NodeTensor:
        """A tensor of GPU g alone (its KV blocks), held in the shared tier."""
        return self._n.register_local(g, name, _exportable(source), _kind(kind))

    def on(self, tensor: _htp.NodeTensor, g: int) -> Tensor:
        """The tensor as GPU g's pager names it (for gpu(g).acquire)."""
        return self._n.on(tensor, g)

    def unregister(self, tensor: _htp.NodeTensor) -> None:
        self._n.unregister(tensor)

    def to_prometheus(self) -> str:
        return self._n.prometheus()
