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
import pathlib
import platform as _platform
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from .. import _config, _flags
from .._errors import JaxtuneError
from .._versions import dist_version

__all__ = ["SCHEMA_VERSION", "Problem", "collect", "exit_code", "format_text", "main"]

#: Version of the ``jaxtune doctor --json`` document; bumped on incompatible changes.
SCHEMA_VERSION = 1

Severity = Literal["error", "warning", "info"]

TPU_FLAGS = (
    _flags.LLO_DEBUG_INFO,
    _flags.CUSTOM_CALL_TRACING,
    _flags.PERIODIC_COUNTER_SAMPLING,
    _flags.BUNDLE_INSTRUMENTATION,
)

_VENV_ADVICE = (
    "create a Python 3.12 virtual environment and install JAX there: "
    "`python3.12 -m venv ~/jax312 && ~/jax312/bin/pip install -U 'jax[tpu]' jaxtune`"
)

_PROBE = r"""
import json, sys
out = {}
try:
    import jax
    devices = jax.devices()
    out = {"platform": devices[0].platform, "device_kind": devices[0].device_kind,
           "device_count": len(devices), "process_count": jax.process_count()}
except Exception as e:
    out = {"error": f"{type(e).__name__}: {e}"}
sys.stdout.write("\n@@jaxtune-probe@@" + json.dumps(out))
"""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Problem:
    """One finding of ``jaxtune doctor``: what is wrong and how to fix it."""

    severity: Severity
    code: str
    message: str
    fix: str


def version_tuple(version: str | None) -> tuple[int, ...]:
    """``"0.10.2"`` -> ``(0, 10, 2)``; stops at the first part that is not a number."""
    parts: list[int] = []
    for part in (version or "").split("."):
        match = re.match(r"\d+", part)
        if not match:
            break
        parts.append(int(match.group()))
        if match.end() != len(part):
            break
    return tuple(parts)


def _probe_backend(env: Mapping[str, str], timeout: float) -> dict[str, Any]:
    try:
        proc = subprocess.run(
            [sys.executable, "-c", _PROBE],
            env=dict(env),
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired:
        return {"error": f"the backend did not start within {timeout:.0f} s"}
    _, marker, payload = proc.stdout.rpartition("@@jaxtune-probe@@")
    if proc.returncode != 0 or not marker:
        tail = proc.stderr.strip().splitlines()[-3:]
        return {"error": f"exit status {proc.returncode}: {' | '.join(tail) or 'no output'}"}
    result: dict[str, Any] = json.loads(payload)
    return result


def _xprof() -> dict[str, Any]:
    exe = shutil.which("xprof")
    info: dict[str, Any] = {
        "installed": exe is not None or dist_version("xprof", "xprof-nightly") is not None,
        "version": dist_version("xprof-nightly", "xprof"),
        "path": exe,
        "llo": False,
    }
    if exe:
        try:
            helptext = subprocess.run(
                [exe, "--help"], capture_output=True, text=True, timeout=20
            ).stdout
        except (OSError, subprocess.TimeoutExpired):
            helptext = ""
        info["llo"] = "llo" in helptext.lower()
    return info


def _cache_state(path: pathlib.Path) -> dict[str, Any]:
    state: dict[str, Any] = {"path": str(path), "exists": path.is_dir(), "writable": False}
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path, prefix=".doctor-"):
            pass
        state["writable"] = True
        state["exists"] = True
    except OSError as e:
        state["error"] = str(e)
    if state["exists"]:
        state["files"] = sum(1 for _ in path.glob("*/*.msgpack"))
    return state


def _version_problems(
    python: tuple[int, ...], jax: str | None, libtpu: str | None, on_tpu: bool
) -> list[Problem]:
    problems: list[Problem] = []
    jax_v, libtpu_v = version_tuple(jax), version_tuple(libtpu)
    if python[:2] == (3, 10) and on_tpu:
        problems.append(
            Problem(
                severity="error",
                code="python-3.10-tpu-vm",
                message="Python 3.10 (the default on many TPU VM images) pins JAX to 0.6.2 and "
                "libtpu to 0.0.17, which cannot register LLO debug info or trace custom calls.",
                fix=_VENV_ADVICE,
            )
        )
    elif python[:2] < (3, 11):
        problems.append(
            Problem(
                severity="error",
                code="python-too-old",
                message=f"Python {'.'.join(map(str, python))} is older than 3.11, the oldest "
                "Python jaxtune supports.",
                fix=_VENV_ADVICE.replace("'jax[tpu]'", "jax"),
            )
        )
    if jax is None:
        problems.append(
            Problem(
                severity="error",
                code="jax-missing",
                message="JAX is not installed.",
                fix="pip install -U jax (or 'jax[tpu]' / 'jax[cuda12]' for accelerators)",
            )
        )
        return problems
    if jax_v < (0, 10, 2):
        problems.append(
            Problem(
                severity="error",
                code="jax-too-old",
                message=f"JAX {jax} is older than 0.10.2: jaxtune does not support it and it "
                "cannot register LLO debug info.",
                fix="pip install -U 'jax>=0.10.2' (on a TPU VM with Python 3.10: "
                + _VENV_ADVICE
                + ")",
            )
        )
    if on_tpu and libtpu is not None and libtpu_v < (0, 0, 42):
        problems.append(
            Problem(
                severity="error",
                code="libtpu-no-llo",
                message=f"libtpu {libtpu} is older than 0.0.42 and cannot register LLO debug "
                "info, the default TPU profiling flag.",
                fix="pip install -U 'jax[tpu]'",
            )
        )
    if on_tpu and (jax_v < (0, 11) or (libtpu is not None and libtpu_v < (0, 0, 44))):
        problems.append(
            Problem(
                severity="warning",
                code="no-custom-call-tracing",
                message=f"JAX {jax} / libtpu {libtpu} cannot trace inside custom calls at run "
                "time (needs JAX >= 0.11 and libtpu >= 0.0.44); profiles will show each "
                "Pallas kernel as one block.",
                fix="pip install -U 'jax[tpu]>=0.11' on Python >= 3.12",
            )
        )
    return problems


def _flag_problems(
    env: Mapping[str, str], jaxlib_binary: pathlib.Path | None, libtpu_binary: pathlib.Path | None
) -> list[Problem]:
    problems: list[Problem] = []
    for var, binary in (("XLA_FLAGS", jaxlib_binary), ("LIBTPU_INIT_ARGS", libtpu_binary)):
        text = env.get(var, "")
        if not text.strip():
            continue
        report = _flags.inspect(text)
        for token in report.malformed:
            problems.append(
                Problem(
                    severity="error",
                    code="flag-malformed",
                    message=f"{var} has a malformed entry {token!r}.",
                    fix=f"write it as --name=value or remove it from {var}",
                )
            )
        for name in report.legacy:
            problems.append(
                Problem(
                    severity="warning",
                    code="flag-legacy",
                    message=f"{var} uses the legacy flag --{name}.",
                    fix=f"replace it with --{_flags.LEGACY_NAMES[name]} "
                    "(jaxtune rewrites it for its own children)",
                )
            )
        for name in report.contradictions:
            problems.append(
                Problem(
                    severity="warning",
                    code="flag-contradiction",
                    message=f"{var} sets --{name} more than once with different values; "
                    "only the last one counts.",
                    fix=f"keep one --{name} in {var}",
                )
            )
        for name in set(report.duplicates) - set(report.contradictions):
            problems.append(
                Problem(
                    severity="warning",
                    code="flag-duplicate",
                    message=f"{var} sets --{name} more than once.",
                    fix=f"keep one --{name} in {var}",
                )
            )
        if binary is not None and report.flags:
            names = sorted({f.name for f in report.flags})
            known = _flags.binary_defines(names, binary)
            for name in (n for n in names if not known[n]):
                problems.append(
                    Problem(
                        severity="error",
                        code="flag-unknown",
                        message=f"{var} sets --{name}, which the installed binary ({binary.name}) "
                        "does not define; the backend aborts at start with 'Unknown command "
                        "line flag'.",
                        fix=f"remove --{name} from {var} or upgrade jax/jaxlib/libtpu",
                    )
                )
    return problems


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
    found = {
        "jax": dist_version("jax"),
        "jaxlib": dist_version("jaxlib"),
        "libtpu": dist_version("libtpu", "libtpu-nightly"),
    }
    found.update(versions or {})
    problems: list[Problem] = []

    settings: dict[str, Any] = {}
    try:
        current = _config.settings(env)
        settings = {k: str(v) for k, v in dataclasses.asdict(current).items()}
    except JaxtuneError as e:
        problems.append(
            Problem(severity="error", code="setting-invalid", message=str(e), fix="see message")
        )

    libtpu_path = _flags.find_libtpu()
    jaxlib_binary = _flags.find_jaxlib_binary()
    flag_problems = _flag_problems(env, jaxlib_binary, libtpu_path)
    problems.extend(flag_problems)

    backend: dict[str, Any] = {"probed": False}
    fatal_flags = any(p.severity == "error" for p in flag_problems)
    if probe and found["jax"] is not None and not fatal_flags:
        backend = {"probed": True, **_probe_backend(env, probe_timeout)}
        if "error" in backend:
            problems.append(
                Problem(
                    severity="error",
                    code="backend-failed",
                    message=f"the JAX backend did not start: {backend['error']}",
                    fix="run `python -c 'import jax; print(jax.devices())'` to see the full "
                    "error; check JAX_PLATFORMS and the accelerator driver",
                )
            )
    elif fatal_flags:
        backend["skipped"] = "flag errors would abort the backend"

    on_tpu = backend.get("platform") == "tpu" or libtpu_path is not None
    problems[:0] = _version_problems(py, found["jax"], found["libtpu"], on_tpu)

    tpu_flags: dict[str, bool] | None = None
    if libtpu_path is not None:
        tpu_flags = _flags.binary_defines(TPU_FLAGS, libtpu_path)
        if not tpu_flags[_flags.LLO_DEBUG_INFO]:
            problems.append(
                Problem(
                    severity="error",
                    code="libtpu-lacks-flag",
                    message=f"libtpu at {libtpu_path} does not define "
                    f"--{_flags.LLO_DEBUG_INFO}; Pallas kernels cannot be profiled in detail.",
                    fix="pip install -U 'jax[tpu]'",
                )
            )

    xprof = _xprof()
    if on_tpu and not xprof["llo"]:
        problems.append(
            Problem(
                severity="info",
                code="xprof-no-llo",
                message="no xprof with LLO subcommands is installed; profiles will not include "
                "the LLO analysis.",
                fix="pip install -U xprof-nightly",
            )
        )

    try:
        cache_dir = _config.settings(env).cache_dir
    except JaxtuneError:
        cache_dir = pathlib.Path(_config.default_cache_dir())
    cache = _cache_state(cache_dir)
    if not cache["writable"]:
        problems.append(
            Problem(
                severity="error",
                code="cache-not-writable",
                message=f"the cache directory {cache_dir} is not writable: "
                f"{cache.get('error', 'permission denied')}",
                fix="set JAXTUNE_CACHE_DIR to a writable directory",
            )
        )

    return {
        "schema": SCHEMA_VERSION,
        "ok": not any(p.severity == "error" for p in problems),
        "python": {"version": ".".join(map(str, py)), "executable": sys.executable},
        "platform": _platform.platform(),
        "versions": {**found, "jaxtune": dist_version("jaxtune")},
        "backend": backend,
        "libtpu": None if libtpu_path is None else {"path": str(libtpu_path), "flags": tpu_flags},
        "environment": {k: env.get(k) for k in ("JAX_PLATFORMS", "XLA_FLAGS", "LIBTPU_INIT_ARGS")},
        "settings": settings,
        "cache": cache,
        "xprof": xprof,
        "problems": [dataclasses.asdict(p) for p in problems],
    }


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
        (
            "cache",
            f"{report['cache']['path']} "
            f"({'writable' if report['cache']['writable'] else 'NOT writable'})",
        ),
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


def main(*, as_json: bool = False) -> int:
    """Prints the doctor report and returns the exit status."""
    report = collect()
    print(json.dumps(report, indent=2, sort_keys=True) if as_json else format_text(report))
    return exit_code(report)
