"""The TPU tier, part 2: this process opens the chip (after part 1's programs have ended),
so it is a process that holds the TPU: sweeps and captures run here, saying which flags
they could not apply. Each tuning test checks the stored config against the truth it
measures in the same run (:mod:`tests.tpu.truth`)."""

from __future__ import annotations

import contextlib

import jax
import jax.numpy as jnp
import pytest

import jaxtune
from tests.tpu import kernels
from tests.tpu.truth import check_pick, grad_of, wall_times

_TPU_HELD = "this process already opened the TPU"


def tpu_held_warning():
    """The one warning a sweep or capture in a process that holds the chip gives (none in
    the dry run on CPU, whose sweeps run in a child)."""
    if kernels.DRY:
        return contextlib.nullcontext()
    return pytest.warns(jaxtune.JaxtuneWarning, match=_TPU_HELD)


@pytest.fixture
def chip_held(fresh_warnings):
    """This process holds the chip (an array lives on it); each test gets jaxtune's
    warn-once warnings again, as a fresh process would."""
    return jnp.ones(8).block_until_ready()


def test_tune_under_grad_times_forward_and_backward_and_stores_the_best(chip_held):
    q, k, v = kernels.qkv(seq=1024)

    def loss(q, k, v):
        return kernels.flash(q, k, v).astype(jnp.float32).sum()

    with tpu_held_warning():
        result = jaxtune.tune(jax.grad(loss, argnums=(0, 1, 2)), q, k, v)
    (entry,) = result.values()
    assert entry.timing == "vjp"
    times = wall_times(grad_of(kernels.flash.__wrapped__), kernels.flash.space(q, k, v), (q, k, v))
    assert not check_pick(entry.config, times), check_pick(entry.config, times)
    # No verdict contradicts its interval: a tie's interval holds 1.
    if entry.decision == "tie":
        assert entry.margin["low"] <= 1.0 <= entry.margin["high"], entry.margin


def test_profile_in_a_process_that_holds_the_chip(chip_held, tmp_path):
    q, k, v = kernels.qkv(seq=1024)

    @jaxtune.profiled
    @jax.jit
    def attend(q, k, v):
        return kernels.flash(q, k, v)

    with tpu_held_warning():
        prof = attend.profile(q, k, v, logdir=str(tmp_path), iters=3)
    if not kernels.DRY:
        assert prof.platform == "tpu"
        assert "--xla_xprof_register_llo_debug_info=true" in prof.missing_flags
    assert any(kern.kernel_id == kernels.FLASH for kern in prof.kernels), prof.table()
    assert (tmp_path / "report.json").exists() or list(tmp_path.rglob("*.xplane.pb"))


def test_tiling_and_vmem_failures_here_are_reasons_and_the_sweep_goes_on(chip_held):
    from tests.tpu.two_jits import tiles_input

    with tpu_held_warning():
        (entry,) = kernels.tiles.tune(tiles_input()).values()
    failed = {(m.config["rows"], m.config["cols"]): m for m in entry.measurements if not m.ok}
    assert {(8, 100), (4096, 4096)} <= set(failed), entry.measurements
    assert all(m.reason for m in failed.values())
    assert (entry.config["rows"], entry.config["cols"]) in {(8, 128), (256, 512)}


def test_a_flax_nnx_optax_step_tunes_its_attention_under_value_and_grad(chip_held):
    pytest.importorskip("flax", reason="Flax NNX: tools/tpu/env.sh installs it")
    pytest.importorskip("optax", reason="optax: tools/tpu/env.sh installs it")
    from tests.tpu import nnx_model

    graphdef, state, tokens = nnx_model.init()
    with tpu_held_warning():
        result = jaxtune.tune(nnx_model.train_step, graphdef, state, tokens)
    (entry,) = [e for e in result.values() if e.kernel == kernels.FLASH]
    assert entry.timing == "vjp"
    size = nnx_model.SMALL
    q = jnp.ones((size.batch, size.heads, size.seq, size.d_model // size.heads), jnp.bfloat16)
    args = (q, q * 0.5, q * 0.25)
    times = wall_times(grad_of(kernels.flash.__wrapped__), kernels.flash.space(*args), args)
    assert not check_pick(entry.config, times), check_pick(entry.config, times)
    # The tuned step trains: the donated state comes back, the loss is finite.
    state, loss = nnx_model.train_step(graphdef, state, tokens)
    assert bool(jnp.isfinite(loss))
