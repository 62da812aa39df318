"""`jaxtune tune --from-profile`: odd report files and shares end in a message, never a
hang or a traceback."""

from __future__ import annotations

import os

import pytest


@pytest.mark.child
def test_a_fifo_named_report_json_does_not_block(cli, tmp_path):
    os.mkfifo(tmp_path / "report.json")  # nobody ever writes to it
    proc = cli("tune", "--from-profile", str(tmp_path), timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert "report.json is not a jaxtune profile report" in proc.stderr
    assert "not a regular file" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_garbled_calls_sidecar_is_a_message(incli, tmp_path):
    (tmp_path / "report.json").write_text('{"kernels": []}')
    (tmp_path / "report.calls.msgpack").write_bytes(b"\xc1\xc1")
    proc = incli("tune", "--from-profile", str(tmp_path))
    assert proc.returncode == 2, proc.stderr
    assert "is not a jaxtune profile report" in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("raw", ["nan", "-0.1", "1.5", "inf", "lots"])
def test_min_share_outside_zero_to_one_is_refused(incli, tmp_path, raw):
    proc = incli("tune", "--from-profile", str(tmp_path), "--min-share", raw)
    assert proc.returncode == 2, proc.stderr
    assert "is not a share from 0 to 1" in proc.stderr


def test_a_profile_path_that_does_not_exist_says_so(incli, tmp_path):
    proc = incli("tune", "--from-profile", str(tmp_path / "nowhere"))
    assert proc.returncode == 2, proc.stderr
    assert f"{tmp_path / 'nowhere'} does not exist" in proc.stderr
    assert "jaxtune profile --logdir DIR" in proc.stderr
