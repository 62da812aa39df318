"""The cache layers of the lookup order, and how a stored entry is judged for a call.

The order itself (explicit -> scope -> cross-host agreement -> user cache -> shared store
-> packaged -> (tune mode) sweep -> nearest (opt-in) -> default, or a miss) is one method,
:meth:`jaxtune._tuning.bound.BoundCall.choose`; it reads the layers through this module:
the scopes (:func:`scoped_entry`), the user cache with the shared store read through into
it and the packaged caches (:func:`cached_entry`), the nearest tuned shape
(:func:`nearest`).

Every stored config is checked against the call's pruned space (:class:`Fit`) before it is
used: an exact entry whose config is not in it is skipped with one warning, and the nearest
step borrows only a config of the new shape's pruned space. An entry tuned for other code of
the kernel (its code digest differs, :mod:`.digest`) is a miss: skipped, with one warning in
``cached`` mode; a sweep in ``tune`` mode replaces it. An entry tuned with another
jax/jaxlib/libtpu, or whose space now holds configs its sweep never measured, is stale: a
sweep (``tune`` mode) replaces it; otherwise it is used while its config is in the space,
with one warning per kernel in ``cached`` mode. An entry whose config keys are not the
space's (keys renamed) is ignored, with one warning per kernel in any mode. Why an entry
is stale is :mod:`.staleness`'s one vocabulary (:func:`~.staleness.judge`, which ``jaxtune
cache`` asks too); :class:`Fit` acts on it.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Hashable, Iterable, Mapping, Sequence
from typing import Any

import jax

from .._core import settings as _settings
from .._core.errors import warn_once
from .._core.vocabulary import Entry, Source, Stale, StaleReason, config_id
from .._distributed import agree as _agree
from .digest import KernelCode
from .result import active_scopes
from .staleness import in_space, judge, typed_config
from .state import TUNING_STATE
from .store import cache as _cache
from .store import shared as _shared

__all__ = [
    "Fit",
    "cached_entry",
    "candidates",
    "device_kind",
    "nearest",
    "scoped_entry",
]


@TUNING_STATE.memo("device kind", "the device kind of the default backend")
@functools.cache
def device_kind() -> str:
    """The device kind of the default backend (``"cpu"``, ``"TPU v5 lite"``, ``"NVIDIA H100"``)."""
    return str(jax.devices()[0].device_kind)


_MSG_OUTSIDE = (
    "jaxtune skips the {layer} entry of {kernel} for {key}: its config {config} is not in "
    "its space for these arguments, after prune (values are compared with their types: "
    "4.0, '4' and True are not 4). The space or prune changed since it was tuned, or the "
    "entry was edited; the lookup goes on to the next layer. Re-tune it "
    "(JAXTUNE_MODE=retune) or drop it (jaxtune cache prune --kernel {kernel})."
)

_MSG_CODE_CHANGED = (
    "jaxtune skips the {layer} entry of {kernel} for {key} (and any other of its entries "
    "tuned for the same old code): it was tuned for other code (stale: code changed; the kernel, or a function or Pallas kernel body it reaches in its "
    "package, was edited since). The lookup goes on without it, to the default config "
    "unless another layer has a current entry. Re-tune: JAXTUNE_MODE=tune (or `jaxtune tune "
    "-- python your_program.py`); `jaxtune cache prune --stale` drops such entries. A "
    "kernel that gives version= is compared by its version instead."
)


_MSG_STALE = (
    "jaxtune uses the {layer} entry of {kernel} for {key} although it is stale: {why} (said "
    "once per kernel; other keys may be stale too). Its config is still in the space, so it "
    "runs; refresh it: JAXTUNE_MODE=tune (or `jaxtune tune -- python your_program.py`) "
    "re-tunes stale entries."
)

_MSG_KEYS = (
    "jaxtune ignores the {layer} entry of {kernel} for {key} (and any other of its entries "
    "with the same keys): its config has the keys {keys}, but the kernel's space has "
    "{names} (config keys renamed since it was tuned?). The lookup goes on without it. "
    "Re-tune: JAXTUNE_MODE=tune (or `jaxtune tune -- python your_program.py`); `jaxtune "
    "cache prune --kernel {kernel}` drops the old entries."
)


class Fit:
    """The configs a kernel can run for one call: its pruned space for these arguments.

    A stored config is usable when it is one of them, value and type alike; an entry for
    another kernel version is ignored silently, one with other config keys with one
    warning, one tuned for other code of the kernel (``code``: its current digest) with one
    warning in cached mode. ``swept`` is the space a sweep would measure now (to tell an
    entry whose space gained configs); ``refresh``: a sweep may replace a stale entry now
    (``tune`` mode), so a stale entry is a miss (kept in :attr:`stale_hit`, should the
    sweep fail).
    """

    def __init__(
        self,
        kernel: str,
        version: str,
        space: Sequence[Mapping[str, Any]],
        *,
        code: KernelCode | None = None,
        swept: Sequence[Mapping[str, Any]] | None = None,
        refresh: bool = False,
    ) -> None:
        self.kernel = kernel
        self.version = version
        self.code = code
        self.names = frozenset(space[0]) if space else frozenset()
        self.swept = swept
        self.refresh = refresh
        #: The first stale entry a refreshing lookup passed over, with its layer and why.
        self.stale_hit: tuple[Entry, str, Stale] | None = None
        #: Why the entry ``usable`` last accepted is stale (``None``: it is current).
        self.last_stale: Stale | None = None
        #: The layer of the first entry passed over as tuned for other code (empty: none),
        #: so that a miss can say the entry is stale rather than absent.
        self.code_stale = ""
        self._space = space
        self._configs: frozenset[Hashable] | None = None  # built when first asked

    @property
    def typed_space(self) -> frozenset[Hashable]:
        """The space's configs as :func:`~.staleness.typed_config` gives them (built when
        first asked)."""
        if self._configs is None:
            self._configs = frozenset(typed_config(c) for c in self._space)
        return self._configs

    def holds(self, config: Mapping[str, Any]) -> bool:
        """Whether ``config`` is a config of the space."""
        return in_space(config, self.typed_space)

    def stale_code(self, entry: Entry) -> bool:
        """Whether ``entry`` was tuned for other code of the kernel (an entry without a
        digest is not: its code is unknown)."""
        return self.code is not None and self.code.changed(entry.code_digest)

    def matches(self, entry: Entry) -> bool:
        """Whether ``entry`` is for this kernel version, these config keys and this code."""
        if entry.kernel_version != self.version:
            return False
        first = next(judge(entry, code_changed=self.stale_code(entry), names=self.names), None)
        return first is None or first.reason not in (StaleReason.KEYS, StaleReason.CODE)

    def usable(self, entry: Entry | None, layer: str) -> bool:
        """Whether ``entry`` may be used as an exact entry; warns once when its config lies
        outside the space, or (in cached mode) when it was tuned for other code. Its
        staleness is :func:`~.staleness.judge`'s first reason, acted on here."""
        self.last_stale = None
        if entry is None or entry.kernel_version != self.version:
            return False
        stale = next(
            judge(
                entry,
                code_changed=self.stale_code(entry),
                names=self.names,
                space=self.typed_space,
                swept=self.swept,
            ),
            None,
        )
        reason = None if stale is None else stale.reason
        if reason is StaleReason.KEYS:
            if self.names and not any(set(entry.config) == set(c) for c in self._space):
                keys = ", ".join(sorted(map(str, entry.config))) or "none"
                self._warn_once(
                    entry,
                    layer,
                    "keys:" + keys,
                    _MSG_KEYS,
                    per_key=False,
                    keys=keys,
                    names=", ".join(sorted(self.names)),
                )
            return False
        if reason is StaleReason.CODE:
            self.code_stale = self.code_stale or layer
            if _settings.settings().mode == "cached":
                # Once per kernel and layer: every key of an edited kernel is stale at once.
                self._warn_once(entry, layer, "code", _MSG_CODE_CHANGED, per_key=False)
            return False
        if reason is StaleReason.OUTSIDE:
            self._warn_once(entry, layer, config_id(entry.config), _MSG_OUTSIDE)
            return False
        # A scope's entry is the caller's own choice: never stale for its toolchain or space.
        why = None if layer == "scope" else stale
        if why is not None:
            if self.refresh:  # a sweep replaces it now
                if self.stale_hit is None:
                    self.stale_hit = (entry, layer, why)
                return False
            settings = _settings.settings()
            # A recording (`jaxtune tune --`, `cache check`) reports stale entries itself.
            if settings.mode == "cached" and not settings.record:
                self._warn_once(entry, layer, "stale", _MSG_STALE, per_key=False, why=why.text)
        self.last_stale = why
        return True

    def _warn_once(
        self,
        entry: Entry,
        layer: str,
        what: str,
        message: str,
        *,
        per_key: bool = True,
        **extra: str,
    ) -> None:
        seen = (self.kernel, entry.device_kind, entry.key if per_key else "", layer, what)
        text = message.format(
            layer=layer,
            kernel=self.kernel,
            key=entry.key,
            config=config_id(entry.config),
            **extra,
        )
        warn_once(("lookup", *seen), text, stacklevel=3)


def scoped_entry(kernel: str, kind: str, key: str, fit: Fit) -> Entry | None:
    """The usable entry of the innermost ``with TuningResult`` scope that has one."""
    for scope in reversed(active_scopes()):
        entry = scope.lookup(kernel, kind, key)
        if fit.usable(entry, "scope"):
            return entry
    return None


def cached_entry(kernel: str, kind: str, key: str, fit: Fit) -> tuple[Entry, Source] | None:
    """The usable entry of the user cache (after reading the shared store through into it,
    on a miss), else of the first packaged cache that has one."""
    entry = _cache.user_cache().lookup(kernel, kind, key, version=fit.version)
    if fit.usable(entry, "user cache"):
        assert entry is not None
        return entry, "cache"
    # Only the process that writes the cache reads the store (process 0 of a job).
    if _agree.may_write_cache() and _shared.read_through(kernel, kind):
        entry = _cache.user_cache().lookup(kernel, kind, key, version=fit.version)
        if fit.usable(entry, "shared store"):
            assert entry is not None
            return entry, "cache"
    for layer in _cache.layers():
        entry = layer.lookup(kernel, kind, key, version=fit.version)
        if fit.usable(entry, "packaged"):
            assert entry is not None
            return entry, "packaged"
    return None


def candidates(kernel: str, kind: str) -> Iterable[Entry]:
    """Every tuned entry of this kernel on this device kind, user cache first."""
    yield from _cache.user_cache().entries_for(kernel, kind)
    for layer in _cache.layers():
        yield from layer.entries_for(kernel, kind)


def _distance(
    a: Sequence[tuple[str, tuple[int, ...]]], b: Sequence[tuple[str, tuple[int, ...]]]
) -> float | None:
    if len(a) != len(b):
        return None
    total = 0.0
    for (dt_a, sh_a), (dt_b, sh_b) in zip(a, b, strict=True):
        if dt_a != dt_b or len(sh_a) != len(sh_b):
            return None
        total += sum(abs(math.log(max(x, 1) / max(y, 1))) for x, y in zip(sh_a, sh_b, strict=True))
    return total


def nearest(
    kernel: str,
    kind: str,
    fit: Fit,
    shapes: Sequence[tuple[str, tuple[int, ...]]],
    statics: str,
) -> Entry | None:
    """The tuned entry whose shapes are closest (sum of |log ratio| over every dimension)
    among entries with the same dtypes, ranks and static arguments whose config is in ``fit``
    (the pruned space of the current arguments: ``prune`` accepts it for them)."""
    best: tuple[float, Entry] | None = None
    for entry in candidates(kernel, kind):
        if not fit.matches(entry) or entry.statics != statics:
            continue
        d = _distance(entry.shapes, shapes)
        if d is None or (best is not None and d >= best[0]):
            continue
        if fit.holds(entry.config):
            best = (d, entry)
    return None if best is None else best[1]
