"""The child side of a sweep: the handler of the requests :mod:`jaxtune._tuning.sweep.runner`
sends (``measure`` and ``retime`` of one task at a time), registered by name in each
request (``handler``) and imported by the child's server when the first one arrives.

It keeps one :class:`~jaxtune._tuning.sweep.engine.Sweeper` per task, so a ``retime`` reuses
the executables its ``measure`` compiled, and streams an event per step (through the
server) so the parent knows which config was in flight if the child dies.
"""

from __future__ import annotations

from typing import Any

from ..._isolation.resolve import find, namespace, observe_imports
from ..._isolation.wire import decode_value
from ..autotuned import Autotuned, registry
from ..record import observing_calls
from .plan import Sweeper, SweepPlan, SweepTask

__all__ = ["abstract_inputs", "handle", "resolve_kernel"]

# The kernels a requested module's top level calls are named to the parent once.
observe_imports(observing_calls)


def resolve_kernel(ref: dict[str, Any]) -> Autotuned[Any, Any]:
    """The ``Autotuned`` object a kernel reference names.

    ``ref`` holds ``module``, ``qualname``, ``kernel`` (its id) and, for a kernel defined in
    a script run as ``__main__``, ``path``: that script is re-run under another module name,
    so its ``if __name__ == "__main__":`` block does not run.

    Raises:
        LookupError: the module cannot be imported here, or holds no such kernel.
    """
    globals_ = namespace(ref)
    obj = find(globals_, ref["qualname"])
    if isinstance(obj, Autotuned):
        return obj
    for value in globals_.values():
        if isinstance(value, Autotuned) and value.kernel_id == ref["kernel"]:
            return value
    found = registry().get(ref["kernel"])
    if found is not None:
        return found
    raise LookupError(
        f"no @autotuned kernel {ref['kernel']!r} at {ref['module']}:{ref['qualname']}"
    )


def _build_task(msg: dict[str, Any], *, abstract: bool = False) -> SweepTask:
    """The sweep task a request describes (``abstract``: its arrays as shapes, for work
    that can start before their bytes arrive)."""
    kernel = resolve_kernel(msg["ref"])
    plan = SweepPlan.from_dict({**msg["plan"], "verbose": 0})
    args = decode_value(msg["args"], abstract=abstract)
    kwargs = decode_value(msg["kwargs"], abstract=abstract)
    sig = kernel.bind(tuple(args), dict(kwargs))
    if sig.key != plan.key:
        raise LookupError(
            f"the child computed key {sig.key!r} for {plan.kernel}, the parent "
            f"{plan.key!r}; the kernel's module or the JAX state its key depends on "
            "differs between the two processes"
        )
    return SweepTask(
        plan=plan, fn=kernel.__wrapped__, signature=sig, check=kernel.check, inputs=kernel.inputs
    )


def handle(server: Any, msg: dict[str, Any]) -> dict[str, Any]:
    """Answers a ``measure`` or ``retime`` request (``server``: the child's
    :class:`~jaxtune._isolation.child.Server`)."""
    current = server.state.get(__name__)
    if current is None or current[0] != msg["task_id"]:
        if "args" not in msg:  # the parent thought this child still held the task
            return {"t": "error", "type": "UnknownTask", "message": msg["task_id"]}
        current = (msg["task_id"], _sweeper(server, msg))
        server.state[__name__] = current
    server.arrived()
    sweeper = current[1]
    # After a crash during a round of passes, rounds time one config at a time.
    sweeper.serial_rounds = bool(msg.get("serial"))
    op = msg.get("op")
    if op == "measure":
        results = sweeper.measure(
            msg["todo"],
            reference=msg["reference"],
            best_us=msg["best_us"],
            serial_compile=msg["serial"],
            rounds=bool(msg.get("rounds")),
        )
    elif op == "retime":
        results = dict(sweeper.retime(msg["todo"]))
    else:
        raise LookupError(f"unknown request {op!r}")
    return {"t": "done", "results": {k: r.to_dict() for k, r in results.items()}}


def _sweeper(server: Any, msg: dict[str, Any]) -> Sweeper:
    """A sweeper for a new task; when its arrays are still arriving, the configs to
    measure start compiling for their shapes meanwhile."""
    if not (server.pending and msg.get("op") == "measure"):
        server.arrived()
        return Sweeper(_build_task(msg), on_event=server.emit)
    task = _build_task(msg, abstract=True)
    sweeper = Sweeper(task, on_event=server.emit)
    sweeper.precompile(msg["todo"], abstract_inputs(task.signature), serial=bool(msg.get("serial")))
    server.arrived()
    sweeper.supply(_build_task(msg).signature)
    return sweeper


def abstract_inputs(sig: Any) -> dict[str, Any]:
    """The kernel's dynamic arguments as ``jax.ShapeDtypeStruct`` leaves."""
    import jax

    return {
        name: jax.tree_util.tree_map(
            lambda leaf: jax.ShapeDtypeStruct(leaf.shape, leaf.dtype), sig.value(name)
        )
        for name in sig.dynamic
    }
