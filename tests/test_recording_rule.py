"""docs/whole-model.md, "jaxtune tune -- python train.py ...": how the recorded program is
stopped, and what the command says about it (the end-to-end runs are in test_tune_cli.py
and test_cache_check.py)."""

from __future__ import annotations

import threading

import pytest

from jaxtune._cli import tune as _tune


@pytest.mark.parametrize("value", ["0", "-1", "nan", "inf", "abc", "1e9"])
def test_settle_takes_what_the_program_takes(incli, value):
    for verb in (["tune"], ["cache", "check"]):
        done = incli(*verb, "--settle", value, "--", "python", "prog.py")
        assert done.returncode == 2
        assert f"{value!r} is not a number of seconds from 0.001 to 1e+06" in done.stderr


def test_a_program_without_an_autotuned_call_is_said_to_run_on(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(_tune, "NO_CALL_NOTE_S", 0.01)
    empty = tmp_path / "calls.msgpack"
    empty.write_bytes(b"")
    _tune._note_no_call(str(empty), threading.Event(), "tune")
    err = capsys.readouterr().err
    assert "the program has made no autotuned call in 0.01 s; it runs on" in err
    assert "Ctrl-C stops it" in err
    # Once a call is recorded, or the program has ended, nothing is said.
    empty.write_bytes(b"x")
    _tune._note_no_call(str(empty), threading.Event(), "tune")
    ended = threading.Event()
    ended.set()
    _tune._note_no_call(str(tmp_path / "none"), ended, "tune")
    assert capsys.readouterr().err == ""


def test_full_and_settle_are_one_or_the_other(incli):
    for verb in (["tune"], ["cache", "check"]):
        done = incli(*verb, "--full", "--settle", "2", "--", "python", "prog.py")
        assert done.returncode == 2
        assert "not allowed with argument" in done.stderr
