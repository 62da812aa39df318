#!/usr/bin/env bash
# Issue 58 on the lent TPU v5e, in one call: `jaxtune profile --` of a Flax NNX training step
# (tests/tpu/nnx_model.py at its BENCH size: 4 layers, JAX's flash attention as the autotuned
# tpu.flash_attention under grad) and the issue's "Done when" checked on its report: FLOP/s
# and % of peak for the forward, dkv and dq kernels, no joined row, every Pallas row under
# its autotuned kernel, the over-peak field in --json. Also the fixtures' captures, for
# comparison (HEADROOM_CAPTURES=0: not). Usage: bash tools/tpu/batch_headroom.sh  (results under $OUT or /tmp).
set -euo pipefail
OUT=${OUT:-/tmp/headroom}
mkdir -p "$OUT"
. tools/tpu/env.sh
cat > /tmp/nnx_profiled.py <<'PY'
import jaxtune
from tests.tpu import nnx_model as m
step = jaxtune.profiled(m.train_step)
graphdef, state, tokens = m.init(m.BENCH)
for _ in range(4):
    state, loss = step(graphdef, state, tokens)
print("loss", float(loss))
PY
PYTHONPATH="$PWD:$PYTHONPATH" python3 -m jaxtune profile --logdir "$OUT/nnx" -- python3 /tmp/nnx_profiled.py 2>&1 | tail -60 | tee "$OUT/nnx_profile.txt"
report=$(ls "$OUT"/nnx/*/report.json | head -1)
cp "$report" "$OUT/nnx_step.json"
python3 -m jaxtune report "$(dirname "$report")" --html "$OUT/nnx_step.html" || true
[ "${HEADROOM_CAPTURES:-1}" = 0 ] || python3 tests/fixtures/v5e/capture.py "$OUT/traces" 2>&1 | tail -5
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
