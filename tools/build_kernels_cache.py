"""Builds the packaged cache of :mod:`jaxtune.kernels` (issue 60, item 2): tunes the kernels
over a grid of common shapes on this machine's chip, into a fresh cache directory, and
exports it with ``jaxtune cache export --dir`` to ``jaxtune/kernels/data/cache/`` (the
folder ``import jaxtune.kernels`` registers; see docs/kernels.md, "Packaged configs").

On the chip, from the repository root (after ``. tools/tpu/env.sh`` on a machine without
network access)::

    python3 tools/build_kernels_cache.py                      # the small grid, both kernels
    python3 tools/build_kernels_cache.py --grid full --only gmm
    python3 tools/build_kernels_cache.py --dry --out /tmp/kc  # CPU, interpret mode, tiny shapes

What it tunes, one sweep per shape, in this process (which holds the chip, so the sweeps
run in it, ``JAXTUNE_ISOLATION=inline``):

- ``flash``: :func:`jaxtune.kernels.flash_attention` under ``jax.grad`` (a training step's
  call: forward and backward timed, the entry answers inference calls too), bf16
  ``[batch, heads, seq, head_dim]``, ``sm_scale = 1 / sqrt(head_dim)``, causal and not;
- ``gmm``: :func:`jaxtune.kernels.gmm` forward, bf16 ``lhs [tokens, d_in]`` by
  ``rhs [experts, d_in, d_out]`` (an MoE layer's up and down projections, and two of the
  shapes Tokamax ships v5e configs for), on two group-size sets timed as a mix: even, and
  skewed (expert ``i`` gets a share ``1 / (i + 1)``): the values a router gives, never
  made-up integers (docs/values.md).

The grid is ordered by priority (the shapes ``bench/bench_kernels_tpu.py`` compares come
first), and a shape whose estimated sweep would end past ``--deadline-s`` is skipped and
listed, so that a run fits one device call; the sweeps' entries are exported in any case.
A shape the table (``--out``) already holds, current for this toolchain, is kept and not
swept again (``--retune`` sweeps it), as is one already tuned in ``--cache-dir`` (a run
cut short, given the same directory): a second run completes a grid the first could not.
The export merges: each entry replaces the table's entry of its kernel, chip and key, and
the table's other entries stay. ``--out``/``BUILD.json`` records each run's device,
versions, date, grid and what it skipped.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.metadata
import json
import math
import os
import pathlib
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

DRY = "--dry" in sys.argv
if DRY:
    os.environ["JAX_PLATFORMS"] = "cpu"
# The process holds the chip (the sweeps' arrays live there): the sweeps run in it.
os.environ.setdefault("JAXTUNE_ISOLATION", "inline")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

#: Seconds a sweep spends per config on the lent v5e, the estimate until this run has
#: measured its own (compiling dominates): a model search proposes at most 8 configs at a
#: time, so it compiles fewer at once than the exhaustive sweeps of docs/benchmarks.md
#: (flash attention under ``jax.grad``, 16 configs in 14.5 s; megablox gmm, 48 tilings in
#: about 35 s), and took 1.38 s a config there (Tokamax's ragged dot, 64 of 540 in 88 s).
SECONDS_PER_CONFIG = {"flash": 1.3, "gmm": 1.0}
#: A sweep's fixed cost beyond its configs (the first call, the check, the rounds' floor).
SECONDS_PER_SHAPE = 3.0
#: What a shape costs in the dry run (CPU, interpret mode), for the estimate only.
DRY_SECONDS = {"flash": 40.0, "gmm": 15.0}
#: The cache ids of the kernels the grid tunes.
KERNEL_IDS = {"flash": "jaxtune.kernels.flash_attention", "gmm": "jaxtune.kernels.gmm"}


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Flash:
    """One flash attention shape: q, k, v bf16 ``[batch, heads, seq, head_dim]``."""

    batch: int
    heads: int
    seq: int
    head_dim: int
    causal: bool

    kernel = "flash"

    @property
    def label(self) -> str:
        mask = "causal" if self.causal else "full"
        return f"flash [{self.batch},{self.heads},{self.seq},{self.head_dim}] {mask}"


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Gmm:
    """One grouped matmul shape: lhs ``[tokens, d_in]``, rhs ``[experts, d_in, d_out]``."""

    tokens: int
    d_in: int
    d_out: int
    experts: int

    kernel = "gmm"

    @property
    def label(self) -> str:
        return f"gmm [{self.tokens},{self.d_in}] @ [{self.experts},{self.d_in},{self.d_out}]"


Shape = Flash | Gmm


def _flash_grid(batch: int, heads: int, seqs: tuple[int, ...], dims: tuple[int, ...]):
    """Causal before full, the larger head dimension first, shorter sequences first."""
    return [
        Flash(batch=batch, heads=heads, seq=s, head_dim=d, causal=c)
        for d in dims
        for c in (True, False)
        for s in seqs
    ]


def _moe(tokens: int, d_model: int, d_ff: int, experts: int) -> list[Gmm]:
    """An MoE layer's up and down projections."""
    return [
        Gmm(tokens=tokens, d_in=d_model, d_out=d_ff, experts=experts),
        Gmm(tokens=tokens, d_in=d_ff, d_out=d_model, experts=experts),
    ]


#: Tokamax's shipped TPU v5e ragged_dot shapes that fit a sweep's minute (its
#: ``tpu_v5_lite/pallas_mosaic_tpu_ragged_dot.json``), compared in bench_kernels_tpu.py.
TOKAMAX_SHAPES = [
    Gmm(tokens=8192, d_in=4096, d_out=14336, experts=8),
    Gmm(tokens=4096, d_in=4096, d_out=4096, experts=8),
]


def grid(name: str) -> list[Shape]:
    """The shapes of a grid, in the order they are tuned."""
    if name == "dry":
        return [
            Flash(batch=1, heads=2, seq=256, head_dim=128, causal=True),
            Gmm(tokens=512, d_in=256, d_out=256, experts=4),
            Flash(batch=1, heads=2, seq=256, head_dim=128, causal=False),
        ]
    flash = _flash_grid(2, 8, (1024, 2048, 4096), (128, 64))
    up, down = _moe(8192, 2048, 4096, 8)
    small: list[Shape] = [
        flash[1],  # [2,8,2048,128] causal: the NNX step's nearest (bench_kernels_tpu.py)
        up,  # the MoE-like layer bench_kernels_tpu.py times
        *TOKAMAX_SHAPES,
        down,
        *_moe(8192, 2048, 1024, 64),
        *(s for s in flash if s is not flash[1]),
    ]
    if name == "small":
        return small
    more_flash = [
        *_flash_grid(2, 8, (512, 8192), (128, 64)),
        *_flash_grid(8, 16, (1024, 2048, 4096), (128,)),
        *_flash_grid(1, 8, (2048, 4096, 8192), (256,)),
    ]
    more_gmm = [
        *_moe(8192, 4096, 14336, 8)[1:],
        *_moe(16384, 2048, 1024, 64),
        *_moe(8192, 1024, 512, 32),
        *_moe(4096, 4096, 1536, 128),
    ]
    return [*small, *more_flash, *more_gmm]


def skewed_groups(groups: int, rows: int) -> np.ndarray:
    """Group sizes summing to ``rows``, expert ``i`` taking a share ``1 / (i + 1)``: a
    router's skew (the first expert gets the remainder)."""
    weights = 1.0 / np.arange(1, groups + 1)
    sizes = np.floor(rows * weights / weights.sum()).astype(np.int32)
    sizes[0] += rows - int(sizes.sum())
    return sizes


def even_groups(groups: int, rows: int) -> np.ndarray:
    sizes = np.full((groups,), rows // groups, np.int32)
    sizes[: rows % groups] += 1
    return sizes


def _dtype() -> Any:
    """gmm's inputs: bf16, float32 in the dry run (interpret mode's bf16 matmuls are slow
    on a CPU). Flash attention's are bf16 in both, as bench_kernels_tpu.py's NNX step's."""
    return jnp.float32 if DRY else jnp.bfloat16


def tune_flash(shape: Flash, retune: bool) -> Any:
    """Sweeps flash attention at ``shape`` under ``jax.grad``; the entry."""
    import jaxtune
    from jaxtune.kernels import flash_attention

    keys = jax.random.split(jax.random.key(0), 3)
    dims = (shape.batch, shape.heads, shape.seq, shape.head_dim)
    q, k, v = (jax.random.normal(key, dims, jnp.bfloat16) for key in keys)
    scale = 1.0 / math.sqrt(shape.head_dim)

    def loss(q: Any, k: Any, v: Any) -> Any:
        out = flash_attention(q, k, v, causal=shape.causal, sm_scale=scale)
        return out.astype(jnp.float32).sum()

    result = jaxtune.tune(jax.grad(loss, argnums=(0, 1, 2)), q, k, v, retune=retune)
    return _only(result, "jaxtune.kernels.flash_attention")


def tune_gmm(shape: Gmm, retune: bool) -> Any:
    """Sweeps gmm at ``shape`` on even and skewed group sizes, timed as a mix; the entry."""
    import jaxtune
    from jaxtune.kernels import gmm

    # Drawn on the device: the largest rhs holds 470M values, a host's draw takes seconds.
    k1, k2 = jax.random.split(jax.random.key(0))
    lhs = jax.random.normal(k1, (shape.tokens, shape.d_in), _dtype())
    rhs = jax.random.normal(k2, (shape.experts, shape.d_in, shape.d_out), _dtype())
    even = jnp.asarray(even_groups(shape.experts, shape.tokens))
    skewed = jnp.asarray(skewed_groups(shape.experts, shape.tokens))

    def layer(lhs: Any, rhs: Any, even: Any, skewed: Any) -> Any:
        return gmm(lhs, rhs, even), gmm(lhs, rhs, skewed)

    result = jaxtune.tune(layer, lhs, rhs, even, skewed, retune=retune)
    return _only(result, "jaxtune.kernels.gmm")


def _only(result: Any, kernel: str) -> Any:
    entries = [e for e in result.values() if e.kernel == kernel]
    if len(entries) != 1:
        raise RuntimeError(f"expected one {kernel} entry, got {len(entries)}: {result!r}")
    return entries[0]


def existing(shape: Shape, sources: tuple[str, ...]) -> Any:
    """The shape's current entry where the lookup finds it in one of ``sources``
    (``"cache"``: ``--cache-dir``, a run cut short; ``"packaged"``: the table), else
    ``None``: an entry tuned with another toolchain, or for the forward pass only of flash
    attention, is no entry here."""
    from jaxtune.kernels import autotuned_flash_attention, autotuned_gmm

    if isinstance(shape, Flash):
        dims = (shape.batch, shape.heads, shape.seq, shape.head_dim)
        q = jax.ShapeDtypeStruct(dims, jnp.bfloat16)
        scale = 1.0 / math.sqrt(shape.head_dim)
        choice = autotuned_flash_attention.config_for(q, q, q, causal=shape.causal, sm_scale=scale)
    else:
        lhs = jax.ShapeDtypeStruct((shape.tokens, shape.d_in), _dtype())
        rhs = jax.ShapeDtypeStruct((shape.experts, shape.d_in, shape.d_out), _dtype())
        sizes = jax.ShapeDtypeStruct((shape.experts,), jnp.int32)
        choice = autotuned_gmm.config_for(lhs, rhs, sizes)
    entry = choice.entry
    if choice.source not in sources or entry is None or choice.stale:
        return None
    if isinstance(shape, Flash) and entry.timing != "vjp":
        return None
    return entry


def space_size(shape: Shape) -> int:
    """How many configs the kernel's space holds at ``shape`` (a sweep measures at most
    that many, whatever its budget)."""
    from jaxtune.kernels import autotuned_flash_attention, autotuned_gmm

    if isinstance(shape, Flash):
        dims = (shape.batch, shape.heads, shape.seq, shape.head_dim)
        q = jax.ShapeDtypeStruct(dims, jnp.bfloat16)
        return len(autotuned_flash_attention.space(q, q, q, causal=shape.causal))
    lhs = jax.ShapeDtypeStruct((shape.tokens, shape.d_in), _dtype())
    rhs = jax.ShapeDtypeStruct((shape.experts, shape.d_in, shape.d_out), _dtype())
    return len(autotuned_gmm.space(lhs, rhs, jax.ShapeDtypeStruct((shape.experts,), jnp.int32)))


def estimate(shape: Shape, budget: int, rate: dict[str, float]) -> float:
    """Seconds a shape's sweep should take: its budget of configs (or its whole space, when
    smaller) at the per-config rate (measured in this run once a sweep of the kernel has
    run)."""
    if DRY:
        return DRY_SECONDS[shape.kernel]
    return SECONDS_PER_SHAPE + min(budget, space_size(shape)) * rate[shape.kernel]


def versions() -> dict[str, str | None]:
    out: dict[str, str | None] = {"python": sys.version.split()[0]}
    for name in ("jax", "jaxlib", "libtpu", "libtpu-nightly", "jaxtune"):
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = None
    out["jax"] = jax.__version__
    return out


def git_commit() -> str:
    """The checkout's commit, or ``JAXTUNE_BUILD_COMMIT`` where there is no git (a ``git
    archive`` carried to the chip)."""
    if os.environ.get("JAXTUNE_BUILD_COMMIT"):
        return os.environ["JAXTUNE_BUILD_COMMIT"]
    try:
        done = subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
        )
        return done.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def export(cache_dir: pathlib.Path, out: pathlib.Path, kernels: list[str]) -> dict[str, Any]:
    """``jaxtune cache export --dir OUT`` of the tuned kernels: each entry replaces the
    table's entry of its kernel, chip and key; the table's other entries stay."""
    command = [sys.executable, "-m", "jaxtune", "cache", "export", "--dir", str(out), "--json"]
    for kernel in kernels:
        command += ["--kernel", kernel]
    env = {**os.environ, "JAXTUNE_CACHE_DIR": str(cache_dir)}
    done = subprocess.run(command, env=env, capture_output=True, text=True, cwd=ROOT, timeout=120)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed ({done.returncode}): {done.stderr}")
    print(f"$ JAXTUNE_CACHE_DIR={cache_dir} jaxtune {' '.join(command[3:])}", flush=True)
    print(done.stdout.strip(), flush=True)
    files = sorted(str(p.relative_to(out)) for p in out.glob("*/*.msgpack"))
    return {"export": json.loads(done.stdout), "files": files}


def _entry_row(entry: Any) -> dict[str, Any]:
    return {
        "key": entry.key,
        "statics": entry.statics,
        "config": dict(entry.config),
        "time_us": entry.time_us,
        "default_config": dict(entry.default_config),
        "default_time_us": entry.default_time_us,
        "speedup": entry.speedup,
        "measured": entry.measured,
        "space_size": entry.space_size,
        "search": entry.search,
        "timing": entry.timing,
        "values": entry.values_text,
        "decision": entry.decision_text(),
        "phases": dict(entry.phases),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--grid", choices=("small", "full"), default="small")
    parser.add_argument("--only", default="flash,gmm", help="kernels: flash, gmm (comma list)")
    parser.add_argument("--dry", action="store_true", help="CPU, TPU interpret mode, tiny shapes")
    parser.add_argument("--out", type=pathlib.Path, default=None, help="the packaged cache dir")
    parser.add_argument("--cache-dir", type=pathlib.Path, default=None, help="tune into (fresh)")
    parser.add_argument("--budget", type=int, default=None, help="configs a flash sweep measures")
    parser.add_argument("--gmm-budget", type=int, default=None, help="configs a gmm sweep measures")
    parser.add_argument("--shapes", type=int, default=None, help="the grid's first N shapes only")
    parser.add_argument("--deadline-s", type=float, default=470.0, help="start no sweep past it")
    parser.add_argument("--json", type=pathlib.Path, default=None, help="a summary here")
    parser.add_argument("--plan", action="store_true", help="list the shapes and estimates only")
    parser.add_argument("--retune", action="store_true", help="tune the shapes the table holds too")
    args = parser.parse_args(argv)
    begin = time.perf_counter()

    if args.dry:
        from jax.experimental.pallas import tpu as pltpu

        pltpu.set_tpu_interpret_mode()  # jaxtune carries it into sweeps, as JAX's kernels need
    budgets = {
        "flash": args.budget or (3 if args.dry else 24),
        "gmm": args.gmm_budget or (3 if args.dry else 24),
    }
    out = args.out or (
        pathlib.Path(tempfile.gettempdir()) / "jaxtune-kernels-dry" / "cache"
        if args.dry
        else ROOT / "jaxtune" / "kernels" / "data" / "cache"
    )
    cache_dir = args.cache_dir or pathlib.Path(tempfile.mkdtemp(prefix="jaxtune-kernels-tune-"))
    os.environ["JAXTUNE_CACHE_DIR"] = str(cache_dir)
    only = [k.strip() for k in args.only.split(",") if k.strip()]
    unknown = sorted(set(only) - {"flash", "gmm"})
    if unknown:
        parser.error(f"--only takes flash and gmm, got {', '.join(unknown)}")
    shapes = [s for s in grid("dry" if args.dry else args.grid) if s.kernel in only]
    if args.shapes is not None:
        shapes = shapes[: args.shapes]

    import jaxtune  # after JAXTUNE_CACHE_DIR: the user cache is the fresh one
    from jaxtune.kernels import _packaged

    if out.is_dir() and out.resolve() != _packaged.CACHE:  # the table, to keep what it holds
        jaxtune.register_cache(out)

    device = jax.devices()[0]
    print(
        f"device {device.device_kind}, jax {jax.__version__}, tuning into {cache_dir}, "
        f"exporting to {out}; packaged cache registered: {_packaged.CACHE.is_dir()}",
        flush=True,
    )
    rate = dict(SECONDS_PER_CONFIG)
    spent: dict[str, list[float]] = {"flash": [], "gmm": []}
    total = sum(estimate(s, budgets[s.kernel], rate) for s in shapes)
    print(
        f"grid {'dry' if args.dry else args.grid}: {len(shapes)} shapes, budget "
        f"{budgets['flash']} flash / {budgets['gmm']} gmm configs, estimated {total:.0f} s "
        f"(deadline {args.deadline_s:.0f} s)",
        flush=True,
    )
    if args.plan:
        for i, shape in enumerate(shapes, 1):
            guess = estimate(shape, budgets[shape.kernel], rate)
            print(f"[{i}/{len(shapes)}] {shape.label}: {space_size(shape)} configs, ~{guess:.0f} s")
        return 0
    rows: list[dict[str, Any]] = []
    skipped: list[str] = []
    tuners: dict[str, Callable[[Any, bool], Any]] = {"flash": tune_flash, "gmm": tune_gmm}
    sources = ("cache",) if args.retune else ("cache", "packaged")
    for i, shape in enumerate(shapes, 1):
        elapsed = time.perf_counter() - begin
        found = existing(shape, sources)
        if found is not None:
            print(f"[{i}/{len(shapes)}] {shape.label}: kept, already tuned", flush=True)
            row = {"shape": shape.label, "kernel": KERNEL_IDS[shape.kernel], "kept": True}
            rows.append({**row, **dataclasses.asdict(shape), **_entry_row(found)})
            continue
        guess = estimate(shape, budgets[shape.kernel], rate)
        if elapsed + guess > args.deadline_s:
            print(
                f"[{i}/{len(shapes)}] skip {shape.label}: {elapsed:.0f} s + ~{guess:.0f} s "
                f"is past the deadline",
                flush=True,
            )
            skipped.append(shape.label)
            continue
        left = sum(estimate(s, budgets[s.kernel], rate) for s in shapes[i - 1 :])
        print(
            f"[{i}/{len(shapes)}] {shape.label}: ~{guess:.0f} s (elapsed {elapsed:.0f} s, "
            f"~{left:.0f} s left)",
            flush=True,
        )
        os.environ["JAXTUNE_BUDGET"] = str(budgets[shape.kernel])
        start = time.perf_counter()
        try:  # retune: a packaged entry of the shape is no reason to skip its sweep
            entry = tuners[shape.kernel](shape, True)
        except Exception as e:  # one shape failing keeps the others
            print(f"    failed: {type(e).__name__}: {str(e)[:500]}", flush=True)
            error = f"{type(e).__name__}: {e}"[:2000]
            rows.append({"shape": shape.label, "kernel": KERNEL_IDS[shape.kernel], "error": error})
            continue
        wall = time.perf_counter() - start
        spent[shape.kernel].append(wall / max(entry.measured, 1))
        if not args.dry:  # the per-config rate this run measured, for the next estimates
            rate[shape.kernel] = float(np.mean(spent[shape.kernel]))
        row = {"shape": shape.label, "kernel": KERNEL_IDS[shape.kernel], "wall_s": wall}
        row.update(dataclasses.asdict(shape), **_entry_row(entry))
        rows.append(row)
        speed = f"{entry.speedup:.2f}x" if entry.speedup else "-"
        print(
            f"    {wall:.1f} s, {entry.measured}/{entry.space_size} configs: "
            f"{dict(entry.config)} {speed} over the default; {entry.values_text}",
            flush=True,
        )

    # Every kernel with entries in --cache-dir (tuned now, or by a run cut short).
    tuned = sorted(k for k in KERNEL_IDS.values() if any(cache_dir.glob(f"*/{k}.msgpack")))
    summary: dict[str, Any] = {
        "device": device.device_kind,
        "versions": versions(),
        "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        "commit": git_commit(),
        "command": " ".join(["python3", "tools/build_kernels_cache.py", *(argv or sys.argv[1:])]),
        "grid": "dry" if args.dry else args.grid,
        "budgets": budgets,
        "cache_dir": str(cache_dir),
        "out": str(out),
        "shapes": rows,
        "skipped": skipped,
    }
    if tuned:
        summary.update(export(cache_dir, out, tuned))
        build = out / "BUILD.json"
        previous = json.loads(build.read_text()) if build.is_file() else {}
        runs = [*previous.get("runs", []), {k: v for k, v in summary.items() if k != "shapes"}]
        short = [
            {k: r.get(k) for k in ("shape", "key", "config", "speedup", "error")} for r in rows
        ]
        build.write_text(
            json.dumps({"runs": runs, "last_shapes": short}, indent=2, default=str) + "\n"
        )
    else:
        print("nothing tuned: nothing exported", flush=True)
    summary["wall_s"] = time.perf_counter() - begin
    print(
        f"done in {summary['wall_s']:.0f} s: {len(rows)} shapes, {len(skipped)} skipped, "
        f"{sum('error' in r for r in rows)} failed",
        flush=True,
    )
    if args.json is not None:
        args.json.write_text(json.dumps(summary, indent=2, default=str))
    return 0 if rows and not any("error" in r for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
