"""Helpers the conformance tests share: the measured truth a sweep's pick is judged
against, and the rule for optional third-party libraries."""

from __future__ import annotations

import dataclasses
import functools
import statistics
import time
from collections.abc import Callable, Mapping
from types import ModuleType
from typing import Any

import jax
import pytest

import jaxtune
from jaxtune._core.vocabulary import config_id

#: How far above the truly fastest config a stored pick may be (issue 30).
PICK_WITHIN = 1.10


def require(module: str, *, why: str) -> ModuleType:
    """Imports an optional third-party library, or skips the test with the reason: which
    library is missing, what it was for, and how to install it."""
    return pytest.importorskip(
        module,
        reason=(
            f"{module} is not installed: {why}. It comes with the `conformance` dependency "
            "group (`pip install --group conformance`), which `nox -s tests` tries to install."
        ),
    )


def entry_of(result: jaxtune.TuningResult, kernel: jaxtune.Autotuned[Any, Any]) -> jaxtune.Entry:
    """The one entry ``result`` holds for ``kernel``."""
    (entry,) = [e for (name, _, _), e in result.items() if name == kernel.kernel_id]
    return entry


def true_times(
    calls: Mapping[str, Callable[[], Any]],
    *,
    rounds: int = 9,
    calls_per_round: int = 3,
    warmup: int = 3,
) -> dict[str, float]:
    """Seconds per call of each function, measured side by side in this process.

    Every function is compiled and warmed up first (``warmup`` calls: an interpret-mode
    Pallas function may retrace on its second call). Then each of ``rounds`` rounds times
    ``calls_per_round`` back-to-back calls of every function, in an order that rotates from
    round to round, so load on the machine falls on all of them alike; a function's time is
    the median over rounds of its mean call time in the round.
    """
    names = list(calls)
    for name in names:
        for _ in range(warmup):
            jax.block_until_ready(calls[name]())
    per_round: dict[str, list[float]] = {name: [] for name in names}
    for r in range(rounds):
        shift = r % len(names)
        for name in names[shift:] + names[:shift]:
            fn = calls[name]
            start = time.perf_counter()
            for _ in range(calls_per_round):
                jax.block_until_ready(fn())
            per_round[name].append((time.perf_counter() - start) / calls_per_round)
    return {name: statistics.median(times) for name, times in per_round.items()}


@dataclasses.dataclass(frozen=True)
class PickVsTruth:
    """How a sweep's stored pick compares with the truth measured afterwards."""

    pick: str
    fastest: str
    seconds: dict[str, float]  # config id -> true seconds per call
    swept: dict[str, float]  # config id -> the sweep's median, seconds

    @property
    def ratio(self) -> float:
        """The pick's true time over the truly fastest config's (1.0: the pick is it)."""
        return self.seconds[self.pick] / self.seconds[self.fastest]

    def table(self) -> str:
        best = self.seconds[self.fastest]
        rows = sorted(self.seconds.items(), key=lambda kv: kv[1])
        lines = ["  truth            sweep's median   config (* the pick)"]
        for name, seconds in rows:
            swept = self.swept.get(name)
            sweep = f"{swept * 1e3:9.2f} ms" if swept is not None else " " * 12
            mark = "*" if name == self.pick else " "
            lines.append(f"{seconds * 1e3:9.2f} ms {seconds / best:5.2f}x  {sweep}   {mark} {name}")
        return "\n".join(lines)


def pick_vs_truth(
    kernel: jaxtune.Autotuned[Any, Any], args: tuple[Any, ...], entry: jaxtune.Entry, **timing: int
) -> PickVsTruth:
    """Measures every config of ``kernel``'s space (and its default) on ``args`` with
    :func:`true_times`, each as its own ``jax.jit`` of the undecorated kernel, and compares
    ``entry``'s stored config with the fastest."""
    configs = [*kernel.space(*args), dict(entry.default_config)]
    calls = {}
    for config in configs:
        fn = jax.jit(functools.partial(kernel.__wrapped__, **config))
        calls[config_id(config)] = functools.partial(fn, *args)
    seconds = true_times(calls, **timing)
    swept = {config_id(m.config): m.median_us / 1e6 for m in entry.measurements if m.ok}
    return PickVsTruth(
        pick=config_id(entry.config),
        fastest=min(seconds, key=seconds.__getitem__),
        seconds=seconds,
        swept=swept,
    )
