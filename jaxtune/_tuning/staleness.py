"""Why a stored entry is stale: one vocabulary for the lookup, a recording and ``jaxtune cache``.

An entry is stale for one of the :class:`StaleReason`\\ s, and :func:`judge` is the one function
that says which hold, in the order the lookup acts on them (:class:`~.lookup.Fit`): an entry
whose config keys are not the space's is ignored, one tuned for other code of the kernel is a
miss, one whose config is outside the space is skipped; one tuned with another toolchain, or
whose space now holds configs its sweep never measured, is used (with a warning) until a
sweep replaces it. What a caller knows decides what is judged: ``jaxtune cache`` knows the
code as it is on disk but not the space, so it asks about the code and the toolchain only.

:func:`wrong_pass` is the rule for the pass an entry timed: an entry of the forward pass
alone does not serve a call whose sweep times forward and backward (the lookup's tune mode,
``jaxtune.tune``, ``jaxtune tune --`` and ``cache check`` all ask it).

Nothing here imports JAX: the command line judges entries without it.
"""

from __future__ import annotations

from collections.abc import Container, Hashable, Iterator, Mapping, Sequence
from typing import Any, NamedTuple

from .._core import versions as _versions
from .._core.vocabulary import Config, Entry, RecordedCall, Stale, StaleReason
from .state import TUNING_STATE

__all__ = [
    "Stale",
    "in_space",
    "judge",
    "means",
    "reason_of",
    "recorded_reason",
    "toolchain",
    "toolchain_text",
    "typed_config",
    "wrong_pass",
]


class _Words(NamedTuple):
    #: What a :class:`Stale` of the reason says (empty: made for each entry, by :func:`judge`).
    text: str
    #: What the reason means for an entry: what the lookup and tune mode do with it.
    means: str


#: Each reason's words: the one table the lookup's warnings, recordings and ``jaxtune
#: cache`` print.
_WORDS = {
    StaleReason.KEYS: _Words(
        "config keys renamed",
        "tuned for a space with other config keys, so a lookup ignores it",
    ),
    StaleReason.CODE: _Words(
        "code changed",
        "tuned for other code of the kernel than the code here, so a lookup passes it over "
        "(a miss)",
    ),
    StaleReason.OUTSIDE: _Words(
        "config outside the space",
        "its config is not in the call's space, so a lookup skips it",
    ),
    StaleReason.TOOLCHAIN: _Words(
        "",
        "tuned with another JAX, jaxlib or libtpu, so a lookup uses it with a warning and "
        "tune mode re-tunes it",
    ),
    StaleReason.NEW_CONFIGS: _Words(
        "",
        "its space holds configs its sweep never measured, so a lookup uses it with a "
        "warning and tune mode re-tunes it",
    ),
    StaleReason.WRONG_PASS: _Words(
        "timed the forward pass only; the call is differentiated",
        "it timed the forward pass alone, so tune mode tunes a differentiated call again",
    ),
}
_TOOLCHAIN_HEAD = "tuned with another toolchain ("
_NEW_TAIL = " in the space since it was tuned"


def _fixed(reason: StaleReason) -> Stale:
    return Stale(reason=reason, text=_WORDS[reason].text)


def means(reason: StaleReason) -> str:
    """What ``reason`` means for an entry (``jaxtune cache import`` says it of each stale
    entry it imported): ``"tuned with another JAX, jaxlib or libtpu, so a lookup uses it
    with a warning and tune mode re-tunes it"``."""
    return _WORDS[reason].means


def judge(
    entry: Entry,
    *,
    code_changed: bool,
    names: frozenset[str] | None = None,
    space: Container[Hashable] | None = None,
    swept: Sequence[Mapping[str, Any]] | None = None,
) -> Iterator[Stale]:
    """Each reason ``entry`` is stale, in the order the lookup acts on them (lazily: a
    caller that needs the first one computes no more).

    Args:
        entry: the stored entry.
        code_changed: whether it was tuned for other code of the kernel (the caller's
            judgement: the lookup compares digests, ``jaxtune cache`` reads the source).
        names: the config keys of the call's space (``None``: not compared).
        space: the call's pruned space, each config as :func:`typed_config` gives it
            (``None``: not asked).
        swept: the space a sweep would measure now (``None``: not compared).
    """
    if names is not None and set(entry.config) != names:
        yield _fixed(StaleReason.KEYS)
    if code_changed:
        yield _fixed(StaleReason.CODE)
    if space is not None and not in_space(entry.config, space):
        yield _fixed(StaleReason.OUTSIDE)
    old = toolchain(entry)
    if old is not None:
        yield old
    new = _new_configs(entry, swept) if swept is not None else 0
    if new:
        text = f"{new} new config{'s' if new != 1 else ''}{_NEW_TAIL}"
        yield Stale(reason=StaleReason.NEW_CONFIGS, text=text)


def toolchain(entry: Entry) -> Stale | None:
    """``entry``'s staleness for the toolchain: tuned with another jax/jaxlib/libtpu (one
    that recorded no versions is not: its toolchain is unknown)."""
    if not _versions.stale(dict(entry.versions)):
        return None
    return Stale(reason=StaleReason.TOOLCHAIN, text=toolchain_text(entry.versions))


def toolchain_text(recorded: Mapping[str, str | None]) -> str:
    """How the toolchain an entry was tuned with differs from this process's:
    ``"tuned with another toolchain (jax 0.4.1, now 0.4.30)"``."""
    now = _versions.toolchain()
    changed = [
        f"{name} {recorded.get(name) or '?'}, now {now[name] or 'none'}"
        for name in ("jax", "jaxlib", "libtpu")
        if recorded.get(name) != now[name]
    ]
    return _TOOLCHAIN_HEAD + "; ".join(changed) + ")"


def wrong_pass(entry_timing: str, timed_now: str) -> Stale | None:
    """Whether an entry that timed ``entry_timing`` serves a call whose sweep would time
    ``timed_now``: not when it timed the forward pass alone and the sweep would time
    forward and backward (``vjp``), since the call is differentiated."""
    if timed_now == "vjp" and entry_timing == "forward":
        return _fixed(StaleReason.WRONG_PASS)
    return None


def recorded_reason(call: RecordedCall) -> StaleReason | None:
    """Why the entry behind a recorded call is stale (``None``: it is not, or there is
    none): the reason the recording keeps, or, in a recording written before it kept one,
    the reason its words give (:func:`reason_of`, the only reader of the words)."""
    if call.stale_reason is not None:
        return call.stale_reason
    return reason_of(call.stale)


def reason_of(text: str) -> StaleReason | None:
    """The reason a staleness text gives (the words :func:`judge` writes); ``None`` for an
    empty or unknown text. Only for recordings written before a recorded call kept its
    reason: everything else carries the :class:`Stale` value itself."""
    for reason, words in _WORDS.items():
        if words.text and text == words.text:
            return reason
    if text.startswith(_TOOLCHAIN_HEAD):
        return StaleReason.TOOLCHAIN
    if text.endswith(_NEW_TAIL):
        return StaleReason.NEW_CONFIGS
    return None


def _typed(value: Any) -> Hashable:
    """A value with its type, so that ``True``, ``1`` and ``1.0`` differ (they are equal in
    Python, and a kernel given one for another may compile something else)."""
    if isinstance(value, tuple):
        return (tuple, tuple(_typed(v) for v in value))
    return (type(value), value)


def in_space(config: Mapping[str, Any], space: Container[Hashable]) -> bool:
    """Whether ``config`` is one of ``space``'s (configs as :func:`typed_config` gives them;
    a config with an unhashable value, read from a file, is none of them)."""
    try:
        return typed_config(config) in space
    except TypeError:
        return False


def typed_config(config: Mapping[str, Any]) -> Hashable:
    """``config`` as a hashable value whose values keep their types (see :class:`~.lookup.Fit`).

    Raises:
        TypeError: a value is unhashable (read from a file).
    """
    return tuple(sorted((str(k), _typed(v)) for k, v in config.items()))


_NEW: dict[tuple[Any, ...], int] = TUNING_STATE.keep(
    "new configs",
    dict,
    "(kernel, version, device kind, key, created, swept-space size...) -> new configs "
    "(worked out once per process, not once per trace)",
)


def _new_configs(entry: Entry, swept: Sequence[Config] | Sequence[Mapping[str, Any]]) -> int:
    """How many configs of ``swept`` (the space a sweep would measure now) ``entry``'s sweep
    never measured because they were not in its space then; 0 when that cannot be told.
    Worked out once per process for each entry and space size."""
    if not entry.space_size:  # an entry older than the field
        return 0
    memo = (
        entry.kernel,
        entry.kernel_version,
        entry.device_kind,
        entry.key,
        entry.created,
        entry.space_size,
        len(entry.measurements),
        len(swept),
    )
    new = _NEW.get(memo)
    if new is None:
        new = _count_new(entry, swept)
        if len(_NEW) >= 4096:
            _NEW.clear()
        _NEW[memo] = new
    return new


def _count_new(entry: Entry, swept: Sequence[Mapping[str, Any]]) -> int:
    measured: set[Hashable] = set()
    for m in entry.measurements:
        try:
            measured.add(typed_config(m.config))
        except TypeError:
            continue
    if len(measured) >= entry.space_size:  # it measured its whole space: compare configs
        new = 0
        for c in swept:
            try:
                new += typed_config(c) not in measured
            except TypeError:
                continue
        return new
    # Measurements stripped, or a search that measured part of the space: compare sizes.
    return max(0, len(swept) - entry.space_size)
