"""``jaxtune cache ...``: inspect and move tuned configs between machines."""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import json
import os
import pathlib
import shutil
import stat
import sys
import time
from collections.abc import Callable
from typing import Any

from .._core import settings as _settings
from .._core.errors import CacheError
from .._core.vocabulary import Entry, Measurement, StaleReason, ratio_texts
from .._render import configs as _configs
from .._render import text as _text
from .._render import units as _units
from .._tuning.explain import decision_text
from .._tuning.result import TuningResult, format_table
from .._tuning.staleness import means, recorded_reason, wrong_pass
from .._tuning.store import cache as _cache
from .._tuning.store import result_files as _results
from .._tuning.store.layout import XLA_DIR
from .._tuning.sweep.breakdown import breakdown_text
from .._tuning.sweep.intervals import ratio_interval
from . import cache_sync as _sync
from .entries import StaleJudge, entry_summary, labels
from .recording import add_recording_options

__all__ = ["add_parser", "run"]


def add_parser(sub: Any) -> None:
    """Adds ``cache`` and its actions to the top-level subparsers."""
    cache = sub.add_parser("cache", help="inspect and move tuned configs between machines")
    actions = cache.add_subparsers(dest="action", metavar="ACTION", required=True)

    def action(name: str, help: str) -> argparse.ArgumentParser:
        p: argparse.ArgumentParser = actions.add_parser(name, help=help, description=help)
        p.add_argument("--json", action="store_true", help="print a JSON document")
        return p

    def layer_options(p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "--layer",
            action="append",
            default=[],
            type=pathlib.Path,
            metavar="PATH",
            help="also a packaged cache: a file written by `jaxtune cache export` or a "
            "cache directory (repeatable)",
        )
        p.add_argument(
            "--package",
            action="append",
            default=[],
            metavar="MODULE",
            help="also the packaged caches MODULE registers with jaxtune.register_cache "
            "when imported (imports MODULE, and JAX if it does; repeatable)",
        )

    def source_option(p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "--source",
            action="append",
            default=[],
            type=pathlib.Path,
            metavar="DIR",
            help="look for the kernels' modules in DIR first (a checkout's root, or the folder "
            "of a script), then on sys.path and in the working directory, to tell which "
            "entries are stale for code (repeatable)",
        )

    action("path", "print the cache directory")
    p = action(
        "list",
        "one line per tuned entry, of the user cache and of packaged caches; entries tuned "
        "with another toolchain or for other code of the kernel are marked stale",
    )
    p.add_argument("--kernel", action="append", default=[], help="only this kernel id (repeatable)")
    layer_options(p)
    source_option(p)
    p = action("show", "every entry of one kernel, with each config's measurement or failure")
    p.add_argument("kernel", nargs="?", help="kernel id (default with --html: every kernel)")
    p.add_argument("--device", help="only this device kind")
    p.add_argument(
        "--html",
        metavar="OUT",
        help="also write a self-contained HTML page of the sweeps (a chart per kernel and "
        "key) to OUT; needs pip install 'jaxtune[plots]'",
    )
    layer_options(p)
    source_option(p)
    p = action(
        "export",
        "write the user cache's entries to a TuningResult file (msgpack), or to a cache "
        "directory (--dir) that a library can ship and register",
    )
    p.add_argument("file", type=pathlib.Path, nargs="?")
    p.add_argument(
        "--dir",
        type=pathlib.Path,
        metavar="DIR",
        help="write the cache layout (one file per device kind and kernel, read lazily when "
        "registered) to DIR instead of one file",
    )
    p.add_argument("--kernel", action="append", default=[], help="only this kernel id (repeatable)")
    p.add_argument(
        "--no-measurements",
        action="store_true",
        help="leave out each config's measurement (keep the best config, its time and the "
        "default's)",
    )
    p = action(
        "import",
        "merge a TuningResult file into the cache (the file wins; each conflict is reported)",
    )
    p.add_argument("file", type=pathlib.Path)
    p.add_argument(
        "--keep-newer",
        action="store_true",
        help="on a conflict, keep whichever entry was tuned later",
    )
    source_option(p)
    p = action("merge", "merge TuningResult files into one (later files win)")
    p.add_argument("files", type=pathlib.Path, nargs="+")
    p.add_argument("-o", "--output", type=pathlib.Path, required=True)
    p = action("prune", "drop entries: stale ones, or one kernel's")
    p.add_argument(
        "--stale",
        action="store_true",
        help="entries tuned with another toolchain or for other code of the kernel",
    )
    p.add_argument("--kernel", help="every entry of this kernel id")
    source_option(p)
    action("clear", "remove every entry from the cache")
    p = action(
        "check",
        "run a program with its kernel calls recorded (as `jaxtune tune --` does, without "
        "tuning) and exit 1 listing the calls with no tuned config and those whose entry is "
        "stale; 0 when every call has a current entry",
    )
    add_recording_options(p)  # what the check records is what `jaxtune tune` records
    p.add_argument("program", nargs=argparse.REMAINDER, help="-- python serve.py ...")
    _sync.add_actions(action)  # push, pull: the shared store


def _title(e: Entry) -> str:
    """The kernel, with its version when it has one: ``lib.matmul (version 2)``."""
    return f"{e.kernel} (version {e.kernel_version})" if e.kernel_version else e.kernel


def _show(found: list[tuple[Entry, Source]]) -> str:
    """Each entry: the stored config and how it won, which knobs varied and which were
    fixed, then every measured config (the varied knobs only), its times in the one unit
    of that entry; no line wider than the text tables' width."""
    lines: list[str] = []
    for e, where in sorted(found, key=lambda f: (f[0].device_kind, f[0].key, f[0].kernel_version)):
        timer = f", {e.timer} timer" if e.timer else ""
        default = _configs.text(e.default_config)
        if e.speedup:
            against = f"{e.speedup:.2f}x over the default {default}"
        else:  # the default failed, or was not timed
            against = f"the default {default} has no time"
        head = [
            f"{_title(e)} on {e.device_kind}, key {e.key}",
            f"  best {_configs.text(e.config)} ({against}; timed {e.pass_text}{timer})",
        ]
        decided = decision_text(e)
        if decided:
            head.append(f"  decided: {decided}")
        if e.values_text:
            head.append(f"  values: {e.values_text}")
        varying, fixed = _configs.knobs(m.config for m in e.measurements)
        if e.measurements:
            knob_line = f"  knobs varied: {', '.join(varying) or 'none'}"
            if fixed:
                knob_line += f"; {_configs.fixed_text(fixed)}"
            head.append(knob_line)
        if e.phases:
            head.append(f"  sweep {breakdown_text(e.phases)}")
        if where.kind == "packaged":
            head.append(f"    from the packaged cache {where.path}")
        unit, fmt = _units.time_column(
            t for m in e.measurements if isinstance(m, Measurement) for t in (m.time_us, m.min_us)
        )
        shown = varying or None
        stored = next(
            (m for m in e.measurements if isinstance(m, Measurement) and m.config == e.config),
            None,
        )
        for m in e.measurements:
            name = _configs.text(m.config, shown) or "(the only config)"
            if isinstance(m, Measurement):
                extra = f", {m.why_out}" if m.dropped else ""
                extra += _against_stored(m, stored)
                n = len(m.rounds_us)
                rounds = f"median of {n} round{'s' * (n != 1)}, " if n else ""
                calls = f", {m.calls} call{'s' * (m.calls != 1)}" if m.calls else ""
                samples = f"{m.samples} sample{'s' * (m.samples != 1)}"
                head.append(
                    f"    {name}: {fmt(m.time_us)} {unit} "
                    f"({rounds}min {fmt(m.min_us)} {unit}, {samples}{calls}{extra})"
                )
            else:
                head.append(f"    {name}: FAILED at {m.stage}: {m.reason}")
        lines += [w for line in head for w in _text.paragraph(line)]
    return "\n".join(lines) or "(no entries)"


def _against_stored(m: Measurement, stored: Measurement | None) -> str:
    """``; stored``, or ``; 1.09x the stored, round by round`` for a config that raced
    beside the stored one: the median of its per-round ratios, the figure the decision
    reads (a median time can be the lower on a busy machine, where the rounds met
    different spells of load, and still lose round by round); ``""`` otherwise."""
    if stored is None or len(stored.rounds_us) < 2:
        return ""
    if m is stored:
        return "; stored"
    shared = sum(1 for a, b in zip(m.rounds_us, stored.rounds_us, strict=False) if a > 0 < b)
    if shared < 2:
        return ""
    ratio, _, _ = ratio_interval(m.rounds_us, stored.rounds_us)
    return f"; {ratio_texts(ratio)[0]}x the stored, round by round"


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
    return _ACTIONS[args.action](args, store, out) or 0


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Source:
    """Where listed entries come from: the user cache, or a packaged cache (``path``: its
    directory or file)."""

    kind: str  # "cache" or "packaged"
    path: pathlib.Path

    def describe(self) -> str:
        return ("user cache " if self.kind == "cache" else "packaged cache ") + str(self.path)


def _sources(
    args: argparse.Namespace, store: _cache.CacheStore
) -> list[tuple[Source, list[Entry]]]:
    """Every layer the action shows, with its entries: the user cache, the packaged caches
    registered in this process (``--package`` modules import theirs), then ``--layer``s.

    Raises:
        CacheError: a ``--package`` cannot be imported, or a ``--layer`` cannot be read.
    """
    if args.package and "" not in sys.path and os.getcwd() not in sys.path:
        # As `python -m jaxtune` finds it: the `jaxtune` script's sys.path starts with the
        # script's own folder, not the directory the command runs in.
        sys.path.insert(0, os.getcwd())
    for name in args.package:
        try:
            importlib.import_module(name)
        except Exception as e:  # the package's own import failing: one line, named
            raise CacheError(
                f"--package {name}: cannot import it ({type(e).__name__}: {e}); give a module "
                "that calls jaxtune.register_cache, importable from this Python."
            ) from e
    found = [(Source(kind="cache", path=store.root), store.all_entries())]
    seen = set()
    for layer in _cache.layers():
        found.append((Source(kind="packaged", path=layer.source), layer.all_entries()))
        seen.add(layer.source)
    for path in args.layer:
        if path in seen:
            continue
        seen.add(path)
        if path.is_dir():
            entries = _cache.CacheStore(path, read_only=True).all_entries()
        elif path.exists():
            entries = _results.load(path)
        else:
            raise CacheError(
                f"--layer {path} does not exist; give a file written by `jaxtune cache export` "
                "or a cache directory."
            )
        found.append((Source(kind="packaged", path=path), entries))
    return found


def _summary(
    e: Entry, where: Source, *, full: bool = False, fresh: StaleJudge | None = None
) -> dict[str, Any]:
    return {
        **entry_summary(e, fresh or StaleJudge(), full=full),
        "kernel_version": e.kernel_version,
        "source": where.kind,
        "layer": str(where.path),
    }


def _path(args: argparse.Namespace, store: _cache.CacheStore, out: Out) -> None:
    out({"path": str(store.root)}, str(store.root))


def _list(args: argparse.Namespace, store: _cache.CacheStore, out: Out) -> None:
    wanted = set(args.kernel)
    layers = [
        (where, [e for e in entries if not wanted or e.kernel in wanted])
        for where, entries in _sources(args, store)
    ]
    sections = []
    fresh = StaleJudge.of(args)
    for where, entries in layers:
        stale: dict[tuple[str, str, str], str] = {}
        for e in entries:
            reasons = fresh.reasons(e)
            if reasons:
                stale[_title(e), e.device_kind, e.key] = ", ".join(labels(reasons))
        shown = [dataclasses.replace(e, kernel=_title(e)) for e in entries]
        sections.append(f"{where.describe()}:\n{format_table(shown, stale=stale)}")
    out(
        {
            "path": str(store.root),
            "layers": [
                {"source": w.kind, "path": str(w.path), "entries": len(es)} for w, es in layers
            ],
            "entries": [_summary(e, w, fresh=fresh) for w, es in layers for e in es],
        },
        "\n\n".join(sections),
    )


def _show_action(args: argparse.Namespace, store: _cache.CacheStore, out: Out) -> None:
    if not args.kernel and not args.html:
        raise CacheError(
            "cache show needs a kernel id (`jaxtune cache list` shows them), or --html OUT "
            "for a page of every kernel's sweeps."
        )
    sources = _sources(args, store)
    found = [
        (e, where)
        for where, entries in sources
        for e in entries
        if (not args.kernel or e.kernel == args.kernel)
        and (not args.device or e.device_kind == args.device)
    ]
    if not found:
        what = f"kernel {args.kernel!r}" if args.kernel else "any kernel"
        layers = " or its packaged caches" if len(sources) > 1 else ""
        raise CacheError(
            f"no entries for {what} in {store.root}{layers}; `jaxtune cache list` shows what "
            "is there."
        )
    if args.html:
        target = output_file(args.html)
        page = TuningResult.of(*(e for e, _ in found)).to_html()
        target.write_text(page)
        print(f"jaxtune cache show: wrote {target}", file=sys.stderr)
    fresh = StaleJudge.of(args)
    out({"entries": [_summary(e, w, full=True, fresh=fresh) for e, w in found]}, _show(found))


def _export(args: argparse.Namespace, store: _cache.CacheStore, out: Out) -> None:
    if (args.file is None) == (args.dir is None):
        raise CacheError(
            "cache export needs FILE (one TuningResult file) or --dir DIR (a cache "
            "directory), not both."
            if args.file is not None
            else "cache export needs FILE (one TuningResult file) or --dir DIR (a cache directory)."
        )
    every = store.all_entries()
    kernels = sorted({e.kernel for e in every})
    unknown = [k for k in dict.fromkeys(args.kernel) if k not in kernels]
    if unknown:
        names = ", ".join(repr(k) for k in unknown)
        raise CacheError(
            f"no entries for kernel {names} in {store.root}; nothing was written. "
            + (
                f"Its kernels: {', '.join(kernels)}."
                if kernels
                else "The cache holds no entries: tune first (JAXTUNE_MODE=tune)."
            )
        )
    entries = [e for e in every if not args.kernel or e.kernel in args.kernel]
    if args.no_measurements:
        entries = [dataclasses.replace(e, measurements=()) for e in entries]
    if args.dir is not None:
        path = _output_dir(args.dir)
        _write_shipped(path, entries)
        layout = "directory"
    else:
        path = _results.save(output_file(args.file), entries)
        layout = "file"
    out(
        {
            "path": str(path),
            "layout": layout,
            "entries": len(entries),
            "kernels": sorted({e.kernel for e in entries}),
            "measurements": not args.no_measurements,
        },
        f"exported {_count(len(entries), 'entry', 'entries')} to {path}",
    )


def _when(created: float) -> str:
    if not created:
        return "at an unknown time"
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(created))


def _conflict(c: _cache.Conflict) -> dict[str, Any]:
    e = c.incoming
    return {
        **_sync.named(e),
        "file_created": e.created,
        "cache_created": None if c.current is None else c.current.created,
    }


def _conflict_line(c: _cache.Conflict) -> str:
    e = c.incoming
    what = f"{_title(e)} on {e.device_kind}, key {e.key}"
    if c.current is None:
        return f"  replaced {what}: the cache's entry was malformed"
    mine, theirs = _when(c.current.created), _when(e.created)
    if c.kept:
        return (
            f"  kept {what}: the cache's entry, tuned {mine}, is newer than the file's, "
            f"tuned {theirs}"
        )
    older = (
        " (the file's is older; --keep-newer keeps the newer)"
        if e.created < c.current.created
        else ""
    )
    return (
        f"  replaced {what}: the cache's entry, tuned {mine}, by the file's, tuned {theirs}{older}"
    )


def _import(args: argparse.Namespace, store: _cache.CacheStore, out: Out) -> None:
    fresh = StaleJudge.of(args)
    entries = _results.load(args.file)
    merged = store.merge(entries, keep_newer=args.keep_newer)
    replaced, kept = merged.replaced, merged.kept
    # What the cache holds now from the file, and will not use: tuned for other code here,
    # or with another toolchain.
    left = {_results.identity(c.incoming) for c in kept}
    stale = [
        (e, reasons)
        for e in entries
        if _results.identity(e) not in left and (reasons := fresh.reasons(e))
    ]
    text = (
        f"imported {_count(len(entries), 'entry', 'entries')} into {store.root}: "
        f"{merged.new} new, {merged.unchanged} unchanged, {len(replaced)} replaced, "
        f"{len(kept)} kept" + (f", {len(stale)} stale" if stale else "")
    )
    out(
        {
            "path": str(store.root),
            "file": str(args.file),
            "entries": len(entries),
            "new": merged.new,
            "unchanged": merged.unchanged,
            "replaced": [_conflict(c) for c in replaced],
            "kept": [_conflict(c) for c in kept],
            "stale": [{**_sync.named(e), "stale_reasons": labels(reasons)} for e, reasons in stale],
        },
        "\n".join(
            [
                text,
                *(_conflict_line(c) for c in merged.conflicts),
                *(_stale_line(e, reasons) for e, reasons in stale),
            ]
        ),
    )


def _stale_line(e: Entry, reasons: list[StaleReason]) -> str:
    what = f"{_title(e)} on {e.device_kind}, key {e.key}"
    why = "; ".join(means(r) for r in reasons)
    return (
        f"  stale    {what}: {', '.join(labels(reasons))} ({why}; re-tune it: JAXTUNE_MODE=tune "
        "or `jaxtune tune -- python prog.py`)"
    )


def _merge(args: argparse.Namespace, store: _cache.CacheStore, out: Out) -> None:
    merged: list[Entry] = []
    for f in args.files:
        merged.extend(_results.load(f))
    unique = {_results.identity(e): e for e in merged}
    _results.save(output_file(args.output), unique.values())
    out(
        {"path": str(args.output), "entries": len(unique), "files": len(args.files)},
        f"merged {_count(len(args.files), 'file', 'files')} into {args.output} "
        f"({_count(len(unique), 'entry', 'entries')})",
    )


def _prune(args: argparse.Namespace, store: _cache.CacheStore, out: Out) -> None:
    if not (args.stale or args.kernel):
        raise CacheError(
            "prune needs --stale and/or --kernel KERNEL; `jaxtune cache clear` removes everything."
        )

    fresh = StaleJudge.of(args)

    def doomed(e: Entry) -> bool:
        return (not args.stale or bool(fresh.reasons(e))) and (
            not args.kernel or e.kernel == args.kernel
        )

    dropped = store.remove(lambda e: not doomed(e))
    out({"dropped": dropped}, f"dropped {_count(dropped, 'entry', 'entries')}")


def _clear(args: argparse.Namespace, store: _cache.CacheStore, out: Out) -> None:
    dropped = store.clear()
    compiled = _clear_compiled(store.root / XLA_DIR)
    also = f", and {compiled / 2**20:.1f} MiB of compiled programs" if compiled else ""
    out(
        {"dropped": dropped, "compiled_bytes": compiled},
        f"removed {_count(dropped, 'entry', 'entries')}{also} from {store.root}",
    )


def _clear_compiled(folder: pathlib.Path) -> int:
    """Removes the sweeps' compilation cache jaxtune keeps in ``folder`` (``xla/`` under
    the cache directory); returns the bytes its files held. A folder named by
    ``JAXTUNE_COMPILE_CACHE`` or the user's own JAX cache is never touched."""
    if folder.is_symlink() or not folder.is_dir():
        return 0
    size = sum(f.stat().st_size for f in folder.rglob("*") if f.is_file() and not f.is_symlink())
    shutil.rmtree(folder, ignore_errors=True)
    return size


def _write_shipped(path: pathlib.Path, entries: list[Entry]) -> None:
    """Writes ``entries`` into the cache directory ``path`` as a library ships it: without
    the ``.lock`` files the writes took (a packaged cache is never written, so never
    locked), keeping those that were there before."""
    before = set(path.glob("*/*.msgpack.lock"))
    _cache.CacheStore(path).write(entries)
    for lock in set(path.glob("*/*.msgpack.lock")) - before:
        lock.unlink(missing_ok=True)


def _output_dir(name: pathlib.Path) -> pathlib.Path:
    """``name`` as a cache directory to write into, made when missing.

    Raises:
        CacheError: it is a file (or lies below one).
    """
    try:
        name.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        raise CacheError(
            f"cannot write a cache directory at {name}: it or a folder above it is a file; "
            "give a directory."
        ) from None
    return name


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


def _check(args: argparse.Namespace, store: _cache.CacheStore, out: Out) -> int:
    from . import tune as _tune

    command = _tune.program(args, "cache check")
    _settings.settings()  # a bad JAXTUNE_* value: said now, not once the program ran
    recording, status = _tune.record_program(
        command, full=args.full, settle=args.settle, verb="cache check", json=args.json
    )
    records, stopped = recording.calls, recording.stopped
    current, missing, stale = [], [], []
    again = False  # a call's entry is stale for its toolchain: only --retune re-tunes it
    for r in records:
        row = {"kernel": r.kernel, "key": r.key, "device_kind": r.device_kind, "source": r.source}
        why = r.stale
        wrong = wrong_pass(r.entry_timing, r.timing)
        if not why and wrong is not None:
            why = wrong.text
        if why:
            stale.append({**row, "reason": why})
            again = again or recorded_reason(r) is StaleReason.TOOLCHAIN
        elif r.source == "default":
            missing.append(row)
        else:
            current.append(row)
    failed = status != 0 and not stopped
    doc = {
        "recorded": len(records),
        "current": current,
        "missing": missing,
        "stale": stale,
        "program_status": status,
        "cache": str(store.root),
    }
    lines = [
        f"recorded {_count(len(records), 'autotuned call', 'autotuned calls')}: "
        f"{len(current)} current, {len(missing)} missing, {len(stale)} stale"
    ]
    if failed:
        lines.insert(0, f"the program {_tune.exit_text(status)}")
    lines += [f"  missing {m['kernel']} {m['key']} on {m['device_kind']}" for m in missing]
    lines += [
        f"  stale   {m['kernel']} {m['key']} on {m['device_kind']}: {m['reason']}" for m in stale
    ]
    if missing or stale:
        given = args.program[1:] if args.program[:1] == ["--"] else args.program
        flags = ["--retune"] if again else []
        # The same recording as this check: what it saw, the tune sees.
        flags += ["--full"] if args.full else []
        flags += [f"--settle {args.settle:g}"] if args.settle is not None else []
        lines.append(f"tune them: jaxtune tune {' '.join([*flags, '--'])} {' '.join(given)}")
    out(doc, "\n".join(lines))
    if failed:
        return status if status > 0 else 1
    return 1 if missing or stale else 0


_ACTIONS: dict[str, Callable[[argparse.Namespace, _cache.CacheStore, Out], int | None]] = {
    "path": _path,
    "list": _list,
    "show": _show_action,
    "export": _export,
    "import": _import,
    "merge": _merge,
    "prune": _prune,
    "clear": _clear,
    "check": _check,
}
_ACTIONS.update(_sync.ACTIONS)
