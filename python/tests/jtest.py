"""Helpers shared by the Python tests (not a test file)."""
import ctypes
import os
import subprocess
import sys

import jitop

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def fake_driver():
    """True when libcuda.so.1 is tests/fakecuda's (run.sh puts it first)."""
    try:
        lib = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return False
    return hasattr(lib, "fake_cuda_get_stats")


def need_fake(pytest):
    if not fake_driver():
        pytest.skip("the fake driver is not on LD_LIBRARY_PATH (python/tests/run.sh puts it)")


def context(tmp_path, **kw):
    """A context of its own: a fresh cache under tmp_path."""
    return jitop.Context(cache_dir=str(tmp_path / "cache"), **kw)


def write(path, text):
    path = str(path)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)  # a save as editors do it: a rename
    return path


def python(code, env=None, cwd=None):
    """Runs code in a new interpreter; returns (rc, stdout, stderr)."""
    e = dict(os.environ)
    e.update(env or {})
    p = subprocess.run([sys.executable, "-c", code], env=e, cwd=cwd, capture_output=True,
                       text=True, timeout=300)
    return p.returncode, p.stdout, p.stderr
