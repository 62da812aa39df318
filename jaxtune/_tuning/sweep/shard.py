"""Parent side. A sweep shared by the processes of a job: each measures every n-th config, and
the leader merges the shares and picks the winner by the single-process rule.

:class:`SweepSharing` is what :mod:`jaxtune._distributed.agree` is given to split a sweep
(its ``Sharing`` protocol): agreement moves the shares between processes, this module
knows what a share is.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from ..._core.errors import TuningFailedError
from ..._core.vocabulary import Failure, Measurement, config_id, measurement_from_dict
from .runner import Runner
from .stats import SweepOutcome, finish
from .work import SweepTask

__all__ = ["SweepSharing", "measure_share", "merge", "share"]

Result = Measurement | Failure


def share(configs: Sequence[Mapping[str, Any]], index: int, count: int) -> list[dict[str, Any]]:
    """Process ``index``'s part of ``configs``: every ``count``-th config from ``index`` on,
    so cheap and expensive corners of a space are spread evenly."""
    return [dict(c) for c in configs[index::count]]


def measure_share(task: SweepTask, index: int, count: int, runner: Runner) -> dict[str, Any]:
    """Measures this process's share of ``task`` (each share also runs the default, as the
    reference its outputs are checked against); returns it as plain data."""
    mine = share(task.plan.configs, index, count)
    if not mine:
        return {"results": [], "default": None}
    part = dataclasses.replace(task, plan=dataclasses.replace(task.plan, configs=tuple(mine)))
    try:
        outcome: SweepOutcome = runner.sweep(part)
    except TuningFailedError as e:
        failures = list(e.failures) or [
            Failure(config=dict(c), stage="run", reason=f"on process {index}: {e}") for c in mine
        ]
        return {"results": [f.to_dict() for f in failures], "default": None}
    return {
        "results": [m.to_dict() for m in outcome.measurements],
        "default": outcome.default.to_dict(),
    }


def merge(task: SweepTask, parts: Sequence[Mapping[str, Any]]) -> SweepOutcome:
    """The outcome of the whole sweep from every process's share, in process order.

    Raises:
        TuningFailedError: every config failed; the message lists each reason.
    """
    results: dict[str, Result] = {}
    default: Result | None = None
    for part in parts:
        for item in part["results"]:
            result = measurement_from_dict(item)
            results[config_id(result.config)] = result
        if default is None and part.get("default") is not None:
            default = measurement_from_dict(part["default"])
    default_id = config_id(task.plan.default)
    if default_id not in results:
        results[default_id] = default or Failure(
            config=dict(task.plan.default), stage="run", reason="no process measured the default"
        )
    return finish(task.plan, results)


@dataclasses.dataclass(frozen=True, slots=True)
class SweepSharing:
    """How one sweep is shared over a job's processes, each measuring through ``runner``."""

    runner: Runner

    def alone(self, task: SweepTask) -> SweepOutcome:
        """The whole sweep, measured by this process."""
        return self.runner.sweep(task)

    def space(self, task: SweepTask) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        """The configs the sweep measures and its default (the leader publishes them)."""
        return [dict(c) for c in task.plan.configs], dict(task.plan.default)

    def with_space(
        self, task: SweepTask, configs: Sequence[Mapping[str, Any]], default: Mapping[str, Any]
    ) -> SweepTask:
        """``task`` measuring the leader's configs against the leader's default."""
        plan = dataclasses.replace(
            task.plan, configs=tuple(dict(c) for c in configs), default=dict(default)
        )
        return dataclasses.replace(task, plan=plan)

    def measure(self, task: SweepTask, index: int, count: int) -> dict[str, Any]:
        """Process ``index``'s share, measured, as plain data (see :func:`measure_share`)."""
        return measure_share(task, index, count, self.runner)

    def merge(self, task: SweepTask, parts: Sequence[Mapping[str, Any]]) -> SweepOutcome:
        """The outcome of the whole sweep from every share (see :func:`merge`)."""
        return merge(task, parts)
