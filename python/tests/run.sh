#!/usr/bin/env bash
# Runs a Python test folder of the jitop package and prints cmocka's summary
# lines, so that tests/run.sh folds it into "N passed, N failed".
#   run.sh [DIR]   DIR: python/tests (default, the CPU suite, under the fake
#                  driver) or python/tests/gpu (run-gpu.sh: the real one)
# Environment: PYTHON, JITOP_PY_PKG (the built package's folder, from the
# Makefile), JITOP_BUILD; JITOP_PY_DRIVER=real keeps the real driver.
set -u
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
dir=${1:-$here}
py=${PYTHON:-python3}
pkg=${JITOP_PY_PKG:?JITOP_PY_PKG names the built package (make test-python sets it)}
build=${JITOP_BUILD:?}
export PYTHONPATH="$(dirname "$pkg")${PYTHONPATH:+:$PYTHONPATH}"
export JITOP_BUILD=$build
if [ "${JITOP_PY_DRIVER:-fake}" = fake ]; then
    # libjitop opens libcuda.so.1 with dlopen: the fake (tests/fakecuda)
    # is found first. A test that needs no driver at all runs a child
    # process with its own LD_LIBRARY_PATH.
    export LD_LIBRARY_PATH="$build/fakecuda${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
# SAN=1 builds: the interpreter is not instrumented, so the ASan runtime is
# preloaded; the interpreter's own allocations at exit are not jitop's leaks.
if ldd "$pkg/_jitop.so" 2>/dev/null | grep -q libasan; then
    LD_PRELOAD="$(${CC:-cc} -print-file-name=libasan.so)${LD_PRELOAD:+:$LD_PRELOAD}"
    export LD_PRELOAD
    # (last: a later option wins, and CI sets detect_leaks=1 for the suite)
    export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
fi
exec "$py" "$here/runner.py" "$dir"
