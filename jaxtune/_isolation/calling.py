"""Building the request about a call that a flow sends its child (a
:class:`~jaxtune._isolation.frames.Request`): the module whose ``handle`` answers it there,
the function, its arguments, and the caller's state.

A function travels as ``module:qualname`` (plus its file, for a script run as ``__main__``
or a module the child cannot import by name); arguments travel through :mod:`.wire`.
"""

from __future__ import annotations

import dataclasses
import inspect
import os
import sys
from collections.abc import Mapping
from typing import Any, TypeVar

from .context import carried_state
from .environ import unkeyed_environ
from .frames import SCRIPT_RERUN, FunctionRef, NotTransportable, Request
from .wire import encode_value

__all__ = ["call_request", "function_ref", "replayed"]

F = TypeVar("F")


def function_ref(fn: Any) -> FunctionRef:
    """``module``, ``qualname`` and the source ``path`` of a function.

    Raises:
        NotTransportable: the function cannot be re-imported in another process.
    """
    module = getattr(fn, "__module__", None)
    qualname = getattr(fn, "__qualname__", "")
    if not module or "<locals>" in qualname or "<lambda>" in qualname:
        raise NotTransportable("it is defined inside a function (a closure or lambda)")
    path = None
    if module == SCRIPT_RERUN:
        # A script's function in a child that re-ran the script (resolve.py): the script
        # again, for a process of its own (a sweep's lowering processes) to re-run it too.
        globals_ = getattr(inspect.unwrap(fn), "__globals__", None) or {}
        path = globals_.get("__file__")
        if not path:
            raise NotTransportable("the script it was re-imported from is not known")
        return FunctionRef(module="__main__", qualname=qualname, path=os.path.abspath(path))
    if module == "__main__":
        path = getattr(sys.modules.get("__main__"), "__file__", None)
        if not path:
            raise NotTransportable("it is defined in an interactive session or notebook")
        path = os.path.abspath(path)
    else:
        # Where the module came from, for a child that cannot import it by name (a test
        # module collected with pytest's importlib mode, a module added to sys.path late).
        path = getattr(sys.modules.get(module), "__file__", None)
    return FunctionRef(module=module, qualname=qualname, path=path)


def call_request(
    handler: str,
    op: str,
    fn: Any,
    args: tuple[Any, ...],
    kwargs: Mapping[str, Any],
    *,
    label: str,
    kernel: str | None = None,
    fields: F,
) -> Request[F]:
    """A request about a call of ``fn``: the module that answers it in the child
    (``handler``, a module of jaxtune), the operation, where ``fn`` lives (``kernel``: its
    id, for an ``@autotuned`` kernel), its encoded arguments, the caller's interpret mode
    and ``jax.config`` options (``label`` names the call in warnings about state that
    cannot travel), the caller's variables that do not key the pool, and the flow's own
    ``fields`` (a record of the flow's).

    Raises:
        NotTransportable: ``fn`` or its arguments cannot travel to a child.
    """
    ref = function_ref(fn)
    return Request(
        handler=handler,
        op=op,
        ref=ref if kernel is None else dataclasses.replace(ref, kernel=kernel),
        fields=fields,
        args=encode_value(tuple(args)),
        kwargs=encode_value(dict(kwargs)),
        jax_state=carried_state(label),
        environ=_caller_environ(),
    )


def replayed(request: Request[F]) -> Request[F]:
    """A request read from a file (:meth:`~.frames.Request.recorded`), as this process
    sends it: with this process's variables, which a file never keeps (one that older
    jaxtunes wrote may hold the recording process's: they are not used). ``jaxtune tune
    --`` started the program it recorded with its own environment, so its sweeps see
    what the program saw when it started."""
    return dataclasses.replace(request, environ=_caller_environ())


def _caller_environ() -> dict[str, str]:
    """The variables a request carries: this process's that do not key the pool."""
    return unkeyed_environ(os.environ.get("JAX_PLATFORMS"))
