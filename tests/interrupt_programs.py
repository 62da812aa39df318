"""Programs that a Ctrl-C interrupts, as text to write to a file: run under `jaxtune tune --`
and `jaxtune profile --` in tests/test_interrupt_cli.py (the command ends, exit 130, no
process left) and in bench/bench_tune_command.py (how long it takes to end)."""

from __future__ import annotations

import textwrap

#: Writes the file its first argument names, whole, then sleeps ten minutes.
SLEEPER = textwrap.dedent(
    """
    import os, pathlib, sys, time
    pathlib.Path(sys.argv[1] + ".tmp").write_text("started")
    os.replace(sys.argv[1] + ".tmp", sys.argv[1])  # whole: the test waits for it to exist
    time.sleep(600)
    """
)

#: Kernel `quick` tunes at once; kernel `slow`'s second config sleeps in the sweep child.
TWO_KERNELS = textwrap.dedent(
    """
    import os, pathlib, time
    import jax, jax.numpy as jnp
    import jaxtune

    @jaxtune.autotuned(configs={"c": [1, 2]}, default={"c": 1}, name="ci.quick")
    def quick(x, *, c):
        return x * c

    @jaxtune.autotuned(configs={"c": [1, 2]}, default={"c": 1}, timeout=600, name="ci.slow")
    def slow(x, *, c):
        if c == 2:
            pathlib.Path(os.environ["MARK"] + ".tmp").write_text("sweeping")
            os.replace(os.environ["MARK"] + ".tmp", os.environ["MARK"])
            time.sleep(600)
        return x * c

    if __name__ == "__main__":
        print(float(jax.jit(lambda x: slow(quick(x)))(jnp.ones(8)).sum()))
    """
)
