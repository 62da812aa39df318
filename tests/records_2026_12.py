"""What ``tests/data/records-2026-12/`` holds: records of every kind written by the jaxtune
of 2026-12-05 (commit 2971832), before they moved to one typed codec, so that the files
of that format are read as they were (``tests/test_record_formats.py``)."""

from __future__ import annotations

import jax.numpy as jnp

import jaxtune
from jaxtune._core import typed
from jaxtune._core.vocabulary import (
    CaptureInfo,
    Entry,
    Failure,
    Measurement,
    PallasKernel,
    RanConfig,
    SweepValues,
)
from jaxtune._tuning.digest import CodeDigest
from jaxtune._tuning.sweep.samples import TimingOptions
from jaxtune._tuning.sweep.search import Budget
from jaxtune._tuning.sweep.work import SweepPlan


@jaxtune.autotuned(configs={"scale": [1, 2]}, default={"scale": 1}, name="tests.records")
def scaled(x, *, scale):
    """A kernel whose recorded call the folder keeps."""
    return x * scale


def main_program() -> None:
    """The program whose recording the folder keeps (``recording.msgpack``)."""
    import jax

    jax.jit(lambda x: scaled(x) + 1)(jnp.arange(8, dtype=jnp.float32))


def measurements() -> tuple[Measurement | Failure, ...]:
    return (
        Measurement(
            config={"block": (8, 128), "order": "kn", "precision": jax_precision()},
            median_us=12.5,
            min_us=11.0,
            spread=0.04,
            samples=20,
            compile_s=0.3,
            low_us=12.0,
            high_us=13.0,
            rounds_us=(12.4, 12.6, 12.5),
            calls=31,
        ),
        Measurement(
            config={"block": (8, 256), "order": "kn", "precision": jax_precision()},
            median_us=30.0,
            min_us=29.0,
            spread=0.1,
            samples=4,
            compile_s=0.2,
            dropped=True,
            rounds_us=(30.0, 31.0),
            calls=9,
            behind=True,
        ),
        Measurement(
            config={"block": (16, 128), "order": "kn", "precision": jax_precision()},
            median_us=12.5,
            min_us=11.0,
            spread=0.04,
            samples=20,
            compile_s=0.0,
            dropped=True,
            same_as={"block": (8, 128), "order": "kn", "precision": jax_precision()},
        ),
        Failure(
            config={"block": (16, 256), "order": "nk", "precision": None},
            stage="compile",
            reason="VMEM",
        ),
    )


def _values(raw: dict) -> SweepValues:
    """A sweep's values as that jaxtune kept them (a map, read as the typed record now)."""
    return typed.decode(SweepValues, raw)


def jax_precision():
    import jax

    return jax.lax.Precision.HIGHEST


def entries() -> list[Entry]:
    """Two entries with every field set, one with the fewest."""
    full = [
        Entry(
            kernel="tests.records",
            device_kind="cpu",
            key=f"f32[{n},512],bf16[512];transpose=False",
            config={"block": (8, 128), "order": "kn", "precision": jax_precision()},
            time_us=12.5,
            default_config={"block": (16, 256), "order": "nk", "precision": None},
            default_time_us=20.0 + n,
            measurements=measurements(),
            versions={"jax": "0.10.2", "jaxlib": "0.10.2", "libtpu": None},
            created=1_764_900_000.0 + n,
            kernel_version="",
            shapes=(("f32", (n, 512)), ("bf16", (512,))),
            statics="transpose=False",
            search="coordinate",
            space_size=6,
            tie=n == 64,
            speedup_range=(1.5, 1.7),
            decision="tie" if n == 64 else "clear",
            margin={
                "rival": {"block": (8, 256), "order": "kn"},
                "ratio": 2.4,
                "low": 2.2,
                "high": 2.5,
            },
            timer="wall",
            timing="vjp",
            code_digest="c0ffee" * 4,
            code_parts=(
                ("tests.records", "scaled", "ab" * 8),
                ("tests.records", "helper", "cd" * 8),
            ),
            phases={"start": 0.5, "compile": 1.25, "time": 2.0},
            values=_values(
                {
                    "sets": 2,
                    "arguments": {
                        "x": {"source": "recorded", "summary": []},
                        "lengths": {
                            "source": "recorded",
                            "summary": ["s32[8] 1..2048", "s32[8] 2..9"],
                        },
                    },
                }
            ),
        )
        for n in (8, 64)
    ]
    few = Entry(
        kernel="tests.records",
        device_kind="cpu",
        key="f32[4]",
        config={"scale": 2},
        time_us=None,
        default_config={"scale": 1},
        default_time_us=None,
    )
    return [*full, few]


def plan() -> SweepPlan:
    return SweepPlan(
        kernel="tests.records",
        key="f32[8,512]",
        configs=(
            {"block": (8, 128), "dtype": jnp.bfloat16},
            {"block": (16, 128), "dtype": jnp.float32},
        ),
        default={"block": (8, 128), "dtype": jnp.bfloat16},
        shapes=(("f32", (8, 512)),),
        statics="transpose=False",
        timeout_s=30.0,
        options=TimingOptions(),
        verbose=1,
        search="random",
        budget=Budget(configs=16, seconds=None),
        timer="wall",
        timing="vjp",
        compile_threads=2,
        values=_values({"sets": 1, "arguments": {"x": {"source": "caller", "summary": []}}}),
    )


def code_digest() -> CodeDigest:
    return CodeDigest(digest="d1" * 8, parts=(("tests.records", "scaled", "ef" * 8),))


def capture_info() -> CaptureInfo:
    """A capture's sidecar, its recorded call made by the kernel above."""
    import jax

    x = jax.ShapeDtypeStruct((8,), jnp.float32)
    call = scaled.options.bound(scaled.options.bind((x,), {})).recorded_call(scaled.config_for(x))
    return CaptureInfo(
        logdir="/tmp/trace",
        platform="cpu",
        device_kind="cpu",
        hlo={
            "fusion.1": ("jit(f)/jaxtune[tests.records#0123456789]/mul", None),
            "cc.2": ("jit(f)/pallas", "tpu_custom_call"),
        },
        fusions={"fusion.1": ["mul.1", "add.2"]},
        kernels=(
            PallasKernel(
                name="k",
                scope=("jit(f)", "k"),
                inside=None,
                per_step=1,
                cost_estimate={"flops": 16.0},
            ),
        ),
        autotuned={"tests.records": 1},
        costs={"k": {"flops": 16.0, "bytes_accessed": 64.0}},
        sources={"k": "records_2026_12.py:18"},
        hints={"tests.records": {"flops": 8.0}},
        calls=(call,),
        configs={"tests.records": RanConfig(config={"scale": 1}, speedup=None)},
        timings={"capture_s": 1.5},
        env={"XLA_FLAGS": None, "LIBTPU_INIT_ARGS": "--xla_x=1"},
    )
