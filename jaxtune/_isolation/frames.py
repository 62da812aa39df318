"""The frames a parent and its child exchange, typed at both ends.

The parent sends a :class:`Request` (the handler module that answers it in the child, the
operation, the call it is about, and the flow's own ``fields``, a record of the flow's), or a
:class:`Preload` or an :class:`Exit`. The child says :class:`Ready` once, when it starts,
and answers each request with events while it works (:data:`Event`: one frozen dataclass
per step, such as :class:`CompileStarted` or :class:`ConfigResult`), then one
:class:`Done` or :class:`ErrorReply` (whose :class:`ErrorKind` names the exception the
parent raises, from one table).

On the wire each frame is a msgpack map (see :mod:`.wire`) written and read from its
class's annotations by :mod:`jaxtune._core.typed`, with ``t`` naming its class (its
``WIRE_TAG``). A request's map has no tag: it is one record of version 2 (``v``), the flow's
fields a map of their own under ``fields``. Requests are also kept in files (a recording of
``jaxtune tune --``, a profile's sidecar, ``report.calls.msgpack``: ``jaxtune tune`` replays
them); one kept before version 2 held the flow's fields beside the call's, at the top level,
and reads as it did (:data:`Request.WIRE_UPGRADE`). A kept request never holds the caller's
variables (:meth:`Request.recorded`). :func:`request` and :func:`reply` turn a map that
arrived into a typed frame, and refuse anything else with a :class:`FrameError` that names the
field.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping
from typing import Any, ClassVar, Generic, TypeVar

from .._core import errors as _errors
from .._core import typed
from .._core.vocabulary import Failure, Measurement
from .context import JaxState

__all__ = [
    "SCRIPT_RERUN",
    "UNIMPORTABLE",
    "CompileFinished",
    "CompileStarted",
    "ConfigResult",
    "Done",
    "ErrorKind",
    "ErrorReply",
    "Event",
    "Exit",
    "FrameError",
    "FunctionRef",
    "Module",
    "NotTransportable",
    "Preload",
    "Preloaded",
    "Ready",
    "Reply",
    "Request",
    "RoundStarted",
    "RoundTimed",
    "RunFinished",
    "RunStarted",
    "reply",
    "request",
    "without_environ",
]


class FrameError(ValueError):
    """A map that is no frame of the protocol."""


class NotTransportable(Exception):  # noqa: N818 - a signal between modules, never raised to users
    """A value that cannot travel to a child (the caller falls back to inline)."""


#: How a child's :class:`NotTransportable` answer begins when the child could not import
#: the function's module (the function itself could travel).
UNIMPORTABLE = "the child could not import it"


def _read(kind: Any, raw: Any, where: str | None = None) -> Any:
    """``raw`` read as ``kind`` (:func:`jaxtune._core.typed.decode`), refused as a
    :class:`FrameError`."""
    try:
        return typed.decode(kind, raw, where)
    except typed.MismatchError as e:
        raise FrameError(f"a malformed frame: {e}") from None


class _Tagged:
    """A frame written as its fields under its class's tag (``WIRE_TAG``: ``t`` and the
    frame's kind, written first by :mod:`jaxtune._core.typed`)."""

    __slots__ = ()
    WIRE_TAG: ClassVar[tuple[str, str]]

    def to_wire(self) -> dict[str, Any]:
        """The frame as a msgpack-ready map."""
        out: dict[str, Any] = typed.encode(self)
        return out


#: The module name a child gives a parent's ``__main__`` script it re-runs to find a
#: function (:mod:`.resolve`); a reference to such a function names the script again.
SCRIPT_RERUN = "__jaxtune_main__"


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class FunctionRef:
    """Where a function lives: ``module:qualname``, the module's file (``path``, for a
    script run as ``__main__`` or a module the child cannot import by name), and, for an
    ``@autotuned`` kernel, its id (``kernel``)."""

    module: str
    qualname: str
    path: str | None = None
    kernel: str | None = None


F = TypeVar("F")
G = TypeVar("G")


def _nested(raw: Mapping[str, Any], version: int) -> dict[str, Any]:
    """A request kept before version 2 (a recording's, a sidecar's), as version 2 writes it:
    the flow's fields, then at the top level beside the call's, under ``fields``."""
    call = {f.name for f in dataclasses.fields(Request)} - {"fields"}
    return {
        # Version 1 wrote no JAX state as null.
        **{k: v for k, v in raw.items() if k in call and not (k == "jax_state" and v is None)},
        "fields": {k: v for k, v in raw.items() if k not in call},
    }


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Request(Generic[F]):
    """A request about a call of a function: the jaxtune module whose ``handle(server,
    request)`` answers it in the child (``handler``), the operation (``op``), the function
    (``ref``), its arguments as :mod:`.wire` encoded them, the flow's own ``fields`` (a
    record of the flow's: a sweep's ``SweepFields``, a capture's ``ProfileOptions``), and
    the caller's JAX state and variables. A request for a task the child already holds
    leaves ``ref`` and the arguments out (``None``).

    Read as ``Request`` (:meth:`from_wire`: the child, before it knows the flow), its
    ``fields`` are the map that arrived, which the flow then reads (:meth:`read`); read as
    ``Request[X]``, they are read as ``X`` along with the rest."""

    WIRE_VERSION: ClassVar = 2
    WIRE_UPGRADE: ClassVar = staticmethod(_nested)

    handler: str
    op: str
    ref: FunctionRef | None = dataclasses.field(default=None, metadata=typed.OMIT_DEFAULT)
    fields: F
    args: Any = dataclasses.field(default=None, metadata=typed.OMIT_DEFAULT)
    kwargs: Any = dataclasses.field(default=None, metadata=typed.OMIT_DEFAULT)
    jax_state: JaxState = dataclasses.field(default_factory=JaxState)
    environ: Mapping[str, Any] | None = dataclasses.field(default=None, metadata=typed.OMIT_DEFAULT)

    @property
    def has_call(self) -> bool:
        """Whether the request carries the function and its arguments."""
        return self.ref is not None and self.args is not None

    def with_fields(self, op: str, fields: G) -> Request[G]:
        """This request for operation ``op``, with the flow's fields ``fields``."""
        return Request(
            handler=self.handler,
            op=op,
            ref=self.ref,
            fields=fields,
            args=self.args,
            kwargs=self.kwargs,
            jax_state=self.jax_state,
            environ=self.environ,
        )

    def read(self, kind: type[G]) -> Request[G]:
        """This request with its flow's fields (the map that arrived) read as ``kind``.

        Raises:
            FrameError: the fields are not a ``kind`` (the message names the field).
        """
        return self.with_fields(self.op, _read(kind, self.fields, "request.fields"))

    def lean(self, fields: F) -> Request[F]:
        """This request without the function and its arguments, with ``fields`` (a child
        that holds the task has the rest)."""
        return dataclasses.replace(self, ref=None, args=None, kwargs=None, fields=fields)

    def to_wire(self) -> dict[str, Any]:
        """The request as a msgpack-ready map (its fields' record a map under ``fields``)."""
        out: dict[str, Any] = typed.encode(self)
        return out

    def recorded(self) -> Request[F]:
        """The request as a file keeps it (a recording of ``jaxtune tune --``, a profile's
        sidecar and ``report.calls.msgpack``): without the caller's variables
        (``environ``), which only ever travel to a child. A replay sends the replaying
        process's own (:func:`~jaxtune._isolation.calling.replayed`)."""
        return dataclasses.replace(self, environ=None)

    @staticmethod
    def from_wire(raw: Any, kind: Any = Any) -> Request[Any]:
        """The request a map describes (one this process received, or a kept one of any
        version), its flow's fields read as ``kind`` (by default: the map that arrived).

        Raises:
            FrameError: the map names no handler or operation, or a field has the wrong
                type (the message names it).
        """
        if not isinstance(raw, Mapping):
            raise FrameError(f"a request is a map, not {type(raw).__name__}")
        read: Request[Any] = _read(Request[kind], raw, "request")
        return read


def without_environ(raw: Mapping[str, Any]) -> dict[str, Any]:
    """A request's map as a file holds it: without the caller's variables (a map read from
    a file older jaxtunes wrote may hold them: they are dropped here, so that nothing read
    from it writes them again)."""
    return {k: v for k, v in raw.items() if k != "environ"}


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Module:
    """A module to import ahead of need: where a function of it lives, and the caller's
    variables when it named it (``environ``, those that do not key the pool)."""

    ref: FunctionRef
    environ: Mapping[str, Any] | None = None


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Preload(_Tagged):
    """Asks the child to import ``handlers`` (modules of jaxtune) and ``modules``, ahead
    of need; the child answers with the modules it imported (``imported``)."""

    WIRE_TAG: ClassVar = ("t", "preload")
    modules: tuple[Module, ...] = ()
    handlers: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Preloaded:
    """The body of the answer to a :class:`Preload`: the modules the child imported."""

    imported: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Exit(_Tagged):
    """Asks the child to end."""

    WIRE_TAG: ClassVar = ("t", "exit")


def request(raw: Any) -> Request[Any] | Preload | Exit:
    """The typed form of a map the child received.

    Raises:
        FrameError: the map is no request.
    """
    tag = raw.get("t") if isinstance(raw, Mapping) else None
    if tag is None:
        return Request.from_wire(raw)
    kind = {Exit.WIRE_TAG[1]: Exit, Preload.WIRE_TAG[1]: Preload}.get(tag)
    if kind is None:
        raise FrameError(f"no request of kind {tag!r:.40}")
    return _read(kind, raw)


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Ready(_Tagged):
    """What the child sees once it started: its pid, platform, device kind and count, the
    versions of its toolchain, and the flags and visibility variables it runs with."""

    WIRE_TAG: ClassVar = ("t", "ready")
    pid: int
    platform: str
    device_kind: str
    device_count: int
    versions: Mapping[str, str | None]
    env: Mapping[str, str | None]


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class CompileStarted(_Tagged):
    """Config ``cid`` started compiling in the child's thread ``thread`` (its
    ``threading.get_ident()``: a crash report naming that thread pins the crash on it)."""

    WIRE_TAG: ClassVar = ("t", "compile_start")
    cid: str
    thread: int


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class CompileFinished(_Tagged):
    """Config ``cid`` stopped compiling: after ``seconds``, or failed (``None``)."""

    WIRE_TAG: ClassVar = ("t", "compiled")
    cid: str
    seconds: float | None = None


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class RunStarted(_Tagged):
    """Config ``cid`` started running in the child's thread ``thread``."""

    WIRE_TAG: ClassVar = ("t", "run_start")
    cid: str
    thread: int


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class RoundStarted(_Tagged):
    """A round of configs timed in passes started (``cids``, in order; one of them is
    running at any time, so a crash blames the round)."""

    WIRE_TAG: ClassVar = ("t", "round_start")
    cids: tuple[str, ...]

    def __post_init__(self) -> None:
        if not self.cids:
            raise FrameError("a round holds at least one config")

    @property
    def cid(self) -> str:
        """The round's first config (the one a crash report names)."""
        return self.cids[0]


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class RunFinished(_Tagged):
    """What was running (config ``cid``, or the round it began) stopped."""

    WIRE_TAG: ClassVar = ("t", "ran")
    cid: str


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class RoundTimed(_Tagged):
    """Interleaved round ``done`` (from 1) timed ``racing`` configs, ``cid`` the first of
    them: progress while the rounds, which may take minutes, run."""

    WIRE_TAG: ClassVar = ("t", "round_timed")
    cid: str
    done: int
    racing: int

    def __post_init__(self) -> None:
        if self.done < 1 or self.racing < 1:
            raise FrameError("a round timed is round 1 or later, with a config racing")


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class ConfigResult(_Tagged):
    """Config ``cid``'s result: its measurement, or why it failed."""

    WIRE_TAG: ClassVar = ("t", "result")
    cid: str
    result: Measurement | Failure


Event = (
    CompileStarted
    | CompileFinished
    | RunStarted
    | RoundStarted
    | RunFinished
    | RoundTimed
    | ConfigResult
)


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Done(_Tagged):
    """A request's answer: the handler's fields (``body``), the notes the child's work
    left, and the caller's JAX state that could not be set there (``unapplied``)."""

    WIRE_TAG: ClassVar = ("t", "done")
    body: Mapping[str, Any]
    notes: tuple[str, ...] = ()
    unapplied: Mapping[str, str] = dataclasses.field(default_factory=dict)


class ErrorKind(enum.Enum):
    """Why a request failed in the child, a closed set (the value is the wire tag): a
    jaxtune error of one of the classes of :mod:`jaxtune._core.errors`
    (:meth:`exception_class` is its class), a function or value that cannot be used there
    (``NOT_TRANSPORTABLE``: the caller works in its own process instead), a task the
    child no longer holds (``UNKNOWN_TASK``: the caller sends it again, whole), or a fault
    that is none of these (``INTERNAL``: the message holds its traceback)."""

    AGREEMENT = "AgreementError"
    CACHE = "CacheError"
    CONFIG_SPACE = "ConfigSpaceError"
    FLAG = "FlagError"
    JAXTUNE = "JaxtuneError"
    MISS = "MissError"
    PLOTS_UNAVAILABLE = "PlotsUnavailableError"
    PROFILE = "ProfileError"
    SETTINGS = "SettingsError"
    SIGNATURE = "SignatureError"
    SWEEP = "SweepError"
    TUNING_FAILED = "TuningFailedError"
    NOT_TRANSPORTABLE = "NotTransportable"
    UNKNOWN_TASK = "UnknownTask"
    INTERNAL = "internal"

    @classmethod
    def of(cls, error: BaseException) -> ErrorKind:
        """The kind of ``error``: that of its nearest class in the table, else
        ``INTERNAL``."""
        for klass in type(error).__mro__:
            kind = _KIND_OF_CLASS.get(klass)
            if kind is not None:
                return kind
        return cls.INTERNAL

    def exception_class(self) -> type[Exception] | None:
        """The exception this kind stands for (``None``: ``UNKNOWN_TASK`` and
        ``INTERNAL``, which the caller handles itself)."""
        return _ERROR_CLASSES.get(self)


#: The exception each kind of error stands for: the one table both ends read.
_ERROR_CLASSES: dict[ErrorKind, type[Exception]] = {
    ErrorKind.AGREEMENT: _errors.AgreementError,
    ErrorKind.CACHE: _errors.CacheError,
    ErrorKind.CONFIG_SPACE: _errors.ConfigSpaceError,
    ErrorKind.FLAG: _errors.FlagError,
    ErrorKind.JAXTUNE: _errors.JaxtuneError,
    ErrorKind.MISS: _errors.MissError,
    ErrorKind.PLOTS_UNAVAILABLE: _errors.PlotsUnavailableError,
    ErrorKind.PROFILE: _errors.ProfileError,
    ErrorKind.SETTINGS: _errors.SettingsError,
    ErrorKind.SIGNATURE: _errors.SignatureError,
    ErrorKind.SWEEP: _errors.SweepError,
    ErrorKind.TUNING_FAILED: _errors.TuningFailedError,
    ErrorKind.NOT_TRANSPORTABLE: NotTransportable,
}
_KIND_OF_CLASS: dict[type, ErrorKind] = {c: k for k, c in _ERROR_CLASSES.items()}


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class ErrorReply(_Tagged):
    """A request that failed in the child: why (``kind``) and the error's message, with
    the notes the work left and the caller's state that could not be set there."""

    WIRE_TAG: ClassVar = ("t", "error")
    kind: ErrorKind
    message: str
    notes: tuple[str, ...] = ()
    unapplied: Mapping[str, str] = dataclasses.field(default_factory=dict)

    @classmethod
    def of(cls, error: BaseException, message: str | None = None) -> ErrorReply:
        """The reply that reports ``error`` (its message: ``str(error)`` unless given)."""
        return cls(kind=ErrorKind.of(error), message=str(error) if message is None else message)

    def exception(self, default: type[Exception]) -> Exception:
        """The exception to raise for this reply in the parent: the class its kind stands
        for, else ``default`` (the flow's own error, for an ``INTERNAL`` fault)."""
        return (self.kind.exception_class() or default)(self.message)


Reply = Ready | Event | Done | ErrorReply

#: Each reply's class by its tag: the closed set :func:`reply` reads.
_REPLIES: dict[str, type[Reply]] = {
    cls.WIRE_TAG[1]: cls
    for cls in (
        Ready,
        CompileStarted,
        CompileFinished,
        RunStarted,
        RoundStarted,
        RunFinished,
        RoundTimed,
        ConfigResult,
        Done,
        ErrorReply,
    )
}


def reply(raw: Any) -> Reply:
    """The typed form of a map the child wrote (inverse of each reply's ``to_wire``).

    Raises:
        FrameError: the map is no reply of the protocol: no known tag, or a field missing
            or of the wrong type.
    """
    if not isinstance(raw, Mapping):
        raise FrameError(f"a reply is a map, not {type(raw).__name__}")
    tag = raw.get("t")
    kind = _REPLIES.get(tag) if isinstance(tag, str) else None
    if kind is None:
        raise FrameError(f"no frame of kind {tag!r:.40}")
    return _read(kind, raw)
