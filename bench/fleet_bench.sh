#!/usr/bin/env bash
# Fleet simulation of the remote cache tier, on one machine (no GPU needed):
# NODES processes ("nodes"), each with its own empty local cache, cold-start
# the shipped ops' kernels (kernels/layernorm.cu, kernels/lltm.cu and a few
# template instances, compile-only for sm_90) against one nginx WebDAV
# remote prewarmed by one `jitop build --push`.
#
#   BUILD=$PWD/build bench/fleet_bench.sh [--nodes 32] [--out DIR] [--kill-after-ms 150]
#
# Reports (stdout, and DIR/summary.json):
#   1. one node at a time on an idle machine (2 nodes each): cold compile
#      per unit (no remote), remote hit (empty local cache), local hit
#   2. the fleet: compiles fleet-wide (goal 0), remote hit p50/p99 per unit
#      (each node's first pass on an empty local cache) and local hit p50/p99
#      (its second pass, a new context in the same process)
#   3. the same with the server killed KILL_MS after the nodes start: every
#      node must still succeed (exit 0); how many compiled
# Needs nginx (scripts/install-deps.sh with JITOP_WANT_NGINX=1); exit 77 without.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${BUILD:-$root/build}
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
nodes=32
out=
kill_ms=150
while [ $# -gt 0 ]; do
    case $1 in
        --nodes) nodes=$2; shift 2 ;;
        --out) out=$2; shift 2 ;;
        --kill-after-ms) kill_ms=$2; shift 2 ;;
        *) echo "fleet_bench: unknown argument $1" >&2; exit 2 ;;
    esac
done
[ -n "$out" ] || out=$(mktemp -d "${TMPDIR:-/tmp}/jitop-fleet-XXXXXX")
mkdir -p "$out"
out=$(cd "$out" && pwd)
[ -f "$BUILD/libjitop.a" ] && [ -x "$BUILD/jitop" ] || { echo "fleet_bench: run make first ($BUILD)" >&2; exit 1; }

cc -std=c11 -O2 -g -D_GNU_SOURCE -pthread -Wall -Wextra -Werror -I"$root/include" -I"$root/src" \
    -I"$CUDA_HOME/include" -o "$out/fleet_node" "$root/bench/fleet_node.c" "$BUILD/libjitop.a" \
    -ldl -lpthread -lm

srv=$out/server
mkdir -p "$srv"
set +e
port=$("$root/tests/support/nginx_dav.sh" start "$srv")
rc=$?
set -e
if [ $rc -eq 77 ]; then echo "SKIP: nginx is not installed"; exit 77; fi
[ $rc -eq 0 ] || exit 1
trap '"$root/tests/support/nginx_dav.sh" stop "$srv"' EXIT
remote="http://127.0.0.1:$port/cache"

ln=$root/kernels/layernorm.cu
lt=$root/kernels/lltm.cu
names=("layernorm_fwd_generic<float, true, 4>" "layernorm_bwd_generic<float, true, 4>"
    "layernorm_bwd_reduce<float>" "layernorm_fwd<float, 1024, true, 4, 128>"
    "lltm_copy_x<float>" "lltm_fwd_pointwise<float>")
units=("$ln" "$lt")
for n in "${names[@]:0:4}"; do units+=("$ln::$n"); done
for n in "${names[@]:4}"; do units+=("$lt::$n"); done

echo "fleet_bench: $nodes nodes, ${#units[@]} units each, remote $remote, out $out"

# 1. Cold compiles, no remote (two nodes, one after the other).
for i in 1 2; do
    JITOP_REMOTE_CACHE= "$out/fleet_node" --cache "$out/cold$i" "${units[@]}" >"$out/cold$i.jsonl"
done

# 2. One prewarm, then the fleet.
name_flags=()
for n in "${names[@]}"; do name_flags+=(--name "$n"); done
t0=$(date +%s%N)
JITOP_REMOTE_CACHE=$remote "$BUILD/jitop" build --push --cache-dir "$out/ci" --arch sm_90 \
    "${name_flags[@]}" "$ln" "$lt" >"$out/prewarm.txt" 2>&1
echo "prewarm (jitop build --push, cold): $(( ($(date +%s%N) - t0) / 1000000 )) ms"

# The same units on an idle machine, one node at a time: remote hits (an
# empty local cache), then local hits (--warm: a new context, same process).
for i in 1 2; do
    JITOP_REMOTE_CACHE=$remote "$out/fleet_node" --cache "$out/idle$i" --warm "${units[@]}" \
        >"$out/idle$i.jsonl"
done

# NODES processes share this machine's cores: a node waits for a CPU far
# longer than one on its own host would, and the default 100 ms connect
# timeout (which covers curl's resolver thread) would mark the remote dead
# under that load alone. FLEET_ATTRS overrides.
fleet_attrs=${FLEET_ATTRS:-|connect-timeout=2000|timeout=5000}
run_fleet() { # tag, then the command that runs while the nodes do
    local tag=$1 pids=() fails=0
    shift
    for i in $(seq "$nodes"); do
        JITOP_REMOTE_CACHE="$remote$fleet_attrs" "$out/fleet_node" --cache "$out/$tag-node$i" --warm \
            "${units[@]}" >"$out/$tag-node$i.jsonl" 2>"$out/$tag-node$i.err" &
        pids+=($!)
    done
    "$@"
    for p in "${pids[@]}"; do wait "$p" || fails=$((fails + 1)); done
    echo "$fails" >"$out/$tag.fails"
}
t0=$(date +%s%N)
run_fleet fleet true
echo "fleet: $(( ($(date +%s%N) - t0) / 1000000 )) ms wall"

# 3. The server killed while the nodes start.
kill_server() {
    sleep "$(awk "BEGIN { print $kill_ms / 1000 }")"
    "$root/tests/support/nginx_dav.sh" stop "$srv"
}
t0=$(date +%s%N)
run_fleet killed kill_server
echo "killed: $(( ($(date +%s%N) - t0) / 1000000 )) ms wall"

python3 - "$out" "$nodes" <<'PY'
import glob, json, os, sys
out, nodes = sys.argv[1], int(sys.argv[2])
def rows(pattern):
    r = []
    for f in sorted(glob.glob(os.path.join(out, pattern))):
        r += [json.loads(l) for l in open(f) if l.startswith("{")]
    return r
def pct(v, p):
    v = sorted(v)
    return v[min(len(v) - 1, int(round(p / 100 * (len(v) - 1))))] if v else float("nan")
def stats(v):
    return {"n": len(v), "p50_ms": round(pct(v, 50), 2), "p99_ms": round(pct(v, 99), 2)}
cold = [r["ms"] for r in rows("cold*.jsonl") if not r["cached"]]
idle = rows("idle*.jsonl")
summary = {"nodes": nodes, "idle_one_node_at_a_time": {
    "cold_compile": stats(cold),
    "remote_hit": stats([r["ms"] for r in idle if r["pass"] == "cold" and r["cached"]]),
    "compiles": sum(1 for r in idle if r["pass"] == "cold" and not r["cached"]),
    "local_hit_same_process": stats([r["ms"] for r in idle if r["pass"] == "warm"])}}
for tag in ("fleet", "killed"):
    rs = rows(f"{tag}-node*.jsonl")
    first = [r for r in rs if r["pass"] == "cold"]
    warm = [r for r in rs if r["pass"] == "warm"]
    summary[tag] = {
        "node_failures": int(open(os.path.join(out, f"{tag}.fails")).read()),
        "compiles_fleet_wide": sum(1 for r in first if not r["cached"]),
        "builds": len(first),
        "remote_hit": stats([r["ms"] for r in first if r["cached"]]),
        "compile_in_fleet": stats([r["ms"] for r in first if not r["cached"]]),
        "local_hit": stats([r["ms"] for r in warm if r["cached"]]),
    }
json.dump(summary, open(os.path.join(out, "summary.json"), "w"), indent=1)
print(json.dumps(summary, indent=1))
PY
