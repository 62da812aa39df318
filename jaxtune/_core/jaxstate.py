"""JAX's configuration states, read and swapped per thread (a shim over ``jax._src.config``,
whose states are not all public)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

__all__ = ["INTERPRET", "states", "without_interpret_mode"]

#: The state of Pallas' ``force_tpu_interpret_mode()``.
INTERPRET = "pallas_tpu_interpret_mode_context_manager"


def states() -> dict[str, Any]:
    """JAX's configuration states by name (``jax.config`` options and module-level states
    such as Pallas' interpret-mode switch) that can be read and set per thread."""
    try:
        from jax._src import config as jax_config
    except ImportError:  # pragma: no cover - a JAX without the private module
        return {}
    found: dict[str, Any] = dict(getattr(jax_config, "config_states", {}))
    # Some states (Pallas' interpret-mode switch among them) are plain module attributes.
    base = getattr(getattr(jax_config, "config_ext", None), "Config", None)
    if base is not None:
        for name, value in vars(jax_config).items():
            if isinstance(value, base):
                found.setdefault(name, value)
    return {n: s for n, s in found.items() if hasattr(s, "get_local") and hasattr(s, "swap_local")}


@contextlib.contextmanager
def without_interpret_mode() -> Iterator[None]:
    """Pallas TPU interpret mode off in this thread (to lower kernels for real hardware)."""
    state = states().get(INTERPRET)
    if state is None:
        yield
        return
    previous = state.swap_local(None)
    try:
        yield
    finally:
        state.set_local(previous)
