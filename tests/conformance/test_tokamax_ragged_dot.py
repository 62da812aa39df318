"""Tokamax's ragged dot (Pallas Mosaic TPU, run in TPU interpret mode on CPU) tuned
through jaxtune over Tokamax's own autotuning configs: the stored pick must be within 1.5x
of the truly fastest config, measured afterwards."""

from __future__ import annotations

import dataclasses
import time

import jax
import numpy as np
import pytest

from .support import PICK_WITHIN, entry_of, pick_vs_truth, require_tokamax_on_cpu

require_tokamax_on_cpu()

from . import tokamax_kernels as tk  # noqa: E402  (after the library check)

pytestmark = [pytest.mark.child, pytest.mark.slow]


def test_ragged_dot_pick_is_within_1_5x_of_the_truth(tpu_interpret, record_property):
    """A sweep with default settings (the child, default timing) over Tokamax's configs for
    these shapes, then every config timed side by side in this process (9 interleaved
    rounds; the pick's time over the fastest's, round by round, median).

    Also the port of tokamax/_src/autotuning/api_test.py::AutotuningTest::test_ragged_dot_autotuning
    (every config tried has a positive time or a recorded error), of
    tokamax/_src/ops/attention/pallas_mosaic_tpu_test.py::PallasMosaicTpuFlashAttentionTest::test_autotune_configs
    (every config of the op's space computes the right result: jaxtune's check against the
    default config's output passed for each) and of
    tokamax/_src/ops/ragged_dot/pallas_mosaic_tpu_test.py::PallasMosaicTpuRaggedDotTest::test_autotuning_configs
    (the op offers a non-empty space: here, it is what jaxtune sweeps)."""
    args = tk.ragged_args()
    space = tk.ragged_dot.space(*args)
    ours = tk.OP.bind(*args[:2], group_sizes=args[2]).autotuning_configs
    assert space == sorted(
        (dataclasses.asdict(c) for c in ours if c.input_buffer_count in tk.BUFFER_COUNTS),
        key=lambda c: tuple(c.values()),
    )
    assert len(space) >= 4

    start = time.perf_counter()
    entry = entry_of(tk.ragged_dot.tune(*args), tk.ragged_dot)
    sweep_s = time.perf_counter() - start
    for m in entry.measurements:
        assert m.ok and m.median_us > 0, m
    assert len(entry.measurements) == len(space)

    lhs, rhs, group_sizes = (np.asarray(a) for a in args)
    rows = np.repeat(np.arange(len(group_sizes)), group_sizes)
    expected = np.einsum("mk,mkn->mn", lhs, rhs[rows])
    np.testing.assert_allclose(jax.jit(tk.ragged_dot)(*args), expected, rtol=2e-3, atol=2e-3)

    truth = pick_vs_truth(tk.ragged_dot, args, entry, rounds=9, calls_per_round=1, warmup=2)
    record_property("sweep_s", round(sweep_s, 1))
    record_property("pick_vs_truth", round(truth.ratio, 3))
    print(
        f"\nragged_dot: sweep {sweep_s:.1f} s, pick {truth.ratio:.3f}x the truth; {entry.decision_text()}\n{truth.table()}"
    )
    assert truth.ratio <= PICK_WITHIN, truth.table()
