"""Kernel side. A lowering process (runs in its own process, started by :mod:`.lowering_pool`): traces
and lowers its share of a sweep's configs through ``jax.export`` and keeps each program in
the task's store (:mod:`.kept_programs`), for the compiling process to load.

It runs on JAX's CPU platform, so it never opens the accelerator the sweep holds; for a TPU
it lowers for the chip's topology (``jax.experimental.topologies``, a compile-only view of
the chip that libtpu gives without the device), with that topology's device as JAX's
default device, so that kernel code asking what it runs on (Tokamax's ops do) sees the
chip. What it produces is never taken on faith: the compiling process compares the first
program it loads with one it lowers itself, and lowers everything itself when they differ.

Reads one msgpack map on stdin (:func:`.lowering_pool.request`), writes one msgpack map
per config on stdout as it goes: ``{"cid", "outcome", "reason"}``, ``outcome`` one of
``kept``, ``refused`` (the refusal is kept too), ``failed`` (tracing raised: the compiling
process lowers it itself and keeps what it finds) or ``unexported`` (``jax.export`` cannot
serialise it: nothing more is lowered here). Nothing it reads runs code but the kernel's
own module, imported as a sweep's child imports it.

    python -m jaxtune._tuning.sweep.lowering_worker
"""

from __future__ import annotations

import pathlib
import sys
from typing import Any

import msgpack

__all__ = ["main"]


def _setup(request: dict[str, Any]) -> Any:
    """JAX set up as the request asks; the device programs are lowered for."""
    import jax

    from ..._isolation.context import apply_snapshot

    apply_snapshot(request["jax_state"])
    if request["topology"]:
        from jax.experimental import topologies

        topology = topologies.get_topology_desc(
            topology_name=request["topology"], platform="tpu", chips_per_host_bounds=(1, 1, 1)
        )
        device = topology.devices[0]
        jax.config.update("jax_default_device", device)
        return device
    return jax.devices()[0]


def _task(request: dict[str, Any]) -> Any:
    """The sweep task, its arrays as shapes."""
    from ..._isolation.frames import FunctionRef
    from ..._isolation.wire import decode_value
    from .serve import resolve_kernel
    from .work import SweepPlan, SweepTask

    kernel = resolve_kernel(FunctionRef(**request["ref"]))
    plan = SweepPlan.from_dict(request["plan"])
    sig = kernel.bind(
        tuple(decode_value(request["args"], abstract=True)),
        dict(decode_value(request["kwargs"], abstract=True)),
    )
    if sig.key != plan.key:
        raise RuntimeError(f"the lowering process computed key {sig.key!r}, the sweep {plan.key!r}")
    return SweepTask(plan=plan, fn=kernel.__wrapped__, signature=sig)


def main() -> int:
    out = sys.stdout.buffer

    def tell(cid: str, outcome: str, reason: str = "") -> None:
        out.write(msgpack.packb({"cid": cid, "outcome": outcome, "reason": reason}))
        out.flush()

    request = msgpack.unpack(sys.stdin.buffer, raw=False)
    _setup(request)

    from .check import reason as describe
    from .compile import RefusedError, UnexportedError, config_call, export_program
    from .kept_programs import KeptPrograms
    from .refusals import checker_for
    from .serve import abstract_inputs

    task = _task(request)
    kept = KeptPrograms(pathlib.Path(request["folder"]))
    refuse = checker_for(request["vmem"]) if request["refuse"] else None
    spec = abstract_inputs(task.signature)
    lowering = (spec,) * request["sets"]
    platforms = (request["platform"],)
    for cid, config in request["configs"]:
        call = config_call(task, config, "jaxtune_program")
        try:
            _, blob = export_program(call, lowering, refuse, platforms)
        except RefusedError as e:
            kept.remember_failure(cid, str(e))
            tell(cid, "refused", str(e))
        except UnexportedError:
            tell(cid, "unexported")
            return 0
        except Exception as e:  # the kernel, or JAX tracing it, failed: left to the sweep
            tell(cid, "failed", describe(e))
        else:
            kept.save(cid, blob)
            tell(cid, "kept")
    return 0


if __name__ == "__main__":
    sys.exit(main())
