"""Options by name: every PagerConfig, NodeConfig and SimConfig field as a keyword argument."""
from __future__ import annotations

import datetime
import re
from typing import Any

from . import _htp
from ._htp import InvalidArgumentError

_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
          "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}


def parse_bytes(value: int | float | str, what: str = "size") -> int:
    """Bytes from an int (a float with no fraction) or a string such as ``"4GiB"``, ``"512 MB"``.

    Raises InvalidArgumentError for a negative, fractional or unreadable value.
    """
    if isinstance(value, bool):
        raise InvalidArgumentError(f"{what}: {value!r} is not a size in bytes")
    if isinstance(value, str):
        m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([a-zA-Z]*)\s*", value)
        if not m or m.group(2).lower() not in _UNITS:
            raise InvalidArgumentError(
                f"{what}: {value!r} is not a size; write bytes (an int) or e.g. '4GiB', '512MB'")
        value = float(m.group(1)) * _UNITS[m.group(2).lower()]
    if isinstance(value, float):
        if not value.is_integer():
            raise InvalidArgumentError(f"{what}: {value!r} is not a whole number of bytes")
        value = int(value)
    if not isinstance(value, int) or value < 0:
        raise InvalidArgumentError(f"{what}: {value!r} is not a size in bytes (an int >= 0)")
    return value


_ENUMS = {"eviction": _htp.EvictionRule, "prefetch": _htp.PrefetchMode, "on_oom": _htp.OomPolicy,
          "lookahead": _htp.LookaheadMode}
_ALIASES = {"hbm_budget": "hbm_budget_bytes", "host_budget": "host_budget_bytes"}


def _fields(obj: Any) -> list[str]:
    return sorted(n for n in dir(type(obj)) if not n.startswith("_"))


def _link(value: Any, what: str) -> _htp.LinkConfig:
    if isinstance(value, _htp.LinkConfig):
        return value
    if not isinstance(value, dict):
        raise InvalidArgumentError(f"{what}: pass an htp.LinkConfig or a dict of its fields")
    link = _htp.LinkConfig()
    _assign(link, value, what)
    return link


def _convert(obj: Any, name: str, value: Any, what: str) -> Any:
    if name in _ENUMS and isinstance(value, str):
        enum = _ENUMS[name]
        if not hasattr(enum, value):
            names = ", ".join(m for m in dir(enum) if not m.startswith("_") and m not in ("name", "value"))
            raise InvalidArgumentError(f"{what}.{name}: {value!r} is none of {names}")
        return getattr(enum, value)
    if name in ("h2d", "d2h"):
        return _link(value, f"{what}.{name}")
    if name == "gpu":
        return value if isinstance(value, _htp.PagerConfig) else pager_config(**value)
    if name == "latency_budget_ms" and isinstance(value, datetime.timedelta):
        return int(value.total_seconds() * 1000)
    if name.endswith("_bytes") or name.endswith("bytes_per_second"):
        return None if value is None else parse_bytes(value, f"{what}.{name}")
    return value


def _assign(obj: Any, options: dict[str, Any], what: str) -> Any:
    for key, value in options.items():
        name = _ALIASES.get(key, key)
        if name not in _fields(obj):
            raise InvalidArgumentError(
                f"{what}: no option {key!r}; the options are {', '.join(_fields(obj))}")
        try:
            setattr(obj, name, _convert(obj, name, value, what))
        except TypeError as e:
            raise InvalidArgumentError(f"{what}.{name}: {value!r} has the wrong type ({e})") from None
    return obj


def pager_config(**options: Any) -> _htp.PagerConfig:
    """A PagerConfig from keyword arguments: every field by its name (pager.hpp), plus
    ``hbm_budget``/``host_budget`` for the ``*_bytes`` fields; sizes may be strings ("4GiB");
    enum fields take their names ("belady"); ``h2d``/``d2h`` take LinkConfig or a dict."""
    return _assign(_htp.PagerConfig(), options, "PagerConfig")


def node_config(**options: Any) -> _htp.NodeConfig:
    """A NodeConfig from keyword arguments (node.hpp); ``gpu`` takes a PagerConfig or a dict."""
    return _assign(_htp.NodeConfig(), {_ALIASES.get(k, k): v for k, v in options.items()}, "NodeConfig")


def make_device(backend: str = "auto", ordinal: int = 0, **sim: Any) -> _htp.Device:
    """A device: ``"auto"`` (cuda when a GPU is usable, else sim, with a warning logged),
    ``"cuda"`` (raises CudaError when it cannot run, saying why) or ``"sim"``. Keyword arguments
    are SimConfig fields (``device_memory_bytes="8GiB"``, ``h2d_bytes_per_second=...``), for sim
    only. Thread-safe."""
    if sim and backend != "sim":
        raise InvalidArgumentError(
            f"make_device: {', '.join(sim)} configure a sim device; pass backend='sim'")
    return _htp.make_device(backend, ordinal, _assign(_htp.SimConfig(), sim, "SimConfig"))
