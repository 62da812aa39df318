"""The ``jaxtune`` command line (also ``python -m jaxtune``)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from .._errors import JaxtuneError
from . import cache as _cache_cli
from . import from_profile as _from_profile
from . import profile as _profile_cli
from . import tune as _tune_cli

__all__ = ["build_parser", "main"]


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every subcommand."""
    parser = argparse.ArgumentParser(
        prog="jaxtune",
        description="Autotune and profile JAX/Pallas kernels.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    doctor = sub.add_parser(
        "doctor",
        help="check that this toolchain can profile and tune Pallas kernels",
        description="Versions, backend, profiling flags, cache directory; each problem with "
        "its fix. Exit status 1 when something would stop profiling or tuning.",
    )
    doctor.add_argument("--json", action="store_true", help="print the report as JSON")

    _cache_cli.add_parser(sub)
    _tune_cli.add_parser(sub)
    _profile_cli.add_parsers(sub)

    sub.add_parser(
        "demo",
        help="the main job on this machine: check the toolchain and run the example kernels",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the command line and returns its exit status."""
    args = build_parser().parse_args(argv)
    try:
        if args.command == "doctor":
            from . import doctor as _doctor

            return _doctor.main(as_json=args.json)
        if args.command == "profile":
            return _profile_cli.run_profile(args)
        if args.command == "report":
            return _profile_cli.run_report(args)
        if args.command == "tune":
            if args.from_profile:
                return _from_profile.run(args)
            return _tune_cli.run(args)
        if args.command == "cache":
            return _cache_cli.run(args)
        if args.command == "demo":
            from . import demo as _demo

            return _demo.main()
    except JaxtuneError as e:
        print(f"jaxtune {args.command}: {e}", file=sys.stderr)
        return 2
    raise AssertionError(f"unhandled command {args.command!r}")
