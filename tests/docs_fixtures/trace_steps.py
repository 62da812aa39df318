"""The program of docs/profiling.md, "Reading a plain trace": a jitted step calling flash
attention and the Pallas matmul in TPU interpret mode, 3 steps inside
`jax.profiler.trace("t")`, without jaxtune."""

import jax
from jax.experimental.pallas import tpu as pltpu
from jax.experimental.pallas.ops.tpu import flash_attention as fa

from jaxtune.examples.pallas_matmul import matmul


@jax.jit
def step(q, w):
    attended = fa.flash_attention(q, q, q, causal=True)
    return matmul(attended[0, 0], w).sum()


if __name__ == "__main__":
    q = jax.random.normal(jax.random.key(0), (1, 2, 256, 128))
    w = jax.numpy.full((128, 128), 0.01)
    pltpu.set_tpu_interpret_mode()
    step(q, w).block_until_ready()
    with jax.profiler.trace("t"):
        for _ in range(3):
            step(q, w).block_until_ready()
