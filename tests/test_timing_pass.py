"""The pass a sweep times (docs/autotuned.md, "The pass timed"):
``timing="auto"`` times forward and backward whenever the kernel is reached from a
differentiated program, in every flow, with ``jax.jit`` on either side of the gradient.

The kernel (``pass_kernels.lopsided``) is fastest with ``light_forward`` when only its
forward runs and with ``light_backward`` when its backward runs too, by several times each
way: a flow that timed the wrong pass stores the other config.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import pass_kernels
import pytest

import jaxtune
from jaxtune._tuning.bound import BoundCall
from jaxtune._tuning.store import cache as _cache

pytestmark = [pytest.mark.child, pytest.mark.slow]

ROOT = pathlib.Path(__file__).resolve().parent.parent
TESTS = pathlib.Path(__file__).resolve().parent
KERNEL = "tests.lopsided"


def stored() -> tuple[str, str]:
    """The stored config's plan and the pass its entry timed."""
    (entry,) = list(_cache.user_cache().entries_for(KERNEL, "cpu"))
    return entry.config["plan"], entry.timing


@pytest.mark.parametrize("step", ["jit_of_grad", "grad_of_jit", "value_and_grad", "vjp"])
def test_tune_mode_times_the_backward_of_a_differentiated_kernel(step, monkeypatch):
    monkeypatch.setenv("JAXTUNE_MODE", "tune")
    x = jnp.ones(pass_kernels.SHAPE)
    plain = pass_kernels.STEPS[step](x)
    assert stored() == ("light_backward", "vjp")
    # The step runs the stored config (and the gradient is the one that config gives).
    monkeypatch.setenv("JAXTUNE_MODE", "cached")
    again = pass_kernels.STEPS[step](x)
    assert jnp.array_equal(plain, again)


@pytest.mark.parametrize("step", ["jit_of_grad", "grad_of_jit"])
def test_tune_mode_sweeps_a_differentiated_kernel_once(step, monkeypatch):
    """The kernel's trace finds the differentiation below it (the chain of JAX's traces),
    with ``jax.jit`` on either side of the gradient: one sweep, of forward and backward,
    not a forward sweep first."""
    timed: list[str] = []
    sweep = BoundCall.sweep

    def counted(*args, **kwargs):
        entry = sweep(*args, **kwargs)
        timed.append(entry.timing)
        return entry

    monkeypatch.setattr(BoundCall, "sweep", counted)
    monkeypatch.setenv("JAXTUNE_MODE", "tune")
    pass_kernels.STEPS[step](jnp.ones(pass_kernels.SHAPE))
    assert timed == ["vjp"]


def test_tune_mode_times_the_forward_of_a_kernel_nothing_differentiates(monkeypatch):
    monkeypatch.setenv("JAXTUNE_MODE", "tune")
    pass_kernels.forward_only(jnp.ones(pass_kernels.SHAPE))
    assert stored() == ("light_forward", "forward")


def test_tune_mode_replaces_a_forward_entry_when_the_kernel_is_differentiated(monkeypatch):
    """An entry timed forward (an inference program tuned first) is tuned again, as
    forward and backward, by a training program in tune mode; cached mode keeps it."""
    x = jnp.ones(pass_kernels.SHAPE)
    monkeypatch.setenv("JAXTUNE_MODE", "tune")
    pass_kernels.forward_only(x)
    assert stored() == ("light_forward", "forward")
    monkeypatch.setenv("JAXTUNE_MODE", "cached")
    pass_kernels.jit_of_grad(x)  # cached mode never sweeps
    assert stored() == ("light_forward", "forward")
    monkeypatch.setenv("JAXTUNE_MODE", "tune")
    pass_kernels.grad_of_jit(x)
    assert stored() == ("light_backward", "vjp")


def test_jaxtune_tune_of_a_gradient_times_the_backward_and_skips_current_entries():
    x = jax.ShapeDtypeStruct(pass_kernels.SHAPE, jnp.float32)
    first = jaxtune.tune(jax.grad(pass_kernels.loss), x)
    ((entry),) = first.values()
    assert (entry.config["plan"], entry.timing) == ("light_backward", "vjp")
    # A second call finds the entry current: nothing is swept, the entry comes back.
    again = jaxtune.tune(jax.grad(pass_kernels.loss), x)
    assert dict(again) == dict(first)
    # retune=True sweeps again: a new entry (a new creation time).
    forced = jaxtune.tune(jax.grad(pass_kernels.loss), x, retune=True)
    ((new),) = forced.values()
    assert new.created > entry.created and new.timing == "vjp"


PROGRAM = textwrap.dedent(
    """
    import sys
    import jax.numpy as jnp
    import pass_kernels

    if __name__ == "__main__":
        step = pass_kernels.STEPS[sys.argv[1]]
        print("grad", float(step(jnp.ones(pass_kernels.SHAPE)).sum()), flush=True)
    """
)


# One `jaxtune tune --` run per step; the pass is named in the JSON document by one and in
# the table a person reads by the other (how they are printed does not depend on the step).
@pytest.mark.parametrize(("step", "output"), [("jit_of_grad", "json"), ("grad_of_jit", "table")])
def test_tune_command_times_the_backward_of_a_differentiated_kernel(step, output, tmp_path):
    script = tmp_path / "train.py"
    script.write_text(PROGRAM)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(TESTS)])}
    flags = ["--json"] if output == "json" else []
    done = subprocess.run(
        [sys.executable, "-m", "jaxtune", "tune", *flags, "--", sys.executable, str(script), step],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert stored() == ("light_backward", "vjp")
    if output == "json":
        doc = json.loads(done.stdout)
        assert doc["recorded"] == 1
        ((tuned),) = doc["tuned"]
        assert (tuned["config"]["plan"], tuned["timing"]) == ("light_backward", "vjp")
    else:
        assert "recorded 1 autotuned call; 0 already had a config; tuned 1" in done.stdout
        assert "fwd+bwd" in done.stdout, done.stdout
