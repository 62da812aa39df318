"""The sweep: inputs, parallel compilation, numerics check, timing, winner.

Runs wherever the runner puts it. A config that fails is recorded as a :class:`Failure` with
its reason; only "every config failed" raises, listing each reason.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import os
import sys
import time
import zlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TextIO

import jax
import numpy as np

from . import _context
from ._errors import SignatureError, TuningFailedError
from ._result import Failure, Measurement
from ._signature import Signature, dtype_name, is_array
from ._space import config_id
from ._timing import Timing, TimingOptions, WallTimer, block

__all__ = ["SweepOutcome", "SweepTask", "check_outputs", "make_inputs", "run_sweep"]

Config = dict[str, Any]

# Relative tolerance per dtype for check="auto"; the absolute tolerance is the same figure
# times the largest magnitude of the reference, so blocked reductions that only reorder
# additions pass and a wrong tile does not.
_AUTO_TOLERANCE = {
    "f64": 1e-7,
    "f32": 1e-4,
    "c64": 1e-4,
    "c128": 1e-7,
    "f16": 5e-3,
    "bf16": 5e-2,
}
_FP8_TOLERANCE = 0.25


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class SweepTask:
    """Everything a sweep needs about one kernel call."""

    kernel: str
    fn: Callable[..., Any]
    signature: Signature
    configs: tuple[Config, ...]
    default: Config
    check: Any = "auto"
    inputs: Callable[..., Any] | None = None
    timeout_s: float = 60.0
    options: TimingOptions = dataclasses.field(default_factory=TimingOptions)
    verbose: int = 0
    compile_threads: int = 0


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class SweepOutcome:
    """Every config's measurement or failure (space order), the winner and the default."""

    measurements: tuple[Measurement | Failure, ...]
    best: Measurement
    default: Measurement | Failure


def _reason(e: BaseException) -> str:
    text = f"{type(e).__name__}: {e}".strip()
    lines = text.splitlines()
    short = lines[0] if lines else text
    return short[:500] + (" ..." if len(short) > 500 or len(lines) > 1 else "")


def _random_leaf(leaf: Any, rng: np.random.Generator) -> np.ndarray:
    shape, dtype = tuple(leaf.shape), np.dtype(leaf.dtype)
    if dtype == np.bool_:
        return rng.random(shape) < 0.5
    if np.issubdtype(dtype, np.integer):
        info = np.iinfo(dtype)
        return rng.integers(max(info.min, 0), min(info.max, 16), size=shape, endpoint=True).astype(
            dtype
        )
    if np.issubdtype(dtype, np.complexfloating):
        return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dtype)
    # Floats, including ml_dtypes' bfloat16 and float8 types, which numpy casts to.
    return rng.standard_normal(shape).astype(np.float32).astype(dtype)


def make_inputs(task: SweepTask) -> dict[str, Any]:
    """Concrete values for the dynamic arguments: the caller's arrays when it passed
    concrete ones, else ``inputs(...)``, else deterministic random values per dtype.

    Raises:
        SignatureError: ``inputs`` returned values whose shapes/dtypes differ from the call.
    """
    sig = task.signature
    names = list(sig.dynamic)
    values = {n: sig.value(n) for n in names}
    leaves = jax.tree_util.tree_leaves(values)
    if (
        task.inputs is None
        and leaves
        and all(isinstance(x, jax.Array) for x in leaves)
        and not any(isinstance(x, jax.core.Tracer) for x in leaves)
    ):
        return values
    if task.inputs is not None:
        args, kwargs = sig.call_arguments(abstract=True)
        produced = task.inputs(*args, **kwargs)
        return _validate_inputs(sig, produced)
    seed = zlib.crc32(f"{task.kernel}|{sig.key}".encode())
    out: dict[str, Any] = {}
    for i, name in enumerate(names):
        rng = np.random.default_rng(seed + i)
        out[name] = jax.tree_util.tree_map(
            lambda leaf, rng=rng: _random_leaf(leaf, rng), values[name]
        )
    return out


def _validate_inputs(sig: Signature, produced: Any) -> dict[str, Any]:
    if isinstance(produced, Mapping):
        given = dict(produced)
    elif isinstance(produced, (tuple, list)):
        positional = [n for n in sig.names() if n in sig.dynamic]
        if len(produced) != len(positional):
            raise SignatureError(
                f"inputs(...) returned {len(produced)} values, expected {len(positional)} "
                f"(one per array argument: {', '.join(positional)}). Return a tuple in that "
                "order or a dict by argument name."
            )
        given = dict(zip(positional, produced, strict=True))
    else:
        raise SignatureError(
            f"inputs(...) must return a tuple of the array arguments or a dict by name, got "
            f"{type(produced).__name__}."
        )
    for name in sig.dynamic:
        if name not in given:
            raise SignatureError(f"inputs(...) gave no value for argument {name!r}.")
        want = jax.tree_util.tree_leaves(sig.value(name))
        got = jax.tree_util.tree_leaves(given[name])
        if len(want) != len(got) or not all(is_array(g) for g in got):
            raise SignatureError(
                f"inputs(...) returned a different structure for {name!r}: expected "
                f"{len(want)} arrays, got {[type(g).__name__ for g in got]}."
            )
        for w, g in zip(want, got, strict=True):
            if tuple(w.shape) != tuple(g.shape) or np.dtype(w.dtype) != np.dtype(g.dtype):
                raise SignatureError(
                    f"inputs(...) returned {dtype_name(g.dtype)}{list(g.shape)} for {name!r}, "
                    f"expected {dtype_name(w.dtype)}{list(w.shape)} (the shapes of the call "
                    "being tuned)."
                )
    return {n: given[n] for n in sig.dynamic}


def _tolerance(dtype: Any) -> float | None:
    name = dtype_name(dtype)
    if name in _AUTO_TOLERANCE:
        return _AUTO_TOLERANCE[name]
    if name.startswith("f8"):
        return _FP8_TOLERANCE
    return None  # integers and booleans: exact


def check_outputs(out: Any, ref: Any, check: Any) -> str | None:
    """``None`` when ``out`` matches ``ref`` under ``check``, else the reason it does not."""
    if check is False:
        return None
    if callable(check):
        try:
            ok = bool(check(out, ref))
        except Exception as e:
            return f"check callable raised {_reason(e)}"
        return None if ok else "the check callable returned False"
    out_leaves, ref_leaves = jax.tree_util.tree_leaves(out), jax.tree_util.tree_leaves(ref)
    if str(jax.tree_util.tree_structure(out)) != str(jax.tree_util.tree_structure(ref)):
        return "output structure differs from the default config's"
    for i, (o, r) in enumerate(zip(out_leaves, ref_leaves, strict=True)):
        o_np, r_np = np.asarray(o), np.asarray(r)
        if o_np.shape != r_np.shape or o_np.dtype != r_np.dtype:
            return (
                f"output {i} is {dtype_name(o_np.dtype)}{list(o_np.shape)}, the default "
                f"config's is {dtype_name(r_np.dtype)}{list(r_np.shape)}"
            )
        if isinstance(check, Mapping):
            rtol, atol = float(check.get("rtol", 0.0)), float(check.get("atol", 0.0))
        else:
            tol = _tolerance(r_np.dtype)
            if tol is None:
                if not np.array_equal(o_np, r_np):
                    bad = int(np.sum(o_np != r_np))
                    return f"output {i} differs from the default config's in {bad} elements"
                continue
            scale = float(np.max(np.abs(r_np.astype(np.float64)))) if r_np.size else 0.0
            rtol, atol = tol, tol * max(scale, 1.0)
        o64, r64 = (
            o_np.astype(np.complex128 if np.iscomplexobj(o_np) else np.float64),
            r_np.astype(np.complex128 if np.iscomplexobj(r_np) else np.float64),
        )
        err = np.abs(o64 - r64)
        limit = atol + rtol * np.abs(r64)
        finite = np.isfinite(o64) == np.isfinite(r64)
        bad_mask = (err > limit) | ~finite
        if np.any(bad_mask):
            where = tuple(int(x) for x in np.unravel_index(int(np.argmax(bad_mask)), o_np.shape))
            worst = float(np.nanmax(np.where(np.isfinite(err), err, np.inf)))
            return (
                f"output {i} differs from the default config's: max abs error {worst:.3g} "
                f"(first at index {list(where)}) exceeds atol={atol:.3g} + rtol={rtol:.3g}*|ref|"
            )
    return None


class Progress:
    """Live progress on stderr: a rewritten line on a terminal, lines at JAXTUNE_VERBOSE."""

    def __init__(self, label: str, total: int, verbose: int, stream: TextIO | None = None):
        self.label, self.total, self.verbose = label, total, verbose
        self.stream = stream or sys.stderr
        self.live = verbose == 0 and getattr(self.stream, "isatty", lambda: False)()
        self.done = 0
        self.best: float | None = None
        self.start = time.perf_counter()

    def update(self, result: Measurement | Failure) -> None:
        self.done += 1
        if isinstance(result, Measurement) and not result.dropped:
            self.best = result.median_us if self.best is None else min(self.best, result.median_us)
        if self.verbose >= 2:
            if isinstance(result, Measurement):
                what = (
                    f"{result.median_us:.1f} us (min {result.min_us:.1f}, {result.samples} samples"
                )
                what += ", dropped: clearly slower)" if result.dropped else ")"
            else:
                what = f"FAILED at {result.stage}: {result.reason}"
            print(
                f"jaxtune: {self.label} [{self.done}/{self.total}] "
                f"{config_id(result.config)}: {what}",
                file=self.stream,
                flush=True,
            )
        elif self.live:
            best = f", best {self.best:.1f} us" if self.best is not None else ""
            print(
                f"\rjaxtune: tuning {self.label} {self.done}/{self.total}{best}   ",
                end="",
                file=self.stream,
                flush=True,
            )

    def finish(self, outcome: SweepOutcome) -> None:
        if self.live:
            print("\r" + " " * 100 + "\r", end="", file=self.stream, flush=True)
        if self.verbose >= 1:
            d = outcome.default
            speed = (
                f", {d.median_us / outcome.best.median_us:.2f}x over default"
                if isinstance(d, Measurement)
                else ""
            )
            failed = sum(1 for m in outcome.measurements if isinstance(m, Failure))
            print(
                f"jaxtune: tuned {self.label} in {time.perf_counter() - self.start:.1f} s: "
                f"{len(outcome.measurements)} configs ({failed} failed), best "
                f"{config_id(outcome.best.config)} at {outcome.best.median_us:.1f} us{speed}",
                file=self.stream,
                flush=True,
            )


def _compile_all(
    task: SweepTask, configs: Sequence[Config], inputs: dict[str, Any]
) -> list[tuple[Callable[[], Any] | None, float, Failure | None]]:
    sig = task.signature

    def compile_one(config: Config) -> tuple[Callable[[], Any] | None, float, Failure | None]:
        def call(dyn: dict[str, Any]) -> Any:
            args, kwargs = sig.call_arguments(replace=dyn)
            return task.fn(*args, **kwargs, **config)

        start = time.perf_counter()
        try:
            compiled = jax.jit(call).lower(inputs).compile()
        except Exception as e:
            return (
                None,
                time.perf_counter() - start,
                Failure(config=config, stage="compile", reason=_reason(e)),
            )
        elapsed = time.perf_counter() - start
        if elapsed > task.timeout_s:
            return (
                None,
                elapsed,
                Failure(
                    config=config,
                    stage="timeout",
                    reason=f"compiling took {elapsed:.1f} s, over the {task.timeout_s:g} s limit "
                    "(JAXTUNE_TIMEOUT / timeout=)",
                ),
            )
        return (lambda: block(compiled(inputs))), elapsed, None

    threads = task.compile_threads or min(4, os.cpu_count() or 1)
    if threads <= 1 or len(configs) == 1:
        return [compile_one(c) for c in configs]
    local_config = _context.capture()

    def compile_in_context(
        config: Config,
    ) -> tuple[Callable[[], Any] | None, float, Failure | None]:
        with local_config():
            return compile_one(config)

    with concurrent.futures.ThreadPoolExecutor(threads, thread_name_prefix="jaxtune-compile") as ex:
        return list(ex.map(compile_in_context, configs))


def run_sweep(task: SweepTask, *, timer: WallTimer | None = None) -> SweepOutcome:
    """Compiles every config (in parallel threads), checks each against the default config's
    output, times them one at a time with early dropping, re-times the leaders interleaved,
    and returns the outcome.

    Raises:
        TuningFailedError: every config failed; the message lists each config and reason.
        SignatureError: ``inputs`` returned values that do not match the call.
    """
    timer = timer or WallTimer()
    options = task.options
    progress = Progress(f"{task.kernel} {task.signature.key}", len(task.configs), task.verbose)
    inputs = make_inputs(task)
    space = [dict(c) for c in task.configs]
    default_id = config_id(task.default)
    ordered = sorted(range(len(space)), key=lambda i: config_id(space[i]) != default_id)
    extra_default = default_id not in {config_id(c) for c in space}
    to_compile = ([task.default] if extra_default else []) + [space[i] for i in ordered]
    compiled = _compile_all(task, to_compile, inputs)
    results: dict[str, Measurement | Failure] = {}
    runners: dict[str, Callable[[], Any]] = {}
    timings: dict[str, Timing] = {}
    compile_s: dict[str, float] = {}
    reference: Any = None
    have_reference = False
    best: float | None = None
    for index, (config, (run, seconds, failure)) in enumerate(
        zip(to_compile, compiled, strict=True)
    ):
        cid = config_id(config)
        compile_s[cid] = seconds
        result: Measurement | Failure
        if failure is not None or run is None:
            result = failure or Failure(config=config, stage="compile", reason="no executable")
        else:
            start = time.perf_counter()
            try:
                out = run()
                problem = None
                if not have_reference:
                    reference, have_reference = out, True
                else:
                    problem = check_outputs(out, reference, task.check)
                if problem is not None:
                    result = Failure(config=config, stage="check", reason=problem)
                else:
                    timing = timer.measure(run, options, best_us=best)
                    spent = time.perf_counter() - start
                    if spent > task.timeout_s:
                        result = Failure(
                            config=config,
                            stage="timeout",
                            reason=f"running took {spent:.1f} s, over the {task.timeout_s:g} s "
                            "limit (JAXTUNE_TIMEOUT / timeout=)",
                        )
                    else:
                        timings[cid] = timing
                        runners[cid] = run
                        result = _measurement(config, timing, seconds)
                        if not timing.dropped:
                            best = timing.min_us if best is None else min(best, timing.min_us)
            except Exception as e:
                result = Failure(config=config, stage="run", reason=_reason(e))
        results[cid] = result
        if not (extra_default and index == 0):
            progress.update(result)

    _retime_leaders(timings, runners, options, timer)
    for cid, timing in timings.items():
        results[cid] = _measurement(results[cid].config, timing, compile_s[cid])

    measured = [results[config_id(c)] for c in space]
    ok = [m for m in measured if isinstance(m, Measurement) and not m.dropped]
    if not ok:
        raise TuningFailedError(
            f"every config of {task.kernel} failed for {task.signature.key}:\n"
            + "\n".join(
                f"  {config_id(m.config)}: {m.stage}: {m.reason}"
                for m in measured
                if isinstance(m, Failure)
            )
        )
    winner = min(ok, key=lambda m: m.median_us)
    outcome = SweepOutcome(measurements=tuple(measured), best=winner, default=results[default_id])
    progress.finish(outcome)
    return outcome


def _measurement(config: Mapping[str, Any], timing: Timing, compile_s: float) -> Measurement:
    return Measurement(
        config=config,
        median_us=timing.median_us,
        min_us=timing.min_us,
        spread=timing.spread,
        samples=len(timing.samples_us),
        compile_s=compile_s,
        dropped=timing.dropped,
    )


def _retime_leaders(
    timings: dict[str, Timing],
    runners: dict[str, Callable[[], Any]],
    options: TimingOptions,
    timer: WallTimer,
) -> None:
    """Re-times the configs within ``leader_window`` of the best, interleaved, so that a
    burst of machine noise during one config's turn cannot decide the winner."""
    live = {cid: t for cid, t in timings.items() if not t.dropped}
    if len(live) < 2:
        return
    best = min(t.median_us for t in live.values())
    leaders = sorted(
        (cid for cid, t in live.items() if t.median_us <= best * options.leader_window),
        key=lambda cid: live[cid].median_us,
    )[: options.leaders]
    if len(leaders) < 2:
        return
    fresh: dict[str, Timing] = {cid: Timing(samples_us=()) for cid in leaders}
    for _ in range(options.rounds):
        for cid in leaders:
            fresh[cid] = fresh[cid] + timer.measure(runners[cid], options, samples=3)
    for cid in leaders:
        timings[cid] = fresh[cid]
