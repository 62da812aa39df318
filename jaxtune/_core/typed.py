"""Frozen dataclasses to msgpack-ready values and back, read from their annotations.

:func:`encode` turns a dataclass into a map of its fields (nested dataclasses as maps,
tuples as lists, enums as their values) and :func:`decode` reads such a map back as the
type it is asked for, checking every field against its annotation: ``int`` (never a
``bool``), ``float`` (an ``int`` too), ``str``, ``bool``, ``bytes``, ``None``, enums (by
value), ``Literal[...]``, ``tuple[X, ...]``, ``tuple[X, Y]``, ``list[X]``, ``Sequence[X]``
(read as a tuple), ``Mapping[K, V]`` / ``dict[K, V]``, unions (``X | None``; a union of
dataclasses takes the first that reads), nested dataclasses, ``TypedDict`` maps (read as
plain dicts), and ``Any`` (taken as it is: config values, encoded arguments). A missing
field takes its default; a field without one, or a value of the wrong type, raises
:class:`MismatchError` naming the field by its path. Keys a map holds beyond the fields are
ignored (a newer writer may add some). Nothing is built but the dataclass asked for and the
types its annotations name, so a hostile map runs no code.

What a record says of itself beyond its fields' types, the codec reads from the class and
its annotations, never from code written per class:

- ``Annotated[X, Check(accepts, expected)]``: a value read as ``X`` must also pass
  ``accepts`` (a finite time, a config of storable values); else the field is refused as
  "expected <expected>".
- ``Annotated[X, Written(fn)]``: the field is written as ``fn(value)`` (:data:`AS_IS`: as it
  is, so a tuple stays the codec's tuple); it is read as ``X``.
- ``dataclasses.field(..., metadata=OMIT_DEFAULT)``: a field left out of the map while it
  holds its default (older readers never saw it; a reader takes the default back);
  ``metadata=LOCAL``: a field never written nor read (worked out where it is used).
- ``WIRE_TAG: ClassVar = (key, value)``: the map carries ``key: value`` first; a union of tagged
  classes is read as the class its tag names (``ok: True`` a measurement, ``ok: False`` a
  failure; ``t: "call"`` a recorded call). A map read as the class alone may leave the tag
  out, unless the class says ``WIRE_TAG_REQUIRED: ClassVar = True`` (a file's format name:
  a map without it is some other file's).
- ``WIRE_VERSION: ClassVar[int]``: the map carries ``v``; a map of a later version is refused
  as written by a newer jaxtune, one without ``v`` reads as version 1.
- ``WIRE_UPGRADE: ClassVar = staticmethod(fn)``: a map of an earlier version is read as
  ``fn(map, version)``, the map this version writes for it (a request's flow fields, kept
  beside the call's before they had a field of their own).
- ``WIRE_AS_LIST: ClassVar = True``: the record is written as the list of its fields, in order
  (a code digest's ``[digest, parts]``).

A record may be generic (``class Request(Generic[F])``): read as ``Request[X]``, each field
annotated with ``F`` is read as ``X``; read as ``Request``, such a field is taken as it comes
(a flow that carries it without reading it). A field of a type parameter is written as its
value's own record (a dataclass, by its class), or as it is.

Each class's reader and writer are built once, from its annotations, and cached; a record's
fields' are built on its first use, so that a record may hold records of its own kind
(through a union or a map: a JAX dataclass value whose fields are such values).

Examples:
    >>> @dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
    ... class Point:
    ...     x: int
    ...     tags: tuple[str, ...] = ()
    >>> encode(Point(x=1, tags=("a",)))
    {'x': 1, 'tags': ['a']}
    >>> decode(Point, {"x": 1})
    Point(x=1, tags=())
    >>> decode(Point, {"x": "1"})
    Traceback (most recent call last):
    ...
    jaxtune._core.typed.MismatchError: Point.x: expected int, got str '1'
"""

from __future__ import annotations

import collections.abc
import dataclasses
import enum
import functools
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

__all__ = [
    "AS_IS",
    "LOCAL",
    "OMIT_DEFAULT",
    "Check",
    "MismatchError",
    "Written",
    "decode",
    "encode",
]

T = TypeVar("T")
_Read = Callable[[Any], Any]
_Write = Callable[[Any], Any]


@dataclasses.dataclass(frozen=True, slots=True)
class Check:
    """``Annotated`` metadata: what a value read must also be (``accepts``), and how an error
    says it (``expected``, after "expected")."""

    accepts: Callable[[Any], bool]
    expected: str


@dataclasses.dataclass(frozen=True, slots=True)
class Written:
    """``Annotated`` metadata: how a field is written (``form`` of its value), when not as its
    type says."""

    form: Callable[[Any], Any]


def _as_is(value: Any) -> Any:
    return value


#: A field written as it is (a tuple stays the codec's tuple, not a list).
AS_IS = Written(_as_is)

#: Field metadata: the field is left out of the map while it holds its default.
OMIT_DEFAULT: Mapping[str, Any] = types.MappingProxyType({"jaxtune.typed.omit": True})

#: Field metadata: the field never travels nor is stored (worked out where it is used); a
#: record read takes its default.
LOCAL: Mapping[str, Any] = types.MappingProxyType({"jaxtune.typed.local": True})

#: The key a record's version is written under (``WIRE_VERSION``).
VERSION_KEY = "v"


class MismatchError(ValueError):
    """A value that is not of the type it is read as (the message names the field).

    ``expected`` (what the field should hold) and ``got`` (what it held) are set when a
    value of the wrong kind was met, and empty for a missing field or a refused record."""

    def __init__(self, detail: str, *, expected: str = "", got: str = "") -> None:
        super().__init__(detail)
        self.detail = detail
        self.expected = expected
        self.got = got
        #: Where the value sits, innermost last (``.thread``, ``[2]``), gathered on the
        #: way out so that a value read without fault builds no path.
        self.path: list[str] = []

    def at(self, step: str) -> MismatchError:
        """This error, one step further out (``step`` goes before the path so far)."""
        self.path.insert(0, step)
        return self

    @property
    def where(self) -> str:
        """The path to the value: ``measurements[0].behind``."""
        return "".join(self.path).lstrip(".")

    @property
    def field(self) -> str:
        """The innermost field named on the path (``behind``), or ``""``."""
        names = [p[1:] for p in self.path if p.startswith(".")]
        return names[-1] if names else ""

    def __str__(self) -> str:
        path = self.where
        return f"{path}: {self.detail}" if path else self.detail


def encode(value: Any) -> Any:
    """``value`` (a dataclass instance) as msgpack-ready values: see the module's doc."""
    return _writer(type(value))(value)  # type: ignore[arg-type]


@typing.overload
def decode(kind: type[T], raw: Any, where: str | None = None, *, within: str = "") -> T: ...
@typing.overload
def decode(kind: Any, raw: Any, where: str | None = None, *, within: str = "") -> Any: ...
def decode(kind: Any, raw: Any, where: str | None = None, *, within: str = "") -> Any:
    """``raw`` read as ``kind`` (a dataclass, or any annotation the module's doc lists);
    ``where`` names it in an error (default: the type's name; ``""``: its fields alone),
    and ``within`` what it was read from (a file, a frame's place in it), before the rest.

    Raises:
        MismatchError: ``raw`` does not have the shape ``kind``'s annotations say.
    """
    try:
        return _reader(kind)(raw)
    except MismatchError as e:
        e.at(_name(kind) if where is None else where)
        if within:
            raise MismatchError(f"{within}: {e}", expected=e.expected, got=e.got) from None
        raise e from None


def _fail(expected: str, raw: Any) -> typing.NoReturn:
    got = f"{type(raw).__name__} {_short(raw)}"
    raise MismatchError(f"expected {expected}, got {got}", expected=expected, got=got)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls, include_extras=True)


_NO_DEFAULT = object()


def _default(f: dataclasses.Field[Any]) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return _NO_DEFAULT


def _fields(cls: type, given: tuple[Any, ...] = ()) -> list[tuple[str, Any, bool]]:
    """(name, annotation, has a default) of each of the dataclass's init fields that is
    written (not :data:`LOCAL`), its type parameters replaced by those ``given``."""
    hints = _hints(cls)
    params = dict(zip(getattr(cls, "__parameters__", ()), given, strict=False))
    return [
        (f.name, _given(hints[f.name], params), _default(f) is not _NO_DEFAULT)
        for f in _written(cls)
    ]


def _given(tp: Any, params: Mapping[Any, Any]) -> Any:
    """Annotation ``tp`` with the type parameters ``params`` names replaced."""
    if not params:
        return tp
    if isinstance(tp, typing.TypeVar):
        return params.get(tp, tp)
    inner = getattr(tp, "__parameters__", ())
    return tp[tuple(params.get(p, p) for p in inner)] if inner else tp


def _record(tp: Any) -> tuple[type | None, tuple[Any, ...]]:
    """The dataclass ``tp`` is (``Request[X]``: ``Request`` and ``(X,)``), or ``None``."""
    if isinstance(tp, type):
        return (tp, ()) if dataclasses.is_dataclass(tp) else (None, ())
    origin = typing.get_origin(tp)
    if isinstance(origin, type) and dataclasses.is_dataclass(origin):
        return origin, typing.get_args(tp)
    return None, ()


def _written(cls: type) -> list[dataclasses.Field[Any]]:
    return [
        f
        for f in dataclasses.fields(cls)
        if f.init and not f.metadata.get("jaxtune.typed.local", False)
    ]


def _is_union(tp: Any) -> bool:
    return typing.get_origin(tp) in (typing.Union, types.UnionType)


def _annotated(tp: Any) -> tuple[Any, tuple[Any, ...]]:
    """``(X, metadata)`` of ``Annotated[X, ...]``; ``(tp, ())`` for any other annotation."""
    if typing.get_origin(tp) is typing.Annotated:
        return tp.__origin__, tp.__metadata__
    return tp, ()


def _tag(cls: Any) -> tuple[str, Any] | None:
    """The ``(key, value)`` a record class's maps carry (its ``WIRE_TAG``), if it has one."""
    record = _record(cls)[0]
    tag = getattr(record, "WIRE_TAG", None) if record is not None else None
    return tag if isinstance(tag, tuple) and len(tag) == 2 else None


# -- writing ----------------------------------------------------------------------------


def _same(value: Any) -> Any:
    return value


@functools.cache
def _writer(tp: Any) -> _Write:
    """How a value of annotation ``tp`` is written (built once per annotation)."""
    if isinstance(tp, typing.TypeVar):
        return _by_value
    inner, meta = _annotated(tp)
    if meta:
        written = [m for m in meta if isinstance(m, Written)]
        return written[-1].form if written else _writer(inner)
    record = _record(tp)[0]
    if record is not None:
        return _dataclass_writer(record)
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return _enum_value
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if _is_union(tp):
        return _union_writer(args)
    if origin in (tuple, list, collections.abc.Sequence):
        items = [_writer(a) for a in args if a is not Ellipsis]
        if not items or all(w is _same for w in items):
            return list
        if len(items) == 1:
            one = items[0]
            return lambda value: [one(v) for v in value]
        return lambda value: [w(v) for w, v in zip(items, value, strict=True)]
    if origin in (dict, collections.abc.Mapping):
        item = _writer(args[1]) if args else _same
        if item is _same:
            return dict
        return lambda value: {k: item(v) for k, v in value.items()}
    return _same


def _enum_value(value: enum.Enum) -> Any:
    return value.value


def _lazy(build: Callable[[], T]) -> Callable[[], T]:
    """``build()``, worked out when first asked for: a record's fields' readers and writers
    are built on its first use, so that a record may hold records of its own kind (through
    a union or a map) without building itself forever."""
    built: list[T] = []

    def get() -> T:
        if not built:
            built.append(build())  # two threads may both build it: the same either way
        return built[0]

    return get


def _by_value(value: Any) -> Any:
    """A value of a type parameter: its own record when it is one, else as it is."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return encode(value)
    return value


def _dataclass_writer(cls: type) -> _Write:
    hints = _hints(cls)
    fields = _lazy(
        lambda: [
            (
                f.name,
                _writer(hints[f.name]),
                f.metadata.get("jaxtune.typed.omit", False),
                _default(f),
            )
            for f in _written(cls)
        ]
    )
    head: dict[str, Any] = {}
    tag = _tag(cls)
    if tag is not None:
        head[tag[0]] = tag[1]
    version = getattr(cls, "WIRE_VERSION", None)
    if version is not None:
        head[VERSION_KEY] = version
    if getattr(cls, "WIRE_AS_LIST", False):
        return lambda value: [w(getattr(value, name)) for name, w, _, _ in fields()]

    def write(value: Any) -> dict[str, Any]:
        out = dict(head)
        for name, w, omit, default in fields():
            v = getattr(value, name)
            if not (omit and v == default):
                out[name] = w(v)
        return out

    return write


def _union_writer(args: tuple[Any, ...]) -> _Write:
    writers = {a: _writer(a) for a in args if a is not type(None)}
    if all(w is _same for w in writers.values()):
        return _same
    if len(writers) == 1:
        (only,) = writers.values()
        return lambda value: None if value is None else only(value)

    def write(value: Any) -> Any:
        w = writers.get(type(value))
        if w is None:  # a subclass, or a parameterised annotation (list[int])
            w = next((w for a, w in writers.items() if _is_instance(value, a)), _same)
        return None if value is None else w(value)

    return write


def _is_instance(value: Any, tp: Any) -> bool:
    origin = typing.get_origin(tp) or tp
    return isinstance(origin, type) and isinstance(value, origin)


# -- reading ----------------------------------------------------------------------------


def _any(raw: Any) -> Any:
    return raw


_MISSING = object()
_NAMES = {int: "int", float: "float", str: "str", bool: "bool", bytes: "bytes"}


@functools.cache
def _reader(tp: Any) -> _Read:
    """How a value of annotation ``tp`` is read (built once per annotation)."""
    if tp is Any or tp is object or isinstance(tp, typing.TypeVar):
        return _any  # a type parameter not given: taken as it comes
    inner, meta = _annotated(tp)
    if meta:
        checks = [m for m in meta if isinstance(m, Check)]
        return _checked_reader(_reader(inner), checks) if checks else _reader(inner)
    if tp is None or tp is type(None):
        return _none
    if tp in _NAMES:
        return _scalar_reader(tp)
    record, given = _record(tp)
    if record is not None:
        return _dataclass_reader(record, given)
    if typing.is_typeddict(tp):
        return _typeddict_reader(tp)
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return _enum_reader(tp)
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if _is_union(tp):
        return _union_reader(args)
    if origin is typing.Literal:
        return _literal_reader(args)
    if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
        return _sequence_reader(_reader(args[0]), tuple, _exact(args[0])[0])
    if origin is tuple:
        return _fixed_reader([_reader(a) for a in args])
    if origin in (list, collections.abc.Sequence):
        make = list if origin is list else tuple
        item = args[0] if args else Any
        return _sequence_reader(_reader(item), make, _exact(item)[0])
    if origin in (dict, collections.abc.Mapping):
        key, item = args or (Any, Any)
        return _mapping_reader(_reader(key), _reader(item), _exact(key), _exact(item))
    raise TypeError(f"jaxtune's typed codec cannot read {tp!r}")  # a programming error


#: The types a value is checked against by ``type(value) is ...`` alone, in line.
_EXACT = (str, int, bool, bytes)


def _exact(tp: Any) -> tuple[type | None, bool]:
    """The type of ``_EXACT`` that ``tp`` is, or that ``tp`` is with ``None`` (and whether
    ``None`` may stand for it); ``(None, False)`` for any other annotation."""
    if tp in _EXACT:
        return tp, False
    args = typing.get_args(tp) if _is_union(tp) else ()
    if len(args) == 2 and type(None) in args:
        (other,) = (a for a in args if a is not type(None))
        if other in _EXACT:
            return other, True
    return None, False


def _checked_reader(read_inner: _Read, checks: list[Check]) -> _Read:
    """Reads as ``read_inner`` does, then holds the value to each check: a value refused
    either way is "expected" what the last check says."""
    expected = checks[-1].expected

    def read(raw: Any) -> Any:
        try:
            value = read_inner(raw)
        except MismatchError:
            _fail(expected, raw)
        if not all(c.accepts(value) for c in checks):
            _fail(expected, raw)
        return value

    return read


def _none(raw: Any) -> None:
    if raw is not None:
        _fail("nothing (None)", raw)


def _scalar_reader(kind: type) -> _Read:
    name = _NAMES[kind]
    if kind is float:

        def read_float(raw: Any) -> float:
            if type(raw) is float:
                return raw
            if type(raw) is int:
                return float(raw)
            _fail(name, raw)

        return read_float

    def read(raw: Any) -> Any:
        if type(raw) is kind:  # exact: a bool is no int here
            return raw
        _fail(name, raw)

    return read


def _enum_reader(kind: type[enum.Enum]) -> _Read:
    def read(raw: Any) -> enum.Enum:
        try:
            return kind(raw)
        except (ValueError, TypeError):
            _fail(f"one of {[m.value for m in kind]}", raw)

    return read


def _literal_reader(values: tuple[Any, ...]) -> _Read:
    def read(raw: Any) -> Any:
        for v in values:  # by type too: True is not 1
            if raw == v and type(raw) is type(v):
                return raw
        _fail(f"one of {list(values)}", raw)

    return read


def _union_reader(args: tuple[Any, ...]) -> _Read:
    optional = type(None) in args
    members = [a for a in args if a is not type(None)]
    tags = [_tag(a) for a in members]
    if len(members) > 1 and all(tags) and len({t[0] for t in tags if t}) == 1:
        return _tagged_reader(members, optional)
    readers = [(_reader(a), _name(a), _required(a)) for a in members]
    if len(readers) == 1:
        ((only, _, _),) = readers

        def read_optional(raw: Any) -> Any:
            return None if raw is None else only(raw)

        return read_optional

    def read(raw: Any) -> Any:
        if raw is None and optional:
            return None
        errors = []
        for r, name, required in readers:
            if required and _is_map(raw) and not required <= raw.keys():
                errors.append(f"as {name}: no {', '.join(sorted(required - raw.keys()))}")
                continue  # a dataclass the map cannot be: spare the attempt
            try:
                return r(raw)
            except MismatchError as e:
                errors.append(f"as {name}: {e}")
        raise MismatchError("; ".join(errors))

    return read


def _tagged_reader(members: list[Any], optional: bool) -> _Read:
    """A union of record classes that each carry a tag under one key: read as the class
    whose tag the map holds."""
    key = _tag(members[0])[0]  # type: ignore[index]
    by_tag = [(_tag(m)[1], _reader(m)) for m in members]  # type: ignore[index]
    expected = f"one of {[t for t, _ in by_tag]}"
    kinds = " or a ".join(_name(m) for m in members)
    a_map = f"a {kinds} (a map with {key!r})"

    def read(raw: Any) -> Any:
        if raw is None and optional:
            return None
        if not _is_map(raw):
            _fail(a_map, raw)
        value = raw.get(key, _MISSING)
        for tag, r in by_tag:  # by type too: True is not 1
            if value == tag and type(value) is type(tag):
                return r(raw)
        if value is _MISSING:
            raise MismatchError("missing").at(f".{key}")
        try:
            _fail(expected, value)
        except MismatchError as e:
            raise e.at(f".{key}") from None

    return read


def _required(tp: Any) -> frozenset[str]:
    """The fields a dataclass cannot do without (none for another type)."""
    record, given = _record(tp)
    if record is not None:
        return frozenset(name for name, _, has_default in _fields(record, given) if not has_default)
    return frozenset()


def _name(tp: Any) -> str:
    return str(getattr(_record(tp)[0] or tp, "__name__", tp))


def _is_sequence(raw: Any) -> bool:
    return type(raw) in (list, tuple)  # what msgpack reads back; never a str or a map


def _sequence_reader(item: _Read, make: type, exact: type | None = None) -> _Read:
    def read(raw: Any) -> Any:
        if not _is_sequence(raw):
            _fail("a list", raw)
        if item is _any or (exact is not None and all(type(v) is exact for v in raw)):
            return make(raw)
        try:
            return make([item(v) for v in raw])
        except MismatchError as e:
            raise e.at(f"[{_failing(item, raw)}]") from None

    return read


def _failing(item: _Read, values: Any) -> int:
    """The index of the first of ``values`` that ``item`` refuses."""
    for i, v in enumerate(values):
        try:
            item(v)
        except MismatchError:
            return i
    return -1


def _fixed_reader(items: list[_Read]) -> _Read:
    def read(raw: Any) -> tuple[Any, ...]:
        if not _is_sequence(raw) or len(raw) != len(items):
            _fail(f"a list of {len(items)}", raw)
        for i, (r, v) in enumerate(zip(items, raw, strict=True)):
            try:
                r(v)
            except MismatchError as e:
                raise e.at(f"[{i}]") from None
        return tuple(r(v) for r, v in zip(items, raw, strict=True))

    return read


def _is_map(raw: Any) -> bool:
    return type(raw) is dict or isinstance(raw, Mapping)  # the ABC check is slow


def _mapping_reader(
    key: _Read,
    item: _Read,
    key_exact: tuple[type | None, bool] = (None, False),
    item_exact: tuple[type | None, bool] = (None, False),
) -> _Read:
    kx, vx, v_none = key_exact[0], item_exact[0], item_exact[1]

    def quick(raw: Any) -> bool:
        """Whether every key and value passes by its type alone."""
        if key is not _any and (kx is None or not all(type(k) is kx for k in raw)):
            return False
        if item is _any:
            return True
        if vx is None:
            return False
        return all(type(v) is vx or (v_none and v is None) for v in raw.values())

    def read(raw: Any) -> dict[Any, Any]:
        if not _is_map(raw):
            _fail("a map", raw)
        if quick(raw):
            return dict(raw)
        try:
            return {key(k): item(v) for k, v in raw.items()}
        except MismatchError as e:
            raise e.at(f"[{_failing_key(key, item, raw)!r:.40}]") from None

    return read


def _failing_key(key: _Read, item: _Read, raw: Mapping[Any, Any]) -> Any:
    """The first key of ``raw`` that ``key`` refuses, or whose value ``item`` refuses."""
    for k, v in raw.items():
        try:
            key(k), item(v)
        except MismatchError:
            return k
    return None


def _dataclass_reader(cls: type, given: tuple[Any, ...] = ()) -> _Read:
    # A field of an exact type (str, int...) is checked in line: most fields are.
    fields = _lazy(
        lambda: [
            (name, _reader(tp), has_default, *_exact(tp))
            for name, tp, has_default in _fields(cls, given)
        ]
    )
    expected = f"a {cls.__name__} (a map)"
    tag = _tag(cls)
    tag_required = tag is not None and getattr(cls, "WIRE_TAG_REQUIRED", False)
    version = getattr(cls, "WIRE_VERSION", None)
    upgrade = getattr(cls, "WIRE_UPGRADE", None)
    if getattr(cls, "WIRE_AS_LIST", False):
        return _list_form_reader(cls, fields())

    def read(raw: Any) -> Any:
        if not _is_map(raw):
            _fail(expected, raw)
        if tag_required and tag[0] not in raw:  # type: ignore[index]
            raise MismatchError("missing").at(f".{tag[0]}")  # type: ignore[index]
        if tag is not None and tag[0] in raw and raw[tag[0]] != tag[1]:
            raise MismatchError(
                f"expected {tag[1]!r}, got {raw[tag[0]]!r:.40}", expected=repr(tag[1])
            ).at(f".{tag[0]}")
        if version is not None:
            got = raw.get(VERSION_KEY, 1)
            _check_version(cls, version, got)
            if upgrade is not None and got < version:
                raw = upgrade(raw, got)
        values = {}
        for name, r, has_default, exact, nullable in fields():
            value = raw.get(name, _MISSING)
            if value is _MISSING:
                if not has_default:
                    raise MismatchError("missing").at(f".{name}")
            elif type(value) is exact or (nullable and value is None):
                values[name] = value
            else:
                values[name] = _field(name, r, value)
        return _built(cls, values)

    return read


def _field(name: str, read: _Read, value: Any) -> Any:
    try:
        return read(value)
    except MismatchError as e:
        raise e.at(f".{name}") from None


def _built(cls: type, values: dict[str, Any]) -> Any:
    try:
        return cls(**values)
    except (TypeError, ValueError) as e:  # what the class's own checks refuse
        raise MismatchError(str(e)) from None


def _check_version(cls: type, version: int, got: Any) -> None:
    if type(got) is not int or got < 1:
        raise MismatchError(
            f"expected a version number, got {got!r:.40}", expected="a version number"
        ).at(f".{VERSION_KEY}")
    if got > version:
        raise MismatchError(
            f"a {cls.__name__} of version {got}, written by a newer jaxtune (this one reads "
            f"versions up to {version}): upgrade jaxtune to read it"
        )


def _list_form_reader(cls: type, fields: list[Any]) -> _Read:
    """A record written as the list of its fields (``WIRE_AS_LIST``); trailing fields that have
    a default may be left out."""
    least = sum(1 for _, _, has_default, _, _ in fields if not has_default)
    expected = f"a {cls.__name__} (a list of {len(fields)})"

    def read(raw: Any) -> Any:
        if not _is_sequence(raw) or not least <= len(raw) <= len(fields):
            _fail(expected, raw)
        values = {
            name: _field(name, r, value)
            for (name, r, _, _, _), value in zip(fields, raw, strict=False)
        }
        return _built(cls, values)

    return read


def _typeddict_reader(kind: Any) -> _Read:
    """A map checked key by key against a ``TypedDict`` (its required keys must be there);
    read as a plain ``dict`` of the keys it names."""
    keys = []
    for name, tp in typing.get_type_hints(kind, include_extras=True).items():
        # Read from the annotation itself: Python 3.11 misses Required[...] written as a
        # string (postponed annotations) when it works out __required_keys__.
        required = name in kind.__required_keys__
        if typing.get_origin(tp) in (typing.Required, typing.NotRequired):
            required, tp = typing.get_origin(tp) is typing.Required, typing.get_args(tp)[0]
        keys.append((name, _reader(tp), required))
    expected = f"a {kind.__name__} (a map)"

    def read(raw: Any) -> dict[str, Any]:
        if not _is_map(raw):
            _fail(expected, raw)
        out = {}
        for name, r, required in keys:
            value = raw.get(name, _MISSING)
            if value is _MISSING:
                if required:
                    raise MismatchError("missing").at(f".{name}")
                continue
            try:
                out[name] = r(value)
            except MismatchError as e:
                raise e.at(f".{name}") from None
        return out

    return read
