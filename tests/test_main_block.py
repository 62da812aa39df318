"""A function of a script run as ``__main__`` is re-imported in the child without the
script's ``if __name__ == "__main__":`` block: when it depends on what only that block
sets, the sweep's warning and the capture's error say so, and what to do; other errors of
such functions are left as they are."""

from __future__ import annotations

import os
import pathlib
import runpy
import subprocess
import sys
import textwrap

import pytest

from jaxtune._isolation import resolve
from jaxtune._isolation.frames import FunctionRef

ROOT = pathlib.Path(__file__).resolve().parent.parent

SCRIPT = textwrap.dedent(
    """
    import warnings

    import jax
    import jax.numpy as jnp

    import jaxtune


    @jaxtune.autotuned(configs={"k": [1, 2]}, name="tests.main_block.kern")
    def kern(x, *, k):
        return x * SCALE + k


    def helper(x):
        return x * OFFSET


    @jaxtune.profiled(iters=1, warmup=1, llo=False)
    def step(x):
        return helper(x) + 1


    @jaxtune.profiled(iters=1, warmup=1, llo=False)
    def typo(x):
        return x * UNDEFINED_EVERYWHERE


    def show(label, text):
        print(f"<<{label}>>{text}<</{label}>>", flush=True)


    if __name__ == "__main__":
        SCALE, OFFSET = 3.0, 2.0

        @jaxtune.profiled(iters=1, warmup=1, llo=False)
        def late(x):
            return x * 2

        x = jnp.ones((8, 128))
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            try:
                kern.tune(x)
            except jaxtune.TuningFailedError as e:
                show("sweep-error", e)
            show("sweep-warning", " | ".join(str(w.message) for w in seen))
        for fn in (step, typo):
            try:
                fn.profile(x)
            except jaxtune.ProfileError as e:
                show(fn.__name__ + "-error", e)
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            p = late.profile(x)
            show("late-warning", " | ".join(str(w.message) for w in seen))
            show("late-profiled", p.iterations)
    """
)


def _between(out: str, label: str) -> str:
    start, end = f"<<{label}>>", f"<</{label}>>"
    assert start in out, f"{label} missing from:\n{out[-3000:]}"
    return out[out.index(start) + len(start) : out.index(end)]


@pytest.mark.child
@pytest.mark.slow
def test_a_script_whose_main_block_sets_state_is_named_with_the_fix(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    env = {**os.environ, "JAXTUNE_ISOLATION": "process", "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    reimported = (
        f"the jaxtune child process re-imported the script {script} to find {{name}}: it ran "
        'the script\'s top level but not its `if __name__ == "__main__":` block'
    )
    fix = "or set JAXTUNE_ISOLATION=inline to tune and profile in this process."

    # A sweep of a kernel that reads a global only the block sets: every config failed
    # with a NameError, and the warning before the error says why.
    assert "NameError: name 'SCALE' is not defined" in _between(out, "sweep-error")
    warning = _between(out, "sweep-warning")
    assert reimported.format(name="kern") in warning
    assert "kern reads SCALE, which only that block sets" in warning
    assert "Move that setup to the script's top level (or into the function), " + fix in warning

    # A capture of a function whose helper reads such a global: the error says it.
    error = _between(out, "step-error")
    assert error.startswith("NameError: name 'OFFSET' is not defined\n")
    assert reimported.format(name="step") in error
    assert "step reads OFFSET, which only that block sets" in error and fix in error

    # A NameError the block has nothing to do with is not relabelled.
    error = _between(out, "typo-error")
    assert "NameError: name 'UNDEFINED_EVERYWHERE' is not defined" in error
    assert "re-imported" not in error and "__main__" not in error

    # A function defined only in the block: the child cannot find it; captured here.
    warning = _between(out, "late-warning")
    assert reimported.format(name="late") in warning
    assert (
        "late is defined only in that block, so the child cannot find it. Define late at "
        "the script's top level, " + fix
    ) in warning
    assert _between(out, "late-profiled") == "1"


def test_the_note_names_only_what_the_main_block_binds(tmp_path):
    script = tmp_path / "prog.py"
    script.write_text(
        textwrap.dedent(
            """
            import math as m

            def uses(x):
                return x * SCALE + m.pi

            def indirect(x):
                return uses(x) + LIMIT

            def plain(x):
                return x * NOWHERE

            def local_only(x):
                return x * INNER

            if __name__ == "__main__":
                SCALE = 2
                for LIMIT in range(3):
                    pass
                def later(x):
                    INNER = 1
                    return x
            else:
                NOWHERE = 0
            """
        )
    )
    assert resolve._guarded_names(str(script)) == frozenset({"SCALE", "LIMIT", "later"})
    globals_ = runpy.run_path(str(script), run_name="__jaxtune_main__")

    def note(qualname, module="__main__"):
        ref = FunctionRef(module=module, qualname=qualname, path=str(script))
        return resolve._main_block_note(ref, globals_)

    assert "uses reads SCALE, which only that block sets" in note("uses")
    assert "indirect reads LIMIT, SCALE, which only that block sets" in note("indirect")
    assert "later is defined only in that block" in note("later")
    # NOWHERE is bound in the else branch, which the child runs; INNER is a local of a
    # function the block defines, not a global: neither is the block's doing.
    assert note("plain") is None and note("local_only") is None
    assert note("missing_everywhere") is None
    assert note("uses", module="prog") is None  # an importable module: no block skipped
