#!/usr/bin/env bash
# Runs cmocka test programs and sums their results into one closing line,
# "N passed, N failed, N skipped", that CI reads. A program that dies without
# printing cmocka's summary counts as one failure. JITOP_TEST_WRAPPER (for
# example valgrind) is put in front of each program.
# JITOP_TEST_JOBS programs run at once (default: the number of cores); most
# of the suite's time is NVRTC compiling on one thread, so on CI's two cores
# the suite (and valgrind's run of it, the longest step) takes about half the
# time. Each program's output is printed whole, in the order given, then
# the slowest programs' times.
set -u
jobs=${JITOP_TEST_JOBS:-$(nproc 2>/dev/null || echo 1)}
[ "$jobs" -ge 1 ] 2>/dev/null || jobs=1
dir=$(mktemp -d) || exit 1
trap 'rm -rf "$dir"' EXIT

# LeakSanitizer's own stop-the-world tracer dying at a program's exit fails
# the run with no finding (a known intermittent failure of the sanitizer
# runtime, google/sanitizers#1353); a program whose tests all passed runs
# once more then, its first log kept above the second. A leak it finds
# prints "detected memory leaks" instead, and fails; so does any failed test.
lsan_tracer_died='LeakSanitizer has encountered a fatal error'

run_one() { # index program
    start=$SECONDS
    # shellcheck disable=SC2086
    ${JITOP_TEST_WRAPPER:-} "$2" >"$dir/$1.log" 2>&1
    rc=$?
    if [ "$rc" -ne 0 ] && grep -q "$lsan_tracer_died" "$dir/$1.log" &&
        ! grep -q '^\[  \(FAILED\|ERROR\) *\]' "$dir/$1.log"; then
        mv "$dir/$1.log" "$dir/$1.first"
        {
            cat "$dir/$1.first"
            echo "run.sh: $(basename "$2"): LeakSanitizer's tracer died; running it once more"
            # shellcheck disable=SC2086
            ${JITOP_TEST_WRAPPER:-} "$2" 2>&1
        } >"$dir/$1.log"
        rc=$? # the second run's
    fi
    echo "$((SECONDS - start)) $(basename "$2")" >"$dir/$1.secs"
    echo "$rc" >"$dir/$1.rc"
}

i=0
for t in "$@"; do
    while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n; done
    run_one "$i" "$t" &
    i=$((i + 1))
done
wait

passed=0 failed=0 skipped=0
i=0
for t in "$@"; do
    name=$(basename "$t")
    log="$dir/$i.log"
    rc=$(cat "$dir/$i.rc" 2>/dev/null || echo 127)
    i=$((i + 1))
    cat "$log"
    p=$(sed -n 's/^\[  PASSED  \] \([0-9]*\) test.*/\1/p' "$log" | tail -n 1)
    f=$(sed -n 's/^\[  FAILED  \] \([0-9]*\) test.*/\1/p' "$log" | tail -n 1)
    s=$(sed -n 's/^\[  SKIPPED \] \([0-9]*\) test.*/\1/p' "$log" | tail -n 1)
    if [ -z "$p" ] && [ -z "$f" ]; then
        echo "FAIL $name: exited with status $rc without a cmocka summary"
        failed=$((failed + 1))
        continue
    fi
    passed=$((passed + ${p:-0}))
    failed=$((failed + ${f:-0}))
    skipped=$((skipped + ${s:-0}))
    if [ "$rc" -ne 0 ] && [ -z "$f" ]; then
        echo "FAIL $name: exited with status $rc"
        failed=$((failed + 1))
    fi
done
# The programs that took longest (wall seconds, the wrapper's included):
# where the suite's time goes.
echo "slowest: $(cat "$dir"/*.secs 2>/dev/null | sort -rn | head -n 5 |
    awk '{printf "%s%s %d s", (NR > 1 ? ", " : ""), $2, $1}')"
echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
