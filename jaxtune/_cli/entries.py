"""A stored entry as the commands print it (``jaxtune cache list/show/import/prune``,
``jaxtune tune``'s ``--json``): its summary with why it is stale, in the one vocabulary of
:func:`jaxtune._tuning.staleness.judge`, the code judged from the kernel's source files as
they are now, without importing them."""

from __future__ import annotations

import argparse
import os
import pathlib
import sys
from collections.abc import Sequence
from typing import Any

from .._core.errors import CacheError
from .._core.vocabulary import Entry, StaleReason
from .._tuning import digest as _digest
from .._tuning.staleness import judge

__all__ = ["StaleJudge", "entry_summary", "labels"]


class StaleJudge:
    """Why entries are stale, for the commands that list, prune, import and tune them: the
    reasons :func:`jaxtune._tuning.staleness.judge` gives without a kernel's space, the
    code judged once per distinct code (``code`` is ``fresh``, ``changed`` or ``unknown``,
    from the kernel's source files as they are now, without importing them; see
    :func:`jaxtune._tuning.digest.check_parts`), the modules looked for in ``sources``
    first, then on ``sys.path`` and in the working directory."""

    def __init__(self, sources: Sequence[pathlib.Path] = ()) -> None:
        self._code: dict[tuple[tuple[str, str, str], ...], str] = {}
        self._search = (
            [*(str(d.resolve()) for d in sources), *sys.path, os.getcwd()] if sources else None
        )

    @classmethod
    def of(cls, args: argparse.Namespace) -> StaleJudge:
        """The freshness ``--source`` asks for.

        Raises:
            CacheError: a ``--source`` is not a directory.
        """
        for d in args.source:
            if not d.is_dir():
                raise CacheError(
                    f"--source {d} is not a directory; give the folder the kernels' modules "
                    "are imported from (a checkout's root, or a script's folder)."
                )
        return cls(args.source)

    def code(self, e: Entry) -> str:
        if not e.code_digest:
            return "unknown"
        known = self._code.get(e.code_parts)
        if known is None:
            known = self._code[e.code_parts] = _digest.check_parts(
                e.code_parts, search=self._search
            )
        return known

    def reasons(self, e: Entry) -> list[StaleReason]:
        """``[StaleReason.CODE, StaleReason.TOOLCHAIN]``, the part of it that holds, or
        ``[]``: the reasons of :func:`jaxtune._tuning.staleness.judge` that can be told
        without the kernel's space."""
        return [s.reason for s in judge(e, code_changed=self.code(e) == "changed")]


def entry_summary(e: Entry, fresh: StaleJudge, *, full: bool = False) -> dict[str, Any]:
    """``e``'s JSON summary (:meth:`Entry.summary`) with ``code`` (the code on disk now),
    ``stale`` (whether any reason holds) and ``stale_reasons`` (their labels)."""
    reasons = fresh.reasons(e)
    return {
        **e.summary(full=full),
        "code": fresh.code(e),
        "stale": bool(reasons),
        "stale_reasons": labels(reasons),
    }


def labels(reasons: list[StaleReason]) -> list[str]:
    """The labels the commands print for ``reasons`` (``["code changed", "toolchain"]``)."""
    return [r.value for r in reasons]
