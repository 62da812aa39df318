"""Kernels nobody here wrote whose work depends on their integer inputs, tuned under
`jaxtune tune --` on the values the program ran (docs/values.md): JAX's megablox `gmm`
(TPU interpret mode) with skewed group sizes. The stored tiling must be within 1.5x
(``support.PICK_WITHIN``) of the fastest measured afterwards on the program's values, and
the entry must say the group sizes were recorded."""

from __future__ import annotations

import pathlib
import sys

import pytest

from . import value_gmm as vg
from .support import PICK_WITHIN, pick_vs_truth

pytestmark = [pytest.mark.child, pytest.mark.slow]

ROOT = pathlib.Path(__file__).resolve().parent.parent.parent


def test_gmm_is_tuned_on_the_group_sizes_the_program_ran(cli, tpu_interpret, record_property):
    proc = cli("tune", "--", sys.executable, "-m", "tests.conformance.value_gmm", timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "group_sizes: recorded (s32[4] 48..1200 sum 2048" in proc.stdout, proc.stdout
    from jaxtune._tuning.lookup import device_kind
    from jaxtune._tuning.store import cache as _cache

    (entry,) = _cache.user_cache().entries_for(vg.gmm.kernel_id, device_kind())
    assert entry.values.arguments["group_sizes"].source == "recorded"
    truth = pick_vs_truth(vg.gmm, vg.inputs(), entry, rounds=5, calls_per_round=1, warmup=2)
    record_property("pick_vs_truth", round(truth.ratio, 3))
    medians = truth.medians
    assert max(medians.values()) >= 1.5 * min(medians.values()), truth.table()
    assert truth.ratio <= PICK_WITHIN, truth.table()
