"""The caller's JAX state reaches the sweep child and the profile child before tracing."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import pytest
from jax._src import config as jax_config
from jax.experimental.pallas import tpu as pltpu

import jaxtune
from jaxtune._isolation import context as _context
from jaxtune._tuning.sweep import runner as _runner

pytestmark = [pytest.mark.slow, pytest.mark.child]

ROOT = pathlib.Path(__file__).resolve().parent.parent


@jaxtune.autotuned(configs={"scale": [1, 2]}, name="tests.child_state.dtype_probe")
def dtype_probe(x, *, scale):
    # Fails (so every config fails) unless the child traces with x64 on, like the caller.
    assert jnp.zeros(()).dtype == jnp.float64, "x64 did not reach the child"
    return x * scale / scale


def test_snapshot_reads_both_forms_of_interpret_mode_and_config_options():
    assert _context.snapshot().values[_context._INTERPRET] is None
    with pltpu.force_tpu_interpret_mode():
        local = _context.snapshot()
    pltpu.set_tpu_interpret_mode()
    try:
        globally = _context.snapshot()
    finally:
        jax_config.pallas_tpu_interpret_mode_context_manager.set_global(None)
    for snap in (local, globally):
        assert snap.values[_context._INTERPRET].dataclass.endswith(":InterpretParams")
    with jax.default_matmul_precision("highest"):
        assert _context.snapshot().values["jax_default_matmul_precision"] == "highest"


def test_apply_snapshot_sets_and_resets_state():
    with jax.enable_x64(True), pltpu.force_tpu_interpret_mode():
        wanted = _context.snapshot()
    plain = _context.snapshot()
    try:
        assert _context.apply_snapshot(wanted) == {}
        assert jax.config.jax_enable_x64
        assert jax_config.pallas_tpu_interpret_mode_context_manager.value is not None
    finally:
        assert _context.apply_snapshot(plain) == {}
    assert not jax.config.jax_enable_x64
    assert jax_config.pallas_tpu_interpret_mode_context_manager.value is None


def test_x64_reaches_the_sweep_child(fast_timing):
    assert isinstance(_runner.default_runner(), _runner.ProcessRunner)
    with jax.enable_x64(True):
        x = jnp.ones(8, jnp.float64)
        (entry,) = dtype_probe.tune(x).values()
    assert [m.ok for m in entry.measurements] == [True, True], entry.measurements
    assert entry.key.startswith("f64")


def test_state_that_cannot_travel_is_named():
    message = _context.describe_uncarried({"jax_default_device": "a Device value"})
    assert "jax_default_device (a Device value)" in message
    assert "JAXTUNE_ISOLATION=inline" in message


UNGUARDED = textwrap.dedent(
    """
    import argparse
    import jax.numpy as jnp
    import jaxtune

    @jaxtune.autotuned(configs={"s": [1, 2]}, name="tests.unguarded")
    def k(x, *, s):
        return x * s

    parser = argparse.ArgumentParser()
    parser.add_argument("--size", type=int, required=True)
    args = parser.parse_args()
    print(k.tune(jnp.ones(args.size)).table())
    """
)


def test_script_without_main_guard_gets_a_message_naming_the_line(tmp_path):
    script = tmp_path / "unguarded.py"
    script.write_text(UNGUARDED)
    proc = subprocess.run(
        [sys.executable, str(script), "--size", "8"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        env={**__import__("os").environ, "PYTHONPATH": str(ROOT)},
    )
    # The child cannot re-import the script, so it is tuned here, with a clear warning.
    assert proc.returncode == 0, proc.stderr
    assert "re-imported the script" in proc.stderr
    assert "line 12 (`args = parser.parse_args()`)" in proc.stderr
    assert '__name__ == "__main__"' in proc.stderr


UNGUARDED_WORK = textwrap.dedent(
    """
    import os
    import jax
    import jax.numpy as jnp
    import jaxtune

    with open(os.environ["RUNS_LOG"], "a") as log:
        log.write(f"{os.getpid()}\\n")

    @jaxtune.autotuned(configs={"s": [1, 2]})
    def k(x, *, s):
        return x * s / s

    print(jax.jit(k)(jnp.ones(8)).sum())
    """
)


def test_work_at_a_scripts_top_level_is_not_tuned_again_in_the_child(tmp_path):
    script = tmp_path / "work.py"
    script.write_text(UNGUARDED_WORK)
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "JAXTUNE_MODE": "tune",
        "RUNS_LOG": str(tmp_path / "runs.log"),
    }
    proc = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=300, env=env
    )
    assert proc.returncode == 0, proc.stderr
    # The child re-ran the script's top level to find the kernel (twice in all)...
    assert len((tmp_path / "runs.log").read_text().split()) == 2
    # ...where the kernel's call used the default config instead of a sweep of its own,
    # under the re-run script's module name, and the warning says what to do.
    listed = subprocess.run(
        [sys.executable, "-m", "jaxtune", "cache", "list", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert listed.returncode == 0, listed.stderr
    assert "__jaxtune_main__" not in listed.stdout
    assert "__main__.k" in listed.stdout
    assert "its top level called @autotuned kernels (__main__.k)" in proc.stderr
    assert '`if __name__ == "__main__":` guard' in proc.stderr
