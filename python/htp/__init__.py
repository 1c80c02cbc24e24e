"""htp, the hierarchical tensor pager, from Python.

Tensors registered with a :class:`Pager` live in pinned host memory (or caller memory, or a
safetensors file) and are paged into GPU memory on demand or ahead of use; :meth:`Pager.acquire`
hands out zero-copy DLPack views. :mod:`htp.torch` pages a whole ``torch.nn.Module``. Every
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
    SimConfig,
    StaticStep,
    Tensor,
    TensorKind,
    View,
    __version__,
    cuda_device_count,
    make_device,
    node_config,
    pager_config,
    parse_bytes,
    write_companion,
)

__all__ = [
    "CorruptDataError", "CudaError", "Device", "Error", "EvictionRule", "HostRegionKind",
    "InvalidArgumentError", "IoError", "LinkConfig", "LogicError", "LookaheadMode", "Node",
    "NodeConfig", "NodeTensor", "OomPolicy", "OutOfMemoryError", "Pager", "PagerConfig",
    "PrefetchMode", "SimConfig", "StaticStep", "Tensor", "TensorKind", "View", "__version__",
    "cuda_device_count",
    "make_device", "node_config", "pager_config", "parse_bytes", "write_companion",
]
