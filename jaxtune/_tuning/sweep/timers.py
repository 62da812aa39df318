"""Timers: how a sweep measures one compiled config, in a registry with a per-platform
default.

- ``wall``: wall-clock time around each blocking call (short calls batched). What a
  program waits for, dispatch included; the default on CPU.
- ``profiler``: device time. The calls run inside a ``jax.profiler`` trace and each call's
  time is taken from its device events: on TPU and GPU the module's event on the device
  plane's ``XLA Modules`` line, on CPU the span of the executable's op events (one
  ``run_id`` per call) on the ``tf_XLA*`` host lines joined with the call's own event
  (a small program on the calling thread, or the host callbacks of an interpret-mode
  Pallas kernel, leave no op events). The wall clock of a small kernel on
  TPU is mostly dispatch; its device events are not. The default on TPU and GPU.
  The trace is taken with JAX's Python tracer off (:mod:`jaxtune._core.xspace.tracing`)
  and read with jaxtune's trace reader (:mod:`jaxtune._core.xspace.xplane`), its times
  to the picosecond.
- ``cupti``: the profiler timer on an NVIDIA GPU, whose device events JAX's profiler takes
  from CUPTI; refused elsewhere.

A timer's ``device_time`` says whether its samples are the device's own execution times
(the profiler timer on a TPU or GPU), which other work on the host does not lengthen; the
sweep then spares the configs far behind the leaders their second look (see
:class:`~.samples.TimingOptions`).

A timer that offers ``recording()`` (a :class:`RecordingTimer`) lets a sweep time several
configs inside one trace (one interleaved round): every :meth:`measure` inside it returns the wall-clock timing at
once, and the recording's :meth:`Recording.results` gives the device timings when it ends.
"""

from __future__ import annotations

import bisect
import contextlib
import dataclasses
import gc
import math
import pathlib
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Protocol, runtime_checkable

import jax

from ..._core.errors import ConfigSpaceError
from ..._core.flags import normalise_platform
from ..._core.xspace import xplane as _xplane
from ..._core.xspace.tracing import tracer_options
from . import heap
from .in_flight import InFlight, Startable
from .samples import Timing, TimingOptions, clearly_slower

__all__ = [
    "TIMERS",
    "ProfilerTimer",
    "Recording",
    "RecordingTimer",
    "RoundTimer",
    "Timer",
    "WallTimer",
    "device_time",
    "resolve_timer",
    "timer_for",
]


class Timer(Protocol):
    """Measures a blocking call (``run()`` returns once its outputs exist)."""

    #: Whether the samples are the device's own execution times, which other work on the
    #: host does not lengthen (see :func:`device_time`).
    @property
    def device_time(self) -> bool: ...

    def measure(
        self,
        run: Callable[[], Any],
        options: TimingOptions,
        *,
        best_us: float | None = None,
        samples: int | None = None,
    ) -> Timing: ...


@runtime_checkable
class RoundTimer(Timer, Protocol):
    """A timer that times one interleaved round of several configs in passes
    (:meth:`WallTimer.round`)."""

    def round(
        self,
        runs: Sequence[tuple[Callable[[], Any], str | None]],
        options: TimingOptions,
        *,
        samples: int,
    ) -> list[Timing | Exception]: ...


@runtime_checkable
class RecordingTimer(Timer, Protocol):
    """A device timer: its :meth:`measure` takes the calls' ``module`` (to tell them from
    other executables in the trace), and its :meth:`recording` times several configs
    inside one trace (:class:`ProfilerTimer`)."""

    def measure(
        self,
        run: Callable[[], Any],
        options: TimingOptions,
        *,
        best_us: float | None = None,
        samples: int | None = None,
        module: str | None = None,
    ) -> Timing: ...

    def recording(self) -> contextlib.AbstractContextManager[Recording]: ...

    def screen(self, run: Callable[[], Any], options: TimingOptions) -> Timing:
        """``run`` timed by the wall clock with no trace (:meth:`ProfilerTimer.screen`)."""
        ...


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class _Calls:
    """What one ``measure`` ran: ``warmup`` calls, then ``len(samples)`` batches of
    ``batch`` calls, with the wall-clock timing of the batches."""

    module: str | None
    warmup: int
    batch: int
    wall: Timing


@contextlib.contextmanager
def _no_gc() -> Iterator[None]:
    """Python's garbage collector off (as in ``timeit``): a collection of what compiling
    left behind would land in some config's samples."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if collecting:
            gc.enable()


#: A call at least this long (seconds) needs no warm-up call in a round: the warm-up is
#: its round's first sample. At a millisecond a call, the first call after another
#: config's is no slower than the next (pallas-forge's swiglu tiles, 2.5-4 ms: the
#: fastest of the first two calls of a turn put a rival under 1.05x of the best in 3-5 %
#: of rounds, the fastest of the two after it in 7-10 %), and a round costs a third less.
SLOW_CALL_S = 0.001


class WallTimer:
    """Wall-clock timing around ``run()``, which must block until its outputs exist."""

    name = "wall"

    def __init__(self, clock: Callable[[], float] | None = None) -> None:
        import time

        self.clock = clock or time.perf_counter

    @property
    def device_time(self) -> bool:
        """Whether the samples are device time (see :func:`device_time`)."""
        return device_time(self.name, jax.default_backend())

    def measure(
        self,
        run: Callable[[], Any],
        options: TimingOptions,
        *,
        best_us: float | None = None,
        samples: int | None = None,
    ) -> Timing:
        """Times ``run``; stops early when clearly slower than ``best_us``.

        With ``samples`` set, takes exactly that many samples after one warm-up call (used
        for interleaved rounds); otherwise warms up and samples until ``min_time_s``.
        The last warm-up call, timed, sets how many calls a sample batches.
        Python's garbage collector is off meanwhile (as in ``timeit``): a collection of
        what compiling left behind would land in some config's samples.
        """
        return self._calls(run, options, best_us=best_us, samples=samples, module=None).wall

    def round(
        self,
        runs: Sequence[tuple[Callable[[], Any], str | None]],
        options: TimingOptions,
        *,
        samples: int,
    ) -> list[Timing | Exception]:
        """One interleaved round of several configs (``(run, module)`` each; see
        :func:`_round_calls`): each config's wall-clock samples, or the exception its call
        raised. Python's garbage collector is off meanwhile."""
        with _no_gc():
            got = _round_calls(self.clock, runs, options, samples)
        return [c if isinstance(c, Exception) else c.wall for c in got]

    def _calls(
        self,
        run: Callable[[], Any],
        options: TimingOptions,
        *,
        best_us: float | None,
        samples: int | None,
        module: str | None,
    ) -> _Calls:
        with _no_gc():
            return self._timed_calls(run, options, best_us, samples, module)

    def _timed_calls(
        self,
        run: Callable[[], Any],
        options: TimingOptions,
        best_us: float | None,
        samples: int | None,
        module: str | None,
    ) -> _Calls:
        clock = self.clock
        warmup = 1 if samples else max(options.warmup, 1)
        for _ in range(warmup):
            start = clock()
            run()
            first = clock() - start  # the last warm-up call sizes the batches
        # Batch very short calls so that each sample is long enough for the clock.
        batch = _batch(options, first)
        out: list[float] = []
        if samples and first >= SLOW_CALL_S:
            # A round's warm-up of a long call is a sample: caches matter little at that
            # length, and a second call would double the round's cost.
            out.append(first * 1e6)
            warmup = 0
            if first >= options.one_sample_above_s:
                samples = 1
        total = 0.0
        wanted = samples if samples else options.max_samples
        dropped = False
        while len(out) < wanted:
            start = clock()
            for _ in range(batch):
                run()
            elapsed = clock() - start
            total += elapsed
            out.append(elapsed / batch * 1e6)
            if samples:
                continue
            if clearly_slower(out, best_us, options):
                dropped = True
                break
            if len(out) >= options.min_samples and total >= options.min_time_s:
                break
        wall = Timing(samples_us=tuple(out), dropped=dropped)
        return _Calls(module=module, warmup=warmup, batch=batch, wall=wall)


def _batch(options: TimingOptions, first: float) -> int:
    """How many calls a sample batches, given one call's ``first`` seconds: enough for
    ``sample_floor_us``."""
    return max(1, math.ceil(options.sample_floor_us * 1e-6 / max(first, 1e-9)))


def _flight_calls(
    clock: Callable[[], float],
    run: Startable,
    options: TimingOptions,
    samples: int | None,
    module: str | None,
) -> _Calls:
    """One config's calls in flight, as many as :meth:`WallTimer.measure` would make
    judged from its warm-up: one call waited for (its time sizes the batches and the count,
    with the host's wait included, so never fewer calls), then the other warm-up calls and
    the samples' calls started back to back (:class:`~.in_flight.InFlight`). The wall-clock
    samples are the calls' mean time (the device's come from the trace). What a call raises
    is raised."""
    warmup = 1 if samples else max(options.warmup, 1)
    start = clock()
    run()
    first = clock() - start
    batch = _batch(options, first)
    if samples:
        wanted, taken = samples, 0
        if first >= SLOW_CALL_S:  # as in a round: the warm-up is a sample
            warmup, taken = 0, 1
            wanted = 1 if first >= options.one_sample_above_s else samples
    else:
        enough = math.ceil(options.min_time_s / max(first * batch, 1e-9))
        wanted, taken = min(options.max_samples, max(options.min_samples, enough)), 0
    flight = InFlight()
    count = max(0, warmup - 1) + (wanted - taken) * batch
    start = clock()
    try:
        for _ in range(count):
            flight.call(None, run)
    finally:  # a call refused when started leaves none in flight behind it
        failed = flight.drain()
    if failed:
        raise next(iter(failed.values()))
    mean = (clock() - start) / count if count else first
    wall = Timing(samples_us=(first * 1e6,) * taken + (mean * 1e6,) * (wanted - taken))
    return _Calls(module=module, warmup=warmup, batch=batch, wall=wall)


def _round_calls(
    clock: Callable[[], float],
    runs: Sequence[tuple[Callable[[], Any], str | None]],
    options: TimingOptions,
    samples: int,
    flight: InFlight | None = None,
) -> list[_Calls | Exception]:
    """One interleaved round of several configs: a warm-up call each (it sizes the
    config's batches), then passes over the configs in the given order, so that every
    config meets the same state of the machine. Each config takes samples until they add
    up to at least ``round_floor_us`` of its calls (short calls get more samples, whose
    fastest is steadier), between ``samples`` and ``round_max_samples``; the longest
    config's count sets the passes, one sample of it a pass, and a shorter config spreads
    its samples evenly over them (several in a row a pass). A config whose call raises
    leaves the round with its exception.

    With ``flight`` (a device timer's calls, whose times the trace holds), the calls after
    the warm-ups are started back to back and waited for a few at a time; the wall-clock
    samples are then the warm-up's time (the device's come from the trace)."""
    failed: dict[int, Exception] = {}
    firsts: list[float] = []
    for i, (run, _) in enumerate(runs):
        start = clock()
        try:
            run()
        except Exception as e:
            failed[i] = e
        firsts.append(clock() - start)
    batches = [_batch(options, first) for first in firsts]

    def samples_for(sample_us: float) -> int:
        floor = math.ceil(options.round_floor_us / max(sample_us, 1e-3))
        return max(samples, min(options.round_max_samples, floor))

    lengths_us = [first * batch * 1e6 for first, batch in zip(firsts, batches, strict=True)]
    # A config that failed its warm-up is out: it sizes nothing.
    racing = [i for i in range(len(runs)) if i not in failed]
    passes = samples_for(max((lengths_us[i] for i in racing), default=0.0))
    # A call at least SLOW_CALL_S long needs no warm-up: its first call is a sample; one at
    # least ``one_sample_above_s`` long needs no other.
    slow = [first >= SLOW_CALL_S for first in firsts]
    wanted = [
        1 if first >= options.one_sample_above_s else samples_for(length)
        for first, length in zip(firsts, lengths_us, strict=True)
    ]
    out: list[list[float]] = [
        [first * 1e6] if s else [] for first, s in zip(firsts, slow, strict=True)
    ]
    for done in range(passes):
        for i in racing:
            # What is left of its samples, spread evenly over the passes left.
            for _ in range(math.ceil((wanted[i] - len(out[i])) / (passes - done))):
                if i in failed:
                    break
                start = clock()
                try:
                    for _ in range(batches[i]):
                        if flight is None:
                            runs[i][0]()
                        else:
                            flight.call(i, runs[i][0])  # type: ignore[arg-type]
                except Exception as e:
                    failed[i] = e
                    break
                spent = clock() - start if flight is None else firsts[i] * batches[i]
                out[i].append(spent / batches[i] * 1e6)
    if flight is not None:
        for i, raised in flight.drain().items():
            failed.setdefault(i, raised)
    return [
        failed[i]
        if i in failed
        else _Calls(
            module=module,
            warmup=0 if slow[i] else 1,
            batch=batches[i],
            wall=Timing(samples_us=tuple(out[i])),
        )
        for i, (_, module) in enumerate(runs)
    ]


class Recording:
    """The calls of several ``measure`` calls inside one trace; :meth:`results` gives
    their device timings, in the order they were measured."""

    def __init__(self, timer: ProfilerTimer, *, in_flight: bool = False) -> None:
        self.timer = timer
        #: Whether calls that can be started without waiting (:class:`~.in_flight.Startable`)
        #: run in flight (:class:`~.in_flight.InFlight`): where the trace's device planes
        #: time each call.
        self.in_flight = in_flight
        self.calls: list[_Calls] = []
        self._failed: dict[int, Exception] = {}  # by id of the run, for :meth:`round`
        self._results: list[Timing] | None = None
        #: The seconds every execution in the trace took on the device, and the seconds
        #: the trace took to stop and to read (once it ended).
        self.device_s = 0.0
        self.stop_s = 0.0
        self.read_s = 0.0

    def measure(
        self,
        run: Callable[[], Any],
        options: TimingOptions,
        *,
        samples: int | None = None,
        module: str | None = None,
    ) -> Timing:
        """Runs as :meth:`WallTimer.measure` does (in flight: as many calls as its
        warm-up call's time says it would make, started back to back, :func:`_flight_calls`);
        returns the wall-clock timing now."""
        if self.in_flight and isinstance(run, Startable):
            with _no_gc():
                calls = _flight_calls(self.timer.clock, run, options, samples, module)
        else:
            calls = self.timer._calls(run, options, best_us=None, samples=samples, module=module)
        self.calls.append(calls)
        return calls.wall

    def round(
        self,
        runs: Sequence[tuple[Callable[[], Any], str | None]],
        options: TimingOptions,
        *,
        samples: int,
    ) -> list[Timing | Exception]:
        """Runs as :meth:`WallTimer.round` does; the configs that ran count as measured,
        in order, for :meth:`results`."""
        # A config that failed in an earlier round of this recording is not called again:
        # its calls there are in the trace, and no measure of it would account for them.
        live = [(run, module) for run, module in runs if id(run) not in self._failed]
        flight = None
        if self.in_flight and all(isinstance(run, Startable) for run, _ in live):
            flight = InFlight()
        with _no_gc():
            got = iter(_round_calls(self.timer.clock, live, options, samples, flight))
        out: list[Timing | Exception] = []
        for run, _ in runs:
            c = self._failed.get(id(run)) or next(got)
            if isinstance(c, Exception):
                self._failed[id(run)] = c
                out.append(c)
            else:
                self.calls.append(c)
                out.append(c.wall)
        return out

    def results(self) -> list[Timing]:
        """The device timing of each ``measure`` (after the recording ended)."""
        if self._results is None:
            raise RuntimeError("the recording has not ended")
        return self._results


class ProfilerTimer(WallTimer):
    """Device time from the events of a ``jax.profiler`` trace of the timed calls."""

    name = "profiler"

    def __init__(self, clock: Callable[[], float] | None = None, *, name: str = "profiler"):
        super().__init__(clock)
        self.name = name

    def measure(
        self,
        run: Callable[[], Any],
        options: TimingOptions,
        *,
        best_us: float | None = None,
        samples: int | None = None,
        module: str | None = None,
    ) -> Timing:
        """Times ``run`` inside a trace of its own; early dropping compares the device
        samples with ``best_us`` afterwards."""
        with self.recording() as rec:
            rec.measure(run, options, samples=samples, module=module)
        timing = rec.results()[0]
        if not samples and clearly_slower(timing.samples_us, best_us, options):
            timing = dataclasses.replace(timing, dropped=True)
        return timing

    def screen(self, run: Callable[[], Any], options: TimingOptions) -> Timing:
        """Times ``run`` by the wall clock with no trace: its calls started back to back
        (:func:`_flight_calls`) where they can be, else one at a time. Of calls long enough
        that the host's part is hidden behind the device's work, this is the device's time
        to within a few per cent, without a capture's cost (a sweep's first pass screens
        with it: :class:`~.samples.TimingOptions`)."""
        if isinstance(run, Startable):
            with _no_gc():
                return _flight_calls(self.clock, run, options, None, None).wall
        return WallTimer.measure(self, run, options)

    def ready(self, programs: int) -> float:
        """Readies the calling thread for a trace of up to ``programs`` programs; returns
        the seconds it took. On a TPU, whose trace's first stop grows the stopping
        thread's malloc heap (:mod:`.heap`), the heap is grown beforehand
        (:meth:`.measure.Stopwatch.ready` says when); elsewhere nothing is done."""
        if normalise_platform(jax.default_backend()) != "tpu":
            return 0.0
        return heap.warm(programs * heap.MIB_PER_PROGRAM)

    @contextlib.contextmanager
    def recording(self) -> Iterator[Recording]:
        """A trace around the ``measure`` calls made on the yielded recording.

        On a TPU, whose device planes time each call, the calls run in flight and the
        host tracer is off (the trace's stop took 0.28-0.44 s at level 0 against 0.53-0.96 s
        at jaxtune's level 2 for 224-1088 calls on a TPU v5e, ``tools/tpu/probe_capture.py``);
        elsewhere (CPU's calls are timed from host events) they are waited for one at a
        time, with the host tracer on."""
        on_tpu = normalise_platform(jax.default_backend()) == "tpu"
        rec = Recording(self, in_flight=on_tpu)
        options = tracer_options(hlo_proto=False, host_tracer_level=0 if on_tpu else None)
        where = pathlib.Path(tempfile.mkdtemp(prefix="jaxtune-timer-"))
        try:
            jax.profiler.start_trace(str(where), profiler_options=options)
            try:
                yield rec
            finally:
                stop = time.perf_counter()
                trace = _stop_trace(where)
                rec.stop_s = time.perf_counter() - stop
            read = time.perf_counter()
            executions = _executions(trace)
            rec._results = device_timings(rec.calls, executions)
            rec.device_s = sum(duration for _, _, duration in executions) / 1e9
            rec.read_s = time.perf_counter() - read
        finally:
            shutil.rmtree(where, ignore_errors=True)


def _stop_trace(where: pathlib.Path) -> bytes | pathlib.Path:
    """Stops JAX's running trace; returns its XSpace, serialized, or where JAX wrote it.

    ``jax.profiler.stop_trace`` also turns the trace into a gzipped JSON file for
    TensorBoard, which a timer never reads, and writes both out. Where this JAX keeps its
    session as 0.10 (``_profile_state.profile_session``) and 0.12
    (``_profile_state.session._raw_session``) do, the session is stopped here instead, as
    JAX's own ``stop_and_get_fdo_profile`` does, and its XSpace kept in memory (Tokamax's
    ragged_dot on the lent TPU v5e: the stops of a first sweep took 43.7 s instead of
    49.2 s, the sweep 82.9 s instead of 89.5 s). Elsewhere ``stop_trace`` runs and the
    trace is read from ``where``."""
    from jax._src import profiler as jax_profiler

    state = getattr(jax_profiler, "_profile_state", None)
    clear = getattr(jax_profiler, "clear_metadata", None)
    lock = getattr(state, "lock", None)
    if state is not None and lock is not None and clear is not None:
        with lock:
            wrapper = getattr(state, "session", None)
            raw = (
                getattr(wrapper, "_raw_session", None)
                if wrapper is not None
                else getattr(state, "profile_session", None)
            )
            stop = getattr(raw, "stop", None)
            if callable(stop):
                try:
                    return bytes(stop())
                finally:
                    if wrapper is not None:
                        wrapper._is_running = False
                        wrapper._raw_session = None
                    state.reset()
                    clear()
    jax.profiler.stop_trace()
    return where


def _executions(trace: bytes | pathlib.Path) -> list[tuple[str, float, float]]:
    """``(module, start_ns, duration_ns)`` of every executable run in ``trace`` (an XSpace,
    serialized, or the directory a trace was written under), in start order, read with
    jaxtune's trace reader (:mod:`jaxtune._core.xspace`); starts are nanoseconds from the
    earliest line of the trace, to the picosecond.

    Raises:
        RuntimeError: no trace is there.
    """
    if isinstance(trace, bytes):
        if not trace:
            raise RuntimeError("jax.profiler returned an empty trace")
        return _walk(_xplane.parse(trace))
    try:
        space = _xplane.load(trace)
    except FileNotFoundError:
        raise RuntimeError(f"jax.profiler wrote no trace under {trace}") from None
    return _walk(space)


#: The host's event for one call of a jitted function: ``PjitFunction(jit(f))``.
_CALL_PREFIX, _CALL_SUFFIX = "PjitFunction(jit(", "))"


def _walk(space: _xplane.Space) -> list[tuple[str, float, float]]:
    """The executions of a trace: the device planes' ``XLA Modules`` events, or where there
    are none (CPU), the host's calls joined with their ops (:func:`_host_executions`).

    Times are taken relative to the trace's earliest line (``timestamp_ns`` is epoch
    scale: in picoseconds it would not fit an int64, and as a float it would lose the
    offsets' resolution)."""
    planes = space.planes(
        n for n in space.plane_names if n.startswith("/device:") or n.startswith("/host:")
    )
    origin = min((line.timestamp_ns for p in planes for line in p.lines), default=0)
    device: list[tuple[str, float, float]] = []
    host: dict[Any, list[Any]] = {}
    calls: list[tuple[str, float, float]] = []
    for plane in planes:
        on_device = plane.name.startswith("/device:")
        for line in plane.lines:
            shift_ns = float(line.timestamp_ns - origin)
            if on_device and line.name != "XLA Modules":
                continue
            if on_device or not line.name.startswith("tf_XLA"):
                cols = plane.columns(line, drop=True)
                for offset_ps, duration_ps, mid in cols.tolist():
                    name = plane.metadata(mid).name
                    start = shift_ns + offset_ps / 1e3
                    if on_device:
                        device.append((name.split("(")[0], start, duration_ps / 1e3))
                    elif name.startswith(_CALL_PREFIX) and name.endswith(_CALL_SUFFIX):
                        module = "jit_" + name[len(_CALL_PREFIX) : -len(_CALL_SUFFIX)]
                        calls.append((module, start, duration_ps / 1e3))
                continue
            for e in plane.events(line, drop=True):
                name = plane.metadata(e.metadata_id).name
                start = shift_ns + e.offset_ps / 1e3
                if name.startswith(_CALL_PREFIX) and name.endswith(_CALL_SUFFIX):
                    module = "jit_" + name[len(_CALL_PREFIX) : -len(_CALL_SUFFIX)]
                    calls.append((module, start, e.duration_ps / 1e3))
                    continue
                stats = _xplane.stats_of(e.stats, plane.stat_names)
                run_id = stats.get("run_id")
                if run_id is None:
                    continue
                span = host.setdefault((stats.get("hlo_module"), run_id), [math.inf, -math.inf])
                span[0] = min(span[0], start)
                span[1] = max(span[1], start + e.duration_ps / 1e3)
    if not device:
        device = _host_executions(host, calls)
    device.sort(key=lambda x: x[1])
    return device


def _host_executions(
    spans: dict[Any, list[Any]], calls: list[tuple[str, float, float]]
) -> list[tuple[str, float, float]]:
    """CPU executions: per call of a module, from its call event to the end of the last
    op that started before the next call (the ops of one execution share a ``run_id``;
    an interpret-mode Pallas kernel runs more executions, and host callbacks, inside one
    call). A small program on the calling thread leaves only its call's event; without
    call events, each execution's ops are one call."""
    ops: dict[str, list[tuple[float, float]]] = {}
    for (module, _), (start, end) in spans.items():
        ops.setdefault(str(module), []).append((start, end))
    made: dict[str, list[tuple[float, float]]] = {}
    for module, start, duration in calls:
        made.setdefault(module, []).append((start, start + duration))
    every_op = sorted(x for spans_ in ops.values() for x in spans_)
    starts = [s for s, _ in every_op]
    anchors = sorted(
        (start, end, module)
        for module in made.keys() - {"None"}
        for start, end in _outermost(sorted(made[module]))
    )
    out: list[tuple[str, float, float]] = []
    for module in ops.keys() - made.keys() - {"None"}:  # no call events: ops alone
        out += [(module, s, e - s) for s, e in sorted(ops[module])]
    for k, (start, end, module) in enumerate(anchors):
        # Calls are made one at a time: a call's work ends before the next call starts.
        stop = anchors[k + 1][0] if k + 1 < len(anchors) else math.inf
        first, last = bisect.bisect_left(starts, start), bisect.bisect_left(starts, stop)
        out.append((module, start, max([end, *(e for _, e in every_op[first:last])]) - start))
    return out


def _outermost(spans: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """Sorted spans with the ones nested in an earlier span left out (a call's event
    may appear twice, one inside the other)."""
    out: list[tuple[float, float]] = []
    for start, end in spans:
        if out and start < out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, end))
    return out


def device_timings(
    calls: Sequence[_Calls], executions: Sequence[tuple[str, float, float]]
) -> list[Timing]:
    """Each ``measure``'s samples from the executions of the trace, matched in order
    per module (calls that name none: the most frequent module): a sample is the mean device time of its
    batch's calls, warm-up calls excluded.

    Raises:
        RuntimeError: the trace holds fewer executions than the calls made.
    """
    by_module: dict[str | None, list[float]] = {}
    for module, _, duration in executions:
        by_module.setdefault(module, []).append(duration / 1e3)
    # Calls that name no module are the trace's most frequent one (other executables, a
    # copy or a conversion, may run once or twice meanwhile).
    if by_module:
        by_module[None] = max(by_module.values(), key=len)
    taken: dict[str | None, int] = {}
    out: list[Timing] = []
    for c in calls:
        key = c.module if c.module in by_module else None
        durations = by_module.get(key, [])
        i = taken.get(key, 0) + c.warmup
        n = c.batch * len(c.wall.samples_us)
        if i + n > len(durations):
            raise RuntimeError(
                f"the trace holds {len(durations)} executions of {key or 'any module'}, "
                f"fewer than the {i + n} calls made"
            )
        batches = [durations[i + b * c.batch : i + (b + 1) * c.batch] for b in range(n // c.batch)]
        taken[key] = i + n
        out.append(Timing(samples_us=tuple(sum(b) / len(b) for b in batches)))
    return out


#: Timer names and what they build.
TIMERS: dict[str, Callable[[], Timer]] = {
    "wall": WallTimer,
    "profiler": ProfilerTimer,
    "cupti": lambda: ProfilerTimer(name="cupti"),
}


def resolve_timer(name: str, platform: str) -> str:
    """The timer a name means on ``platform`` (``auto``: ``profiler`` on TPU and GPU,
    ``wall`` elsewhere).

    Raises:
        ConfigSpaceError: an unknown name, or ``cupti`` off an NVIDIA GPU.
    """
    if name == "auto":
        return "profiler" if normalise_platform(platform) in ("tpu", "gpu") else "wall"
    if name not in TIMERS:
        raise ConfigSpaceError(
            f"timer={name!r} is not a timer: use one of 'auto', {', '.join(map(repr, TIMERS))}."
        )
    if name == "cupti" and platform not in ("gpu", "cuda"):
        raise ConfigSpaceError(
            f"timer='cupti' needs an NVIDIA GPU; this backend is {platform!r}. Use "
            "timer='profiler' (device events of a jax.profiler trace) or 'wall'."
        )
    return name


def device_time(name: str, platform: str | None) -> bool:
    """Whether the timer a name means on ``platform`` (``None``: not known) takes its
    samples from the device's own clock: the profiler timer on a TPU or GPU, whose samples
    are the calls' device events. Its samples on CPU are the host threads' op events, and
    the wall timer's the host's clock: other work on the host lengthens both."""
    on_device = normalise_platform(platform) in ("tpu", "gpu")
    return on_device and name in ("auto", "profiler", "cupti")


def timer_for(name: str, platform: str | None = None) -> Timer:
    """A timer by name (``auto`` resolved for ``platform``, default: JAX's backend)."""
    return TIMERS[resolve_timer(name, platform or jax.default_backend())]()
