"""The work of a sweep wherever the kernel runs (this process for the inline runner, the
child for the process runner), one job a module:

- :mod:`.compile`: configs traced on this thread and compiled by XLA in a pool of threads,
  their runs kept for re-timing;
- :mod:`.first_run`: each config run once as soon as it compiled (while the others still
  compile), and its output checked against the reference's;
- :mod:`.first_pass` and :mod:`.measure`: the configs that passed timed in two visits, with
  early dropping (a device timer's captures begin while configs still compile);
- :mod:`.rounds`: the leaders re-timed in interleaved rounds.

:class:`Sweeper` holds the one of each that a task needs and answers the runner's two
requests, ``measure`` and ``retime``. Each step is reported through ``on_event`` as an
event of :mod:`jaxtune._isolation.frames` (``CompileStarted``, ``RunStarted``,
``ConfigResult``...), so a parent can follow progress live and knows which config was in
flight if the child dies.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..._core.vocabulary import Config, Failure, Measurement, config_id
from ..._isolation.frames import ConfigResult, Event, RoundTimed
from .breakdown import Account, Breakdown
from .compile import Compiler, EventSink, Relay
from .first_pass import captured_ahead, first_pass
from .first_run import Early, FirstRuns
from .measure import CONFIGS_PER_CAPTURE, Stopwatch
from .rounds import interleaved
from .samples import Timing
from .timers import RecordingTimer, Timer, timer_for
from .work import Rounds, SweepTask

__all__ = ["EARLY_PACE_S", "Sweeper"]

#: The shortest time (seconds) between configs that passed their check, on average over
#: a capture's worth, at which they are captured while others still compile
#: (:meth:`Sweeper.measure`). Beside compiles a capture takes longer (Tokamax's ragged_dot
#: on a TPU v5e: 32 configs in 3.8-4.5 s beside 7-8 compiles a second, 1.7-1.9 s after
#: them) and, taken early, it is not screened: configs coming faster (loaded from JAX's
#: compilation cache, 30 a second) are timed sooner and more cheaply once all are in.
EARLY_PACE_S = 0.1

Result = Measurement | Failure


class Sweeper:
    """Compiles, checks and times configs of one task; keeps executables for re-timing.

    ``compiler`` makes the :class:`~.compile.Compiler` (called as ``compiler(task, emit=,
    breakdown=)``; tests give one whose XLA compile is a fake)."""

    def __init__(
        self,
        task: SweepTask,
        *,
        timer: Timer | None = None,
        on_event: EventSink | None = None,
        compiler: Callable[..., Compiler] = Compiler,
    ) -> None:
        self.timer: Timer = timer or timer_for(task.plan.timer)
        #: Each part's events go to :attr:`emit` (which may be replaced afterwards).
        self._relay = Relay(on_event or _ignore)
        #: Where the time goes (see :mod:`.breakdown`).
        self.breakdown = Breakdown()
        self.compiler = compiler(task, emit=self._relay, breakdown=self.breakdown)
        # A trace tells calls apart by their executable's name: there, each config keeps its
        # own, and on the wall clock twins share one.
        self.compiler.names.share = not isinstance(self.timer, RecordingTimer)
        self.first_runs = FirstRuns(self.compiler, emit=self._relay)
        self.stopwatch = Stopwatch(self.compiler, self.timer, emit=self._relay)
        #: The config timed for each program (a digest: :attr:`.same_program.Programs.digests`)
        #: and every timed config's result, over the task's batches (see :meth:`measure`).
        self._timed_programs: dict[str, Config] = {}
        self._results: dict[str, Result] = {}

    @property
    def emit(self) -> EventSink:
        """Where the sweep's events go."""
        return self._relay.target

    @emit.setter
    def emit(self, sink: EventSink) -> None:
        self._relay.target = sink

    @property
    def task(self) -> SweepTask:
        return self.compiler.task

    @property
    def inputs(self) -> tuple[dict[str, Any], ...]:
        return self.compiler.inputs

    @property
    def serial_rounds(self) -> bool:
        """Rounds and captures one config at a time (see :class:`~.measure.Stopwatch`)."""
        return self.stopwatch.serial_rounds

    @serial_rounds.setter
    def serial_rounds(self, serial: bool) -> None:
        self.stopwatch.serial_rounds = serial

    def precompile(
        self,
        configs: Sequence[Config],
        spec: dict[str, Any],
        *,
        serial: bool = False,
        reference: Config | None = None,
    ) -> None:
        """Starts compiling ``configs`` for arguments shaped as ``spec``
        (``jax.ShapeDtypeStruct`` leaves: the arrays are still arriving); :meth:`supply`
        gives the arrays, and a :meth:`measure` of the same configs and ``reference``
        picks up from here."""
        self.compiler.launch(_reference_first(configs, reference), serial=serial, spec=spec)

    def supply(self, task: SweepTask) -> None:
        """The task with the call's concrete arguments, once they have arrived (after
        :meth:`precompile`)."""
        self.compiler.supply(task)

    def compile(self, configs: Sequence[Config], *, serial: bool = False) -> dict[str, Failure]:
        """Compiles ``configs`` now (in parallel threads unless ``serial``); returns failures."""
        return self.compiler.compile(configs, serial=serial)

    def account(self) -> Account:
        """Where the time went since the last account, and each config's calls meanwhile
        (see :meth:`.breakdown.Breakdown.take`)."""
        self.compiler.count_calls()
        return self.breakdown.take()

    def measure(
        self,
        configs: Sequence[Config],
        *,
        reference: Config | None,
        best_us: float | None = None,
        serial_compile: bool = False,
        rounds: Rounds = Rounds.FIRST_PASS,
    ) -> dict[str, Result]:
        """Compiles, checks and times each config (timed in the given order, but for those
        a device timer captures while others still compile, timed as they come).

        ``reference`` is the config whose output the others must match (the default, or
        the first that worked when the default failed); when ``None`` or failing, the
        first config that runs becomes the reference. ``best_us`` carries the best time of
        configs measured elsewhere, for early dropping. ``rounds`` says how the configs
        that work are timed (:class:`~.work.Rounds`): in a first pass, or in interleaved
        rounds at once (as :meth:`retime` does), without a first pass.
        """
        ahead: dict[str, Timing | Failure] = {}
        early = self._early(rounds, serial_compile, ahead)
        checked = self.first_runs.check(
            _reference_first(configs, reference), reference, serial=serial_compile, early=early
        )
        runnable, twins = self._same_programs([c for c in configs if checked[config_id(c)] is None])
        at_once = rounds is Rounds.AT_ONCE
        if rounds is Rounds.IF_SLOW:
            firsts = [self.first_runs.first_s.get(config_id(c), 0.0) for c in runnable]
            at_once = bool(firsts) and min(firsts) >= self.task.plan.options.rounds_above_s
        timed: Mapping[str, Result]
        if at_once:
            timed = self._interleaved(runnable)
            for config in runnable:
                self.emit(ConfigResult(cid=config_id(config), result=timed[config_id(config)]))
        else:
            with self.breakdown.timed("first_pass"):
                timed = first_pass(self.stopwatch, runnable, best_us, ahead)
        timed = {**timed, **self._twin_results(twins, timed)}
        # Failures were reported as they became known (:meth:`.FirstRuns.check`).
        return {config_id(c): checked[config_id(c)] or timed[config_id(c)] for c in configs}

    def _early(
        self, rounds: Rounds, serial: bool, ahead: dict[str, Timing | Failure]
    ) -> Early | None:
        """Under a device timer, the first pass's captures begin while configs still
        compile: the configs that passed their check, once
        :data:`~.measure.CONFIGS_PER_CAPTURE` of them came at least :data:`EARLY_PACE_S`
        apart on average, their timings kept in ``ahead`` (Tokamax's ragged_dot on a TPU
        v5e: 329 configs compiled over about 55 s, with the chip idle, then 20-odd s of
        captures). Not one config at a time (``serial``, ``serial_rounds``) nor with no
        first pass, nor while every config that passed so far runs as slowly as
        ``Rounds.IF_SLOW`` times in rounds at once. A crash in such a capture comes while
        configs compile, so it names no one config: the runner asks again one config at a
        time."""
        timer = self.timer
        device = isinstance(timer, RecordingTimer) and timer.device_time
        if not device or serial or self.serial_rounds or rounds is Rounds.AT_ONCE:
            return None
        slow_s = self.task.plan.options.rounds_above_s
        first_s = self.first_runs.first_s
        fast = [rounds is not Rounds.IF_SLOW]  # a config that passed ran under slow_s

        def take(configs: list[Config]) -> None:
            fast[0] = fast[0] or any(first_s[config_id(c)] < slow_s for c in configs)
            if fast[0]:
                with self.breakdown.timed("first_pass"):
                    ahead.update(captured_ahead(self.stopwatch, configs))

        return Early(take=take, size=CONFIGS_PER_CAPTURE, pace_s=EARLY_PACE_S)

    def _same_programs(
        self, runnable: Sequence[Config]
    ) -> tuple[list[Config], dict[str, tuple[Config, Config]]]:
        """``runnable`` split into the configs to time and the twins: configs that lower to
        the same program as another (:attr:`.same_program.Programs.digests`), each mapped to
        the one timed for it (``twins[cid] = (config, timed_instead)``). Of the configs of one program, the one timed is the one a tie
        would go to (the default, else the earliest in the space), or one timed in an
        earlier batch: timing the same program twice can only show noise (or where the
        process placed each copy), and a race between copies made repeated sweeps store
        different configs."""
        plan = self.task.plan
        programs = self.compiler.names.digests
        rank = {config_id(c): i for i, c in enumerate(plan.configs)}
        rank[config_id(plan.default)] = -1

        def tie_order(config: Config) -> tuple[int, int]:
            cid = config_id(config)
            return (cid not in rank, rank.get(cid, 0))

        timed: list[Config] = []
        twins: dict[str, tuple[Config, Config]] = {}
        for config in sorted(runnable, key=tie_order):
            cid = config_id(config)
            program = programs.get(cid)
            first = self._timed_programs.get(program) if program is not None else None
            if first is not None and config_id(first) != cid:
                twins[cid] = (config, first)
                continue
            if program is not None:
                self._timed_programs[program] = config
            timed.append(config)
        order = {config_id(c): i for i, c in enumerate(runnable)}
        return sorted(timed, key=lambda c: order[config_id(c)]), twins

    def _twin_results(
        self, twins: Mapping[str, tuple[Config, Config]], timed: Mapping[str, Result]
    ) -> dict[str, Result]:
        """Each twin's result: the timing of the config timed in its stead (here, or in an
        earlier batch), marked ``dropped`` and ``same_as`` that config, or its failure."""
        self._results.update(timed)
        compile_s = self.compiler.compile_s()
        out: dict[str, Result] = {}
        for cid, (config, first) in twins.items():
            got = self._results[config_id(first)]
            if isinstance(got, Measurement):
                out[cid] = dataclasses.replace(
                    got,
                    config=dict(config),
                    dropped=True,
                    same_as=dict(first),
                    rounds_us=(),
                    calls=0,
                    behind=False,
                    compile_s=compile_s.get(cid, got.compile_s),
                )
            else:
                out[cid] = dataclasses.replace(got, config=dict(config))
            self.emit(ConfigResult(cid=cid, result=out[cid]))
        return out

    def retime(self, configs: Sequence[Config], second: Sequence[Config] = ()) -> dict[str, Result]:
        """Re-times ``configs`` in interleaved rounds, with a second look at ``second`` in
        the first rounds (see :func:`~.rounds.interleaved`). Only the configs of ``second``
        compiled here take part: one measured by another device's child would have to be
        compiled again for its look. Nothing is timed with fewer than two configs."""
        self.compile(configs)
        compiled = self.compiler.compiled
        leading = [c for c in configs if compiled(config_id(c))]
        here = {config_id(c) for c in leading}
        looked = [c for c in second if compiled(config_id(c)) and config_id(c) not in here]
        if len(leading) + len(looked) < 2:
            return {}
        return self._interleaved(leading, looked)

    def _interleaved(
        self, configs: Sequence[Config], second: Sequence[Config] = ()
    ) -> dict[str, Result]:
        """Times compiled ``configs`` in interleaved rounds (:func:`~.rounds.interleaved`),
        ``second`` on a second look."""
        plan = self.task.plan
        with self.breakdown.timed("rounds"):
            return interleaved(
                configs,
                timed=self.stopwatch.round,
                timed_rounds=self.stopwatch.rounds,
                ahead=self.stopwatch.ahead,
                compile_s=self.compiler.compile_s(),
                space=plan.configs,
                options=plan.options,
                default=plan.default,
                second=second,
                on_round=lambda done, racing: self.emit(
                    RoundTimed(cid=racing[0], done=done, racing=len(racing))
                ),
            )


def _reference_first(configs: Sequence[Config], reference: Config | None) -> list[Config]:
    """``configs`` with ``reference`` first where it is one of them: it is lowered and
    compiled first, so that the others' checks (and a device timer's first captures) do not
    wait for it (Tokamax's ragged_dot's default is its 109th config of 540: on a TPU v5e
    every output waited 35 s for it)."""
    ref = config_id(reference) if reference is not None else None
    return sorted(configs, key=lambda c: config_id(c) != ref)


def _ignore(event: Event) -> None:
    pass
