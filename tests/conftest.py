"""Shared fixtures: no test touches the real home cache or inherits jaxtune settings."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True)
def _isolated_environment(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
):
    cache = tmp_path_factory.mktemp("cache")
    for name in list(os.environ):
        if name.startswith("JAXTUNE_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("JAXTUNE_CACHE_DIR", str(cache))
    # Tests run the default isolation (a pooled child); tests about inline ask for it.
    monkeypatch.setenv("JAXTUNE_PROFILE_DIR", str(tmp_path_factory.mktemp("profiles")))
    for name in ("XLA_FLAGS", "LIBTPU_INIT_ARGS", "TPU_LIBRARY_PATH"):
        monkeypatch.delenv(name, raising=False)
    # Each test starts as a new process would: functions jitted by earlier tests (a module's
    # kernels under jax.jit) trace again and read this test's settings. A change of
    # os.environ alone re-traces only the kernels' eager calls (docs/autotuned.md).
    from jaxtune._tuning import eager

    eager.bump_generation()
    yield


@pytest.fixture
def cli():
    """Runs `python -m jaxtune ARGS` in a fresh process and returns the completed process."""

    def run(*args: str, env: dict[str, str] | None = None, timeout: float = 300):
        full_env = dict(os.environ)
        full_env.update(env or {})
        return subprocess.run(
            [sys.executable, "-m", "jaxtune", *args],
            env=full_env,
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=ROOT,
        )

    return run


@pytest.fixture(autouse=True)
def _no_packaged_caches():
    from jaxtune._tuning import cache as _cache

    _cache.unregister_caches()
    yield
    _cache.unregister_caches()


@pytest.fixture
def fast_timing(monkeypatch):
    """Shortens timing for tests that sweep but do not compare speeds."""
    from jaxtune._tuning import timing as _timing

    fast = _timing.TimingOptions(
        min_time_s=0.002,
        min_samples=3,
        max_samples=10,
        rounds=2,
        max_rounds=6,
        round_floor_us=200.0,
    )
    monkeypatch.setattr(_timing, "DEFAULT", fast)
    return fast
