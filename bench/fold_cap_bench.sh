#!/usr/bin/env bash
# The fold cap (build/build.h's fold rule) on a prewarm sweep: `jitop build
# --op layernorm:DTYPE:COLS` for every width and dtype, in one process, one
# after the other, into an empty cache; then the same sweep again (what a
# second prewarm, or a load of any of the shapes, finds); then one width
# never asked (what the next new shape's cold compile costs after a long
# session). Compile only: no GPU needed.
#
#   bench/fold_cap_bench.sh            (make first; JITOP_CLI picks another build's CLI)
#
# Environment: JITOP_CLI (default build/jitop), ARCH (sm_90), WIDTHS, DTYPES,
# NEW (the width asked last, default 16384), JITOP_FOLD_MAX (the cap).
# Prints, per pass: NVRTC programs compiled, the name expressions in them
# (their sum: the compile work), NVRTC's time summed, and the wall time.
set -euo pipefail
cd "$(dirname "$0")/.."
CLI=${JITOP_CLI:-build/jitop}
ARCH=${ARCH:-sm_90}
WIDTHS=${WIDTHS:-"256 512 768 1024 1536 2048 3072 4096 5120 6144 8192 12288"}
DTYPES=${DTYPES:-"f32 f16 bf16"}
NEW=${NEW:-16384}
[ -x "$CLI" ] || { echo "fold_cap_bench.sh: no $CLI: run make first" >&2; exit 1; }
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT

ops=()
for d in $DTYPES; do
    for w in $WIDTHS; do
        ops+=(--op "layernorm:$d:$w")
    done
done

# pass NAME ARGS...: one CLI run with the verbose log, summed.
pass() {
    local name=$1
    shift
    local t0 t1
    t0=$(date +%s%N)
    JITOP_VERBOSE=1 "$CLI" build --cache-dir "$dir/cache" --arch "$ARCH" "$@" \
        >"$dir/$name.out" 2>"$dir/$name.log"
    t1=$(date +%s%N)
    awk -v name="$name" -v wall="$(((t1 - t0) / 1000000))" '
        /one program with the [0-9]+ instances/ {
            for (i = 1; i <= NF; i++) if ($i == "the") { names += $(i + 1); folds++; break }
        }
        /: NVRTC [0-9.]+ ms/ {
            for (i = 1; i <= NF; i++) if ($i == "NVRTC") { ms += $(i + 1); compiles++; break }
        }
        END {
            # A program with no "one program" line compiled one name (a
            # name alone) or none (the source alone): counted as one.
            printf "%-8s programs %4d  names %5d  nvrtc %9.1f ms  wall %8d ms\n",
                   name, compiles, names + (compiles - folds), ms, wall
        }' "$dir/$name.log"
}

echo "cli $CLI arch $ARCH fold cap ${JITOP_FOLD_MAX:-default}; $(echo $WIDTHS | wc -w) widths x $(echo $DTYPES | wc -w) dtypes"
pass sweep "${ops[@]}"
pass again "${ops[@]}"
pass new --op "layernorm:f32:$NEW"
