#!/usr/bin/env bash
# Issue 58 on the lent TPU v5e, in one call: capture the NNX training step's profile
# (tests/fixtures/v5e/capture.py's nnx_step, which runs JAX's flash attention under grad)
# and check the issue's "Done when": FLOP/s and % of peak for the forward, dkv and dq
# kernels, no joined row, every Pallas row under its autotuned kernel, the over-peak
# field in --json. Usage: bash tools/tpu/batch_headroom.sh  (results under $OUT or /tmp).
set -euo pipefail
OUT=${OUT:-/tmp/headroom}
mkdir -p "$OUT"
. tools/tpu/env.sh
python3 tests/fixtures/v5e/capture.py "$OUT/traces" 2>&1 | tail -20
python3 -m jaxtune report "$OUT/traces/nnx_step.xplane.pb" --top 10 | tee "$OUT/nnx_step.txt"
python3 -m jaxtune report "$OUT/traces/nnx_step.xplane.pb" --json > "$OUT/nnx_step.json"
python3 - "$OUT/nnx_step.json" <<'PY'
import json, sys
doc = json.load(open(sys.argv[1]))
pallas = [k for k in doc["kernels"] if k["kind"] == "pallas"]
names = {k["name"] for k in pallas}
want = {"_flash_attention_kernel", "_flash_attention_dkv_kernel", "_flash_attention_dq_kernel"}
problems = []
if not want <= names:
    problems.append(f"missing kernels: {want - names}")
for k in pallas:
    if " + " in k["name"]:
        problems.append(f"joined row: {k['name']}")
    if not k["kernel_id"]:
        problems.append(f"{k['name']} is under no autotuned kernel")
    if k["flops_per_s"] is None or k["compute_peak"] is None:
        problems.append(f"{k['name']}: no FLOP/s or % of peak")
    if "over_peak" not in k:
        problems.append(f"{k['name']}: no over_peak field")
print("\n".join(problems) or "done-when: all checks passed")
sys.exit(1 if problems else 0)
PY
