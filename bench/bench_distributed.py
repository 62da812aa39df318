"""Multi-host agreement and per-device sweeps.

  agree:   cost of one agreed decision in a 2-process jax.distributed job on this host
           (coordinator on 127.0.0.1), per process, against the same lookup without
           jax.distributed; and jit tracing of an autotuned kernel for many shapes.
  devices: wall time of a 16-config tune-mode sweep split over one child per CPU device
           (4 devices via --xla_force_host_platform_device_count, asked for explicitly:
           by default CPU devices get at most one child per core) against one child.

Run: python bench/bench_distributed.py [agree|devices|all] [--decisions N]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.abspath(__file__)
ROOT = os.path.dirname(os.path.dirname(HERE))


class NoSweeps:
    def sweep(self, task):  # type: ignore[no-untyped-def]
        raise AssertionError("the benchmark's decisions never sweep")


def _worker_agree(coordinator: str, nproc: int, pid: int, decisions: int) -> dict:
    import jax
    import jax.numpy as jnp

    if nproc > 1:
        jax.distributed.initialize(
            coordinator, num_processes=nproc, process_id=pid, shutdown_timeout_seconds=30
        )
    import jaxtune
    from jaxtune._core.vocabulary import Choice
    from jaxtune._distributed import agree as _agree
    from jaxtune._tuning.sweep.shard import SweepSharing

    def question(i: int) -> _agree.Question:
        return _agree.Question(
            kernel="bench.k",
            key=f"f32[{i}]",
            version="",
            device_kind="cpu",
            decide=lambda measure: Choice(config={"block": 1}, source="cache", key=f"f32[{i}]"),
            task=lambda: None,  # type: ignore[arg-type,return-value]
            sharing=SweepSharing(NoSweeps()),
        )

    samples = []
    for i in range(decisions):
        start = time.perf_counter()
        _agree.agree(question(i))
        samples.append((time.perf_counter() - start) * 1e6)
    memo = []
    for i in range(decisions):
        start = time.perf_counter()
        _agree.agree(question(i))
        memo.append((time.perf_counter() - start) * 1e6)

    @jaxtune.autotuned(configs={"block": [1, 2]}, name="bench.scaled")
    def scaled(x, *, block):
        return x * block

    shapes = range(1, 41)
    start = time.perf_counter()
    for n in shapes:
        jax.jit(scaled).lower(jax.ShapeDtypeStruct((n,), jnp.float32))
    trace_ms = (time.perf_counter() - start) * 1e3 / len(shapes)
    return {
        "pid": pid,
        "decision_us": statistics.median(samples),
        "decision_p90_us": statistics.quantiles(samples, n=10)[-1],
        "memo_us": statistics.median(memo),
        "trace_ms": trace_ms,
    }


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _spawn(args: list[str], env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, HERE, "--worker", *args],
        env={**os.environ, "PYTHONPATH": ROOT, "JAX_PLATFORMS": "cpu", **env},
        stdout=subprocess.PIPE,
        text=True,
    )


def _collect(procs: list[subprocess.Popen], timeout: float) -> list[dict]:
    try:
        return [json.loads(p.communicate(timeout=timeout)[0].splitlines()[-1]) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()


def bench_agree(decisions: int) -> None:
    with tempfile.TemporaryDirectory() as cache:
        env = {"JAXTUNE_CACHE_DIR": cache, "JAXTUNE_ISOLATION": "inline"}
        coordinator = f"127.0.0.1:{_free_port()}"
        job = _collect(
            [_spawn(["agree", coordinator, "2", str(p), str(decisions)], env) for p in (0, 1)],
            300,
        )
        (alone,) = _collect([_spawn(["agree", "-", "1", "0", str(decisions)], env)], 300)
    print(f"{decisions} decisions, median per decision (p90):")
    print(f"  no jax.distributed:     {alone['decision_us']:8.1f} µs")
    for r in job:
        role = "leader  " if r["pid"] == 0 else "follower"
        print(
            f"  2 processes, {role}: {r['decision_us']:8.1f} µs ({r['decision_p90_us']:.1f}); "
            f"decided before (memo): {r['memo_us']:.1f} µs"
        )
    print("jit lowering of an autotuned kernel, per new shape:")
    print(f"  no jax.distributed: {alone['trace_ms']:.2f} ms")
    for r in job:
        print(f"  2 processes, process {r['pid']}: {r['trace_ms']:.2f} ms")


def _worker_devices() -> dict:
    sys.path.insert(0, os.path.join(ROOT, "tests"))
    import jax
    import jax.numpy as jnp
    from distributed_worker import repeated

    from jaxtune._tuning import bound as _bound
    from jaxtune._tuning.sweep.runner import ProcessRunner

    # One child per device even past the default cap (one child per core) on CPU.
    count = jax.local_device_count()
    _bound.default_runner = lambda: ProcessRunner(devices=list(range(count)))
    start = time.perf_counter()
    jax.jit(repeated)(jnp.ones((128, 128))).block_until_ready()
    seconds = time.perf_counter() - start
    choice = repeated.config_for(jax.ShapeDtypeStruct((128, 128), jnp.float32))
    return {"seconds": seconds, "reps": choice.config["reps"], "devices": jax.device_count()}


def bench_devices(repeats: int = 2) -> None:
    rows = {}
    for count in (1, 4):
        times = []
        for _ in range(repeats):
            with tempfile.TemporaryDirectory() as cache:
                env = {
                    "JAXTUNE_CACHE_DIR": cache,
                    "JAXTUNE_MODE": "tune",
                    "JAXTUNE_ISOLATION": "process",
                    "XLA_FLAGS": f"--xla_force_host_platform_device_count={count}",
                }
                (r,) = _collect([_spawn(["devices"], env)], 600)
            times.append(r["seconds"])
            rows[count] = (r["reps"], times)
    print(
        f"16-config tune-mode sweep (first jit call, child start-up included), {os.cpu_count()} cores:"
    )
    for count, (reps, times) in rows.items():
        print(
            f"  {count} child(ren): {statistics.median(times):6.1f} s (runs {times}); winner reps={reps}"
        )
    print(
        f"  split / one child: {statistics.median(rows[4][1]) / statistics.median(rows[1][1]):.2f}"
    )


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        kind, rest = sys.argv[2], sys.argv[3:]
        if kind == "agree":
            report = _worker_agree(rest[0], int(rest[1]), int(rest[2]), int(rest[3]))
        else:
            report = _worker_devices()
        print(json.dumps(report), flush=True)
        return
    parser = argparse.ArgumentParser()
    parser.add_argument("what", nargs="?", default="all", choices=["agree", "devices", "all"])
    parser.add_argument("--decisions", type=int, default=200)
    args = parser.parse_args()
    if args.what in ("agree", "all"):
        bench_agree(args.decisions)
    if args.what in ("devices", "all"):
        bench_devices()


if __name__ == "__main__":
    main()
