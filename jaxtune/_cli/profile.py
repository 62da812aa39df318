"""``jaxtune profile -- python train.py`` and ``jaxtune report PATH``."""

from __future__ import annotations

import argparse
import os
import pathlib
import sys
from typing import Any

from .._core import settings as _settings
from .._core.flags import child_env, find_libtpu, requested_platform
from .._core.masking import mask_command
from .._core.xspace.xplane import Space
from .._profiling.llo_figures import OTHER_MODULES
from .._profiling.report import Profile, read_space, report_from_trace

__all__ = ["NOTHING_PROFILED", "add_parsers", "run_profile", "run_report"]


def add_parsers(sub: Any) -> None:
    """Adds ``profile`` and ``report`` to the top-level subparsers."""
    p = sub.add_parser(
        "profile",
        help="run a program with profiling flags set before JAX starts; profile @profiled calls",
        description="Runs COMMAND with the profiling flags for its platform in XLA_FLAGS / "
        "LIBTPU_INIT_ARGS (set before JAX starts) and JAXTUNE_PROFILE=1, so the first call "
        "per signature of every @jaxtune.profiled function writes a report under --logdir. "
        "Exit status 3 when the program ended well but no report was written.",
    )
    p.add_argument(
        "--llo",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="register LLO debug info on TPU (--xla_xprof_register_llo_debug_info=true, the "
        "default TPU profile flag) and run xprof's LLO analysis on each capture of a "
        "@profiled function whose llo is True (its default): modelled figures per kernel, "
        "or one line saying why there are none; --no-llo leaves the flag out",
    )
    p.add_argument(
        "--custom-call-tracing",
        action="store_true",
        help="trace inside custom calls (TPU; JAX >= 0.11, libtpu >= 0.0.44)",
    )
    p.add_argument(
        "--platform",
        default=None,
        help="cpu, gpu or tpu (default: JAX_PLATFORMS or tpu when libtpu is installed, else cpu)",
    )
    p.add_argument("--logdir", default=None, help="where reports go (JAXTUNE_PROFILE_DIR)")
    p.add_argument("program", nargs=argparse.REMAINDER, help="-- python train.py ...")

    r = sub.add_parser(
        "report",
        help="kernel statistics and roofline from any trace",
        description="Reads a trace directory or .xplane.pb (CPU, GPU or TPU) "
        "and prints per-kernel and per-op statistics with roofline bounds.",
    )
    r.add_argument("path")
    r.add_argument("--json", action="store_true", help="print the report as JSON")
    r.add_argument("--top", type=int, default=20, help="rows of kernels and of ops (default 20)")
    r.add_argument(
        "--html",
        metavar="OUT",
        default=None,
        help="also write a self-contained HTML page (table, share chart, roofline, timeline) "
        "to OUT; needs pip install 'jaxtune[plots]'",
    )
    r.add_argument(
        "--llo",
        action="store_true",
        help="also run xprof's embedded LLO analysis on a TPU trace (pip install "
        "'jaxtune[xprof]'); says why it cannot when it cannot. The text shows the Pallas "
        f"kernels, then the {OTHER_MODULES} heaviest other LLO modules; --json lists every one",
    )
    r.add_argument(
        "--llo-all",
        action="store_true",
        help="as --llo, and the text shows every LLO module of the profiled programs",
    )


def _platform(explicit: str | None) -> str:
    if explicit:
        return explicit
    requested = requested_platform()
    if requested:
        return requested

    return "tpu" if find_libtpu() is not None else "cpu"


def run_profile(args: argparse.Namespace) -> int:
    """Runs ``jaxtune profile``; returns the program's exit status, or
    :data:`NOTHING_PROFILED` when it ended well but wrote no report."""
    from .._profiling.sidecar import FAILED_FILE
    from .tune import exit_text, program, run_program

    command = program(args, "profile")
    platform = _platform(args.platform)
    env = child_env(
        platform,
        profiling=True,
        llo=args.llo,
        custom_call_tracing=args.custom_call_tracing,
    )
    if args.platform is None and "JAX_PLATFORMS" not in os.environ:
        env.pop("JAX_PLATFORMS", None)
    env["JAXTUNE_PROFILE"] = "1"
    env["JAXTUNE_PROFILE_LLO"] = "1" if args.llo else "0"
    if args.logdir:
        env["JAXTUNE_PROFILE_DIR"] = args.logdir
    # A bad JAXTUNE_* value in what the program gets: said now, not once it ran.
    _settings.settings(env)
    shown = {k: env[k] for k in ("XLA_FLAGS", "LIBTPU_INIT_ARGS") if env.get(k)}
    where = pathlib.Path(env.get("JAXTUNE_PROFILE_DIR") or "./jaxtune-profiles")
    print(
        f"jaxtune profile: {platform}; flags {shown or 'none needed'}; reports under {where}",
        file=sys.stderr,
        flush=True,
    )
    before = _captures(where, FAILED_FILE)
    status = run_program(command, env, "profile")
    after = _captures(where, FAILED_FILE)
    reports = sorted(after[0] - before[0])
    failed = sorted(after[1] - before[1])
    if status != 0:
        then = "" if reports else "; no profile was written"
        print(f"jaxtune profile: the program {exit_text(status)}{then}", file=sys.stderr)
        return status if status > 0 else 1  # the program's own failure comes first
    if reports:
        listed = ", ".join(str(r) for r in reports)
        print(f"jaxtune profile: wrote {_count(reports, 'report')}: {listed}", file=sys.stderr)
        return 0
    if failed:
        first = (failed[0].read_text(errors="replace").strip().splitlines() or ["?"])[0]
        print(
            _CAPTURES_FAILED.format(n=_count(failed, "capture"), first=first, path=failed[0]),
            file=sys.stderr,
        )
    else:
        print(_NOTHING_PROFILED.format(command=mask_command(command), where=where), file=sys.stderr)
    return NOTHING_PROFILED


#: ``jaxtune profile``'s exit status when the program ended well but wrote no profile.
NOTHING_PROFILED = 3

_NOTHING_PROFILED = (
    "jaxtune profile: nothing was profiled: `{command}` ran to the end, but no "
    "@jaxtune.profiled function was called with concrete arrays, so no report was written "
    "under {where}. JAXTUNE_PROFILE=1 (which jaxtune profile sets) profiles the first call "
    "per signature of each @jaxtune.profiled function; decorate the step your program "
    "calls:\n"
    "\n"
    "    @jaxtune.profiled\n"
    "    def train_step(params, batch): ...\n"
    "\n"
    "A @profiled function called only inside another jax.jit is traced there, not run: "
    "decorate the outermost jitted step."
)

_CAPTURES_FAILED = (
    "jaxtune profile: nothing was profiled: {n} of @jaxtune.profiled functions failed, so "
    "no report was written. The first: {first} (kept in {path})."
)


def _captures(where: pathlib.Path, failed: str) -> tuple[set[pathlib.Path], set[pathlib.Path]]:
    """The captures' reports and their failures' notes (``failed``) under ``where``
    (``<fn>-<n>/report.json``)."""
    if not where.is_dir():
        return set(), set()
    return set(where.glob("*/report.json")), set(where.glob(f"*/{failed}"))


def _count(items: list[Any], noun: str) -> str:
    return f"{len(items)} {noun}" + ("" if len(items) == 1 else "s")


def run_report(args: argparse.Namespace) -> int:
    """Runs ``jaxtune report``."""
    llo_all = getattr(args, "llo_all", False)
    if getattr(args, "llo", False) or llo_all:
        space = read_space(args.path)  # read once for the report and the analysis
        result = _with_llo(report_from_trace(args.path, space=space), args.path, space)
    else:
        result = Profile.from_trace(args.path)
    if args.html:
        page = result.to_html(top=max(args.top, 50))
        out = pathlib.Path(args.html)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(page)
        print(f"jaxtune report: wrote {out}", file=sys.stderr)
    if args.json:
        print(result.to_json())
    else:
        print(result.table(top=args.top, llo_all=llo_all))
    return 0


def _with_llo(result: Profile, path: str, space: Space) -> Profile:
    """The profile with xprof's LLO analysis of its trace (or why there is none)."""
    from .._profiling import llo

    return llo.attach(result, path, space=space)
