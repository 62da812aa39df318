"""A small step that uses both example kernels: what ``jaxtune demo`` profiles."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from .chunked import chunked_logsumexp
from .pallas_matmul import matmul

__all__ = ["step"]


@jax.jit
def step(x: jax.Array, w: jax.Array) -> jax.Array:
    """A projection (the Pallas matmul), a nonlinearity, then a log-sum-exp over a wide
    vocabulary (the chunked kernel): the shape of a language-model head.

    Examples:
        >>> import jax.numpy as jnp
        >>> from jaxtune.examples.model import step
        >>> float(step(jnp.zeros((128, 128)), jnp.zeros((128, 128))))  # doctest: +ELLIPSIS
        1153.39...
    """
    h = jnp.tanh(matmul(x, w))
    # A vocabulary of 8192 (or the projection's width, where that is wider).
    logits = jnp.tile(h, (1, max(1, 8192 // h.shape[1])))
    return chunked_logsumexp(logits).sum()
