#!/usr/bin/env bash
# The main job (`make demo`): on a machine with a CUDA driver and a GPU, runs
# examples/quickstart (loads kernels/layernorm.cu, runs it on random data,
# checks it, prints the time). Without one, prewarms the cache for the
# shipped kernels with `jitop build`, which needs no GPU.
set -euo pipefail
build=${1:?usage: demo.sh BUILD_DIR}
cd "$(dirname "$0")/.."

have_gpu() {
    command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU'
}

if have_gpu; then
    echo "demo: GPU found, running examples/quickstart"
    exec "$build/examples/quickstart"
fi
arch=${JITOP_ARCH:-sm_80,sm_90}
echo "demo: no GPU here; prewarming the cache for $arch (jitop build kernels/)"
exec "$build/jitop" build --arch "$arch" kernels/
