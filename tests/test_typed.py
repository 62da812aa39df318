"""The annotation-driven codec the frames are written with: every annotation it reads
round-trips through msgpack, and a value of the wrong shape is refused with its path."""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping, Sequence
from typing import Any, Literal, Required, TypedDict

import pytest

from jaxtune._core import typed
from jaxtune._core.codec import packb, unpackb


class Colour(enum.Enum):
    RED = "red"
    BLUE = "blue"


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Inner:
    name: str
    size: int = 0


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Other:
    label: str


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Outer:
    inner: Inner
    items: tuple[Inner, ...] = ()
    pair: tuple[int, str] = (0, "")
    names: list[str] = dataclasses.field(default_factory=list)
    seq: Sequence[float] = ()
    table: Mapping[str, int | None] = dataclasses.field(default_factory=dict)
    colour: Colour = Colour.RED
    mode: Literal["fast", "slow"] | bool = False
    either: Inner | Other | None = None
    anything: Any = None
    ratio: float = 0.0


FULL = Outer(
    inner=Inner(name="a", size=2),
    items=(Inner(name="b"), Inner(name="c", size=3)),
    pair=(7, "x"),
    names=["p", "q"],
    seq=(1.5, 2.0),
    table={"k": 1, "n": None},
    colour=Colour.BLUE,
    mode="slow",
    either=Other(label="o"),
    anything={"config": (128, "tuple stays a tuple")},
    ratio=3.0,
)


@pytest.mark.parametrize("value", [FULL, Outer(inner=Inner(name="z")), Inner(name="i")])
def test_values_round_trip_through_msgpack(value):
    assert typed.decode(type(value), unpackb(packb(typed.encode(value)))) == value


def test_encoding_writes_plain_values_and_leaves_any_alone():
    wire = typed.encode(FULL)
    assert wire["items"] == [{"name": "b", "size": 0}, {"name": "c", "size": 3}]
    assert (wire["colour"], wire["either"], wire["pair"]) == ("blue", {"label": "o"}, [7, "x"])
    assert wire["anything"] == {"config": (128, "tuple stays a tuple")}


def test_missing_fields_take_their_defaults_and_unknown_keys_are_ignored():
    assert typed.decode(Outer, {"inner": {"name": "a"}, "new": 1}) == Outer(inner=Inner(name="a"))
    assert typed.decode(Outer, {"inner": {"name": "a"}, "ratio": 2}).ratio == 2.0


@pytest.mark.parametrize(
    "change, why",
    [
        ({"inner": {}}, r"^Outer\.inner\.name: missing$"),
        ({"inner": {"name": "a", "size": True}}, r"^Outer\.inner\.size: expected int, got bool"),
        ({"items": [{"name": "b"}, {"name": 2}]}, r"^Outer\.items\[1\]\.name: expected str"),
        ({"items": "ab"}, r"^Outer\.items: expected a list, got str"),
        ({"pair": [1]}, r"^Outer\.pair: expected a list of 2"),
        ({"pair": [1, 2]}, r"^Outer\.pair\[1\]: expected str"),
        ({"table": {"k": "1"}}, r"^Outer\.table\['k'\]: expected int, got str"),
        ({"table": [1]}, r"^Outer\.table: expected a map"),
        ({"colour": "green"}, r"^Outer\.colour: expected one of \['red', 'blue'\]"),
        ({"mode": "medium"}, r"^Outer\.mode: as Literal.*as bool"),
        ({"mode": 1}, r"^Outer\.mode: .*got int 1"),
        ({"either": {"size": 1}}, r"^Outer\.either: as Inner: no name; as Other: no label$"),
        ({"ratio": "1.0"}, r"^Outer\.ratio: expected float, got str"),
    ],
)
def test_a_value_of_the_wrong_shape_is_refused_with_its_path(change, why):
    raw = {**typed.encode(Outer(inner=Inner(name="a"))), **change}
    with pytest.raises(typed.MismatchError, match=why):
        typed.decode(Outer, raw)


def test_a_class_check_is_a_mismatch_and_where_names_the_value():
    @dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
    class Positive:
        n: int

        def __post_init__(self) -> None:
            if self.n <= 0:
                raise ValueError("n is positive")

    with pytest.raises(typed.MismatchError, match=r"^the count: n is positive$"):
        typed.decode(Positive, {"n": 0}, "the count")
    with pytest.raises(typed.MismatchError, match=r"^Positive: expected a Positive \(a map\)"):
        typed.decode(Positive, [("n", 1)])


class Record(TypedDict, total=False):
    name: Required[str]
    sizes: Sequence[int]


def test_a_typeddict_is_read_as_a_checked_dict_of_its_keys():
    assert typed.decode(Record, {"name": "a", "sizes": [1, 2], "x": 3}) == {
        "name": "a",
        "sizes": (1, 2),
    }
    with pytest.raises(typed.MismatchError, match=r"^sizes\[1\]: expected int, got str"):
        typed.decode(Record, {"name": "a", "sizes": [1, "2"]}, "")
    with pytest.raises(typed.MismatchError, match=r"^Record\.name: missing$"):
        typed.decode(Record, {"sizes": []})
