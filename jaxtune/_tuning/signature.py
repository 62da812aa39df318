"""Abstract arguments -> a readable, stable tuning key.

A key holds only what changes the compiled program: the shape and dtype of every array
argument and the value of every static argument, e.g.
``f32[512,1024],f32[1024,512];transpose=False``. Values of arrays never enter it, and neither
does Python's salted ``hash()``.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import numpy as np

from .._core.arrays import dtype_name, is_array, is_extended
from .._core.errors import SignatureError
from .buckets import Buckets

__all__ = ["Signature", "abstractify", "is_tracing"]


def is_tracing(leaves: Sequence[Any]) -> bool:
    """Whether any leaf is a tracer, i.e. the call happens inside a JAX transformation."""
    return any(isinstance(leaf, jax.core.Tracer) for leaf in leaves)


#: Python scalars that jax.jit takes as 0-d arrays (weakly typed) where no static
#: argument is declared: the key, ``config_for`` and the call treat them the same way.
_SCALARS = (bool, int, float, complex)


def as_leaf(x: Any) -> Any:
    """``x`` as jax.jit sees it: for a Python scalar the 0-d array jit would make of it
    (its shape and JAX's default dtype: ``1`` is ``s32[]``, ``1.5`` is ``f32[]`` without
    x64); for a numpy array (or ``jax.ShapeDtypeStruct``) of a dtype JAX does not use now,
    its shape with the dtype jit would give it (``float64`` is ``f32`` without x64)."""
    if isinstance(x, _SCALARS) and not is_array(x):
        return jax.ShapeDtypeStruct((), jax.dtypes.canonicalize_dtype(type(x)))
    if isinstance(x, jax.Array) or not is_array(x) or is_extended(x.dtype):
        return x  # a jax array's (or tracer's) dtype is one JAX uses
    canonical = jax.dtypes.canonicalize_dtype(x.dtype)
    if canonical == x.dtype:
        return x
    return jax.ShapeDtypeStruct(tuple(x.shape), canonical)


def abstractify(x: Any) -> jax.ShapeDtypeStruct:
    """The shape and dtype of one array-like leaf (or Python scalar), without its value."""
    x = as_leaf(x)
    return jax.ShapeDtypeStruct(tuple(x.shape), x.dtype)


def _describe_leaf(x: Any) -> str:
    return f"{dtype_name(x.dtype)}[{','.join(str(d) for d in x.shape)}]"


def _static_repr(value: Any) -> str:
    if isinstance(value, (str, bytes, int, float, bool, type(None))):
        return repr(value)
    if isinstance(value, tuple):
        inner = ",".join(_static_repr(v) for v in value)
        return f"({inner}{',' if len(value) == 1 else ''})"
    if isinstance(value, np.dtype) or (isinstance(value, type) and issubclass(value, np.generic)):
        return dtype_name(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = ",".join(
            f"{f.name}={_static_repr(getattr(value, f.name))}" for f in dataclasses.fields(value)
        )
        return f"{type(value).__name__}({fields})"
    text = repr(value)
    if " at 0x" in text:
        raise SignatureError(
            f"static argument {value!r} has no stable text form (its repr holds a memory "
            "address), so it cannot be part of a tuning key. Pass a str, number, bool, tuple "
            "or frozen dataclass, or give the decorator a key= function."
        )
    return text


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Signature:
    """A call's arguments split into array leaves (by shape/dtype) and static values."""

    key: str
    shapes: tuple[tuple[str, tuple[int, ...]], ...]
    statics: str
    arguments: Mapping[str, Any]
    dynamic: tuple[str, ...]
    static: tuple[str, ...]
    var_kw: str | None
    fn_signature: inspect.Signature
    #: With ``buckets=``: the call as it was made, while this signature stands for its
    #: bucket (key, shapes and abstract arguments of the representative shape).
    actual: Signature | None = None

    @classmethod
    def bind(
        cls,
        fn_signature: inspect.Signature,
        args: Sequence[Any],
        kwargs: Mapping[str, Any],
        *,
        static_argnames: frozenset[str],
        config_names: frozenset[str],
        key_fn: Callable[..., Any] | None = None,
        buckets: Buckets | None = None,
    ) -> Signature:
        """Splits a call into dynamic (array) and static arguments and builds its key.

        With ``buckets``, the signature returned stands for the call's bucket: its key shows
        each bucketed dimension as its range, its shapes and (abstract) arguments are the
        representative shape's, and ``actual`` is the call itself.

        Raises:
            SignatureError: an argument is neither array-like nor static, a static argument
                is unhashable, a bucketed dimension is beyond an argument's rank, or the
                arguments do not match the function.
        """
        if buckets is not None:
            actual = cls.bind(
                fn_signature,
                args,
                kwargs,
                static_argnames=static_argnames,
                config_names=config_names,
                key_fn=key_fn,
            )
            return _bucketed(actual, buckets, key_fn)
        try:
            bound = fn_signature.bind_partial(*args, **kwargs)
        except TypeError as e:
            raise SignatureError(f"arguments do not match the kernel's signature: {e}") from e
        arguments = _with_static_defaults(fn_signature, bound.arguments, static_argnames)
        var_kw = next(
            (n for n, p in fn_signature.parameters.items() if p.kind is p.VAR_KEYWORD), None
        )
        flat = {n: v for n, v in arguments.items() if n != var_kw}
        flat.update(arguments.get(var_kw, {}) if var_kw else {})
        dynamic: list[str] = []
        static: list[str] = []
        shapes: list[tuple[str, tuple[int, ...]]] = []
        parts: list[str] = []
        static_parts: list[str] = []
        for name, value in flat.items():
            if name in config_names:
                continue
            if name in static_argnames:
                static.append(name)
                static_parts.append(f"{name}={_static_part(name, value)}")
                continue
            dynamic.append(name)
            leaf_shapes, part = _array_part(name, value)
            shapes.extend(leaf_shapes)
            parts.append(part)
        statics = ",".join(static_parts)
        result = cls(
            key="",
            shapes=tuple(shapes),
            statics=statics,
            arguments=arguments,
            dynamic=tuple(dynamic),
            static=tuple(static),
            var_kw=var_kw,
            fn_signature=fn_signature,
        )
        if key_fn is not None:
            args_, kwargs_ = result.call_arguments(abstract=True)
            key = str(key_fn(*args_, **kwargs_))
        else:
            key = ",".join(parts) + (f";{statics}" if statics else "")
        return dataclasses.replace(result, key=key)

    def call_arguments(
        self, *, abstract: bool = False, replace: Mapping[str, Any] | None = None
    ) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """``(args, kwargs)`` to call the kernel with, in the caller's positional layout.

        ``abstract`` replaces every array by its ``jax.ShapeDtypeStruct``; ``replace`` maps
        argument names (keyword-variadic ones included) to new values.
        """
        replace = dict(replace or {})

        def value(name: str, v: Any) -> Any:
            if name in replace:
                return replace[name]
            if abstract and name in self.dynamic:
                return jax.tree_util.tree_map(abstractify, v)
            return v

        arguments = dict(self.arguments)
        if self.var_kw is not None and self.var_kw in arguments:
            arguments[self.var_kw] = {n: value(n, v) for n, v in arguments[self.var_kw].items()}
        arguments = {n: (v if n == self.var_kw else value(n, v)) for n, v in arguments.items()}
        bound = inspect.BoundArguments(self.fn_signature, arguments)
        return tuple(bound.args), dict(bound.kwargs)

    def abstract(self) -> Signature:
        """This signature with every array as its ``jax.ShapeDtypeStruct`` (what may
        outlive the trace that bound it)."""

        def value(name: str, v: Any) -> Any:
            return jax.tree_util.tree_map(abstractify, v) if name in self.dynamic else v

        arguments = {
            n: ({k: value(k, x) for k, x in v.items()} if n == self.var_kw else value(n, v))
            for n, v in self.arguments.items()
        }
        actual = None if self.actual is None else self.actual.abstract()
        return dataclasses.replace(self, arguments=arguments, actual=actual)

    def names(self) -> list[str]:
        """Argument names in call order, keyword-variadic ones expanded."""
        out = [n for n in self.arguments if n != self.var_kw]
        if self.var_kw is not None:
            out.extend(self.arguments.get(self.var_kw, {}))
        return out

    def value(self, name: str) -> Any:
        """The value the call passed for ``name``."""
        if name in self.arguments and name != self.var_kw:
            return self.arguments[name]
        return self.arguments[self.var_kw][name]  # type: ignore[index]


def _with_static_defaults(
    fn_signature: inspect.Signature, given: Mapping[str, Any], static_argnames: frozenset[str]
) -> dict[str, Any]:
    """The bound arguments with every omitted static argument at its default, in the
    signature's order, so ``f(x)``, ``f(x, 1.0)`` and ``f(x, scale=1.0)`` share one key."""
    out: dict[str, Any] = {}
    for name, param in fn_signature.parameters.items():
        if name in given:
            out[name] = given[name]
        elif (
            name in static_argnames
            and param.default is not param.empty
            and param.kind not in (param.VAR_POSITIONAL, param.VAR_KEYWORD)
        ):
            out[name] = param.default
    return out


def _static_part(name: str, value: Any) -> str:
    """A static argument's text in the key.

    Raises:
        SignatureError: the value is unhashable (it could not be a jit static argument).
    """
    try:
        hash(value)
    except TypeError as e:
        raise SignatureError(
            f"static argument {name}={value!r} is unhashable ({type(value).__name__}); "
            "static arguments enter the tuning key and jit's cache. Pass a tuple "
            "instead of a list, or a frozen dataclass."
        ) from e
    return _static_repr(value)


def _bucketed(actual: Signature, buckets: Buckets, key_fn: Callable[..., Any] | None) -> Signature:
    """The signature of ``actual``'s bucket (see :meth:`Signature.bind`)."""
    shapes: list[tuple[str, tuple[int, ...]]] = []
    parts: list[str] = []
    reps: dict[str, Any] = {}
    for name in actual.dynamic:
        value = actual.value(name)
        leaves = [as_leaf(leaf) for leaf in jax.tree_util.tree_leaves(value)]
        described = []
        for leaf in leaves:
            shape, text = buckets.shape(name, tuple(int(d) for d in leaf.shape))
            shapes.append((dtype_name(leaf.dtype), shape))
            described.append(f"{dtype_name(leaf.dtype)}[{','.join(text)}]")
        is_single = len(leaves) == 1 and is_array(as_leaf(value))
        parts.append(described[0] if is_single else f"({','.join(described)})")
        reps[name] = jax.tree_util.tree_map(
            lambda leaf, name=name: _representative(name, leaf, buckets), value
        )
    arguments = dict(actual.arguments)
    for name, rep in reps.items():
        if name in arguments and name != actual.var_kw:
            arguments[name] = rep
        else:
            arguments[actual.var_kw] = {**arguments[actual.var_kw], name: rep}  # type: ignore[index]
    bucketed = dataclasses.replace(actual, shapes=tuple(shapes), arguments=arguments, actual=actual)
    if key_fn is not None:
        args_, kwargs_ = bucketed.call_arguments(abstract=True)
        key = str(key_fn(*args_, **kwargs_))
    else:
        key = ",".join(parts) + (f";{actual.statics}" if actual.statics else "")
    return dataclasses.replace(bucketed, key=key)


def _representative(name: str, leaf: Any, buckets: Buckets) -> jax.ShapeDtypeStruct:
    leaf = as_leaf(leaf)
    shape, _ = buckets.shape(name, tuple(int(d) for d in leaf.shape))
    return jax.ShapeDtypeStruct(shape, leaf.dtype)


def _array_part(name: str, value: Any) -> tuple[list[tuple[str, tuple[int, ...]]], str]:
    """The (dtype, shape) of each array leaf of an argument, and its text in the key.

    Raises:
        SignatureError: a leaf is not an array (the argument should have been static).
    """
    leaves = [as_leaf(leaf) for leaf in jax.tree_util.tree_leaves(value)]
    bad = [leaf for leaf in leaves if not is_array(leaf)]
    if bad:
        raise SignatureError(
            f"argument {name!r} is a {type(bad[0]).__name__} ({bad[0]!r}), not an array. "
            f"Arguments that are not arrays or Python scalars must be static: add {name!r} "
            f"to static_argnames=... in @autotuned."
        )
    shapes = [(dtype_name(leaf.dtype), tuple(int(d) for d in leaf.shape)) for leaf in leaves]
    described = [_describe_leaf(leaf) for leaf in leaves]
    is_single = len(leaves) == 1 and is_array(as_leaf(value))
    return shapes, described[0] if is_single else f"({','.join(described)})"
