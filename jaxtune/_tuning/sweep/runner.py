"""Parent side. Where a sweep runs: in a re-exec'd child process (default) or in this process.

The child (a :class:`~jaxtune._isolation.service.ChildService`'s, answered there by
:mod:`jaxtune._tuning.sweep.serve`) starts with its environment (flags, ``JAX_PLATFORMS``, device visibility,
``PYTHONPATH`` from ``sys.path``) set before it imports JAX, in its own process group, and
talks over two pipes in msgpack frames. A config that kills the child (signal, abort,
``os._exit``, out of memory) or outlives ``JAXTUNE_TIMEOUT`` is recorded as failed with
the signal or exit status and the tail of the child's stderr (the service's
:class:`~jaxtune._isolation.service.Crash`, which kills the child's whole process group);
the next request starts a new child and goes on with the remaining configs.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import enum
import threading
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from ..._core import settings as _settings
from ..._core.errors import JaxtuneError, SweepError, warn_once
from ..._core.flags import normalise_platform
from ..._core.vocabulary import Config, Failure, Measurement, config_id
from ..._isolation import context as _context
from ..._isolation.devices import parent_backend, sweep_devices
from ..._isolation.environ import warn_tracing_inline
from ..._isolation.frames import (
    UNIMPORTABLE,
    ErrorReply,
    Event,
    Module,
    NotTransportable,
    Request,
)
from ..._isolation.service import ChildService, Crash, Lean
from . import compile_cache
from .breakdown import Breakdown
from .compile import compile_threads
from .drive import drive, new_progress, run_sweep
from .flight import InFlight, raise_child_error
from .progress import Progress, progress_sink
from .requests import (
    Measure,
    Retime,
    SweepFields,
    best_of,
    read_answer,
    reference_config,
    sweep_request,
)
from .stats import SweepOutcome
from .timers import device_time
from .work import Rounds, SweepPlan, SweepTask

__all__ = [
    "InChildren",
    "InlineRunner",
    "Lost",
    "ProcessRunner",
    "Runner",
    "ask",
    "default_runner",
    "prestart_child",
]

Result = Measurement | Failure

_TPU_HELD = (
    "this process already opened the TPU, and only one process can hold a TPU chip, so "
    "the sweep runs here without crash isolation. To tune with isolation, run your program "
    "under `jaxtune tune -- python your_script.py`, or set JAXTUNE_ISOLATION=inline to "
    "silence this message."
)


class Runner(Protocol):
    """Runs one sweep and returns its outcome (or raises ``TuningFailedError``)."""

    def sweep(self, task: SweepTask) -> SweepOutcome: ...


class InlineRunner:
    """Runs the sweep in this process, in a fresh thread.

    The thread matters: a sweep may start while JAX is tracing the caller under ``jax.jit``,
    and JAX's trace state is per thread, so work done in a new thread executes for real
    instead of being staged into the caller's trace; the caller's thread-local JAX
    configuration is carried over. There is no crash isolation, and a timeout is noticed
    only once the slow step returns.
    """

    def sweep(self, task: SweepTask) -> SweepOutcome:
        warn_tracing_inline()
        local_config = _context.capture()

        def work() -> SweepOutcome:
            with local_config(), compile_cache.for_inline_sweep():
                return run_sweep(task)

        with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="jaxtune-sweep") as ex:
            return ex.submit(work).result()


class Lost(enum.Enum):
    """What a request that lost its child asks of the next try."""

    #: The config in flight was blamed (its failure kept): ask again for the others.
    RESTART = "restart"
    #: Several configs were in flight and none could be blamed: ask again one at a time.
    SERIAL = "serial"


class ProcessRunner(ChildService):
    """Runs sweeps in a long-lived child process, restarting it after a crash or hang.

    The child is the :class:`~jaxtune._isolation.service.ChildService`'s for ``platform``,
    ``env``, ``memory_limit`` and ``device`` (see there; never with profiling flags);
    ``devices`` runs one child per listed device, each measuring a share of the configs at
    the same time (on CPU each "device" is simply another child process).
    """

    def __init__(
        self,
        *,
        platform: str | None = None,
        env: Mapping[str, str] | None = None,
        memory_limit: int | None = None,
        device: int | None = None,
        devices: Sequence[int] | None = None,
    ) -> None:
        super().__init__(platform=platform, env=env, memory_limit=memory_limit, device=device)
        self.devices = list(devices) if devices else None
        #: Where the time of the sweep under way goes (see :mod:`.breakdown`).
        self.breakdown: Breakdown | None = None

    def prestart(self, fn: Any = None) -> bool:
        """Starts this runner's pooled child ahead of need and imports ``fn``'s module
        there, and the module that answers sweeps (see :mod:`jaxtune._isolation.prestart`);
        returns whether a start was begun."""
        from ..._isolation.prestart import prestart
        from .requests import HANDLER

        return prestart(self, fn, handler=HANDLER)

    def preload(self, modules: Sequence[Module]) -> bool:
        """Imports ``modules`` in this runner's pooled child ahead of need, starting the
        child where it is not started (see :func:`jaxtune._isolation.prestart.preload`)."""
        from ..._isolation.prestart import preload

        return preload(self, modules)

    # -- a sweep -------------------------------------------------------------------------

    def sweep(self, task: SweepTask) -> SweepOutcome:
        kernel = task.plan.kernel
        if normalise_platform(parent_backend()) == "tpu" and self.expected_platform() == "tpu":
            warn_once(("tpu held", kernel), f"jaxtune: tuning {kernel}: {_TPU_HELD}", stacklevel=4)
            return InlineRunner().sweep(task)
        try:
            return self.run(task.plan, sweep_request(task))
        except NotTransportable as e:
            advice = (
                "Make the kernel's module importable on its own in a fresh Python process"
                if str(e).startswith(UNIMPORTABLE)
                else "Define the kernel at module level with plain array/static arguments"
            )
            warn_once(
                ("not transportable", kernel),
                f"jaxtune: {kernel} cannot be tuned in a child process: {e}. It is tuned "
                f"in this process instead, without crash isolation. {advice}, or set "
                "JAXTUNE_ISOLATION=inline to silence this warning.",
                stacklevel=4,
            )
            return InlineRunner().sweep(task)

    def run(self, plan: SweepPlan, request: Request[SweepFields]) -> SweepOutcome:
        """Runs the sweep ``plan`` describes through a prepared request (``jaxtune tune``
        reads both from a recording; :meth:`sweep` builds them from a task): the plan's
        search strategy picks the batches, the leaders are re-timed on one device."""
        progress = new_progress(plan)
        self.breakdown = Breakdown()
        try:
            measurer = InChildren(self, plan, request, progress)
            return drive(plan, measurer, progress=progress, breakdown=self.breakdown)
        finally:
            self.breakdown = None

    def on_device(self, device: int) -> ProcessRunner:
        """This runner for a child pinned to ``device`` (its share of a sweep split over
        devices), keeping the account of the sweep under way."""
        runner = ProcessRunner(
            platform=self.platform,
            env=self.extra_env,
            memory_limit=self.memory_limit,
            device=device,
        )
        runner.breakdown = self.breakdown
        return runner


def ask(
    runner: ProcessRunner,
    plan: SweepPlan,
    message: Request[SweepFields],
    *,
    progress: Progress | None,
) -> tuple[Lost | None, dict[str, Result]]:
    """Sends one sweep request to ``runner``'s child and follows its events until it is
    answered, the child crashes or it hangs.

    Returns ``(None, results)`` when the request finished; on a crash or hang, the
    failures it could attribute, and :attr:`Lost.SERIAL` when it could not tell which of
    several configs compiling in parallel was at fault.
    """
    flight = InFlight(message)
    shown = progress_sink(plan, progress) if progress is not None else None

    def on_event(event: Event) -> None:
        flight.event(event)
        if shown is not None:
            shown(event)

    def waited(seconds: float) -> None:
        # The child's start, and a module import started ahead of need.
        if runner.breakdown is not None:
            runner.breakdown.add("start", seconds)

    task = message.fields.task_id
    answer = runner.request(
        message,
        timeout=lambda: flight.wait(plan.timeout_s),
        on_event=on_event,
        # A child that built this task holds its arguments and plan: they need not travel again.
        lean=Lean(task=task, request=message.lean(message.fields.lean())),
        waited=waited,
    )
    if isinstance(answer, Crash):
        return _blame(plan, answer, flight, progress)
    _context.warn_notes(answer.notes)
    if isinstance(answer, ErrorReply):
        raise_child_error(answer, SweepError)
    answered = read_answer(answer)
    if runner.breakdown is not None and answered.breakdown is not None:
        runner.breakdown.merge(answered.breakdown)
    _context.warn_unapplied(plan.kernel, answer.unapplied)
    flight.got.update(answered.results)
    return None, flight.got


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
    raise SweepError(
        f"the jaxtune child {'hung' if crash.hung else 'died'} outside any config of "
        f"{plan.kernel}, while importing its module, receiving its arguments or between "
        f"configs ({how}); stderr: {crash.stderr}"
    )


class InChildren:
    """A :class:`~.drive.Measurer` through ``runner``'s children: its child, or one child
    per device of ``runner.devices``, each measuring a share of each batch."""

    def __init__(
        self,
        runner: ProcessRunner,
        plan: SweepPlan,
        request: Request[SweepFields],
        progress: Progress,
    ) -> None:
        self.runner, self.plan, self.request, self.progress = runner, plan, request, progress
        self.devices = list(runner.devices or [])

    @property
    def device_time(self) -> bool:
        # The platform the children come up on; not known (None): as the wall timer.
        return device_time(self.plan.timer, self.runner.expected_platform())

    def measure(
        self, configs: list[Config], known: Mapping[str, Result], rounds: Rounds
    ) -> dict[str, Result]:
        if len(self.devices) > 1:  # rounds compare configs on one device only
            return self.on_devices(configs, known)
        return self.in_child(self.runner, self.request, configs, known, rounds=rounds)

    def retime(self, leaders: list[Config], second: list[Config]) -> dict[str, Result]:
        # The leaders are re-timed together on one device, so they compare fairly: the
        # first device's child where the sweep was split, else the child that measured.
        # The configs on a second look are those that child compiled.
        devices = self.devices
        first = self.runner.on_device(devices[0]) if len(devices) > 1 else self.runner
        results: dict[str, Result] = {}
        serial = False
        for _ in range(len(leaders) + len(second) + 2):
            pending = [c for c in leaders if config_id(c) not in results]
            looked = [c for c in second if config_id(c) not in results]
            message = Retime(todo=pending, second=looked, serial=serial).of(self.request)
            crashed, got = ask(first, self.plan, message, progress=None)
            results.update(got)
            if crashed is None or len(pending) + len(looked) - len(got) < 2:
                break
            # A crash during a round of passes blames the round: time one config at
            # a time to find the culprit; a culprit found: the others go on.
            serial = serial or crashed is Lost.SERIAL
        return results

    def in_child(
        self,
        runner: ProcessRunner,
        request: Request[SweepFields],
        order: list[Config],
        known: Mapping[str, Result] | None = None,
        *,
        rounds: Rounds = Rounds.FIRST_PASS,
    ) -> dict[str, Result]:
        """``order`` measured in ``runner``'s child, asked again after each crash for the
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
            crashed, got = ask(runner, plan, message, progress=self.progress)
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
        runners = [self.runner.on_device(d) for d in devices]
        stop = threading.Event()
        for runner in runners:
            runner.stop = stop
        ex = concurrent.futures.ThreadPoolExecutor(len(devices))
        try:
            parts = list(
                ex.map(
                    lambda pair: self.in_child(pair[0], request, pair[1], known),
                    [(r, share) for r, share in zip(runners, shares, strict=True) if share],
                )
            )
        except BaseException:  # Ctrl-C: the other devices' requests end too, at once
            stop.set()
            for held in [r.held for r in runners if r.held is not None]:
                held.abandon()
            raise
        finally:
            ex.shutdown(wait=True)
        results: dict[str, Result] = {}
        for part in parts:
            results.update(part)
        return results


def default_runner() -> Runner:
    """The runner ``JAXTUNE_ISOLATION`` selects: ``process`` (default; one child per local
    GPU or CPU device when this process has several) or ``inline``."""
    from ..._core.settings import settings

    if settings().isolation == "inline":
        return InlineRunner()
    return ProcessRunner(devices=sweep_devices())


def prestart_child(fn: Any = None, *, sweeping: bool = False) -> None:
    """In ``tune``/``retune`` mode (or whatever the mode when ``sweeping``: the caller is
    about to sweep) with process isolation, starts the sweep child now (in the background)
    and imports ``fn``'s module there, so that the first sweep waits for neither; bad
    settings are left for the first call to report."""
    try:
        settings = _settings.settings()
    except JaxtuneError:
        return
    if (sweeping or settings.mode in ("tune", "retune")) and settings.isolation == "process":
        ProcessRunner().prestart(fn)
