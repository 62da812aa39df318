"""How each kind of setting's value is parsed and checked (the variables themselves are in
:mod:`jaxtune._core.settings`): a bad value is a :class:`SettingsError` that names the variable,
the value and what is allowed, never a raw OSError/ValueError from deeper down."""

from __future__ import annotations

import os
import pathlib
from collections.abc import Callable
from typing import Any

from .errors import SettingsError

__all__ = [
    "BUDGET_ALLOWED",
    "MAX_CONFIGS",
    "MAX_SECONDS",
    "MIN_SECONDS",
    "REMOTE_ALLOWED",
    "bad",
    "budget",
    "choice",
    "directory",
    "flag",
    "level",
    "remote",
    "seconds",
]


def choice(name: str, choices: tuple[str, ...]) -> Callable[[str], str]:
    def parse(raw: str) -> str:
        value = raw.strip().lower()
        if value not in choices:
            raise bad(name, raw, ", ".join(choices))
        return value

    return parse


def bad(name: str, raw: str, allowed: str) -> SettingsError:
    return SettingsError(
        f"{name}={raw!r} is not valid; allowed values: {allowed}. "
        f"Set {name} to one of them or unset it to use the default."
    )


def flag(name: str) -> Callable[[str], bool]:
    choose = choice(name, ("0", "1"))
    return lambda raw: choose(raw) == "1"


def level(name: str) -> Callable[[str], int]:
    choose = choice(name, ("0", "1", "2"))
    return lambda raw: int(choose(raw))


#: Longest timeout accepted (about 11 days): longer ones overflow the OS's wait calls.
MAX_SECONDS = 1e6
#: Shortest one (1 ms): below it every step would time out before it began.
MIN_SECONDS = 1e-3
#: Most configs a budget may name (more than any space can be searched).
MAX_CONFIGS = 10**9


def seconds(name: str) -> Callable[[str], float]:
    def parse(raw: str) -> float:
        try:
            value = float(raw)
        except ValueError:
            raise bad(name, raw, "a positive number of seconds, such as 60 or 2.5") from None
        if not (MIN_SECONDS <= value <= MAX_SECONDS):
            raise bad(
                name,
                raw,
                f"a positive number of seconds, from {MIN_SECONDS:g} up to {MAX_SECONDS:g}, such as 60 "
                "or 2.5",
            )
        return value

    return parse


def bounded(
    name: str, low: float, high: float, what: str, *, whole: bool = False
) -> Callable[[str], Any]:
    """A number from ``low`` to ``high`` (``whole``: an integer), ``what`` naming it."""
    allowed = f"{what} from {low:g} to {high:g}"

    def parse(raw: str) -> Any:
        try:
            value: Any = int(raw) if whole else float(raw)
        except ValueError:
            raise bad(name, raw, allowed) from None
        if not low <= value <= high:  # false for nan
            raise bad(name, raw, allowed)
        return value

    return parse


BUDGET_ALLOWED = "a positive number of configs (64) or of seconds with an s (120s)"


def budget(name: str) -> Callable[[str], tuple[int | None, float | None] | None]:
    def parse(raw: str) -> tuple[int | None, float | None] | None:
        value = raw.strip().lower()
        if not value:
            return None
        try:
            if value.endswith("s"):
                limit = float(value[:-1])
                if MIN_SECONDS <= limit <= MAX_SECONDS:
                    return (None, limit)
            elif 0 < int(value) <= MAX_CONFIGS:
                return (int(value), None)
        except ValueError:
            pass
        raise bad(name, raw, BUDGET_ALLOWED)

    return parse


#: Longest name of one path component, and of a whole path, most file systems accept.
_NAME_MAX, _PATH_MAX = 255, 4096


def directory(name: str, *, file_ok: bool = False) -> Callable[[str], pathlib.Path]:
    """A directory path; ``file_ok``: an existing non-directory is left for its user to
    report (the cache warns once and uses the defaults, rather than every call failing)."""

    def parse(raw: str) -> pathlib.Path:
        if "\0" in raw:
            raise bad(name, raw, "a directory path (this one holds a NUL byte)")
        try:
            path = pathlib.Path(raw).expanduser()
        except RuntimeError:  # ~user of no user, or no home directory
            raise bad(name, raw, "a directory path (its ~ names no known user's home)") from None
        encoded = os.fsencode(path)
        if len(encoded) > _PATH_MAX or any(len(p) > _NAME_MAX for p in encoded.split(b"/")):
            raise bad(
                name,
                raw,
                f"a directory path the OS accepts (at most {_NAME_MAX} bytes a name, "
                f"{_PATH_MAX} in all; this one is too long)",
            )
        try:
            is_file = path.exists() and not path.is_dir()
        except OSError as e:
            raise bad(name, raw, f"a directory path the OS accepts ({e.strerror})") from None
        if is_file and not file_ok:
            raise bad(name, raw, "a directory path (this path exists and is not a directory)")
        return path

    return parse


REMOTE_ALLOWED = (
    "s3://bucket/prefix, gs://bucket/prefix, or a directory on a shared filesystem (a path "
    "or file:///path); empty: no shared store"
)


def remote(name: str) -> Callable[[str], str]:
    """A shared store: ``s3://``/``gs://`` (also ``gcs://``) with a bucket, or a directory
    (returned absolute, so a program that changes its working directory keeps the store);
    ``""`` when unset."""
    as_directory = directory(name)

    def parse(raw: str) -> str:
        value = raw.strip()
        if not value:
            return ""
        scheme, sep, rest = value.partition("://")
        if not sep:
            return os.path.abspath(as_directory(value))
        scheme = scheme.lower()
        if scheme in ("s3", "gs", "gcs"):
            bucket = rest.split("/", 1)[0]
            if not bucket or any(c.isspace() for c in rest):
                raise bad(name, raw, f"{REMOTE_ALLOWED} (this one names no bucket)")
            return f"{scheme}://{rest.rstrip('/')}"
        if scheme == "file" and rest.startswith("/"):
            return os.path.abspath(as_directory(rest))
        raise bad(name, raw, REMOTE_ALLOWED)

    return parse
