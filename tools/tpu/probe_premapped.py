"""Does a smaller premapped host buffer shorten a TPU child's start (issue 57)? Opening the
chip (``jax.devices()``) took 7.8-9.1 s of a sweep child's 10.7-12.0 s start on the lent
TPU v5e (2026-12-07, ``probe_child_start.py``), whose host has no transparent hugepages;
Cloud TPU's performance guide says libtpu pins ``TPU_PREMAPPED_BUFFER_SIZE`` bytes of host
memory (4 GiB by default) at start, and that a large one slows the start.

    python3 tools/tpu/probe_premapped.py

One fresh process per size, one JSON line each, seconds from the process's start: JAX
imported, the chip open, megablox gmm's arguments (bf16 [8192, 2048] and [8, 2048, 4096],
160 MiB) put on the chip, a first jitted call, then the arguments fetched back, and how
long the process took to end after its last step. Then the default once more with
libtpu's log on stderr, its lines timed (what the start spends its time on).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

CHILD = r"""
import json, sys, time
t0 = float(sys.argv[1])
marks = {}
def mark(k):
    marks[k] = round(time.time() - t0, 2)
import jax, jax.numpy as jnp, numpy as np
mark("import_jax")
jax.devices()
mark("devices")
try:
    lhs = np.ones((8192, 2048), jnp.bfloat16)
    rhs = np.ones((8, 2048, 4096), jnp.bfloat16)
    a, b = jax.device_put(lhs), jax.device_put(rhs)
    jax.block_until_ready((a, b))
    mark("put_160MiB")
    jax.block_until_ready(jax.jit(lambda x, y: (x[:2048] @ y[0]).sum())(a, b))
    mark("first_call")
    np.asarray(b)
    mark("fetched_128MiB")
except Exception as e:
    marks["error"] = repr(e)[:400]
print("MARKS " + json.dumps(marks), flush=True)
"""


def run(size: str | None, log: bool = False) -> dict:
    env = dict(os.environ)
    env.pop("TPU_PREMAPPED_BUFFER_SIZE", None)
    if size is not None:
        env["TPU_PREMAPPED_BUFFER_SIZE"] = size
    if log:
        env.update(TPU_STDERR_LOG_LEVEL="0", TPU_MIN_LOG_LEVEL="0")
    start = time.time()
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, repr(start)],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    ended = round(time.time() - start, 2)
    marks: dict = {"size": size or "default", "ended": ended}
    for line in proc.stdout.splitlines():
        if line.startswith("MARKS "):
            marks.update(json.loads(line[6:]))
    last = max((v for v in marks.values() if isinstance(v, float)), default=0.0)
    marks["exit_s"] = round(ended - last, 2)
    if "devices" not in marks:
        marks["stderr"] = proc.stderr[-1500:]
    if log:
        marks["log"] = [ln[:200] for ln in proc.stderr.splitlines() if ln[:1] in "IWE"][:400]
    return marks


def main() -> int:
    for size in (None, str(1 << 30), str(256 << 20), str(64 << 20), None):
        print(json.dumps(run(size)), flush=True)
    print(json.dumps(run(None, log=True)), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
