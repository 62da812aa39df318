"""A sweep's timeline, for a probe on the chip (``bench_tokamax_tpu.py --timeline``).

Wraps the sweep engine's steps (a config's wait for the lowering processes, its lowering
or loading, its compile, the device timer's captures and rounds) to note when each began
and ended on which thread, and samples the host's busy cores from ``/proc/stat`` and this process's from its
CPU time meanwhile,
so that a sweep's compile wait can be told apart: the host's cores all busy (too much
work) or idle (a step that feeds the others too slowly). Nothing here runs unless asked.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import json
import os
import pathlib
import resource
import threading
import time
from collections.abc import Iterator
from typing import Any

__all__ = ["recording", "summary"]


def _busy() -> tuple[float, float]:
    """The host's busy and total jiffies so far (``/proc/stat``'s first line)."""
    with open("/proc/stat") as f:
        fields = [float(x) for x in f.readline().split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0.0)
    return sum(fields) - idle, sum(fields)


def _own_cpu() -> float:
    """The CPU seconds this process's threads used so far (its compiling threads' among
    them): ``/proc/stat`` stood still on the chip's host, this does not."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


@contextlib.contextmanager
def recording(path: str, interval_s: float = 0.25) -> Iterator[None]:
    """Notes the sweep's steps and the host's busy cores until the block ends; writes
    them and their :func:`summary` to ``path`` (JSON)."""
    from jaxtune._tuning.sweep import compile as compile_mod
    from jaxtune._tuning.sweep import lowering_pool, measure

    t0 = time.perf_counter()
    spans: list[tuple[str, str, float, float]] = []
    cpu: list[tuple[float, float, float]] = []
    cores = os.cpu_count() or 1
    patched: list[tuple[Any, str, Any]] = []

    def wrap(owner: Any, name: str, kind: str) -> None:
        original = getattr(owner, name)

        @functools.wraps(original)
        def noted(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter() - t0
            try:
                return original(*args, **kwargs)
            finally:
                thread = threading.current_thread().name
                spans.append((kind, thread, start, time.perf_counter() - t0))

        patched.append((owner, name, original))
        setattr(owner, name, noted)

    # A lowering process's steps (its log's lines, lowering_worker.STEP), read as its pool
    # closes, as seconds from t0.
    from jaxtune._tuning.sweep.lowering_worker import STEP

    epoch0 = time.time() - (time.perf_counter() - t0)
    processes: list[dict[str, float]] = []
    pool_start, pool_close = lowering_pool.LoweringPool.start, lowering_pool.LoweringPool.close

    def start(*args: Any, **kwargs: Any) -> Any:
        at = time.time() - epoch0
        pool = pool_start(*args, **kwargs)
        if pool is not None:
            pool._timeline_started = at
        return pool

    def close(pool: Any) -> None:
        for log in pool._logs:
            steps = {"started": getattr(pool, "_timeline_started", 0.0)}
            with contextlib.suppress(OSError, ValueError):
                # pread: the process may still write to the file, at the offset it shares.
                text = os.pread(log.fileno(), os.fstat(log.fileno()).st_size, 0)
                for line in text.decode(errors="replace").splitlines():
                    if line.startswith(STEP):
                        name, _, at = line[len(STEP) :].strip().rpartition(" ")
                        steps[name] = round(float(at) - epoch0, 3)
            processes.append(steps)
        pool_close(pool)

    for name, replacement in (
        ("start", classmethod(lambda cls, *a, **k: start(*a, **k))),
        ("close", close),
    ):
        patched.append(
            (lowering_pool.LoweringPool, name, lowering_pool.LoweringPool.__dict__[name])
        )
        setattr(lowering_pool.LoweringPool, name, replacement)
    wrap(lowering_pool.LoweringPool, "wait", "wait")
    wrap(compile_mod.Compiler, "lower", "lower")
    wrap(compile_mod.Compiler, "compile_one", "compile")
    # Each config's compile: its id, seconds from t0 to its end, how long, and whether it
    # failed (Mosaic refuses a config on scoped VMEM only after compiling it).
    compiles: list[tuple[str, float, float, bool]] = []
    compile_one = compile_mod.Compiler.compile_one

    def noted_compile(self: Any, config: Any, *args: Any, **kwargs: Any) -> Any:
        from jaxtune._core.vocabulary import config_id

        start = time.perf_counter()
        failure = compile_one(self, config, *args, **kwargs)
        end = time.perf_counter()
        compiles.append(
            (config_id(config), round(end - t0, 3), round(end - start, 3), failure is not None)
        )
        return failure

    patched.append((compile_mod.Compiler, "compile_one", compile_one))
    compile_mod.Compiler.compile_one = noted_compile
    wrap(measure.Stopwatch, "captured", "captured")
    wrap(measure.Stopwatch, "rounds", "rounds")
    # Each capture of the device timer: seconds from t0 to its start and end, its calls,
    # the programs in it, and its stop's and read's seconds (a stop costs per program).
    captures: list[tuple[float, float, int, int, float, float]] = []
    captured: list[list[str]] = []  # each capture's configs (ids), in ``captured``
    own_capture = measure.Stopwatch._capture

    # With TIMELINE_PRIME=1, an empty trace is started and stopped before each capture,
    # its stop's seconds noted: is a long stop the trace's content or something before it?
    # (The sweep takes that much longer: a probe, not a measurement of its time.)
    primes: list[tuple[float, float]] = []
    # TIMELINE_PRIME=call: the trace holds one call of a compiled config (device work).
    prime = os.environ.get("TIMELINE_PRIME") in ("1", "call")
    prime_call = os.environ.get("TIMELINE_PRIME") == "call"

    # Each capture's page faults on its thread, the process's resident memory before and
    # after (MB), and how much (MB) the malloc arena that grew most grew, and all of them,
    # in ``memory``: does a long first stop grow the heap?
    memory: list[tuple[int, float, float, float, float]] = []
    # TIMELINE_PREFAULT_MB=N: before the first capture, its thread's malloc arena is grown
    # by N MB, touched and freed, and kept (glibc's trim threshold raised): the seconds,
    # MB and page faults that took, in ``prefault``.
    prefault: list[tuple[float, int, int]] = []
    prefault_mb = int(os.environ.get("TIMELINE_PREFAULT_MB", "0"))

    @contextlib.contextmanager
    def noted_capture(self: Any) -> Iterator[Any]:
        if prefault_mb and not prefault:
            at, faults = time.perf_counter(), _faults()
            _grow_heap(prefault_mb)
            prefault.append((round(time.perf_counter() - at, 3), prefault_mb, _faults() - faults))
        faults, rss, heaps = _faults(), _rss_mb(), _heaps()
        if prime:
            import tempfile

            import jax

            where = tempfile.mkdtemp(prefix="jaxtune-prime-")
            options = jax.profiler.ProfileOptions()
            options.python_tracer_level = 0
            options.host_tracer_level = 0
            jax.profiler.start_trace(where, profiler_options=options)
            if prime_call and self.compiler._runs:
                next(iter(self.compiler._runs.values()))[0]()
            at = time.perf_counter()
            jax.profiler.stop_trace()
            primes.append((round(at - t0, 3), round(time.perf_counter() - at, 3)))
        start = time.perf_counter() - t0
        with own_capture(self) as rec:
            yield rec
        programs = {c.module for c in rec.calls}
        calls = sum(c.warmup + c.batch * len(c.wall.samples_us) for c in rec.calls)
        captures.append(
            (
                round(start, 3),
                round(time.perf_counter() - t0, 3),
                calls,
                len(programs),
                round(rec.stop_s, 3),
                round(rec.read_s, 3),
            )
        )
        by_module = {m: cid for cid, m in self.compiler.names.modules.items()}
        captured.append(sorted(by_module.get(m, str(m)) for m in programs))
        after = _heaps()
        grown = {nr: after[nr] - heaps.get(nr, 0) for nr in after}
        memory.append(
            (
                _faults() - faults,
                rss,
                _rss_mb(),
                round(max(grown.values(), default=0) / 2**20, 1),
                round(sum(grown.values()) / 2**20, 1),
            )
        )

    patched.append((measure.Stopwatch, "_capture", own_capture))
    measure.Stopwatch._capture = noted_capture
    # Each capture's trace: its bytes, each plane's bytes, and the device planes' event
    # metadata (what a long stop built, if it shows in the trace), in ``traces``. The
    # trace is read twice then: the capture's ``capture_read`` grows by this reading.
    from jaxtune._core.xspace import xplane
    from jaxtune._tuning.sweep import timers

    traces: list[dict[str, Any]] = []
    own_executions = timers._executions

    def noted_executions(where: Any) -> Any:
        if isinstance(where, bytes):  # the XSpace itself (timers._stop_trace)
            size, space = len(where), xplane.parse(where)
        else:
            files = [f for f in pathlib.Path(where).rglob("*") if f.is_file()]
            size, space = sum(f.stat().st_size for f in files), xplane.load(where)
        planes = {n: len(raw or b"") for n, raw in zip(space.plane_names, space._raw, strict=True)}
        metadata = {
            p.name: len(p.event_metadata) for p in space.planes(n for n in planes if "TPU" in n)
        }
        traces.append(
            {
                "bytes": size,
                "planes": planes,
                "device_metadata": metadata,
            }
        )
        return own_executions(where)

    patched.append((timers, "_executions", own_executions))
    timers._executions = noted_executions
    # Python's garbage collections that took over 10 ms: seconds from t0 to the start, how
    # long, the generation, and what they freed (a long stop of a trace could be one).
    collections: list[tuple[float, float, int, int]] = []
    began: list[float] = [0.0]

    def collected(phase: str, info: dict[str, int]) -> None:
        now = time.perf_counter()
        if phase == "start":
            began[0] = now
        elif now - began[0] > 0.01:
            collections.append(
                (
                    round(began[0] - t0, 3),
                    round(now - began[0], 3),
                    info["generation"],
                    info["collected"],
                )
            )

    gc.callbacks.append(collected)
    stop = threading.Event()
    # TIMELINE_NATIVE=PREFIX: native stacks of each trace's stop (tools/tpu/native_sampler.c)
    # to PREFIX.stacks, the stops' bounds to PREFIX.stops and /proc/self/maps to PREFIX.maps.
    prefix = os.environ.get("TIMELINE_NATIVE")
    native = _native_stops(prefix) if prefix else None
    if native is not None:
        patched.append(native)

    def sample() -> None:
        last, last_own, last_t = _busy(), _own_cpu(), time.perf_counter()
        while not stop.wait(interval_s):
            now, own, t = _busy(), _own_cpu(), time.perf_counter()
            share = (now[0] - last[0]) / max(now[1] - last[1], 1e-9)
            cpu.append((t - t0, share * cores, (own - last_own) / max(t - last_t, 1e-9)))
            last, last_own, last_t = now, own, t

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        yield
    finally:
        stop.set()
        sampler.join()
        if native is not None:
            jax_profiler = __import__("jax").profiler
            jax_profiler._native_done()
        gc.callbacks.remove(collected)
        for owner, name, original in reversed(patched):
            setattr(owner, name, original)
        with open(path, "w") as f:
            json.dump(
                {
                    "cores": cores,
                    "spans": spans,
                    "cpu": cpu,
                    "summary": summary(spans, cpu),
                    "lowering_processes": processes,
                    "compiles": compiles,
                    "captures": captures,
                    "collections": collections,
                    "primes": primes,
                    "traces": traces,
                    "captured": captured,
                    "memory": memory,
                    "prefault": prefault,
                },
                f,
            )


def _faults() -> int:
    """This thread's minor page faults so far (``/proc/thread-self/stat``)."""
    with open("/proc/thread-self/stat") as f:
        return int(f.read().rpartition(")")[2].split()[7])


def _rss_mb() -> float:
    """This process's resident memory (MB)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return round(int(line.split()[1]) / 1024, 1)
    return 0.0


def _heaps() -> dict[int, int]:
    """The bytes each of glibc's malloc arenas holds from the system (``malloc_info``)."""
    import ctypes
    import re
    import tempfile

    libc = ctypes.CDLL(None)
    libc.fopen.restype = ctypes.c_void_p
    libc.fopen.argtypes = [ctypes.c_char_p, ctypes.c_char_p]
    libc.malloc_info.argtypes = [ctypes.c_int, ctypes.c_void_p]
    libc.fclose.argtypes = [ctypes.c_void_p]
    with tempfile.NamedTemporaryFile(suffix=".xml") as f:
        fp = libc.fopen(f.name.encode(), b"w")
        libc.malloc_info(0, fp)
        libc.fclose(fp)
        text = pathlib.Path(f.name).read_text()
    return {
        int(nr): int(size)
        for nr, size in re.findall(
            r'<heap nr="(\d+)">.*?<system type="current" size="(\d+)"/>', text, re.S
        )
    }


def _grow_heap(mb: int) -> None:
    """Grows this thread's malloc arena by ``mb`` MB of 64 KiB blocks, each written, then
    frees them; glibc keeps them (its trim threshold raised to 2 GiB)."""
    import ctypes

    libc = ctypes.CDLL(None)
    libc.malloc.restype = ctypes.c_void_p
    libc.free.argtypes = [ctypes.c_void_p]
    libc.mallopt(-1, (1 << 31) - 1)  # M_TRIM_THRESHOLD; also stops its dynamic adjustment
    block = 64 * 1024
    blocks = [libc.malloc(block) for _ in range(mb * 1024 * 1024 // block)]
    for b in blocks:
        ctypes.memset(b, 1, block)
    for b in blocks:
        libc.free(b)


def _native_stops(prefix: str) -> tuple[Any, str, Any]:
    """Samples the native stack of the thread stopping a trace every 5 ms
    (a probe: what a long stop does inside libtpu); returns the patch to undo.
    ``jax.profiler._native_done()`` writes the stops' bounds and the process's maps."""
    import ctypes
    import pathlib
    import signal
    import subprocess

    import jax

    library = os.environ.get("TIMELINE_NATIVE_SO", "/tmp/native_sampler.so")
    if not os.path.exists(library):
        source = pathlib.Path(__file__).resolve().parents[1] / "tools/tpu/native_sampler.c"
        subprocess.run(["cc", "-O2", "-shared", "-fPIC", "-o", library, str(source)], check=True)
    lib = ctypes.CDLL(library)
    if lib.sampler_start(f"{prefix}.stacks".encode(), int(signal.SIGUSR2)) != 0:
        raise OSError(ctypes.get_errno(), "the native sampler did not start")
    from jaxtune._tuning.sweep import timers

    # The timer's own stop where it has one (it keeps the trace in memory), else JAX's.
    owner, name = (
        (timers, "_stop_trace") if hasattr(timers, "_stop_trace") else (jax.profiler, "stop_trace")
    )
    own_stop = getattr(owner, name)
    active: list[int | None] = [None]
    stops: list[tuple[int, int]] = []
    done = threading.Event()

    def noted_stop(*args: Any) -> Any:
        start = time.monotonic_ns()
        active[0] = threading.get_ident()
        try:
            return own_stop(*args)
        finally:
            active[0] = None
            stops.append((start, time.monotonic_ns()))

    def watch() -> None:
        while not done.wait(0.005):
            ident = active[0]
            if ident is not None:
                with contextlib.suppress(ProcessLookupError):
                    signal.pthread_kill(ident, signal.SIGUSR2)

    watcher = threading.Thread(target=watch, daemon=True, name="native-sampler")
    watcher.start()

    def finish() -> None:
        done.set()
        watcher.join()
        with open(f"{prefix}.stops", "w") as f:
            json.dump(stops, f)
        with open("/proc/self/maps") as src, open(f"{prefix}.maps", "w") as dst:
            dst.write(src.read())

    jax.profiler._native_done = finish
    setattr(owner, name, noted_stop)
    return (owner, name, own_stop)


def summary(
    spans: list[tuple[str, str, float, float]],
    cpu: list[tuple[float, float, float]],
    bin_s: float = 5.0,
) -> list[dict[str, float]]:
    """Per ``bin_s`` seconds: the host's busy cores, the cores this process kept busy, and
    how many threads were in each step on average (the compiling threads' ``compile``,
    the sweep thread's ``lower`` and ``wait``, the timer's ``captured`` and ``rounds``)."""
    end = max([s[3] for s in spans] + [c[0] for c in cpu] + [0.0])
    out = []
    for k in range(int(end // bin_s) + 1):
        lo, hi = k * bin_s, (k + 1) * bin_s
        row: dict[str, float] = {"t": lo}
        busy = [(c, own) for t, c, own in cpu if lo <= t < hi]
        row["busy_cores"] = round(sum(c for c, _ in busy) / len(busy), 2) if busy else 0.0
        row["own_cores"] = round(sum(own for _, own in busy) / len(busy), 2) if busy else 0.0
        for kind in ("compile", "lower", "wait", "captured", "rounds"):
            inside = sum(max(0.0, min(hi, b) - max(lo, a)) for kd, _, a, b in spans if kd == kind)
            row[kind] = round(inside / bin_s, 2)
        row["compiled"] = sum(1 for kd, _, _, b in spans if kd == "compile" and lo <= b < hi)
        out.append(row)
    return out
