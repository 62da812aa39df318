"""Both sides. Concrete inputs for a sweep, and where their values came from.

Per array argument, one rule (docs/values.md): the program's own values where the flow has
them (the caller's arrays in-process, the values a recording collected under ``jaxtune tune
--``), else what ``inputs=`` builds, else deterministic random values per dtype (bf16, fp8
and typed PRNG keys included). Every value is placed on the device once, before any config
runs. Integer and boolean values decide the work of many kernels (group sizes, lengths,
ids, loop counts, masks): synthesising them is never silent (:func:`synthesised_ints`).

A sweep may time several value sets of one call (a prefill and a decode step, group sizes
that change each step) as a mix: ``extra`` sets beside the call's own.
"""

from __future__ import annotations

import dataclasses
import zlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import numpy as np

from ..._core.arrays import dtype_name, is_array, random_leaf
from ..._core.errors import SignatureError
from ..._core.vocabulary import ArgumentValues, SweepValues
from ..._isolation.devices import usable_cores
from ..recorded import ValueSet
from ..signature import Signature, as_leaf

__all__ = [
    "CALLER",
    "INPUTS",
    "RECORDED",
    "SYNTHESISED",
    "SYNTHESISED_TEXT",
    "describe_values",
    "is_concrete",
    "is_int_like",
    "made_up_integers",
    "make_inputs",
    "recorded_values",
    "summarise",
    "synthesised_ints",
    "value_sources",
]

#: Where an argument's values came from (an entry's ``values``, the tables).
CALLER = "caller"
RECORDED = "recorded"
INPUTS = "inputs="
SYNTHESISED = "synthesised"
#: How synthesised values are made, for people.
SYNTHESISED_TEXT = "integers uniform in 0..16, booleans 50 % true, floats standard normal"


def is_concrete(leaf: Any) -> bool:
    """Whether ``leaf`` holds values (an array, not a tracer or ``ShapeDtypeStruct``)."""
    if isinstance(leaf, jax.core.Tracer):
        return False
    return isinstance(leaf, (jax.Array, np.ndarray, np.generic, bool, int, float, complex))


def is_int_like(leaf: Any) -> bool:
    """Whether ``leaf``'s values are integers or booleans (values that often decide the
    work: group sizes, lengths, ids, loop counts, masks)."""
    leaf = as_leaf(leaf)
    try:
        dtype = np.dtype(leaf.dtype)
    except TypeError:  # an extended dtype (a typed PRNG key): not work-deciding
        return False
    return dtype == np.bool_ or np.issubdtype(dtype, np.integer)


def value_sources(sig: Signature, *, inputs_given: bool, real: str = CALLER) -> dict[str, str]:
    """Per array argument, where a sweep of ``sig`` takes its values: ``real`` (the call's
    own: ``caller`` or ``recorded``) when every leaf holds values, else ``inputs=`` when
    the kernel has one, else ``synthesised`` (``"<real>, partly synthesised"``: the
    integer leaves are the call's own, floats past the recording's budget made up)."""
    out = {}
    for name in sig.dynamic:
        leaves = jax.tree_util.tree_leaves(sig.value(name))
        concrete = [is_concrete(leaf) for leaf in leaves]
        if all(concrete):
            out[name] = real
        elif inputs_given:
            out[name] = INPUTS
        elif any(concrete):
            out[name] = f"{real}, partly {SYNTHESISED}"
        else:
            out[name] = SYNTHESISED
    return out


def synthesised_ints(sig: Signature, sources: Mapping[str, str]) -> list[str]:
    """The arguments whose integer or boolean leaves a sweep would make up."""
    return [
        name
        for name, source in sources.items()
        if source == SYNTHESISED
        and any(is_int_like(leaf) for leaf in jax.tree_util.tree_leaves(sig.value(name)))
    ]


def summarise(value: Any) -> str:
    """A short text of an argument's integer and boolean values: ``s32[8] 0..4096 sum
    8192 median 1024, 2 zero`` or ``pred[64] 37 % true`` (several leaves joined by ``;``);
    empty for an argument without such values at hand."""
    parts = []
    for leaf in jax.tree_util.tree_leaves(value):
        if not (is_concrete(leaf) and is_int_like(leaf)):
            continue
        array = np.asarray(leaf)
        head = f"{dtype_name(array.dtype)}[{','.join(map(str, array.shape))}]"
        if array.size == 0:
            parts.append(f"{head} empty")
        elif array.dtype == np.bool_:
            share = 100 * array.mean()
            parts.append(
                f"{head} {share:.2g} % true" if share < 10 else f"{head} {share:.0f} % true"
            )
        else:
            flat = array.astype(np.int64).reshape(-1)
            text = f"{head} {flat.min()}..{flat.max()}"
            if flat.size > 1:
                zeros = int((flat == 0).sum())
                text += f" sum {flat.sum()} median {np.median(flat):g}"
                text += f", {zeros} zero" if zeros else ""
            parts.append(text)
    return "; ".join(parts)


def describe_values(
    sig: Signature,
    *,
    inputs_given: bool,
    real: str = CALLER,
    sets: Sequence[Mapping[str, str]] = (),
) -> SweepValues:
    """What an entry records of the values a sweep of ``sig`` runs on: how many value
    sets, and per array argument its source and a summary per set (:func:`summarise`;
    ``sets``: summaries already made where the values were, one map per set)."""
    sources = value_sources(sig, inputs_given=inputs_given, real=real)
    summaries = list(sets) or [{name: summarise(sig.value(name)) for name in sig.dynamic}]
    arguments = {}
    for name, source in sources.items():
        texts = tuple(s.get(name, "") for s in summaries)
        integer = any(is_int_like(x) for x in jax.tree_util.tree_leaves(sig.value(name)))
        if integer and source == SYNTHESISED:
            texts = tuple(t or "integers uniform in 0..16" for t in texts)
        arguments[name] = ArgumentValues(
            source=source, integer=integer, summary=texts if any(texts) else None
        )
    return SweepValues(sets=len(summaries), arguments=arguments)


def recorded_values(described: SweepValues, sets: Sequence[ValueSet]) -> SweepValues:
    """:func:`describe_values`'s record of a recorded call (made where it was traced,
    without values) once its value sets have arrived (``values`` frames of a recording:
    their ``summary`` and ``dropped`` arguments); the work the hints count is kept, so a
    replayed sweep flags a time past the peak as the traced one does."""
    arguments = {}
    for name, about in (described.arguments or {}).items():
        source = RECORDED
        if any(name in s.dropped for s in sets):
            source = about.source if about.source == INPUTS else f"{RECORDED}, partly {SYNTHESISED}"
        texts = tuple(s.summary.get(name, "") for s in sets)
        arguments[name] = dataclasses.replace(
            about, source=source, summary=texts if any(texts) else None
        )
    return dataclasses.replace(described, sets=len(sets), arguments=arguments)


def made_up_integers(described: SweepValues) -> list[str]:
    """The integer/boolean arguments a described sweep synthesises (see
    :func:`describe_values`)."""
    return [
        name
        for name, about in (described.arguments or {}).items()
        if about.integer and about.source == SYNTHESISED
    ]


def make_inputs(
    kernel: str,
    sig: Signature,
    inputs: Callable[..., Any] | None = None,
    extra: Sequence[Mapping[str, Any]] = (),
) -> tuple[dict[str, Any], ...]:
    """Concrete values for the dynamic arguments, one dict per value set (the call's, then
    ``extra``), each on the device: per argument the call's own values, else what
    ``inputs(...)`` builds, else deterministic random values per dtype.

    Raises:
        SignatureError: ``inputs`` returned values whose shapes/dtypes differ from the call.
    """
    sources = value_sources(sig, inputs_given=inputs is not None)
    built: dict[str, Any] = {}
    if inputs is not None and INPUTS in sources.values():
        args, kwargs = sig.call_arguments(abstract=True)
        built = _validate_inputs(sig, inputs(*args, **kwargs))
    seed = zlib.crc32(f"{kernel}|{sig.key}".encode())
    cores = usable_cores()

    def one(values: Mapping[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for i, name in enumerate(sig.dynamic):
            if sources[name] == INPUTS:
                out[name] = built[name]
                continue
            rng = np.random.default_rng(seed + i)
            out[name] = jax.tree_util.tree_map(
                lambda leaf, rng=rng: (
                    leaf if is_concrete(leaf) else random_leaf(leaf, rng, threads=cores)
                ),
                values[name],
            )
        return _on_device(out)

    first = one({name: sig.value(name) for name in sig.dynamic})
    return (first, *(one(values) for values in extra))


def _on_device(values: dict[str, Any]) -> dict[str, Any]:
    """``values`` with every numpy array placed on the default device, once: a timed call
    on numpy arrays would copy them to the device on every call."""

    def put(leaf: Any) -> Any:
        return jax.device_put(leaf) if isinstance(leaf, (np.ndarray, np.generic)) else leaf

    return jax.tree_util.tree_map(put, values)


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
            w = as_leaf(w)
            if tuple(w.shape) != tuple(g.shape) or dtype_name(w.dtype) != dtype_name(g.dtype):
                raise SignatureError(
                    f"inputs(...) returned {dtype_name(g.dtype)}{list(g.shape)} for {name!r}, "
                    f"expected {dtype_name(w.dtype)}{list(w.shape)} (the shapes of the call "
                    "being tuned)."
                )
    return {n: given[n] for n in sig.dynamic}
