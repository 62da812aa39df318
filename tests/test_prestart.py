"""A kernel decorated in tune mode starts the sweep child ahead of need and has its module
imported there, with the variables this process had when it decorated the kernel."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
from waiting import all_gone

from jaxtune._isolation.devices import cpu_only

pytestmark = [pytest.mark.slow, pytest.mark.child]

MODULE = textwrap.dedent(
    """
    import os

    import jaxtune

    with open(os.environ["PROBE_LOG"], "a") as log:
        log.write(f"{os.getpid()} {os.environ.get('PROBE_VALUE')}\\n")


    @jaxtune.autotuned(configs={"c": [1, 2]}, name="tests.prestart.kernel")
    def kernel(x, *, c):
        return x * c / c
    """
)

PROGRAM = textwrap.dedent(
    """
    import json, os, sys, time

    os.environ["PROBE_VALUE"] = "when decorated"
    import prestart_probe
    os.environ["PROBE_VALUE"] = "later"

    def lines():
        # Whole lines: one another process is still appending has no newline yet.
        with open(os.environ["PROBE_LOG"]) as log:
            return [line.split() for line in log.read().split("\\n")[:-1]]

    deadline = time.monotonic() + 120
    while len(lines()) < int(sys.argv[1]):
        if time.monotonic() > deadline:
            sys.exit(f"waited 120 s for {sys.argv[1]} lines in the import log: {lines()}")
        time.sleep(0.05)
    before = lines()  # the child imported the module before any sweep was asked for

    import jax.numpy as jnp

    (entry,) = prestart_probe.kernel.tune(jnp.ones(64)).values()
    print(json.dumps({"parent": os.getpid(), "before": before, "after": lines(),
                      "config": entry.config}))
    """
)


def _run(tmp_path, module_text, *, lines=0, platforms="cpu", program=PROGRAM, **extra):
    """Runs ``program`` (by default one that waits until the import log has ``lines``
    lines, then tunes) with ``module_text`` as the kernel's module (``platforms``:
    JAX_PLATFORMS, ``None`` unset)."""
    (tmp_path / "prestart_probe.py").write_text(module_text)
    env = {k: v for k, v in os.environ.items() if k not in ("PROBE_VALUE", "JAX_PLATFORMS")}
    if platforms is not None:
        env["JAX_PLATFORMS"] = platforms
    env.update(
        JAXTUNE_MODE="tune",
        PROBE_LOG=str(tmp_path / "imports.log"),
        PROBE_GO=str(tmp_path / "sweep-waits"),
        PYTHONPATH=os.pathsep.join([str(tmp_path), env.get("PYTHONPATH", "")]),
        **extra,
    )
    return subprocess.run(
        [sys.executable, "-c", program, str(lines)],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.parametrize("platforms", ["cpu", None], ids=["JAX_PLATFORMS=cpu", "unset"])
def test_the_kernels_module_is_imported_in_the_child_before_the_first_sweep(tmp_path, platforms):
    # Unset, with no accelerator plugin installed, the platform can only be CPU: the
    # child is started ahead of need all the same (before JAX starts a backend here).
    if platforms is None and not cpu_only():
        pytest.skip(
            "an accelerator plugin is installed here, so with JAX_PLATFORMS unset the platform "
            "is not known before JAX starts and no child is started ahead: the case under "
            "test (unset, CPU only) does not arise; the JAX_PLATFORMS=cpu case runs"
        )
    proc = _run(tmp_path, MODULE, lines=2, platforms=platforms)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    parent = str(out["parent"])
    assert [parent, "when", "decorated"] in out["before"]
    children = [line for line in out["before"] if line[0] != parent]
    # Imported once in the child, with the variables of when the kernel was decorated...
    assert children == [[children[0][0], "when", "decorated"]]
    # ...and the sweep found it there instead of importing it again.
    assert [line for line in out["after"] if line[0] != parent] == children
    assert out["config"] in ({"c": 1}, {"c": 2})


def _in_the_child_first(statement):
    """The kernel's module, doing ``statement`` first where the child imports it."""
    return MODULE.replace(
        "import jaxtune\n",
        f"import time\n\nimport jaxtune\n\nif os.environ.get('JAXTUNE_PARENT_PID'):\n    {statement}\n",
    )


def test_a_module_the_child_cannot_import_is_left_for_the_sweep_to_report(tmp_path):
    # The sweep falls back to this process, with one warning that says why.
    proc = _run(tmp_path, _in_the_child_first("raise RuntimeError('not in the child')"), lines=1)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "not in the child" in proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["config"] in ({"c": 1}, {"c": 2})


def test_a_module_whose_import_hangs_in_the_child_ends_in_an_error_not_a_hang(tmp_path):
    proc = _run(tmp_path, _in_the_child_first("time.sleep(600)"), lines=1, JAXTUNE_TIMEOUT="3")
    assert proc.returncode != 0
    assert "no answer within the 3 s limit" in proc.stderr, proc.stderr[-3000:]
    # Its own request's limit, or the limit of the import ahead of need it waited for.
    assert (
        "while importing its module" in proc.stderr
        or "when it was imported ahead of need" in proc.stderr
    )
    assert "guard that too, or define the kernel in a module of its own" in proc.stderr


AFTER_THE_HANG = textwrap.dedent(
    """
    import json, os, sys, time

    import prestart_probe

    def lines():
        with open(os.environ["PROBE_LOG"]) as log:
            return [line.split() for line in log.read().split("\\n")[:-1]]

    def gone(pid):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        return False

    # The child started ahead of need logs its import, then hangs in it until the time
    # limit, when it is killed.
    deadline = time.monotonic() + 120
    while not [line for line in lines() if line[0] != str(os.getpid())]:
        if time.monotonic() > deadline:
            sys.exit(f"no child imported the module in 120 s: {lines()}")
        time.sleep(0.05)
    (child,) = [int(line[0]) for line in lines() if line[0] != str(os.getpid())]
    while os.environ.get("PROBE_SWEEP") == "after the kill" and not gone(child):
        if time.monotonic() > deadline:
            sys.exit("the child that hung importing the module was not killed in 120 s")
        time.sleep(0.05)

    import jax.numpy as jnp

    try:
        prestart_probe.kernel.tune(jnp.ones(64))
    except Exception as e:
        error = f"{type(e).__name__}: {e}"
    else:
        error = None
    print(json.dumps({"parent": os.getpid(), "imports": lines(), "error": error}))
    """
)


@pytest.mark.parametrize("sweep", ["after the kill", "while it hangs"])
def test_a_module_whose_import_hung_ahead_of_need_is_not_imported_again(tmp_path, sweep):
    """The child started ahead of need hangs importing the kernel's module and is killed at
    the time limit; the sweep says so at once, whether it comes after that or waited for
    the child meanwhile, where it would otherwise start a new child, import the module
    there and wait as long again (a new user's `jaxtune tune --` of a script with no
    `__main__` guard waited twice its 10 s limit)."""
    module = MODULE + (
        "\nif os.environ.get('JAXTUNE_PARENT_PID'):\n    import time\n\n    time.sleep(600)\n"
    )
    proc = _run(tmp_path, module, program=AFTER_THE_HANG, JAXTUNE_TIMEOUT="3", PROBE_SWEEP=sweep)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    parent = str(out["parent"])
    # One import in a child: the one started ahead of need; no second child imported it.
    assert len([line for line in out["imports"] if line[0] != parent]) == 1, out["imports"]
    assert out["error"].startswith("SweepError: "), out["error"]
    assert "hung importing prestart_probe" in out["error"]
    assert "when it was imported ahead of need" in out["error"]
    assert "this process does not import it again" in out["error"]
    assert "no answer within the 3 s limit" in out["error"]
    assert "guard that too, or define the kernel in a module of its own" in out["error"]


def test_a_kernel_given_a_longer_limit_than_its_import_had_still_imports_it(tmp_path):
    """The import ahead of need ran under JAXTUNE_TIMEOUT (3 s) and was cut off; the
    kernel's own ``timeout=`` (30 s) gives its sweep longer: the sweep imports the module
    again (5 s) and tunes."""
    module = (
        MODULE.replace('name="tests.prestart.kernel")', 'name="tests.prestart.kernel", timeout=30)')
        + "\nif os.environ.get('JAXTUNE_PARENT_PID'):\n    import time\n\n    time.sleep(5)\n"
    )
    proc = _run(
        tmp_path,
        module,
        program=AFTER_THE_HANG,
        JAXTUNE_TIMEOUT="3",
        PROBE_SWEEP="after the kill",
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["error"] is None, out["error"]
    parent = str(out["parent"])
    assert len([line for line in out["imports"] if line[0] != parent]) == 2, out["imports"]


def test_cpu_only_is_false_where_a_tpu_runtime_or_a_plugin_is_installed(monkeypatch, tmp_path):
    from jaxtune._isolation import devices

    monkeypatch.delenv("TPU_LIBRARY_PATH", raising=False)
    monkeypatch.delenv("PJRT_NAMES_AND_LIBRARY_PATHS", raising=False)
    monkeypatch.setenv("TPU_LIBRARY_PATH", "/opt/libtpu.so")
    assert not devices.cpu_only()
    monkeypatch.delenv("TPU_LIBRARY_PATH")
    # A PJRT plugin in the jax_plugins namespace (where the CUDA plugin installs itself).
    (tmp_path / "jax_plugins" / "xla_cuda12").mkdir(parents=True)
    (tmp_path / "jax_plugins" / "xla_cuda12" / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert not devices.cpu_only()


LOWER_PALLAS = textwrap.dedent(
    """
    import json, sys

    import jax
    import jax.numpy as jnp
    from jax.experimental import pallas as pl

    from jaxtune._isolation import child

    if sys.argv[1] == "warm":
        child._warm_up_pallas()
    before = set(sys.modules)

    def double(x_ref, o_ref):
        o_ref[...] = x_ref[...] * 2

    x = jax.ShapeDtypeStruct((16, 256), jnp.float32)
    jax.jit(pl.pallas_call(double, out_shape=x, interpret=True)).lower(x)
    print(json.dumps(sorted(set(sys.modules) - before)))
    """
)


@pytest.mark.parametrize("warm", [True, False], ids=["warmed", "cold"])
def test_the_childs_pallas_warm_up_leaves_no_import_to_a_kernels_first_lowering(warm):
    """What a CPU child does once a kernel's module imported Pallas, while it waits for
    the sweep: afterwards an interpret-mode kernel lowers without importing anything (the
    cold process shows that the first lowering otherwise does)."""
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    proc = subprocess.run(
        [sys.executable, "-c", LOWER_PALLAS, "warm" if warm else "cold"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    imported = json.loads(proc.stdout.strip().splitlines()[-1])
    if warm:
        assert imported == []
    else:
        assert any(name.startswith("jax._src.pallas.") for name in imported), imported


PALLAS_MODULE = textwrap.dedent(
    """
    import os, sys, threading, time

    import jax
    from jax.experimental import pallas as pl

    import jaxtune

    def _watch(log, known):
        # In the child: notes when more of JAX's Pallas is imported than the module's
        # import brought, with no sweep asked for yet (the program tunes only after this).
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if any(m.startswith("jax._src.pallas.") and m not in known for m in list(sys.modules)):
                with open(log, "a") as out:
                    out.write(f"{os.getpid()} pallas warmed\\n")
                return
            time.sleep(0.01)

    with open(os.environ["PROBE_LOG"], "a") as log:
        log.write(f"{os.getpid()} imported module\\n")
    if os.environ.get("JAXTUNE_PARENT_PID"):
        threading.Thread(
            target=_watch, args=(os.environ["PROBE_LOG"], set(sys.modules)), daemon=True
        ).start()


    def _double(x_ref, o_ref, *, c):
        o_ref[...] = x_ref[...] * c


    @jaxtune.autotuned(configs={"c": [1, 2]}, name="tests.prestart.pallas_kernel")
    def kernel(x, *, c):
        return pl.pallas_call(
            lambda x_ref, o_ref: _double(x_ref, o_ref, c=2),
            out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
            interpret=True,
        )(x)
    """
)


def test_a_cpu_child_warms_pallas_lowering_before_the_first_sweep_of_a_pallas_kernel(tmp_path):
    # Two lines before tuning: the module imported here, then the child's "pallas warmed"
    # (the child's own import line makes three; the program waits for all of them).
    proc = _run(tmp_path, PALLAS_MODULE, lines=3)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    parent = str(out["parent"])
    children = {line[0] for line in out["before"] if line[0] != parent}
    assert len(children) == 1, out["before"]
    assert [*children, "pallas", "warmed"] in out["before"]
    assert out["config"] in ({"c": 1}, {"c": 2})


TRACES_NOTE_WARM_UP = textwrap.dedent(
    """
    import os, time

    import jax
    from jax.experimental import pallas as pl

    import jaxtune

    if os.environ.get("JAXTUNE_PARENT_PID"):
        # A slow import, which ends once the program's sweep waits for it (PROBE_GO).
        deadline = time.monotonic() + 120
        while not os.path.exists(os.environ["PROBE_GO"]) and time.monotonic() < deadline:
            time.sleep(0.01)


    @jaxtune.autotuned(configs={"c": [1, 2]}, name="tests.prestart.traced_kernel")
    def kernel(x, *, c):
        if os.environ.get("JAXTUNE_PARENT_PID"):  # traced in the child: was Pallas warmed?
            import sys

            warmed = bool(sys.modules["__main__"]._PALLAS_WARM)  # python -m ...child
            with open(os.environ["PROBE_LOG"], "a") as log:
                log.write(f"{os.getpid()} traced warmed={warmed}\\n")
        return pl.pallas_call(
            lambda x_ref, o_ref: o_ref.__setitem__(..., x_ref[...] * c),
            out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
            interpret=True,
        )(x) / c


    with open(os.environ["PROBE_LOG"], "a") as log:
        log.write(f"{os.getpid()} imported module\\n")
    """
)

#: Tunes as soon as the child's pool has it, noting (PROBE_GO) when the sweep asks for the
#: child, which the import ahead of need still holds: the sweep then waits for the import.
SWEEP_WAITS_FOR_THE_IMPORT = textwrap.dedent(
    """
    import json, os, sys, threading, time

    import prestart_probe  # decorating the kernel starts the child, which imports this
    from jaxtune._isolation import process as _process

    deadline = time.monotonic() + 120
    while not _process.POOL.children():
        if time.monotonic() > deadline:
            sys.exit("waited 120 s for the child started ahead of need")
        time.sleep(0.05)
    (child,) = _process.POOL.children()


    class Gate:  # the child's lock, noting when a thread other than the import asks for it
        def __init__(self, lock):
            self.lock = lock

        def __enter__(self):
            if threading.current_thread().name != "jaxtune-prestart":
                open(os.environ["PROBE_GO"], "w").close()
            return self.lock.__enter__()

        def __exit__(self, *exc):
            return self.lock.__exit__(*exc)

        def __getattr__(self, name):
            return getattr(self.lock, name)


    child.lock = Gate(child.lock)

    import jax.numpy as jnp

    (entry,) = prestart_probe.kernel.tune(jnp.ones(64)).values()
    with open(os.environ["PROBE_LOG"]) as log:
        after = [line.split() for line in log.read().splitlines()]
    print(json.dumps({"after": after, "config": entry.config}))
    """
)


def test_a_sweep_waiting_for_the_childs_import_is_not_held_up_by_its_pallas_warm_up(tmp_path):
    """The program's sweep asks for the child while the child still imports the kernel's
    module. The child serves the sweep's request once the import is over, instead of
    warming Pallas up first: a warm-up is for a child with nothing to do."""
    proc = _run(tmp_path, TRACES_NOTE_WARM_UP, program=SWEEP_WAITS_FOR_THE_IMPORT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    traced = [line for line in out["after"] if line[1] == "traced"]
    assert traced and traced[0][2] == "warmed=False", out["after"]
    assert out["config"] in ({"c": 1}, {"c": 2})


#: Notes this process's pid in PROBE_LOG, whole (the program waits for the file to exist,
#: and reads it: a file opened and not yet written is empty), then does not finish for ten
#: minutes. Only in a sweep child (``JAXTUNE_PARENT_PID`` is set there).
PID_THEN_STUCK = textwrap.dedent(
    """
    if os.environ.get("JAXTUNE_PARENT_PID"):
        with open(os.environ["PROBE_LOG"] + ".tmp", "w") as out:
            out.write(f"{os.getpid()}\\n")
        os.replace(os.environ["PROBE_LOG"] + ".tmp", os.environ["PROBE_LOG"])
        time.sleep(600)
    """
)

#: Where a sweep child starts, Python's start-up (sitecustomize) is stuck.
SLOW_CHILD_START = "import os, time\n" + PID_THEN_STUCK

ENDS_AFTER_DECORATING = textwrap.dedent(
    """
    import os, sys, time
    import prestart_probe  # decorates a kernel in tune mode: its child starts

    # Ends once the child is on its way (its start-up noted its pid).
    deadline = time.monotonic() + 120
    while not os.path.exists(os.environ["PROBE_LOG"]):
        if time.monotonic() > deadline:
            sys.exit("waited 120 s for the child's pid")
        time.sleep(0.05)
    print("ENDING", flush=True)
    """
)

#: The kernel's module, whose import in a sweep child is stuck (the child is busy with its
#: preload).
SLOW_CHILD_IMPORT = MODULE.replace("PROBE_LOG", "IMPORT_LOG").replace(
    "import jaxtune\n", "import time\n\nimport jaxtune\n" + PID_THEN_STUCK
)


@pytest.mark.parametrize("stuck", ["starting", "importing"])
def test_a_program_that_ends_while_its_child_is_still_busy_does_not_wait_for_it(tmp_path, stuck):
    """The program ends while its child still starts (before its ready frame), or while
    the child imports the kernel's module ahead of need: either way it ends at once."""
    if stuck == "starting":
        (tmp_path / "sitecustomize.py").write_text(SLOW_CHILD_START)
        (tmp_path / "prestart_probe.py").write_text(MODULE.replace("PROBE_LOG", "IMPORT_LOG"))
    else:
        (tmp_path / "prestart_probe.py").write_text(SLOW_CHILD_IMPORT)
    env = {k: v for k, v in os.environ.items() if k != "JAX_PLATFORMS"}
    env.update(
        JAX_PLATFORMS="cpu",
        JAXTUNE_MODE="tune",
        PROBE_LOG=str(tmp_path / "child.pid"),
        IMPORT_LOG=str(tmp_path / "imports.log"),
        TMPDIR=str(tmp_path),
        PYTHONPATH=os.pathsep.join([str(tmp_path), env.get("PYTHONPATH", "")]),
    )
    # Before, the program's exit waited for the child's ready frame or for its answer to
    # the import, neither of which comes (for ten minutes: past this timeout).
    proc = subprocess.run(
        [sys.executable, "-c", ENDS_AFTER_DECORATING],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "ENDING" in proc.stdout
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    pid = int((tmp_path / "child.pid").read_text())
    # The child is gone with the program: killed as it ended, it needs a moment on the
    # machine's cores to be gone (otherwise it sleeps out its ten minutes).
    all_gone([pid], "the program's child to end with it")
    # Nothing went wrong in the child: no crash log is kept.
    assert not list(tmp_path.rglob("crash-*.log"))


def test_tpu_runtime_looks_for_what_jax_loads_a_tpu_from(monkeypatch, tmp_path):
    """``import libtpu``, else ``TPU_LIBRARY_PATH`` (jax/_src/cloud_tpu_init.py): found
    from what is installed, nothing imported."""
    from jaxtune._isolation import devices

    monkeypatch.delenv("TPU_LIBRARY_PATH", raising=False)
    real_find = devices.importlib.util.find_spec
    with monkeypatch.context() as m:  # a machine without libtpu, wherever this runs
        m.setattr(
            devices.importlib.util, "find_spec", lambda n: None if "libtpu" in n else real_find(n)
        )
        assert not devices.tpu_runtime()
    monkeypatch.setenv("TPU_LIBRARY_PATH", "/opt/libtpu.so")
    assert devices.tpu_runtime() and not devices.cpu_only()
    monkeypatch.delenv("TPU_LIBRARY_PATH")
    (tmp_path / "libtpu").mkdir()
    (tmp_path / "libtpu" / "__init__.py").write_text("raise ImportError('never imported')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert devices.tpu_runtime() and not devices.cpu_only()
