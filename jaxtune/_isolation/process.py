"""A re-exec'd child Python process: start it, talk to it, kill it, pool it.

The child (``python -m jaxtune._isolation.child``) starts with a built environment, in its own process
group, with two pipes for msgpack frames and a log file for its stdout and stderr.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Mapping
from typing import Any

from .._errors import SweepError
from .wire import FrameReader, write_frame

__all__ = ["STARTUP_TIMEOUT", "ChildProcess", "shutdown_children"]

#: Seconds a child may take to import JAX and start its backend.
STARTUP_TIMEOUT = 180.0
#: Extra seconds past a config's timeout before the child is killed (the child itself
_TAIL_LINES = 15


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


class ChildProcess:
    """One started child: its pipes, its log file, and how it ended."""

    def __init__(self, env: Mapping[str, str], *, startup_timeout: float = STARTUP_TIMEOUT):
        cmd_r, cmd_w = os.pipe()
        res_r, res_w = os.pipe()
        self.log_path = tempfile.mkstemp(prefix="jaxtune-child-", suffix=".log")[1]
        with open(self.log_path, "wb") as log:
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
                env=dict(env),
                start_new_session=True,
            )
        os.close(cmd_r)
        os.close(res_w)
        self.cmd_fd = cmd_w
        self.reader = FrameReader(res_r)
        self.lock = threading.Lock()
        try:
            ready = self.reader.read(timeout=startup_timeout)
        except EOFError:
            ready = None
        if not isinstance(ready, dict) or ready.get("t") != "ready":
            detail = (ready or {}).get("message") if isinstance(ready, dict) else None
            self.kill()
            raise SweepError(
                f"the jaxtune child process did not start ({detail or self.describe_exit()}); "
                f"its log: {self.stderr_tail(0)}"
            )
        self.ready: dict[str, Any] = ready

    def send(self, message: Any) -> None:
        write_frame(self.cmd_fd, message)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        """Kills the child's whole process group and reaps it."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=30)
        self._close_fds()

    def close(self) -> None:
        """Asks the child to exit, then makes sure it did."""
        if self.alive():
            with contextlib.suppress(OSError, subprocess.TimeoutExpired):
                self.send({"op": "exit"})
                self.proc.wait(timeout=5)
        self.kill()
        with contextlib.suppress(OSError):
            os.unlink(self.log_path)

    def _close_fds(self) -> None:
        for fd in (self.cmd_fd, self.reader.fd):
            with contextlib.suppress(OSError):
                os.close(fd)
        self.cmd_fd = self.reader.fd = -1

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
            return os.path.getsize(self.log_path)
        except OSError:
            return 0

    def stderr_tail(self, since: int) -> str:
        """The last lines the child wrote to stderr since byte offset ``since``."""
        try:
            with open(self.log_path, "rb") as f:
                f.seek(since)
                text = f.read().decode(errors="replace")
        except OSError:
            return ""
        fatal = text.rfind("Fatal Python error")
        lines = [line.strip() for line in text.splitlines() if line.strip()]
        if fatal >= 0:
            # faulthandler lists the innermost frame first: keep the head of its report.
            report = text[fatal:]
            current = report.find("Current thread")
            head = report.splitlines()[0]
            body = report[current:] if current >= 0 else report
            lines = [head] + [line.strip() for line in body.splitlines() if line.strip()]
            lines = lines[:_TAIL_LINES]
        else:
            lines = lines[-_TAIL_LINES:]
        return " | ".join(lines) or "(nothing on stderr)"


_POOL: dict[tuple[tuple[str, str], ...], ChildProcess] = {}
_POOL_LOCK = threading.Lock()


@atexit.register
def shutdown_children() -> None:
    """Stops every pooled child (also run at interpreter exit)."""
    with _POOL_LOCK:
        children = list(_POOL.values())
        _POOL.clear()
    for child in children:
        child.close()


def _python_path() -> str:
    entries = []
    for entry in sys.path:
        path = os.path.abspath(entry or os.getcwd())
        if path not in entries and os.path.exists(path):
            entries.append(path)
    return os.pathsep.join(entries)


def _parent_backend() -> str | None:
    """The platform this process already started, if any (never starts one)."""
    jax_mod = sys.modules.get("jax")
    if jax_mod is None:
        return None
    try:
        from jax._src import xla_bridge

        backends = getattr(xla_bridge, "_backends", {})
    except ImportError:
        return None
    if not backends:
        return None
    return str(jax_mod.default_backend())


def _normalise(platform: str | None) -> str | None:
    if platform is None:
        return None
    platform = platform.lower()
    return "gpu" if platform in ("cuda", "rocm", "gpu") else platform
