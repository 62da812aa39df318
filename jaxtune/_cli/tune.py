"""``jaxtune tune -- python train.py ...``: record a program's kernel calls, tune the misses.

The program runs in a child with ``JAXTUNE_RECORD`` set; it stops after the first step it
traces (``--full``: at its end). This parent then sweeps every recorded call that had no
cached config, each in a sweep child, writes the cache and prints a table. The parent never
starts a JAX backend, so on TPU the chip is free for the children.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from typing import Any

from .._errors import JaxtuneError
from .._isolation.runner import ProcessRunner
from .._isolation.wire import FrameReader
from .._tuning import cache as _cache
from .._tuning.autotuned import make_entry
from .._tuning.result import Entry, format_table
from .._tuning.sweep import SweepPlan

__all__ = ["add_parser", "run"]

_HITS = ("cache", "packaged", "scope")


def add_parser(sub: Any) -> None:
    """Adds ``tune`` to the top-level subparsers."""
    p = sub.add_parser(
        "tune",
        help="run a program, record its autotuned calls, tune the ones without a config",
        description="Runs COMMAND with recording on (it stops after its first traced step "
        "unless --full), sweeps every autotuned call that had no cached config in a child "
        "process, writes the cache and prints a table. A later plain run uses the cache.",
    )
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.add_argument("--full", action="store_true", help="let the program run to its end")
    p.add_argument("--retune", action="store_true", help="also re-tune calls that had a config")
    p.add_argument("program", nargs=argparse.REMAINDER, help="-- python train.py ...")


def program(args: argparse.Namespace, verb: str) -> list[str]:
    """The command after ``--``.

    Raises:
        JaxtuneError: there is none.
    """
    command = list(args.program)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        raise JaxtuneError(f"jaxtune {verb} needs a command: jaxtune {verb} -- python train.py")
    return command


def _read_records(path: str) -> tuple[list[dict[str, Any]], bool]:
    records: list[dict[str, Any]] = []
    stopped = False
    fd = os.open(path, os.O_RDONLY)
    try:
        reader = FrameReader(fd)
        while True:
            try:
                frame = reader.read()
            except EOFError:
                break
            if frame.get("t") == "stopped":
                stopped = True
            elif frame.get("t") == "call":
                records.append(frame)
    finally:
        os.close(fd)
    return records, stopped


def run(args: argparse.Namespace) -> int:
    """Runs ``jaxtune tune``; returns the exit status."""
    command = program(args, "tune")
    records, stopped, status = _record(command, full=args.full)
    if status != 0 and not stopped:
        print(
            f"jaxtune tune: the program exited with status {status}; tuning the "
            f"{len(records)} calls it recorded",
            file=sys.stderr,
        )
    todo = [r for r in records if args.retune or r["source"] not in _HITS]
    skipped = [r for r in records if r not in todo]
    entries, problems = _tune(todo)
    _report(args.json, records, skipped, entries, problems)
    return 1 if problems else 0


def _record(command: list[str], *, full: bool) -> tuple[list[dict[str, Any]], bool, int]:
    """Runs the program with recording on: its recorded calls, whether it stopped after its
    first step, and its exit status."""
    with tempfile.TemporaryDirectory(prefix="jaxtune-record-") as tmp:
        path = os.path.join(tmp, "calls.msgpack")
        open(path, "wb").close()
        env = {**os.environ, "JAXTUNE_RECORD": path, "JAXTUNE_MODE": "cached"}
        if not full:
            env["JAXTUNE_RECORD_STOP"] = "1"
        print(
            f"jaxtune tune: running {' '.join(command)} to record its kernels...",
            file=sys.stderr,
            flush=True,
        )
        proc = subprocess.run(command, env=env, stdin=subprocess.DEVNULL)
        records, stopped = _read_records(path)
    return records, stopped, proc.returncode


def _tune(todo: list[dict[str, Any]]) -> tuple[list[Entry], list[str]]:
    """Sweeps each recorded call in a child and writes the cache: the entries, and one line
    per call that could not be tuned."""
    entries: list[Entry] = []
    problems: list[str] = []
    runner = ProcessRunner()
    for record in todo:
        if "request" not in record:
            problems.append(f"{record['kernel']} {record['key']}: {record['error']}")
            continue
        plan = SweepPlan.from_dict(record["request"]["plan"])
        try:
            outcome = runner.run(plan, record["request"])
        except JaxtuneError as e:
            problems.append(f"{record['kernel']} {record['key']}: {e}")
            continue
        kind = (runner.ready or {}).get("device_kind", record["device_kind"])
        entry = make_entry(plan, outcome, kind, record["version"])
        _cache.user_cache().write([entry])
        entries.append(entry)
    return entries, problems


def _report(
    as_json: bool,
    records: list[dict[str, Any]],
    skipped: list[dict[str, Any]],
    entries: list[Entry],
    problems: list[str],
) -> None:
    if as_json:
        doc = {
            "recorded": len(records),
            "already_tuned": [
                {"kernel": r["kernel"], "key": r["key"], "source": r["source"]} for r in skipped
            ],
            "tuned": [e.summary() for e in entries],
            "problems": problems,
            "cache": str(_cache.user_cache().root),
        }
        print(json.dumps(doc, indent=2, sort_keys=True))
        return
    print(
        f"recorded {len(records)} autotuned calls; {len(skipped)} already had a config; "
        f"tuned {len(entries)}"
    )
    if entries:
        print(format_table(entries))
    for problem in problems:
        print(f"could not tune {problem}")
    print(f"cache: {_cache.user_cache().root}")
