"""`jaxtune doctor`: a healthy CPU report with a stable JSON schema, the version rules,
libtpu flags, and a cache directory that cannot be used, named by its variable.

Covers docs/doctor.md, "What it checks", "Exit status" and "JSON schema (version 1)".
"""

from __future__ import annotations

import json
import re

import pytest

from jaxtune import flags
from jaxtune._cli import doctor as _doctor
from jaxtune._cli import doctor_checks

TOP_KEYS = {
    "schema",
    "ok",
    "python",
    "platform",
    "versions",
    "backend",
    "libtpu",
    "environment",
    "settings",
    "cache",
    "xprof",
    "problems",
}


def codes(report):
    return [p["code"] for p in report["problems"]]


def collect(**kw):
    kw.setdefault("probe", False)
    return _doctor.collect(**kw)


def fake_libtpu(tmp_path, names):
    path = tmp_path / "libtpu.so"
    path.write_bytes(b"\x7fELF\x00" + b"".join(n.encode() + b"\x00" for n in names))
    return path


def test_healthy_cpu_report_has_stable_schema():
    report = collect()
    assert set(report) == TOP_KEYS
    assert report["schema"] == _doctor.SCHEMA_VERSION == 1
    assert report["ok"] is True and _doctor.exit_code(report) == 0
    assert report["problems"] == []
    assert report["cache"]["writable"] is True
    assert set(report["versions"]) == {"jax", "jaxlib", "libtpu", "jaxtune"}
    json.dumps(report)


@pytest.mark.parametrize(
    ("python", "versions", "tpu", "expected", "ok"),
    [
        ((3, 9, 1), {}, False, "python-too-old", False),
        ((3, 10, 12), {"jax": "0.6.2", "libtpu": "0.0.17"}, True, "python-3.10-tpu-vm", False),
        ((3, 11, 7), {"jax": "0.9.0"}, False, "jax-too-old", False),
        ((3, 11, 7), {"jax": None}, False, "jax-missing", False),
        ((3, 12, 1), {"jax": "0.10.2", "libtpu": "0.0.41"}, True, "libtpu-no-llo", False),
        ((3, 12, 1), {"jax": "0.10.2", "libtpu": "0.0.43"}, True, "no-custom-call-tracing", True),
        ((3, 12, 1), {"jax": "0.11.0", "libtpu": "0.0.43"}, True, "no-custom-call-tracing", True),
    ],
)
def test_version_rules(tmp_path, monkeypatch, python, versions, tpu, expected, ok):
    if tpu:
        monkeypatch.setenv("TPU_LIBRARY_PATH", str(fake_libtpu(tmp_path, doctor_checks.TPU_FLAGS)))
    report = collect(python_version=python, versions=versions)
    assert expected in codes(report)
    assert report["ok"] is ok
    assert _doctor.exit_code(report) == (0 if ok else 1)
    problem = next(p for p in report["problems"] if p["code"] == expected)
    assert problem["fix"]


def test_python_310_tpu_vm_points_to_312_venv(tmp_path, monkeypatch):
    monkeypatch.setenv("TPU_LIBRARY_PATH", str(fake_libtpu(tmp_path, doctor_checks.TPU_FLAGS)))
    report = collect(python_version=(3, 10, 12), versions={"jax": "0.6.2", "libtpu": "0.0.17"})
    problem = next(p for p in report["problems"] if p["code"] == "python-3.10-tpu-vm")
    assert "JAX to 0.6.2" in problem["message"] and "0.0.17" in problem["message"]
    assert "python3.12 -m venv" in problem["fix"]


def test_new_toolchain_on_tpu_is_clean(tmp_path, monkeypatch):
    monkeypatch.setenv("TPU_LIBRARY_PATH", str(fake_libtpu(tmp_path, doctor_checks.TPU_FLAGS)))
    report = collect(python_version=(3, 12, 1), versions={"jax": "0.12.0", "libtpu": "0.0.50"})
    assert [c for c in codes(report) if c != "xprof-no-llo"] == []
    assert report["ok"] is True
    assert report["libtpu"]["flags"] == {n: True for n in doctor_checks.TPU_FLAGS}


def test_libtpu_flag_table_reports_missing_flags(tmp_path, monkeypatch):
    monkeypatch.setenv(
        "TPU_LIBRARY_PATH", str(fake_libtpu(tmp_path, [flags.PERIODIC_COUNTER_SAMPLING]))
    )
    report = collect(python_version=(3, 12, 1), versions={"jax": "0.12.0", "libtpu": "0.0.50"})
    assert report["libtpu"]["flags"][flags.LLO_DEBUG_INFO] is False
    assert report["libtpu"]["flags"][flags.PERIODIC_COUNTER_SAMPLING] is True
    assert "libtpu-lacks-flag" in codes(report)
    assert report["ok"] is False


def test_flag_problems_in_environment(monkeypatch):
    monkeypatch.setenv(
        "XLA_FLAGS",
        "--xla_dump_to=/a --xla_dump_to=/b --xla_dump_hlo_as_text --xla_dump_hlo_as_text junk",
    )
    report = collect()
    found = codes(report)
    assert "flag-malformed" in found
    assert "flag-contradiction" in found
    assert "flag-duplicate" in found
    assert report["ok"] is False


def test_unknown_xla_flag_is_an_error(monkeypatch):
    monkeypatch.setenv("XLA_FLAGS", "--xla_no_such_flag_at_all=1")
    report = collect()
    problem = next(p for p in report["problems"] if p["code"] == "flag-unknown")
    assert "--xla_no_such_flag_at_all" in problem["message"]
    assert "Unknown command line flag" in problem["message"]
    assert report["ok"] is False


def test_legacy_libtpu_flag_is_a_warning_with_fix(tmp_path, monkeypatch):
    monkeypatch.setenv(
        "TPU_LIBRARY_PATH",
        str(
            fake_libtpu(tmp_path, [*doctor_checks.TPU_FLAGS, "xla_enable_custom_call_region_trace"])
        ),
    )
    monkeypatch.setenv("LIBTPU_INIT_ARGS", "--xla_enable_custom_call_region_trace=true")
    report = collect(python_version=(3, 12, 1), versions={"jax": "0.12.0", "libtpu": "0.0.50"})
    problem = next(p for p in report["problems"] if p["code"] == "flag-legacy")
    assert problem["severity"] == "warning"
    assert "--xla_xprof_enable_custom_call_tracing" in problem["fix"]


def test_cache_dir_below_a_file(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("JAXTUNE_CACHE_DIR", str(blocker / "cache"))
    report = collect()
    (problem,) = [p for p in report["problems"] if p["code"] == "cache-not-a-directory"]
    assert problem["message"].startswith(f"JAXTUNE_CACHE_DIR points at {blocker / 'cache'}, ")
    assert f"lies below {blocker}, a file, not a directory" in problem["message"]
    assert report["cache"]["writable"] is False
    assert _doctor.exit_code(report) == 1


def test_cache_dir_that_is_a_file_names_the_variable_in_both_forms(tmp_path, monkeypatch):
    """The problem names JAXTUNE_CACHE_DIR, what the user must change, not only "the cache
    directory F is not writable: [Errno 17] File exists" (docs/doctor.md, "What it
    checks")."""
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("JAXTUNE_CACHE_DIR", str(blocker))
    report = json.loads(json.dumps(collect()))
    assert _doctor.exit_code(report) == 1
    (problem,) = report["problems"]
    assert problem["severity"] == "error" and problem["code"] == "cache-not-a-directory"
    assert problem["message"].startswith(
        f"JAXTUNE_CACHE_DIR points at {blocker}, which is a file, not a directory: "
    )
    assert problem["fix"].startswith("set JAXTUNE_CACHE_DIR to a directory")
    assert f"or move {blocker} out of the way" in problem["fix"]
    assert report["cache"]["error"] == f"{blocker} is a file, not a directory"
    text = _doctor.format_text(report)
    assert f"[error] JAXTUNE_CACHE_DIR points at {blocker}, which is a file" in text
    assert "fix: set JAXTUNE_CACHE_DIR to a directory" in text
    assert blocker.read_text() == "not a directory"  # doctor leaves it as it was


def test_cli_doctor_json_names_a_cache_dir_that_is_a_file(cli, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    proc = cli("doctor", "--json", env={"JAXTUNE_CACHE_DIR": str(blocker)})
    assert proc.returncode == 1, proc.stderr
    (problem,) = [p for p in json.loads(proc.stdout)["problems"] if p["severity"] == "error"]
    assert problem["code"] == "cache-not-a-directory"
    assert f"JAXTUNE_CACHE_DIR points at {blocker}" in problem["message"]
    assert "set JAXTUNE_CACHE_DIR to a directory" in problem["fix"]


def test_the_default_cache_dir_says_the_variable_is_unset(tmp_path, monkeypatch):
    monkeypatch.delenv("JAXTUNE_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    (tmp_path / "xdg").write_text("")
    (problem,) = collect()["problems"]
    assert problem["message"].startswith(
        f"the default cache directory is {tmp_path / 'xdg' / 'jaxtune'} (JAXTUNE_CACHE_DIR is "
        f"unset), which lies below {tmp_path / 'xdg'}, a file, not a directory"
    )
    assert problem["fix"] == (
        f"move {tmp_path / 'xdg'} out of the way, or set JAXTUNE_CACHE_DIR to a directory"
    )


def test_invalid_setting_is_reported(monkeypatch):
    monkeypatch.setenv("JAXTUNE_MODE", "sometimes")
    report = collect()
    problem = next(p for p in report["problems"] if p["code"] == "setting-invalid")
    assert "JAXTUNE_MODE='sometimes'" in problem["message"]


def test_version_tuple():
    assert doctor_checks.version_tuple("0.10.2") == (0, 10, 2)
    assert doctor_checks.version_tuple("0.1.dev20250101") == (0, 1)
    assert doctor_checks.version_tuple("0.0.44rc1") == (0, 0, 44)
    assert doctor_checks.version_tuple(None) == ()


def test_text_report_lists_problems_with_fixes(monkeypatch):
    monkeypatch.setenv("JAXTUNE_TIMEOUT", "never")
    text = _doctor.format_text(collect())
    assert "[error] JAXTUNE_TIMEOUT='never' is not valid" in text
    assert "fix:" in text
    assert text.rstrip().endswith("problems found: profiling or tuning would fail")


def test_cli_doctor_json_probes_backend_and_exits_zero(cli):
    proc = cli("doctor", "--json")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert set(report) == TOP_KEYS
    assert report["backend"]["platform"] == "cpu"
    assert report["backend"]["device_count"] >= 1


def test_cli_doctor_exits_one_on_problem(cli):
    proc = cli("doctor", env={"XLA_FLAGS": "--xla_no_such_flag_at_all=1"})
    assert proc.returncode == 1
    assert "does not define" in proc.stdout
    assert "flag errors would abort the backend" in proc.stdout


def test_backend_failure_is_reported(cli):
    proc = cli("doctor", "--json", env={"JAX_PLATFORMS": "tpu"})
    report = json.loads(proc.stdout)
    assert proc.returncode == 1
    assert "backend-failed" in codes(report)


def test_bad_mode_does_not_hide_the_cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("JAXTUNE_CACHE_DIR", str(tmp_path / "c"))
    monkeypatch.setenv("JAXTUNE_MODE", "fast")
    report = collect()
    assert report["cache"]["path"] == str(tmp_path / "c")
    assert report["settings"]["cache_dir"] == str(tmp_path / "c")
    (problem,) = [p for p in report["problems"] if p["code"] == "setting-invalid"]
    assert "JAXTUNE_MODE='fast'" in problem["message"]
    assert "set JAXTUNE_MODE to one of: off, cached, tune, retune" in problem["fix"]


def test_json_settings_keep_their_types(monkeypatch):
    monkeypatch.setenv("JAXTUNE_PROFILE", "1")
    monkeypatch.setenv("JAXTUNE_TIMEOUT", "2.5")
    settings = json.loads(json.dumps(collect()))["settings"]
    assert settings["profile"] is True and settings["timeout"] == 2.5
    assert settings["verbose"] == 0 and settings["mode"] == "cached"
    import dataclasses

    from jaxtune._core import settings as _settings

    assert set(settings) == {f.name for f in dataclasses.fields(_settings.Settings)}


@pytest.mark.parametrize(
    "env",
    [
        {"JAXTUNE_MODE": "fast"},
        {"JAXTUNE_TIMEOUT": "never", "JAXTUNE_VERBOSE": "9"},
        {"XLA_FLAGS": "--xla_no_such_flag=1 broken"},
    ],
)
def test_no_fix_says_see_message(monkeypatch, env):
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    report = collect()
    assert report["problems"]
    for problem in report["problems"]:
        assert "see message" not in problem["fix"] and len(problem["fix"]) > 20


def test_flag_changed_after_jax_import_is_reported(monkeypatch):
    import os

    from jaxtune._core.settings import remember_environment

    assert "jax" in __import__("sys").modules
    # What a jaxtune name used after `import jax` does (this file alone may import JAX
    # after jaxtune, and then no jaxtune name has seen it yet).
    remember_environment()
    before = os.environ.get("LIBTPU_INIT_ARGS", "")
    monkeypatch.setenv("LIBTPU_INIT_ARGS", before + " --xla_xprof_register_llo_debug_info=true")
    report = collect()
    (problem,) = [p for p in report["problems"] if p["code"] == "flag-set-after-import"]
    assert problem["severity"] == "warning"
    assert "LIBTPU_INIT_ARGS changed after JAX was imported" in problem["message"]
    assert "before `import jax`" in problem["fix"]
    # A report about another environment (not this process's) says nothing of it.
    assert "flag-set-after-import" not in codes(collect(environ=dict(os.environ)))


@pytest.mark.parametrize(
    ("var", "value"),
    [
        ("LIBTPU_INIT_ARGS", "--xla_xprof_enable_custom_call_tracing=true"),
        ("LIBTPU_INIT_ARGS", "--xla_enable_custom_call_region_trace"),  # legacy, bare = true
        ("XLA_FLAGS", "--xla_dump_to=/tmp/d --xla_xprof_enable_custom_call_tracing=1"),
    ],
)
def test_custom_call_tracing_left_on_is_a_warning_with_the_fix(var, value):
    report = _doctor.collect(environ={var: value}, probe=False)
    (problem,) = [p for p in report["problems"] if p["code"] == "flag-custom-call-tracing"]
    assert problem["severity"] == "warning"
    assert problem["message"].startswith(f"{var} turns on custom-call tracing")
    assert "any time measured with it is wrong" in problem["message"]
    assert f"remove --xla_xprof_enable_custom_call_tracing from {var}" in problem["fix"]
    assert "jaxtune profile --custom-call-tracing" in problem["fix"]


def test_custom_call_tracing_turned_off_is_no_problem():
    value = "--xla_xprof_enable_custom_call_tracing=false"
    report = _doctor.collect(environ={"LIBTPU_INIT_ARGS": value}, probe=False)
    assert "flag-custom-call-tracing" not in codes(report)


def test_xprof_with_the_embedded_analysis_counts_as_llo(monkeypatch):
    monkeypatch.setattr(doctor_checks, "dist_version", lambda *names: "2.24.2")
    monkeypatch.setattr(doctor_checks, "embedded_llo", lambda: True)
    assert doctor_checks.xprof_state()["llo"] is True
    monkeypatch.setattr(doctor_checks, "embedded_llo", lambda: False)
    monkeypatch.setattr(doctor_checks.shutil, "which", lambda name: None)
    assert doctor_checks.xprof_state()["llo"] is False


@pytest.mark.child
@pytest.mark.parametrize(
    ("printed", "named"),
    [
        (
            '{"platform": "cpu", "device_kind": "cpu", "device_count": "1", "process_count": 1}',
            r"the probe's answer.device_count: expected int, got str '1'",
        ),
        ('{"platform": "cpu"}', r"the probe's answer.device_kind: missing"),
        ('{"error": 3}', r"the probe's answer.error: expected str, got int 3"),
        ("[1]", r"the probe's answer: expected a Backend \(a map\), got list"),
        ("{not json", r"answered in another shape: Expecting property name"),
    ],
)
def test_a_probe_answer_of_another_shape_is_a_backend_failure_naming_the_field(
    monkeypatch, printed, named
):
    """The probe child writes its JSON by hand (it imports JAX alone): the parent reads it
    as a typed record, so an answer of another shape is a backend failure that names the
    field, never a KeyError in the report."""
    answer = f"import sys; sys.stdout.write('@@jaxtune-probe@@' + {printed!r})"
    monkeypatch.setattr(doctor_checks, "_PROBE", answer)
    probed = doctor_checks.probe_backend({"PATH": "/usr/bin:/bin"}, 60)
    assert isinstance(probed, doctor_checks.BackendFailed)
    assert probed.error.startswith("the backend probe answered in another shape: "), probed
    assert re.search(named, probed.error), probed.error
    report = _doctor.collect(probe=True, environ={"PATH": "/usr/bin:/bin"})
    assert report["backend"] == {"probed": True, "error": probed.error}
    assert "backend-failed" in codes(report) and not report["ok"]
    assert f"the JAX backend did not start: {probed.error}" in _doctor.format_text(report)
