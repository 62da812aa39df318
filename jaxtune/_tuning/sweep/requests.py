"""The requests a sweep sends its child: the task (a plan, the kernel's reference and its
encoded arguments), answered there by :mod:`jaxtune._tuning.sweep.serve`; and which config the
others' outputs are checked against."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from ..._core.vocabulary import Failure, Measurement, config_id
from ..._isolation.requests import call_request
from .plan import SweepTask

__all__ = ["HANDLER", "reference_config", "sweep_request"]

#: The module whose ``handle`` answers a sweep's requests in the child.
HANDLER = "jaxtune._tuning.sweep.serve"


def sweep_request(task: SweepTask) -> dict[str, Any]:
    """The message that asks a child to measure configs of ``task``; ``op`` and the
    per-request fields (``todo``, ``reference``...) are added by the runner.

    Raises:
        NotTransportable: the kernel or its arguments cannot travel to a child.
    """
    args, kwargs = task.signature.call_arguments()
    request = call_request(HANDLER, task.fn, tuple(args), dict(kwargs), label=task.plan.kernel)
    request["ref"]["kernel"] = task.plan.kernel
    return {**request, "task_id": uuid.uuid4().hex, "plan": task.plan.to_dict()}


def reference_config(
    order: Sequence[Any], results: Mapping[str, Measurement | Failure], default: dict[str, Any]
) -> dict[str, Any] | None:
    """The config whose output others are checked against: the default unless it failed,
    else the first config that was measured successfully (None: the child picks the first
    that runs). ``order`` holds configs or earlier results."""
    if not isinstance(results.get(config_id(default)), Failure):
        return dict(default)
    for item in order:
        config = dict(getattr(item, "config", item))
        if isinstance(results.get(config_id(config)), Measurement):
            return config
    return None
