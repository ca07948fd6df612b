#!/usr/bin/env bash
# `jitop build -j N` on generated independent sources, each N from a cold
# cache, and NVRTC's precompiled headers measured (bench/pch_probe.c).
#
#   bench/build_pool.sh [--jobs "1 2 4 8 16"] [--sources 32] [--reps 3]
#
# Environment: BUILD (build dir holding jitop; default build), CUDA_HOME
# (default /usr/local/cuda), JITOP_ARCH (default sm_90). Prints one line per N:
# the median wall time of the whole command over --reps runs (each on an
# empty cache), the speed-up over the first N, and that speed-up divided by
# N (the issue's goal: >= 0.6 up to the core count). No GPU is needed.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
ARCH=${JITOP_ARCH:-sm_90}
JOBS="1 2 4 8 16"
NSRC=32
REPS=3
while [ $# -gt 0 ]; do
    case "$1" in
        --jobs) JOBS=$2; shift 2 ;;
        --sources) NSRC=$2; shift 2 ;;
        --reps) REPS=$2; shift 2 ;;
        *) echo "build_pool.sh: unknown argument $1" >&2; exit 2 ;;
    esac
done
[ -x "$BUILD/jitop" ] || { echo "build_pool.sh: $BUILD/jitop not built (make)" >&2; exit 1; }
work=$(mktemp -d "${TMPDIR:-/tmp}/jitop-pool-bench.XXXXXX")
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/src"

# Each source a small templated kernel file of its own (a reduction, a
# scale, an elementwise op instantiated at two types), about one typical
# op: distinct text, so no two share a key.
for i in $(seq 1 "$NSRC"); do
    cat > "$work/src/op$i.cu" <<CU
template <typename T, int B>
__device__ T block_sum_$i(T v) {
    __shared__ T s[B];
    s[threadIdx.x] = v;
    __syncthreads();
    for (int o = B / 2; o > 0; o /= 2) {
        if (threadIdx.x < o) s[threadIdx.x] += s[threadIdx.x + o];
        __syncthreads();
    }
    return s[0];
}
template <typename T>
__device__ T op_$i(T a, T b) { return a * T($i) + b / T($i + 1); }
extern "C" __global__ void reduce_$i(const float *x, float *y, int n) {
    float v = 0;
    for (int k = blockIdx.x * 256 + threadIdx.x; k < n; k += gridDim.x * 256) v += x[k];
    v = block_sum_$i<float, 256>(v);
    if (threadIdx.x == 0) atomicAdd(y, v);
}
extern "C" __global__ void map_f_$i(const float *a, const float *b, float *c, int n) {
    int k = blockIdx.x * blockDim.x + threadIdx.x;
    if (k < n) c[k] = op_$i<float>(a[k], b[k]);
}
extern "C" __global__ void map_d_$i(const double *a, const double *b, double *c, int n) {
    int k = blockIdx.x * blockDim.x + threadIdx.x;
    if (k < n) c[k] = op_$i<double>(a[k], b[k]);
}
CU
done

now_ms() { date +%s%N | awk '{printf "%.1f", $1 / 1e6}'; }
echo "# jitop build -j N, $NSRC sources, $ARCH, $(nproc) cores online, median of $REPS cold runs"
base=
for n in $JOBS; do
    times=()
    for r in $(seq 1 "$REPS"); do
        rm -rf "$work/cache"
        t0=$(now_ms)
        JITOP_JOB_MEM=0 "$BUILD/jitop" build --cache-dir "$work/cache" --arch "$ARCH" -j "$n" \
            "$work/src" > "$work/out.txt"
        t1=$(now_ms)
        compiled=$(grep -c ' compiled ' "$work/out.txt" || true)
        [ "$compiled" = "$NSRC" ] || { echo "build_pool.sh: -j $n compiled $compiled of $NSRC" >&2; exit 1; }
        times+=("$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')")
    done
    med=$(printf '%s\n' "${times[@]}" | sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }')
    [ -n "$base" ] || base=$med
    awk -v n="$n" -v m="$med" -v b="$base" -v all="${times[*]}" 'BEGIN {
        s = b / m; printf "-j %-3d %8.1f ms  speed-up %5.2fx  per job %.2f  (runs: %s)\n", n, m, s, s / n, all }'
done

# PCH: raw NVRTC in one process (bench/pch_probe.c).
cc -std=c11 -O2 -Wall -Wextra -Werror -D_GNU_SOURCE -I"$CUDA_HOME/include" -o "$work/pch_probe" \
    bench/pch_probe.c -L"$CUDA_HOME/lib64" -Wl,-rpath,"$CUDA_HOME/lib64" -lnvrtc
echo "# NVRTC precompiled headers (bench/pch_probe.c)"
"$work/pch_probe" "$CUDA_HOME" "$ARCH" "$work"
