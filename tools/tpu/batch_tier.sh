# The TPU tier in one pytest process, then the two-jit program's flash pick against its
# truth twice (what test_1_programs checks), with the entry's decision and times.
# With an argument N, only tests/tpu/test_N_*.py (each fits one device call), no diagnosis:
#   bash tools/tpu/batch_session.sh tier1:560      (or tier2, tier3)
# With "diag", only the diagnosis (two tunes of the program and two truths; not timed yet):
#   bash tools/tpu/batch_session.sh tierdiag:500
. tools/tpu/env.sh
# TIER_TESTS="file::test ..." runs those, in that order, instead of the whole module;
# TIER_K="expression" selects tests by name (pytest's -k).
if [ -n "$1" ] && [ "$1" != diag ]; then
  ( time python3 -m pytest -p no:xdist -p no:randomly -v -p no:cacheprovider --durations=0 \
      ${TIER_TESTS:-tests/tpu/test_$1_*.py} ${TIER_K:+-k "$TIER_K"} -rf ) > $OUT/tpu_tier$1.log 2>&1
  tail -30 $OUT/tpu_tier$1.log
  exit 0
fi
if [ -z "$1" ]; then
  ( time python3 -m pytest -p no:xdist -q -p no:cacheprovider tests/tpu -rf ) > $OUT/tpu_tier.log 2>&1
  tail -8 $OUT/tpu_tier.log
fi
for i in 1 2; do
  export JAXTUNE_CACHE_DIR=/tmp/diag$i
  jaxtune tune -- python -m tests.tpu.two_jits > $OUT/diag_tune$i.log 2>&1
  jaxtune cache show tpu.flash_attention --json > $OUT/diag_show$i.json 2>>$OUT/diag_tune$i.log
  python3 -m tests.tpu.truth two_jits > $OUT/diag_truth$i.json 2>>$OUT/diag_tune$i.log
  python3 - $i <<'PY'
import json, sys, os
i = sys.argv[1]; out = os.environ["OUT"]
e = json.load(open(f"{out}/diag_show{i}.json"))["entries"][0]
t = json.load(open(f"{out}/diag_truth{i}.json"))["tpu.flash_attention"]
best = min(t.values())
from jaxtune._core.vocabulary import config_id
print("stored", e["config"], e.get("decision"), e.get("timer"))
for m in e["measurements"]:
    if m.get("ok"):
        cid = config_id(m["config"])
        print(f"  {cid:28s} sweep min {m['min_us']:8.1f} med {m['median_us']:8.1f}  truth {t.get(cid, 0)*1e6:8.1f} ({t.get(cid, 0)/best:.3f}x)")
PY
done
