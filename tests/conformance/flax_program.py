"""A Flax NNX + optax transformer trained with JAX's flash attention as an autotuned kernel.

A program written the way Flax's own guides write one (nobody on this project wrote Flax,
optax or the flash-attention kernel): a decoder-only transformer (``nnx.Module``), built
under ``nnx.jit``, an ``nnx.Optimizer`` over ``optax.adam``, ``nnx.value_and_grad`` inside a step that is
``jax.jit``-ed over the split model and optimizer state with ``donate_argnums`` (Flax's
functional training loop, its guide on performance), and ``@jaxtune.profiled`` on the step.

Attention is ``jax.experimental.pallas.ops.tpu.flash_attention``, run in TPU interpret mode
on CPU (switched on at import, so every process that imports this module has it: the
program, jaxtune's sweep child and its profiling child). One ``@jaxtune.autotuned`` config
drives the forward kernel's and both backward kernels' block sizes, so a step that trains
runs the forward and the backward with the config, and only a sweep that times the two
together picks the config that is fastest for it.

Run as a program (``python flax_program.py [--steps N] [--config block_q=128,block_k=256]``)
it trains ``--steps`` steps on fixed tokens and prints one line per step,
``loss <step> <float.hex()>``, so two runs compare bit for bit. ``--config`` passes the
kernel's config explicitly, which bypasses tuning (a plain run with a chosen config).
"""

from __future__ import annotations

import argparse
import functools
import math
import sys
from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx
from jax.experimental.pallas import tpu as pltpu
from jax.experimental.pallas.ops.tpu import flash_attention as fa

import jaxtune

pltpu.set_tpu_interpret_mode()

VOCAB = 256
D_MODEL = 128
HEADS = 2
HEAD_DIM = D_MODEL // HEADS
#: One block: what the tests ask of the model (a forward and backward entry per flow, the
#: pick within 1.5x, the same losses) holds as well for one as for more, and every run of
#: the program and every config a sweep compiles pays for each block's three kernels.
LAYERS = 1
SEQ = 256
BATCH = 1
LEARNING_RATE = 1e-3
KERNEL = "conformance.flax.flash_attention"


def block_sizes(block_q: int, block_k: int) -> fa.BlockSizes:
    """Flash attention's block sizes, forward and backward (dkv, dq), from one config."""
    return fa.BlockSizes(
        block_q=block_q,
        block_k_major=block_k,
        block_k=block_k,
        block_b=1,
        block_q_major_dkv=block_q,
        block_k_major_dkv=block_k,
        block_k_dkv=block_k,
        block_q_dkv=block_q,
        block_k_major_dq=block_k,
        block_k_dq=block_k,
        block_q_dq=block_q,
    )


def _fits(config: Mapping[str, int], q: Any, k: Any, v: Any) -> bool:
    """Flash attention's block constraints: blocks divide the sequence lengths."""
    return q.shape[2] % config["block_q"] == 0 and k.shape[2] % config["block_k"] == 0


# Two configs and a default outside them (DESIGN: the default is always a candidate): three
# sweeps of a real training step are the slow part of tests/conformance, so the space is no
# larger than the question needs (256/256 trains 1.4-1.5x faster than 128/256, about 2x
# faster than the default 128/128).
@jaxtune.autotuned(
    configs={"block_q": [128, 256], "block_k": [256]},
    prune=_fits,
    default={"block_q": 128, "block_k": 128},
    name=KERNEL,
)
def flash(q: jax.Array, k: jax.Array, v: jax.Array, *, block_q: int, block_k: int) -> jax.Array:
    """Causal flash attention over ``(batch, heads, seq, head_dim)``; under ``jax.grad`` the
    same block sizes drive the dkv and dq kernels."""
    return fa.flash_attention(
        q,
        k,
        v,
        causal=True,
        sm_scale=1.0 / math.sqrt(q.shape[-1]),
        block_sizes=block_sizes(block_q, block_k),
    )


def attend(q: jax.Array, k: jax.Array, v: jax.Array, config: Mapping[str, int] | None) -> jax.Array:
    """The attention call: tuned (``config`` None) or with an explicit config."""
    return flash(q, k, v) if config is None else flash(q, k, v, **config)


class Block(nnx.Module):
    def __init__(self, *, rngs: nnx.Rngs) -> None:
        self.norm1 = nnx.LayerNorm(D_MODEL, rngs=rngs)
        self.qkv = nnx.Linear(D_MODEL, 3 * D_MODEL, rngs=rngs)
        self.out = nnx.Linear(D_MODEL, D_MODEL, rngs=rngs)
        self.norm2 = nnx.LayerNorm(D_MODEL, rngs=rngs)
        self.up = nnx.Linear(D_MODEL, 4 * D_MODEL, rngs=rngs)
        self.down = nnx.Linear(4 * D_MODEL, D_MODEL, rngs=rngs)

    def __call__(self, x: jax.Array, config: Mapping[str, int] | None) -> jax.Array:
        b, s, _ = x.shape
        qkv = self.qkv(self.norm1(x)).reshape(b, s, 3, HEADS, HEAD_DIM)
        q, k, v = (qkv[:, :, i].transpose(0, 2, 1, 3) for i in range(3))
        y = attend(q, k, v, config).transpose(0, 2, 1, 3).reshape(b, s, D_MODEL)
        x = x + self.out(y)
        return x + self.down(jax.nn.gelu(self.up(self.norm2(x))))


class Transformer(nnx.Module):
    def __init__(self, *, rngs: nnx.Rngs) -> None:
        self.embed = nnx.Embed(VOCAB, D_MODEL, rngs=rngs)
        self.pos = nnx.Param(jax.random.normal(rngs.params(), (SEQ, D_MODEL)) * 0.02)
        self.blocks = nnx.List([Block(rngs=rngs) for _ in range(LAYERS)])
        self.norm = nnx.LayerNorm(D_MODEL, rngs=rngs)
        self.head = nnx.Linear(D_MODEL, VOCAB, rngs=rngs)

    def __call__(self, tokens: jax.Array, config: Mapping[str, int] | None = None) -> jax.Array:
        x = self.embed(tokens) + self.pos[...][: tokens.shape[1]]
        for block in self.blocks:
            x = block(x, config)
        return self.head(self.norm(x))


def loss_fn(model: Transformer, tokens: jax.Array, config: Mapping[str, int] | None) -> jax.Array:
    """Next-token cross-entropy: position ``i`` predicts token ``i + 1``."""
    logits = model(tokens, config)[:, :-1]
    return optax.softmax_cross_entropy_with_integer_labels(logits, tokens[:, 1:]).mean()


def step(
    graphdef: nnx.GraphDef[Any],
    state: nnx.State,
    tokens: jax.Array,
    config: Mapping[str, int] | None = None,
) -> tuple[nnx.State, jax.Array]:
    """One training step over the split ``(model, optimizer)``: the new state and the loss."""
    model, optimizer = nnx.merge(graphdef, state)
    loss, grads = nnx.value_and_grad(loss_fn)(model, tokens, config)
    optimizer.update(model, grads)
    return nnx.state((model, optimizer)), loss


@jaxtune.profiled
@functools.partial(jax.jit, donate_argnums=(1,))
def train_step(
    graphdef: nnx.GraphDef[Any], state: nnx.State, tokens: jax.Array
) -> tuple[nnx.State, jax.Array]:
    """The program's step: attention with the tuned config; the state is donated."""
    return step(graphdef, state, tokens, EXPLICIT)


#: The config ``--config`` passes explicitly (None: the tuned one), read when the step traces.
EXPLICIT: dict[str, int] | None = None


def step_with(config: Mapping[str, int], *, donate: bool = True) -> Any:
    """A jitted step whose attention uses ``config`` explicitly (no tuning)."""
    return jax.jit(
        functools.partial(step, config=dict(config)), donate_argnums=(1,) if donate else ()
    )


def init(seed: int = 0) -> tuple[nnx.GraphDef[Any], nnx.State]:
    """The split ``(model, optimizer)`` a run starts from, built in one compiled program
    (Flax's guides build large models so; eagerly, each initializer compiles on its own:
    seconds on CPU)."""

    @nnx.jit
    def build() -> tuple[Transformer, nnx.Optimizer]:
        model = Transformer(rngs=nnx.Rngs(seed))
        return model, nnx.Optimizer(model, optax.adam(LEARNING_RATE), wrt=nnx.Param)

    return nnx.split(build())


def batch(seed: int = 0) -> jax.Array:
    """Fixed tokens: every step trains on the same batch."""
    rng = np.random.default_rng(seed)
    return jnp.asarray(rng.integers(0, VOCAB, (BATCH, SEQ)), jnp.int32)


def attention_args(seed: int = 0) -> tuple[jax.Array, jax.Array, jax.Array]:
    """q, k, v with the shapes the program's attention sees."""
    rng = np.random.default_rng(seed)
    return tuple(  # type: ignore[return-value]
        jnp.asarray(rng.standard_normal((BATCH, HEADS, SEQ, HEAD_DIM)), jnp.float32)
        for _ in range(3)
    )


def parse_config(text: str) -> dict[str, int]:
    """``block_q=128,block_k=256`` -> ``{"block_q": 128, "block_k": 256}``."""
    return {k: int(v) for k, v in (item.split("=") for item in text.split(","))}


def main(argv: list[str]) -> int:
    global EXPLICIT
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--config", type=parse_config, default=None)
    args = parser.parse_args(argv)
    EXPLICIT = args.config
    graphdef, state = init()
    tokens = batch()
    for i in range(args.steps):
        state, loss = train_step(graphdef, state, tokens)
        print(f"loss {i} {float(loss).hex()}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
