"""Measurements, cache entries and :class:`TuningResult`, with their msgpack form.

They are stored through :mod:`jaxtune._codec` (msgpack only: loading never runs code).
"""

from __future__ import annotations

import contextvars
import dataclasses
import itertools
import os
import pathlib
import threading
import time
from collections.abc import Iterator, Mapping
from typing import Any, Literal

from .._codec import DecodeError, atomic_write, packb, read_bounded, table, unpackb
from .._errors import CacheError
from .schema import check_entry, check_measurement

__all__ = [
    "SCHEMA_VERSION",
    "Entry",
    "Failure",
    "Measurement",
    "TuningResult",
    "active_scopes",
]

#: Version of the on-disk layout of cache files and TuningResult files.
SCHEMA_VERSION = 1


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Measurement:
    """The timing of one config that ran and passed the numerics check."""

    config: Mapping[str, Any]
    median_us: float
    min_us: float
    spread: float
    samples: int
    compile_s: float
    dropped: bool = False
    #: A 95 % confidence interval of the median (µs), from the samples' order statistics.
    low_us: float | None = None
    high_us: float | None = None
    #: The median of each interleaved re-timing round (leaders only), round by round.
    rounds_us: tuple[float, ...] = ()

    ok = True

    @property
    def why_out(self) -> str:
        """Why a ``dropped`` config is out: shown slower in the rounds, or dropped early
        in the first pass; empty for a config that is not out."""
        if not self.dropped:
            return ""
        return "shown slower in the rounds" if self.rounds_us else "dropped early (clearly slower)"

    def overlaps(self, other: Measurement) -> bool:
        """Whether the two medians' confidence intervals overlap (the timings cannot tell
        the two configs apart); without intervals, whether the medians are equal."""
        if None in (self.low_us, self.high_us, other.low_us, other.high_us):
            return self.median_us == other.median_us
        return bool(self.low_us <= other.high_us and other.low_us <= self.high_us)  # type: ignore[operator]

    def to_dict(self) -> dict[str, Any]:
        d = {"ok": True, **{f.name: getattr(self, f.name) for f in dataclasses.fields(self)}}
        if not self.rounds_us:
            del d["rounds_us"]
        return d


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Failure:
    """A config that did not produce a usable timing, and why (``stage``: where it failed)."""

    config: Mapping[str, Any]
    stage: Literal["compile", "run", "check", "timeout", "crash"]
    reason: str

    ok = False

    def to_dict(self) -> dict[str, Any]:
        return {"ok": False, "config": self.config, "stage": self.stage, "reason": self.reason}


def measurement_from_dict(d: Mapping[str, Any]) -> Measurement | Failure:
    """Inverse of ``to_dict`` of either kind.

    Raises:
        CacheError: a field is missing or has the wrong type (see :mod:`.schema`).
    """
    ok, fields = check_measurement(d)
    if not ok:
        return Failure(**fields)
    if "rounds_us" in fields:
        fields["rounds_us"] = tuple(fields["rounds_us"])
    return Measurement(**fields)


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Entry:
    """The tuned outcome for one (kernel, device kind, key)."""

    kernel: str
    device_kind: str
    key: str
    config: Mapping[str, Any]
    time_us: float | None
    default_config: Mapping[str, Any]
    default_time_us: float | None
    measurements: tuple[Measurement | Failure, ...] = ()
    versions: Mapping[str, str | None] = dataclasses.field(default_factory=dict)
    created: float = 0.0
    kernel_version: str = ""
    shapes: tuple[tuple[str, tuple[int, ...]], ...] = ()
    statics: str = ""
    #: The search strategy's name and the size of the pruned space it searched.
    search: str = "exhaustive"
    space_size: int = 0
    #: Rivals were shown equivalent within ``tie_within`` (``decision == "tie"``): the
    #: default, when among them, or the earliest of them in the space won.
    tie: bool = False
    #: The speedup's 95 % interval, from the confidence intervals of both medians.
    speedup_range: tuple[float, float] | None = None
    #: How the winner was decided: ``clear``, ``tie``, ``undecided`` (the rounds ran out:
    #: the best estimate won) or ``single``; empty in entries older than the field.
    decision: str = ""
    #: The closest rival: ``{"rival": config, "ratio": its time over the stored config's,
    #: "low": ..., "high": ...}`` (the ratio's 95 % interval), or ``None``.
    margin: Mapping[str, Any] | None = None
    #: The timer (``wall``, ``profiler``, ``cupti``) and the pass timed (``forward``,
    #: ``vjp``: forward and backward); empty in entries older than the fields.
    timer: str = ""
    timing: str = ""

    def decision_text(self) -> str:
        """How the stored config won, for people: ``"clear: 1.31x ahead of block=64
        (1.25-1.40)"``, ``"tie with block=64 (0.99-1.02)"``, ``"undecided vs block=64: 0.98x
        (0.90-1.05), best estimate"``; empty when unknown."""
        from .space import config_id

        if not self.decision or self.decision == "single" or not self.margin:
            return self.decision if self.decision == "single" else ""
        m = self.margin
        low, high = m.get("low"), m.get("high")
        span = f" ({low:.2f}-{high:.2f})" if low is not None and high is not None else ""
        rival = config_id(m["rival"])
        if self.decision == "clear":
            if low is not None and low <= 1.0:  # not shown slower: shown not faster
                return f"clear: {rival} not faster, {m['ratio']:.2f}x{span}"
            return f"clear: {m['ratio']:.2f}x ahead of {rival}{span}"
        if self.decision == "tie":
            return f"tie with {rival}: {m['ratio']:.2f}x{span}"
        return f"undecided vs {rival}: {m['ratio']:.2f}x{span}, best estimate"

    @property
    def measured(self) -> int:
        """How many configs of the space the sweep measured (``space_size`` in all)."""
        return len(self.measurements)

    @property
    def speedup(self) -> float | None:
        """Default time over best time (``None`` when either is unknown)."""
        if not self.time_us or not self.default_time_us:
            return None
        return self.default_time_us / self.time_us

    def summary(self, *, full: bool = False) -> dict[str, Any]:
        """A JSON-ready summary (``full``: with every measurement); ``stale`` tells whether
        it was tuned with another JAX, jaxlib or libtpu than the installed ones."""
        from .._versions import stale

        d: dict[str, Any] = {
            "kernel": self.kernel,
            "device_kind": self.device_kind,
            "key": self.key,
            "config": dict(self.config),
            "time_us": self.time_us,
            "default_time_us": self.default_time_us,
            "speedup": self.speedup,
            "speedup_range": list(self.speedup_range) if self.speedup_range else None,
            "tie": self.tie,
            "decision": self.decision,
            "margin": dict(self.margin) if self.margin else None,
            "timer": self.timer,
            "timing": self.timing,
            "search": self.search,
            "measured": self.measured,
            "space_size": self.space_size,
            "stale": stale(dict(self.versions)),
            "versions": dict(self.versions),
            "created": self.created,
        }
        if full:
            d["measurements"] = [m.to_dict() for m in self.measurements]
        return d

    def to_dict(self) -> dict[str, Any]:
        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        d["measurements"] = [m.to_dict() for m in self.measurements]
        d["shapes"] = [[dt, list(shape)] for dt, shape in self.shapes]
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Entry:
        """Inverse of :meth:`to_dict`; unknown fields are ignored.

        Raises:
            CacheError: a field is missing or has the wrong type (see :mod:`.schema`).
        """
        fields = check_entry(d)
        fields["measurements"] = tuple(
            measurement_from_dict(m) for m in fields.get("measurements", ())
        )
        fields["shapes"] = tuple((dt, tuple(shape)) for dt, shape in fields.get("shapes", ()))
        if fields.get("speedup_range") is not None:
            fields["speedup_range"] = tuple(fields["speedup_range"])
        return cls(**fields)


EntryId = tuple[str, str, str]

_SCOPES: contextvars.ContextVar[tuple[TuningResult, ...]] = contextvars.ContextVar(
    "jaxtune_scopes", default=()
)
_IDS = itertools.count(1)
#: The JAX user context of the scopes (made when first asked for; see scope_context).
_JIT_CONTEXT: list[Any] = []
_JIT_CONTEXT_LOCK = threading.Lock()


def scope_context() -> Any:
    """The JAX user context that holds the ids of the scopes in force: part of jit's cache
    key, so entering or leaving a scope re-traces jitted functions. Made at the first call
    (JAX imported then, not at this module's import, so that ``jaxtune cache`` runs
    without JAX); the eager module asks for it when it is imported, beside its own."""
    with _JIT_CONTEXT_LOCK:
        if not _JIT_CONTEXT:
            import jax

            _JIT_CONTEXT.append(jax.make_user_context(default_value=()))
        return _JIT_CONTEXT[0]


def active_scopes() -> tuple[TuningResult, ...]:
    """The ``with TuningResult`` scopes in force, innermost last."""
    return _SCOPES.get()


class TuningResult(Mapping[EntryId, Entry]):
    """An immutable mapping ``(kernel, device kind, key) -> Entry``.

    ``with result:`` makes its configs win over every cache inside the block (jitted
    functions re-trace); ``a | b`` merges, the right side winning; ``dumps``/``loads`` and
    ``save``/``load`` round-trip through msgpack, failures included.

    Examples:
        >>> empty = TuningResult()
        >>> len(empty | empty)
        0
    """

    __slots__ = ("_entries", "_id", "_tokens", "untuned")

    def __init__(
        self, entries: Mapping[EntryId, Entry] | None = None, *, untuned: tuple[Any, ...] = ()
    ) -> None:
        #: Pallas kernels that ``jaxtune.tune`` found without a tuning space (KernelSites).
        self.untuned: tuple[Any, ...] = tuple(untuned)
        self._entries: dict[EntryId, Entry] = dict(entries or {})
        for eid, entry in self._entries.items():
            if eid != (entry.kernel, entry.device_kind, entry.key):
                raise ValueError(f"entry id {eid} does not match its entry {entry.key!r}")
        self._id = next(_IDS)
        self._tokens: list[Any] = []

    @classmethod
    def of(cls, *entries: Entry) -> TuningResult:
        """A result holding ``entries`` (later ones win on the same id)."""
        return cls({(e.kernel, e.device_kind, e.key): e for e in entries})

    def __getitem__(self, eid: EntryId) -> Entry:
        return self._entries[eid]

    def __iter__(self) -> Iterator[EntryId]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def __repr__(self) -> str:
        return f"TuningResult({len(self)} entries)"

    def __or__(self, other: object) -> TuningResult:
        if not isinstance(other, TuningResult):
            return NotImplemented
        return TuningResult(
            {**self._entries, **other._entries}, untuned=self.untuned + other.untuned
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, TuningResult):
            return NotImplemented
        return self._entries == other._entries

    __hash__ = None  # type: ignore[assignment]

    def __enter__(self) -> TuningResult:
        scopes = _SCOPES.get()
        token = _SCOPES.set((*scopes, self))
        jit_ctx = scope_context()(tuple(s._id for s in (*scopes, self)))
        jit_ctx.__enter__()
        self._tokens.append((token, jit_ctx))
        return self

    def __exit__(self, *exc: object) -> None:
        token, jit_ctx = self._tokens.pop()
        jit_ctx.__exit__(*exc)
        _SCOPES.reset(token)

    def lookup(self, kernel: str, device_kind: str, key: str) -> Entry | None:
        """The entry for exactly this kernel, device kind and key, or ``None``."""
        return self._entries.get((kernel, device_kind, key))

    def entries_for(self, kernel: str, device_kind: str) -> list[Entry]:
        """Every entry of one kernel on one device kind."""
        return [e for (k, d, _), e in self._entries.items() if k == kernel and d == device_kind]

    def dumps(self) -> bytes:
        """msgpack bytes holding every entry (measurements and failures included)."""
        return packb(
            {
                "schema": SCHEMA_VERSION,
                "format": "jaxtune.TuningResult",
                "entries": [e.to_dict() for e in self._entries.values()],
            }
        )

    @classmethod
    def loads(cls, data: bytes) -> TuningResult:
        """Inverse of :meth:`dumps`.

        Raises:
            CacheError: the bytes are not a jaxtune result, or come from a newer schema.
        """
        try:
            doc = unpackb(data)
        except DecodeError as e:
            raise CacheError(f"not a jaxtune TuningResult (msgpack decode failed: {e}).") from e
        if not isinstance(doc, dict) or doc.get("format") != "jaxtune.TuningResult":
            raise CacheError("not a jaxtune TuningResult: the 'format' field is missing.")
        if not isinstance(doc.get("schema", 0), int):
            raise CacheError("not a jaxtune TuningResult: 'schema' should be an int.")
        if doc.get("schema", 0) > SCHEMA_VERSION:
            raise CacheError(
                f"this TuningResult has schema {doc['schema']}, newer than this jaxtune "
                f"understands ({SCHEMA_VERSION}); upgrade jaxtune to read it."
            )
        entries = doc.get("entries")
        if not isinstance(entries, list):
            raise CacheError("not a jaxtune TuningResult: 'entries' should be a list.")
        try:
            return cls.of(*(Entry.from_dict(e) for e in entries))
        except CacheError as e:
            raise CacheError(f"malformed TuningResult entry ({e}); nothing was loaded.") from e

    def save(self, path: str | os.PathLike[str]) -> pathlib.Path:
        """Writes :meth:`dumps` to ``path`` atomically and returns the path."""
        target = pathlib.Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(target, self.dumps())
        return target

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> TuningResult:
        """Reads a file written by :meth:`save`.

        Raises:
            CacheError: the file cannot be read (the message says why) or is not a result.
        """
        try:
            data = read_bounded(pathlib.Path(path))
        except OSError as e:
            raise CacheError(f"cannot read the TuningResult file {path}: {e}") from e
        try:
            return cls.loads(data)
        except CacheError as e:
            raise CacheError(f"the TuningResult file {path}: {e}") from e

    def table(self) -> str:
        """An aligned table for people: kernel, device, key, default, best, speedup, config."""
        return format_table(list(self._entries.values()))

    def to_html(self) -> str:
        """One self-contained HTML page: per kernel and key, each config's time with its
        spread (a heatmap when the space has two knobs), failures with their reasons, the
        winner and the default marked. Needs ``pip install 'jaxtune[plots]'``.

        Raises:
            PlotsUnavailableError: matplotlib is not installed.
        """
        from .report_html import sweep_html

        return sweep_html(self._entries.values())


def format_table(entries: list[Entry], *, stale: set[EntryId] | None = None) -> str:
    """Aligned text table of entries (each time column in one unit); ``stale`` ids are
    marked."""
    if not entries:
        return "(no tuned entries)"
    from .._profiling import units
    from .space import config_id

    ordered = sorted(entries, key=lambda e: (e.kernel, e.device_kind, e.key))
    unit, fmt = units.time_column(
        [e.default_time_us for e in ordered] + [e.time_us for e in ordered]
    )
    header = (
        "kernel",
        "device",
        "key",
        f"default {unit}",
        f"best {unit}",
        "speedup",
        "config",
        "decided",
    )
    rows = []
    for e in ordered:
        speed = f"{e.speedup:.2f}x" if e.speedup else "-"
        mark = " (stale)" if stale and (e.kernel, e.device_kind, e.key) in stale else ""
        rows.append(
            (
                e.kernel + mark,
                e.device_kind,
                e.key,
                fmt(e.default_time_us),
                fmt(e.time_us),
                speed,
                config_id(e.config),
                e.decision_text() or "-",
            )
        )
    return table(header, rows)


def now() -> float:
    """Seconds since the epoch (a seam for tests)."""
    return time.time()
