"""JAX's bundled Pallas TPU kernels as ``@jaxtune.autotuned`` kernels: swap the import, get
tuned block sizes.

Each kernel comes twice: a drop-in with JAX's signature (:func:`flash_attention`,
:func:`gmm`, :func:`tgmm`), and the ``@jaxtune.autotuned`` kernel behind it, whose config
keywords are the tuned knobs (:func:`autotuned_flash_attention`, :func:`autotuned_gmm`,
:func:`autotuned_tgmm`; ``.tune``, ``.config_for`` and ``.space`` are theirs). Importing
this package imports JAX and registers the packaged cache when it ships one
(:mod:`jaxtune.kernels._packaged`). See ``docs/kernels.md``.
"""

from __future__ import annotations

from ._flash import autotuned_flash_attention as autotuned_flash_attention
from ._flash import flash_attention as flash_attention
from ._megablox import autotuned_gmm as autotuned_gmm
from ._megablox import autotuned_tgmm as autotuned_tgmm
from ._megablox import gmm as gmm
from ._megablox import tgmm as tgmm
from ._packaged import register as _register

__all__ = [
    "autotuned_flash_attention",
    "autotuned_gmm",
    "autotuned_tgmm",
    "flash_attention",
    "gmm",
    "tgmm",
]

_register()
