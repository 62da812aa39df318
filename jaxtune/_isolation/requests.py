"""The messages a parent sends a child: a sweep request (a plan, the kernel's reference and
its encoded arguments) and a trace-capture request.

A function travels as ``module:qualname`` (plus its file, for a script run as ``__main__``
or a module the child cannot import by name); arguments travel through :mod:`.wire`.
"""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from .._tuning.result import Failure, Measurement
from .._tuning.space import config_id
from .._tuning.sweep import SweepTask
from .context import carried_state
from .environ import unkeyed_environ
from .wire import NotTransportable, encode_value

__all__ = ["function_ref", "profile_request", "reference_config", "sweep_request"]


def function_ref(fn: Any) -> dict[str, Any]:
    """``module``, ``qualname`` and the source ``path`` of a function.

    Raises:
        NotTransportable: the function cannot be re-imported in another process.
    """
    module = getattr(fn, "__module__", None)
    qualname = getattr(fn, "__qualname__", "")
    if not module or "<locals>" in qualname or "<lambda>" in qualname:
        raise NotTransportable("it is defined inside a function (a closure or lambda)")
    path = None
    if module == "__main__":
        path = getattr(sys.modules.get("__main__"), "__file__", None)
        if not path:
            raise NotTransportable("it is defined in an interactive session or notebook")
        path = os.path.abspath(path)
    else:
        # Where the module came from, for a child that cannot import it by name (a test
        # module collected with pytest's importlib mode, a module added to sys.path late).
        path = getattr(sys.modules.get(module), "__file__", None)
    return {"module": module, "qualname": qualname, "path": path}


def sweep_request(task: SweepTask) -> dict[str, Any]:
    """The message that asks a child to measure configs of ``task``; ``op`` and the
    per-request fields (``todo``, ``reference``...) are added by the runner.

    Raises:
        NotTransportable: the kernel or its arguments cannot travel to a child.
    """
    args, kwargs = task.signature.call_arguments()
    return {
        "task_id": uuid.uuid4().hex,
        "ref": {**function_ref(task.fn), "kernel": task.plan.kernel},
        "args": encode_value(tuple(args)),
        "kwargs": encode_value(dict(kwargs)),
        "plan": task.plan.to_dict(),
        # The caller's interpret mode and jax.config options, applied before tracing.
        "jax_state": carried_state(task.plan.kernel),
        "environ": unkeyed_environ(os.environ.get("JAX_PLATFORMS")),
    }


def profile_request(
    fn: Any, args: tuple[Any, ...], kwargs: Mapping[str, Any], **options: Any
) -> dict[str, Any]:
    """The message that asks a child to capture a trace of ``fn(*args, **kwargs)``.

    Raises:
        NotTransportable: ``fn`` or its arguments cannot travel to a child.
    """
    return {
        "op": "profile",
        "ref": function_ref(fn),
        "args": encode_value(tuple(args)),
        "kwargs": encode_value(dict(kwargs)),
        "jax_state": carried_state(getattr(fn, "__qualname__", "profile")),
        "environ": unkeyed_environ(os.environ.get("JAX_PLATFORMS")),
        **options,
    }


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
