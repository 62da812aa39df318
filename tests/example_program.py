"""A small training program over two of jaxtune's example kernels (the pure-JAX
``chunked_logsumexp`` and the Pallas ``pallas_matmul``, interpret mode on CPU), as text to
write to a file: the program ``jaxtune tune --`` runs in tests/test_tune_cli.py and in
bench/bench_tune_command.py."""

from __future__ import annotations

import textwrap

TRAIN = textwrap.dedent(
    """
    import jax, jax.numpy as jnp
    from jaxtune.examples.chunked import chunked_logsumexp
    from jaxtune.examples.pallas_matmul import matmul

    @jax.jit
    def step(w, x):
        h = matmul(x, w)
        return chunked_logsumexp(jnp.tile(h, (1, 16))).mean()

    if __name__ == "__main__":
        w = jnp.full((64, 64), 0.01)
        x = jnp.ones((64, 64))
        for _ in range(3):
            print("loss", float(step(w, x)), flush=True)
    """
)
