"""``jaxtune demo``: the main job on a fresh machine, on the local backend.

Checks the toolchain, tunes the two example kernels (a pure-JAX chunked log-sum-exp and a
tiled Pallas matmul), and shows that a jitted call then picks the tuned config.
"""

from __future__ import annotations

import time

from . import _doctor

__all__ = ["main"]


def main() -> int:
    """Runs the demo; returns 0 when tuning worked, 1 otherwise."""
    report = _doctor.collect()
    print(_doctor.format_text(report))
    print()

    import jax

    from ._result import TuningResult
    from .examples.chunked import chunked_logsumexp, reference_logsumexp
    from .examples.pallas_matmul import matmul

    device = jax.devices()[0]
    print(f"tuning the example kernels on {device.platform} ({device.device_kind})...")
    x = jax.random.normal(jax.random.key(0), (8, 262144))
    a = jax.random.normal(jax.random.key(1), (128, 128))
    b = jax.random.normal(jax.random.key(2), (128, 128))
    start = time.perf_counter()
    result = chunked_logsumexp.tune(x) | matmul.tune(a, b)
    print(f"tuned {len(result)} kernels in {time.perf_counter() - start:.1f} s\n")
    print(result.table())
    print()

    choice = chunked_logsumexp.config_for(x)
    out = jax.jit(chunked_logsumexp)(x)
    error = float(abs(out - reference_logsumexp(x)).max())
    print(
        f"jax.jit(chunked_logsumexp) now uses {dict(choice.config)} (source: {choice.source}); "
        f"max error against jax.nn.logsumexp: {error:.2e}"
    )
    print(f"tuned configs are cached in {report['cache']['path']}; `jaxtune cache list` shows them")
    ok = isinstance(result, TuningResult) and choice.source == "cache" and error < 1e-3
    return 0 if ok else 1
