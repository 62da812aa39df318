"""The frames a parent and its child exchange, typed at both ends.

The parent sends a :class:`Request` (the handler module that answers it in the child, the
operation, the call it is about, and the flow's own fields), or a :class:`Preload` or an
:class:`Exit`. The child says :class:`Ready` once, when it starts, and answers each request
with :class:`Event` frames while it works, then one :class:`Done` or :class:`ErrorReply`.

On the wire each frame is a msgpack map (see :mod:`.wire`), with ``t`` naming the kind of
a reply; a request's map keeps its fields at the top level, because recorded requests are
stored in profile sidecars (``jaxtune tune --from-profile`` replays them) and must read back.
:func:`reply` turns a map that came from the child into a typed reply, and refuses
anything else.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

__all__ = [
    "Done",
    "ErrorReply",
    "Event",
    "Exit",
    "FrameError",
    "FunctionRef",
    "Module",
    "Preload",
    "Ready",
    "Reply",
    "Request",
    "reply",
    "request",
]

#: The fields of a request that every flow's request carries (the rest are the flow's).
_CALL_FIELDS = ("handler", "op", "ref", "args", "kwargs", "jax_state", "environ")


class FrameError(ValueError):
    """A map from the child that is no frame of the protocol."""


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


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Request:
    """A request about a call of a function: the jaxtune module whose ``handle(server,
    request)`` answers it in the child (``handler``), the operation (``op``), the function
    (``ref``), its arguments as :mod:`.wire` encoded them, the caller's JAX state and
    variables, and the flow's own fields (``fields``: plain values). A request for a task
    the child already holds may leave ``ref`` and the arguments out (``None``)."""

    handler: str
    op: str
    ref: FunctionRef | None
    args: Any = None
    kwargs: Any = None
    jax_state: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    environ: Mapping[str, Any] | None = None
    fields: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    @property
    def has_call(self) -> bool:
        """Whether the request carries the function and its arguments."""
        return self.ref is not None and self.args is not None

    def with_fields(self, op: str, **fields: Any) -> Request:
        """This request for another operation, with the flow's fields updated."""
        return dataclasses.replace(self, op=op, fields={**self.fields, **fields})

    def lean(self, *drop: str) -> Request:
        """This request without the function, its arguments and the flow's fields named
        in ``drop`` (a child that holds the task has them)."""
        fields = {k: v for k, v in self.fields.items() if k not in drop}
        return dataclasses.replace(self, ref=None, args=None, kwargs=None, fields=fields)

    def to_wire(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "handler": self.handler,
            "op": self.op,
            "jax_state": dict(self.jax_state),
            "environ": None if self.environ is None else dict(self.environ),
        }
        if self.ref is not None:
            out["ref"] = self.ref.to_wire()
        if self.args is not None:
            out["args"] = self.args
            out["kwargs"] = self.kwargs
        out.update(self.fields)
        return out

    @classmethod
    def from_wire(cls, raw: Any) -> Request:
        """The request a map describes (one this process received, or a recorded one).

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
        return cls(
            handler=handler,
            op=op,
            ref=None if ref is None else FunctionRef.from_wire(ref),
            args=raw.get("args"),
            kwargs=raw.get("kwargs"),
            jax_state=state if isinstance(state, Mapping) else {},
            environ=environ if isinstance(environ, Mapping) else None,
            fields={k: v for k, v in raw.items() if k not in _CALL_FIELDS},
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


def request(raw: Any) -> Request | Preload | Exit:
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


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Event:
    """A step of the work on a request (``kind``: ``compile_start``, ``compiled``,
    ``run_start``, ``round_start``, ``ran``, ``result``...) about one config (``cid``),
    with its data (a result's measurement, a round's configs)."""

    kind: str
    cid: str
    data: Any = None

    def to_wire(self) -> dict[str, Any]:
        return {"t": "event", "kind": self.kind, "cid": self.cid, "data": self.data}


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


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class ErrorReply:
    """A request that failed in the child: the error's type name (a jaxtune error, or
    ``NotTransportable``, ``UnknownTask``, ``SweepError``) and message."""

    type: str
    message: str
    notes: tuple[str, ...] = ()
    unapplied: Mapping[str, str] = dataclasses.field(default_factory=dict)

    def to_wire(self) -> dict[str, Any]:
        return {
            "t": "error",
            "type": self.type,
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
        if not isinstance(raw.get("kind"), str) or not isinstance(raw.get("cid"), str):
            raise FrameError("an event names its kind and its config")
        return Event(kind=raw["kind"], cid=raw["cid"], data=raw.get("data"))
    if kind == "done":
        body = {k: v for k, v in raw.items() if k not in ("t", "notes", "unapplied")}
        return Done(body=body, notes=notes, unapplied=unapplied)
    if kind == "error":
        return ErrorReply(
            type=str(raw.get("type") or "SweepError"),
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
