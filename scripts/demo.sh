#!/usr/bin/env bash
# The main job (`make demo`): on a machine with a CUDA driver and a GPU, runs
# examples/quickstart (loads kernels/layernorm.cu, runs it on random data,
# checks it, prints the time). Without one, prewarms the cache with
# `jitop build`, which needs no GPU: the shipped kernels, and the layernorm
# instances the quickstart will ask for (--op), so that its first run on a
# GPU of one of those archs compiles nothing.
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
# What examples/quickstart asks for: jitop_layernorm_forward on float32 rows
# of 1024 (its N), whose instances --op compiles into the source's binary.
echo "demo: no GPU here; prewarming the cache for $arch (jitop build --op layernorm:f32:1024 kernels/)"
exec "$build/jitop" build --arch "$arch" --op layernorm:f32:1024 kernels/
