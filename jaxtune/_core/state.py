"""What jaxtune keeps across calls in this process, a layer at a time.

Each layer package holds one :class:`ProcessState` in its ``state`` module
(``jaxtune._core.state.CORE_STATE``, ``jaxtune._program.state.PROGRAM_STATE``, ...), and
every registry of that layer (a map, set or list that outlives a call, or a memo whose
answer can change) is one of its named parts: declared there with what it holds, listed
by :meth:`ProcessState.parts`, and put back as a fresh process has it by
:meth:`ProcessState.reset`. Tests start from a fresh process's state through those
resets, never by reaching into a module; ``tests/test_architecture.py`` fails on a
module-level registry that is no part of one.

The module that uses a part keeps a reference to it (``_MARKS = PROGRAM_STATE.keep(...)``)
and the reset empties it in place, so that reference stays the one in use.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, MutableMapping, MutableSequence, MutableSet
from contextlib import AbstractContextManager
from typing import Any, Protocol, TypeVar

__all__ = ["CORE_STATE", "ProcessState"]

C = TypeVar("C")
F = TypeVar("F", bound=Callable[[], None])


class _Memo(Protocol):
    def cache_clear(self) -> None: ...


M = TypeVar("M", bound=_Memo)


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Part:
    """One registry of a layer: what it holds, and how it is put back as a fresh process
    has it (none: never reset, ``kept`` says why: hooks that modules register at their
    import, which a module does once). A module run as ``__main__`` (the child's server)
    and imported under its name too declares its parts twice: each copy is reset."""

    doc: str
    resets: tuple[Callable[[], None], ...]
    kept: str = ""


class ProcessState:
    """A layer's registries, each a named :class:`Part` with a reset.

    Examples:
        >>> state = ProcessState("example")
        >>> seen = state.keep("seen", set, "what the example has seen")
        >>> seen.add("x")
        >>> state.reset("seen")
        >>> seen, list(state.parts())
        (set(), ['seen'])
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self._parts: dict[str, Part] = {}

    def keep(
        self,
        part: str,
        factory: Callable[[], C],
        doc: str,
        *,
        lock: AbstractContextManager[Any] | None = None,
        never_reset: str = "",
    ) -> C:
        """A new container (``factory()``: a dict, set or list, or a dataclass whose fields
        are containers reset together) kept as ``part``; its reset empties it in place and
        fills it with what ``factory`` makes, holding ``lock`` (the one its module's code
        holds to use it). ``never_reset``: why the part is listed but never reset (hooks
        that modules register at their import; a part another part's reset puts back)."""
        held = factory()

        def reset() -> None:
            with lock or contextlib.nullcontext():
                _refill(held, factory())

        self._add(part, doc, None if never_reset else reset, kept=never_reset)
        return held

    def memo(self, part: str, doc: str) -> Callable[[M], M]:
        """Decorates a ``functools.cache``/``lru_cache`` function whose answers may change in
        the process's life (a file's text, the backend): its reset clears the memo."""

        def register(fn: M) -> M:
            self._add(part, doc, fn.cache_clear)
            return fn

        return register

    def resets(self, part: str, doc: str) -> Callable[[F], F]:
        """Decorates the function that puts ``part`` back as a fresh process has it, for
        state that is more than a container (children to stop, listeners to tell)."""

        def register(fn: F) -> F:
            self._add(part, doc, fn)
            return fn

        return register

    def parts(self) -> dict[str, str]:
        """Each part's name and what it holds, in the order they were declared."""
        return {
            name: part.doc + (f" (never reset: {part.kept})" if part.kept else "")
            for name, part in self._parts.items()
        }

    def reset(self, *parts: str) -> None:
        """Puts ``parts`` (every part with a reset when none is named) back as a fresh
        process has them.

        Raises:
            KeyError: a named part is not one of this state's (the message lists them).
        """
        unknown = [p for p in parts if p not in self._parts]
        if unknown:
            raise KeyError(
                f"{self.name} state has no part {', '.join(map(repr, unknown))}; its parts: "
                f"{', '.join(map(repr, self._parts))}"
            )
        for name in parts or tuple(self._parts):
            for reset in self._parts[name].resets:
                reset()

    def _add(self, part: str, doc: str, reset: Callable[[], None] | None, kept: str = "") -> None:
        resets: tuple[Callable[[], None], ...] = () if reset is None else (reset,)
        if part in self._parts:
            resets = self._parts[part].resets + resets
        self._parts[part] = Part(doc=doc, resets=resets, kept=kept)


def _refill(held: Any, fresh: Any) -> None:
    if isinstance(held, MutableMapping):
        held.clear()
        held.update(fresh)
    elif isinstance(held, MutableSet):
        held.clear()
        held |= fresh
    elif isinstance(held, MutableSequence):
        held[:] = fresh
    elif dataclasses.is_dataclass(held):
        for field in dataclasses.fields(held):
            _refill(getattr(held, field.name), getattr(fresh, field.name))
    else:
        raise TypeError(f"cannot reset a {type(held).__name__} in place")


#: The vocabulary layer's registries: warn-once keys, the settings last read, the
#: environment at JAX's import, memos of dtype names and toolchain versions.
CORE_STATE = ProcessState("core")
