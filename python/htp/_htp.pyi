from collections.abc import Sequence
import enum
from typing import Annotated

from numpy.typing import NDArray

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

def make_device(backend: str = 'auto', ordinal: int = 0, sim: SimConfig = ...) -> Device:
    """
    Creates a device. backend: 'auto' (cuda when a GPU is usable, else sim, with a warning logged), 'cuda' (raises CudaError when it cannot run) or 'sim'. Thread-safe.
    """

def cuda_device_count() -> int:
    """
    GPUs visible to htp's CUDA runtime (0 without a driver or a CUDA build).
    """

class TensorKind(enum.Enum):
    weight = 0
    """Read-only; eviction just frees HBM."""

    mutable_state = 1
    """KV blocks, activations: written back."""

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

def write_companion(source: str, out: str, pager_chunk_bytes: int, threads: int) -> dict:
    """
    Writes the compressed companion of a safetensors file (htp/companion.hpp).
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

class Pager:
    """The C++ pager (pager.hpp); use htp.Pager, which wraps it."""

    def __init__(self, device: Device, config: PagerConfig) -> None: ...

    @property
    def device(self) -> Device: ...

    def register_copy(self, name: str, source: Annotated[NDArray, dict(writable=False)], kind: TensorKind) -> Tensor: ...

    def register_at(self, name: str, source: Annotated[NDArray, dict(writable=False)], kind: TensorKind, read_only: bool, lend: bool, keep: object | None) -> Tensor: ...

    def register_file(self, name: str, path: str, offset: int, dtype: str, shape: Sequence[int]) -> Tensor: ...

    def register_compressed(self, name: str, source: Annotated[NDArray, dict(writable=False)], kind: TensorKind) -> Tensor: ...

    def register_companion(self, path: str, names: Sequence[str]) -> dict: ...

    def register_safetensors(self, path: str, names: Sequence[str] | None) -> dict: ...

    def unregister(self, tensor: Tensor) -> None: ...

    def acquire(self, tensors: Sequence[Tensor], stream: int | None, wait: bool) -> list: ...

    def release(self, tensors: Sequence[Tensor], stream: int | None, dirty: bool) -> None: ...

    def lend(self, ptr: int, bytes: int, kind: HostRegionKind) -> None: ...

    def unlend(self, ptr: int) -> None: ...

    def prefetch(self, tensor: Tensor) -> None: ...

    def set_routed_group(self, anchor: Tensor, members: Sequence[Tensor], k: int) -> None: ...

    def expect(self, tensors: Sequence[Tensor]) -> None: ...

    def set_schedule(self, tensors: Sequence[Tensor], cyclic: bool) -> None: ...

    def evict(self, tensor: Tensor) -> None: ...

    def compact(self) -> int: ...

    def copy_to_host(self, tensor: Tensor, out: Annotated[NDArray, dict(device='cpu')]) -> None: ...

    def synchronize(self) -> None: ...

    def info(self, tensor: Tensor) -> dict: ...

    def metrics_json(self) -> str: ...

    def prometheus(self) -> str: ...

    def reset_metrics(self) -> None: ...

    def write_trace(self, path: str) -> None: ...

    @property
    def config(self) -> PagerConfig: ...

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
    """N GPUs over one pinned host tier (node.hpp)."""

    def __init__(self, devices: Sequence[Device], config: NodeConfig) -> None: ...

    @property
    def gpu_count(self) -> int: ...

    def gpu(self, g: int) -> Pager:
        """GPU g's pager (the C++ object; htp.Node wraps it)."""

    def register_replicated(self, name: str, source: Annotated[NDArray, dict(writable=False)], compress: bool) -> NodeTensor: ...

    def register_sharded(self, name: str, shards: Sequence[Annotated[NDArray, dict(writable=False)]], kind: TensorKind, compress: bool) -> NodeTensor: ...

    def register_local(self, g: int, name: str, source: Annotated[NDArray, dict(writable=False)], kind: TensorKind) -> NodeTensor: ...

    def on(self, tensor: NodeTensor, g: int) -> Tensor:
        """The tensor as GPU g's pager names it."""

    def unregister(self, tensor: NodeTensor) -> None: ...

    def prometheus(self) -> str: ...
