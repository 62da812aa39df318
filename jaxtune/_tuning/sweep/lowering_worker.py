"""Kernel side. A lowering process (runs in its own process, started by :mod:`.lowering_pool`): traces
and lowers its share of a sweep's configs through ``jax.export`` and keeps each program in
the task's store (:mod:`.program_store`), for the compiling process to load.

It runs on JAX's CPU platform, so it never opens the accelerator the sweep holds; for a TPU
it lowers for the chip's topology (``jax.experimental.topologies``, a compile-only view of
the chip that libtpu gives without the device), with that topology's device as JAX's
default device, so that kernel code asking what it runs on (Tokamax's ops do) sees the
chip. What it produces is never taken on faith: the compiling process compares the first
program it loads with one it lowers itself, and lowers everything itself when they differ.

Reads one :class:`.lowering_pool.LoweringJob` on stdin (msgpack of :mod:`jaxtune._core.codec`),
writes one :class:`.lowering_pool.Told` per config on stdout as it goes (a frame of
:mod:`jaxtune._isolation.wire`; both records through the typed codec,
:mod:`jaxtune._core.typed`). Nothing it reads runs code but the kernel's
own module, imported as a sweep's child imports it.

    python -m jaxtune._tuning.sweep.lowering_worker
"""

from __future__ import annotations

import os
import pathlib
import sys
import time
from typing import Any

from ..._core import typed
from ..._core.codec import unpackb
from ..._isolation.framing import write_frame
from .lowering_pool import LoweringJob, Told

__all__ = ["main"]


def _setup(job: LoweringJob) -> None:
    """JAX set up as the job asks: the caller's state, and the chip's topology's device as
    the default device where it lowers for a TPU."""
    import jax

    from ..._isolation.context import apply_snapshot

    apply_snapshot(job.jax_state)
    if job.topology:
        from jax.experimental import topologies

        topology = topologies.get_topology_desc(
            topology_name=job.topology, platform="tpu", chips_per_host_bounds=(1, 1, 1)
        )
        jax.config.update("jax_default_device", topology.devices[0])


def _task(job: LoweringJob) -> Any:
    """The sweep task, its arrays as shapes."""
    from ..._isolation.wire import decode_value
    from .serve import resolve_kernel
    from .work import SweepTask

    kernel = resolve_kernel(job.ref)
    sig = kernel.options.bind(
        tuple(decode_value(job.args, abstract=True)),
        dict(decode_value(job.kwargs, abstract=True)),
    )
    if sig.key != job.plan.key:
        raise RuntimeError(
            f"the lowering process computed key {sig.key!r}, the sweep {job.plan.key!r}"
        )
    return SweepTask(plan=job.plan, fn=kernel.__wrapped__, signature=sig)


def _step(name: str) -> None:
    """Notes in the process's log (its stderr) when it reached step ``name``, as seconds of
    the epoch: where a process's start goes (``bench/_timeline.py`` reads them)."""
    print(f"{STEP} {name} {time.time():.3f}", file=sys.stderr, flush=True)


#: How a step's line in a lowering process's log starts.
STEP = "jaxtune lowering step:"


def main() -> int:
    # The answers go out on the stdout the pool reads, as frames of the wire; whatever the
    # kernel's code prints goes to stderr (the pool's log of the process) instead.
    _step("imported")
    sys.stdout.flush()
    answers = os.dup(1)
    os.dup2(2, 1)

    def tell(cid: str, outcome: Any, reason: str = "") -> None:
        write_frame(answers, typed.encode(Told(cid=cid, outcome=outcome, reason=reason)))

    raw = unpackb(sys.stdin.buffer.read())
    job = typed.decode(LoweringJob, raw, within="a lowering process's job")
    _step("job read")
    _setup(job)
    _step("topology")

    from .check import reason as describe
    from .compile import RefusedError, UnexportedError, config_call, export_program
    from .program_store import ProgramStore
    from .refusals import checker_for
    from .serve import abstract_inputs

    task = _task(job)
    _step("kernel imported")
    store = ProgramStore(pathlib.Path(job.folder))
    refuse = checker_for(job.vmem) if job.refuse else None
    spec = abstract_inputs(task.signature)
    lowering = (spec,) * job.sets
    platforms = (job.platform,)
    for cid, config in job.configs:
        call = config_call(task, config, "jaxtune_program")
        try:
            _, blob = export_program(call, lowering, refuse, platforms)
        except RefusedError as e:
            store.remember_failure(cid, str(e))
            tell(cid, "refused", str(e))
        except UnexportedError:
            tell(cid, "unexported")
            return 0
        except Exception as e:  # the kernel, or JAX tracing it, failed: left to the sweep
            tell(cid, "failed", describe(e))
        else:
            store.save(cid, blob)
            tell(cid, "kept")
        if cid == job.configs[0][0]:
            _step("first told")
    return 0


if __name__ == "__main__":
    sys.exit(main())
