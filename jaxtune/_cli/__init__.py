"""The ``jaxtune`` command line (also ``python -m jaxtune``)."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
import traceback
import warnings
from collections.abc import Sequence

from .._core.errors import JaxtuneError, JaxtuneWarning
from . import profile as _profile_cli

__all__ = ["build_parser", "main"]

#: Commands that need no JAX: their parser is built alone, so that reading a trace or the
#: cache does not import the tuning flow (and JAX with it).
_LIGHT = ("report", "cache")


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The argument parser of every subcommand (of ``profile`` and ``report`` alone, or of
    ``cache`` alone, when ``command`` is one of :data:`_LIGHT`)."""
    parser = argparse.ArgumentParser(
        prog="jaxtune",
        description="Autotune and profile JAX/Pallas kernels.",
    )
    parser.add_argument(
        "--debug", action="store_true", help="show the traceback when a command fails"
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    if command == "report":
        _profile_cli.add_parsers(sub)
        return parser
    from . import cache as _cache_cli

    if command == "cache":
        _cache_cli.add_parser(sub)
        return parser
    from . import tune as _tune_cli

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


def _one_line(error: BaseException) -> str:
    text = " | ".join(line.strip() for line in str(error).splitlines() if line.strip())
    return text or type(error).__name__


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the command line and returns its exit status.

    A failure is one line on stderr and a non-zero status (2 for a jaxtune error or a bad
    path, 1 for anything unexpected); ``--debug`` adds the traceback.
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    own = argv[: argv.index("--")] if "--" in argv else argv
    debug = "--debug" in own  # accepted anywhere before `--`, not only before the command
    if debug:
        argv.remove("--debug")
    args = build_parser(argv[0] if argv else None).parse_args(argv)
    args.debug = debug
    _hear_interrupts()
    try:
        with warnings.catch_warnings():  # restores how warnings show when the command ends
            if not debug:
                _one_line_warnings()
            return _dispatch(args)
    except KeyboardInterrupt:
        print(f"jaxtune {args.command}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0  # the reader went away (`jaxtune cache list | head`)
    except (JaxtuneError, OSError) as e:
        error: BaseException = e
        status, message = 2, _one_line(e)
    except Exception as e:  # a bug: still one line, the traceback behind --debug
        error = e
        status, message = 1, f"unexpected {type(e).__name__}: {_one_line(e)}"
        if not debug:
            message += " (run with --debug for the traceback)"
    if debug:
        traceback.print_exception(type(error), error, error.__traceback__)
    print(f"jaxtune {args.command}: {message}", file=sys.stderr)
    return status


def _one_line_warnings() -> None:
    """jaxtune's warnings as the one line they are on a terminal (Python's format adds the
    file, line and source of the code that warned, which is jaxtune's, not the user's)."""
    shown = warnings.showwarning

    def show(message, category, filename, lineno, file=None, line=None):  # type: ignore[no-untyped-def]
        if issubclass(category, JaxtuneWarning):
            print(str(message), file=file or sys.stderr)
        else:
            shown(message, category, filename, lineno, file, line)

    warnings.showwarning = show


def _hear_interrupts() -> None:
    """Ctrl-C (SIGINT) stops every command, also where it was inherited as ignored (a job
    a non-interactive shell started in the background): its programs and children are
    ended, what finished is kept, and the exit status is 130."""
    if (
        threading.current_thread() is threading.main_thread()
        and signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    ):
        signal.signal(signal.SIGINT, signal.default_int_handler)


def _dispatch(args: argparse.Namespace) -> int:
    if args.command == "doctor":
        from . import doctor as _doctor

        return _doctor.main(as_json=args.json)
    if args.command == "profile":
        return _profile_cli.run_profile(args)
    if args.command == "report":
        return _profile_cli.run_report(args)
    if args.command == "tune":
        if args.from_profile:
            from . import from_profile as _from_profile

            return _from_profile.run(args)
        from . import tune as _tune_cli

        return _tune_cli.run(args)
    if args.command == "cache":
        from . import cache as _cache_cli

        return _cache_cli.run(args)
    if args.command == "demo":
        from . import demo as _demo

        return _demo.main()
    raise AssertionError(f"unhandled command {args.command!r}")
