"""LLO analysis of a TPU trace (``jaxtune report --llo``, ``jaxtune profile --llo``,
``profile(llo=True)``), by xprof's embedded analysis.

The ``xprof`` wheel on PyPI (the ``jaxtune[xprof]`` extra) ships the analysis compiled in
(``xprof.convert._pywrap_profiler_plugin.built_with_embedded()``). ``analyze_llo(path, "")``
answers ``"success": true`` with ``total_instructions``, ``unique_registers``, an
``opcode_histogram`` and one entry per LLO module (``modules``: ``kernel_name``,
``hlo_instruction_name``, its own totals and source map) when the trace holds LLO data (an
``llo_proto`` stat on its ``/host:metadata`` plane); ``get_llo_static_analysis_json(path,
mode, hlo_op, 0)`` answers ``{"status": "OK", "semantics": "static_modelled_schedule",
"mode": ..., "data": {...}}`` for the modes :data:`STATIC_MODES` read (``list_ops`` names
the kernels). Every figure there is a modelled static schedule, not a measurement.

The analysis runs in a child process, bounded in time (:data:`LLO_TIMEOUT_S`), so a crash
or hang there costs only the analysis. Where it cannot succeed, :func:`analyze` says why
and what to do, in one line; :mod:`.llo_figures` turns a successful answer into figures
per kernel. xprof is handed the profiled programs' LLO modules alone
(:func:`scoped_trace`), and each file is loaded once for all its questions; the slot fill
over every bundle is read from the trace here (:mod:`.llo_bundles`), since xprof lists
only a kernel's first 30 bundles.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time
from collections.abc import Collection, Iterable, Mapping
from typing import Any, TypeVar

from .._core import flags as _flags
from .._core import typed
from .._core.xspace import schema
from .._core.xspace import xplane as _xplane
from .._core.xspace.tracefile import find_trace
from .events import device_plane, program_ids
from .llo_bundles import BundleSlots, of_modules
from .llo_figures import STATIC_MODES, Scope, summary

__all__ = [
    "LLO_TIMEOUT_S",
    "MAX_KERNELS",
    "NO_LLO_DATA",
    "TPU_ONLY",
    "XPROF_INSTALL",
    "analyze",
    "attach",
    "has_llo_data",
    "scope_of",
    "scoped_trace",
    "xprof_available",
]

#: How long the child running xprof's analysis may take, all kernels together.
LLO_TIMEOUT_S = 300

#: At most this many of the report's kernels get xprof's static analyses (spills, register
#: pressure, ...). The profiled programs' other LLO modules (XLA's fusions) are shown with
#: ``analyze_llo``'s figures and their slot fill alone: each static analysis costs xprof a
#: pass over the trace's LLO modules, and a training step has hundreds of fusions.
MAX_KERNELS = 16

#: How to get the analysis.
XPROF_INSTALL = "pip install 'jaxtune[xprof]' (the xprof wheel from PyPI, which embeds it)"

TPU_ONLY = "LLO analysis is TPU-only: this is a {platform} trace, which holds no LLO data"

NO_LLO_DATA = (
    "the trace holds no LLO data (no llo_proto stat on its /host:metadata plane): capture "
    f"with LIBTPU_INIT_ARGS=--{_flags.LLO_DEBUG_INFO}=true set before `import jax` (jaxtune "
    "profile and @jaxtune.profiled set it), on libtpu 0.0.42 or newer"
)

# Runs under the interpreter that has xprof (maybe not this one), so it imports nothing of
# jaxtune's; it prints one JSON line: xprof's answers, as they came, and how long each step
# took. Given the profiled programs' LLO modules (``<program>(<n>)::<HLO op>``, the report's
# kernels first), it asks only about them: xprof takes one name per call and matches it as
# a substring of module names (analyze_llo: every module whose name holds it; the static
# analyses: one such module), so analyze_llo is asked once per program by its
# ``<program>(<n>)::`` prefix (the modules it answers kept by that prefix), and the static
# analyses by whole module name, an answer for another module (a name that holds this one)
# refused.
# xprof's Python functions each load the whole trace again (CreateLloAnalysis on the path,
# then free it): on a big trace that load is nearly all the cost, paid once per call. Where
# the plugin exposes its library (the 2.24 wheel's ``_lib``), each file is loaded once and
# every question asked of its one handle; otherwise the functions are called as they are.
# The static analyses may be asked of another file (the report's kernels alone, argv[5]).
_CHILD = """
import json, sys, time
began = time.perf_counter()
try:
    from xprof.convert import _pywrap_profiler_plugin as plugin
except Exception as e:
    print(json.dumps({"import_error": f"{type(e).__name__}: {e}"})); sys.exit()
path, modes, limit = sys.argv[1], sys.argv[2].split(","), int(sys.argv[3])
wanted = json.loads(sys.argv[4]) if len(sys.argv) > 4 else None
static_path = sys.argv[5] if len(sys.argv) > 5 else path
seconds = {"import": time.perf_counter() - began, "load": 0.0, "analyze": 0.0, "static": 0.0}
calls = {"load": 0, "analyze": 0, "static": 0}
lib = getattr(plugin, "_lib", None)
names = ("CreateLloAnalysis", "GetLloAnalysisJson", "GetLloStaticAnalysisJson", "FreeLloAnalysis")
shared = lib is not None and all(hasattr(lib, n) for n in names)
handles = {}
def timed(what, fn, *args):
    t = time.perf_counter()
    try:
        return fn(*args)
    finally:
        seconds[what] += time.perf_counter() - t
        calls[what] += 1
def loaded(file):
    if file not in handles:
        handles[file] = timed("load", lib.CreateLloAnalysis, file.encode()) or 0
    return handles[file]
def static_json(mode, op):
    if not shared:
        return timed("static", plugin.get_llo_static_analysis_json, static_path, mode, op, 0)
    handle = loaded(static_path)
    if not handle:
        return json.dumps({"status": "ERROR", "mode": mode,
                           "error": "Could not load XSpace or no LLO modules found."})
    got = timed("static", lib.GetLloStaticAnalysisJson, handle, mode.encode(), op.encode(), 0)
    if not got:
        return json.dumps({"status": "ERROR", "mode": mode,
                           "error": "Failed to produce static analysis JSON."})
    return got.decode()
def static(mode, op):
    try:
        got = json.loads(static_json(mode, op))
    except Exception as e:
        return {"status": "ERROR", "mode": mode, "error": f"{type(e).__name__}: {e}"}
    asked = op.partition("::")[2] or op
    named = (got.get("data") or {}).get("hlo_instruction_name") if isinstance(got, dict) else None
    if named is not None and named != asked:
        return {"status": "ERROR", "mode": mode, "error": f"xprof answered for {named}"}
    return got
def analyze(kernel):
    if not shared:
        answer = timed("analyze", plugin.analyze_llo, path, kernel)
        return json.loads(answer) if isinstance(answer, (bytes, str)) else answer
    handle = loaded(path)
    if not handle:
        return {"success": False}
    got = timed("analyze", lib.GetLloAnalysisJson, handle, kernel.encode() or None)
    return json.loads(got.decode()) if got else {"success": False}
def scoped(modules):
    prefixes = sorted({m.partition("::")[0] + "::" for m in modules})
    out = {"success": False, "scoped": prefixes, "modules": [], "opcode_histogram": {},
           "execution_unit_summary": {}, "unique_registers": None}
    exact, failed = True, None
    for prefix in prefixes:
        answer = analyze(prefix)
        if not (isinstance(answer, dict) and answer.get("success")):
            failed = answer
            continue
        theirs = [m for m in answer.get("modules") or [] if isinstance(m, dict)]
        mine = [m for m in theirs if str(m.get("kernel_name", "")).startswith(prefix)]
        exact = exact and len(mine) == len(theirs)
        out["modules"] += mine
        for key in ("opcode_histogram", "execution_unit_summary"):
            for k, v in (answer.get(key) or {}).items():
                out[key][k] = out[key].get(k, 0) + v
        if len(prefixes) == 1:
            out["unique_registers"] = answer.get("unique_registers")
    if not out["modules"]:
        return failed if failed is not None else {"success": False}
    if not exact:  # a prefix matched inside another program's name: totals of modules only
        out["opcode_histogram"], out["execution_unit_summary"] = {}, {}
        out["unique_registers"] = None
    counts = [m.get("total_instructions") or 0 for m in out["modules"]]
    out.update(success=True, total_modules=len(counts), total_instructions=sum(counts))
    return out
embedded = bool(getattr(plugin, "built_with_embedded", lambda: False)())
out = {"embedded": embedded, "answer": None, "static": {}, "shared_load": shared}
if embedded and wanted is not None:
    out["answer"] = answer = scoped(wanted)
    if answer.get("success"):
        out["static"] = {
            m.partition("::")[2]: {mode: static(mode, m) for mode in modes} for m in wanted[:limit]
        }
elif embedded:
    out["answer"] = answer = analyze("")
    if isinstance(answer, dict) and answer.get("success"):
        listed = static("list_ops", "")
        out["list_ops"] = listed
        ops = (listed.get("data") or {}).get("ops") or [] if listed.get("status") == "OK" else []
        out["static"] = {op: {m: static(m, op) for m in modes} for op in ops[:limit]}
for handle in handles.values():
    if handle:
        lib.FreeLloAnalysis(handle)
out["seconds"], out["calls"] = seconds, calls
print(json.dumps(out, default=str))
"""


def has_llo_data(space: _xplane.Space) -> bool:
    """Whether the trace carries LLO data: an ``llo_proto`` stat on ``/host:metadata``."""
    meta = space.plane("/host:metadata")
    if meta is None:
        return False
    return "llo_proto" in meta.stats or any(
        "llo_proto" in m.stats for m in meta.event_metadata.values()
    )


def scope_of(space: _xplane.Space) -> Scope | None:
    """The LLO modules of the programs that ran on the trace's device plane (its
    ``/host:metadata`` events named ``<module>(<n>)::<HLO op>``): LLO debug info registers
    every program the process compiled, random-number initialisers included, and only the
    profiled ones belong in its report. ``None`` when the trace names no such module."""
    plane = device_plane(space)
    meta = space.plane("/host:metadata")
    if plane is None or meta is None:
        return None
    ran = program_ids(plane)
    programs = {
        name.split("(", 1)[0] for pid, name, _ in space.hlo_programs() if pid in ran and name
    }
    ops: set[str] = set()
    modules: set[str] = set()
    others = 0
    for m in meta.event_metadata.values():
        if "llo_proto" not in m.stats or "::" not in m.name:
            continue
        module, _, op = m.name.partition("::")
        if module.split("(", 1)[0] in programs:
            ops.add(op)
            modules.add(m.name)
        else:
            others += 1
    if not ops and not others:
        return None
    return Scope(
        programs=tuple(sorted(programs)),
        ops=frozenset(ops),
        modules=tuple(sorted(modules)),
        others=others,
    )


def xprof_available(python: str | None = None) -> bool:
    """Whether an xprof can be asked: ``python`` given, or xprof importable here."""
    return python is not None or importlib.util.find_spec("xprof") is not None


def _failed(why: str, fix: str = "") -> dict[str, Any]:
    return {"success": False, "why": why, "fix": fix, "line": f"{why}; {fix}" if fix else why}


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class _Reply:
    """The JSON line the xprof child prints (:data:`_CHILD`, which cannot import jaxtune
    and so writes it by hand), read by :mod:`jaxtune._core.typed`: why xprof could not be
    imported (``import_error``), or whether it embeds the analysis, its ``analyze_llo``
    answer and its static analyses by op and mode (xprof's own maps, as they came:
    :func:`.llo_figures.summary` reads them), the ``list_ops`` answer asked of a whole
    trace, whether each file was loaded once (``shared_load``), and the seconds and calls
    each step took."""

    import_error: str = ""
    embedded: bool = False
    answer: Any = None
    static: Mapping[str, Mapping[str, Any]] = dataclasses.field(default_factory=dict)
    list_ops: Any = None
    shared_load: bool = False
    seconds: Mapping[str, float] = dataclasses.field(default_factory=dict)
    calls: Mapping[str, int] = dataclasses.field(default_factory=dict)


def _ask_xprof(
    trace_file: str,
    python: str | None,
    wanted: list[str] | None = None,
    limit: int = MAX_KERNELS,
    static_file: str | None = None,
) -> _Reply | dict[str, Any]:
    """xprof's answers from the child (when ``wanted`` is given, of those LLO modules
    only, the static analyses for the first ``limit`` of them, asked of ``static_file``
    when given), or the failure (:func:`_failed`) that :func:`analyze` returns."""
    proc = None
    argv = [python or sys.executable, "-c", _CHILD, trace_file, ",".join(STATIC_MODES)]
    argv += [str(limit), *([json.dumps(wanted)] if wanted is not None else [])]
    if wanted is not None and static_file is not None:
        argv.append(static_file)
    try:
        proc = subprocess.run(
            argv,
            capture_output=True,
            text=True,
            timeout=LLO_TIMEOUT_S,
        )
        line = proc.stdout.strip().splitlines()[-1]
        reply: _Reply = typed.decode(_Reply, json.loads(line), "reply")
        return reply
    except subprocess.TimeoutExpired:
        return _failed(f"xprof's LLO analysis took over {LLO_TIMEOUT_S} s and was stopped")
    except typed.MismatchError as e:
        return _failed(f"xprof's LLO analysis answered in another shape ({e})")
    except (OSError, ValueError, IndexError):
        tail = proc.stderr.strip()[-200:] if proc is not None else "no child"
        return _failed(f"xprof's LLO analysis ended without an answer ({tail})")


def analyze(
    trace_file: str | os.PathLike[str],
    platform: str,
    llo_data: bool,
    *,
    python: str | None = None,
    kernels: Mapping[str, str] | None = None,
    scope: Scope | None = None,
    slots: Mapping[str, BundleSlots | str] | None = None,
    static_file: str | os.PathLike[str] | None = None,
    pallas: Collection[str] | None = None,
    autotuned: Mapping[str, str] | None = None,
    device_us: Mapping[str, float] | None = None,
) -> dict[str, Any]:
    """xprof's LLO analysis of the trace, summarized per kernel (:func:`.llo_figures.summary`);
    or ``success: False`` with ``why``, ``fix`` and the one ``line`` a report prints.

    ``python``: an interpreter with xprof (default: this one); ``kernels``: jaxtune's kernel
    name by HLO op name, so each LLO module is shown under the kernel the report names;
    ``scope``: the LLO modules of the profiled programs (:func:`scope_of`), the only ones
    analysed and counted (every module of the trace when ``None``); ``slots``: each HLO
    op's bundle slots read from the trace (:func:`.llo_bundles.of_modules`);
    ``static_file``: a trace holding the report's kernels' LLO modules, which the static
    analyses are asked of (the whole ``trace_file`` when ``None``); ``pallas``,
    ``autotuned``, ``device_us``: the HLO ops that are Pallas kernels, the autotuned
    kernel of each op and each op's device time, which order and name the modules
    (:func:`.llo_figures.summary`). A successful
    answer's ``seconds`` says where the time went: xprof's import, its loads of the trace,
    ``analyze_llo`` and the static analyses, and the child as a whole.
    """
    if platform != "tpu":
        return _failed(TPU_ONLY.format(platform=platform), "capture the trace on a TPU")
    if not xprof_available(python):
        return _failed("LLO analysis needs xprof, which is not installed", XPROF_INSTALL)
    if scope is not None and not scope.modules:
        return _failed(
            f"the trace's {scope.others} LLO modules are all of programs other than "
            f"{', '.join(scope.programs) or 'the profiled ones'}, which have none",
            f"capture with LIBTPU_INIT_ARGS=--{_flags.LLO_DEBUG_INFO}=true set before "
            "`import jax`, so every program is compiled with it",
        )
    wanted = None
    limit = MAX_KERNELS
    if scope is not None:
        # The report's kernels first: they alone (MAX_KERNELS at most) get the static analyses.
        wanted = sorted(
            scope.modules,
            key=lambda m: (m.partition("::")[2] not in (kernels or {}), m.partition("::")[2], m),
        )
        mine = sum(1 for m in wanted if m.partition("::")[2] in (kernels or {}))
        limit = min(MAX_KERNELS, mine)
    began = time.perf_counter()
    statics = os.fspath(static_file) if static_file is not None else None
    got = _ask_xprof(os.fspath(trace_file), python, wanted, limit, statics)
    child_s = time.perf_counter() - began
    if not isinstance(got, _Reply):
        return got
    if got.import_error:
        return _failed(f"xprof cannot be imported ({got.import_error})", XPROF_INSTALL)
    if not got.embedded:
        return _failed(
            "this xprof lacks the embedded LLO analysis (LLO_ANALYSIS_UNSUPPORTED_IN_OSS: "
            "built from source)",
            XPROF_INSTALL,
        )
    answer = got.answer
    if isinstance(answer, dict) and answer.get("success"):
        out = summary(
            answer,
            dict(got.static),
            kernels or {},
            scope,
            slots,
            pallas=pallas,
            autotuned=autotuned,
            device_us=device_us,
        )
        out["seconds"] = {**got.seconds, "child": child_s}
        out["xprof_calls"] = dict(got.calls)
        return out
    if not llo_data:
        return {**_failed(NO_LLO_DATA), "answer": answer}
    error = answer.get("error") if isinstance(answer, dict) else None
    return {
        **_failed(f"xprof's LLO analysis did not succeed ({error or answer})"),
        "answer": answer,
    }


P = TypeVar("P")


def scoped_trace(space: _xplane.Space, modules: Iterable[str]) -> bytes:
    """A serialized XSpace holding only the named LLO modules of ``space`` (its
    ``/host:metadata`` events with an ``llo_proto``): what xprof is given instead of the
    whole trace. xprof loads every plane and LLO module of the file it is handed and walks
    all of its modules for each static analysis, so its cost follows the file, not the
    question (on a 182 MB trace, 7.5 s to load and 3 s a static analysis); its answers on
    this file are those it gives on the whole trace for these modules."""
    meta = space.plane("/host:metadata")
    plane = schema.PlaneIndex(id=meta.id if meta else 0, name=b"/host:metadata")
    stat_id = 1
    plane.stat_metadata[stat_id].id = stat_id
    plane.stat_metadata[stat_id].name = b"llo_proto"
    wanted = set(modules)
    for key, m in (meta.event_metadata if meta else {}).items():
        proto = m.stats.get("llo_proto")
        if m.name in wanted and isinstance(proto, bytes):
            event = plane.event_metadata[key]
            event.id, event.name = m.id, m.name.encode()
            event.stats.add(metadata_id=stat_id, bytes_value=proto)
    return bytes(schema.SpaceIndex(planes=[plane.SerializeToString()]).SerializeToString())


def _weighing(
    kernels: Iterable[Any], ops: Iterable[Any]
) -> tuple[set[str], dict[str, str], dict[str, float]]:
    """From a profile's kernel and op rows (:class:`~.attribution.KernelStat`): the HLO
    ops that are Pallas kernels (Mosaic custom calls), the autotuned kernel each op
    belongs to (its row's name, else its ``kernel_id``), and each op's device time over
    the trace (summed over programs that share an op name, as the LLO modules are keyed
    by op name alone)."""
    kernels = list(kernels)
    autotuned = {k.kernel_id: k.name for k in kernels if k.kind == "autotuned" and k.kernel_id}
    pallas = {k.hlo_op for k in kernels if k.kind == "pallas" and k.hlo_op}
    owners = {
        k.hlo_op: autotuned.get(k.kernel_id, k.kernel_id)
        for k in kernels
        if k.hlo_op and k.kernel_id
    }
    device_us: dict[str, float] = {}
    for o in ops:
        if o.hlo_op:
            device_us[o.hlo_op] = device_us.get(o.hlo_op, 0.0) + o.total_us
    for k in kernels:
        if k.hlo_op and (k.kind == "pallas" or k.hlo_op not in device_us):
            device_us[k.hlo_op] = k.total_us
    return pallas, owners, device_us


def attach(
    profile: P,
    path: str | os.PathLike[str],
    *,
    python: str | None = None,
    space: _xplane.Space | None = None,
) -> P:
    """``profile`` (a :class:`~jaxtune.Profile`) with its ``llo`` section: xprof's analysis
    of the trace at ``path`` (a file or a capture's directory), or the line saying why
    there is none. Off TPU no child runs. Where the trace names the profiled programs,
    xprof is handed their LLO modules alone (:func:`scoped_trace`), never the whole trace,
    and the static analyses the report's kernels' modules alone. ``space``: the trace at
    ``path`` as the report read it, so that it is not read twice."""
    platform = getattr(profile, "platform", "")
    llo_data = False
    trace: os.PathLike[str] | str = path
    if platform == "tpu":
        trace = find_trace(path)
    scope = None
    slots: dict[str, BundleSlots | str] = {}
    scoped: bytes | None = None
    kernel_modules: bytes | None = None
    stats = getattr(profile, "kernels", ())
    names = {k.hlo_op: k.name for k in stats if k.hlo_op}
    pallas, owners, device_us = _weighing(stats, getattr(profile, "ops", ()))
    began = time.perf_counter()
    if platform == "tpu":
        if space is None:
            space = _xplane.load(trace)
        llo_data = has_llo_data(space)
        scope = scope_of(space)
        read = of_modules(space, scope.modules if scope is not None else None)
        slots = {name.partition("::")[2] or name: got for name, got in read.items()}
        if scope is not None and scope.modules:
            scoped = scoped_trace(space, scope.modules)
            mine = [m for m in scope.modules if m.partition("::")[2] in names]
            if mine and len(mine) < len(scope.modules):
                kernel_modules = scoped_trace(space, mine)
        del space
    read_s = time.perf_counter() - began
    if platform == "tpu" and not llo_data and xprof_available(python):
        # Nothing for xprof to read: no child is started to hear it say so.
        return dataclasses.replace(profile, llo=_failed(NO_LLO_DATA))  # type: ignore[type-var]
    with tempfile.TemporaryDirectory(prefix="jaxtune-llo-") as tmp:
        static_file = None
        if scoped is not None:
            trace = pathlib.Path(tmp) / "llo.xplane.pb"
            trace.write_bytes(scoped)
        if kernel_modules is not None:
            static_file = pathlib.Path(tmp) / "kernels.xplane.pb"
            static_file.write_bytes(kernel_modules)
        got = analyze(
            trace,
            platform,
            llo_data,
            python=python,
            kernels=names,
            scope=scope,
            slots=slots,
            static_file=static_file,
            pallas=pallas,
            autotuned=owners,
            device_us=device_us,
        )
    if isinstance(got.get("seconds"), dict):
        got["seconds"]["read"] = read_s
    return dataclasses.replace(profile, llo=got)  # type: ignore[type-var]
