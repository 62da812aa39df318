"""The annotation-driven codec every record is written with (frames, entries, plans,
digests, recordings, sidecars): every annotation it reads round-trips through msgpack, what
a class says of itself (checks, tags, versions and the reading of earlier ones, defaults left
out, a list form) holds, a generic record reads its parameter as asked, and a value of the
wrong shape is refused with its path."""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping, Sequence
from typing import Annotated, Any, ClassVar, Generic, Literal, Required, TypedDict, TypeVar

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


POSITIVE = typed.Check(lambda v: v > 0, "a number > 0")


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Hit:
    WIRE_TAG: ClassVar = ("ok", True)
    WIRE_VERSION: ClassVar = 2

    time: Annotated[float, POSITIVE]
    rounds: Annotated[tuple[float, ...], typed.AS_IS] = ()
    calls: int = dataclasses.field(default=0, metadata=typed.OMIT_DEFAULT)


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Miss:
    WIRE_TAG: ClassVar = ("ok", False)

    why: str


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Tagged:
    WIRE_TAG: ClassVar = ("format", "a file")
    WIRE_TAG_REQUIRED: ClassVar = True

    name: str


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Pair:
    WIRE_AS_LIST: ClassVar = True

    name: str
    parts: tuple[tuple[str, int], ...] = ()


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Holder:
    results: tuple[Hit | Miss, ...] = ()
    pair: Pair | None = None


def test_what_a_record_class_says_of_itself_is_written_and_read_back():
    hit = Hit(time=2.5, rounds=(2.0, 3.0))
    assert typed.encode(hit) == {"ok": True, "v": 2, "time": 2.5, "rounds": (2.0, 3.0)}
    assert typed.encode(dataclasses.replace(hit, calls=3))["calls"] == 3  # left out at 0
    assert typed.encode(Miss(why="x")) == {"ok": False, "why": "x"}
    assert typed.encode(Pair(name="d", parts=(("a", 1),))) == ["d", [["a", 1]]]
    held = Holder(results=(hit, Miss(why="x")), pair=Pair(name="d"))
    raw = unpackb(packb(typed.encode(held)))
    assert raw["results"][0]["rounds"] == (2.0, 3.0)  # the codec's tuple, as written
    assert typed.decode(Holder, raw) == held
    assert typed.decode(Pair, ["d"]) == Pair(name="d")  # a trailing default left out
    assert typed.decode(Hit, {"time": 1.0}) == Hit(time=1.0)  # no version: version 1
    assert typed.encode(Tagged(name="x")) == {"format": "a file", "name": "x"}
    assert typed.decode(Tagged, {"format": "a file", "name": "x"}) == Tagged(name="x")


@pytest.mark.parametrize(
    ("kind", "raw", "why"),
    [
        (Hit, {"time": -1.0}, r"Hit.time: expected a number > 0, got float -1.0"),
        (Hit, {"time": "1"}, r"Hit.time: expected a number > 0, got str '1'"),
        (Hit, {"ok": False, "time": 1.0}, r"Hit.ok: expected True, got False"),
        (Hit, {"v": 3, "time": 1.0}, r"a Hit of version 3, written by a newer jaxtune"),
        (Hit, {"v": "2", "time": 1.0}, r"Hit.v: expected a version number"),
        (Tagged, {"name": "x"}, r"^Tagged.format: missing$"),
        (Tagged, {"format": "b file", "name": "x"}, r"^Tagged.format: expected 'a file'"),
        (Holder, {"results": [{"why": "x"}]}, r"Holder.results\[0\].ok: missing"),
        (Holder, {"results": [{"ok": 1, "why": "x"}]}, r"results\[0\].ok: expected one of"),
        (Holder, {"results": [3]}, r"expected a Hit or a Miss \(a map with 'ok'\)"),
        (Holder, {"results": [{"ok": False}]}, r"Holder.results\[0\].why: missing"),
        (Holder, {"pair": ["d", [["a", "1"]]]}, r"Holder.pair.parts\[0\]\[1\]: expected int"),
        (Holder, {"pair": ["d", [], 3]}, r"Holder.pair: expected a Pair \(a list of 2\)"),
    ],
)
def test_a_record_that_breaks_what_its_class_says_is_refused_by_path(kind, raw, why):
    with pytest.raises(typed.MismatchError, match=why):
        typed.decode(kind, raw)


def test_a_refusal_says_the_field_what_it_expected_and_what_came():
    with pytest.raises(typed.MismatchError) as caught:
        typed.decode(Holder, {"results": [{"ok": True, "time": 0.0}]})
    e = caught.value
    assert (e.field, e.where, e.expected, e.got) == (
        "time",
        "Holder.results[0].time",
        "a number > 0",
        "float 0.0",
    )


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Tree:
    """A record that holds records of its own kind, through a map and a union."""

    label: str
    children: Mapping[str, Tree | int] = dataclasses.field(default_factory=dict)
    first: Tree | None = None


def test_a_record_may_hold_records_of_its_own_kind():
    leaf = Tree(label="leaf")
    tree = Tree(label="root", children={"a": leaf, "b": 2}, first=Tree(label="x", first=leaf))
    written = typed.encode(tree)
    assert written["children"]["a"] == {"label": "leaf", "children": {}, "first": None}
    assert typed.decode(Tree, unpackb(packb(written))) == tree
    bad = {"label": "root", "first": {"label": "x", "first": {"label": 3}}}
    with pytest.raises(
        typed.MismatchError, match=r"^Tree\.first\.first\.label: expected str, got int 3"
    ):
        typed.decode(Tree, bad)


T = TypeVar("T")


def _flat(raw: Mapping[str, Any], version: int) -> dict[str, Any]:
    """Version 1 of :class:`Envelope` kept its body's fields beside its own."""
    return {"head": raw.get("head"), "body": {k: v for k, v in raw.items() if k != "head"}}


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Envelope(Generic[T]):
    WIRE_VERSION: ClassVar = 2
    WIRE_UPGRADE: ClassVar = staticmethod(_flat)

    head: str
    body: T
    extra: tuple[T, ...] = ()


def test_a_generic_record_reads_its_parameter_as_asked_and_as_it_came_when_not():
    sent = Envelope(head="h", body=Inner(name="a", size=2), extra=(Inner(name="b"),))
    raw = unpackb(packb(typed.encode(sent)))
    assert raw == {
        "v": 2,
        "head": "h",
        "body": {"name": "a", "size": 2},
        "extra": [{"name": "b", "size": 0}],
    }
    assert typed.decode(Envelope[Inner], raw) == sent
    carried = typed.decode(Envelope, raw)  # the parameter not given: as it came
    assert carried.body == {"name": "a", "size": 2} and carried.extra == (raw["extra"][0],)
    assert typed.encode(carried) == raw  # and written back as it came
    assert typed.decode(tuple[Envelope[Inner], ...], [raw]) == (sent,)
    with pytest.raises(typed.MismatchError, match=r"Envelope.body.size: expected int"):
        typed.decode(Envelope[Inner], {**raw, "body": {"name": "a", "size": "2"}})
    with pytest.raises(typed.MismatchError, match=r"Envelope.extra\[0\].name: missing"):
        typed.decode(Envelope[Inner], {**raw, "extra": [{}]})


def test_a_map_of_an_earlier_version_is_read_as_its_class_upgrades_it():
    assert typed.decode(Envelope[Inner], {"head": "h", "name": "a"}) == Envelope(
        head="h", body=Inner(name="a")
    )
    with pytest.raises(typed.MismatchError, match=r"Envelope.body.size: expected int"):
        typed.decode(Envelope[Inner], {"head": "h", "name": "a", "size": "big"})
    # A map of this version is read as it is (a body field named like the head's stays put).
    raw = {"v": 2, "head": "h", "body": {"name": "a"}, "name": "ignored"}
    assert typed.decode(Envelope[Inner], raw).body == Inner(name="a")
    with pytest.raises(typed.MismatchError, match="version 3, written by a newer jaxtune"):
        typed.decode(Envelope[Inner], {**raw, "v": 3})
