"""Damaged traces and bad command lines. ``Profile.from_trace`` raises only ProfileError;
every CLI failure is one line on stderr and a non-zero status.

Covers docs/errors.md, "Hostile input" and "On the command line", and docs/profiling.md,
"Reading a trace: Profile.from_trace"."""

from __future__ import annotations

import os
import random

import pytest
from hostile_helpers import one_line_error
from jax.profiler import ProfileData
from traces import GPU_TRACE, TPU_TRACE

import jaxtune

TPU_BYTES = ProfileData.text_proto_to_serialized_xspace(TPU_TRACE)


@pytest.fixture
def good_trace(tmp_path):
    path = tmp_path / "good" / "t.xplane.pb"
    path.parent.mkdir()
    path.write_bytes(TPU_BYTES)
    return path


def test_from_trace_reads_a_trace_file_and_a_trace_directory(good_trace):
    for where in (good_trace, good_trace.parent):
        names = {k.name for k in jaxtune.Profile.from_trace(where).kernels}
        assert "tiled_matmul" in names


def _odd(tmp_path, kind):
    path = tmp_path / "odd.xplane.pb"
    if kind == "missing":
        return tmp_path / "nothing-here"
    if kind == "empty-dir":
        (tmp_path / "empty").mkdir()
        return tmp_path / "empty"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "fifo-in-dir":
        os.mkfifo(path)
        return tmp_path
    elif kind == "dev-zero":
        path.symlink_to("/dev/zero")
    elif kind == "empty-file":
        path.write_bytes(b"")
    elif kind == "truncated":
        path.write_bytes(TPU_BYTES[: len(TPU_BYTES) // 2])
    elif kind == "text":
        path.write_text(TPU_TRACE)
    return path


ODD = ["missing", "empty-dir", "fifo", "fifo-in-dir", "dev-zero", "empty-file", "truncated"]
ODD += ["text"]


@pytest.mark.parametrize("kind", ODD)
def test_from_trace_raises_only_profile_error(tmp_path, kind):
    with pytest.raises(jaxtune.ProfileError, match=str(tmp_path)):
        jaxtune.Profile.from_trace(_odd(tmp_path, kind))


def test_byte_flips_of_real_traces_raise_only_profile_error(tmp_path):
    """The issue's reproduction: 3000 byte-flip mutants, 121 of which escaped before."""
    rng = random.Random(11)
    path = tmp_path / "t.xplane.pb"
    outcomes = {"ok": 0, "ProfileError": 0}
    for base in (TPU_BYTES, ProfileData.text_proto_to_serialized_xspace(GPU_TRACE)):
        for _ in range(1500):
            data = bytearray(base)
            for _ in range(rng.randint(1, 4)):
                data[rng.randrange(len(data))] = rng.randrange(256)
            path.write_bytes(bytes(data))
            try:
                jaxtune.Profile.from_trace(path)
            except jaxtune.ProfileError:
                outcomes["ProfileError"] += 1
            else:
                outcomes["ok"] += 1
    assert outcomes["ProfileError"] > 0 and outcomes["ok"] > 0, outcomes


@pytest.mark.parametrize("kind", ["fifo-in-dir", "fifo", "dev-zero", "missing", "truncated"])
def test_report_cli_is_one_line_and_never_hangs(cli, tmp_path, kind):
    line = one_line_error(cli("report", str(_odd(tmp_path, kind)), timeout=120))
    assert line.startswith("jaxtune report: ")


def test_report_cli_skips_a_fifo_beside_a_good_trace(cli, good_trace):
    os.mkfifo(good_trace.parent / "zzz.xplane.pb")
    proc = cli("report", str(good_trace.parent), timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "tiled_matmul" in proc.stdout


BAD_CACHE_COMMANDS = [
    ("cache", "import", "{tmp}/missing.msgpack"),
    ("cache", "import", "{tmp}"),
    ("cache", "import", "{tmp}/garbage.msgpack"),
    ("cache", "merge", "{tmp}/missing.msgpack", "-o", "{tmp}/out.msgpack"),
    ("cache", "merge", "{tmp}/garbage.msgpack", "-o", "{tmp}/out.msgpack"),
    ("cache", "export", "{tmp}/garbage.msgpack/below-a-file.msgpack"),
    ("cache", "show", "no.such.kernel"),
    ("cache", "prune"),
]


@pytest.mark.parametrize("argv", BAD_CACHE_COMMANDS, ids=lambda a: " ".join(a[:3]))
def test_cache_commands_with_bad_paths_are_one_line(cli, tmp_path, argv):
    (tmp_path / "garbage.msgpack").write_bytes(b"\x00not msgpack at all")
    line = one_line_error(cli(*(a.format(tmp=tmp_path) for a in argv)))
    assert line.startswith("jaxtune cache: ")


def test_debug_flag_shows_the_traceback(cli, tmp_path):
    proc = cli("cache", "import", str(tmp_path / "missing.msgpack"), "--debug")
    assert proc.returncode == 2
    assert "Traceback" in proc.stderr and "CacheError" in proc.stderr


def test_bad_setting_is_one_line(cli):
    line = one_line_error(cli("cache", "list", env={"JAXTUNE_TIMEOUT": "1e10"}))
    assert line.startswith("jaxtune cache: JAXTUNE_TIMEOUT='1e10' is not valid")


def test_a_damaged_user_cache_file_is_one_warning_line_in_the_cli(cli, tmp_path):
    """The user cache's damaged file is moved aside and read as empty (a lookup must not
    fail); the command says so in one line, not in Python's warning format with jaxtune's
    own source line."""
    (tmp_path / "cpu").mkdir()
    (tmp_path / "cpu" / "k.msgpack").write_bytes(b"\x93\x01\x02\x03 trailing bytes")
    proc = cli("cache", "list", env={"JAXTUNE_CACHE_DIR": str(tmp_path)})
    assert proc.returncode == 0, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("jaxtune cache file "), proc.stderr
    assert "moved to k.msgpack.corrupt-" in lines[0] and "Warning" not in lines[0]
