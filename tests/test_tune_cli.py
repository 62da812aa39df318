"""End to end: `jaxtune tune -- python script.py`, then a plain run that uses the cache
(docs/whole-model.md, "jaxtune tune -- python train.py ...")."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import textwrap

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.child]

ROOT = pathlib.Path(__file__).resolve().parent.parent

SCRIPT = textwrap.dedent(
    """
    import jax, jax.numpy as jnp
    from jaxtune.examples.chunked import chunked_logsumexp
    from jaxtune.examples.pallas_matmul import matmul

    @jax.jit
    def step(w, x):
        h = matmul(x, w)
        return chunked_logsumexp(jnp.tile(h, (1, 16))).mean()

    if __name__ == "__main__":
        w = jnp.full((64, 64), 0.01)
        x = jnp.ones((64, 64))
        for _ in range(3):
            print("loss", float(step(w, x)), flush=True)
    """
)

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
    # The program stopped after its first traced step: no loss was printed.
    assert "loss" not in tuned.stdout
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


def test_tune_command_needs_a_program(cli):
    proc = cli("tune")
    assert proc.returncode == 2
    assert "jaxtune tune needs a command" in proc.stderr


def test_retune_summary_counts_the_calls_that_had_a_config():
    from jaxtune._cli.tune import summary_line

    assert summary_line(2, 2, 2, retune=True) == (
        "recorded 2 autotuned calls; 2 already had a config (re-tuned: --retune); tuned 2"
    )
    assert summary_line(1, 0, 1, retune=False) == (
        "recorded 1 autotuned call; 0 already had a config; tuned 1"
    )
