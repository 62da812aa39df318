"""A Flax NNX + optax decoder-only transformer whose attention is the autotuned flash
attention of :mod:`tests.tpu.kernels`, trained the way Flax's guides write it: the model
and an ``nnx.Optimizer`` over ``optax.adam`` split into ``(graphdef, state)``, and a step
jitted over the state with ``donate_argnums``.

Sizes: ``SMALL`` for fixtures and the tier (2 layers), ``BENCH`` for the default-vs-tuned
figure in docs/benchmarks.md (4 layers, d_model 1024, 8 heads of 128, sequence 2048,
batch 4: attention at flash's 128/128 default is most of the step).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from .kernels import flash


@dataclasses.dataclass(frozen=True)
class Size:
    layers: int
    d_model: int
    heads: int
    seq: int
    batch: int
    vocab: int


SMALL = Size(layers=2, d_model=512, heads=4, seq=1024, batch=2, vocab=4096)
BENCH = Size(layers=4, d_model=1024, heads=8, seq=2048, batch=4, vocab=8192)


class Block(nnx.Module):
    def __init__(self, size: Size, *, rngs: nnx.Rngs) -> None:
        d = size.d_model
        self.heads = size.heads
        self.norm1 = nnx.LayerNorm(d, rngs=rngs)
        self.qkv = nnx.Linear(d, 3 * d, rngs=rngs)
        self.out = nnx.Linear(d, d, rngs=rngs)
        self.norm2 = nnx.LayerNorm(d, rngs=rngs)
        self.up = nnx.Linear(d, 4 * d, rngs=rngs)
        self.down = nnx.Linear(4 * d, d, rngs=rngs)

    def __call__(self, x: jax.Array, config: dict[str, int] | None) -> jax.Array:
        b, s, d = x.shape
        h = self.heads
        qkv = self.qkv(self.norm1(x)).reshape(b, s, 3, h, d // h).astype(jnp.bfloat16)
        q, k, v = (qkv[:, :, i].transpose(0, 2, 1, 3) for i in range(3))
        y = flash(q, k, v) if config is None else flash(q, k, v, **config)
        x = x + self.out(y.transpose(0, 2, 1, 3).reshape(b, s, d).astype(x.dtype))
        return x + self.down(jax.nn.gelu(self.up(self.norm2(x))))


class Transformer(nnx.Module):
    def __init__(self, size: Size, *, rngs: nnx.Rngs) -> None:
        self.embed = nnx.Embed(size.vocab, size.d_model, rngs=rngs)
        self.blocks = nnx.List([Block(size, rngs=rngs) for _ in range(size.layers)])
        self.norm = nnx.LayerNorm(size.d_model, rngs=rngs)
        self.head = nnx.Linear(size.d_model, size.vocab, rngs=rngs)

    def __call__(self, tokens: jax.Array, config: dict[str, int] | None = None) -> jax.Array:
        x = self.embed(tokens)
        for block in self.blocks:
            x = block(x, config)
        return self.head(self.norm(x))


def loss_fn(model: Transformer, tokens: jax.Array, config: dict[str, int] | None) -> jax.Array:
    logits = model(tokens, config)[:, :-1]
    return optax.softmax_cross_entropy_with_integer_labels(logits, tokens[:, 1:]).mean()


def _step(
    graphdef: Any, state: Any, tokens: jax.Array, config: dict[str, int] | None = None
) -> tuple[Any, jax.Array]:
    model, optimizer = nnx.merge(graphdef, state)
    loss, grads = nnx.value_and_grad(loss_fn)(model, tokens, config)
    optimizer.update(model, grads)
    return nnx.state((model, optimizer)), loss


@functools.partial(jax.jit, donate_argnums=(1,))
def train_step(graphdef: Any, state: Any, tokens: jax.Array) -> tuple[Any, jax.Array]:
    """One training step with the tuned (or default) attention config; state donated."""
    return _step(graphdef, state, tokens)


def step_with(config: dict[str, int]) -> Any:
    """The step with ``config`` passed explicitly (no lookup), state donated."""
    return jax.jit(functools.partial(_step, config=dict(config)), donate_argnums=(1,))


def init(size: Size = SMALL, seed: int = 0) -> tuple[Any, Any, jax.Array]:
    """``(graphdef, state, tokens)`` a run starts from."""
    model = Transformer(size, rngs=nnx.Rngs(seed))
    optimizer = nnx.Optimizer(model, optax.adam(1e-3), wrt=nnx.Param)
    graphdef, state = nnx.split((model, optimizer))
    rng = np.random.default_rng(seed)
    tokens = jnp.asarray(rng.integers(0, size.vocab, (size.batch, size.seq)), jnp.int32)
    return graphdef, state, tokens
