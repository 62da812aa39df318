"""Issue-slot use of every bundle of an LLO module, read from the trace itself.

xprof's ``bundle_util`` analysis lists the first 30 bundles of a kernel whatever it is asked
(xprof 2.24.2: its ``bundle`` argument does not move the window), so a kernel's slot fill
from it is a sample: on flash attention's forward kernel (831 bundles) the first 30 are its
prologue, with no MXU slot filled, while the whole schedule fills 256 of its 3,324 MXU
slots. The module's ``llo_proto`` stat on ``/host:metadata`` holds the slot counts of every
bundle (:data:`~jaxtune._core.xspace.schema.LloModule`), so the fill here is over all of
them: each bundle of the program counted once, as the compiler laid it out (a loop body's
bundles once, not once per iteration).

That schema is read off real traces, not published, so :func:`read` checks what it decodes
(every unit has one count per bundle, none above its slots) and :meth:`BundleSlots.disagreement`
compares it with xprof's own listing of the first bundles before a report uses it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from google.protobuf.message import DecodeError

from .._core.xspace import schema
from .._core.xspace import xplane as _xplane

__all__ = ["UNITS", "BundleSlots", "of_modules", "read"]

#: The units of a TPU bundle, in the order xprof's ``bundle_util`` lists them.
UNITS = ("mxu", "xlu", "vector_alu", "vector_eup", "vector_load", "vector_store", "scalar_alu")


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class BundleSlots:
    """One LLO module's slot use: ``used[unit][b]`` slots of ``avail[unit]`` filled in
    bundle ``b``; ``spill`` and ``fill``: the bundles that spill or fill registers."""

    used: Mapping[str, tuple[int, ...]]
    avail: Mapping[str, int]
    spill: int
    fill: int

    @property
    def bundles(self) -> int:
        """How many bundles the module has."""
        return len(next(iter(self.used.values()), ()))

    def utilisation(self) -> dict[str, float]:
        """Per unit, filled slots over available slots, over every bundle."""
        n = self.bundles
        return {
            unit: sum(counts) / (n * self.avail[unit])
            for unit, counts in self.used.items()
            if n and self.avail[unit] > 0
        }

    def disagreement(self, total: Any, listed: Sequence[Any]) -> str | None:
        """Where this reading and xprof's ``bundle_util`` answer (``total_bundles``,
        ``bundles``) differ, in words; ``None`` when they agree on every bundle xprof lists."""
        if isinstance(total, int) and not isinstance(total, bool) and total != self.bundles:
            return f"xprof counts {total} bundles, the trace's LLO module {self.bundles}"
        for row in listed:
            if not isinstance(row, Mapping) or not isinstance(row.get("bundle"), int):
                continue
            b = row["bundle"]
            for unit, counts in self.used.items():
                want = (row.get(f"{unit}_used"), row.get(f"{unit}_avail"))
                if want[0] is None:
                    continue
                got = (counts[b], self.avail[unit]) if 0 <= b < len(counts) else None
                if got != want:
                    return f"bundle {b}: xprof lists {unit} {want[0]}/{want[1]}, the trace {got}"
        return None


def read(llo_proto: bytes) -> BundleSlots | str:
    """The slot use of every bundle of one LLO module, or why it cannot be read."""
    try:
        module = schema.LloModule.FromString(llo_proto)
    except DecodeError as e:
        return f"its llo_proto does not decode ({e})"
    slots = module.bundle_slots
    if not module.HasField("bundle_slots"):
        return "its llo_proto holds no bundle slots"
    used = {unit: tuple(getattr(slots, unit).used) for unit in UNITS}
    avail = {unit: int(getattr(slots, unit).avail) for unit in UNITS}
    lengths = {len(v) for v in used.values()} | {len(slots.spill), len(slots.fill)}
    if len(lengths) != 1:
        return f"its units list different numbers of bundles ({sorted(lengths)})"
    for unit, counts in used.items():
        if counts and max(counts) > avail[unit]:
            return f"its {unit} fills more slots than a bundle has ({max(counts)} > {avail[unit]})"
    return BundleSlots(
        used=used,
        avail=avail,
        spill=sum(1 for s in slots.spill if s),
        fill=sum(1 for f in slots.fill if f),
    )


def of_modules(space: _xplane.Space, modules: Iterable[str] | None) -> dict[str, BundleSlots | str]:
    """:func:`read` for each named LLO module of the trace (its ``/host:metadata`` event
    name, ``<program>(<n>)::<HLO op>``), or for every one when ``modules`` is ``None``."""
    meta = space.plane("/host:metadata")
    if meta is None:
        return {}
    wanted = None if modules is None else set(modules)
    return {
        m.name: read(m.stats["llo_proto"])
        for m in meta.event_metadata.values()
        if "llo_proto" in m.stats
        and isinstance(m.stats["llo_proto"], bytes)
        and (wanted is None or m.name in wanted)
    }
