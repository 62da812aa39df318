"""Kernels whose work depends on the values of their integer and boolean inputs, for
tests/test_values.py and bench/bench_values.py.

Each walks rows of ``x`` in a loop of ``chunk`` rows a step; how many rows it walks is a
value: a loop count, per-sequence lengths, group sizes, the number of valid ids, a
padding mask. Every step ends in a ``[d] @ [d, d]`` product, so a step costs about the
same whatever its chunk: on a few rows ``chunk=8`` is fastest, on thousands ``chunk=512``
(``2048`` for the ids and the mask; about 3x either way on CPU). The result does not depend on the chunk (up to rounding).
Made-up values (integers in 0..16, booleans half true) pick the wrong chunk for each.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

import jaxtune

CHUNKS = {"chunk": [8, 512]}
#: The few-rows kernels' larger chunk walks 2048 rows: their calls of tens of microseconds
#: stay 3x apart under load (512 rows made 1.4x of a loaded machine's dispatch noise).
FEW_CHUNKS = {"chunk": [8, 2048]}
DEFAULT = {"chunk": 8}


def rows_sum(x, w, start, count, chunk, acc=None, ids=None):
    """``acc + (sum of tanh(x) over rows [start, start + count)) @ w``, ``chunk`` rows a
    step (``acc``: a previous loop's result, so that loops run one after the other;
    ``ids``: the rows are ``x[ids[start:start + count]]``, gathered a step at a time)."""
    m = x.shape[0] if ids is None else ids.shape[0]

    def body(i, acc):
        lo = start + i * chunk
        s = jnp.clip(lo, 0, m - chunk)
        rows = s + jnp.arange(chunk)
        keep = (rows >= lo) & (rows < start + count)
        if ids is None:
            block = lax.dynamic_slice_in_dim(x, s, chunk)
        else:
            block = x[jnp.clip(lax.dynamic_slice_in_dim(ids, s, chunk), 0, x.shape[0] - 1)]
        return acc + jnp.where(keep[:, None], jnp.tanh(block), 0).sum(0) @ w

    steps = (count + chunk - 1) // chunk
    start_acc = jnp.zeros(w.shape[1], x.dtype) if acc is None else acc
    return lax.fori_loop(0, steps, body, start_acc)


@jaxtune.autotuned(configs=CHUNKS, default=DEFAULT)
def loop_count(x, w, n, *, chunk):
    """The first ``n`` rows: a loop whose trip count is a value."""
    return rows_sum(x, w, 0, n, chunk)


@jaxtune.autotuned(configs=CHUNKS, default=DEFAULT)
def by_lengths(x, w, lengths, *, chunk):
    """Per sequence ``b`` of ``x[b]``, its first ``lengths[b]`` rows (decode lengths)."""
    acc = None
    for b in range(x.shape[0]):
        acc = rows_sum(x[b], w, 0, lengths[b], chunk, acc)
    return acc


@jaxtune.autotuned(configs=CHUNKS, default=DEFAULT)
def by_groups(x, ws, group_sizes, *, chunk):
    """Rows in consecutive groups, group ``g`` times ``ws[g]`` (a grouped matmul's work)."""
    ends = jnp.cumsum(group_sizes)
    starts = ends - group_sizes
    acc = None
    for g in range(ws.shape[0]):
        acc = rows_sum(x, ws[g], starts[g], group_sizes[g], chunk, acc)
    return acc


@jaxtune.autotuned(configs=FEW_CHUNKS, default=DEFAULT)
def by_ids(x, w, ids, *, chunk):
    """The rows ``ids`` names, up to the first padding id (-1)."""
    count = jnp.argmin(jnp.concatenate([ids, jnp.full((1,), -1, ids.dtype)]) >= 0)
    return rows_sum(x, w, 0, count, chunk, ids=ids)


@jaxtune.autotuned(configs=FEW_CHUNKS, default=DEFAULT)
def by_mask(x, w, mask, *, chunk):
    """The rows a padding mask keeps (its true entries lead)."""
    return rows_sum(x, w, 0, mask.sum(), chunk)


@jaxtune.autotuned(configs={"clip": [False, True]}, default={"clip": True})
def table_rows(table, ids, *, clip):
    """Rows of ``table`` by ``ids``: ids past the table read infinity unless clipped, so
    only valid ids give every config the same output."""
    safe = jnp.clip(ids, 0, table.shape[0] - 1) if clip else ids
    return jnp.take(table, safe, axis=0, mode="fill", fill_value=jnp.inf)


def arrays(seed: int = 0, m: int = 8192, d: int = 256, groups: int = 4, batch: int = 2):
    """Float inputs the kernels share: x [m, d], w [d, d], per-group ws, and xb [batch, m, d]."""
    k = jax.random.split(jax.random.key(seed), 4)
    x = jax.random.normal(k[0], (m, d), jnp.float32)
    w = jax.random.normal(k[1], (d, d), jnp.float32) / d
    ws = jax.random.normal(k[2], (groups, d, d), jnp.float32) / d
    xb = jax.random.normal(k[3], (batch, m // 2, d), jnp.float32)
    return x, w, ws, xb


def program_values(m: int = 8192):
    """Values a program might run: thousands of rows for the count, lengths and groups
    (skewed, summing to ``m``), a dozen valid ids and mask entries."""
    ids = jnp.full((m // 4,), -1, jnp.int32).at[:12].set(jnp.arange(12) * 7)
    mask = jnp.zeros((m,), bool).at[:12].set(True)
    return {
        "n": jnp.int32(3 * m // 8),
        "lengths": jnp.array([3 * m // 8, m // 4], jnp.int32),
        "group_sizes": jnp.array([m // 2, m // 4, m // 8, m // 8], jnp.int32),
        "ids": ids,
        "mask": mask,
    }


def step(x, w, ws, xb, n, lengths, group_sizes, ids, mask):
    """A step that calls each kernel once."""
    return (
        loop_count(x, w, n),
        by_lengths(xb, w, lengths),
        by_groups(x, ws, group_sizes),
        by_ids(x, w, ids),
        by_mask(x, w, mask),
    )


#: A program that runs :func:`step` on the program's values (``.format(tests=...)``: the
#: folder holding this module), for `jaxtune tune --`.
PROGRAM = """
import sys
sys.path.insert(0, {tests!r})
import jax
import value_kernels as vk

step = jax.jit(vk.step)
a = vk.arrays()
v = vk.program_values()
args = (*a, v["n"], v["lengths"], v["group_sizes"], v["ids"], v["mask"])
for _ in range(3):
    jax.block_until_ready(step(*args))
"""

#: Each kernel's value argument, and its operands from ``arrays()`` and that value.
CALLS = {
    "loop_count": ("n", lambda a, v: (a[0], a[1], v)),
    "by_lengths": ("lengths", lambda a, v: (a[3], a[1], v)),
    "by_groups": ("group_sizes", lambda a, v: (a[0], a[2], v)),
    "by_ids": ("ids", lambda a, v: (a[0], a[1], v)),
    "by_mask": ("mask", lambda a, v: (a[0], a[1], v)),
}


def rows_walked(name: str, value) -> int:
    """How many rows kernel ``name`` walks on ``value``: its work, whatever the chunk."""
    v = np.asarray(value)
    if name == "by_ids":  # the ids up to the first padding id
        return int(np.argmin(np.concatenate([v, [-1]]) >= 0))
    return int(v.sum())  # a count, lengths, group sizes, a mask's true entries


def right_chunk(name: str, values) -> int:
    """The chunk this module's design makes fastest for kernel ``name`` on ``values`` (a
    list: value sets run as a mix): the smallest on dozens of rows, the largest on
    thousands, about 3x apart either way (``bench/bench_values.py`` measures it). Raises
    where the rows walked are between the two, where the design names no winner."""
    sets = values if isinstance(values, list) else [values]
    rows = sum(rows_walked(name, v) for v in sets)
    chunks = (FEW_CHUNKS if name in ("by_ids", "by_mask") else CHUNKS)["chunk"]
    if rows >= 2048:
        return max(chunks)
    if rows <= 64:
        return min(chunks)
    raise ValueError(f"{name} walks {rows} rows: neither chunk wins by design")


def truth_us(name: str, values, *, rounds: int = 8, calls: int = 5) -> dict[int, float]:
    """Per chunk, the median wall time (us) of a call of kernel ``name`` on ``values`` (a
    list: each value's call in turn, as a mix), each call jitted on its own: rounds in
    which each chunk makes ``calls`` calls back to back, the chunks taking turns, so that
    the machine's load meets each alike; the first call of each turn (the caches as the
    other chunk left them) is left out, as a sweep's warm-up is."""
    import statistics
    import time

    a = arrays()
    kernel, operands = globals()[name], CALLS[name][1]
    sets = values if isinstance(values, list) else [values]
    ops = [operands(a, v) for v in sets]
    chunks = [config["chunk"] for config in kernel.space(*ops[0])]
    fns = {c: jax.jit(lambda *o, c=c: kernel(*o, chunk=c)) for c in chunks}
    times: dict[int, list[float]] = {c: [] for c in fns}
    for r in range(rounds + 1):
        for c, f in fns.items():
            for i in range(calls):
                t = time.perf_counter()
                for o in ops:
                    jax.block_until_ready(f(*o))
                if r and i:  # the first round compiles; a turn's first call is cold
                    times[c].append((time.perf_counter() - t) * 1e6)
    return {c: statistics.median(v) for c, v in times.items()}
