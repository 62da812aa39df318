"""Starting the sweep child ahead of need, and importing kernels' modules in it.

A kernel decorated in ``tune``/``retune`` mode with process isolation starts the pooled
child in a background thread, so the first sweep finds it ready. Once the child is up, the
modules that define the kernels decorated so far are imported there as well (with the
environment variables this process had when it decorated them), so the first sweep finds
its kernel already resolved instead of importing it first. Only modules imported by name:
a script run as ``__main__`` is re-run by the child only when a sweep needs it, since its
top level may be the whole program. A module that fails to import is left for the sweep to
report, as it would have been without this; one whose import hangs past the time limit
(``JAXTUNE_TIMEOUT``) is remembered, and the sweep that needs it reports that at once
(:func:`hung_ahead`) instead of waiting as long again in a new child.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from .._core import settings as _settings
from .._core.errors import JaxtuneError
from .._core.versions import toolchain
from .calling import function_ref
from .devices import cpu_only, parent_backend, tpu_runtime
from .environ import pool_key, unkeyed_environ
from .frames import FunctionRef, Module, Preload
from .process import POOL, ChildLost, ChildProcess, Deadline
from .state import ISOLATION_STATE
from .wire import NotTransportable

if TYPE_CHECKING:
    from .service import ChildService

__all__ = ["hung_ahead", "preload", "prestart"]

_LOCK = threading.Lock()


@dataclasses.dataclass(slots=True)
class _Ahead:
    """What this process started ahead of need, per environment (a pool key)."""

    #: Environments whose child was started ahead of need (once per process each).
    started: set[tuple[Any, ...]] = dataclasses.field(default_factory=set)
    #: The modules still to import in each environment's child, and those asked for.
    pending: dict[tuple[Any, ...], list[Module]] = dataclasses.field(default_factory=dict)
    asked: set[tuple[tuple[Any, ...], str]] = dataclasses.field(default_factory=set)
    #: Environments whose background thread is running now (it takes what is pending).
    running: set[tuple[Any, ...]] = dataclasses.field(default_factory=set)
    #: The modules that answer requests there (a flow's ``handler``), imported before the
    #: kernels' modules.
    handlers: dict[tuple[Any, ...], list[str]] = dataclasses.field(default_factory=dict)
    #: The modules (by name and file: scripts are all ``__main__``) whose import there hung
    #: past the time limit, with that limit (seconds).
    hung: dict[tuple[tuple[Any, ...], str, str | None], float] = dataclasses.field(
        default_factory=dict
    )


_AHEAD = ISOLATION_STATE.keep(
    "started ahead", _Ahead, "the children started ahead of need, and what they import", lock=_LOCK
)


def prestart(
    runner: ChildService, fn: Any = None, *, handler: str | None = None, hold: bool = False
) -> bool:
    """Starts ``runner``'s pooled child in a background thread (the pool makes a request
    that comes early wait for the same child), then imports there the module that will
    answer its requests (``handler``) and the module of ``fn``. Only CPU and GPU children:
    a TPU child would hold the chip this process may still want. With ``hold`` (a caller
    that never starts a backend, while another process may hold the chip), a TPU child is
    started on hold instead (:meth:`~.process.ChildPool.hold`): it imports JAX and
    ``handler``, not ``fn``'s module (whose import could start a backend), and opens the
    chip only when the first request asks for it. Returns whether a start was begun (once
    per environment and process)."""
    ref = _module_ref(fn)
    return _begin(runner, [] if ref is None else [ref], handler, hold=hold)


def preload(runner: ChildService, modules: Sequence[Module]) -> bool:
    """Imports ``modules`` (with the variables each carries) in ``runner``'s pooled child
    ahead of need, as :func:`prestart` does for a decorated kernel's module, starting the
    child where it is not started yet; a script run as ``__main__`` is re-run there too,
    so name one only when a sweep will need it. Returns whether a start was begun."""
    return _begin(runner, list(modules), None)


def _begin(
    runner: ChildService, modules: list[Module], handler: str | None, *, hold: bool = False
) -> bool:
    platform = runner.expected_platform()
    if platform is None and cpu_only():
        # Nothing decided the platform yet (no backend, no JAX_PLATFORMS), but JAX can
        # only start its CPU backend: the child the sweep will ask for is the CPU one.
        runner, platform = runner.on_platform("cpu"), "cpu"
    if platform not in ("cpu", "gpu"):
        tpu = platform == "tpu" or (platform is None and tpu_runtime())
        if not (hold and tpu) or parent_backend() is not None:
            return False
        handlers = [] if handler is None else [handler]
        try:
            return POOL.hold(runner.environment(), handlers=handlers, slot=runner.device)
        except (JaxtuneError, OSError):  # the sweep starts its child, and says why not
            return False
    key = _key(runner)
    with _LOCK:
        handlers = _AHEAD.handlers.setdefault(key, [])
        if handler is not None and handler not in handlers:
            handlers.append(handler)
        for ref in modules:
            if (key, ref.ref.module) not in _AHEAD.asked:
                _AHEAD.asked.add((key, ref.ref.module))
                _AHEAD.pending.setdefault(key, []).append(ref)
        begun = key not in _AHEAD.started
        if key in _AHEAD.running or not (begun or _AHEAD.pending.get(key)):
            return False
        _AHEAD.started.add(key)
        _AHEAD.running.add(key)
    threading.Thread(
        target=_start, args=(runner, key), name="jaxtune-prestart", daemon=True
    ).start()
    return begun


def hung_ahead(runner: ChildService, ref: FunctionRef) -> float | None:
    """The time limit (seconds) past which importing the module of ``ref`` ahead of need
    hung in ``runner``'s child, which was then killed; ``None`` where it did not hang. A
    sweep of a kernel of that module would import it again in a new child and wait as
    long."""
    key = _key(runner)
    with _LOCK:
        return _AHEAD.hung.get((key, ref.module, ref.path))


def _key(runner: ChildService) -> tuple[Any, ...]:
    """Where ``runner``'s requests go: its device and its child's environment."""
    return (runner.device, *pool_key(runner.environment()))


def _module_ref(fn: Any) -> Module | None:
    """Where ``fn``'s module is, with this process's environment now; ``None`` for a
    script run as ``__main__`` or a function that cannot travel."""
    if fn is None or getattr(fn, "__module__", "__main__") == "__main__":
        return None
    try:
        ref = function_ref(fn)
    except NotTransportable:
        return None
    return Module(ref=ref, environ=unkeyed_environ(os.environ.get("JAX_PLATFORMS")))


def _start(runner: ChildService, key: tuple[Any, ...]) -> None:
    try:
        child = runner.child()
        first = True  # the handlers are imported even when no module is pending
        toolchain()  # read once from package metadata, for the entries to come
        while True:
            with _LOCK:
                refs = _AHEAD.pending.pop(key, [])
                handlers = list(_AHEAD.handlers.get(key, []))
                if not refs and not first:
                    _AHEAD.running.discard(key)
                    return
            first = False
            # One module a request: of several that hung, which one would not be known.
            for part in [[ref] for ref in refs] or [[]]:
                _import_in(child, key, part, handlers)
    except Exception:
        with _LOCK:
            _AHEAD.running.discard(key)


def _import_in(
    child: ChildProcess, key: tuple[Any, ...], refs: list[Module], handlers: list[str]
) -> None:
    # A module may take as long to import as a config may take (JAXTUNE_TIMEOUT); past
    # that the child is replaced, and the module is remembered: a sweep that allows no
    # longer does not import it again (:func:`hung_ahead`).
    timeout = _settings.settings().timeout
    with child.lock:
        if not child.alive():
            return
        try:
            request = Preload(modules=tuple(refs), handlers=tuple(handlers))
            with contextlib.closing(child.exchange(request, Deadline(timeout))) as said:
                for _ in said:
                    pass  # a preload streams no events; its answer says nothing the caller needs
        except ChildLost as lost:
            # One module at a time is what hung; of several, which one is not known.
            if lost.hung and len(refs) == 1:
                with _LOCK:
                    _AHEAD.hung[(key, refs[0].ref.module, refs[0].ref.path)] = timeout
            with contextlib.suppress(Exception):
                POOL.discard(child)
