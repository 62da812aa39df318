# Issue 60 on the lent TPU v5e: the packaged cache of jaxtune.kernels
# (tools/build_kernels_cache.py), then the "Done when" figures (bench/bench_kernels_tpu.py),
# as parts of tools/tpu/batch_session.sh (docs/kernels.md, "How the packaged table is made"):
#   bash tools/tpu/batch_session.sh kernelsbuild:540
#       call 1: the small grid (18 shapes, ~570 s estimated), as far as the build's deadline
#       (400 s): the shapes the bench compares come first
#   KERNELS_DEADLINE=140 bash tools/tpu/batch_session.sh kernelsbench:340 kernelsbuild:180
#       call 2: the figures (~300 s estimated), then the build goes on with the shapes the
#       table lacks (the table from call 1 must be in the working tree or /tmp; below)
#   KERNELS_DEADLINE=170 bash tools/tpu/batch_session.sh kernelsbuild:210 kernelsbench:330
#       both in one call: the build tunes only the grid's first shapes
# The build tunes into /tmp/jaxtune-kernels-tune (a second build on a warm machine resumes
# there: shapes tuned already are kept) and exports to jaxtune/kernels/data/cache/; the
# table is also kept in /tmp/jaxtune-kernels-cache (the bench registers it: it outlives the
# working tree's copy while the machine stays warm) and in $OUT/cache/, which comes back in
# the part's archive: unpack it into jaxtune/kernels/data/cache/ here, commit it, and it
# travels with the next call's working tree. Settings: KERNELS_GRID (small|full),
# KERNELS_ONLY (flash,gmm), KERNELS_DEADLINE (seconds after which the build starts no
# sweep), KERNELS_BENCH_ONLY (nnx,gmm,tokamax; rpa, JAX's ragged paged attention, runs
# when named: KERNELS_BENCH_ONLY=rpa bash tools/tpu/batch_kernels.sh bench, ~90 s), KERNELS_EXACT_BUDGET (the NNX step's exact
# flash sweep, 64 configs), KERNELS_SHAPES (the build's first N shapes). KERNELS_DRY=1:
# both on CPU in TPU interpret mode at tiny shapes, the table in /tmp (never the package's),
# with the python3 on PATH (no env.sh), to try this script off the chip:
#   OUT=/tmp/o KERNELS_DRY=1 PATH=/work/venv311/bin:$PATH bash tools/tpu/batch_kernels.sh all
set -x
KEEP=/tmp/jaxtune-kernels-cache
TABLE=jaxtune/kernels/data/cache
TUNE=/tmp/jaxtune-kernels-tune
DRY=""
if [ -n "$KERNELS_DRY" ]; then
  DRY=--dry; KEEP=/tmp/jaxtune-kernels-dry-keep; TABLE=/tmp/jaxtune-kernels-dry/cache
  TUNE=/tmp/jaxtune-kernels-dry-tune; rm -rf $TUNE $TABLE
  export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
else
  . tools/tpu/env.sh
  python3 -c "import jax, jaxlib, importlib.metadata as m; print(jax.devices(), jax.__version__, jaxlib.__version__, m.version('libtpu'))"
fi
case "${1:-all}" in build|all)
  ( time python3 tools/build_kernels_cache.py $DRY --out $TABLE --grid "${KERNELS_GRID:-small}" \
      --only "${KERNELS_ONLY:-flash,gmm}" --cache-dir $TUNE \
      --deadline-s "${KERNELS_DEADLINE:-400}" ${KERNELS_SHAPES:+--shapes $KERNELS_SHAPES} --json $OUT/build.json ) > $OUT/build.log 2>&1
  grep -v '^ *[{}"]' $OUT/build.log | tail -45
  if [ -d $TABLE ]; then
    rm -rf $KEEP && cp -r $TABLE $KEEP && cp -r $TABLE $OUT/cache
    python3 -m jaxtune cache list --layer $TABLE > $OUT/cache_list.txt 2>&1
    tail -5 $OUT/cache_list.txt
  fi ;;
esac
case "${1:-all}" in bench|all)
  packaged=""
  [ -d $KEEP ] && packaged="--packaged $KEEP"
  ( time python3 bench/bench_kernels_tpu.py $DRY $packaged --only "${KERNELS_BENCH_ONLY:-nnx,gmm,tokamax}" \
      ${KERNELS_EXACT_BUDGET:+--exact-budget $KERNELS_EXACT_BUDGET} --json $OUT/bench.json ) > $OUT/bench.log 2>&1
  grep -E '^(nnx|gmm|tokamax|rpa)|failed|Error' $OUT/bench.log | tail -30
  tail -5 $OUT/bench.log ;;
esac
ls -la $OUT
