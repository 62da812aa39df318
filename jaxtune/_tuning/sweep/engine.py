"""The work of a sweep wherever the kernel runs (this process for the inline runner, the
child for the process runner): compile configs, run and check each, time them, re-time the
leaders interleaved.

Configs compile in background threads; as each finishes, this thread runs it once and keeps
its output for the numerics check, while the others still compile. Each step is reported
through ``on_event`` as an event of :mod:`jaxtune._isolation.frames` (``CompileStarted``,
``RunStarted``, ``ConfigResult``...), so a parent can follow progress live and knows which
config was in flight if the child dies.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import functools
import queue
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import jax

from ..._core.vocabulary import Failure, Measurement, config_id
from ..._isolation import context as _context
from ..._isolation.devices import usable_cores
from ..._isolation.frames import (
    CompileFinished,
    CompileStarted,
    ConfigResult,
    Event,
    RoundStarted,
    RunFinished,
    RunStarted,
)
from ..signature import Signature
from .breakdown import Breakdown
from .check import check_outputs, reason
from .inputs import make_inputs
from .rounds import interleaved, measurement
from .timers import Recording, RecordingTimer, RoundTimer, Timer, timer_for
from .timing import Timing, TimingOptions, block, clearly_slower
from .work import SweepTask

__all__ = [
    "CONFIGS_PER_CAPTURE",
    "ENGINE_FAULT",
    "MAX_COMPILE_THREADS",
    "EventSink",
    "Sweeper",
    "compile_threads",
]

Config = dict[str, Any]
Result = Measurement | Failure
#: ``on_event(event)``: each step, as one of :data:`~jaxtune._isolation.frames.Event`.
EventSink = Callable[[Event], None]
#: A config's compile outcome as it becomes known: its id, and its failure or ``None``
#: (or what the engine's own code raised while on it, for the waiter to raise).
Compiled = tuple[str, Failure | BaseException | None]

#: Added to an exception of the engine's own code (a bug), never recorded as a config's
#: failure: a config fails only by what its kernel, JAX's lowering and compiling of it or
#: its run raise.
ENGINE_FAULT = (
    "jaxtune failed in its own sweep code while on config {config}: this is a bug in "
    "jaxtune, not a failure of the config; please report it with this traceback"
)

#: The most configs a device timer times inside one capture (:meth:`Sweeper._captured`).
#: A capture costs about 1.2 s on a TPU v5e whatever it holds (flash attention, 16
#: configs: a first pass of one capture per config and visit took 19.9 s of a 40.9 s
#: sweep); a bound keeps a 540-config space's trace to a size that is quick to read and
#: a crash at a capture's end to a group small enough to pin one config at a time.
CONFIGS_PER_CAPTURE = 32


@dataclasses.dataclass(frozen=True, slots=True)
class _Dropping:
    """The first visit's dropping: the best time known before it (measured in earlier
    batches), and the configs never dropped (the earliest of the space, the default)."""

    best_us: float | None
    kept: frozenset[str | None]


@dataclasses.dataclass(frozen=True, slots=True)
class Lowering:
    """A config's lowered module, waiting for XLA, and the seconds tracing it took."""

    lowered: Any
    seconds: float


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
        self.timer: Timer = timer or timer_for(task.plan.timer)
        self.emit: EventSink = on_event or (lambda event: None)
        self._inputs: dict[str, Any] | None = None
        self._runs: dict[str, tuple[Callable[[], Any], float]] = {}
        #: Each config's executable is named for it (``jit_jaxtune_<n>``), so a device
        #: timer tells its calls from the others' in a shared trace.
        self._modules: dict[str, str] = {}
        self._failed: dict[str, Failure] = {}
        #: The exception a config's call raised last (until :meth:`_timed` looks).
        self._raised: dict[str, Exception] = {}
        self._thread: threading.Thread | None = None
        #: Rounds time one config at a time, each reported as running, and a device timer
        #: captures one config at a time (to find which config crashed a child during a
        #: round of passes or at a shared capture's end); passes and shared captures
        #: otherwise.
        self.serial_rounds = False
        self._launched: tuple[list[str], queue.SimpleQueue[Compiled]] | None = None
        #: Where the time goes (see :mod:`.breakdown`); each config's calls so far, and
        #: the count already reported.
        self.breakdown = Breakdown()
        self._calls: dict[str, list[int]] = {}
        #: Each config's first call, in seconds (the check's run).
        self._first_s: dict[str, float] = {}
        self._reported: dict[str, int] = {}

    @property
    def inputs(self) -> dict[str, Any]:
        if self._inputs is None:
            self._inputs = make_inputs(self.task.plan.kernel, self.task.signature, self.task.inputs)
        return self._inputs

    # -- compiling -----------------------------------------------------------------------

    def precompile(
        self, configs: Sequence[Config], spec: dict[str, Any], *, serial: bool = False
    ) -> None:
        """Starts compiling ``configs`` for arguments shaped as ``spec``
        (``jax.ShapeDtypeStruct`` leaves: the arrays are still arriving); :meth:`supply`
        gives the arrays, and a :meth:`measure` of the same configs picks up from here."""
        self._launch(configs, serial=serial, spec=spec)

    def supply(self, signature: Signature) -> None:
        """The call's concrete arguments, once they have arrived (after :meth:`precompile`)."""
        self.task = dataclasses.replace(self.task, signature=signature)
        self._inputs = None

    def _launch(
        self, configs: Sequence[Config], *, serial: bool, spec: dict[str, Any] | None
    ) -> None:
        """Compiles ``configs`` in a background thread; each outcome is queued as known."""
        self._wait()
        if spec is None:
            self.inputs  # noqa: B018 - built here, before the threads start
        done: queue.SimpleQueue[Compiled] = queue.SimpleQueue()
        local_config = _context.capture()

        def work() -> None:
            with local_config():
                self._compile_all(configs, serial=serial, spec=spec, done=done.put)

        self._thread = threading.Thread(target=work, name="jaxtune-compile", daemon=True)
        self._thread.start()
        self._launched = ([config_id(c) for c in configs], done)

    def _wait(self) -> None:
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join()

    def compile(self, configs: Sequence[Config], *, serial: bool = False) -> dict[str, Failure]:
        """Compiles ``configs`` now (in parallel threads unless ``serial``); returns failures."""
        self._wait()
        self.inputs  # noqa: B018 - built here, before the threads start
        return self._compile_all(configs, serial=serial, spec=None)

    def _compile_all(
        self,
        configs: Sequence[Config],
        *,
        serial: bool,
        spec: dict[str, Any] | None,
        done: Callable[[Compiled], None] | None = None,
    ) -> dict[str, Failure]:
        """Compiles ``configs``: one at a time when ``serial``, else in a pipeline: this
        thread traces and lowers them in turn (Python work that holds the GIL, so a second
        tracing thread would only slow the first and the thread running configs), and XLA
        compiles the lowered modules meanwhile in a pool of threads (work that lets go of
        the GIL)."""
        threads = 1 if serial else (self.task.compile_threads or compile_threads())
        local_config = _context.capture()
        failures: dict[str, Failure] = {}

        def settle(config: Config, compile_: Callable[[], Failure | None]) -> None:
            cid = config_id(config)
            try:
                with local_config():
                    failure = compile_()
            except BaseException as e:
                # Not the config's failure (those are returned): a fault of the engine's
                # own, or an interrupt. Whoever waits on ``done`` must hear of every
                # config: it gets the exception, and raises it.
                _blame_jaxtune(e, cid)
                if done is None:
                    raise
                done((cid, e))
                return
            if failure is not None:
                failures[cid] = failure
            if done is not None:
                done((cid, failure))

        if serial or len(configs) <= 1:
            for config in configs:
                settle(config, functools.partial(self._compile_one, config, spec))
            return failures
        with concurrent.futures.ThreadPoolExecutor(
            threads, thread_name_prefix="jaxtune-compile"
        ) as ex:
            pending = []
            for config in configs:
                try:
                    with local_config():
                        lowered = self._lower_one(config, spec)
                except BaseException as e:  # not the config's: settle raises or hands it on
                    settle(config, functools.partial(_reraise, e))
                    continue
                if isinstance(lowered, Lowering):
                    job = functools.partial(self._compile_one, config, spec, lowered)
                    pending.append(ex.submit(settle, config, job))
                else:
                    settle(config, functools.partial(_given, lowered))
            for future in pending:
                future.result()
        return failures

    def _lower_one(self, config: Config, spec: dict[str, Any] | None) -> Lowering | Failure | None:
        """Traces and lowers ``config``: its lowering, its failure, or ``None`` when it was
        compiled before."""
        cid = config_id(config)
        if cid in self._runs or cid in self._failed:
            return self._failed.get(cid)
        sig, fn = self.task.signature, self.task.fn
        lowering = self.inputs if spec is None else spec

        def forward(dyn: dict[str, Any]) -> Any:
            with _own_code():
                args, kwargs = sig.call_arguments(replace=dyn)
            return fn(*args, **kwargs, **config)

        call = with_backward(forward) if self.task.plan.timing == "vjp" else forward
        call.__name__ = call.__qualname__ = self._module(config).removeprefix("jit_")

        # The tracing thread travels with the event: a crash report that names it (the
        # child's faulthandler does) pins the crash on this config.
        self.emit(CompileStarted(cid=cid, thread=threading.get_ident()))
        start = time.perf_counter()
        own: BaseException | None = None
        try:
            lowered = jax.jit(call).lower(lowering)
        except _OwnCodeError as e:  # raised below, outside this handler: it is not JAX's
            own = e.fault
        except Exception as e:  # the kernel, or JAX tracing or lowering it, failed
            self.emit(CompileFinished(cid=cid))
            why = f"while tracing or lowering: {reason(e)}"
            self._failed[cid] = Failure(config=config, stage="compile", reason=why)
            return self._failed[cid]
        if own is not None:
            self.emit(CompileFinished(cid=cid))
            _blame_jaxtune(own, cid)
            raise own
        return Lowering(lowered=lowered, seconds=time.perf_counter() - start)

    def _compile_one(
        self, config: Config, spec: dict[str, Any] | None = None, lowered: Lowering | None = None
    ) -> Failure | None:
        """Compiles ``config`` (lowered first unless ``lowered``); its failure or ``None``."""
        cid = config_id(config)
        if lowered is None:
            got = self._lower_one(config, spec)
            if not isinstance(got, Lowering):
                return got
            lowered = got
        else:  # a compiling thread took over: a crash in it is this config's
            self.emit(CompileStarted(cid=cid, thread=threading.get_ident()))
        start = time.perf_counter()
        try:
            compiled = lowered.lowered.compile()
        except Exception as e:  # XLA failed to compile the config's module
            self.emit(CompileFinished(cid=cid))
            self._failed[cid] = Failure(config=config, stage="compile", reason=reason(e))
            return self._failed[cid]
        seconds = lowered.seconds + time.perf_counter() - start
        self.breakdown.add("compile_threads", seconds)
        self.emit(CompileFinished(cid=cid, seconds=seconds))
        if seconds > self.task.plan.timeout_s:
            self._failed[cid] = self._too_slow(config, "compiling", seconds)
            return self._failed[cid]
        calls = self._calls.setdefault(cid, [0])

        def run() -> Any:
            calls[0] += 1  # a cell, not a lock: this runs inside the timed loops
            try:
                # The inputs are looked up on each call: compiled early, they arrive
                # afterwards (and are made before the first run, outside it).
                return block(compiled(self.inputs))
            except Exception as e:
                # The config's call raised: what tells it from a fault of the timer
                # around it (:meth:`_timed`).
                self._raised[cid] = e
                raise

        self._runs[cid] = (run, seconds)
        return None

    def account(self) -> dict[str, Any]:
        """Where the time went since the last account, and each config's calls meanwhile
        (see :meth:`.breakdown.Breakdown.take`)."""
        for cid, cell in self._calls.items():
            new = cell[0] - self._reported.get(cid, 0)
            if new:
                self.breakdown.count(cid, new)
                self._reported[cid] = cell[0]
        return self.breakdown.take()

    def _module(self, config: Config) -> str:
        """The HLO module name of ``config``'s executable."""
        cid = config_id(config)
        if cid not in self._modules:
            self._modules[cid] = f"jit_jaxtune_{len(self._modules)}"
        return self._modules[cid]

    def _too_slow(self, config: Config, step: str, seconds: float) -> Failure:
        return Failure(
            config=config,
            stage="timeout",
            reason=f"{step} took {seconds:.1f} s, over the {self.task.plan.timeout_s:g} s limit "
            "(JAXTUNE_TIMEOUT / timeout=)",
        )

    # -- checking ------------------------------------------------------------------------

    def _first_run(self, config: Config) -> tuple[Failure | None, Any]:
        """Runs a compiled config once: its failure, or ``None`` and its output."""
        cid = config_id(config)
        run = self._runs[cid][0]
        self.inputs  # noqa: B018 - made here (inputs= is the user's), not inside the run
        self.emit(RunStarted(cid=cid, thread=threading.get_ident()))
        start = time.perf_counter()
        try:
            out = run()
        except Exception as e:  # only the config's call is inside
            self._raised.pop(cid, None)
            return Failure(config=config, stage="run", reason=reason(e)), None
        finally:
            self.emit(RunFinished(cid=cid))
            self.breakdown.add("warmup", time.perf_counter() - start)
        spent = time.perf_counter() - start
        self._first_s[cid] = spent
        if spent > self.task.plan.timeout_s:
            return self._too_slow(config, "running", spent), None
        return None, out

    def _check_all(
        self, configs: Sequence[Config], reference: Config | None, serial: bool
    ) -> dict[str, Failure | None]:
        """Compiles ``configs``, runs each once as soon as it compiled (while the others
        still compile) and checks its output against the reference: ``reference`` if it
        runs, else the first of ``configs`` that does. Returns each config's failure; each
        failure is reported as soon as known (a config that fails to lower or compile is
        out before any timing, and counts in the progress shown meanwhile)."""
        ids = [config_id(c) for c in configs]
        by_id = dict(zip(ids, configs, strict=True))
        if self._launched is None or self._launched[0] != ids:
            self._launch(configs, serial=serial, spec=None)
        assert self._launched is not None
        done = self._launched[1]
        self._launched = None
        if serial:  # one step at a time, so that a crash names its config
            self._wait()
        outcome: dict[str, Failure | None] = {}
        outputs: dict[str, Any] = {}
        candidates = list(ids)
        if reference is not None:
            ref_id = config_id(reference)
            candidates.insert(0, ref_id)
            if ref_id not in by_id:  # measured in an earlier batch: run it again here
                outcome[ref_id] = self._compile_one(reference)
                if outcome[ref_id] is None:
                    outcome[ref_id], out = self._first_run(reference)
                    if outcome[ref_id] is None:
                        outputs[ref_id] = out
        ref: list[Any] = []
        for _ in ids:
            with self.breakdown.timed("compile_wait"):
                cid, failure = done.get()
            if isinstance(failure, BaseException):  # the compile thread's fault, not the config's
                raise failure
            if failure is None:
                failure, out = self._first_run(by_id[cid])
                if failure is None:
                    outputs[cid] = out
            outcome[cid] = failure
            failed = {cid: failure} if failure is not None else {}
            failed |= self._compare(candidates, outcome, outputs, ref, by_id)
            for out_id, why in failed.items():
                if out_id in by_id:  # not a reference measured in an earlier batch
                    self.emit(ConfigResult(cid=out_id, result=why))
        return {cid: outcome[cid] for cid in ids}

    def _compare(
        self,
        candidates: list[str],
        outcome: dict[str, Failure | None],
        outputs: dict[str, Any],
        ref: list[Any],
        by_id: Mapping[str, Config],
    ) -> dict[str, Failure]:
        """Settles the reference once the candidates before it are known, then checks
        (and lets go of) every output waiting for it; returns the checks' failures."""
        if not ref:
            for cid in candidates:
                if cid not in outcome:
                    return {}
                if outcome[cid] is None:
                    ref.append(outputs.pop(cid))
                    break
            else:
                return {}
        failed = {}
        for cid in list(outputs):
            out = outputs.pop(cid)
            with self.breakdown.timed("check"):
                problem = check_outputs(out, ref[0], self.task.check)
            if problem is not None:
                failed[cid] = Failure(config=dict(by_id[cid]), stage="check", reason=problem)
                outcome[cid] = failed[cid]
        return failed

    # -- timing --------------------------------------------------------------------------

    def measure(
        self,
        configs: Sequence[Config],
        *,
        reference: Config | None,
        best_us: float | None = None,
        serial_compile: bool = False,
        rounds: bool | str = False,
    ) -> dict[str, Result]:
        """Compiles, checks and times each config (timed in the given order).

        ``reference`` is the config whose output the others must match (the default, or
        the first that worked when the default failed); when ``None`` or failing, the
        first config that runs becomes the reference. ``best_us`` carries the best time of
        configs measured elsewhere, for early dropping. With ``rounds``, there is no first
        pass: every config that works is timed in interleaved rounds at once (as
        :meth:`retime` does), for a batch that is the whole of a small space; with
        ``rounds="slow"``, so when every config's first call took at least the options'
        ``rounds_above_s`` (for a batch that is the whole space).
        """
        checked = self._check_all(configs, reference, serial_compile)
        runnable = [c for c in configs if checked[config_id(c)] is None]
        if rounds == "slow":
            firsts = [self._first_s.get(config_id(c), 0.0) for c in runnable]
            rounds = bool(firsts) and min(firsts) >= self.task.plan.options.rounds_above_s
        timed: Mapping[str, Result]
        if rounds:
            timed = self._interleaved(runnable)
            for config in runnable:
                self.emit(ConfigResult(cid=config_id(config), result=timed[config_id(config)]))
        else:
            with self.breakdown.timed("first_pass"):
                timed = self._first_pass(runnable, best_us)
        # Failures were reported as they became known (:meth:`_check_all`).
        return {config_id(c): checked[config_id(c)] or timed[config_id(c)] for c in configs}

    def _first_pass(self, runnable: Sequence[Config], best_us: float | None) -> dict[str, Result]:
        """Times each config in two visits, the second in reverse order (a slow spell of
        the machine during one config's turn does not decide its rank), dropping configs
        clearly slower than the best (``best_us`` or better) on the first. The earliest
        config of the space wins ties and the default always races in the rounds, so
        neither is dropped.

        A device timer (a :class:`~.timers.RecordingTimer`) times a whole visit inside one
        capture (:meth:`_captured`): its device timings arrive when the capture ends, so
        the first visit drops by them, against the best of the visit, before the second
        begins. The wall timer times one config at a time and stops a config's samples
        as soon as they show it clearly slower than the best so far."""
        timed: dict[str, Timing | Failure] = {}
        earliest = config_id(self.task.plan.configs[0]) if self.task.plan.configs else None
        kept = frozenset({earliest, config_id(self.task.plan.default)})
        for visit, sequence in enumerate((runnable, runnable[::-1])):
            todo = [c for c in sequence if _timed_on(timed.get(config_id(c)))]
            first_visit = visit == 0
            options = self._visit_options(first_visit=first_visit)
            dropping = _Dropping(best_us=best_us, kept=kept) if first_visit else None
            if isinstance(self.timer, RecordingTimer):
                got = self._visit_captured(todo, options, dropping)
            else:
                got = self._visit_in_turn(todo, options, dropping)
            for config in todo:
                cid = config_id(config)
                now, before = got[cid], timed.get(cid)
                if isinstance(now, Timing) and isinstance(before, Timing):
                    now = before + now
                timed[cid] = now
                if not first_visit or not isinstance(now, Timing) or now.dropped:
                    self.emit(ConfigResult(cid=cid, result=self._result(config, now)))
        return {config_id(c): self._result(c, timed[config_id(c)]) for c in runnable}

    def _result(self, config: Config, got: Timing | Failure) -> Result:
        if isinstance(got, Failure):
            return got
        return measurement(config, got, self._runs[config_id(config)][1])

    def _visit_options(self, *, first_visit: bool) -> TimingOptions:
        """One visit's share of a config's samples (half the minimum time and count)."""
        options = self.task.plan.options
        return dataclasses.replace(
            options,
            # On the first visit, the first run (for the check) was the first warm-up call.
            warmup=max(1, options.warmup - 1) if first_visit else 1,
            min_time_s=options.min_time_s / 2,
            min_samples=max(1, -(-options.min_samples // 2)),
            max_samples=max(1, -(-options.max_samples // 2)),
        )

    def _visit_in_turn(
        self, configs: Sequence[Config], options: TimingOptions, dropping: _Dropping | None
    ) -> dict[str, Timing | Failure]:
        """One visit, one config at a time; with ``dropping``, a config stops once
        clearly slower than the best so far (see :func:`~.timing.clearly_slower`)."""
        timer = self.timer
        best_us = dropping.best_us if dropping is not None else None
        out: dict[str, Timing | Failure] = {}
        for config in configs:
            cid = config_id(config)
            bar = best_us if dropping is not None and cid not in dropping.kept else None
            got = self._timed(
                config, functools.partial(timer.measure, options=options, best_us=bar)
            )
            if isinstance(got, Timing) and not got.dropped:
                best_us = got.min_us if best_us is None else min(best_us, got.min_us)
            out[cid] = got
        return out

    def _visit_captured(
        self, configs: Sequence[Config], options: TimingOptions, dropping: _Dropping | None
    ) -> dict[str, Timing | Failure]:
        """One visit inside one capture of the device timer; with ``dropping``, the
        configs clearly slower than the best of the visit (or the best known before) are
        dropped once the capture has ended."""
        out = self._captured(
            configs, lambda rec, module, run: rec.measure(run, options, module=module)
        )
        if dropping is None:
            return out
        times = [got.min_us for got in out.values() if isinstance(got, Timing)]
        if dropping.best_us is not None:
            times.append(dropping.best_us)
        best = min(times, default=None)
        for cid, got in out.items():
            if (
                isinstance(got, Timing)
                and cid not in dropping.kept
                and clearly_slower(got.samples_us, best, options)
            ):
                out[cid] = dataclasses.replace(got, dropped=True)
        return out

    def _captured(
        self,
        configs: Sequence[Config],
        measure: Callable[[Recording, str, Callable[[], Any]], Timing],
    ) -> dict[str, Timing | Failure]:
        """``measure(recording, module, run)`` of each config in turn, inside captures of
        the device timer of up to :data:`CONFIGS_PER_CAPTURE` configs each (one each after
        a crash: ``serial_rounds``); each config's device timing, or its failure.

        Each config is reported as running while its calls run, so a crash or hang then
        is blamed on it alone; the capture's end (the trace stopped and read) is reported
        as a round of its configs, so a crash there makes the runner ask again one config
        per capture, which pins it."""
        timer = self.timer
        assert isinstance(timer, RecordingTimer)
        size = 1 if self.serial_rounds else CONFIGS_PER_CAPTURE
        out: dict[str, Timing | Failure] = {}
        for first in range(0, len(configs), size):
            chunk = configs[first : first + size]
            cids = tuple(config_id(c) for c in chunk)
            got: dict[str, Timing | Failure] = {}
            # Where each config's calls stand in the recording (a config that failed
            # after its calls, over the time limit, still has them there).
            at: dict[str, int] = {}
            try:
                with timer.recording() as rec:
                    for config, cid in zip(chunk, cids, strict=True):
                        module = self._module(config)
                        at[cid] = len(rec.calls)
                        got[cid] = self._timed(config, functools.partial(measure, rec, module))
                    self.emit(RoundStarted(cids=cids))
            finally:
                self.emit(RunFinished(cid=cids[0]))
            device = rec.results()
            out.update(
                {cid: t if isinstance(t, Failure) else device[at[cid]] for cid, t in got.items()}
            )
        return out

    def _timed(
        self, config: Config, measure: Callable[[Callable[[], Any]], Timing]
    ) -> Timing | Failure:
        """``measure(run)`` of a compiled config, reported as running meanwhile (so that a
        crash or hang is blamed on it); an exception or a step over the time limit is the
        config's failure."""
        cid = config_id(config)
        run = self._runs[cid][0]
        self._raised.pop(cid, None)
        self.emit(RunStarted(cid=cid, thread=threading.get_ident()))
        start = time.perf_counter()
        try:
            timing = measure(run)
        except Exception as e:
            if self._raised.pop(cid, None) is not e:  # the timer's own fault, not the call's
                _blame_jaxtune(e, cid)
                raise
            return Failure(config=config, stage="run", reason=reason(e))
        finally:
            self.emit(RunFinished(cid=cid))
        spent = time.perf_counter() - start
        if spent > self.task.plan.timeout_s:
            return self._too_slow(config, "running", spent)
        return timing

    def retime(self, configs: Sequence[Config], second: Sequence[Config] = ()) -> dict[str, Result]:
        """Re-times ``configs`` in interleaved rounds, with a second look at ``second`` in
        the first rounds (see :func:`~.rounds.interleaved`). Only the configs of ``second``
        compiled here take part: one measured by another device's child would have to be
        compiled again for its look. Nothing is timed with fewer than two configs."""
        self.compile(configs)
        leading = [c for c in configs if config_id(c) in self._runs]
        here = {config_id(c) for c in leading}
        looked = [c for c in second if config_id(c) in self._runs and config_id(c) not in here]
        if len(leading) + len(looked) < 2:
            return {}
        return self._interleaved(leading, looked)

    def _round(self, configs: Sequence[Config]) -> dict[str, Timing | Failure]:
        """One interleaved round: each config's samples, in order (inside one trace for a
        timer that records, such as the profiler's: :meth:`_captured`)."""
        options = self.task.plan.options
        timer = self.timer
        recording = timer.recording if isinstance(timer, RecordingTimer) else None
        if isinstance(timer, RoundTimer) and not self.serial_rounds and len(configs) > 1:
            return self._passes(configs, timer, recording)
        if recording is None:
            return {
                config_id(c): self._timed(
                    c, lambda run: self.timer.measure(run, options, samples=options.round_samples)
                )
                for c in configs
            }
        return self._captured(
            configs,
            lambda rec, module, run: rec.measure(
                run, options, samples=options.round_samples, module=module
            ),
        )

    def _passes(
        self,
        configs: Sequence[Config],
        timer: RoundTimer,
        recording: Callable[[], Any] | None,
    ) -> dict[str, Timing | Failure]:
        """One round timed in passes over ``configs`` (the timer's ``round``): every config
        meets the same spells of machine noise. A crash or hang meanwhile is blamed on the
        round's configs together; the runner then asks for rounds one config at a time
        (``serial_rounds``) to find the culprit."""
        options = self.task.plan.options
        cids = [config_id(c) for c in configs]
        runs = [(self._runs[cid][0], self._module(c)) for cid, c in zip(cids, configs, strict=True)]
        self.emit(RoundStarted(cids=tuple(cids)))
        start = time.perf_counter()
        try:
            if recording is None:
                got = timer.round(runs, options, samples=options.round_samples)
            else:
                with recording() as rec:
                    walls = rec.round(runs, options, samples=options.round_samples)
                device = iter(rec.results())
                got = [w if isinstance(w, Exception) else next(device) for w in walls]
        finally:
            self.emit(RunFinished(cid=cids[0]))
            for cid in cids:  # a call's exception came back in ``got``
                self._raised.pop(cid, None)
        spent = time.perf_counter() - start
        limit_us = self.task.plan.timeout_s * 1e6
        out: dict[str, Timing | Failure] = {}
        for cid, config, timing in zip(cids, configs, got, strict=True):
            if isinstance(timing, Exception):
                out[cid] = Failure(config=config, stage="run", reason=reason(timing))
            elif spent > self.task.plan.timeout_s and sum(timing.samples_us) > limit_us:
                out[cid] = self._too_slow(config, "running", sum(timing.samples_us) / 1e6)
            else:
                out[cid] = timing
        return out

    def _interleaved(
        self, configs: Sequence[Config], second: Sequence[Config] = ()
    ) -> dict[str, Result]:
        """Times compiled ``configs`` in interleaved rounds (:func:`~.rounds.interleaved`),
        ``second`` on a second look."""
        with self.breakdown.timed("rounds"):
            return self._rounds(configs, second)

    def _rounds(self, configs: Sequence[Config], second: Sequence[Config]) -> dict[str, Result]:
        return interleaved(
            configs,
            timed=self._round,
            compile_s={cid: run[1] for cid, run in self._runs.items()},
            space=self.task.plan.configs,
            options=self.task.plan.options,
            default=self.task.plan.default,
            second=second,
        )


def _timed_on(got: Timing | Failure | None) -> bool:
    """Whether a config goes on to its next visit (it has not failed nor been dropped)."""
    return got is None or (isinstance(got, Timing) and not got.dropped)


def _given(outcome: Failure | None) -> Failure | None:
    return outcome


def _reraise(e: BaseException) -> Failure | None:
    raise e


class _OwnCodeError(Exception):
    """Carries a fault of the engine's own code out of JAX's tracing of a config's call
    (``fault``), so that it is not taken for the config's failure to lower."""

    def __init__(self, fault: Exception) -> None:
        super().__init__(str(fault))
        self.fault = fault


@contextlib.contextmanager
def _own_code() -> Iterator[None]:
    """Marks the engine's own code inside a config's traced call (see :class:`_OwnCodeError`)."""
    try:
        yield
    except Exception as e:
        raise _OwnCodeError(e) from e


def _blame_jaxtune(e: BaseException, cid: str) -> None:
    """Adds :data:`ENGINE_FAULT` to a fault of the engine's own code (once; an interrupt
    or exit is no fault and gets nothing)."""
    note = ENGINE_FAULT.format(config=cid)
    if isinstance(e, Exception) and note not in getattr(e, "__notes__", ()):
        e.add_note(note)


#: The most lowered configs XLA compiles at once by default, however many cores.
MAX_COMPILE_THREADS = 16


def compile_threads(children: int = 1) -> int:
    """How many lowered configs XLA compiles at once by default: the usable cores, shared
    among ``children`` sweep children compiling at once (one per device), less one each
    for the thread that runs configs; at least 1, at most :data:`MAX_COMPILE_THREADS`. A
    2-core machine gets 1, a 13-core TPU v5e host 12 (Tokamax's ragged_dot proposes 540
    configs: a cap of 4 left most of its cores idle).

    Tracing and lowering stay on one thread (Python work that holds the GIL), which feeds
    the compiling threads (XLA's compile lets go of the GIL): on a 2-core machine two
    threads that each traced and compiled made every compile and every run slower (JAX's
    flash attention, 9 configs: compile threads 188 s against 63 s, the sweep 1.38x
    slower). A compiling thread that the lowering thread cannot keep busy waits. Configs
    run their check while others compile, but none is timed until all compiled."""
    return max(1, min(MAX_COMPILE_THREADS, usable_cores() // max(1, children) - 1))


def _differentiable(leaf: Any) -> bool:
    return hasattr(leaf, "dtype") and jax.numpy.issubdtype(leaf.dtype, jax.numpy.inexact)


def _cotangent(out: Any) -> Any:
    """Ones for each floating output, float0 zeros for the others."""
    import numpy as np

    def one(o: Any) -> Any:
        if _differentiable(o):
            return jax.numpy.ones(o.shape, o.dtype)
        return np.zeros(np.shape(o), jax.dtypes.float0)

    return jax.tree_util.tree_map(one, out)


def with_backward(forward: Callable[[dict[str, Any]], Any]) -> Callable[[dict[str, Any]], Any]:
    """``forward`` and its backward pass: the outputs and the gradients of the floating
    array arguments for a cotangent of ones (the pass a differentiated program runs)."""

    def forward_backward(dyn: dict[str, Any]) -> Any:
        leaves, tree = jax.tree_util.tree_flatten(dyn)
        where = [i for i, leaf in enumerate(leaves) if _differentiable(leaf)]

        def of(diff: list[Any]) -> Any:
            full = list(leaves)
            for i, leaf in zip(where, diff, strict=True):
                full[i] = leaf
            return forward(jax.tree_util.tree_unflatten(tree, full))

        out, pullback = jax.vjp(of, [leaves[i] for i in where])
        return out, pullback(_cotangent(out))

    return forward_backward
