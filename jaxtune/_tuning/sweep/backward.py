"""Kernel side. The pass timed with ``timing="vjp"``: a config's forward call and its backward
pass, as a differentiated program runs them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax

__all__ = ["with_backward"]


def _differentiable(leaf: Any) -> bool:
    return hasattr(leaf, "dtype") and jax.numpy.issubdtype(leaf.dtype, jax.numpy.inexact)


def _cotangent(out: Any) -> Any:
    """Ones for each floating output, float0 zeros for the others."""
    import numpy as np

    def one(o: Any) -> Any:
        if _differentiable(o):
            return jax.numpy.ones(o.shape, o.dtype)
        return np.zeros(np.shape(o), jax.dtypes.float0)

    return jax.tree_util.tree_map(one, out)


def with_backward(forward: Callable[[dict[str, Any]], Any]) -> Callable[[dict[str, Any]], Any]:
    """``forward`` and its backward pass: the outputs and the gradients of the floating
    array arguments for a cotangent of ones (the pass a differentiated program runs)."""

    def forward_backward(dyn: dict[str, Any]) -> Any:
        leaves, tree = jax.tree_util.tree_flatten(dyn)
        where = [i for i, leaf in enumerate(leaves) if _differentiable(leaf)]

        def of(diff: list[Any]) -> Any:
            full = list(leaves)
            for i, leaf in zip(where, diff, strict=True):
                full[i] = leaf
            return forward(jax.tree_util.tree_unflatten(tree, full))

        out, pullback = jax.vjp(of, [leaves[i] for i in where])
        return out, pullback(_cotangent(out))

    return forward_backward
