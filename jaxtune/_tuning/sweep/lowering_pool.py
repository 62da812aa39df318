"""Kernel side. Lowering a sweep's configs in processes side by side (parent side; the processes run
:mod:`.lowering_worker`), so that a large space's tracing does not run one config at a
time on the sweep's one lowering thread.

Tracing and lowering a config is Python work that holds the GIL: Tokamax's ragged_dot takes
about 0.4 s a config on a TPU v5e host, so its 540-config space spent most of its first
sweep (262.5 s) waiting on one thread while twelve compiling threads had little to do. Here
processes on JAX's CPU platform lower their share of the configs for the chip's topology
and keep each program in the task's store (:mod:`.program_store`); the compiling process
loads each config as soon as a process told of it (15-25 ms) instead of tracing it, and
lowers configs itself while the processes start (:class:`~.compile.LoweringAhead`). Refusals
(:mod:`.refusals`) are found there too and kept as failures.

Nothing a process produces is taken on faith: the store's own check (the first program
loaded is also lowered in the compiling process and the two compared) decides whether any
is used, and a config a process did not lower (it failed, it died, it was slow) is lowered
in the compiling process as before. A pool is started only where every piece holds: the
store is on (``JAXTUNE_COMPILE_CACHE``, the ``retune`` extra), the kernel can be imported
by reference (as a sweep's child imports it), its arguments travel, and the chip's topology
is known (a TPU v5e or v6e); ``JAXTUNE_LOWERING_PROCESSES`` sets the count or turns it off,
and a number also starts it on other platforms (lowering for the platform itself).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from typing import Any, Literal

import jax

from ..._core import settings as _settings
from ..._core import typed
from ..._core.codec import packb
from ..._core.errors import warn_once
from ..._core.vocabulary import Config, config_id
from ..._isolation.calling import function_ref
from ..._isolation.context import JaxState, snapshot
from ..._isolation.devices import usable_cores
from ..._isolation.environ import python_path
from ..._isolation.frames import FunctionRef
from ..._isolation.framing import FrameReader
from ..._isolation.resolve import BUSY_SCRIPTS, NOTES
from ..._isolation.wire import encode_value
from . import program_store
from .program_store import ProgramStore
from .refusals import scoped_vmem
from .work import SweepPlan, SweepTask

__all__ = ["AUTO_MIN_SECONDS", "LoweringJob", "LoweringPool", "Told", "topology_name"]

#: The fewest seconds the configs left to lower would take in the sweep's process (at the
#: first config's pace) for which ``auto`` starts processes: each costs a start (importing
#: JAX and the kernel's module, 3-5 s on a TPU v5e host), and a process's first trace is
#: slower than the rest, so the estimate runs high. JAX's flash attention's 16 configs (0.9
#: s of lowering in all) never earn a start back: with two processes (a threshold of 10 s)
#: its sweep took 14.1-14.8 s against a plain loop's 8.7-9.3 s.
AUTO_MIN_SECONDS = 30.0
#: Configs per process at least, under ``auto``.
_PER_PROCESS = 8
#: A chip's device kind and the single-chip topology a lowering process asks libtpu for.
_TOPOLOGIES = {"TPU v5 lite": "v5e:1x1", "TPU v6 lite": "v6e:1x1"}


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class LoweringJob:
    """What a lowering process is told (:mod:`.lowering_worker` reads it, through the typed
    codec, from its stdin): the kernel's reference, the sweep's plan, its arguments as
    shapes, the caller's JAX state, and its share of the configs."""

    ref: FunctionRef
    plan: SweepPlan
    #: The call's encoded arguments, arrays as shapes (:func:`~jaxtune._isolation.wire.encode_value`).
    args: Any
    kwargs: Any
    jax_state: JaxState
    #: How many value sets the sweep times as one (its programs' arguments).
    sets: int
    #: The task's store of stored programs (:mod:`.program_store`).
    folder: str
    #: The chip's single-chip topology (``v5e:1x1``), ``None`` to lower for ``platform``
    #: itself.
    topology: str | None
    platform: str
    #: Whether to check each traced program against Mosaic's rules, with the VMEM a kernel
    #: may use on the chip (:func:`~.refusals.scoped_vmem`).
    refuse: bool
    vmem: int | None
    #: Each config's id and knobs.
    configs: tuple[tuple[str, Config], ...] = ()


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Told:
    """What a lowering process tells of one config: ``kept`` (its program is in the
    store), ``refused`` (the refusal too), ``failed`` (tracing raised: the sweep lowers it
    itself), ``unexported`` (``jax.export`` cannot serialise the kernel: nothing more is
    lowered there)."""

    cid: str
    outcome: Literal["kept", "refused", "failed", "unexported"]
    reason: str = ""


def topology_name(device: Any) -> str | None:
    """The single-chip topology name of a TPU ``device``, ``None`` where none is known."""
    return _TOPOLOGIES.get(getattr(device, "device_kind", ""))


class LoweringPool:
    """Processes lowering a task's configs into its store, and what each one told of each."""

    def __init__(
        self,
        processes: list[subprocess.Popen[bytes]],
        logs: list[Any],
        shares: list[list[str]],
        jobs: list[bytes],
    ) -> None:
        self._processes = processes
        self._logs = logs
        self._shares = shares
        self._told: dict[str, tuple[str, str]] = {}
        self._running = len(processes)
        self._changed = threading.Condition()
        self._readers = [
            threading.Thread(target=self._read, args=(p, job), name="jaxtune-lowering", daemon=True)
            for p, job in zip(processes, jobs, strict=True)
        ]
        for reader in self._readers:
            reader.start()

    @classmethod
    def start(
        cls,
        task: SweepTask,
        store: ProgramStore | None,
        configs: Sequence[Config],
        *,
        refuse: bool,
        first_s: float,
    ) -> LoweringPool | None:
        """A pool lowering ``configs`` of ``task`` into ``store``, or ``None`` where one is
        not started (see the module's docstring; ``first_s``: the seconds the sweep's
        first config took to lower, the pace ``auto`` expects of the others)."""
        if store is None or not store.exportable or store.trusted is False:
            return None
        count = _count(len(configs), first_s)
        if count <= 0:
            return None
        device = jax.devices()[0]
        topology = topology_name(device) if device.platform == "tpu" else None
        if device.platform == "tpu" and topology is None:
            return None
        try:
            common = _request(
                task, store, refuse=refuse, topology=topology, platform=device.platform
            )
        except Exception:  # the kernel or its arguments cannot travel: lowered here
            return None
        if common.ref.module == "__main__" and common.ref.path in BUSY_SCRIPTS:
            return None  # each process would run the script's work again: lowered here
        env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=python_path(), JAXTUNE_MODE="off")
        if topology is not None:
            # libtpu refuses a second process on a host whose chip is held; a topology is
            # a compile-only view of the chip, which never opens it.
            env["ALLOW_MULTIPLE_LIBTPU_LOAD"] = "1"
        shares, jobs = [], []
        for i in range(count):
            ids = [config_id(c) for c in configs[i::count]]
            share = tuple((cid, dict(c)) for cid, c in zip(ids, configs[i::count], strict=True))
            shares.append(ids)
            try:
                jobs.append(packb(typed.encode(dataclasses.replace(common, configs=share))))
            except Exception:  # a config that cannot travel: lowered here, no process started
                return None
        processes: list[subprocess.Popen[bytes]] = []
        logs: list[Any] = []
        try:
            for _ in jobs:
                logs.append(tempfile.TemporaryFile())  # noqa: SIM115 - closed by close()
                processes.append(
                    subprocess.Popen(
                        [sys.executable, "-m", "jaxtune._tuning.sweep.lowering_worker"],
                        stdin=subprocess.PIPE,
                        stdout=subprocess.PIPE,
                        stderr=logs[-1],
                        env=env,
                    )
                )
        except OSError:  # no process (or file) to be had: the sweep lowers everything
            for process in processes:
                process.kill()
                process.wait()
                for pipe in (process.stdin, process.stdout):
                    if pipe is not None:
                        pipe.close()
            for log in logs:
                log.close()
            return None
        return cls(processes, logs, shares, jobs)

    def _read(self, process: subprocess.Popen[bytes], job: bytes) -> None:
        # The job is written here, not where the processes start: a job past the pipe's
        # buffer would hold the start of the next process until this one read it, which
        # it does only once it has imported JAX.
        assert process.stdin is not None and process.stdout is not None
        try:
            process.stdin.write(job)
        except OSError:  # it ended before reading its job: it tells nothing
            pass
        finally:
            with contextlib.suppress(OSError):
                process.stdin.close()
        frames = FrameReader(process.stdout.fileno())
        try:
            while True:
                raw = frames.read()
                told = typed.decode(Told, raw, within="a lowering process's answer")
                with self._changed:
                    self._told[told.cid] = (told.outcome, told.reason)
                    self._changed.notify_all()
        except EOFError:  # the process ended (or closed its answers)
            pass
        except Exception:  # a garbled stream: what it did not tell is lowered by the sweep
            pass
        finally:
            # Reaped as it ends, not when the pool closes: an ended process would else
            # stay a zombie for the rest of the sweep.
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=5)
            with self._changed:
                self._running -= 1
                self._changed.notify_all()

    def told(self) -> dict[str, str]:
        """The configs a process has told of so far, each with what it told
        (:attr:`Told.outcome`)."""
        with self._changed:
            return {cid: outcome for cid, (outcome, _) in self._told.items()}

    def running(self) -> bool:
        """Whether a process may still tell of a config (one has not ended)."""
        with self._changed:
            return self._running > 0

    def wait(self, cid: str, timeout_s: float) -> Literal["told", "waiting", "ended"]:
        """Waits up to ``timeout_s`` for a process to tell of config ``cid``: ``told`` (it
        is kept in the store, or refused, or failed there), ``waiting`` (not yet), ``ended``
        (every process ended without telling of it: none will)."""
        deadline = time.monotonic() + timeout_s
        with self._changed:
            while cid not in self._told and self._running > 0:
                left = deadline - time.monotonic()
                if left <= 0:
                    return "waiting"
                self._changed.wait(left)
            return "told" if cid in self._told else "ended"

    def close(self) -> None:
        """Stops the processes still running and frees what they held; warns once about a
        process that ended before it told of its share, with the end of what it printed."""
        for process, log, share in zip(self._processes, self._logs, self._shares, strict=True):
            if process.poll() is None:
                process.kill()
            elif process.returncode != 0 and any(cid not in self._told for cid in share):
                with contextlib.suppress(OSError, ValueError):
                    log.seek(0)
                    tail = log.read().decode(errors="replace").strip().splitlines()[-6:]
                    warn_once(
                        ("lowering process", process.returncode),
                        f"jaxtune: a lowering process ended (exit status {process.returncode}) "
                        "before lowering its share of the sweep's configs; the sweep lowers "
                        "them itself. It printed:\n  " + "\n  ".join(tail),
                    )
        for process in self._processes:
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=10)
        for reader in self._readers:
            reader.join(timeout=10)
        for process in self._processes:
            for pipe in (process.stdin, process.stdout):  # stdin: a reader that never ran
                if pipe is not None:
                    with contextlib.suppress(OSError):
                        pipe.close()
        for log in self._logs:
            log.close()


def say_none_without_serialising() -> None:
    """Warns once where ``JAXTUNE_LOWERING_PROCESSES`` asks for processes and none can
    start because ``jax.export`` cannot serialise here (no ``flatbuffers``): the processes
    hand their programs over through the store of kept programs."""
    setting = _settings.settings().lowering_processes
    if setting == "auto" or int(setting) <= 0 or program_store.serialisable():
        return
    message = (
        f"JAXTUNE_LOWERING_PROCESSES={setting} starts no lowering process here: they hand "
        "their programs over through jax.export, which needs the flatbuffers package "
        "(pip install 'jaxtune[retune]'); the sweep lowers every config itself"
    )
    if warn_once(("lowering processes", "flatbuffers"), f"jaxtune: {message}"):
        NOTES.append(message)  # in a sweep child, its parent shows it


def _count(configs: int, first_s: float) -> int:
    """How many processes lower ``configs`` configs under ``JAXTUNE_LOWERING_PROCESSES``
    (``auto``: on a TPU, where they would take :data:`AUTO_MIN_SECONDS` or more here at
    ``first_s`` a config)."""
    setting = _settings.settings().lowering_processes
    if setting != "auto":
        return min(int(setting), configs)
    if jax.default_backend() != "tpu" or configs * first_s < AUTO_MIN_SECONDS:
        return 0
    return max(1, min(usable_cores() - 1, configs // _PER_PROCESS))


#: JAX options a lowering process sets for itself: its platform (CPU, never the chip the
#: sweep holds) and default device (the chip's topology's).
_OWN_OPTIONS = frozenset({"jax_platforms", "jax_platform_name", "jax_default_device"})


def _jax_state() -> JaxState:
    """The caller's JAX state (:func:`~jaxtune._isolation.context.snapshot`), less the
    options a lowering process sets for itself."""
    state = snapshot()
    values = {k: v for k, v in state.values.items() if k not in _OWN_OPTIONS}
    return dataclasses.replace(state, values=values)


def _request(
    task: SweepTask, store: ProgramStore, *, refuse: bool, topology: str | None, platform: str
) -> LoweringJob:
    """What every process of the pool is told, less its share of the configs."""
    plan = task.plan
    ref = dataclasses.replace(function_ref(task.fn), kernel=plan.kernel)
    args, kwargs = task.signature.call_arguments(abstract=True)
    return LoweringJob(
        ref=ref,
        plan=plan,
        args=encode_value(tuple(args)),
        kwargs=encode_value(dict(kwargs)),
        jax_state=_jax_state(),
        sets=1 + len(task.value_sets),
        folder=str(store.folder),
        topology=topology,
        platform=platform,
        refuse=refuse,
        vmem=scoped_vmem() if refuse else None,
    )
