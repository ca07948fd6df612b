"""The in-place ops from Python on the fake driver: the C entry points
(jitop._jitop.square_matmul_inplace, softmax_inplace, the scratch calls)
queue exactly one launch for a valid call and none for a rejected one, and
jitop.torch.square_matmul_ / softmax_ check their arguments before calling C
(run in a child interpreter against a small stand-in for torch: this
machine has no torch, and the checks are what is under test, not torch)."""
import ctypes
import os
import textwrap

import pytest

import jitop
from jitop import _jitop
from jtest import context, need_fake, python

KERNELS = os.path.join(os.path.dirname(jitop.__file__), "kernels")
F32, F16, BF16, F64 = 0, 1, 2, 3


def ctx_for(tmp_path):
    need_fake(pytest)
    return context(tmp_path, kernel_dir=KERNELS)


def launches():
    class Stats(ctypes.Structure):
        _fields_ = [(name, ctypes.c_long) for name in (
            "modules_loaded", "modules_ever", "unloads", "functions_loaded",
            "loaded_at_launch", "launches", "syncs", "primary_ctx_refs", "describe_calls",
            "cluster_queries")] + [("last_cluster_size", ctypes.c_uint),
                                   ("last_cluster_smem", ctypes.c_uint)] + [
            (name, ctypes.c_long) for name in ("symbols_resolved", "global_lookups",
                                               "global_copies", "global_async_copies")] + [
            ("last_grid", ctypes.c_uint * 3), ("last_block", ctypes.c_uint * 3),
            ("last_smem", ctypes.c_uint), ("last_cooperative", ctypes.c_int),
            ("tensor_maps", ctypes.c_long), ("last_box", ctypes.c_uint * 2),
            ("memsets", ctypes.c_long)]
    s = Stats()
    ctypes.CDLL("libcuda.so.1").fake_cuda_get_stats(ctypes.byref(s))
    return s.launches


def buffer(nbytes):
    b = ctypes.create_string_buffer(max(nbytes, 16))
    return b, ctypes.addressof(b)


def test_square_matmul_calls(tmp_path):
    ctx = ctx_for(tmp_path)
    m, n = 7, 17
    ka, a = buffer(m * n * 4)
    kw, w = buffer(n * n * 4)
    for dtype in (F32, F16, BF16):
        for transpose in (0, 1):
            before = launches()
            _jitop.square_matmul_inplace(ctx, dtype, m, n, a, w, transpose, 0, 0)
            assert launches() == before + 1
    # n <= 64 runs one jitop kernel and keeps no scratch.
    assert _jitop.square_matmul_scratch_bound(F32, n) == 0
    assert _jitop.inplace_scratch_bytes(ctx) == 0
    big = _jitop.square_matmul_scratch_bound(F32, 4096)
    assert big >= 2 * 4096 * 4
    assert _jitop.square_matmul_scratch_bound(F16, 4096) <= big
    assert _jitop.square_matmul_scratch_bound(F64, 4096) == 0  # not an in-place dtype
    before = launches()
    with pytest.raises(ValueError, match="m .rows. is 0"):
        _jitop.square_matmul_inplace(ctx, F32, 0, n, a, w, 0, 0, 0)
    with pytest.raises(ValueError, match="dtype 3"):
        _jitop.square_matmul_inplace(ctx, F64, m, n, a, w, 0, 0, 0)
    with pytest.raises(ValueError, match="w overlaps a"):
        _jitop.square_matmul_inplace(ctx, F32, m, n, a, a + 4, 0, 0, 0)
    with pytest.raises(ValueError, match="w is NULL"):
        _jitop.square_matmul_inplace(ctx, F32, m, n, a, None, 0, 0, 0)
    with pytest.raises(ValueError, match="flags 0x2"):
        _jitop.square_matmul_inplace(ctx, F32, m, n, a, w, 0, 2, 0)
    with pytest.raises(ValueError, match="flags must fit"):
        _jitop.square_matmul_inplace(ctx, F32, m, n, a, w, 0, -1, 0)
    with pytest.raises(TypeError, match="takes 9 arguments"):
        _jitop.square_matmul_inplace(ctx, F32, m, n, a, w)
    with pytest.raises(TypeError, match="jitop.Context"):
        _jitop.square_matmul_inplace(None, F32, m, n, a, w, 0, 0, 0)
    assert launches() == before
    _jitop.inplace_release(ctx)
    with pytest.raises(TypeError, match="inplace_release"):
        _jitop.inplace_release(None)


def test_softmax_calls(tmp_path):
    ctx = ctx_for(tmp_path)
    rows, n = 6, 100
    kx, x = buffer(rows * n * 4)
    for dtype in (F32, F16, BF16):
        for q in (0, 1, 3, n):
            before = launches()
            _jitop.softmax_inplace(ctx, dtype, rows, n, x, 0.125, q, 0)
            assert launches() == before + 1
    before = launches()
    with pytest.raises(TypeError, match="scale: float"):
        _jitop.softmax_inplace(ctx, F32, rows, n, x, 1, 0, 0)
    with pytest.raises(ValueError, match="causal_q is 101"):
        _jitop.softmax_inplace(ctx, F32, rows, n, x, 1.0, n + 1, 0)
    with pytest.raises(ValueError, match="scale is inf"):
        _jitop.softmax_inplace(ctx, F32, rows, n, x, float("inf"), 0, 0)
    with pytest.raises(ValueError, match="not aligned"):
        _jitop.softmax_inplace(ctx, F32, rows, n, x + 2, 1.0, 0, 0)
    assert launches() == before


# A stand-in for torch: what jitop.torch touches at import and in the
# in-place ops, with tensors over host buffers (the fake driver "launches" on
# host memory) and a current stream that records the device it was asked for.
FAKE_TORCH = '''
import ctypes, types

class dtype:
    def __init__(self, name, size):
        self.name, self.itemsize = name, size
    def __repr__(self):
        return "torch." + self.name

float32, float16, bfloat16, float64 = (dtype("float32", 4), dtype("float16", 2),
                                       dtype("bfloat16", 2), dtype("float64", 8))
_grad = [True]
def is_grad_enabled():
    return _grad[0]

class device:
    def __init__(self, type, index):
        self.type, self.index = type, index
    def __eq__(self, other):
        return (self.type, self.index) == (other.type, other.index)
    def __repr__(self):
        return "%s:%s" % (self.type, self.index) if self.index is not None else self.type

class Tensor:
    def __init__(self, shape, dt=float32, dev="cuda:0", contiguous=True, requires_grad=False):
        self.shape, self.dtype = tuple(shape), dt
        kind, _, index = dev.partition(":")
        self.device = device(kind, int(index) if index else None)
        self.is_cuda = kind == "cuda"
        self._contiguous, self.requires_grad = contiguous, requires_grad
        n = 1
        for s in self.shape:
            n *= s
        self._n = n
        self._buf = ctypes.create_string_buffer(max(n * dt.itemsize, 16))
        self._version = 0
    def dim(self):
        return len(self.shape)
    def numel(self):
        return self._n
    def is_contiguous(self):
        return self._contiguous
    def data_ptr(self):
        return ctypes.addressof(self._buf)

stream_devices = []
def _raw_stream(dev):
    stream_devices.append(dev)
    return 0
_C = types.SimpleNamespace(_cuda_getCurrentRawStream=_raw_stream)
cuda = types.SimpleNamespace(is_available=lambda: True)

class _Module:
    pass
nn = types.SimpleNamespace(Module=_Module, Parameter=lambda t: t)
from . import autograd
'''


def test_torch_argument_checks(tmp_path):
    need_fake(pytest)
    pkg = tmp_path / "fake"
    (pkg / "torch" / "autograd").mkdir(parents=True)
    (pkg / "torch" / "__init__.py").write_text(FAKE_TORCH)
    (pkg / "torch" / "autograd" / "__init__.py").write_text(
        "from . import function, graph\nclass Function:\n    pass\n")
    (pkg / "torch" / "autograd" / "graph.py").write_text(
        "def increment_version(t):\n    t._version += 1\n")
    (pkg / "torch" / "autograd" / "function.py").write_text(
        "def once_differentiable(f):\n    return f\n")
    code = textwrap.dedent('''
        import torch
        import jitop.torch as jt
        T = torch.Tensor

        def err(kind, text, f, *a, **kw):
            try:
                f(*a, **kw)
            except kind as e:
                assert text in str(e), (text, str(e))
                return
            raise AssertionError("no %s for %s" % (kind.__name__, text))

        A, W = T((7, 17)), T((17, 17))
        for dt in (torch.float32, torch.float16, torch.bfloat16):
            a, w = T((3, 5, 17), dt), T((17, 17), dt)
            assert jt.square_matmul_(a, w) is a and a._version == 1
            assert jt.square_matmul_(a, w, transpose=True, tf32=True) is a
            assert a._version == 2
        err(TypeError, "A must be a torch.Tensor", jt.square_matmul_, [1.0], W)
        err(TypeError, "A must be float32, float16 or bfloat16, not torch.float64",
            jt.square_matmul_, T((7, 17), torch.float64), W)
        err(TypeError, "W must be torch.float32 like A, not torch.float16",
            jt.square_matmul_, A, T((17, 17), torch.float16))
        err(ValueError, "A must be a CUDA tensor", jt.square_matmul_, T((7, 17), dev="cpu"), W)
        err(ValueError, "W must be a CUDA tensor", jt.square_matmul_, A, T((17, 17), dev="cpu"))
        err(ValueError, "A must be contiguous", jt.square_matmul_,
            T((7, 17), contiguous=False), W)
        err(ValueError, "W must be contiguous", jt.square_matmul_, A,
            T((17, 17), contiguous=False))
        err(ValueError, "W must be n x n with n = A.shape[-1] = 17, not shape (17, 16)",
            jt.square_matmul_, A, T((17, 16)))
        err(ValueError, "not shape (16, 16)", jt.square_matmul_, A, T((16, 16)))
        err(ValueError, "not shape (17,)", jt.square_matmul_, A, T((17,)))
        err(ValueError, "A must have at least one dimension", jt.square_matmul_, T(()), W)
        err(ValueError, "A is on cuda:1", jt.square_matmul_, T((7, 17), dev="cuda:1"),
            T((17, 17), dev="cuda:1"))
        err(ValueError, "W is on cuda:1, A on cuda:0", jt.square_matmul_, A,
            T((17, 17), dev="cuda:1"))
        err(RuntimeError, "A requires grad", jt.square_matmul_, T((7, 17), requires_grad=True), W)
        err(RuntimeError, "W requires grad", jt.square_matmul_, A, T((17, 17), requires_grad=True))
        torch._grad[0] = False  # torch.no_grad()
        jt.square_matmul_(T((7, 17), requires_grad=True), T((17, 17), requires_grad=True))
        torch._grad[0] = True
        empty = T((0, 17))
        assert jt.square_matmul_(empty, W) is empty and empty._version == 0

        for dt in (torch.float32, torch.float16, torch.bfloat16):
            x = T((2, 3, 40), dt)
            assert jt.softmax_(x) is x and x._version == 1
            assert jt.softmax_(x, dim=2, scale=0.5, causal=True) is x
            assert jt.softmax_(x, scale=2, causal=5) is x and x._version == 3
        x = T((4, 9))
        err(TypeError, "x must be float32, float16 or bfloat16, not torch.float64",
            jt.softmax_, T((4, 9), torch.float64))
        err(ValueError, "x must be a CUDA tensor", jt.softmax_, T((4, 9), dev="cpu"))
        err(ValueError, "x must be contiguous", jt.softmax_, T((4, 9), contiguous=False))
        err(ValueError, "dim must be the last dimension (-1 or 1), not 0", jt.softmax_, x, dim=0)
        err(TypeError, "dim must be an int", jt.softmax_, x, dim=1.0)
        err(TypeError, "scale must be a float, not str", jt.softmax_, x, scale="1")
        err(ValueError, "scale must be finite", jt.softmax_, x, scale=float("nan"))
        err(ValueError, "Q = 10 > K = 9", jt.softmax_, x, causal=10)
        err(ValueError, "Q = 9 > K = 4", jt.softmax_, T((9, 4)), causal=True)
        err(ValueError, "causal=True needs x of shape (..., Q, K)", jt.softmax_, T((9,)),
            causal=True)
        err(ValueError, "query count >= 1, not 0", jt.softmax_, x, causal=0)
        err(TypeError, "causal must be a bool or an int", jt.softmax_, x, causal="yes")
        err(RuntimeError, "x requires grad", jt.softmax_, T((4, 9), requires_grad=True))
        # Every queued call asked torch for the current stream of device 0.
        assert torch.stream_devices and set(torch.stream_devices) == {0}, torch.stream_devices
        assert jt.inplace_scratch_bytes() == 0
        jt.inplace_release()
        print("ok", len(torch.stream_devices))
    ''')
    rc, out, err = python(code, env={
        "PYTHONPATH": str(pkg) + os.pathsep + os.environ.get("PYTHONPATH", ""),
        "JITOP_CACHE_DIR": str(tmp_path / "cache")})
    assert rc == 0, out + err
    # 6 matmuls (3 dtypes, plain and transposed), 1 under no_grad, 9 softmaxes
    assert out.split() == ["ok", "16"], out + err
