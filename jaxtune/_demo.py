"""``jaxtune demo``: the main job on a fresh machine, on the local backend."""

from __future__ import annotations

import time

from . import _doctor

__all__ = ["main"]


def main() -> int:
    """Checks the toolchain, then runs a jitted computation on the local backend."""
    report = _doctor.collect()
    print(_doctor.format_text(report))
    print()
    import jax
    import jax.numpy as jnp

    x = jnp.arange(1 << 20, dtype=jnp.float32).reshape(1024, 1024)
    f = jax.jit(lambda a: (a @ a.T).sum())
    f(x).block_until_ready()
    start = time.perf_counter()
    f(x).block_until_ready()
    elapsed = time.perf_counter() - start
    device = jax.devices()[0]
    print(
        f"jaxtune demo: {device.platform} backend ({device.device_kind}) ran a jitted "
        f"1024x1024 matmul in {elapsed * 1e3:.2f} ms"
    )
    return _doctor.exit_code(report)
