from collections.abc import Callable, Iterable, Sequence
import enum
import os

import numpy

from htp import (
    CorruptDataError as CorruptDataError,
    CudaError as CudaError,
    Error as Error,
    InvalidArgumentError as InvalidArgumentError,
    IoError as IoError,
    LogicError as LogicError,
    OutOfMemoryError as OutOfMemoryError
)


class SimConfig:
    """Options of a sim device (htp/sim_device.hpp)."""

    def __init__(self) -> None: ...

    @property
    def device_memory_bytes(self) -> int: ...

    @device_memory_bytes.setter
    def device_memory_bytes(self, arg: int, /) -> None: ...

    @property
    def pinned_memory_bytes(self) -> int: ...

    @pinned_memory_bytes.setter
    def pinned_memory_bytes(self, arg: int, /) -> None: ...

    @property
    def h2d_bytes_per_second(self) -> int: ...

    @h2d_bytes_per_second.setter
    def h2d_bytes_per_second(self, arg: int, /) -> None: ...

    @property
    def d2h_bytes_per_second(self) -> int: ...

    @d2h_bytes_per_second.setter
    def d2h_bytes_per_second(self, arg: int, /) -> None: ...

    @property
    def copy_latency_ns(self) -> int: ...

    @copy_latency_ns.setter
    def copy_latency_ns(self, arg: int, /) -> None: ...

    @property
    def copy_engines(self) -> int: ...

    @copy_engines.setter
    def copy_engines(self, arg: int, /) -> None: ...

    @property
    def poison_byte(self) -> int: ...

    @poison_byte.setter
    def poison_byte(self, arg: int, /) -> None: ...

    @property
    def timing_only(self) -> bool: ...

    @timing_only.setter
    def timing_only(self, arg: bool, /) -> None: ...

class Device:
    """
    A GPU (cuda) or its CPU emulation (sim). Make one with htp.make_device; pagers keep it alive.
    """

    @property
    def backend(self) -> str:
        """'cuda' or 'sim'."""

    @property
    def ordinal(self) -> int: ...

    @property
    def name(self) -> str: ...

    @property
    def total_memory(self) -> int:
        """Bytes of device memory."""

    @property
    def timing_only(self) -> bool:
        """A sim device that stores no bytes (see SimConfig.timing_only)."""

    @property
    def sim_pinned_bytes(self) -> int:
        """
        sim only: bytes of pinned host memory allocated now (tests of what htp holds).
        """

    def synchronize(self) -> None:
        """Blocks until all work on every stream of this device has completed."""

    def __repr__(self) -> str: ...

def make_device(backend: str = 'auto', ordinal: int = 0, **sim) -> Device:
    """
    A device: 'auto' (cuda when a GPU is usable, else sim, with a warning logged), 'cuda' (raises CudaError when it cannot run, saying why) or 'sim'. Keyword arguments are SimConfig fields (device_memory_bytes="8GiB", h2d_bytes_per_second=...), for sim only. Thread-safe.
    """

def cuda_device_count() -> int:
    """
    GPUs visible to htp's CUDA runtime (0 without a driver or a CUDA build).
    """

class TensorKind(enum.Enum):
    weight = 0
    """Read-only; eviction just frees HBM."""

    mutable_state = 1
    """KV blocks: written back when dirty."""

    activation = 2
    """
    A training step's saved tensor: dead until written, written back only if evicted live, freed unwritten at release_last_use.
    """

class EvictionRule(enum.Enum):
    automatic = 0

    lru = 1

    belady = 2

class PrefetchMode(enum.Enum):
    pipeline = 0

    min_page_ins = 1

class LookaheadMode(enum.Enum):
    count = 0
    """The next prefetch_lookahead tensors."""

    automatic = 1
    """Ahead in bytes and time, by the compute measured on the device."""

class OomPolicy(enum.Enum):
    throw_error = 0

    allow_degraded = 1

class HostRegionKind(enum.Enum):
    pinned = 0
    """Page-locked and mapped for this GPU already."""

    pageable = 1
    """Ordinary memory; htp registers it."""

    pageable_read_only = 2
    """Read-only memory (a mapped file); weights only."""

class LinkConfig:
    """One direction's rate cap (transfer_engine.hpp)."""

    def __init__(self) -> None: ...

    @property
    def rate_bytes_per_second(self) -> int | None:
        """The cap; None = 80% of the calibrated link."""

    @rate_bytes_per_second.setter
    def rate_bytes_per_second(self, arg: int, /) -> None: ...

    @property
    def link_bytes_per_second(self) -> int | None:
        """The link's peak; None = measured at construction."""

    @link_bytes_per_second.setter
    def link_bytes_per_second(self, arg: int, /) -> None: ...

    @property
    def unlimited(self) -> bool: ...

    @unlimited.setter
    def unlimited(self, arg: bool, /) -> None: ...

    @property
    def burst_bytes(self) -> int: ...

    @burst_bytes.setter
    def burst_bytes(self, arg: int, /) -> None: ...

class PagerConfig:
    """A pager's configuration (pager.hpp, pager_config)."""

    def __init__(self) -> None: ...

    @property
    def hbm_budget_bytes(self) -> int: ...

    @hbm_budget_bytes.setter
    def hbm_budget_bytes(self, arg: int, /) -> None: ...

    @property
    def host_budget_bytes(self) -> int: ...

    @host_budget_bytes.setter
    def host_budget_bytes(self, arg: int, /) -> None: ...

    @property
    def slab_bytes(self) -> int: ...

    @slab_bytes.setter
    def slab_bytes(self, arg: int, /) -> None: ...

    @property
    def page_bytes(self) -> int: ...

    @page_bytes.setter
    def page_bytes(self, arg: int, /) -> None: ...

    @property
    def chunk_bytes(self) -> int: ...

    @chunk_bytes.setter
    def chunk_bytes(self, arg: int, /) -> None: ...

    @property
    def max_in_flight_chunks(self) -> int: ...

    @max_in_flight_chunks.setter
    def max_in_flight_chunks(self, arg: int, /) -> None: ...

    @property
    def h2d(self) -> LinkConfig: ...

    @h2d.setter
    def h2d(self, arg: LinkConfig, /) -> None: ...

    @property
    def d2h(self) -> LinkConfig: ...

    @d2h.setter
    def d2h(self, arg: LinkConfig, /) -> None: ...

    @property
    def lookahead(self) -> LookaheadMode: ...

    @lookahead.setter
    def lookahead(self, arg: LookaheadMode, /) -> None: ...

    @property
    def prefetch_lookahead(self) -> int: ...

    @prefetch_lookahead.setter
    def prefetch_lookahead(self, arg: int, /) -> None: ...

    @property
    def lookahead_max_tensors(self) -> int: ...

    @lookahead_max_tensors.setter
    def lookahead_max_tensors(self, arg: int, /) -> None: ...

    @property
    def popularity_half_life(self) -> float: ...

    @popularity_half_life.setter
    def popularity_half_life(self, arg: float, /) -> None: ...

    @property
    def eviction(self) -> EvictionRule: ...

    @eviction.setter
    def eviction(self, arg: EvictionRule, /) -> None: ...

    @property
    def prefetch(self) -> PrefetchMode: ...

    @prefetch.setter
    def prefetch(self, arg: PrefetchMode, /) -> None: ...

    @property
    def compaction_threshold(self) -> float: ...

    @compaction_threshold.setter
    def compaction_threshold(self, arg: float, /) -> None: ...

    @property
    def auto_compact(self) -> bool: ...

    @auto_compact.setter
    def auto_compact(self, arg: bool, /) -> None: ...

    @property
    def on_oom(self) -> OomPolicy: ...

    @on_oom.setter
    def on_oom(self, arg: OomPolicy, /) -> None: ...

    @property
    def latency_budget_ms(self) -> int: ...

    @latency_budget_ms.setter
    def latency_budget_ms(self, arg: int, /) -> None: ...

    @property
    def trace(self) -> bool: ...

    @trace.setter
    def trace(self, arg: bool, /) -> None: ...

    @property
    def trace_capacity(self) -> int: ...

    @trace_capacity.setter
    def trace_capacity(self, arg: int, /) -> None: ...

    @property
    def checked(self) -> bool: ...

    @checked.setter
    def checked(self, arg: bool, /) -> None: ...

    @property
    def modelled_compression_ratio(self) -> float: ...

    @modelled_compression_ratio.setter
    def modelled_compression_ratio(self, arg: float, /) -> None: ...

    @property
    def verify_page_ins(self) -> bool: ...

    @verify_page_ins.setter
    def verify_page_ins(self, arg: bool, /) -> None: ...

def parse_bytes(value: int | float | str, what: str = 'size') -> int:
    """
    Bytes from an int (a float with no fraction) or a string such as "4GiB", "512 MB".

    Raises InvalidArgumentError for a negative, fractional or unreadable value.
    """

def pager_config(**kwargs) -> PagerConfig:
    """
    A PagerConfig from keyword arguments: every field by its name (pager.hpp), plus hbm_budget/host_budget for the *_bytes fields; sizes may be strings ("4GiB"); enum fields take their names ("belady"); h2d/d2h take LinkConfig or a dict; latency_budget_ms a timedelta too.
    """

class Tensor:
    """A registered tensor: the pager's handle, name, dtype, shape."""

    @property
    def name(self) -> str: ...

    @property
    def dtype(self) -> str:
        """'float32', 'bfloat16', ..."""

    @property
    def shape(self) -> tuple: ...

    @property
    def nbytes(self) -> int: ...

    @property
    def kind(self) -> TensorKind: ...

    @property
    def handle(self) -> tuple:
        """
        (index, generation): stale once unregistered, even after the slot is reused.
        """

    def __eq__(self, arg: Tensor, /) -> bool: ...

    def __hash__(self) -> int: ...

    def __repr__(self) -> str: ...

def write_companion(source: str | os.PathLike, out: str | os.PathLike, pager_chunk_bytes: int | str | None = None, threads: int = 1) -> dict:
    """
    Writes the compressed companion of the safetensors file `source` to `out`: every bfloat16, float16 and float32 tensor entropy-coded, cut for a pager whose chunk_bytes is `pager_chunk_bytes` (default: PagerConfig's). Others are listed as skipped. Returns the totals: tensors, skipped, logical_bytes, wire_bytes, chunk_bytes. Same as `python -m htp.compress source out`.

    Raises CorruptDataError (a header that breaks the safetensors format: the tensor and the field), IoError (`source` cannot be read or `out` written), InvalidArgumentError (threads below 1, a chunk size that leaves no room).
    """

class View:
    """
    A zero-copy view of an acquired tensor for any DLPack consumer (torch.from_dlpack, numpy.from_dlpack). Valid until its release.
    """

    def __dlpack__(self, stream: object | None = None, max_version: object | None = None, dl_device: object | None = None, copy: object | None = None) -> object:
        """
        A DLPack capsule (a new one per call). The stream argument is ignored: htp ordered the acquire on the stream given to Pager.acquire.
        """

    def __dlpack_device__(self) -> tuple: ...

    @property
    def tensor(self) -> Tensor: ...

    @property
    def data_ptr(self) -> int:
        """The device address of the first byte."""

    @property
    def nbytes(self) -> int: ...

    @property
    def degraded(self) -> bool:
        """
        Served from mapped pinned host memory (the out-of-memory ladder's last rung).
        """

class Acquired:
    """
    What Pager.acquired returns: `with pager.acquired(ts) as views:` acquires on entry and releases on exit, also on an error.
    """

    def __enter__(self) -> object:
        """Acquires the tensors; returns the view (a list of views for a list)."""

    def __exit__(self, type: object | None, value: object | None, traceback: object | None) -> bool:
        """
        Releases the tensors on the stream given, dirty as given; never swallows an error.
        """

class Pager:
    """
    Pages registered tensors between pinned host memory and one GPU's HBM (pager.hpp).

    `Pager(device, hbm_budget, host_budget=0, **config)`: `config` is every PagerConfig field by name (`prefetch_lookahead=4`, `eviction="belady"`, `checked=True`, ...); sizes may be strings ("64MiB"). Every method may be called from any thread; those that can block release the GIL.
    """

    def __init__(self, device: Device, hbm_budget: int | str, host_budget: int | str = 0, **config) -> None: ...

    @property
    def device(self) -> Device:
        """The device it pages into."""

    @property
    def config(self) -> PagerConfig:
        """Its configuration (a copy)."""

    def register(self, name: str, source: object, kind: str | TensorKind = 'weight', copy: bool = True, read_only: bool | None = None, compress: bool = False) -> Tensor:
        """
        Registers a tensor from a CPU torch tensor, numpy array, buffer or DLPack producer, keeping its dtype and shape.

        `copy=True`: its bytes are copied into htp's pinned tier (host_budget); the source may be dropped afterwards. `copy=False`: no copy; the source's memory is the tensor's host copy (a pinned torch tensor is used as it is; other memory is registered with the driver, read-only when `read_only` or when a numpy array is not writeable, e.g. a memmap opened 'r'). The pager keeps the source alive until unregister. Several tensors of one buffer: `lend` it first. `kind`: 'weight', 'mutable' (written back when evicted dirty) or 'activation' (a training step's saved tensor: the source gives only its dtype and shape; it starts dead, see release_last_use). `compress=True` (bfloat16, float16 or float32 weights, with `copy=True`): the bytes are entropy-coded now (a few hundred MB/s per core) and only the compressed bytes are kept; each page-in copies them and decodes on the GPU (docs/pager.md, "Compressed weights").

        Raises InvalidArgumentError (not an array, bad dtype, not contiguous, not CPU memory, too large for the HBM budget, compress with a mutable tensor, another dtype or copy=False), OutOfMemoryError (host tier full).
        """

    def lend(self, source: object, read_only: bool = False) -> None:
        """
        Lends a whole CPU buffer (a numpy memmap of a checkpoint, a pinned torch tensor) so that several tensors inside it register with `copy=False`. Memory the device maps already (pinned) is used as it is; other memory is registered with the driver, read-only when `read_only`. The pager keeps `source` alive until `unlend`.
        """

    def unlend(self, source: object) -> None:
        """Takes back a buffer given to `lend` (no tensor may still live in it)."""

    def register_safetensors(self, path: str | os.PathLike, names: Iterable[str] | None = None) -> dict[str, Tensor]:
        """
        Registers tensors of a `.safetensors` file as file-backed weights: no host copy; each page-in reads the file. The header is read and checked in C++ (offsets in order, inside the file, matching dtype x shape, no gap or overlap); no byte of the file passes through Python. `names`: all when None. Tensors with no elements are skipped. All or nothing: on an error none stays registered.

        Raises CorruptDataError (a header that breaks the format: the tensor and the field), IoError (the file cannot be read: the path), InvalidArgumentError (a name the file does not hold, a dtype views cannot describe, a tensor larger than the HBM budget).
        """

    def register_companion(self, path: str | os.PathLike, names: Iterable[str] | None = None) -> dict[str, Tensor]:
        """
        Registers tensors of a compressed companion (htp.write_companion or htp-compress wrote it) as compressed file-backed weights: each is verified now, and each page-in reads its compressed bytes and decodes them on the GPU. `names`: all when None. All or nothing: on an error none stays registered.

        Raises InvalidArgumentError (not a companion, an unknown name, pieces larger than this pager's chunk_bytes), CorruptDataError (a truncated or malformed index, a sequence that fails its checks), IoError (the file cannot be read).
        """

    def register_file(self, name: str, path: str, offset: int, dtype: str, shape: Sequence[int]) -> Tensor:
        """
        Registers one file-backed weight: `dtype` (a safetensors name such as 'F32' or a numpy one) x `shape` at byte `offset` of the file at `path`. register_safetensors reads these from a header. Raises InvalidArgumentError (an unknown dtype, a range past the end of the file), IoError (the file cannot be read).
        """

    def unregister(self, tensor: Tensor) -> None:
        """
        Drops a tensor (it must not be acquired). A stale handle raises InvalidArgumentError.
        """

    def acquire(self, tensors: Tensor | Sequence[Tensor], stream: object = None, wait: bool = False) -> View | list[View]:
        """
        Pages the tensor(s) in if needed and pins them; returns a zero-copy view (a list for a list), usable on `stream`: a torch.cuda.Stream, a raw cudaStream_t int, or None for torch's current stream on cuda (the host waits for the bytes when torch is not in use; on sim always). `wait`: the host waits for the bytes in any case. Turn a view into a tensor with torch.from_dlpack(view) or numpy.from_dlpack(view). A view used after its release reads whatever the pager put there next (in checked mode, htp's poison pattern once its extent is freed): keep views inside acquire/release, or use `acquired`.
        """

    def release(self, tensors: Tensor | Sequence[Tensor], stream: object = None, dirty: bool = False) -> None:
        """
        Unpins the tensor(s), ordered after the work queued on `stream` so far (one event). `dirty`: kernels wrote them (mutable tensors only).
        """

    def release_last_use(self, tensor: Tensor, stream: object = None) -> None:
        """
        Releases the last acquire of an activation at its last use (the backward pass read it): its content dies and its HBM is freed once `stream` passes this point, with no write-back. The next acquire is fresh (nothing copied in). Raises InvalidArgumentError for another kind, or while other acquires still hold it.
        """

    def discard(self, tensor: Tensor) -> None:
        """
        Marks the content of an activation that no acquire holds dead, without a use (its saved tensor was dropped): its HBM is freed now (a copy in flight is let finish first), it is never written back, and its next acquire is fresh. Needs no stream: the memory is reused only after the streams pass its last releases. A dead one: nothing to do. Raises InvalidArgumentError for another kind, or while it is acquired (release it first, or use release_last_use).
        """

    def acquired(self, tensors: Tensor | Sequence[Tensor], stream: object = None, dirty: bool = False) -> Acquired:
        """
        `with pager.acquired(ts) as views:` acquire on entry, release on exit (also on error). `dirty` is checked before the acquire (weights cannot be dirty), so the exit's release cannot fail on it and leave the tensors pinned.
        """

    def prefetch(self, tensor: Tensor) -> None:
        """
        Hint: bring the tensor in at prefetch priority; never blocks, never evicts sooner-needed.
        """

    def set_schedule(self, tensors: Sequence[Tensor], cyclic: bool = False) -> None:
        """
        Declares the access order (Belady's rule, prefetch); `cyclic` for decode steps.
        """

    def set_routed_group(self, anchor: Tensor, members: Sequence[Tensor], k: int) -> None:
        """
        Declares tensors used in a data-dependent way after `anchor` (a mixture-of-experts layer's expert weights after its router, `k` chosen each time), kept out of the schedule: htp ranks them by popularity, guesses the `k` most popular ahead of the router (into free room only) and evicts the least popular first. An empty `members` removes the group. Raises InvalidArgumentError for a member in two groups, an anchor that is a member, or k outside [1, len(members)].
        """

    def expect(self, tensors: Tensor | Sequence[Tensor]) -> None:
        """
        The router chose `tensors` (members of a routed group): load them now, ahead of their acquire, evicting the least popular other members if room is short.
        """

    def evict(self, tensor: Tensor) -> None:
        """Evicts an unpinned tensor now (writing it back if dirty), blocking."""

    def compact(self) -> int:
        """Compacts HBM now, blocking; returns the moves made."""

    def copy_to_host(self, tensor: Tensor, out: object = None) -> object:
        """
        The tensor's current bytes, copied into `out` (a writable CPU array of its size) or into a new torch tensor (numpy array without torch) of its dtype and shape; returns it.
        """

    def synchronize(self) -> None:
        """Blocks until every copy the pager started has completed."""

    def info(self, tensor: Tensor) -> dict:
        """
        The tensor's state: where ('host', 'loading', 'resident', 'writing_back'), pins, dirty, ...
        """

    def metrics(self) -> dict:
        """
        The metrics as a plain dict (the field names of htp/metrics.hpp; the keys and nesting of metrics_json).
        """

    def metrics_json(self) -> str:
        """The metrics as JSON text (htp::to_json), for files."""

    def to_prometheus(self) -> str:
        """The metrics in Prometheus' text exposition format."""

    def reset_metrics(self) -> None:
        """Starts counters, histograms and the trace afresh (e.g. after warm-up)."""

    def write_trace(self, path: str) -> None:
        """Writes the Chrome/Perfetto trace (needs `trace=True`)."""

def node_config(**kwargs) -> NodeConfig:
    """
    A NodeConfig from keyword arguments (node.hpp), as pager_config makes a PagerConfig; `gpu` takes a PagerConfig or a dict.
    """

class NodeConfig:
    """A node's configuration (node.hpp, node_config)."""

    def __init__(self) -> None: ...

    @property
    def host_budget_bytes(self) -> int: ...

    @host_budget_bytes.setter
    def host_budget_bytes(self, arg: int, /) -> None: ...

    @property
    def host_slab_bytes(self) -> int: ...

    @host_slab_bytes.setter
    def host_slab_bytes(self, arg: int, /) -> None: ...

    @property
    def host_page_bytes(self) -> int: ...

    @host_page_bytes.setter
    def host_page_bytes(self, arg: int, /) -> None: ...

    @property
    def gpu(self) -> PagerConfig: ...

    @gpu.setter
    def gpu(self, arg: PagerConfig, /) -> None: ...

    @property
    def discover_shared_links(self) -> bool: ...

    @discover_shared_links.setter
    def discover_shared_links(self, arg: bool, /) -> None: ...

    @property
    def link_share(self) -> float: ...

    @link_share.setter
    def link_share(self, arg: float, /) -> None: ...

    @property
    def numa_bytes_per_second(self) -> int: ...

    @numa_bytes_per_second.setter
    def numa_bytes_per_second(self, arg: int, /) -> None: ...

    @property
    def numa_placement(self) -> bool: ...

    @numa_placement.setter
    def numa_placement(self, arg: bool, /) -> None: ...

class NodeTensor:
    """A tensor registered with a node."""

    @property
    def name(self) -> str: ...

class Node:
    """
    N GPUs over one pinned host tier (node.hpp): weights held once for all GPUs, shards, and each GPU's own tensors. `Node(devices, host_budget, gpu=dict(hbm_budget=...), **config)`: `gpu` is a PagerConfig or a dict of its fields, `config` NodeConfig's fields by name.
    """

    def __init__(self, devices: Sequence[Device], host_budget: int | str, gpu: object, **config) -> None: ...

    @property
    def gpu_count(self) -> int:
        """The GPUs it spans."""

    def gpu(self, g: int) -> Pager:
        """GPU g's pager: acquire, release, schedules, metrics as for one GPU."""

    def register_replicated(self, name: str, source: object, compress: bool = False) -> NodeTensor:
        """
        A weight any GPU may page in, with one host copy (`compress=True`: one compressed copy that every GPU decodes; bfloat16, float16 or float32).
        """

    def register_sharded(self, name: str, shards: Sequence[object], kind: str | TensorKind = 'weight', compress: bool = False) -> NodeTensor:
        """
        One shard per GPU (shard g pages into GPU g only); `compress=True` keeps each weight shard compressed, as Pager.register does.
        """

    def register_local(self, g: int, name: str, source: object, kind: str | TensorKind = 'mutable') -> NodeTensor:
        """A tensor of GPU g alone (its KV blocks), held in the shared tier."""

    def on(self, tensor: NodeTensor, g: int) -> Tensor:
        """The tensor as GPU g's pager names it (for gpu(g).acquire)."""

    def unregister(self, tensor: NodeTensor) -> None:
        """Drops a node tensor from every GPU and the shared tier."""

    def to_prometheus(self) -> str:
        """The node's metrics in Prometheus' text exposition format."""

class StaticStep:
    """
    A static plan of fixed addresses and its step program (static_step.hpp): `StaticStep(device, names, sources, positions, hbm_budget, link_bytes_per_second, compute_ns=None, keep=None, compress=None, decode_bytes_per_second=250e9)`. `sources[t]` is tensor t's host copy (copied once into pinned memory; coded first where `compress[t]`: bfloat16, float16 or float32); `positions[p]` the tensors position p reads; `keep[t]` holds tensor t resident. The plan is made, the arena allocated and primed here. One thread drives begin/end at a time.
    """

    def __init__(self, device: Device, names: Sequence[str], sources: list, positions: Sequence[Sequence[int]], hbm_budget: int | str, link_bytes_per_second: float, compute_ns: Sequence[float] | None = None, keep: Sequence[bool] | None = None, compress: Sequence[bool] | None = None, decode_bytes_per_second: float = 250000000000.0) -> None: ...

    @property
    def plan(self) -> dict:
        """The plan: predicted step, arena, ring, resident names."""

    def view(self, tensor: int, position: int) -> object:
        """
        A DLPack array of tensor `tensor` at its fixed address for `position` (the same memory for the step's life; its bytes are the tensor's while that position runs).
        """

    def address(self, tensor: int, position: int) -> int:
        """The fixed device address."""

    def begin(self, position: int, stream: object | None = None) -> None:
        """
        Enters position p: its streamed tensors are in when work on `stream` after this runs (on sim, or with no CUDA stream, when this returns).
        """

    def end(self, position: int, stream: object | None = None) -> None:
        """
        Leaves position p once the work on `stream` so far is done, issuing the loads it frees; the last position joins the step's streams into `stream`.
        """

    def synchronize(self) -> None:
        """Blocks until every stream of the device has finished."""

    def take_decode_failures(self) -> list[str]:
        """
        Names of the coded tensors whose decode in the last step failed its checks; clears.
        """

class SharedTier:
    """
    A node's host tier in POSIX shared memory (shared_tier.hpp), shared by the node's processes (one per GPU). `SharedTier(name, bytes, page_bytes='64KiB', max_entries=16384, lock_in_memory=False, timeout_ms=60000, shm_dir='/dev/shm')`: the first process to open `name` creates the segment shm_dir/htp.<name>, the others attach (same bytes and page size). Entries are byte ranges the processes agree on by name; arrays taken from the tier keep it open. Lend `data` to a Pager once, then register entries with copy=False.

    Raises InvalidArgumentError (a bad name, zero bytes, a bad page size, a tier of this name made with another size or layout), OutOfMemoryError (shm_dir cannot hold it: raise docker's --shm-size), LogicError (every rank slot taken, the creator did not finish in time), IoError (a system call failed).
    """

    def __init__(self, name: str, bytes: int | str, page_bytes: int | str = '64KiB', max_entries: int = 16384, lock_in_memory: bool = False, timeout_ms: int = 60000, shm_dir: str = '/dev/shm') -> None: ...

    def publish(self, batch: Iterable[tuple[str, int | str]], fill: Callable[[list[numpy.ndarray]], None] | None, writable: bool = False) -> list[numpy.ndarray]:
        """
        Publishes a batch of (name, nbytes) entries, all or nothing, and holds them for this process; returns numpy uint8 arrays viewing them, in batch order (read-only unless `writable`). If none exists, this caller reserves them and calls `fill(arrays)` (writable, with the GIL) to write their bytes; `fill=None` publishes them as the tier holds them. If all exist with the same sizes, it waits (without the GIL) for their publisher to finish and returns them; `fill` is not called. Of processes racing on one batch, exactly one fills. If `fill` raises, nothing is published and the exception propagates.

        Raises InvalidArgumentError (an empty batch, a repeated or bad name, zero bytes, a batch that only partly exists or exists with other sizes), OutOfMemoryError (the tier cannot hold the batch), LogicError (another publisher did not finish in timeout_ms).
        """

    def find(self, name: str, writable: bool = False) -> numpy.ndarray | None:
        """
        The published entry `name` as a numpy uint8 array (held for this process), or None. Does not wait. Raises InvalidArgumentError for a bad name.
        """

    def release(self, name: str) -> None:
        """
        Stops holding `name` (freed when no process holds it). A hold is one per process: publishing or finding an entry it holds adds none. Arrays viewing it must not be used afterwards. Raises InvalidArgumentError if this process does not hold it.
        """

    @property
    def data(self) -> object:
        """
        The whole data area as a writable numpy uint8 array: `pager.lend(tier.data)` once per pager, then register entries with copy=False.
        """

    @property
    def data_bytes(self) -> int:
        """Bytes of the data area."""

    @property
    def name(self) -> str:
        """The tier's name."""

    @property
    def page_bytes(self) -> int:
        """The allocation unit of entries."""

    @property
    def slot(self) -> int:
        """This process's rank slot."""

    @property
    def created(self) -> bool:
        """Whether this process created the segment."""

    def describe(self) -> dict[str, object]:
        """
        A snapshot of the segment: name, path, segment_bytes, live_ranks, dead_ranks, entries, entry_bytes, stale, problem.
        """

    max_ranks: int = 64

def list_shared_tiers(shm_dir: str = '/dev/shm') -> list[dict[str, object]]:
    """
    Every htp tier segment in `shm_dir`, as SharedTier.describe() reports one (a segment that cannot be read has its `problem`).
    """

def remove_shared_tier(name: str, force: bool = False, shm_dir: str = '/dev/shm') -> bool:
    """
    Removes the segment `name` if no live process is attached (or `force`); returns whether one was removed. Raises InvalidArgumentError (a bad name), LogicError (live processes attached and not force), IoError (the unlink failed).
    """

def safetensors_header(path: str) -> dict[str, object]:
    """
    The checked header of the safetensors file at `path` (htp/safetensors.hpp): {'data_start', 'file_size', 'tensors': {name: {'dtype', 'shape', 'begin', 'end', 'bytes'}} in the order of their bytes (begin and end are absolute offsets in the file), 'metadata'}. Only the header is read.

    Raises CorruptDataError (a header that breaks the format: the tensor and the field), IoError (the file cannot be read: the path).
    """
