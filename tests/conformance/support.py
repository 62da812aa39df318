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

import extras
import jax

import jaxtune
from jaxtune._core.vocabulary import config_id

#: How far above the truly fastest config a stored pick may be (docs/conformance.md, "Real
#: kernel libraries"): a pick must beat every config the truth shows 1.5x slower. The suite
#: runs beside other work: with two busy processes on the 2-core machine, pallas-forge's two
#: fastest configs (1.12x apart quiet) came 1.06-1.11x apart and swapped places in the truth
#: itself, and the Flax step's runner-up (1.56x quiet) came 0.91x paired over 7 rounds. A
#: closer figure is a benchmark's to measure (bench/), not a test's.
PICK_WITHIN = 1.5


def require(module: str, *, why: str) -> ModuleType:
    """Imports an optional third-party library, or skips the test with the reason: which
    library is missing, what it was for, and how to install it (an error instead with
    ``REQUIRE_TEST_EXTRAS=1``, as in CI: ``tests/extras.py``)."""
    return extras.require(
        module,
        reason=(
            f"{module} is not installed: {why}. It comes with the `conformance` dependency "
            "group (`pip install --group conformance`), which `nox -s tests` tries to install."
        ),
    )


def require_tokamax_on_cpu() -> None:
    """Skips the calling module unless Tokamax builds its TPU ops for a CPU device
    (``bypass_device_check``), which ``tokamax_kernels.py`` needs: 0.0.12, the newest that
    installs beside JAX 0.10, lacks it (and its ragged-dot space for the suite's shapes is
    27x larger: 108 configs with two input buffers where 0.0.17 has 4). The newest
    toolchain runs these tests."""
    import dataclasses as _dataclasses
    import importlib.metadata

    import pytest

    require("tokamax", why="the real-library tests run Tokamax's kernels")
    from tokamax._src.ops.ragged_dot import pallas_mosaic_tpu

    fields = {f.name for f in _dataclasses.fields(pallas_mosaic_tpu.PallasMosaicTpuRaggedDot)}
    if "bypass_device_check" not in fields:
        pytest.skip(
            f"tokamax {importlib.metadata.version('tokamax')} has no `bypass_device_check`, "
            "which tokamax_kernels.py builds its ops with",
            allow_module_level=True,
        )


def entry_of(result: jaxtune.TuningResult, kernel: jaxtune.Autotuned[Any, Any]) -> jaxtune.Entry:
    """The one entry ``result`` holds for ``kernel``."""
    (entry,) = [e for (name, _, _), e in result.items() if name == kernel.kernel_id]
    return entry


def true_times(
    calls: Mapping[str, Callable[[], Any]],
    *,
    rounds: int = 30,
    calls_per_round: int = 2,
    warmup: int = 3,
) -> dict[str, list[float]]:
    """Seconds per call of each function, round by round, measured side by side in this
    process.

    Every function is compiled and warmed up first (``warmup`` calls: an interpret-mode
    Pallas function may retrace on its second call). Then each of ``rounds`` rounds times
    ``calls_per_round`` back-to-back calls of every function, in an order that rotates from
    round to round; a round gives each function its mean call time. The functions of one
    round run within a fraction of a second of each other, under the same load.
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
    return per_round


@dataclasses.dataclass(frozen=True)
class PickVsTruth:
    """How a sweep's stored pick compares with the truth measured afterwards."""

    pick: str
    rounds: dict[str, list[float]]  # config id -> seconds per call, round by round
    swept: dict[str, float]  # config id -> the sweep's median, seconds

    @property
    def medians(self) -> dict[str, float]:
        return {name: statistics.median(times) for name, times in self.rounds.items()}

    @property
    def fastest(self) -> str:
        """The config with the lowest median."""
        medians = self.medians
        return min(medians, key=medians.__getitem__)

    def slowdown(self, name: str, against: str) -> float:
        """The median over rounds of ``name``'s time over ``against``'s in the same round.
        Pairing within a round cancels what the machine's load does over the seconds the
        measurement lasts (on a busy 2-core machine the medians alone drift by 20 %)."""
        pairs = zip(self.rounds[name], self.rounds[against], strict=True)
        return statistics.median(a / b for a, b in pairs)

    @property
    def ratio(self) -> float:
        """The pick's time over the truly fastest config's (1.0: the pick is it)."""
        return self.slowdown(self.pick, self.fastest)

    def table(self) -> str:
        medians, fastest = self.medians, self.fastest
        lines = ["    truth  vs fastest  sweep's median   config (* the pick)"]
        for name in sorted(medians, key=medians.__getitem__):
            swept = self.swept.get(name)
            sweep = f"{swept * 1e3:9.2f} ms" if swept is not None else " " * 12
            mark = "*" if name == self.pick else " "
            lines.append(
                f"{medians[name] * 1e3:9.2f} ms  {self.slowdown(name, fastest):5.2f}x  "
                f"{sweep}   {mark} {name}"
            )
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
    swept = {config_id(m.config): m.median_us / 1e6 for m in entry.measurements if m.ok}
    return PickVsTruth(
        pick=config_id(entry.config), rounds=true_times(calls, **timing), swept=swept
    )
