"""A re-exec'd child Python process: start it, talk to it, kill it, pool it.

The child (``python -m jaxtune._isolation.child``) starts with a built environment, in its
own process group, with a request channel (a Unix socket pair) and a result pipe for
msgpack frames (typed in :mod:`.frames`), and a log file for its stdout and stderr.
:meth:`ChildProcess.exchange` is the one request/response path every caller uses: it sends
a request and yields each :class:`~.frames.Event` the child streams, then the answer
(:class:`~.frames.Done` or :class:`~.frames.ErrorReply`), or raises :class:`ChildLost` when
the child dies, stops answering (its :class:`Deadline`, which the caller owns, passed) or
writes what is no frame. The caller pulls: nothing here calls back into it.
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import os
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Generator, Iterator, Mapping, Sequence
from typing import Any

from .._core.codec import DecodeError
from .._core.errors import SweepError
from .channels import GO, close_all, request_channel, widen
from .environ import HOLD, pool_key
from .frames import Done, ErrorReply, Event, Exit, FrameError, Preload, Ready, Request, reply
from .framing import FrameReader, frame_parts
from .logs import keep_crash_log, log_dir, read_tail
from .state import ISOLATION_STATE
from .strays import TOKEN, kill_tagged, new_token

__all__ = [
    "POOL",
    "STARTUP_TIMEOUT",
    "ChildLost",
    "ChildPool",
    "ChildProcess",
    "Deadline",
    "shutdown_children",
]

#: Seconds a child may take to import JAX and start its backend.
STARTUP_TIMEOUT = 180.0
#: How often a wait for the child's answer checks that the child itself is still alive:
#: a process the kernel forked may hold the pipe open after the child died.
_POLL_S = 0.25
#: A send past the request's time limit is a hang only once the child has taken no bytes
#: for this long (a large request still arriving is not a hang).
_STALL_S = 1.0


class ChildLost(Exception):  # noqa: N818 - a signal between modules, never raised to users
    """The child died (``hung`` False) or gave no answer in time (``hung`` True)."""

    def __init__(self, hung: bool, garbled: str | None = None) -> None:
        super().__init__("no answer in time" if hung else "the child process died")
        self.hung = hung
        #: Why the child's result pipe held bytes that are no jaxtune frame (the child
        #: lives on, but nothing it says can be trusted: it is killed).
        self.garbled = garbled


@dataclasses.dataclass(slots=True)
class Deadline:
    """How long an exchange with a child waits for it, owned by the caller: until ``at``
    (a :func:`time.monotonic` time), which :meth:`ChildProcess.exchange` sets ``seconds``
    after it starts sending the request (``None``: no limit) and the caller may move
    between the items it takes (a sweep: as the events tell what is in flight). Read
    before each wait for the child."""

    seconds: float | None
    at: float | None = None

    def start(self) -> None:
        """Sets :attr:`at` ``seconds`` from now (a request is being sent)."""
        self.at = None if self.seconds is None else time.monotonic() + self.seconds

    def left(self) -> float | None:
        """Seconds until :attr:`at` (0 once past), or ``None``: no limit."""
        return None if self.at is None else max(0.0, self.at - time.monotonic())


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


class ChildProcess:
    """One started child: its pipes, its log file, and how it ended.

    A child that ends well (:meth:`close`) leaves no log; one that is killed (:meth:`kill`,
    after a crash or hang) leaves the end of its log as ``crash-*.log`` in :func:`log_dir`,
    of which only the newest :data:`.logs.KEEP_CRASH_LOGS` are kept.
    """

    #: Set when this process stops the child as it ends (see :func:`shutdown_children`):
    #: nothing went wrong in it, and it leaves no crash log.
    abandoned = False

    def __init__(
        self,
        env: Mapping[str, str],
        *,
        startup_timeout: float = STARTUP_TIMEOUT,
        hold: Sequence[str] | None = None,
    ):
        """Starts the child and waits for its ``ready`` frame; with ``hold`` (the handler
        modules it imports meanwhile) the child waits before it starts its backend, and
        :meth:`release` lets it go on."""
        self._trimmed = 0
        self._startup_timeout = startup_timeout
        #: Sweep tasks whose arguments this child holds (a request for one of them need
        #: not carry the arguments again).
        self.tasks: set[str] = set()
        #: Marks every process this child starts (:mod:`.strays`).
        self.token = new_token()
        fd, self.log_path = tempfile.mkstemp(
            dir=log_dir(), prefix=f"child-{os.getpid()}-", suffix=".log"
        )
        held = {} if hold is None else {HOLD: ",".join(hold)}
        cmd_r, cmd_w = request_channel()
        res_r, res_w = os.pipe()
        widen(res_w)
        try:
            with os.fdopen(fd, "wb") as log:
                self.proc = subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "jaxtune._isolation.child",
                        "--cmd-fd",
                        str(cmd_r),
                        "--res-fd",
                        str(res_w),
                    ],
                    pass_fds=(cmd_r, res_w),
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=log,
                    env={**env, TOKEN: self.token, **held},
                    start_new_session=True,
                )
        except BaseException:
            close_all(cmd_r, cmd_w, res_r, res_w)
            with contextlib.suppress(OSError):
                os.unlink(self.log_path)
            raise
        close_all(cmd_r, res_w)
        # Never blocks: :meth:`send` waits in ``select`` and keeps an eye on the child.
        os.set_blocking(cmd_w, False)
        self.cmd_fd = cmd_w
        self.reader = FrameReader(res_r)
        self.lock = threading.Lock()
        #: Set while the child waits on hold for :meth:`release`.
        self.on_hold = hold is not None
        if not self.on_hold:
            self._await_ready()

    def release(self) -> None:
        """Lets a child started on hold start its backend, and waits for it to be ready.

        Raises:
            SweepError: the child died while it waited, or did not start.
        """
        self.on_hold = False
        with contextlib.suppress(OSError):  # a dead child: reported as it not starting
            os.write(self.cmd_fd, GO)
        self._await_ready()

    def _await_ready(self) -> None:
        with _STARTING_LOCK:
            _STARTING.add(self)
        try:
            ready = reply(self.receive(timeout=self._startup_timeout))
        except (EOFError, FrameError, ChildLost):
            ready = None
        finally:
            with _STARTING_LOCK:
                _STARTING.discard(self)
        if not isinstance(ready, Ready):
            detail = ready.message if isinstance(ready, ErrorReply) else None
            self.kill()
            if self.abandoned:
                raise SweepError("the jaxtune child process was stopped while it started")
            raise SweepError(
                f"the jaxtune child process did not start ({detail or self.describe_exit()}); "
                f"its log ({self.log_path}): {self.stderr_tail(0)}"
            )
        self.ready: Ready = ready

    def send(
        self, message: Request[Any] | Preload | Exit, deadline: Deadline | None = None
    ) -> Iterator[Any]:
        """Writes ``message`` to the child a buffer-full at a time, yielding meanwhile each
        frame the child writes: a child that compiles while its arguments arrive reports
        which config it is at, and that report is what names the config when it dies
        before the last byte is sent.

        Raises:
            ChildLost: the child died or closed its end first (``hung`` False), or
                ``deadline`` passed with the child neither reading nor talking.
        """
        moved = time.monotonic()  # when the child last took bytes
        for part in frame_parts(message.to_wire()):
            data = part
            while data:
                limit = deadline.left() if deadline is not None else None
                if limit is not None and limit <= 0 and time.monotonic() - moved > _STALL_S:
                    raise ChildLost(hung=True)
                readable, writable, _ = select.select([self.reader.fd], [self.cmd_fd], [], _POLL_S)
                if writable:
                    try:
                        data = data[os.write(self.cmd_fd, data) :]
                    except BlockingIOError:
                        pass
                    except OSError as e:  # EPIPE, ECONNRESET: the child is gone
                        raise ChildLost(hung=False) from e
                    moved = time.monotonic()
                if readable:
                    yield from self._waiting()
                if not writable and not self.alive():
                    raise ChildLost(hung=False)

    def _waiting(self) -> Iterator[Any]:
        """Every whole frame already waiting on the result pipe."""
        try:
            while (frame := self._read(0)) is not None:
                yield frame
        except EOFError:
            pass  # the child is gone: the send finds out on its next write

    def receive(self, timeout: float | None = None) -> Any:
        """The child's next message; ``None`` when ``timeout`` seconds pass first.

        Raises:
            EOFError: the child is gone (even when a process it forked keeps the pipe open).
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            step = _POLL_S if deadline is None else min(_POLL_S, deadline - time.monotonic())
            message = self._read(max(0.0, step))
            if message is not None:
                return message
            if not self.alive():
                message = self.reader.read(timeout=0)  # a last frame written before it died
                if message is None:
                    raise EOFError("the child process ended")
                return message
            if deadline is not None and time.monotonic() >= deadline:
                return None

    def _read(self, timeout: float) -> Any:
        """The reader's next frame; bytes that are no frame from a live child (a kernel
        that wrote on the pipe) are :class:`ChildLost` with ``garbled`` set."""
        try:
            return self.reader.read(timeout=timeout)
        except DecodeError as e:
            raise ChildLost(hung=False, garbled=str(e) or type(e).__name__) from e
        except EOFError as e:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=1)  # a child that is exiting closes its pipe first
            if self.alive():
                raise ChildLost(hung=False, garbled=str(e)) from e
            raise

    def exchange(
        self, message: Request[Any] | Preload, deadline: Deadline
    ) -> Generator[Event | Done | ErrorReply, None, None]:
        """Sends ``message`` and yields each event the child streams, then its answer (the
        last item).

        ``deadline`` starts as the request is sent and is read before each wait; the caller
        may move it between items. It covers the send: a child that stops reading the
        request once the deadline has passed is hung. The caller holds :attr:`lock`. A
        caller that stops before the answer (Ctrl-C, a failing step of its own: this
        generator raised into or closed) kills the child at once, without a crash log: its
        answer would never be read, so it does not finish a config nobody waits for. A
        child already dead by then crashed of itself: its crash log is kept.

        Raises:
            ChildLost: the child died, closed its pipe, gave no answer in time, or wrote
                what is no frame of the protocol (``garbled``).
        """
        try:
            answer = yield from self._exchange(message, deadline)
        except ChildLost:
            raise
        except BaseException:  # GeneratorExit too: the caller stopped reading
            if self.alive():
                self.abandon()
            else:  # it died of itself before the caller stopped: a crash, whose log is kept
                self.kill()
            raise
        yield answer

    def _exchange(
        self, message: Request[Any] | Preload, deadline: Deadline
    ) -> Generator[Event, None, Done | ErrorReply]:
        answer: Done | ErrorReply | None = None
        deadline.start()
        try:
            for frame in self.send(message, deadline):
                got = _reply(frame)
                if isinstance(got, Event):
                    yield got
                elif answer is None:
                    answer = got
        except ChildLost as lost:
            if lost.hung or lost.garbled:
                raise
            # Died mid-send: the events it wrote before it died are still in the pipe.
            yield from self._written_before_death()
            raise
        while answer is None:
            try:
                frame = self.receive(timeout=deadline.left())
            except (EOFError, OSError) as e:
                raise ChildLost(hung=False) from e
            if frame is None:
                raise ChildLost(hung=True)
            got = _reply(frame)
            if isinstance(got, Event):
                yield got
            else:
                answer = got
        return answer

    def _written_before_death(self) -> Iterator[Event]:
        """The events still in the pipe of a child that died mid-send (none after bytes
        that are no frame)."""
        with contextlib.suppress(EOFError, OSError, ChildLost):
            while (frame := self.receive(timeout=0)) is not None:
                got = _reply(frame)
                if isinstance(got, Event):
                    yield got

    def alive(self) -> bool:
        return self.proc.poll() is None

    def _end(self) -> None:
        """Kills the child's whole process group (what its kernels forked too) and reaps it."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        kill_tagged(self.token)  # what left the group: a daemon started with setsid()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=30)
        close_all(self.cmd_fd, self.reader.fd)
        self.cmd_fd = self.reader.fd = -1

    def kill(self) -> None:
        """Kills the child (a crash or a hang) and keeps the end of its log as a crash log
        (none for a child this process stopped as it ended: :attr:`abandoned`)."""
        if self.abandoned:
            self.abandon()
            return
        if self.cmd_fd == -1:
            return
        self._end()
        with contextlib.suppress(OSError):
            self._keep_log()

    def abandon(self) -> None:
        """Kills the child without a crash log (nothing went wrong in it: the caller
        stopped waiting)."""
        if self.cmd_fd == -1:
            return
        self._end()
        with contextlib.suppress(OSError):
            os.unlink(self.log_path)

    def close(self) -> None:
        """Asks the child to exit, then makes sure it did, and deletes its log."""
        if self.cmd_fd == -1:
            return
        if self.alive():
            with contextlib.suppress(OSError, subprocess.TimeoutExpired):
                for _ in self.send(Exit()):
                    pass  # what the child still says as it is told to exit
                self.proc.wait(timeout=5)
        self._end()
        with contextlib.suppress(OSError):
            os.unlink(self.log_path)

    def _keep_log(self) -> None:
        self.log_path, self._trimmed = keep_crash_log(self.log_path, self.proc.pid)

    def describe_exit(self) -> str:
        """``"killed by signal SIGSEGV"``, ``"exited with status 3"``, or ``"still running"``."""
        try:
            code = self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            return "still running"
        if code < 0:
            return f"killed by signal {_signal_name(-code)}"
        return f"exited with status {code}"

    def log_size(self) -> int:
        try:
            return os.path.getsize(self.log_path) + self._trimmed
        except OSError:
            return 0

    def stderr_tail(self, since: int) -> str:
        """The last lines the child wrote to stderr since byte offset ``since`` (at most the
        last 64 KiB are read, however large the log)."""
        return read_tail(self.log_path, since, self._trimmed)


def _reply(frame: Any) -> Event | Done | ErrorReply:
    """The typed form of a frame that a child wrote during a request.

    Raises:
        ChildLost: it is no frame of the protocol, or a second ready frame (``garbled``).
    """
    try:
        got = reply(frame)
    except FrameError as e:
        raise ChildLost(hung=False, garbled=str(e)) from None
    if isinstance(got, Ready):
        raise ChildLost(hung=False, garbled="a second ready frame")
    return got


class ChildPool:
    """Long-lived children, one per environment (:func:`pool_key`), shared by every runner
    of this process."""

    def __init__(self) -> None:
        self._children: dict[tuple[Any, ...], ChildProcess] = {}
        #: Children started on hold (:meth:`hold`), not yet asked for.
        self._held: dict[tuple[Any, ...], ChildProcess] = {}
        self._lock = threading.Lock()

    def hold(
        self, env: Mapping[str, str], *, handlers: Sequence[str] = (), slot: int | None = None
    ) -> bool:
        """Starts the child for ``env`` (and ``slot``) on hold, where there is none yet: it
        imports JAX and ``handlers`` now and starts its backend only when :meth:`get`
        first asks for it (for a caller that holds no device itself, while the device may
        still be another process's). Returns whether a child was started."""
        key = (slot, *pool_key(env))
        with self._lock:
            child = self._children.get(key)
            if key in self._held or (child is not None and child.alive()):
                return False
            self._held[key] = ChildProcess(env, hold=handlers)
            return True

    def get(
        self,
        env: Mapping[str, str],
        check: Callable[[ChildProcess], None] | None = None,
        *,
        slot: int | None = None,
    ) -> ChildProcess:
        """The live child for ``env`` (and ``slot``: one child per device even where the
        environments are the same, as on CPU), started when there is none. ``check`` vets a
        new child before it joins the pool (it closes the child and raises to refuse it)."""
        key = (slot, *pool_key(env))
        with self._lock:
            child = self._children.get(key)
            if child is not None and child.alive():
                return child
            if child is not None:
                child.kill()
            child = self._released(key) or ChildProcess(env)
            if check is not None:
                check(child)
            self._children[key] = child
            return child

    def _released(self, key: tuple[Any, ...]) -> ChildProcess | None:
        """The child held for ``key``, now ready; ``None`` where there is none, or it died
        while on hold (a new child is then started, as if none had been held). One that
        does not start once released raises, as a new child would (its crash log kept);
        an interrupted release stops it."""
        held = self._held.pop(key, None)
        if held is None:
            return None
        if not held.alive():
            held.kill()
            return None
        try:
            held.release()
        except BaseException:
            held.abandon()  # nothing left to do where release already ended it
            raise
        return held

    def discard(self, child: ChildProcess) -> None:
        """Kills ``child`` and forgets it, so the next :meth:`get` starts a new one."""
        with self._lock:
            for key, value in list(self._children.items()):
                if value is child:
                    del self._children[key]
        child.kill()

    def children(self) -> list[ChildProcess]:
        """The pooled children (live or not)."""
        with self._lock:
            return list(self._children.values())

    def shutdown(self) -> None:
        """Stops every pooled child: an idle one is asked to exit; one busy with a request
        (work ahead of need, such as importing a kernel's module, or a sweep nobody will
        wait for any longer), or on hold, is stopped at once, without a crash log."""
        with self._lock:
            children = list(self._children.values())
            held = list(self._held.values())
            self._children.clear()
            self._held.clear()
        for child in held:  # waiting for a go it will not get: nothing to keep
            child.abandon()
        for child in children:
            if child.lock.acquire(blocking=False):
                try:
                    child.close()
                finally:
                    child.lock.release()
            else:
                child.abandoned = True  # its request's thread may see it die: no crash log
                child.abandon()


#: The pool every runner of this process draws its children from.
POOL = ChildPool()

_STARTING: set[ChildProcess] = ISOLATION_STATE.keep(
    "starting children",
    set,
    "children still waiting for their ``ready`` frame (a start ahead of need runs in a "
    "background thread, holding the pool's lock meanwhile)",
    never_reset="'children' stops them",
)
_STARTING_LOCK = threading.Lock()


@atexit.register
@ISOLATION_STATE.resets("children", "stops every pooled child and every child still starting")
def shutdown_children() -> None:
    """Stops every pooled child (also run at interpreter exit). A child still starting is
    killed at once, without a crash log: a program that ends right after decorating a
    kernel in tune mode does not wait for the child started for it."""
    with _STARTING_LOCK:
        starting = list(_STARTING)
    for child in starting:
        child.abandoned = True
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(child.proc.pid, signal.SIGKILL)
    POOL.shutdown()
