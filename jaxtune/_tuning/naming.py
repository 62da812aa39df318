"""A kernel's cache id: ``name=`` or ``module.qualname``, with a warning for a kernel
defined in the script being run, whose id would be ``__main__.<function>``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .._core.errors import warn_once

__all__ = ["MSG_UNNAMED_MAIN", "kernel_id_for"]

MSG_UNNAMED_MAIN = """\
@jaxtune.autotuned kernel {qualname} is defined in the script being run (__main__) and has no
name=, so its tuned configs are cached under '__main__.{qualname}': every script with a
function of that name shares those entries, and importing this file as a module looks them up
under another id. Give the kernel a stable id:

    @jaxtune.autotuned(configs=..., name="mylib.{qualname}")
    def {qualname}(...): ...
"""


def kernel_id_for(fn: Callable[..., Any], name: str | None) -> str:
    """``name``, else ``module.qualname``; warns once per function defined in ``__main__``
    without a name (called from ``Autotuned.__init__``, so the warning points at the
    decorated definition)."""
    if name:
        return name
    qualname = fn.__qualname__
    if fn.__module__ == "__main__":
        warn_once(("unnamed", qualname), MSG_UNNAMED_MAIN.format(qualname=qualname), stacklevel=4)
    return f"{fn.__module__}.{qualname}"
