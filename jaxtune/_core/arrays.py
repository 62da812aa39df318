"""Facts about arrays both flows use: XLA's short dtype names, what counts as an array, and
random values of an abstract array's shape and dtype.

Besides numpy's dtypes and ml_dtypes' (bfloat16, float8_*, int4...), an array may have one
of JAX's extended dtypes, which numpy does not know: a typed PRNG key array
(``jax.random.key``) has dtype ``key<fry>``, its bits (``jax.random.key_data``) an extra
trailing dimension of ``uint32``. JAX is imported only where such a dtype is met.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import functools
import re
from typing import Any

import numpy as np

from .state import CORE_STATE

__all__ = ["dtype_name", "is_array", "is_extended", "key_dtype", "key_impl", "random_leaf"]

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


_NAMES: dict[Any, str] = CORE_STATE.keep(
    "dtype names", dict, "short dtype names already worked out (trace-time lookups ask often)"
)


def _dtype_name(dtype: Any) -> str:
    if is_extended(dtype):
        return str(dtype)  # JAX's own text: key<fry>, key<rbg>
    name = np.dtype(dtype).name
    if name in _SHORT:
        return _SHORT[name]
    small_float = re.fullmatch(r"float(\d+)_(\w+)", name)  # ml_dtypes: float8_e4m3fn
    if small_float:
        return f"f{small_float[1]}{small_float[2]}"
    small_int = re.fullmatch(r"(u?)int(\d+)", name)  # ml_dtypes: int2
    if small_int:
        return f"{small_int[1] or 's'}{small_int[2]}"
    return name


def is_extended(dtype: Any) -> bool:
    """Whether ``dtype`` is one of JAX's extended dtypes (typed PRNG keys), which numpy
    cannot interpret."""
    if isinstance(dtype, (np.dtype, str)) or (
        isinstance(dtype, type) and issubclass(dtype, np.generic)
    ):
        return False
    import jax

    try:
        return bool(jax.dtypes.issubdtype(dtype, jax.dtypes.extended))
    except TypeError:
        return False


@functools.cache
def key_impl(dtype: Any) -> Any:
    """The PRNG implementation of a typed key dtype, as ``jax.random.key(..., impl=...)``
    takes it: its name (``threefry2x32``, ``rbg``, ``unsafe_rbg``) for an implementation
    JAX knows by name, else JAX's ``PRNGSpec`` of it."""
    import jax

    found: list[Any] = []
    # jax.random.key_impl reads a key array, not a dtype: an abstract one costs nothing.
    jax.eval_shape(lambda k: found.append(jax.random.key_impl(k)), jax.ShapeDtypeStruct((), dtype))
    return found[0]


@functools.cache
def key_dtype(impl: str) -> Any:
    """The typed key dtype of a PRNG implementation named as :func:`key_impl` names it.

    Raises:
        ValueError: JAX knows no implementation of that name.
    """
    import jax

    return jax.eval_shape(lambda: jax.random.key(0, impl=impl)).dtype


def is_array(x: Any) -> bool:
    """Whether ``x`` has a shape and dtype (arrays, tracers, ShapeDtypeStructs)."""
    return hasattr(x, "shape") and hasattr(x, "dtype") and not isinstance(x, type)


#: Elements of a float array drawn from one random stream. A large array's streams are
#: drawn on several threads; its values do not depend on how many.
NORMAL_CHUNK = 1 << 20


def random_leaf(leaf: Any, rng: np.random.Generator, *, threads: int = 1) -> Any:
    """Random values of ``leaf``'s shape and dtype: small non-negative integers (valid as
    indices of most dimensions), booleans, standard-normal floats (ml_dtypes included, each
    :data:`NORMAL_CHUNK` elements from a stream of their own, drawn on up to ``threads``
    threads), or typed PRNG keys of ``leaf``'s implementation made from random bits (a jax
    array).

    Raises:
        TypeError: ``leaf`` has an extended dtype other than a typed key.
    """
    if is_extended(leaf.dtype):
        return _random_keys(leaf, rng)
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
    return _normal(shape, dtype, rng, threads)


def _normal(
    shape: tuple[int, ...], dtype: np.dtype[Any], rng: np.random.Generator, threads: int
) -> Any:
    """Standard-normal values of ``shape`` and ``dtype`` (a 64 MiB bfloat16 array drawn at
    once, then cast twice, took 1.4 s on one core; in streams of :data:`NORMAL_CHUNK`
    drawn as float32 into place, 0.66 s, and less on more threads)."""
    out = np.empty(shape, dtype)
    flat = out.reshape(-1)
    base = int(rng.integers(1 << 63))
    drawn = np.float64 if dtype == np.float64 else np.float32

    def fill(start: int) -> None:
        part = flat[start : start + NORMAL_CHUNK]
        stream = np.random.default_rng([base, start // NORMAL_CHUNK])
        part[...] = stream.standard_normal(part.size, dtype=drawn)

    starts = range(0, flat.size, NORMAL_CHUNK)
    if threads <= 1 or len(starts) <= 1:
        for start in starts:
            fill(start)
    else:
        with concurrent.futures.ThreadPoolExecutor(min(threads, len(starts))) as pool:
            list(pool.map(fill, starts))
    return out


def _random_keys(leaf: Any, rng: np.random.Generator) -> Any:
    import jax

    if not jax.dtypes.issubdtype(leaf.dtype, jax.dtypes.prng_key):
        raise TypeError(f"jaxtune cannot make random values of dtype {leaf.dtype}")
    bits = jax.eval_shape(jax.random.key_data, jax.ShapeDtypeStruct(tuple(leaf.shape), leaf.dtype))
    info = np.iinfo(bits.dtype)
    data = rng.integers(info.min, info.max, size=bits.shape, dtype=bits.dtype, endpoint=True)
    return jax.random.wrap_key_data(data, impl=key_impl(leaf.dtype))
