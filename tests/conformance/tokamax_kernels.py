"""Tokamax's ragged dot (its Pallas Mosaic TPU kernel, `PallasMosaicTpuRaggedDot`) as a
jaxtune kernel whose space is Tokamax's own autotuning configs.

It runs on CPU in TPU interpret mode. Two things make that possible, both set here, at
import, so that the sweep child (which imports this module to find the kernel) has them
too: the op is built with ``bypass_device_check=True`` (else it refuses a CPU device), and
JAX's TPU-info registry gets an entry for the CPU device kind (Tokamax's heuristics and its
gmm ask ``pltpu.get_tpu_info()``, which knows no CPU): a TPU v5e's figures.
"""

from __future__ import annotations

import dataclasses
import importlib

import jax
import jax.numpy as jnp
import numpy as np
from tokamax._src.ops.ragged_dot import pallas_mosaic_tpu

import jaxtune


def _tpu_info():
    # JAX 0.12 keeps the registry in jax._src.tpu_info, JAX 0.10 in the Mosaic package.
    for name in ("jax._src.tpu_info", "jax._src.pallas.mosaic.tpu_info"):
        try:
            return importlib.import_module(name)
        except ImportError:
            continue
    raise ImportError("no TPU-info registry found in this JAX")


def _cpu_as_tpu_v5e() -> None:
    info = _tpu_info()
    v5e = info.ChipVersion.TPU_V5E
    info.registry.setdefault("cpu", lambda: info.get_tpu_info_for_chip(v5e, 1))


_cpu_as_tpu_v5e()

OP = pallas_mosaic_tpu.PallasMosaicTpuRaggedDot(bypass_device_check=True)

#: Shapes small enough for interpret mode (every dimension Tokamax's kernel tiles must be
#: at least 128): lhs [m, k], rhs [groups, k, n], two groups of 128 rows.
M, K, N, GROUPS = 256, 128, 256, 2

#: The subset of Tokamax's space swept, to keep the sweep well under a minute in
#: interpret mode: its input buffer counts (2, 3, 4) are cut to the default 2.
BUFFER_COUNTS = (2,)


def _bound(lhs, rhs, group_sizes):
    return OP.bind(lhs, rhs, group_sizes=group_sizes)


def tokamax_configs(lhs, rhs, group_sizes) -> list[dict]:
    """Tokamax's own candidates for these shapes (its autotuning configs and its
    heuristics config: `BoundArguments.autotuning_configs`), in a fixed order, restricted
    to ``BUFFER_COUNTS``."""
    configs = _bound(lhs, rhs, group_sizes).autotuning_configs
    kept = [dataclasses.asdict(c) for c in configs if c.input_buffer_count in BUFFER_COUNTS]
    return sorted(kept, key=lambda c: tuple(c.values()))


def tokamax_heuristics(lhs, rhs, group_sizes) -> dict:
    """Tokamax's heuristics config for these shapes."""
    return dataclasses.asdict(_bound(lhs, rhs, group_sizes).heuristics_config)


def ragged_inputs(lhs, rhs, group_sizes):
    """Concrete inputs: the group sizes must sum to the rows of ``lhs``."""
    rng = np.random.default_rng(0)
    groups = group_sizes.shape[0]
    return (
        jnp.asarray(rng.standard_normal(lhs.shape), lhs.dtype),
        jnp.asarray(rng.standard_normal(rhs.shape), rhs.dtype),
        jnp.full((groups,), lhs.shape[0] // groups, group_sizes.dtype),
    )


@jaxtune.autotuned(
    configs=tokamax_configs,
    default=tokamax_heuristics,
    inputs=ragged_inputs,
    name="conformance.tokamax.ragged_dot",
)
def ragged_dot(
    lhs, rhs, group_sizes, *, tile_m, tile_k, tile_n, input_buffer_count, combine_scopes
):
    """`lhs[m, k] @ rhs[group, k, n]` per group of rows, by Tokamax's TPU kernel."""
    config = pallas_mosaic_tpu.Config(
        tile_m=tile_m,
        tile_k=tile_k,
        tile_n=tile_n,
        input_buffer_count=input_buffer_count,
        combine_scopes=combine_scopes,
    )
    return OP.replace(config=config)(lhs, rhs, group_sizes=group_sizes)


def ragged_args():
    return ragged_inputs(
        jax.ShapeDtypeStruct((M, K), jnp.float32),
        jax.ShapeDtypeStruct((GROUPS, K, N), jnp.float32),
        jax.ShapeDtypeStruct((GROUPS,), jnp.int32),
    )


# -- flash attention -----------------------------------------------------------------------

#: q, k, v of Tokamax's flash attention here: [batch, sequence, heads, head_dim].
FLASH_SHAPE = (1, 512, 2, 128)


def _flash_op():
    from tokamax._src.ops.attention import pallas_mosaic_tpu as fa

    return fa


def flash_configs(q, k, v) -> list[dict]:
    """Tokamax's own candidates for these shapes with the head-dim-minor layouts it
    defaults to (its space also crosses three layouts, 96 configs at sequence 512): each
    of its query and key/value tiles up to the sequence length (a key/value tile computed
    whole), with and without its experimental scheduler."""
    tiles = [t for t in (256, 512, 1024, 2048) if t <= q.shape[1]]
    return [
        {"block_q": bq, "block_kv": bkv, "block_kv_compute": bkv, "experimental_scheduler": s}
        for bq in tiles
        for bkv in tiles
        for s in (True, False)
    ]


def flash_heuristics(q, k, v) -> dict:
    """Tokamax's heuristics config (128 tiles, its experimental scheduler): outside its
    own autotuning space, as jaxtune's default it races too."""
    h = _flash_op().PallasMosaicTpuFlashAttention(bypass_device_check=True)
    c = h._get_heuristics_config(None)
    return {
        "block_q": c.block_q,
        "block_kv": c.block_kv,
        "block_kv_compute": c.block_kv_compute,
        "experimental_scheduler": c.use_experimental_scheduler,
    }


def flash_config(block_q, block_kv, block_kv_compute, experimental_scheduler):
    """Tokamax's `Config` for a jaxtune config (the layouts its heuristics use)."""
    from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_kernel as sp

    minor = sp.QKVLayout.HEAD_DIM_MINOR
    return _flash_op().Config(
        block_q=block_q,
        block_kv=block_kv,
        block_kv_compute=block_kv_compute,
        q_layout=minor,
        k_layout=minor,
        v_layout=minor,
        use_experimental_scheduler=experimental_scheduler,
    )


FLASH_OP = _flash_op().PallasMosaicTpuFlashAttention(bypass_device_check=True)


@jaxtune.autotuned(
    configs=flash_configs,
    default=flash_heuristics,
    name="conformance.tokamax.flash_attention",
)
def flash_attention(q, k, v, *, block_q, block_kv, block_kv_compute, experimental_scheduler):
    """Causal attention by Tokamax's TPU flash attention kernel."""
    config = flash_config(block_q, block_kv, block_kv_compute, experimental_scheduler)
    return FLASH_OP.replace(config=config)(q, k, v, is_causal=True)


def flash_args():
    q = jnp.asarray(np.random.default_rng(0).standard_normal(FLASH_SHAPE), jnp.float32)
    return q, q, q
