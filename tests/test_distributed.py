"""Multi-host agreement with real ``jax.distributed`` jobs of 2 and 4 local CPU processes
(coordinator on 127.0.0.1), and the protocol itself with threads over an in-memory store.

Covers docs/distributed.md, "How it works", "Settings" and "When agreement fails:
jaxtune.AgreementError"."""

from __future__ import annotations

import concurrent.futures
import dataclasses
import hashlib
import json
import os
import pathlib
import socket
import subprocess
import sys
import threading
import time

import jax
import jax.numpy as jnp
import pytest
from local_store import LocalStore, as_process, thread_store

from jaxtune._core import settings as _settings
from jaxtune._core.errors import AgreementError, SettingsError, TuningFailedError
from jaxtune._core.vocabulary import Choice, Failure, Measurement, config_id
from jaxtune._distributed import agree as _agree
from jaxtune._distributed.coordination import KeyValueLostError, agreement_key
from jaxtune._isolation import devices as _devices
from jaxtune._tuning.sweep import shard as _shard
from jaxtune._tuning.sweep.stats import finish

HERE = pathlib.Path(__file__).resolve().parent
WORKER = HERE / "distributed_worker.py"
ROOT = HERE.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Worker:
    """One started worker process, its stdout and stderr read line by line as they come."""

    def __init__(self, proc: subprocess.Popen) -> None:
        self.proc = proc
        self.out: list[str] = []
        self.err: list[str] = []
        self.readers = [
            threading.Thread(target=self._read, args=(proc.stdout, self.out), daemon=True),
            threading.Thread(target=self._read, args=(proc.stderr, self.err), daemon=True),
        ]
        for reader in self.readers:
            reader.start()

    @staticmethod
    def _read(stream, into: list[str]) -> None:
        with stream:
            for line in stream:
                into.append(line)

    def report(self) -> dict:
        for reader in self.readers:
            reader.join(timeout=10)
        lines = [line for line in self.out if line.startswith("{")]
        report = json.loads(lines[-1]) if lines else {}
        report["returncode"] = self.proc.returncode
        report["stderr"] = "".join(self.err)
        return report


def run_job(
    tmp_path: pathlib.Path,
    scenario: str,
    nproc: int,
    *,
    timeout: float = 120,
    kill_leader_after: str | None = None,
    **env: str,
) -> list[dict]:
    """Starts ``nproc`` workers, waits for all (bounded), kills any left, and returns each
    one's JSON report (``{}`` for a process that printed none), by process id.

    With ``kill_leader_after``, process 0 gets SIGKILL once every other process has written
    that text to stderr."""
    coordinator = f"127.0.0.1:{free_port()}"
    workers: list[Worker] = []
    try:
        for pid in range(nproc):
            cache = tmp_path / f"cache{pid}"
            full_env = {
                **os.environ,
                "PYTHONPATH": os.pathsep.join([str(ROOT), str(HERE)]),
                "JAX_PLATFORMS": "cpu",
                "JAXTUNE_CACHE_DIR": str(cache),
                "JAXTUNE_ISOLATION": "inline",
                **env,
            }
            proc = subprocess.Popen(
                [sys.executable, str(WORKER), scenario, coordinator, str(nproc), str(pid)],
                env=full_env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                start_new_session=True,
            )
            workers.append(Worker(proc))
        deadline = time.monotonic() + timeout
        if kill_leader_after is not None:
            while not all(kill_leader_after in "".join(w.err) for w in workers[1:]):
                if time.monotonic() > deadline or any(w.proc.poll() is not None for w in workers):
                    pytest.fail(
                        f"not every follower wrote {kill_leader_after!r}: "
                        + "".join(
                            f"\n--- process {i}:\n{''.join(w.err)[-2000:]}"
                            for i, w in enumerate(workers)
                        )
                    )
                time.sleep(0.05)
            workers[0].proc.kill()
        reports = []
        for worker in workers:
            try:
                worker.proc.wait(timeout=max(1.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pytest.fail(f"a {scenario} worker did not finish within {timeout} s")
            reports.append(worker.report())
        return reports
    finally:
        for worker in workers:
            if worker.proc.poll() is None:
                worker.proc.kill()
                worker.proc.wait(timeout=10)


@pytest.mark.child
@pytest.mark.slow
@pytest.mark.parametrize("nproc", [2, 4])
def test_conflicting_caches_all_use_the_leaders_config(tmp_path, nproc):
    reports = run_job(tmp_path, "conflict", nproc, JAXTUNE_MODE="cached")
    # Each process planted pid + 5 in its own cache; process 0's value wins.
    assert [r.get("block") for r in reports] == [5.0] * nproc, reports


@pytest.mark.child
@pytest.mark.slow
@pytest.mark.parametrize("nproc", [2, 4])
def test_sharded_sweep_picks_the_single_process_winner(tmp_path, nproc):
    (single,) = run_job(tmp_path / "one", "sweep", 1, JAXTUNE_MODE="tune")
    reports = run_job(tmp_path, "sweep", nproc, JAXTUNE_MODE="tune")
    # Blocks 2 and 3 tie for the best time; the tie goes to 2, first in the space.
    assert single["block"] == 2.0
    assert [r["block"] for r in reports] == [2.0] * nproc, reports
    shares = [set(r["measured"]) for r in reports]
    assert all(shares), shares
    assert set().union(*shares) == set(range(1, 9))
    assert sum(len(s) for s in shares) == 8  # nobody measured another's configs
    assert reports[0]["cache_files"] and not any(r["cache_files"] for r in reports[1:])


@pytest.mark.child
@pytest.mark.slow
def test_silent_leader_gives_every_follower_an_agreement_error(tmp_path):
    reports = run_job(tmp_path, "silent_leader", 4, JAXTUNE_AGREE_TIMEOUT="3")
    for r in reports[1:]:
        assert r["returncode"] == 3, r
        # It waited out the agreement timeout first (only that wait ends in this message).
        assert "waited 3 s (JAXTUNE_AGREE_TIMEOUT)" in r["error"], r
        assert "process 0 (the leader)" in r["error"]
        assert "tests.distributed.scaled" in r["error"] and "f32[4]" in r["error"]
        assert "JAXTUNE_AGREE_TIMEOUT" in r["error"]


#: What a follower writes to stderr once it has waited a second for the leader.
WAITING = (
    "jaxtune: process {pid} is waiting for process 0 (the leader) to publish the config of "
    "tests.distributed.scaled for f32[4] (at most 30 s, JAXTUNE_AGREE_TIMEOUT). If process 0 "
    "dies meanwhile, JAX's distributed runtime ends this process too"
)
JAX_ENDS_IT = "Terminating process because the JAX distributed service detected fatal errors"


@pytest.mark.child
@pytest.mark.slow
@pytest.mark.parametrize("nproc", [2, 4])
def test_killed_leader_ends_every_follower_after_naming_the_decision(tmp_path, nproc):
    """Process 0 is killed while the others wait for its config. It hosts the coordination
    service, so JAX's runtime ends the followers at once, often before jaxtune's error can
    surface; what is certain is the follower's line, written before the kill, naming the
    kernel, the key and the leader."""
    reports = run_job(
        tmp_path,
        "killed_leader",
        nproc,
        timeout=120,
        kill_leader_after="is waiting for process 0",
        JAXTUNE_AGREE_TIMEOUT="30",
    )
    assert reports[0]["returncode"] == -9
    for pid, r in enumerate(reports[1:], start=1):
        assert r["returncode"] != 0 and "block" not in r, r
        # Ended by the kill, not by waiting out JAXTUNE_AGREE_TIMEOUT.
        assert "waited 30 s (JAXTUNE_AGREE_TIMEOUT)" not in r.get("error", "") + r["stderr"], r
        notice = r["stderr"].find(WAITING.format(pid=pid))
        assert notice >= 0, r
        assert "process 0's log says why" in r["stderr"][notice:], r
        jax_at = r["stderr"].find(JAX_ENDS_IT)
        assert jax_at == -1 or jax_at > notice, r
        ours = "lost the coordination service" in r.get("error", "")
        assert ours or jax_at > 0, r


@pytest.mark.child
@pytest.mark.slow
def test_leader_killed_at_once_ends_every_follower(tmp_path):
    """Process 0 dies half a second in, before any follower has said it waits: each
    follower still ends at once, by jaxtune's error or by JAX's runtime."""
    reports = run_job(tmp_path, "leader_dies_at_once", 2, timeout=90, JAXTUNE_AGREE_TIMEOUT="20")
    assert reports[0]["returncode"] == -9
    for r in reports[1:]:
        assert r["returncode"] != 0 and "block" not in r, r
        ours = "lost the coordination service" in r.get("error", "")
        assert ours or JAX_ENDS_IT in r["stderr"], r
        if ours:
            assert "process 0 (the leader)" in r["error"]
            assert "tests.distributed.scaled for f32[4]" in r["error"]


@pytest.mark.child
@pytest.mark.slow
def test_one_child_per_cpu_device_picks_the_one_child_winner(tmp_path):
    """16 configs in tune mode: split over 4 CPU devices' children, and in one child."""
    runs = {}
    for count in (4, 1):
        probe = tmp_path / f"pids{count}"
        (report,) = run_job(
            tmp_path / f"d{count}",
            "devices",
            1,
            timeout=300,
            JAXTUNE_MODE="tune",
            JAXTUNE_ISOLATION="process",
            XLA_FLAGS=f"--xla_force_host_platform_device_count={count}",
            PID_PROBE_FILE=str(probe),
        )
        pids = set(probe.read_text().split())
        runs[count] = (report, pids)
    assert runs[4][0]["reps"] == runs[1][0]["reps"] == 1, runs
    assert len(runs[1][1]) == 2  # the job itself traced once, one child measured everything
    assert len(runs[4][1]) == 5  # the job, and one child per device
    # Left to itself, the job would start at most one child per core it may use.
    expected = list(range(min(4, _devices.usable_cores())))
    assert runs[4][0]["by_default"] == (expected if len(expected) > 1 else None), runs
    assert runs[1][0]["by_default"] is None


# -- the protocol, with threads playing the processes over an in-memory store ------------


@pytest.fixture(autouse=True)
def _threads_play_processes(monkeypatch):
    monkeypatch.setattr(_agree, "key_value", thread_store)


def play(nproc: int, body, *, timeout: float = 30):
    """Runs ``body(process_id)`` in one thread per process of an in-memory job."""
    store = LocalStore(nproc)

    def one(pid: int):
        with as_process(store.view(pid)):
            try:
                return body(pid)
            except Exception as e:
                return e

    with concurrent.futures.ThreadPoolExecutor(nproc) as ex:
        results = list(ex.map(one, range(nproc), timeout=timeout))
    return results, store


def question(decide, *, task=None, runner=None, key="f32[4]") -> _agree.Question:
    return _agree.Question(
        kernel="k",
        key=key,
        version="",
        device_kind="cpu",
        decide=decide,
        task=task or (lambda: None),
        sharing=None if runner is None else _shard.SweepSharing(runner),
    )


def test_agreement_key_is_a_stable_digest():
    key = agreement_key("k", "1", "f32[4]", "cpu", {"jax": "0.1"}, 0)
    assert key == agreement_key("k", "1", "f32[4]", "cpu", {"jax": "0.1"}, 0)
    assert key.startswith("jaxtune/v1/") and len(key.rsplit("/", 1)[1]) == 32
    assert key != agreement_key("k", "1", "f32[4]", "cpu", {"jax": "0.2"}, 0)
    assert key != agreement_key("k", "1", "f32[4]", "cpu", {"jax": "0.1"}, 1)
    # Computed by hand: sha256 of the parts joined by NUL bytes, so every process agrees.
    assert (
        key
        == "jaxtune/v1/"
        + hashlib.sha256(
            "\0".join(["k", "1", "f32[4]", "cpu", "[('jax', '0.1')]", "0"]).encode()
        ).hexdigest()[:32]
    )


def test_followers_adopt_the_leader_and_decide_once():
    calls: list[int] = []

    def body(pid: int) -> Choice:
        def decide(run_sweep):
            calls.append(pid)
            return Choice(config={"block": pid + 1}, source="cache", key="f32[4]")

        first = _agree.agree(question(decide))
        again = _agree.agree(question(decide))
        assert again is first
        return first

    results, store = play(3, body)
    assert [r.config for r in results] == [{"block": 1}] * 3
    assert calls == [0]
    assert [pid for pid, _ in store.writes] == [0]


def test_a_leader_that_fails_fails_every_follower_at_once(monkeypatch):
    monkeypatch.setenv("JAXTUNE_AGREE_TIMEOUT", "60")

    def body(pid: int):
        def decide(run_sweep):
            raise RuntimeError("the leader's cache directory is unreadable")

        start = time.monotonic()
        try:
            _agree.agree(question(decide))
        except Exception as e:
            return e, time.monotonic() - start

    results, _ = play(3, body)
    assert isinstance(results[0][0], RuntimeError)
    for error, _seconds in results[1:]:
        # The followers hear of the leader's failure (not of the 60 s agreement timeout).
        assert isinstance(error, AgreementError)
        assert "process 0 (the leader) failed while deciding the config of k for f32[4]" in str(
            error
        )
        assert "cache directory is unreadable" in str(error)


@pytest.mark.parametrize("slow", [False, True])
def test_a_slow_leader_is_announced_on_stderr(monkeypatch, capsys, slow):
    """A follower that waits longer than NOTICE_AFTER_S says on stderr what it waits for:
    the line JAX's runtime leaves in the log when it ends the process with a dead leader.

    The slow leader publishes only once the follower has announced its wait (or after 20 s,
    and the test fails), so a loaded machine that starts the follower's thread late cannot
    publish first; the quick leader has 20 s before the notice is due."""
    monkeypatch.setattr(_agree, "NOTICE_AFTER_S", 0.2 if slow else 20.0)
    monkeypatch.setenv("JAXTUNE_AGREE_TIMEOUT", "30")
    announced = threading.Event()
    say = _agree._say

    def noting(message: str) -> None:
        say(message)
        announced.set()

    monkeypatch.setattr(_agree, "_say", noting)

    def body(pid: int) -> Choice:
        if pid == 0 and slow:
            announced.wait(20)
        return _agree.agree(
            question(lambda m: Choice(config={"block": 7}, source="cache", key="f32[4]"))
        )

    results, _ = play(2, body)
    assert [r.config for r in results] == [{"block": 7}] * 2
    err = capsys.readouterr().err
    line = (
        "jaxtune: process 1 is waiting for process 0 (the leader) to publish the config of k "
        "for f32[4] (at most 30 s, JAXTUNE_AGREE_TIMEOUT). If process 0 dies meanwhile, JAX's "
        "distributed runtime ends this process too"
    )
    assert (line in err) is slow, err
    assert "process 0's log says why" in err or not slow


class LostStore(LocalStore):
    """A store whose service died: every wait fails at once."""

    def wait(self, key: str, timeout_s: float) -> bytes:
        raise KeyValueLostError("UNAVAILABLE: Socket closed")


def follower_error(store: LocalStore) -> AgreementError:
    """What ``agree`` raises in process 1 of ``store`` when nothing else runs."""
    with as_process(store.view(1)), pytest.raises(AgreementError) as info:
        _agree.agree(question(lambda m: None, key="bf16[8,8]"))
    return info.value


def test_a_lost_store_names_the_decision_on_stderr_before_raising(capsys):
    message = str(follower_error(LostStore(2)))
    assert message.startswith(
        "process 1 lost the coordination service while waiting for process 0 (the leader) to "
        "publish the config of k for bf16[8,8] (UNAVAILABLE: Socket closed). The service runs "
        "in process 0, the leader: it has most likely died"
    )
    assert "process 0's log says why" in message
    # Written before the raise: JAX's runtime usually ends the process before it surfaces.
    assert capsys.readouterr().err == f"jaxtune: {message}\n"


def test_follower_times_out_naming_kernel_key_and_leader():
    with _settings.override(agree_timeout=0.3):
        message = str(follower_error(LocalStore(2)))  # its leader never publishes
    assert "process 1 waited 0.3 s (JAXTUNE_AGREE_TIMEOUT) for process 0 (the leader)" in message
    assert "of k for bf16[8,8]" in message
    assert "raise JAXTUNE_AGREE_TIMEOUT" in message


@pytest.mark.parametrize("raw", ["0", "-1", "soon", "inf"])
def test_agree_timeout_is_validated(monkeypatch, raw):
    monkeypatch.setenv("JAXTUNE_AGREE_TIMEOUT", raw)
    with pytest.raises(SettingsError, match=r"JAXTUNE_AGREE_TIMEOUT=.* is not valid"):
        _settings.settings()


def _measured(config, us):
    return Measurement(config=config, median_us=us, min_us=us, spread=0.0, samples=5, compile_s=0)


def test_merge_uses_the_single_process_rule_ties_to_config_order():
    import distributed_worker as w

    sig = w.scaled.options.bind((jax.ShapeDtypeStruct((4,), jnp.float32),), {})
    task = w.scaled.options.bound(sig).sweep_task()
    runner = w.FakeRunner()
    whole = runner.sweep(task)
    for count in (2, 3, 4, 8, 11):
        parts = [_shard.sweep_share(task, i, count, w.FakeRunner()) for i in range(count)]
        merged = _shard.merge(task, parts)
        assert merged.best.config == whole.best.config == {"block": 2}
        assert merged.measurements == whole.measurements
    # A share whose every config failed reports each failure with its reason.
    failing = [_shard.sweep_share(task, i, 2, FailingRunner()) for i in range(2)]
    assert all(f["ok"] is False and f["stage"] == "compile" for p in failing for f in p["results"])
    with pytest.raises(
        TuningFailedError, match=r"every config of tests\.distributed\.scaled failed"
    ):
        _shard.merge(task, failing)


class FailingRunner:
    def sweep(self, task):
        results = {}
        for c in (task.plan.default, *task.plan.configs):
            results[config_id(c)] = Failure(config=c, stage="compile", reason="no")
        return finish(task.plan, results)


def test_a_missing_share_names_the_follower_and_fails_the_others_at_once(monkeypatch):
    import distributed_worker as w

    sig = w.scaled.options.bind((jax.ShapeDtypeStruct((4,), jnp.float32),), {})
    call = w.scaled.options.bound(sig)

    def body(pid: int):
        if pid == 2:
            return None  # this process never reaches the kernel

        def decide(run_sweep):
            best = run_sweep(call.sweep_task()).best
            return Choice(config=best.config, source="cache", key="f32[4]")

        q = question(decide, task=call.sweep_task)
        q = dataclasses.replace(q, sharing=_shard.SweepSharing(w.FakeRunner()))
        start = time.monotonic()
        try:
            _agree.agree(q)
        except AgreementError as e:
            return str(e), time.monotonic() - start

    monkeypatch.setenv("JAXTUNE_AGREE_TIMEOUT", "1")  # the threads do not see overrides
    results, _ = play(3, body)
    leader, follower = results[0], results[1]
    assert "process 0 waited 1 s (JAXTUNE_AGREE_TIMEOUT) for process 2 (a follower)" in leader[0]
    assert "its share of the sweep of k for f32[4]" in leader[0]
    assert "process 0 (the leader) failed while deciding" in follower[0]
    assert "for process 2 (a follower)" in follower[0]


@pytest.mark.parametrize(
    ("platform", "ids", "cores", "expected"),
    [
        ("gpu", [0, 1], 1, [0, 1]),
        ("cuda", [2, 3, 5], 2, [2, 3, 5]),
        ("cpu", [0, 1, 2, 3], 8, [0, 1, 2, 3]),
        # CPU devices share the cores: at most one child per core.
        ("cpu", [0, 1, 2, 3], 2, [0, 1]),
        ("cpu", [0, 1, 2, 3], 1, None),
        ("cpu", [0], 8, None),
        ("tpu", [0, 1, 2, 3], 8, None),
    ],
)
def test_which_devices_a_sweep_is_split_over(platform, ids, cores, expected):
    assert _devices.split(platform, ids, cores) == expected


def test_usable_cores_are_this_processs_cores():
    cores = _devices.usable_cores()
    assert 1 <= cores <= (os.cpu_count() or 1)
    if hasattr(os, "sched_getaffinity"):
        assert cores == len(os.sched_getaffinity(0))


def test_this_process_sweeps_in_one_child():
    jnp.ones(1).block_until_ready()  # the backend has started
    assert _devices.local_devices() == ("cpu", [0])
    assert _devices.sweep_devices() is None
