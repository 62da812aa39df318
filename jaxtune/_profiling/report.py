"""What a profile is: :class:`Profile`, and building one from a trace (``jaxtune report``)."""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import time
from collections.abc import Mapping
from typing import Any

from .._codec import table as format_rows
from .._errors import ProfileError
from . import xspace as _xspace
from .attribution import KernelStat, attribute, op_events

__all__ = ["Profile", "report_from_trace"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class Profile:
    """Per-kernel statistics of a captured (or read) trace.

    ``kernels``: every Pallas kernel and jaxtune kernel; ``ops``: every plain XLA op;
    ``step_us``: device time per iteration; ``logdir``: the trace directory (XProf,
    TensorBoard and Perfetto open it); ``flags``: the profiling-relevant environment the
    capturing process saw; ``missing_flags``: profiling flags it lacked (in-process
    captures); ``llo``: the xprof LLO analysis summary when it ran; ``timings``: seconds
    spent starting the child, compiling, running and parsing.
    """

    kernels: tuple[KernelStat, ...]
    ops: tuple[KernelStat, ...]
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

    def table(self, top: int = 20) -> str:
        """An aligned table of the ``top`` kernels, then the ``top`` XLA ops."""
        header = (
            "name",
            "kind",
            "calls",
            "total us",
            "mean us",
            "share",
            "GFLOP/s",
            "GB/s",
            "bound",
            "flops from",
        )
        rows: list[tuple[str, ...]] = []
        for stat in (*self.kernels[:top], *self.ops[:top]):
            rows.append(
                (
                    stat.name if len(stat.name) <= 48 else "..." + stat.name[-45:],
                    stat.kind,
                    str(stat.calls),
                    f"{stat.total_us:.1f}",
                    f"{stat.mean_us:.1f}",
                    f"{stat.share:.1%}",
                    f"{stat.flops_per_s / 1e9:.1f}" if stat.flops_per_s else "-",
                    f"{stat.bytes_per_s / 1e9:.1f}" if stat.bytes_per_s else "-",
                    stat.bound_by,
                    stat.flops_source,
                )
            )
        lines = [format_rows(header, rows)]
        if self.iterations:
            summary = (
                f"{self.platform} ({self.device_kind}): {self.iterations} iterations, "
                f"{self.step_us:.1f} us of device time per step"
            )
        else:
            summary = f"{self.platform} ({self.device_kind}): {self.total_us:.1f} us of device time"
        extra = [f"note: {n}" for n in self.notes]
        if self.missing_flags:
            extra.append("captured without profiling flags: " + " ".join(self.missing_flags))
        if self.logdir:
            extra.append(f"trace: {self.logdir}")
        return "\n".join([summary, *lines, *extra])

    def to_json(self) -> str:
        """A stable JSON document (schema 1)."""
        doc = {
            "schema": 1,
            "platform": self.platform,
            "device_kind": self.device_kind,
            "iterations": self.iterations,
            "step_us": self.step_us,
            "total_us": self.total_us,
            "logdir": self.logdir,
            "flags": dict(self.flags),
            "missing_flags": list(self.missing_flags),
            "llo": dict(self.llo) if self.llo else None,
            "notes": list(self.notes),
            "timings": dict(self.timings),
            "kernels": [k.to_dict() for k in self.kernels],
            "ops": [o.to_dict() for o in self.ops],
        }
        return json.dumps(doc, indent=2, sort_keys=True)

    def save(self, path: str | os.PathLike[str]) -> pathlib.Path:
        """Writes :meth:`to_json` to ``path`` (and the table beside it, as ``.txt``)."""
        target = pathlib.Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(self.to_json())
        target.with_suffix(".txt").write_text(self.table() + "\n")
        return target


def report_from_trace(
    path: str | os.PathLike[str],
    *,
    info: Mapping[str, Any] | None = None,
    iterations: int = 0,
) -> Profile:
    """A :class:`Profile` from a trace file or directory, with what ``capture`` returned
    (or nothing, for a trace written by someone else). ``iterations`` = 0 means unknown:
    ``step_us`` is then the trace's whole device time."""
    info = info or {}
    start = time.perf_counter()
    try:
        space = _xspace.load(path)
    except FileNotFoundError as e:
        raise ProfileError(str(e)) from e
    except ValueError as e:
        raise ProfileError(f"{path} is not a readable XSpace trace: {e}") from e
    events, plane = op_events(space, info.get("hlo"))
    if plane is None:
        raise ProfileError(f"{path} holds no CPU, GPU or TPU plane with XLA ops.")
    platform = info.get("platform") or _platform_of(plane.name)
    device_kind = info.get("device_kind") or _device_kind_of(space, plane)
    kernels, ops, total_us = attribute(
        events,
        plane_stats=plane.stats,
        device_kind=device_kind,
        costs=info.get("costs"),
        hints=info.get("hints"),
        sources=info.get("sources"),
        pallas_prefixes=info.get("prefixes"),
    )
    notes = []
    dropped = [w for w in (*space.errors, *space.warnings) if "drop" in w.lower()]
    if dropped:
        notes.append(
            "the trace dropped events (" + dropped[0][:120] + "); raise "
            "trace_best_effort_frequency / trace_guaranteed_frequency (say to 50 or 100) "
            "with jaxtune.flags.profile_flags(..., best_effort_frequency=...)"
        )
    if not events:
        notes.append("the trace holds no executed XLA ops")
    timings = dict(info.get("timings", {}))
    timings["parse_s"] = time.perf_counter() - start
    return Profile(
        kernels=tuple(kernels),
        ops=tuple(ops),
        step_us=total_us / max(iterations, 1),
        total_us=total_us,
        iterations=iterations,
        logdir=str(info.get("logdir") or path),
        platform=platform,
        device_kind=device_kind,
        flags=dict(info.get("env", {})),
        notes=tuple(notes),
        timings=timings,
    )


def _platform_of(plane_name: str) -> str:
    if plane_name.startswith("/device:TPU"):
        return "tpu"
    if plane_name.startswith("/device:GPU"):
        return "gpu"
    return "cpu"


def _device_kind_of(space: _xspace.Space, plane: _xspace.Plane) -> str:
    for key in ("device_type_string", "device_kind", "device_vendor"):
        if key in plane.stats:
            return str(plane.stats[key])
    meta = space.plane("/host:metadata")
    if meta is not None and "cpu_version" in meta.stats:
        return str(meta.stats["cpu_version"])
    return _platform_of(plane.name)
