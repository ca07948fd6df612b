#!/usr/bin/env bash
# The GPU suite of the Python package (python/tests/gpu) on the real driver;
# its tests skip without a GPU or torch. See run.sh.
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
JITOP_PY_DRIVER=real exec "$here/run.sh" "$here/gpu"
