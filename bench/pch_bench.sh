#!/usr/bin/env bash
# jitop's precompiled headers measured through jitop itself (issue 21 part
# 3): in one `jitop build` process, a first source compiled cold (A), then a
# second, different source with the same includes (B), then a light kernel
# with them (C), with JITOP_PCH=0 and with the default policy (a preamble
# that includes cooperative groups or CUB makes a PCH at its first compile).
# Then `jitop build -j J` of 16 sources sharing those includes, both ways
# (more files than workers: the parent compiles the first and the workers
# inherit its PCH). A new
# cache for every run, so every file is compiled. No GPU needed.
#
#   make && bench/pch_bench.sh                    # 3 runs each, sm_90, -j 4
#   bench/pch_bench.sh --reps 5 --arch sm_100 --jobs 8
#
# Prints per file the median of the runs (ms as `jitop build` reports the
# compile), the speed-up, and whether the PCH was created / used (from
# JITOP_VERBOSE's lines); a line that says the binaries differ would be a
# bug (the PCH must never change a binary).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${BUILD:-$root/build}
jitop=$BUILD/jitop
reps=3 arch=sm_90 jobs=4
while [ $# -gt 0 ]; do
    case $1 in
        --reps) reps=$2; shift 2 ;;
        --arch) arch=$2; shift 2 ;;
        --jobs) jobs=$2; shift 2 ;;
        *) echo "usage: pch_bench.sh [--reps N] [--arch ARCH] [--jobs J]" >&2; exit 2 ;;
    esac
done
[ -x "$jitop" ] || { echo "pch_bench: $jitop not built (run make)" >&2; exit 1; }

work=$(mktemp -d "${TMPDIR:-/tmp}/jitop-pch-bench.XXXXXX")
trap 'rm -rf "$work"' EXIT
src=$work/src
mkdir -p "$src"
pre='#include <cooperative_groups.h>
#include <cub/block/block_reduce.cuh>
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include "common.h"'
printf '#pragma once\n#define SCALE 2.0f\n' > "$src/common.h"
cat > "$src/a.cu" <<EOF
$pre
namespace cg = cooperative_groups;
extern "C" __global__ void sum_a(const float *x, float *y) {
    typedef cub::BlockReduce<float, 128> R;
    __shared__ typename R::TempStorage t;
    float s = R(t).Sum(x[threadIdx.x] * SCALE);
    cg::this_thread_block().sync();
    if (threadIdx.x == 0) y[blockIdx.x] = s;
}
EOF
cat > "$src/b.cu" <<EOF
$pre
namespace cg = cooperative_groups;
extern "C" __global__ void max_b(const __half *x, float *y) {
    typedef cub::BlockReduce<float, 256> R;
    __shared__ typename R::TempStorage t;
    float v = __half2float(x[threadIdx.x]) * SCALE;
    float s = R(t).Reduce(v, [](float a, float b) { return a > b ? a : b; });
    cg::this_thread_block().sync();
    if (threadIdx.x == 0) y[blockIdx.x] = s;
}
EOF
cat > "$src/c.cu" <<EOF
$pre
namespace cg = cooperative_groups;
extern "C" __global__ void scale_c(__half *x) {
    cg::this_thread_block().sync();
    x[threadIdx.x] = __float2half(__half2float(x[threadIdx.x]) * SCALE);
}
EOF
for i in $(seq 16); do
    cat > "$src/p$i.cu" <<EOF
$pre
namespace cg = cooperative_groups;
extern "C" __global__ void pool_$i(const float *x, float *y) {
    typedef cub::BlockReduce<float, $((32 * i))> R;
    __shared__ typename R::TempStorage t;
    float s = R(t).Sum(x[threadIdx.x] * SCALE + $i.0f);
    cg::this_thread_block().sync();
    if (threadIdx.x == 0) y[blockIdx.x] = s;
}
EOF
done

median() { sort -n | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
# ms that `jitop build` printed for FILE in OUT ("a.cu sm_90 compiled KEY 302.5 ms")
ms_of() { awk -v f="$1" '$1 == f && $3 == "compiled" {print $5}' "$2"; }
now_ms() { date +%s%3N; }
# A hash of the cubin inside a cache entry (the entry also holds the compile's time): the ELF
# image from its magic to the end of its section or program headers, whichever is last.
cubin_of() {
    python3 - "$1" <<'PY'
import hashlib, struct, sys
d = open(sys.argv[1], "rb").read()
i = d.find(b"\x7fELF")
e = d[i:]
phoff, shoff = struct.unpack_from("<QQ", e, 0x20)
phentsize, phnum, shentsize, shnum = struct.unpack_from("<HHHH", e, 0x36)
n = max(shoff + shentsize * shnum, phoff + phentsize * phnum)
print(hashlib.sha256(e[:n]).hexdigest() if i >= 0 else "no ELF")
PY
}

echo "jitop $("$jitop" --version 2>/dev/null | head -1), $arch, $(nproc) cores, $reps runs each, $(date -u '+%Y-%m-%d %H:%M UTC')"
echo "sources: A, B, C with cooperative_groups.h, cub/block/block_reduce.cuh, cuda_fp16.h, cuda_bf16.h, common.h"
declare -A res
for mode in off on; do
    for r in $(seq "$reps"); do
        cache=$work/cache-$mode-$r
        out=$work/out-$mode-$r
        env_pch=$([ $mode = off ] && echo 0 || echo auto)
        (cd "$src" && JITOP_PCH=$env_pch JITOP_VERBOSE=1 JITOP_CACHE_DIR=$cache \
            "$jitop" build --arch "$arch" -j 1 a.cu b.cu c.cu > "$out" 2> "$out.err")
        for f in a b c; do res[$mode-$f]+="$(ms_of $f.cu "$out") "; done
        [ $mode = on ] && echo "  run $r with PCH: $(grep -c 'PCH created' "$out.err") created, $(grep -c 'PCH used' "$out.err") used"
        # the binaries of the two modes must be the same bytes
        if [ $mode = on ] && [ -d "$work/cache-off-$r" ]; then
            for f in a b c; do
                k_on=$(awk -v f=$f.cu '$1 == f {print $4}' "$out")
                k_off=$(awk -v f=$f.cu '$1 == f {print $4}' "$work/out-off-$r")
                e_on=$cache/v*/${k_on:0:2}/$k_on
                e_off=$work/cache-off-$r/v*/${k_off:0:2}/$k_off
                # shellcheck disable=SC2086
                if [ "$k_on" != "$k_off" ] || [ "$(cubin_of $e_on)" != "$(cubin_of $e_off)" ]; then
                    echo "  BINARIES DIFFER for $f.cu (run $r): a PCH changed a result" >&2
                fi
            done
        fi
    done
done
printf '%-32s %12s %12s %9s\n' "one process, -j 1" "JITOP_PCH=0" "default" "speed-up"
for f in a b c; do
    off=$(echo ${res[off-$f]} | tr ' ' '\n' | median)
    on=$(echo ${res[on-$f]} | tr ' ' '\n' | median)
    label=$([ $f = a ] && echo "A, first (cold; makes the PCH)" || ([ $f = b ] && echo "B, second source" || echo "C, light kernel"))
    printf '%-32s %9.1f ms %9.1f ms %8.2fx\n' "$label" "$off" "$on" "$(echo "$off $on" | awk '{print $1 / $2}')"
done

declare -A wall
for mode in off on; do
    for r in $(seq "$reps"); do
        cache=$work/pool-$mode-$r
        env_pch=$([ $mode = off ] && echo 0 || echo auto)
        t0=$(now_ms)
        (cd "$src" && JITOP_PCH=$env_pch JITOP_CACHE_DIR=$cache "$jitop" build --arch "$arch" \
            -j "$jobs" p*.cu > /dev/null)
        wall[$mode]+="$(( $(now_ms) - t0 )) "
    done
done
off=$(echo ${wall[off]} | tr ' ' '\n' | median)
on=$(echo ${wall[on]} | tr ' ' '\n' | median)
printf '%-32s %9.1f ms %9.1f ms %8.2fx   (runs: %s| %s)\n' "jitop build -j $jobs, 16 sources" \
    "$off" "$on" "$(echo "$off $on" | awk '{print $1 / $2}')" "${wall[off]}" "${wall[on]}"
left=$(find "$work" -name '*.pch' | wc -l)
echo "PCH files left after the runs: $left (expected 0)"
