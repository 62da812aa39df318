# Issue 54 on the lent TPU, one device call: bench/bench_values.py --tpu (the before/after
# figures of docs/benchmarks.md), then the tier's grouped-matmul test.
set -x
. tools/tpu/env.sh
python3 -c "import jax, jaxlib, importlib.metadata as m; print(jax.devices(), jax.__version__, jaxlib.__version__, m.version('libtpu'))"
( time python3 bench/bench_values.py --tpu --json $OUT/values_tpu_v5e.json ) > $OUT/bench_values_tpu.log 2>&1
tail -40 $OUT/bench_values_tpu.log
( time python3 -m pytest -p no:xdist -p no:randomly -q -p no:cacheprovider tests/tpu -k grouped_matmul ) > $OUT/values_tier.log 2>&1
tail -15 $OUT/values_tier.log
