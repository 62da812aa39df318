"""A real model library through every flow: a Flax NNX + optax transformer whose attention is
JAX's flash attention as an ``@jaxtune.autotuned`` kernel (``flax_program.py``).

Covers docs/conformance.md, "Real kernel libraries": a program nobody here wrote the parts of
(Flax's modules and optimizer, optax's adam, JAX's flash-attention kernels), trained with
``jax.jit(..., donate_argnums=...)`` over ``nnx.value_and_grad``, run the way users run it:
``jaxtune tune --``, ``JAXTUNE_MODE=tune``, ``jaxtune.tune``, ``jaxtune profile --``,
``JAXTUNE_PROFILE=1``, ``jaxtune report`` and ``jaxtune tune --from-profile``. What each flow
must do, from DESIGN.md and docs/autotuned.md ("The pass timed"):

- every flow that tunes stores an entry timed forward and backward (``timing == "vjp"``:
  the kernel's one config drives its backward kernels too), and its table says ``fwd+bwd``;
- the stored config's training step is within 1.5x of the fastest config's, measured here
  afterwards, every config side by side;
- profiling leaves the program's losses as they are (bit for bit, a step that donates its
  state included) and writes a report that ``jaxtune report`` reads and
  ``--from-profile`` tunes from;
- the losses of a run with jaxtune's tuned config equal those of a plain run given the same
  config explicitly (block sizes change flash attention's rounding, so the reference is the
  same config, not the default).

One tuned cache per flow (each flow must sweep to show what it stores); the programs that
only read a cache share the one tune mode wrote. Module-scoped fixtures run each command
once for all the tests that check it.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import pathlib
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from typing import Any

import pytest

from .support import PICK_WITHIN, PickVsTruth, require, true_times

require("flax", why="the model library this conformance test trains (Flax NNX)")
require("optax", why="the optimizer of the Flax training step")

pytestmark = [pytest.mark.slow, pytest.mark.child]

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent.parent
PROGRAM = HERE / "flax_program.py"
KERNEL = "conformance.flax.flash_attention"
KEY = ",".join(["f32[1,2,256,64]"] * 3)
STEPS = 3
#: A sweep of the four configs, forward and backward, takes 1-3 minutes on a busy 2-core CPU.
TIMEOUT = 1200


# -- running the program and jaxtune's commands -------------------------------------------


@dataclasses.dataclass
class Run:
    """A finished command: its process, wall time and the losses the program printed."""

    proc: subprocess.CompletedProcess[str]
    seconds: float

    @property
    def output(self) -> str:
        return self.proc.stdout + self.proc.stderr

    @property
    def losses(self) -> list[str]:
        """``float.hex()`` of each step's loss, in step order."""
        return [
            line.split()[2] for line in self.proc.stdout.splitlines() if line.startswith("loss ")
        ]

    def check(self) -> Run:
        assert self.proc.returncode == 0, (
            f"{' '.join(self.proc.args)} exited {self.proc.returncode}:\n{self.output[-6000:]}"
        )
        return self


def _environment(cache: pathlib.Path, profiles: pathlib.Path, **extra: str) -> dict[str, str]:
    """A user's environment: no jaxtune settings but the cache and profile directories, the
    repository and this folder on ``PYTHONPATH`` (the program imports jaxtune and is
    re-imported by jaxtune's children)."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("JAXTUNE_") and k not in ("XLA_FLAGS", "LIBTPU_INIT_ARGS")
    }
    path = [str(ROOT), str(HERE), *filter(None, env.get("PYTHONPATH", "").split(os.pathsep))]
    env.update(
        PYTHONPATH=os.pathsep.join(path),
        JAX_PLATFORMS="cpu",
        JAXTUNE_CACHE_DIR=str(cache),
        JAXTUNE_PROFILE_DIR=str(profiles),
        **extra,
    )
    return env


def _run(args: list[str], env: Mapping[str, str], cwd: pathlib.Path) -> Run:
    start = time.perf_counter()
    proc = subprocess.run(
        args, env=dict(env), cwd=cwd, capture_output=True, text=True, timeout=TIMEOUT
    )
    return Run(proc, time.perf_counter() - start)


def _program(*args: str) -> list[str]:
    return [sys.executable, str(PROGRAM), "--steps", str(STEPS), *args]


def _jaxtune(*args: str) -> list[str]:
    return [sys.executable, "-m", "jaxtune", *args]


def _entries(cache: pathlib.Path) -> list[Any]:
    """The kernel's entries in the cache at ``cache`` (read with the cache's own reader)."""
    from jaxtune._tuning.store.cache import CacheStore

    return CacheStore(cache).entries_for(KERNEL, "cpu")


def _only_entry(cache: pathlib.Path) -> Any:
    entries = _entries(cache)
    assert [e.key for e in entries] == [KEY], entries
    return entries[0]


def _config_arg(config: Mapping[str, int]) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(config.items()))


def _assert_vjp(entry: Any, how: str) -> None:
    assert entry.timing == "vjp", (
        f"{how} stored an entry timed {entry.timing!r}: the program differentiates the kernel "
        f"(nnx.value_and_grad inside jax.jit), so the sweep must time forward and backward; "
        f"config {dict(entry.config)}, {entry.time_us} us"
    )
    failed = [m for m in entry.measurements if not m.ok]
    assert failed == [], failed


def _table_row(text: str) -> str:
    """The row of a printed table that names the kernel, its wrapped lines joined (a row
    wider than the table's 120 columns continues on the next lines, up to its
    ``decided:`` line)."""
    lines = text.splitlines()
    head = KERNEL.split(".")[0] + "."
    starts = [i for i, line in enumerate(lines) if line.startswith(head)]
    assert starts, f"no table row for {KERNEL} in:\n{text}"
    row = []
    for line in lines[starts[0] :]:
        if line.startswith(("  decided", "cache:")) or not line.strip():
            break
        row.append(line)
    joined = " ".join(row)
    assert "".join(joined.split()).count(KERNEL.split(".")[-1]), joined
    return joined


def _reports(profiles: pathlib.Path) -> list[pathlib.Path]:
    return sorted(profiles.glob("*/report.json"))


# -- fixtures: each command run once ----------------------------------------------------------


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    return tmp_path_factory.mktemp("flax")


def _dirs(work: pathlib.Path, name: str) -> tuple[pathlib.Path, pathlib.Path]:
    """A fresh cache and profile directory for one flow."""
    cache, profiles = work / name / "cache", work / name / "profiles"
    cache.mkdir(parents=True)
    profiles.mkdir(parents=True)
    return cache, profiles


@pytest.fixture(scope="module")
def tune_cli(work: pathlib.Path) -> tuple[Run, pathlib.Path, Run]:
    """``jaxtune tune -- python flax_program.py`` into an empty cache, and then
    ``jaxtune cache list --json`` of that cache."""
    cache, profiles = _dirs(work, "tune-cli")
    env = _environment(cache, profiles)
    tuned = _run(_jaxtune("tune", "--", *_program()), env, work)
    listed = _run(_jaxtune("cache", "list", "--json"), env, work)
    return tuned, cache, listed


@pytest.fixture(scope="module")
def tune_mode(work: pathlib.Path) -> tuple[Run, pathlib.Path]:
    """``JAXTUNE_MODE=tune python flax_program.py`` into an empty cache."""
    cache, profiles = _dirs(work, "tune-mode")
    return _run(_program(), _environment(cache, profiles, JAXTUNE_MODE="tune"), work), cache


@pytest.fixture(scope="module")
def tuned_config(tune_mode: tuple[Run, pathlib.Path]) -> dict[str, int]:
    run, cache = tune_mode
    run.check()
    return dict(_only_entry(cache).config)


@pytest.fixture(scope="module")
def plain(work: pathlib.Path, tuned_config: dict[str, int]) -> Run:
    """A plain run (cached mode, empty cache) given the config tune mode stored explicitly:
    the reference losses of every run that uses that config."""
    cache, profiles = _dirs(work, "plain")
    run = _run(_program("--config", _config_arg(tuned_config)), _environment(cache, profiles), work)
    run.check()
    assert len(run.losses) == STEPS, run.output
    return run


@pytest.fixture(scope="module")
def profile_cli(
    work: pathlib.Path, tune_mode: tuple[Run, pathlib.Path], tuned_config: dict[str, int]
) -> tuple[Run, pathlib.Path]:
    """``jaxtune profile --logdir D -- python flax_program.py`` with tune mode's cache."""
    _, cache = tune_mode
    _, logdir = _dirs(work, "profile-cli")
    env = _environment(cache, work / "profile-cli" / "unused")
    return _run(_jaxtune("profile", "--logdir", str(logdir), "--", *_program()), env, work), logdir


@pytest.fixture(scope="module")
def profile_env(
    work: pathlib.Path, tune_mode: tuple[Run, pathlib.Path], tuned_config: dict[str, int]
) -> tuple[Run, pathlib.Path]:
    """``JAXTUNE_PROFILE=1 python flax_program.py`` with tune mode's cache."""
    _, cache = tune_mode
    _, profiles = _dirs(work, "profile-env")
    return _run(_program(), _environment(cache, profiles, JAXTUNE_PROFILE="1"), work), profiles


@pytest.fixture(scope="module")
def from_profile(
    work: pathlib.Path, profile_cli: tuple[Run, pathlib.Path]
) -> tuple[Run, pathlib.Path]:
    """``jaxtune tune --from-profile D`` on ``jaxtune profile``'s capture, into an empty
    cache (the capture ran with tune mode's configs)."""
    run, logdir = profile_cli
    run.check()
    cache, profiles = _dirs(work, "from-profile")
    env = _environment(cache, profiles)
    return _run(_jaxtune("tune", "--from-profile", str(logdir)), env, work), cache


@pytest.fixture(scope="module")
def program() -> Iterator[Any]:
    """``flax_program`` imported here (it switches TPU interpret mode on at import), switched
    off again after this module's tests."""
    from jax._src import config as jax_config

    from . import flax_program

    yield flax_program
    jax_config.pallas_tpu_interpret_mode_context_manager.set_global(None)


@dataclasses.dataclass
class ApiTune:
    first: Any  # TuningResult
    first_s: float
    second: Any
    second_s: float
    cache: pathlib.Path


@pytest.fixture(scope="module")
def tune_api(work: pathlib.Path, program: Any) -> Iterator[ApiTune]:
    """``jaxtune.tune(train_step, graphdef, state, tokens)`` twice, in this process, into an
    empty cache: the step differentiates the kernel (``nnx.value_and_grad``)."""
    import jaxtune

    cache, profiles = _dirs(work, "tune-api")
    with pytest.MonkeyPatch.context() as mp:
        for name in [n for n in os.environ if n.startswith("JAXTUNE_")]:
            mp.delenv(name)
        mp.setenv("JAXTUNE_CACHE_DIR", str(cache))
        mp.setenv("JAXTUNE_PROFILE_DIR", str(profiles))
        graphdef, state = program.init()
        tokens = program.batch()
        start = time.perf_counter()
        first = jaxtune.tune(program.train_step, graphdef, state, tokens)
        first_s = time.perf_counter() - start
        start = time.perf_counter()
        second = jaxtune.tune(program.train_step, graphdef, state, tokens)
        second_s = time.perf_counter() - start
        yield ApiTune(first, first_s, second, second_s, cache)


@pytest.fixture(scope="module")
def truth(program: Any) -> dict[str, list[float]]:
    """Seconds per training step of every config of the kernel's space (the default among
    them), round by round: each config its own ``jax.jit`` of the step with the config given
    explicitly, timed side by side in interleaved rounds, on the program's own model and
    batch."""
    from jaxtune._core.vocabulary import config_id

    graphdef, state = program.init()
    tokens = program.batch()
    sig = program.flash.options.bind(program.attention_args(), {})
    call = program.flash.options.bound(sig)  # no cache is read
    configs, default = list(call.space), call.default
    if default not in configs:  # the default is a candidate too
        configs.append(default)
    calls = {}
    for config in configs:
        fn = program.step_with(config, donate=False)
        calls[config_id(config)] = functools.partial(fn, graphdef, state, tokens)
    return true_times(calls, rounds=7, calls_per_round=1, warmup=2)


# -- 1. jaxtune tune -- python flax_program.py ---------------------------------------------


def test_tune_cli_stores_a_forward_and_backward_entry(tune_cli):
    tuned, cache, listed = tune_cli
    tuned.check()
    print(f"\njaxtune tune --: {tuned.seconds:.1f} s\n{tuned.proc.stdout}")
    entry = _only_entry(cache)
    _assert_vjp(entry, "jaxtune tune --")
    assert "fwd+bwd" in _table_row(tuned.proc.stdout)
    listed.check()
    (doc,) = [e for e in json.loads(listed.proc.stdout)["entries"] if e["kernel"] == KERNEL]
    assert doc["timing"] == "vjp"
    assert doc["config"] == dict(entry.config)


# -- 2. JAXTUNE_MODE=tune python flax_program.py ---------------------------------------------


def test_tune_mode_stores_a_forward_and_backward_entry(tune_mode):
    run, cache = tune_mode
    run.check()
    print(f"\nJAXTUNE_MODE=tune: {run.seconds:.1f} s (3 steps and the sweep)")
    _assert_vjp(_only_entry(cache), "JAXTUNE_MODE=tune")
    assert len(run.losses) == STEPS, run.output


# -- 3. jaxtune.tune(step, ...) --------------------------------------------------------------


def test_tune_api_stores_a_forward_and_backward_entry_once(tune_api):
    (entry,) = [e for (name, _, _), e in tune_api.first.items() if name == KERNEL]
    print(f"\njaxtune.tune: {tune_api.first_s:.1f} s, again: {tune_api.second_s:.1f} s")
    assert entry.key == KEY
    _assert_vjp(entry, "jaxtune.tune(train_step, ...)")
    assert _only_entry(tune_api.cache).created == entry.created
    # A second call finds the entry, timed for the pass the step runs: nothing is swept.
    (again,) = [e for (name, _, _), e in tune_api.second.items() if name == KERNEL]
    assert again.created == entry.created
    assert dict(again.config) == dict(entry.config)
    assert again.timing == "vjp"


# -- 4. jaxtune profile -- and JAXTUNE_PROFILE=1 ---------------------------------------------


def _check_profiled(
    run: Run, profiles: pathlib.Path, plain: Run, config: Mapping[str, int], how: str
) -> None:
    assert "Array has been deleted" not in run.output, run.output[-6000:]
    run.check()
    reports = _reports(profiles)
    assert [r.parent.name for r in reports] == ["train_step-1"], (
        f"{how} wrote {reports} under {profiles}:\n{run.output[-4000:]}"
    )
    # The kernel's rows (flash attention's forward, dkv and dq kernels) with the config
    # they ran with: the one tune mode stored.
    rows = [k for k in json.loads(reports[0].read_text())["kernels"] if k["kernel_id"] == KERNEL]
    assert rows, reports[0].read_text()[:4000]
    assert all(row["config"] == dict(config) for row in rows), rows
    # The program's own results are those of a run without profiling (same config).
    assert run.losses == plain.losses, (run.losses, plain.losses)


def test_profile_cli_writes_a_report_and_keeps_the_losses(profile_cli, plain, tuned_config):
    run, logdir = profile_cli
    print(f"\njaxtune profile --: {run.seconds:.1f} s")
    _check_profiled(run, logdir, plain, tuned_config, "jaxtune profile --")
    assert "wrote 1 report" in run.output


def test_profile_env_writes_a_report_and_keeps_the_losses(profile_env, plain, tuned_config):
    run, profiles = profile_env
    print(f"\nJAXTUNE_PROFILE=1: {run.seconds:.1f} s")
    _check_profiled(run, profiles, plain, tuned_config, "JAXTUNE_PROFILE=1")


# -- 5. jaxtune report, jaxtune tune --from-profile ------------------------------------------


def test_report_reads_the_capture(work, profile_cli):
    run, logdir = profile_cli
    run.check()
    env = _environment(work / "report-cache", work / "report-profiles")
    report = _run(_jaxtune("report", str(logdir)), env, work).check()
    assert KERNEL in report.proc.stdout, report.output
    as_json = _run(_jaxtune("report", str(logdir), "--json"), env, work).check()
    rows = [k for k in json.loads(as_json.proc.stdout)["kernels"] if k["kernel_id"] == KERNEL]
    # Flash attention's forward, dkv and dq kernels, each a row of the autotuned kernel.
    assert sorted(row["name"] for row in rows) == [
        "_flash_attention_dkv_kernel",
        "_flash_attention_dq_kernel",
        "_flash_attention_kernel",
    ], rows


def test_the_reports_xla_rows_are_instructions_and_kernel_internals_are_the_kernels(
    profile_cli, plain
):
    """docs/profiling.md, "Attribution": one XLA-op row per instruction of each program, its
    calls its events; the copies XLA adds for the kernels' loops are the kernels'; each kernel
    names its own pallas_call line and the program's call; no Python tracer events in the
    capture."""
    import collections

    from jaxtune._core.xspace import xplane
    from jaxtune._profiling import events, recover

    run, logdir = profile_cli
    run.check()
    print(f"\nplain run {plain.seconds:.1f} s, jaxtune profile -- {run.seconds:.1f} s")
    (report,) = _reports(logdir)
    doc = json.loads(report.read_text())
    space = xplane.load(report.parent / "trace")
    plane = space.plane("/host:CPU")
    modules, _ = recover.read_programs(space, events.program_ids(plane))
    by_module = {m.name: m for m in modules.values()}
    counts: collections.Counter[tuple[str, str]] = collections.Counter()
    python = 0
    for line in plane.lines:
        for ev in plane.events(line):
            stats = xplane.stats_of(ev.stats, plane.stat_names)
            if "hlo_op" in stats:
                counts[stats["hlo_module"], stats["hlo_op"]] += 1
            python += plane.metadata(ev.metadata_id).name.startswith("$")
    assert python == 0
    ops = doc["ops"]
    assert len({(o["program"], o["name"]) for o in ops}) == len(ops)
    plain_ops = {(o["program"], o["name"]) for o in ops}
    for o in ops:
        assert o["calls"] == counts[o["program"], o["name"]], o
        module = by_module[o["program"]]
        assert o["name_stack"] == module.instructions[o["name"]].op_name, o
        if o["name_stack"]:
            continue
        # An instruction without metadata that is an XLA row: its value goes to plain ops
        # (the donated state's copies), never only to the kernels' loops.
        reached: list[str] = []
        todo, seen = [o["name"]], set()
        while todo:
            for c in module.consumers(todo.pop()):
                if c not in seen:
                    seen.add(c)
                    (todo if not module.instructions[c].op_name else reached).append(c)
        assert not reached or any((o["program"], c) in plain_ops for c in reached), o
    kernels = [k for k in doc["kernels"] if k["kernel_id"] == KERNEL]
    assert len({k["source"] for k in kernels}) == 3, kernels
    for k in kernels:
        file, _, line = k["source"].rpartition(":")
        assert "pallas_call" in pathlib.Path(file).read_text().splitlines()[int(line) - 1]
        assert k["call_site"].startswith(str(PROGRAM) + ":"), k


def test_tune_from_profile_stores_a_forward_and_backward_entry(from_profile):
    run, cache = from_profile
    run.check()
    print(f"\njaxtune tune --from-profile: {run.seconds:.1f} s\n{run.proc.stdout}")
    _assert_vjp(_only_entry(cache), "jaxtune tune --from-profile")
    assert "fwd+bwd" in _table_row(run.proc.stdout)


# -- 6. the stored config against the measured truth ------------------------------------------

FLOWS = ["tune_cli", "tune_mode", "tune_api", "from_profile"]


def _stored_cache(flow: str, value: Any) -> pathlib.Path:
    if flow == "tune_api":
        return value.cache
    if flow == "tune_cli":
        return value[1]
    run, cache = value
    run.check()
    return cache


@pytest.mark.parametrize("flow", FLOWS)
def test_stored_config_trains_within_1_5x_of_the_fastest(flow, request, truth):
    from jaxtune._core.vocabulary import config_id

    entry = _only_entry(_stored_cache(flow, request.getfixturevalue(flow)))
    swept = {config_id(m.config): m.median_us / 1e6 for m in entry.measurements if m.ok}
    found = PickVsTruth(pick=config_id(entry.config), rounds=truth, swept=swept)
    print(f"\n{flow}: the training step of each config\n{found.table()}")
    assert found.ratio <= PICK_WITHIN, (
        f"{flow} stored {found.pick}, whose training step takes {found.ratio:.2f}x the "
        f"fastest config's ({found.fastest}), timed {entry.timing}:\n{found.table()}\n"
        f"decided: {entry.decision_text()}; the sweep's rounds (us): "
        + "; ".join(
            f"{config_id(m.config)} {[round(t) for t in m.rounds_us]}"
            for m in entry.measurements
            if m.ok
        )
    )


# -- 7. losses with and without jaxtune's tuning ---------------------------------------------


def test_tuned_run_trains_like_a_plain_run_with_the_same_config(tune_mode, plain):
    run, _ = tune_mode
    run.check()
    # Tune mode sweeps while the first step traces, then trains with the stored config.
    assert run.losses == plain.losses, (run.losses, plain.losses)
