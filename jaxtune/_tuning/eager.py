"""The key of the eager fast path: a cheap, hashable summary of a concrete call (shapes,
dtypes, static values, settings and scopes in force), or ``None`` when tracing."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jax

from .. import _config
from . import lookup as _lookup

__all__ = ["eager_key"]

# Concrete (non-tracer) array classes seen so far; learnt lazily so that importing jaxtune
# never starts a backend.
_CONCRETE: set[type] = set()


def _concrete(a: Any) -> bool:
    """Whether ``a`` is a concrete (non-tracer) JAX array."""
    t = type(a)
    if t in _CONCRETE:
        return True
    if isinstance(a, jax.Array) and not isinstance(a, jax.core.Tracer):
        _CONCRETE.add(t)
        return True
    return False


def eager_key(args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> Any:
    """A cheap key for the eager fast path, or ``None`` when tracing (or unhashable)."""
    if not kwargs and all(_concrete(a) for a in args):
        # The common eager case, without a pytree flatten.
        simple = tuple((a.shape, a.dtype, a.weak_type) for a in args)
        return (simple, _config.settings_token(), _lookup.scope_ids())
    leaves, treedef = jax.tree_util.tree_flatten((args, kwargs))
    parts: list[Any] = []
    for leaf in leaves:
        if isinstance(leaf, jax.core.Tracer):
            return None
        if isinstance(leaf, jax.Array):
            parts.append((leaf.shape, leaf.dtype, getattr(leaf, "weak_type", False)))
        else:
            parts.append(leaf)
    key = (treedef, tuple(parts), _config.settings_token(), _lookup.scope_ids())
    try:
        hash(key)
    except TypeError:
        return None
    return key
