"""Flax NNX state reaches jaxtune's child (docs/isolation.md, "What travels" and "Your JAX state
travels with every request"): ``jaxtune.profile`` of a step over an ``nnx.State`` captures in
the child, with the profiling flags, instead of falling back to this process with a warning."""

from __future__ import annotations

import os
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxtune
from jaxtune._isolation import framing as _framing
from jaxtune._isolation import wire as _wire

from .support import require

require("flax", why="the model library whose state must travel (Flax NNX)")

from . import nnx_step  # noqa: E402 - after the skip when Flax is missing


def test_an_nnx_state_comes_back_from_the_wire_as_an_nnx_state():
    read, write = os.pipe()
    try:
        _framing.write_frame(write, {"args": _wire.encode_value(nnx_step.STATE)})
        frame = _framing.FrameReader(read).read(timeout=10)
    finally:
        os.close(read)
        os.close(write)
    back = _wire.decode_value(frame["args"])
    assert type(back) is type(nnx_step.STATE)
    assert jax.tree_util.tree_structure(back) == jax.tree_util.tree_structure(nnx_step.STATE)
    for a, b in zip(
        jax.tree_util.tree_leaves(back), jax.tree_util.tree_leaves(nnx_step.STATE), strict=True
    ):
        np.testing.assert_array_equal(a, b)


@pytest.mark.child
def test_profile_of_a_step_over_an_nnx_state_captures_in_the_child(monkeypatch):
    monkeypatch.setenv("JAXTUNE_ISOLATION", "process")
    x = jnp.ones((16, 64))
    expected = nnx_step.grad_step(nnx_step.STATE, x)
    with warnings.catch_warnings():
        warnings.simplefilter("error", jaxtune.JaxtuneWarning)  # no in-process fallback
        profile = jaxtune.profile(nnx_step.grad_step, nnx_step.STATE, x, iters=2)
    assert profile.iterations == 2 and profile.ops
    # The caller's state is untouched by the capture.
    again = nnx_step.grad_step(nnx_step.STATE, x)
    for a, b in zip(
        jax.tree_util.tree_leaves(expected), jax.tree_util.tree_leaves(again), strict=True
    ):
        np.testing.assert_array_equal(a, b)
