"""Probe (issue 57's lowering in processes): while one process holds the chip, can another
get a TPU topology (``jax.experimental.topologies``) and lower a Pallas TPU kernel for it,
and what backend does that process's kernel code see?

    python tools/tpu/probe_topology.py        # prints one JSON line per step
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

WORKER = r"""
import json, os, sys, time
out = {"JAX_PLATFORMS": os.environ.get("JAX_PLATFORMS")}
t = time.perf_counter()
import jax, jax.numpy as jnp
from jax.experimental import pallas as pl
try:
    out["default_backend"] = jax.default_backend()
except Exception as e:
    out["default_backend"] = f"raised {type(e).__name__}: {e}"[:300]
from jax.experimental import topologies
topo = None
for name in ("v5e:1x1", "v5litepod-1", "TPU v5 lite:1x1", "v5e"):
    try:
        topo = topologies.get_topology_desc(topology_name=name, platform="tpu")
        out["topology"] = name
        out["topology_devices"] = [str(d) for d in topo.devices]
        break
    except Exception as e:
        out.setdefault("topology_errors", []).append(f"{name}: {type(e).__name__}: {e}"[:300])
def kernel(x_ref, o_ref):
    o_ref[...] = x_ref[...] * 2.0
def f(x):
    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        grid=(4,), in_specs=[pl.BlockSpec((256, 512), lambda i: (i, 0))],
        out_specs=pl.BlockSpec((256, 512), lambda i: (i, 0)))(x)
if topo is not None:
    try:
        s = jax.sharding.SingleDeviceSharding(topo.devices[0])
        t1 = time.perf_counter()
        lowered = jax.jit(f).trace(jax.ShapeDtypeStruct((1024, 512), jnp.float32, sharding=s)).lower()
        text = lowered.as_text()
        out["lowered_s"] = time.perf_counter() - t1
        out["has_tpu_custom_call"] = "tpu_custom_call" in text
        try:
            compiled = lowered.compile()
            out["compiled"] = True
        except Exception as e:
            out["compile_error"] = f"{type(e).__name__}: {e}"[:300]
    except Exception as e:
        out["lower_error"] = f"{type(e).__name__}: {e}"[:300]
out["seconds"] = time.perf_counter() - t
print(json.dumps(out), flush=True)
"""

HOLDER = r"""
import sys, time, jax
print("holder", jax.devices(), flush=True)
sys.stdin.read()
"""


def main() -> None:
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    print(holder.stdout.readline().strip(), flush=True)
    for platforms in ("cpu", "", "tpu"):
        env = dict(os.environ, JAX_PLATFORMS=platforms)
        start = time.perf_counter()
        try:
            done = subprocess.run(
                [sys.executable, "-c", WORKER], env=env, capture_output=True, text=True, timeout=120
            )
            print(done.stdout.strip() or done.stderr[-1500:], flush=True)
        except subprocess.TimeoutExpired:
            print(json.dumps({"JAX_PLATFORMS": platforms, "timeout": 120}), flush=True)
        print(
            f"worker JAX_PLATFORMS={platforms!r}: {time.perf_counter() - start:.1f} s", flush=True
        )
    holder.stdin.close()
    holder.wait(timeout=30)


if __name__ == "__main__":
    main()
