"""A :class:`TuningResult` (the entries a scope tuned, saved to and loaded from a file), the
scopes in force, and the text table of entries.

Its entries and their measurements are :mod:`jaxtune._core.vocabulary`'s values; the file is
:mod:`.store.result_files`'s layout, written through :mod:`jaxtune._core.codec` (msgpack only:
loading never runs code).
"""

from __future__ import annotations

import contextvars
import itertools
import os
import pathlib
import threading
from collections.abc import Iterator, Mapping
from typing import Any

from .._core.codec import atomic_write, read_bounded
from .._core.errors import CacheError
from .._core.vocabulary import Entry, EntryId
from .state import TUNING_STATE
from .store import result_files as results_file
from .store.result_files import records

__all__ = [
    "TuningResult",
    "active_scopes",
]


_SCOPES: contextvars.ContextVar[tuple[TuningResult, ...]] = contextvars.ContextVar(
    "jaxtune_scopes", default=()
)
_IDS = itertools.count(1)
_JIT_CONTEXT: list[Any] = TUNING_STATE.keep(
    "scope context",
    list,
    "the JAX user context of the scopes (made when first asked for; see scope_context)",
    never_reset="made once: the eager jits key on it",
)
_JIT_CONTEXT_LOCK = threading.Lock()


def scope_context() -> Any:
    """The JAX user context that holds the ids of the scopes in force: part of jit's cache
    key, so entering or leaving a scope re-traces jitted functions. Made at the first call
    (JAX imported then, not at this module's import, so that ``jaxtune cache`` runs
    without JAX); the eager module asks for it when it is imported, beside its own."""
    with _JIT_CONTEXT_LOCK:
        if not _JIT_CONTEXT:
            import jax

            _JIT_CONTEXT.append(jax.make_user_context(default_value=()))
        return _JIT_CONTEXT[0]


def active_scopes() -> tuple[TuningResult, ...]:
    """The ``with TuningResult`` scopes in force, innermost last."""
    return _SCOPES.get()


class TuningResult(Mapping[EntryId, Entry]):
    """An immutable mapping ``(kernel, device kind, key) -> Entry``.

    ``with result:`` makes its configs win over every cache inside the block (jitted
    functions re-trace); ``a | b`` merges, the right side winning; ``dumps``/``loads`` and
    ``save``/``load`` round-trip through msgpack, failures included.

    Examples:
        >>> empty = TuningResult()
        >>> len(empty | empty)
        0
    """

    __slots__ = ("_entries", "_id", "_tokens", "untuned")

    def __init__(
        self, entries: Mapping[EntryId, Entry] | None = None, *, untuned: tuple[Any, ...] = ()
    ) -> None:
        #: Pallas kernels that ``jaxtune.tune`` found without a tuning space (KernelSites).
        self.untuned: tuple[Any, ...] = tuple(untuned)
        self._entries: dict[EntryId, Entry] = dict(entries or {})
        for eid, entry in self._entries.items():
            if eid != (entry.kernel, entry.device_kind, entry.key):
                raise ValueError(f"entry id {eid} does not match its entry {entry.key!r}")
        self._id = next(_IDS)
        self._tokens: list[Any] = []

    @classmethod
    def of(cls, *entries: Entry) -> TuningResult:
        """A result holding ``entries`` (later ones win on the same id)."""
        return cls({(e.kernel, e.device_kind, e.key): e for e in entries})

    def __getitem__(self, eid: EntryId) -> Entry:
        return self._entries[eid]

    def __iter__(self) -> Iterator[EntryId]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def __repr__(self) -> str:
        return f"TuningResult({len(self)} entries)"

    def __or__(self, other: object) -> TuningResult:
        if not isinstance(other, TuningResult):
            return NotImplemented
        return TuningResult(
            {**self._entries, **other._entries}, untuned=self.untuned + other.untuned
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, TuningResult):
            return NotImplemented
        return self._entries == other._entries

    __hash__ = None  # type: ignore[assignment]

    def __enter__(self) -> TuningResult:
        scopes = _SCOPES.get()
        token = _SCOPES.set((*scopes, self))
        jit_ctx = scope_context()(tuple(s._id for s in (*scopes, self)))
        jit_ctx.__enter__()
        self._tokens.append((token, jit_ctx))
        return self

    def __exit__(self, *exc: object) -> None:
        token, jit_ctx = self._tokens.pop()
        jit_ctx.__exit__(*exc)
        _SCOPES.reset(token)

    def lookup(self, kernel: str, device_kind: str, key: str) -> Entry | None:
        """The entry for exactly this kernel, device kind and key, or ``None``."""
        return self._entries.get((kernel, device_kind, key))

    def entries_for(self, kernel: str, device_kind: str) -> list[Entry]:
        """Every entry of one kernel on one device kind."""
        return [e for (k, d, _), e in self._entries.items() if k == kernel and d == device_kind]

    def dumps(self) -> bytes:
        """msgpack bytes holding every entry (measurements and failures included)."""
        return results_file.dumps(self._entries.values())

    @classmethod
    def loads(cls, data: bytes) -> TuningResult:
        """Inverse of :meth:`dumps`.

        Raises:
            CacheError: the bytes are not a jaxtune result, or come from a newer schema.
        """
        entries = records(data)
        try:
            return cls.of(*(Entry.from_dict(e) for e in entries))
        except CacheError as e:
            raise CacheError(f"malformed TuningResult entry ({e}); nothing was loaded.") from e

    def save(self, path: str | os.PathLike[str]) -> pathlib.Path:
        """Writes :meth:`dumps` to ``path`` atomically and returns the path."""
        target = pathlib.Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(target, self.dumps())
        return target

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> TuningResult:
        """Reads a file written by :meth:`save`.

        Raises:
            CacheError: the file cannot be read (the message says why) or is not a result.
        """
        try:
            data = read_bounded(pathlib.Path(path))
        except OSError as e:
            raise CacheError(f"cannot read the TuningResult file {path}: {e}") from e
        try:
            return cls.loads(data)
        except CacheError as e:
            raise CacheError(f"the TuningResult file {path}: {e}") from e

    def table(self) -> str:
        """An aligned table for people: kernel, device, key, default, best, speedup, config."""
        return format_table(list(self._entries.values()))

    def to_html(self) -> str:
        """One self-contained HTML page: per kernel and key, each config's time with its
        spread (a heatmap when the space has two knobs), failures with their reasons, the
        winner and the default marked. Needs ``pip install 'jaxtune[plots]'``.

        Raises:
            PlotsUnavailableError: matplotlib is not installed.
        """
        from .report_html import sweep_html

        return sweep_html(self._entries.values())


def format_table(
    entries: list[Entry], *, stale: set[EntryId] | Mapping[EntryId, str] | None = None
) -> str:
    """Aligned text table of entries (each time column in one unit, rows wrapped to fit
    120 columns), each followed by how its config won; ``stale`` ids are marked
    ``(stale)``, or ``(stale: why)`` where ``stale`` maps them to why. The config column
    lists the knobs the sweep varied, in the order the kernel's author wrote them, then
    those it held fixed."""
    if not entries:
        return "(no tuned entries)"
    from .._render import text, units
    from .explain import decision_text

    ordered = sorted(entries, key=lambda e: (e.kernel, e.device_kind, e.key))
    unit, fmt = units.time_column(
        [e.default_time_us for e in ordered] + [e.time_us for e in ordered]
    )
    header = (
        "kernel",
        "device",
        "key",
        f"default {unit}",
        f"best {unit}",
        "speedup",
        "pass",
        "config",
    )
    rows = []
    decided = []
    for e in ordered:
        speed = f"{e.speedup:.2f}x" if e.speedup else "-"
        mark = ""
        if stale and (e.kernel, e.device_kind, e.key) in stale:
            why = stale.get((e.kernel, e.device_kind, e.key)) if isinstance(stale, Mapping) else ""
            mark = f" (stale: {why})" if why else " (stale)"
        rows.append(
            (
                e.kernel + mark,
                e.device_kind,
                e.key,
                fmt(e.default_time_us),
                fmt(e.time_us),
                speed,
                e.pass_text,
                stored_config_text(e),
            )
        )
        decided.append((decision_text(e), e.values_text))
    head, *lines = text.blocks(header, rows, fixed=(3, 4, 5, 6))
    # Each entry's decision and values on the lines after its row: the table stays narrow.
    for block, (why, values) in zip(lines, decided, strict=True):
        head += block
        if why:
            head += text.paragraph(f"  decided: {why}")
        if values:
            head += text.paragraph(f"  values: {values}")
    return "\n".join(head)


def stored_config_text(entry: Entry) -> str:
    """The stored config, the knobs its sweep varied first (in the order the kernel's
    author wrote them), then those every measured config shared: ``block_q=256,
    block_k=128 (fixed: block_b=1)``."""
    from .._render import configs

    measured = [m.config for m in entry.measurements]
    if len(measured) < 2:
        return configs.text(entry.config)
    varying, fixed = configs.knobs([*measured, entry.config])
    shown = configs.text(entry.config, varying)
    held = {k: v for k, v in fixed.items() if k in entry.config}
    if not held:
        return shown
    return f"{shown} ({configs.fixed_text(held)})" if shown else configs.fixed_text(held)
