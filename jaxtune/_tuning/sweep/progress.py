"""Parent side. Progress of a sweep on stderr: a live line on a terminal, lines at
``JAXTUNE_VERBOSE``.

Configs count as done when measured or failed; while many compile (a 540-config space
compiles for minutes before the first is timed), the configs compiled so far are shown
too: in the live line, and at ``JAXTUNE_VERBOSE=2`` in a line every
:data:`COMPILE_LINE_S` seconds.
"""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING, TextIO

from ..._core.vocabulary import Failure, Measurement, config_id, pass_text, ratio_texts
from ..._isolation.frames import CompileFinished, ConfigResult, Event, RoundTimed
from ..._render.configs import text as config_text
from .breakdown import breakdown_text

if TYPE_CHECKING:
    from .compile import EventSink
    from .stats import SweepOutcome
    from .work import SweepPlan

__all__ = ["COMPILE_LINE_S", "Progress", "progress_sink"]

#: At ``JAXTUNE_VERBOSE=2``, seconds between two lines about compiling (and the last).
COMPILE_LINE_S = 5.0


class Progress:
    """Live progress on stderr: a rewritten line on a terminal, lines at JAXTUNE_VERBOSE.

    ``total`` is what the budget allows; ``space`` (when larger) is the pruned space's size,
    shown as "3/64 of 256 configs, model search".
    """

    def __init__(
        self,
        label: str,
        total: int,
        verbose: int,
        stream: TextIO | None = None,
        *,
        space: int | None = None,
        strategy: str = "exhaustive",
        timing: str = "forward",
        rounds_s: float | None = None,
    ):
        self.label, self.total, self.verbose = label, total, verbose
        #: How long the rounds may go on (``max_rounds_s``): under the ``"thorough"``
        #: effort's, an undecided finish says that effort lets them go on longer.
        self.rounds_s = rounds_s
        self.timing = timing
        self.space = space if space is not None else total
        self.strategy = strategy
        self.stream = stream or sys.stderr
        self.live = verbose == 0 and getattr(self.stream, "isatty", lambda: False)()
        self.done = 0
        self.best: float | None = None
        self.start = time.perf_counter()
        #: Each config compiled so far: whether it failed to (counted once, however
        #: often a new child compiles it again).
        self.compiled: dict[str, bool] = {}
        self._compile_said = self.start
        #: When the last config finished compiling (``None`` until every one has), and how
        #: many configs were done by then (failures and early timings among them).
        self._compiled_at: float | None = None
        self._done_at_compiled = 0
        #: The last interleaved round timed and how many configs ran in it (``None``
        #: before the rounds), and when a line last said so (the first round's always does).
        self.round: tuple[int, int] | None = None
        self._round_said: float | None = None

    def eta(self) -> str:
        """``", ETA 12 s"`` from the mean time per config so far; once every config has
        compiled and one more is done, from the configs done since the compiles ended (the
        configs left need only their timing); ``""`` when done."""
        left = self.total - self.done
        # Once rounds run, they go on until a question is settled, however many configs
        # are done: no ETA (the configs timed at once come all at the rounds' end).
        if self.done == 0 or left <= 0 or self.round is not None:
            return ""
        since, done = self.start, self.done
        if self._compiled_at is not None and self.done > self._done_at_compiled:
            since, done = self._compiled_at, self.done - self._done_at_compiled
        seconds = (time.perf_counter() - since) / done * left
        return f", ETA {seconds:.0f} s" if seconds < 120 else f", ETA {seconds / 60:.1f} min"

    def _count(self) -> str:
        if self.space <= self.total:
            return f"{self.done}/{self.total}"
        return f"{self.done}/{self.total} of {self.space} configs, {self.strategy} search"

    def update(self, result: Measurement | Failure) -> None:
        self.done += 1
        if isinstance(result, Measurement) and not result.dropped:
            self.best = result.median_us if self.best is None else min(self.best, result.median_us)
        if self.verbose >= 2:
            if isinstance(result, Measurement):
                what = (
                    f"{result.median_us:.1f} us (min {result.min_us:.1f}, {result.samples} samples"
                )
                what += f", {result.why_out})" if result.dropped else ")"
            else:
                what = f"FAILED at {result.stage}: {result.reason}"
            print(
                f"jaxtune: {self.label} [{self._count()}{self.eta()}] "
                f"{config_text(result.config)}: {what}",
                file=self.stream,
                flush=True,
            )
        elif self.live:
            self._live_line()

    def compile_done(self, cid: str, *, failed: bool) -> None:
        """Counts config ``cid`` compiled (``failed``: it failed to lower or compile)."""
        if cid in self.compiled:
            return
        self.compiled[cid] = failed
        if self._compiled_at is None and len(self.compiled) >= self.total:
            self._compiled_at = time.perf_counter()
            self._done_at_compiled = self.done
        if self.live:
            self._live_line()
        elif self.verbose >= 2:
            now = time.perf_counter()
            if now - self._compile_said >= COMPILE_LINE_S or len(self.compiled) == self.total:
                self._compile_said = now
                print(
                    f"jaxtune: {self.label} {self._compiling()} in {now - self.start:.0f} s",
                    file=self.stream,
                    flush=True,
                )

    def round_timed(self, done: int, racing: int) -> None:
        """Round ``done`` of the interleaved rounds timed ``racing`` configs."""
        self.round = (done, racing)
        if self.live:
            self._live_line()
        elif self.verbose >= 2:
            now = time.perf_counter()
            if self._round_said is None or now - self._round_said >= COMPILE_LINE_S:
                self._round_said = now
                print(
                    f"jaxtune: {self.label} {self._rounds()} in {now - self.start:.0f} s",
                    file=self.stream,
                    flush=True,
                )

    def _rounds(self) -> str:
        """``round 12, 3 configs racing``."""
        assert self.round is not None
        done, racing = self.round
        return f"round {done}, {racing} config{'s' if racing > 1 else ''} racing"

    def _compiling(self) -> str:
        """``compiled 120/540 (3 failed)``."""
        failed = sum(self.compiled.values())
        return f"compiled {len(self.compiled)}/{self.total}" + (
            f" ({failed} failed)" if failed else ""
        )

    def _live_line(self) -> None:
        best = f", best {self.best:.1f} us" if self.best is not None else ""
        # Shown while configs compiled outnumber those done (the rest are compiling).
        compiling = f", {self._compiling()}" if len(self.compiled) > self.done else ""
        rounds = f", {self._rounds()}" if self.round is not None else ""
        line = (
            f"\rjaxtune: tuning {self.label} {self._count()}{compiling}{rounds}{best}"
            f"{self.eta()}   "
        )
        print(line, end="", file=self.stream, flush=True)

    def finish(self, outcome: SweepOutcome) -> None:
        if self.live:
            print("\r" + " " * 100 + "\r", end="", file=self.stream, flush=True)
        if self.verbose >= 1:
            best_us, default_us = outcome.times()  # the entry's figures
            speed = f", {default_us / best_us:.2f}x over default" if default_us else ""
            failed = sum(1 for m in outcome.measurements if isinstance(m, Failure))
            searched = (
                ""
                if self.space <= len(outcome.measurements)
                else (f" of {self.space} ({self.strategy} search)")
            )
            tie = _decided(outcome) + self._more_rounds(outcome)
            print(
                f"jaxtune: tuned {self.label} in {time.perf_counter() - self.start:.1f} s: "
                f"{len(outcome.measurements)} configs{searched} ({failed} failed), best "
                f"{config_text(outcome.best.config)} at {best_us:.1f} us "
                f"({pass_text(self.timing)}){speed}"
                f"{tie}",
                file=self.stream,
                flush=True,
            )
        if self.verbose >= 2 and outcome.phases:
            calls = "; ".join(
                f"{config_text(m.config)}: {m.calls} calls, compile {m.compile_s:.2f} s"
                for m in outcome.measurements
                if isinstance(m, Measurement)
            )
            print(
                f"jaxtune: {self.label} {breakdown_text(outcome.phases)}\n"
                f"jaxtune: {self.label} per config: {calls}",
                file=self.stream,
                flush=True,
            )

    def _more_rounds(self, outcome: SweepOutcome) -> str:
        """``; effort="thorough" lets the rounds go on for 20 s`` after an undecided race
        whose rounds could have gone on for less."""
        from ..options import EFFORTS

        longest = EFFORTS["thorough"]["max_rounds_s"]
        if outcome.decision != "undecided" or self.rounds_s is None or self.rounds_s >= longest:
            return ""
        return f'; effort="thorough" lets the rounds go on for {longest:g} s'


def _decided(outcome: SweepOutcome) -> str:
    """`` (a tie with X: 1.01x (0.99-1.02))`` and the like, from the outcome's margin."""
    m = outcome.margin
    if m is None or outcome.decision == "single":
        return ""
    span = ""
    if m.low is not None and m.high is not None:
        ratio, low, high = ratio_texts(m.ratio, m.low, m.high)
        span = f" ({low}-{high})"
    else:
        (ratio,) = ratio_texts(m.ratio)
    if outcome.decision == "clear":
        if m.low is None or m.low <= 1.0:
            return f" (clear: {config_text(m.rival)} not faster, {ratio}x)"
        return f" (clear: {ratio}x ahead of {config_text(m.rival)})"
    what = "a tie with" if outcome.decision == "tie" else "undecided vs"
    extra = "" if outcome.decision == "tie" else ", the rounds ran out"
    return f" ({what} {config_text(m.rival)}: {ratio}x{span}{extra})"


def progress_sink(plan: SweepPlan, progress: Progress) -> EventSink:
    """An event sink that advances ``progress`` for each config of the space: as it
    compiles, and as it is measured or fails."""
    in_space = {config_id(c) for c in plan.configs}

    def sink(event: Event) -> None:
        if event.cid not in in_space:
            return
        if isinstance(event, ConfigResult):
            progress.update(event.result)
        elif isinstance(event, CompileFinished):
            progress.compile_done(event.cid, failed=event.seconds is None)
        elif isinstance(event, RoundTimed):
            progress.round_timed(event.done, event.racing)

    return sink
