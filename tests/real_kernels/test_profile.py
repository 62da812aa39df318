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
