"""The numerics check: does a config's output match the reference config's?"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jax
import numpy as np

from ..._core.arrays import dtype_name
from ..._core.errors import describe

__all__ = ["check_outputs", "reason"]

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
_FP8_TOLERANCE = 0.25


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
    if name.startswith("f8"):
        return _FP8_TOLERANCE
    return None  # integers and booleans: exact


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
        o_np, r_np = np.asarray(o), np.asarray(r)
        if o_np.shape != r_np.shape or o_np.dtype != r_np.dtype:
            return (
                f"output {i} is {dtype_name(o_np.dtype)}{list(o_np.shape)}, the default "
                f"config's is {dtype_name(r_np.dtype)}{list(r_np.shape)}"
            )
        if isinstance(check, Mapping):
            rtol, atol = float(check.get("rtol", 0.0)), float(check.get("atol", 0.0))
        else:
            tol = _tolerance(r_np.dtype)
            if tol is None:
                if not np.array_equal(o_np, r_np):
                    bad = int(np.sum(o_np != r_np))
                    return f"output {i} differs from the default config's in {bad} elements"
                continue
            scale = float(np.max(np.abs(r_np.astype(np.float64)))) if r_np.size else 0.0
            rtol, atol = tol, tol * max(scale, 1.0)
        o64, r64 = (
            o_np.astype(np.complex128 if np.iscomplexobj(o_np) else np.float64),
            r_np.astype(np.complex128 if np.iscomplexobj(r_np) else np.float64),
        )
        err = np.abs(o64 - r64)
        limit = atol + rtol * np.abs(r64)
        finite = np.isfinite(o64) == np.isfinite(r64)
        bad_mask = (err > limit) | ~finite
        if np.any(bad_mask):
            where = tuple(int(x) for x in np.unravel_index(int(np.argmax(bad_mask)), o_np.shape))
            worst = float(np.nanmax(np.where(np.isfinite(err), err, np.inf)))
            return (
                f"output {i} differs from the default config's: max abs error {worst:.3g} "
                f"(first at index {list(where)}) exceeds atol={atol:.3g} + rtol={rtol:.3g}*|ref|"
            )
    return None
