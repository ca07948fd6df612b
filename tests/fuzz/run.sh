#!/usr/bin/env bash
# Runs each libFuzzer target for SECONDS from its seed corpus and prints one
# line per target: "NAME: N execs, C crashes (coverage ...)". Usage:
#   tests/fuzz/run.sh SECONDS BUILD_DIR TARGET...
# Exits non-zero when a target crashed, leaked, timed out or did not run.
set -u
seconds=$1 build=$2
shift 2
here=$(cd "$(dirname "$0")" && pwd)
status=0
summary=""
for t in "$@"; do
    name=$(basename "$t")
    corpus="$build/corpus/$name"
    crashes="$build/crashes"
    log="$build/$name.log"
    mkdir -p "$corpus" "$crashes"
    # allocator_may_return_null: a size read from the input (a header, a
    # huge file an include names) may ask for more than exists; the code
    # handles a NULL from malloc, which is what is being tested.
    ASAN_OPTIONS="allocator_may_return_null=1:detect_leaks=1:${ASAN_OPTIONS:-}" \
    UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:${UBSAN_OPTIONS:-}" \
        "$t" -max_total_time="$seconds" -timeout=20 -rss_limit_mb=2048 -print_final_stats=1 \
        -artifact_prefix="$crashes/$name-" "$corpus" "$here/corpus/$name" >"$log" 2>&1
    rc=$?
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
    cov=$(grep -o 'cov: [0-9]*' "$log" | tail -n 1)
    ncrash=0
    if [ "$rc" -ne 0 ]; then
        ncrash=1
        status=1
        tail -n 60 "$log"
    fi
    line="$name: ${execs:-0} execs, $ncrash crashes (${cov:-no coverage line}, corpus $(ls "$corpus" | wc -l) files, exit $rc)"
    echo "$line"
    summary="$summary$line"$'\n'
done
echo "== fuzz summary ($seconds s each)"
printf '%s' "$summary"
exit $status
