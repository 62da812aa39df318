"""End to end: `jaxtune tune -- python script.py`, then a plain run that uses the cache
(docs/whole-model.md, "jaxtune tune -- python train.py ..."); the sweep child starts while
the program runs (docs/isolation.md, "One long-lived child")."""

from __future__ import annotations

import contextlib
import json
import os
import pathlib
import re
import subprocess
import sys
import textwrap

import pytest
from example_program import TRAIN
from waiting import until

pytestmark = [pytest.mark.slow, pytest.mark.child]

ROOT = pathlib.Path(__file__).resolve().parent.parent

SCRIPT = TRAIN

PARENT = textwrap.dedent(
    """
    import sys
    from jaxtune import _cli
    code = _cli.main(sys.argv[1:])
    from jax._src import xla_bridge
    print("PARENT-BACKENDS", sorted(xla_bridge._backends), file=sys.stderr)
    sys.exit(code)
    """
)


UNGUARDED = textwrap.dedent(
    """
    import os, time

    import jax, jax.numpy as jnp

    import jaxtune

    with open(os.environ["PROBE_LOG"], "a") as log:  # each run of the top level
        log.write(f"{os.getpid()}\\n")


    @jaxtune.autotuned(configs={"c": [1, 2]}, name="tests.unguarded.scale")
    def scale(x, *, c):
        return x * c / c


    step = jax.jit(lambda x: scale(x).sum())
    while True:  # the program's work, at the top level: no __main__ guard
        step(jnp.ones(64)).block_until_ready()
        time.sleep(0.2)
    """
)


def _tune_script(parent: str, script: pathlib.Path, env: dict[str, str]):
    """``jaxtune tune -- python SCRIPT`` from ``parent`` (a program that runs the command),
    in the script's folder."""
    return subprocess.run(
        [sys.executable, "-c", parent, "tune", "--", sys.executable, str(script)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        cwd=script.parent,
    )


def test_a_script_whose_rerun_hangs_costs_the_time_limit_once(tmp_path):
    """A new user's script with no ``__main__`` guard and its loop at the top level: the
    child that re-runs it to find the kernel never ends its import. It is started while
    the program runs and killed at the time limit, and the sweep then says so instead of
    re-running the script in a new child for as long again."""
    script = tmp_path / "train.py"
    script.write_text(UNGUARDED)
    log = tmp_path / "runs.log"
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "JAXTUNE_ISOLATION": "process",
        "JAXTUNE_TIMEOUT": "3",
        "JAXTUNE_CACHE_DIR": str(tmp_path / "cache"),
        "PROBE_LOG": str(log),
    }
    proc = _tune_script(PARENT, script, env)
    said = proc.stdout + proc.stderr
    assert proc.returncode != 0, said
    assert f"the jaxtune child hung importing the script {script}" in said, said
    assert "no answer within the 3 s limit" in said
    # The program's run, and one child's re-run of the script: not a second child's.
    assert len(log.read_text().split()) == 2, log.read_text()


def test_tune_command_records_tunes_and_a_plain_run_uses_the_cache(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "JAXTUNE_ISOLATION": "process"}
    tuned = subprocess.run(
        [sys.executable, "-c", PARENT, "tune", "--json", "--", sys.executable, str(script)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
    )
    assert tuned.returncode == 0, tuned.stderr[-3000:]
    doc = json.loads(tuned.stdout)
    assert doc["recorded"] == 2
    assert {t["kernel"] for t in doc["tuned"]} == {
        "jaxtune.examples.chunked_logsumexp",
        "jaxtune.examples.pallas_matmul",
    }
    assert all(t["speedup"] for t in doc["tuned"])
    # Staleness in cache list's words: just tuned, so current.
    assert all(not t["stale"] and t["stale_reasons"] == [] for t in doc["tuned"])
    # With --json the program's own output goes to stderr: stdout is the document alone.
    assert "loss" not in tuned.stdout and "loss" in tuned.stderr
    # The orchestrating parent never started a JAX backend.
    assert "PARENT-BACKENDS []" in tuned.stderr

    plain = subprocess.run(
        [sys.executable, str(script)],
        env={**env, "JAXTUNE_VERBOSE": "1"},
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
    )
    assert plain.returncode == 0, plain.stderr[-3000:]
    assert plain.stdout.count("loss") == 3
    assert "jaxtune.examples.pallas_matmul f32[64,64],f32[64,64]" in plain.stderr
    assert plain.stderr.count("(from cache)") == 2

    again = subprocess.run(
        [sys.executable, "-m", "jaxtune", "tune", "--", sys.executable, str(script)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
    )
    assert again.returncode == 0, again.stderr[-3000:]
    assert "2 already had a config; tuned 0" in again.stdout


#: A program whose kernels sit in two jitted functions, the second first called on the
#: third step, that would loop for ever: recording must reach both, and stop it.
TWO_JITS = textwrap.dedent(
    """
    import jax, jax.numpy as jnp
    import jaxtune

    @jaxtune.autotuned(configs={"chunk": [128, 256]}, name="test.cli.train_kernel")
    def train_kernel(x, *, chunk):
        return (x.reshape(-1, chunk) * 2).reshape(x.shape)

    @jaxtune.autotuned(configs={"chunk": [128, 512]}, name="test.cli.eval_kernel")
    def eval_kernel(x, *, chunk):
        return (x.reshape(-1, chunk) + 1).reshape(x.shape)

    train = jax.jit(lambda x: train_kernel(x).sum())
    evaluate = jax.jit(lambda x: eval_kernel(x).mean())

    if __name__ == "__main__":
        x = jnp.ones(1024)
        step = 0
        while True:
            float(train(x))
            if step >= 2:
                float(evaluate(x))
            step += 1
    """
)


def test_tune_reaches_kernels_in_two_jitted_functions_and_says_why_it_stopped(tmp_path):
    script = tmp_path / "prog.py"
    script.write_text(TWO_JITS)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-m", "jaxtune", "tune", "--settle", "1", "--", "python", str(script)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "recorded 2 autotuned calls; 0 already had a config; tuned 2" in done.stdout
    assert "test.cli.train_kernel" in done.stdout and "test.cli.eval_kernel" in done.stdout
    assert re.search(
        r"stopped the program after [\d.]+ s, once it had traced and compiled nothing new "
        r"for 1 s \([2-9] compilations since its first autotuned call\)",
        done.stderr,
    ), done.stderr[-3000:]
    assert "--full runs it to its end" in done.stderr
    # cache check records the same calls: both current now.
    check = subprocess.run(
        [
            sys.executable,
            "-m",
            "jaxtune",
            "cache",
            "check",
            "--settle",
            "1",
            "--",
            "python",
            str(script),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
    )
    assert check.returncode == 0, check.stdout + check.stderr[-3000:]
    assert "recorded 2 autotuned calls: 2 current, 0 missing, 0 stale" in check.stdout


#: A kernel's module that notes each process importing it (its pid, one line each).
KERNELS = textwrap.dedent(
    """
    import os
    import jaxtune

    with open(os.environ["IMPORT_LOG"], "a") as log:
        print(os.getpid(), file=log)

    @jaxtune.autotuned(configs={"chunk": [256, 4096]}, name="test.cli.scaled")
    def scaled(x, *, chunk):
        return (x.reshape(-1, chunk) * 2).reshape(x.shape)
    """
)

#: A program that, before its step, waits for a sweep child of the command running it (a
#: sibling: its parent is this program's parent), then, once its call is recorded (traced)
#: and before its step compiles (where recording stops it), for that child to import the
#: kernel's module; it says what it saw.
WAITS_FOR_THE_CHILD = textwrap.dedent(
    """
    import os, pathlib, sys, time
    import jax, jax.numpy as jnp
    from kernels import scaled

    def sibling_child():
        for proc in pathlib.Path("/proc").iterdir():
            try:
                cmd = (proc / "cmdline").read_bytes()
                ppid = int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            if b"jaxtune._isolation.child" in cmd and ppid == os.getppid():
                return int(proc.name)
        return None

    def imported_in(pid):
        # Whole lines: one another process is still appending has no newline yet.
        text = pathlib.Path(os.environ["IMPORT_LOG"]).read_text()
        return str(pid) in text.split("\\n")[:-1]

    def wait(until):
        deadline = time.monotonic() + 120
        while not until() and time.monotonic() < deadline:
            time.sleep(0.05)

    wait(lambda: sibling_child() is not None)
    pid = sibling_child()
    print("SIBLING-CHILD", pid, file=sys.stderr, flush=True)
    lowered = jax.jit(lambda x: scaled(x).sum()).lower(jnp.ones(1 << 16))
    wait(lambda: imported_in(pid))
    print("IMPORTED-IN", pid if imported_in(pid) else None, file=sys.stderr, flush=True)
    lowered.compile()
    """
)

#: The command, with every sweep child it starts named on stderr.
COUNTS_CHILDREN = textwrap.dedent(
    """
    import subprocess, sys
    real = subprocess.Popen.__init__

    def counting(self, args, *a, **k):
        real(self, args, *a, **k)
        if any("jaxtune._isolation.child" in str(x) for x in args):
            print("STARTED-CHILD", self.pid, file=sys.stderr, flush=True)

    subprocess.Popen.__init__ = counting
    from jaxtune import _cli
    sys.exit(_cli.main(sys.argv[1:]))
    """
)


@pytest.mark.skipif(
    not pathlib.Path("/proc/self/stat").exists(),
    reason=(
        "no /proc here (not Linux): the program finds the command's sweep child, its "
        "sibling, by reading each process's parent in /proc/PID/stat"
    ),
)
def test_the_sweep_child_starts_and_imports_the_kernel_while_the_program_runs(tmp_path):
    from jaxtune._isolation.devices import cpu_only

    script = tmp_path / "train.py"
    script.write_text(WAITS_FOR_THE_CHILD)
    (tmp_path / "kernels.py").write_text(KERNELS)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), str(tmp_path)]),
        "JAXTUNE_CACHE_DIR": str(tmp_path / "cache"),
        "IMPORT_LOG": str(tmp_path / "imports.log"),
    }
    if not cpu_only() and not env.get("JAX_PLATFORMS"):
        # The command starts the child ahead of need only once it knows the platform: with
        # an accelerator plugin installed, JAX_PLATFORMS tells it (the CPU, as in CI).
        env["JAX_PLATFORMS"] = "cpu"
    proc = _tune_script(COUNTS_CHILDREN, script, env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    # Anywhere in a line: the command's own lines share stderr with these, and a line of
    # one process may end in the middle of the other's.
    started = re.findall(r"STARTED-\S+ (\S+)", proc.stderr)
    seen = re.findall(r"SIBLING-\S+ (\S+)", proc.stderr)
    imported = re.findall(r"IMPORTED-\S+ (\S+)", proc.stderr)
    # The program saw the command's sweep child while it ran, and that child imported the
    # kernel's module once the call was recorded, before the program's step compiled...
    assert seen == started[:1] and seen != ["None"], proc.stderr[-3000:]
    assert imported == seen, proc.stderr[-3000:]
    # ...and that one child swept, without importing the module again.
    assert len(started) == 1, proc.stderr[-3000:]
    assert (tmp_path / "imports.log").read_text().split().count(seen[0]) == 1
    assert "tuned 1" in proc.stdout


def test_the_recording_is_followed_frame_by_frame_while_it_is_written(tmp_path):
    """Each call frame reaches the follower once, a frame written in two parts only once
    it is whole, and nothing but call frames."""
    import threading

    from jaxtune._cli.tune import _follow
    from jaxtune._isolation.framing import frame_parts

    path = tmp_path / "calls.msgpack"
    path.write_bytes(b"")
    got: list = []

    def call(kernel: str) -> bytes:
        return b"".join(
            frame_parts({"t": "call", "kernel": kernel, "key": "k", "source": "default"})
        )

    done = threading.Event()
    follower = threading.Thread(target=_follow, args=(str(path), got.append, done))
    follower.start()

    def append(data: bytes) -> None:
        with open(path, "ab") as f:
            f.write(data)

    def wait_for(n: int) -> None:
        until(lambda: len(got) >= n, f"{n} frames from the follower")

    def read_to_the_end() -> bool:
        """Whether the follower's descriptor has read all that was written so far."""
        for fd in os.listdir("/proc/self/fd"):
            with contextlib.suppress(OSError):
                if os.readlink(f"/proc/self/fd/{fd}") == str(path):
                    pos = pathlib.Path(f"/proc/self/fdinfo/{fd}").read_text().split()[1]
                    return int(pos) == path.stat().st_size
        return False

    try:
        append(call("a"))
        wait_for(1)
        whole = call("b")
        append(whole[:7])  # the program is still writing this one
        until(read_to_the_end, "the follower to read the first part of b")
        assert [f.kernel for f in got] == ["a"]  # b is not whole: not given yet
        stopped = {"t": "stopped", "after_s": 1.0, "settle_s": 1.0, "compiles": 0}
        append(whole[7:] + b"".join(frame_parts(stopped)))
        append(call("c"))
        wait_for(3)
    finally:
        done.set()
        follower.join()
    assert [f.kernel for f in got] == ["a", "b", "c"]


def test_tune_command_needs_a_program(cli):
    proc = cli("tune")
    assert proc.returncode == 2
    assert "jaxtune tune: it needs a command to run: jaxtune tune -- python" in proc.stderr


def test_retune_summary_counts_the_calls_that_had_a_config():
    from jaxtune._cli.tune import summary_line

    assert summary_line(2, 2, 2, retune=True) == (
        "recorded 2 autotuned calls; 2 already had a config (re-tuned: --retune); tuned 2"
    )
    assert summary_line(1, 0, 1, retune=False) == (
        "recorded 1 autotuned call; 0 already had a config; tuned 1"
    )


#: Two kernels' modules: ``good`` imports anywhere, ``refuses`` raises where a sweep child
#: imports it (the program itself imports it fine).
GOOD_AND_REFUSING = {
    "good.py": textwrap.dedent(
        """
        import jaxtune

        @jaxtune.autotuned(configs={"chunk": [256, 4096]}, name="test.cli.good")
        def good(x, *, chunk):
            return (x.reshape(-1, chunk) * 2).reshape(x.shape)
        """
    ),
    "refuses.py": textwrap.dedent(
        """
        import os
        import jaxtune

        if os.environ.get("JAXTUNE_PARENT_PID"):
            raise RuntimeError("refuses: not in a sweep child")

        @jaxtune.autotuned(configs={"chunk": [256, 4096]}, name="test.cli.refuses")
        def refuses(x, *, chunk):
            return (x.reshape(-1, chunk) * 3).reshape(x.shape)
        """
    ),
    "train.py": textwrap.dedent(
        """
        import jax, jax.numpy as jnp
        from good import good
        from refuses import refuses

        x = jnp.ones(2**14)
        print(float(jax.jit(lambda x: good(x) + refuses(x))(x).sum()))
        """
    ),
}


def test_a_kernel_the_child_cannot_import_is_a_problem_line_and_the_others_are_tuned(tmp_path):
    for name, text in GOOD_AND_REFUSING.items():
        (tmp_path / name).write_text(text)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), str(tmp_path)]),
        "JAXTUNE_CACHE_DIR": str(tmp_path / "cache"),
    }
    proc = subprocess.run(
        [sys.executable, "-m", "jaxtune", "tune", "--json", "--", sys.executable, "train.py"],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
    )
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert "unexpected" not in proc.stderr
    doc = json.loads(proc.stdout)
    assert [t["kernel"] for t in doc["tuned"]] == ["test.cli.good"]
    (problem,) = doc["problems"]
    assert problem.startswith("test.cli.refuses ")
    assert "could not import it" in problem and "refuses: not in a sweep child" in problem
    assert "importable on its own" in problem


def test_a_retune_without_the_retune_extra_says_how_to_keep_the_lowered_programs(
    monkeypatch, tmp_path
):
    """A new user's --retune traced every config again (30 s of 70) and nothing said that
    `jaxtune[retune]` keeps the lowered programs for the next one."""
    from test_cache import make_entry

    from jaxtune._cli import tune as _tune
    from jaxtune._tuning.sweep import compile_cache, program_store

    entry = make_entry(phases={"lowering": 30.4, "total": 69.5})
    monkeypatch.setattr(compile_cache, "own_folder", lambda: tmp_path)
    monkeypatch.setattr(program_store, "serialisable", lambda: False)
    hint = _tune.retune_hint([entry])
    assert "30.4 s of lowering" in hint and "pip install 'jaxtune[retune]'" in hint
    monkeypatch.setattr(program_store, "serialisable", lambda: True)  # the extra is there
    assert _tune.retune_hint([entry]) == ""
    monkeypatch.setattr(program_store, "serialisable", lambda: False)
    monkeypatch.setattr(compile_cache, "own_folder", lambda: None)  # JAXTUNE_COMPILE_CACHE=0
    assert _tune.retune_hint([entry]) == ""


def _marks_its_run(tmp_path, verb: str, **variables: str):
    """``python -m jaxtune VERB -- python -c ...`` with ``variables`` set, the program
    writing a file: ``(the finished process, whether the program ran)``."""
    marker = tmp_path / "ran"
    program = [sys.executable, "-c", f"open({str(marker)!r}, 'w')"]
    proc = subprocess.run(
        [sys.executable, "-m", "jaxtune", *verb.split(), "--", *program],
        env={**os.environ, "PYTHONPATH": str(ROOT), **variables},
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    return proc, marker.exists()


@pytest.mark.parametrize("verb", ["tune", "profile", "cache check"])
def test_a_bad_setting_is_said_before_the_program_runs(tmp_path, verb):
    """A new user's JAXTUNE_MODE=tnue was reported once the program had traced its first
    kernel, 12-23 s in, the program having run (and crashed) first."""
    proc, ran = _marks_its_run(tmp_path, verb, JAXTUNE_MODE="tnue")
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "JAXTUNE_MODE='tnue' is not valid" in proc.stderr
    assert not ran


def test_a_setting_profile_sets_for_the_program_is_not_refused(tmp_path):
    """``jaxtune profile`` sets JAXTUNE_PROFILE for the program itself: a bad value the
    user left in the variable never reaches the program, and is no reason to refuse."""
    proc, ran = _marks_its_run(tmp_path, "profile", JAXTUNE_PROFILE="bogus")
    assert "not valid" not in proc.stderr, proc.stderr[-3000:]
    assert ran
