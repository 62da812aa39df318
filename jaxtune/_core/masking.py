"""Secrets masked where jaxtune quotes what it did not write: a child's log (its crash log
and the tail a failure reason quotes) and a program's command line.

A variable whose name looks secret (:func:`looks_secret`: ``*TOKEN*``, ``*SECRET*``,
``*KEY*``, ``*PASSWORD*``, ``*PASSWD*``, ``*CREDENTIAL*``) has its value replaced by
:data:`MASK` wherever it appears (when it is long enough to be told from ordinary words),
as CI systems mask their secrets in build logs; so is the value of
any ``NAME=value`` (or ``'NAME': 'value'``, as a printed ``os.environ`` shows it) whose
name looks secret, and of a command-line option named like one (``--api-key=...``,
``--hf-token ...``).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence

__all__ = ["MASK", "looks_secret", "mask", "mask_command"]

#: What a masked value is replaced by.
MASK = "***"
#: The words that make a variable's name look secret.
SECRET_WORDS = ("TOKEN", "SECRET", "KEY", "PASSWORD", "PASSWD", "CREDENTIAL")
#: Values shorter than this are not masked wherever they appear (``1``, ``true``,
#: ``auto``, as ``PIP_KEYRING_PROVIDER`` holds: masking them would blot out the log; GitLab
#: masks no shorter variable either); they are still masked after a secret-looking name.
_SHORTEST = 8

_WORDS = "|".join(SECRET_WORDS)
#: ``NAME=value``, ``NAME: value``, ``'NAME': 'value'`` with a secret-looking upper-case
#: name: a variable as ``env``, ``export`` or a printed ``os.environ`` shows it.
_ASSIGNED = re.compile(
    rf"""(\b[A-Z0-9_]*(?:{_WORDS})[A-Z0-9_]*\b['"]?\s*[=:]\s*['"]?)([^\s'",;]+)"""
)


def looks_secret(name: str) -> bool:
    """Whether variable (or option) ``name`` looks like it holds a secret."""
    upper = name.upper()
    return any(word in upper for word in SECRET_WORDS)


def mask(text: str, environ: Mapping[str, str] | None = None) -> str:
    """``text`` with the values of ``environ``'s (default ``os.environ``) secret-looking
    variables masked wherever they appear, and every value given to a secret-looking name
    (``NAME=value``) masked."""
    env = os.environ if environ is None else environ
    values = {v for k, v in env.items() if looks_secret(k) and len(v) >= _SHORTEST}
    for value in sorted(values, key=len, reverse=True):  # a value inside another: longest first
        text = text.replace(value, MASK)
    return _ASSIGNED.sub(lambda m: m[1] + MASK, text)


def mask_command(command: Sequence[str], environ: Mapping[str, str] | None = None) -> str:
    """A command line as a message quotes it: its words joined by spaces, each masked as
    :func:`mask` masks text, and the value given to a secret-looking name masked, in any
    case (``HF_TOKEN=...``, ``--api-key=...``, ``--api-key ...``, ``model.api_key=...``)."""
    words: list[str] = []
    after_option = False
    for word in command:
        name, eq, _ = word.partition("=")
        if after_option and not word.startswith("-"):
            words.append(MASK)
        elif eq and looks_secret(name):
            words.append(f"{name}={MASK}")
        else:
            words.append(mask(word, environ))
        after_option = not eq and word.startswith("-") and looks_secret(word)
    return " ".join(words)
