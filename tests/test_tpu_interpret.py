"""Real TPU Pallas kernels (JAX's own flash attention) tuned on CPU in TPU interpret mode.

Configs compile in parallel threads; the caller's thread-local interpret-mode switch must
reach them, and the process-wide interpret-mode state must survive parallel compilation.
"""

from __future__ import annotations

import jax
import numpy as np
import pytest
from jax.experimental.pallas import tpu as pltpu
from jax.experimental.pallas.ops.tpu import flash_attention as fa

import jaxtune
from jaxtune._isolation import context as _context


@jaxtune.autotuned(
    configs={"block_q": [128, 256], "block_k": [128, 256]},
    name="tests.flash_attention",
)
def attention(q, k, v, *, block_q, block_k):
    sizes = fa.BlockSizes(block_q=block_q, block_k_major=block_k, block_k=block_k, block_b=1)
    return fa.flash_attention(q, k, v, block_sizes=sizes)


@pytest.mark.child
@pytest.mark.slow
def test_flash_attention_block_sizes_tune_in_tpu_interpret_mode(fast_timing):
    q = jax.random.normal(jax.random.key(0), (1, 2, 256, 64))
    with pltpu.force_tpu_interpret_mode():
        (entry,) = attention.tune(q, q, q).values()
        out = jax.jit(attention)(q, q, q)
    failures = [m for m in entry.measurements if not m.ok]
    assert failures == [], failures
    assert len(entry.measurements) == 4
    t = q.transpose(0, 2, 1, 3)  # flash_attention is [batch, heads, seq, dim], unscaled
    reference = jax.nn.dot_product_attention(t, t, t, scale=1.0).transpose(0, 2, 1, 3)
    np.testing.assert_allclose(out, reference, rtol=2e-3, atol=2e-3)


def test_thread_local_config_reaches_worker_threads():
    import threading

    from jax._src import config as jax_config

    state = jax_config.pallas_tpu_interpret_mode_context_manager
    seen = []
    with pltpu.force_tpu_interpret_mode():
        apply = _context.capture()

        def worker():
            with apply():
                seen.append(state.value)
            seen.append(state.value)

        t = threading.Thread(target=worker)
        t.start()
        t.join()
    assert seen[0] is not None  # interpret params visible inside
    assert seen[1] is None  # and restored after
