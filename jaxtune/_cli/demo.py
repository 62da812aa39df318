"""``jaxtune demo``: the main job on a fresh machine, on the local backend.

Checks the toolchain, tunes a model step's two example kernels (a pure-JAX chunked
log-sum-exp and a tiled Pallas matmul) with one ``jaxtune.tune`` call, shows that the
jitted step then picks the tuned configs, and profiles it: time per kernel and roofline.

On CPU the step is small (float32 ``[128, 128]``: Pallas runs in interpret mode there); on a
TPU or GPU it is what such a chip runs, bfloat16 ``[2048, 4096] @ [4096, 4096]`` with blocks
that keep Mosaic's tiling rule. This process holds the accelerator once it has made the
inputs, so on TPU the sweeps and the capture run here, and say which flags they could not
apply.
"""

from __future__ import annotations

import time

from . import doctor as _doctor

__all__ = ["main", "shapes"]

#: ``(x, w)`` shapes and dtype of the step per platform: interpret mode on CPU is slow.
SHAPES = {
    "cpu": ((128, 128), (128, 128), "float32"),
    "accelerator": ((2048, 4096), (4096, 4096), "bfloat16"),
}


def shapes(platform: str) -> tuple[tuple[int, int], tuple[int, int], str]:
    """The demo step's ``x`` and ``w`` shapes and their dtype on ``platform``.

    Examples:
        >>> shapes("tpu")
        ((2048, 4096), (4096, 4096), 'bfloat16')
    """
    return SHAPES["cpu" if platform == "cpu" else "accelerator"]


def main() -> int:
    """Runs the demo; returns 0 when tuning worked, 1 otherwise."""
    report = _doctor.collect()
    print(_doctor.format_text(report))
    print()

    import jax

    from .._profiling.profiled import profile
    from .._program.locate import locate
    from .._tuning.tune import tune
    from ..examples.chunked import chunked_logsumexp, reference_logsumexp
    from ..examples.model import step

    device = jax.devices()[0]
    x_shape, w_shape, dtype = shapes(device.platform)
    x = jax.random.normal(jax.random.key(1), x_shape, dtype)
    w = (jax.random.normal(jax.random.key(2), w_shape) * 0.1).astype(dtype)
    print(f"tuning every kernel of the example step on {device.platform} ({device.device_kind})...")
    start = time.perf_counter()
    result = tune(step, x, w)
    print(f"tuned {len(result)} kernels in {time.perf_counter() - start:.1f} s\n")
    print(result.table())
    print()

    sites = [s for s in locate(step, x, w) if s.kind == "autotuned"]
    for site in sites:
        print(f"the jitted step now runs {site.kernel_id} with {site.config}")
    wide = jax.random.normal(jax.random.key(0), (8, 262144))
    error = float(abs(jax.jit(chunked_logsumexp)(wide) - reference_logsumexp(wide)).max())
    print(f"chunked_logsumexp against jax.nn.logsumexp: max error {error:.2e}")
    print(f"tuned configs are cached in {report['cache']['path']}; `jaxtune cache list` shows them")
    print()

    where = (
        "in this process, which holds the TPU"
        if device.platform == "tpu"
        else "in a child process with the profiling flags"
    )
    print(f"profiling the tuned step ({where})...")
    prof = profile(step, x, w, iters=5)
    print(prof.table(top=8))
    print()
    print(
        "see it in a browser (pip install 'jaxtune[plots]'):\n"
        f"  jaxtune report {prof.logdir} --html jaxtune-report.html\n"
        "  jaxtune cache show --html jaxtune-sweeps.html\n"
        f"tune what matters most: jaxtune tune --from-profile {prof.logdir}"
    )
    tuned = {s.kernel_id for s in sites if s.config is not None}
    profiled_kernels = {k.kernel_id or k.name for k in prof.kernels}
    ok = len(result) == 2 and len(tuned) == 2 and error < 1e-3 and bool(profiled_kernels)
    return 0 if ok else 1
