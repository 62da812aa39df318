"""How a stored config won, in words, with the interval the decision itself used.

:mod:`.sweep.stats` rules a rival out ("slower") on a 99 % interval of its per-round time
ratio and shows configs equivalent ("tie", "not faster") on a 95 % one; the entry keeps
the closest rival's 95 % interval. An "undecided" rival is one the 99 % test could not rule
out, so its 95 % interval alone (``1.10x (1.04-1.34)``, wholly above 1) would read as a
verdict the decision never reached: here each interval is recomputed from the rounds the
entry stores, at the level of the test that decided, and says its level.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .._core import roofline as _roofline
from .._core.vocabulary import Entry, Measurement, config_id, ratio_texts
from .._render import configs as _configs
from .._render.units import count
from .sweep.intervals import LEVEL, SLOWER_LEVEL, ratio_interval
from .sweep.intervals import envelope as _envelope

__all__ = ["decision_text", "rival_text"]


def rival_text(rival: Mapping[str, Any], stored: Mapping[str, Any]) -> str:
    """The rival by the knobs where it differs from the stored config (all of them when
    it differs in none or has other knobs), in the order the author wrote them."""
    differ = [k for k in rival if k not in stored or stored[k] != rival[k]]
    if not differ or any(k not in rival for k in stored):
        return _configs.text(rival)
    return _configs.text(rival, differ)


def _rated(
    ratio: float, low: float | None = None, high: float | None = None, level: float = LEVEL
) -> tuple[str, str]:
    """``("1.31x", " (99 % interval 1.22-1.40)")``, with as many decimals for all three
    as part a ratio near 1 from 1 (:func:`ratio_texts`: ``1.003x``, ``1.001-1.005``); the
    interval empty when unknown."""
    if low is None or high is None:
        return f"{ratio_texts(ratio)[0]}x", ""
    shown, shown_low, shown_high = ratio_texts(ratio, low, high)
    return f"{shown}x", f" ({level:.0%} interval {shown_low}-{shown_high})".replace("%", " %")


def _x(ratio: float) -> str:
    """``1.31x``; ``1.003x`` for a ratio near 1 (:func:`ratio_texts`)."""
    return _rated(ratio)[0]


def _percent(share: float) -> str:
    """``12 %``; ``0.3 %`` below 1 %."""
    return (f"{share:.0%}" if share >= 0.01 else f"{share:.1%}").replace("%", " %")


def _behind(entry: Entry, config: Mapping[str, Any]) -> bool:
    cid = config_id(config)
    return any(
        isinstance(m, Measurement) and m.behind and config_id(m.config) == cid
        for m in entry.measurements
    )


def _rounds(entry: Entry, config: Mapping[str, Any]) -> tuple[float, ...]:
    cid = config_id(config)
    for m in entry.measurements:
        if isinstance(m, Measurement) and config_id(m.config) == cid:
            return m.rounds_us
    return ()


def decision_text(entry: Entry) -> str:
    """How the stored config won (:func:`_decision`), and a flag when its time implies
    more than the device's peak (:func:`past_peak_text`)."""
    text, flag = _decision(entry), past_peak_text(entry)
    return f"{text}; {flag}" if text and flag else text or flag


def past_peak_text(entry: Entry) -> str:
    """``"!! 689 TFLOP/s implied, past the TPU v5e's peak of 197: ..."`` when the stored
    config's time, with the work the kernel's ``flops=``/``bytes=`` hints give, implies
    more than the device's peak compute or bandwidth (no chip runs past its peak: the
    sweep's values did less work than the hints count, made-up values most often);
    empty otherwise."""
    work = entry.values.work
    peak = _roofline.peak_for(entry.device_kind)
    if work is None or peak is None or not entry.time_us:
        return ""
    seconds = entry.time_us * 1e-6 / entry.values.set_count
    flops = (work.flops or 0.0) / seconds
    moved = (work.bytes or 0.0) / seconds
    over = _roofline.over_peak(flops or None, moved or None, peak)
    if not over:
        return ""
    said = []
    if "flops" in over:
        said.append(f"{flops / 1e12:.0f} TFLOP/s (peak {peak.flops_per_s / 1e12:.0f})")
    if "bytes" in over:
        said.append(f"{moved / 1e9:.0f} GB/s (peak {peak.bytes_per_s / 1e9:.0f})")
    return (
        f"!! its time implies {' and '.join(said)} on {peak.device}, past the peak: the "
        "sweep's values did less work than the flops=/bytes= hints count (made-up values?)"
    )


def _decision(entry: Entry) -> str:
    """``"clear: 1.31x ahead of block_q=256 (99 % interval 1.22-1.40)"``, ``"tie with
    block_q=256: 1.01x (95 % interval 0.99-1.03)"``, ``"undecided vs block_q=256: 1.10x
    (99 % interval 0.97-1.41) after 200 rounds"``,
    ``"single"`` (``"single: the only config that ran; 3 other configs of the same program"``);
    empty when unknown. The rival is named by the knobs where it differs from
    the stored config. A rival that left the rounds early (clearly behind) is compared by
    the rounds it ran, never by the first pass's samples."""
    m = entry.margin
    if entry.decision == "single":
        failed = sum(1 for x in entry.measurements if not x.ok)
        twins = sum(1 for x in entry.measurements if getattr(x, "same_as", None) is not None)
        why = [f"{count(twins, 'other config')} of the same program"] if twins else []
        if failed:  # the others did not lose a race: they never ran to the end
            why.append(f"{count(failed, 'other')} failed")
        if why:
            return (
                f"single: the only config that ran; {', '.join(why)} "
                f"(`jaxtune cache show {entry.kernel}` says why)"
            )
        return "single"
    if not entry.decision or not m:
        return ""
    rival_config = m["rival"]
    rival = rival_text(rival_config, entry.config)
    ratio, low, high = m["ratio"], m.get("low"), m.get("high")
    mine, theirs = _rounds(entry, entry.config), _rounds(entry, rival_config)
    strict: tuple[float | None, float | None] = (None, None)
    if mine and theirs:
        _, s_low, s_high = ratio_interval(theirs, mine, SLOWER_LEVEL)
        strict = (s_low, s_high)
    if entry.decision == "tie":
        return "tie with {}: {}{}".format(rival, *_rated(ratio, low, high))
    if entry.decision == "clear":
        if strict[0] is not None and strict[0] > 1.0:  # ruled out: shown slower at 99 %
            return "clear: {} ahead of {}{}".format(
                *_in_order(_rated(ratio, *strict, SLOWER_LEVEL), rival)
            )
        if low is None and mine and theirs:
            # The rival left the rounds before an interval of the whole race: its rounds
            # beside the stored config's still give the ratio (and an interval, from 6).
            r_ratio, r_low, r_high = ratio_interval(theirs, mine)
            if r_low is not None:
                return "clear: {} ahead of {}{}".format(
                    *_in_order(_rated(r_ratio, r_low, r_high), rival)
                )
            how = "clearly behind" if _behind(entry, rival_config) else "median"
            return (
                f"clear: {_x(r_ratio)} ahead of {rival} ({how} after {count(len(theirs), 'round')})"
            )
        if low is None:
            return f"clear: {_x(ratio)} ahead of {rival} (first pass, fastest samples)"
        if (mine and theirs) or low <= 1.0:  # not faster by more than the tie margin
            if ratio < 1.0 and low is not None and low > 0:
                # Its estimate is ahead, but not by enough to win: it would lose a tie.
                return "clear: {} at most {} faster, loses a tie: {}{}".format(
                    rival, _percent(1 / low - 1), *_rated(ratio, low, high)
                )
            return "clear: {} not faster, {}{}".format(rival, *_rated(ratio, low, high))
        return "clear: {} ahead of {}{}".format(*_in_order(_rated(ratio, low, high), rival))
    if strict[0] is not None:
        shown_ratio, shown = _rated(ratio, *strict, SLOWER_LEVEL)
    elif low is not None:
        shown_ratio, shown = _rated(ratio, low, high)
        shown = f"{shown[:-1]}; too few rounds for a 99 % one)"
    else:
        shown_ratio, shown = _x(ratio), ""
    after = f" after {count(len(mine), 'round')}" if mine else ""
    return f"undecided vs {rival}: {shown_ratio}{shown}{after}{_kept(entry, mine, theirs)}"


def _in_order(rated: tuple[str, str], rival: str) -> tuple[str, str, str]:
    """``(ratio, rival, interval)``: the words of "1.31x ahead of X (99 % interval ...)"."""
    return rated[0], rival, rated[1]


def _kept(entry: Entry, mine: tuple[float, ...], theirs: tuple[float, ...]) -> str:
    """Why an undecided race stored a config other than its best estimate, as the
    decision recorded it (``margin["kept"]``): ``", stored for its faster rounds (second
    fastest 1.08x ahead)"``, ``", the default, kept: ..."``; empty otherwise."""
    kept = (entry.margin or {}).get("kept")
    if kept == "envelope":
        if mine and theirs and _envelope(theirs) > _envelope(mine):
            ahead = _x(_envelope(theirs) / _envelope(mine))
            return f", stored for its faster rounds (second fastest {ahead} ahead)"
        return ", stored for its faster rounds"
    if kept == "default":
        return ", the default, kept: the rounds measured the best estimate slower than it"
    return ""
