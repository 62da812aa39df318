"""The TPU tier: tests that run real Mosaic kernels on a TPU chip, skipped elsewhere with the
reason. Run on a TPU machine from the repository root, in one pytest process (one process
at a time can hold the chip):

    . tools/tpu/env.sh && python3 -m pytest -p no:xdist -p no:randomly tests/tpu

Modules run in name order: ``test_1_*`` start programs in fresh processes while this one
has not opened the chip; ``test_2_*`` then use the chip from this process (a process that
holds the TPU: sweeps and captures run here). ``JAXTUNE_TPU_DRY=1`` runs the tier's
kernels on CPU in TPU interpret mode at small shapes, to try one test (``-k``) before
spending chip time: slowly, and the checks of what only a chip does (Mosaic refusing a
tile, a chip-holding process's warnings) fail there.
"""

from __future__ import annotations

import functools
import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent.parent
# The tier's modules import each other as ``tests.tpu.*``, the names the programs they
# start (``python -m tests.tpu.two_jits``) and jaxtune's children use too.
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

#: The variables the suite's conftest clears, as this process got them: a TPU machine may
#: need them (TPU_LIBRARY_PATH names its libtpu).
_GIVEN = {k: os.environ[k] for k in ("TPU_LIBRARY_PATH", "LIBTPU_INIT_ARGS") if k in os.environ}
DRY = os.environ.get("JAXTUNE_TPU_DRY") == "1"


@functools.cache
def backend() -> str:
    """The platform JAX picks here, asked in a fresh process (asking here would open the
    chip before the ``test_1`` programs run)."""
    if DRY:
        return "tpu"
    try:
        done = subprocess.run(
            [sys.executable, "-c", "import jax; print(jax.default_backend())"],
            capture_output=True,
            text=True,
            timeout=180,
            cwd=ROOT,
        )
    except (OSError, subprocess.TimeoutExpired):
        return "none"
    return done.stdout.strip().splitlines()[-1] if done.returncode == 0 and done.stdout else "none"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    here = os.path.dirname(__file__)
    tier = [item for item in items if str(item.fspath).startswith(here)]
    for item in tier:
        item.add_marker(pytest.mark.tpu)
        item.add_marker(pytest.mark.child)  # they start programs and children
    if tier and backend() != "tpu":
        skip = pytest.mark.skip(
            reason=(
                f"needs a TPU chip (JAX's backend here: {backend()}): the tier compiles real "
                "Mosaic kernels and times them on the chip, which interpret mode does not; "
                "JAXTUNE_TPU_DRY=1 runs its kernels in interpret mode to try one test"
            )
        )
        for item in tier:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _tpu_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in _GIVEN.items():
        monkeypatch.setenv(name, value)
    if DRY:  # the suite's conftest clears JAXTUNE_*; the programs a test starts need it
        monkeypatch.setenv("JAXTUNE_TPU_DRY", "1")


@pytest.fixture
def program(tmp_path):
    """Runs ``python ARGS`` (or ``jaxtune`` with ``-m jaxtune``) from the repository root
    in a fresh process with this test's environment; returns the completed process."""

    def run(*args: str, env: dict[str, str] | None = None, timeout: float = 400):
        full = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
        full["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(ROOT), full.get("PYTHONPATH", "")) if p
        )
        return subprocess.run(
            [sys.executable, *args],
            env=full,
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=ROOT,
        )

    return run
