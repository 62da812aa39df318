"""Registered pytree types at module level, so a child process can import them by name."""

from __future__ import annotations

import collections
import dataclasses
from typing import Any

import jax

Pair = collections.namedtuple("Pair", ["left", "right"])


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class Scaled:
    """Arrays with a static (plain data) field, like a ``flax.struct`` dataclass."""

    value: Any
    bias: Any
    label: str = dataclasses.field(metadata={"static": True}, default="w")


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class WithFunction:
    """A static field that is not plain data: it cannot travel."""

    value: Any
    act: Any = dataclasses.field(metadata={"static": True}, default=None)


def weighted(state: Scaled, pair: Pair) -> jax.Array:
    """A step over the types above."""
    return (state.value * pair.left + state.bias * pair.right).sum()


weighted_step = jax.jit(weighted)
