"""A kernel's sweeps: the task one sweep runs (the pass it times, with the kernel's timing
effort, budget and timer), and running it into an entry that the caches keep.

The pass timed is decided here too: ``timing="auto"`` times forward and backward when the
call being looked up was traced under ``jax.grad``/``jax.vjp`` (:func:`differentiated_calls`
says so for the lookup it wraps), the forward otherwise.
"""

from __future__ import annotations

import contextlib
import contextvars
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Protocol

from .._core import settings as _settings
from .._core.vocabulary import Entry
from .._distributed import agree as _agree
from .digest import KernelCode
from .options import timing_options
from .signature import Signature
from .store import cache as _cache
from .store import shared as _shared
from .sweep.entry import make_entry
from .sweep.runner import default_runner
from .sweep.search import Budget, budget_setting
from .sweep.stats import SweepOutcome
from .sweep.work import SweepPlan, SweepTask

__all__ = [
    "Retunes",
    "Sweepable",
    "differentiated_calls",
    "is_differentiated",
    "pass_now",
    "run",
    "task",
    "wrong_pass",
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


def wrong_pass(timing: str, entry: Entry) -> bool:
    """Whether a sweep allowed now should replace ``entry``: it timed the forward pass of a
    kernel whose call here is differentiated (``timing="auto"``)."""
    return timing == "auto" and entry.timing == "forward" and _DIFFERENTIATED.get()


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
        return swept is None or (swept == "forward" and pass_now(timing) == "vjp")

    def done(self, kind: str, key: str, timed: str) -> None:
        """Notes that this process swept ``key`` on ``kind``, timing ``timed``."""
        with self._lock:
            self._swept[kind, key] = timed


class Sweepable(Protocol):
    """What a sweep asks of a kernel: the function and the options of ``@autotuned``."""

    __wrapped__: Callable[..., Any]
    kernel_id: str
    version: str
    code: KernelCode
    check: Any
    inputs: Callable[..., Any] | None
    timeout: float | None
    search: Any
    budget: Budget | None
    timer: str | None
    timing: str
    effort: str
    retunes: Retunes


def task(
    kernel: Sweepable,
    sig: Signature,
    space: list[dict[str, Any]],
    default: dict[str, Any],
    *,
    differentiated: bool = False,
) -> SweepTask:
    """The sweep of ``kernel`` for a bound call, over ``space`` (``differentiated``: the
    call was traced under ``jax.grad``/``jax.vjp``, so ``timing="auto"`` times forward and
    backward)."""
    settings = _settings.settings()
    timed = "vjp" if kernel.timing == "auto" and differentiated else pass_now(kernel.timing)
    plan = SweepPlan(
        kernel=kernel.kernel_id,
        key=sig.key,
        configs=tuple(space),
        default=default,
        shapes=sig.shapes,
        statics=sig.statics,
        timeout_s=kernel.timeout or settings.timeout,
        options=timing_options(kernel.effort),
        verbose=settings.verbose,
        search=kernel.search,
        budget=kernel.budget or budget_setting(),
        timer=kernel.timer or settings.timer,
        timing=timed,
    )
    return SweepTask(
        plan=plan, fn=kernel.__wrapped__, signature=sig, check=kernel.check, inputs=kernel.inputs
    )


def run(
    kernel: Sweepable,
    sig: Signature,
    space: list[dict[str, Any]],
    default: dict[str, Any],
    kind: str,
    *,
    measure: Callable[[SweepTask], SweepOutcome] | None = None,
) -> Entry:
    """Sweeps ``kernel`` for a bound call through ``measure`` (default: the process's
    runner) and returns the entry, kept in the user cache and published to the shared
    store by the process that writes the cache.

    Raises:
        TuningFailedError: every config failed.
    """
    swept = task(kernel, sig, space, default)
    # No lock while user code runs: a kernel that calls itself would wait on its own lock.
    outcome = (measure or default_runner().sweep)(swept)
    entry = make_entry(swept.plan, outcome, kind, kernel.version, code=kernel.code.value)
    if _agree.may_write_cache():
        _cache.user_cache().keep([entry])
        _shared.publish([entry])
    kernel.retunes.done(kind, sig.key, swept.plan.timing)
    return entry
