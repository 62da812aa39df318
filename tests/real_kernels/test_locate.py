"""Locating JAX's bundled Pallas TPU kernels: lowered for TPU on a machine without one, and
in interpret mode inside nested jit, grad, vmap and scan."""

from __future__ import annotations

import jax
import pytest
from jax.experimental.pallas import tpu as pltpu

import jaxtune

from . import kernels
from .conftest import KERNELS

pytestmark = pytest.mark.slow


def _raw(kernel):
    """The kernel at its default config, without jaxtune around it."""

    def call(*args):
        return kernel.__wrapped__(*args, **kernel.config_for(*args).config)

    return call


def _nested(kernel):
    inner = jax.jit(_raw(kernel))

    @jax.jit
    def step(*args):
        return jax.tree_util.tree_map(lambda x: x * 1, inner(*args))

    return step


def _pallas(sites):
    return [s for s in sites if s.kind == "pallas"]


@pytest.mark.parametrize("name", sorted(KERNELS))
def test_located_for_tpu_without_a_tpu(name):
    kernel, make_args = KERNELS[name]
    with pltpu.force_tpu_interpret_mode():  # lowering for a TPU ignores it
        sites = _pallas(jaxtune.locate(_nested(kernel), *make_args(), platform="tpu"))
    assert sites, name
    assert {s.target for s in sites} == {"tpu_custom_call"}
    assert all(s.platform == "tpu" and s.operands and s.results for s in sites)


@pytest.mark.parametrize("name", sorted(KERNELS))
def test_located_in_interpret_mode_inside_nested_jit(name):
    kernel, make_args = KERNELS[name]
    args = make_args()
    with pltpu.force_tpu_interpret_mode():
        on_tpu = _pallas(jaxtune.locate(_nested(kernel), *args, platform="tpu"))
        sites = _pallas(jaxtune.locate(_nested(kernel), *args))
    assert sites, name
    assert all(s.target is None and s.platform == "cpu" for s in sites)
    # The same kernels, by the same names and shapes, as when lowered for a TPU.
    assert [s.name for s in sites] == [s.name for s in on_tpu]
    assert [s.operands for s in sites] == [s.operands for s in on_tpu]
    assert [s.results for s in sites] == [s.results for s in on_tpu]


def test_flash_attention_gradient_kernels_are_located_inside_the_tuned_kernel():
    args = kernels.flash_args()
    grad = jax.grad(kernels.flash_loss, argnums=(0, 1, 2))
    with pltpu.force_tpu_interpret_mode():
        sites = jaxtune.locate(grad, *args)
    names = [s.name for s in _pallas(sites)]
    assert names == [
        "_flash_attention_kernel",
        "_flash_attention_dkv_kernel",
        "_flash_attention_dq_kernel",
    ]
    assert {s.inside for s in _pallas(sites)} == {"real.flash_attention"}
    assert "real.flash_attention" in {s.kernel_id for s in sites if s.kind == "autotuned"}


def test_located_through_vmap_and_scan():
    q, k, v = kernels.flash_args()
    step = _raw(kernels.flash)

    def scanned(q, k, v):
        return jax.lax.scan(lambda c, _: (step(c, k, v), None), q, length=3)[0]

    with pltpu.force_tpu_interpret_mode():
        batched = _pallas(jaxtune.locate(jax.vmap(step), q[None], k[None], v[None]))
        looped = _pallas(jaxtune.locate(scanned, q, k, v))
    assert [s.name for s in batched] == ["_flash_attention_kernel"]
    assert batched[0].operands[0][0] == "f32" and batched[0].results
    assert [s.name for s in looped] == ["_flash_attention_kernel"]
