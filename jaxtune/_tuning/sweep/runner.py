"""Parent side. Where a sweep runs: in a re-exec'd child process (default) or in this process.

The child (a :class:`~jaxtune._isolation.service.ChildService`'s, answered there by
:mod:`jaxtune._tuning.sweep.serve`) starts with its environment (flags, ``JAX_PLATFORMS``, device visibility,
``PYTHONPATH`` from ``sys.path``) set before it imports JAX, in its own process group, and
talks over two pipes in msgpack frames. A config that kills the child (signal, abort,
``os._exit``, out of memory) or outlives ``JAXTUNE_TIMEOUT`` is recorded as failed with
the signal or exit status and the tail of the child's stderr (the service's
:class:`~jaxtune._isolation.service.Crash`, which kills the child's whole process group);
the next request starts a new child and goes on with the remaining configs.
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from ..._core import settings as _settings
from ..._core.errors import JaxtuneError, warn_once
from ..._core.flags import normalise_platform
from ..._isolation import context as _context
from ..._isolation.devices import parent_backend, sweep_devices
from ..._isolation.environ import warn_tracing_inline
from ..._isolation.frames import UNIMPORTABLE, Module, NotTransportable, Request
from ..._isolation.service import ChildService
from . import compile_cache
from .breakdown import Breakdown
from .children import InChildren
from .drive import drive, new_progress, run_sweep
from .requests import SweepFields, sweep_request
from .stats import SweepOutcome
from .work import SweepPlan, SweepTask

__all__ = [
    "InlineRunner",
    "ProcessRunner",
    "Runner",
    "default_runner",
    "prestart_child",
]

_TPU_HELD = (
    "this process already opened the TPU, and only one process can hold a TPU chip, so "
    "the sweep runs here without crash isolation. To tune with isolation, run your program "
    "under `jaxtune tune -- python your_script.py`, or set JAXTUNE_ISOLATION=inline to "
    "silence this message."
)


class Runner(Protocol):
    """Runs one sweep and returns its outcome (or raises ``TuningFailedError``)."""

    def sweep(self, task: SweepTask) -> SweepOutcome: ...


class InlineRunner:
    """Runs the sweep in this process, in a fresh thread.

    The thread matters: a sweep may start while JAX is tracing the caller under ``jax.jit``,
    and JAX's trace state is per thread, so work done in a new thread executes for real
    instead of being staged into the caller's trace; the caller's thread-local JAX
    configuration is carried over. There is no crash isolation, and a timeout is noticed
    only once the slow step returns.
    """

    def sweep(self, task: SweepTask) -> SweepOutcome:
        warn_tracing_inline()
        local_config = _context.snapshot_local()

        def work() -> SweepOutcome:
            with local_config(), compile_cache.for_inline_sweep():
                return run_sweep(task)

        with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="jaxtune-sweep") as ex:
            return ex.submit(work).result()


class ProcessRunner(ChildService):
    """Runs sweeps in a long-lived child process, restarting it after a crash or hang.

    The child is the :class:`~jaxtune._isolation.service.ChildService`'s for ``platform``,
    ``env``, ``memory_limit`` and ``device`` (see there; never with profiling flags);
    ``devices`` runs one child per listed device, each measuring a share of the configs at
    the same time (on CPU each "device" is simply another child process).
    """

    def __init__(
        self,
        *,
        platform: str | None = None,
        env: Mapping[str, str] | None = None,
        memory_limit: int | None = None,
        device: int | None = None,
        devices: Sequence[int] | None = None,
    ) -> None:
        super().__init__(platform=platform, env=env, memory_limit=memory_limit, device=device)
        self.devices = list(devices) if devices else None

    def prestart(self, fn: Any = None, *, hold: bool = False) -> bool:
        """Starts this runner's pooled child ahead of need and imports ``fn``'s module
        there, and the module that answers sweeps; with ``hold`` (a caller that never
        starts a backend), a TPU child too, on hold until the first sweep (see
        :func:`jaxtune._isolation.prestart.prestart`); returns whether a start was begun."""
        from ..._isolation.prestart import prestart
        from .requests import HANDLER

        return prestart(self, fn, handler=HANDLER, hold=hold)

    def preload(self, modules: Sequence[Module]) -> bool:
        """Imports ``modules`` in this runner's pooled child ahead of need, starting the
        child where it is not started (see :func:`jaxtune._isolation.prestart.preload`)."""
        from ..._isolation.prestart import preload

        return preload(self, modules)

    # -- a sweep -------------------------------------------------------------------------

    def sweep(self, task: SweepTask) -> SweepOutcome:
        kernel = task.plan.kernel
        if normalise_platform(parent_backend()) == "tpu" and self.expected_platform() == "tpu":
            warn_once(("tpu held", kernel), f"jaxtune: tuning {kernel}: {_TPU_HELD}", stacklevel=4)
            return InlineRunner().sweep(task)
        try:
            return self.run(task.plan, sweep_request(task))
        except NotTransportable as e:
            advice = (
                "Make the kernel's module importable on its own in a fresh Python process"
                if str(e).startswith(UNIMPORTABLE)
                else "Define the kernel at module level with plain array/static arguments"
            )
            warn_once(
                ("not transportable", kernel),
                f"jaxtune: {kernel} cannot be tuned in a child process: {e}. It is tuned "
                f"in this process instead, without crash isolation. {advice}, or set "
                "JAXTUNE_ISOLATION=inline to silence this warning.",
                stacklevel=4,
            )
            return InlineRunner().sweep(task)

    def run(self, plan: SweepPlan, request: Request[SweepFields]) -> SweepOutcome:
        """Runs the sweep ``plan`` describes through a prepared request (``jaxtune tune``
        reads both from a recording; :meth:`sweep` builds them from a task): the plan's
        search strategy picks the batches, the leaders are re-timed on one device."""
        progress = new_progress(plan)
        breakdown = Breakdown()
        measurer = InChildren(
            self, plan, request, progress, devices=self.devices or (), breakdown=breakdown
        )
        return drive(plan, measurer, progress=progress, breakdown=breakdown)


def default_runner() -> Runner:
    """The runner ``JAXTUNE_ISOLATION`` selects: ``process`` (default; one child per local
    GPU or CPU device when this process has several) or ``inline``."""
    from ..._core.settings import settings

    if settings().isolation == "inline":
        return InlineRunner()
    return ProcessRunner(devices=sweep_devices())


def prestart_child(fn: Any = None, *, sweeping: bool = False) -> None:
    """In ``tune``/``retune`` mode (or whatever the mode when ``sweeping``: the caller is
    about to sweep) with process isolation, starts the sweep child now (in the background)
    and imports ``fn``'s module there, so that the first sweep waits for neither; bad
    settings are left for the first call to report."""
    try:
        settings = _settings.settings()
    except JaxtuneError:
        return
    if (sweeping or settings.mode in ("tune", "retune")) and settings.isolation == "process":
        ProcessRunner().prestart(fn)
