"""Developer sessions: `nox -l` lists them, `nox -s tests` runs README's
test command, `nox -s rest` the rest of the suite on both toolchains.

The supported Pythons come from pyproject's classifiers. The oldest toolchain is the oldest
Python with the oldest supported JAX; the newest is the newest Python with the newest JAX
the package index serves. Python interpreters are found on PATH or under pyenv, so a machine
where `python3.12` is only installed through pyenv needs no editing.
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import shutil
import subprocess
import sys
import time

import nox

ROOT = pathlib.Path(__file__).parent
PYPROJECT = nox.project.load_toml(ROOT / "pyproject.toml")
PYTHONS = nox.project.python_versions(PYPROJECT)
OLDEST_JAX = "0.10.2"

# uv (README's command installs it beside nox) fills a session's venv in seconds where pip
# takes minutes; without uv, nox falls back to venv and pip.
nox.options.default_venv_backend = "uv|venv"
# pip compiles what it installs to bytecode, uv only when asked: without it, where
# PYTHONDONTWRITEBYTECODE is set, every process of the suite compiles JAX's source again
# (about 1.5 s a process on the 2-core machine).
os.environ.setdefault("UV_COMPILE_BYTECODE", "1")
nox.options.download_python = "never"
nox.options.sessions = ["tests", "lint", "types", "docs"]
# A missing interpreter must fail the run, not skip half of the suite.
nox.options.error_on_missing_interpreters = True


def _works(executable: str) -> bool:
    try:
        out = subprocess.run(
            [executable, "-c", "import sys, venv; print(sys.version_info[:2])"],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return out.returncode == 0


def find_python(version: str) -> str | None:
    """An interpreter for `version` ("3.12") from PATH or pyenv, or None."""
    candidates = [shutil.which(f"python{version}")]
    roots = [os.environ.get("PYENV_ROOT"), str(pathlib.Path.home() / ".pyenv")]
    with contextlib.suppress(OSError, subprocess.TimeoutExpired):
        pyenv = subprocess.run(["pyenv", "root"], capture_output=True, text=True, timeout=30)
        roots.insert(0, pyenv.stdout.strip())
    for root in filter(None, roots):
        found = sorted(
            pathlib.Path(root).glob(f"versions/{version}.*/bin/python{version}"),
            key=lambda p: [int(x) for x in p.parts[-3].split(".") if x.isdigit()],
        )
        candidates.extend(str(p) for p in reversed(found))
    for candidate in filter(None, candidates):
        if _works(candidate):
            return candidate
    return None


def _python_or_name(version: str) -> str:
    return find_python(version) or version


def _install(session: nox.Session, *groups: str, jax: str | None = None, extras: str = "") -> None:
    if session.venv_backend != "uv":
        # The venv's own pip (23.2) cannot resolve the `remote` extra's fsspec pins; a
        # current pip can (uv resolves them itself).
        session.install("-U", "pip")
    spec = "jax" if jax is None else f"jax=={jax}"
    package = f".[{extras}]" if extras else "."
    session.install("-e", package, spec, *nox.project.dependency_groups(PYPROJECT, *groups))


def _install_optional(session: nox.Session, group: str) -> None:
    """Installs an optional dependency group, keeping the JAX the session tests: all of
    it in one go, or where that fails each requirement on its own. One that cannot install
    on this toolchain is logged and the session goes on: the tests that need it skip,
    naming the missing library, or fail where REQUIRE_TEST_EXTRAS=1 (as .ci/run sets it:
    tests/extras.py)."""
    found = session.run_install("python", "-c", "import jax; print(jax.__version__)", silent=True)
    if not found:  # --no-install: nothing is installed in this run
        return
    jax_version = found.strip()
    requirements = nox.project.dependency_groups(PYPROJECT, group)
    # All at once first (one resolution); one by one only when that fails.
    with contextlib.suppress(nox.command.CommandFailed):
        session.install(*requirements, f"jax=={jax_version}")
        return
    for requirement in requirements:
        try:
            session.install(requirement, f"jax=={jax_version}")
        except nox.command.CommandFailed as e:
            session.warn(
                f"{requirement} ({group} group) did not install beside jax {jax_version} ({e}); "
                "the tests that need it will be skipped with the reason (failed, where "
                "REQUIRE_TEST_EXTRAS=1)"
            )


def _compile_checkout(session: nox.Session) -> None:
    """Compiles jaxtune's and the tests' modules to bytecode before pytest runs. Where
    PYTHONDONTWRITEBYTECODE is set (as on the 2-core machine) no process writes any, so
    each of the suite's processes (children, programs, commands: hundreds) would compile
    what it imports of the checkout again, 0.2 s of CPU for a sweep child."""
    session.run("python", "-m", "compileall", "-q", "-j", "0", "jaxtune", "tests", silent=True)


for _version in (PYTHONS[0], PYTHONS[-1]):
    if find_python(_version) is None:
        print(
            f"nox: Python {_version} was not found on PATH or under pyenv; sessions that need "
            f"it will fail. Install it (`pyenv install {_version}` or "
            f"`apt-get install python{_version}`) and run nox again."
        )

TOOLCHAINS = [
    nox.param(_python_or_name(PYTHONS[0]), OLDEST_JAX, id="oldest"),
    nox.param(_python_or_name(PYTHONS[-1]), None, id="newest"),
]


#: What README's `nox -s tests` runs (the newest toolchain only), and what `nox -s rest`
#: (CI) runs on each toolchain: together, the whole suite on both. The `once` tests
#: (whole-program runs, multi-process jobs and robustness: tests/conftest.py's ONCE) and the
#: oldest toolchain's run are left to `rest`, so README's command stays under 15 minutes on
#: a quiet 2-core machine (docs/development.md, "Test tiers"). ``None``: the whole suite.
PARTS: dict[str, dict[str, str | None]] = {
    "tests": {"newest": "not once"},
    "rest": {"oldest": None, "newest": "once"},
    "all": {"oldest": None, "newest": None},
}


def _suite(
    session: nox.Session, jax: str | None, args: list[str], part: str
) -> tuple[list[str], list[int]]:
    """Installs what the suite needs on the toolchain of ``jax``; returns the pytest command
    of ``part`` (:data:`PARTS`) on it, with the caller's pytest ``args``, and its success
    codes."""
    # `remote`: the shared-store tests run against a local S3 server (moto, test group).
    _install(session, "test", jax=jax, extras="plots,remote,retune")
    # Third-party kernel libraries for tests/conformance/: best effort per toolchain.
    _install_optional(session, "conformance")
    session.run(
        "python",
        "-c",
        "import sys, jax; print('python', sys.version.split()[0], 'jax', jax.__version__)",
    )
    # A `-m` of the caller's narrows the part (pytest keeps only the last `-m` it is given).
    marks = PARTS[part]["oldest" if jax == OLDEST_JAX else "newest"]
    theirs, args = _marks_of(args)
    if marks and theirs:
        marks = f"({marks}) and ({theirs})"
    only = ["-m", marks or theirs] if marks or theirs else []
    # In `rest`, the tests the caller names or marks may all be outside the newest's part
    # (the oldest runs them): none left to run there is no failure. `tests` has no other
    # toolchain: there it is one.
    codes = [0, 5] if part == "rest" and marks and (args or theirs) else [0]
    _compile_checkout(session)
    return ["pytest", "-n", "2", "--dist", "worksteal", *only, *args], codes


def _marks_of(args: list[str]) -> tuple[str | None, list[str]]:
    """The caller's pytest marker expression (``-m EXPR`` or ``-mEXPR``; the last one, as
    pytest takes it), and the other arguments."""
    theirs, rest, it = None, [], iter(args)
    for arg in it:
        if arg == "-m":
            theirs = next(it, None)
        elif arg.startswith("-m") and not arg.startswith("--"):
            theirs = arg[2:].removeprefix("=")
        else:
            rest.append(arg)
    return theirs, rest


@nox.session
@nox.parametrize(("python", "jax"), TOOLCHAINS[1:])
def tests(session: nox.Session, jax: str | None) -> None:
    """README's test command: on the newest toolchain, in two pytest workers (most tests
    wait on child processes), the suite but its `once` tests (slow and child tests
    included, tests/conformance/ with the kernel libraries of the `conformance` group that
    install); `nox -s rest` runs the `once` tests, and the whole suite on the oldest
    toolchain (CI runs both). `nox -s tests -- -m "not child"` runs the fast tier, `-- -n 0` one worker
    (docs/development.md)."""
    command, codes = _suite(session, jax, session.posargs, "tests")
    session.run(*command, success_codes=codes)


@nox.session
@nox.parametrize(("python", "jax"), TOOLCHAINS)
def rest(session: nox.Session, jax: str | None) -> None:
    """What `nox -s tests` leaves out: the `once` tests on the newest toolchain, the whole
    suite on the oldest. CI runs it after `tests`, so both toolchains run the whole suite."""
    command, codes = _suite(session, jax, session.posargs, "rest")
    session.run(*command, success_codes=codes)


#: How many times `stress` runs the suite, unless `--runs N` says otherwise.
STRESS_RUNS = int(os.environ.get("JAXTUNE_STRESS_RUNS", "3"))

#: One core's worth of other work, pinned to the core its argument names.
BUSY = "import os, sys\nos.sched_setaffinity(0, {int(sys.argv[1])})\nwhile True: pass"


def _stress_args(posargs: list[str]) -> tuple[int, list[str]]:
    """``--runs N`` (or ``--runs=N``) taken out of ``posargs``; the rest go to pytest."""
    runs, rest, args = STRESS_RUNS, [], iter(posargs)
    for arg in args:
        if arg == "--runs":
            runs = int(next(args))
        elif arg.startswith("--runs="):
            runs = int(arg.split("=", 1)[1])
        else:
            rest.append(arg)
    return runs, rest


def _junit_summary(xml: pathlib.Path) -> str:
    """``"1546 tests: 1 failed, 0 errors, 19 skipped"`` and the failed tests' ids, read off
    pytest's JUnit XML report (``"no report"`` where pytest wrote none)."""
    import xml.etree.ElementTree as ET

    try:
        root = ET.parse(xml).getroot()
    except (OSError, ET.ParseError):
        return "no report"
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    count = {k: sum(int(s.get(k, 0)) for s in suites) for k in ("tests", "failures", "errors")}
    skipped = sum(int(s.get("skipped", 0)) for s in suites)
    failed = [
        f"{case.get('classname')}::{case.get('name')}"
        for case in root.iter("testcase")
        if case.find("failure") is not None or case.find("error") is not None
    ]
    text = (
        f"{count['tests']} test{'' if count['tests'] == 1 else 's'}: {count['failures']} "
        f"failed, {count['errors']} errors, {skipped} skipped"
    )
    return text + "".join(f"\n    {name}" for name in failed)


@nox.session
@nox.parametrize(("python", "jax"), TOOLCHAINS)
def stress(session: nox.Session, jax: str | None) -> None:
    """The whole suite (`tests` and `rest` together) three times in a row (`-- --runs N`, or
    JAXTUNE_STRESS_RUNS=N), with two busy processes pinned to the first two cores the
    whole time (the 2-core machine's both); every run goes on after a failed one, and each
    run's time and result are printed at the end. Other arguments go to pytest (`--
    tests/test_prestart.py`). Run it before closing any issue that touches processes or
    timing (docs/development.md)."""
    runs, args = _stress_args(session.posargs)
    command, codes = _suite(session, jax, args, "all")
    cpus = sorted(os.sched_getaffinity(0))
    busy = [
        subprocess.Popen([sys.executable, "-c", BUSY, str(cpus[i % len(cpus)])]) for i in range(2)
    ]
    reports = pathlib.Path(session.create_tmp())
    results: list[tuple[bool, str]] = []
    try:
        for run in range(1, runs + 1):
            xml = reports / f"stress-{run}.xml"
            xml.unlink(missing_ok=True)
            start = time.monotonic()
            try:
                session.run(*command, f"--junitxml={xml}", success_codes=codes)
                passed = True
            except nox.command.CommandFailed:
                passed = False
            took = time.monotonic() - start
            line = (
                f"run {run}/{runs} beside 2 busy processes: {'passed' if passed else 'FAILED'} "
                f"in {took:.0f} s; {_junit_summary(xml)}"
            )
            session.log(line)
            results.append((passed, line))
    finally:
        for process in busy:
            process.kill()
            process.wait()
    for _, line in results:
        session.log(line)
    failed = sum(not passed for passed, _ in results)
    if failed:
        session.error(f"{failed} of {runs} runs failed beside two busy processes")


@nox.session(python=_python_or_name(PYTHONS[0]))
def lint(session: nox.Session) -> None:
    """ruff check and ruff format --check."""
    session.install(*nox.project.dependency_groups(PYPROJECT, "lint"))
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")


@nox.session(python=_python_or_name(PYTHONS[0]))
def types(session: nox.Session) -> None:
    """mypy over the package."""
    _install(session, "types", jax=OLDEST_JAX)
    session.run("mypy")


@nox.session(python=_python_or_name(PYTHONS[0]))
def docs(session: nox.Session) -> None:
    """mkdocs build --strict."""
    _install(session, "docs")
    session.run("mkdocs", "build", "--strict", "--site-dir", str(ROOT / ".site"))


@nox.session(python=_python_or_name(PYTHONS[0]))
def demo(session: nox.Session) -> None:
    """jaxtune demo on the local backend."""
    _install(session)
    session.run("jaxtune", "demo")


@nox.session(python=_python_or_name(PYTHONS[-1]))
def tpu(session: nox.Session) -> None:
    """The TPU tier (tests/tpu/) on a TPU VM with network access, in one pytest process:
    one process at a time can hold a TPU chip (docs/development.md, "The TPU tier")."""
    _install(session, "test", extras="tpu,xprof,retune")
    session.install("flax", "optax")
    session.run("pytest", "-p", "no:xdist", "tests/tpu", *session.posargs)


@nox.session(python=_python_or_name(PYTHONS[0]))
def browser(session: nox.Session) -> None:
    """Renders each HTML report of the demo in headless Chromium, screenshots it, and fails
    on a blank page, a console message, a network reference or a missing chart."""
    if shutil.which("chromium") is None:
        session.error("chromium is not installed: apt-get install -y chromium (.ci/run does)")
    _install(session, extras="plots")
    session.run("python", "tools/render_reports.py", str(ROOT / ".browser-check"))


#: Other autotuners compared in bench/bench_vs_tools.py and bench_flash_vs_tune_jax.py:
#: installed in the bench session's own environment only, never dependencies of jaxtune.
BENCH_TOOLS = ("tokamax", "tune-jax", "pallas-forge")


@nox.session(python=_python_or_name(PYTHONS[-1]))
def bench(session: nox.Session) -> None:
    """Every benchmark under bench/, printing ratios measured side by side; results as JSON
    and Markdown in bench/results/."""
    _install(session)
    session.install(*BENCH_TOOLS)
    results = ROOT / "bench" / "results"
    results.mkdir(exist_ok=True)
    session.run("python", "bench/bench_hot_path.py", "--json", str(results / "hot_path.json"))
    session.run("python", "bench/bench_search.py", "--json", str(results / "search.json"))
    session.run("python", "bench/bench_right_winner.py", "--results", str(results))
    session.run("python", "bench/bench_vs_tools.py", "--results", str(results))
    session.run("python", "bench/bench_flash_vs_tune_jax.py", "--results", str(results))
    session.install(".[remote]", "moto[server]")  # bench_shared_store.py's local S3 server
    session.run("python", "bench/bench_shared_store.py", "--results", str(results))
    kernels = "flash,swiglu,ragged_dot,tokamax_flash"
    session.run(
        "python", "bench/bench_sweep_time.py", "--kernels", kernels, "--results", str(results)
    )
    session.run("python", "bench/bench_tie_rounds.py", "--results", str(results))
    session.run("python", "bench/bench_tune_command.py", "--results", str(results))
    session.run("python", "bench/bench_buckets.py", "--json", str(results / "buckets.json"))
    session.run("python", "bench/bench_digest.py", "--json", str(results / "digest.json"))
    # xprof from JAXTUNE_XPROF_PYTHON (its pins are not this environment's); skips without.
    session.run("python", "bench/bench_llo.py", "--json", str(results / "llo.json"))
    session.run("python", "bench/bench_wire.py", "--json", str(results / "wire.json"))
    for script in (
        "bench_child_runner.py",
        "bench_trace_reader.py",
        "bench_cache.py",
        "bench_distributed.py",
        "bench_examples_pick.py",
    ):
        session.run("python", str(ROOT / "bench" / script), *session.posargs)
