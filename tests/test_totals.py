"""The array walk of a TPU op line (:func:`walk_columns`) gives what the event-by-event walk
(:func:`walk_items`) gives: each owner's time, events, calls (runs of one kernel's
consecutive events; every XLA op event a call of its own), shortest and longest call, and
the timeline's spans."""

from __future__ import annotations

import random

import numpy as np
import pytest

from jaxtune._profiling.totals import Accumulator, OpKind, walk_columns, walk_items
from jaxtune._program.markers import Owner

#: metadata id -> (op, owner); ids 0-2 belong to two kernels, 3-5 are XLA ops, 6 no op.
OWNERS = {
    0: Owner(kind="pallas", names=("attn",)),
    1: Owner(kind="pallas", names=("attn",)),
    2: Owner(kind="pallas", names=("mm",)),
    3: Owner(kind="xla", names=("fusion.3",)),
    4: Owner(kind="xla", names=("fusion.4",)),
    5: Owner(kind="xla", names=("fusion.3",)),
}


def _kind(key: int) -> OpKind | None:
    mid = key & 0xFF  # ids far from 0 (2**40 + i) name the same ops
    if mid not in OWNERS:
        return None
    return OpKind(
        op=f"op.{mid}",
        module="jit_step",
        name_stack="jit(step)/x",
        target="tpu_custom_call" if mid < 3 else None,
        flops=1e3 * (mid + 1),
        bytes_accessed=10.0 * mid,
        program=1,
    )


def _accumulator() -> Accumulator:
    return Accumulator(_kind, lambda kind: OWNERS[int(kind.op.split(".")[1]) & 0xFF])


def _line(seed: int, n: int, base: int = 0) -> np.ndarray:
    rng = random.Random(seed)
    rows, t = [], 0
    for _ in range(n):
        t += rng.choice([0, 0, 1, 7])  # back to back, or a gap
        d = rng.choice([0, 1, 5, 1000, 12345])
        # Kernels come in runs of consecutive events, as a tiled kernel's do.
        rows.append((t, d, base + rng.choice([0, 0, 1, 1, 2, 3, 4, 5, 6])))
        t += d
    return np.array(rows, dtype=np.int64).reshape(-1, 3)


@pytest.mark.parametrize(
    ("seed", "n", "base"), [(0, 1, 0), (1, 2, 0), (2, 50, 0), (3, 5000, 0), (4, 5000, 1 << 40)]
)
def test_array_walk_equals_the_event_walk(seed, n, base):
    cols = _line(seed, n, base)
    by_array, by_event = _accumulator(), _accumulator()
    assert walk_columns(cols, by_array)
    assert walk_items([(s, d, m, None) for s, d, m in cols.tolist()], by_event)
    got, want = by_array.totals(), by_event.totals()
    assert set(got) == set(want) and want
    for owner, t in want.items():
        g = got[owner]
        assert (g.total_ps, g.events, g.runs, g.run_min, g.run_max) == (
            t.total_ps,
            t.events,
            t.runs,
            t.run_min,
            t.run_max,
        ), owner
        assert g.flops == pytest.approx(t.flops) and g.bytes_accessed == pytest.approx(
            t.bytes_accessed
        )
    assert [(s, e, by_array.owners[o], n) for s, e, o, n in by_array.span_table().tolist()] == [
        (s, e, by_event.owners[o], n) for s, e, o, n in by_event.span_table().tolist()
    ]


def test_a_nested_or_unordered_line_is_left_to_the_event_walk():
    nested = np.array([[0, 10, 0], [2, 3, 3]], dtype=np.int64)
    unordered = np.array([[5, 1, 0], [0, 1, 3]], dtype=np.int64)
    for cols in (nested, unordered):
        acc = _accumulator()
        assert not walk_columns(cols, acc)
        assert all(t.events == 0 and t.total_ps == 0 for t in acc.totals().values())
