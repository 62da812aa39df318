"""pallas-forge's fused SwiGLU tuned through jaxtune over pallas-forge's own grid: the
stored pick must be within 1.5x of the truly fastest config, measured afterwards."""

from __future__ import annotations

import time

import jax
import numpy as np
import pytest

from .support import PICK_WITHIN, entry_of, pick_vs_truth, require

require("pallas_forge", why="the real-library test tunes its fused_swiglu kernel")

from . import forge_kernels as fk  # noqa: E402  (after the library check)

pytestmark = [pytest.mark.child, pytest.mark.slow]


def test_fused_swiglu_pick_is_within_1_5x_of_the_truth(record_property):
    """A sweep with default settings (the child, default timing) over pallas-forge's 3x3
    grid; then every config is timed side by side in this process (30 interleaved rounds;
    the pick's time over the fastest's, round by round, median). Every config computes the
    same SwiGLU (jaxtune's check passed for each)."""
    args = fk.swiglu_args()
    start = time.perf_counter()
    entry = entry_of(fk.swiglu.tune(*args), fk.swiglu)
    sweep_s = time.perf_counter() - start
    space = fk.swiglu.space(*args)
    assert len(space) == 9
    assert [m for m in entry.measurements if not m.ok] == []
    assert {str(dict(m.config)) for m in entry.measurements} >= {str(c) for c in space}

    x, w_gate, w_up = args
    expected = jax.nn.silu(x @ w_gate) * (x @ w_up)
    np.testing.assert_allclose(jax.jit(fk.swiglu)(*args), expected, rtol=2e-3, atol=2e-3)

    truth = pick_vs_truth(fk.swiglu, args, entry)
    record_property("sweep_s", round(sweep_s, 1))
    record_property("pick_vs_truth", round(truth.ratio, 3))
    print(
        f"\nfused_swiglu: sweep {sweep_s:.1f} s, pick {truth.ratio:.3f}x the truth; {entry.decision_text()}\n{truth.table()}"
    )
    assert truth.ratio <= PICK_WITHIN, truth.table()
