"""The bundled example kernels are correct for every config and tune.

Covers docs/examples.md, "A pure-JAX tunable: jaxtune.examples.chunked" and "A Pallas
kernel: jaxtune.examples.pallas_matmul".
"""

from __future__ import annotations

import jax
import numpy as np
import pytest

from jaxtune.examples.chunked import chunked_logsumexp, reference_logsumexp
from jaxtune.examples.pallas_matmul import matmul


def test_chunked_logsumexp_matches_reference_for_every_chunk():
    x = jax.random.normal(jax.random.key(0), (4, 8192))
    ref = reference_logsumexp(x)
    for config in chunked_logsumexp.space(x):
        np.testing.assert_allclose(chunked_logsumexp(x, **config), ref, rtol=1e-5)


@pytest.mark.child
def test_pallas_matmul_interpret_mode_is_correct_and_tunes(fast_timing):
    a = jax.random.normal(jax.random.key(1), (64, 64))
    b = jax.random.normal(jax.random.key(2), (64, 64))
    np.testing.assert_allclose(matmul(a, b), a @ b, rtol=1e-4, atol=1e-4)
    assert len(matmul.space(a, b)) == 8  # 32 and 64 fit every dimension
    (entry,) = matmul.tune(a, b).values()
    assert all(m.ok for m in entry.measurements)
    np.testing.assert_allclose(jax.jit(matmul)(a, b), a @ b, rtol=1e-4, atol=1e-4)


@pytest.mark.child
def test_chunked_tunable_records_every_config_and_the_default(fast_timing):
    # How much faster the best chunk is belongs in bench/, not in a test.
    x = jax.random.normal(jax.random.key(0), (2, 8192))
    (entry,) = chunked_logsumexp.tune(x).values()
    space = [dict(c) for c in chunked_logsumexp.space(x)]
    assert [dict(m.config) for m in entry.measurements if m.ok] != []
    assert {str(sorted(m.config.items())) for m in entry.measurements} == {
        str(sorted(c.items())) for c in space
    }
    assert dict(entry.config) in space
    assert entry.default_time_us is not None and entry.time_us is not None


@pytest.mark.parametrize(
    ("shape", "default", "legal"),
    [
        # 64 spans the whole 64-wide array: Mosaic takes it; 32 and 128 do not fit it.
        ((64, 64, 64), (64, 64, 64), {(64, 64, 64)}),
        ((256, 128, 64), (128, 128, 64), {(128, 128, 64), (256, 128, 64)}),
    ],
)
def test_pallas_matmul_keeps_mosaics_tiling_rule_on_tpu(monkeypatch, shape, default, legal):
    """On TPU a block edge is at least 128 or spans its dimension (Mosaic's (8, 128) rule),
    so the small shapes the docs use keep a config there, and the default is one of them."""
    from jaxtune.examples import pallas_matmul

    monkeypatch.setattr(pallas_matmul, "_on_tpu", lambda: True)
    m, n, k = shape
    x = jax.ShapeDtypeStruct((m, k), np.float32)
    y = jax.ShapeDtypeStruct((k, n), np.float32)
    edges = pallas_matmul.BLOCKS
    kept = {
        (bm, bn, bk)
        for bm in edges
        for bn in edges
        for bk in edges
        if pallas_matmul._fits({"block_m": bm, "block_n": bn, "block_k": bk}, x, y)
    }
    assert kept == legal
    got = pallas_matmul._default(x, y)
    assert (got["block_m"], got["block_n"], got["block_k"]) == default
