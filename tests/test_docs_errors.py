"""What the errors page promises: one hierarchy, every exception it lists public and in
it, and one line on stderr with a documented exit status from the command line.

Covers docs/errors.md, the exception and warning tables (everything jaxtune raises on
purpose derives from ``JaxtuneError``; ``JaxtuneWarning`` and its
``CustomCallTracingWarning``) and "On the command line" (a failure is one line
``jaxtune COMMAND: ...`` on stderr, status 2 for a jaxtune error or a bad path, ``--debug``
adds the traceback). docs/errors.md, "Hostile input", is covered by ``tests/hostile/``.
"""

from __future__ import annotations

import pathlib
import re

import pytest

import jaxtune
from jaxtune._core.errors import CustomCallTracingWarning

PAGE = (pathlib.Path(__file__).resolve().parent.parent / "docs" / "errors.md").read_text()


def _table(first_column: str) -> list[str]:
    """The names in the first column of the page's table headed ``first_column``."""
    table = PAGE.split(f"| {first_column} |", 1)[1].split("\n\n", 1)[0]
    return re.findall(r"^\| `(\w+)`", table, re.M)


EXCEPTIONS = _table("exception")


def test_the_table_lists_every_public_exception():
    public = {
        name
        for name in jaxtune.__all__
        if isinstance(getattr(jaxtune, name), type)
        and issubclass(getattr(jaxtune, name), Exception)
        and not issubclass(getattr(jaxtune, name), Warning)
    }
    assert set(EXCEPTIONS) == public


@pytest.mark.parametrize("name", EXCEPTIONS)
def test_every_listed_exception_is_public_and_a_jaxtune_error(name):
    cls = getattr(jaxtune, name)
    assert issubclass(cls, jaxtune.JaxtuneError)
    assert cls.__doc__


def test_the_warnings_are_jaxtune_warnings():
    assert _table("warning") == ["SynthesisedValuesWarning", "CustomCallTracingWarning"]
    assert issubclass(jaxtune.JaxtuneWarning, Warning)
    assert issubclass(CustomCallTracingWarning, jaxtune.JaxtuneWarning)
    assert issubclass(jaxtune.SynthesisedValuesWarning, jaxtune.JaxtuneWarning)


def test_every_failed_config_is_in_tuning_failed_error_failures():
    failures = (object(), object())
    error = jaxtune.TuningFailedError("every config failed", failures=failures)
    assert isinstance(error, jaxtune.JaxtuneError)
    assert tuple(error.failures) == failures


def test_a_command_line_failure_is_one_line_and_status_2(incli, tmp_path):
    missing = tmp_path / "no-trace"
    done = incli("report", str(missing))
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1
    assert done.stderr.startswith("jaxtune report: ")
    assert str(missing) in done.stderr


def test_debug_adds_the_traceback(incli, tmp_path):
    done = incli("--debug", "report", str(tmp_path / "no-trace"))
    assert done.returncode == 2
    assert "Traceback (most recent call last)" in done.stderr
    assert "jaxtune report: " in done.stderr
