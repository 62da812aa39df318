"""The child-process service: which child serves a caller, with what environment, and how
one request travels to it and back.

A :class:`ChildService` knows no flow. A flow (tuning, profiling) builds its request frames,
names the module whose ``handle(server, msg)`` answers them in the child (``handler``), and
reads the answer; the service starts the pooled child with the environment the caller
needs (flags, ``JAX_PLATFORMS``, device visibility, ``PYTHONPATH``), set before the child
imports JAX, checks that it came up on the expected platform, and carries the caller's JAX
state and variables with each request. :meth:`ChildService.exchange` is the one place a
flow talks to its child: the flow pulls from it what the child says (its events), then the
answer, or the :class:`Crash` the child's loss reads as (how it was lost, the end of what
it wrote meanwhile), the child gone from the pool; how long it waits is the flow's
:class:`~.process.Deadline`. Nothing here calls back into the flow.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import threading
import time
from collections.abc import Generator, Mapping
from typing import Any

from .._core.errors import SweepError
from .._core.flags import child_env, normalise_platform, requested_platform
from .._core.vocabulary import ProfileOptions
from .devices import parent_backend
from .environ import flag_base, python_path, strip_tracing, sweep_premapped
from .frames import Done, ErrorKind, ErrorReply, Event, Ready, Request
from .logs import crashed_thread
from .process import POOL, ChildLost, ChildProcess, Deadline

__all__ = ["ChildService", "Crash", "Lean", "Waited"]


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Crash:
    """A child lost during one request, read into a report: it died (``status``: its signal
    or exit status), gave no answer in time (``hung``) or wrote what is no frame on its
    result pipe (``garbled``: why not); ``stderr``, the end of what it wrote during the
    request, secrets masked. The child is killed and out of the pool."""

    hung: bool
    garbled: str | None = None
    status: str = ""
    stderr: str = ""

    @classmethod
    def read(cls, child: ChildProcess, lost: ChildLost, offset: int) -> Crash:
        """The crash ``lost`` reports of ``child`` (its log read from byte ``offset``);
        kills the child and drops it from the pool."""
        # Its exit status only where it died: a hung or garbling child lives until killed.
        status = "" if lost.hung or lost.garbled else child.describe_exit()
        POOL.discard(child)
        return cls(
            hung=lost.hung, garbled=lost.garbled, status=status, stderr=child.stderr_tail(offset)
        )

    @property
    def thread(self) -> int | None:
        """The child's thread that crashed, from its fatal-error report (``None``: none)."""
        return crashed_thread(self.stderr)

    def how(self, limit: str) -> str:
        """How the child was lost, for a failure's reason or an error: it garbled its result
        pipe, gave no answer within ``limit`` (the caller's words for its time limit), or
        died (its signal or exit status)."""
        if self.garbled:
            return (
                "the child process wrote bytes that are no jaxtune frame on its result pipe "
                f"({self.garbled}); it was killed"
            )
        if self.hung:
            return f"no answer within {limit}; the child was killed"
        return f"the child process {self.status}"


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Lean:
    """The request to send instead, to a child that already holds ``task`` (its function
    and arguments, sent with an earlier request: :meth:`~.frames.Request.lean`)."""

    task: str
    request: Request[Any]


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Waited:
    """The seconds until the child was a request's (its start, a module imported ahead of
    need): the first item of each try of :meth:`ChildService.exchange`, just before the
    request is sent."""

    seconds: float


class ChildService:
    """Where requests run: a long-lived pooled child for an environment.

    ``platform`` defaults to the backend this process uses (or ``JAX_PLATFORMS``);
    ``env`` adds variables (extra ``XLA_FLAGS`` merge with the user's); ``memory_limit``
    caps the child's address space in bytes. ``device`` pins the child to one accelerator
    (``CUDA_VISIBLE_DEVICES`` on GPU; ``TPU_VISIBLE_CHIPS`` and the process-bounds variables
    on TPU). ``profiling`` starts it with the profiling flags of those options (``llo``,
    ``custom_call_tracing``); without it, trace points are stripped from the flags.
    """

    def __init__(
        self,
        *,
        platform: str | None = None,
        env: Mapping[str, str] | None = None,
        memory_limit: int | None = None,
        device: int | None = None,
        profiling: ProfileOptions | None = None,
    ) -> None:
        self.profiling = profiling
        self.platform = platform
        self.extra_env = dict(env or {})
        self.memory_limit = memory_limit
        self.device = device
        #: The ready message of the last child this service used (platform, device kind...).
        self.ready: Ready | None = None
        #: The child this service last talked to, and a flag that stops its work (set when
        #: another device's share was interrupted).
        self.held: ChildProcess | None = None
        self.stop = threading.Event()

    def expected_platform(self) -> str | None:
        """The platform the child must come up on: ``platform=``, else this process's
        backend, else what ``JAX_PLATFORMS`` asks for (``None``: whatever JAX picks)."""
        return (
            normalise_platform(self.platform)
            or normalise_platform(parent_backend())
            or requested_platform()
        )

    def environment(self) -> dict[str, str]:
        """The child's environment."""
        platform = self.expected_platform()
        extra = dict(self.extra_env)
        xla = extra.pop("XLA_FLAGS", "")
        libtpu = extra.pop("LIBTPU_INIT_ARGS", "")
        env = child_env(
            platform or "cpu",
            base=flag_base(platform),
            xla_flags=xla.split(),
            libtpu_args=libtpu.split(),
            profiling=self.profiling is not None,
            llo=self.profiling is None or self.profiling.llo,
            custom_call_tracing=self.profiling is not None and self.profiling.custom_call_tracing,
            check_binary=self.profiling is not None,
        )
        if platform is None:
            env.pop("JAX_PLATFORMS", None)
            if "JAX_PLATFORMS" in os.environ:
                env["JAX_PLATFORMS"] = os.environ["JAX_PLATFORMS"]
        env.update(extra)
        if self.profiling is None:  # a sweep: trace points would change what it times
            strip_tracing(env)
            if platform in (None, "tpu"):  # a sweep moves little between host and chip
                sweep_premapped(env)
        env["PYTHONPATH"] = python_path()
        env["JAXTUNE_ISOLATION"] = "inline"
        env["JAXTUNE_PARENT_PID"] = str(os.getpid())
        if self.memory_limit:
            env["JAXTUNE_CHILD_MEMORY_LIMIT"] = str(int(self.memory_limit))
        if self.device is not None and platform == "gpu":
            env["CUDA_VISIBLE_DEVICES"] = str(self.device)
        if self.device is not None and platform == "tpu":
            env["TPU_VISIBLE_CHIPS"] = str(self.device)
            env["TPU_PROCESS_BOUNDS"] = "1,1,1"
            env["TPU_CHIPS_PER_PROCESS_BOUNDS"] = "1,1,1"
        return env

    def child(self) -> ChildProcess:
        """The pooled child for this service's environment (started when needed).

        Raises:
            SweepError: the child came up on another platform than expected, or the work
                was interrupted (:attr:`stop`).
        """
        expected = self.expected_platform()

        def check(child: ChildProcess) -> None:
            got = normalise_platform(child.ready.platform)
            if expected and got != expected:
                child.close()
                raise SweepError(
                    f"the jaxtune child came up on {got!r}, expected {expected!r} like this "
                    "process; check JAX_PLATFORMS and the accelerator's visibility variables."
                )

        if self.stop.is_set():
            raise SweepError("the sweep was interrupted")
        child = POOL.get(self.environment(), check, slot=self.device)
        self.ready = child.ready
        self.held = child
        return child

    def exchange(
        self, message: Request[Any], *, deadline: Deadline, lean: Lean | None = None
    ) -> Generator[Waited | Event | Done | ErrorReply | Crash, None, None]:
        """Sends ``message`` to this service's child and yields what it says: a
        :class:`Waited` before each try, each event, and last its answer, or the
        :class:`Crash` its child's loss reads as (the child is then gone from the pool).

        ``deadline`` (started as the request is sent, see
        :meth:`~.process.ChildProcess.exchange`) is read before each wait; the caller may
        move it between items. With ``lean``, a child that holds its task is sent the lean
        request (and one that answers that it no longer does, the whole ``message``
        again); a child that answers holds the task from then on. The child's lock is held
        from each :class:`Waited` to the answer; a caller that stops reading mid-request
        (this generator closed) stops the child at once, so close it where you may stop
        early (:func:`contextlib.closing`).

        Raises:
            SweepError: the child came up on another platform than expected, or the work
                was interrupted (:attr:`stop`).
        """
        while True:
            start = time.perf_counter()
            child = self.child()
            with child.lock:
                yield Waited(seconds=time.perf_counter() - start)
                if not child.alive():  # replaced while this waited (a module import that hung)
                    continue
                held = lean is not None and lean.task in child.tasks
                offset = child.log_size()
                sent = lean.request if lean is not None and held else message
                answer: Done | ErrorReply | Crash | None = None
                try:
                    with contextlib.closing(child.exchange(sent, deadline)) as said:
                        for item in said:
                            if isinstance(item, Event):
                                yield item
                            else:
                                answer = item
                except ChildLost as lost:
                    answer = Crash.read(child, lost, offset)
            assert answer is not None  # an exchange ends in its answer or raises
            unknown = isinstance(answer, ErrorReply) and answer.kind is ErrorKind.UNKNOWN_TASK
            if lean is not None and unknown:
                child.tasks.discard(lean.task)  # it moved on to another task: send it whole
                continue
            if lean is not None and isinstance(answer, Done):
                child.tasks.add(lean.task)
            yield answer
            return

    def answer(self, message: Request[Any], *, deadline: Deadline) -> Done | ErrorReply | Crash:
        """The answer to ``message`` (:meth:`exchange`) for a flow whose child streams no
        events (a capture)."""
        answer: Done | ErrorReply | Crash | None = None
        with contextlib.closing(self.exchange(message, deadline=deadline)) as said:
            for item in said:
                if isinstance(item, Done | ErrorReply | Crash):
                    answer = item
        assert answer is not None  # an exchange ends in its answer or raises
        return answer

    def on_device(self, device: int) -> ChildService:
        """This service for a child pinned to ``device`` (its share of work split over
        devices)."""
        return ChildService(
            platform=self.platform,
            env=self.extra_env,
            memory_limit=self.memory_limit,
            device=device,
            profiling=self.profiling,
        )

    def on_platform(self, platform: str) -> ChildService:
        """This service for a child on ``platform`` (its pool key is that of a service that
        finds ``platform`` in this process once JAX has started it)."""
        return ChildService(
            platform=platform,
            env=self.extra_env,
            memory_limit=self.memory_limit,
            device=self.device,
            profiling=self.profiling,
        )
