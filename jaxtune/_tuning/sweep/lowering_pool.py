"""Kernel side. Lowering a sweep's configs in processes side by side (parent side; the processes run
:mod:`.lowering_worker`), so that a large space's tracing does not run one config at a
time on the sweep's one lowering thread.

Tracing and lowering a config is Python work that holds the GIL: Tokamax's ragged_dot takes
about 0.4 s a config on a TPU v5e host, so its 540-config space spent most of its first
sweep (262.5 s) waiting on one thread while twelve compiling threads had little to do. Here
processes on JAX's CPU platform lower their share of the configs for the chip's topology
and keep each program in the task's store (:mod:`.kept_programs`); the compiling process
waits for each config in turn and loads it (15-25 ms) instead of tracing it. Refusals
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
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from typing import Any

import jax
import msgpack

from ..._core import settings as _settings
from ..._core.errors import warn_once
from ..._core.vocabulary import Config, config_id
from ..._isolation.calling import function_ref
from ..._isolation.context import snapshot
from ..._isolation.devices import usable_cores
from ..._isolation.environ import python_path
from ..._isolation.wire import encode_value
from .kept_programs import KeptPrograms
from .refusals import vmem_capacity
from .work import SweepTask

__all__ = ["AUTO_MIN_SECONDS", "LoweringPool", "topology_name"]

#: The fewest seconds the configs left to lower would take in the sweep's process (at the
#: first config's pace) for which ``auto`` starts processes: each costs a start (importing
#: JAX and the kernel's module, 3-5 s on a TPU v5e host), which JAX's flash attention's 16
#: configs (0.9 s of lowering in all) never earn back: the sweep took 14.1 s with two
#: processes against a plain loop's 8.7 s.
AUTO_MIN_SECONDS = 10.0
#: Configs per process at least, under ``auto``.
_PER_PROCESS = 8
#: A chip's device kind and the single-chip topology a lowering process asks libtpu for.
_TOPOLOGIES = {"TPU v5 lite": "v5e:1x1", "TPU v6 lite": "v6e:1x1"}


def topology_name(device: Any) -> str | None:
    """The single-chip topology name of a TPU ``device``, ``None`` where none is known."""
    return _TOPOLOGIES.get(getattr(device, "device_kind", ""))


class LoweringPool:
    """Processes lowering a task's configs into its store, and what each one told of each."""

    def __init__(
        self, processes: list[subprocess.Popen[bytes]], logs: list[Any], shares: list[list[str]]
    ) -> None:
        self._processes = processes
        self._logs = logs
        self._shares = shares
        self._told: dict[str, tuple[str, str]] = {}
        self._running = len(processes)
        self._changed = threading.Condition()
        self._readers = [
            threading.Thread(target=self._read, args=(p,), name="jaxtune-lowering", daemon=True)
            for p in processes
        ]
        for reader in self._readers:
            reader.start()

    @classmethod
    def start(
        cls,
        task: SweepTask,
        kept: KeptPrograms | None,
        configs: Sequence[Config],
        *,
        refuse: bool,
        first_s: float,
    ) -> LoweringPool | None:
        """A pool lowering ``configs`` of ``task`` into ``kept``, or ``None`` where one is
        not started (see the module's docstring; ``first_s``: the seconds the sweep's
        first config took to lower, the pace ``auto`` expects of the others)."""
        if kept is None or not kept.exportable or kept.trusted is False:
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
                task, kept, refuse=refuse, topology=topology, platform=device.platform
            )
        except Exception:  # the kernel or its arguments cannot travel: lowered here
            return None
        env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=python_path(), JAXTUNE_MODE="off")
        if topology is not None:
            # libtpu refuses a second process on a host whose chip is held; a topology is
            # a compile-only view of the chip, which never opens it.
            env["ALLOW_MULTIPLE_LIBTPU_LOAD"] = "1"
        processes, logs, shares = [], [], []
        for i in range(count):
            ids = [config_id(c) for c in configs[i::count]]
            share = [[cid, dict(c)] for cid, c in zip(ids, configs[i::count], strict=True)]
            shares.append(ids)
            log = tempfile.TemporaryFile()  # noqa: SIM115 - closed by close()
            process = subprocess.Popen(
                [sys.executable, "-m", "jaxtune._tuning.sweep.lowering_worker"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
                env=env,
            )
            assert process.stdin is not None
            with contextlib.suppress(OSError):
                process.stdin.write(msgpack.packb(dict(common, configs=share), use_bin_type=True))
                process.stdin.close()
            processes.append(process)
            logs.append(log)
        return cls(processes, logs, shares)

    def _read(self, process: subprocess.Popen[bytes]) -> None:
        assert process.stdout is not None
        try:
            for told in msgpack.Unpacker(process.stdout, raw=False):
                with self._changed:
                    self._told[str(told["cid"])] = (str(told["outcome"]), str(told["reason"]))
                    self._changed.notify_all()
        except Exception:  # a garbled stream: what it did not tell is lowered by the sweep
            pass
        finally:
            with self._changed:
                self._running -= 1
                self._changed.notify_all()

    def wait(self, cid: str, timeout_s: float) -> tuple[str, str] | None:
        """What a process told of config ``cid`` (its outcome and reason), once it has;
        ``None`` when none will (every process ended, or ``timeout_s`` passed)."""
        deadline = time.monotonic() + timeout_s
        with self._changed:
            while cid not in self._told and self._running > 0:
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self._changed.wait(left)
            return self._told.get(cid)

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
            if process.stdout is not None:
                process.stdout.close()
        for log in self._logs:
            log.close()


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


def _jax_state() -> dict[str, Any]:
    """The caller's JAX state (:func:`~jaxtune._isolation.context.snapshot`), less the
    options a lowering process sets for itself."""
    state = snapshot()
    values = {k: v for k, v in state.get("values", {}).items() if k not in _OWN_OPTIONS}
    return dict(state, values=values)


def _request(
    task: SweepTask, kept: KeptPrograms, *, refuse: bool, topology: str | None, platform: str
) -> dict[str, Any]:
    """What every process of the pool is told, less its share of the configs."""
    plan = task.plan
    ref = function_ref(task.fn)
    args, kwargs = task.signature.call_arguments(abstract=True)
    return {
        "ref": {
            "module": ref.module,
            "qualname": ref.qualname,
            "path": ref.path,
            "kernel": plan.kernel,
        },
        "plan": plan.to_dict(),
        "args": encode_value(tuple(args)),
        "kwargs": encode_value(dict(kwargs)),
        "jax_state": _jax_state(),
        "sets": 1 + len(task.value_sets),
        "folder": str(kept.folder),
        "topology": topology,
        "platform": platform,
        "refuse": refuse,
        "vmem": vmem_capacity() if refuse else None,
    }
