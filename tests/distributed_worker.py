"""One process of a ``jax.distributed`` job started by tests/test_distributed.py.

Usage: ``python distributed_worker.py SCENARIO COORDINATOR NPROC PID`` (``NPROC`` 1 runs
without ``jax.distributed``). Prints one JSON line: what this process used and measured.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time

import jax
import jax.numpy as jnp

import jaxtune
from jaxtune._core.versions import toolchain
from jaxtune._core.vocabulary import Entry, Measurement
from jaxtune._isolation.devices import sweep_devices
from jaxtune._tuning import bound as _bound
from jaxtune._tuning.store import cache as _cache
from jaxtune._tuning.sweep.runner import ProcessRunner
from jaxtune._tuning.sweep.stats import finish

BLOCKS = [1, 2, 3, 4, 5, 6, 7, 8]
#: Fake median times (µs): blocks 2 and 3 tie for the best; block 2 comes first in the space.
TIMES = {1: 90.0, 2: 40.0, 3: 40.0, 4: 95.0, 5: 60.0, 6: 41.0, 7: 80.0, 8: 99.0}


@jaxtune.autotuned(configs={"block": BLOCKS}, name="tests.distributed.scaled")
def scaled(x, *, block):
    return x * block


@jaxtune.autotuned(
    configs={"reps": [*range(40, 10, -2), 1]}, name="tests.distributed.repeated", check=False
)
def repeated(x, *, reps):
    """16 configs whose cost grows with ``reps``; the last (one rep) is 12x cheaper than any
    other, a margin that survives children sharing two CPU cores."""
    probe = os.environ.get("PID_PROBE_FILE")
    if probe:
        with open(probe, "a") as f:
            f.write(f"{os.getpid()}\n")
    return jax.lax.fori_loop(0, reps, lambda i, y: jnp.tanh(y @ y), x)


class FakeRunner:
    """Measures each config as its entry in ``TIMES`` says, and remembers what it ran."""

    def __init__(self) -> None:
        self.seen: list[int] = []

    def sweep(self, task):
        self.seen.extend(c["block"] for c in task.plan.configs)
        results = {}
        for config in (task.plan.default, *task.plan.configs):
            t = TIMES[config["block"]]
            results[jaxtune_config_id(config)] = Measurement(
                config=dict(config), median_us=t, min_us=t, spread=0.0, samples=5, compile_s=0.0
            )
        return finish(task.plan, results)


def _use_runner(make) -> None:
    """Every sweep of this process goes to ``make()`` (the lookup order asks for the runner;
    a sweep run without one asks too)."""
    _bound.default_runner = make


def jaxtune_config_id(config):
    from jaxtune._core.vocabulary import config_id

    return config_id(config)


def plant(block: int, x) -> None:
    """Puts ``block`` in this process's own cache as the tuned config for ``x``."""
    key = scaled.config_for(x).key
    entry = Entry(
        kernel=scaled.kernel_id,
        device_kind=jax.devices()[0].device_kind,
        key=key,
        config={"block": block},
        time_us=1.0,
        default_config={"block": 1},
        default_time_us=2.0,
        versions=toolchain(),
    )
    _cache.user_cache().write([entry])


def wait_until_gone(os_pid: int, within: float = 60.0) -> None:
    """Waits until process ``os_pid`` has exited (gone, or a zombie its parent has not yet
    reaped): a follower that is still running when the leader ends is ended by JAX's
    distributed runtime (SIGABRT) instead of exiting with its own code."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{os_pid}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError):
            return
        if state in ("Z", "X"):
            return
        time.sleep(0.02)


def main() -> None:
    scenario, coordinator, nproc, pid = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    if nproc > 1:
        jax.distributed.initialize(
            coordinator,
            num_processes=nproc,
            process_id=pid,
            initialization_timeout=60,
            shutdown_timeout_seconds=20,
        )
    from jax._src import distributed

    client = distributed.global_state.client
    x = jnp.ones(4)
    report: dict = {"pid": pid}
    runner = FakeRunner()
    if scenario == "devices":
        jnp.ones(1).block_until_ready()  # the backend has started
        # By default CPU devices get at most one child per core; this asks for every device,
        # so the split is the same on any machine.
        count = jax.local_device_count()
        by_default = sweep_devices()
        _use_runner(lambda: ProcessRunner(devices=list(range(count))))
        start = time.monotonic()
        out = jax.jit(repeated)(jnp.ones((128, 128)))
        choice = repeated.config_for(jax.ShapeDtypeStruct((128, 128), jnp.float32))
        seconds = time.monotonic() - start
        entry = choice.entry
        report = {
            "reps": choice.config["reps"],
            "seconds": seconds,
            "by_default": by_default,
            # Why, should a run ever store another config: the decision and every time.
            "decision": entry.decision_text() if entry is not None else None,
            "times": {
                m.config["reps"]: [round(m.time_us), m.why_out or "in", len(m.rounds_us)]
                if m.ok
                else m.reason
                for m in (entry.measurements if entry is not None else ())
            },
        }
        print(json.dumps(report), flush=True)
        return
    _use_runner(lambda: runner)
    if scenario == "conflict":
        plant(pid + 5, x)  # a config of the space: 5, 6, 7, 8
    if client is not None:
        client.wait_at_barrier("jaxtune-test-ready", 60_000)
    if scenario == "silent_leader" and pid == 0:
        # Silent, and up (its end would end the followers) until every follower has given
        # up waiting for it.
        for other in range(1, nproc):
            follower = int(client.blocking_key_value_get(f"jaxtune-test/gave-up/{other}", 300_000))
            wait_until_gone(follower)
        os._exit(0)
    if scenario == "killed_leader" and pid == 0:
        time.sleep(120)  # "tuning": the test kills it once every follower says it waits
        os._exit(0)
    if scenario == "leader_dies_at_once" and pid == 0:
        time.sleep(0.5)  # the followers are waiting for its config by now
        os.kill(os.getpid(), signal.SIGKILL)
    start = time.monotonic()
    try:
        out = jax.jit(lambda a: scaled(a))(x)
    except jaxtune.AgreementError as e:
        report.update(error=str(e), seconds=time.monotonic() - start)
        print(json.dumps(report), flush=True)
        if scenario == "silent_leader":  # the leader may go now
            client.key_value_set(f"jaxtune-test/gave-up/{pid}", str(os.getpid()))
        os._exit(3)  # skip jax.distributed's shutdown barrier with a leader that is gone
    report.update(
        block=float(out[0]),
        seconds=time.monotonic() - start,
        measured=sorted(set(runner.seen)),
        cache_files=[str(p) for p in _cache.user_cache().files()],
    )
    print(json.dumps(report), flush=True)


if __name__ == "__main__":
    main()
