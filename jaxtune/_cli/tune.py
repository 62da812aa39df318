"""``jaxtune tune -- python train.py ...``: record a program's kernel calls, tune the misses.

The program runs in a child with ``JAXTUNE_RECORD`` set; it is stopped once it has settled,
having traced and compiled nothing new for ``--settle`` seconds after its first autotuned
call (``--full``: it runs to its end); meanwhile the sweep child starts (on TPU it imports
JAX and the sweep's code, then waits for the program to end before it opens the chip). This
parent then sweeps every recorded call that had no cached config, each in a sweep child,
writes the cache and prints a table. The parent never starts a JAX backend, so on TPU the
chip is free for the children.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from .._core import settings as _settings
from .._core.codec import DecodeError
from .._core.errors import JaxtuneError
from .._core.flags import requested_platform
from .._core.masking import mask_command
from .._core.vocabulary import Entry, RecordedCall
from .._isolation.devices import cpu_only
from .._isolation.frames import FrameError, Module, NotTransportable
from .._render.units import count
from .._tuning.recorded import Recording, Stopped, read_frame
from .._tuning.result import format_table
from .._tuning.staleness import recorded_reason, wrong_pass
from .._tuning.store import cache as _cache
from .entries import StaleJudge, entry_summary
from .recording import SETTLE_S, add_recording_options

if TYPE_CHECKING:
    from .._tuning.sweep.runner import ProcessRunner

# The wire and the sweep import JAX (a second, before anything runs): they are imported
# where a command reads frames or sweeps, so that `jaxtune --help`, `jaxtune profile` and
# every command whose parser this module adds start without it.

__all__ = [
    "HITS",
    "Stopped",
    "add_parser",
    "exit_text",
    "had_config",
    "program",
    "record_program",
    "run",
    "run_program",
    "stop_program",
    "summary_line",
    "sweep_records",
    "sweep_runner",
]

#: Where a config came from when the call already had a tuned one.
HITS = ("cache", "packaged", "scope")


def add_parser(sub: Any) -> None:
    """Adds ``tune`` to the top-level subparsers."""
    p = sub.add_parser(
        "tune",
        help="run a program, record its autotuned calls, tune the ones without a config",
        description="Runs COMMAND with recording on (it is stopped once it has traced and "
        "compiled nothing new for --settle seconds, unless --full), sweeps every autotuned "
        "call that had no cached config in a child process, writes the cache and prints a "
        "table. A later plain run uses the cache.",
    )
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    add_recording_options(p)
    p.add_argument("--retune", action="store_true", help="also re-tune calls that had a config")
    p.add_argument(
        "--from-profile",
        metavar="DIR",
        default=None,
        help="instead of running a program, tune the autotuned kernels of a captured profile "
        "(report.json files under DIR) whose share of device time is at least --min-share, "
        "for the shapes they ran with",
    )
    p.add_argument(
        "--min-share",
        type=_share,
        default=0.05,
        help="with --from-profile: the smallest share of device time worth tuning (default 0.05)",
    )
    p.add_argument("program", nargs=argparse.REMAINDER, help="-- python train.py ...")


def _share(raw: str) -> float:
    """A share of device time, from 0 to 1 (``nan`` and the like are refused)."""
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not 0.0 <= value <= 1.0:  # false for nan
        raise argparse.ArgumentTypeError(f"{raw!r} is not a share from 0 to 1, such as 0.05")
    return value


def program(args: argparse.Namespace, verb: str) -> list[str]:
    """The command after ``--``; ``python`` / ``python3`` mean the interpreter jaxtune runs
    in (``.venv/bin/jaxtune tune -- python x.py`` must not pick another Python on PATH).

    Raises:
        JaxtuneError: there is none.
    """
    command = list(args.program)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        raise JaxtuneError(f"it needs a command to run: jaxtune {verb} -- python train.py")
    if command[0] in ("python", "python3"):
        command[0] = sys.executable
    return command


#: After Ctrl-C, seconds the program has to end on its own (it got the terminal's SIGINT
#: too), then to end after the SIGINT jaxtune forwards, before it is killed.
_INTERRUPT_GRACE_S = (1.0, 1.5)


def run_program(
    command: list[str], env: Mapping[str, str], verb: str, *, stdin: Any = None, stdout: Any = None
) -> int:
    """Runs the program and returns its exit status. On Ctrl-C the program is given a
    moment to end, is sent SIGINT, then is killed, and the interrupt goes on.

    Raises:
        JaxtuneError: the command does not exist or cannot be executed.
    """
    try:
        proc = subprocess.Popen(command, env=dict(env), stdin=stdin, stdout=stdout)
    except OSError as e:
        raise JaxtuneError(
            f"could not start {command[0]!r}: {e.strerror or e}. Expected a "
            f"command such as `jaxtune {verb} -- python train.py`; check the name and PATH."
        ) from e
    try:
        return proc.wait()
    except BaseException:
        stop_program(proc)
        raise


def exit_text(status: int) -> str:
    """``"exited with status 3"`` or ``"was killed by SIGSEGV"`` (a negative status).

    Examples:
        >>> exit_text(-11)
        'was killed by SIGSEGV'
    """
    if status >= 0:
        return f"exited with status {status}"
    try:
        return f"was killed by {signal.Signals(-status).name}"
    except ValueError:
        return f"was killed by signal {-status}"


def stop_program(proc: subprocess.Popen[Any]) -> None:
    """Ends ``proc`` within a few seconds: it may end on its own, then on SIGINT, else it is
    killed (the processes it started watch it and follow)."""
    for step, grace in enumerate(_INTERRUPT_GRACE_S):
        with contextlib.suppress(subprocess.TimeoutExpired, KeyboardInterrupt):
            proc.wait(timeout=grace)
            return
        if step == 0:
            with contextlib.suppress(OSError):
                proc.send_signal(signal.SIGINT)
    with contextlib.suppress(OSError):
        proc.kill()
    with contextlib.suppress(subprocess.TimeoutExpired, KeyboardInterrupt):
        proc.wait(timeout=5)


def _read_recording(path: str) -> Recording:
    """The recording the program left in ``path``.

    Raises:
        JaxtuneError: a frame is no frame of a recording (the message names the file,
            the frame and its field).
    """
    try:
        return Recording.of(
            [read_frame(raw, f"{path}, frame {i}") for i, raw in enumerate(_frames(path))]
        )
    except ValueError as e:
        raise JaxtuneError(str(e)) from None


def retune_hint(entries: Sequence[Entry]) -> str:
    """Where a ``--retune`` traced every config again because the ``retune`` extra is
    missing (nothing kept the lowered programs), the line that says how to keep them and
    what it cost; ``""`` otherwise."""
    from .._tuning.sweep.compile_cache import own_folder
    from .._tuning.sweep.program_store import serialisable

    lowering = sum(e.phases.get("lowering", 0.0) for e in entries)
    if serialisable() or own_folder() is None or lowering < 1.0:
        return ""
    return (
        f"jaxtune tune: this --retune traced every config again ({lowering:.1f} s of "
        "lowering); `pip install 'jaxtune[retune]'` keeps the lowered programs, so that "
        'the --retune after the next sweep loads them (docs/autotuned.md, "Compiled '
        'programs kept on disk")'
    )


def summary_line(recorded: int, had_config: int, tuned: int, *, retune: bool) -> str:
    """``recorded 2 autotuned calls; 2 already had a config (re-tuned: --retune); tuned 2``.

    Examples:
        >>> summary_line(1, 0, 1, retune=False)
        'recorded 1 autotuned call; 0 already had a config; tuned 1'
    """
    again = " (re-tuned: --retune)" if retune and had_config else ""
    return (
        f"recorded {count(recorded, 'autotuned call')}; {had_config} already had a config"
        f"{again}; tuned {tuned}"
    )


def sweep_records(
    records: Sequence[RecordedCall], recording: Recording | None = None
) -> tuple[list[Entry], list[str]]:
    """Sweeps each recorded call in a child, on the value sets ``recording`` holds of it,
    and writes the cache: ``(entries, problems)``."""
    from .._tuning.sweep.inputs import SYNTHESISED_TEXT, made_up_integers
    from .._tuning.sweep.requests import read_request, with_recorded_values
    from .._tuning.sweep_rules import save_entry

    entries: list[Entry] = []
    problems: list[str] = []
    # One sweep child per device the program saw, where devices can be split.
    devices = next((r.devices for r in records), None)
    runner = sweep_runner(devices=None if devices is None else list(devices))
    for record in records:
        name = f"{record.kernel} {record.key}"
        if record.request is None:
            problems.append(f"{name}: {record.error}")
            continue
        try:
            recorded = recording.values_of(record) if recording is not None else ()
            request = with_recorded_values(read_request(record.request), recorded)
        except (FrameError, KeyError, TypeError) as e:
            problems.append(f"{name}: a damaged recording ({e!r})")
            continue
        plan = request.fields.plan
        if plan is None:
            problems.append(f"{name}: a recording without a plan")
            continue
        made_up = made_up_integers(plan.values)
        if made_up:
            why = (
                "JAXTUNE_VALUE_SETS=0 keeps none"
                if _settings.settings().value_sets == 0
                else "a profile keeps shapes only; under `jaxtune tune --`, a bucketed "
                "kernel, or a call that never ran before the program was stopped"
            )
            print(
                f"jaxtune tune: {record.kernel} ({record.key}): no values were "
                f"recorded for integer/boolean argument(s) {', '.join(made_up)} ({why}); "
                f"its sweep runs on synthesised values ({SYNTHESISED_TEXT}). "
                "docs/values.md says how to give real ones.",
                file=sys.stderr,
                flush=True,
            )
        try:
            outcome = runner.run(plan, request)
        except KeyboardInterrupt:
            done = f"; saved before it: {count(len(entries), 'sweep')}" if entries else ""
            print(
                f"jaxtune tune: interrupted during the sweep of {name}: it is dropped, and "
                f"the cache keeps what it held for that call{done}",
                file=sys.stderr,
                flush=True,
            )
            raise
        except JaxtuneError as e:
            problems.append(f"{name}: {e}")
            continue
        except NotTransportable as e:
            # The program tuned in its own process where no child could; this command
            # has only its children.
            problems.append(
                f"{name}: {e}. This command sweeps "
                "in a child only, which imports the kernel's module by name: make that "
                "module importable on its own, or tune in the program (JAXTUNE_MODE=tune "
                "tunes in the program's process where a child cannot)"
            )
            continue
        kind = runner.ready.device_kind if runner.ready else record.device_kind
        entries.append(save_entry(plan, outcome, kind, record.version, code=record.code))
    return entries, problems


def sweep_runner(devices: list[int] | None = None) -> ProcessRunner:
    """The runner of this command's sweeps. This parent starts no backend, so where
    ``JAX_PLATFORMS`` does not name the platform and JAX can start nothing but its CPU
    backend, the children are CPU children, as the one started while the program runs."""
    from .._tuning.sweep.runner import ProcessRunner

    platform = "cpu" if requested_platform() is None and cpu_only() else None
    return ProcessRunner(platform=platform, devices=devices)


def had_config(record: RecordedCall) -> bool:
    """Whether a recorded call had a config to keep: from the cache or a scope, timed for
    the pass the call runs, and not stale (another toolchain, new configs in the space:
    :func:`~jaxtune._tuning.staleness.recorded_reason`, as ``cache check`` asks it). A
    scope's entry is the caller's own choice, never stale, as the lookup has it."""
    return (
        record.source in HITS
        and wrong_pass(record.entry_timing, record.timing) is None
        and (record.source == "scope" or recorded_reason(record) is None)
    )


def run(args: argparse.Namespace) -> int:
    """Runs ``jaxtune tune``; returns the exit status."""
    command = program(args, "tune")
    _settings.settings()  # a bad JAXTUNE_* value: said now, not once the program ran
    # The sweep child starts while the program runs and records its calls, and imports
    # the module of each call to sweep as soon as the call is recorded (CPU and GPU). This
    # parent still starts no backend, so a TPU stays free for the program: there the
    # child is held, its imports done, until the first sweep asks for it, after the
    # program has ended. Bad settings (a malformed XLA_FLAGS) are left for the sweeps.
    from .._tuning.sweep.requests import read_request

    runner = sweep_runner()
    with contextlib.suppress(JaxtuneError):
        runner.prestart(hold=True)

    def on_call(record: RecordedCall) -> None:
        if record.request is None or not (args.retune or not had_config(record)):
            return
        try:
            request = read_request(record.request)
        except FrameError:  # the sweeps report it
            return
        if request.ref is not None:
            with contextlib.suppress(JaxtuneError):
                runner.preload([Module(ref=request.ref, environ=request.environ)])

    recording, status = record_program(
        command, full=args.full, settle=args.settle, on_call=on_call, json=args.json
    )
    records, stopped = list(recording.calls), recording.stopped
    if status != 0 and not stopped:
        then = (
            f"tuning the {count(len(records), 'call')} it recorded"
            if records
            else "it recorded no autotuned call, so nothing is tuned"
        )
        print(f"jaxtune tune: the program {exit_text(status)}; {then}", file=sys.stderr)
    kept = [r for r in records if had_config(r)]
    todo = [r for r in records if args.retune or r not in kept]
    entries, problems = sweep_records(todo, recording)
    _report(args, records, kept, entries, problems)
    if status != 0 and not stopped:
        return status if status > 0 else 1  # the program's own failure comes first
    return 1 if problems else 0


def record_program(
    command: list[str],
    *,
    full: bool,
    settle: float | None = None,
    verb: str = "tune",
    on_call: Callable[[RecordedCall], None] | None = None,
    json: bool = False,
) -> tuple[Recording, int]:
    """Runs the program with recording on (``cached`` mode, a miss running the default
    whatever ``JAXTUNE_ON_MISS`` says, so every call is recorded): its recording (its
    calls, their value sets, why jaxtune stopped it) and its exit status. Unless
    ``full``, the program is stopped once it has traced and compiled nothing new for
    ``settle`` seconds (default :data:`SETTLE_S`) after its first autotuned call; the stop
    is reported on stderr. ``verb`` names the command in messages (``tune``, ``cache
    check``); ``on_call`` is given each call frame while the program runs, as soon as the
    program has written it. With ``json`` the program's standard output goes to stderr, so
    that this command's stdout holds its JSON document alone."""
    with tempfile.TemporaryDirectory(prefix="jaxtune-record-") as tmp:
        path = os.path.join(tmp, "calls.msgpack")
        open(path, "wb").close()
        env = {
            **os.environ,
            "JAXTUNE_RECORD": path,
            "JAXTUNE_MODE": "cached",
            "JAXTUNE_ON_MISS": "default",
        }
        if not full:
            env["JAXTUNE_RECORD_STOP"] = "1"
            env["JAXTUNE_RECORD_SETTLE"] = repr(SETTLE_S if settle is None else settle)
        print(
            f"jaxtune {verb}: running {mask_command(command)} to record its kernels...",
            file=sys.stderr,
            flush=True,
        )
        done = threading.Event()
        threading.Thread(
            target=_note_no_call, args=(path, done, verb), name="jaxtune-record-note", daemon=True
        ).start()
        follower = None
        if on_call is not None:
            follower = threading.Thread(
                target=_follow, args=(path, on_call, done), name="jaxtune-record", daemon=True
            )
            follower.start()
        try:
            stdout = sys.stderr if json else None
            status = run_program(command, env, verb, stdin=subprocess.DEVNULL, stdout=stdout)
        finally:
            done.set()
            if follower is not None:
                follower.join()
        recording = _read_recording(path)
    if recording.stopped is not None:
        print(recording.stopped.text(verb), file=sys.stderr, flush=True)
    return recording, status


#: Seconds after which a program that has made no autotuned call is said to run on.
NO_CALL_NOTE_S = 30.0


def _note_no_call(path: str, done: threading.Event, verb: str) -> None:
    """Says once, after :data:`NO_CALL_NOTE_S`, that the program has made no autotuned
    call yet (the settle clock starts at the first): it runs on until it does or ends."""
    if done.wait(NO_CALL_NOTE_S):
        return
    with contextlib.suppress(OSError):
        if os.path.getsize(path) > 0:
            return
    print(
        f"jaxtune {verb}: the program has made no autotuned call in {NO_CALL_NOTE_S:g} s; "
        "it runs on until it makes one (then it is stopped once it settles) or ends. A "
        "program that never calls an @jaxtune.autotuned kernel has nothing to record: "
        "Ctrl-C stops it.",
        file=sys.stderr,
        flush=True,
    )


def _follow(path: str, on_call: Callable[[RecordedCall], None], done: threading.Event) -> None:
    """Gives ``on_call`` each call frame the program appends to ``path``, until ``done``
    (every 0.2 s, the whole frames written since; one the program is still writing waits
    in the reader's buffer for its end)."""
    from .._isolation.framing import FrameReader

    fd = os.open(path, os.O_RDONLY)
    try:
        reader = FrameReader(fd)
        while not done.wait(0.2):
            while True:
                try:
                    frame = reader.read()
                except EOFError:
                    break
                except DecodeError:  # reported when the program is done
                    return
                try:
                    call = read_frame(frame, path)
                except ValueError:  # reported when the program is done
                    return
                if isinstance(call, RecordedCall):
                    on_call(call)
    finally:
        os.close(fd)


def _frames(path: str) -> list[Any]:
    """The whole frames in ``path`` (one the program is still writing is left out)."""
    from .._isolation.framing import FrameReader

    frames = []
    fd = os.open(path, os.O_RDONLY)
    try:
        reader = FrameReader(fd)
        while True:
            try:
                frames.append(reader.read())
            except EOFError:
                return frames
    finally:
        os.close(fd)


def _report(
    args: argparse.Namespace,
    records: list[RecordedCall],
    had_config: list[RecordedCall],
    entries: list[Entry],
    problems: list[str],
) -> None:
    if args.json:
        fresh = StaleJudge()
        doc = {
            "recorded": len(records),
            "already_tuned": [
                {"kernel": r.kernel, "key": r.key, "source": r.source} for r in had_config
            ],
            "retuned": bool(args.retune),
            "tuned": [entry_summary(e, fresh) for e in entries],
            "problems": problems,
            "cache": str(_cache.user_cache().root),
        }
        print(json.dumps(doc, indent=2, sort_keys=True))
        return
    print(summary_line(len(records), len(had_config), len(entries), retune=args.retune))
    if entries:
        print(format_table(entries))
    if args.retune and (hint := retune_hint(entries)):
        print(hint, file=sys.stderr)
    for problem in problems:
        print(f"could not tune {problem}")
    print(f"cache: {_cache.user_cache().root}")
