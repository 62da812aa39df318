# Issue 55 on the lent TPU, one device call (about 2 minutes after the start): the canary
# search over a `jaxtune profile --` and a `jaxtune tune --` run of a Pallas matmul.
set -x
. tools/tpu/env.sh
python3 -c "import jax, jaxlib, importlib.metadata as m; print(jax.devices(), jax.__version__, jaxlib.__version__, m.version('libtpu'))"
( time python3 tools/tpu/canary_search.py $OUT ) > $OUT/canary_search.log 2>&1
tail -20 $OUT/canary_search.log
