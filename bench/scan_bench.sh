#!/usr/bin/env bash
# One command for bench/scan_bench.c (the include scanner's speed): builds
# it against build/libjitop.a (run `make` first) and runs it on
# kernels/layernorm.cu and the toolkit headers it reads (about 1.6 MB), or
# on the files given.
#
#   bench/scan_bench.sh [--reps N] [FILE...]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
[ -f "$BUILD/libjitop.a" ] || { echo "scan_bench.sh: no $BUILD/libjitop.a: run make first" >&2; exit 1; }
mkdir -p "$BUILD/bench"
cc -std=c11 -O2 -g -D_GNU_SOURCE -pthread -Wall -Wextra -Werror -Iinclude -Isrc -Ibench \
    -I"$CUDA_HOME/include" -o "$BUILD/bench/scan_bench" bench/scan_bench.c \
    "$BUILD/libjitop.a" -ldl -lpthread -lm
reps=()
if [ "${1:-}" = --reps ]; then reps=(--reps "$2"); shift 2; fi
files=("$@")
if [ ${#files[@]} -eq 0 ]; then
    files=(kernels/layernorm.cu)
    for h in builtin_types.h crt/host_defines.h cuda_bf16.h cuda_bf16.hpp \
        cuda_device_runtime_api.h cuda_fp16.h cuda_fp16.hpp cuda_runtime_api.h device_types.h \
        driver_types.h surface_types.h texture_types.h vector_functions.h vector_functions.hpp \
        vector_types.h; do
        files+=("$CUDA_HOME/include/$h")
    done
fi
exec "$BUILD/bench/scan_bench" "${reps[@]}" "${files[@]}"
