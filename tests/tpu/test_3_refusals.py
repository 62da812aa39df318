"""On the chip: no config the sweep's refusal filter refuses (``_tuning/sweep/refusals.py``)
compiles, over JAX's megablox grouped matmul tilings (the (8, 128) rule) and tiles past the
default scoped VMEM and past the chip's VMEM; the configs Mosaic refuses that the filter let
through are printed (what a less conservative rule could still catch). The DMA slice rule,
over a sample of Tokamax's ragged dot configs at lhs bf16[8192, 2048]: each config it
refuses fails to compile for the rule's reason, and none that fails for that reason gets
past it; a sampled config the scoped VMEM rule refuses fails on scoped VMEM."""

from __future__ import annotations

import functools
import itertools
import time

import jax
import jax.numpy as jnp
import ragged_dot_space
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
        start = time.perf_counter()
        why = check(jax.jit(f).trace(*args).jaxpr)
        try:
            jax.jit(f).lower(*args).compile()
            compiles = True
        except Exception:
            compiles = False
        took = time.perf_counter() - start
        print(f"{name}: refused {why is not None}, compiles {compiles} ({took:.1f} s)", flush=True)
        if why is not None:
            assert not compiles, f"{name} was refused ({why}) but compiles"
            refused.append(name)
        elif not compiles:
            missed.append(name)
    print(f"refused before compiling: {refused}; refused by Mosaic only: {missed}")
    assert "gmm_past_vmem" in refused
    assert "gmm_scoped" in refused  # 48 MiB of blocks, past the v5e's 16 MiB scoped VMEM
    assert any(name.startswith("gmm(") for name in refused)


#: Mosaic's words for a DMA slice off the tiles (what the DMA slice rule foresees).
TILE_SLICE = "Slice sizes along tiled dimensions must be aligned to tiles"


def _sample(configs, count):
    return configs[:: max(1, len(configs) // count)][:count]


def test_the_dma_slice_rule_refuses_exactly_the_tokamax_configs_mosaic_refuses_for_it(
    monkeypatch,
):
    check = checker()
    assert check is not None, "on a TPU the sweep checks configs before compiling"
    f, _, configs = ragged_dot_space.ragged_dot(monkeypatch)
    args = ragged_dot_space.ARGS
    narrow = [c for c in configs if 64 in (c["tile_k"], c["tile_n"])]
    wide = [c for c in configs if c not in narrow]
    refused, kept, missed, other, scoped = [], [], [], [], []
    for config in _sample(narrow, 10) + _sample(wide, 14):
        g = functools.partial(f, config=config)
        start = time.perf_counter()
        why = check(jax.jit(g).trace(*args).jaxpr)
        try:
            jax.jit(g).lower(*args).compile()
            error = ""
        except Exception as e:
            error = str(e)
        took = time.perf_counter() - start
        print(
            f"{config}: refused {why is not None}, compiles {not error} ({took:.1f} s)", flush=True
        )
        if why is not None:
            assert error, f"{config} was refused ({why}) but compiles"
            if "VMEM" in why:  # the scoped VMEM rule: Mosaic runs out of it compiling
                assert "ScopedVmemOom" in error, (config, error)
                scoped.append(config)
                continue
            assert "along its last dimension" in why and TILE_SLICE in error, (config, error)
            refused.append(config)
        elif TILE_SLICE in error:
            missed.append(config)
        elif error:
            other.append((config, error.splitlines()[0][:160]))
        else:
            kept.append(config)
    print(
        f"refused: {len(refused)} for DMA slices, {len(scoped)} for scoped VMEM; compiled: "
        f"{len(kept)}; refused by Mosaic otherwise: {other}"
    )
    assert not missed, f"Mosaic refused these for their DMA slices, the filter did not: {missed}"
    assert len(refused) == len(_sample(narrow, 10)) and kept
