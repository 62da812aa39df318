"""How one autotuned call and one profile walk jaxtune's modules (issue 59's "Done when"):
every call from one jaxtune module into another is a stay; a call back into a module that
is still on the stack below (the callee's module called out and is now called back) is a
return to a module left, what a reader following the call has to do.

    python tools/corridor.py          # prints the counts and each return, for both flows
"""

from __future__ import annotations

import os
import sys
import tempfile
import threading

os.environ.setdefault("JAXTUNE_CACHE_DIR", tempfile.mkdtemp())
os.environ.setdefault("JAXTUNE_MODE", "tune")
os.environ.setdefault("JAXTUNE_ISOLATION", "inline")

import jax
import jax.numpy as jnp

import jaxtune


@jaxtune.autotuned(configs={"n": [1, 2]}, name="tools.corridor.sines")
def sines(x, *, n):
    for _ in range(n):
        x = jnp.sin(x)
    return x


def _module(frame) -> str | None:
    # Code without a source file (a dataclass's generated ``__hash__`` or ``__eq__``) is
    # nothing a reader follows.
    if frame.f_code.co_filename.startswith("<"):
        return None
    name = frame.f_globals.get("__name__", "")
    return name if name.startswith("jaxtune") and not name.startswith("jaxtune._core") else None


def walk(fn) -> tuple[int, list[str]]:
    """Runs ``fn`` under a profiler hook: the stays and the returns it made."""
    stacks: dict[int, list[str | None]] = {}  # per thread: a sweep runs in its own
    stays = 0
    returns: list[str] = []

    def hook(frame, event, arg):
        nonlocal stays
        stack = stacks.setdefault(threading.get_ident(), [])
        if event == "call":
            here = _module(frame)
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
    return stays, returns


def main() -> None:
    x = jnp.linspace(0.0, 1.0, 128)
    step = jax.jit(lambda x: sines(x))
    flows = {
        "autotuned call, swept (decoration done, tune mode)": lambda: step(x).block_until_ready(),
        "autotuned call, cached (a new trace)": lambda: jax.jit(lambda x: sines(x) + 0)(x),
        "profile of the step": lambda: jaxtune.profile(step, x),
    }
    for name, fn in flows.items():
        stays, returns = walk(fn)
        print(f"{name}: {stays} stays, {len(returns)} returns to a module left")
        for r in dict.fromkeys(returns):
            print("   ", r)


if __name__ == "__main__":
    main()
