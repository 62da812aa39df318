"""No variable of the environment reaches a file jaxtune writes (docs/files.md, "What each
file holds", "No environment is written" and "Secrets in logs and messages"): every
command and flow runs with canary variables set, with real children, then every file
under the log dir, the cache dir, the shared store and the temporary folder is searched
(gzip opened) for the canary. The variables still reach the children that need them:
the kernel refuses to trace where they are missing, so a sweep replayed from a recording
without them would fail."""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import json
import os
import pathlib
import subprocess
import sys
import textwrap
import uuid

import pytest

import jaxtune
from jaxtune._core.masking import MASK
from jaxtune._core.vocabulary import Failure

pytestmark = [pytest.mark.slow, pytest.mark.child]

ROOT = pathlib.Path(__file__).resolve().parent.parent
#: Variables set for every run: named like secrets, and one that is not (no file may hold
#: it either, masked or not).
SECRET_NAMES = ("CANARY_TOKEN", "MY_SECRET", "AWS_SECRET_ACCESS_KEY", "DB_PASSWORD")
PLAIN_NAME = "PLAIN_CANARY_VAR"

PROGRAM = textwrap.dedent(
    """
    import ctypes, hashlib, os, sys, time
    import jax, jax.numpy as jnp
    import jaxtune

    SECRET_NAMES = {secret_names!r}


    def _check_environment():
        # The program's variables reach every process that traces its kernels (a sweep's
        # child, a capture's child, a replayed recording's child); the digest, not the
        # value, so that no source shown in a report holds the canary.
        plain = os.environ.get({plain_name!r}, "").encode()
        if hashlib.sha256(plain).hexdigest() != {digest!r}:
            raise RuntimeError("this process lacks the program's variables")


    @jaxtune.autotuned(configs={{"chunk": [8, 16, 32]}}, default={{"chunk": 8}}, name="canary.scale")
    def scale(x, *, chunk):
        _check_environment()
        return (x.reshape(-1, chunk) * 2.0).reshape(x.shape)


    @jaxtune.autotuned(
        configs={{"mode": ["ok", "crash", "hang"]}},
        default={{"mode": "ok"}},
        name="canary.faulty",
        timeout=3,
    )
    def faulty(x, *, mode):
        _check_environment()
        if mode != "ok":  # as a library that logs its settings before it fails
            print("CANARY_TOKEN=" + os.environ["CANARY_TOKEN"], file=sys.stderr)
            print(os.environ["MY_SECRET"], file=sys.stderr)
            print({{k: os.environ[k] for k in SECRET_NAMES}}, file=sys.stderr, flush=True)
        if mode == "crash":
            ctypes.string_at(0)
        if mode == "hang":
            while True:
                time.sleep(0.01)
        return x + 1.0


    @jaxtune.profiled
    @jax.jit
    def step(x):
        return scale(x).sum()


    if __name__ == "__main__":
        x = jnp.arange(64.0)
        for _ in range(3):
            print("loss", float(step(x)), flush=True)
        if "faulty" in sys.argv:
            print("faulty", float(faulty(x).sum()), flush=True)
        if "explicit" in sys.argv:
            out = sys.argv[-1]
            profile = step.profile(x)
            profile.save(os.path.join(out, "explicit.json"))
            with open(os.path.join(out, "explicit.html"), "w") as f:
                f.write(profile.to_html())
    """
)


@dataclasses.dataclass
class Runs:
    canary: str
    #: Where jaxtune wrote: the log dir, the cache dir, the store, the temporary folder.
    written: dict[str, pathlib.Path]
    done: dict[str, subprocess.CompletedProcess[str]]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Runs:
    canary = f"jaxtune-canary-{uuid.uuid4().hex}"
    root = tmp_path_factory.mktemp("canary")
    written = {name: root / name for name in ("logs", "cache", "store", "tmp")}
    for folder in written.values():
        folder.mkdir()
    home = root / f"home-{canary}"  # a path from the user's home is a canary too
    home.mkdir()
    program = root / "prog" / "prog.py"
    program.parent.mkdir()
    values = {name: f"{canary}-{name.lower()}" for name in (*SECRET_NAMES, PLAIN_NAME)}
    digest = hashlib.sha256(values[PLAIN_NAME].encode()).hexdigest()
    program.write_text(
        PROGRAM.format(secret_names=SECRET_NAMES, plain_name=PLAIN_NAME, digest=digest)
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("JAXTUNE_")}
    env.update(
        values,
        PYTHONPATH=str(ROOT),
        HOME=str(home),
        TMPDIR=str(written["tmp"]),
        JAXTUNE_CACHE_DIR=str(written["cache"]),
        JAXTUNE_REMOTE_CACHE=str(written["store"]),
    )
    logs = written["logs"]
    python = [sys.executable, str(program)]
    jaxtune = [sys.executable, "-m", "jaxtune"]
    flows: dict[str, tuple[list[str], dict[str, str]]] = {
        # What `jaxtune tune --` records (it deletes its own recording when it ends).
        "recording": (python, {"JAXTUNE_RECORD": str(logs / "recording.msgpack")}),
        "profile": ([*jaxtune, "profile", "--logdir", str(logs / "prof"), "--", *python], {}),
        "explicit": ([*python, "explicit", str(logs)], {}),
        "report": ([*jaxtune, "report", str(logs / "prof"), "--html", str(logs / "r.html")], {}),
        "tune": ([*jaxtune, "tune", "--json", "--", *python], {}),
        "from_profile": ([*jaxtune, "tune", "--retune", "--from-profile", str(logs / "prof")], {}),
        "tune_mode": ([*python, "faulty"], {"JAXTUNE_MODE": "tune"}),
        "export": ([*jaxtune, "cache", "export", str(logs / "export.msgpack")], {}),
        "export_dir": ([*jaxtune, "cache", "export", "--dir", str(logs / "exported")], {}),
        "push": ([*jaxtune, "cache", "push"], {}),
        "sweep_page": ([*jaxtune, "cache", "show", "--html", str(logs / "sweeps.html")], {}),
    }
    done = {}
    for name, (command, extra) in flows.items():
        done[name] = subprocess.run(
            command,
            env={**env, **extra},
            capture_output=True,
            text=True,
            timeout=600,
            cwd=program.parent,
        )
    return Runs(canary=canary, written=written, done=done)


def _files(folder: pathlib.Path) -> list[pathlib.Path]:
    return [p for p in sorted(folder.rglob("*")) if p.is_file() and not p.is_symlink()]


def _holds(path: pathlib.Path, needle: bytes) -> bool:
    data = path.read_bytes()
    if path.suffix == ".gz":
        data += gzip.decompress(data)
    return needle in data


def test_every_flow_ran_and_its_children_saw_the_programs_variables(runs):
    for name, done in runs.done.items():
        assert done.returncode == 0, f"{name}: {done.stderr[-3000:]}"
    # `jaxtune tune --` swept in a child that read the variables (the kernel traces
    # nowhere else), though the recording it replayed holds none.
    doc = json.loads(runs.done["tune"].stdout)
    assert [t["kernel"] for t in doc["tuned"]] == ["canary.scale"]
    assert "canary.scale" in runs.done["from_profile"].stdout
    assert "faulty" in runs.done["tune_mode"].stdout
    logs = runs.written["logs"]
    assert (logs / "prof" / "step-1" / "trace" / "jaxtune-info.msgpack").is_file()
    assert (logs / "prof" / "step-1" / "report.calls.msgpack").is_file()
    assert (logs / "explicit.calls.msgpack").is_file()
    assert (logs / "recording.msgpack").stat().st_size > 0
    assert list(runs.written["store"].rglob("*.msgpack"))


def test_no_file_jaxtune_wrote_holds_a_variable_of_the_environment(runs):
    searched = [p for folder in runs.written.values() for p in _files(folder)]
    assert len(searched) > 20, searched  # the flows wrote what is searched
    leaks = [str(p) for p in searched if _holds(p, runs.canary.encode())]
    assert not leaks


def test_a_crashing_and_a_hanging_config_leave_their_secrets_masked(runs):
    crash_logs = [p for p in _files(runs.written["tmp"]) if p.name.startswith("crash-")]
    assert crash_logs  # the crash and the hang
    for log in crash_logs:
        text = log.read_text(errors="replace")
        assert f"CANARY_TOKEN={MASK}" in text and f"'MY_SECRET': '{MASK}'" in text, text[-2000:]
    # A failure reason quotes the end of the child's stderr (after a crash, the report of
    # the fatal error: the hang's shows what was printed), masked.
    exported = jaxtune.TuningResult.load(runs.written["logs"] / "export.msgpack")
    (entry,) = [e for e in exported.values() if e.kernel == "canary.faulty"]
    failed = {m.config["mode"]: m for m in entry.measurements if isinstance(m, Failure)}
    assert set(failed) == {"crash", "hang"}, entry.measurements
    assert [failed["crash"].stage, failed["hang"].stage] == ["crash", "timeout"]
    assert f"CANARY_TOKEN={MASK}" in failed["hang"].reason, failed["hang"].reason
