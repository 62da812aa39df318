"""Eager calls at close to ``jax.jit``'s cost.

An autotuned kernel whose config keywords are known in advance is called through one
``jax.jit`` per kernel, behind one Python step installed as its class's ``__call__`` (a
``staticmethod``, :func:`eager_call`): the step checks that no variable that decides the
config changed since the jit was made (about 0.15 µs), then calls the jit, whose C++
dispatch does the shape lookup. The jit's trace picks the config (exactly as a trace
inside the user's ``jax.jit`` does), and everything else that decides the config reaches
jit's cache key through JAX user contexts: ``with TuningResult`` scopes (their own
context), :func:`jaxtune._core.settings.override` blocks (:data:`_OVERRIDDEN`) and explicit
re-tuning (:data:`_GENERATION`). A changed ``JAXTUNE_*`` variable (seen by the step) and a
change of the caches (a sweep's entry, a write, a registered layer) renew only the eager
jits (:func:`caches_changed`), so the caller's own jitted functions are not traced again.
``inline=True`` makes the jit vanish into an enclosing trace, so inside the user's own
``jax.jit``, ``grad`` or ``vmap`` the kernel's operations sit where they did without it.
"""

from __future__ import annotations

import inspect
import os
import weakref
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol

import jax

from .._core import settings as _config
from . import result as _result
from .store import cache as _cache

__all__ = [
    "bump_generation",
    "caches_changed",
    "eager_call",
    "eager_jit",
    "renew_on_cache_change",
]

# Part of jit's cache key: bumped after explicit tuning, so jitted functions (and the
# eager jits) re-trace and choose again.
_GENERATION = jax.make_user_context(default_value=0)
# Part of jit's cache key: the settings overridden in this context.
_OVERRIDDEN = jax.make_user_context(default_value=())


def bump_generation() -> None:
    """Makes every jitted function re-trace on its next call."""
    _GENERATION.set_global(_GENERATION.get_global() + 1)


class _Renewable(Protocol):
    def renew_eager(self) -> None: ...


_OWNERS: weakref.WeakSet[Any] = weakref.WeakSet()


def renew_on_cache_change(owner: _Renewable) -> None:
    """Registers ``owner``, whose ``renew_eager()`` replaces its eager jit (and so forgets
    its traces) whenever :func:`caches_changed` is called."""
    _OWNERS.add(owner)


def caches_changed() -> None:
    """Called when a cache layer changed in this process: every eager jit is replaced, so
    its next call (or trace inside the caller's ``jax.jit``) looks the config up again.
    Functions the caller jitted keep their traces until they re-trace for their own
    reasons: a sweep at trace time must not make the step it runs in compile twice."""
    for owner in list(_OWNERS):
        owner.renew_eager()


class _TracerTypes(dict[type, bool]):
    """Whether a type is one of JAX's tracers, worked out once per type:
    ``isinstance(array, jax.core.Tracer)`` costs about 0.35 µs a call, a lookup 0.04 µs."""

    def __missing__(self, kind: type) -> bool:
        self[kind] = found = issubclass(kind, jax.core.Tracer)
        return found


_TRACED = _TracerTypes()


def eager_call(
    current: Callable[[], Callable[..., Any]],
    renew: Callable[[], None],
    inside: Callable[..., Any],
) -> Callable[..., Any]:
    """A kernel's ``__call__``: the jit ``current()`` returns, after one check that none
    of the variables that decide the config (:data:`jaxtune._core.settings.DECIDING`) changed
    since this step was made: nothing tells jaxtune when ``os.environ`` changes. On a
    change, ``renew()`` replaces the kernel's eager jit (and this step) and the call goes
    to the new jit, which traces and chooses again. The check compares the objects
    ``os.environ`` holds by identity, five dict lookups: about 0.15 µs.

    A positional argument that is a tracer (a call inside the caller's ``jax.jit``,
    ``jax.grad``...) goes to ``inside`` instead: the eager jit would trace the kernel
    again with tracers of its own, hiding that ``jax.grad`` differentiates the call."""
    jitted = current()
    environ, get, keys = _config.probe(_config.DECIDING)
    k0, k1, k2, k3, k4 = keys
    seen = _config.fingerprint(_config.DECIDING)
    s0, s1, s2, s3, s4 = map(get, keys)
    traced = _TRACED

    def call(*args: Any, **kwargs: Any) -> Any:
        if (
            os.environ is environ
            and get(k0) is s0
            and get(k1) is s1
            and get(k2) is s2
            and get(k3) is s3
            and get(k4) is s4
        ):
            for a in args:
                if traced[type(a)]:
                    return inside(*args, **kwargs)
            # jit's dispatch is quicker without an (empty) keyword dict to unpack.
            return jitted(*args, **kwargs) if kwargs else jitted(*args)
        return checked(*args, **kwargs)

    def checked(*args: Any, **kwargs: Any) -> Any:
        nonlocal s0, s1, s2, s3, s4
        if _config.fingerprint(_config.DECIDING) == seen:  # equal values, new objects
            if os.environ is environ:
                s0, s1, s2, s3, s4 = map(get, keys)
            if any(traced[type(a)] for a in args):
                return inside(*args, **kwargs)
            return jitted(*args, **kwargs)
        renew()
        return current()(*args, **kwargs)

    return call


def _overridden(values: Mapping[str, Any]) -> Any:
    return _OVERRIDDEN(tuple(sorted(values.items())))


_config.on_override(_overridden)
_cache.on_change(caches_changed)
_result.scope_context()  # made now, beside this module's user contexts


def eager_jit(
    fn: Callable[..., Any], call: Callable[..., Any], static_argnames: Iterable[str]
) -> Callable[..., Any]:
    """``jax.jit(call, inline=True)`` that jit sees with ``fn``'s signature (to place static
    arguments) and name."""

    def through(*args: Any, **kwargs: Any) -> Any:
        return call(*args, **kwargs)

    through.__signature__ = inspect.signature(fn)  # type: ignore[attr-defined]
    for attr in ("__name__", "__qualname__", "__doc__", "__module__"):
        setattr(through, attr, getattr(fn, attr, getattr(through, attr)))
    return jax.jit(through, static_argnames=tuple(static_argnames), inline=True)
