"""``jaxtune tune --from-profile DIR [--min-share 0.05]``: tune what a profile says matters.

Reads every ``report.json`` under DIR (``jaxtune profile``, ``JAXTUNE_PROFILE=1`` or
``Profile.save``), or else every trace under DIR that jaxtune captured, ranks the autotuned kernels by their share of device time, and sweeps
those at or above ``--min-share`` for the shapes they ran with (the calls saved beside the
report in ``report.calls.msgpack``). Raw Pallas kernels, which have no tuning space, are
listed with their share and how to make them tunable.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import pathlib

from .._core.errors import JaxtuneError
from .._core.vocabulary import RecordedCall
from .._profiling.report import report_from_trace
from .._profiling.saved import CALLS_SUFFIX, ReportKernel, read_calls, read_report
from .._profiling.sidecar import INFO_FILE
from .._tuning.digest import code_changed
from .._tuning.result import format_table
from .._tuning.staleness import judge, wrong_pass
from .._tuning.store import cache as _cache
from .entries import StaleJudge, entry_summary
from .tune import sweep_records

__all__ = ["RAW_PALLAS_HINT", "Ranked", "rank", "run", "tuned_here"]

#: How to make a raw Pallas kernel tunable.
RAW_PALLAS_HINT = (
    "no tuning space: wrap the function that calls pl.pallas_call in "
    "@jaxtune.autotuned(configs={'block_m': [128, 256], ...}) and pass the block sizes "
    "through as keyword arguments"
)


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Ranked:
    """One kernel of a profile: its share of device time (the largest over the reports),
    whether it is an autotuned kernel, and the calls saved for it."""

    name: str
    share: float
    autotuned: bool
    calls: tuple[RecordedCall, ...] = ()


def _profiles(
    root: pathlib.Path,
) -> list[tuple[pathlib.Path, tuple[ReportKernel, ...], tuple[RecordedCall, ...]]]:
    """``(path, kernels, calls)`` of each saved report under ``root`` (``report.json``
    and its ``.calls.msgpack``, read by :mod:`jaxtune._profiling.saved`) or, when there is
    none, of each trace jaxtune captured."""
    if not root.exists():
        raise JaxtuneError(
            f"--from-profile: {root} does not exist. Capture a profile first: `jaxtune profile "
            "--logdir DIR -- python train.py`, or `jaxtune.profile(fn, *args, logdir=DIR)`."
        )
    reports = [root] if root.is_file() else sorted(root.rglob("report.json"))
    found = []
    for path in reports:
        try:
            kernels = read_report(path).kernels
            sidecar = path.with_suffix(CALLS_SUFFIX)
            calls = read_calls(sidecar) if sidecar.is_file() else ()
        except (OSError, ValueError) as e:
            raise JaxtuneError(
                f"{path} is not a jaxtune profile report ({e}); expected the report.json "
                "that `jaxtune profile` or Profile.save writes."
            ) from e
        found.append((path, kernels, calls))
    if not found and root.is_dir():
        for info in sorted(root.rglob(INFO_FILE)):
            profile = report_from_trace(info.parent)
            kernels = tuple(ReportKernel.of(k) for k in profile.kernels)
            found.append((info.parent, kernels, profile.calls))
    if not found:
        raise JaxtuneError(
            f"--from-profile expected a profile directory holding report.json files or a "
            f"trace jaxtune captured; {root} has neither. Capture one first: `jaxtune profile "
            "--logdir DIR -- python train.py`, or `jaxtune.profile(fn, *args, logdir=DIR)`."
        )
    return found


def rank(root: str | pathlib.Path) -> list[Ranked]:
    """Every kernel of the profiles under ``root``, largest share first.

    Raises:
        JaxtuneError: ``root`` holds no profile, or a ``report.json`` is not jaxtune's.
    """
    shares: dict[tuple[str, bool], float] = {}
    calls: dict[str, dict[str, RecordedCall]] = {}
    for _, kernels, frames in _profiles(pathlib.Path(root)):
        mine: dict[tuple[str, bool], float] = {}
        for k in kernels:
            ident = (k.kernel_id or k.name, bool(k.kernel_id))
            mine[ident] = mine.get(ident, 0.0) + (k.share or 0.0)
        for ident, share in mine.items():
            shares[ident] = max(shares.get(ident, 0.0), share)
        for frame in frames:
            calls.setdefault(frame.kernel, {})[frame.key] = frame
    ranked = [
        Ranked(
            name=name,
            share=share,
            autotuned=autotuned,
            calls=tuple(calls.get(name, {}).values()) if autotuned else (),
        )
        for (name, autotuned), share in shares.items()
    ]
    return sorted(ranked, key=lambda r: -r.share)


def _select(ranked: list[Ranked], args: argparse.Namespace) -> tuple[list[Ranked], list[str]]:
    """The autotuned kernels at or above ``--min-share``, and the lines that say for each
    autotuned kernel (then each raw Pallas one) what the command does with it."""
    chosen = [r for r in ranked if r.autotuned and r.share >= args.min_share]
    lines = ["autotuned kernels in the profile, by share of device time:"]
    for r in (r for r in ranked if r.autotuned):
        if r not in chosen:
            verdict = f"below --min-share {args.min_share:.0%}: not tuned"
        elif not r.calls:
            verdict = "no saved calls (profiled by an older jaxtune?): profile it again"
        else:
            n = sum(1 for f in r.calls if args.retune or not tuned_here(f))
            verdict = f"tuning {n} shape{'s' if n != 1 else ''}"
            if n < len(r.calls):
                verdict += f" ({len(r.calls) - n} already in this cache; --retune tunes them)"
        lines.append(f"  {r.share:6.1%}  {r.name}  {verdict}")
    raw = [r for r in ranked if not r.autotuned]
    if raw:
        lines.append("raw Pallas kernels (" + RAW_PALLAS_HINT + "):")
        lines += [f"  {r.share:6.1%}  {r.name}" for r in raw]
    return chosen, lines


def tuned_here(frame: RecordedCall) -> bool:
    """Whether the user cache (the one this command writes) already holds a current entry
    for the recorded call: same kernel, device kind, key and kernel version, stale for none
    of :func:`~jaxtune._tuning.staleness.judge`'s reasons (its code judged against the
    digest the call recorded, as the lookup judges it against the kernel's), and timed for
    the pass the call runs (as ``jaxtune tune --`` decides from the program's own lookup)."""
    try:
        entry = _cache.user_cache().lookup(
            frame.kernel, frame.device_kind, frame.key, version=frame.version
        )
    except JaxtuneError:  # a cache that cannot be read (a fault of the lookup is a bug)
        return False
    if entry is None or entry.kernel_version != frame.version:
        return False
    changed = code_changed(frame.code.digest, entry.code_digest)
    return (
        next(judge(entry, code_changed=changed), None) is None
        and wrong_pass(entry.timing, frame.timing) is None
    )


def run(args: argparse.Namespace) -> int:
    """Runs ``jaxtune tune --from-profile``; returns the exit status."""
    if args.program and args.program != ["--"]:
        raise JaxtuneError(
            "jaxtune tune takes --from-profile DIR or a program (-- python train.py), not "
            "both; drop one."
        )
    ranked = rank(args.from_profile)
    chosen, lines = _select(ranked, args)
    # Whether a call needs tuning is the cache's to say (the one written now), not the
    # recording's: a profile captured with configs tuned elsewhere still tunes here.
    todo = [frame for r in chosen for frame in r.calls if args.retune or not tuned_here(frame)]
    entries, problems = sweep_records(todo)
    problems += [f"{r.name}: the profile saved none of its calls" for r in chosen if not r.calls]
    if args.json:
        fresh = StaleJudge()
        doc = {
            "min_share": args.min_share,
            "kernels": [
                {"name": r.name, "share": r.share, "autotuned": r.autotuned, "calls": len(r.calls)}
                for r in ranked
            ],
            "selected": [r.name for r in chosen],
            "tuned": [entry_summary(e, fresh) for e in entries],
            "untunable": [{"name": r.name, "share": r.share} for r in ranked if not r.autotuned],
            "hint": RAW_PALLAS_HINT,
            "problems": problems,
            "cache": str(_cache.user_cache().root),
        }
        print(json.dumps(doc, indent=2, sort_keys=True))
    else:
        print("\n".join(lines))
        if entries:
            print(format_table(entries))
        for problem in problems:
            print(f"could not tune {problem}")
        print(f"cache: {_cache.user_cache().root}")
    return 1 if problems else 0
