#!/usr/bin/env bash
# Runs cmocka test programs and sums their results into one closing line,
# "N passed, N failed, N skipped", that CI reads. A program that dies without
# printing cmocka's summary counts as one failure. JITOP_TEST_WRAPPER (for
# example valgrind) is put in front of each program.
set -u
passed=0 failed=0 skipped=0
for t in "$@"; do
    name=$(basename "$t")
    log=$(mktemp)
    # shellcheck disable=SC2086
    ${JITOP_TEST_WRAPPER:-} "$t" >"$log" 2>&1
    rc=$?
    cat "$log"
    p=$(sed -n 's/^\[  PASSED  \] \([0-9]*\) test.*/\1/p' "$log" | tail -n 1)
    f=$(sed -n 's/^\[  FAILED  \] \([0-9]*\) test.*/\1/p' "$log" | tail -n 1)
    s=$(sed -n 's/^\[  SKIPPED \] \([0-9]*\) test.*/\1/p' "$log" | tail -n 1)
    rm -f "$log"
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
echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
