"""Shape buckets (issue 33, point 4): a serving loop over 50 sequence lengths in tune mode.

With ``buckets={"x": {0: "pow2"}}`` the loop sweeps once per power-of-two bucket its lengths
fall in (target: <= 6 sweeps); without buckets it sweeps once per length (50). The lengths
arrive in a shuffled order; every call's output is checked against the reference, so a
config that prune rejects for the actual length would show.

Run: python bench/bench_buckets.py [--json OUT] [--seed S]
(about 2 minutes with buckets and 10 without on a shared 2-core CPU machine.)
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import time

import jax
import jax.numpy as jnp
import numpy as np

import jaxtune
from jaxtune._core import settings as _settings
from jaxtune._tuning import lookup as _lookup
from jaxtune._tuning.store import cache as _cache

CHUNKS = [1, 2, 4, 8, 16, 32, 64]


def _divides(config: dict[str, int], x: jax.ShapeDtypeStruct, w: jax.ShapeDtypeStruct) -> bool:
    return x.shape[0] % config["chunk"] == 0


def kernel(name: str, buckets: dict | None) -> jaxtune.Autotuned:  # type: ignore[type-arg]
    @jaxtune.autotuned(
        configs={"chunk": CHUNKS},
        prune=_divides,
        default={"chunk": 1},
        name=name,
        buckets=buckets,
    )
    def project(x: jax.Array, w: jax.Array, *, chunk: int) -> jax.Array:
        """``tanh(x @ w)`` over the sequence in ``chunk``-long slices."""
        n, d = x.shape
        out = jax.lax.map(lambda part: jnp.tanh(part @ w), x.reshape(n // chunk, chunk, d))
        return out.reshape(n, w.shape[1])

    return project


def serve(project: jaxtune.Autotuned, lengths: list[int]) -> tuple[int, float]:  # type: ignore[type-arg]
    """Runs the loop in tune mode: (sweeps, seconds)."""
    w = jnp.asarray(np.random.default_rng(0).standard_normal((64, 64)), jnp.float32) / 8
    start = time.perf_counter()
    with _settings.override(mode="tune"):
        for n in lengths:
            x = jnp.asarray(np.random.default_rng(n).standard_normal((n, 64)), jnp.float32)
            out = project(x, w)
            np.testing.assert_allclose(out, jnp.tanh(x @ w), rtol=1e-4, atol=1e-5)
    seconds = time.perf_counter() - start
    sweeps = len(_cache.user_cache().entries_for(project.kernel_id, _lookup.device_kind()))
    return sweeps, seconds


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--json", default=None)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    os.environ["JAXTUNE_CACHE_DIR"] = tempfile.mkdtemp(prefix="jaxtune-bench-buckets-")
    # The kernels are made in a function (two of one body), so they are tuned in this
    # process; the number of sweeps does not depend on where they run.
    os.environ.setdefault("JAXTUNE_ISOLATION", "inline")
    # 50 distinct lengths from 65 to 1024, as a server meets them: shuffled.
    lengths = sorted(random.Random(args.seed).sample(range(65, 1025), 50))
    random.Random(args.seed + 1).shuffle(lengths)
    isolation = _settings.settings().isolation
    print(
        f"jax {jax.__version__}, python {sys.version.split()[0]}, backend "
        f"{jax.default_backend()}, isolation {isolation}; 50 lengths in 65..1024"
    )
    rows = []
    for label, buckets in (
        ("pow2 buckets", {"x": {0: "pow2"}}),
        ("no buckets", None),
    ):
        project = kernel(f"bench.buckets.{label.split()[0]}", buckets)
        sweeps, seconds = serve(project, lengths)
        keys = sorted(
            e.key for e in _cache.user_cache().entries_for(project.kernel_id, _lookup.device_kind())
        )
        rows.append({"case": label, "sweeps": sweeps, "seconds": seconds, "keys": keys})
        print(
            f"{label:14} {sweeps:3d} sweeps in {seconds:6.1f} s; keys: {', '.join(keys[:6])}{' ...' if len(keys) > 6 else ''}"
        )
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"jax": jax.__version__, "lengths": lengths, "buckets": rows}, f, indent=1)


if __name__ == "__main__":
    main()
