"""Timing compiled configs: one config's calls under a timer, a device timer's shared
captures, and one interleaved round (in passes over its configs where the timer can).

Each config is reported as running (``RunStarted``/``RunFinished``) while its calls run, and
a round of passes or a capture's end as a round of its configs (``RoundStarted``), so that
a crash or hang is blamed on what was in flight. What a config's call raises, or a step
over the time limit, is the config's failure; a fault of the timer around the calls is
jaxtune's, raised.
"""

from __future__ import annotations

import contextlib
import functools
import math
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from ..._core.vocabulary import Config, Failure, config_id
from ..._isolation.frames import RoundStarted, RunFinished, RunStarted
from .check import reason
from .compile import Compiler, EventSink, blame_jaxtune, too_slow
from .samples import Timing
from .timers import ProfilerTimer, Recording, RecordingTimer, RoundTimer, Timer

__all__ = ["CONFIGS_PER_CAPTURE", "ROUNDS_PER_CAPTURE", "Stopwatch"]


#: The most configs a device timer times inside one capture (:meth:`Stopwatch.captured`).
#: A capture costs about 1.2 s on a TPU v5e whatever it holds (flash attention, 16
#: configs: a first pass of one capture per config and visit took 19.9 s of a 40.9 s
#: sweep); a bound keeps a 540-config space's trace to a size that is quick to read and
#: a crash at a capture's end to a group small enough to pin one config at a time. Larger
#: captures did not pay: Tokamax's ragged_dot (329 configs that compiled) took a 58-63 s
#: first pass in captures of 128 against 36-37 s in captures of 32 (TPU v5e, 2026-12-05).
CONFIGS_PER_CAPTURE = 32

#: The most interleaved rounds a device timer times inside one capture
#: (:meth:`Stopwatch.ahead`).
ROUNDS_PER_CAPTURE = 8


class Stopwatch:
    """Times the configs ``compiler`` compiled with ``timer``."""

    def __init__(self, compiler: Compiler, timer: Timer, *, emit: EventSink) -> None:
        self.compiler = compiler
        self.timer = timer
        self.emit = emit
        #: Rounds time one config at a time, each reported as running, and a device timer
        #: captures one config at a time (to find which config crashed a child during a
        #: round of passes or at a shared capture's end); passes and shared captures
        #: otherwise.
        self.serial_rounds = False
        #: The last capture's own seconds (starting, stopping and reading the trace), and
        #: the last interleaved round's calls' seconds, which size :meth:`ahead`.
        self.capture_s: float | None = None
        self.round_s: float | None = None

    @property
    def limit_s(self) -> float:
        return self.compiler.task.plan.timeout_s

    def ahead(self) -> int:
        """How many interleaved rounds to time at once (:meth:`rounds`): one with a timer
        that does not record or whose samples are not device time; with a device timer,
        enough that a capture's own time is at most about its rounds' calls' time (one
        before a round was timed), up to :data:`ROUNDS_PER_CAPTURE` and half the time
        limit. A capture costs about 0.3 s on a TPU v5e whatever it holds, more than a
        round of a few fast configs takes."""
        timer = self.timer
        if not isinstance(timer, RecordingTimer) or not timer.device_time or self.serial_rounds:
            return 1
        if self.capture_s is None or self.round_s is None:
            return 1
        wanted = math.ceil(self.capture_s / max(self.round_s, 1e-4))
        # No capture near the time limit, which a hang is told by.
        bound = math.floor(self.limit_s / 2 / max(self.round_s, 1e-4))
        return max(1, min(ROUNDS_PER_CAPTURE, wanted, bound))

    @contextlib.contextmanager
    def _capture(self) -> Iterator[Recording]:
        """A recording of the device timer, its own time kept in :attr:`capture_s`."""
        timer = self.timer
        assert isinstance(timer, RecordingTimer)
        start = time.perf_counter()
        with timer.recording() as rec:
            began = time.perf_counter()
            yield rec
            ended = time.perf_counter()
        self.capture_s = began - start + time.perf_counter() - ended
        self.compiler.breakdown.add("captures", self.capture_s)
        self.compiler.breakdown.add("device", rec.device_s)
        self.compiler.breakdown.add("capture_stop", rec.stop_s)
        self.compiler.breakdown.add("capture_read", rec.read_s)

    def timed(
        self, config: Config, measure: Callable[[Callable[[], Any]], Timing]
    ) -> Timing | Failure:
        """``measure(run)`` of a compiled config, reported as running meanwhile (so that a
        crash or hang is blamed on it); an exception or a step over the time limit is the
        config's failure."""
        cid = config_id(config)
        run = self.compiler.run(cid)
        self.compiler.raised(cid)
        self.emit(RunStarted(cid=cid, thread=threading.get_ident()))
        start = time.perf_counter()
        try:
            timing = measure(run)
        except Exception as e:
            if self.compiler.raised(cid) is not e:  # the timer's own fault, not the call's
                blame_jaxtune(e, cid)
                raise
            return Failure(config=config, stage="run", reason=reason(e))
        finally:
            self.emit(RunFinished(cid=cid))
        spent = time.perf_counter() - start
        if spent > self.limit_s:
            return too_slow(config, "running", spent, self.limit_s)
        return timing

    def ready(self, programs: int) -> None:
        """Readies the device timer for the sweep's first capture, of ``programs``
        programs, once no config compiles any more, where it holds a whole capture's
        (:data:`CONFIGS_PER_CAPTURE`): on a TPU, the heap its stop would grow, far more
        slowly (:meth:`~.timers.ProfilerTimer.ready`), the seconds kept as the ``heap``
        phase. Not before a capture beside the compiles, whose page faults are slow with
        or without (Tokamax's ragged_dot on the lent TPU v5e: the first capture of 32
        programs stopped in 13.3 s with the heap grown beforehand, 20.8 s without), nor
        before a smaller one, whose stop grows the heap less (one config a capture after
        a crash: ``serial_rounds``)."""
        timer = self.timer
        if self.capture_s is not None or self.serial_rounds or programs < CONFIGS_PER_CAPTURE:
            return
        spent = isinstance(timer, ProfilerTimer) and timer.ready(CONFIGS_PER_CAPTURE)
        if spent:
            self.compiler.breakdown.add("heap", spent)

    def captured(
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
                with self._capture() as rec:
                    for config, cid in zip(chunk, cids, strict=True):
                        module = self.compiler.names.module(config)
                        at[cid] = len(rec.calls)
                        got[cid] = self.timed(config, functools.partial(measure, rec, module))
                    self.emit(RoundStarted(cids=cids))
            finally:
                self.emit(RunFinished(cid=cids[0]))
            device = rec.results()
            out.update(
                {cid: t if isinstance(t, Failure) else device[at[cid]] for cid, t in got.items()}
            )
        return out

    def round(self, configs: Sequence[Config]) -> dict[str, Timing | Failure]:
        """One interleaved round: each config's samples, in order (inside one trace for a
        timer that records, such as the profiler's: :meth:`captured`)."""
        return self.rounds([configs])[0]

    def rounds(self, rotations: Sequence[Sequence[Config]]) -> list[dict[str, Timing | Failure]]:
        """Interleaved rounds, one for each sequence of configs (in its order): each
        config's samples in each round. A device timer that times rounds in passes takes
        them all inside one capture (its cost shared: :meth:`ahead`)."""
        options = self.compiler.task.plan.options
        timer = self.timer
        recording = timer.recording if isinstance(timer, RecordingTimer) else None
        if (
            isinstance(timer, RoundTimer)
            and not self.serial_rounds
            and all(len(configs) > 1 for configs in rotations)
        ):
            return self._passes(rotations, timer, recording is not None)
        if recording is None:
            return [
                {
                    config_id(c): self.timed(
                        c, lambda run: timer.measure(run, options, samples=options.round_samples)
                    )
                    for c in configs
                }
                for configs in rotations
            ]
        return [
            self.captured(
                configs,
                lambda rec, module, run: rec.measure(
                    run, options, samples=options.round_samples, module=module
                ),
            )
            for configs in rotations
        ]

    def _passes(
        self, rotations: Sequence[Sequence[Config]], timer: RoundTimer, recording: bool
    ) -> list[dict[str, Timing | Failure]]:
        """Rounds timed in passes over their configs (the timer's ``round``): every config
        meets the same spells of machine noise; with ``recording``, all inside one capture.
        A crash or hang meanwhile is blamed on the rounds' configs together; the runner
        then asks for rounds one config at a time (``serial_rounds``) to find the culprit."""
        options = self.compiler.task.plan.options
        cids = list(dict.fromkeys(config_id(c) for configs in rotations for c in configs))
        runs = [
            [(self.compiler.run(config_id(c)), self.compiler.names.module(c)) for c in configs]
            for configs in rotations
        ]
        self.emit(RoundStarted(cids=tuple(cids)))
        start = time.perf_counter()
        try:
            if not recording:
                got = [timer.round(r, options, samples=options.round_samples) for r in runs]
            else:
                with self._capture() as rec:
                    began = time.perf_counter()
                    walls = [rec.round(r, options, samples=options.round_samples) for r in runs]
                    self.round_s = (time.perf_counter() - began) / len(rotations)
                device = iter(rec.results())
                got = [
                    [w if isinstance(w, Exception) else next(device) for w in ws] for ws in walls
                ]
        finally:
            self.emit(RunFinished(cid=cids[0]))
            for cid in cids:  # a call's exception came back in ``got``
                self.compiler.raised(cid)
        spent = time.perf_counter() - start
        limit_us = self.limit_s * 1e6
        out: list[dict[str, Timing | Failure]] = []
        for configs, timings in zip(rotations, got, strict=True):
            one: dict[str, Timing | Failure] = {}
            for config, timing in zip(configs, timings, strict=True):
                cid = config_id(config)
                if isinstance(timing, Exception):
                    one[cid] = Failure(config=config, stage="run", reason=reason(timing))
                elif spent > self.limit_s and sum(timing.samples_us) > limit_us:
                    seconds = sum(timing.samples_us) / 1e6
                    one[cid] = too_slow(config, "running", seconds, self.limit_s)
                else:
                    one[cid] = timing
            out.append(one)
        return out
