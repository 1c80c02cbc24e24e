"""What a paged parameter's module holds between forwards: an :class:`OffloadedParameter`, a
stand-in with the parameter's shape, dtype and ``requires_grad`` and no bytes, which raises
:class:`OffloadedError` for anything that would read, write or convert those bytes. So code that
reaches a paged weight outside its module's forward gets a typed error, never a placeholder's
zeros (docs/python.md, "What an offloaded model refuses").

Also the guards :mod:`htp.torch` installs beside its paging hooks: a refusal of backward passes
through an offloaded module's output, and a global optimizer step pre-hook that refuses a step on
paged parameters. The paging itself lives in :mod:`htp.torch`.
"""
from __future__ import annotations

import collections
import copy
import dataclasses
import weakref
from collections.abc import Mapping
from typing import Any, Callable, Iterator

import torch
from torch.optim.optimizer import register_optimizer_step_pre_hook

from ._htp import InvalidArgumentError


class OffloadedError(InvalidArgumentError):
    """An operation needs the bytes of a parameter that ``htp.torch.offload`` is paging, outside
    its module's forward: reading or saving it (other than through ``state_dict()``), converting
    its dtype or device, loading a state dict into it, a backward pass or an optimizer step.
    ``handle.remove()`` gives the model its weights back; do it first."""


_T = torch.Tensor
# Reads of what the stand-in does have: its metadata. Everything else raises.
_METADATA = {
    _T.shape.__get__, _T.dtype.__get__, _T.device.__get__, _T.layout.__get__, _T.ndim.__get__,
    _T.requires_grad.__get__, _T.requires_grad.__set__, _T.requires_grad_, _T.is_leaf.__get__,
    _T.grad.__get__, _T.grad_fn.__get__, _T.is_cuda.__get__, _T.is_meta.__get__,
    _T.is_sparse.__get__, _T.is_quantized.__get__, _T.is_nested.__get__, _T.itemsize.__get__,
    _T.nbytes.__get__, _T.size, _T.dim, _T.numel, _T.nelement, _T.element_size,
    _T.is_floating_point, _T.is_complex, _T.__hash__, _T.__len__, _T.is_mkldnn.__get__,
    torch._has_compatible_shallow_copy_type,
}
_DTYPE_OF = {_T.half: torch.float16, _T.float: torch.float32, _T.bfloat16: torch.bfloat16,
             _T.double: torch.float64}


def _target(func: Callable, self: "OffloadedParameter", args: tuple, kwargs: dict):
    """(device, dtype) that a conversion asks for (None: unchanged), or None if not one."""
    if func is _T.to:
        device, dtype, _, _ = torch._C._nn._parse_to(*args[1:], **kwargs)
        return device, dtype
    if func is _T.cpu:
        return torch.device("cpu"), None
    if func is _T.cuda:
        device = args[1] if len(args) > 1 else kwargs.get("device")
        return torch.device("cuda", device) if isinstance(device, int) else torch.device(
            device if device is not None else "cuda"), None
    if func in _DTYPE_OF:
        return None, _DTYPE_OF[func]
    return None


def _same_device(want: torch.device, have: torch.device) -> bool:
    return want.type == have.type and (want.index is None or have.index is None or
                                       want.index == have.index)


class _StandIn:
    """What the two stand-ins share: the metadata answers, the refusals, the no-op conversions."""

    _htp_name: str
    _htp_exec: torch.device

    def __repr__(self, *args: Any, **kwargs: Any) -> str:
        return (f"{type(self).__name__}({self._htp_name!r}, shape={tuple(self.shape)}, "
                f"dtype={self.dtype}: paged by htp; its bytes exist inside its module's forward)")

    __str__ = __repr__

    def __deepcopy__(self, memo: Any) -> Any:
        raise _refusal(self, "copy.deepcopy")

    def __reduce_ex__(self, proto: Any) -> Any:
        raise _refusal(self, "pickling (torch.save of the parameter)")

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        self = _first_stand_in(args, kwargs)
        if func in _METADATA or self is None:
            with torch._C.DisableTorchFunctionSubclass():
                return func(*args, **kwargs)
        if func is _T.detach:
            return self._detached()
        if func == _T.data.__set__ and args[1] is self:
            return None
        target = _target(func, self, args, kwargs)
        if target is not None:
            device, dtype = target
            if (dtype is None or dtype == self.dtype) and (
                    device is None or _same_device(device, self.device) or
                    _same_device(device, self._htp_exec)):
                return self
            raise _refusal(self, f"a conversion to {dtype or self.dtype} on {device or 'its device'}")
        raise _refusal(self, _call_name(func))


def _make(cls: type, shape: torch.Size, dtype: torch.dtype, requires_grad: bool, name: str,
          execution_device: torch.device) -> Any:
    data = torch.zeros((), dtype=dtype).expand(shape)
    self = torch.Tensor._make_subclass(cls, data, requires_grad)
    self._htp_name, self._htp_exec = name, execution_device
    return self


class OffloadedTensor(_StandIn, torch.Tensor):
    """``detach()`` of an :class:`OffloadedParameter` (what ``state_dict()`` puts in place before
    htp's hook gives the true bytes): a tensor stand-in that refuses the same way."""

    def _detached(self) -> "OffloadedTensor":
        return self


class OffloadedParameter(_StandIn, torch.nn.Parameter):
    """The stand-in for a paged parameter between forwards (see the module's docstring). Its
    shape, dtype, device (the CPU, where a paged parameter lives between forwards), size and
    ``requires_grad`` are the parameter's; ``requires_grad_`` is kept for the next forward. A
    conversion that changes nothing (``.to`` the execution device, ``.float()`` of a float32
    parameter) returns the stand-in itself, ``detach()`` an :class:`OffloadedTensor`; anything
    else raises OffloadedError."""

    def __new__(cls, real: torch.nn.Parameter, name: str, execution_device: torch.device):
        return _make(cls, real.shape, real.dtype, real.requires_grad, name, execution_device)

    def __init__(self, *args: Any, **kwargs: Any) -> None:  # all done in __new__
        pass

    def _detached(self) -> OffloadedTensor:
        return _make(OffloadedTensor, self.shape, self.dtype, False, self._htp_name, self._htp_exec)


def _call_name(func: Callable) -> str:
    owner = getattr(func, "__self__", None)  # a property's __get__ / __set__: name the property
    if getattr(func, "__name__", "") in ("__get__", "__set__") and hasattr(owner, "__name__"):
        return f"{'reading' if func.__name__ == '__get__' else 'setting'} .{owner.__name__}"
    return getattr(func, "__name__", None) or str(func)


def _first_stand_in(args: tuple, kwargs: dict) -> _StandIn | None:
    for a in (*args, *kwargs.values()):
        if isinstance(a, _StandIn):
            return a
        if isinstance(a, (list, tuple)):
            for b in a:
                if isinstance(b, _StandIn):
                    return b
    return None


def _refusal(p: _StandIn, what: str) -> OffloadedError:
    return OffloadedError(
        f"{what}: parameter {p._htp_name!r} is paged by htp.torch.offload and has no bytes "
        "outside its module's forward. model.state_dict() and save_pretrained() give its true "
        "bytes; to read, convert, train or load it otherwise, call handle.remove() first (the "
        "model gets its weights back) and offload again afterwards")


# ---- containers: what the execution-device hook and the backward guard walk ----------------------
def _is_namedtuple(obj: Any) -> bool:
    return isinstance(obj, tuple) and hasattr(type(obj), "_fields")


def map_tensors(obj: Any, fn: Callable[[torch.Tensor], torch.Tensor]) -> Any:
    """``obj`` with ``fn`` applied to every tensor inside tuples, lists, namedtuples, deques, mappings
    (dict, OrderedDict, defaultdict, transformers' ModelOutput and BatchEncoding) and dataclasses,
    keeping every container's type. Returns ``obj`` itself where nothing inside changed, so
    objects that must keep their identity (a KV cache) and unknown objects pass through."""
    if isinstance(obj, torch.Tensor):
        return fn(obj)
    if isinstance(obj, (list, tuple, collections.deque)):
        items = [map_tensors(o, fn) for o in obj]
        if all(a is b for a, b in zip(items, obj)):
            return obj
        if _is_namedtuple(obj):
            return type(obj)(*items)
        if isinstance(obj, collections.deque):
            return type(obj)(items, maxlen=obj.maxlen)
        return type(obj)(items)
    if isinstance(obj, Mapping):
        changed = {k: v2 for k, v in obj.items() if (v2 := map_tensors(v, fn)) is not v}
        if not changed:
            return obj
        try:
            out = copy.copy(obj)  # keeps the type and its attributes (ModelOutput, BatchEncoding)
            for k, v in changed.items():
                out[k] = v
        except TypeError:  # a read-only mapping: a plain dict of its items
            out = {k: changed.get(k, v) for k, v in obj.items()}
        return out
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        changed = {f.name: v2 for f in dataclasses.fields(obj)
                   if (v2 := map_tensors(v := getattr(obj, f.name), fn)) is not v}
        if not changed:
            return obj
        out = copy.copy(obj)
        for k, v in changed.items():
            object.__setattr__(out, k, v)  # frozen dataclasses too
        return out
    return obj


def tensors_in(obj: Any) -> Iterator[torch.Tensor]:
    """Every tensor inside ``obj``, through the containers :func:`map_tensors` knows."""
    found: list[torch.Tensor] = []

    def note(t: torch.Tensor) -> torch.Tensor:
        found.append(t)
        return t
    map_tensors(obj, note)
    return iter(found)


# ---- guards ------------------------------------------------------------------------------------
def refuse_backward(output: Any, unit_name: str) -> None:
    """With autograd recording, makes a gradient reaching ``output`` (a paged module's output)
    raise OffloadedError: the module's weights were released when its forward ended, so its
    backward would compute with bytes that are no longer there."""
    if not torch.is_grad_enabled():
        return

    def refuse(grad: torch.Tensor) -> None:
        raise OffloadedError(
            f"backward through {unit_name!r}: htp.torch.offload pages weights for inference; its "
            "weights were released when its forward ended, so its gradients would be wrong. Run "
            "the model under torch.no_grad() / torch.inference_mode(), or offload it with "
            "htp.torch.offload(..., training=True) to train it")
    for t in tensors_in(output):
        if t.requires_grad:
            t.register_hook(refuse)


_live_real_params: "weakref.WeakValueDictionary[int, torch.nn.Parameter]" = weakref.WeakValueDictionary()
_optimizer_hook: Any = None


def guard_optimizer(real_params: list[torch.nn.Parameter]) -> None:
    """Refuses an optimizer step over ``real_params`` (paged parameters, by identity) or over
    their stand-ins, from now until :func:`unguard_optimizer`: one global step pre-hook."""
    global _optimizer_hook
    for p in real_params:
        _live_real_params[id(p)] = p
    if _optimizer_hook is None:
        _optimizer_hook = register_optimizer_step_pre_hook(_check_step)


def unguard_optimizer(real_params: list[torch.nn.Parameter]) -> None:
    """Stops refusing steps over ``real_params``."""
    for p in real_params:
        if _live_real_params.get(id(p)) is p:
            del _live_real_params[id(p)]


def _check_step(optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
    if not _live_real_params:
        return
    for group in optimizer.param_groups:
        for p in group["params"]:
            if isinstance(p, _StandIn):
                raise _refusal(p, f"{type(optimizer).__name__}.step()")
            if _live_real_params.get(id(p)) is p:
                raise OffloadedError(
                    f"{type(optimizer).__name__}.step(): a parameter of shape {tuple(p.shape)} is "
                    "paged by htp.torch.offload (inference only): its bytes live in htp, so a "
                    "step would update a placeholder. Offload with training=True to train it")
