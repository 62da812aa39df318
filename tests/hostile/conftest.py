"""Helpers of the hostile tests: run code in a fresh process (where a crash or hang is
possible), optionally without root's power to ignore file permissions."""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import sys
import textwrap

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
HERE = pathlib.Path(__file__).resolve().parent
#: Capabilities that let root ignore file modes; dropped so that mode-000 files mean what
#: they mean for every other user.
_DAC = "-dac_override,-dac_read_search,-fowner"


def _unprivileged() -> list[str]:
    if os.geteuid() != 0:
        return []
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.fail("running as root: permission tests need `setpriv` (util-linux) to drop DAC")
    return [setpriv, f"--inh-caps={_DAC}", f"--bounding-set={_DAC}"]


@pytest.fixture
def py():
    """Runs a Python snippet in a fresh process; returns the CompletedProcess."""

    def run(code: str, *, env=None, timeout: float = 240, unprivileged: bool = False):
        full = dict(os.environ)
        full["PYTHONPATH"] = os.pathsep.join(
            [str(ROOT), str(HERE), str(HERE.parent), full.get("PYTHONPATH", "")]
        )
        full.update(env or {})
        prefix = _unprivileged() if unprivileged else []
        return subprocess.run(
            [*prefix, sys.executable, "-c", textwrap.dedent(code)],
            env=full,
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=ROOT,
        )

    return run
