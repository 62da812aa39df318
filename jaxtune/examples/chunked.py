"""A streaming log-sum-exp over the last axis, in chunks: a real CPU tunable.

Cross-entropy over a large vocabulary needs ``logsumexp(logits, axis=-1)``. Computing it in
chunks with an online maximum keeps memory flat, and the chunk size trades loop overhead
(small chunks: many steps) against cache footprint (large chunks). The best chunk depends on
the shape and the machine, which is exactly what ``@jaxtune.autotuned`` is for.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

import jaxtune

__all__ = ["CHUNKS", "chunked_logsumexp", "reference_logsumexp"]

CHUNKS = (128, 256, 512, 1024, 2048, 4096, 8192)


def _divides(config: dict[str, int], x: jax.ShapeDtypeStruct) -> bool:
    return bool(x.shape[-1] % config["chunk"] == 0)


@jaxtune.autotuned(
    configs={"chunk": list(CHUNKS)},
    prune=_divides,
    default={"chunk": 256},
    name="jaxtune.examples.chunked_logsumexp",
    flops=lambda x: 3.0 * x.size,
    bytes=lambda x: float(x.size * x.dtype.itemsize),
)
def chunked_logsumexp(x: jax.Array, *, chunk: int) -> jax.Array:
    """``logsumexp(x, axis=-1)`` computed over ``chunk``-wide slices with an online max.

    Examples:
        >>> import jax.numpy as jnp
        >>> from jaxtune.examples.chunked import chunked_logsumexp
        >>> chunked_logsumexp(jnp.zeros((2, 1024)), chunk=256).round(3).tolist()
        [6.931, 6.931]
    """
    *lead, n = x.shape
    blocks = jnp.moveaxis(x.reshape(*lead, n // chunk, chunk), -2, 0).astype(jnp.float32)

    def step(
        carry: tuple[jax.Array, jax.Array], block: jax.Array
    ) -> tuple[tuple[jax.Array, jax.Array], None]:
        m, s = carry
        m_new = jnp.maximum(m, block.max(axis=-1))
        s = s * jnp.exp(m - m_new) + jnp.exp(block - m_new[..., None]).sum(axis=-1)
        return (m_new, s), None

    init = (jnp.full(lead, -jnp.inf, jnp.float32), jnp.zeros(lead, jnp.float32))
    (m, s), _ = jax.lax.scan(step, init, blocks)
    return (m + jnp.log(s)).astype(x.dtype)


def reference_logsumexp(x: jax.Array) -> jax.Array:
    """The one-shot ``jax.nn.logsumexp`` the chunked kernel must agree with."""
    return jax.nn.logsumexp(x.astype(jnp.float32), axis=-1).astype(x.dtype)
