"""Where a TPU sweep child's start goes (issue 57): megablox gmm's sweep spent 9.3 s of
34.5 s in its child's start (TPU v5e, 2026-12-05). On TPU no child is started ahead of
need, since it could take the chip the program still holds. Could one import JAX, the
sweep code and the kernel's module while another process holds the chip, and open the
chip once that process ends?

    python3 tools/tpu/probe_child_start.py

This process never opens the chip. Three cases, one JSON line each, seconds from each
child's start:
- ``cold``: one child alone, the chip free: its imports, then ``jax.devices()`` and a first
  jitted call (what a sweep child pays now);
- ``ahead``: a holder process opens the chip and keeps it for ``HOLD_S``; meanwhile a child
  imports everything (no backend), then waits for the holder's process to end and opens
  the chip (what a child started ahead of need would pay once the program ends:
  ``after_holder``). Waiting only for the holder's last step is too early: libtpu refused
  the chip while the holder was still ending (3.7 s, 2026-12-07);
- ``cold_after``: as ``cold``, started only once a holder has ended (the chip's release).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

HOLD_S = 8.0

CHILD = r"""
import json, os, sys, time
t0 = float(sys.argv[1])
marks = {"python": round(time.time() - t0, 2)}
def mark(k):
    marks[k] = round(time.time() - t0, 2)
import jax
mark("import_jax")
import jaxtune._tuning.sweep.serve
mark("import_sweep")
from jax.experimental.pallas.ops.tpu.megablox import gmm
mark("import_kernel")
holder = sys.argv[2] if len(sys.argv) > 2 else None
if holder:
    marks["backends_before_wait"] = bool(jax._src.xla_bridge._backends)
    while os.path.exists(f"/proc/{holder}"):  # reaped by the probe once it ended
        time.sleep(0.02)
    mark("holder_gone")
try:
    print(jax.devices())
    mark("devices")
    import jax.numpy as jnp
    jax.block_until_ready(jax.jit(lambda x: x * 2)(jnp.ones(8)))
    mark("first_call")
except Exception as e:
    marks["error"] = repr(e)[:300]
print("MARKS " + json.dumps(marks), flush=True)
"""

HOLDER = r"""
import os, sys, time
import jax, jax.numpy as jnp
flag = sys.argv[1]
jax.block_until_ready(jnp.ones(8) * 2)
print("holder has", jax.devices(), flush=True)
open(flag + ".up", "w").close()
time.sleep(float(sys.argv[2]))
os.unlink(flag)
"""


def child(*extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", CHILD, repr(time.time()), *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def marks(proc: subprocess.Popen[str]) -> dict:
    out, _ = proc.communicate(timeout=180)
    for line in out.splitlines():
        if line.startswith("MARKS "):
            return json.loads(line[6:])
    return {"output": out[-2000:]}


def hold(flag: str) -> subprocess.Popen[str]:
    open(flag, "w").close()
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, flag, str(HOLD_S)], text=True)
    while not os.path.exists(flag + ".up"):
        if proc.poll() is not None:
            raise SystemExit("the holder ended before it held the chip")
        time.sleep(0.05)
    return proc


def main() -> int:
    print(json.dumps({"case": "cold", **marks(child())}), flush=True)
    flag = f"/tmp/probe-holder-{os.getpid()}"
    holder = hold(flag)
    started = time.time()
    ahead = child(str(holder.pid))
    holder.wait()
    gone = time.time() - started
    result = marks(ahead)
    result["holder_gone_at"] = round(gone, 2)
    if "first_call" in result:
        result["after_holder"] = round(result["first_call"] - result.get("holder_gone", gone), 2)
    print(json.dumps({"case": "ahead", **result}), flush=True)
    holder = hold(flag)
    holder.wait()
    print(json.dumps({"case": "cold_after", **marks(child())}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
