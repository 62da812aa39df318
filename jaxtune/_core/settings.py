"""Environment-backed settings: every ``JAXTUNE_*`` variable is parsed and validated here.

:func:`settings` parses the environment again whenever a variable it reads or an override
has changed since its last call (it runs several times per trace-time lookup; it compares
:func:`fingerprint`, the variables' current values, with the last parse's), so a program
or a test may change ``os.environ`` at any point. Nothing is hooked into the process. :func:`override` layers values on top of the
environment for the current thread of control, which is how tests pin a mode without
touching the environment of other tests.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import os
import pathlib
import sys
import types
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Literal

from .errors import SettingsError
from .setting_values import BUDGET_ALLOWED as _BUDGET_ALLOWED
from .setting_values import bounded as _bounded
from .setting_values import budget as _budget
from .setting_values import choice as _choice
from .setting_values import directory as _directory
from .setting_values import flag as _flag
from .setting_values import level as _level
from .setting_values import remote as _remote
from .setting_values import seconds as _seconds

__all__ = [
    "VARIABLES",
    "Settings",
    "Variable",
    "changed_since_jax_import",
    "default_cache_dir",
    "describe",
    "fingerprint",
    "on_deciding_change",
    "on_override",
    "override",
    "remember_environment",
    "settings",
]

Mode = Literal["off", "cached", "tune", "retune"]
OnMiss = Literal["default", "warn", "error"]
Isolation = Literal["process", "inline"]


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Settings:
    """The value of every jaxtune setting, after validation."""

    mode: Mode
    cache_dir: pathlib.Path
    profile: bool
    profile_dir: pathlib.Path
    isolation: Isolation
    timeout: float
    verbose: int
    nearest: bool = False
    agree_timeout: float = 300.0
    lock_timeout: float = 60.0
    record: str = ""
    record_stop: bool = False
    #: ``JAXTUNE_RECORD_SETTLE``: with ``record_stop``, seconds without a new trace or
    #: compilation after which the recorded program is stopped.
    record_settle: float = 3.0
    #: ``JAXTUNE_PROFILE_LLO``: ``False`` (``jaxtune profile --no-llo``) runs no LLO
    #: analysis in automatic profiles, whatever a decorator's ``llo``.
    profile_llo: bool = True
    #: ``JAXTUNE_BUDGET`` as ``(configs, seconds)``, one of them set; ``None``: unset.
    budget: tuple[int | None, float | None] | None = None
    #: ``JAXTUNE_TIMER``: the timer sweeps use unless a kernel names one.
    timer: str = "auto"
    #: ``JAXTUNE_ON_MISS``: what a traced call with no tuned config does.
    on_miss: OnMiss = "default"
    #: ``JAXTUNE_REMOTE_CACHE``: the shared store (a URL or an absolute directory), or "".
    remote_cache: str = ""
    #: ``JAXTUNE_REMOTE_TIMEOUT``: seconds one operation on the shared store may take.
    remote_timeout: float = 5.0
    #: ``JAXTUNE_VALUE_SETS``: distinct value sets of one call a recording keeps and a
    #: sweep times as a mix.
    value_sets: int = 4
    #: ``JAXTUNE_VALUES_MB``: MiB of floating-point values a recording keeps per call
    #: (integer and boolean values are always kept).
    values_mb: float = 64.0
    #: ``JAXTUNE_COMPILE_CACHE``: ``"1"`` (JAX's persistent compilation cache in the
    #: sweep's child, under the user cache directory), ``"0"`` (none), or a directory.
    compile_cache: str = "1"
    #: ``JAXTUNE_LOWERING_PROCESSES``: ``"auto"`` (on a TPU v5e or v6e, processes that
    #: lower a sweep's configs for the chip where that takes long), ``"0"`` (none), or how
    #: many.
    lowering_processes: str = "auto"


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Variable:
    """One environment variable: its name, the field it fills, how it parses, its default."""

    name: str
    field: str
    allowed: str
    default: str
    parse: Callable[[str], Any]
    doc: str


def _flag_variable(name: str, field: str, doc: str, default: str = "0") -> Variable:
    """A ``0``/``1`` variable (default ``0`` unless given)."""
    return Variable(
        name=name, field=field, allowed="0, 1", default=default, parse=_flag(name), doc=doc
    )


def default_cache_dir() -> str:
    """``$XDG_CACHE_HOME/jaxtune``, else ``~/.cache/jaxtune``."""
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = pathlib.Path(xdg) if xdg else pathlib.Path.home() / ".cache"
    return str(base / "jaxtune")


def _lowering_processes(raw: str) -> str:
    """``auto`` or a whole number from 0 to 64."""
    raw = raw.strip()
    if raw == "auto":
        return raw
    return str(
        _bounded("JAXTUNE_LOWERING_PROCESSES", 0, 64, "auto, or a whole number", whole=True)(raw)
    )


def _compile_cache(raw: str) -> str:
    """``0``, ``1`` or a directory (as :func:`~.setting_values.directory` checks it)."""
    raw = raw.strip()
    if raw in ("0", "1"):
        return raw
    return str(_directory("JAXTUNE_COMPILE_CACHE")(raw))


VARIABLES: tuple[Variable, ...] = (
    Variable(
        name="JAXTUNE_MODE",
        field="mode",
        allowed="off, cached, tune, retune",
        default="cached",
        parse=_choice("JAXTUNE_MODE", ("off", "cached", "tune", "retune")),
        doc="off: defaults only, caches ignored; cached: never sweeps; "
        "tune: sweep on a cache miss; retune: sweep always.",
    ),
    Variable(
        name="JAXTUNE_CACHE_DIR",
        field="cache_dir",
        allowed="a directory",
        default="$XDG_CACHE_HOME/jaxtune or ~/.cache/jaxtune",
        parse=_directory("JAXTUNE_CACHE_DIR", file_ok=True),
        doc="Where tuned configurations are stored.",
    ),
    _flag_variable(
        "JAXTUNE_PROFILE",
        "profile",
        "1 profiles the first call per signature of every @profiled function.",
    ),
    _flag_variable(
        "JAXTUNE_PROFILE_LLO",
        "profile_llo",
        "Set by `jaxtune profile --no-llo`: 0 leaves the LLO analysis (and its flag) out "
        "of automatic profiles, whatever a @profiled function's llo.",
        default="1",
    ),
    Variable(
        name="JAXTUNE_PROFILE_DIR",
        field="profile_dir",
        allowed="a directory",
        default="./jaxtune-profiles",
        parse=_directory("JAXTUNE_PROFILE_DIR"),
        doc="Where automatic profiles and their reports are written.",
    ),
    Variable(
        name="JAXTUNE_ISOLATION",
        field="isolation",
        allowed="process, inline",
        default="process",
        parse=_choice("JAXTUNE_ISOLATION", ("process", "inline")),
        doc="process: sweeps run in a child process; inline: in this process, no crash isolation.",
    ),
    Variable(
        name="JAXTUNE_TIMEOUT",
        field="timeout",
        allowed="a positive number of seconds",
        default="60",
        parse=_seconds("JAXTUNE_TIMEOUT"),
        doc="Seconds one configuration of a sweep may take before it is marked failed.",
    ),
    Variable(
        name="JAXTUNE_VERBOSE",
        field="verbose",
        allowed="0, 1, 2",
        default="0",
        parse=_level("JAXTUNE_VERBOSE"),
        doc="0: quiet; 1: one line per sweep and per chosen config; 2: also every config.",
    ),
    _flag_variable("JAXTUNE_NEAREST", "nearest", "1: nearest-shape configs for every kernel."),
    Variable(
        name="JAXTUNE_AGREE_TIMEOUT",
        field="agree_timeout",
        allowed="a positive number of seconds",
        default="300",
        parse=_seconds("JAXTUNE_AGREE_TIMEOUT"),
        doc="With jax.distributed initialised: seconds a process waits for another (the "
        "leader's config, a share of a sharded sweep) before raising AgreementError.",
    ),
    Variable(
        name="JAXTUNE_LOCK_TIMEOUT",
        field="lock_timeout",
        allowed="a positive number of seconds",
        default="60",
        parse=_seconds("JAXTUNE_LOCK_TIMEOUT"),
        doc="Seconds a cache write (or moving a corrupt cache file aside) waits for another "
        "process's lock on the file; then it goes on without writing, with one warning.",
    ),
    Variable(
        name="JAXTUNE_RECORD",
        field="record",
        allowed="a file path, or empty",
        default="",
        parse=str.strip,
        doc="Set by `jaxtune tune` in the program it runs: the file every autotuned call "
        "is recorded to. Not meant to be set by hand.",
    ),
    _flag_variable(
        "JAXTUNE_RECORD_STOP",
        "record_stop",
        "Set by `jaxtune tune`: 1 stops the recorded program once it has settled "
        "(JAXTUNE_RECORD_SETTLE).",
    ),
    Variable(
        name="JAXTUNE_RECORD_SETTLE",
        field="record_settle",
        allowed="a positive number of seconds",
        default="3",
        parse=_seconds("JAXTUNE_RECORD_SETTLE"),
        doc="Set by `jaxtune tune --settle`: with JAXTUNE_RECORD_STOP=1, the recorded program "
        "is stopped once it has traced and compiled nothing new for this many seconds after "
        "its first autotuned call.",
    ),
    Variable(
        name="JAXTUNE_VALUE_SETS",
        field="value_sets",
        allowed="a whole number from 0 to 16",
        default="4",
        parse=_bounded("JAXTUNE_VALUE_SETS", 0, 16, "a whole number", whole=True),
        doc="`jaxtune tune --`: how many distinct value sets of one autotuned call (its "
        "integer and boolean arguments' values) the recording keeps; the sweep times them "
        "together, as a mix; 0 records none (docs/values.md).",
    ),
    Variable(
        name="JAXTUNE_VALUES_MB",
        field="values_mb",
        allowed="a number of MiB from 0 to 4096",
        default="64",
        parse=_bounded("JAXTUNE_VALUES_MB", 0, 4096, "a number of MiB"),
        doc="`jaxtune tune --`: MiB of floating-point argument values the recording keeps "
        "per call (integer and boolean values are always kept); floats past it are "
        "synthesised, and the table says so (docs/values.md).",
    ),
    Variable(
        name="JAXTUNE_BUDGET",
        field="budget",
        allowed=_BUDGET_ALLOWED,
        default="",
        parse=_budget("JAXTUNE_BUDGET"),
        doc="Default budget of a budgeted search: configs per sweep (64) or seconds (120s); "
        "unset: the strategy's own.",
    ),
    Variable(
        name="JAXTUNE_TIMER",
        field="timer",
        allowed="auto, wall, profiler, cupti",
        default="auto",
        parse=_choice("JAXTUNE_TIMER", ("auto", "wall", "profiler", "cupti")),
        doc="How sweeps time a config: auto (device time from the profiler on TPU and GPU, "
        "wall clock on CPU), wall, profiler (device events of a jax.profiler trace), "
        "cupti (the profiler on an NVIDIA GPU).",
    ),
    Variable(
        name="JAXTUNE_ON_MISS",
        field="on_miss",
        allowed="default, warn, error",
        default="default",
        parse=_choice("JAXTUNE_ON_MISS", ("default", "warn", "error")),
        doc="What a call traced with no tuned config (no scope, cache, packaged or nearest "
        "entry, and no sweep) does: default: runs the default config; warn: the same, with "
        "one JaxtuneWarning per kernel and key; error: raises MissError naming the kernel, "
        "the key and the command that tunes it.",
    ),
    Variable(
        name="JAXTUNE_REMOTE_CACHE",
        field="remote_cache",
        allowed="s3://bucket/prefix, gs://bucket/prefix, a directory, or empty",
        default="",
        parse=_remote("JAXTUNE_REMOTE_CACHE"),
        doc="A store that a team's machines share: a miss in the user cache reads it "
        "through (once per kernel per process), a sweep publishes its entry to it. Needs "
        "pip install 'jaxtune[remote]'.",
    ),
    Variable(
        name="JAXTUNE_REMOTE_TIMEOUT",
        field="remote_timeout",
        allowed="a positive number of seconds",
        default="5",
        parse=_seconds("JAXTUNE_REMOTE_TIMEOUT"),
        doc="Seconds one read or publish of the shared store may take; a store that does "
        "not answer in time is skipped for the rest of the process, with one warning.",
    ),
    Variable(
        name="JAXTUNE_COMPILE_CACHE",
        field="compile_cache",
        allowed="0, 1, or a directory",
        default="1",
        parse=_compile_cache,
        doc="JAX's persistent compilation cache where sweeps compile (their child "
        "process, or the caller's for the sweep's length), with each config's lowered "
        "program in lowered/ beside it: 1 puts them in xla/ under the cache directory, a "
        "directory puts them there, 0 turns both off. A jax_compilation_cache_dir of the "
        "user's own wins (docs/autotuned.md).",
    ),
    Variable(
        name="JAXTUNE_LOWERING_PROCESSES",
        field="lowering_processes",
        allowed="auto, or a whole number from 0 to 64",
        default="auto",
        parse=_lowering_processes,
        doc="Processes that trace and lower a sweep's configs side by side, for the "
        "compiling process to load (kept programs, so JAXTUNE_COMPILE_CACHE must be on): "
        "auto uses the host's cores on a TPU v5e or v6e where lowering a sweep's configs one "
        "by one would take 10 s or more; "
        "0 lowers in the sweep's own process, one config at a time (docs/autotuned.md).",
    ),
)

_BY_FIELD = {v.field: v for v in VARIABLES}
_NO_OVERRIDES: Mapping[str, Any] = types.MappingProxyType({})
_OVERRIDES: contextvars.ContextVar[Mapping[str, Any]] = contextvars.ContextVar(
    "jaxtune_settings_overrides", default=_NO_OVERRIDES
)


def _default(variable: Variable) -> str:
    if variable.field == "cache_dir":
        return default_cache_dir()
    return variable.default


_LAST: tuple[tuple[Any, ...], Settings] | None = None  # the last parse and its inputs
#: Every variable the settings read (``HOME`` and ``XDG_CACHE_HOME``: the default cache dir).
WATCHED: tuple[str, ...] = (*(v.name for v in VARIABLES), "XDG_CACHE_HOME", "HOME")
#: The variables that decide which config a traced call of a kernel uses: the mode, where
#: the user cache is, nearest shapes. The others shape how a sweep runs or what is profiled.
DECIDING: tuple[str, ...] = (
    "JAXTUNE_MODE",
    "JAXTUNE_CACHE_DIR",
    "JAXTUNE_NEAREST",
    "XDG_CACHE_HOME",
    "HOME",
)


def probe(names: tuple[str, ...]) -> tuple[Any, Callable[[Any], Any], tuple[Any, ...]]:
    """``(environ, get, keys)``: while ``os.environ is environ``, ``get(keys[i])`` is the
    value of ``names[i]`` as ``os.environ`` stores it (``None``: unset). ``get`` is the
    ``.get`` of ``os.environ``'s own dict where it has one (30 ns a name; the keys are bytes
    on POSIX, upper case on Windows), else ``os.environ.get`` (700 ns)."""
    environ = os.environ
    data = getattr(environ, "_data", None)
    encode = getattr(environ, "encodekey", None)
    if isinstance(data, dict) and callable(encode):
        return environ, data.get, tuple(map(encode, names))
    return environ, environ.get, names


_PROBES = (probe(WATCHED), probe(DECIDING))


def fingerprint(names: tuple[str, ...] = WATCHED) -> tuple[Any, ...]:
    """The current values of ``names`` (by default every variable :func:`settings` reads;
    ``None`` for an unset one), in the form ``os.environ`` keeps them: equal fingerprints,
    equal settings (unless an :func:`override` differs). About 0.5 µs for the 16 variables.
    Nothing is hooked into the process: a value set through ``os.putenv`` alone is not in
    ``os.environ``, and the settings never see it."""
    environ, get, keys = _PROBES[0] if names is WATCHED else _PROBES[1]
    if os.environ is environ and (names is WATCHED or names is DECIDING):
        return tuple(map(get, keys))
    env = os.environ  # other names, or os.environ replaced by the program
    return tuple(env.get(name) for name in names)


def settings(environ: Mapping[str, str] | None = None) -> Settings:
    """Returns the current settings: overrides, then the environment, then defaults.

    Raises:
        SettingsError: a variable has a value outside its allowed values; the message names
            the variable, the value and what is allowed.
    """
    global _LAST
    overrides = _OVERRIDES.get()
    if environ is None:  # the process's settings: parsed again only when they may differ
        token = (overrides, fingerprint())
        last = _LAST
        if last is not None and last[0] == token:
            return last[1]
    env = os.environ if environ is None else environ
    values: dict[str, Any] = {}
    for variable in VARIABLES:
        if variable.field in overrides:
            values[variable.field] = overrides[variable.field]
            continue
        raw = env.get(variable.name, "")
        values[variable.field] = variable.parse(raw if raw.strip() else _default(variable))
    parsed = Settings(**values)
    if environ is None:
        _LAST = (token, parsed)
        _announce_deciding()
    return parsed


#: Called when :func:`settings` finds that a variable of :data:`DECIDING` changed.
_DECIDING_HOOKS: list[Callable[[], None]] = []
_DECIDING_SEEN: list[tuple[Any, ...]] = []


def on_deciding_change(changed: Callable[[], None]) -> None:
    """Registers ``changed``, called when :func:`settings` reads the environment and finds
    that a variable that decides the config (:data:`DECIDING`) differs from its last read:
    code that keeps what the settings decided (the eager jits of autotuned kernels) drops
    it. Nothing is hooked into the process, so a change is seen at the next read."""
    _DECIDING_HOOKS.append(changed)


def _announce_deciding() -> None:
    now = fingerprint(DECIDING)
    if not _DECIDING_SEEN:
        _DECIDING_SEEN.append(now)
    elif _DECIDING_SEEN[0] != now:
        _DECIDING_SEEN[0] = now
        for changed in list(_DECIDING_HOOKS):
            changed()


def describe(
    environ: Mapping[str, str] | None = None,
) -> tuple[dict[str, Any], dict[str, SettingsError]]:
    """``(values, errors)``: every setting parsed on its own, so one bad variable does not
    hide the others. ``values`` maps each field to a JSON-ready value (bools stay bools,
    numbers numbers, paths strings); a bad variable gets its default there and its error in
    ``errors``, keyed by the variable's name.

    Examples:
        >>> values, errors = describe({"JAXTUNE_MODE": "fast", "JAXTUNE_CACHE_DIR": "/tmp/c"})
        >>> values["cache_dir"], values["mode"], list(errors)
        ('/tmp/c', 'cached', ['JAXTUNE_MODE'])
    """
    env = os.environ if environ is None else environ
    values: dict[str, Any] = {}
    errors: dict[str, SettingsError] = {}
    for variable in VARIABLES:
        raw = env.get(variable.name, "")
        try:
            value = variable.parse(raw if raw.strip() else _default(variable))
        except SettingsError as e:
            errors[variable.name] = e
            value = variable.parse(_default(variable))
        values[variable.field] = str(value) if isinstance(value, pathlib.Path) else value
    return values, errors


#: Entered with the overrides mapping around an :func:`override` block.
_SCOPE_HOOKS: list[Callable[[Mapping[str, Any]], contextlib.AbstractContextManager[Any]]] = []


def on_override(
    scoped: Callable[[Mapping[str, Any]], contextlib.AbstractContextManager[Any]],
) -> None:
    """Registers ``scoped``, entered with the overrides around every :func:`override` block:
    compiled code that depends on the settings (the eager jit of autotuned kernels) puts
    them in jit's cache key with it. A change of ``os.environ`` is seen when the settings
    are next read (:func:`on_deciding_change`)."""
    _SCOPE_HOOKS.append(scoped)


@contextlib.contextmanager
def override(**values: Any) -> Iterator[Settings]:
    """Overrides settings for the code inside the ``with`` block (this thread/context only).

    Values are given by field name (``mode="tune"``, ``timeout=5``) and validated exactly as
    the environment variable would be.

    Examples:
        >>> from jaxtune._core import settings as _settings
        >>> with _settings.override(mode="off"):
        ...     _settings.settings().mode
        'off'
    """
    parsed = dict(_OVERRIDES.get())
    for field, value in values.items():
        variable = _BY_FIELD.get(field)
        if variable is None:
            raise SettingsError(
                f"unknown setting {field!r}; expected one of {', '.join(sorted(_BY_FIELD))}."
            )
        raw = ("1" if value else "0") if isinstance(value, bool) else str(value)
        parsed[field] = variable.parse(raw)
    frozen = types.MappingProxyType(parsed)
    token = _OVERRIDES.set(frozen)
    try:
        with contextlib.ExitStack() as stack:
            for hook in _SCOPE_HOOKS:
                stack.enter_context(hook(frozen))
            yield settings()
    finally:
        _OVERRIDES.reset(token)


#: The flag variables the backends read once, at start.
FLAG_VARIABLES = ("XLA_FLAGS", "LIBTPU_INIT_ARGS")
_AT_IMPORT: dict[str, str | None] = {}


def remember_environment() -> None:
    """Remembers ``XLA_FLAGS`` and ``LIBTPU_INIT_ARGS`` as they are when jaxtune first sees
    JAX imported (which may itself edit them): at ``import jaxtune`` when JAX came first,
    else when jaxtune's own names first import it. Nothing is hooked into the process: JAX
    imported later by someone else, with no jaxtune name used since, is not seen."""
    if not _AT_IMPORT and "jax" in sys.modules:
        _AT_IMPORT.update({var: os.environ.get(var) for var in FLAG_VARIABLES})


def changed_since_jax_import(
    environ: Mapping[str, str] | None = None,
) -> list[tuple[str, str | None, str | None]]:
    """``(variable, value then, value now)`` for each flag variable changed since JAX was
    imported in this process: the backend reads it once, so such a change may be ignored."""
    env = os.environ if environ is None else environ
    return [
        (var, _AT_IMPORT[var], env.get(var))
        for var in FLAG_VARIABLES
        if var in _AT_IMPORT and (_AT_IMPORT[var] or "") != (env.get(var) or "")
    ]
