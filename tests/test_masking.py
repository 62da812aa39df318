"""Secrets masked where jaxtune quotes what it did not write, and requests kept in files
without the caller's variables (docs/files.md, "Secrets in logs and messages" and "No
environment is written"): the masking rules, a crash log and the tail a failure reason
quotes, a recorded call and a sidecar, and a replay that sends this process's variables
whatever the file holds."""

from __future__ import annotations

import os
import pathlib

import jax.numpy as jnp
import pytest
from faulty_kernels import faulty

from jaxtune._core.codec import packb, unpackb
from jaxtune._core.masking import MASK, looks_secret, mask, mask_command
from jaxtune._core.vocabulary import CaptureInfo, RecordedCall
from jaxtune._isolation import logs as _logs
from jaxtune._isolation.frames import Request
from jaxtune._isolation.framing import FrameReader, write_frame
from jaxtune._profiling import sidecar as _sidecar
from jaxtune._tuning.sweep import requests as _requests

ENV = {
    "HF_TOKEN": "hf_abc123def",
    "AWS_SECRET_ACCESS_KEY": "wJalrXUtnFEMI/K7MDENG",
    "DB_PASSWORD": "pw",  # too short to mask wherever it appears
    "PIP_KEYRING_PROVIDER": "auto",
    "HOME": "/home/me",
    "PLAIN": "plain-value",
}


@pytest.mark.parametrize(
    ("name", "secret"),
    [
        ("HF_TOKEN", True),
        ("AWS_SECRET_ACCESS_KEY", True),
        ("WANDB_API_KEY", True),
        ("DB_PASSWORD", True),
        ("GOOGLE_APPLICATION_CREDENTIALS", True),
        ("api-key", True),
        ("HOME", False),
        ("XLA_FLAGS", False),
        ("JAXTUNE_CACHE_DIR", False),
    ],
)
def test_names_that_look_secret(name, secret):
    assert looks_secret(name) is secret


@pytest.mark.parametrize(
    ("text", "masked"),
    [
        ("logged in with hf_abc123def", f"logged in with {MASK}"),
        ("key wJalrXUtnFEMI/K7MDENG at /home/me", f"key {MASK} at /home/me"),
        ("HF_TOKEN=hf_abc123def PLAIN=plain-value", f"HF_TOKEN={MASK} PLAIN=plain-value"),
        ("export OTHER_TOKEN=xyz", f"export OTHER_TOKEN={MASK}"),
        ("DB_PASSWORD=pw; pw is short", f"DB_PASSWORD={MASK}; pw is short"),
        ("timer auto, pass forward", "timer auto, pass forward"),
        (
            "environ({'HOME': '/home/me', 'MY_SECRET': 's3'})",
            f"environ({{'HOME': '/home/me', 'MY_SECRET': '{MASK}'}})",
        ),
        ('{"API_KEY": "k1"}', f'{{"API_KEY": "{MASK}"}}'),
        # Words that only contain a secret word in lower case are left alone.
        ("KeyError: 'block_m' | monkey=3", "KeyError: 'block_m' | monkey=3"),
    ],
)
def test_mask_hides_secret_values_and_values_given_to_secret_names(text, masked):
    assert mask(text, ENV) == masked


def test_mask_reads_this_process_environment_by_default(monkeypatch):
    monkeypatch.setenv("CANARY_TOKEN", "canary-value-1")
    assert mask("it printed canary-value-1") == f"it printed {MASK}"


@pytest.mark.parametrize(
    ("command", "quoted"),
    [
        (["python", "train.py", "--lr", "0.1"], "python train.py --lr 0.1"),
        (
            ["python", "t.py", "--hf-token", "abc", "--verbose"],
            f"python t.py --hf-token {MASK} --verbose",
        ),
        (["python", "t.py", "--api-key=abc"], f"python t.py --api-key={MASK}"),
        (["python", "t.py", "model.api_key=abc"], f"python t.py model.api_key={MASK}"),
        (["env", "HF_TOKEN=x", "python", "t.py"], f"env HF_TOKEN={MASK} python t.py"),
        (["python", "t.py", "--token", "--next"], "python t.py --token --next"),
        (["python", "t.py", "hf_abc123def"], f"python t.py {MASK}"),
    ],
)
def test_a_command_line_is_quoted_masked(command, quoted):
    assert mask_command(command, ENV) == quoted


@pytest.mark.parametrize("earlier", ["earlier request", "earlier canary-value-2"])
def test_a_crash_log_and_the_tail_it_gives_are_masked(tmp_path, monkeypatch, earlier):
    monkeypatch.setenv("CANARY_TOKEN", "canary-value-2")
    log = tmp_path / "child-1-x.log"
    log.write_text(f"{earlier}\n")
    since = log.stat().st_size  # where the request that crashed began
    with open(log, "a") as f:
        f.write("token: canary-value-2\nMY_SECRET=abc\nRuntimeError: boom\n")
    kept, trimmed = _logs.keep_crash_log(str(log), 1)
    text = pathlib.Path(kept).read_text()
    assert "canary-value-2" not in text and "abc" not in text
    assert f"token: {MASK}\nMY_SECRET={MASK}\n" in text
    # An offset into the log still finds the same lines in the shorter crash log.
    assert _logs.read_tail(kept, since, trimmed) == (
        f"token: {MASK} | MY_SECRET={MASK} | RuntimeError: boom"
    )


def test_the_tail_of_a_live_log_is_masked(tmp_path, monkeypatch):
    monkeypatch.setenv("CANARY_TOKEN", "canary-value-3")
    log = tmp_path / "child-1-y.log"
    log.write_text("RuntimeError: bad header canary-value-3\n")
    assert _logs.read_tail(str(log), 0, 0) == f"RuntimeError: bad header {MASK}"


def _request(monkeypatch) -> Request[_requests.SweepFields]:
    monkeypatch.setenv("PLAIN_CANARY_VAR", "recorded-here")
    task = faulty.options.bound(
        faulty.options.bind((jnp.ones(8),), {}), [{"mode": "ok"}], {"mode": "ok"}
    ).sweep_task()
    return _requests.sweep_request(task)


def test_a_request_keeps_the_variables_on_the_wire_and_never_in_a_record(monkeypatch):
    request = _request(monkeypatch)
    assert request.to_wire()["environ"]["PLAIN_CANARY_VAR"] == "recorded-here"
    record = request.recorded().to_wire()
    assert "environ" not in record
    assert {k: v for k, v in request.to_wire().items() if k != "environ"} == record


def _stored(tmp_path: pathlib.Path, frame: dict) -> tuple[bytes, dict]:
    """``frame`` as a file keeps it (a recording's frame, arrays and all), and read back."""
    path = tmp_path / "frame.msgpack"
    fd = os.open(path, os.O_RDWR | os.O_CREAT)
    try:
        write_frame(fd, frame)
        os.lseek(fd, 0, os.SEEK_SET)
        return path.read_bytes(), FrameReader(fd).read()
    finally:
        os.close(fd)


def test_a_recorded_call_holds_no_variable(monkeypatch, tmp_path):
    monkeypatch.setenv("PLAIN_CANARY_VAR", "recorded-here")
    x = jnp.ones(8)
    call = faulty.options.bound(faulty.options.bind((x,), {})).recorded_call(faulty.config_for(x))
    stored, read = _stored(tmp_path, call.to_wire())
    assert b"recorded-here" not in stored
    assert "environ" not in read["request"] and read["request"]["args"] is not None


@pytest.mark.parametrize("old", [False, True], ids=["new", "written-before"])
def test_a_replay_sends_this_process_variables(monkeypatch, tmp_path, old):
    raw = _request(monkeypatch).recorded().to_wire()
    if old:  # as jaxtune wrote recordings before it kept the variables out
        raw = {**raw, "environ": {"PLAIN_CANARY_VAR": "recorded-here", "GONE": "1"}}
    monkeypatch.setenv("PLAIN_CANARY_VAR", "replayed-here")
    replayed = _requests.read_request(_stored(tmp_path, raw)[1])
    assert replayed.environ is not None
    assert replayed.environ["PLAIN_CANARY_VAR"] == "replayed-here"
    assert "GONE" not in replayed.environ
    assert replayed.ref == Request.from_wire(raw).ref


def test_a_sidecar_written_before_is_read_without_its_variables(monkeypatch):
    request = _request(monkeypatch).to_wire()  # as older jaxtunes kept it, without arrays
    assert request["environ"]["PLAIN_CANARY_VAR"] == "recorded-here"
    call = RecordedCall(
        kernel="tests.faulty", key="f32[8]", source="cache", request={**request, "args": None}
    )
    raw = unpackb(packb({**CaptureInfo(calls=(call,)).to_dict(), "iterations": 3}))
    info, iterations = _sidecar.read_sidecar(raw)
    assert iterations == 3
    (read,) = info.calls
    assert read.request == {k: v for k, v in call.request.items() if k != "environ"}
    assert b"recorded-here" not in packb(info.to_dict())
