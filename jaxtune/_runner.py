"""Where a sweep runs: the runner interface and the in-process runner.

The child-process runner (crash and hang isolation, flags before import) plugs into the
same :class:`Runner` protocol.
"""

from __future__ import annotations

import concurrent.futures
from typing import Protocol

from . import _context
from ._sweep import SweepOutcome, SweepTask, run_sweep

__all__ = ["InlineRunner", "Runner", "default_runner"]


class Runner(Protocol):
    """Runs one sweep and returns its outcome (or raises ``TuningFailedError``)."""

    def sweep(self, task: SweepTask) -> SweepOutcome: ...


class InlineRunner:
    """Runs the sweep in this process, in a fresh thread.

    The thread matters: a sweep may start while JAX is tracing the caller under ``jax.jit``,
    and JAX's trace state is per thread, so work done in a new thread executes for real
    instead of being staged into the caller's trace. There is no crash isolation, and a
    timeout is noticed only once the slow step returns.
    """

    def sweep(self, task: SweepTask) -> SweepOutcome:
        local_config = _context.capture()

        def work() -> SweepOutcome:
            with local_config():
                return run_sweep(task)

        with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="jaxtune-sweep") as ex:
            return ex.submit(work).result()


def default_runner() -> Runner:
    """The runner ``JAXTUNE_ISOLATION`` selects (in-process until the child runner lands)."""
    return InlineRunner()
