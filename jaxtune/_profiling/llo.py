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
per kernel.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import subprocess
import sys
from collections.abc import Mapping
from typing import Any, TypeVar

from .._core import flags as _flags
from .._core.xspace import xplane as _xplane
from .._core.xspace.tracefile import find_trace
from .events import device_plane, program_ids
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
    "xprof_available",
]

#: How long the child running xprof's analysis may take, all kernels together.
LLO_TIMEOUT_S = 300

#: At most this many kernels get the per-kernel static analyses (each one re-reads the trace).
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
# jaxtune's; it prints one JSON line: xprof's answers, as they came.
_CHILD = """
import json, sys
try:
    from xprof.convert import _pywrap_profiler_plugin as plugin
except Exception as e:
    print(json.dumps({"import_error": f"{type(e).__name__}: {e}"})); sys.exit()
path, modes, limit = sys.argv[1], sys.argv[2].split(","), int(sys.argv[3])
wanted = json.loads(sys.argv[4]) if len(sys.argv) > 4 else None
def static(mode, op):
    try:
        return json.loads(plugin.get_llo_static_analysis_json(path, mode, op, 0))
    except Exception as e:
        return {"status": "ERROR", "mode": mode, "error": f"{type(e).__name__}: {e}"}
embedded = bool(getattr(plugin, "built_with_embedded", lambda: False)())
out = {"embedded": embedded, "answer": None, "static": {}}
if embedded:
    answer = plugin.analyze_llo(path, "")
    if isinstance(answer, (bytes, str)):
        answer = json.loads(answer)
    out["answer"] = answer
    if isinstance(answer, dict) and answer.get("success"):
        listed = static("list_ops", "")
        out["list_ops"] = listed
        ops = (listed.get("data") or {}).get("ops") or [] if listed.get("status") == "OK" else []
        if wanted is not None:
            ops = sorted((op for op in ops if op in wanted), key=wanted.index)
        out["static"] = {op: {m: static(m, op) for m in modes} for op in ops[:limit]}
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
    others = 0
    for m in meta.event_metadata.values():
        if "llo_proto" not in m.stats or "::" not in m.name:
            continue
        module, _, op = m.name.partition("::")
        if module.split("(", 1)[0] in programs:
            ops.add(op)
        else:
            others += 1
    if not ops and not others:
        return None
    return Scope(programs=tuple(sorted(programs)), ops=frozenset(ops), others=others)


def xprof_available(python: str | None = None) -> bool:
    """Whether an xprof can be asked: ``python`` given, or xprof importable here."""
    return python is not None or importlib.util.find_spec("xprof") is not None


def _failed(why: str, fix: str = "") -> dict[str, Any]:
    return {"success": False, "why": why, "fix": fix, "line": f"{why}; {fix}" if fix else why}


def _ask_xprof(
    trace_file: str, python: str | None, wanted: list[str] | None = None
) -> dict[str, Any]:
    """xprof's answers from the child (the static analyses of the ``wanted`` ops only, in
    that order, when given), or ``{"failed": summary}``."""
    proc = None
    argv = [python or sys.executable, "-c", _CHILD, trace_file, ",".join(STATIC_MODES)]
    argv += [str(MAX_KERNELS), *([json.dumps(wanted)] if wanted is not None else [])]
    try:
        proc = subprocess.run(
            argv,
            capture_output=True,
            text=True,
            timeout=LLO_TIMEOUT_S,
        )
        got = json.loads(proc.stdout.strip().splitlines()[-1])
        if not isinstance(got, dict):
            raise ValueError(got)
        return got
    except subprocess.TimeoutExpired:
        return {
            "failed": _failed(f"xprof's LLO analysis took over {LLO_TIMEOUT_S} s and was stopped")
        }
    except (OSError, ValueError, IndexError):
        tail = proc.stderr.strip()[-200:] if proc is not None else "no child"
        return {"failed": _failed(f"xprof's LLO analysis ended without an answer ({tail})")}


def analyze(
    trace_file: str | os.PathLike[str],
    platform: str,
    llo_data: bool,
    *,
    python: str | None = None,
    kernels: Mapping[str, str] | None = None,
    scope: Scope | None = None,
) -> dict[str, Any]:
    """xprof's LLO analysis of the trace, summarized per kernel (:func:`.llo_figures.summary`);
    or ``success: False`` with ``why``, ``fix`` and the one ``line`` a report prints.

    ``python``: an interpreter with xprof (default: this one); ``kernels``: jaxtune's kernel
    name by HLO op name, so each LLO module is shown under the kernel the report names;
    ``scope``: the LLO modules of the profiled programs (:func:`scope_of`), the only ones
    analysed and counted (every module of the trace when ``None``).
    """
    if platform != "tpu":
        return _failed(TPU_ONLY.format(platform=platform), "capture the trace on a TPU")
    if not xprof_available(python):
        return _failed("LLO analysis needs xprof, which is not installed", XPROF_INSTALL)
    wanted = None
    if scope is not None:
        # The report's kernels first: MAX_KERNELS of them get the static analyses.
        wanted = sorted(scope.ops, key=lambda op: (op not in (kernels or {}), op))
    got = _ask_xprof(os.fspath(trace_file), python, wanted)
    if "failed" in got:
        failed: dict[str, Any] = got["failed"]
        return failed
    if "import_error" in got:
        return _failed(f"xprof cannot be imported ({got['import_error']})", XPROF_INSTALL)
    if not got.get("embedded"):
        return _failed(
            "this xprof lacks the embedded LLO analysis (LLO_ANALYSIS_UNSUPPORTED_IN_OSS: "
            "built from source)",
            XPROF_INSTALL,
        )
    answer = got.get("answer")
    if isinstance(answer, dict) and answer.get("success"):
        return summary(answer, got.get("static") or {}, kernels or {}, scope)
    if not llo_data:
        return {**_failed(NO_LLO_DATA), "answer": answer}
    error = answer.get("error") if isinstance(answer, dict) else None
    return {
        **_failed(f"xprof's LLO analysis did not succeed ({error or answer})"),
        "answer": answer,
    }


P = TypeVar("P")


def attach(profile: P, path: str | os.PathLike[str], *, python: str | None = None) -> P:
    """``profile`` (a :class:`~jaxtune.Profile`) with its ``llo`` section: xprof's analysis
    of the trace at ``path`` (a file or a capture's directory), or the line saying why
    there is none. Off TPU no child runs."""
    platform = getattr(profile, "platform", "")
    llo_data = False
    trace: os.PathLike[str] | str = path
    if platform == "tpu":
        trace = find_trace(path)
    scope = None
    if platform == "tpu":
        space = _xplane.load(trace)
        llo_data = has_llo_data(space)
        scope = scope_of(space)
    names = {k.hlo_op: k.name for k in getattr(profile, "kernels", ()) if k.hlo_op}
    got = analyze(trace, platform, llo_data, python=python, kernels=names, scope=scope)
    return dataclasses.replace(profile, llo=got)  # type: ignore[type-var]
