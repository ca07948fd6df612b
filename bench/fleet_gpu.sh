#!/usr/bin/env bash
# The GPU part of the fleet simulation: a new process's first LayerNorm call
# (jitop_layernorm_forward, fp32, 4096 x COLS, affine) when its kernels come
# from the remote cache, against a cold compile and a warm local hit.
#
#   make && BUILD=$PWD/build bench/fleet_gpu.sh [--cols 1024] [--reps 5] [--out DIR]
#
# The remote is nginx (tests/support/nginx_dav.sh) where installed, else
# bench/fleet_server.py (python3's http.server: GET/PUT only). It is
# prewarmed once by `fleet_node --prewarm-layernorm` (compile-only, pushes
# through the background thread). Each rep then runs three fresh processes:
#   cold:   an empty local cache, no remote       -> NVRTC compiles
#   remote: an empty local cache, the remote      -> remote hits
#   local:  the remote run's cache again          -> local hits
# Prints one JSON line per process and the medians; exit 77 without a GPU.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${BUILD:-$root/build}
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
cols=1024
reps=5
out=
while [ $# -gt 0 ]; do
    case $1 in
        --cols) cols=$2; shift 2 ;;
        --reps) reps=$2; shift 2 ;;
        --out) out=$2; shift 2 ;;
        *) echo "fleet_gpu: unknown argument $1" >&2; exit 2 ;;
    esac
done
[ -n "$out" ] || out=$(mktemp -d "${TMPDIR:-/tmp}/jitop-fleet-gpu-XXXXXX")
mkdir -p "$out"
out=$(cd "$out" && pwd)
[ -f "$BUILD/libjitop.a" ] || { echo "fleet_gpu: run make first ($BUILD)" >&2; exit 1; }
DEPS_LIB=
[ -n "${DEPS_PREFIX:-}" ] && DEPS_LIB="-L$DEPS_PREFIX/usr/lib/x86_64-linux-gnu -Wl,-rpath,$DEPS_PREFIX/usr/lib/x86_64-linux-gnu"
# shellcheck disable=SC2086
cc -std=c11 -O2 -g -D_GNU_SOURCE -pthread -Wall -Wextra -Werror -I"$root/include" -I"$root/src" \
    -I"$CUDA_HOME/include" -o "$out/fleet_node" "$root/bench/fleet_node.c" "$BUILD/libjitop.a" \
    $DEPS_LIB -ldl -lpthread -lm

srv=$out/server
mkdir -p "$srv"
set +e
port=$("$root/tests/support/nginx_dav.sh" start "$srv" 2>/dev/null)
rc=$?
set -e
if [ $rc -eq 0 ]; then
    remote="http://127.0.0.1:$port/cache"
    trap '"$root/tests/support/nginx_dav.sh" stop "$srv"' EXIT
    echo "fleet_gpu: nginx on $remote"
else
    python3 "$root/bench/fleet_server.py" "$srv/www" >"$srv/port" &
    spid=$!
    trap 'kill $spid 2>/dev/null || true' EXIT
    for _ in $(seq 100); do [ -s "$srv/port" ] && break; sleep 0.05; done
    remote="http://127.0.0.1:$(cat "$srv/port")"
    echo "fleet_gpu: python fleet_server.py on $remote"
fi

JITOP_REMOTE_CACHE=$remote "$out/fleet_node" --prewarm-layernorm "$out/ci" "$cols" | tee "$out/prewarm.json"

: >"$out/runs.jsonl"
for r in $(seq "$reps"); do
    for kind in cold remote local; do
        case $kind in
            cold) cache=$out/cold$r; spec= ;;
            remote) cache=$out/remote$r; spec=$remote ;;
            local) cache=$out/remote$r; spec=$remote ;;
        esac
        set +e
        line=$(JITOP_REMOTE_CACHE=$spec "$out/fleet_node" --gpu-layernorm "$cache" "$cols")
        rc=$?
        set -e
        if [ $rc -eq 77 ]; then echo "$line"; exit 77; fi
        [ $rc -eq 0 ] || { echo "fleet_gpu: $kind run $r failed" >&2; exit 1; }
        echo "{\"kind\":\"$kind\",\"rep\":$r,${line#\{}" | tee -a "$out/runs.jsonl"
    done
done

python3 - "$out/runs.jsonl" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
for kind in ("cold", "remote", "local"):
    v = [r["first_call_ms"] for r in rows if r["kind"] == kind]
    s = [r["setup_ms"] for r in rows if r["kind"] == kind]
    print(f"{kind:6s} first LayerNorm call: median {statistics.median(v):8.2f} ms "
          f"(min {min(v):.2f}, max {max(v):.2f}; context + driver setup {statistics.median(s):.1f} ms)")
PY
