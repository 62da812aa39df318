"""Eager calls at ``jax.jit``'s cost.

An autotuned kernel whose config keywords are known in advance is called through one
``jax.jit`` per kernel (:class:`EagerCalls`), installed as the ``__call__`` (a
``staticmethod``) of a class made for that kernel alone: an eager call goes straight into
jit's C++ dispatch, with no Python step before it. Any other kernel takes a Python step
first (its own checks), then :meth:`EagerCalls.call`, which renews the jit when a variable
that decides the config changed since it was made. The jit's trace picks the config
(exactly as a trace inside the user's ``jax.jit`` does), and
everything else that decides the config reaches jit's cache key through JAX user contexts:
``with TuningResult`` scopes (their own context), :func:`jaxtune._core.settings.override`
blocks (:data:`_OVERRIDDEN`) and explicit re-tuning (:data:`_GENERATION`). A change of the
caches (a sweep's entry, a write, a registered layer) and a changed ``JAXTUNE_*`` variable
that decides the config, once jaxtune reads the settings again (any trace of an autotuned
kernel, any jaxtune call), renew only the eager jits (:func:`caches_changed`), so the
caller's own jitted functions are not traced again. ``inline=True`` makes the jit vanish
into an enclosing trace, so inside the user's own ``jax.jit``, ``grad`` or ``vmap`` the
kernel's operations sit where they did without it; the kernel finds out whether it is
differentiated from the chain of traces
(:func:`~jaxtune._tuning.sweep_rules.under_differentiation`).
"""

from __future__ import annotations

import inspect
import weakref
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol

import jax

from .._core import settings as _settings
from .._core.errors import SettingsError
from . import result as _result
from . import values as _values
from .state import TUNING_STATE
from .store import cache as _cache

__all__ = [
    "EagerCalls",
    "bump_generation",
    "caches_changed",
    "eager_jit",
    "renew_on_cache_change",
]

# Part of jit's cache key: bumped after explicit tuning, so jitted functions (and the
# eager jits) re-trace and choose again.
_GENERATION = jax.make_user_context(default_value=0)
# Part of jit's cache key: the settings overridden in this context.
_OVERRIDDEN = jax.make_user_context(default_value=())


@TUNING_STATE.resets(
    "jit generation",
    "a count in jit's cache key (a JAX user context's global value), bumped after explicit "
    "tuning so that jitted functions re-trace; its reset bumps it too: no trace was made "
    "under the new count, as in a fresh process",
)
def bump_generation() -> None:
    """Makes every jitted function re-trace on its next call."""
    _GENERATION.set_global(_GENERATION.get_global() + 1)


class _Renewable(Protocol):
    def renew(self) -> None: ...


_OWNERS: weakref.WeakSet[Any] = TUNING_STATE.keep(
    "eager owners",
    weakref.WeakSet,
    "the kernels whose eager jit renews when a cache layer changes",
    never_reset="kernels register where they are defined",
)


def renew_on_cache_change(owner: _Renewable) -> None:
    """Registers ``owner``, whose ``renew()`` replaces its eager jit (and so forgets its
    traces) whenever :func:`caches_changed` is called."""
    _OWNERS.add(owner)


def caches_changed() -> None:
    """Called when a cache layer changed in this process: every eager jit is replaced, so
    its next call (or trace inside the caller's ``jax.jit``) looks the config up again.
    Functions the caller jitted keep their traces until they re-trace for their own
    reasons: a sweep at trace time must not make the step it runs in compile twice."""
    for owner in list(_OWNERS):
        owner.renew()


def _overridden(values: Mapping[str, Any]) -> Any:
    return _OVERRIDDEN(tuple(sorted(values.items())))


_settings.on_override(_overridden)
_settings.on_deciding_change(caches_changed)
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


class EagerCalls:
    """One kernel's eager calls: ``jax.jit`` of ``call`` (the kernel's call inside a trace,
    which chooses the config), renewed whenever the caches change (:func:`caches_changed`).

    ``fast``: ``kernel`` is called straight through the jit. Its class becomes a subclass
    made for it alone, whose ``__call__`` is the jit (a ``staticmethod``, so jit's C++
    dispatch is the whole eager call); renewing the jit replaces that ``__call__``.
    Otherwise the kernel's own ``__call__`` runs first and ends in :meth:`call`.
    """

    __slots__ = ("__weakref__", "_call", "_cls", "_fn", "_kernel", "_static", "deciding", "jit")

    def __init__(
        self,
        kernel: Any,
        fn: Callable[..., Any],
        call: Callable[..., Any],
        static_argnames: Iterable[str],
        *,
        fast: bool,
    ) -> None:
        self._fn, self._call, self._static = fn, call, tuple(static_argnames)
        self._kernel = kernel
        self._cls: type | None = None
        if fast:
            base = type(kernel)
            kernel.__class__ = self._cls = type(base.__name__, (base,), {"__slots__": ()})
        self.renew()
        renew_on_cache_change(self)

    def renew(self) -> None:
        """Replaces the jit with a fresh one (no traces), after a cache or a variable that
        decides the config changed."""
        #: The jit of the kernel's eager calls.
        self.jit = eager_jit(self._fn, self._call, self._static)
        #: The variables that decide the config, as they were when the jit was made.
        self.deciding = _settings.fingerprint(_settings.DECIDING)
        if self._cls is not None:  # the kernel's own class: jit's C++ dispatch
            # In tune mode a Python step first, so that a sweep at the trace sees the
            # caller's arrays (their values decide the work of many kernels).
            call = self._with_values if _sweeping() else self.jit
            self._cls.__call__ = staticmethod(call)  # type: ignore[method-assign]

    def _with_values(self, *args: Any, **kwargs: Any) -> Any:
        with _values.eager_call(self._kernel.options, args, kwargs):
            return self.jit(*args, **kwargs)

    def call(self, *args: Any, **kwargs: Any) -> Any:
        """An eager call, after the kernel's own checks: through the jit, renewed first
        when a variable that decides the config changed."""
        if _settings.fingerprint(_settings.DECIDING) != self.deciding:
            self.renew()
        if _sweeping():
            return self._with_values(*args, **kwargs)
        return self.jit(*args, **kwargs)


def _sweeping() -> bool:
    """Whether the mode sweeps on a miss (a bad setting is reported where it is used)."""
    try:
        return _settings.settings().mode in ("tune", "retune")
    except SettingsError:
        return False
