#!/usr/bin/env bash
# `jitop build -j N` on generated independent sources, each N from a cold
# cache, and NVRTC's precompiled headers measured (bench/pch_probe.c).
#
#   bench/build_pool.sh [--jobs "1 2 4 8 16"] [--sources 32] [--reps 3] [--light | --uniform]
#                       [--pool-only]      (skip the two NVRTC probes)
#
# The sources are bench/build_pool_sources.sh's: realistic ops (compiles of
# ~0.1-1.3 s each), or with --light small include-free kernels (~20 ms each
# on the H100 machine, where NVRTC's per-process set-up dominates).
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
LIGHT=
POOL_ONLY=
while [ $# -gt 0 ]; do
    case "$1" in
        --jobs) JOBS=$2; shift 2 ;;
        --sources) NSRC=$2; shift 2 ;;
        --reps) REPS=$2; shift 2 ;;
        --light) LIGHT=--light; shift ;;
        --uniform) LIGHT=--uniform; shift ;;
        --pool-only) POOL_ONLY=1; shift ;;
        *) echo "build_pool.sh: unknown argument $1" >&2; exit 2 ;;
    esac
done
[ -x "$BUILD/jitop" ] || { echo "build_pool.sh: $BUILD/jitop not built (make)" >&2; exit 1; }
work=$(mktemp -d "${TMPDIR:-/tmp}/jitop-pool-bench.XXXXXX")
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/src"

# Distinct sources, so that no two share a key: realistic ops (fp16/bf16
# elementwise, layernorm, cooperative groups, softmax), or with --light the
# small include-free ones (bench/build_pool_sources.sh says which).
bench/build_pool_sources.sh "$work/src" "$NSRC" $LIGHT

now_ms() { date +%s%N | awk '{printf "%.1f", $1 / 1e6}'; }
echo "# jitop build -j N, $NSRC ${LIGHT:+${LIGHT#--} }sources, $ARCH, $(nproc) cores online, median of $REPS cold runs"
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
    first=
    [ -n "$base" ] || { base=$med; first=1; }
    awk -v n="$n" -v m="$med" -v b="$base" -v all="${times[*]}" 'BEGIN {
        s = b / m; printf "-j %-3d %8.1f ms  speed-up %5.2fx  per job %.2f  (runs: %s)\n", n, m, s, s / n, all }'
    # What one file costs, as the last run of the line above reported it
    # (its compile, plus the check that found it missing).
    [ -z "$first" ] || grep ' compiled ' "$work/out.txt" | awk '{ print $(NF - 1) }' | sort -n | awk '
        { v[NR] = $1; s += $1 } END {
        printf "#   per file in its last run: min %.1f, median %.1f, max %.1f, mean %.1f ms\n",
            v[1], v[int((NR + 1) / 2)], v[NR], s / NR }'
done

[ -z "$POOL_ONLY" ] || exit 0

# Does the parent's warm-up compile before the fork help a worker's first
# compile? (bench/fork_warm_probe.c; src/build/fork.c runs none.)
cc -std=c11 -O2 -Wall -Wextra -Werror -D_GNU_SOURCE -I"$CUDA_HOME/include" -o "$work/fork_warm_probe" \
    bench/fork_warm_probe.c -L"$CUDA_HOME/lib64" -Wl,-rpath,"$CUDA_HOME/lib64" -lnvrtc
"$work/fork_warm_probe" "$ARCH" 9

# PCH: raw NVRTC in one process (bench/pch_probe.c).
cc -std=c11 -O2 -Wall -Wextra -Werror -D_GNU_SOURCE -I"$CUDA_HOME/include" -o "$work/pch_probe" \
    bench/pch_probe.c -L"$CUDA_HOME/lib64" -Wl,-rpath,"$CUDA_HOME/lib64" -lnvrtc
echo "# NVRTC precompiled headers (bench/pch_probe.c)"
"$work/pch_probe" "$CUDA_HOME" "$ARCH" "$work"
