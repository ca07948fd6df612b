"""The shipped ops' entry points that jitop.torch calls (jitop._jitop), on
the fake driver: the kernels are compiled for real (NVRTC, from the
package's own kernels/ copy) and "launched" on host buffers; argument
errors are raised before anything is queued."""
import ctypes
import os

import pytest

import jitop
from jitop import _jitop
from jtest import context, need_fake

KERNELS = os.path.join(os.path.dirname(jitop.__file__), "kernels")


def ctx_for(tmp_path):
    need_fake(pytest)
    return context(tmp_path, kernel_dir=KERNELS)


def buffers(*sizes):
    bufs = [ctypes.create_string_buffer(max(s, 16)) for s in sizes]
    return bufs, [ctypes.addressof(b) for b in bufs]


def test_lltm_calls(tmp_path):
    ctx = ctx_for(tmp_path)
    B, I, S = 4, 8, 16
    saved = _jitop.lltm_saved_size(0, B, I, S)
    assert saved == B * (8 * S + I) * 4
    assert _jitop.lltm_saved_size(3, B, I, S) == 2 * saved
    f = 4
    keep, p = buffers(B * I * f, 3 * S * (I + S) * f, 3 * S * f, B * S * f, B * S * f,
                      B * S * f, B * S * f, saved)
    _jitop.lltm_forward(ctx, 0, B, I, S, *p, 0)
    keep2, g = buffers(B * S * f, B * S * f, B * S * f, B * I * f, 3 * S * (I + S) * f,
                       3 * S * f, B * S * f)
    _jitop.lltm_backward(ctx, 0, B, I, S, g[0], g[1], p[7], p[1], g[2], g[3], g[4], g[5], g[6],
                         0)
    with pytest.raises(ValueError, match="B must be"):
        _jitop.lltm_forward(ctx, 0, 0, I, S, *p, 0)
    with pytest.raises(ValueError, match="dtype"):
        _jitop.lltm_forward(ctx, 1, B, I, S, *p, 0)  # float16: not an LLTM dtype
    with pytest.raises(TypeError, match="takes 14 arguments"):
        _jitop.lltm_forward(ctx, 0, B, I, S)
    with pytest.raises(TypeError, match="jitop.Context"):
        _jitop.lltm_forward(None, 0, B, I, S, *p, 0)


def test_layernorm_calls(tmp_path):
    ctx = ctx_for(tmp_path)
    rows, cols = 8, 256
    n = rows * cols * 4
    keep, (x, w, b, y, mean, rstd) = buffers(n, cols * 4, cols * 4, n, rows * 4, rows * 4)
    _jitop.layernorm_forward(ctx, 0, rows, cols, 1e-5, x, w, b, y, mean, rstd, 0)
    _jitop.layernorm_forward(ctx, 0, rows, cols, 1e-5, x, None, None, y, None, None, 0)
    keep2, (dy, dx, dw, db) = buffers(n, n, cols * 4, cols * 4)
    _jitop.layernorm_backward(ctx, 0, rows, cols, dy, x, w, mean, rstd, dx, dw, db, 0)
    with pytest.raises(TypeError, match="eps"):
        _jitop.layernorm_forward(ctx, 0, rows, cols, 1, x, w, b, y, mean, rstd, 0)
    with pytest.raises(ValueError, match="rows"):
        _jitop.layernorm_forward(ctx, 0, 0, cols, 1e-5, x, w, b, y, mean, rstd, 0)
