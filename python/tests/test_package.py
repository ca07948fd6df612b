"""Packaging: what `import jitop` pulls in, the package layout, jitop.torch
without torch, a machine without a driver, and setup.py (what pip runs)
building an installable package that works away from the repository."""
import glob
import importlib.util
import os
import shutil
import subprocess
import sys

import pytest

import jitop
from jtest import ROOT, python, write


def test_import_is_light():
    rc, out, err = python("import sys, jitop; print(sorted(m for m in ('torch', 'numpy', "
                          "'cupy', 'ctypes') if m in sys.modules))")
    assert rc == 0, err
    assert out.strip() == "[]"


def test_version_and_layout():
    parts = jitop.__version__.split(".")
    assert len(parts) == 3 and all(p.isdigit() for p in parts)
    assert jitop.nvrtc_version()
    pkg = os.path.dirname(jitop.__file__)
    assert os.path.isfile(os.path.join(pkg, "kernels", "lltm.cu"))
    assert os.path.isfile(os.path.join(pkg, "kernels", "layernorm.cu"))
    for name in ("load", "load_inline", "Context", "Module", "Op", "JitopError",
                 "CompileError", "NotFoundError", "NoDriverError"):
        assert hasattr(jitop, name), name


@pytest.mark.skipif(importlib.util.find_spec("torch") is not None, reason="torch is installed")
def test_jitop_torch_needs_torch():
    with pytest.raises(ImportError, match="torch"):
        import jitop.torch  # noqa: F401


def test_no_driver(tmp_path):
    # Without the fake on LD_LIBRARY_PATH: where no real driver is installed
    # either, a load says so.
    env = {"LD_LIBRARY_PATH": ""}
    src = write(tmp_path / "k.cu", 'extern "C" __global__ void k() {}\n')
    rc, out, err = python("import ctypes, jitop\n"
                          "try:\n    ctypes.CDLL('libcuda.so.1')\n    print('DRIVER')\n"
                          "except OSError:\n    pass\n"
                          "try:\n    jitop.load('k', [%r], cache_dir=%r)\n"
                          "except jitop.NoDriverError as e:\n    print('NODRIVER', e)\n"
                          % (src, str(tmp_path / "c")), env=env)
    assert rc == 0, err
    if out.startswith("DRIVER"):
        pytest.skip("a real driver is installed")
    assert out.startswith("NODRIVER") and "libcuda" in out, out


@pytest.mark.skipif("build-san" in os.environ.get("JITOP_BUILD", ""),
                    reason="setup.py links build/libjitop.a, not the sanitizer build")
def test_setup_py_builds_an_installable_package(tmp_path):
    try:
        import setuptools  # noqa: F401
    except ImportError:
        pytest.skip("no setuptools for this interpreter")
    work = tmp_path / "src"
    lib = tmp_path / "lib"
    p = subprocess.run([sys.executable, "setup.py", "-q", "build", "--build-base", str(work),
                        "--build-lib", str(lib)], cwd=os.path.join(ROOT, "python"),
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr
    assert glob.glob(str(lib / "jitop" / "_jitop*.so"))
    assert (lib / "jitop" / "kernels" / "lltm.cu").is_file()
    # Away from the repository and the build folder: a compile-only build
    # of a shipped kernel from the package's own copy.
    away = tmp_path / "away"
    shutil.copytree(lib, away)
    code = ("import jitop, os\n"
            "assert jitop.__file__.startswith(%r), jitop.__file__\n"
            "ctx = jitop.Context(compile_only=True, arch='sm_90', cache_dir=%r)\n"
            "k = os.path.join(os.path.dirname(jitop.__file__), 'kernels', 'lltm.cu')\n"
            "print(ctx.build(k)['cached'])\n" % (str(away), str(tmp_path / "c")))
    rc, out, err = python(code, env={"PYTHONPATH": str(away)}, cwd=str(tmp_path))
    assert rc == 0, err
    assert out.strip() == "False"
