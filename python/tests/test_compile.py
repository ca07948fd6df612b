"""A compile-only context (no driver at all): builds, cache hits, compile
errors with NVRTC's log (file:line), include paths, and loads refused."""
import re

import pytest

import jitop
from jtest import context, write

SAXPY = """
extern "C" __global__ void saxpy(int n, float a, const float *x, float *y)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}
"""


def test_build_then_hit(tmp_path):
    ctx = context(tmp_path, compile_only=True, arch="sm_90")
    assert ctx.compile_only and ctx.arch == "sm_90"
    src = write(tmp_path / "saxpy.cu", SAXPY)
    first = ctx.build(src)
    assert first["cached"] is False and re.fullmatch(r"[0-9a-f]{32}", first["key"])
    again = ctx.build(src)
    assert again["cached"] is True and again["key"] == first["key"]
    assert ctx.cache_dir.startswith(str(tmp_path))


def test_options_change_the_key(tmp_path):
    ctx = context(tmp_path, compile_only=True, arch="sm_90")
    src = write(tmp_path / "saxpy.cu", SAXPY)
    a = ctx.build(src)["key"]
    b = ctx.build(src, options=["-DX=1"])["key"]
    assert a != b


def test_compile_error_carries_the_log(tmp_path):
    ctx = context(tmp_path, compile_only=True, arch="sm_90")
    src = write(tmp_path / "bad.cu", "extern \"C\" __global__ void k(int *p)\n{\n    p[0] = nope;\n}\n")
    with pytest.raises(jitop.CompileError) as e:
        ctx.build(src)
    msg = str(e.value)
    assert re.search(r"bad\.cu\(3\)", msg), msg
    assert "nope" in msg
    assert e.value.status == jitop._jitop.ECOMPILE
    assert isinstance(e.value, jitop.JitopError) and isinstance(e.value, RuntimeError)


def test_include_paths(tmp_path):
    inc = tmp_path / "inc"
    inc.mkdir()
    write(inc / "scale.h", "#define SCALE 3.0f\n")
    src = write(tmp_path / "k.cu", '#include "scale.h"\n'
                'extern "C" __global__ void k(float *p) { p[0] *= SCALE; }\n')
    ctx = context(tmp_path, compile_only=True, arch="sm_90")
    with pytest.raises(jitop.CompileError):
        ctx.build(src)
    assert ctx.build(src, options=["-I" + str(inc)])["cached"] is False


def test_load_is_refused(tmp_path):
    ctx = context(tmp_path, compile_only=True, arch="sm_90")
    src = write(tmp_path / "saxpy.cu", SAXPY)
    with pytest.raises(jitop.NoDriverError, match="compile_only"):
        ctx.load("saxpy", [src])


def test_bad_arguments(tmp_path):
    ctx = context(tmp_path, compile_only=True, arch="sm_90")
    with pytest.raises(TypeError):
        ctx.build(str(tmp_path / "x.cu"), options="-DX")  # one string, not a list
    with pytest.raises(jitop.NotFoundError):
        ctx.build(str(tmp_path / "missing.cu"))
    with pytest.raises(TypeError):
        jitop.load("x", ["a.cu"], extra_cuda_cflags="-O3")
