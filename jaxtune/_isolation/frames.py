"""The frames a parent and its child exchange, typed at both ends.

The parent sends a :class:`Request` (the handler module that answers it in the child, the
operation, the call it is about, and the flow's own :class:`Fields`), or a
:class:`Preload` or an :class:`Exit`. The child says :class:`Ready` once, when it starts,
and answers each request with events while it works (:data:`Event`: one frozen dataclass
per step, such as :class:`CompileStarted` or :class:`ConfigResult`), then one
:class:`Done` or :class:`ErrorReply` (whose :class:`ErrorKind` names the exception the
parent raises, from one table).

On the wire each frame is a msgpack map (see :mod:`.wire`), with ``t`` naming the kind of
a reply and an event's ``kind`` its class's tag; a request's map keeps its fields at the
top level, because recorded requests are stored in profile sidecars (``jaxtune tune
--from-profile`` replays them) and must read back. :func:`reply` turns a map that came from
the child into a typed reply, and refuses anything else.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar, Generic, Protocol, TypeVar

from .._core import errors as _errors
from .._core.errors import CacheError
from .._core.vocabulary import Failure, Measurement, measurement_from_dict

__all__ = [
    "UNIMPORTABLE",
    "CompileFinished",
    "CompileStarted",
    "ConfigResult",
    "Done",
    "ErrorKind",
    "ErrorReply",
    "Event",
    "Exit",
    "Fields",
    "FrameError",
    "FunctionRef",
    "Module",
    "NotTransportable",
    "Preload",
    "Ready",
    "Reply",
    "Request",
    "RoundStarted",
    "RunFinished",
    "RunStarted",
    "WireFields",
    "event",
    "reply",
    "request",
]

#: The fields of a request that every flow's request carries (the rest are the flow's).
_CALL_FIELDS = ("handler", "op", "ref", "args", "kwargs", "jax_state", "environ")


class FrameError(ValueError):
    """A map from the child that is no frame of the protocol."""


class NotTransportable(Exception):  # noqa: N818 - a signal between modules, never raised to users
    """A value that cannot travel to a child (the caller falls back to inline)."""


#: How a child's :class:`NotTransportable` answer begins when the child could not import
#: the function's module (the function itself could travel).
UNIMPORTABLE = "the child could not import it"


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class FunctionRef:
    """Where a function lives: ``module:qualname``, the module's file (``path``, for a
    script run as ``__main__`` or a module the child cannot import by name), and, for an
    ``@autotuned`` kernel, its id (``kernel``)."""

    module: str
    qualname: str
    path: str | None = None
    kernel: str | None = None

    def to_wire(self) -> dict[str, Any]:
        out: dict[str, Any] = {"module": self.module, "qualname": self.qualname, "path": self.path}
        if self.kernel is not None:
            out["kernel"] = self.kernel
        return out

    @classmethod
    def from_wire(cls, raw: Any) -> FunctionRef:
        if not isinstance(raw, Mapping) or not isinstance(raw.get("module"), str):
            raise FrameError(f"a function reference is a map with a module, not {raw!r:.80}")
        path, kernel = raw.get("path"), raw.get("kernel")
        return cls(
            module=raw["module"],
            qualname=str(raw.get("qualname") or ""),
            path=path if isinstance(path, str) else None,
            kernel=kernel if isinstance(kernel, str) else None,
        )


class Fields(Protocol):
    """A flow's own fields of a request (a sweep's task and operation, a capture's
    iterations): plain values, written at the top level of the request's map."""

    def to_wire(self) -> dict[str, Any]:
        """The fields as a msgpack-ready map (none of them named as a call's field)."""
        ...


@dataclasses.dataclass(frozen=True, slots=True)
class WireFields:
    """A request's flow fields as they arrived, before the flow that answers it reads them
    into its own :class:`Fields` (:meth:`Request.read`)."""

    values: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    def to_wire(self) -> dict[str, Any]:
        return dict(self.values)


F = TypeVar("F", bound=Fields)
G = TypeVar("G", bound=Fields)


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Request(Generic[F]):
    """A request about a call of a function: the jaxtune module whose ``handle(server,
    request)`` answers it in the child (``handler``), the operation (``op``), the function
    (``ref``), its arguments as :mod:`.wire` encoded them, the caller's JAX state and
    variables, and the flow's own ``fields`` (a received request holds
    :class:`WireFields` until its flow reads them). A request for a task the child
    already holds may leave ``ref`` and the arguments out (``None``)."""

    handler: str
    op: str
    ref: FunctionRef | None
    fields: F
    args: Any = None
    kwargs: Any = None
    jax_state: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    environ: Mapping[str, Any] | None = None

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

    def read(self, parse: Callable[[Request[F]], G]) -> Request[G]:
        """This request with its flow's fields as ``parse`` reads them from it.

        Raises:
            FrameError: what ``parse`` raises for fields that are not the flow's.
        """
        return self.with_fields(self.op, parse(self))

    def lean(self, fields: F) -> Request[F]:
        """This request without the function and its arguments, with ``fields`` (a child
        that holds the task has the rest)."""
        return dataclasses.replace(self, ref=None, args=None, kwargs=None, fields=fields)

    def to_wire(self) -> dict[str, Any]:
        out: dict[str, Any] = self.fields.to_wire()
        clash = set(out) & set(_CALL_FIELDS)
        if clash:
            raise FrameError(f"a flow's fields may not be named like a call's: {sorted(clash)}")
        out.update(
            handler=self.handler,
            op=self.op,
            jax_state=dict(self.jax_state),
            environ=None if self.environ is None else dict(self.environ),
        )
        if self.ref is not None:
            out["ref"] = self.ref.to_wire()
        if self.args is not None:
            out["args"] = self.args
            out["kwargs"] = self.kwargs
        return out

    @staticmethod
    def from_wire(raw: Any) -> Request[WireFields]:
        """The request a map describes (one this process received, or a recorded one),
        its flow's fields as they arrived.

        Raises:
            FrameError: the map names no handler or operation.
        """
        if not isinstance(raw, Mapping):
            raise FrameError(f"a request is a map, not {type(raw).__name__}")
        handler, op = raw.get("handler"), raw.get("op")
        if not isinstance(handler, str) or not isinstance(op, str):
            raise FrameError("a request names its handler module and its operation")
        ref = raw.get("ref")
        state, environ = raw.get("jax_state"), raw.get("environ")
        return Request(
            handler=handler,
            op=op,
            ref=None if ref is None else FunctionRef.from_wire(ref),
            fields=WireFields({k: v for k, v in raw.items() if k not in _CALL_FIELDS}),
            args=raw.get("args"),
            kwargs=raw.get("kwargs"),
            jax_state=state if isinstance(state, Mapping) else {},
            environ=environ if isinstance(environ, Mapping) else None,
        )


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Module:
    """A module to import ahead of need: where a function of it lives, and the caller's
    variables when it named it (``environ``, those that do not key the pool)."""

    ref: FunctionRef
    environ: Mapping[str, Any] | None = None


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Preload:
    """Asks the child to import ``handlers`` (modules of jaxtune) and ``modules``, ahead
    of need; the child answers with the modules it imported (``imported``)."""

    modules: tuple[Module, ...] = ()
    handlers: tuple[str, ...] = ()

    def to_wire(self) -> dict[str, Any]:
        return {
            "op": "preload",
            "refs": [{**m.ref.to_wire(), "environ": m.environ} for m in self.modules],
            "handlers": list(self.handlers),
        }

    @classmethod
    def from_wire(cls, raw: Mapping[str, Any]) -> Preload:
        refs, handlers = raw.get("refs") or (), raw.get("handlers") or ()
        return cls(
            modules=tuple(
                Module(
                    ref=FunctionRef.from_wire(r),
                    environ=r.get("environ") if isinstance(r.get("environ"), Mapping) else None,
                )
                for r in refs
            ),
            handlers=tuple(h for h in handlers if isinstance(h, str)),
        )


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Exit:
    """Asks the child to end."""

    def to_wire(self) -> dict[str, Any]:
        return {"op": "exit"}


def request(raw: Any) -> Request[WireFields] | Preload | Exit:
    """The typed form of a map the child received.

    Raises:
        FrameError: the map is no request.
    """
    op = raw.get("op") if isinstance(raw, Mapping) else None
    if op == "exit":
        return Exit()
    if op == "preload":
        return Preload.from_wire(raw)
    return Request.from_wire(raw)


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Ready:
    """What the child sees once it started: its pid, platform, device kind and count, the
    versions of its toolchain, and the flags and visibility variables it runs with."""

    pid: int
    platform: str
    device_kind: str
    device_count: int
    versions: Mapping[str, str | None]
    env: Mapping[str, str | None]

    def to_wire(self) -> dict[str, Any]:
        return {"t": "ready", **{f.name: getattr(self, f.name) for f in dataclasses.fields(self)}}


def _thread(data: Any) -> int:
    if not isinstance(data, int) or isinstance(data, bool):
        raise FrameError(f"a start event names its thread (an int), not {data!r:.40}")
    return data


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class CompileStarted:
    """Config ``cid`` started compiling in the child's thread ``thread`` (its
    ``threading.get_ident()``: a crash report naming that thread pins the crash on it)."""

    KIND: ClassVar[str] = "compile_start"
    cid: str
    thread: int

    def to_wire(self) -> dict[str, Any]:
        return _wire(self.KIND, self.cid, self.thread)

    @classmethod
    def read(cls, cid: str, data: Any) -> CompileStarted:
        """The event of config ``cid`` whose wire ``data`` this is."""
        return cls(cid=cid, thread=_thread(data))


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class CompileFinished:
    """Config ``cid`` stopped compiling: after ``seconds``, or failed (``None``)."""

    KIND: ClassVar[str] = "compiled"
    cid: str
    seconds: float | None = None

    def to_wire(self) -> dict[str, Any]:
        return _wire(self.KIND, self.cid, self.seconds)

    @classmethod
    def read(cls, cid: str, data: Any) -> CompileFinished:
        """The event of config ``cid`` whose wire ``data`` this is."""
        if data is not None and (not isinstance(data, int | float) or isinstance(data, bool)):
            raise FrameError(f"a compiled event carries seconds or nothing, not {data!r:.40}")
        return cls(cid=cid, seconds=None if data is None else float(data))


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class RunStarted:
    """Config ``cid`` started running in the child's thread ``thread``."""

    KIND: ClassVar[str] = "run_start"
    cid: str
    thread: int

    def to_wire(self) -> dict[str, Any]:
        return _wire(self.KIND, self.cid, self.thread)

    @classmethod
    def read(cls, cid: str, data: Any) -> RunStarted:
        """The event of config ``cid`` whose wire ``data`` this is."""
        return cls(cid=cid, thread=_thread(data))


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class RoundStarted:
    """A round of configs timed in passes started (``cids``, in order; one of them is
    running at any time, so a crash blames the round)."""

    KIND: ClassVar[str] = "round_start"
    cids: tuple[str, ...]

    def __post_init__(self) -> None:
        if not self.cids:
            raise FrameError("a round holds at least one config")

    @property
    def cid(self) -> str:
        """The round's first config (the event's config on the wire)."""
        return self.cids[0]

    def to_wire(self) -> dict[str, Any]:
        return _wire(self.KIND, self.cid, list(self.cids))

    @classmethod
    def read(cls, cid: str, data: Any) -> RoundStarted:
        """The event of config ``cid`` whose wire ``data`` this is."""
        if data is None:
            return cls(cids=(cid,))
        if not isinstance(data, Sequence) or isinstance(data, str | bytes):
            raise FrameError(f"a round lists its configs, not {data!r:.40}")
        return cls(cids=tuple(str(c) for c in data))


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class RunFinished:
    """What was running (config ``cid``, or the round it began) stopped."""

    KIND: ClassVar[str] = "ran"
    cid: str

    def to_wire(self) -> dict[str, Any]:
        return _wire(self.KIND, self.cid, None)

    @classmethod
    def read(cls, cid: str, data: Any) -> RunFinished:
        """The event of config ``cid`` whose wire ``data`` this is."""
        return cls(cid=cid)


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class ConfigResult:
    """Config ``cid``'s result: its measurement, or why it failed."""

    KIND: ClassVar[str] = "result"
    cid: str
    result: Measurement | Failure

    def to_wire(self) -> dict[str, Any]:
        return _wire(self.KIND, self.cid, self.result.to_dict())

    @classmethod
    def read(cls, cid: str, data: Any) -> ConfigResult:
        """The event of config ``cid`` whose wire ``data`` this is."""
        if not isinstance(data, Mapping):
            raise FrameError(f"a result event carries a measurement, not {data!r:.40}")
        try:
            return cls(cid=cid, result=measurement_from_dict(data))
        except CacheError as e:  # what measurement_from_dict says of a malformed map
            raise FrameError(f"a result event's measurement: {e}") from None


Event = CompileStarted | CompileFinished | RunStarted | RoundStarted | RunFinished | ConfigResult

#: Each event class by its wire tag: the closed set :func:`event` reads.
_KINDS: dict[str, type[Event]] = {
    cls.KIND: cls
    for cls in (
        CompileStarted,
        CompileFinished,
        RunStarted,
        RoundStarted,
        RunFinished,
        ConfigResult,
    )
}


def _wire(kind: str, cid: str, data: Any) -> dict[str, Any]:
    return {"t": "event", "kind": kind, "cid": cid, "data": data}


def event(raw: Mapping[str, Any]) -> Event:
    """The typed event an ``event`` frame's map holds (inverse of each class's
    ``to_wire``).

    Raises:
        FrameError: the map names no known kind or config, or its data has the wrong type.
    """
    kind, cid = raw.get("kind"), raw.get("cid")
    if not isinstance(kind, str) or not isinstance(cid, str):
        raise FrameError("an event names its kind and its config")
    cls = _KINDS.get(kind)
    if cls is None:
        raise FrameError(f"no event of kind {kind!r:.40}")
    return cls.read(cid, raw.get("data"))


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Done:
    """A request's answer: the handler's fields (``body``), the notes the child's work
    left, and the caller's JAX state that could not be set there (``unapplied``)."""

    body: Mapping[str, Any]
    notes: tuple[str, ...] = ()
    unapplied: Mapping[str, str] = dataclasses.field(default_factory=dict)

    def to_wire(self) -> dict[str, Any]:
        return {
            **self.body,
            "t": "done",
            "notes": list(self.notes),
            "unapplied": dict(self.unapplied),
        }


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
class ErrorReply:
    """A request that failed in the child: why (``kind``) and the error's message, with
    the notes the work left and the caller's state that could not be set there."""

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

    def to_wire(self) -> dict[str, Any]:
        return {
            "t": "error",
            "type": self.kind.value,
            "message": self.message,
            "notes": list(self.notes),
            "unapplied": dict(self.unapplied),
        }


Reply = Ready | Event | Done | ErrorReply


def reply(raw: Any) -> Reply:
    """The typed form of a map the child wrote.

    Raises:
        FrameError: the map is no reply of the protocol.
    """
    if not isinstance(raw, Mapping):
        raise FrameError(f"a reply is a map, not {type(raw).__name__}")
    kind = raw.get("t")
    notes = tuple(str(n) for n in raw.get("notes") or () if isinstance(n, str))
    unapplied = raw.get("unapplied")
    unapplied = (
        {str(k): str(v) for k, v in unapplied.items()} if isinstance(unapplied, Mapping) else {}
    )
    if kind == "event":
        return event(raw)
    if kind == "done":
        body = {k: v for k, v in raw.items() if k not in ("t", "notes", "unapplied")}
        return Done(body=body, notes=notes, unapplied=unapplied)
    if kind == "error":
        try:
            error_kind = ErrorKind(raw.get("type"))
        except ValueError:
            raise FrameError(f"no error of kind {raw.get('type')!r:.40}") from None
        return ErrorReply(
            kind=error_kind,
            message=str(raw.get("message") or ""),
            notes=notes,
            unapplied=unapplied,
        )
    if kind == "ready":
        try:
            return Ready(
                pid=int(raw["pid"]),
                platform=str(raw["platform"]),
                device_kind=str(raw["device_kind"]),
                device_count=int(raw["device_count"]),
                versions=dict(raw.get("versions") or {}),
                env=dict(raw.get("env") or {}),
            )
        except (KeyError, TypeError, ValueError) as e:
            raise FrameError(f"a ready frame without its {e}") from None
    raise FrameError(f"no frame of kind {kind!r:.40}")
