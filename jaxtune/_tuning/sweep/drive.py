"""Parent side. The sweep: the search strategy picks configs to measure (every config unless a
budget says otherwise); each batch compiles in parallel threads, is checked against the
reference config's output and timed one config at a time with early dropping; the leaders are
re-timed in interleaved rounds until a paired test settles them (the other configs measured take
part in the first rounds, a second look before they are ruled out), and a tie goes to the
earliest config of the space.

What a sweep is (:class:`~.work.SweepPlan`, :class:`~.work.SweepTask`) lives in
:mod:`.work`; :class:`~.engine.Sweeper` does the work wherever the kernel runs. A failed
config is a :class:`Failure` with its reason; only "every config failed" raises.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping
from typing import Protocol

from ..._core.vocabulary import Config, Failure, Measurement, config_id
from .breakdown import Account, Breakdown
from .engine import Sweeper
from .progress import Progress, progress_sink
from .requests import best_of
from .search import Search, configs_to_measure, strategy_of
from .stats import SweepOutcome, finish, leaders, second_look
from .timers import Timer
from .work import Rounds, SweepPlan, SweepTask

__all__ = [
    "InProcess",
    "Measurer",
    "drive",
    "new_progress",
    "run_sweep",
]

Result = Measurement | Failure


def new_progress(plan: SweepPlan) -> Progress:
    """Progress of a sweep, counting against what its budget allows."""
    strategy = strategy_of(plan.search)
    return Progress(
        f"{plan.kernel} {plan.key}",
        configs_to_measure(strategy, plan.budget, len(plan.configs)),
        plan.verbose,
        space=len(plan.configs),
        strategy=strategy.name,
        timing=plan.timing,
        rounds_s=plan.options.max_rounds_s,
    )


class Measurer(Protocol):
    """What a runner offers :func:`drive`: configs measured and re-timed where the kernel
    runs (:class:`InProcess` here; the runner's children, :mod:`.children`)."""

    @property
    def device_time(self) -> bool:
        """Whether the timer there takes device time (:func:`~.timers.device_time`)."""
        ...

    def measure(
        self, configs: list[Config], known: Mapping[str, Result], rounds: Rounds
    ) -> Mapping[str, Result]:
        """Each config's result by id. ``known`` holds the results of earlier batches;
        ``rounds``: how they are timed (:class:`~.work.Rounds`)."""
        ...

    def retime(self, leaders: list[Config], second: list[Config]) -> Mapping[str, Result]:
        """The leaders timed in interleaved rounds, with a second look at ``second`` in the
        first rounds (:func:`~.rounds.interleaved`)."""
        ...


def drive(
    plan: SweepPlan,
    measurer: Measurer,
    *,
    progress: Progress,
    breakdown: Breakdown | None = None,
) -> SweepOutcome:
    """A whole sweep through a runner's ``measurer``: search, re-time the leaders with a
    second look at the other configs measured, pick the winner. A small space measured in
    one batch (at most the options' ``first_pass_above`` configs) is timed in interleaved
    rounds straight away, which takes the place of the first pass and the re-timing; so is
    a whole space measured in one batch when the kernel is slow. Under a device timer only
    the configs within ``device_look_window`` of the best get the second look (see
    :class:`~.samples.TimingOptions`), and with no rival within the leaders' window the
    next fastest races alone. ``breakdown`` gathers
    where the time went (the measurers add to it); the outcome carries its phases, and
    each measurement its calls."""
    start = time.perf_counter()
    batches = _Batches(plan, measurer)
    search = Search(
        [dict(c) for c in plan.configs],
        dict(plan.default),
        strategy=strategy_of(plan.search),
        budget=plan.budget,
        config_id=config_id,
    )
    while (configs := search.next_batch()) is not None:
        search.record(batches.measure(configs))
    results, searched = search.results, search.searched
    live = [m for m in results.values() if isinstance(m, Measurement) and not m.dropped]
    if live and all(m.rounds_us for m in live):  # timed side by side already
        retimed: Mapping[str, Result] = {
            config_id(m.config): m
            for m in results.values()
            if isinstance(m, Measurement) and m.rounds_us
        }
    else:
        todo = leaders(results, plan.options, plan.configs, plan.default)
        # A device timer's samples are the chip's own times, which a burst of work on the
        # host does not lengthen: only the configs close behind the best get a second look
        # there (each program in a look round's trace costs the chip's profiler ~35 ms).
        window = plan.options.device_look_window if measurer.device_time else None
        second = second_look(results, todo, within=window)
        if not todo:
            # No rival within the leaders' window: the fastest races the others' second look
            # (under a device timer, the next fastest's alone), so that the decision still
            # comes from rounds.
            second = second_look(results, todo)
            if len(second) >= 2:
                todo, second = second[:1], second[1 : None if window is None else 2]
        retimed = measurer.retime(todo, second) if todo else {}
        results.update(retimed)
    outcome = finish(plan, results, searched, retimed=set(retimed))
    if breakdown is not None:
        outcome = with_breakdown(outcome, breakdown, time.perf_counter() - start)
    progress.finish(outcome)
    return outcome


class _Batches:
    """The search's batches, measured in turn by ``measurer``; each sees what the batches
    before it measured. A batch that is the whole space, measured first, is timed in
    rounds at once when the space is small, and when the kernel turns out slow."""

    def __init__(self, plan: SweepPlan, measurer: Measurer) -> None:
        self.measurer = measurer
        self.known: dict[str, Result] = {}
        self.space = {config_id(c) for c in plan.configs}
        self.small = len(self.space) <= plan.options.first_pass_above

    def measure(self, configs: list[Config]) -> Mapping[str, Result]:
        whole = not self.known and self.space <= {config_id(c) for c in configs}
        rounds = (
            Rounds.FIRST_PASS if not whole else Rounds.AT_ONCE if self.small else Rounds.IF_SLOW
        )
        got = self.measurer.measure(configs, self.known, rounds)
        self.known.update(got)
        return got


def with_breakdown(outcome: SweepOutcome, breakdown: Breakdown, total_s: float) -> SweepOutcome:
    """``outcome`` with the phases of a sweep that took ``total_s`` and each measured
    config's calls."""
    phases = breakdown.finish(total_s)
    calls = breakdown.take().calls

    made: dict[int, Result] = {}  # one new object per old one: identities stay as they were

    def counted(m: Result) -> Result:
        n = calls.get(config_id(m.config), 0)
        if not (isinstance(m, Measurement) and n):
            return m
        if id(m) not in made:
            made[id(m)] = dataclasses.replace(m, calls=n)
        return made[id(m)]

    best = counted(outcome.best)
    assert isinstance(best, Measurement)
    return dataclasses.replace(
        outcome,
        measurements=tuple(counted(m) for m in outcome.measurements),
        best=best,
        default=counted(outcome.default),
        phases=phases,
    )


def run_sweep(task: SweepTask, *, timer: Timer | None = None) -> SweepOutcome:
    """The whole sweep in this process.

    Raises:
        TuningFailedError: every config failed; the message lists each config and reason.
        SignatureError: ``inputs`` returned values that do not match the call.
    """
    plan = task.plan
    progress = new_progress(plan)
    sweeper = Sweeper(task, timer=timer, on_event=progress_sink(plan, progress))
    return drive(plan, InProcess(sweeper), progress=progress, breakdown=_Accounted(sweeper))


class InProcess:
    """A :class:`Measurer` in this process: ``sweeper``'s, checked against the plan's
    default."""

    def __init__(self, sweeper: Sweeper) -> None:
        self.sweeper = sweeper

    @property
    def device_time(self) -> bool:
        return self.sweeper.timer.device_time

    def measure(
        self, configs: list[Config], known: Mapping[str, Result], rounds: Rounds
    ) -> Mapping[str, Result]:
        default = self.sweeper.task.plan.default
        return self.sweeper.measure(
            configs, reference=default, best_us=best_of(known), rounds=rounds
        )

    def retime(self, leaders: list[Config], second: list[Config]) -> Mapping[str, Result]:
        return self.sweeper.retime(leaders, second)


class _Accounted(Breakdown):
    """The breakdown of a sweeper in this process: its calls are counted as they are
    taken."""

    def __init__(self, sweeper: Sweeper) -> None:
        super().__init__()
        self.sweeper = sweeper

    def take(self) -> Account:
        self.merge(self.sweeper.account())
        return super().take()

    def finish(self, total_s: float) -> dict[str, float]:
        self.merge(self.sweeper.account())
        return super().finish(total_s)
