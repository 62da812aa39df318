"""Where a lowering process's start goes on the chip's host (issue 57): the steps a
lowering process (jaxtune/_tuning/sweep/lowering_worker.py) takes before it tells of its
first config, timed in one process alone and in twelve side by side, for Tokamax's
ragged_dot (bench/bench_tokamax_tpu.py's problem).

    python3 tools/tpu/probe_lowering_start.py [--count 12]

One process alone with the chip free, then one alone and twelve side by side while this
process holds the chip, as a sweep's process does.

Run after `. tools/tpu/env.sh` with Tokamax's wheels on PYTHONPATH (batch_session.sh
does both). Prints one JSON line per process: seconds from its start to each step.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

CHILD = r"""
import json, sys, time
t0 = time.perf_counter()
marks = {}
def mark(k):
    marks[k] = round(time.perf_counter() - t0, 2)
import jax
mark("import_jax")
from jax.experimental import topologies
topo = topologies.get_topology_desc(
    topology_name="v5e:1x1", platform="tpu", chips_per_host_bounds=(1, 1, 1)
)
jax.config.update("jax_default_device", topo.devices[0])
mark("topology")
import jaxtune
mark("import_jaxtune")
sys.path.insert(0, "bench")
from absl import flags
flags.FLAGS(["probe"])
import bench_tokamax_tpu as b
mark("import_kernel_module")
import jax.numpy as jnp
from jax import export
spec = (
    jax.ShapeDtypeStruct((8192, 2048), jnp.bfloat16),
    jax.ShapeDtypeStruct((8, 2048, 2048), jnp.bfloat16),
    jax.ShapeDtypeStruct((8,), jnp.int32),
)
for i, (tm, tk, tn) in enumerate([(512, 512, 512), (1024, 512, 1024), (256, 1024, 512)]):
    cfg = dict(tile_m=tm, tile_k=tk, tile_n=tn, input_buffer_count=2, combine_scopes=False)
    f = jax.jit(lambda l, r, g, cfg=cfg: b._ragged_dot(l, r, g, **cfg))
    export.export(f, platforms=["tpu"])(*spec)
    mark(f"export_{i}")
print(json.dumps(marks), flush=True)
"""


def run(count: int) -> float:
    env = dict(os.environ, JAX_PLATFORMS="cpu", ALLOW_MULTIPLE_LIBTPU_LOAD="1", JAXTUNE_MODE="off")
    start = time.perf_counter()
    procs = [
        subprocess.Popen([sys.executable, "-c", CHILD], env=env, stdout=subprocess.PIPE, text=True)
        for _ in range(count)
    ]
    for p in procs:
        out, _ = p.communicate(timeout=300)
        print(f"{count} side by side: {out.strip()}", flush=True)
    return time.perf_counter() - start


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--count", type=int, default=12)
    args = ap.parse_args()
    print(f"alone, chip free: {run(1):.1f} s", flush=True)
    # As in a sweep: the parent holds the chip while the processes start.
    import jax

    print(jax.devices(), flush=True)
    print(f"alone: {run(1):.1f} s", flush=True)
    print(f"{args.count} side by side: {run(args.count):.1f} s", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
