"""Settings read from ``JAXTUNE_*`` variables: good and bad values (the error names the
variable, the value and what is allowed), defaults, directories, and overrides in code.

Covers docs/settings.md, "Settings" (the table of variables) and "Overriding settings in
code and tests".
"""

from __future__ import annotations

import pathlib

import pytest

from jaxtune import SettingsError
from jaxtune._core import settings as _settings

GOOD = [
    ("JAXTUNE_MODE", "off", "mode", "off"),
    ("JAXTUNE_MODE", "cached", "mode", "cached"),
    ("JAXTUNE_MODE", "tune", "mode", "tune"),
    ("JAXTUNE_MODE", "RETUNE", "mode", "retune"),
    ("JAXTUNE_PROFILE", "0", "profile", False),
    ("JAXTUNE_PROFILE", "1", "profile", True),
    ("JAXTUNE_PROFILE_LLO", "0", "profile_llo", False),
    ("JAXTUNE_PROFILE_LLO", "", "profile_llo", True),
    ("JAXTUNE_ISOLATION", "process", "isolation", "process"),
    ("JAXTUNE_ISOLATION", "inline", "isolation", "inline"),
    ("JAXTUNE_TIMEOUT", "60", "timeout", 60.0),
    ("JAXTUNE_TIMEOUT", "2.5", "timeout", 2.5),
    ("JAXTUNE_VERBOSE", "0", "verbose", 0),
    ("JAXTUNE_VERBOSE", "1", "verbose", 1),
    ("JAXTUNE_VERBOSE", "2", "verbose", 2),
    ("JAXTUNE_BUDGET", "64", "budget", (64, None)),
    ("JAXTUNE_BUDGET", " 1 ", "budget", (1, None)),
    ("JAXTUNE_BUDGET", "120s", "budget", (None, 120.0)),
    ("JAXTUNE_BUDGET", "2.5S", "budget", (None, 2.5)),
]

BAD = [
    ("JAXTUNE_MODE", "fast", "off, cached, tune, retune"),
    ("JAXTUNE_MODE", "on", "off, cached, tune, retune"),
    ("JAXTUNE_PROFILE", "yes", "0, 1"),
    ("JAXTUNE_PROFILE", "2", "0, 1"),
    ("JAXTUNE_PROFILE_LLO", "no", "0, 1"),
    ("JAXTUNE_ISOLATION", "thread", "process, inline"),
    ("JAXTUNE_TIMEOUT", "soon", "a positive number of seconds"),
    ("JAXTUNE_TIMEOUT", "0", "a positive number of seconds"),
    ("JAXTUNE_TIMEOUT", "-5", "a positive number of seconds"),
    ("JAXTUNE_TIMEOUT", "inf", "a positive number of seconds"),
    ("JAXTUNE_TIMEOUT", "nan", "a positive number of seconds"),
    ("JAXTUNE_VERBOSE", "3", "0, 1, 2"),
    ("JAXTUNE_VERBOSE", "loud", "0, 1, 2"),
    *[
        ("JAXTUNE_BUDGET", raw, "a positive number of configs (64) or of seconds with an s (120s)")
        for raw in ("0", "-3", "2.5", "lots", "s", "0s", "-1s", "infs", "nans", "12m")
    ],
]


@pytest.mark.parametrize(("name", "raw", "field", "expected"), GOOD)
def test_good_values(monkeypatch, name, raw, field, expected):
    monkeypatch.setenv(name, raw)
    assert getattr(_settings.settings(), field) == expected


@pytest.mark.parametrize(("name", "raw", "allowed"), BAD)
def test_bad_values_name_variable_value_and_allowed(monkeypatch, name, raw, allowed):
    monkeypatch.setenv(name, raw)
    with pytest.raises(SettingsError) as info:
        _settings.settings()
    message = str(info.value)
    assert message.startswith(f"{name}={raw!r} is not valid")
    assert f"allowed values: {allowed}" in message


def test_every_design_variable_is_handled():
    names = {v.name for v in _settings.VARIABLES}
    assert names >= {
        "JAXTUNE_MODE",
        "JAXTUNE_CACHE_DIR",
        "JAXTUNE_PROFILE",
        "JAXTUNE_PROFILE_DIR",
        "JAXTUNE_ISOLATION",
        "JAXTUNE_TIMEOUT",
        "JAXTUNE_VERBOSE",
        "JAXTUNE_AGREE_TIMEOUT",
        "JAXTUNE_BUDGET",
    }
    # Every variable, the internal ones `jaxtune tune` sets included, is read here only.
    assert {"JAXTUNE_RECORD", "JAXTUNE_RECORD_STOP"} <= names


def test_record_variables_go_through_settings(monkeypatch, tmp_path):
    monkeypatch.setenv("JAXTUNE_RECORD", str(tmp_path / "calls"))
    monkeypatch.setenv("JAXTUNE_RECORD_STOP", "1")
    s = _settings.settings()
    assert s.record == str(tmp_path / "calls") and s.record_stop is True
    monkeypatch.setenv("JAXTUNE_RECORD_STOP", "yes")
    with pytest.raises(SettingsError, match="JAXTUNE_RECORD_STOP='yes' is not valid"):
        _settings.settings()


def test_defaults(monkeypatch, tmp_path):
    for v in _settings.VARIABLES:
        monkeypatch.delenv(v.name, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    s = _settings.settings()
    assert s.mode == "cached"
    assert s.cache_dir == tmp_path / "jaxtune"
    assert s.profile is False
    assert s.profile_dir == pathlib.Path("./jaxtune-profiles")
    assert s.isolation == "process"
    assert s.timeout == 60.0
    assert s.agree_timeout == 300.0
    assert s.verbose == 0
    assert s.budget is None


def test_cache_dir_default_without_xdg(monkeypatch, tmp_path):
    monkeypatch.delenv("JAXTUNE_CACHE_DIR")
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert _settings.settings().cache_dir == tmp_path / ".cache" / "jaxtune"


@pytest.mark.parametrize("name", ["JAXTUNE_PROFILE_DIR"])
def test_directory_variables(monkeypatch, tmp_path, name):
    monkeypatch.setenv(name, str(tmp_path / "new"))
    field = {"JAXTUNE_CACHE_DIR": "cache_dir", "JAXTUNE_PROFILE_DIR": "profile_dir"}[name]
    assert getattr(_settings.settings(), field) == tmp_path / "new"
    a_file = tmp_path / "file"
    a_file.write_text("x")
    monkeypatch.setenv(name, str(a_file))
    with pytest.raises(SettingsError, match=f"{name}=.* is not valid.*not a directory"):
        _settings.settings()


def test_empty_value_means_default(monkeypatch):
    monkeypatch.setenv("JAXTUNE_MODE", "  ")
    assert _settings.settings().mode == "cached"


def test_override_validates_and_restores(monkeypatch):
    monkeypatch.setenv("JAXTUNE_MODE", "tune")
    with _settings.override(mode="off", profile=True, timeout=5) as s:
        assert (s.mode, s.profile, s.timeout) == ("off", True, 5.0)
        assert _settings.settings().mode == "off"
        with _settings.override(mode="retune"):
            assert _settings.settings().mode == "retune"
            assert _settings.settings().timeout == 5.0
        assert _settings.settings().mode == "off"
    assert _settings.settings().mode == "tune"
    with (
        pytest.raises(SettingsError, match="JAXTUNE_VERBOSE='9' is not valid"),
        _settings.override(verbose=9),
    ):
        pass
    with (
        pytest.raises(SettingsError, match="unknown setting 'colour'"),
        _settings.override(colour="red"),
    ):
        pass


def test_settings_from_explicit_mapping():
    s = _settings.settings({"JAXTUNE_MODE": "tune", "JAXTUNE_CACHE_DIR": "/tmp/x"})
    assert s.mode == "tune"
    assert s.cache_dir == pathlib.Path("/tmp/x")


def test_settings_follow_the_environment_and_overrides_between_calls(tmp_path, monkeypatch):
    first = _settings.settings()
    assert _settings.settings() is first  # parsed once while nothing changes
    monkeypatch.setenv("JAXTUNE_MODE", "tune")
    assert _settings.settings().mode == "tune"
    with _settings.override(mode="off"):
        assert _settings.settings().mode == "off"
    assert _settings.settings().mode == "tune"
    monkeypatch.setenv("JAXTUNE_MODE", "fast")
    with pytest.raises(SettingsError, match="JAXTUNE_MODE='fast'"):
        _settings.settings()
    monkeypatch.delenv("JAXTUNE_MODE")
    monkeypatch.delenv("JAXTUNE_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert _settings.settings().cache_dir == tmp_path / "xdg" / "jaxtune"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert _settings.settings().cache_dir == tmp_path / "home" / ".cache" / "jaxtune"
