"""The vocabulary both flows and the layers between them speak: a config and its id, the
measurement of a config (or why it failed), the cache entry of a tuned key, and the choice
a call makes; how a profile is captured, and what a trace capture knew about the program it
traced. Plain frozen
values, written and read by :mod:`.typed` from their annotations (what a stored field must
hold beyond its type: :mod:`.entry_schema`)."""

from __future__ import annotations

import dataclasses
import enum
import statistics
from collections.abc import Mapping
from typing import Annotated, Any, ClassVar, Generic, Literal, TypeVar

from . import typed
from .entry_schema import (
    CONFIG,
    COUNT,
    DECISION,
    MARGIN,
    NUMBER,
    PHASES,
    TIME,
    TIMES,
    stored_error,
)
from .errors import CacheError

__all__ = [
    "ArgumentValues",
    "CaptureInfo",
    "Choice",
    "CodeDigest",
    "Config",
    "Entry",
    "EntryId",
    "Failure",
    "Measurement",
    "PallasKernel",
    "ProfileOptions",
    "RanConfig",
    "RecordedCall",
    "Source",
    "Stale",
    "StaleReason",
    "SweepValues",
    "WorkHint",
    "config_id",
    "measurement_from_dict",
    "pass_text",
    "ratio_texts",
]

#: A config: the values of the knobs a kernel's space names, by knob.
Config = dict[str, Any]
#: Where a call's config came from.
Source = Literal["explicit", "scope", "cache", "packaged", "nearest", "default"]


class StaleReason(enum.Enum):
    """Why a stored entry is stale (:func:`jaxtune._tuning.staleness.judge` says which
    hold); the value is the label ``jaxtune cache list`` prints, its JSON's
    ``stale_reasons`` hold and a recorded call keeps."""

    #: Its config's keys are not the space's (renamed since): ignored.
    KEYS = "config keys renamed"
    #: Tuned for other code of the kernel (its code digest differs): a miss.
    CODE = "code changed"
    #: Its config is not in the call's pruned space: skipped.
    OUTSIDE = "config outside the space"
    #: Tuned with another jax/jaxlib/libtpu: used, with a warning, until re-tuned.
    TOOLCHAIN = "toolchain"
    #: The space holds configs its sweep never measured: used, with a warning, until re-tuned.
    NEW_CONFIGS = "new configs"
    #: Timed the forward pass alone, while the call is differentiated: tuned again.
    WRONG_PASS = "wrong pass"


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Stale:
    """One reason an entry is stale, with the words that messages, recordings and
    ``jaxtune`` commands print for it (``text``: ``"code changed"``, ``"tuned with another
    toolchain (jax 0.4.1, now 0.4.30)"``, ``"3 new configs in the space since it was
    tuned"``...; made by :func:`jaxtune._tuning.staleness.judge`). Code decides on
    ``reason``; only the edges print ``text``."""

    reason: StaleReason
    text: str

    def __str__(self) -> str:
        return self.text


def pass_text(timing: str) -> str:
    """A sweep's ``timing`` for people: ``forward``, ``fwd+bwd`` (``vjp``), ``-`` (unknown).

    Examples:
        >>> pass_text("vjp")
        'fwd+bwd'
    """
    return {"forward": "forward", "vjp": "fwd+bwd"}.get(timing, timing or "-")


def ratio_texts(*values: float) -> tuple[str, ...]:
    """Time ratios for people, with two decimals, or as many more (up to six) as it takes
    for no ratio other than 1 to read ``1.00``: a config 0.3 % ahead, shown slower, is
    ``1.003x ahead (99 % interval 1.001-1.005)``, not ``1.00x ahead (... 1.00-1.00)``.

    Examples:
        >>> ratio_texts(1.31, 1.22, 1.4)
        ('1.31', '1.22', '1.40')
        >>> ratio_texts(1.0031, 1.0012, 1.0049)
        ('1.003', '1.001', '1.005')
        >>> ratio_texts(1.0, 0.9996)
        ('1.0000', '0.9996')
        >>> ratio_texts(1.001, 1.00004, 1.0014)
        ('1.00100', '1.00004', '1.00140')
    """
    texts: tuple[str, ...] = ()
    for digits in (2, 3, 4, 5, 6):
        texts = tuple(f"{v:.{digits}f}" for v in values)
        one = f"{1:.{digits}f}"
        if all(t != one or v == 1.0 for t, v in zip(texts, values, strict=True)):
            break
    return texts


def config_id(config: Mapping[str, Any]) -> str:
    """A readable, stable text form of a config: ``block_k=256,block_m=128``."""
    return ",".join(f"{k}={config[k]!r}" for k in sorted(config))


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Measurement:
    """The timing of one config that ran and passed the numerics check."""

    #: Stored as a map led by ``ok: True`` (a :class:`Failure`'s says ``False``).
    WIRE_TAG: ClassVar = ("ok", True)

    config: Annotated[Mapping[str, Any], CONFIG]
    median_us: Annotated[float, TIME]
    min_us: Annotated[float, TIME]
    spread: Annotated[float, NUMBER]
    samples: Annotated[int, COUNT]
    compile_s: Annotated[float, NUMBER]
    dropped: bool = False
    #: A 95 % confidence interval of the median (µs), from the samples' order statistics.
    low_us: Annotated[float | None, TIME] = None
    high_us: Annotated[float | None, TIME] = None
    #: The median of each interleaved re-timing round (leaders only), round by round.
    rounds_us: Annotated[tuple[float, ...], TIMES, typed.AS_IS] = dataclasses.field(
        default=(), metadata=typed.OMIT_DEFAULT
    )
    #: How many times the sweep called the config (warm-up, check and timed calls); 0 in
    #: entries older than the field.
    calls: Annotated[int, COUNT] = dataclasses.field(default=0, metadata=typed.OMIT_DEFAULT)
    #: Left the rounds clearly behind: its fastest round over 1.5x another config's
    #: slowest (``dropped`` too). False in entries older than the field.
    behind: bool = dataclasses.field(default=False, metadata=typed.OMIT_DEFAULT)
    #: The config this one compiles to the same program as (``dropped`` too): that one was
    #: timed for both, and this carries its timing (``median_us`` its :attr:`time_us`, the
    #: time it shows). ``None`` in entries older than the field.
    same_as: Annotated[Mapping[str, Any], CONFIG] | None = dataclasses.field(
        default=None, metadata=typed.OMIT_DEFAULT
    )

    ok = True

    @property
    def time_us(self) -> float:
        """The time the decision used: the median of the per-round times of a config timed
        in the interleaved rounds, else the median of its samples."""
        return statistics.median(self.rounds_us) if self.rounds_us else self.median_us

    @property
    def why_out(self) -> str:
        """Why a ``dropped`` config is out: dropped early in the first pass, clearly
        behind in the rounds (every round of another config beat all of its by 1.5x), or
        shown slower by the rounds' test, or the same program as another config (timed in
        its stead, its knobs in the order of the tuning space); empty for a config that is
        not out."""
        if not self.dropped:
            return ""
        if self.same_as is not None:
            knobs = ", ".join(f"{k}={v!r}" for k, v in self.same_as.items())
            return f"same program as {knobs}"
        if not self.rounds_us:
            return "dropped early (clearly slower)"
        return "clearly behind in the rounds" if self.behind else "shown slower in the rounds"

    def overlaps(self, other: Measurement) -> bool:
        """Whether the two medians' confidence intervals overlap (the timings cannot tell
        the two configs apart); without intervals, whether the medians are equal."""
        if None in (self.low_us, self.high_us, other.low_us, other.high_us):
            return self.median_us == other.median_us
        return bool(self.low_us <= other.high_us and other.low_us <= self.high_us)  # type: ignore[operator]

    def to_dict(self) -> dict[str, Any]:
        """The map it is stored and sent as (:mod:`.typed`; inverse:
        :func:`measurement_from_dict`)."""
        out: dict[str, Any] = typed.encode(self)
        return out


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Failure:
    """A config that did not produce a usable timing, and why (``stage``: where it failed)."""

    WIRE_TAG: ClassVar = ("ok", False)

    config: Annotated[Mapping[str, Any], CONFIG]
    stage: Literal["compile", "run", "check", "timeout", "crash"]
    reason: str

    ok = False

    def to_dict(self) -> dict[str, Any]:
        """The map it is stored and sent as (inverse: :func:`measurement_from_dict`)."""
        out: dict[str, Any] = typed.encode(self)
        return out


def _shown(m: Measurement | Failure) -> dict[str, Any]:
    """A measurement as a summary shows it: its stored map, with the time the decision
    used (``time_us``, the one ``jaxtune cache show`` prints) and, for a config that is out,
    why (``why_out``)."""
    d = m.to_dict()
    if isinstance(m, Measurement):
        d["time_us"] = m.time_us
        if m.dropped:
            d["why_out"] = m.why_out
    return d


def measurement_from_dict(d: Mapping[str, Any]) -> Measurement | Failure:
    """Inverse of ``to_dict`` of either kind (told apart by ``ok``).

    Raises:
        CacheError: a field is missing or has the wrong type (the message names it).
    """
    try:
        result: Measurement | Failure = typed.decode(Measurement | Failure, d, "")
        return result
    except typed.MismatchError as e:
        raise CacheError(stored_error(e, "measurement")) from None


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class ArgumentValues:
    """Where one array argument's values came from for a sweep (``source``: ``caller``,
    ``recorded``, ``inputs=``, ``synthesised`` or ``recorded, partly synthesised``), whether
    they are integers or booleans (values that often decide the work: ``integer``), and a
    short text of them per value set (``summary``; ``None`` where none was written)."""

    source: str = dataclasses.field(default="", metadata=typed.OMIT_DEFAULT)
    integer: bool = dataclasses.field(default=False, metadata=typed.OMIT_DEFAULT)
    summary: tuple[str, ...] | None = dataclasses.field(default=None, metadata=typed.OMIT_DEFAULT)


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class WorkHint:
    """The work the kernel's ``flops=`` / ``bytes=`` hints count for the call (each
    ``None`` where the decorator gave no such hint)."""

    flops: float | None = dataclasses.field(default=None, metadata=typed.OMIT_DEFAULT)
    bytes: float | None = dataclasses.field(default=None, metadata=typed.OMIT_DEFAULT)


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class SweepValues:
    """The values a sweep runs on, as its plan carries them and its entry keeps them: how
    many value sets were timed as a mix (``sets``), per array argument where its values
    came from (``arguments``), and the work the kernel's hints count (``work``).

    Written as ``{"sets": n, "arguments": {name: {"source": ..., "integer": true,
    "summary": [...]}}, "work": {"flops": ...}}``; each field is left out while unset
    (``None``), so that an entry older than the record is ``{}``, and a map written
    before the record reads and is written back byte for byte.

    Examples:
        >>> typed.encode(SweepValues())
        {}
        >>> SweepValues(sets=1, arguments={"n": ArgumentValues(source="caller")}).text
        'n: caller'
    """

    sets: Annotated[int, COUNT] | None = dataclasses.field(
        default=None, metadata=typed.OMIT_DEFAULT
    )
    arguments: Mapping[str, ArgumentValues] | None = dataclasses.field(
        default=None, metadata=typed.OMIT_DEFAULT
    )
    work: WorkHint | None = dataclasses.field(default=None, metadata=typed.OMIT_DEFAULT)

    @property
    def set_count(self) -> int:
        """How many value sets were timed (1 where the record does not say)."""
        return self.sets or 1

    @property
    def text(self) -> str:
        """Where the values came from, for people: each integer/boolean argument with a
        summary of its values (one per value set), each made-up one, then the others by
        source: ``"lengths: recorded (s32[8] 1..2048 sum 4100 median 300); x, w:
        recorded"``, led by ``"3 value sets timed as a mix; "`` for a mix; empty for an
        empty record."""
        parts = []
        plain: dict[str, list[str]] = {}  # real float values: their names, by source
        for name, about in (self.arguments or {}).items():
            source = about.source or "?"
            summary = [t for t in about.summary or () if t]
            if summary:
                parts.append(f"{name}: {source} ({' | '.join(summary)})")
            elif source in ("caller", "recorded"):
                plain.setdefault(source, []).append(name)
            else:
                parts.append(f"{name}: {source}")
        parts += [f"{', '.join(names)}: {source}" for source, names in plain.items()]
        head = f"{self.set_count} value sets timed as a mix; " if self.set_count > 1 else ""
        return head + "; ".join(parts)


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Entry:
    """The tuned outcome for one (kernel, device kind, key)."""

    kernel: str
    device_kind: str
    key: str
    config: Annotated[Mapping[str, Any], CONFIG]
    time_us: Annotated[float | None, TIME]
    default_config: Annotated[Mapping[str, Any], CONFIG]
    default_time_us: Annotated[float | None, TIME]
    measurements: tuple[Measurement | Failure, ...] = ()
    versions: Mapping[str, str | None] = dataclasses.field(default_factory=dict)
    created: Annotated[float, NUMBER] = 0.0
    kernel_version: str = ""
    shapes: tuple[tuple[str, tuple[Annotated[int, COUNT], ...]], ...] = ()
    statics: str = ""
    #: The search strategy's name and the size of the pruned space it searched.
    search: str = "exhaustive"
    space_size: Annotated[int, COUNT] = 0
    #: Rivals were shown equivalent within ``tie_within`` (``decision == "tie"``): the
    #: default, when among them, or the earliest of them in the space won.
    tie: bool = False
    #: The speedup's 95 % interval, from the confidence intervals of both medians.
    speedup_range: Annotated[tuple[float, float] | None, typed.AS_IS] = None
    #: How the winner was decided: ``clear``, ``tie``, ``undecided`` (the rounds ran out:
    #: the candidate won, or a rival whose second fastest round was more than
    #: ``tie_within`` faster) or ``single``; empty in entries older than the field.
    decision: Annotated[str, DECISION] = ""
    #: The closest rival: ``{"rival": config, "ratio": its time over the stored config's,
    #: "low": ..., "high": ...}`` (the ratio's 95 % interval), with ``"kept"`` where an
    #: undecided race stored another config than its best estimate: ``"envelope"`` (its
    #: faster rounds) or ``"default"`` (the rounds measured the estimate slower than the
    #: default); or ``None``.
    margin: Annotated[Mapping[str, Any] | None, MARGIN] = None
    #: The timer (``wall``, ``profiler``, ``cupti``) and the pass timed (``forward``,
    #: ``vjp``: forward and backward); empty in entries older than the fields.
    timer: str = ""
    timing: str = ""
    #: The digest of the kernel's code it was tuned for (``jaxtune._tuning.digest``), and
    #: the (module, qualname, hash) of each function it covers; empty in entries older
    #: than the fields and for kernels that give ``version=``: never stale for code.
    code_digest: str = ""
    code_parts: tuple[tuple[str, str, str], ...] = ()
    #: Where the sweep's wall time went, in seconds per phase (``start``, ``transfer``,
    #: ``compile``, ...: see docs/search.md); empty in entries older than the field.
    phases: Annotated[Mapping[str, float], PHASES] = dataclasses.field(default_factory=dict)
    #: The values the sweep ran on (docs/values.md); ``{}`` in entries older than the field.
    values: SweepValues = SweepValues()

    @property
    def values_text(self) -> str:
        """Where the sweep's values came from, for people (:attr:`SweepValues.text`)."""
        return self.values.text

    @property
    def pass_text(self) -> str:
        """The pass the sweep timed, for people: ``forward``, ``fwd+bwd`` (``vjp``), or
        ``-`` in entries older than the field."""
        return pass_text(self.timing)

    def decision_text(self) -> str:
        """How the stored config won, for people, with the 95 % interval of the rival's
        time ratio the entry keeps: ``"clear: 1.31x ahead of block=64 (95 % interval
        1.25-1.40)"``, ``"tie with block=64: 1.01x (95 % interval 0.99-1.02)"``,
        ``"undecided vs block=64: 0.98x (95 % interval 0.90-1.05)"``; empty
        when unknown. The tables and pages show the interval at the level of the test that
        decided (99 % where a rival was ruled out or left undecided)."""
        if not self.decision or self.decision == "single" or not self.margin:
            return self.decision if self.decision == "single" else ""
        m = self.margin
        low, high = m.get("low"), m.get("high")
        span = ""
        if low is not None and high is not None:
            ratio, shown_low, shown_high = ratio_texts(m["ratio"], low, high)
            span = f" (95 % interval {shown_low}-{shown_high})"
        else:
            (ratio,) = ratio_texts(m["ratio"])
        rival = config_id(m["rival"])
        if self.decision == "clear":
            if low is not None and low <= 1.0:  # not shown slower: shown not faster
                return f"clear: {rival} not faster, {ratio}x{span}"
            return f"clear: {ratio}x ahead of {rival}{span}"
        if self.decision == "tie":
            return f"tie with {rival}: {ratio}x{span}"
        return f"undecided vs {rival}: {ratio}x{span}"

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
        """A JSON-ready summary (``full``: with every measurement). Whether it is stale is
        the commands' to add (``jaxtune._cli.entries``: the staleness vocabulary lives above
        this layer)."""
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
            "phases": dict(self.phases),
            "values": typed.encode(self.values),
            "search": self.search,
            "measured": self.measured,
            "space_size": self.space_size,
            "code_digest": self.code_digest,
            "versions": dict(self.versions),
            "created": self.created,
        }
        if full:
            d["measurements"] = [_shown(m) for m in self.measurements]
        return d

    def to_dict(self) -> dict[str, Any]:
        """The map it is stored as (:mod:`.typed`; inverse: :meth:`from_dict`)."""
        out: dict[str, Any] = typed.encode(self)
        return out

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Entry:
        """Inverse of :meth:`to_dict`; unknown fields are ignored.

        Raises:
            CacheError: a field is missing or has the wrong type (the message names it).
        """
        try:
            return typed.decode(cls, d, "")
        except typed.MismatchError as e:
            raise CacheError(stored_error(e, "entry")) from None

    def __repr__(self) -> str:
        """Every field, the measurements by count: an entry of a large space holds
        hundreds (``entry.measurements`` has them all), which ``print(choice)`` of a tuned
        call would otherwise show."""
        shown = (
            f"{f.name}=<{len(self.measurements)}>"
            if f.name == "measurements"
            else f"{f.name}={getattr(self, f.name)!r}"
            for f in dataclasses.fields(self)
        )
        return f"Entry({', '.join(shown)})"


EntryId = tuple[str, str, str]


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Choice:
    """The config a call uses and where it came from.

    ``source`` is one of ``"explicit"``, ``"scope"``, ``"cache"``, ``"packaged"``,
    ``"nearest"``, ``"default"``; ``entry`` is the cache entry behind it, if any, and
    ``stale`` why that entry is stale, ``None`` when it is current: its ``reason`` (whose
    ``value`` is the label ``jaxtune cache list`` prints: ``"toolchain"``, ``"new
    configs"``...) and ``text``, the words jaxtune's messages use (also ``str(stale)``).
    """

    config: Mapping[str, Any]
    source: Source
    key: str
    entry: Entry | None = None
    stale: Stale | None = None


#: One function of a kernel's code: module, qualified name, hash of its canonical tree.
Part = tuple[str, str, str]


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class CodeDigest:
    """A kernel's code digest and the parts it was made of (empty when its source could
    not be read, or ``version=`` was given: then entries are never stale for code); worked
    out by :mod:`jaxtune._tuning.digest`. Written as ``[digest, parts]``."""

    WIRE_AS_LIST: ClassVar = True

    digest: str = ""
    parts: tuple[Part, ...] = ()


#: What a recorded call carries to tune it: the sweep request of the tuning flow (a
#: ``jaxtune._isolation.frames.Request``), which the layers below it do not read.
R = TypeVar("R")


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class RecordedCall(Generic[R]):
    """One autotuned call as a recording keeps it (a ``call`` frame of ``jaxtune tune
    --``'s recording, a call in a profile's sidecar that ``jaxtune tune --from-profile``
    replays): the kernel's id, the call's key and shapes, the config it ran with and where
    that came from (``source``), the pass the entry behind it timed (``entry_timing``,
    empty without one) and the pass its sweep would time (``timing``: ``forward``, ``vjp``;
    empty when it holds no sweep; read from the request's plan in a recording written
    before the field), why that entry is stale (``stale``: the words, empty when fresh or
    none; ``stale_reason``: the reason, left out when none and absent from recordings
    written before it, whose reason :func:`jaxtune._tuning.staleness.recorded_reason`
    reads from the words), the
    device kind, the kernel's version and code digest, the devices a sweep may use, and the
    sweep request that tunes it in a child (``request``, as
    :meth:`jaxtune._isolation.frames.Request.recorded` keeps it; ``None`` with ``error``
    saying why when the kernel cannot travel).

    The request is a record of the tuning flow, which this layer cannot name: a call is
    written with its request's record, and read as ``RecordedCall`` its request is the map
    that was kept, as it came (a profile's sidecar and a recording carry it so, unread);
    ``jaxtune tune`` reads that as a sweep request, of any version
    (:func:`jaxtune._tuning.sweep.requests.read_request`), or a reader asks for
    ``RecordedCall[X]`` to read it as ``X`` along with the rest."""

    WIRE_TAG: ClassVar = ("t", "call")

    kernel: str
    key: str
    source: Source
    entry_timing: str = ""
    config: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    device_kind: str = ""
    version: str = ""
    shapes: tuple[tuple[str, tuple[int, ...]], ...] = ()
    statics: str = ""
    devices: tuple[int, ...] | None = None
    code: CodeDigest = CodeDigest()
    stale: str = ""
    stale_reason: StaleReason | None = dataclasses.field(default=None, metadata=typed.OMIT_DEFAULT)
    timing: str = dataclasses.field(default="", metadata=typed.OMIT_DEFAULT)
    request: R | None = dataclasses.field(default=None, metadata=typed.OMIT_DEFAULT)
    error: str = dataclasses.field(default="", metadata=typed.OMIT_DEFAULT)

    def __post_init__(self) -> None:
        # A recording written before `timing` was a field of its own kept the pass only in
        # its request's plan, at the top level of a request of version 1 (no `v`).
        if not self.timing and isinstance(self.request, Mapping) and "v" not in self.request:
            plan = self.request.get("plan")
            timing = plan.get("timing") if isinstance(plan, Mapping) else None
            if isinstance(timing, str):
                object.__setattr__(self, "timing", timing)

    def to_wire(self) -> dict[str, Any]:
        """The map a recording and a sidecar keep (inverse: :meth:`read`)."""
        out: dict[str, Any] = typed.encode(self)
        return out

    @classmethod
    def read(cls, raw: Any, where: str = "a recorded call") -> RecordedCall:
        """The call a map holds.

        Raises:
            MismatchError: the map is no recorded call (a ``ValueError``); the message
                names ``where`` and the field.
        """
        return typed.decode(cls, raw, "", within=where)


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class ProfileOptions:
    """How a profile is captured, one value carried whole from ``@jaxtune.profiled`` or
    ``jaxtune.profile`` to the capture in the child (as JAX's profiler carries one
    ``ProfileOptions``): the calls traced (``iters``) after ``warmup`` untraced ones (at
    least 2 run), the LLO debug info registered on TPU and xprof's analysis of it (``llo``),
    tracing inside custom calls (``custom_call_tracing``), and the folder the trace goes to
    (``logdir``; ``None``: a new temporary folder, chosen when the capture starts)."""

    iters: int = 5
    warmup: int = 2
    llo: bool = True
    custom_call_tracing: bool = False
    logdir: str | None = None


def _figure(value: Any) -> bool:
    return type(value) in (int, float)


#: A figure of a cost estimate (flops, bytes): an int or a float, read as written (an int
#: stays an int, as the capture wrote it).
Figure = Annotated[int | float, typed.Check(_figure, "a number")]


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class PallasKernel:
    """One ``pallas_call`` of a captured program, as its capture keeps it
    (:attr:`CaptureInfo.kernels`): the kernel's name, the name stack around the call
    (``scope``), how many times one run of the program executes it (``per_step``; ``None``
    when unknown), the bytes of its operands and results (``io_bytes``), its own cost
    estimate, its ``pallas_call`` line (``source``), the line of the program that called
    into it (``call_site``) and the jaxtune kernel it runs inside (``inside``). A kernel
    recovered from a trace's metadata alone has the first three and ``source``."""

    name: str
    scope: tuple[str, ...]
    per_step: int | None = None
    io_bytes: int | None = None
    cost_estimate: Mapping[str, Figure] | None = None
    source: str | None = None
    call_site: str | None = None
    inside: str | None = None


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class RanConfig:
    """The config a jaxtune kernel ran with in a capture (:attr:`CaptureInfo.configs`) and
    the speedup over its default the cache measured for it (``None`` when the config was
    not tuned here: a default, or an entry of another key)."""

    config: Mapping[str, Any] | None = None
    speedup: float | None = None


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class CaptureInfo:
    """What a trace capture knew about the program it traced, which the trace alone does
    not say: where the trace went and on what device, the compiled program's instruction
    map (``hlo``: instruction -> op name and custom-call target; ``fusions``: fusion ->
    the ops fused into it), the Pallas calls (``kernels``, a :class:`PallasKernel` each),
    the jaxtune kernels' call sites (``autotuned`` counts), cost estimates (``costs``),
    sources, FLOP/byte ``hints``, the recorded calls ``jaxtune tune --from-profile``
    replays (``calls``), the configs that ran (``configs``, a :class:`RanConfig` each), the
    capture's ``timings`` and the flags it ran with (``env``). ``claims`` (a program's op
    -> the kernels that own it) comes from the trace's own metadata when it is read, and
    is never stored.

    It travels from the child as a map and is kept beside the trace (the profile's
    sidecar, of version :attr:`WIRE_VERSION`); a trace jaxtune did not capture has only
    what its metadata recovers."""

    WIRE_VERSION: ClassVar = 1

    logdir: str = ""
    platform: str = ""
    device_kind: str = ""
    hlo: Annotated[Mapping[str, tuple[str, str | None]], typed.AS_IS] = dataclasses.field(
        default_factory=dict
    )
    fusions: Mapping[str, list[str]] = dataclasses.field(default_factory=dict)
    kernels: tuple[PallasKernel, ...] = ()
    claims: Mapping[tuple[int, str], tuple[str, ...]] = dataclasses.field(
        default_factory=dict, metadata=typed.LOCAL
    )
    autotuned: Mapping[str, int] = dataclasses.field(default_factory=dict)
    costs: Mapping[str, Mapping[str, Figure]] = dataclasses.field(default_factory=dict)
    sources: Mapping[str, str] = dataclasses.field(default_factory=dict)
    hints: Mapping[str, Mapping[str, float]] = dataclasses.field(default_factory=dict)
    calls: tuple[RecordedCall, ...] = ()
    configs: Mapping[str, RanConfig] = dataclasses.field(default_factory=dict)
    timings: Mapping[str, float] = dataclasses.field(default_factory=dict)
    env: Mapping[str, str | None] = dataclasses.field(default_factory=dict)

    def __bool__(self) -> bool:
        """Whether it holds anything (an empty one stands for "no capture info")."""
        return any(getattr(self, f.name) for f in dataclasses.fields(self))

    def to_dict(self) -> dict[str, Any]:
        """The map it travels and is stored as (without ``claims``; :mod:`.typed`)."""
        out: dict[str, Any] = typed.encode(self)
        return out

    @classmethod
    def from_dict(cls, raw: Any) -> CaptureInfo:
        """The capture info a map holds (unknown keys are ignored, missing ones empty).

        Raises:
            ValueError: a field holds a value of the wrong kind (a sidecar edited by hand,
                or written by another program); the message names it.
        """
        try:
            info: CaptureInfo = typed.decode(cls, raw, "")
        except typed.MismatchError as e:
            raise ValueError(f"capture info's {e}" if e.where else f"capture info: {e}") from None
        return info
