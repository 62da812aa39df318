"""JAX's bundled Pallas TPU kernels as ``@jaxtune.autotuned`` kernels: swap the import, get
tuned block sizes.

Each kernel comes twice: a drop-in with JAX's signature (:func:`flash_attention`), and the
``@jaxtune.autotuned`` kernel behind it, whose config keywords are the tuned knobs
(:func:`autotuned_flash_attention`; ``.tune``, ``.config_for`` and ``.space`` are its). Importing
this package imports JAX and registers the packaged cache when it ships one
(:mod:`jaxtune.kernels._packaged`). See ``docs/kernels.md``.
"""

from __future__ import annotations

from ._flash import autotuned_flash_attention as autotuned_flash_attention
from ._flash import flash_attention as flash_attention
from ._packaged import register as _register

__all__ = [
    "autotuned_flash_attention",
    "flash_attention",
]

_register()
