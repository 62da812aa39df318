# Sourced on a TPU machine with no network, from the repository root:
#   . tools/tpu/env.sh
# Installs the wheels carried in .whl-tpu/ (msgpack, protobuf, xprof, sybil, flatbuffers: see
# docs/development.md, "The TPU tier") and flax + optax from the machine's own index into
# /tmp/jaxtune-site, puts the checkout and that folder on PYTHONPATH after the machine's own
# JAX, and a `jaxtune` command (the checkout's `python3 -m jaxtune`) on PATH.
set -e
SITE=/tmp/jaxtune-site
if [ ! -d "$SITE" ]; then
    PIP_CONFIG_FILE=/dev/null python3 -m pip install --isolated -q --no-index --no-deps \
        --no-compile --no-cache-dir --target "$SITE" .whl-tpu/*.whl
    if [ -d /opt/pypi/simple ]; then
        PIP_CONFIG_FILE=/dev/null python3 -m pip install --isolated -q --only-binary=:all: \
            --index-url file:///opt/pypi/simple --target "$SITE.index" flax optax matplotlib
    fi
    mkdir -p "$SITE.bin"
    printf '#!/bin/sh\nexec python3 -m jaxtune "$@"\n' > "$SITE.bin/jaxtune"
    chmod +x "$SITE.bin/jaxtune"
fi
export PATH="$SITE.bin:$PATH"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}:$SITE:$SITE.index"
export PYTHONUNBUFFERED=1
set +e
