"""On the chip: no config the sweep's refusal filter refuses (``_tuning/sweep/refusals.py``)
compiles, over JAX's megablox grouped matmul tilings (the (8, 128) rule) and tiles past the
chip's VMEM; the configs Mosaic refuses that the filter let through are printed (what a
less conservative rule could still catch)."""

from __future__ import annotations

import itertools

import jax
import jax.numpy as jnp
from jax.experimental.pallas.ops.tpu.megablox import gmm

from jaxtune._tuning.sweep.refusals import checker

F32 = jnp.float32


def _gmm_case(rows, k, n, groups, tiling):
    def f(lhs, rhs, sizes):
        return gmm(lhs, rhs, sizes, tiling=tiling)

    args = (
        jax.ShapeDtypeStruct((rows, k), F32),
        jax.ShapeDtypeStruct((groups, k, n), F32),
        jax.ShapeDtypeStruct((groups,), jnp.int32),
    )
    return f, args


CASES = [
    *(
        (f"gmm{t}", *_gmm_case(512, 256, 256, 4, t))
        for t in itertools.product((8, 64, 128), (64, 128, 256), (64, 128, 256))
    ),
    # Blocks of 16 MiB each: past the default scoped VMEM, within the v5e's 128 MiB.
    ("gmm_scoped", *_gmm_case(4096, 2048, 2048, 2, (2048, 2048, 2048))),
    # Blocks of 64 MiB each: past the chip's VMEM whatever the limit.
    ("gmm_past_vmem", *_gmm_case(4096, 4096, 4096, 1, (4096, 4096, 4096))),
]


def test_no_refused_config_compiles_on_the_chip():
    check = checker()
    assert check is not None, "on a TPU the sweep checks configs before compiling"
    refused, missed = [], []
    for name, f, args in CASES:
        why = check(jax.jit(f).trace(*args).jaxpr)
        try:
            jax.jit(f).lower(*args).compile()
            compiles = True
        except Exception:
            compiles = False
        if why is not None:
            assert not compiles, f"{name} was refused ({why}) but compiles"
            refused.append(name)
        elif not compiles:
            missed.append(name)
    print(f"refused before compiling: {refused}; refused by Mosaic only: {missed}")
    assert "gmm_past_vmem" in refused
    assert any(name.startswith("gmm(") for name in refused)
