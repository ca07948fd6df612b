#!/usr/bin/env bash
# jitop's benchmarks against its peers, in one go (`make bench` calls this).
#
#   bench/run.sh [--out DIR] [--quick | --gpu-smoke] [--budget SECONDS]
#
#   --out DIR      results and logs (default bench/out); bench/RESULTS.md and
#                  bench/charts/*.png are written from them at the end
#   --quick        fewer repetitions, no torch extension builds (a first look)
#   --gpu-smoke    every GPU sub-benchmark with the minimum repetitions (an
#                  integration check: the figures are not worth quoting)
#   --budget S     the whole run stops starting new steps after S seconds
#                  (default 540: `make bench` builds first, and all of it
#                  must fit in 10 minutes)
#   --only LIST    run only these steps (comma-separated names, e.g.
#                  drive-gpu,lltm_bench) into an --out dir that keeps the
#                  other steps' results; the report is made from all of them
#
# Environment: BUILD (absolute build dir; default build), CUDA_HOME,
# DEPS_PREFIX (as for make), PYTHON (default python3).
#
# Every step runs under `timeout`, writes OUT/<step>.jsonl (figures) and
# OUT/<step>.log (its stderr) and is recorded in OUT/steps.jsonl; a step that
# fails or times out is reported as such and the run goes on. Without a GPU
# only the compile-and-cache steps run; the others are listed as skipped.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
ROOT=$PWD

OUT=bench/out
MODE=full
BUDGET=
ONLY=
while [ $# -gt 0 ]; do
    case "$1" in
        --out) OUT=${2:?--out needs a directory}; shift 2 ;;
        --out=*) OUT=${1#--out=}; shift ;;
        --quick) MODE=quick; shift ;;
        --gpu-smoke) MODE=smoke; shift ;;
        --budget) BUDGET=${2:?--budget needs seconds}; shift 2 ;;
        --only) ONLY=${2:?--only needs a comma-separated list of steps}; shift 2 ;;
        --budget=*) BUDGET=${1#--budget=}; shift ;;
        -h|--help) sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "bench/run.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
    esac
done
case "$MODE" in full) : "${BUDGET:=540}" ;; quick) : "${BUDGET:=300}" ;; smoke) : "${BUDGET:=420}" ;; esac
case "$BUDGET" in ''|*[!0-9]*) echo "bench/run.sh: --budget must be whole seconds" >&2; exit 2 ;; esac

BUILD=${BUILD:-$ROOT/build}
case "$BUILD" in /*) ;; *) BUILD=$ROOT/$BUILD ;; esac
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
PYTHON=${PYTHON:-python3}
mkdir -p "$OUT" || exit 1
OUT=$(cd "$OUT" && pwd)
BB=$BUILD/bench
mkdir -p "$BB"
# A fresh run: only what earlier runs of this script wrote is removed.
[ -n "$ONLY" ] || rm -f "$OUT"/*.jsonl "$OUT"/*.log "$OUT"/torch_lltm_ext_dir
rm -rf "$OUT"/work-* "$OUT"/cache-*

START=$(date +%s)
DEADLINE=$((START + BUDGET))
RESERVE=25 # kept for the report at the end

export JITOP_BENCH_MODE=$MODE JITOP_BENCH_OUT=$OUT JITOP_BUILD=$BUILD
export JITOP_CLI=$BUILD/jitop JITOP_KERNEL_DIR=$ROOT/kernels PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
unset JITOP_VERBOSE

json_str() { "$PYTHON" -c 'import json,sys; print(json.dumps(sys.argv[1]))' "$1"; }

note_step() { # name status seconds reason
    printf '{"step": %s, "status": "%s", "seconds": %s, "reason": %s}\n' \
        "$(json_str "$1")" "$2" "$3" "$(json_str "$4")" >>"$OUT/steps.jsonl"
    printf 'bench: %-18s %-8s %5ss %s\n' "$1" "$2" "$3" "$4" >&2
}

# step NAME CAP_SECONDS COMMAND... : runs COMMAND with stdout to
# OUT/NAME.jsonl and stderr to OUT/NAME.log, within CAP and the run's budget.
step() {
    local name=$1 cap=$2
    shift 2
    # --only: rerun some steps into an existing output dir, leaving the rest.
    if [ -n "$ONLY" ] && [[ ",$ONLY," != *",$name,"* ]]; then
        return 0
    fi
    local left=$((DEADLINE - RESERVE - $(date +%s)))
    local limit=$((cap < left ? cap : left))
    if [ "$limit" -lt 5 ]; then
        note_step "$name" skipped 0 "out of the run's time budget (--budget $BUDGET)"
        return 0
    fi
    local t0 rc reason=""
    t0=$(date +%s)
    # jitop refuses a cache root that group or others may write (OUT itself exists).
    mkdir -m 700 "$OUT/cache-$name" 2>/dev/null || chmod 700 "$OUT/cache-$name"
    JITOP_CACHE_DIR=$OUT/cache-$name timeout -k 5 "$limit" "$@" >"$OUT/$name.jsonl" 2>"$OUT/$name.log"
    rc=$?
    local dt=$(($(date +%s) - t0))
    if [ "$rc" -eq 0 ]; then
        note_step "$name" ok "$dt" ""
    elif [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
        note_step "$name" timeout "$dt" "stopped after $limit s (what it printed before is kept)"
    else
        reason=$(grep -v '^[[:space:]]*$' "$OUT/$name.log" | tail -n 3 | tr '\n' ' ' | cut -c1-400)
        note_step "$name" failed "$dt" "exit status $rc: $reason"
    fi
    return 0
}

skip_step() { note_step "$1" skipped 0 "$2"; }

# --- build the bench programs: every bench/*.c with a main() is a program,
# --- the others are helpers linked into each.
DEPS_INC=
DEPS_LIB=
if [ -n "${DEPS_PREFIX:-}" ]; then
    DEPS_INC="-I$DEPS_PREFIX/usr/include -I$DEPS_PREFIX/usr/include/x86_64-linux-gnu"
    DEPS_LIB="-L$DEPS_PREFIX/usr/lib/x86_64-linux-gnu -Wl,-rpath,$DEPS_PREFIX/usr/lib/x86_64-linux-gnu"
fi
# The libraries libjitop.a needs, as the Makefile links them (LDLIBS).
MAKE_LDLIBS=$(sed -n 's/^LDLIBS[[:space:]]*+\{0,1\}=[[:space:]]*//p' Makefile | tr '\n' ' ')
CFLAGS_B="-std=c11 -O2 -g -D_GNU_SOURCE -pthread -Wall -Wextra -Werror -Iinclude -Isrc -Ibench -I$CUDA_HOME/include $DEPS_INC -DJITOP_SOURCE_KERNEL_DIR=\"$PWD/kernels\""
# -lnvrtc is for bench_nvrtc.c (linked into every program) and floor.c, which
# call NVRTC directly; libjitop.a opens NVRTC itself with dlopen.
# -z now as the Makefile links (see LDFLAGS there).
LIBS_B="$DEPS_LIB -Wl,-z,relro,-z,now -L$CUDA_HOME/lib64 -Wl,-rpath,$CUDA_HOME/lib64 -lnvrtc ${MAKE_LDLIBS:--ldl -lpthread -lm} -Wl,--as-needed -L$CUDA_HOME/lib64/stubs -lcuda -Wl,--no-as-needed -ldl -lpthread -lm"
HELPERS=()
PROGRAMS=()
for f in bench/*.c; do
    [ -e "$f" ] || continue
    if grep -Eq '^int[[:space:]]+main[[:space:]]*\(' "$f"; then PROGRAMS+=("$f"); else HELPERS+=("$f"); fi
done
if [ ! -f "$BUILD/libjitop.a" ]; then
    skip_step build-bench "no $BUILD/libjitop.a: run make first (make bench does)"
else
    for f in "${PROGRAMS[@]}"; do
        name=$(basename "$f" .c)
        # shellcheck disable=SC2086
        if cc $CFLAGS_B -o "$BB/$name" "$f" "${HELPERS[@]}" -Wl,--whole-archive "$BUILD/libjitop.a" \
            -Wl,--no-whole-archive $LIBS_B 2>"$OUT/build-$name.log"; then
            note_step "build-$name" ok 0 ""
        else
            rm -f "$BB/$name"
            note_step "build-$name" failed 0 "$(grep -m 3 -E 'error|undefined' "$OUT/build-$name.log" | tr '\n' ' ' | cut -c1-400)"
        fi
    done
fi
have() { [ -x "$BB/$1" ]; }

# --- is there a GPU? (the floor asks the driver for device 0)
GPU=
NO_GPU_WHY=
if have floor; then
    if ARCH=$("$BB/floor" arch 2>"$OUT/gpu-probe.log"); then GPU=$ARCH; else NO_GPU_WHY=$(tr '\n' ' ' <"$OUT/gpu-probe.log"); fi
else
    NO_GPU_WHY="bench/floor did not build"
fi
if [ -n "$GPU" ]; then
    echo "bench: GPU found ($GPU), mode $MODE, budget ${BUDGET}s" >&2
else
    echo "bench: no GPU ($NO_GPU_WHY): compile-and-cache part only, mode $MODE" >&2
fi

prog_step() { # name cap: a C program of another part, run with no arguments
    if have "$1"; then step "$1" "$2" "$BB/$1"; else skip_step "$1" "bench/$1.c is missing or did not build"; fi
}
py_step() { # name cap [env...]: a Python program of another part
    local name=$1 cap=$2
    shift 2
    if [ -f "bench/$name.py" ]; then step "$name" "$cap" env "$@" "$PYTHON" "bench/$name.py"; else skip_step "$name" "bench/$name.py is not in the tree"; fi
}
drive_step() { # phase cap
    local left=$((DEADLINE - RESERVE - $(date +%s)))
    local cap=$(($2 < left ? $2 : left))
    if have floor && have jitop_bench; then
        step "drive-$1" "$((cap + 10))" "$PYTHON" bench/drive.py --phase "$1" --out "$OUT" --build "$BUILD" --budget "$cap"
    else
        skip_step "drive-$1" "bench/floor or bench/jitop_bench did not build (see build-*.log)"
    fi
}

# --- the compile-and-cache part: runs everywhere
drive_step cpu 120
prog_step cache_bench 60
prog_step host_bench 90

# --- the GPU part
if [ -n "$GPU" ]; then
    drive_step gpu 180
    prog_step load_bench 60
    prog_step reload_bench 60
    prog_step lltm_host 60
    # The torch phase builds the tutorial's LLTM extension (about a minute,
    # side by side with its other builds); lltm_bench then loads that build
    # instead of making its own, which kept the torch edit rows out of the
    # 10 minutes before.
    py_step layernorm_bench 150
    rm -f "$OUT/torch_lltm_ext_dir"
    drive_step torch 300
    EXT_DIR=$(cat "$OUT/torch_lltm_ext_dir" 2>/dev/null || true)
    py_step lltm_bench 180 ${EXT_DIR:+JITOP_LLTM_EXT_DIR=$EXT_DIR}
else
    for s in drive-gpu load_bench reload_bench lltm_host drive-torch lltm_bench layernorm_bench; do
        skip_step "$s" "no GPU: $NO_GPU_WHY"
    done
fi

# --- the report: always, from whatever was measured
END=$(date +%s)
"$PYTHON" bench/report.py --out "$OUT" --results bench/RESULTS.md --charts bench/charts \
    --mode "$MODE" --seconds $((END - START)) --gpu "${GPU:-none: $NO_GPU_WHY}"
rc=$?
rm -rf "$OUT"/work-* "$OUT"/cache-*
echo "bench: done in $(($(date +%s) - START)) s; results in bench/RESULTS.md (raw: $OUT)" >&2
exit $rc
