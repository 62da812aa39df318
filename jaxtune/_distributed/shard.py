"""A sweep shared by the processes of a job: each measures every n-th config, publishes its
results, and the leader merges them and picks the winner by the single-process rule
(lowest median time; a tie goes to the config that comes first in the space).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from .._codec import packb, unpackb
from .._errors import TuningFailedError
from .._tuning.result import Failure, Measurement, measurement_from_dict
from .._tuning.runner import Runner
from .._tuning.space import config_id
from .._tuning.sweep import SweepOutcome, SweepTask, finish

__all__ = ["decode_share", "encode_share", "measure_share", "merge", "share"]

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


def encode_share(part: Mapping[str, Any]) -> bytes:
    """msgpack bytes of a share, for the store."""
    return packb(dict(part))


def decode_share(data: bytes) -> dict[str, Any]:
    """Inverse of :func:`encode_share`."""
    part: dict[str, Any] = unpackb(data)
    return part


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
