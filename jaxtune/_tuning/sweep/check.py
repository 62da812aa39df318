"""Kernel side. The numerics check: does a config's output match the reference config's?

The comparison runs where the outputs are, on the device: one fused reduction per output
leaf, of which only a few scalars come back (how many elements differ, the first, the
largest error). Copying every output to the host to compare it there cost a sweep on a
TPU up to 72 % of its time. Where configs compile in parallel, the comparisons are
compiled ahead, on a compiling thread, as soon as the first config's outputs are known
(:func:`prepare`): compiled on first use, on the thread that runs the configs, they held up
a TPU sweep's first check by about 1.3 s.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import threading
from collections.abc import Hashable, Mapping
from typing import Any

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np

from ..._core.arrays import dtype_name, is_extended
from ..._core.errors import describe
from ..state import TUNING_STATE

__all__ = ["check_outputs", "prepare", "reason"]

# Relative tolerance per dtype for check="auto"; the absolute tolerance is the same figure
# times the largest magnitude of the reference, so blocked reductions that only reorder
# additions pass and a wrong tile does not.
_AUTO_TOLERANCE = {
    "f64": 1e-7,
    "f32": 1e-4,
    "c64": 1e-4,
    "c128": 1e-7,
    "f16": 5e-3,
    "bf16": 5e-2,
}
#: ml_dtypes' narrow floats (float8_*, float6_*, float4_*): this, or the dtype's epsilon
#: where larger (0.5 for float4_e2m1fn), so that two outputs rounded from sums added in
#: another order (one unit in the last place apart) pass.
_NARROW_TOLERANCE = 0.25


def reason(e: BaseException) -> str:
    """One line about an exception: its first line, and its last when they differ (a
    wrapped error, such as a callback's traceback inside an XLA error, ends with the
    original exception)."""
    text = describe(e)
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if not lines:
        return type(e).__name__
    first, last = lines[0][:400], lines[-1][:400]
    return first if len(lines) == 1 else f"{first} ... {last}"


def _tolerance(dtype: Any) -> float | None:
    name = dtype_name(dtype)
    if name in _AUTO_TOLERANCE:
        return _AUTO_TOLERANCE[name]
    if not is_extended(dtype) and jnp.issubdtype(dtype, jnp.floating):
        return max(_NARROW_TOLERANCE, float(ml_dtypes.finfo(dtype).eps))
    return None  # integers, booleans and typed keys: exact


@dataclasses.dataclass(slots=True)
class _Prepared:
    """A comparison compiled ahead (:func:`prepare`): ``ready`` is set once the compile
    ended, with its executable in ``compiled`` (``None`` where it failed)."""

    ready: threading.Event = dataclasses.field(default_factory=threading.Event)
    compiled: Any = None


_PREPARED_LOCK = threading.Lock()
_PREPARED: dict[Hashable, _Prepared] = TUNING_STATE.keep(
    "comparisons compiled ahead",
    dict,
    "the check's comparisons compiled ahead (check.prepare), by shape, dtype, tolerance and device",
    lock=_PREPARED_LOCK,
)


def _comparison(
    shape: tuple[int, ...], dtype: Any, check: Any
) -> tuple[Any, dict[str, Any]] | None:
    """The jitted comparison :func:`check_outputs` calls for an output leaf of ``shape``
    and ``dtype`` under ``check`` (a scalar compared as a one-element array), with its
    static arguments; ``None`` where it calls none (nothing to compare, a callable or no
    check, typed keys)."""
    if check is False or callable(check) or is_extended(dtype):
        return None
    if shape and int(np.prod(shape)) == 0:
        return None
    if isinstance(check, Mapping):
        static = {"rtol": float(check.get("rtol", 0.0)), "atol": float(check.get("atol", 0.0))}
        return _within, {**static, "scaled": 0.0}
    tol = _tolerance(dtype)
    if tol is None:
        return _exact, {}
    return _within, {"rtol": tol, "atol": 0.0, "scaled": tol}


def _key(
    fn: Any, shape: tuple[int, ...], dtype: Any, static: Mapping[str, Any], devices: Any
) -> Hashable:
    return (fn.__name__, shape, str(np.dtype(dtype)), tuple(sorted(static.items())), devices)


def _devices(x: Any) -> frozenset[Any] | None:
    """The devices an array lies on (``None`` for a numpy array)."""
    sharding = getattr(x, "sharding", None)
    return frozenset(sharding.device_set) if sharding is not None else None


def _default_devices() -> frozenset[Any]:
    """Where a program compiled for shapes alone runs: this thread's default device."""
    default = getattr(jax.config, "jax_default_device", None)
    if isinstance(default, jax.Device):
        return frozenset({default})
    return frozenset({jax.devices(default)[0] if isinstance(default, str) else jax.devices()[0]})


def _compare(fn: Any, static: Mapping[str, Any], o: Any, r: Any) -> tuple[Any, ...]:
    """``fn(o, r, **static)`` brought to the host: by the executable compiled ahead for
    ``o``'s shape, dtype and devices (:func:`prepare`), once its compile ended. (``fn``
    called as such compiles again: its own cache keys on more than a shape gives.)"""
    where = _devices(o)
    prepared = None
    if where is not None and where == _devices(r):
        with _PREPARED_LOCK:
            prepared = _PREPARED.get(_key(fn, tuple(np.shape(o)), _dtype(o), static, where))
    if prepared is not None:
        prepared.ready.wait()
        if prepared.compiled is not None:
            return tuple(jax.device_get(prepared.compiled(o, r)))
    return tuple(jax.device_get(fn(o, r, **static)))


def prepare(outputs: Any, check: Any) -> None:
    """Compiles the comparisons :func:`check_outputs` will make of outputs shaped as
    ``outputs`` (a pytree of ``jax.ShapeDtypeStruct``: a lowered config's ``out_info``)
    under ``check``, on this thread's default device, so that the first check finds them
    compiled. A comparison that fails to compile here is left to compile, and fail, where
    it is used. Never raises: it only saves time (the check compiles where it is used)."""
    with contextlib.suppress(Exception):
        _prepare(outputs, check)


def _prepare(outputs: Any, check: Any) -> None:
    where = _default_devices()
    for leaf in jax.tree_util.tree_leaves(outputs):
        shape, dtype = tuple(getattr(leaf, "shape", ())), getattr(leaf, "dtype", None)
        if dtype is None or getattr(leaf, "sharding", None) is not None:
            continue  # placed by its sharding, which the key does not hold
        got = _comparison(shape, dtype, check)
        if got is None:
            continue
        fn, static = got
        spec = jax.ShapeDtypeStruct(shape or (1,), dtype)
        key = _key(fn, shape or (1,), dtype, static, where)
        with _PREPARED_LOCK:
            if key in _PREPARED:
                continue
            _PREPARED[key] = prepared = _Prepared()
        try:
            prepared.compiled = fn.lower(spec, spec, **static).compile()
        except Exception:  # compiled again, and reported, where it is used
            with _PREPARED_LOCK:
                _PREPARED.pop(key, None)
        finally:
            prepared.ready.set()


def check_outputs(out: Any, ref: Any, check: Any) -> str | None:
    """``None`` when ``out`` matches ``ref`` under ``check``, else the reason it does not."""
    if check is False:
        return None
    if callable(check):
        try:
            ok = bool(check(out, ref))
        except Exception as e:
            return f"check callable raised {reason(e)}"
        return None if ok else "the check callable returned False"
    out_leaves, ref_leaves = jax.tree_util.tree_leaves(out), jax.tree_util.tree_leaves(ref)
    if str(jax.tree_util.tree_structure(out)) != str(jax.tree_util.tree_structure(ref)):
        return "output structure differs from the default config's"
    for i, (o, r) in enumerate(zip(out_leaves, ref_leaves, strict=True)):
        o_shape, r_shape = tuple(np.shape(o)), tuple(np.shape(r))
        o_dtype, r_dtype = _dtype(o), _dtype(r)
        if o_shape != r_shape or o_dtype != r_dtype:
            return (
                f"output {i} is {dtype_name(o_dtype)}{list(o_shape)}, the default "
                f"config's is {dtype_name(r_dtype)}{list(r_shape)}"
            )
        if not o_shape or int(np.prod(o_shape)) == 0:
            if not o_shape:  # a scalar: compared like the rest, as a one-element array
                o, r, o_shape = jnp.reshape(o, (1,)), jnp.reshape(r, (1,)), (1,)
            else:
                continue
        if is_extended(r_dtype):  # typed keys: their bits
            bad, _, _, _ = jax.device_get(_exact(jax.random.key_data(o), jax.random.key_data(r)))
            if bad:
                return f"output {i} differs from the default config's in {int(bad)} elements"
            continue
        got = _comparison(o_shape, r_dtype, check)
        assert got is not None  # a check that compares, of a leaf with elements
        fn, static = got
        if fn is _exact:
            bad, _, _, _ = _compare(fn, static, o, r)
            if bad:
                return f"output {i} differs from the default config's in {int(bad)} elements"
            continue
        rtol = static["rtol"]
        bad, first, worst, limit = _compare(fn, static, o, r)
        if bad:
            where = [int(x) for x in np.unravel_index(int(first), o_shape)]
            return (
                f"output {i} differs from the default config's: max abs error "
                f"{float(worst):.3g} (first at index {where}) exceeds atol={float(limit):.3g} "
                f"+ rtol={rtol:.3g}*|ref|"
            )
    return None


def _dtype(x: Any) -> Any:
    """An output leaf's dtype, read without copying it to the host."""
    if not hasattr(x, "dtype"):
        return np.result_type(x)
    return x.dtype if is_extended(x.dtype) else np.dtype(x.dtype)


def _wide(dtype: Any) -> Any:
    """The dtype outputs of ``dtype`` are compared in: float32 (complex64), or the outputs'
    own where it is wider. A one-byte float (float8_*, float6_*, float4_*) is cast to
    float32 explicitly: JAX promotes none of them implicitly."""
    if jnp.issubdtype(dtype, jnp.floating) and np.dtype(dtype).itemsize == 1:
        return jnp.float32
    complex_ = jnp.issubdtype(dtype, jnp.complexfloating)
    return jnp.promote_types(dtype, jnp.complex64 if complex_ else jnp.float32)


@jax.jit
def _exact(o: Any, r: Any) -> tuple[Any, Any, Any, Any]:
    """How many elements differ, and the first that does (integers, booleans)."""
    bad = (o != r).ravel()
    return bad.sum(), jnp.argmax(bad), 0, 0


@functools.partial(jax.jit, static_argnames=("rtol", "atol", "scaled"))
def _within(o: Any, r: Any, *, rtol: float, atol: float, scaled: float) -> tuple[Any, ...]:
    """``|o - r| <= atol' + rtol * |r|`` elementwise, with ``atol' = atol + scaled *
    max(max|r|, 1)`` (blocked reductions that reorder additions pass, a wrong tile does
    not), and both finite or both not: how many elements fail, the first, the largest
    finite error, and ``atol'``. Computed in float32 (complex64), or in the outputs' own
    precision where it is wider."""
    wide = _wide(o.dtype)
    o, r = o.astype(wide).ravel(), r.astype(wide).ravel()
    scale = jnp.maximum(jnp.max(jnp.abs(r)), 1.0)
    limit = atol + scaled * scale
    err = jnp.abs(o - r)
    finite = jnp.isfinite(o) == jnp.isfinite(r)
    bad = (err > limit + rtol * jnp.abs(r)) | ~finite
    worst = jnp.max(jnp.where(jnp.isfinite(err), err, jnp.inf))
    return bad.sum(), jnp.argmax(bad), worst, limit
