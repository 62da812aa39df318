"""LLO analysis of a TPU trace (``jaxtune report --llo``), by xprof's embedded analysis.

The ``xprof`` wheel on PyPI (the ``jaxtune[xprof]`` extra) ships the analysis compiled in
(``xprof.convert._pywrap_profiler_plugin.built_with_embedded()``); ``analyze_llo(path,
kernel="")`` answers ``"success": true`` with ``total_instructions``, ``unique_registers``,
an opcode histogram and a per-kernel source map when the trace holds LLO data (an
``llo_proto`` stat on its ``/host:metadata`` plane). Its figures are a modelled static
schedule, not measurements. The analysis runs in a child process, bounded in time, so a
crash or hang there costs only the analysis. Where it cannot succeed, :func:`analyze`
says why and what to do, in one line.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from typing import Any

from .. import _flags
from . import xplane as _xplane

__all__ = ["LLO_TIMEOUT_S", "NO_LLO_DATA", "TPU_ONLY", "XPROF_INSTALL", "analyze", "has_llo_data"]

#: How long the child running xprof's analysis may take.
LLO_TIMEOUT_S = 300

#: How to get the analysis.
XPROF_INSTALL = "pip install 'jaxtune[xprof]' (the xprof wheel from PyPI, which embeds it)"

TPU_ONLY = "LLO analysis is TPU-only: this is a {platform} trace, which holds no LLO data"

NO_LLO_DATA = (
    "the trace holds no LLO data (no llo_proto stat on its /host:metadata plane): capture "
    f"with LIBTPU_INIT_ARGS=--{_flags.LLO_DEBUG_INFO}=true set before `import jax` (jaxtune "
    "profile and @jaxtune.profiled set it), on libtpu 0.0.42 or newer"
)

_CHILD = """
import json, sys
try:
    from xprof.convert import _pywrap_profiler_plugin as plugin
except Exception as e:
    print(json.dumps({"import_error": f"{type(e).__name__}: {e}"})); sys.exit()
embedded = bool(getattr(plugin, "built_with_embedded", lambda: False)())
answer = plugin.analyze_llo(sys.argv[1], "") if embedded else None
if isinstance(answer, (bytes, str)):
    answer = json.loads(answer)
print(json.dumps({"embedded": embedded, "answer": answer}, default=str))
"""


def has_llo_data(space: _xplane.Space) -> bool:
    """Whether the trace carries LLO data: an ``llo_proto`` stat on ``/host:metadata``."""
    meta = space.plane("/host:metadata")
    if meta is None:
        return False
    return "llo_proto" in meta.stats or any(
        "llo_proto" in m.stats for m in meta.event_metadata.values()
    )


def _failed(why: str, fix: str = "") -> dict[str, Any]:
    return {"success": False, "why": why, "fix": fix, "line": f"{why}; {fix}" if fix else why}


def _summary(answer: dict[str, Any]) -> dict[str, Any]:
    opcodes = answer.get("opcodes") or answer.get("opcode_histogram") or {}
    top = (
        sorted(opcodes.items(), key=lambda kv: -float(kv[1] or 0))[:10]
        if isinstance(opcodes, dict)
        else []
    )
    kernels = answer.get("kernels") or answer.get("source_map") or {}
    return {
        "success": True,
        "semantics": answer.get("semantics", "static_modelled_schedule"),
        "total_instructions": answer.get("total_instructions"),
        "unique_registers": answer.get("unique_registers"),
        "top_opcodes": [list(kv) for kv in top],
        "kernels": sorted(kernels) if isinstance(kernels, dict) else [],
        "line": (
            f"LLO analysis (modelled static schedule, not measured): "
            f"{answer.get('total_instructions')} instructions, "
            f"{answer.get('unique_registers')} registers"
        ),
    }


def analyze(
    trace_file: str | os.PathLike[str], platform: str, llo_data: bool, *, python: str | None = None
) -> dict[str, Any]:
    """xprof's LLO analysis of the trace, summarized; or ``success: False`` with ``why``,
    ``fix`` and the one ``line`` a report prints."""
    if platform != "tpu":
        return _failed(TPU_ONLY.format(platform=platform), "capture the trace on a TPU")
    if python is None and importlib.util.find_spec("xprof") is None:
        return _failed("LLO analysis needs xprof, which is not installed", XPROF_INSTALL)
    try:
        proc = subprocess.run(
            [python or sys.executable, "-c", _CHILD, os.fspath(trace_file)],
            capture_output=True,
            text=True,
            timeout=LLO_TIMEOUT_S,
        )
        got = json.loads(proc.stdout.strip().splitlines()[-1])
    except subprocess.TimeoutExpired:
        return _failed(f"xprof's LLO analysis took over {LLO_TIMEOUT_S} s and was stopped")
    except (OSError, ValueError, IndexError):
        return _failed(
            "xprof's LLO analysis ended without an answer ("
            + (proc.stderr.strip()[-200:] if "proc" in locals() else "no child")
            + ")"
        )
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
        return _summary(answer)
    if not llo_data:
        return {**_failed(NO_LLO_DATA), "answer": answer}
    error = answer.get("error") if isinstance(answer, dict) else None
    return {
        **_failed(f"xprof's LLO analysis did not succeed ({error or answer})"),
        "answer": answer,
    }
