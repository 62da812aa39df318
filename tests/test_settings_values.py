"""Odd setting values (docs/settings.md, "Settings"): a SettingsError naming the variable, never
a raw OSError, RuntimeError, TypeError or ValueError; a cache directory that is a file only
warns."""

from __future__ import annotations

import warnings

import jax.numpy as jnp
import pytest

import jaxtune
from jaxtune._core import settings as _settings
from jaxtune._core.errors import JaxtuneWarning, SettingsError


@pytest.mark.parametrize(
    ("name", "raw", "words"),
    [
        ("JAXTUNE_CACHE_DIR", "/tmp/" + "a" * 300, "too long"),
        ("JAXTUNE_CACHE_DIR", "/tmp/" + "/".join(["b" * 200] * 30), "too long"),
        ("JAXTUNE_CACHE_DIR", "~no-such-user-jaxtune/cache", "known user"),
        ("JAXTUNE_CACHE_DIR", "/tmp/a\0b", "NUL"),
        ("JAXTUNE_PROFILE_DIR", "~no-such-user-jaxtune/p", "known user"),
        ("JAXTUNE_BUDGET", "1e100", "configs"),
        ("JAXTUNE_BUDGET", "1" + "0" * 40, "configs"),
        ("JAXTUNE_BUDGET", "1e-300s", "configs"),
        ("JAXTUNE_TIMEOUT", "1e-300", "seconds"),
        ("JAXTUNE_TIMEOUT", "nan", "seconds"),
        ("JAXTUNE_LOCK_TIMEOUT", "1e-300", "seconds"),
        ("JAXTUNE_LOCK_TIMEOUT", "inf", "seconds"),
    ],
)
def test_odd_values_are_a_settings_error_naming_the_variable(name, raw, words):
    with pytest.raises(SettingsError, match=rf"^{name}=.*is not valid.*{words}"):
        _settings.settings({name: raw})


@jaxtune.autotuned(configs={"c": [1, 2]}, default={"c": 1}, name="tests.file_cache_dir")
def scaled(x, *, c):
    return x * c


def test_a_cache_dir_that_is_a_file_warns_once_and_uses_the_defaults(tmp_path, monkeypatch):
    a_file = tmp_path / "not-a-dir"
    a_file.write_text("x")
    monkeypatch.setenv("JAXTUNE_CACHE_DIR", str(a_file))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for n in (4, 8, 16):
            assert float(scaled(jnp.ones(n)).sum()) == n  # the default, c=1
        assert scaled.config_for(jnp.ones(4)).source == "default"
    messages = [str(w.message) for w in caught if issubclass(w.category, JaxtuneWarning)]
    assert len(messages) == 1, messages
    assert f"{a_file} is a file" in messages[0] and "JAXTUNE_CACHE_DIR" in messages[0]


def test_cache_commands_say_the_cache_dir_is_a_file(tmp_path, monkeypatch, capsys):
    from jaxtune import _cli

    a_file = tmp_path / "not-a-dir"
    a_file.write_text("x")
    monkeypatch.setenv("JAXTUNE_CACHE_DIR", str(a_file))
    assert _cli.main(["cache", "list"]) == 2
    assert f"{a_file} is a file" in capsys.readouterr().err
