"""Carrying the caller's thread-local JAX configuration into jaxtune's worker threads.

JAX context managers such as ``jax.enable_x64(True)``, ``jax.default_matmul_precision`` or
Pallas' ``force_tpu_interpret_mode()`` set *thread-local* configuration. A sweep compiles in
worker threads, which would otherwise see the global values and, for example, lower a TPU
kernel for real instead of in interpret mode. :func:`capture` snapshots the caller's local
values; the returned context manager re-applies them in whichever thread enters it.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import Any

__all__ = ["capture"]

_UNSET: list[Any] = []


def _states() -> dict[str, Any]:
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


def _unset_marker() -> Any:
    """The value ``get_local`` returns in a thread that set nothing (read once)."""
    if not _UNSET:
        states = list(_states().values())
        if not states:
            return object()
        seen: list[Any] = []
        t = threading.Thread(target=lambda: seen.append(states[0].get_local()))
        t.start()
        t.join()
        _UNSET.append(seen[0])
    return _UNSET[0]


def capture() -> Callable[[], contextlib.AbstractContextManager[None]]:
    """Snapshots this thread's local JAX configuration; the result re-applies it."""
    unset = _unset_marker()
    local = {}
    for name, state in _states().items():
        try:
            value = state.get_local()
        except Exception:
            continue
        if value is not unset:
            local[name] = (state, value)

    @contextlib.contextmanager
    def apply() -> Iterator[None]:
        previous = []
        try:
            for state, value in local.values():
                previous.append((state, state.swap_local(value)))
                hook = getattr(state, "_update_thread_local_hook", None)
                if hook is not None:
                    hook(value)
            yield
        finally:
            for state, value in reversed(previous):
                state.set_local(value)
                hook = getattr(state, "_update_thread_local_hook", None)
                if hook is not None:
                    hook(None if value is unset else value)

    return apply
