"""Installed toolchain versions, read from package metadata (no backend is started)."""

from __future__ import annotations

import functools
import importlib.metadata

from .state import CORE_STATE

__all__ = ["dist_version", "toolchain"]


def dist_version(*names: str) -> str | None:
    """The installed version of the first distribution in ``names`` that exists."""
    for name in names:
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


@CORE_STATE.memo("toolchain", "the installed jax, jaxlib, libtpu and jaxtune versions")
@functools.cache
def toolchain() -> dict[str, str | None]:
    """Versions that decide whether a tuned config is still valid: jax, jaxlib, libtpu."""
    return {
        "jax": dist_version("jax"),
        "jaxlib": dist_version("jaxlib"),
        "libtpu": dist_version("libtpu", "libtpu-nightly"),
        "jaxtune": dist_version("jaxtune"),
    }


def stale(recorded: dict[str, str | None]) -> bool:
    """Whether an entry recorded under ``recorded`` was tuned with another jax/jaxlib/libtpu
    (an entry that recorded no versions at all is not: its toolchain is unknown)."""
    if not recorded:
        return False
    now = toolchain()
    return any(recorded.get(k) != now[k] for k in ("jax", "jaxlib", "libtpu"))
