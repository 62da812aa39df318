"""The sweep: the search strategy picks configs to measure (every config unless a budget
says otherwise); each batch compiles in parallel threads, is checked against the reference
config's output and timed one config at a time with early dropping; the leaders are re-timed
interleaved until their confidence intervals separate, and a tie goes to the earliest config
of the space.

:class:`Sweeper` does the work wherever the kernel runs (this process for the inline
runner, the child for the process runner) and reports each step through ``on_event``, so a
parent can follow progress live and knows which config was in flight if the child dies.
A failed config is a :class:`Failure` with its reason; only "every config failed" raises.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import os
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax

from .._isolation import context as _context
from .check import check_outputs, reason
from .decide import SweepOutcome as SweepOutcome
from .decide import finish as finish
from .decide import in_space_order, paired_verdict
from .decide import leaders as leaders
from .inputs import make_inputs
from .progress import Progress
from .result import Failure, Measurement
from .search import Budget, run_search, strategy_of
from .search import plan as budget_plan
from .signature import Signature
from .space import config_id
from .timing import Timer, Timing, TimingOptions, WallTimer, block

__all__ = [
    "SweepOutcome",
    "SweepPlan",
    "SweepTask",
    "Sweeper",
    "best_of",
    "drive",
    "finish",
    "leaders",
    "new_progress",
    "ordered",
    "run_sweep",
]

Config = dict[str, Any]
Result = Measurement | Failure
#: ``on_event(kind, config id, data)``; kinds: compile_start, compiled, run_start, result.
EventSink = Callable[[str, str, Any], None]


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class SweepPlan:
    """What the parent decides about one sweep: plain data, so it travels to a child or a
    recording file and comes back unchanged. The parent orchestrates from the plan alone."""

    kernel: str
    key: str
    configs: tuple[Config, ...]
    default: Config
    shapes: tuple[tuple[str, tuple[int, ...]], ...] = ()
    statics: str = ""
    timeout_s: float = 60.0
    options: TimingOptions = dataclasses.field(default_factory=TimingOptions)
    verbose: int = 0
    #: A strategy name or object (see :mod:`jaxtune._tuning.search`) and its budget. Only
    #: names travel (a recording, a child); an object becomes ``"auto"`` there.
    search: Any = "auto"
    budget: Budget | None = None

    def to_dict(self) -> dict[str, Any]:
        """A msgpack-ready form (inverse: :meth:`from_dict`)."""
        return {
            "kernel": self.kernel,
            "key": self.key,
            "configs": [dict(c) for c in self.configs],
            "default": dict(self.default),
            "shapes": [[dt, list(shape)] for dt, shape in self.shapes],
            "statics": self.statics,
            "timeout_s": self.timeout_s,
            "options": dataclasses.asdict(self.options),
            "verbose": self.verbose,
            "search": self.search if isinstance(self.search, str) else "auto",
            "budget": None if self.budget is None else [self.budget.configs, self.budget.seconds],
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> SweepPlan:
        """Inverse of :meth:`to_dict`."""
        return cls(
            kernel=d["kernel"],
            key=d["key"],
            configs=tuple(dict(c) for c in d["configs"]),
            default=dict(d["default"]),
            shapes=tuple((dt, tuple(shape)) for dt, shape in d.get("shapes", ())),
            statics=d.get("statics", ""),
            timeout_s=float(d["timeout_s"]),
            options=TimingOptions(**d["options"]),
            verbose=int(d.get("verbose", 0)),
            search=d.get("search") or "auto",
            budget=Budget(configs=d["budget"][0], seconds=d["budget"][1])
            if d.get("budget")
            else None,
        )


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class SweepTask:
    """The work of one sweep, where the kernel runs: the plan plus the kernel itself, its
    bound arguments, its numerics check and its input builder."""

    plan: SweepPlan
    fn: Callable[..., Any]
    signature: Signature
    check: Any = "auto"
    inputs: Callable[..., Any] | None = None
    compile_threads: int = 0


def ordered(plan: SweepPlan) -> list[Config]:
    """The configs to measure: the default first (also when the space lacks it), then the
    space in order."""
    default_id = config_id(plan.default)
    rest = [dict(c) for c in plan.configs if config_id(c) != default_id]
    return [dict(plan.default), *rest]


class Sweeper:
    """Compiles, checks and times configs of one task; keeps executables for re-timing."""

    def __init__(
        self,
        task: SweepTask,
        *,
        timer: Timer | None = None,
        on_event: EventSink | None = None,
    ) -> None:
        self.task = task
        self.timer: Timer = timer or WallTimer()
        self.emit: EventSink = on_event or (lambda kind, cid, data: None)
        self._inputs: dict[str, Any] | None = None
        self._runs: dict[str, tuple[Callable[[], Any], float]] = {}
        self._timings: dict[str, Timing] = {}

    @property
    def inputs(self) -> dict[str, Any]:
        if self._inputs is None:
            self._inputs = make_inputs(self.task.plan.kernel, self.task.signature, self.task.inputs)
        return self._inputs

    def _compile_one(self, config: Config) -> Failure | None:
        cid = config_id(config)
        if cid in self._runs:
            return None
        sig, fn, inputs = self.task.signature, self.task.fn, self.inputs

        def call(dyn: dict[str, Any]) -> Any:
            args, kwargs = sig.call_arguments(replace=dyn)
            return fn(*args, **kwargs, **config)

        self.emit("compile_start", cid, None)
        start = time.perf_counter()
        try:
            compiled = jax.jit(call).lower(inputs).compile()
        except Exception as e:
            self.emit("compiled", cid, None)
            return Failure(config=config, stage="compile", reason=reason(e))
        seconds = time.perf_counter() - start
        self.emit("compiled", cid, seconds)
        if seconds > self.task.plan.timeout_s:
            return self._too_slow(config, "compiling", seconds)
        self._runs[cid] = ((lambda: block(compiled(inputs))), seconds)
        return None

    def _too_slow(self, config: Config, step: str, seconds: float) -> Failure:
        return Failure(
            config=config,
            stage="timeout",
            reason=f"{step} took {seconds:.1f} s, over the {self.task.plan.timeout_s:g} s limit "
            "(JAXTUNE_TIMEOUT / timeout=)",
        )

    def compile(self, configs: Sequence[Config], *, serial: bool = False) -> dict[str, Failure]:
        """Compiles ``configs`` (in parallel threads unless ``serial``); returns failures."""
        self.inputs  # noqa: B018 - build inputs once, before the threads start
        threads = 1 if serial else (self.task.compile_threads or min(4, os.cpu_count() or 1))
        if threads <= 1 or len(configs) <= 1:
            outcomes = [self._compile_one(c) for c in configs]
        else:
            local_config = _context.capture()

            def compile_in_context(config: Config) -> Failure | None:
                with local_config():
                    return self._compile_one(config)

            with concurrent.futures.ThreadPoolExecutor(
                threads, thread_name_prefix="jaxtune-compile"
            ) as ex:
                outcomes = list(ex.map(compile_in_context, configs))
        return {config_id(c): f for c, f in zip(configs, outcomes, strict=True) if f is not None}

    def _reference(self, reference: Config | None) -> Any:
        if reference is None:
            return None
        if self._compile_one(reference) is not None:
            return None
        try:
            return self._runs[config_id(reference)][0]()
        except Exception:
            return None

    def measure(
        self,
        configs: Sequence[Config],
        *,
        reference: Config | None,
        best_us: float | None = None,
        serial_compile: bool = False,
    ) -> dict[str, Result]:
        """Compiles, checks and times each config (in the given order).

        ``reference`` is the config whose output the others must match (the default, or
        the first that worked when the default failed); when ``None`` or failing, the
        first config that runs becomes the reference. ``best_us`` carries the best time of
        configs measured elsewhere, for early dropping.
        """
        failures = self.compile(configs, serial=serial_compile)
        ref = self._reference(reference)
        have_ref = ref is not None
        results: dict[str, Result] = {}
        for config in configs:
            cid = config_id(config)
            if cid in failures:
                result: Result = failures[cid]
            else:
                self.emit("run_start", cid, None)
                result = self._measure_one(config, ref if have_ref else None, best_us)
                if not have_ref and isinstance(result, Measurement):
                    ref, have_ref = self._last_output, True
                if isinstance(result, Measurement) and not result.dropped:
                    best_us = result.min_us if best_us is None else min(best_us, result.min_us)
            results[cid] = result
            self.emit("result", cid, result)
        return results

    _last_output: Any = None

    def _measure_one(self, config: Config, ref: Any, best_us: float | None) -> Result:
        cid = config_id(config)
        run, compile_s = self._runs[cid]
        start = time.perf_counter()
        try:
            out = run()
            problem = None if ref is None else check_outputs(out, ref, self.task.check)
            if problem is not None:
                return Failure(config=config, stage="check", reason=problem)
            self._last_output = out
            timing = self.timer.measure(run, self.task.plan.options, best_us=best_us)
        except Exception as e:
            return Failure(config=config, stage="run", reason=reason(e))
        spent = time.perf_counter() - start
        if spent > self.task.plan.timeout_s:
            return self._too_slow(config, "running", spent)
        self._timings[cid] = timing
        return measurement(config, timing, compile_s)

    def retime(self, configs: Sequence[Config]) -> dict[str, Measurement]:
        """Re-times ``configs`` in interleaved rounds (each round in a rotated order), so
        that a burst of machine noise during one config's turn cannot decide the winner:
        at least ``rounds`` rounds, then more until the paired test settles the leaders
        (:func:`~.decide.paired_verdict`) or ``max_rounds`` is reached; a leader found
        significantly slower leaves the rounds early. Each measurement keeps its per-round
        medians (``rounds_us``), from which the winner is decided."""
        self.compile(configs)
        options = self.task.plan.options
        runnable = [config_id(c) for c in configs if config_id(c) in self._runs]
        by_id = {config_id(c): c for c in configs}
        order = in_space_order(runnable, self.task.plan.configs)
        fresh = {cid: Timing(samples_us=()) for cid in runnable}
        rounds: dict[str, list[float]] = {cid: [] for cid in runnable}
        active = list(runnable)
        for done in range(1, max(options.rounds, options.max_rounds) + 1):
            turn = (done - 1) % len(active)
            for cid in active[turn:] + active[:turn]:
                timing = self.timer.measure(
                    self._runs[cid][0], options, samples=options.round_samples
                )
                fresh[cid] = fresh[cid] + timing
                rounds[cid].append(timing.median_us)
            if done >= options.rounds and len(active) > 1:
                verdict = paired_verdict(
                    {cid: rounds[cid] for cid in active},
                    [cid for cid in order if cid in active],
                    alpha=options.alpha,
                    tie_within=options.tie_within,
                    max_rounds=options.max_rounds,
                )
                if verdict.settled:
                    break
                active = [cid for cid in active if cid not in verdict.slower]
            if len(active) < 2:
                break
        return {
            cid: measurement(by_id[cid], fresh[cid], self._runs[cid][1], tuple(rounds[cid]))
            for cid in runnable
        }


def measurement(
    config: Mapping[str, Any],
    timing: Timing,
    compile_s: float,
    rounds_us: tuple[float, ...] = (),
) -> Measurement:
    """A :class:`Measurement` from a timing (and, for re-timed leaders, their rounds)."""
    return Measurement(
        rounds_us=rounds_us,
        config=dict(config),
        median_us=timing.median_us,
        min_us=timing.min_us,
        spread=timing.spread,
        samples=len(timing.samples_us),
        compile_s=compile_s,
        dropped=timing.dropped,
        low_us=timing.interval[0],
        high_us=timing.interval[1],
    )


def progress_sink(plan: SweepPlan, progress: Progress) -> EventSink:
    """An event sink that advances ``progress`` for each config of the space."""
    in_space = {config_id(c) for c in plan.configs}

    def sink(kind: str, cid: str, data: Any) -> None:
        if kind == "result" and cid in in_space:
            progress.update(data)

    return sink


def new_progress(plan: SweepPlan) -> Progress:
    """Progress of a sweep, counting against what its budget allows."""
    strategy = strategy_of(plan.search)
    return Progress(
        f"{plan.kernel} {plan.key}",
        budget_plan(strategy, plan.budget, len(plan.configs)),
        plan.verbose,
        space=len(plan.configs),
        strategy=strategy.name,
    )


#: ``measure(configs, known)``: each config's result by id; ``known`` holds earlier ones.
MeasureFn = Callable[[list[Config], Mapping[str, Result]], Mapping[str, Result]]


def drive(
    plan: SweepPlan,
    *,
    measure: MeasureFn,
    retime: Callable[[list[Config]], Mapping[str, Result]],
    progress: Progress,
) -> SweepOutcome:
    """A whole sweep through a runner's ``measure`` and ``retime``: search, re-time the
    leaders, pick the winner."""
    known: dict[str, Result] = {}

    def measure_batch(configs: list[Config]) -> Mapping[str, Result]:
        got = measure(configs, known)
        known.update(got)
        return got

    results, searched = run_search(
        [dict(c) for c in plan.configs],
        dict(plan.default),
        strategy=strategy_of(plan.search),
        budget=plan.budget,
        measure=measure_batch,
        config_id=config_id,
    )
    todo = leaders(results, plan.options, plan.configs)
    retimed = retime(todo) if todo else {}
    results.update(retimed)
    outcome = finish(plan, results, searched, retimed=set(retimed))
    progress.finish(outcome)
    return outcome


def best_of(results: Mapping[str, Result]) -> float | None:
    """The best ``min_us`` among usable measurements, for early dropping."""
    best = [m.min_us for m in results.values() if isinstance(m, Measurement) and not m.dropped]
    return min(best) if best else None


def run_sweep(task: SweepTask, *, timer: Timer | None = None) -> SweepOutcome:
    """The whole sweep in this process.

    Raises:
        TuningFailedError: every config failed; the message lists each config and reason.
        SignatureError: ``inputs`` returned values that do not match the call.
    """
    plan = task.plan
    progress = new_progress(plan)
    sweeper = Sweeper(task, timer=timer, on_event=progress_sink(plan, progress))
    return drive(
        plan,
        measure=lambda configs, known: sweeper.measure(
            configs, reference=plan.default, best_us=best_of(known)
        ),
        retime=sweeper.retime,
        progress=progress,
    )
