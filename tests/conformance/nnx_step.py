"""A small Flax NNX model and a jitted gradient step over its split state, at module level
so jaxtune's child can import both the step and the state's types (``nnx.State``,
``nnx.Param``)."""

from __future__ import annotations

import jax
from flax import nnx


class MLP(nnx.Module):
    """Two linear layers, as Flax's guides write them."""

    def __init__(self, rngs: nnx.Rngs) -> None:
        self.up = nnx.Linear(64, 128, rngs=rngs)
        self.down = nnx.Linear(128, 8, rngs=rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.down(jax.nn.relu(self.up(x)))


# Built in one compiled program: eagerly, each initializer compiles on its own (most of a
# second on CPU, in each process that imports this module: pytest's and jaxtune's child).
GRAPHDEF, STATE = nnx.split(nnx.jit(lambda: MLP(nnx.Rngs(0)))())


@jax.jit
def grad_step(state: nnx.State, x: jax.Array) -> nnx.State:
    """The gradient of the model's summed output with respect to its state."""

    def loss(st: nnx.State) -> jax.Array:
        return nnx.merge(GRAPHDEF, st)(x).sum()

    return jax.grad(loss)(state)
