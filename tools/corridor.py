"""Follows one autotuned call and one profile through jaxtune's modules and counts where a
reader following them has to go back to a file left (issue 59's "Done when").

    python tools/corridor.py              # each walk's counts, then its returns
    python tools/corridor.py --no-leaves  # the same, with no module taken as a leaf helper

What counts. Each walk runs under ``sys.setprofile`` (and ``threading.setprofile`` for the
threads it starts), which reports every frame that starts or resumes: a call, and also a
generator taken up again by its consumer (each item a ``for`` loop takes from a generator
expression is one). Each frame on a thread's stack is labelled with the jaxtune module its
code lives in, or with none: code outside jaxtune (JAX, the standard library, this tool),
code without a source file (a dataclass's generated ``__eq__``) and code of a leaf helper
module (:data:`LEAVES`). A frame's caller is the nearest labelled frame below it.

- A **stay** is a frame that starts in a jaxtune module other than its caller's: the
  reader moves to another file.
- A **return** is a stay into a module that is already on the stack below: that module
  called out and is now called back (a callback or a lambda handed down, a generator
  expression the callee iterates, a listener). The reader goes back to a file left.

A leaf helper calls no jaxtune code but what it is handed or what registered with it (a
callback, a generator expression, a hook), so a call into one does not take the reader out
of the caller, and what it calls back is the caller's own code. Code that
runs in a child process is not seen: a walk with process isolation counts the parent's
side only.

The walks run in this order, in one process, in tune mode, with a new cache directory:

1. a swept call with process isolation (the default): a miss under the caller's
   ``jax.jit``; the sweep runs in the child that the decorator started ahead of need;
2. a cached call: the same kernel and shape in a new trace;
3. a swept call with inline isolation (another shape, so another key);
4. ``jaxtune.profile`` with inline isolation: captured in this process, no report written;
5. the automatic profile (``JAXTUNE_PROFILE=1``) of a ``@jaxtune.profiled`` step: captured
   in this process, its report written under ``JAXTUNE_PROFILE_DIR`` (a new directory) and
   its table printed (into a buffer here).
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator, Mapping

os.environ["JAXTUNE_CACHE_DIR"] = tempfile.mkdtemp()  # every sweep a miss
os.environ["JAXTUNE_MODE"] = "tune"
# The default isolation, so that the decorator starts the sweep child ahead of need, as it
# does in a program run in tune mode.
os.environ["JAXTUNE_ISOLATION"] = "process"

import jax
import jax.numpy as jnp

import jaxtune

#: Modules treated as leaf helpers (a name, or a package ending in ``.``).
LEAVES = ("jaxtune._core.", "jaxtune._render.units")


@jaxtune.autotuned(configs={"n": [1, 2]}, name="tools.corridor.sines")
def sines(x, *, n):
    for _ in range(n):
        x = jnp.sin(x)
    return x


def _label(frame, leaves: tuple[str, ...]) -> str | None:
    """The module a reader follows into, or ``None`` (see the module's docstring)."""
    if frame.f_code.co_filename.startswith("<"):
        return None
    name = frame.f_globals.get("__name__", "")
    if not name.startswith("jaxtune"):
        return None
    if any(name == leaf or (leaf.endswith(".") and name.startswith(leaf)) for leaf in leaves):
        return None
    return name


def walk(fn: Callable[[], object], leaves: tuple[str, ...]) -> tuple[int, list[str]]:
    """Runs ``fn`` under a profiler hook: its count of stays, and its returns."""
    stacks: dict[int, list[str | None]] = {}  # per thread: a sweep may run in its own
    stays = 0
    returns: list[str] = []
    on = True  # threads the walk started may outlive it: they stop counting with it

    def hook(frame, event, arg):
        nonlocal stays
        if not on:
            return
        stack = stacks.setdefault(threading.get_ident(), [])
        if event == "call":
            here = _label(frame, leaves)
            caller = next((m for m in reversed(stack) if m is not None), None)
            if here is not None and here != caller:
                stays += 1
                if here in stack:
                    returns.append(f"{caller} -> {here} ({frame.f_code.co_name})")
            stack.append(here)
        elif event == "return" and stack:
            stack.pop()

    sys.setprofile(hook)
    threading.setprofile(hook)
    try:
        fn()
    finally:
        sys.setprofile(None)
        threading.setprofile(None)  # type: ignore[arg-type]
        on = False
    return stays, returns


@contextlib.contextmanager
def environment(values: Mapping[str, str]) -> Iterator[None]:
    """``values`` set in ``os.environ`` within, as a program's environment would hold them."""
    before = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def main() -> None:
    leaves = () if "--no-leaves" in sys.argv[1:] else LEAVES
    x = jnp.linspace(0.0, 1.0, 128)
    y = jnp.linspace(0.0, 1.0, 256)
    step = jax.jit(lambda x: sines(x))
    profiled_step = jaxtune.profiled(step)
    reports = tempfile.mkdtemp()
    printed = io.StringIO()

    def automatic_profile() -> None:
        with contextlib.redirect_stdout(printed):
            profiled_step(x).block_until_ready()

    walks: list[tuple[str, dict[str, str], Callable[[], object]]] = [
        (
            "swept call, process isolation (the default; the parent's side)",
            {"JAXTUNE_ISOLATION": "process"},
            lambda: step(x).block_until_ready(),
        ),
        (
            "cached call (a new trace)",
            {},
            lambda: jax.jit(lambda x: sines(x) + 0)(x).block_until_ready(),
        ),
        (
            "swept call, inline isolation",
            {"JAXTUNE_ISOLATION": "inline"},
            lambda: step(y).block_until_ready(),
        ),
        (
            "jaxtune.profile, inline isolation (captured here, no report written)",
            {"JAXTUNE_ISOLATION": "inline"},
            lambda: jaxtune.profile(step, x),
        ),
        (
            "automatic profile, JAXTUNE_PROFILE=1 (captured here, report written)",
            {"JAXTUNE_PROFILE": "1", "JAXTUNE_PROFILE_DIR": reports},
            automatic_profile,
        ),
    ]
    print(f"leaf helpers: {', '.join(leaves) or 'none'}")
    for name, env, fn in walks:
        with environment(env):
            stays, returns = walk(fn, leaves)
        print(f"{name}: {stays} stays, {len(returns)} returns to a module left")
        for r, n in _counted(returns).items():
            print(f"    {r}" + (f" x{n}" if n > 1 else ""))
    if "report in" not in printed.getvalue():
        raise SystemExit("the automatic profile wrote no report: " + printed.getvalue()[-500:])


def _counted(returns: list[str]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for r in returns:
        counts[r] = counts.get(r, 0) + 1
    return counts


if __name__ == "__main__":
    main()
