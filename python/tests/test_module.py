"""Modules on the fake driver: load and load_inline, the same object for
the same sources, op lookup by attribute and by name expression, errors,
and hot reload (the callback runs on the main thread; a changed signature
re-reads the op's parameters)."""
import ctypes
import os
import re
import time

import pytest

import jitop
from jtest import context, need_fake, write

SRC = r"""
extern "C" __global__ void saxpy(int n, float a, const float *x, float *y) {}
template <typename T, int N> __global__ void axpy(T a, T *x) {}
"""


def load(tmp_path, text=SRC, name="k"):
    need_fake(pytest)
    ctx = context(tmp_path)
    return ctx, ctx.load(name, [write(tmp_path / (name + ".cu"), text)])


def test_ops_and_lookup(tmp_path):
    ctx, mod = load(tmp_path)
    assert mod.name == "k" and mod.generation == 0 and mod.context is ctx
    names = sorted(o["name"] for o in mod.ops())
    assert names == ["saxpy"]
    op = mod.saxpy
    assert op is mod["saxpy"] and op.name == "saxpy" and op.module is mod
    inst = mod["axpy<float, 4>"]
    assert inst is mod["axpy<float, 4>"]
    assert [p["size"] for p in inst.info()["params"]] == [4, 8]
    assert inst.info()["lowered"].startswith("_Z")
    d = mod["axpy<double, 2>"]
    assert [p["size"] for p in d.info()["params"]] == [8, 8]
    assert "saxpy" in repr(op) and "k" in repr(mod)


def test_same_sources_same_module(tmp_path):
    ctx, mod = load(tmp_path)
    again = ctx.load("k", [str(tmp_path / "k.cu")])
    assert again is mod


def test_unknown_op(tmp_path):
    _, mod = load(tmp_path)
    with pytest.raises(AttributeError, match="no kernel 'nosuch'.*saxpy"):
        mod.nosuch
    assert not hasattr(mod, "nosuch")
    with pytest.raises(jitop.NotFoundError):
        mod["nosuch"]
    with pytest.raises(KeyError):
        mod["nosuch"]
    with pytest.raises(AttributeError):
        mod.__wrapped__  # dunders never compile anything
    with pytest.raises(jitop.NotFoundError, match=r"^module k has no op 'axpy<float, nope>'.*nope"):
        mod["axpy<float, nope>"]


def test_load_compile_error(tmp_path):
    need_fake(pytest)
    ctx = context(tmp_path)
    src = write(tmp_path / "bad.cu", "extern \"C\" __global__ void k()\n{\n  undeclared();\n}\n")
    with pytest.raises(jitop.CompileError, match=r"bad\.cu\(3\)"):
        ctx.load("bad", [src])


def test_load_inline_and_package_functions(tmp_path, monkeypatch=None):
    need_fake(pytest)
    cache = str(tmp_path / "cache")
    mod = jitop.load_inline("inl", [SRC, 'extern "C" __global__ void extra(int *p) {}'],
                            cache_dir=cache)
    assert sorted(o["name"] for o in mod.ops()) == ["extra", "saxpy"]
    src = write(tmp_path / "k.cu", SRC)
    inc = tmp_path / "inc"
    inc.mkdir()
    m2 = jitop.load("k", src, extra_cuda_cflags=["-DX=1"], extra_include_paths=[str(inc)],
                    cache_dir=cache)
    assert m2.saxpy.name == "saxpy"
    assert jitop.load("k", [src], extra_cuda_cflags=["-DX=1"],
                      extra_include_paths=[str(inc)], cache_dir=cache) is m2
    assert jitop.context(cache) is m2.context


def wait_for(cond, seconds=60):
    end = time.time() + seconds
    while time.time() < end:
        jitop.poll_events()
        if cond():
            return True
        time.sleep(0.02)
    return False


def test_hot_reload(tmp_path):
    ctx, mod = load(tmp_path)
    seen = []
    mod.watch(lambda m, err: seen.append((m, err)))
    op = mod.saxpy
    assert len(op._pack(1, 2.0, 0, 0)) == 4
    # A new parameter: the op's table is read again at its next call.
    write(tmp_path / "k.cu", SRC.replace("float *y)", "float *y, double z)"))
    assert wait_for(lambda: seen), "no reload report"
    assert seen[0] == (mod, None) and mod.generation == 1
    assert len(op._pack(1, 2.0, 0, 0, 0.5)) == 5
    with pytest.raises(TypeError, match="takes 5 kernel arguments, 4 given"):
        op._pack(1, 2.0, 0, 0)
    out = ctypes.c_int(0)
    # A failed rebuild keeps the code in place and reports NVRTC's log.
    write(tmp_path / "k.cu", "extern \"C\" __global__ void saxpy(int n)\n{\n  oops;\n}\n")
    assert wait_for(lambda: any(e is not None for _, e in seen)), "no failure report"
    m, err = [r for r in seen if r[1] is not None][0]
    assert m is mod and re.search(r"k\.cu\(3\)", err), err
    assert mod.generation == 1
    op(1, 1, 1, 2.0, 0, ctypes.addressof(out), 0.5)
    mod.unwatch()


def test_watch_without_callback_prints(tmp_path):
    import subprocess
    import sys
    need_fake(pytest)
    src = write(tmp_path / "k.cu", SRC)
    code = r"""
import jitop, os, time
ctx = jitop.Context(cache_dir=%r)
mod = ctx.load("k", [%r])
mod.watch()
open(%r + ".tmp", "w").write("extern \"C\" __global__ void saxpy()\n{\n  broken;\n}\n")
os.replace(%r + ".tmp", %r)
end = time.time() + 60
while time.time() < end:
    time.sleep(0.05)
""" % (str(tmp_path / "cache"), src, src, src, src)
    p = subprocess.Popen([sys.executable, "-c", code], stderr=subprocess.PIPE, text=True)
    err = ""
    try:
        deadline = time.time() + 60
        while time.time() < deadline:
            line = p.stderr.readline()
            if not line:
                break
            err += line
            if "broken" in err:
                break
    finally:
        p.kill()
        p.wait()
    assert "hot reload of module k failed" in err and "broken" in err, err


def test_exit_while_watching(tmp_path):
    # A rebuild in flight as the interpreter exits: atexit stops the watch
    # first, so that no report is queued into a finalizing interpreter.
    import subprocess
    import sys
    need_fake(pytest)
    src = write(tmp_path / "k.cu", SRC)
    code = r"""
import jitop, os
mod = jitop.Context(cache_dir=%r).load("k", [%r])
mod.watch(lambda m, e: None)
for i in range(3):
    open(%r + ".tmp", "w").write("extern \"C\" __global__ void saxpy(int n) {}\n// %%d\n" %% i)
    os.replace(%r + ".tmp", %r)
""" % (str(tmp_path / "cache"), src, src, src, src)
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert "Traceback" not in p.stderr, p.stderr


def test_unwatch_stops_reports(tmp_path):
    _, mod = load(tmp_path)
    seen = []
    mod.watch(lambda m, err: seen.append(err))
    mod.unwatch()
    mod.unwatch()  # not watched: nothing to do
    write(tmp_path / "k.cu", SRC + "// edited\n")
    time.sleep(1.0)
    jitop.poll_events()
    assert seen == [] and mod.generation == 0


def test_callback_may_unwatch_and_drop_the_module(tmp_path):
    # The callback drops the last reference to its module (unwatch, del):
    # the reports queued behind it must not use a freed module.
    ctx, mod = load(tmp_path)
    seen = []

    def cb(m, err):
        seen.append(err)
        m.unwatch()

    mod.watch(cb)
    del mod
    write(tmp_path / "k.cu", SRC + "// one\n")
    assert wait_for(lambda: seen), "no reload report"
    assert seen[0] is None
    again = ctx.load("k", [str(tmp_path / "k.cu")])  # a new object for the same module
    assert again.generation >= 1
