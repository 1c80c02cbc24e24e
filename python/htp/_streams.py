"""The stream argument of acquire and release, as the extension takes it (streams.hpp)."""
from __future__ import annotations

import sys
from typing import Any

from ._htp import Device, InvalidArgumentError


def stream_handle(stream: Any, device: Device) -> int | None:
    """None, or the cudaStream_t as an int. None on cuda means torch's current stream when torch
    is imported and sees a GPU; otherwise htp's own stream with the host waiting for the bytes."""
    if stream is None:
        if device.backend != "cuda":
            return None
        torch = sys.modules.get("torch")
        if torch is not None and torch.cuda.is_available():
            return int(torch.cuda.current_stream(device.ordinal).cuda_stream)
        return None
    if isinstance(stream, bool):
        raise InvalidArgumentError("stream: pass a torch.cuda.Stream, a cudaStream_t int or None")
    if isinstance(stream, int):
        return stream
    for attr in ("cuda_stream", "ptr"):  # torch.cuda.Stream, cupy.cuda.Stream
        handle = getattr(stream, attr, None)
        if isinstance(handle, int):
            return handle
    raise InvalidArgumentError(
        f"stream: {type(stream).__name__} is not a stream; pass a torch.cuda.Stream, a "
        "cudaStream_t int or None (torch's current stream)")
