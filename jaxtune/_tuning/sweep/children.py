"""Parent side. A sweep's configs measured in child processes: the
:class:`~.drive.Measurer` that :class:`~.runner.ProcessRunner` hands :func:`~.drive.drive`.

Each batch is one request to a child (:func:`ask`), whose events it follows as it pulls
them from the :class:`~jaxtune._isolation.service.ChildService` (what is in flight, the
progress line, when the child is late); a child lost on the way blames the config in
flight, and the batch is asked again for the others. A sweep split over devices asks one
child per device for a share of each batch.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import enum
import threading
from collections.abc import Mapping, Sequence

from ..._core.errors import SweepError
from ..._core.vocabulary import Config, Failure, Measurement, config_id
from ..._isolation import context as _context
from ..._isolation.frames import Done, ErrorReply, Event, Request
from ..._isolation.prestart import hung_ahead
from ..._isolation.process import Deadline
from ..._isolation.service import ChildService, Crash, Lean, Waited
from .breakdown import Breakdown
from .compile import compile_threads
from .flight import GRACE, InFlight, raise_child_error
from .progress import Progress, progress_sink
from .requests import (
    Measure,
    Retime,
    SweepFields,
    best_of,
    read_answer,
    reference_config,
)
from .timers import device_time
from .work import Rounds, SweepPlan

__all__ = ["InChildren", "Lost", "ask"]

Result = Measurement | Failure


#: Why a child may hang importing a kernel's module.
_HUNG_IMPORT = (
    " A module whose import runs a program never ends there: a script re-run without "
    'its `if __name__ == "__main__":` block runs the rest of its top level; guard that '
    "too, or define the kernel in a module of its own."
)


class Lost(enum.Enum):
    """What a request that lost its child asks of the next try."""

    #: The config in flight was blamed (its failure kept): ask again for the others.
    RESTART = "restart"
    #: Several configs were in flight and none could be blamed: ask again one at a time.
    SERIAL = "serial"


def ask(
    service: ChildService,
    plan: SweepPlan,
    message: Request[SweepFields],
    *,
    progress: Progress | None,
    breakdown: Breakdown | None = None,
) -> tuple[Lost | None, dict[str, Result]]:
    """Sends one sweep request to ``service``'s child and follows its events until it is
    answered, the child crashes or it hangs; where the time went is added to
    ``breakdown``.

    Returns ``(None, results)`` when the request finished; on a crash or hang, the
    failures it could attribute, and :attr:`Lost.SERIAL` when it could not tell which of
    several configs compiling in parallel was at fault.
    """
    _not_hung_ahead(service, plan, message)
    flight = InFlight(message)
    shown = progress_sink(plan, progress) if progress is not None else None
    # From the send until the child first speaks, as long as a step may take (InFlight.due
    # with nothing in flight); each event then moves it.
    deadline = Deadline(plan.timeout_s + GRACE)
    answer: Done | ErrorReply | Crash | None = None
    task = message.fields.task_id
    # A child that built this task holds its arguments and plan: they need not travel again.
    lean = Lean(task=task, request=message.lean(message.fields.lean()))
    with contextlib.closing(service.exchange(message, deadline=deadline, lean=lean)) as said:
        for item in said:
            if isinstance(item, Waited):
                # The child's start, and a module import started ahead of need, which may
                # have hung meanwhile (the child is then replaced).
                if breakdown is not None:
                    breakdown.add("start", item.seconds)
                _not_hung_ahead(service, plan, message)
            elif isinstance(item, Event):
                flight.event(item)
                deadline.at = flight.due(plan.timeout_s)
                if shown is not None:
                    shown(item)
            else:
                answer = item
    assert answer is not None  # an exchange ends in its answer or raises
    if isinstance(answer, Crash):
        return _blame(plan, answer, flight, progress)
    _context.warn_notes(answer.notes)
    if isinstance(answer, ErrorReply):
        raise_child_error(answer, SweepError)
    answered = read_answer(answer)
    if breakdown is not None and answered.breakdown is not None:
        breakdown.merge(answered.breakdown)
    _context.warn_unapplied(plan.kernel, answer.unapplied)
    flight.got.update(answered.results)
    return None, flight.got


def _not_hung_ahead(service: ChildService, plan: SweepPlan, message: Request[SweepFields]) -> None:
    """Raises where the kernel's module, imported ahead of need in ``service``'s child,
    hung there past the time limit: a new child would import it again and wait as long.

    Raises:
        SweepError: it hung.
    """
    ref = message.ref
    limit = None if ref is None else hung_ahead(service, ref)
    # A kernel given a longer limit (timeout=) than the import had may still import.
    if ref is None or limit is None or limit < plan.timeout_s:
        return
    what = f"the script {ref.path}" if ref.module == "__main__" and ref.path else ref.module
    raise SweepError(
        f"the jaxtune child hung importing {what}, the module of {plan.kernel}, "
        f"when it was imported ahead of need (no answer within the {limit:g} s limit "
        "(JAXTUNE_TIMEOUT / timeout=); the child was killed), so this process does not "
        f"import it again.{_HUNG_IMPORT}"
    )


def _blame(
    plan: SweepPlan, crash: Crash, flight: InFlight, progress: Progress | None
) -> tuple[Lost, dict[str, Result]]:
    """The child crashed, hung or garbled its pipe: blame the config in flight if there is
    exactly one; :attr:`Lost.SERIAL` asks for one-at-a-time compilation to find the
    culprit."""
    how = crash.how(f"the {plan.timeout_s:g} s limit (JAXTUNE_TIMEOUT / timeout=)")
    suspects = flight.suspects(
        hung=crash.hung, timeout_s=plan.timeout_s, crashed_thread=crash.thread
    )
    if len(suspects) == 1:
        cid = suspects[0]
        failure = Failure(
            config=flight.by_id[cid],
            stage="timeout" if crash.hung else "crash",
            reason=f"{how}; stderr: {crash.stderr}",
        )
        flight.got[cid] = failure
        if progress is not None and cid in {config_id(c) for c in plan.configs}:
            progress.update(failure)
        return Lost.RESTART, flight.got
    if suspects:
        return Lost.SERIAL, flight.got
    hint = _HUNG_IMPORT if crash.hung else ""
    raise SweepError(
        f"the jaxtune child {'hung' if crash.hung else 'died'} outside any config of "
        f"{plan.kernel}, while importing its module, receiving its arguments or between "
        f"configs ({how}).{hint} stderr: {crash.stderr}"
    )


class InChildren:
    """A :class:`~.drive.Measurer` through ``service``'s children: its child, or one child
    per device of ``devices``, each measuring a share of each batch; where the sweep's time
    went is added to ``breakdown``."""

    def __init__(
        self,
        service: ChildService,
        plan: SweepPlan,
        request: Request[SweepFields],
        progress: Progress,
        *,
        devices: Sequence[int] = (),
        breakdown: Breakdown | None = None,
    ) -> None:
        self.service, self.plan, self.request, self.progress = service, plan, request, progress
        self.devices = list(devices)
        self.breakdown = breakdown

    @property
    def device_time(self) -> bool:
        # The platform the children come up on; not known (None): as the wall timer.
        return device_time(self.plan.timer, self.service.expected_platform())

    def measure(
        self, configs: list[Config], known: Mapping[str, Result], rounds: Rounds
    ) -> dict[str, Result]:
        if len(self.devices) > 1:  # rounds compare configs on one device only
            return self.on_devices(configs, known)
        return self.in_child(self.service, self.request, configs, known, rounds=rounds)

    def retime(self, leaders: list[Config], second: list[Config]) -> dict[str, Result]:
        # The leaders are re-timed together on one device, so they compare fairly: the
        # first device's child where the sweep was split, else the child that measured.
        # The configs on a second look are those that child compiled.
        devices = self.devices
        first = self.service.on_device(devices[0]) if len(devices) > 1 else self.service
        results: dict[str, Result] = {}
        serial = False
        for _ in range(len(leaders) + len(second) + 2):
            pending = [c for c in leaders if config_id(c) not in results]
            looked = [c for c in second if config_id(c) not in results]
            message = Retime(todo=pending, second=looked, serial=serial).of(self.request)
            crashed, got = ask(first, self.plan, message, progress=None, breakdown=self.breakdown)
            results.update(got)
            if crashed is None or len(pending) + len(looked) - len(got) < 2:
                break
            # A crash during a round of passes blames the round: time one config at
            # a time to find the culprit; a culprit found: the others go on.
            serial = serial or crashed is Lost.SERIAL
        return results

    def in_child(
        self,
        service: ChildService,
        request: Request[SweepFields],
        order: list[Config],
        known: Mapping[str, Result] | None = None,
        *,
        rounds: Rounds = Rounds.FIRST_PASS,
    ) -> dict[str, Result]:
        """``order`` measured in ``service``'s child, asked again after each crash for the
        configs it did not answer (one at a time, when it could not tell which crashed)."""
        plan = self.plan
        results: dict[str, Result] = {}
        serial = False
        for _ in range(2 * len(order) + 4):
            pending = [c for c in order if config_id(c) not in results]
            if not pending:
                return results
            seen = {**(known or {}), **results}
            message = Measure(
                todo=pending,
                reference=reference_config([*(known or {}).values(), *order], seen, plan.default),
                best_us=best_of(seen),
                serial=serial,
                rounds=rounds,
            ).of(request)
            crashed, got = ask(
                service, plan, message, progress=self.progress, breakdown=self.breakdown
            )
            results.update(got)
            if crashed is Lost.SERIAL:
                serial = True
        raise SweepError(
            f"the sweep of {plan.kernel} kept losing its child process; results so far: "
            f"{ {k: type(v).__name__ for k, v in results.items()} }"
        )

    def on_devices(
        self, order: list[Config], known: Mapping[str, Result] | None = None
    ) -> dict[str, Result]:
        """One child per device, each measuring its share of the configs at once; the
        default (the reference) is measured on the first device."""
        devices = self.devices
        shares: list[list[Config]] = [[order[0]]] + [[] for _ in devices[1:]]
        request = self.request
        fields = request.fields
        if fields.plan is not None and not fields.plan.compile_threads:
            # The children compile at once: the host's cores are shared among them.
            plan_here = dataclasses.replace(
                fields.plan, compile_threads=compile_threads(children=len(devices))
            )
            request = request.with_fields(request.op, dataclasses.replace(fields, plan=plan_here))
        for i, config in enumerate(order[1:]):
            shares[i % len(devices)].append(config)
        services = [self.service.on_device(d) for d in devices]
        stop = threading.Event()
        for service in services:
            service.stop = stop
        ex = concurrent.futures.ThreadPoolExecutor(len(devices))
        try:
            parts = list(
                ex.map(
                    lambda pair: self.in_child(pair[0], request, pair[1], known),
                    [(c, share) for c, share in zip(services, shares, strict=True) if share],
                )
            )
        except BaseException:  # Ctrl-C: the other devices' requests end too, at once
            stop.set()
            for held in [c.held for c in services if c.held is not None]:
                held.abandon()
            raise
        finally:
            ex.shutdown(wait=True)
        results: dict[str, Result] = {}
        for part in parts:
            results.update(part)
        return results
