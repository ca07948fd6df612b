"""Launches on a real GPU (skipped without torch or a GPU): every argument
kind, torch's current stream and explicit streams, dynamic shared memory,
hot reload, and compile errors through load()."""
import ctypes
import os
import sys
import time

import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("no CUDA device for torch", allow_module_level=True)

import jitop  # noqa: E402
from jtest import write  # noqa: E402

SRC = r"""
#ifndef BIAS
#define BIAS 0.0f
#endif
extern "C" __global__ void saxpy(int n, float a, const float *x, float *y)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i] + BIAS;
}
extern "C" __global__ void axpy64(long long n, double a, const double *x, double *y)
{
    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}
extern "C" __global__ void smem_sum(const float *x, float *out, int n)
{
    extern __shared__ float s[];
    for (int i = threadIdx.x; i < n; i += blockDim.x) s[i] = x[i];
    __syncthreads();
    if (threadIdx.x == 0) { float t = 0; for (int i = 0; i < n; i++) t += s[i]; *out = t; }
}
template <typename T> __global__ void fill(T *p, T v, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) p[i] = v;
}
"""


def module(tmp_path, text=SRC):
    return jitop.load("gpu", [write(tmp_path / "gpu.cu", text)], cache_dir=str(tmp_path / "c"))


class CAI:
    def __init__(self, t):
        self.__cuda_array_interface__ = t.__cuda_array_interface__


class DL:
    def __init__(self, t):
        self.t = t

    def __dlpack__(self, stream=None):
        return self.t.__dlpack__()


def test_every_argument_kind(tmp_path):
    mod = module(tmp_path)
    n = 1000
    x = torch.arange(n, dtype=torch.float32, device="cuda")
    kinds = [lambda t: t, CAI, DL, lambda t: t.data_ptr()]
    scalars = [2.0, ctypes.c_float(2.0)]
    try:
        import numpy as np
        scalars.append(np.float32(2.0))
        ns = [n, np.int32(n), ctypes.c_int(n)]
    except ImportError:
        ns = [n, ctypes.c_int(n)]
    for kind in kinds:
        for a in scalars:
            for nn in ns:
                y = torch.ones(n, device="cuda")
                mod.saxpy((n + 255) // 256, 256, nn, a, kind(x), kind(y))
                torch.cuda.synchronize()
                assert torch.equal(y, 2 * x + 1)


def test_cupy_arrays(tmp_path):
    cp = pytest.importorskip("cupy")
    mod = module(tmp_path)
    x = cp.arange(64, dtype=cp.float32)
    y = cp.zeros(64, dtype=cp.float32)
    mod.saxpy(1, 64, 64, 3.0, x, y, stream=cp.cuda.get_current_stream())
    cp.cuda.get_current_stream().synchronize()
    assert bool((y == 3 * x).all())


def test_64bit_scalars_and_templates(tmp_path):
    mod = module(tmp_path)
    x = torch.rand(300, dtype=torch.float64, device="cuda")
    y = torch.rand(300, dtype=torch.float64, device="cuda")
    ref = 0.25 * x + y
    mod.axpy64(2, 256, 300, 0.25, x, y)  # int -> int64, float -> double by size
    f = mod["fill<double>"]
    z = torch.empty(10, dtype=torch.float64, device="cuda")
    f(1, 32, z, 1.5, 10)
    torch.cuda.synchronize()
    assert torch.allclose(y, ref) and torch.all(z == 1.5)


def test_torch_current_stream_is_used(tmp_path):
    mod = module(tmp_path)
    s = torch.cuda.Stream()
    n = 1 << 20
    x = torch.zeros(n, device="cuda")
    y = torch.zeros(n, device="cuda")
    op = mod.saxpy
    op(n // 256, 256, n, 0.0, x, y)  # loaded now: the launch below costs no load
    torch.cuda.synchronize()
    with torch.cuda.stream(s):
        assert jitop._jitop.stream(None, 0) == s.cuda_stream
        torch.cuda._sleep(1_000_000_000)  # the stream is busy for ~0.5 s
        x.fill_(1.0)                    # then fills x, on s
        op(n // 256, 256, n, 2.0, x, y)  # on s: after the fill
    assert not s.query()
    s.synchronize()
    assert torch.all(y == 2.0)


def test_explicit_streams(tmp_path):
    mod = module(tmp_path)
    s = torch.cuda.Stream()
    x = torch.ones(256, device="cuda")
    for stream in (s, s.cuda_stream):
        y = torch.zeros(256, device="cuda")
        torch.cuda.synchronize()
        with torch.cuda.stream(s):
            torch.cuda._sleep(20_000_000)
        mod.saxpy(1, 256, 256, 1.0, x, y, stream=stream)
        s.synchronize()
        assert torch.all(y == 1.0)


def test_dynamic_shared_memory(tmp_path):
    mod = module(tmp_path)
    n = 20000  # 80 KB: over the 48 KB default, raised automatically
    x = torch.rand(n, device="cuda")
    out = torch.zeros(1, device="cuda")
    mod.smem_sum(1, 256, x, out, n, shared_mem=4 * n)
    torch.cuda.synchronize()
    assert torch.allclose(out, x.sum().reshape(1), rtol=1e-4)


def test_hot_reload_runs_new_code(tmp_path):
    mod = module(tmp_path)
    reports = []
    mod.watch(lambda m, err: reports.append(err))
    x = torch.ones(32, device="cuda")
    y = torch.zeros(32, device="cuda")
    mod.saxpy(1, 32, 32, 1.0, x, y)
    torch.cuda.synchronize()
    assert torch.all(y == 1.0)
    write(tmp_path / "gpu.cu", SRC.replace("#define BIAS 0.0f", "#define BIAS 10.0f"))
    end = time.time() + 60
    while not reports and time.time() < end:
        time.sleep(0.01)
    assert reports and all(r is None for r in reports) and mod.generation >= 1
    y.zero_()
    mod.saxpy(1, 32, 32, 1.0, x, y)
    torch.cuda.synchronize()
    assert torch.all(y == 11.0)
    mod.unwatch()


def test_compile_error(tmp_path):
    with pytest.raises(jitop.CompileError, match=r"bad\.cu\(2\)"):
        jitop.load("bad", [write(tmp_path / "bad.cu", "extern \"C\" __global__ void k()\n{ x; }\n")],
                   cache_dir=str(tmp_path / "c"))
