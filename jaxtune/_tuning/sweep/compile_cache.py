"""JAX's persistent compilation cache, turned on where a sweep compiles its configs.

A second sweep of the same space (a ``--retune``, a sweep begun again after a crash, the
check's reference compiled once more) then loads each config's executable from disk
instead of compiling it again: XLA's compile is most of a large sweep's compile phase.

It is turned on in the sweep's child (:mod:`.serve`) and, for the sweep's length only, in
the caller's process when the sweep runs there (:func:`for_inline_sweep`): the user's own
programs compile as they did before and after. Where it goes:

- the user's own ``jax_compilation_cache_dir`` (``JAX_COMPILATION_CACHE_DIR`` or
  ``jax.config.update``, which the child receives with the caller's JAX state), when set:
  jaxtune leaves the whole cache configuration as the user made it;
- else ``JAXTUNE_COMPILE_CACHE``: ``1`` (the default) puts it in ``xla/`` under the user
  cache directory (``JAXTUNE_CACHE_DIR``), a directory names it, ``0`` turns it off.

jaxtune lowers JAX's thresholds for its own directory (``jax_persistent_cache_min_compile_time_secs``
to 0, ``jax_persistent_cache_min_entry_size_bytes`` to -1, no size floor): a small kernel
compiles in a fraction of a second, below JAX's default 1 s, yet a space of hundreds of
them is what a sweep spends its time on. JAX does not cache a program that calls back
into Python (``jax.pure_callback``, ``io_callback``), so Mosaic TPU kernels run in TPU
interpret mode on CPU (which call back for every memory access) are compiled each time.
"""

from __future__ import annotations

import contextlib
import pathlib
from collections.abc import Iterator

import jax

from ..._core.settings import settings
from ..state import TUNING_STATE
from ..store.layout import XLA_DIR

__all__ = ["cache_dir_for", "enable", "for_inline_sweep", "own_folder"]

#: The JAX options :func:`enable` sets.
_OPTIONS = (
    "jax_compilation_cache_dir",
    "jax_persistent_cache_min_compile_time_secs",
    "jax_persistent_cache_min_entry_size_bytes",
)


#: The directory jaxtune last set as JAX's compilation cache, if any (the user's own
#: directory is told from it).
_ENABLED: list[str | None] = TUNING_STATE.keep(
    "compile cache directory",
    lambda: [None],
    "the compilation cache directory jaxtune last set in JAX's options",
    never_reset="'compile cache' puts it back, with JAX's options",
)


@TUNING_STATE.resets(
    "compile cache", "puts JAX's compilation cache options back where jaxtune had set them"
)
def _forget() -> None:
    current = getattr(jax.config, "jax_compilation_cache_dir", None)
    if _ENABLED[0] is not None and current == _ENABLED[0]:
        from jax.experimental.compilation_cache import compilation_cache as cc

        jax.config.update("jax_compilation_cache_dir", None)
        cc.reset_cache()
    _ENABLED[0] = None


def cache_dir_for(setting: str, cache_dir: pathlib.Path) -> pathlib.Path | None:
    """Where ``JAXTUNE_COMPILE_CACHE=setting`` puts the cache, for user cache directory
    ``cache_dir`` (a file there: the folder beside it); ``None`` when turned off."""
    if setting == "0":
        return None
    if setting != "1":
        return pathlib.Path(setting).expanduser()
    base = cache_dir if not cache_dir.exists() or cache_dir.is_dir() else cache_dir.parent
    return base / XLA_DIR


def own_folder() -> pathlib.Path | None:
    """The folder of jaxtune's own compilation cache as the settings give it; ``None``
    when turned off, or where the user's own ``jax_compilation_cache_dir`` is in use."""
    current = getattr(jax.config, "jax_compilation_cache_dir", None)
    if current and current != _ENABLED[0]:
        return None
    s = settings()
    return cache_dir_for(s.compile_cache, s.cache_dir)


def enable() -> pathlib.Path | None:
    """Turns the persistent compilation cache on for this process's sweeps, as the module
    says; returns the directory in use (the user's own included), ``None`` when off.

    Called once per sweep task: a pooled child serves sweeps of several cache
    directories, so a change of directory starts JAX's cache afresh.
    """
    from jax.experimental.compilation_cache import compilation_cache as cc

    config = jax.config
    current = getattr(config, "jax_compilation_cache_dir", None)
    if current and current != _ENABLED[0]:
        return pathlib.Path(current)  # the user's own: left as they made it
    s = settings()
    wanted = cache_dir_for(s.compile_cache, s.cache_dir)
    path = None if wanted is None else str(wanted)
    if path == current:
        return wanted
    if path is not None:
        config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
        config.update("jax_persistent_cache_min_entry_size_bytes", -1)
    config.update("jax_compilation_cache_dir", path)
    _ENABLED[0] = path
    cc.reset_cache()
    return wanted


@contextlib.contextmanager
def for_inline_sweep() -> Iterator[None]:
    """:func:`enable` for one sweep in the caller's own process (``JAXTUNE_ISOLATION=inline``,
    the way a program holding the only TPU sweeps), the caller's options put back after.

    While it runs, the caller waits on the sweep; a program of the caller's compiled
    meanwhile in another thread may be cached too.
    """
    config = jax.config
    saved = {name: getattr(config, name, None) for name in _OPTIONS}
    enable()
    try:
        yield
    finally:
        if any(getattr(config, name, None) != value for name, value in saved.items()):
            from jax.experimental.compilation_cache import compilation_cache as cc

            for name, value in saved.items():
                config.update(name, value)
            _ENABLED[0] = None
            cc.reset_cache()
