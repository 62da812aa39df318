"""Facts about arrays both flows use: XLA's short dtype names, what counts as an array, and
random values of an abstract array's shape and dtype."""

from __future__ import annotations

import contextlib
from typing import Any

import numpy as np

__all__ = ["dtype_name", "is_array", "random_leaf"]

_SHORT = {
    "float64": "f64",
    "float32": "f32",
    "float16": "f16",
    "bfloat16": "bf16",
    "int64": "s64",
    "int32": "s32",
    "int16": "s16",
    "int8": "s8",
    "int4": "s4",
    "uint64": "u64",
    "uint32": "u32",
    "uint16": "u16",
    "uint8": "u8",
    "uint4": "u4",
    "bool": "pred",
    "complex64": "c64",
    "complex128": "c128",
}


def dtype_name(dtype: Any) -> str:
    """XLA's short name of a dtype: ``f32``, ``bf16``, ``s32``, ``f8e4m3fn``...."""
    try:
        return _NAMES[dtype]
    except (KeyError, TypeError):  # not seen yet, or not hashable
        pass
    name = _dtype_name(dtype)
    with contextlib.suppress(TypeError):
        _NAMES[dtype] = name
    return name


#: Short names already worked out, by the dtype given (trace-time lookups ask often).
_NAMES: dict[Any, str] = {}


def _dtype_name(dtype: Any) -> str:
    name = np.dtype(dtype).name
    if name in _SHORT:
        return _SHORT[name]
    if name.startswith("float8_"):
        return "f8" + name[len("float8_") :]
    return name


def is_array(x: Any) -> bool:
    """Whether ``x`` has a shape and dtype (arrays, tracers, ShapeDtypeStructs)."""
    return hasattr(x, "shape") and hasattr(x, "dtype") and not isinstance(x, type)


def random_leaf(leaf: Any, rng: np.random.Generator) -> np.ndarray:
    """Random values of ``leaf``'s shape and dtype: small non-negative integers (valid as
    indices of most dimensions), booleans, or standard-normal floats (ml_dtypes included)."""
    shape, dtype = tuple(leaf.shape), np.dtype(leaf.dtype)
    if dtype == np.bool_:
        return rng.random(shape) < 0.5
    if np.issubdtype(dtype, np.integer):
        info = np.iinfo(dtype)
        return rng.integers(max(info.min, 0), min(info.max, 16), size=shape, endpoint=True).astype(
            dtype
        )
    if np.issubdtype(dtype, np.complexfloating):
        return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dtype)
    # Floats, including ml_dtypes' bfloat16 and float8 types, which numpy casts to.
    return rng.standard_normal(shape).astype(np.float32).astype(dtype)
