"""The exceptions jaxtune raises, and the warnings it gives (:func:`warn_once`).

Every message says what was expected, what arrived and what to do next. Callers that want
to catch anything jaxtune raises catch :class:`JaxtuneError`.
"""

from __future__ import annotations

import inspect
import os
import sys
import threading
import types
import warnings
from collections.abc import Hashable, Sequence
from typing import Any

from .state import CORE_STATE

__all__ = [
    "AgreementError",
    "CacheError",
    "ConfigSpaceError",
    "CustomCallTracingWarning",
    "FlagError",
    "JaxtuneError",
    "JaxtuneWarning",
    "MissError",
    "PlotsUnavailableError",
    "ProfileError",
    "SettingsError",
    "SignatureError",
    "SweepError",
    "SynthesisedValuesWarning",
    "TuningFailedError",
    "describe",
    "warn_once",
]


def describe(e: BaseException) -> str:
    """``"KeyError: 'x'"``; the type alone when the exception says nothing (no
    ``"StackError: "`` with an empty reason)."""
    text = str(e).strip()
    return f"{type(e).__name__}: {text}" if text else type(e).__name__


class JaxtuneError(Exception):
    """Base class of every error jaxtune raises on purpose."""


class SettingsError(JaxtuneError, ValueError):
    """An environment variable or settings override has a value jaxtune does not accept."""


class FlagError(JaxtuneError, ValueError):
    """A flag for XLA or libtpu is malformed, contradictory or unknown to the installed libtpu."""


class ConfigSpaceError(JaxtuneError, ValueError):
    """A kernel's configuration space, default or pruning is unusable."""


class SignatureError(JaxtuneError, TypeError):
    """The arguments of a call cannot be turned into a tuning key."""


class CacheError(JaxtuneError):
    """A cache file cannot be used (for example it was written by a newer jaxtune)."""


class MissError(JaxtuneError, LookupError):
    """A kernel has no tuned config for a call and ``JAXTUNE_ON_MISS=error`` says a miss is
    an error (the message names the kernel, the key, the device kind and how to tune it)."""


class SweepError(JaxtuneError):
    """A sweep could not be run at all."""


class TuningFailedError(SweepError):
    """Every configuration of a sweep failed; the message lists each reason.

    ``failures`` holds each config's :class:`jaxtune.Failure` (or the dropped
    :class:`jaxtune.Measurement`) in space order, the way an exception group holds its
    exceptions, so callers can inspect why each config failed.
    """

    def __init__(self, message: str, failures: Sequence[Any] = ()) -> None:
        super().__init__(message)
        self.failures: tuple[Any, ...] = tuple(failures)

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (str(self), self.failures))


class ProfileError(JaxtuneError):
    """A trace could not be captured or read (the message says which file or child, and why)."""


class PlotsUnavailableError(JaxtuneError, ImportError):
    """An HTML report was asked for, but matplotlib (the ``plots`` extra) is not installed."""


class AgreementError(JaxtuneError):
    """Processes of a ``jax.distributed`` job could not agree on a kernel's config: the
    leader (process 0) did not publish it in time (``JAXTUNE_AGREE_TIMEOUT``), died, or
    failed while deciding. The message names the kernel, the key and the leader."""


class JaxtuneWarning(UserWarning):
    """Something went wrong that jaxtune recovered from (a corrupt cache file, a fallback)."""


class SynthesisedValuesWarning(JaxtuneWarning):
    """A sweep ran on made-up values for integer or boolean arguments (group sizes,
    lengths, ids, masks), whose values often decide a kernel's work: the flow had only
    their shapes. The message names the arguments and how to give real values."""


class CustomCallTracingWarning(JaxtuneWarning):
    """Custom-call tracing (``--xla_xprof_enable_custom_call_tracing=true``) was in effect
    where a sweep would time configs: trace points change a kernel's schedule and time, so
    jaxtune removed the flag from the sweep's child (or, for a sweep in this process, which
    cannot turn it off, says its timings include the trace points)."""


# A traceback names an exception by its module and qualname: make it the public name
# (`jaxtune.SettingsError: ...`), not this private module's. Each of these is in
# jaxtune's __all__ (CustomCallTracingWarning is not, and keeps its module).
for _public in (
    AgreementError,
    CacheError,
    ConfigSpaceError,
    FlagError,
    JaxtuneError,
    JaxtuneWarning,
    MissError,
    PlotsUnavailableError,
    ProfileError,
    SettingsError,
    SignatureError,
    SweepError,
    SynthesisedValuesWarning,
    TuningFailedError,
):
    _public.__module__ = "jaxtune"


def _library_dirs() -> tuple[str, ...]:
    """Where the frames a warning skips live: jaxtune's own code, JAX's, and the standard
    library's threads (a thread of jaxtune's has no user frame; its warning keeps its
    ``stacklevel``)."""
    dirs = [os.path.dirname(os.path.dirname(os.path.abspath(__file__)))]  # jaxtune/
    for name in ("jax", "jaxlib"):
        module = sys.modules.get(name)
        file = getattr(module, "__file__", None)
        if file:
            dirs.append(os.path.dirname(os.path.abspath(file)))
    skip = tuple(d + os.sep for d in dirs)
    stdlib = os.path.dirname(os.path.abspath(threading.__file__))
    return (
        *skip,
        os.path.join(stdlib, "threading.py"),
        os.path.join(stdlib, "concurrent") + os.sep,
    )


def user_stacklevel(fallback: int) -> int:
    """The ``stacklevel`` for :func:`warnings.warn` in :func:`warn` that names the
    first frame outside jaxtune, JAX and Python's import machinery: the user's line that
    led there (a kernel call, a decoration, ``jax.jit(f)(x)``). ``fallback`` when there is
    none (a thread of jaxtune's own)."""
    skip = _library_dirs()
    here = inspect.currentframe()  # this function's frame
    caller = here.f_back if here is not None else None
    # The caller's caller (warn_once's or warn's): stacklevel 2 there.
    frame: types.FrameType | None = caller.f_back if caller is not None else None
    level = 2
    while frame is not None:
        name = frame.f_code.co_filename
        if "importlib" in name and "_bootstrap" in name:
            frame = frame.f_back  # warnings.warn does not count import machinery's frames
            continue
        if not (name.startswith(skip) or name.startswith("<frozen ")):
            return level
        frame = frame.f_back
        level += 1
    return fallback


def warn(message: str, category: type[Warning] = JaxtuneWarning, *, stacklevel: int = 1) -> None:
    """:func:`warnings.warn` naming the user's line that led to the warning: the first
    frame outside jaxtune and JAX (see :func:`user_stacklevel`); without one (a thread of
    jaxtune's), ``stacklevel``, counted as :func:`warnings.warn` counts it from the
    caller's frame."""
    warnings.warn(message, category, stacklevel=user_stacklevel(stacklevel + 1))


_WARNED_LOCK = threading.Lock()
_WARNED: set[Hashable] = CORE_STATE.keep(
    "warned",
    set,
    "the keys this process already warned about (:func:`warn_once`)",
    lock=_WARNED_LOCK,
)


def warn_once(
    key: Hashable,
    message: str,
    category: type[Warning] = JaxtuneWarning,
    *,
    stacklevel: int = 1,
) -> bool:
    """Warns ``message`` the first time this process meets ``key``, never again; returns
    whether it warned. One registry for every warn-once in jaxtune, so a key starts with
    what it is about (``("uncarried", kernel, ...)``). The warning names the user's line
    that led to it: the first frame outside jaxtune and JAX; without one (a thread of
    jaxtune's), ``stacklevel``, counted as :func:`warnings.warn` counts it from the
    caller's frame.

    Examples:
        >>> import warnings
        >>> key = ("example", object())
        >>> with warnings.catch_warnings(record=True) as caught:
        ...     warnings.simplefilter("always")
        ...     said = [warn_once(key, "said once") for _ in range(2)]
        >>> said, [str(w.message) for w in caught]
        ([True, False], ['said once'])
    """
    with _WARNED_LOCK:
        if key in _WARNED:
            return False
        _WARNED.add(key)
    warn(message, category, stacklevel=stacklevel + 1)
    return True
