"""``jaxtune doctor``: can this toolchain profile and tune Pallas kernels, and if not, why.

The report is built without starting a backend in this process: versions come from package
metadata, flags from the environment and the installed binaries, and the backend is probed
in a short-lived child (an unknown flag in ``XLA_FLAGS`` aborts the process that starts the
backend, and on TPU the chip would stay locked by this process).
"""

from __future__ import annotations

import dataclasses
import json
import os
import platform as _platform
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from .._core import flags as _flags
from .._core import typed
from .._core.versions import toolchain
from .doctor_checks import (
    BackendFailed,
    Problem,
    cache_problems,
    flag_problems,
    flags_changed_after_import,
    probe_backend,
    settings_problems,
    tpu_flag_problems,
    version_problems,
    xprof_state,
)

__all__ = ["SCHEMA_VERSION", "collect", "exit_code", "format_text", "main"]

#: Version of the ``jaxtune doctor --json`` document; bumped on incompatible changes.
SCHEMA_VERSION = 1


def collect(
    *,
    environ: Mapping[str, str] | None = None,
    probe: bool = True,
    probe_timeout: float = 120.0,
    python_version: Sequence[int] | None = None,
    versions: Mapping[str, str | None] | None = None,
) -> dict[str, Any]:
    """Gathers the doctor report as a JSON-ready dictionary (schema in docs/doctor.md).

    ``python_version`` and ``versions`` (keys ``jax``, ``jaxlib``, ``libtpu``) replace what
    is installed; they exist so the version rules can be checked for toolchains other than
    this one.
    """
    env = dict(os.environ if environ is None else environ)
    py = tuple(python_version or sys.version_info[:3])
    found = {**toolchain(), **(versions or {})}
    settings, problems = settings_problems(env)
    if environ is None:  # only this process's own environment can have changed
        problems.extend(flags_changed_after_import(env))
    libtpu_path = _flags.find_libtpu()
    flags_found = flag_problems(env, _flags.find_jaxlib_binary(), libtpu_path)
    problems.extend(flags_found)
    backend = _backend(env, probe and found["jax"] is not None, flags_found, probe_timeout)
    problems.extend(backend.pop("problems"))
    on_tpu = backend.get("platform") == "tpu" or libtpu_path is not None
    problems[:0] = version_problems(py, found["jax"], found["libtpu"], on_tpu)
    tpu_flags, found_problems = tpu_flag_problems(libtpu_path)
    problems.extend(found_problems)
    xprof = xprof_state()
    if on_tpu and not xprof["llo"]:
        problems.append(_NO_LLO)
    cache, found_problems = cache_problems(env)
    problems.extend(found_problems)
    return {
        "schema": SCHEMA_VERSION,
        "ok": not any(p.severity == "error" for p in problems),
        "python": {"version": ".".join(map(str, py)), "executable": sys.executable},
        "platform": _platform.platform(),
        "versions": found,
        "backend": backend,
        "libtpu": None if libtpu_path is None else {"path": str(libtpu_path), "flags": tpu_flags},
        "environment": {k: env.get(k) for k in ("JAX_PLATFORMS", "XLA_FLAGS", "LIBTPU_INIT_ARGS")},
        "settings": settings,
        "cache": cache,
        "xprof": xprof,
        "problems": [dataclasses.asdict(p) for p in problems],
    }


_NO_LLO = Problem(
    severity="info",
    code="xprof-no-llo",
    message="no xprof with the embedded LLO analysis is installed; profiles will not "
    "include the LLO analysis (a modelled static schedule per kernel).",
    fix="pip install 'jaxtune[xprof]' (the xprof wheel from PyPI embeds it)",
)


def _backend(
    env: Mapping[str, str], probe: bool, flags_found: list[Problem], timeout: float
) -> dict[str, Any]:
    """The backend a fresh process starts (probed in a child), with its ``problems``."""
    if any(p.severity == "error" for p in flags_found):
        return {"probed": False, "skipped": "flag errors would abort the backend", "problems": []}
    if not probe:
        return {"probed": False, "problems": []}
    probed = probe_backend(env, timeout)
    backend: dict[str, Any] = {"probed": True, **typed.encode(probed), "problems": []}
    if isinstance(probed, BackendFailed):
        backend["problems"].append(
            Problem(
                severity="error",
                code="backend-failed",
                message=f"the JAX backend did not start: {probed.error}",
                fix="run `python -c 'import jax; print(jax.devices())'` to see the full "
                "error; check JAX_PLATFORMS and the accelerator driver",
            )
        )
    return backend


def exit_code(report: Mapping[str, Any]) -> int:
    """0 when nothing stops profiling or tuning, 1 otherwise."""
    return 0 if report["ok"] else 1


def format_text(report: Mapping[str, Any]) -> str:
    """The report for people: one aligned line per fact, then each problem with its fix."""
    v = report["versions"]
    b = report["backend"]
    if b.get("probed") and "error" not in b:
        backend = f"{b['platform']} · {b['device_kind']} x {b['device_count']}"
    else:
        backend = b.get("error") or b.get("skipped") or "not probed"
    rows = [
        ("python", report["python"]["version"]),
        ("jax", v["jax"] or "not installed"),
        ("jaxlib", v["jaxlib"] or "not installed"),
        ("libtpu", v["libtpu"] or "not installed"),
        ("backend", backend),
        ("cache", _cache_row(report["cache"])),
        (
            "xprof",
            ("installed" + (" with LLO" if report["xprof"]["llo"] else ""))
            if report["xprof"]["installed"]
            else "not installed",
        ),
    ]
    if report["libtpu"] and report["libtpu"]["flags"]:
        for name, ok in report["libtpu"]["flags"].items():
            rows.append((f"  --{name}", "defined" if ok else "MISSING"))
    for var, value in report["environment"].items():
        if value:
            rows.append((var, value))
    width = max(len(k) for k, _ in rows)
    lines = ["jaxtune doctor"] + [f"  {k.ljust(width)}  {val}" for k, val in rows]
    problems = report["problems"]
    if problems:
        lines.append("")
        for p in problems:
            lines.append(f"  [{p['severity']}] {p['message']}")
            lines.append(f"      fix: {p['fix']}")
    lines.append("")
    lines.append(
        "  all good" if report["ok"] else "  problems found: profiling or tuning would fail"
    )
    return "\n".join(lines)


def _cache_row(cache: Mapping[str, Any]) -> str:
    if cache["writable"]:
        return f"{cache['path']} (writable)"
    return f"{cache['path']} (NOT writable: {cache.get('error', 'permission denied')})"


def main(*, as_json: bool = False) -> int:
    """Prints the doctor report and returns the exit status."""
    report = collect()
    print(json.dumps(report, indent=2, sort_keys=True) if as_json else format_text(report))
    return exit_code(report)
