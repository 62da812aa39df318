"""Kernels whose best config depends on the pass timed (importable by sweep children and by
programs that tests run): ``lopsided`` is fastest with ``light_forward`` when only its
forward runs, and with ``light_backward`` (several times over) when its backward runs too."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax import lax

import jaxtune

#: Sequential matmuls in the forward and in the backward of each plan.
PLANS = {"light_forward": (1, 40), "light_backward": (4, 1)}


def _spin(x: jax.Array, n: int) -> jax.Array:
    w = jnp.eye(x.shape[-1], dtype=x.dtype) * 0.5
    return lax.fori_loop(0, n, lambda i, y: jnp.tanh(y @ w), x)


@functools.partial(jax.custom_vjp, nondiff_argnums=(1, 2))
def _lopsided(x: jax.Array, forward: int, backward: int) -> jax.Array:
    return _spin(x, forward)


def _lopsided_fwd(x: jax.Array, forward: int, backward: int) -> tuple[jax.Array, jax.Array]:
    return _spin(x, forward), x


def _lopsided_bwd(forward: int, backward: int, x: jax.Array, g: jax.Array) -> tuple[jax.Array]:
    return (_spin(g, backward) + 0 * x,)


_lopsided.defvjp(_lopsided_fwd, _lopsided_bwd)


# Outputs differ between plans (a different number of matmuls): no numerics check.
@jaxtune.autotuned(configs={"plan": list(PLANS)}, check=False, name="tests.lopsided")
def lopsided(x: jax.Array, *, plan: str) -> jax.Array:
    forward, backward = PLANS[plan]
    return _lopsided(x, forward, backward)


def loss(x: jax.Array) -> jax.Array:
    return lopsided(x).sum()


def jit_of_grad(x: jax.Array) -> jax.Array:
    return jax.jit(jax.grad(loss))(x)


def grad_of_jit(x: jax.Array) -> jax.Array:
    return jax.grad(jax.jit(loss))(x)


def value_and_grad(x: jax.Array) -> jax.Array:
    return jax.jit(jax.value_and_grad(loss))(x)[1]


def vjp(x: jax.Array) -> jax.Array:
    out, pullback = jax.vjp(jax.jit(lopsided), x)
    return pullback(jnp.ones_like(out))[0]


def forward_only(x: jax.Array) -> jax.Array:
    return jax.jit(loss)(x)


STEPS = {
    "jit_of_grad": jit_of_grad,
    "grad_of_jit": grad_of_jit,
    "value_and_grad": value_and_grad,
    "vjp": vjp,
    "forward_only": forward_only,
}

#: The kernel's argument in every step.
SHAPE = (128, 128)


@jaxtune.autotuned(
    configs={"reps": [20, 30]}, default={"reps": 1}, check=False, name="tests.repeated"
)
def repeated(x: jax.Array, *, reps: int) -> jax.Array:
    """Work in proportion to ``reps``: the default, outside ``configs``, is the fastest."""
    return _spin(x, reps)


@jaxtune.autotuned(configs={"n": [1, 2]}, check=False, name="tests.no_arrays")
def no_arrays(*, n: int) -> jax.Array:
    """No array argument at all: the key is empty."""
    return jnp.arange(4.0) * n


@jaxtune.autotuned(
    configs={"n": [1, 2]}, static_argnames=("m",), check=False, name="tests.static_only"
)
def static_only(m: int, *, n: int) -> jax.Array:
    return jnp.arange(4.0) * n * m


@jaxtune.autotuned(
    configs={"n": [1, 2]}, static_argnames=("m",), check=False, name="tests.scalar_and_static"
)
def scalar_and_static(x: jax.Array, scale: float, m: int = 1, *, n: int) -> jax.Array:
    return x * scale * n * m
