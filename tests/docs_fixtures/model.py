"""What the fragments of docs/ leave to the reader: a kernel (`matmul`) with arguments `x`
and `y`, a `model` with its `params` and a `batch`, the jitted `train_step`, and an `old`
TuningResult. tests/test_docs_run.py copies this file into a page's directory."""

import jax
import jax.numpy as jnp

import jaxtune
from jaxtune.examples.pallas_matmul import matmul

__all__ = ["batch", "matmul", "model", "old", "params", "train_step", "x", "y"]

x = jnp.ones((64, 64))
y = jnp.full((64, 64), 0.5)
params = {"w": jnp.full((64, 64), 0.01)}
batch = jnp.ones((64, 64))
old = jaxtune.TuningResult()


def model(params, batch):
    return jnp.tanh(matmul(batch, params["w"])).sum()


train_step = jax.jit(model)
