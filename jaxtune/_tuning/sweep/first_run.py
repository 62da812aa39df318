"""Kernel side. Each config's first run: as soon as a config has compiled (while the others
still compile, :mod:`.compile`), it runs once and its output is checked against the reference
config's (:func:`~.check.check_outputs`). A config that fails to lower, compile, run or match is
out before any timing; each failure is reported (a ``ConfigResult`` event) as soon as it is
known, so the progress shown meanwhile counts it."""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..._core.vocabulary import Config, Failure, config_id
from ..._isolation.frames import ConfigResult, RunFinished, RunStarted
from .check import check_outputs, reason
from .compile import Compiler, EventSink, too_slow
from .inputs import made_up_integers

__all__ = ["Early", "FirstRuns"]


#: Added to a check failure on made-up integer/boolean values: invalid ones (ids past a
#: table, group sizes summing past the rows) may fail the right config.
MADE_UP_NOTE = (
    " (the integer/boolean argument(s) {names} were synthesised, integers uniform in "
    "0..16: the failure may come from those made-up values, not from the config; give "
    "real values, docs/values.md)"
)


@dataclasses.dataclass(frozen=True, slots=True)
class Early:
    """Where :meth:`FirstRuns.check` hands configs that passed while others still compile:
    ``take`` gets all those waiting once at least ``size`` are, the last ``size`` of them
    having come off the compile queue at least ``pace_s`` apart on average (configs that
    come faster would soon be timed after the compiles anyway)."""

    take: Callable[[list[Config]], None]
    size: int
    pace_s: float


class FirstRuns:
    """Runs each compiled config of a batch once and checks its output; keeps how long
    each first call took (:attr:`first_s`, for choosing rounds over a first pass when the
    kernel is slow)."""

    def __init__(self, compiler: Compiler, *, emit: EventSink) -> None:
        self.compiler = compiler
        self.emit = emit
        #: Each config's first call, in seconds (the check's run).
        self.first_s: dict[str, float] = {}

    def check(
        self,
        configs: Sequence[Config],
        reference: Config | None,
        *,
        serial: bool,
        early: Early | None = None,
    ) -> dict[str, Failure | None]:
        """Compiles ``configs``, runs each once as soon as it compiled (while the others
        still compile) and checks its output against the reference: ``reference`` if it
        runs, else the first of ``configs`` that does. Returns each config's failure; each
        failure is reported as soon as known (a config that fails to lower or compile is
        out before any timing, and counts in the progress shown meanwhile). With
        ``early``, the configs that passed are handed to ``early.take`` while others are
        still to come, as :class:`Early` says (a device timer's first pass starts then:
        :mod:`.engine`)."""
        compiler, breakdown = self.compiler, self.compiler.breakdown
        ids = [config_id(c) for c in configs]
        by_id = dict(zip(ids, configs, strict=True))
        done = compiler.outcomes(configs, serial=serial)
        outcome: dict[str, Failure | None] = {}
        outputs: dict[str, Any] = {}
        candidates = list(ids)
        if reference is not None:
            ref_id = config_id(reference)
            candidates.insert(0, ref_id)
            if ref_id not in by_id:  # measured in an earlier batch: run it again here
                outcome[ref_id] = compiler.compile_one(reference)
                if outcome[ref_id] is None:
                    outcome[ref_id], out = self.run_once(reference)
                    if outcome[ref_id] is None:
                        outputs[ref_id] = out
        ref: list[Any] = []
        waiting: list[str] = []  # ran, not yet handed to ``early``
        came: dict[str, float] = {}  # when each config's compile outcome came
        for left in range(len(ids) - 1, -1, -1):
            with breakdown.timed("compile_wait"):
                cid, failure = done.get()
            came[cid] = time.perf_counter()
            if isinstance(failure, BaseException):  # the compile thread's fault, not the config's
                raise failure
            if failure is None:
                failure, out = self.run_once(by_id[cid])
                if failure is None:
                    outputs[cid] = out
            outcome[cid] = failure
            failed = {cid: failure} if failure is not None else {}
            failed |= self._compare(candidates, outcome, outputs, ref, by_id)
            for out_id, why in failed.items():
                if out_id in by_id:  # not a reference measured in an earlier batch
                    self.emit(ConfigResult(cid=out_id, result=why))
            if early is not None:
                waiting += [cid] if outcome[cid] is None else []
                passed = [c for c in waiting if c not in outputs and outcome[c] is None]
                if (
                    left
                    and len(passed) >= early.size
                    and came[cid] - came[passed[-early.size]] >= early.size * early.pace_s
                ):
                    early.take([by_id[c] for c in passed])
                    waiting = [c for c in waiting if c in outputs]
        return {cid: outcome[cid] for cid in ids}

    def run_once(self, config: Config) -> tuple[Failure | None, Any]:
        """Runs a compiled config once: its failure, or ``None`` and its output."""
        compiler = self.compiler
        cid = config_id(config)
        run = compiler.run(cid)
        compiler.inputs  # noqa: B018 - made here (inputs= is the user's), not inside the run
        self.emit(RunStarted(cid=cid, thread=threading.get_ident()))
        start = time.perf_counter()
        try:
            out = run()
        except Exception as e:  # only the config's call is inside
            compiler.raised(cid)
            return Failure(config=config, stage="run", reason=reason(e)), None
        finally:
            self.emit(RunFinished(cid=cid))
            compiler.breakdown.add("warmup", time.perf_counter() - start)
        spent = time.perf_counter() - start
        self.first_s[cid] = spent
        limit_s = compiler.task.plan.timeout_s
        if spent > limit_s:
            return too_slow(config, "running", spent, limit_s), None
        return None, out

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
        made_up = made_up_integers(self.compiler.task.plan.values)
        for cid in list(outputs):
            out = outputs.pop(cid)
            with self.compiler.breakdown.timed("check"):
                problem = check_outputs(out, ref[0], self.compiler.task.check)
            if problem is not None and made_up:
                problem += MADE_UP_NOTE.format(names=", ".join(made_up))
            if problem is not None:
                failed[cid] = Failure(config=dict(by_id[cid]), stage="check", reason=problem)
                outcome[cid] = failed[cid]
        return failed
