"""A MoE-like grouped matmul on the chip: JAX's megablox ``gmm`` (nobody here wrote it) with
its 48 tilings as the tuning space, called with skewed group sizes that sum to the rows, as
a router gives them. Made-up group sizes (integers in 0..16) leave almost every row out of
every group: a sweep on them times a fraction of the work.

``python -m tests.tpu.values_gmm`` is the program (``jaxtune tune --`` records its values);
``python -m tests.tpu.values_gmm truth`` prints, as JSON, each tiling's time per call on the
program's values (:mod:`tests.tpu.truth`); ``... synthesised`` tunes it the way a flow
without values does (``jaxtune.tune`` on shapes) and prints the entry's summary.
``JAXTUNE_TPU_DRY=1`` runs all of it on CPU in interpret mode at a small shape.
"""

from __future__ import annotations

import itertools
import json
import sys

import jax
import jax.numpy as jnp
from jax.experimental.pallas.ops.tpu import megablox

import jaxtune
from tests.tpu.kernels import DRY

#: Rows, contraction and output width, groups: 137 GFLOP a call (0.70 ms at the v5e's peak).
M, K, N = (512, 256, 256) if DRY else (8192, 2048, 4096)
#: Skewed group sizes summing to ``M`` (an expert takes 3/8 of the tokens, one 1/64).
SIZES = [x * M // 64 for x in (24, 12, 8, 8, 4, 4, 3, 1)]
TILINGS = [
    {"tm": tm, "tk": tk, "tn": tn}
    for tm, tk, tn in itertools.product(
        (128, 256, 512, 1024), (128, 256, 512, 1024), (128, 256, 512)
    )
    if tm <= M and tk <= K and tn <= N
]


@jaxtune.autotuned(
    configs=TILINGS,
    default={"tm": 128, "tk": 128, "tn": 128},
    flops=lambda lhs, rhs, group_sizes: 2.0 * lhs.shape[0] * lhs.shape[1] * rhs.shape[2],
    name="tpu.gmm",
)
def gmm(lhs, rhs, group_sizes, *, tm, tk, tn):
    """Megablox grouped matmul with tiling ``(tm, tk, tn)``."""
    return megablox.gmm(lhs, rhs, group_sizes, tiling=(tm, tk, tn))


def inputs():
    """The program's arrays: bf16 lhs [M, K] and rhs [8, K, N], and the group sizes."""
    k1, k2 = jax.random.split(jax.random.key(0))
    lhs = jax.random.normal(k1, (M, K), jnp.bfloat16)
    rhs = jax.random.normal(k2, (len(SIZES), K, N), jnp.bfloat16)
    return lhs, rhs, jnp.array(SIZES, jnp.int32)


def main() -> None:
    step = jax.jit(lambda lhs, rhs, sizes: gmm(lhs, rhs, sizes).sum())
    args = inputs()
    for _ in range(3):
        jax.block_until_ready(step(*args))


def truth() -> dict[str, float]:
    """Seconds a call of each tiling on the program's values."""
    from tests.tpu.truth import wall_times

    return wall_times(gmm.__wrapped__, TILINGS, inputs())


def synthesised() -> dict:
    """Tunes the program's step on shapes alone, as flows without values do."""
    args = [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in inputs()]
    result = jaxtune.tune(lambda lhs, rhs, sizes: gmm(lhs, rhs, sizes).sum(), *args)
    (entry,) = result.values()
    from jaxtune._tuning.explain import decision_text

    failures = [m.reason for m in entry.measurements if not m.ok]
    return {**entry.summary(), "decided": decision_text(entry), "failures": failures}


if __name__ == "__main__":
    what = sys.argv[1:] or ["program"]
    if what == ["program"]:
        main()
    elif what == ["truth"]:
        print(json.dumps(truth()))
    elif what == ["synthesised"]:
        import warnings

        warnings.simplefilter("ignore")
        print(json.dumps(synthesised()))
    else:
        raise SystemExit("usage: python -m tests.tpu.values_gmm [program|truth|synthesised]")
