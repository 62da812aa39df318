set -x
. tools/tpu/env.sh
python3 -c "import jax; print(jax.devices(), jax.__version__)"
( time python3 -m pytest -p no:xdist -q -p no:cacheprovider tests/tpu -x ) > $OUT/tpu_tier.log 2>&1
tail -5 $OUT/tpu_tier.log
( time python3 bench/bench_tpu.py --only flash_fwd,flash_grad,matmul --json $OUT/tpu_v5e_sweeps.json ) > $OUT/bench_tpu.log 2>&1
tail -30 $OUT/bench_tpu.log
