"""Which local devices a sweep may be split over, one child process each.

On GPU every local device gets its own child (``CUDA_VISIBLE_DEVICES``). On CPU the
devices of ``--xla_force_host_platform_device_count`` share the host's cores, so at most
one child per core this process may use: more children than cores only slow each other
down (mostly useful for tests). On TPU a sweep keeps one child: a TPU chip belongs to one
process, and not every TPU generation can split its chips between processes, so jaxtune
does not try.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import sys

__all__ = [
    "cpu_only",
    "local_devices",
    "parent_backend",
    "split",
    "sweep_devices",
    "tpu_runtime",
    "usable_cores",
]

SPLITTABLE = ("gpu", "cuda", "rocm", "cpu")


def local_devices() -> tuple[str, list[int]] | None:
    """The platform and local device ids of the backend this process already started
    (``None`` before it starts one; this never starts a backend)."""
    jax = sys.modules.get("jax")
    if jax is None:
        return None
    try:
        from jax._src import xla_bridge

        if not xla_bridge.backends_are_initialized():
            return None
    except (ImportError, AttributeError):
        return None
    devices = jax.local_devices()
    ids = [int(getattr(d, "local_hardware_id", None) or i) for i, d in enumerate(devices)]
    if devices[0].platform == "cpu":
        ids = list(range(len(devices)))
    return str(devices[0].platform), ids


def usable_cores() -> int:
    """The CPU cores this process may run on (its affinity mask, where the OS has one)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS, Windows
        return os.cpu_count() or 1


def split(platform: str, ids: list[int], cores: int | None = None) -> list[int] | None:
    """The devices to give one sweep child each, or ``None`` for a single child; CPU
    devices get at most ``cores`` children (default :func:`usable_cores`)."""
    if platform.lower() == "cpu":
        ids = ids[: usable_cores() if cores is None else cores]
    if platform.lower() not in SPLITTABLE or len(ids) < 2:
        return None
    return list(ids)


def sweep_devices() -> list[int] | None:
    """:func:`split` of this process's local devices."""
    found = local_devices()
    return None if found is None else split(*found)


def parent_backend() -> str | None:
    """The platform this process already started, if any (never starts one)."""
    jax_mod = sys.modules.get("jax")
    if jax_mod is None:
        return None
    try:
        from jax._src import xla_bridge

        backends = getattr(xla_bridge, "_backends", {})
    except ImportError:
        return None
    if not backends:
        return None
    return str(jax_mod.default_backend())


def tpu_runtime() -> bool:
    """Whether a TPU runtime is installed here (``libtpu``, or ``TPU_LIBRARY_PATH``), which
    JAX picks before its CPU backend. Looks at what is installed only: nothing is imported
    and no backend is started."""
    if os.environ.get("TPU_LIBRARY_PATH"):
        return True
    try:
        return any(importlib.util.find_spec(m) for m in ("libtpu", "libtpu_nightly"))
    except (ImportError, ValueError):
        return False


def cpu_only() -> bool:
    """Whether JAX can only start its CPU backend here: no TPU runtime (``libtpu``), no
    PJRT plugin (the ``jax_plugins`` namespace or entry points, where the CUDA and ROCm
    plugins live) and no plugin named by the environment. Looks at what is installed
    only: nothing is imported and no backend is started."""
    if tpu_runtime() or os.environ.get("PJRT_NAMES_AND_LIBRARY_PATHS"):
        return False
    try:
        if importlib.util.find_spec("jax_plugins"):
            return False
        return not list(importlib.metadata.entry_points(group="jax_plugins"))
    except (ImportError, ValueError):
        return False
