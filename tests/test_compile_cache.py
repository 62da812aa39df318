"""JAX's persistent compilation cache in a sweep's child: where it goes, what a second
sweep in a fresh child finds there, and a user's own cache directory left alone."""

from __future__ import annotations

import pathlib

import jax
import jax.numpy as jnp
import pytest
from jax.experimental.compilation_cache import compilation_cache as cc

import jaxtune
from jaxtune._core import settings as _settings
from jaxtune._core.errors import SettingsError
from jaxtune._isolation import process as _process
from jaxtune._tuning.sweep import compile_cache
from jaxtune._tuning.sweep import runner as _runner

SPACE = [{"n": n} for n in (2, 3, 4)]


@jaxtune.autotuned(configs={"n": [2, 3, 4]}, name="tests.compile_cache.sines")
def sines(x, *, n):
    for _ in range(n):  # the same output, a program of its own per config
        x = jnp.abs(jnp.sin(x)) if _ == 0 else jnp.abs(x)
    return x


def _sweep():
    x = jnp.ones(256)
    outcome = _runner.ProcessRunner().sweep(
        sines.options.bound(sines.options.bind((x,), {}), SPACE, SPACE[0]).sweep_task()
    )
    assert {m.config["n"] for m in outcome.measurements if m.ok} == {2, 3, 4}
    return outcome


def _programs(folder: pathlib.Path) -> set[str]:
    return {p.name for p in folder.glob("jit_jaxtune_*")} if folder.is_dir() else set()


@pytest.fixture
def fresh_child():
    """A sweep in a child started afresh, as after a crash or in a new `jaxtune tune`."""
    _process.shutdown_children()
    yield
    _process.shutdown_children()


@pytest.mark.parametrize(
    ("raw", "want"), [("1", "1"), ("0", "0"), (" 1 ", "1"), ("/tmp/xla", "/tmp/xla")]
)
def test_the_setting_reads_on_off_or_a_directory(raw, want):
    assert _settings.settings({"JAXTUNE_COMPILE_CACHE": raw}).compile_cache == want


def test_a_bad_directory_names_the_variable():
    with pytest.raises(SettingsError, match="JAXTUNE_COMPILE_CACHE"):
        _settings.settings({"JAXTUNE_COMPILE_CACHE": "a\0b"})


def test_the_default_directory_sits_under_the_user_cache(tmp_path):
    assert compile_cache.cache_dir_for("1", tmp_path) == tmp_path / "xla"
    assert compile_cache.cache_dir_for("0", tmp_path) is None
    assert compile_cache.cache_dir_for(str(tmp_path / "own"), tmp_path) == tmp_path / "own"
    # A cache directory that is a file (reported by the cache itself): the folder beside it.
    afile = tmp_path / "file"
    afile.write_text("")
    assert compile_cache.cache_dir_for("1", afile) == tmp_path / "xla"


@pytest.mark.child
def test_a_second_sweep_in_a_fresh_child_finds_every_program_compiled(
    monkeypatch, fresh_child, fast_timing
):
    monkeypatch.setenv("JAXTUNE_COMPILE_CACHE", "1")
    folder = pathlib.Path(_settings.settings().cache_dir) / "xla"
    _sweep()
    first = _programs(folder)
    # Every config's program was written, small as each one is (thresholds lowered).
    assert len(first) >= len(SPACE), first
    _process.shutdown_children()
    _sweep()
    # A program compiled again would have been written under a key of its own.
    assert _programs(folder) == first


@pytest.mark.child
def test_a_users_own_compilation_cache_is_left_as_they_set_it(
    monkeypatch, tmp_path, fresh_child, fast_timing
):
    own = tmp_path / "own-xla"
    monkeypatch.setenv("JAXTUNE_COMPILE_CACHE", "1")
    # Set as a program sets it (JAX_COMPILATION_CACHE_DIR before importing JAX reads the
    # same): the child receives it with the caller's JAX state.
    jax.config.update("jax_compilation_cache_dir", str(own))
    try:
        _sweep()
    finally:
        jax.config.update("jax_compilation_cache_dir", None)
        cc.reset_cache()
    assert not (pathlib.Path(_settings.settings().cache_dir) / "xla").exists()
    assert own.is_dir()


@pytest.mark.child
def test_turned_off_nothing_is_written(monkeypatch, fresh_child, fast_timing):
    monkeypatch.setenv("JAXTUNE_COMPILE_CACHE", "0")
    _sweep()
    assert not (pathlib.Path(_settings.settings().cache_dir) / "xla").exists()


def test_an_inline_sweep_uses_it_and_puts_the_callers_options_back(monkeypatch, fast_timing):
    monkeypatch.setenv("JAXTUNE_COMPILE_CACHE", "1")
    folder = pathlib.Path(_settings.settings().cache_dir) / "xla"
    before = {name: getattr(jax.config, name) for name in compile_cache._OPTIONS}
    x = jnp.ones(256)
    task = sines.options.bound(sines.options.bind((x,), {}), SPACE, SPACE[0]).sweep_task()
    outcome = _runner.InlineRunner().sweep(task)
    assert {m.config["n"] for m in outcome.measurements if m.ok} == {2, 3, 4}
    assert len(_programs(folder)) >= len(SPACE)  # the sweep's programs were cached
    assert {name: getattr(jax.config, name) for name in compile_cache._OPTIONS} == before
    # The caller's own programs compile as before: nothing more is written for them.
    cached = _programs(folder) | {p.name for p in folder.glob("*")}
    jax.jit(lambda v: jnp.cos(v) * 3)(x).block_until_ready()
    assert {p.name for p in folder.glob("*")} <= cached


def test_the_tuning_states_reset_puts_jaxs_option_back_as_a_fresh_process_has_it(
    monkeypatch, tmp_path
):
    """The directory jaxtune set is state: its reset clears JAX's option where jaxtune set
    it (a user's own directory is theirs, and stays), and jaxtune's own folder is found
    again afterwards."""
    from jaxtune._tuning.state import TUNING_STATE

    monkeypatch.setenv("JAXTUNE_COMPILE_CACHE", str(tmp_path / "xla"))
    before = jax.config.jax_compilation_cache_dir  # type: ignore[attr-defined]
    try:
        assert compile_cache.enable() == tmp_path / "xla"
        assert jax.config.jax_compilation_cache_dir == str(tmp_path / "xla")  # type: ignore[attr-defined]
        TUNING_STATE.reset("compile cache")
        assert jax.config.jax_compilation_cache_dir is None  # type: ignore[attr-defined]
        assert compile_cache.own_folder() == tmp_path / "xla"
        jax.config.update("jax_compilation_cache_dir", str(tmp_path / "users"))
        TUNING_STATE.reset("compile cache")
        assert jax.config.jax_compilation_cache_dir == str(tmp_path / "users")  # type: ignore[attr-defined]
        assert compile_cache.own_folder() is None
    finally:
        jax.config.update("jax_compilation_cache_dir", before)
        cc.reset_cache()
