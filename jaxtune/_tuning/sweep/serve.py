"""Kernel side. The child side of a sweep: the handler of the requests
:mod:`jaxtune._tuning.sweep.runner` sends (``measure`` and ``retime`` of one task at a time),
registered by name in each request (``handler``) and imported by the child's server when the
first one arrives.

It keeps one :class:`~jaxtune._tuning.sweep.engine.Sweeper` per task, so a ``retime`` reuses
the executables its ``measure`` compiled, and streams an event per step (through the
server) so the parent knows which config was in flight if the child dies.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

from ..._isolation.child import Server
from ..._isolation.frames import (
    Done,
    ErrorKind,
    ErrorReply,
    FrameError,
    FunctionRef,
    Request,
)
from ..._isolation.resolve import Unresolved, find, namespace, observe_imports
from ..._isolation.wire import decode_value
from ..autotuned import Autotuned, registry
from ..record import observing_calls
from ..signature import Signature
from .compile_cache import enable as enable_compile_cache
from .engine import Sweeper
from .requests import Measure, Retime, SweepRequest, results_answer, sweep_fields
from .work import SweepTask

__all__ = ["abstract_inputs", "handle", "resolve_kernel"]

# The kernels a requested module's top level calls are named to the parent once.
observe_imports(observing_calls)


def resolve_kernel(ref: FunctionRef) -> Autotuned[Any, Any]:
    """The ``Autotuned`` object a kernel reference names (its ``kernel`` id, at
    ``module:qualname``; a kernel defined in a script run as ``__main__`` travels with the
    script's ``path``: that script is re-run under another module name, so its
    ``if __name__ == "__main__":`` block does not run).

    Raises:
        Unresolved: the module cannot be imported here, or holds no such kernel.
    """
    globals_ = namespace(ref)
    obj = find(globals_, ref.qualname)
    if isinstance(obj, Autotuned):
        return obj
    for value in globals_.values():
        if isinstance(value, Autotuned) and value.kernel_id == ref.kernel:
            return value
    found = registry().get(ref.kernel or "")
    if found is not None:
        return found
    raise Unresolved(f"no @autotuned kernel {ref.kernel!r} at {ref.module}:{ref.qualname}")


def _build_task(
    request: SweepRequest, kernel: Autotuned[Any, Any], *, abstract: bool = False
) -> SweepTask:
    """The sweep task a request for ``kernel`` describes (``abstract``: its arrays as
    shapes, for work that can start before their bytes arrive)."""
    if request.fields.plan is None:
        raise FrameError("a sweep request for a new task carries its kernel and plan")
    plan = dataclasses.replace(request.fields.plan, verbose=0)
    sig = _bound(kernel, plan.kernel, plan.key, request.args, request.kwargs, abstract)
    value_sets = []
    for values in request.fields.mix:
        other = _bound(kernel, plan.kernel, plan.key, values.args, values.kwargs, abstract)
        value_sets.append({name: other.value(name) for name in other.dynamic})
    return SweepTask(
        plan=plan,
        fn=kernel.__wrapped__,
        signature=sig,
        check=kernel.options.check,
        inputs=kernel.options.inputs,
        compile_threads=plan.compile_threads,
        value_sets=tuple(value_sets),
    )


def _bound(
    kernel: Autotuned[Any, Any], name: str, key: str, args: Any, kwargs: Any, abstract: bool
) -> Signature:
    """A call's encoded arguments decoded (``abstract``: as shapes) and bound.

    Raises:
        Unresolved: they bind to another key than the parent's.
    """
    sig = kernel.options.bind(
        tuple(decode_value(args, abstract=abstract)), dict(decode_value(kwargs, abstract=abstract))
    )
    if sig.key != key:
        raise Unresolved(
            f"the child computed key {sig.key!r} for {name}, the parent {key!r}; the "
            "kernel's module or the JAX state its key depends on differs between the two "
            "processes"
        )
    return sig


def handle(server: Server, received: Request[Any]) -> Done | ErrorReply:
    """Answers a ``measure`` or ``retime`` request (``server``: the child's
    :class:`~jaxtune._isolation.child.Server`)."""
    request = sweep_fields(received)
    task, work = request.fields.task_id, request.fields.work
    if work is None:
        raise FrameError("a sweep request lists the configs to do")
    current = server.state.get(__name__)
    start = time.perf_counter()
    # On every request: the caller's JAX state, applied just before, sets the cache's
    # options as the caller has them (a user's own directory travels so), and a pooled
    # child serves sweeps of several cache directories.
    enable_compile_cache()
    # Importing this module (the child's first request of its kind) is part of the start.
    handler_s = server.handler_s
    importing = 0.0
    if current is None or current[0] != task:
        if not request.has_call:  # the parent thought this child still held the task
            return ErrorReply(kind=ErrorKind.UNKNOWN_TASK, message=task)
        if request.ref is None:
            raise FrameError("a sweep request for a new task carries its kernel and plan")
        # The kernel's module, where nothing imported it ahead of need: part of the
        # sweep's start, not of its arguments' transfer.
        kernel = resolve_kernel(request.ref)
        importing = time.perf_counter() - start
        current = (task, _sweeper(server, request, work, kernel))
        server.state[__name__] = current
    server.arrived()
    sweeper = current[1]
    sweeper.breakdown.add("start", handler_s + importing)
    sweeper.breakdown.add("transfer", time.perf_counter() - start - importing)
    if isinstance(work, Measure):
        measure = work
        # After a crash during a round of passes, rounds time one config at a time.
        sweeper.serial_rounds = measure.serial
        results = sweeper.measure(
            measure.todo,
            reference=measure.reference,
            best_us=measure.best_us,
            serial_compile=measure.serial,
            rounds=measure.rounds,
        )
    else:
        retime = work
        sweeper.serial_rounds = retime.serial
        results = dict(sweeper.retime(retime.todo, retime.second))
    return results_answer(results, sweeper.account())


def _sweeper(
    server: Server,
    request: SweepRequest,
    work: Measure | Retime,
    kernel: Autotuned[Any, Any],
) -> Sweeper:
    """A sweeper for a new task; when its arrays are still arriving, the configs to
    measure start compiling for their shapes meanwhile."""
    if not (server.pending and isinstance(work, Measure)):
        server.arrived()
        return Sweeper(_build_task(request, kernel), on_event=server.emit)
    measure = work
    task = _build_task(request, kernel, abstract=True)
    sweeper = Sweeper(task, on_event=server.emit)
    sweeper.precompile(
        measure.todo,
        abstract_inputs(task.signature),
        serial=measure.serial,
        reference=measure.reference,
    )
    server.arrived()
    sweeper.supply(_build_task(request, kernel))
    return sweeper


def abstract_inputs(sig: Signature) -> dict[str, Any]:
    """The kernel's dynamic arguments as ``jax.ShapeDtypeStruct`` leaves."""
    import jax

    return {
        name: jax.tree_util.tree_map(
            lambda leaf: jax.ShapeDtypeStruct(leaf.shape, leaf.dtype), sig.value(name)
        )
        for name in sig.dynamic
    }
