"""Carrying the caller's JAX configuration into jaxtune's worker threads and child processes.

JAX context managers such as ``jax.enable_x64(True)``, ``jax.default_matmul_precision`` or
Pallas' ``force_tpu_interpret_mode()`` set *thread-local* configuration. A sweep compiles in
worker threads, which would otherwise see the global values and, for example, lower a TPU
kernel for real instead of in interpret mode. :func:`snapshot_local` snapshots the caller's local
values; the returned context manager re-applies them in whichever thread enters it.

A child process starts with JAX's defaults, so :func:`snapshot` writes down every option
as the caller sees it (thread-local or global) as a :class:`JaxState`, a typed record that
travels with a request (a plain value as it is; an enum member, a tuple or frozenset of
plain values, a JAX dataclass as a small record each), and :func:`apply_snapshot` sets
them in the child before it traces anything.
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import importlib
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, ClassVar

from .._core.errors import describe, warn_once
from .._core.jaxstate import INTERPRET as _INTERPRET
from .._core.jaxstate import states as _states
from .state import ISOLATION_STATE

__all__ = [
    "Carried",
    "DataclassValue",
    "EnumValue",
    "FrozensetValue",
    "JaxState",
    "Plain",
    "TupleValue",
    "Unencodable",
    "apply_snapshot",
    "describe_uncarried",
    "snapshot",
    "snapshot_local",
]

_UNSET: list[Any] = ISOLATION_STATE.keep(
    "unset marker", list, "what JAX's per-thread states hold in a thread that set nothing"
)


def _unset_marker() -> Any:
    """The value ``get_local`` returns in a thread that set nothing (read once)."""
    if not _UNSET:
        states = list(_states().values())
        if not states:
            return object()
        seen: list[Any] = []
        t = threading.Thread(target=lambda: seen.append(states[0].get_local()))
        t.start()
        t.join()
        _UNSET.append(seen[0])
    return _UNSET[0]


def snapshot_local() -> Callable[[], contextlib.AbstractContextManager[None]]:
    """Snapshots this thread's local JAX configuration; the result re-applies it."""
    unset = _unset_marker()
    local = {}
    for name, state in _states().items():
        try:
            value = state.get_local()
        except Exception:
            continue
        if value is not unset:
            local[name] = (state, value)

    @contextlib.contextmanager
    def apply() -> Iterator[None]:
        previous = []
        try:
            for state, value in local.values():
                previous.append((state, state.swap_local(value)))
                hook = getattr(state, "_update_thread_local_hook", None)
                if hook is not None:
                    hook(value)
            yield
        finally:
            for state, value in reversed(previous):
                state.set_local(value)
                hook = getattr(state, "_update_thread_local_hook", None)
                if hook is not None:
                    hook(None if value is unset else value)

    return apply


# -- the caller's JAX state, carried to a child process ---------------------------------

#: Options the child sets from its own environment (platform, devices); carrying the
#: parent's value would contradict what the runner chose for the child.
_CHILD_OWNS = frozenset(
    {"jax_platforms", "jax_platform_name", "jax_cuda_visible_devices", "jax_default_device"}
)


_PLAIN = (bool, int, float, str, type(None))

#: An option's value carried as it is.
Plain = bool | int | float | str | None


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class EnumValue:
    """A member of one of JAX's enums: its class (``module:qualname``) and its name."""

    enum: str
    name: str


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class TupleValue:
    """A tuple of plain values, in its order."""

    WIRE_TAG: ClassVar = ("as", "tuple")

    items: tuple[Plain, ...]


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class FrozensetValue:
    """A frozenset of plain values (written in one order, so that equal sets compare equal)."""

    WIRE_TAG: ClassVar = ("as", "frozenset")

    items: tuple[Plain, ...]


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class DataclassValue:
    """An instance of one of JAX's dataclasses (Pallas' ``InterpretParams``): its class
    (``module:qualname``) and each field's value."""

    dataclass: str
    fields: Mapping[str, Carried]


#: An option's value as it travels to a child.
Carried = Plain | EnumValue | TupleValue | FrozensetValue | DataclassValue


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class JaxState:
    """The caller's JAX state as a request carries it to a child (:func:`snapshot`): each
    option's value (``values``), and the options that could not travel, with why
    (``uncarried``). Written and read by :mod:`jaxtune._core.typed`, so a damaged one is
    refused naming the option; the maps older jaxtunes wrote read as the same records."""

    values: Mapping[str, Carried] = dataclasses.field(default_factory=dict)
    uncarried: Mapping[str, str] = dataclasses.field(default_factory=dict)


class Unencodable(Exception):  # noqa: N818 - a signal inside this module and the runner
    """A configuration value that cannot travel to another process."""


def _class_path(cls: type) -> str:
    module = cls.__module__
    if module.split(".")[0] not in ("jax", "jaxlib"):
        raise Unencodable(f"a {cls.__qualname__} from {module}, not from JAX")
    return f"{module}:{cls.__qualname__}"


def _encode(value: Any) -> Carried:
    if type(value) in _PLAIN:  # exact types: a str-valued Enum is no plain str
        return value
    if isinstance(value, enum.Enum):
        return EnumValue(enum=_class_path(type(value)), name=value.name)
    if isinstance(value, (tuple, frozenset)) and all(type(v) in _PLAIN for v in value):
        if isinstance(value, frozenset):
            return FrozensetValue(items=tuple(sorted(value, key=repr)))
        return TupleValue(items=value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = {f.name: _encode(getattr(value, f.name)) for f in dataclasses.fields(value)}
        return DataclassValue(dataclass=_class_path(type(value)), fields=fields)
    raise Unencodable(f"a {type(value).__name__} value")


def _resolve_class(path: str) -> Any:
    module, _, qualname = path.partition(":")
    if module.split(".")[0] not in ("jax", "jaxlib"):
        raise Unencodable(f"{path} is not a JAX class")
    obj: Any = importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


def _decode(value: Carried) -> Any:
    if isinstance(value, EnumValue):
        return _resolve_class(value.enum)[value.name]
    if isinstance(value, TupleValue):
        return value.items
    if isinstance(value, FrozensetValue):
        return frozenset(value.items)
    if isinstance(value, DataclassValue):
        fields = {k: _decode(v) for k, v in value.fields.items()}
        return _resolve_class(value.dataclass)(**fields)
    return value


def _carried_states() -> dict[str, Any]:
    """The ``jax.config`` options, plus Pallas' TPU interpret-mode switch (a module-level
    state outside ``jax.config``). Scoping states (meshes, devices, metadata) stay behind:
    they describe the caller's trace, not how to compile."""
    import jax

    found = dict(getattr(jax.config, "_value_holders", {}))
    interpret = _states().get(_INTERPRET)
    if interpret is not None:
        found[_INTERPRET] = interpret
    return found


def snapshot() -> JaxState:
    """The caller's JAX state as plain values, for a child process.

    Every ``jax.config`` option and every module-level JAX state (TPU interpret mode among
    them), read as this thread sees it: a thread-local value (``with
    force_tpu_interpret_mode():``, ``with jax.enable_x64(True):``) wins over the global one
    (``set_tpu_interpret_mode()``, ``jax.config.update``). The child applies the options
    whose values differ from its own, so only what differs from JAX's defaults changes.

    Returns:
        each option's value by name, and in ``uncarried`` the state that cannot be
        written as plain values (a callable, a device object), with why.
    """
    values: dict[str, Carried] = {}
    uncarried: dict[str, str] = {}
    for name, state in _carried_states().items():
        if name in _CHILD_OWNS:
            continue
        try:
            value = state.value
        except Exception:
            continue
        try:
            values[name] = _encode(value)
        except Unencodable as e:
            uncarried[name] = str(e)
    return JaxState(values=values, uncarried=uncarried)


def apply_snapshot(carried: JaxState) -> dict[str, str]:
    """Makes this process's JAX state match a :func:`snapshot` taken elsewhere.

    Sets, process-wide, every option whose value differs here; an option this JAX does
    not know is ignored. Returns ``{name: reason}`` for the options that could not be set
    (some, such as ``jax_num_cpu_devices``, only take effect before the backend starts).
    """
    failed: dict[str, str] = {}
    states = _carried_states()
    for name, wanted in carried.values.items():
        state = states.get(name)
        if state is None:
            continue
        try:
            if _encode(state.value) == wanted:
                continue
            _set_global(name, state, _decode(wanted))
        except Exception as e:
            failed[name] = f"{describe(e)}"
    return failed


def _set_global(name: str, state: Any, value: Any) -> None:
    import jax

    if name in getattr(jax.config, "_value_holders", {}):
        jax.config.update(name, value)
    else:
        state.set_global(value)
        hook = getattr(state, "_update_global_hook", None)
        if hook is not None:
            hook(value)


def carried_state(what: str) -> JaxState:
    """:func:`snapshot` for a request about ``what`` (a kernel, a profiled function),
    warning once about any piece of the state that cannot travel."""
    state = snapshot()
    if state.uncarried:
        warn_once(
            ("uncarried", what, tuple(sorted(state.uncarried))),
            f"jaxtune: {what}: {describe_uncarried(state.uncarried)}",
            stacklevel=5,
        )
    return state


def warn_unapplied(what: str, failed: Mapping[str, str]) -> None:
    """Warns once about caller state a child received but could not set (its answer's
    ``unapplied``)."""
    if failed:
        warn_once(
            ("unapplied", what, tuple(sorted(failed))),
            f"jaxtune: {what}: {describe_uncarried(failed)}",
            stacklevel=5,
        )


def warn_notes(notes: Sequence[str]) -> None:
    """Warns once about each note a child's answer carries (its ``notes``)."""
    for note in notes:
        warn_once(("note", note), f"jaxtune: {note}", stacklevel=5)


def describe_uncarried(uncarried: Mapping[str, str]) -> str:
    """One sentence naming the state that did not reach the child, and what to do."""
    listed = "; ".join(f"{name} ({why})" for name, why in sorted(uncarried.items()))
    return (
        f"this JAX state did not reach the jaxtune child process: {listed}. The child runs "
        "without it. Set it where the kernel's module is imported (so the child sets it "
        "too), or set JAXTUNE_ISOLATION=inline to tune and profile in this process."
    )
