"""Registered pytrees travel to the child (docs/isolation.md, "What travels"): a pytree
node of a registered type goes as its type's name, node data and children, and comes back
as the same type; one whose static data is not plain data is refused with the reason."""

from __future__ import annotations

import collections
import os
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import pytrees

import jaxtune
from jaxtune._isolation import framing as _framing
from jaxtune._isolation import wire as _wire


def roundtrip(value, *, abstract=False):
    """``value`` through a pipe, as to a child, and decoded there."""
    read, write = os.pipe()
    try:
        _framing.write_frame(write, {"args": _wire.encode_value(value)})
        frame = _framing.FrameReader(read).read(timeout=10)
    finally:
        os.close(read)
        os.close(write)
    return _wire.decode_value(frame["args"], abstract=abstract)


def test_a_registered_dataclass_and_a_namedtuple_come_back_as_themselves():
    state = pytrees.Scaled(value=jnp.arange(4.0), bias=jnp.ones(4), label="layer0")
    pair = pytrees.Pair(left=jnp.float32(2.0), right=jnp.zeros(3))
    back_state, back_pair = roundtrip((state, pair))
    assert type(back_state) is pytrees.Scaled and back_state.label == "layer0"
    assert type(back_pair) is pytrees.Pair
    np.testing.assert_array_equal(back_state.value, state.value)
    np.testing.assert_array_equal(back_pair.right, pair.right)
    assert jax.tree_util.tree_structure(back_state) == jax.tree_util.tree_structure(state)


def test_abstract_decoding_keeps_the_structure_with_shapes_for_leaves():
    state = pytrees.Scaled(value=jnp.ones((2, 3)), bias=jnp.ones(3, jnp.bfloat16))
    back = roundtrip(state, abstract=True)
    assert type(back) is pytrees.Scaled
    assert isinstance(back.value, jax.ShapeDtypeStruct) and back.value.shape == (2, 3)
    assert back.bias.dtype == jnp.bfloat16


def test_static_data_that_is_not_plain_data_cannot_travel():
    with pytest.raises(_wire.NotTransportable, match=r"WithFunction.*static data"):
        _wire.encode_value(pytrees.WithFunction(value=jnp.ones(2), act=jax.nn.relu))


def test_a_local_type_cannot_travel_but_a_local_namedtuple_travels_as_a_tuple():
    @jax.tree_util.register_dataclass
    @__import__("dataclasses").dataclass
    class Local:
        x: jax.Array

    with pytest.raises(_wire.NotTransportable, match="defined inside a function"):
        _wire.encode_value(Local(x=jnp.ones(2)))
    Point = collections.namedtuple("Point", "x y")
    assert roundtrip(Point(1, 2)) == (1, 2)


@pytest.mark.child
def test_profile_of_a_step_over_registered_pytrees_captures_in_the_child(monkeypatch):
    monkeypatch.setenv("JAXTUNE_ISOLATION", "process")
    state = pytrees.Scaled(value=jnp.arange(8.0), bias=jnp.ones(8))
    pair = pytrees.Pair(left=jnp.float32(2.0), right=jnp.ones(8))
    with warnings.catch_warnings():
        warnings.simplefilter("error", jaxtune.JaxtuneWarning)  # no in-process fallback
        p = jaxtune.profile(pytrees.weighted_step, state, pair, iters=2)
    assert p.iterations == 2
    assert any("weighted" in op.name or op.calls for op in p.ops)
