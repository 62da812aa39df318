"""The `train.py` that docs/whole-model.md, docs/profiling.md and docs/reports.md run: a
jitted training step over two of jaxtune's example kernels (the pure-JAX
`chunked_logsumexp` and the Pallas `pallas_matmul`, interpret mode on CPU), profiled by
`jaxtune profile --`."""

import argparse

import jax
import jax.numpy as jnp

import jaxtune
from jaxtune.examples.chunked import chunked_logsumexp
from jaxtune.examples.pallas_matmul import matmul


@jaxtune.profiled
@jax.jit
def train_step(w, x):
    h = matmul(x, w)
    return chunked_logsumexp(jnp.tile(h, (1, 128))).mean()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=3)
    steps = parser.parse_args().steps
    w, x = jnp.full((64, 64), 0.01), jnp.ones((64, 64))
    for _ in range(steps):
        loss = train_step(w, x)
    print("loss", float(loss))
