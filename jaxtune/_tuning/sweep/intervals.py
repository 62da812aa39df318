"""Both sides. The confidence intervals the sweep's decision rule uses (:mod:`.stats`): the
distribution-free interval of the median of per-round time ratios, from the order statistics
(the sign test's interval), at the two levels the rule tests.

Kept apart from :mod:`.stats` (which imports JAX through the timing options) so that the
cache commands can show, without starting JAX, the interval a stored decision used.
"""

from __future__ import annotations

import functools
import math
import statistics
from collections.abc import Sequence

__all__ = ["LEVEL", "SLOWER_LEVEL", "envelope", "rank", "ratio_interval"]

#: Coverage of the ratio's confidence interval that shows two configs equivalent.
LEVEL = 0.95
#: Coverage of the interval that shows a config slower: it leaves the rounds for good,
#: and the rounds look again after every round, so this test is the stricter one.
SLOWER_LEVEL = 0.99


def envelope(times: Sequence[float]) -> float:
    """A config's lower envelope in the rounds: its second fastest round (its only one,
    with one). Other work on the machine only adds time, but one round alone can be quick
    by chance."""
    return sorted(times)[min(1, len(times) - 1)]


@functools.cache
def rank(n: int, level: float = LEVEL) -> int:
    """The 1-based rank ``k`` whose order statistics ``(k, n + 1 - k)`` of ``n`` values
    bound their median with at least ``level`` coverage (0: ``n`` is too small): the
    largest ``k`` with ``P(X < k) <= (1 - level) / 2`` for ``X ~ Binomial(n, 1/2)``, the
    count of values below the median (exact, in integers)."""
    tail = (1 - level) / 2 * 2**n  # in counts of the 2**n equally likely sign patterns
    k, below = 0, 0  # below: the patterns with fewer than k + 1 values below the median
    while k < n and below + math.comb(n, k) <= tail:
        below += math.comb(n, k)
        k += 1
    return k


def ratio_interval(
    times: Sequence[float], reference: Sequence[float], level: float = LEVEL
) -> tuple[float, float | None, float | None]:
    """``(median, low, high)`` of the per-round ratios ``times[i] / reference[i]`` over the
    rounds both ran, with the median's distribution-free interval of coverage ``level``
    (``None`` bounds with too few rounds for one: 6 at 95 %, 8 at 99 %)."""
    ratios = sorted(a / b for a, b in zip(times, reference, strict=False) if a > 0 < b)
    if not ratios:
        return 1.0, None, None
    k = rank(len(ratios), level)
    if k == 0:
        return statistics.median(ratios), None, None
    return statistics.median(ratios), ratios[k - 1], ratios[len(ratios) - k]
