"""JAX's bundled Pallas TPU kernels, autotuned over their real knobs on CPU in TPU interpret
mode, in the default (child) isolation, with interpret mode switched on by the caller at run
time (so it reaches the child only because jaxtune carries it there)."""

from __future__ import annotations

import jax
import pytest
from jax.experimental.pallas import tpu as pltpu

import jaxtune
from jaxtune._tuning.sweep import runner as _runner

from . import kernels
from .conftest import KERNELS

pytestmark = pytest.mark.slow


def _check_entry(result, kernel, space):
    (entry,) = [e for (k, _, _), e in result.items() if k == kernel.kernel_id]
    failures = [m for m in entry.measurements if not m.ok]
    assert failures == [], failures
    assert len(entry.measurements) == len(space)
    assert dict(entry.config) in [dict(c) for c in space]
    return entry


@pytest.mark.child
@pytest.mark.parametrize("name", sorted(KERNELS))
def test_tunes_in_the_child_with_the_callers_interpret_mode(name, fast_timing):
    kernel, make_args = KERNELS[name]
    args = make_args()
    assert isinstance(_runner.default_runner(), _runner.ProcessRunner)
    with pltpu.force_tpu_interpret_mode():
        result = kernel.tune(*args)
        choice = kernel.config_for(*args)
    entry = _check_entry(result, kernel, kernel.space(*args))
    assert choice.source == "cache"
    assert dict(choice.config) == dict(entry.config)


@pytest.mark.child
def test_global_interpret_mode_reaches_the_child(interpret_globally, fast_timing):
    args = kernels.matmul_args()
    result = kernels.matmul.tune(*args)
    _check_entry(result, kernels.matmul, kernels.matmul.space(*args))


@pytest.mark.child
def test_flash_attention_gradient_is_tuned_through_jax_grad(fast_timing):
    args = kernels.flash_args()
    # The backward kernels run inside the tuned forward's scope: no "untuned kernel" warning.
    with pltpu.force_tpu_interpret_mode():
        result = jaxtune.tune(jax.grad(kernels.flash_loss, argnums=(0, 1, 2)), *args)
        grads = jax.jit(jax.grad(kernels.flash_loss, argnums=(0, 1, 2)))(*args)
    entry = _check_entry(result, kernels.flash, kernels.flash.space(*args))
    assert all(g.shape == a.shape for g, a in zip(grads, args, strict=True))
    # Tuned from the gradient: forward and backward timed (the dkv and dq kernels too).
    assert entry.timing == "vjp"
