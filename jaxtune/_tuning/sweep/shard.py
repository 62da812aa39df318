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

from ..._core import typed
from ..._core.errors import TuningFailedError
from ..._core.vocabulary import Failure, Measurement, config_id
from .runner import Runner
from .stats import SweepOutcome, finish
from .work import SweepTask

__all__ = ["SweepSharing", "merge", "share", "sweep_share"]

Result = Measurement | Failure


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Share:
    """One process's share of a sweep, as it travels to the leader: its configs' results
    and its measurement of the default (``None``: it measured none)."""

    results: tuple[Result, ...] = ()
    default: Result | None = None


def share(configs: Sequence[Mapping[str, Any]], index: int, count: int) -> list[dict[str, Any]]:
    """Process ``index``'s part of ``configs``: every ``count``-th config from ``index`` on,
    so cheap and expensive corners of a space are spread evenly."""
    return [dict(c) for c in configs[index::count]]


def sweep_share(task: SweepTask, index: int, count: int, runner: Runner) -> dict[str, Any]:
    """Measures this process's share of ``task`` (each share also runs the default, as the
    reference its outputs are checked against); returns it as plain data."""
    mine = share(task.plan.configs, index, count)
    if not mine:
        return typed.encode(Share())
    part = dataclasses.replace(task, plan=dataclasses.replace(task.plan, configs=tuple(mine)))
    try:
        outcome: SweepOutcome = runner.sweep(part)
    except TuningFailedError as e:
        failures = tuple(e.failures) or tuple(
            Failure(config=dict(c), stage="run", reason=f"on process {index}: {e}") for c in mine
        )
        return typed.encode(Share(results=failures))
    found = Share(results=tuple(outcome.measurements), default=outcome.default)
    return typed.encode(found)


def merge(task: SweepTask, parts: Sequence[Mapping[str, Any]]) -> SweepOutcome:
    """The outcome of the whole sweep from every process's share, in process order.

    Raises:
        TuningFailedError: every config failed; the message lists each reason.
    """
    results: dict[str, Result] = {}
    default: Result | None = None
    for i, raw in enumerate(parts):
        part = typed.decode(Share, raw, within=f"process {i}'s share of the sweep")
        for result in part.results:
            results[config_id(result.config)] = result
        if default is None:
            default = part.default
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

    def sweep_share(self, task: SweepTask, index: int, count: int) -> dict[str, Any]:
        """Process ``index``'s share, measured, as plain data (see :func:`sweep_share`)."""
        return sweep_share(task, index, count, self.runner)

    def merge(self, task: SweepTask, parts: Sequence[Mapping[str, Any]]) -> SweepOutcome:
        """The outcome of the whole sweep from every share (see :func:`merge`)."""
        return merge(task, parts)
