"""Profiling JAX's bundled Pallas TPU kernels on CPU in interpret mode, in the default
(child) isolation: one row per kernel, named after it, called once per iteration."""

from __future__ import annotations

import pytest
from jax.experimental.pallas import tpu as pltpu

import jaxtune
from jaxtune._isolation import runner as _runner

from .kernels import STEPS

pytestmark = pytest.mark.slow

ITERS = 2


@pytest.mark.parametrize("name", sorted(STEPS))
def test_profile_rows_are_named_after_the_kernel_and_count_iterations(name, tmp_path):
    step, make_args = STEPS[name]
    args = make_args()
    assert isinstance(_runner.default_runner(), _runner.ProcessRunner)
    with pltpu.force_tpu_interpret_mode():
        expected = {s.name for s in jaxtune.locate(step, *args) if s.kind == "pallas"}
        p = jaxtune.profile(step, *args, iters=ITERS, warmup=2, logdir=str(tmp_path))
    assert len(expected) == 1, expected
    rows = {k.name: k for k in p.kernels}
    assert set(rows) == expected, p.table()
    (row,) = rows.values()
    assert row.kind == "pallas"
    assert row.calls == ITERS and row.calls_exact
    assert row.share > 0
    assert not [o for o in p.ops if "io_callback" in o.name], p.table()
    assert row.name in p.table()


# -- issue 23: one row per kernel, FLOPs once, whatever the tiling --------------------------

SPANNING = {"real.flash_attention", "real.matmul_whole"}


def _rows(profile):
    return {(k.kernel_id, k.name): k for k in profile.kernels}


def _one_row_each(profile, iters):
    rows = _rows(profile)
    assert {i for i, _ in rows} == SPANNING, profile.table()
    assert len(rows) == 2, profile.table()
    for row in rows.values():
        assert row.kind == "pallas" and row.calls == iters, profile.table()
    # Only flash attention has FLOPs (its cost estimate); no other row carries them again.
    flash = next(r for r in rows.values() if r.kernel_id == "real.flash_attention")
    total = sum(r.flops or 0.0 for r in (*profile.kernels, *profile.ops))
    if flash.flops:
        assert total == flash.flops, profile.table()
    return rows


def test_spanning_tiles_give_one_row_per_kernel_in_profile_and_from_trace(tmp_path):
    from .kernels import spanning_args, spanning_step

    args = spanning_args()
    with pltpu.force_tpu_interpret_mode():
        p = jaxtune.profile(spanning_step, *args, iters=ITERS, warmup=1, logdir=str(tmp_path))
    rows = _one_row_each(p, ITERS)
    flash = next(r for r in rows.values() if r.kernel_id == "real.flash_attention")
    assert flash.flops_source == "cost_estimate" and flash.flops
    again = jaxtune.Profile.from_trace(p.logdir)
    assert _rows(again).keys() == rows.keys()
    for key, row in _rows(again).items():
        assert (row.calls, row.total_us, row.flops) == (
            rows[key].calls,
            rows[key].total_us,
            rows[key].flops,
        )
    page = p.to_html()
    for kernel_id, name in rows:
        assert f"{kernel_id}:{name}" in page


def test_spanning_tiles_give_one_row_per_kernel_in_a_plain_jax_profiler_trace(tmp_path):
    import jax

    from .kernels import spanning_args, spanning_step

    args = spanning_args()
    step = jax.jit(spanning_step)
    with pltpu.force_tpu_interpret_mode():
        jax.block_until_ready(step(*args))
        with jax.profiler.trace(str(tmp_path)):
            for _ in range(ITERS):
                jax.block_until_ready(step(*args))
    _one_row_each(jaxtune.Profile.from_trace(tmp_path), ITERS)
