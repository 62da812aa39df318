"""``jaxtune cache ...``: inspect and move tuned configs between machines."""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import stat
import sys
from collections.abc import Callable
from typing import Any

from .._core import versions as _versions
from .._core.errors import CacheError
from .._core.vocabulary import Entry, Measurement
from .._tuning.result import TuningResult, format_table
from .._tuning.store import cache as _cache

__all__ = ["add_parser", "run"]


def add_parser(sub: Any) -> None:
    """Adds ``cache`` and its actions to the top-level subparsers."""
    cache = sub.add_parser("cache", help="inspect and move tuned configs between machines")
    actions = cache.add_subparsers(dest="action", metavar="ACTION", required=True)

    def action(name: str, help: str) -> argparse.ArgumentParser:
        p: argparse.ArgumentParser = actions.add_parser(name, help=help, description=help)
        p.add_argument("--json", action="store_true", help="print a JSON document")
        return p

    action("path", "print the cache directory")
    p = action("list", "one line per tuned entry; entries from another toolchain are stale")
    p.add_argument("--kernel", help="only this kernel id")
    p = action("show", "every entry of one kernel, with each config's measurement or failure")
    p.add_argument("kernel", nargs="?", help="kernel id (default with --html: every kernel)")
    p.add_argument("--device", help="only this device kind")
    p.add_argument(
        "--html",
        metavar="OUT",
        help="also write a self-contained HTML page of the sweeps (a chart per kernel and "
        "key) to OUT; needs pip install 'jaxtune[plots]'",
    )
    p = action("export", "write entries to a TuningResult file (msgpack)")
    p.add_argument("file", type=pathlib.Path)
    p.add_argument("--kernel", help="only this kernel id")
    p = action("import", "merge a TuningResult file into the cache (the file wins)")
    p.add_argument("file", type=pathlib.Path)
    p = action("merge", "merge TuningResult files into one (later files win)")
    p.add_argument("files", type=pathlib.Path, nargs="+")
    p.add_argument("-o", "--output", type=pathlib.Path, required=True)
    p = action("prune", "drop entries: stale ones, or one kernel's")
    p.add_argument("--stale", action="store_true", help="entries tuned with another toolchain")
    p.add_argument("--kernel", help="every entry of this kernel id")
    action("clear", "remove every entry from the cache")


def _show(entries: list[Entry]) -> str:
    lines = []
    for e in sorted(entries, key=lambda e: (e.device_kind, e.key)):
        speed = f"{e.speedup:.2f}x" if e.speedup else "-"
        lines.append(
            f"{e.kernel} on {e.device_kind}, key {e.key}: best {dict(e.config)} "
            f"({speed} over default {dict(e.default_config)}; timed {e.pass_text}"
            f"{f', {e.timer} timer' if e.timer else ''})"
        )
        for m in e.measurements:
            if isinstance(m, Measurement):
                extra = f", {m.why_out}" if m.dropped else ""
                rounds = f"median of {len(m.rounds_us)} rounds, " if m.rounds_us else ""
                lines.append(
                    f"    {dict(m.config)}: {m.time_us:.1f} us "
                    f"({rounds}min {m.min_us:.1f}, {m.samples} samples{extra})"
                )
            else:
                lines.append(f"    {dict(m.config)}: FAILED at {m.stage}: {m.reason}")
    return "\n".join(lines) or "(no entries)"


Out = Callable[[Any, str], None]


def run(args: argparse.Namespace) -> int:
    """Runs one ``jaxtune cache`` action; returns the exit status."""
    out: Out = (
        (lambda doc, text: print(json.dumps(doc, indent=2, sort_keys=True)))
        if args.json
        else (lambda doc, text: print(text))
    )
    store = _cache.user_cache()
    if args.action != "path" and store.root.exists() and not store.root.is_dir():
        raise CacheError(
            f"the cache directory {store.root} is a file; set JAXTUNE_CACHE_DIR to a directory."
        )
    _ACTIONS[args.action](args, store, out)
    return 0


def _path(args: argparse.Namespace, store: _cache.CacheStore, out: Out) -> None:
    out({"path": str(store.root)}, str(store.root))


def _list(args: argparse.Namespace, store: _cache.CacheStore, out: Out) -> None:
    entries = [e for e in store.all_entries() if not args.kernel or e.kernel == args.kernel]
    stale = {(e.kernel, e.device_kind, e.key) for e in entries if _versions.stale(dict(e.versions))}
    out(
        {"path": str(store.root), "entries": [e.summary() for e in entries]},
        format_table(entries, stale=stale),
    )


def _show_action(args: argparse.Namespace, store: _cache.CacheStore, out: Out) -> None:
    if not args.kernel and not args.html:
        raise CacheError(
            "cache show needs a kernel id (`jaxtune cache list` shows them), or --html OUT "
            "for a page of every kernel's sweeps."
        )
    entries = [
        e
        for e in store.all_entries()
        if (not args.kernel or e.kernel == args.kernel)
        and (not args.device or e.device_kind == args.device)
    ]
    if not entries:
        what = f"kernel {args.kernel!r}" if args.kernel else "any kernel"
        raise CacheError(
            f"no entries for {what} in {store.root}; `jaxtune cache list` shows what is there."
        )
    if args.html:
        target = output_file(args.html)
        page = TuningResult.of(*entries).to_html()
        target.write_text(page)
        print(f"jaxtune cache show: wrote {target}", file=sys.stderr)
    out({"entries": [e.summary(full=True) for e in entries]}, _show(entries))


def _export(args: argparse.Namespace, store: _cache.CacheStore, out: Out) -> None:
    entries = [e for e in store.all_entries() if not args.kernel or e.kernel == args.kernel]
    path = TuningResult.of(*entries).save(output_file(args.file))
    out(
        {"path": str(path), "entries": len(entries)},
        f"exported {_count(len(entries), 'entry', 'entries')} to {path}",
    )


def _import(args: argparse.Namespace, store: _cache.CacheStore, out: Out) -> None:
    result = TuningResult.load(args.file)
    store.write(result.values())
    out(
        {"path": str(store.root), "entries": len(result)},
        f"imported {_count(len(result), 'entry', 'entries')} into {store.root}",
    )


def _merge(args: argparse.Namespace, store: _cache.CacheStore, out: Out) -> None:
    merged = TuningResult()
    for f in args.files:
        merged = merged | TuningResult.load(f)
    merged.save(output_file(args.output))
    out(
        {"path": str(args.output), "entries": len(merged)},
        f"merged {_count(len(args.files), 'file', 'files')} into {args.output} "
        f"({_count(len(merged), 'entry', 'entries')})",
    )


def _prune(args: argparse.Namespace, store: _cache.CacheStore, out: Out) -> None:
    if not (args.stale or args.kernel):
        raise CacheError(
            "prune needs --stale and/or --kernel KERNEL; `jaxtune cache clear` removes everything."
        )

    def doomed(e: Entry) -> bool:
        return (not args.stale or _versions.stale(dict(e.versions))) and (
            not args.kernel or e.kernel == args.kernel
        )

    dropped = store.remove(lambda e: not doomed(e))
    out({"dropped": dropped}, f"dropped {_count(dropped, 'entry', 'entries')}")


def _clear(args: argparse.Namespace, store: _cache.CacheStore, out: Out) -> None:
    dropped = store.clear()
    out({"dropped": dropped}, f"removed {_count(dropped, 'entry', 'entries')} from {store.root}")


def output_file(name: str | os.PathLike[str]) -> pathlib.Path:
    """``name`` as a file to write, its folder made: refused when it is a directory, a
    device, FIFO or socket (never replaced by a regular file), or below a file.

    Raises:
        CacheError: it is one of those (the message names it and says what to give).
    """
    target = pathlib.Path(name)
    try:
        info = os.lstat(target)
    except FileNotFoundError:
        info = None
    except NotADirectoryError:
        info = None  # below a file: found out on the folder below
    if info is not None and stat.S_ISDIR(info.st_mode):
        raise CacheError(
            f"{target} is a directory; give a file name, such as {target / 'tuned.msgpack'}."
        )
    if info is not None and not (stat.S_ISREG(info.st_mode) or stat.S_ISLNK(info.st_mode)):
        raise CacheError(
            f"refusing to replace {target}: it is not a regular file (a device, FIFO or "
            "socket); give the path of a regular file."
        )
    parent = target.parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        above = next(
            (p for p in [parent, *parent.parents] if p.exists() and not p.is_dir()), parent
        )
        raise CacheError(
            f"cannot write {target}: {above} is not a directory; give a path in a directory."
        ) from None
    return target


def _count(n: int, one: str, many: str) -> str:
    return f"{n} {one if n == 1 else many}"


_ACTIONS: dict[str, Callable[[argparse.Namespace, _cache.CacheStore, Out], None]] = {
    "path": _path,
    "list": _list,
    "show": _show_action,
    "export": _export,
    "import": _import,
    "merge": _merge,
    "prune": _prune,
    "clear": _clear,
}
