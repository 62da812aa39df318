"""The options that say when a recorded program is stopped (``jaxtune tune --`` and
``jaxtune cache check --``): one module without JAX, so that ``cache`` stays light."""

from __future__ import annotations

import argparse

__all__ = ["SETTLE_S", "add_recording_options"]


def add_recording_options(p: argparse.ArgumentParser) -> None:
    """``--full`` or ``--settle``: when a recorded program is stopped (one or the other: a
    program run to its end is never stopped once it settles)."""
    when = p.add_mutually_exclusive_group()
    when.add_argument("--full", action="store_true", help="let the program run to its end")
    when.add_argument(
        "--settle",
        type=_seconds,
        default=None,
        metavar="SECONDS",
        help="stop the program once it has traced and compiled nothing new for this long "
        f"after its first autotuned call (default {SETTLE_S:g})",
    )


#: ``--settle``'s default, seconds.
SETTLE_S = 3.0


#: The seconds ``--settle`` takes: what ``JAXTUNE_RECORD_SETTLE`` takes in the program.
SETTLE_RANGE = (0.001, 1e6)


def _seconds(raw: str) -> float:
    """A number of seconds in :data:`SETTLE_RANGE` (``nan``, ``inf`` and the like are
    refused)."""
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    low, high = SETTLE_RANGE
    if not low <= value <= high:  # false for nan
        raise argparse.ArgumentTypeError(
            f"{raw!r} is not a number of seconds from {low:g} to {high:g}, such as 5"
        )
    return value
