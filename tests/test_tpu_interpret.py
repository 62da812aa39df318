"""Real TPU Pallas kernels (JAX's own flash attention) tuned on CPU in TPU interpret mode.

Configs compile in parallel threads; the caller's thread-local interpret-mode switch must
reach them, and the process-wide interpret-mode state must survive parallel compilation.
"""

from __future__ import annotations

import dataclasses

import jax
import numpy as np
import pytest
from jax.experimental.pallas import tpu as pltpu
from jax.experimental.pallas.ops.tpu import flash_attention as fa

import jaxtune
from jaxtune._isolation import context as _context
from jaxtune._tuning.sweep import samples as _samples


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


@jaxtune.autotuned(
    configs={"block_q": [64, 128, 256], "block_k": [128, 256]},
    name="tests.flash_attention_profiler",
    timer="profiler",
)
def attention_by_device_time(q, k, v, *, block_q, block_k):
    return attention.__wrapped__(q, k, v, block_q=block_q, block_k=block_k)


@pytest.mark.child
@pytest.mark.slow
def test_flash_attention_with_the_profiler_timer_has_a_first_pass_of_shared_captures(
    fast_timing, monkeypatch
):
    """Six configs (a first pass) timed by the profiler timer: each visit is one trace of
    every config's calls, and each interpret-mode call (many executions and host callbacks
    inside) is told from the others' by its module; every config is measured, and the
    stored config computes attention."""
    # Interpret-mode calls take over rounds_above_s: the whole space would race at once.
    monkeypatch.setattr(_samples, "DEFAULT", dataclasses.replace(fast_timing, rounds_above_s=1e9))
    q = jax.random.normal(jax.random.key(0), (1, 2, 256, 64))
    with pltpu.force_tpu_interpret_mode():
        (entry,) = attention_by_device_time.tune(q, q, q).values()
        out = jax.jit(attention_by_device_time)(q, q, q)
    assert entry.timer == "profiler" and "first_pass" in entry.phases
    assert all(m.ok for m in entry.measurements) and len(entry.measurements) == 6
    # At least the first visit's samples each (3 under fast_timing), device times read.
    assert all(m.samples >= 3 and m.min_us > 0 for m in entry.measurements)
    t = q.transpose(0, 2, 1, 3)
    reference = jax.nn.dot_product_attention(t, t, t, scale=1.0).transpose(0, 2, 1, 3)
    np.testing.assert_allclose(out, reference, rtol=2e-3, atol=2e-3)


def test_thread_local_config_reaches_worker_threads():
    import threading

    from jax._src import config as jax_config

    state = jax_config.pallas_tpu_interpret_mode_context_manager
    seen = []
    with pltpu.force_tpu_interpret_mode():
        apply = _context.snapshot_local()

        def worker():
            with apply():
                seen.append(state.value)
            seen.append(state.value)

        t = threading.Thread(target=worker)
        t.start()
        t.join()
    assert seen[0] is not None  # interpret params visible inside
    assert seen[1] is None  # and restored after
