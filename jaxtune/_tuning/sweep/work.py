"""Wire. What one sweep is asked to do: the plan the parent decides (plain data, so it travels
to a child or a recording file) and the task, the plan with the kernel where it runs.

A leaf of the sweep: the engine (:mod:`.engine`) that does the work and the orchestration
(:mod:`.drive`) that drives it both read these types, and neither is imported here.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable, Mapping
from typing import Annotated, Any

from ..._core import typed
from ..._core.vocabulary import Config, SweepValues
from ..signature import Signature
from .samples import TimingOptions
from .search import Budget

__all__ = ["Rounds", "SweepPlan", "SweepTask"]


class Rounds(enum.Enum):
    """How a batch of configs is timed once each has run and passed its check."""

    #: A first pass (two visits, dropping the clearly slower), then rounds for the leaders.
    FIRST_PASS = "first pass"
    #: Interleaved rounds at once, no first pass: a batch that is the whole of a small space.
    AT_ONCE = "at once"
    #: Rounds at once when every config's first call took at least the options'
    #: ``rounds_above_s`` (the kernel is slow), else a first pass: a batch that is the
    #: whole of a larger space.
    IF_SLOW = "if slow"


def _search_name(search: Any) -> str:
    """A plan's strategy as it travels: its name (an object becomes ``"auto"``)."""
    return search if isinstance(search, str) else "auto"


#: A strategy as a plan writes it, and what a plan read holds.
_SEARCH_WRITTEN = typed.Written(_search_name)
_SEARCH_READ = typed.Check(lambda v: isinstance(v, str), "a strategy's name")


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class SweepPlan:
    """What the parent decides about one sweep: plain data, so it travels to a child or a
    recording file and comes back unchanged (written and read by :mod:`jaxtune._core.typed`).
    The parent orchestrates from the plan alone."""

    kernel: str
    key: str
    configs: tuple[Config, ...]
    default: Config
    shapes: tuple[tuple[str, tuple[int, ...]], ...] = ()
    statics: str = ""
    timeout_s: float = 60.0
    options: TimingOptions = dataclasses.field(default_factory=TimingOptions)
    verbose: int = 0
    #: A strategy name or object (see :mod:`jaxtune._tuning.sweep.search`) and its budget. Only
    #: names travel (a recording, a child); an object becomes ``"auto"`` there.
    search: Annotated[Any, _SEARCH_WRITTEN, _SEARCH_READ] = "auto"
    budget: Budget | None = None
    #: The timer's name (see :mod:`jaxtune._tuning.sweep.timers`; ``auto`` resolves where the
    #: sweep runs) and the pass timed: ``forward``, or ``vjp`` (forward and backward).
    timer: str = "auto"
    timing: str = "forward"
    #: Configs compiled at once (0: :func:`~.compile.compile_threads`).
    compile_threads: int = 0
    #: The values the sweep runs on (:func:`~.inputs.describe_values`): how many sets,
    #: and per array argument where its values came from and a summary; kept in the entry.
    values: SweepValues = dataclasses.field(default_factory=SweepValues)

    def to_dict(self) -> dict[str, Any]:
        """The plan as it travels (:mod:`jaxtune._core.typed`; inverse: :meth:`from_dict`)."""
        out: dict[str, Any] = typed.encode(self)
        return out

    @classmethod
    def from_dict(cls, raw: Any) -> SweepPlan:
        """The plan a map holds.

        Raises:
            MismatchError: the map is no plan (a ``ValueError``; the message names the
                field).
        """
        return typed.decode(cls, raw, "plan")


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class SweepTask:
    """The work of one sweep, where the kernel runs: the plan plus the kernel itself, its
    bound arguments, its numerics check and its input builder."""

    plan: SweepPlan
    fn: Callable[..., Any]
    signature: Signature
    check: Any = "auto"
    inputs: Callable[..., Any] | None = None
    compile_threads: int = 0
    #: Further value sets of the call (its dynamic arguments, concrete), timed with the
    #: signature's own as a mix: several recorded steps of one call (docs/values.md).
    value_sets: tuple[Mapping[str, Any], ...] = ()
