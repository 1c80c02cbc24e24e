"""htp, the hierarchical tensor pager, from Python.

Tensors registered with a :class:`Pager` live in pinned host memory (or caller memory, or a
safetensors file) and are paged into GPU memory on demand or ahead of use; :meth:`Pager.acquire`
hands out zero-copy DLPack views. :mod:`htp.torch` pages a whole ``torch.nn.Module``;
:class:`SharedTier` is a node's host tier in shared memory, shared by its processes (one per GPU),
and :mod:`htp.distributed` opens it from torchrun's environment. Every
class and function here is the extension htp._htp itself: each is defined once, in C++
(python/src), with Python's conveniences (options by keyword, sizes as strings, torch streams)
handled there. See docs/python.md.
"""
from ._htp import (
    CorruptDataError,
    CudaError,
    Device,
    Error,
    EvictionRule,
    HostRegionKind,
    InvalidArgumentError,
    IoError,
    LinkConfig,
    LogicError,
    LookaheadMode,
    Node,
    NodeConfig,
    NodeTensor,
    OomPolicy,
    OutOfMemoryError,
    Pager,
    PagerConfig,
    PrefetchMode,
    SharedTier,
    SimConfig,
    StaticStep,
    Tensor,
    TensorKind,
    View,
    __version__,
    cuda_device_count,
    list_shared_tiers,
    make_device,
    node_config,
    pager_config,
    parse_bytes,
    remove_shared_tier,
    safetensors_header,
    write_companion,
)

__all__ = [
    "CorruptDataError", "CudaError", "Device", "Error", "EvictionRule", "HostRegionKind",
    "InvalidArgumentError", "IoError", "LinkConfig", "LogicError", "LookaheadMode", "Node",
    "NodeConfig", "NodeTensor", "OomPolicy", "OutOfMemoryError", "Pager", "PagerConfig",
    "PrefetchMode", "SharedTier", "SimConfig", "StaticStep", "Tensor", "TensorKind", "View", "__version__",
    "cuda_device_count", "list_shared_tiers",
    "make_device", "node_config", "pager_config", "parse_bytes", "remove_shared_tier",
    "safetensors_header", "write_companion",
]
