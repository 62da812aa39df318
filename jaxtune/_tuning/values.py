"""The values of autotuned calls at run time, for sweeps that run on the program's values.

Inside ``jax.jit`` a kernel is traced with abstract arguments; the values it is called with
exist only when the compiled program runs. While a collector is active (the recording run
of ``jaxtune tune --``, or ``jaxtune.tune(fn, *arrays)`` running ``fn`` once), each traced
autotuned call gets a host callback (``jax.debug.callback``, which JAX keeps under
``grad``, ``vmap``, ``scan`` and ``shard_map``) that hands the call's values to the
collector: integer and boolean arrays always, floating-point ones while they fit
``JAXTUNE_VALUES_MB`` per call (the others stay abstract, and the sweep synthesises them).
Each (kernel, key) keeps up to ``JAXTUNE_VALUE_SETS`` distinct value sets, told apart by
their integer and boolean values alone. Outside a collector nothing is added to any
program.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import hashlib
import threading
from collections.abc import Callable, Iterator
from typing import Any

import jax
import numpy as np

from .._core import settings as _settings
from .._program import markers as _markers
from .bound import KernelOptions
from .signature import Signature, abstractify
from .state import TUNING_STATE
from .sweep.inputs import is_concrete, is_int_like, summarise

__all__ = [
    "Collected",
    "ValueSets",
    "collect",
    "collecting",
    "collector",
    "eager_call",
    "eager_signature",
    "set_file_collector",
]


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Collected:
    """One value set of a call: its arguments in the call's layout (numpy arrays where
    values were kept, ``jax.ShapeDtypeStruct`` where not), a summary of its integer and
    boolean values per argument, and the arguments left abstract (over the budget)."""

    kernel: str
    key: str
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    summary: dict[str, str]
    dropped: tuple[str, ...]


class ValueSets:
    """Distinct value sets per (kernel, key), up to ``limit`` each, handed to ``sink`` as
    they arrive (``sink=None``: kept in :attr:`sets`)."""

    def __init__(self, limit: int, sink: Callable[[Collected], None] | None = None) -> None:
        self.limit = limit
        self.sink = sink
        self.sets: dict[tuple[str, str], list[Collected]] = {}
        self._digests: dict[tuple[str, str], set[str]] = {}
        self._lock = threading.Lock()

    def full(self, kernel: str, key: str) -> bool:
        """Whether ``(kernel, key)`` has all the value sets it keeps."""
        return len(self._digests.get((kernel, key), ())) >= self.limit

    def add(
        self, kernel: KernelOptions, key: str, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> None:
        """Keeps the value set unless one with the same integer/boolean values is kept."""
        sig = kernel.bind(args, kwargs)
        digest = _int_digest(sig)
        pair = (kernel.kernel_id, key)
        with self._lock:
            seen = self._digests.setdefault(pair, set())
            if digest in seen or len(seen) >= self.limit:
                return
            seen.add(digest)
        collected = Collected(
            kernel=kernel.kernel_id,
            key=key,
            args=args,
            kwargs=kwargs,
            summary={name: summarise(sig.value(name)) for name in sig.dynamic},
            dropped=tuple(
                name
                for name in sig.dynamic
                if not all(is_concrete(x) for x in jax.tree_util.tree_leaves(sig.value(name)))
            ),
        )
        if self.sink is not None:
            self.sink(collected)
            return
        with self._lock:
            self.sets.setdefault(pair, []).append(collected)


def _int_digest(sig: Signature) -> str:
    """A digest of a call's integer and boolean values (shapes included)."""
    h = hashlib.blake2b(digest_size=16)
    for name in sig.dynamic:
        for leaf in jax.tree_util.tree_leaves(sig.value(name)):
            if is_concrete(leaf) and is_int_like(leaf):
                array = np.ascontiguousarray(np.asarray(leaf))
                h.update(f"{name}{array.dtype}{array.shape}".encode())
                h.update(array.tobytes())
    return h.hexdigest()


_ACTIVE: contextvars.ContextVar[ValueSets | None] = contextvars.ContextVar(
    "jaxtune_value_sets", default=None
)
_FILE: list[ValueSets] = TUNING_STATE.keep(
    "recorded values",
    list,
    "the recording's collector of value sets (``jaxtune tune --``), for every trace",
)


def set_file_collector(sets: ValueSets) -> None:
    """Makes ``sets`` the collector of every call this process traces (a recording)."""
    _FILE[:] = [sets]


@contextlib.contextmanager
def collecting() -> Iterator[ValueSets]:
    """Within: calls traced in this context collect their values into the yielded
    :class:`ValueSets` when the traced program runs."""
    sets = ValueSets(_settings.settings().value_sets)
    token = _ACTIVE.set(sets)
    try:
        yield sets
    finally:
        _ACTIVE.reset(token)


def collector() -> ValueSets | None:
    """The collector of calls traced now, if any."""
    if _markers.lowering_only_now():  # jaxtune.locate's traces, never run
        return None
    return _ACTIVE.get() or (_FILE[0] if _FILE else None)


#: The eager call being made (tune mode): the kernel and its concrete arguments.
_EAGER: contextvars.ContextVar[tuple[KernelOptions, tuple[Any, ...], dict[str, Any]] | None] = (
    contextvars.ContextVar("jaxtune_eager_call", default=None)
)


@contextlib.contextmanager
def eager_call(
    kernel: KernelOptions, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Iterator[None]:
    """Within: a trace of ``kernel``'s call (its eager jit's) may sweep on these arrays,
    the caller's (see :func:`eager_signature`)."""
    token = _EAGER.set((kernel, args, kwargs))
    try:
        yield
    finally:
        _EAGER.reset(token)


def eager_signature(kernel: KernelOptions, sig: Signature) -> Signature | None:
    """The eager call's own arguments bound, when ``sig`` (traced) is that call's trace
    (same kernel and key): a sweep then runs on the caller's arrays, not made-up ones.
    Taken once: a kernel the call reaches inside gets ``None``."""
    current = _EAGER.get()
    if current is None or current[0] is not kernel:
        return None
    _EAGER.set(None)
    concrete = kernel.bind(current[1], current[2])
    return concrete if concrete.key == sig.key else None


def collect(kernel: KernelOptions, sig: Signature) -> None:
    """Adds to the program being traced a host callback that hands this call's values to
    the active collector when it runs (nothing without a collector, for a bucketed call,
    whose sweep runs at its bucket's shape, or for a call without traced arrays)."""
    sets = collector()
    if sets is None or sig.actual is not None or sets.full(kernel.kernel_id, sig.key):
        return
    args, kwargs = sig.call_arguments()
    flat, tree = jax.tree_util.tree_flatten((args, kwargs))
    budget = _settings.settings().values_mb * 2**20
    template: list[Any] = []
    taken: list[int] = []
    for i, leaf in enumerate(flat):
        if not isinstance(leaf, jax.core.Tracer):
            template.append(leaf)
            continue
        template.append(abstractify(leaf))
        if is_int_like(leaf):
            taken.append(i)
        elif _is_float(leaf) and _nbytes(leaf) <= budget:
            budget -= _nbytes(leaf)
            taken.append(i)
    if not taken:
        return
    key = sig.key

    def got(*values: Any) -> None:
        full = list(template)
        for i, value in zip(taken, values, strict=True):
            full[i] = np.asarray(value)
        a, k = jax.tree_util.tree_unflatten(tree, full)
        sets.add(kernel, key, tuple(a), dict(k))

    jax.debug.callback(got, *(flat[i] for i in taken))


def _is_float(leaf: Any) -> bool:
    """Floating or complex, ml_dtypes' bfloat16 and float8 included (numpy does not count
    those as inexact); a typed PRNG key is neither."""
    dtype = leaf.dtype
    if jax.dtypes.issubdtype(dtype, jax.dtypes.extended):
        return False
    return bool(jax.dtypes.issubdtype(dtype, np.inexact))


def _nbytes(leaf: Any) -> int:
    return int(np.prod(leaf.shape, dtype=np.int64)) * np.dtype(leaf.dtype).itemsize
