"""What travels between the parent and the child: values (abstract or concrete arrays, static
arguments) in a form msgpack can carry, inside the frames of :mod:`.framing`.

Arrays travel as raw bytes with their dtype name and shape, so ml_dtypes types (bfloat16,
float8_*) round-trip exactly; typed PRNG key arrays (``jax.random.key``), which numpy cannot
hold, travel as their implementation's name and their bits (``jax.random.key_data``). An array's bytes are not copied into the msgpack part: the
frame is the msgpack part's length, the msgpack part (where an extension value stands for
each array and gives its size), then each array's bytes as they lie in memory; the reader
reads them straight into their own buffers. Nothing here runs code on read, with one
exception on the child's side: a pytree node of a registered type (Flax's ``nnx.State``, a
namedtuple, a ``flax.struct`` dataclass) travels as its type's ``module:qualname``, its node
data and its children, and the child imports that module to rebuild it, as it imports the
module of the function a request names. A type of the parent's ``__main__`` travels with the
script's path: the child re-runs that script (without its ``if __name__ == "__main__":``
block) to find it, whichever module the function comes from.
"""

from __future__ import annotations

import importlib
import os
import sys
from typing import Any

import jax
import ml_dtypes
import numpy as np

from .._core.arrays import is_extended, key_dtype, key_impl
from .frames import NotTransportable
from .framing import Raw

__all__ = ["NotTransportable", "decode_value", "encode_value"]


def _dtype(name: str) -> np.dtype[Any]:
    try:
        return np.dtype(name)
    except TypeError:
        return np.dtype(getattr(ml_dtypes, name))


def encode_value(value: Any, *, concrete_limit: int = 1 << 26) -> Any:
    """A msgpack-able form of an argument: arrays (abstract, or concrete up to
    ``concrete_limit`` bytes in all), and tuples/lists/dicts/scalars around them.

    Raises:
        NotTransportable: the value holds something else (a custom pytree, an object).
    """
    budget = [concrete_limit]

    def enc(v: Any) -> Any:
        if isinstance(v, (jax.ShapeDtypeStruct, jax.core.Tracer)):
            if is_extended(v.dtype):
                return {"__abstract_key__": [list(v.shape), _impl(v.dtype)]}
            return {"__abstract__": [list(v.shape), np.dtype(v.dtype).name]}
        if isinstance(v, (jax.Array, np.ndarray)):
            if is_extended(v.dtype):  # np.asarray refuses a typed key array: its bits go
                bits = enc(jax.random.key_data(v))
                return {"__key__": [list(v.shape), _impl(v.dtype), bits]}
            array = np.asarray(v)
            if array.nbytes > budget[0]:
                return {"__abstract__": [list(array.shape), array.dtype.name]}
            budget[0] -= array.nbytes
            flat = np.ascontiguousarray(array).reshape(-1).view(np.uint8)
            raw = Raw(flat.data)
            return {"__array__": [list(array.shape), array.dtype.name, raw]}
        if isinstance(v, (str, bytes, int, float, bool, type(None))):
            return v
        if isinstance(v, (np.integer, np.floating, np.bool_)):
            return v.item()
        if type(v) is tuple:  # not a msgpack tuple: arrays inside must stay raw
            return {"__tuple__": [enc(x) for x in v]}
        if type(v) is list:
            return {"__list__": [enc(x) for x in v]}
        if type(v) is dict and all(isinstance(k, str) for k in v):
            return {"__dict__": {k: enc(x) for k, x in v.items()}}
        try:
            return node(v)
        except NotTransportable:
            if isinstance(v, (tuple, list)):  # a namedtuple of a local class: its fields
                return enc(list(v) if isinstance(v, list) else tuple(v))
            if isinstance(v, dict) and all(isinstance(k, str) for k in v):
                return enc(dict(v))
            raise

    def node(v: Any) -> Any:
        """A registered pytree node: its type by name, node data and children."""
        structure: Any = jax.tree_util.tree_structure(v, is_leaf=lambda x: x is not v)
        kind = type(v)
        if structure.num_nodes == 1 and structure.num_leaves == 1:  # a leaf: not a pytree
            raise NotTransportable(f"{kind.__name__} values cannot travel to a child process")
        node_type, data = structure.node_data()
        if not _importable(node_type):
            raise NotTransportable(
                f"{kind.__qualname__} is defined inside a function (or is not found under "
                "its name in its module), so a child process cannot import it; define it "
                "at module level"
            )
        children = jax.tree_util.tree_leaves(v, is_leaf=lambda x: x is not v)
        try:
            encoded_data = enc(data)
        except NotTransportable as e:
            raise NotTransportable(
                f"{kind.__qualname__} pytrees cannot travel to a child process: their "
                f"static data ({type(data).__name__}) is not plain data ({e})"
            ) from None
        name = f"{node_type.__module__}:{node_type.__qualname__}"
        encoded = [name, encoded_data, [enc(x) for x in children]]
        if node_type.__module__ == "__main__":
            encoded.append(_main_script(kind))
        return {"__node__": encoded}

    return enc(value)


def _impl(dtype: Any) -> str:
    """The PRNG implementation of a typed key dtype.

    Raises:
        NotTransportable: an extended dtype that is no typed key.
    """
    if not jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key):
        raise NotTransportable(f"arrays of dtype {dtype} cannot travel to a child process")
    impl = key_impl(dtype)
    if not isinstance(impl, str):  # a child could not name it
        raise NotTransportable(
            f"typed keys of a PRNG implementation JAX knows by no name ({impl!r}) cannot "
            "travel to a child process"
        )
    return impl


def _main_script(kind: type) -> str:
    """The path of the script run as ``__main__`` (here, the parent), where ``kind`` is
    defined.

    Raises:
        NotTransportable: ``__main__`` is no script (an interactive session, a notebook).
    """
    path = getattr(sys.modules.get("__main__"), "__file__", None)
    if not path:
        raise NotTransportable(
            f"{kind.__qualname__} is defined in an interactive session or notebook, so a "
            "child process cannot import it; define it in a module or a script"
        )
    return os.path.abspath(path)


def _importable(kind: type) -> bool:
    """Whether ``kind`` is found under its own name in its module (here, the parent)."""
    found: Any = sys.modules.get(kind.__module__)
    for part in kind.__qualname__.split("."):
        found = getattr(found, part, None)
    return found is kind


def _node_type(name: str, script: str | None) -> type:
    """The type a ``module:qualname`` names, its module imported here (the child); a type
    of the parent's ``__main__`` is found in its script (``script``), which the child
    re-runs under an alias unless it already has (for a function of that script)."""
    from .frames import FunctionRef
    from .resolve import Unresolved, namespace, script_namespaces

    module_name, _, qualname = name.partition(":")
    first, *rest = qualname.split(".")
    found: Any = None
    if module_name == "__main__":
        if script:
            namespace(FunctionRef(module="__main__", qualname=qualname, path=script))
        found = next((ns[first] for ns in script_namespaces() if first in ns), None)
        if found is None:
            raise Unresolved(f"{qualname} is not defined in the script the child re-ran")
    else:
        try:
            found = getattr(importlib.import_module(module_name), first)
        except (ImportError, AttributeError) as e:
            raise Unresolved(f"cannot import {name} for an argument: {e}") from e
    for part in rest:
        found = getattr(found, part, None)
    if not isinstance(found, type):
        raise Unresolved(f"{name} is not a type here")
    return found


def decode_value(value: Any, *, abstract: bool = False) -> Any:
    """Inverse of :func:`encode_value`: concrete arrays come back as jax arrays (as
    ``jax.ShapeDtypeStruct`` with ``abstract``, without reading their bytes)."""

    def dec(x: Any) -> Any:
        return decode_value(x, abstract=abstract)

    if isinstance(value, tuple):
        return tuple(dec(x) for x in value)
    if isinstance(value, dict):
        if "__abstract__" in value or (abstract and "__array__" in value):
            shape, dtype = value.get("__abstract__") or value["__array__"][:2]
            return jax.ShapeDtypeStruct(tuple(shape), _dtype(dtype))
        if "__abstract_key__" in value or "__key__" in value:
            return _keys(value, abstract)
        if "__array__" in value:
            shape, dtype, raw = value["__array__"]
            array = np.frombuffer(raw, dtype=_dtype(dtype)).reshape(shape)
            return jax.device_put(array)  # no per-shape conversion program, unlike asarray
        if "__list__" in value:
            return [dec(x) for x in value["__list__"]]
        if "__tuple__" in value:
            return tuple(dec(x) for x in value["__tuple__"])
        if "__dict__" in value:
            return {k: dec(x) for k, x in value["__dict__"].items()}
        if "__node__" in value:
            name, data, children, *script = value["__node__"]
            decoded = [dec(x) for x in children]
            structure = jax.tree_util.PyTreeDef.from_node_data_and_children(
                jax.tree_util.default_registry,
                (_node_type(name, script[0] if script else None), dec(data)),
                [jax.tree_util.tree_structure(x) for x in decoded],
            )
            return structure.unflatten(
                [leaf for x in decoded for leaf in jax.tree_util.tree_leaves(x)]
            )
    return value


def _keys(value: dict[str, Any], abstract: bool) -> Any:
    """A typed key array (or its shape and dtype) from its implementation and bits.

    Raises:
        Unresolved: this process knows no PRNG implementation of that name.
    """
    from .resolve import Unresolved

    shape, impl, *bits = value.get("__abstract_key__") or value["__key__"]
    try:
        dtype = key_dtype(impl)
    except (ValueError, TypeError) as e:
        raise Unresolved(f"no PRNG implementation {impl!r} here for a key argument") from e
    data = decode_value(bits[0], abstract=abstract) if bits else None
    if data is None or isinstance(data, jax.ShapeDtypeStruct):
        return jax.ShapeDtypeStruct(tuple(shape), dtype)
    return jax.random.wrap_key_data(data, impl=impl)
