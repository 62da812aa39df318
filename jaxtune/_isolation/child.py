"""The child process: ``python -m jaxtune._isolation.child --cmd-fd N --res-fd M``.

Started by :mod:`jaxtune._isolation.runner` with its environment (flags, ``JAX_PLATFORMS``, device
visibility) set before JAX is imported. It answers a ``ready`` frame with what it actually
sees, then serves ``measure`` / ``retime`` requests for one kernel at a time, streaming an
event per step so the parent knows which config was in flight if this process dies.
stdout and stderr go to a log file; frames travel only over the request socket and the
result pipe. A ``preload`` request imports kernels' modules ahead of their first sweep.
"""

from __future__ import annotations

import argparse
import faulthandler
import os
import signal
import sys
import threading
import time
import traceback
from typing import Any

from .._errors import describe
from .resolve import NOTES, preload, resolve_callable, resolve_kernel
from .strays import TOKEN, kill_tagged

__all__ = ["main"]


def _watch_parent(parent_pid: int) -> None:
    """Ends this process and every process its kernels forked (its process group) soon
    after the parent dies, even in the middle of a compile, and deletes its log (the dead
    parent would have)."""

    def watch() -> None:
        while True:
            if os.getppid() != parent_pid:
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
            time.sleep(0.5)

    threading.Thread(target=watch, name="jaxtune-parent-watch", daemon=True).start()


def _limit_memory() -> None:
    limit = os.environ.get("JAXTUNE_CHILD_MEMORY_LIMIT")
    if limit:
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (int(limit), int(limit)))


def _build_task(msg: dict[str, Any], *, abstract: bool = False) -> Any:
    """The sweep task a request describes (``abstract``: its arrays as shapes, for work
    that can start before their bytes arrive)."""
    from .._tuning.sweep import SweepPlan, SweepTask
    from .wire import decode_value

    kernel = resolve_kernel(msg["ref"])
    plan = SweepPlan.from_dict({**msg["plan"], "verbose": 0})
    args = decode_value(msg["args"], abstract=abstract)
    kwargs = decode_value(msg["kwargs"], abstract=abstract)
    sig = kernel.bind(tuple(args), dict(kwargs))
    if sig.key != plan.key:
        raise LookupError(
            f"the child computed key {sig.key!r} for {plan.kernel}, the parent "
            f"{plan.key!r}; the kernel's module or the JAX state its key depends on "
            "differs between the two processes"
        )
    return SweepTask(
        plan=plan, fn=kernel.__wrapped__, signature=sig, check=kernel.check, inputs=kernel.inputs
    )


class _Server:
    """Answers the parent's requests, one at a time, keeping one :class:`Sweeper` per task
    so a ``retime`` reuses the executables its ``measure`` compiled."""

    def __init__(self, res_fd: int, reader: Any = None) -> None:
        self.res_fd = res_fd
        #: The request pipe's reader: the arrays of a request may still be arriving.
        self.reader = reader
        self.current: tuple[str, Any] | None = None
        #: Caller state the last request carried that could not be set here.
        self.unapplied: dict[str, str] = {}

    def emit(self, kind: str, cid: str, data: Any) -> None:
        from .wire import write_frame

        if hasattr(data, "to_dict"):
            data = data.to_dict()
        write_frame(self.res_fd, {"t": "event", "kind": kind, "cid": cid, "data": data})

    def answer(self, msg: dict[str, Any]) -> dict[str, Any]:
        """The frame that answers ``msg``: ``done`` with results, or an ``error``."""
        from .._errors import JaxtuneError

        try:
            frame = self._handle(msg)
        except JaxtuneError as e:
            frame = {"t": "error", "type": type(e).__name__, "message": str(e)}
        except (ImportError, LookupError) as e:
            # The parent tunes or profiles in its own process instead.
            message = f"the child could not import it ({e})"
            frame = {"t": "error", "type": "NotTransportable", "message": message}
        except Exception as e:
            message = f"{describe(e)}\n{traceback.format_exc(limit=8)}"
            frame = {"t": "error", "type": "SweepError", "message": message}
        frame["notes"], NOTES[:] = list(NOTES), []
        return frame

    def _handle(self, msg: dict[str, Any]) -> dict[str, Any]:
        from .context import apply_snapshot
        from .environ import sync_environ

        op = msg.get("op")
        if op == "preload":
            return {"t": "done", "imported": preload(msg["refs"])}
        # Before anything is imported or traced: the caller's variables (those that do not
        # key the pool of children), interpret mode, x64, precision...
        sync_environ(msg.get("environ"))
        self.unapplied = apply_snapshot(msg.get("jax_state") or {})
        if op == "profile":
            self._arrived()
            return {"t": "done", "info": _profile(msg), "unapplied": self.unapplied}
        if self.current is None or self.current[0] != msg["task_id"]:
            if "args" not in msg:  # the parent thought this child still held the task
                return {"t": "error", "type": "UnknownTask", "message": msg["task_id"]}
            self.current = (msg["task_id"], self._sweeper(msg))
        self._arrived()
        sweeper = self.current[1]
        # After a crash during a round of passes, rounds time one config at a time.
        sweeper.serial_rounds = bool(msg.get("serial"))
        if op == "measure":
            results = sweeper.measure(
                msg["todo"],
                reference=msg["reference"],
                best_us=msg["best_us"],
                serial_compile=msg["serial"],
                rounds=bool(msg.get("rounds")),
            )
        elif op == "retime":
            results = dict(sweeper.retime(msg["todo"]))
        else:
            raise LookupError(f"unknown request {op!r}")
        done = {k: r.to_dict() for k, r in results.items()}
        return {"t": "done", "results": done, "unapplied": self.unapplied}

    def _arrived(self) -> None:
        if self.reader is not None:
            self.reader.finish()

    def _sweeper(self, msg: dict[str, Any]) -> Any:
        """A sweeper for a new task; when its arrays are still arriving, the configs to
        measure start compiling for their shapes meanwhile."""
        from .._tuning.sweep import Sweeper

        if not (self.reader is not None and self.reader.pending and msg.get("op") == "measure"):
            self._arrived()
            return Sweeper(_build_task(msg), on_event=self.emit)
        task = _build_task(msg, abstract=True)
        sweeper = Sweeper(task, on_event=self.emit)
        sweeper.precompile(
            msg["todo"], abstract_inputs(task.signature), serial=bool(msg.get("serial"))
        )
        self._arrived()
        sweeper.supply(_build_task(msg).signature)
        return sweeper


def abstract_inputs(sig: Any) -> dict[str, Any]:
    """The kernel's dynamic arguments as ``jax.ShapeDtypeStruct`` leaves."""
    import jax

    return {
        name: jax.tree_util.tree_map(
            lambda leaf: jax.ShapeDtypeStruct(leaf.shape, leaf.dtype), sig.value(name)
        )
        for name in sig.dynamic
    }


def _profile(msg: dict[str, Any]) -> Any:
    from .._profiling.profiled import capture
    from .wire import decode_value

    return capture(
        resolve_callable(msg["ref"]),
        tuple(decode_value(msg["args"])),
        dict(decode_value(msg["kwargs"])),
        iters=msg["iters"],
        warmup=msg["warmup"],
        logdir=msg["logdir"],
    )


def _serve(cmd_fd: int, res_fd: int) -> int:
    from .wire import FrameReader, write_frame

    reader = FrameReader(cmd_fd)
    server = _Server(res_fd, reader)
    while True:
        try:
            msg = reader.read(defer=True)
            if msg.get("op") == "exit":
                return 0
            answer = server.answer(msg)
            reader.finish()  # whatever the answer, the whole request is read
        except EOFError:
            return 0
        write_frame(res_fd, answer)


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

    from .._versions import toolchain
    from .wire import write_frame

    try:
        devices = jax.devices()
        ready: dict[str, Any] = {
            "t": "ready",
            "pid": os.getpid(),
            "platform": devices[0].platform,
            "device_kind": devices[0].device_kind,
            "device_count": len(devices),
            "versions": toolchain(),
            "env": {
                k: os.environ.get(k)
                for k in (
                    "XLA_FLAGS",
                    "LIBTPU_INIT_ARGS",
                    "JAX_PLATFORMS",
                    "CUDA_VISIBLE_DEVICES",
                    "TPU_VISIBLE_CHIPS",
                    "XLA_PYTHON_CLIENT_PREALLOCATE",
                )
            },
        }
    except Exception as e:
        write_frame(
            args.res_fd,
            {
                "t": "error",
                "type": "SweepError",
                "message": f"the child's backend did not start: {e}",
            },
        )
        return 3
    write_frame(args.res_fd, ready)
    _warm_up()
    return _serve(args.cmd_fd, args.res_fd)


def _warm_up() -> None:
    """Pays, before the first request arrives, what the first sweep of a process would
    otherwise pay: importing jaxtune and its sweep machinery, the first transfer of a host
    array, and XLA's first ahead-of-time compile and run. A child started ahead of need
    (``prestart``) is then as fast as one that already swept."""
    try:
        import jax
        import jax.numpy
        import numpy as np

        import jaxtune  # noqa: F401  (the kernel's module imports it)

        from .._tuning import sweep  # noqa: F401

        x = jax.device_put(np.ones(64, np.float32))
        step = jax.jit(lambda x: (x * 2).reshape(4, -1).sum(axis=1)).lower(x).compile()
        jax.block_until_ready(step(x))
    except Exception:  # a backend that cannot run this reports on the first real request
        pass


if __name__ == "__main__":
    sys.exit(main())
