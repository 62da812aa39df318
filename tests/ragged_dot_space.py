"""Tokamax's ragged dot at the chip's problem (lhs bf16[8192, 2048], rhs bf16[8, 2048, 2048],
eight groups: issue 44's, ``bench/bench_tokamax_tpu.py``'s), traced or compiled for the TPU
from the arguments' shapes alone: what the refusal filter's DMA slice rule is checked on, on
CPU (``test_refusals.py``) and on the chip (``tpu/test_3_refusals.py``)."""

from __future__ import annotations

import dataclasses
import functools
import importlib
import sys
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import pytest

ARGS = (
    jax.ShapeDtypeStruct((8192, 2048), jnp.bfloat16),
    jax.ShapeDtypeStruct((8, 2048, 2048), jnp.bfloat16),
    jax.ShapeDtypeStruct((8,), jnp.int32),
)


def cpu_as_v5e(monkeypatch: pytest.MonkeyPatch) -> None:
    """JAX's TPU-info registry answers for the CPU with a TPU v5e's figures: Tokamax's
    ragged dot and JAX's ragged paged attention ask it about the device (as
    ``conformance/tokamax_kernels.py`` does); skips where JAX has no registry."""
    found = v5e_info_for_cpu()
    if found is None:
        pytest.skip("no TPU-info registry in this JAX")
    registry, chip = found
    monkeypatch.setitem(registry, "cpu", chip)


def v5e_info_for_cpu() -> tuple[dict[str, Any], Any] | None:
    """JAX's TPU-info registry and a TPU v5e's entry for it, or ``None`` where this JAX
    has no registry (also used by bench/bench_tokamax_tpu.py's dry run)."""
    for name in ("jax._src.tpu_info", "jax._src.pallas.mosaic.tpu_info"):
        try:
            info = importlib.import_module(name)
        except ImportError:
            continue
        chip = functools.partial(info.get_tpu_info_for_chip, info.ChipVersion.TPU_V5E, 1)
        return info.registry, chip
    return None


def ragged_dot(
    monkeypatch: pytest.MonkeyPatch,
) -> tuple[Callable[..., Any], Callable[..., Any], list[dict[str, Any]]]:
    """A function of the arguments and ``config=``, the Tokamax ``Config`` class, and
    Tokamax's own configs for :data:`ARGS` in a fixed order (540 with Tokamax 0.0.12, 300
    with 0.0.17, which no longer proposes tiles of 64); skips without Tokamax."""
    import extras  # tests/ (bench/bench_tokamax_tpu.py imports this module, not this function)

    rd = extras.require(
        "tokamax._src.ops.ragged_dot.pallas_mosaic_tpu",
        reason=(
            "Tokamax is not installed: these tests trace its ragged dot for the chip's "
            "problem. It comes with the `conformance` dependency group (`pip install --group "
            "conformance`), which `nox -s tests` tries to install"
        ),
    )
    monkeypatch.setattr(sys, "argv", sys.argv[:1])  # Tokamax parses absl's flags from it
    try:
        op = rd.PallasMosaicTpuRaggedDot(bypass_device_check=True)
    except TypeError:  # Tokamax 0.0.12: no bypass; on CPU its device check is replaced
        if jax.default_backend() != "tpu":
            monkeypatch.setattr(rd.PallasMosaicTpuRaggedDot, "supported_on", lambda s, d: True)
        op = rd.PallasMosaicTpuRaggedDot()
    bound = op.bind(*ARGS[:2], group_sizes=ARGS[2])
    configs = sorted(
        (dataclasses.asdict(c) for c in bound.autotuning_configs), key=lambda c: tuple(c.values())
    )

    def f(lhs: Any, rhs: Any, group_sizes: Any, *, config: dict[str, Any]) -> Any:
        return op.replace(config=rd.Config(**config))(lhs, rhs, group_sizes=group_sizes)

    return f, rd.Config, configs
