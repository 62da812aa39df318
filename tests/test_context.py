"""The caller's JAX state as a request carries it to a child (``_isolation/context.py``): a
typed record written and read by the one codec, each kind of value read back as it was,
the maps older jaxtunes wrote read as the same records, and a damaged one refused naming
the option."""

from __future__ import annotations

import dataclasses
import enum

import pytest
from jax._src import config as jax_config
from jax.experimental.pallas import tpu as pltpu

from jaxtune._core import typed
from jaxtune._core.codec import packb, unpackb
from jaxtune._isolation import context as _context
from jaxtune._isolation.context import (
    DataclassValue,
    EnumValue,
    FrozensetValue,
    JaxState,
    TupleValue,
    Unencodable,
)
from jaxtune._isolation.frames import FrameError, Request

PROMOTION = jax_config.NumpyDtypePromotion.STRICT


def _through_a_request(state: JaxState) -> JaxState:
    """``state`` as a child reads it: in a request's map, through msgpack."""
    wire = Request(handler="jaxtune.x", op="x", ref=None, fields={}, jax_state=state)
    return Request.from_wire(unpackb(packb(wire.to_wire()))).jax_state


@pytest.mark.parametrize(
    ("value", "carried"),
    [
        (True, True),
        (3, 3),
        (0.5, 0.5),
        ("highest", "highest"),
        (None, None),
        (PROMOTION, EnumValue(enum="jax._src.config:NumpyDtypePromotion", name="STRICT")),
        (("b", 1, None), TupleValue(items=("b", 1, None))),  # in its order
        (frozenset({"b", "a"}), FrozensetValue(items=("a", "b"))),
        (
            pltpu.InterpretParams(detect_races=True),
            DataclassValue(
                dataclass=_context._class_path(pltpu.InterpretParams),
                fields={
                    f.name: getattr(pltpu.InterpretParams(detect_races=True), f.name)
                    for f in dataclasses.fields(pltpu.InterpretParams)
                },
            ),
        ),
    ],
    ids=["bool", "int", "float", "str", "none", "enum", "tuple", "frozenset", "dataclass"],
)
def test_each_kind_of_value_travels_and_reads_back_as_it_was(value, carried):
    assert _context._encode(value) == carried
    state = _through_a_request(JaxState(values={"option": carried}))
    assert state == JaxState(values={"option": carried})
    back = _context._decode(state.values["option"])
    assert back == value and type(back) is type(value)


def test_a_dataclass_holding_records_of_its_own_kind_reads_back():
    """A JAX dataclass whose fields hold enums, tuples and dataclasses: the record holds
    records of its own kind, which the codec reads field by field."""
    inner = DataclassValue(
        dataclass="jax:Inner", fields={"mode": EnumValue(enum="jax:M", name="A")}
    )
    outer = DataclassValue(
        dataclass="jax:Outer",
        fields={"inner": inner, "sizes": TupleValue(items=(1, 2)), "n": 3},
    )
    state = JaxState(values={"option": outer}, uncarried={"jax_default_device": "a Device value"})
    assert _through_a_request(state) == state


def test_the_snapshot_of_a_caller_travels_whole():
    """The snapshot a request carries (interpret mode's dataclass, the enums of jax.config)
    reads back equal, and setting it here changes nothing: it is this process's own."""
    with pltpu.force_tpu_interpret_mode():
        state = _context.snapshot()
    assert isinstance(state.values[_context._INTERPRET], DataclassValue)
    assert any(isinstance(v, EnumValue) for v in state.values.values())
    again = _through_a_request(state)
    assert again == state
    plain = _context.snapshot()
    assert _context.apply_snapshot(_through_a_request(plain)) == {}
    assert _context.snapshot() == plain


def test_a_snapshot_older_jaxtunes_wrote_reads_as_the_same_records():
    """Recorded requests keep the state (a profile's sidecar): the maps written before it
    was a typed record read as the records it is now."""
    old = {
        "values": {
            "jax_numpy_dtype_promotion": {
                "enum": "jax._src.config:NumpyDtypePromotion",
                "name": "STRICT",
            },
            "a_tuple": {"items": ["b", 1], "as": "tuple"},
            "a_set": {"items": ["a", "b"], "as": "frozenset"},
            "pallas_tpu_interpret_mode_context_manager": {
                "dataclass": "jax._src.pallas.mosaic.interpret.params:InterpretParams",
                "fields": {"detect_races": True},
            },
            "jax_enable_x64": True,
        },
        "uncarried": {"jax_default_device": "a Device value"},
    }
    state = typed.decode(JaxState, old)
    assert state.values["jax_numpy_dtype_promotion"] == _context._encode(PROMOTION)
    assert state.values["a_tuple"] == TupleValue(items=("b", 1))
    assert _context._decode(state.values["a_set"]) == frozenset({"a", "b"})
    params = _context._decode(state.values["pallas_tpu_interpret_mode_context_manager"])
    assert params == pltpu.InterpretParams(detect_races=True)
    assert state.values["jax_enable_x64"] is True
    assert state.uncarried == {"jax_default_device": "a Device value"}


@pytest.mark.parametrize(
    ("damaged", "named"),
    [
        (
            {"values": {"jax_numpy_dtype_promotion": {"enum": 3, "name": "STRICT"}}},
            r"jax_state\.values\['jax_numpy_dtype_promotion'\]: .*as EnumValue: enum: "
            r"expected str, got int 3",
        ),
        (
            {"values": {"a_tuple": {"items": ["b", [1]], "as": "tuple"}}},
            r"jax_state\.values\['a_tuple'\]: .*as TupleValue: items\[1\]",
        ),
        (
            {"values": {"pallas": {"dataclass": "jax:P", "fields": {"detect_races": [1]}}}},
            r"jax_state\.values\['pallas'\]: .*as DataclassValue: fields\['detect_races'\]",
        ),
        ({"values": ["jax_enable_x64"]}, r"jax_state\.values: expected a map"),
        ({"uncarried": {"jax_default_device": 1}}, r"jax_state\.uncarried\['jax_default_device'\]"),
    ],
    ids=["enum", "tuple", "dataclass", "values", "uncarried"],
)
def test_a_damaged_snapshot_is_refused_naming_the_option(damaged, named):
    raw = {"handler": "jaxtune.x", "op": "x", "jax_state": damaged}
    with pytest.raises(FrameError, match=named):
        Request.from_wire(raw)


class _NotJax(enum.Enum):
    A = 1


@dataclasses.dataclass
class _NotJaxRecord:
    a: int = 1


@pytest.mark.parametrize(
    ("value", "why"),
    [
        ([1, 2], "a list value"),
        (("a", [1]), "a tuple value"),  # a tuple of plain values only
        (_NotJax.A, f"a _NotJax from {__name__}, not from JAX"),
        (_NotJaxRecord(), f"a _NotJaxRecord from {__name__}, not from JAX"),
        (object(), "a object value"),
    ],
)
def test_what_cannot_travel_is_said_as_before(value, why):
    """Which values stay behind, and why, is as it was before the snapshot was typed."""
    with pytest.raises(Unencodable, match=why):
        _context._encode(value)
