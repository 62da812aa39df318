# Sourced on a TPU machine with no network, from the repository root:
#   . tools/tpu/env.sh
# Installs the wheels carried in .whl-tpu/ (msgpack, protobuf, xprof: see docs/development.md,
# "The TPU tier") and flax + optax from the machine's own index into /tmp/jaxtune-site, and
# puts the checkout and that folder on PYTHONPATH after the machine's own JAX.
set -e
SITE=/tmp/jaxtune-site
if [ ! -d "$SITE" ]; then
    PIP_CONFIG_FILE=/dev/null python3 -m pip install --isolated -q --no-index --no-deps \
        --no-compile --no-cache-dir --target "$SITE" .whl-tpu/*.whl
    if [ -d /opt/pypi/simple ]; then
        PIP_CONFIG_FILE=/dev/null python3 -m pip install --isolated -q --only-binary=:all: \
            --index-url file:///opt/pypi/simple --target "$SITE.index" flax optax
    fi
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}:$SITE:$SITE.index"
export PYTHONUNBUFFERED=1
set +e
