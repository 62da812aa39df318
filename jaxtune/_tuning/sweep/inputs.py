"""Concrete inputs for a sweep: the caller's arrays, an ``inputs`` callable, or random values.

Random values are deterministic per (kernel, key) and per dtype, bf16 and fp8 included
(ml_dtypes types cast from float32).
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Mapping
from typing import Any

import jax
import numpy as np

from ..._core.arrays import dtype_name, is_array, random_leaf
from ..._core.errors import SignatureError
from ..signature import Signature

__all__ = ["make_inputs"]


def make_inputs(
    kernel: str, sig: Signature, inputs: Callable[..., Any] | None = None
) -> dict[str, Any]:
    """Concrete values for the dynamic arguments: the caller's arrays when it passed
    concrete ones, else ``inputs(...)``, else deterministic random values per dtype.

    Raises:
        SignatureError: ``inputs`` returned values whose shapes/dtypes differ from the call.
    """
    names = list(sig.dynamic)
    values = {n: sig.value(n) for n in names}
    leaves = jax.tree_util.tree_leaves(values)
    if (
        inputs is None
        and leaves
        and all(isinstance(x, jax.Array) for x in leaves)
        and not any(isinstance(x, jax.core.Tracer) for x in leaves)
    ):
        return values
    if inputs is not None:
        args, kwargs = sig.call_arguments(abstract=True)
        produced = inputs(*args, **kwargs)
        return _validate_inputs(sig, produced)
    seed = zlib.crc32(f"{kernel}|{sig.key}".encode())
    out: dict[str, Any] = {}
    for i, name in enumerate(names):
        rng = np.random.default_rng(seed + i)
        out[name] = jax.tree_util.tree_map(
            lambda leaf, rng=rng: random_leaf(leaf, rng), values[name]
        )
    return out


def _validate_inputs(sig: Signature, produced: Any) -> dict[str, Any]:
    if isinstance(produced, Mapping):
        given = dict(produced)
    elif isinstance(produced, (tuple, list)):
        positional = [n for n in sig.names() if n in sig.dynamic]
        if len(produced) != len(positional):
            raise SignatureError(
                f"inputs(...) returned {len(produced)} values, expected {len(positional)} "
                f"(one per array argument: {', '.join(positional)}). Return a tuple in that "
                "order or a dict by argument name."
            )
        given = dict(zip(positional, produced, strict=True))
    else:
        raise SignatureError(
            f"inputs(...) must return a tuple of the array arguments or a dict by name, got "
            f"{type(produced).__name__}."
        )
    for name in sig.dynamic:
        if name not in given:
            raise SignatureError(f"inputs(...) gave no value for argument {name!r}.")
        want = jax.tree_util.tree_leaves(sig.value(name))
        got = jax.tree_util.tree_leaves(given[name])
        if len(want) != len(got) or not all(is_array(g) for g in got):
            raise SignatureError(
                f"inputs(...) returned a different structure for {name!r}: expected "
                f"{len(want)} arrays, got {[type(g).__name__ for g in got]}."
            )
        for w, g in zip(want, got, strict=True):
            if tuple(w.shape) != tuple(g.shape) or dtype_name(w.dtype) != dtype_name(g.dtype):
                raise SignatureError(
                    f"inputs(...) returned {dtype_name(g.dtype)}{list(g.shape)} for {name!r}, "
                    f"expected {dtype_name(w.dtype)}{list(w.shape)} (the shapes of the call "
                    "being tuned)."
                )
    return {n: given[n] for n in sig.dynamic}
