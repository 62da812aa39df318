"""Assertions shared by the hostile tests."""

from __future__ import annotations

import subprocess


def one_line_error(proc: subprocess.CompletedProcess[str]) -> str:
    """The single stderr line of a failed CLI run (asserting it is one line, no traceback)."""
    assert proc.returncode not in (0, None) and proc.returncode > 0, proc
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    return lines[0]
