"""Flags for XLA (``XLA_FLAGS``) and libtpu (``LIBTPU_INIT_ARGS``).

Both variables are read once, when the backend starts, and an unknown name in ``XLA_FLAGS``
kills the process there. So jaxtune builds them for a *child* process, merges them with what
the user already set (one entry per flag, later values win), rewrites legacy names, and
checks that the installed binary defines a flag before relying on it.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.util
import mmap
import os
import pathlib
import re
import shlex
from collections.abc import Iterable, Mapping, Sequence

from .errors import FlagError

__all__ = [
    "BUNDLE_INSTRUMENTATION",
    "CUSTOM_CALL_TRACING",
    "LEGACY_NAMES",
    "LLO_DEBUG_INFO",
    "PERIODIC_COUNTER_SAMPLING",
    "Flag",
    "FlagReport",
    "binary_defines",
    "child_env",
    "custom_call_tracing_on",
    "find_jaxlib_binary",
    "find_libtpu",
    "inspect",
    "merge",
    "normalise_platform",
    "parse",
    "profile_flags",
    "requested_platform",
    "without_custom_call_tracing",
]

LLO_DEBUG_INFO = "xla_xprof_register_llo_debug_info"
CUSTOM_CALL_TRACING = "xla_xprof_enable_custom_call_tracing"
BUNDLE_INSTRUMENTATION = "xla_tpu_bundle_instrumentation_options"
PERIODIC_COUNTER_SAMPLING = "tpu_enable_periodic_counter_sampling"

#: Old flag names and the names that replaced them.
LEGACY_NAMES: Mapping[str, str] = {
    "xla_enable_custom_call_region_trace": CUSTOM_CALL_TRACING,
}

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Flag:
    """One command-line flag, ``--name=value`` or a bare ``--name``.

    Examples:
        >>> str(Flag(name="xla_dump_to", value="/tmp/dump"))
        '--xla_dump_to=/tmp/dump'
    """

    name: str
    value: str | None = None

    def __str__(self) -> str:
        return f"--{self.name}" if self.value is None else f"--{self.name}={self.value}"

    @property
    def effective_value(self) -> str:
        """The value the flag takes; a bare boolean flag means ``true``."""
        return "true" if self.value is None else self.value

    @classmethod
    def from_token(cls, token: str) -> Flag:
        """Parses one ``--name[=value]`` token.

        Raises:
            FlagError: the token does not start with ``-`` or ``--`` followed by a flag name.
        """
        body = token[2:] if token.startswith("--") else token[1:] if token.startswith("-") else ""
        name, sep, value = body.partition("=")
        if not _NAME.fullmatch(name):
            raise FlagError(
                f"malformed flag {token!r}: expected '--name' or '--name=value' with a name "
                "of letters, digits and underscores. Fix or remove this entry."
            )
        return cls(name=name, value=value if sep else None)


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class FlagReport:
    """What :func:`inspect` found in one flags string."""

    flags: tuple[Flag, ...]
    malformed: tuple[str, ...]
    duplicates: tuple[str, ...]
    contradictions: tuple[str, ...]
    legacy: tuple[str, ...]


def _tokens(text: str) -> list[str]:
    try:
        return shlex.split(text)
    except ValueError as e:
        raise FlagError(f"cannot split flags {text!r}: {e}. Check the quotes.") from e


def parse(text: str) -> list[Flag]:
    """Parses a ``XLA_FLAGS`` / ``LIBTPU_INIT_ARGS`` string into flags, in order.

    Raises:
        FlagError: an entry is malformed; the message quotes it.

    Examples:
        >>> [f.name for f in parse("--xla_dump_to=/tmp/d --xla_cpu_use_thunk_runtime")]
        ['xla_dump_to', 'xla_cpu_use_thunk_runtime']
    """
    return [Flag.from_token(token) for token in _tokens(text)]


def inspect(text: str) -> FlagReport:
    """Reports malformed entries, duplicates, contradictions and legacy names in ``text``.

    Unlike :func:`parse` it never raises on a bad entry, so ``jaxtune doctor`` can list every
    problem at once.
    """
    flags: list[Flag] = []
    malformed: list[str] = []
    try:
        tokens = _tokens(text)
    except FlagError:
        return FlagReport(flags=(), malformed=(text,), duplicates=(), contradictions=(), legacy=())
    for token in tokens:
        try:
            flags.append(Flag.from_token(token))
        except FlagError:
            malformed.append(token)
    seen: dict[str, set[str]] = {}
    for flag in flags:
        seen.setdefault(LEGACY_NAMES.get(flag.name, flag.name), set()).add(flag.effective_value)
    counts: dict[str, int] = {}
    for flag in flags:
        canonical = LEGACY_NAMES.get(flag.name, flag.name)
        counts[canonical] = counts.get(canonical, 0) + 1
    return FlagReport(
        flags=tuple(flags),
        malformed=tuple(malformed),
        duplicates=tuple(n for n, c in counts.items() if c > 1),
        contradictions=tuple(n for n, values in seen.items() if len(values) > 1),
        legacy=tuple(f.name for f in flags if f.name in LEGACY_NAMES),
    )


def _canonical(flag: Flag) -> Flag:
    name = LEGACY_NAMES.get(flag.name)
    return flag if name is None else Flag(name=name, value=flag.value)


#: The values that turn a boolean flag on.
_TRUE = frozenset({"true", "1", "yes", "t", "y"})


def _is_tracing(flag: Flag) -> bool:
    return _canonical(flag).name == CUSTOM_CALL_TRACING


def custom_call_tracing_on(text: str) -> bool:
    """Whether ``text`` (``XLA_FLAGS`` / ``LIBTPU_INIT_ARGS``) turns custom-call tracing on:
    its last ``--xla_xprof_enable_custom_call_tracing`` (or legacy
    ``--xla_enable_custom_call_region_trace``) entry says true. Never raises.

    Examples:
        >>> custom_call_tracing_on("--xla_enable_custom_call_region_trace")
        True
        >>> custom_call_tracing_on("--xla_xprof_enable_custom_call_tracing=true "
        ...                        "--xla_xprof_enable_custom_call_tracing=false")
        False
    """
    on = False
    for flag in inspect(text).flags:
        if _is_tracing(flag):
            on = flag.effective_value.lower() in _TRUE
    return on


def without_custom_call_tracing(text: str) -> str:
    """``text`` without its custom-call tracing entries (any value, legacy name included);
    every other entry kept as it was.

    Raises:
        FlagError: ``text`` cannot be split (unbalanced quotes).

    Examples:
        >>> without_custom_call_tracing("--a=1 --xla_xprof_enable_custom_call_tracing=true")
        '--a=1'
    """
    kept = []
    for token in _tokens(text):
        try:
            if _is_tracing(Flag.from_token(token)):
                continue
        except FlagError:
            pass
        kept.append(token)
    return shlex.join(kept)


def merge(existing: str, updates: Iterable[Flag | str]) -> str:
    """Merges ``updates`` into an existing flags string.

    Legacy names are rewritten to their current names, each flag appears once, and an
    update replaces an existing value of the same flag (keeping the existing position).

    Raises:
        FlagError: ``existing`` or an update is malformed.

    Examples:
        >>> merge("--a=1 --xla_enable_custom_call_region_trace=true", ["--a=2", "--b"])
        '--a=2 --xla_xprof_enable_custom_call_tracing=true --b'
    """
    merged: dict[str, Flag] = {}
    for flag in parse(existing):
        flag = _canonical(flag)
        merged[flag.name] = flag
    for update in updates:
        flag = _canonical(update if isinstance(update, Flag) else Flag.from_token(update))
        merged[flag.name] = flag
    return " ".join(str(f) for f in merged.values())


def _bundle_options(best_effort: int, guaranteed: int) -> str:
    for label, value in (
        ("trace_best_effort_frequency", best_effort),
        ("trace_guaranteed_frequency", guaranteed),
    ):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise FlagError(f"{label} must be a positive integer number of bundles, got {value!r}.")
    return f"trace_best_effort_frequency={best_effort},trace_guaranteed_frequency={guaranteed}"


def profile_flags(
    platform: str,
    *,
    llo: bool = True,
    custom_call_tracing: bool = False,
    best_effort_frequency: int = 10,
    guaranteed_frequency: int = 10,
) -> dict[str, list[Flag]]:
    """The profiling flags for ``platform``, keyed by the environment variable they go in.

    On TPU the default is ``--xla_xprof_register_llo_debug_info=true`` alone;
    ``custom_call_tracing=True`` adds ``--xla_xprof_enable_custom_call_tracing=true`` and the
    bundle instrumentation frequencies (raise them when a trace reports dropped events).
    CPU and GPU traces need no extra flags.

    Examples:
        >>> [str(f) for f in profile_flags("tpu")["LIBTPU_INIT_ARGS"]]
        ['--xla_xprof_register_llo_debug_info=true']
    """
    platform = platform.lower()
    if platform not in ("cpu", "gpu", "cuda", "rocm", "tpu"):
        raise FlagError(f"unknown platform {platform!r}; expected one of cpu, gpu, tpu.")
    if platform != "tpu":
        return {"XLA_FLAGS": []}
    flags: list[Flag] = []
    if llo or custom_call_tracing:
        flags.append(Flag(name=LLO_DEBUG_INFO, value="true"))
    if custom_call_tracing:
        flags.append(Flag(name=CUSTOM_CALL_TRACING, value="true"))
        flags.append(
            Flag(
                name=BUNDLE_INSTRUMENTATION,
                value=_bundle_options(best_effort_frequency, guaranteed_frequency),
            )
        )
    return {"LIBTPU_INIT_ARGS": flags}


def find_libtpu() -> pathlib.Path | None:
    """The libtpu shared object JAX would load, or ``None`` when libtpu is not installed.

    ``TPU_LIBRARY_PATH`` wins, as it does for JAX; otherwise the ``libtpu`` package's
    ``libtpu.so``.
    """
    explicit = os.environ.get("TPU_LIBRARY_PATH")
    if explicit:
        path = pathlib.Path(explicit)
        return path if path.is_file() else None
    for package in ("libtpu", "libtpu_nightly"):
        try:
            spec = importlib.util.find_spec(package)
        except (ImportError, ValueError):
            continue
        for location in (spec.submodule_search_locations or []) if spec else []:
            candidate = pathlib.Path(location) / "libtpu.so"
            if candidate.is_file():
                return candidate
    return None


def find_jaxlib_binary() -> pathlib.Path | None:
    """The largest shared object of the installed jaxlib: the one that holds XLA's flags."""
    try:
        spec = importlib.util.find_spec("jaxlib")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    objects = [p for loc in spec.submodule_search_locations for p in pathlib.Path(loc).glob("*.so")]
    return max(objects, key=lambda p: p.stat().st_size, default=None)


def binary_defines(names: Sequence[str], path: os.PathLike[str] | str) -> dict[str, bool]:
    """Whether the shared object at ``path`` contains each flag name as a whole word.

    A flag's name is stored in the binary as a string, so a binary that lacks the name
    cannot accept the flag. The scan memory-maps the file and is cached per file version.

    Raises:
        FlagError: the file cannot be read.
    """
    p = pathlib.Path(path)
    try:
        stat = p.stat()
    except OSError as e:
        raise FlagError(f"cannot read {p}: {e}. Is libtpu/jaxlib installed correctly?") from e
    return {n: _contains_word(str(p), stat.st_mtime_ns, stat.st_size, n) for n in names}


@functools.lru_cache(maxsize=256)
def _contains_word(path: str, mtime_ns: int, size: int, name: str) -> bool:
    del mtime_ns  # part of the cache key only
    if size == 0:
        return False
    needle = name.encode()
    try:
        with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
            start = 0
            while (at := m.find(needle, start)) >= 0:
                before = m[at - 1 : at] if at else b""
                after = m[at + len(needle) : at + len(needle) + 1]
                if not _is_word_byte(before) and not _is_word_byte(after):
                    return True
                start = at + 1
    except OSError as e:
        raise FlagError(f"cannot read {path}: {e}.") from e
    return False


def _is_word_byte(b: bytes) -> bool:
    return bool(b) and (b.isalnum() or b == b"_")


def _require_defined(flags: Iterable[Flag], binary: pathlib.Path | None, what: str) -> None:
    names = [f.name for f in flags]
    if not names:
        return
    if binary is None:
        raise FlagError(
            f"{what} is not installed, so jaxtune cannot check or use {', '.join(names)}. "
            "Install it (pip install 'jax[tpu]') or profile without these flags."
        )
    missing = [n for n, ok in binary_defines(names, binary).items() if not ok]
    if missing:
        raise FlagError(
            f"the installed {what} ({binary}) does not define {', '.join(missing)}; "
            "setting it would fail with 'Unknown command line flag' or give an empty "
            "profile. Upgrade: pip install -U 'jax[tpu]' (JAX >= 0.11 and libtpu >= 0.0.44 "
            "for custom call tracing; JAX >= 0.10.2 and libtpu >= 0.0.42 for LLO debug info)."
        )


def child_env(
    platform: str,
    *,
    base: Mapping[str, str] | None = None,
    profiling: bool = False,
    llo: bool = True,
    custom_call_tracing: bool = False,
    best_effort_frequency: int = 10,
    guaranteed_frequency: int = 10,
    xla_flags: Iterable[Flag | str] = (),
    libtpu_args: Iterable[Flag | str] = (),
    check_binary: bool = True,
) -> dict[str, str]:
    """The environment for a child process that will start ``platform``'s backend.

    Starts from ``base`` (default ``os.environ``), sets ``JAX_PLATFORMS``, turns GPU memory
    preallocation off so parent and child can share a GPU, and merges the profiling flags
    (when ``profiling``) and any extra flags into ``XLA_FLAGS`` / ``LIBTPU_INIT_ARGS``.
    With ``check_binary`` every TPU flag is first checked against the installed libtpu.

    Raises:
        FlagError: a flag is malformed or the installed libtpu does not define it.

    Examples:
        >>> env = child_env("cpu", base={}, xla_flags=["--xla_dump_to=/tmp/d"])
        >>> env["JAX_PLATFORMS"], env["XLA_FLAGS"]
        ('cpu', '--xla_dump_to=/tmp/d')
    """
    env = dict(os.environ if base is None else base)
    platform = platform.lower()
    wanted: dict[str, list[Flag]] = {"XLA_FLAGS": [], "LIBTPU_INIT_ARGS": []}
    if profiling:
        for var, flags in profile_flags(
            platform,
            llo=llo,
            custom_call_tracing=custom_call_tracing,
            best_effort_frequency=best_effort_frequency,
            guaranteed_frequency=guaranteed_frequency,
        ).items():
            wanted[var].extend(flags)
    wanted["XLA_FLAGS"].extend(_as_flags(xla_flags))
    wanted["LIBTPU_INIT_ARGS"].extend(_as_flags(libtpu_args))
    if check_binary and platform == "tpu":
        _require_defined(wanted["LIBTPU_INIT_ARGS"], find_libtpu(), "libtpu")
    for var, flags in wanted.items():
        if flags or var in env:
            text = merge(env.get(var, ""), flags)
            if text:
                env[var] = text
            else:
                env.pop(var, None)
    env["JAX_PLATFORMS"] = "cuda" if normalise_platform(platform) == "gpu" else platform
    if platform in ("gpu", "cuda", "rocm"):
        env["XLA_PYTHON_CLIENT_PREALLOCATE"] = "false"
    return env


def normalise_platform(name: str | None) -> str | None:
    """The platform a name stands for: ``"tpu"``, ``"gpu"``, ``"cpu"``, another JAX platform
    name lower-cased, or ``None`` for no name. The one place that tells a platform from:

    - a JAX platform name (``jax.default_backend()``, ``JAX_PLATFORMS``): ``cuda`` and
      ``rocm`` are ``gpu``;
    - a device kind (``"TPU v5 lite"``, ``"NVIDIA H100 80GB HBM3"``, ``"cpu"``): a kind of
      several words that names no TPU is a GPU's, as JAX's GPU kinds are;
    - a trace's plane (``/device:TPU:0``, ``/device:GPU:0``; any other, as ``/host:CPU``,
      is ``cpu``).

    Examples:
        >>> [normalise_platform(n) for n in ("cuda", "TPU v4", "NVIDIA H100", "/host:CPU")]
        ['gpu', 'tpu', 'gpu', 'cpu']
    """
    if not name or not name.strip():
        return None
    name = name.strip().lower()
    if name.startswith("/"):
        plane = name.removeprefix("/device:")
        return "tpu" if plane.startswith("tpu") else "gpu" if plane.startswith("gpu") else "cpu"
    if name in ("cuda", "rocm", "gpu"):
        return "gpu"
    if name.startswith("tpu"):
        return "tpu"
    return "gpu" if " " in name else name


def requested_platform(environ: Mapping[str, str] | None = None) -> str | None:
    """The first platform ``JAX_PLATFORMS`` asks for (normalised), or ``None`` when unset.

    Examples:
        >>> requested_platform({"JAX_PLATFORMS": "cuda,cpu"})
        'gpu'
    """
    value = (os.environ if environ is None else environ).get("JAX_PLATFORMS", "")
    return normalise_platform(value.split(",")[0])


def _as_flags(items: Iterable[Flag | str]) -> list[Flag]:
    return [_canonical(i if isinstance(i, Flag) else Flag.from_token(i)) for i in items]
