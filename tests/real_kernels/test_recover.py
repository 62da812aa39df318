"""A plain trace names JAX's bundled kernels as a capture does: the sites recovered from the
compiled program's HLO proto (what ``jax.profiler.trace`` stores in a trace) carry the
names and sources ``jaxtune.locate`` reads from the jaxpr."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest
from jax.experimental.pallas import tpu as pltpu
from jax.experimental.pallas.ops.tpu import flash_attention as fa

import jaxtune
from jaxtune._profiling import hlo, recover

from .kernels import STEPS

pytestmark = pytest.mark.slow


def _module(step, *args) -> hlo.HloModule:
    """The compiled program's HLO, as a trace's metadata plane holds it (an HloProto)."""
    (module,) = step.lower(*args).compile().runtime_executable().hlo_modules()
    data = module.as_serialized_hlo_module_proto()
    length, size = bytearray(), len(data)
    while True:
        length.append((size & 0x7F) | (0x80 if size > 0x7F else 0))
        size >>= 7
        if not size:
            break
    return hlo.parse_hlo_proto(b"\x0a" + bytes(length) + data)


def _pallas(step, *args):
    return {(s.name, s.source) for s in jaxtune.locate(step, *args) if s.kind == "pallas"}


@pytest.mark.parametrize("name", sorted(STEPS))
def test_recovered_sites_match_locate(name):
    step, make_args = STEPS[name]
    args = make_args()
    with pltpu.force_tpu_interpret_mode():
        expected = _pallas(step, *args)
        module = _module(step, *args)
    found = recover.sites(module)
    assert {(s.name, s.source) for s in found} == expected
    assert all(s.once for s in found)
    claimed = recover.claims(module, found)
    callbacks = [i for i in module.instructions.values() if i.target in recover.CALLBACK_TARGETS]
    assert callbacks and all(i.name in claimed for i in callbacks)


def test_a_kernel_in_a_scan_is_found_and_not_counted_once():
    @jax.jit
    def step(q):
        def body(carry, _):
            return fa.flash_attention(carry, carry, carry, causal=True), None

        return jax.lax.scan(body, q, None, length=2)[0]

    q = jnp.ones((1, 2, 256, 128))
    with pltpu.force_tpu_interpret_mode():
        expected = _pallas(step, q)
        (site,) = recover.sites(_module(step, q))
    assert {(site.name, site.source)} == expected
    assert not site.once
