"""Peak compute and memory bandwidth per device, and the roofline verdict.

Peaks are dense bf16 matrix throughput and HBM bandwidth per chip (per GPU), from the
vendors' published specifications:

- TPU v4: 275 TFLOP/s, 1228 GB/s — Google Cloud TPU v4 documentation.
- TPU v5e: 197 TFLOP/s, 819 GB/s — Google Cloud TPU v5e documentation.
- TPU v5p: 459 TFLOP/s, 2765 GB/s — Google Cloud TPU v5p documentation.
- TPU v6e (Trillium): 918 TFLOP/s, 1640 GB/s — Google Cloud TPU v6e documentation.
- TPU v7x (Ironwood): 2307 TFLOP/s, 7380 GB/s — Google Cloud TPU7x documentation.
- NVIDIA A100 SXM 80GB: 312 TFLOP/s, 2039 GB/s — NVIDIA A100 datasheet.
- NVIDIA H100 SXM: 989 TFLOP/s, 3350 GB/s — NVIDIA H100 datasheet (dense, no sparsity).
- NVIDIA H200 SXM: 989 TFLOP/s, 4800 GB/s — NVIDIA H200 datasheet.
- NVIDIA B200: 2250 TFLOP/s, 8000 GB/s — NVIDIA DGX B200 / Blackwell datasheet (dense).

A device this table lacks is judged against the peaks its trace records (plane stats
``peak_teraflops_per_second`` and ``peak_hbm_bw_gigabytes_per_second``); the table wins
where it has the device, so a report's peaks are the published ones (a v5e trace records
202.7 TFLOP/s, its clock's, against the published 197).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any, Literal

__all__ = ["PEAKS", "Peak", "bound_by", "floor_seconds", "over_peak", "peak_for", "peak_share"]

Bound = Literal["compute", "memory", "unknown"]


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Peak:
    """A device's peak FLOP/s and bytes/s, and where they came from."""

    device: str
    flops_per_s: float
    bytes_per_s: float
    source: str

    @property
    def ridge(self) -> float:
        """FLOPs per byte where the roofline turns from memory- to compute-bound."""
        return self.flops_per_s / self.bytes_per_s


def _peak(device: str, tflops: float, gbps: float, source: str) -> Peak:
    return Peak(device=device, flops_per_s=tflops * 1e12, bytes_per_s=gbps * 1e9, source=source)


# (substrings of a device kind, all required) -> peak; first match wins, so the more
# specific names come first.
PEAKS: tuple[tuple[tuple[str, ...], Peak], ...] = (
    (("v5", "lite"), _peak("TPU v5e", 197, 819, "Cloud TPU v5e docs")),
    (("v5e",), _peak("TPU v5e", 197, 819, "Cloud TPU v5e docs")),
    (("v5p",), _peak("TPU v5p", 459, 2765, "Cloud TPU v5p docs")),
    (("v5",), _peak("TPU v5p", 459, 2765, "Cloud TPU v5p docs")),
    (("v6", "lite"), _peak("TPU v6e", 918, 1640, "Cloud TPU v6e docs")),
    (("v6e",), _peak("TPU v6e", 918, 1640, "Cloud TPU v6e docs")),
    (("7x",), _peak("TPU v7x", 2307, 7380, "Cloud TPU7x docs")),
    (("v4",), _peak("TPU v4", 275, 1228, "Cloud TPU v4 docs")),
    (("a100",), _peak("NVIDIA A100", 312, 2039, "NVIDIA A100 datasheet")),
    (("h100",), _peak("NVIDIA H100", 989, 3350, "NVIDIA H100 datasheet")),
    (("h200",), _peak("NVIDIA H200", 989, 4800, "NVIDIA H200 datasheet")),
    (("b200",), _peak("NVIDIA B200", 2250, 8000, "NVIDIA Blackwell datasheet")),
)


def peak_for(device_kind: str | None, plane_stats: Mapping[str, Any] | None = None) -> Peak | None:
    """The peaks of a device: the table's (by its kind), else the trace's own when it
    records them.

    Examples:
        >>> peak_for("TPU v5 lite").device
        'TPU v5e'
        >>> peak_for("cpu") is None
        True
    """
    kind = (device_kind or "").lower()
    for needles, peak in PEAKS:
        if all(n in kind for n in needles):
            return peak
    stats = plane_stats or {}
    tflops: Any = stats.get("peak_teraflops_per_second")
    gbps: Any = stats.get("peak_hbm_bw_gigabytes_per_second")
    if _positive(tflops) and _positive(gbps):
        peak = _peak(device_kind or "device", float(tflops), float(gbps), "trace")
        if _positive(peak.flops_per_s) and _positive(peak.bytes_per_s):
            return peak
    return None


def _positive(value: Any) -> bool:
    """A finite positive number (a trace's peak; NaN, infinity or text are no peak)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and 0 < value < math.inf


def bound_by(flops: float | None, bytes_accessed: float | None, peak: Peak | None) -> Bound:
    """``"compute"`` when the arithmetic intensity is at or past the ridge point,
    ``"memory"`` below it, ``"unknown"`` without flops, bytes or peaks."""
    if not flops or not bytes_accessed or peak is None:
        return "unknown"
    return "compute" if flops / bytes_accessed >= peak.ridge else "memory"


def over_peak(
    flops_per_s: float | None, bytes_per_s: float | None, peak: Peak | None
) -> tuple[str, ...]:
    """Which achieved rates exceed the device's peak: ``"flops"``, ``"bytes"``, both or
    none. No chip runs past its peak: such a figure says the count it divides is larger
    than the work done (or the time shorter than the work's), never a measurement.

    Examples:
        >>> over_peak(203.9e12, 0.5e12, peak_for("TPU v5 lite"))
        ('flops',)
    """
    if peak is None:
        return ()
    over = []
    if flops_per_s is not None and flops_per_s > peak.flops_per_s:
        over.append("flops")
    if bytes_per_s is not None and bytes_per_s > peak.bytes_per_s:
        over.append("bytes")
    return tuple(over)


def peak_share(rate: float | None, peak_rate: float | None) -> float | None:
    """An achieved rate as a fraction of the device's peak rate (``1.0`` is the peak;
    above it, the count divided overstates the work: :func:`over_peak`).

    Examples:
        >>> peak_share(98.5e12, peak_for("TPU v5 lite").flops_per_s)
        0.5
    """
    if rate is None or not peak_rate:
        return None
    return rate / peak_rate


def floor_seconds(
    flops: float | None, bytes_accessed: float | None, peak: Peak | None
) -> float | None:
    """The roofline floor of some work: the time the device needs at its peaks, the
    longer of its FLOPs at peak compute and its bytes at peak bandwidth; ``None``
    without peaks or without either count.

    Examples:
        >>> floor_seconds(197e12, 819e9 / 2, peak_for("TPU v5 lite"))
        1.0
    """
    if peak is None or not (flops or bytes_accessed):
        return None
    return max((flops or 0.0) / peak.flops_per_s, (bytes_accessed or 0.0) / peak.bytes_per_s)
