"""``htp.torch.offload(model, hbm_budget, static=True)``: every parameter at one fixed address for
the life of the offload, so CUDA graphs and ``torch.compile`` can use the offloaded model.

The module order is recorded by one forward of ``example_inputs`` (each module's weights copied to
the execution device just for that call). The order becomes a :class:`htp.StaticStep`: a static
plan (which parameters stay resident, which stream through a ring of fixed bytes) and its step
program. Every parameter's ``.data`` then points at its fixed address for good. Around each
module's forward two ``torch.library`` custom ops, ``htp::static_enter`` and ``htp::static_exit``,
enter and leave the module's position: on the GPU they only enqueue event waits, records and
copies on the current stream (capturable); on the sim ``static_enter`` returns once the bytes are
in. Both mutate one token tensor, so a compiled graph keeps them in program order, and they mutate
the module's input and output, so the module's kernels stay between them. See docs/python.md.
"""
from __future__ import annotations

import itertools
import time
import weakref
from typing import Any, Iterable

import torch

from ._htp import Device, InvalidArgumentError, StaticStep
from ._offloaded import (OffloadedError, guard_optimizer, map_tensors, refuse_backward,
                         tensors_in, unguard_optimizer)

__all__ = ["StaticOffload", "static_offload"]

# The live offloads, by the id their ops carry; weak, so a model dropped without remove() frees
# its step (its hooks, which hold the offload, go with it).
_STEPS: "weakref.WeakValueDictionary[int, StaticOffload]" = weakref.WeakValueDictionary()
_NEXT_ID = itertools.count(1)


def _stream_of(t: torch.Tensor) -> Any:
    return torch.cuda.current_stream(t.device) if t.device.type == "cuda" else None


@torch.library.custom_op("htp::static_enter", mutates_args=("token", "x"))
def static_enter(token: torch.Tensor, x: torch.Tensor, step: int, position: int) -> None:
    """Enters `position` of static step `step`: its streamed parameters are in before any later
    work on the current stream (on the CPU: when this returns). Mutates nothing in fact; declaring
    `token` and `x` mutated keeps compiled graphs in program order."""
    _STEPS[step].step.begin(position, _stream_of(token))


@static_enter.register_fake
def _(token: torch.Tensor, x: torch.Tensor, step: int, position: int) -> None:
    return None


@torch.library.custom_op("htp::static_exit", mutates_args=("token", "y"))
def static_exit(token: torch.Tensor, y: torch.Tensor, step: int, position: int) -> None:
    """Leaves `position` once the current stream's work so far (the module's kernels, which made
    `y`) is done, issuing the loads that frees."""
    _STEPS[step].step.end(position, _stream_of(token))


@static_exit.register_fake
def _(token: torch.Tensor, y: torch.Tensor, step: int, position: int) -> None:
    return None


def _forget_compiled(model: torch.nn.Module) -> None:
    """Drops what torch.compile cached for the forwards of `model`'s module classes. Dynamo does
    not guard on the hooks of the submodules it inlines, so without this a graph compiled for a
    resident model of the same classes would be reused for the offloaded one (without htp's ops:
    wrong logits), or the offloaded one's graph for a model after remove(). Other instances of
    these classes recompile once."""
    reset_code = getattr(torch._dynamo.eval_frame, "reset_code", None)
    if reset_code is None:  # an older or newer torch: forget every compiled graph instead
        torch._dynamo.reset()
        return
    for code in {type(m).forward.__code__ for m in model.modules()}:
        reset_code(code)


def _first_tensor(obj: Any) -> torch.Tensor | None:
    return next(iter(tensors_in(obj)), None)


class StaticOffload:
    """What ``offload(..., static=True)`` returns: the step, the plan, ``remove()``.

    Between forwards a streamed parameter's fixed address holds whatever the ring holds there, so
    read weights through ``model.state_dict()`` (the true bytes, from the host copies) or
    :meth:`host_copy`; dtype and device conversions raise :class:`OffloadedError`.
    """

    def __init__(self, model: torch.nn.Module, step: StaticStep, units: list, names: list[str],
                 hosts: list[torch.Tensor], kept: list, exec_device: torch.device) -> None:
        self.model, self.step, self._units, self._kept = model, step, units, kept
        self._names, self._hosts = names, hosts
        self.execution_device = exec_device
        self._id = next(_NEXT_ID)
        _STEPS[self._id] = self
        self._token = torch.zeros(1, device=exec_device)
        self._hooks: list[Any] = []
        self._patched: list[torch.nn.Module] = []
        self._install()
        _forget_compiled(model)
        model._htp_offload = weakref.ref(self)

    @property
    def plan(self) -> dict[str, Any]:
        """The static plan: predicted step, arena and ring bytes, resident and streamed names."""
        return self.step.plan

    def host_copy(self, name: str) -> torch.Tensor:
        """The true bytes of parameter `name` (its host copy; do not modify it)."""
        try:
            return self._hosts[self._names.index(name)]
        except ValueError:
            raise InvalidArgumentError(f"host_copy: no offloaded parameter {name!r}") from None

    def _install(self) -> None:
        guard_optimizer(self._parameters())
        for position, (name, module, params) in enumerate(self._units):
            self._hooks.append(
                module.register_forward_pre_hook(self._enter(position), with_kwargs=True))
            self._hooks.append(module.register_forward_hook(self._exit(position)))
            self._hooks.append(module._register_state_dict_hook(self._state_dict(params)))
            module._apply = self._refuse_apply(name)
            self._patched.append(module)

    def _parameters(self) -> list[torch.nn.Parameter]:
        return [module._parameters[local] for _n, module, params in self._units
                for local, _full, _t in params]

    def _enter(self, position: int):
        def pre(module, args, kwargs):
            x = _first_tensor((args, kwargs))
            torch.ops.htp.static_enter(self._token, x if x is not None else self._token,
                                       self._id, position)
        return pre

    def _exit(self, position: int):
        name = self._units[position][0]

        def post(module, args, output):
            y = _first_tensor(output)
            torch.ops.htp.static_exit(self._token, y if y is not None else self._token,
                                      self._id, position)
            refuse_backward(output, name)  # the ring's bytes move on: its gradients would be wrong
        return post

    def _state_dict(self, params: list[tuple[str, str, int]]):
        def hook(module, state_dict, prefix, local_metadata):
            for local, _full, t in params:
                if prefix + local in state_dict:
                    state_dict[prefix + local] = self._hosts[t].detach()
        return hook

    def _refuse_apply(self, name: str):
        def refuse(fn, *args, **kwargs):
            raise OffloadedError(
                f"module {name!r} is offloaded with static=True: its parameters live at fixed "
                "htp addresses, so a dtype or device conversion cannot move them. Call "
                "handle.remove() first, convert, and offload again")
        return refuse

    def remove(self) -> None:
        """Gives every parameter its host copy back (on the CPU), removes the hooks and frees the
        step's memory. A second call does nothing."""
        if self._id not in _STEPS:
            return
        self.step.synchronize()
        for h in self._hooks:
            h.remove()
        for module in self._patched:
            del module._apply
        unguard_optimizer(self._parameters())
        for _name, module, params in self._units:
            for local, _full, t in params:
                module._parameters[local].data = self._hosts[t]
        for module, device in self._kept:
            module.to(device)
        del _STEPS[self._id]
        self.step = None
        _forget_compiled(self.model)
        if getattr(self.model, "_htp_offload", None) is not None:
            del self.model._htp_offload


def _record_order(model: torch.nn.Module, units: list, exec_device: torch.device,
                  example_inputs: Any) -> tuple[list[int], list[float]]:
    """One forward of `example_inputs`, each unit's weights on the execution device only while it
    runs: the units in the order they ran (each must run once, none inside another) and each
    one's compute time in ns (its weights already there: what the plan's positions take)."""
    order, running, times = [], [], {}
    hosts_of = {id(m): [p.data for _l, p in params] for _n, m, params in units}
    timer = _Timer(exec_device)
    hooks = []
    for i, (_name, module, params) in enumerate(units):
        def pre(module, args, i=i, params=params):
            if running:
                raise InvalidArgumentError(
                    f"offload(static=True): module {units[i][0]!r} runs inside "
                    f"{units[running[-1]][0]!r}, and both have parameters of their own; a static "
                    "plan gives each its own position. Name the outer one in keep=")
            order.append(i)
            running.append(i)
            for _local, p in params:
                p.data = p.data.to(exec_device)
            timer.start(i)

        def post(module, args, output, i=i, params=params):
            times[i] = timer.stop(i)
            running.pop()
            for (_local, p), host in zip(params, hosts_of[id(module)]):
                p.data = host
        hooks.append(module.register_forward_pre_hook(pre))
        hooks.append(module.register_forward_hook(post))
    args, kwargs = example_inputs if isinstance(example_inputs, tuple) and len(
        example_inputs) == 2 and isinstance(example_inputs[1], dict) else (example_inputs, {})
    if not isinstance(args, tuple):
        args = (args,)
    move = lambda obj: map_tensors(obj, lambda t: t.to(exec_device))  # noqa: E731
    try:
        with torch.no_grad():
            model(*move(args), **move(kwargs))
    finally:
        for h in hooks:
            h.remove()
        for _n, module, params in units:  # a forward that raised leaves nothing behind
            for (_local, p), host in zip(params, hosts_of[id(module)]):
                p.data = host
    twice = [units[i][0] for i in set(order) if order.count(i) > 1]
    if twice:
        raise InvalidArgumentError(
            f"offload(static=True): module {twice[0]!r} ran more than once in one forward; a "
            "static plan gives each module one position. Name it in keep= to hold it resident")
    return order, [timer.ns(times[i]) for i in order]


class _Timer:
    """Times a module's compute: CUDA events on a GPU, the host clock on the CPU."""

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"

    def start(self, i: int) -> Any:
        if self.cuda:
            self._begin = torch.cuda.Event(enable_timing=True)
            self._begin.record()
        else:
            self._begin = time.perf_counter_ns()

    def stop(self, i: int) -> Any:
        if self.cuda:
            end = torch.cuda.Event(enable_timing=True)
            end.record()
            return (self._begin, end)
        return time.perf_counter_ns() - self._begin

    def ns(self, mark: Any) -> float:
        if self.cuda:
            mark[1].synchronize()
            return mark[0].elapsed_time(mark[1]) * 1e6
        return float(mark)


def static_offload(model: torch.nn.Module, dev: Device, budget: int, raw_units: list, kept: list,
                   example_inputs: Any, link_bytes_per_second: float,
                   exec_device: torch.device, compress: bool = False) -> StaticOffload:
    """Builds the StaticOffload (see offload()): records the order, plans, points parameters."""
    order, compute_ns = _record_order(model, raw_units, exec_device, example_inputs)
    units = [raw_units[i] for i in order]  # the units that ran, in the order they ran
    index: dict[int, int] = {}
    names, hosts, reads = [], [], []
    for name, _module, own in units:
        for local, p in own:
            if id(p) not in index:
                index[id(p)] = len(names)
                names.append(f"{name}.{local}" if name else local)
                hosts.append(p.detach())
                reads.append(0)
            reads[index[id(p)]] += 1
    positions = [[index[id(p)] for _l, p in own] for _n, _m, own in units]
    codable = (torch.bfloat16, torch.float16, torch.float32)
    step = StaticStep(dev, names, hosts, positions, budget, link_bytes_per_second,
                      compute_ns=compute_ns,
                      keep=[r > 1 for r in reads],  # tied parameters: one address, resident
                      compress=[compress and h.dtype in codable for h in hosts])
    bound = []
    for position, (name, module, own) in enumerate(units):
        params = []
        for local, p in own:
            t = index[id(p)]
            p.data = torch.from_dlpack(step.view(t, position))
            params.append((local, names[t], t))
        bound.append((name, module, params))
    return StaticOffload(model, step, bound, names, hosts, kept, exec_device)
