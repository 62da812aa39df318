"""The checks behind ``jaxtune doctor``: versions, flags, the backend, xprof and the cache,
each finding a :class:`Problem` with its fix. Nothing here starts a backend in this process.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import pathlib
import re
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from typing import Any, Literal

from .._core import flags as _flags
from .._core import settings as _settings
from .._core import typed
from .._core.versions import dist_version

__all__ = [
    "TPU_FLAGS",
    "Backend",
    "BackendFailed",
    "Problem",
    "cache_problems",
    "flag_problems",
    "flags_changed_after_import",
    "probe_backend",
    "settings_problems",
    "tpu_flag_problems",
    "version_problems",
    "version_tuple",
    "xprof_state",
]

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


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Backend:
    """The backend a fresh process started (what the probe child answers)."""

    platform: str
    device_kind: str
    device_count: int
    process_count: int


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class BackendFailed:
    """Why the backend did not start in the probe child (or why its answer was none)."""

    error: str


def probe_backend(env: Mapping[str, str], timeout: float) -> Backend | BackendFailed:
    """The backend a fresh process starts under ``env``, probed in a child (``_PROBE``,
    which imports JAX alone and writes its JSON answer by hand) within ``timeout`` seconds;
    an answer of another shape is a failure that names the field."""
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
        return BackendFailed(error=f"the backend did not start within {timeout:.0f} s")
    _, marker, payload = proc.stdout.rpartition("@@jaxtune-probe@@")
    if proc.returncode != 0 or not marker:
        tail = proc.stderr.strip().splitlines()[-3:]
        return BackendFailed(
            error=f"exit status {proc.returncode}: {' | '.join(tail) or 'no output'}"
        )
    try:
        raw = json.loads(payload)
        failed = isinstance(raw, dict) and "error" in raw
        probed: Backend | BackendFailed = (
            typed.decode(BackendFailed, raw, "the probe's answer")
            if failed
            else typed.decode(Backend, raw, "the probe's answer")
        )
    except ValueError as e:  # not JSON, or a MismatchError naming the field
        return BackendFailed(error=f"the backend probe answered in another shape: {e}")
    return probed


_EMBEDDED = (
    "from xprof.convert import _pywrap_profiler_plugin as p; "
    "print(bool(getattr(p, 'built_with_embedded', lambda: False)()))"
)


@functools.cache
def embedded_llo() -> bool:
    """Whether this Python's xprof embeds the LLO analysis (asked once per process, in a
    child: importing it loads a large library)."""
    try:
        proc = subprocess.run(
            [sys.executable, "-c", _EMBEDDED], capture_output=True, text=True, timeout=60
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return proc.stdout.strip().endswith("True")


def xprof_state() -> dict[str, Any]:
    """Whether xprof is installed and has the LLO analysis (``llo``: the embedded analysis
    of the PyPI wheel, or an ``xprof`` command with LLO subcommands)."""
    exe = shutil.which("xprof")
    version = dist_version("xprof-nightly", "xprof")
    info: dict[str, Any] = {
        "installed": exe is not None or version is not None,
        "version": version,
        "path": exe,
        "llo": version is not None and embedded_llo(),
    }
    if info["llo"]:
        return info
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


def version_problems(
    python: tuple[int, ...], jax: str | None, libtpu: str | None, on_tpu: bool
) -> list[Problem]:
    """What the Python, JAX and libtpu versions cannot do (the rules in docs/doctor.md)."""
    problems = _python_problems(python, on_tpu)
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
    return problems + _jax_problems(jax, libtpu, on_tpu)


def _python_problems(python: tuple[int, ...], on_tpu: bool) -> list[Problem]:
    problems: list[Problem] = []
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
    return problems


def _jax_problems(jax: str, libtpu: str | None, on_tpu: bool) -> list[Problem]:
    problems: list[Problem] = []
    jax_v, libtpu_v = version_tuple(jax), version_tuple(libtpu)
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


def flag_problems(
    env: Mapping[str, str], jaxlib_binary: pathlib.Path | None, libtpu_binary: pathlib.Path | None
) -> list[Problem]:
    """Malformed, legacy, repeated or unknown flags in ``XLA_FLAGS`` / ``LIBTPU_INIT_ARGS``."""
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
        if _flags.custom_call_tracing_on(text):
            problems.append(_tracing_problem(var))
        problems.extend(_unknown_flags(var, report, binary))
    return problems


def _tracing_problem(var: str) -> Problem:
    return Problem(
        severity="warning",
        code="flag-custom-call-tracing",
        message=f"{var} turns on custom-call tracing (--{_flags.CUSTOM_CALL_TRACING}=true): "
        "traces grow 6-12x and the trace points change each kernel's schedule, so every "
        "program run with it is slowed and any time measured with it is wrong (jaxtune "
        "removes it from a sweep's child; a sweep in this process cannot).",
        fix=f"remove --{_flags.CUSTOM_CALL_TRACING} from {var}, and turn it on for one "
        "profile only: `jaxtune profile --custom-call-tracing -- python train.py` or "
        "jaxtune.profile(fn, *args, custom_call_tracing=True)",
    )


def _unknown_flags(
    var: str, report: _flags.FlagReport, binary: pathlib.Path | None
) -> list[Problem]:
    if binary is None or not report.flags:
        return []
    names = sorted({f.name for f in report.flags})
    known = _flags.binary_defines(names, binary)
    return [
        Problem(
            severity="error",
            code="flag-unknown",
            message=f"{var} sets --{name}, which the installed binary ({binary.name}) "
            "does not define; the backend aborts at start with 'Unknown command "
            "line flag'.",
            fix=f"remove --{name} from {var} or upgrade jax/jaxlib/libtpu",
        )
        for name in names
        if not known[name]
    ]


def settings_problems(env: Mapping[str, str]) -> tuple[dict[str, Any], list[Problem]]:
    """The settings the environment gives (JSON-ready, each with its own type), and one
    problem per bad variable: each is checked on its own, so one does not hide the others."""
    by_name = {v.name: v for v in _settings.VARIABLES}
    values, errors = _settings.describe(env)
    return values, [
        Problem(
            severity="error",
            code="setting-invalid",
            message=str(error),
            fix=f"set {name} to one of: {by_name[name].allowed} (or unset it to use the "
            f"default, {by_name[name].default}); `jaxtune doctor` checks it again",
        )
        for name, error in errors.items()
    ]


def flags_changed_after_import(env: Mapping[str, str]) -> list[Problem]:
    """A warning per flag variable changed since JAX was imported in this process."""
    return [
        Problem(
            severity="warning",
            code="flag-set-after-import",
            message=f"{var} changed after JAX was imported in this process (it was "
            f"{before!r}, it is now {now!r}); the backend reads it once, when it starts, so "
            "the change may be silently ignored.",
            fix=f"set {var} before `import jax` (in the shell, or at the very top of the "
            "script), or let jaxtune run the work in a child process (JAXTUNE_ISOLATION="
            "process, jaxtune.profile, jaxtune profile -- ...), whose flags it sets itself",
        )
        for var, before, now in _settings.changed_since_jax_import(env)
    ]


def tpu_flag_problems(
    libtpu_path: pathlib.Path | None,
) -> tuple[dict[str, bool] | None, list[Problem]]:
    """Which profiling flags the installed libtpu defines, and the problem when the one
    Pallas profiling needs is missing."""
    if libtpu_path is None:
        return None, []
    tpu_flags = _flags.binary_defines(TPU_FLAGS, libtpu_path)
    if tpu_flags[_flags.LLO_DEBUG_INFO]:
        return tpu_flags, []
    return tpu_flags, [
        Problem(
            severity="error",
            code="libtpu-lacks-flag",
            message=f"libtpu at {libtpu_path} does not define "
            f"--{_flags.LLO_DEBUG_INFO}; Pallas kernels cannot be profiled in detail.",
            fix="pip install -U 'jax[tpu]'",
        )
    ]


def cache_problems(env: Mapping[str, str]) -> tuple[dict[str, Any], list[Problem]]:
    """The state of the cache directory the environment selects, and its problem, which
    names JAXTUNE_CACHE_DIR (or says it is unset), where it points and the fix."""
    cache_dir = pathlib.Path(_settings.describe(env)[0]["cache_dir"])
    blocker = _file_in_the_way(cache_dir)
    cache = _cache_state(cache_dir)
    if cache["writable"]:
        return cache, []
    named = env.get("JAXTUNE_CACHE_DIR", "").strip()
    if named:
        chosen = f"JAXTUNE_CACHE_DIR points at {cache_dir}"
        if named != str(cache_dir):
            chosen += f" (it is set to {named!r})"
    else:
        chosen = f"the default cache directory is {cache_dir} (JAXTUNE_CACHE_DIR is unset)"
    if blocker is not None:
        what = "a file, not a directory" if blocker.is_file() else "not a directory"
        cache["error"] = (
            f"{blocker} is {what}"
            if blocker == cache_dir
            else f"{cache_dir} lies below {blocker}, which is {what}"
        )
        where = (
            f"which is {what}" if blocker == cache_dir else f"which lies below {blocker}, {what}"
        )
        move = f"move {blocker} out of the way"
        return cache, [
            Problem(
                severity="error",
                code="cache-not-a-directory",
                message=f"{chosen}, {where}: no tuned config is read from it (kernels use "
                "their defaults) and none can be saved.",
                fix=f"set JAXTUNE_CACHE_DIR to a directory (or unset it to use the default, "
                f"{_settings.default_cache_dir()}), or {move}"
                if named
                else f"{move}, or set JAXTUNE_CACHE_DIR to a directory",
            )
        ]
    return cache, [
        Problem(
            severity="error",
            code="cache-not-writable",
            message=f"{chosen}, which is not writable: {cache.get('error', 'permission denied')}",
            fix=f"give your user write access (chmod u+rwX -R {cache_dir}) or set "
            "JAXTUNE_CACHE_DIR to a writable directory",
        )
    ]


def _file_in_the_way(path: pathlib.Path) -> pathlib.Path | None:
    """``path`` or the nearest of its parents that exists when that is no directory (a
    regular file, a FIFO, a device); ``None`` when it is a directory or cannot be told."""
    for candidate in (path, *path.parents):
        try:
            info = os.stat(candidate)
        except (FileNotFoundError, NotADirectoryError):
            continue
        except OSError:
            return None
        return None if stat.S_ISDIR(info.st_mode) else candidate
    return None
