"""Shared fixtures: no test touches the real home cache or inherits jaxtune settings."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import pathlib
import platform
import shutil
import subprocess
import sys
import tempfile

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
#: The temporary directory of this test process and every process it starts (traces that
#: `jaxtune.profile` keeps by default, child logs): removed when the session ends, so
#: that the suite leaves nothing in the system's temporary directory.
SESSION_TMP = tempfile.mkdtemp(prefix="jaxtune-tests-")
os.environ["TMPDIR"] = SESSION_TMP
tempfile.tempdir = None  # read TMPDIR again
# NumPy's OpenBLAS starts a thread for each further core in every process that imports it,
# which spins 0.1 s of CPU before it sleeps: on the 2-core machine, in each of the hundreds
# of processes the suite starts, taken from the tests. jaxtune does no BLAS work itself.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
# platform.platform() (in `jaxtune doctor`'s report) runs `uname -p` once per process, and
# the doctor asks a child Python once whether xprof embeds the LLO analysis: both now, so
# that whichever test asks first is not taken for one that starts a child.
platform.platform()
if importlib.util.find_spec("xprof") is not None:
    from jaxtune._cli.doctor_checks import embedded_llo

    embedded_llo()

#: The suite runs without the sweeps' compilation cache (and kept lowered programs);
#: ``JAXTUNE_TEST_COMPILE_CACHE=1`` runs it with them on, as users have them.
_COMPILE_CACHE = os.environ.get("JAXTUNE_TEST_COMPILE_CACHE", "0")


@pytest.fixture(autouse=True)
def _isolated_environment(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
):
    cache = tmp_path_factory.mktemp("cache")
    for name in list(os.environ):
        if name.startswith("JAXTUNE_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("JAXTUNE_CACHE_DIR", str(cache))
    # No persistent compilation cache: one per test only costs its writes (a cache the
    # run's processes shared made the suite slower, docs/development.md); its own tests
    # turn it on.
    monkeypatch.setenv("JAXTUNE_COMPILE_CACHE", _COMPILE_CACHE)
    # Tests run the default isolation (a pooled child); tests about inline ask for it.
    monkeypatch.setenv("JAXTUNE_PROFILE_DIR", str(tmp_path_factory.mktemp("profiles")))
    for name in ("XLA_FLAGS", "LIBTPU_INIT_ARGS", "TPU_LIBRARY_PATH"):
        monkeypatch.delenv(name, raising=False)
    # Each test starts as a new process would: functions jitted by earlier tests (a module's
    # kernels under jax.jit) trace again and read this test's settings. A change of
    # os.environ alone re-traces only the kernels' eager calls (docs/autotuned.md).
    from jaxtune._tuning import eager  # noqa: F401  (declares the part)
    from jaxtune._tuning.state import TUNING_STATE

    TUNING_STATE.reset("jit generation")
    yield


#: Fixtures that run a command in a fresh process: a test using one is a ``child`` test.
CHILD_FIXTURES = frozenset({"cli", "py"})


#: The `once` tests (pyproject's markers): README's `nox -s tests` leaves them out, `nox -s
#: rest` (CI) runs them on both toolchains. Whole-program runs (docs pages, examples, a
#: model, a tool end to end), multi-process jobs, and tests of what processes, files and
#: signals do to jaxtune: the long ones, kept out of README's 15 minutes.
#: Keys: a test file, or a file and a test function.
ONCE: dict[str, str] = {
    "tests/test_docs_run.py::test_page_runs_as_shown": "every docs page, run as shown",
    "tests/conformance/test_flax_model.py": "a Flax NNX model through every flow",
    "tests/test_docs_and_examples.py::test_example_scripts_run": "examples/*.py",
    "tests/test_docs_and_examples.py::test_demo_tunes_and_uses_the_examples": "jaxtune demo",
    "tests/test_cache_check.py": "a team's CI recipe, `jaxtune cache check` runs",
    "tests/test_cache_versions.py": "two jaxtune versions sharing a cache directory",
    "tests/test_code_digest.py": "kernel source digests in fresh processes",
    "tests/test_shared_store.py": "the shared store under concurrent, killed publishers",
    "tests/test_crash_at_size.py": "children crashing while arguments arrive",
    "tests/test_interrupt_cli.py": "Ctrl-C during commands",
    "tests/test_child_logs.py": "child logs in spoiled folders",
    "tests/test_cli_program.py": "a program's exit status, signal and `python` through the CLI",
    "tests/test_runner.py::test_endless_loop_ends_at_the_timeout_and_the_sweep_goes_on": (
        "a config that hangs in Python, ended at its deadline"
    ),
    "tests/test_runner.py::test_child_exits_soon_after_its_parent_is_killed": (
        "a child outliving its killed parent"
    ),
    "tests/test_runner.py::test_memory_blow_up_under_a_memory_limit": "a child's memory limit",
    "tests/test_prestart.py::test_a_module_whose_import_hangs_in_the_child_ends_in_an_error_not_a_hang": (
        "a kernel's module whose import hangs in the child"
    ),
    "tests/hostile/test_hostile_cache.py": "cache writers killed mid-write",
    "tests/hostile/test_hostile_children.py": "crashing and orphaned children",
    "tests/hostile/test_hostile_fuzz.py": "fuzzed cache, result and trace files",
    "tests/test_mosaic_work.py::test_a_mutated_body_never_crashes_the_reading_process": (
        "fuzzed Mosaic kernel bodies"
    ),
    "tests/test_distributed.py": "jax.distributed jobs of several processes, leaders killed",
    "tests/test_canary_environment.py": "every flow run as a program, its variables traced",
    "tests/test_build_kernels_cache.py::test_dry_run_exports_a_table_that_a_registered_packaged_cache_answers": (
        "tools/build_kernels_cache.py run end to end"
    ),
}


@pytest.hookimpl(tryfirst=True)  # before `-m` selects by the markers
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if CHILD_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.child)
        where = item.nodeid.split("[")[0]
        if where in ONCE or where.split("::")[0] in ONCE:
            item.add_marker(pytest.mark.once)


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Removes this process's temporary directory (its children have ended by now)."""
    shutil.rmtree(SESSION_TMP, ignore_errors=True)


def pytest_sessionstart(session: pytest.Session) -> None:
    """Builds matplotlib's font cache (when matplotlib is installed) before any test runs:
    in a fresh environment its first import starts ``fc-list``, which the guard below would
    take for a child process of whichever test imported it first."""
    with contextlib.suppress(ImportError):
        import matplotlib.font_manager  # noqa: F401


@pytest.fixture(autouse=True)
def _children_only_in_child_tests(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch):
    """A test that starts a child process (or uses a pooled one) without the ``child``
    marker fails, naming the marker: ``pytest -m "not child"`` must start none."""
    if request.node.get_closest_marker("child") is not None:
        yield
        return
    from jaxtune._isolation import process as _process

    seen: list[str] = []
    popen_init = subprocess.Popen.__init__
    pool_get = _process.ChildPool.get

    def popen(self, args, *rest, **kwargs):
        seen.append(f"started {args!r}"[:200])
        return popen_init(self, args, *rest, **kwargs)

    def get(self, *args, **kwargs):
        seen.append("used a pooled sweep child")
        return pool_get(self, *args, **kwargs)

    monkeypatch.setattr(subprocess.Popen, "__init__", popen)
    monkeypatch.setattr(_process.ChildPool, "get", get)
    yield
    if seen:
        pytest.fail(
            f"{request.node.nodeid} {seen[0]} but is not marked: mark it (or its module) "
            "with @pytest.mark.child, the tier of tests that start child processes",
            pytrace=False,
        )


@pytest.fixture
def cli():
    """Runs `python -m jaxtune ARGS` in a fresh process and returns the completed process."""

    def run(*args: str, env: dict[str, str] | None = None, timeout: float = 300):
        full_env = dict(os.environ)
        full_env.update(env or {})
        return subprocess.run(
            [sys.executable, "-m", "jaxtune", *args],
            env=full_env,
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=ROOT,
        )

    return run


@pytest.fixture
def incli(capsys):
    """Runs `jaxtune ARGS` in this process (for what a fresh process adds nothing to: how
    arguments and files are refused) and returns a completed process: exit status, stdout,
    stderr."""
    from jaxtune._cli import main

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        capsys.readouterr()
        try:
            code = main(list(args))
        except SystemExit as e:  # argparse refusing the arguments
            code = e.code if isinstance(e.code, int) else 2
        out = capsys.readouterr()
        return subprocess.CompletedProcess(["jaxtune", *args], code, out.out, out.err)

    return run


@pytest.fixture(autouse=True)
def _no_packaged_caches():
    """Each test starts with no packaged cache registered, and forgets those it registers."""
    from jaxtune._tuning.state import TUNING_STATE

    TUNING_STATE.reset("packaged caches")
    yield
    TUNING_STATE.reset("packaged caches")


@pytest.fixture
def fresh_warnings():
    """This test's warn-once warnings are given again, as in a fresh process (jaxtune gives
    each once per process: ``jaxtune._core.errors.warn_once``), and the tests after it see
    none of them as given."""
    from jaxtune._core.state import CORE_STATE

    CORE_STATE.reset("warned")
    yield
    CORE_STATE.reset("warned")


def _sweep_timing(monkeypatch: pytest.MonkeyPatch, **options: float) -> object:
    """Makes ``options`` the timing every sweep of the test uses."""
    from jaxtune._tuning.sweep import samples as _samples

    chosen = _samples.TimingOptions(**options)  # type: ignore[arg-type]
    monkeypatch.setattr(_samples, "DEFAULT", chosen)
    return chosen


@pytest.fixture
def fast_timing(monkeypatch):
    """Shortens timing for tests that sweep but do not compare speeds."""
    return _sweep_timing(
        monkeypatch,
        min_time_s=0.002,
        min_samples=3,
        max_samples=10,
        rounds=2,
        max_rounds=6,
        round_floor_us=200.0,
    )


@pytest.fixture
def crash_timing(monkeypatch):
    """The least timing a sweep takes, for tests about crashes that only ask that the crash
    is recorded and a working config stored: one round of one sample a config."""
    return _sweep_timing(
        monkeypatch,
        min_time_s=0.0,
        min_samples=1,
        max_samples=2,
        rounds=1,
        max_rounds=1,
        round_samples=1,
        round_floor_us=0.0,
    )


@pytest.fixture
def store_on(monkeypatch):
    """Kept lowered programs on (``JAXTUNE_COMPILE_CACHE=1``, the ``retune`` extra's
    flatbuffers required); the cache directory they live under."""
    from jaxtune._core import settings as _settings
    from tests.extras import require

    require("flatbuffers", reason="the retune extra (jax.export's serialiser)")
    monkeypatch.setenv("JAXTUNE_COMPILE_CACHE", "1")
    return pathlib.Path(_settings.settings().cache_dir)
