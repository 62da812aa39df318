"""What a profile is: :class:`Profile`, and building one from a trace (``jaxtune report``)."""

from __future__ import annotations

import dataclasses
import os
import pathlib
import time
from collections.abc import Callable, Mapping
from typing import Any

from .._core import roofline as _roofline
from .._core.codec import atomic_write
from .._core.errors import JaxtuneError, ProfileError, describe
from .._core.flags import normalise_platform
from .._core.vocabulary import CaptureInfo, RecordedCall
from .._core.xspace import xplane as _xplane
from .._program.markers import Owner
from . import recover as _recover
from .attribution import KernelStat, ScopeStat, attribute, classifier, scopes
from .drops import drop_warnings
from .events import Walk, device_plane, metadata_kinds, program_ids, walk
from .hlo import HloModule
from .intrakernel import IntraKernel, has_intra_lines, intra_kernel
from .mosaic_work import works
from .saved import CALLS_SUFFIX, ReportDocument, calls_bytes, report_json
from .sidecar import INFO_FILE, recall, remember
from .timeline import TimelineSpan
from .totals import OpKind

__all__ = [
    "INTERNAL_FAULT",
    "Profile",
    "TimelineSpan",
    "mosaic_counts",
    "read_space",
    "report_from_trace",
    "timeline_of",
]


def timeline_of(walked: Walk) -> tuple[TimelineSpan, ...]:
    """The walk's timeline bars (:mod:`.timeline`: spans of one kernel joined only where
    they touch, or where the timeline had to be thinned), in µs from the trace's first
    op."""
    spans = walked.spans
    origin = spans[0][0] if spans else 0
    return tuple(
        TimelineSpan(
            name=owner.label,
            kind=owner.kind,
            start_us=(start - origin) * 1e-6,
            duration_us=(end - start) * 1e-6,
            spans=count,
        )
        for start, end, owner, count in spans
    )


@dataclasses.dataclass(frozen=True, kw_only=True)
class Profile:
    """Per-kernel statistics of a captured (or read) trace.

    ``kernels``: every Pallas kernel and jaxtune kernel; ``ops``: every plain XLA op,
    one row per HLO instruction of each program (its name stack and program are columns;
    its calls are its events); ``scopes``: the same ops grouped by name stack
    (:class:`~.attribution.ScopeStat`: every instruction XLA compiled from one scope, for
    "which line of my model costs most"); ``step_us``: device time per iteration; ``logdir``: the trace directory (XProf,
    TensorBoard and Perfetto open it); ``flags``: the profiling-relevant environment the
    capturing process saw; ``missing_flags``: profiling flags it lacked (in-process
    captures); ``llo``: the xprof LLO analysis summary when it ran; ``timings``: seconds
    spent starting the child, compiling, running and parsing; ``timeline``: when each
    kernel ran, at most :data:`.totals.TIMELINE_SPANS` bars over the whole run, and
    ``timeline_joined_us``: spans of one kernel closer than this were drawn as one bar to
    keep that many (0: every span is its own bar); ``peak``: the device's peaks that
    ``bound_by`` was judged against (``None`` when unknown); ``calls``: each autotuned
    call the profiled function made, with what it takes to tune it
    (``jaxtune tune --from-profile``); ``warnings``: what the trace lost (dropped events,
    kernels that lost their Begin/End), each with the flag change that fixes it, shown at
    the top of every report; ``intrakernel``: on a TPU trace captured with custom-call
    tracing, what each kernel's intra-kernel lines show (:mod:`.intrakernel`).
    """

    kernels: tuple[KernelStat, ...]
    ops: tuple[KernelStat, ...]
    scopes: tuple[ScopeStat, ...] = ()
    step_us: float
    total_us: float
    iterations: int
    logdir: str | None
    platform: str
    device_kind: str
    flags: Mapping[str, str | None] = dataclasses.field(default_factory=dict)
    missing_flags: tuple[str, ...] = ()
    llo: Mapping[str, Any] | None = None
    notes: tuple[str, ...] = ()
    timings: Mapping[str, float] = dataclasses.field(default_factory=dict)
    timeline: tuple[TimelineSpan, ...] = ()
    timeline_joined_us: float = 0.0
    peak: _roofline.Peak | None = None
    calls: tuple[RecordedCall, ...] = ()
    warnings: tuple[str, ...] = ()
    intrakernel: tuple[IntraKernel, ...] = ()

    def table(self, top: int = 20, *, llo_all: bool = False) -> str:
        """The ``top`` kernels (and their ``pallas_call`` and call sites), then the ``top``
        XLA ops (one row per instruction, with its name stack), then the ``top`` scopes of
        :attr:`scopes`, as aligned tables of at most 120 columns; each time and rate column
        in one unit, and a footnote saying why a bound is unknown. The :attr:`llo` section
        shows the Pallas kernels and the heaviest
        :data:`~jaxtune._profiling.llo_figures.OTHER_MODULES` other LLO modules, or every
        module with ``llo_all``."""
        from .table import format_profile

        return format_profile(self, top, llo_all=llo_all)

    def to_html(self, top: int = 50) -> str:
        """One self-contained HTML page: the kernel table, a chart of device-time shares,
        a roofline and the timeline of kernels. Needs ``pip install 'jaxtune[plots]'``.

        Raises:
            PlotsUnavailableError: matplotlib is not installed.
        """
        from .html import profile_html

        return profile_html(self, top)

    def to_json(self) -> str:
        """A stable JSON document (schema 1). ``autotuned_kernels``: each autotuned kernel
        that ran a Pallas kernel, over everything it ran, as the kernels table's head row
        totals it (:func:`.table.autotuned_wholes`): its % of the peaks, over-peak flags
        and roofline floor. One record, :class:`~.saved.ReportDocument`, written by
        :mod:`jaxtune._core.typed`."""
        from .table import autotuned_wholes

        return report_json(
            ReportDocument(
                platform=self.platform,
                device_kind=self.device_kind,
                iterations=self.iterations,
                step_us=self.step_us,
                total_us=self.total_us,
                logdir=self.logdir,
                flags=self.flags,
                missing_flags=self.missing_flags,
                llo=self.llo or None,
                notes=self.notes,
                timings=self.timings,
                kernels=self.kernels,
                autotuned_kernels=tuple(autotuned_wholes(self.kernels, self.peak)),
                ops=self.ops,
                scopes=self.scopes,
                timeline=self.timeline,
                timeline_joined_us=self.timeline_joined_us,
                peak=self.peak,
                warnings=self.warnings,
                intrakernel=self.intrakernel,
            )
        )

    @classmethod
    def from_trace(cls, path: str | os.PathLike[str]) -> Profile:
        """Reads a trace written by anyone: a trace directory (the newest ``.xplane.pb``
        below it) or an ``.xplane.pb`` file, from CPU, GPU or TPU.

        Whatever the input (truncated, damaged, hostile, a FIFO, a directory without a
        trace), the only exception is :class:`ProfileError`, whose message names the path.

        Raises:
            ProfileError: no trace there, or it cannot be read or decoded.

        Examples:
            >>> import jaxtune
            >>> jaxtune.Profile.from_trace("/no/such/trace")  # doctest: +ELLIPSIS
            Traceback (most recent call last):
            ...
            jaxtune.ProfileError: cannot read a trace at /no/such/trace: ...
        """
        return report_from_trace(path)

    def save(self, path: str | os.PathLike[str]) -> pathlib.Path:
        """Writes :meth:`to_json` to ``path``, the table beside it (``.txt``) and, when the
        profile saw autotuned calls, what it takes to tune them (``.calls.msgpack``, a
        :class:`~.saved.SavedCalls`)."""
        target = pathlib.Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(self.to_json())
        target.with_suffix(".txt").write_text(self.table() + "\n")
        if self.calls:
            atomic_write(target.with_suffix(CALLS_SUFFIX), calls_bytes(self.calls))
        return target


#: The one message of a trace that does not decode, whole or in a part read later
#: (docs/profiling.md quotes it).
DAMAGED = "{path} is a damaged XSpace trace ({why}); capture it again."

#: Added to an exception the analysis of a decoded trace raised (a bug, not damage).
INTERNAL_FAULT = (
    "jaxtune failed while analysing {path}, a trace that decoded: this is a bug in "
    "jaxtune, not a damaged trace; please report it with this traceback"
)


def read_space(path: str | os.PathLike[str]) -> _xplane.Space:
    """The trace at ``path`` (a file or the newest below a directory), split into planes.

    Raises:
        ProfileError: no trace there, or it cannot be read or decoded.
    """
    try:
        return _xplane.load(path)
    except _xplane.DecodeError as e:
        raise ProfileError(DAMAGED.format(path=path, why=describe(e))) from e
    except OSError as e:
        raise ProfileError(f"cannot read a trace at {path}: {e}") from e


def report_from_trace(
    path: str | os.PathLike[str],
    *,
    info: CaptureInfo | None = None,
    iterations: int = 0,
    space: _xplane.Space | None = None,
) -> Profile:
    """A :class:`Profile` from a trace file or directory, with what ``capture`` returned
    (or nothing, for a trace written by someone else). ``iterations`` = 0 means unknown:
    ``step_us`` is then the trace's whole device time. ``space``: the trace already read
    (:func:`read_space`), for a caller that reads it again afterwards (the LLO analysis).

    What ``capture`` returned is kept beside the trace (:data:`INFO_FILE`), so reading the
    same trace later (``jaxtune report DIR``) attributes it the same way, with the cost
    estimates and hints only the program knows. Without it, the kernels are recovered from
    the HLO metadata the trace carries (:mod:`.recover`).
    """
    malformed = None
    if info:
        remember(path, info, iterations)
    else:
        info, iterations, malformed = recall(path, iterations)
    start = time.perf_counter()
    if space is None:
        space = read_space(path)
    try:
        profile = _profile_from_space(path, space, info, iterations, start)
    except _xplane.DecodeError as e:
        # Damaged input: a part decoded only when read (a plane, a line) that does not
        # decode.
        raise ProfileError(DAMAGED.format(path=path, why=describe(e))) from e
    except JaxtuneError:
        raise
    except Exception as e:
        # The trace decoded and the sidecar was checked when read (:mod:`.sidecar`):
        # anything else is a fault of jaxtune's, never called damage.
        e.add_note(INTERNAL_FAULT.format(path=path))
        raise
    if malformed is None:
        return profile
    note = f"{INFO_FILE} beside this trace is malformed ({malformed}); ignored"
    return dataclasses.replace(profile, notes=(note, *profile.notes))


def _profile_from_space(
    path: str | os.PathLike[str],
    space: _xplane.Space,
    info: CaptureInfo,
    iterations: int,
    start: float,
) -> Profile:
    """The :class:`Profile` of the read trace ``space``: its kernels recovered and
    attributed, from the device plane on (the rest of :func:`report_from_trace`)."""
    plane = device_plane(space)
    if plane is None:
        raise ProfileError(f"{path} holds no CPU, GPU or TPU plane with XLA ops.")
    modules, unreadable = _recover.read_programs(space, program_ids(plane))
    programs = {pid: m.ops() for pid, m in modules.items()}
    found = _recover.recover(modules)
    notes: list[str] = []
    if not info:
        info, plain_notes = _plain_info(found, space, plane, [*unreadable, *found.skipped])
        notes += plain_notes
    else:
        # The capture knows the program's kernels; the trace's stack frames still find the
        # ops of one called straight from the jitted function, whose scope is the whole
        # program. Only kernels the capture knows are taken from them.
        known = {k.name for k in info.kernels}
        claims = {
            key: names
            for key, names in found.claims.items()
            if all(name in known for name in names)
        }
        info = dataclasses.replace(info, claims=claims)
    info = _with_mosaic_kernels(info, modules)
    counted = mosaic_counts(modules)
    owner_of = classifier(
        kernels=info.kernels,
        fusions=info.fusions or None,
        claims=info.claims or None,
        programs=modules,
    )
    inside = plane.name.startswith("/device:TPU:") and has_intra_lines(plane)
    walked = walk(plane, owner_of, info.hlo or None, programs, release=not inside)
    notes = _notes(walked) + notes
    intra, orphans = _inside_kernels(plane, owner_of, info, programs) if inside else ([], 0)
    platform = info.platform or normalise_platform(plane.name) or "cpu"
    device_kind = info.device_kind or _device_kind_of(space, plane)
    names = {pid: m.name for pid, m in modules.items() if m.name}
    kernels, ops, total_us = _attribute(
        walked, plane, device_kind, info, iterations, names, counted
    )
    if any(not k.calls_exact for k in kernels):
        notes.append(ROUGH_CALLS)
    timings = dict(info.timings)
    timings["parse_s"] = time.perf_counter() - start
    return Profile(
        kernels=tuple(kernels),
        ops=tuple(ops),
        scopes=tuple(scopes(ops)),
        step_us=total_us / max(iterations, 1),
        total_us=total_us,
        iterations=iterations,
        logdir=info.logdir or str(path),
        platform=platform,
        device_kind=device_kind,
        flags=dict(info.env),
        notes=tuple(notes),
        timings=timings,
        timeline=timeline_of(walked),
        timeline_joined_us=walked.joined_ps * 1e-6,
        peak=_roofline.peak_for(device_kind, plane.stats),
        calls=tuple(info.calls),
        warnings=tuple(drop_warnings(space, plane, orphans)),
        intrakernel=tuple(intra),
    )


def _with_mosaic_kernels(info: CaptureInfo, modules: Mapping[int, HloModule]) -> CaptureInfo:
    """``info`` with each Mosaic TPU call named by its Pallas kernel (the kernel function
    its ``backend_config`` holds, not the HLO instruction's name, which is the scope's:
    ``flash_attention.1``, ``flash_mha_bwd_dq_block_q_major_128_...``), and the kernel's
    own cost estimate where the capture knew none (one per name: kernels of one name
    with different estimates get none)."""
    claims = dict(info.claims)
    estimates: dict[str, dict[str, float] | None] = {}
    for pid, module in modules.items():
        for ins in module.instructions.values():
            if ins.kernel_name is None:
                continue
            claims[pid, ins.name] = (ins.kernel_name,)
            if ins.kernel_name in estimates and estimates[ins.kernel_name] != ins.cost_estimate:
                estimates[ins.kernel_name] = None
            else:
                estimates[ins.kernel_name] = ins.cost_estimate
    if len(claims) == len(info.claims) and not estimates:
        return info
    costs = dict(info.costs)
    for name, estimate in estimates.items():
        if estimate and name not in costs:
            costs[name] = estimate
    return dataclasses.replace(info, claims=claims, costs=costs)


def mosaic_counts(modules: Mapping[int, HloModule]) -> dict[str, dict[str, float]]:
    """Pallas kernel name -> the per-call FLOPs and bytes its Mosaic body counts to
    (:mod:`.mosaic_work`), for the kernels without a cost estimate of their own (one per
    name: kernels of one name whose bodies count differently get none). The bodies are
    parsed in one child process (:func:`.mosaic_work.works`): a crafted body cannot crash
    this one."""
    sites = [
        (ins.kernel_name, ins.mosaic_body)
        for module in modules.values()
        for ins in module.instructions.values()
        if ins.kernel_name is not None and ins.mosaic_body is not None
    ]
    found: dict[str, dict[str, float] | None] = {}
    counted = works([body for _, body in sites]) if sites else []
    for (name, _), work in zip(sites, counted, strict=True):
        if work is None:
            continue
        cost = work.as_cost()
        before = found.setdefault(name, cost)
        if before != cost:
            found[name] = None
    return {name: cost for name, cost in found.items() if cost}


def _inside_kernels(
    plane: _xplane.Plane,
    owner_of: Callable[[OpKind], Owner],
    info: CaptureInfo,
    programs: Any,
) -> tuple[list[IntraKernel], int]:
    """:func:`.intrakernel.intra_kernel` of a TPU plane, its ops owned as the walk owned
    them."""
    kind_of = metadata_kinds(plane, info.hlo or None, programs)
    return intra_kernel(plane, lambda mid: None if (k := kind_of(mid)) is None else owner_of(k))


def _attribute(
    walked: Walk,
    plane: _xplane.Plane,
    device_kind: str,
    info: CaptureInfo,
    iterations: int,
    programs: Mapping[int, str],
    counted: Mapping[str, Mapping[str, float]],
) -> tuple[list[KernelStat], list[KernelStat], float]:
    """:func:`attribute` with everything the capture (or its sidecar) knows, and what
    the Mosaic bodies count to (``counted``)."""
    return attribute(
        walked,
        plane_stats=plane.stats,
        device_kind=device_kind,
        costs=info.costs or None,
        hints=info.hints or None,
        sources=info.sources or None,
        kernels=info.kernels,
        iterations=iterations,
        autotuned=info.autotuned or None,
        host_trace=plane.name == "/host:CPU",
        configs=info.configs or None,
        programs=programs,
        mosaic=counted or None,
    )


#: The note under a table whose kernel calls were read off the trace (``~N``).
ROUGH_CALLS = (
    "~N calls: read off the trace, not from the program (a loop or branch around the "
    "kernel, a kernel in several programs, or a trace without run ids); no per-call "
    "figure is derived from them"
)


def _plain_info(
    found: _recover.Recovered, space: _xplane.Space, plane: _xplane.Plane, unread: list[str]
) -> tuple[CaptureInfo, list[str]]:
    """What a trace without jaxtune's sidecar says about its kernels (:mod:`.recover`),
    in the shape a capture records, and notes saying what it could not say."""
    kernels = found.kernels()
    info = CaptureInfo(
        kernels=tuple(kernels),
        claims=found.claims,
        sources={k.name: k.source for k in kernels if k.source},
    )
    notes = []
    if kernels:
        notes.append(
            f"no {INFO_FILE} beside this trace: kernels recovered from its HLO metadata "
            "(interpret-mode Pallas kernels by their io_callbacks and stack frames); "
            "cost estimates, hints and autotuned calls need a trace captured by "
            "jaxtune.profile or @jaxtune.profiled"
        )
    elif plane.name == "/host:CPU" and not space.hlo_programs():
        notes.append(
            "this trace holds no HLO metadata (no /host:metadata plane with HLO protos), "
            "so its ops cannot be told apart by kernel; capture it with jax.profiler.trace "
            "or jaxtune.profile"
        )
    if unread:
        shown = ", ".join(unread[:3]) + (" ..." if len(unread) > 3 else "")
        notes.append(
            f"the HLO metadata of {len(unread)} program(s) could not be decoded or searched "
            f"({shown}); their ops are shown by instruction name"
        )
    return info, notes


def _notes(walked: Walk) -> list[str]:
    return [] if walked.events else ["the trace holds no executed XLA ops"]


def _device_kind_of(space: _xplane.Space, plane: _xplane.Plane) -> str:
    for key in ("device_type_string", "device_kind", "device_vendor"):
        if key in plane.stats:
            return str(plane.stats[key])
    meta = space.plane("/host:metadata")
    if meta is not None and "cpu_version" in meta.stats:
        return str(meta.stats["cpu_version"])
    return normalise_platform(plane.name) or "cpu"
