# Several parts of the TPU batches in one device call, each under its own time limit, their
# outputs packed into one archive per part (a device call brings back 8 files):
#   bash tools/tpu/batch_session.sh canary:150 headroom:330
# Parts: canary (batch_canary.sh), headroom (batch_headroom.sh), values (batch_values.sh),
# probe (probe_topology.py), capture (probe_capture.py), sweepcapture
# (probe_sweep_capture.py), lowerstart (probe_lowering_start.py), childstart
# (probe_child_start.py), premapped (probe_premapped.py), heap (probe_heap.py), pace|ragged|flash|gmm|tier
# (batch_pace.sh), tier1|tier2|tier3 (batch_tier.sh N: one module of tests/tpu), tierdiag
# (batch_tier.sh diag: the two-jit flash pick against its truth, twice), kernels|
# kernelsbuild|kernelsbench (batch_kernels.sh: issue 60's packaged
# cache, then its figures). ragged and kernelsbench need Tokamax's wheels carried in .whl-tok
# (docs/development.md). A part past its limit gets SIGINT first (pytest then prints its
# summary, failures included), SIGKILL 20 s later.
set -x
FINAL=$OUT
. tools/tpu/env.sh
if [ -d .whl-tok ] && [ ! -d /tmp/jaxtune-tok ]; then
    PIP_CONFIG_FILE=/dev/null python3 -m pip install --isolated -q --no-index --no-deps \
        --no-compile --no-cache-dir --target /tmp/jaxtune-tok .whl-tok/*.whl
fi
[ -d /tmp/jaxtune-tok ] && export PYTHONPATH="$PYTHONPATH:/tmp/jaxtune-tok"
for spec in "$@"; do
    part=${spec%%:*}; limit=${spec##*:}
    work=/tmp/part-$part; rm -rf $work; mkdir -p $work
    case $part in
    canary) script="tools/tpu/batch_canary.sh" ;;
    headroom) script="tools/tpu/batch_headroom.sh" ;;
    values) script="tools/tpu/batch_values.sh" ;;
    probe) script="python3 tools/tpu/probe_topology.py" ;;
    capture) script="python3 tools/tpu/probe_capture.py" ;;
    sweepcapture) script="python3 tools/tpu/probe_sweep_capture.py" ;;
    lowerstart) script="python3 tools/tpu/probe_lowering_start.py" ;;
    childstart) script="python3 tools/tpu/probe_child_start.py" ;;
    premapped) script="python3 tools/tpu/probe_premapped.py" ;;
    heap) script="python3 tools/tpu/probe_heap.py" ;;
    tier1|tier2|tier3|tierdiag) script="tools/tpu/batch_tier.sh ${part#tier}" ;;
    kernels) script="tools/tpu/batch_kernels.sh all" ;;
    kernelsbuild) script="tools/tpu/batch_kernels.sh build" ;;
    kernelsbench) script="tools/tpu/batch_kernels.sh bench" ;;
    *) script="tools/tpu/batch_pace.sh $part" ;;
    esac
    start=$(date +%s)
    case $script in
    python3*) OUT=$work timeout -s INT -k 20 $limit $script > $work/part.log 2>&1 ;;
    *) OUT=$work timeout -s INT -k 20 $limit bash $script > $work/part.log 2>&1 ;;
    esac
    echo "part $part rc=$? in $(( $(date +%s) - start )) s"
    tail -25 $work/part.log
    tar czf $FINAL/$part.tgz -C /tmp part-$part
done
ls -la $FINAL
