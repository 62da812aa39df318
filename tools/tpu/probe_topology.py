"""Probe (issue 57's lowering in processes): while one process holds the chip, can another,
on JAX's CPU platform, lower a Pallas TPU kernel (a plain one, and Tokamax's ragged_dot,
whose code asks the default device what it is) for the chip's topology
(``jax.experimental.topologies``, compile-only), and does the holder, loading the
serialised program, get the same program it lowers itself, and run it?

    python tools/tpu/probe_topology.py        # prints one JSON line per step
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time

COMMON = r"""
import hashlib, json, os, re, sys, time
import jax, jax.numpy as jnp
from jax.experimental import pallas as pl

def plain(x):
    def kernel(x_ref, o_ref):
        o_ref[...] = x_ref[...] * 2.0
    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        grid=(4,), in_specs=[pl.BlockSpec((256, 512), lambda i: (i, 0))],
        out_specs=pl.BlockSpec((256, 512), lambda i: (i, 0)))(x)

def ragged(l, r, g):
    from tokamax._src.ops.ragged_dot import pallas_mosaic_tpu as rd
    cfg = dict(tile_m=1024, tile_k=512, tile_n=1024, input_buffer_count=2, combine_scopes=False)
    return rd.PallasMosaicTpuRaggedDot().replace(config=rd.Config(**cfg))(l, r, group_sizes=g)

CASES = {
    "plain": (plain, [((1024, 512), "float32")]),
    "ragged": (ragged, [((8192, 2048), "bfloat16"), ((8, 2048, 2048), "bfloat16"), ((8,), "int32")]),
}

def specs(case):
    return [jax.ShapeDtypeStruct(s, jnp.dtype(d)) for s, d in CASES[case][1]]

def digest(exported):
    text = exported.mlir_module()
    text = re.sub(r"loc\([^)]*\)", "", text)
    return hashlib.blake2b(text.encode(), digest_size=8).hexdigest()
"""

WORKER = (
    COMMON
    + r"""
out = {"JAX_PLATFORMS": os.environ.get("JAX_PLATFORMS")}
t = time.perf_counter()
from jax.experimental import topologies
try:
    topo = topologies.get_topology_desc(
        topology_name="v5e:1x1", platform="tpu", chips_per_host_bounds=(1, 1, 1))
    out["topology"] = [d.device_kind for d in topo.devices]
    out["topology_s"] = time.perf_counter() - t
    jax.config.update("jax_default_device", topo.devices[0])
except Exception as e:
    out["topology_error"] = f"{type(e).__name__}: {e}"[:400]
    print(json.dumps(out), flush=True); sys.exit(0)
folder = sys.argv[1]
for case in CASES:
    try:
        t1 = time.perf_counter()
        exported = jax.export.export(jax.jit(CASES[case][0]), platforms=("tpu",))(*specs(case))
        blob = exported.serialize()
        out[case + "_export_s"] = time.perf_counter() - t1
        out[case + "_digest"] = digest(exported)
        open(os.path.join(os.environ.get("OUT", folder), case + "_worker.mlir"), "w").write(exported.mlir_module())
        open(os.path.join(folder, case + ".bin"), "wb").write(blob)
        t1 = time.perf_counter()
        s = jax.sharding.SingleDeviceSharding(topo.devices[0])
        sharded = [jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s) for x in specs(case)]
        jax.jit(CASES[case][0]).trace(*sharded).lower().compile()
        out[case + "_deviceless_compile_s"] = time.perf_counter() - t1
    except Exception as e:
        out[case + "_error"] = f"{type(e).__name__}: {e}"[:400]
out["seconds"] = time.perf_counter() - t
print(json.dumps(out), flush=True)
"""
)

HOLDER = (
    COMMON
    + r"""
print("holder", jax.devices(), flush=True)
folder = sys.stdin.readline().strip()
out = {}
for case in CASES:
    try:
        mine = jax.export.export(jax.jit(CASES[case][0]))(*specs(case))
        out[case + "_own_digest"] = digest(mine)
        open(os.path.join(os.environ.get("OUT", folder), case + "_holder.mlir"), "w").write(mine.mlir_module())
        path = os.path.join(folder, case + ".bin")
        if not os.path.exists(path):
            out[case] = "no worker program"; continue
        t = time.perf_counter()
        theirs = jax.export.deserialize(bytearray(open(path, "rb").read()))
        out[case + "_worker_digest"] = digest(theirs)
        args = [jnp.zeros(x.shape, x.dtype) if x.dtype != jnp.int32 else jnp.full(x.shape, 1024, x.dtype) for x in specs(case)]
        run = jax.jit(theirs.call).lower(*args).compile()
        out[case + "_load_compile_s"] = time.perf_counter() - t
        jax.block_until_ready(run(*args))
        out[case + "_ran"] = True
    except Exception as e:
        out[case + "_error"] = f"{type(e).__name__}: {e}"[:400]
print(json.dumps(out), flush=True)
"""
)


def main() -> None:
    folder = tempfile.mkdtemp()
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    print(holder.stdout.readline().strip(), flush=True)
    for platforms in ("cpu",):
        env = dict(os.environ, JAX_PLATFORMS=platforms, ALLOW_MULTIPLE_LIBTPU_LOAD="1")
        start = time.perf_counter()
        try:
            done = subprocess.run(
                [sys.executable, "-c", WORKER, folder],
                env=env,
                capture_output=True,
                text=True,
                timeout=150,
            )
            print(done.stdout.strip() or done.stderr[-1500:], flush=True)
            print(done.stderr[-600:], flush=True)
        except subprocess.TimeoutExpired:
            print(json.dumps({"JAX_PLATFORMS": platforms, "timeout": 150}), flush=True)
        print(
            f"worker JAX_PLATFORMS={platforms!r}: {time.perf_counter() - start:.1f} s", flush=True
        )
    holder.stdin.write(folder + "\n")
    holder.stdin.flush()
    print(holder.stdout.readline().strip(), flush=True)
    holder.stdin.close()
    holder.wait(timeout=60)


if __name__ == "__main__":
    main()
