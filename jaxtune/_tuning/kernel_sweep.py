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
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, Protocol

from .._core import settings as _settings
from .._core.errors import SynthesisedValuesWarning, warn_once
from .._core.vocabulary import Entry
from .._distributed import agree as _agree
from .digest import KernelCode
from .options import timing_options
from .profile_hook import cost_hint
from .signature import Signature
from .store import cache as _cache
from .store import shared as _shared
from .sweep.entry import make_entry
from .sweep.inputs import (
    SYNTHESISED_TEXT,
    describe_values,
    summarise,
    synthesised_ints,
    value_sources,
)
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
    flops: float | Callable[..., float] | None
    bytes: float | Callable[..., float] | None


def task(
    kernel: Sweepable,
    sig: Signature,
    space: list[dict[str, Any]],
    default: dict[str, Any],
    *,
    differentiated: bool = False,
    value_sets: Sequence[Mapping[str, Any]] = (),
) -> SweepTask:
    """The sweep of ``kernel`` for a bound call, over ``space`` (``differentiated``: the
    call was traced under ``jax.grad``/``jax.vjp``, so ``timing="auto"`` times forward and
    backward; ``value_sets``: further values of the call's dynamic arguments, timed with
    its own as a mix)."""
    settings = _settings.settings()
    sets = [dict(values) for values in value_sets]
    summaries = [{n: summarise(sig.value(n)) for n in sig.dynamic}] if sets else []
    summaries += [{n: summarise(v) for n, v in values.items()} for values in sets]
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
        values=_values_and_work(kernel, sig, summaries),
    )
    return SweepTask(
        plan=plan,
        fn=kernel.__wrapped__,
        signature=sig,
        check=kernel.check,
        inputs=kernel.inputs,
        value_sets=tuple(sets),
    )


def _values_and_work(
    kernel: Sweepable, sig: Signature, summaries: list[dict[str, str]]
) -> dict[str, Any]:
    """What the entry records of the values (:func:`~.sweep.inputs.describe_values`),
    with the work the kernel's ``flops=``/``bytes=`` hints count for the call (``work``:
    a time that implies more than the device's peak is flagged)."""
    values = describe_values(sig, inputs_given=kernel.inputs is not None, sets=summaries)
    try:
        work = cost_hint(kernel, sig)
    except Exception:  # a hint that cannot count this call: no figure, as in a profile
        work = None
    if work:
        values["work"] = work
    return values


#: The warning of a sweep on made-up integer or boolean values (see :func:`run`).
SYNTHESISED_WARNING = (
    "jaxtune: {kernel} ({key}) is swept on synthesised values for its integer/boolean "
    "argument(s) {names} ({how}): this flow has only their shapes. Their values often "
    "decide the work (group sizes, lengths, ids, loop counts, masks), so the config stored "
    "may be wrong for the program's values. Give the sweep real values: run the program "
    "under `jaxtune tune -- python prog.py` (it records the values each call runs), call "
    "the kernel or jaxtune.tune(fn, *arrays) with real arrays outside jax.jit, or give "
    "@autotuned(inputs=...) a builder of valid values (docs/values.md)."
)


def run(
    kernel: Sweepable,
    sig: Signature,
    space: list[dict[str, Any]],
    default: dict[str, Any],
    kind: str,
    *,
    measure: Callable[[SweepTask], SweepOutcome] | None = None,
    value_sets: Sequence[Mapping[str, Any]] = (),
) -> Entry:
    """Sweeps ``kernel`` for a bound call through ``measure`` (default: the process's
    runner) and returns the entry, kept in the user cache and published to the shared
    store by the process that writes the cache (``value_sets``: see :func:`task`). A
    sweep that makes up integer or boolean values warns once per kernel
    (:class:`~jaxtune.SynthesisedValuesWarning`).

    Raises:
        TuningFailedError: every config failed.
    """
    swept = task(kernel, sig, space, default, value_sets=value_sets)
    made_up = synthesised_ints(sig, value_sources(sig, inputs_given=swept.inputs is not None))
    if made_up:
        warn_once(
            ("synthesised", kernel.kernel_id),
            SYNTHESISED_WARNING.format(
                kernel=kernel.kernel_id,
                key=sig.key,
                names=", ".join(made_up),
                how=SYNTHESISED_TEXT,
            ),
            SynthesisedValuesWarning,
        )
    # No lock while user code runs: a kernel that calls itself would wait on its own lock.
    outcome = (measure or default_runner().sweep)(swept)
    entry = make_entry(swept.plan, outcome, kind, kernel.version, code=kernel.code.value)
    if _agree.may_write_cache():
        _cache.user_cache().keep([entry])
        _shared.publish([entry])
    kernel.retunes.done(kind, sig.key, swept.plan.timing)
    return entry
