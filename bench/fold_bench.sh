#!/usr/bin/env bash
# One command for bench/fold_bench.c (one NVRTC program per source, side by
# side with raw NVRTC): builds it against build/libjitop.a (run `make`
# first) and runs it. On a GPU machine it measures compile + load + lookups;
# without one (or with --compile-only) the compile side only.
#
#   bench/fold_bench.sh [--compile-only] [--reps N] [--arch ARCH]
#
# JSON lines (bench/README.md's format) go to stdout, the summary table with
# the issue's goals to stderr. Environment: BUILD (default build), CUDA_HOME.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
[ -f "$BUILD/libjitop.a" ] || { echo "fold_bench.sh: no $BUILD/libjitop.a: run make first" >&2; exit 1; }
helpers=()
for f in bench/*.c; do
    grep -Eq '^int[[:space:]]+main[[:space:]]*\(' "$f" || helpers+=("$f")
done
mkdir -p "$BUILD/bench"
cc -std=c11 -O2 -g -D_GNU_SOURCE -pthread -Wall -Wextra -Werror -Iinclude -Isrc -Ibench \
    -I"$CUDA_HOME/include" -DJITOP_SOURCE_KERNEL_DIR="\"$PWD/kernels\"" \
    -o "$BUILD/bench/fold_bench" bench/fold_bench.c "${helpers[@]}" \
    -Wl,--whole-archive "$BUILD/libjitop.a" -Wl,--no-whole-archive \
    -L"$CUDA_HOME/lib64" -Wl,-rpath,"$CUDA_HOME/lib64" -lnvrtc -lffi -ldl -lpthread -lm
exec "$BUILD/bench/fold_bench" "$@"
