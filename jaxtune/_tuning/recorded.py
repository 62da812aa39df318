"""The frames of a recording (``jaxtune tune --``, ``jaxtune cache check --``): what
:mod:`.record` appends while the program runs and the command reads back once it is done,
each a frozen record under its tag ``t``, written and read by :mod:`jaxtune._core.typed`.

- :class:`~jaxtune._core.vocabulary.RecordedCall` (``call``): an autotuned call, once per
  kernel, key and pass (a profile's sidecar keeps the same records);
- :class:`ValueSet` (``values``): the values one step ran a call with;
- :class:`Stopped` (``stopped``): the last frame when jaxtune stopped the program;

and the :class:`Recording` they make up once the program is done.

Light on purpose (no JAX): the commands read recordings without starting a backend.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from .._core import typed
from .._core.vocabulary import RecordedCall
from .._render.units import count

__all__ = ["Frame", "RecordedCall", "Recording", "Stopped", "ValueSet", "read_frame"]


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class ValueSet:
    """One value set of a recorded call (docs/values.md): its dynamic arguments as
    :mod:`jaxtune._isolation.wire` encodes them (``args``, ``kwargs``), a summary of each
    (``summary``, by argument) and the arguments left out for their size (``dropped``)."""

    WIRE_TAG: ClassVar = ("t", "values")

    kernel: str
    key: str
    args: Any
    kwargs: Any
    summary: Mapping[str, str] = dataclasses.field(default_factory=dict)
    dropped: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Stopped:
    """Why a recorded program was stopped: ``after_s`` seconds from its start, once it had
    traced and compiled nothing new for ``settle_s`` seconds, ``compiles`` programs compiled
    since its first autotuned call."""

    WIRE_TAG: ClassVar = ("t", "stopped")

    after_s: float
    settle_s: float
    compiles: int

    def text(self, verb: str) -> str:
        """What the command says about the stop.

        Examples:
            >>> print(Stopped(after_s=12.3, settle_s=3.0, compiles=2).text("tune"))
            ... # doctest: +NORMALIZE_WHITESPACE
            jaxtune tune: stopped the program after 12.3 s, once it had traced and compiled
            nothing new for 3 s (2 compilations since its first autotuned call). A kernel it
            would first trace later (an eval step every N steps, a later request's shape) is
            not recorded: --settle SECONDS waits longer, --full runs it to its end.
        """
        return (
            f"jaxtune {verb}: stopped the program after {self.after_s:.1f} s, once it had "
            f"traced and compiled nothing new for {self.settle_s:g} s "
            f"({count(self.compiles, 'compilation')} since its first autotuned call). A kernel "
            "it would first trace later (an eval step every N steps, a later request's shape) "
            "is not recorded: --settle SECONDS waits longer, --full runs it to its end."
        )


#: A frame of a recording.
Frame = RecordedCall | ValueSet | Stopped


def read_frame(raw: Any, where: str) -> Frame:
    """The frame a decoded map holds.

    Raises:
        MismatchError: it is no frame of a recording (a ``ValueError``); the message names
            ``where`` (the file and the frame's place in it) and the field.
    """
    frame: Frame = typed.decode(Frame, raw, "", within=where)
    return frame


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Recording:
    """What a recording holds once the program is done: one call per (kernel, key), in the
    order first seen (a call recorded again because it turned out to be differentiated
    replaces its forward record: its sweep times forward and backward), the value sets
    of each, in arrival order, and why jaxtune stopped the program (``None``: it ended by
    itself)."""

    calls: tuple[RecordedCall, ...] = ()
    values: Mapping[tuple[str, str], tuple[ValueSet, ...]] = dataclasses.field(default_factory=dict)
    stopped: Stopped | None = None

    def values_of(self, call: RecordedCall) -> tuple[ValueSet, ...]:
        """The value sets the program ran ``call`` with (docs/values.md)."""
        return self.values.get((call.kernel, call.key), ())

    @classmethod
    def of(cls, frames: Sequence[Frame]) -> Recording:
        """The recording ``frames`` make up."""
        calls: dict[tuple[str, str], RecordedCall] = {}
        values: dict[tuple[str, str], list[ValueSet]] = {}
        stopped = None
        for frame in frames:
            if isinstance(frame, Stopped):
                stopped = frame
            elif isinstance(frame, ValueSet):
                values.setdefault((frame.kernel, frame.key), []).append(frame)
            else:
                pair = (frame.kernel, frame.key)
                if pair not in calls or frame.timing == "vjp":
                    calls[pair] = frame
        return cls(
            calls=tuple(calls.values()),
            values={pair: tuple(sets) for pair, sets in values.items()},
            stopped=stopped,
        )
