"""The child process: ``python -m jaxtune._isolation.child --cmd-fd N --res-fd M``.

Started by :mod:`jaxtune._isolation.process` with the environment its
:class:`~jaxtune._isolation.service.ChildService` built (flags, ``JAX_PLATFORMS``, device
visibility) set before JAX is imported. It answers a ``ready`` frame with what it actually
sees (:class:`~.frames.Ready`), then serves requests one at a time. A
:class:`~.frames.Request` names the module that answers it (``handler``, a module of
jaxtune whose ``handle(server, request)`` returns the :class:`~.frames.Done` answer): the
server applies the caller's variables and JAX state, then hands it over; the handler may
stream events (:meth:`Server.emit`) so the parent knows what was in flight if this process
dies. A :class:`~.frames.Preload` imports handlers and kernels' modules ahead of need. stdout and stderr go to a log file; frames travel only over the request socket and
the result pipe.

A child started on hold (:data:`HOLD` in its environment, by
:meth:`~.process.ChildPool.hold`) imports JAX and the handler modules the variable names,
then waits for one byte on the request socket before it starts its backend: started while
another process still holds the only chip, it opens the chip once told that process has
ended.
"""

from __future__ import annotations

import argparse
import dataclasses
import faulthandler
import importlib
import os
import signal
import sys
import threading
import time
import traceback
from typing import Any

from .._core import typed
from .._core.errors import describe
from .channels import GO
from .environ import HOLD
from .frames import (
    UNIMPORTABLE,
    Done,
    ErrorKind,
    ErrorReply,
    Event,
    Exit,
    Preload,
    Preloaded,
    Ready,
    Request,
    request,
)
from .resolve import NOTES, Unresolved, preload
from .state import ISOLATION_STATE
from .strays import TOKEN, kill_tagged

__all__ = ["Server", "main"]


def _end_if_orphaned(parent_pid: int, *, gone: bool = False) -> None:
    """Once the parent has died (or, with ``gone``, is known to be dying: the kernel
    closes a dying process's pipes before it hands its children to another parent): deletes
    this child's log (the dead parent would have), ends every process its kernels started
    (its process group, and what left it) and this process. Returns where the parent is
    alive."""
    if not gone and os.getppid() == parent_pid:
        return
    try:
        log = os.readlink("/proc/self/fd/2")
        if os.path.basename(log).startswith("child-"):
            os.unlink(log)
    except OSError:
        pass
    token = os.environ.get(TOKEN)
    if token:
        kill_tagged(token)  # what left this group (a setsid daemon)
    os.killpg(os.getpgid(0), signal.SIGKILL)
    os._exit(0)


def _watch_parent(parent_pid: int) -> None:
    """Ends this process and every process its kernels forked soon after the parent dies,
    even in the middle of a compile (:func:`_end_if_orphaned`, every half second)."""

    def watch() -> None:
        while True:
            _end_if_orphaned(parent_pid)
            time.sleep(0.5)

    threading.Thread(target=watch, name="jaxtune-parent-watch", daemon=True).start()


def _limit_memory() -> None:
    limit = os.environ.get("JAXTUNE_CHILD_MEMORY_LIMIT")
    if limit:
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (int(limit), int(limit)))


def _handler(name: Any) -> Any:
    """The module that answers a request (imported on first use)."""
    if not isinstance(name, str) or not name.startswith("jaxtune."):
        raise RuntimeError(f"the request names no jaxtune handler module ({name!r})")
    return importlib.import_module(name)


class Server:
    """Answers the parent's requests, one at a time. Handlers keep what must outlive one
    request in :attr:`state` (the sweep handler keeps its sweeper there, so a ``retime``
    reuses the executables its ``measure`` compiled)."""

    def __init__(self, res_fd: int, reader: Any = None) -> None:
        self.res_fd = res_fd
        #: The request pipe's reader: the arrays of a request may still be arriving.
        self.reader = reader
        #: Per handler module, what it keeps between requests.
        self.state: dict[str, Any] = {}
        #: Caller state the last request carried that could not be set here.
        self.unapplied: dict[str, str] = {}
        #: Seconds the request under way spent importing its handler module (its first
        #: use in this process; a preload ahead of need spares it).
        self.handler_s = 0.0

    def emit(self, event: Event) -> None:
        """Streams ``event`` to the parent."""
        from .framing import write_frame

        write_frame(self.res_fd, event.to_wire())

    def arrived(self) -> None:
        """Waits until the whole request (its arrays) has been read."""
        if self.reader is not None:
            self.reader.finish()

    @property
    def pending(self) -> bool:
        """Whether the request's arrays are still arriving."""
        return bool(self.reader is not None and self.reader.pending)

    def answer(self, msg: Request[Any] | Preload) -> Done | ErrorReply:
        """The answer to ``msg``: :class:`~.frames.Done`, or an
        :class:`~.frames.ErrorReply` (with the notes gathered meanwhile)."""
        from .._core.errors import JaxtuneError

        self.unapplied = {}
        answer: Done | ErrorReply
        try:
            answer = self._handle(msg)
        except JaxtuneError as e:
            answer = ErrorReply.of(e)
        except Unresolved as e:
            # The parent tunes or profiles in its own process instead. Any other error
            # (a KeyError of the engine or of the user's inputs=) is no reason to: it is
            # reported below, with its traceback.
            message = f"{UNIMPORTABLE} ({e})"
            answer = ErrorReply(kind=ErrorKind.NOT_TRANSPORTABLE, message=message)
        except Exception as e:
            message = f"{describe(e)}\n{traceback.format_exc(limit=8)}"
            answer = ErrorReply(kind=ErrorKind.INTERNAL, message=message)
        notes, NOTES[:] = tuple(NOTES), []
        return dataclasses.replace(answer, notes=notes, unapplied=dict(self.unapplied))

    def _handle(self, msg: Request[Any] | Preload) -> Done | ErrorReply:
        from .context import apply_snapshot
        from .environ import sync_environ

        if isinstance(msg, Preload):
            for name in msg.handlers:
                _handler(name)
            return Done(body=typed.encode(Preloaded(imported=tuple(preload(msg.modules)))))
        start = time.perf_counter()
        handler = _handler(msg.handler)
        self.handler_s = time.perf_counter() - start
        # Before anything is imported or traced: the caller's variables (those that do not
        # key the pool of children), interpret mode, x64, precision...
        sync_environ(msg.environ)
        self.unapplied = apply_snapshot(msg.jax_state)
        answer: Done | ErrorReply = handler.handle(self, msg)
        return answer


#: What :func:`_serve` returns when the parent closed its end without asking the child to
#: exit (it died, or is dying).
_EOF = 4


def _serve(cmd_fd: int, res_fd: int) -> int:
    from .framing import FrameReader, write_frame

    reader = FrameReader(cmd_fd)
    server = Server(res_fd, reader)
    while True:
        try:
            msg = request(reader.read(defer=True))
            if isinstance(msg, Exit):
                return 0
            answer = server.answer(msg)
            reader.finish()  # whatever the answer, the whole request is read
        except EOFError:
            return _EOF
        write_frame(res_fd, answer.to_wire())
        if isinstance(msg, Preload) and reader.idle(wait=_WARM_UP_AFTER_S):
            _warm_up_pallas()


#: The variables the ready frame reports, as the child sees them.
_REPORTED_ENV = (
    "XLA_FLAGS",
    "LIBTPU_INIT_ARGS",
    "JAX_PLATFORMS",
    "CUDA_VISIBLE_DEVICES",
    "TPU_VISIBLE_CHIPS",
    "XLA_PYTHON_CLIENT_PREALLOCATE",
)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the child process."""
    parser = argparse.ArgumentParser(prog="python -m jaxtune._isolation.child")
    parser.add_argument("--cmd-fd", type=int, required=True)
    parser.add_argument("--res-fd", type=int, required=True)
    args = parser.parse_args(argv)
    faulthandler.enable()  # a crashing config leaves its Python stack in the log
    parent = os.environ.get("JAXTUNE_PARENT_PID")
    if parent:
        _watch_parent(int(parent))
    _limit_memory()

    import jax

    from .._core.versions import toolchain
    from .framing import write_frame

    held = os.environ.pop(HOLD, None)
    if held is not None and not _hold(args.cmd_fd, held):
        if parent:  # the parent died (or stopped this child): as a serving child would end
            _end_if_orphaned(int(parent), gone=True)
        return _EOF
    try:
        devices = jax.devices()
        ready = Ready(
            pid=os.getpid(),
            platform=devices[0].platform,
            device_kind=devices[0].device_kind,
            device_count=len(devices),
            versions=toolchain(),
            env={k: os.environ.get(k) for k in _REPORTED_ENV},
        )
    except Exception as e:
        failed = ErrorReply(
            kind=ErrorKind.INTERNAL, message=f"the child's backend did not start: {e}"
        )
        write_frame(args.res_fd, failed.to_wire())
        return 3
    write_frame(args.res_fd, ready.to_wire())
    _warm_up()
    ended = 0
    try:
        ended = _serve(args.cmd_fd, args.res_fd)
        return ended
    except BrokenPipeError:
        ended = _EOF
        raise
    finally:
        # The parent's death also ends the loop (its pipes close, or a write to it fails)
        # and may do so before the watcher's next look: what the kernels forked must not
        # outlive this process. An exit the parent asked for leaves that to it, and a
        # fault of the child's own still ends with its traceback while the parent lives.
        if parent:
            _end_if_orphaned(int(parent), gone=ended == _EOF)


def _hold(cmd_fd: int, handlers: str) -> bool:
    """Imports what needs no backend (JAX's numpy, the handler modules named in
    ``handlers``), then waits for the parent's go: one byte on the request socket. Returns
    ``False`` where the parent closed it instead (it needs this child no longer)."""
    try:
        import jax.numpy  # noqa: F401 - imported ahead, as _warm_up would

        for name in filter(None, handlers.split(",")):
            _handler(name)
    except Exception:  # the request that needs the module reports it
        pass
    return os.read(cmd_fd, 1) == GO


def _warm_up() -> None:
    """Pays, before the first request arrives, what the first request of a process would
    otherwise pay: importing JAX's numpy, the first transfer of a host array, and XLA's first
    ahead-of-time compile and run (a child started ahead of need imports the handler
    module of its flow next, through ``preload``)."""
    try:
        import jax
        import jax.numpy
        import numpy as np

        x = jax.device_put(np.ones(64, np.float32))
        step = jax.jit(lambda x: (x * 2).reshape(4, -1).sum(axis=1)).lower(x).compile()
        jax.block_until_ready(step(x))
    except Exception:  # a backend that cannot run this reports on the first real request
        pass


_PALLAS_WARM: list[bool] = ISOLATION_STATE.keep(
    "pallas warm", list, "whether this child warmed Pallas up (once)"
)


#: How long a child that imported a module ahead of need waits for a request before it
#: warms Pallas up: a sweep that waited for that import sends its request at once, and a
#: warm-up begun meanwhile would hold it up (0.3 s on pallas-forge's swiglu). A child
#: started ahead of need usually waits seconds for the program's first call.
_WARM_UP_AFTER_S = 1.0


def _warm_up_pallas() -> None:
    """Pays, once, while the child waits for its first sweep, the imports JAX makes the
    first time it lowers a Pallas kernel in interpret mode (0.25-0.45 s on the 2-core machine;
    a sweep's first config paid them otherwise). Only for a CPU child, where interpret mode
    is how Pallas runs, and only once a kernel's module imported Pallas."""
    if _PALLAS_WARM or "jax.experimental.pallas" not in sys.modules:
        return
    _PALLAS_WARM.append(True)
    try:
        import jax
        import jax.numpy as jnp
        from jax.experimental import pallas as pl

        if jax.default_backend() != "cpu":
            return

        def copy(x_ref: Any, o_ref: Any) -> None:
            o_ref[...] = x_ref[...]

        x = jax.ShapeDtypeStruct((8, 128), jnp.float32)
        jax.jit(pl.pallas_call(copy, out_shape=x, interpret=True)).lower(x)
    except Exception:  # nothing lost: the first sweep pays the imports, as it would have
        pass


if __name__ == "__main__":
    sys.exit(main())
