"""JAX's bundled Pallas TPU kernels as ``@jaxtune.autotuned`` kernels: swap the import, get
tuned block sizes.

Each kernel comes twice: a drop-in with JAX's signature (:func:`flash_attention`,
:func:`gmm`, :func:`tgmm`, :func:`make_splash_mha` and its siblings,
:func:`ragged_paged_attention`), and the
``@jaxtune.autotuned`` kernel behind it, whose config keywords are the tuned knobs
(:func:`autotuned_flash_attention`, :func:`autotuned_gmm`, :func:`autotuned_tgmm`,
:func:`autotuned_splash_attention`, :func:`autotuned_ragged_paged_attention`; ``.tune``, ``.config_for`` and ``.space`` are theirs). Importing
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
from ._ragged_paged import autotuned_ragged_paged_attention as autotuned_ragged_paged_attention
from ._ragged_paged import ragged_paged_attention as ragged_paged_attention
from ._splash import SplashAttention as SplashAttention
from ._splash import autotuned_splash_attention as autotuned_splash_attention
from ._splash import make_splash_mha as make_splash_mha
from ._splash import make_splash_mha_single_device as make_splash_mha_single_device
from ._splash import make_splash_mqa as make_splash_mqa
from ._splash import make_splash_mqa_single_device as make_splash_mqa_single_device
from ._splash import mask_spec as mask_spec

__all__ = [
    "SplashAttention",
    "autotuned_flash_attention",
    "autotuned_gmm",
    "autotuned_ragged_paged_attention",
    "autotuned_splash_attention",
    "autotuned_tgmm",
    "flash_attention",
    "gmm",
    "make_splash_mha",
    "make_splash_mha_single_device",
    "make_splash_mqa",
    "make_splash_mqa_single_device",
    "mask_spec",
    "ragged_paged_attention",
    "tgmm",
]

_register()
