"""Which local devices a sweep may be split over, one child process each.

On GPU every local device gets its own child (``CUDA_VISIBLE_DEVICES``); on CPU every
device of ``--xla_force_host_platform_device_count`` gets a child (the children share the
host's cores, so this is mostly for tests). On TPU a sweep keeps one child: a TPU chip
belongs to one process, and not every TPU generation can split its chips between
processes, so jaxtune does not try.
"""

from __future__ import annotations

import sys

__all__ = ["local_devices", "split", "sweep_devices"]

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


def split(platform: str, ids: list[int]) -> list[int] | None:
    """The devices to give one sweep child each, or ``None`` for a single child."""
    if platform.lower() not in SPLITTABLE or len(ids) < 2:
        return None
    return list(ids)


def sweep_devices() -> list[int] | None:
    """:func:`split` of this process's local devices."""
    found = local_devices()
    return None if found is None else split(*found)
