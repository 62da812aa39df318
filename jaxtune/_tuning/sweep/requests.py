"""Wire. The requests a sweep sends its child, answered there by
:mod:`jaxtune._tuning.sweep.serve`: a :class:`~jaxtune._isolation.frames.Request` whose fields
(:class:`SweepFields`, under the request's ``fields``) are the task (its id, its plan and the
further value sets timed as a mix; the request also carries the kernel's reference and its
encoded arguments) and the operation (``work``), :class:`Measure` or :class:`Retime`, each
under its tag ``op``; and the answer's body, :class:`Answered`."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from ..._core import typed
from ..._core.errors import SweepError
from ..._core.vocabulary import Config, Failure, Measurement, config_id
from ..._isolation.calling import call_request, replayed
from ..._isolation.frames import Done, FrameError, Request
from ..recorded import ValueSet
from .breakdown import Account
from .inputs import recorded_values
from .work import Rounds, SweepPlan, SweepTask

__all__ = [
    "HANDLER",
    "Answered",
    "Measure",
    "MixedSet",
    "Retime",
    "SweepFields",
    "SweepRequest",
    "best_of",
    "read_answer",
    "read_request",
    "reference_config",
    "results_answer",
    "sweep_fields",
    "sweep_request",
    "with_recorded_values",
]

#: The module whose ``handle`` answers a sweep's requests in the child.
HANDLER = "jaxtune._tuning.sweep.serve"


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Measure:
    """Compile, check and time ``todo``: outputs checked against ``reference`` (``None``:
    the first config that runs), configs far slower than ``best_us`` stop early, compiles
    one at a time when ``serial``, and timed as ``rounds`` says (:class:`~.work.Rounds`;
    see :meth:`~.engine.Sweeper.measure`)."""

    WIRE_TAG: ClassVar = ("op", "measure")
    OP: ClassVar[str] = "measure"
    todo: list[Config]
    reference: Config | None = None
    best_us: float | None = None
    serial: bool = False
    rounds: Rounds = Rounds.FIRST_PASS

    def of(self, request: SweepRequest) -> SweepRequest:
        """``request`` (the task's) asking for this operation."""
        return request.with_fields(self.OP, dataclasses.replace(request.fields, work=self))


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Retime:
    """Time ``todo`` (compiled by an earlier ``measure`` of the task) in interleaved
    rounds, with a second look at ``second`` in the first rounds (those compiled here);
    one config at a time when ``serial``."""

    WIRE_TAG: ClassVar = ("op", "retime")
    OP: ClassVar[str] = "retime"
    todo: list[Config]
    second: list[Config] = dataclasses.field(default_factory=list)
    serial: bool = False

    def of(self, request: SweepRequest) -> SweepRequest:
        """``request`` (the task's) asking for this operation."""
        return request.with_fields(self.OP, dataclasses.replace(request.fields, work=self))


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class MixedSet:
    """One further value set of a call, timed with the request's own arguments as a mix
    (recorded steps of one call under ``jaxtune tune --``): its arguments as
    :mod:`jaxtune._isolation.wire` encodes them."""

    args: Any
    kwargs: Any


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class SweepFields:
    """A sweep request's own fields: its task's id, the task's plan and further value sets
    (``mix``; both left out of a lean request: the child that holds the task has them) and
    the operation (``work``; ``None`` in the request a recording keeps, which each operation
    fills in)."""

    task_id: str
    plan: SweepPlan | None = dataclasses.field(default=None, metadata=typed.OMIT_DEFAULT)
    mix: tuple[MixedSet, ...] = dataclasses.field(default=(), metadata=typed.OMIT_DEFAULT)
    work: Measure | Retime | None = dataclasses.field(default=None, metadata=typed.OMIT_DEFAULT)

    def lean(self) -> SweepFields:
        """These fields without the plan (and the value sets that go with it)."""
        return dataclasses.replace(self, plan=None, mix=())


#: A sweep's request, its fields read.
SweepRequest = Request[SweepFields]


def sweep_fields(request: Request[Any]) -> SweepRequest:
    """A sweep request as it arrived (its fields the map that travelled), its fields read.

    Raises:
        FrameError: the request is no sweep request, or its fields are malformed (the
            message names the field).
    """
    if request.op not in (Measure.OP, Retime.OP):
        raise FrameError(f"a sweep request asks to measure or retime, not {request.op!r:.40}")
    return request.read(SweepFields)


def sweep_request(task: SweepTask) -> SweepRequest:
    """The request that carries ``task`` to a child; each operation sends it with its own
    fields (:meth:`Measure.of`, :meth:`Retime.of`).

    Raises:
        NotTransportable: the kernel or its arguments cannot travel to a child.
    """
    args, kwargs = task.signature.call_arguments()
    return call_request(
        HANDLER,
        Measure.OP,
        task.fn,
        tuple(args),
        dict(kwargs),
        label=task.plan.kernel,
        kernel=task.plan.kernel,
        fields=SweepFields(task_id=uuid.uuid4().hex, plan=task.plan),
    )


def with_recorded_values(request: SweepRequest, sets: Sequence[ValueSet]) -> SweepRequest:
    """A recorded sweep request on the values its program ran: the first value set (a
    recording's ``values`` frame: encoded ``args``, ``kwargs``, their ``summary`` and the
    arguments left ``dropped``) as its arguments, the others as its mix, and its plan's
    record of the values updated (:func:`~.inputs.recorded_values`)."""
    plan = request.fields.plan
    if not sets or plan is None:
        return request
    plan = dataclasses.replace(plan, values=recorded_values(plan.values, sets))
    mix = tuple(MixedSet(args=s.args, kwargs=s.kwargs) for s in sets[1:])
    fields = dataclasses.replace(request.fields, plan=plan, mix=mix)
    return dataclasses.replace(request, args=sets[0].args, kwargs=sets[0].kwargs, fields=fields)


def read_request(raw: Any) -> SweepRequest:
    """The sweep request a map holds (one a recording kept, of any version: ``jaxtune
    tune`` replays it), carrying this process's variables
    (:func:`~jaxtune._isolation.calling.replayed`).

    Raises:
        FrameError: the map is no sweep request (the message names the field).
    """
    return replayed(sweep_fields(Request.from_wire(raw)))


def best_of(results: Mapping[str, Measurement | Failure]) -> float | None:
    """The best ``min_us`` among usable measurements: a :class:`Measure`'s ``best_us``, for
    early dropping."""
    best = [m.min_us for m in results.values() if isinstance(m, Measurement) and not m.dropped]
    return min(best) if best else None


def reference_config(
    order: Sequence[Any], results: Mapping[str, Measurement | Failure], default: dict[str, Any]
) -> dict[str, Any] | None:
    """The config whose output others are checked against: the default unless it failed,
    else the first config that was measured successfully (None: the child picks the first
    that runs). ``order`` holds configs or earlier results."""
    if not isinstance(results.get(config_id(default)), Failure):
        return dict(default)
    for item in order:
        config = dict(getattr(item, "config", item))
        if isinstance(results.get(config_id(config)), Measurement):
            return config
    return None


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Answered:
    """The body of the answer to a sweep operation: each config's result by id, and where
    the operation's time went (:meth:`~.breakdown.Breakdown.take`; left out when not said)."""

    results: dict[str, Measurement | Failure]
    breakdown: Account | None = dataclasses.field(default=None, metadata=typed.OMIT_DEFAULT)


def results_answer(
    results: Mapping[str, Measurement | Failure], account: Account | None = None
) -> Done:
    """The answer that carries an operation's results (by config id) to the parent, and
    where its time went (``account``: :meth:`~.breakdown.Breakdown.take`)."""
    return Done(body=typed.encode(Answered(results=dict(results), breakdown=account)))


def read_answer(answer: Done) -> Answered:
    """What the answer to a sweep operation carries (see :func:`results_answer`).

    Raises:
        SweepError: the answer carries no results, or a damaged field (the message names
            it).
    """
    if "results" not in answer.body:
        raise SweepError("the jaxtune child answered a sweep request without its results")
    try:
        read: Answered = typed.decode(
            Answered, answer.body, within="the jaxtune child's sweep answer"
        )
    except typed.MismatchError as e:
        raise SweepError(str(e)) from None
    return read
