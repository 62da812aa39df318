# Issue 57 on the lent TPU, one device call per part (each fits the 10-minute limit):
#   bash tools/tpu/batch_pace.sh pace     bench/bench_pace.py --tpu: first sweep vs --retune
#                                         sweep with and without the compilation cache, and
#                                         the refusal filter vs lowering+compiling on the chip
#   bash tools/tpu/batch_pace.sh ragged   Tokamax's 540-config ragged_dot space, exhaustive,
#                                         twice in one cache dir (the second: the --retune
#                                         figure; goal <= 90 s, second <= 0.4x the first);
#                                         every entry's phases and failures end in the JSON
#                                         (RAGGED_STRIDE=5: every 5th config, a quick look)
#   NATIVE=1 bash tools/tpu/batch_pace.sh ragged   the same, each trace's stop sampled
#                                         natively (tools/tpu/native_symbols.py reads it)
#   bash tools/tpu/batch_pace.sh ragspy   as ragged, the --retune under py-spy (.whl-spy carried)
#   bash tools/tpu/batch_pace.sh raggedearly  as ragged, the --retune's first pass captured
#                                         beside its compiles from the cache
#                                         (BENCH_EARLY_PACE_S=0: an experiment for its first stop)
#   bash tools/tpu/batch_pace.sh flash    JAX's flash attention, 16 configs, vs a plain
#                                         in-process loop (goal <= 0.8x), and a 27-config
#                                         Pallas matmul, via bench/bench_tpu.py
#   bash tools/tpu/batch_pace.sh gmm      megablox gmm, 48 tilings, on the program's group sizes
#                                         (bench/bench_values.py --tpu --flows after; goal <= 25 s)
#   bash tools/tpu/batch_pace.sh gmmlp    the same sweep with GMM_LP (6) lowering processes, unrated
#   bash tools/tpu/batch_pace.sh gmmquick the same sweep with the default settings, unrated
#   bash tools/tpu/batch_pace.sh tier     tests/tpu/test_3_refusals.py: no refused config compiles
set -x
. tools/tpu/env.sh
python3 -c "import jax, jaxlib, importlib.metadata as m; print(jax.devices(), jax.__version__, jaxlib.__version__, m.version('libtpu'))"
export JAXTUNE_CACHE_DIR=/tmp/pace-cache
# The native sampler built here where the machine has no C compiler (bench/_timeline.py).
[ -f .native/native_sampler.so ] && export TIMELINE_NATIVE_SO=$PWD/.native/native_sampler.so
case "${1:-pace}" in
pace)
  ( time python3 bench/bench_pace.py --tpu --json $OUT/pace_tpu.json ) > $OUT/bench_pace_tpu.log 2>&1
  tail -30 $OUT/bench_pace_tpu.log ;;
ragged)
  rm -rf $JAXTUNE_CACHE_DIR
  for run in ${RAGGED_RUNS:-first retune}; do  # RAGGED_RUNS=first: one run
    # NATIVE=1: native stacks of each trace's stop (bench/_timeline.py, TIMELINE_NATIVE);
    # a run named *_pf grows the capturing thread's heap first (TIMELINE_PREFAULT_MB).
    pf=; case $run in *_pf) pf=TIMELINE_PREFAULT_MB=${PREFAULT_MB:-1024} ;; esac
    ( time env ${NATIVE:+TIMELINE_NATIVE=$OUT/native_$run} $pf python3 bench/bench_tokamax_tpu.py \
        --part jaxtune --only exhaustive \
        --stride ${RAGGED_STRIDE:-1} --configs 540 --json $OUT/ragged_$run.json \
        --timeline $OUT/timeline_$run.json ) > $OUT/ragged_$run.log 2>&1
    grep -o '"phases": {[^}]*}' $OUT/ragged_$run.log
    tail -15 $OUT/ragged_$run.log
  done
  du -sh $JAXTUNE_CACHE_DIR/xla $JAXTUNE_CACHE_DIR/xla/lowered; ls $JAXTUNE_CACHE_DIR/xla/lowered
  # libtpu's own logs (its profiler's lines among them), where it wrote any.
  [ -d /tmp/tpu_logs ] && ls -la /tmp/tpu_logs && tar czf $OUT/tpu_logs.tgz -C /tmp tpu_logs ;;
raggedearly)
  rm -rf $JAXTUNE_CACHE_DIR
  RAGGED="bench/bench_tokamax_tpu.py --part jaxtune --only exhaustive --stride 1 --configs 540"
  ( time python3 $RAGGED --json $OUT/ragged_first.json --timeline $OUT/timeline_first.json ) > $OUT/ragged_first.log 2>&1
  ( time env BENCH_EARLY_PACE_S=0 python3 $RAGGED --json $OUT/ragged_retune_early.json \
      --timeline $OUT/timeline_retune_early.json ) > $OUT/ragged_retune_early.log 2>&1
  grep -o '"phases": {[^}]*}' $OUT/ragged_*.log ;;
ragspy)
  # As ragged, the --retune under py-spy (carried in .whl-spy: `pip download --no-deps
  # --only-binary=:all: --platform manylinux1_x86_64 -d .whl-spy py-spy`), native stacks
  # of every thread 20 times a second, idle ones too: what a capture's stop waits on.
  rm -rf $JAXTUNE_CACHE_DIR
  python3 -c "import zipfile, glob; zipfile.ZipFile(glob.glob('.whl-spy/*.whl')[0]).extract('py_spy-0.4.3.data/scripts/py-spy', '/tmp/spy')"
  SPY=/tmp/spy/py_spy-0.4.3.data/scripts/py-spy; chmod +x $SPY
  RAGGED="bench/bench_tokamax_tpu.py --part jaxtune --only exhaustive --stride 1 --configs 540"
  ( time python3 $RAGGED --json $OUT/ragged_first.json --timeline $OUT/timeline_first.json ) > $OUT/ragged_first.log 2>&1
  grep -o '"phases": {[^}]*}' $OUT/ragged_first.log
  # The real interpreter: `python3` is a pyenv shim there, under which py-spy found no
  # Python (2026-12-07); a descendant it starts may be traced where ptrace_scope is 1.
  PY=$(python3 -c 'import sys; print(sys.executable)')
  ( time $SPY record --native --idle --subprocesses -r 20 -f speedscope -o $OUT/spy_retune.json -- \
      $PY $RAGGED --json $OUT/ragged_retune.json --timeline $OUT/timeline_retune.json ) > $OUT/ragged_retune.log 2>&1
  grep -o '"phases": {[^}]*}' $OUT/ragged_retune.log
  tail -5 $OUT/ragged_retune.log; ls -la $OUT; gzip $OUT/spy_retune.json
  [ -d /tmp/tpu_logs ] && ls -la /tmp/tpu_logs && tar czf $OUT/tpu_logs.tgz -C /tmp tpu_logs ;;
flash)
  ( time python3 bench/bench_tpu.py --only flash_fwd,matmul --json $OUT/pace_flash.json ) > $OUT/pace_flash.log 2>&1
  tail -30 $OUT/pace_flash.log ;;
gmm)
  ( time python3 bench/bench_values.py --tpu --flows after --json $OUT/pace_gmm.json ) > $OUT/pace_gmm.log 2>&1
  tail -30 $OUT/pace_gmm.log ;;
gmmlp)
  ( time env JAXTUNE_LOWERING_PROCESSES=${GMM_LP:-6} python3 bench/bench_values.py --tpu \
      --flows after --no-truth --json $OUT/pace_gmm_lp.json ) > $OUT/pace_gmm_lp.log 2>&1
  tail -30 $OUT/pace_gmm_lp.log ;;
gmmquick)
  ( time python3 bench/bench_values.py --tpu --flows after --no-truth \
      --json $OUT/pace_gmm_quick.json ) > $OUT/pace_gmm_quick.log 2>&1
  tail -30 $OUT/pace_gmm_quick.log ;;
tier)
  ( time python3 -m pytest -p no:xdist -p no:randomly -v -s --durations=0 -p no:cacheprovider tests/tpu/test_3_refusals.py::test_the_dma_slice_rule_refuses_exactly_the_tokamax_configs_mosaic_refuses_for_it tests/tpu/test_3_refusals.py::test_no_refused_config_compiles_on_the_chip ) > $OUT/pace_tier.log 2>&1
  tail -15 $OUT/pace_tier.log ;;
esac
