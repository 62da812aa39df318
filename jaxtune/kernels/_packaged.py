"""The tuned configs jaxtune ships for these kernels: a packaged cache, registered at import.

The packaged cache is the directory :data:`CACHE` (``data/cache/`` beside this module), in
the cache layout ``jaxtune cache export --dir`` writes (one file per device kind and
kernel, each entry decoded only when a lookup reaches it). While it is absent, importing
:mod:`jaxtune.kernels` registers nothing: the kernels' lookups go from the user cache to a
tuned nearby shape and then to JAX's defaults.
"""

from __future__ import annotations

import pathlib

import jaxtune

__all__ = ["CACHE", "register"]

#: Where the packaged cache lives, when the package ships one.
CACHE = pathlib.Path(__file__).resolve().parent / "data" / "cache"


def register() -> bool:
    """Registers :data:`CACHE` with :func:`jaxtune.register_cache` when it is there (a
    lookup reads it only once it misses the user cache); returns whether it did."""
    if not CACHE.is_dir():
        return False
    jaxtune.register_cache(CACHE)
    return True
