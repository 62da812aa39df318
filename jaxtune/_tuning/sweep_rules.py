"""The rules of one call's sweep, in the parent: the pass it times, when retune mode sweeps,
and what becomes of its result.

``timing="auto"`` times forward and backward when the call being looked up was traced
under ``jax.grad``/``jax.vjp`` (:func:`differentiated_calls` says so for the lookup it
wraps), the forward otherwise (:func:`pass_now`); an entry timed for the forward pass of a
call that is differentiated is replaced by a sweep allowed now
(:func:`~.staleness.wrong_pass`). Retune mode sweeps each key once per process
(:class:`Retunes`). A finished sweep's entry is saved (:func:`save_entry`): written to the user
cache and published to the shared store by the process that writes the cache; the lookup's
sweep (:meth:`jaxtune._tuning.bound.BoundCall.sweep`) and ``jaxtune tune --``'s sweeps of
recorded calls both save theirs through it.
"""

from __future__ import annotations

import contextlib
import contextvars
import importlib
import threading
from collections.abc import Iterable, Iterator
from typing import Any

from .._core import settings as _settings
from .._core.vocabulary import Entry
from .._distributed import agree as _agree
from .digest import CodeDigest
from .staleness import wrong_pass
from .store import cache as _cache
from .store import shared as _shared
from .sweep.entry import make_entry
from .sweep.stats import SweepOutcome
from .sweep.work import SweepPlan

try:  # the chain of traces (see under_differentiation); absent: no chain to read
    _jax_core: Any = importlib.import_module("jax._src.core")
except ImportError:  # pragma: no cover - a JAX without it
    _jax_core = None

__all__ = [
    "Retunes",
    "differentiated_calls",
    "differentiated_now",
    "is_differentiated",
    "pass_now",
    "save_entry",
    "under_differentiation",
]

#: Whether the call being looked up was traced under ``jax.grad``/``jax.vjp`` (so that
#: ``timing="auto"`` times forward and backward).
_DIFFERENTIATED: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "jaxtune_differentiated", default=False
)
#: Tracer types of JAX's differentiation (``jax.grad`` and ``jax.vjp`` linearize).
_AD_TRACERS = frozenset({"JVPTracer", "LinearizeTracer"})


def is_differentiated(leaves: Iterable[Any]) -> bool:
    """Whether any of ``leaves`` is a tracer of ``jax.grad``/``jax.vjp``/``jax.jvp``."""
    return any(type(leaf).__name__ in _AD_TRACERS for leaf in leaves)


def differentiated_now() -> bool:
    """Whether the lookup running now is for a differentiated call (see
    :func:`differentiated_calls`)."""
    return _DIFFERENTIATED.get()


#: JAX's traces of differentiation: ``jax.jvp`` (JVPTrace) and ``jax.grad``/``jax.vjp``
#: (LinearizeTrace where JAX linearizes directly, JVPTrace before).
_AD_TRACES = frozenset({"JVPTrace", "LinearizeTrace"})


def under_differentiation() -> bool:
    """Whether the current trace sits inside JAX's differentiation (``jax.grad``,
    ``jax.vjp``, ``jax.jvp``, ``jax.linearize``), seen from a trace below it: each of JAX's
    traces keeps the trace it was started from (``parent_trace``), so the eager jit's own
    trace of a call made under ``jax.grad``, or the trace of ``f`` in
    ``jax.grad(jax.jit(f))``, finds the differentiating trace under it. ``False`` where
    this JAX keeps no such chain."""
    trace = getattr(getattr(_jax_core, "trace_ctx", None), "trace", None)
    seen = 0
    while trace is not None and seen < 64:
        if type(trace).__name__ in _AD_TRACES:
            return True
        trace = getattr(trace, "parent_trace", None)
        seen += 1
    return False


@contextlib.contextmanager
def differentiated_calls(on: bool = True) -> Iterator[None]:
    """Within: sweeps of ``timing="auto"`` kernels time forward and backward."""
    token = _DIFFERENTIATED.set(on)
    try:
        yield
    finally:
        _DIFFERENTIATED.reset(token)


def pass_now(timing: str) -> str:
    """The pass a sweep of a kernel with ``timing=`` started now would time: ``forward``
    or ``vjp``."""
    if timing != "auto":
        return timing
    return "vjp" if _DIFFERENTIATED.get() else "forward"


class Retunes:
    """What this process swept one kernel for in retune mode: (device kind, key) -> the
    pass timed. Retune mode sweeps each key once per process (and once more for a
    differentiated call when the first sweep timed the forward only)."""

    def __init__(self) -> None:
        self._swept: dict[tuple[str, str], str] = {}
        self._lock = threading.Lock()

    def pending(self, kind: str, key: str, timing: str) -> bool:
        """Whether retune mode is on and this key still has to be swept for the pass a
        sweep would time now."""
        if _settings.settings().mode != "retune":
            return False
        swept = self._swept.get((kind, key))
        # A sweep of forward and backward also answers a call that runs the forward only.
        return swept is None or wrong_pass(swept, pass_now(timing)) is not None

    def done(self, kind: str, key: str, timed: str) -> None:
        """Notes that this process swept ``key`` on ``kind``, timing ``timed``."""
        with self._lock:
            self._swept[kind, key] = timed


def save_entry(
    plan: SweepPlan, outcome: SweepOutcome, kind: str, version: str, *, code: CodeDigest | None
) -> Entry:
    """The entry a finished sweep of ``plan`` on device kind ``kind`` becomes (kernel
    version ``version``, code digest ``code``), saved: written to the user cache and
    published to the shared store by the process that writes the cache (process 0 of a
    ``jax.distributed`` job; any other process keeps nothing)."""
    entry = make_entry(plan, outcome, kind, version, code=code)
    if _agree.may_write_cache():
        _cache.user_cache().save([entry])
        _shared.publish([entry])
    return entry
