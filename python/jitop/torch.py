"""jitop's shipped ops as PyTorch autograd functions and modules:

    layer_norm(x, normalized_shape, weight=None, bias=None, eps=1e-5)
        matches torch.nn.functional.layer_norm (float32, float16, bfloat16);
    LLTM(input_features, state_size)
        the LLTM cell of PyTorch's C++/CUDA extension tutorial (float32,
        float64), LLTMFunction its autograd function;
    square_matmul_(A, W, transpose=False, tf32=False), softmax_(x, dim=-1,
        scale=1.0, causal=False)
        in place (A <- A @ W, x <- softmax(scale * x)), inference only
        (float32, float16, bfloat16).

All run kernels/*.cu through libjitop on torch's current stream (device 0,
the default jitop context's device).
"""
import math

import torch
from torch.autograd.function import once_differentiable

from . import _jitop, context

__all__ = ["layer_norm", "LayerNormFunction", "LLTM", "LLTMFunction", "square_matmul_",
           "softmax_", "inplace_scratch_bytes", "inplace_release"]

_LN_DTYPES = {torch.float32: 0, torch.float16: 1, torch.bfloat16: 2}
_LLTM_DTYPES = {torch.float32: 0, torch.float64: 3}


def _ctx_for(t, what):
    if not t.is_cuda:
        raise ValueError("%s must be a CUDA tensor, not on %s" % (what, t.device))
    ctx = context()
    if t.device.index != ctx.device:
        raise ValueError("%s is on %s; jitop's default context runs on cuda:%d"
                         % (what, t.device, ctx.device))
    return ctx


def _ptr(t):
    return None if t is None else t.data_ptr()


def _same(t, x, what, numel=None):
    if t is None:
        return None
    if t.dtype != x.dtype or t.device != x.device:
        raise TypeError("%s must be %s on %s like the input, not %s on %s"
                        % (what, x.dtype, x.device, t.dtype, t.device))
    if numel is not None and t.numel() != numel:
        raise ValueError("%s has %d elements, expected %d" % (what, t.numel(), numel))
    return t.contiguous()


class LayerNormFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, cols, eps):
        jctx = _ctx_for(x, "x")
        dtype = _LN_DTYPES.get(x.dtype)
        if dtype is None:
            raise TypeError("jitop layer_norm supports float32, float16 and bfloat16, not %s"
                            % x.dtype)
        x = x.contiguous()
        weight = _same(weight, x, "weight", cols)
        bias = _same(bias, x, "bias", cols)
        rows = x.numel() // cols
        y = torch.empty_like(x)
        mean = torch.empty(rows, dtype=torch.float32, device=x.device)
        rstd = torch.empty(rows, dtype=torch.float32, device=x.device)
        if rows:
            _jitop.layernorm_forward(jctx, dtype, rows, cols, float(eps), x.data_ptr(),
                                     _ptr(weight), _ptr(bias), y.data_ptr(), mean.data_ptr(),
                                     rstd.data_ptr(), _jitop.stream(None, jctx.device))
        ctx.save_for_backward(x, weight, mean, rstd)
        ctx.x_shape = x.shape
        ctx.cols, ctx.dtype = cols, dtype
        ctx.bias_shape = bias.shape if bias is not None else None
        return y

    @staticmethod
    @once_differentiable
    def backward(ctx, dy):
        x, weight, mean, rstd = ctx.saved_tensors
        jctx = context()
        dy = dy.contiguous()
        dx = torch.empty_like(x)
        dgamma = torch.empty_like(weight) if weight is not None and ctx.needs_input_grad[1] else None
        dbeta = (torch.empty(ctx.bias_shape, dtype=x.dtype, device=x.device)
                 if ctx.bias_shape is not None and ctx.needs_input_grad[2] else None)
        rows = x.numel() // ctx.cols
        if rows:
            _jitop.layernorm_backward(jctx, ctx.dtype, rows, ctx.cols, dy.data_ptr(),
                                      x.data_ptr(), _ptr(weight), mean.data_ptr(),
                                      rstd.data_ptr(), dx.data_ptr(), _ptr(dgamma), _ptr(dbeta),
                                      _jitop.stream(None, jctx.device))
        else:
            dgamma = dgamma.zero_() if dgamma is not None else None
            dbeta = dbeta.zero_() if dbeta is not None else None
        return dx.view(ctx.x_shape), dgamma, dbeta, None, None


def layer_norm(x, normalized_shape, weight=None, bias=None, eps=1e-5):
    """torch.nn.functional.layer_norm on jitop's kernels/layernorm.cu."""
    if isinstance(normalized_shape, int):
        normalized_shape = (normalized_shape,)
    normalized_shape = tuple(normalized_shape)
    if tuple(x.shape[x.dim() - len(normalized_shape):]) != normalized_shape or \
            len(normalized_shape) > x.dim():
        raise ValueError("normalized_shape %s does not end the input's shape %s"
                         % (normalized_shape, tuple(x.shape)))
    cols = math.prod(normalized_shape)
    if cols < 1:
        raise ValueError("normalized_shape %s is empty" % (normalized_shape,))
    return LayerNormFunction.apply(x, weight, bias, cols, eps)


def _lltm_args(input, weights, bias, old_h, old_cell):
    jctx = _ctx_for(input, "input")
    dtype = _LLTM_DTYPES.get(input.dtype)
    if dtype is None:
        raise TypeError("jitop LLTM supports float32 and float64, not %s" % input.dtype)
    if input.dim() != 2 or old_h.dim() != 2:
        raise ValueError("input and old_h must be 2-D (batch x features)")
    B, I = input.shape
    S = old_h.shape[1]
    input = input.contiguous()
    weights = _same(weights, input, "weights", 3 * S * (I + S))
    bias = _same(bias, input, "bias", 3 * S)
    old_h = _same(old_h, input, "old_h", B * S)
    old_cell = _same(old_cell, input, "old_cell", B * S)
    return jctx, dtype, B, I, S, input, weights, bias, old_h, old_cell


class LLTMFunction(torch.autograd.Function):
    """The tutorial's LLTMFunction: forward(input, weights, bias, old_h,
    old_cell) -> (new_h, new_cell)."""

    @staticmethod
    def forward(ctx, input, weights, bias, old_h, old_cell):
        jctx, dtype, B, I, S, input, weights, bias, old_h, old_cell = _lltm_args(
            input, weights, bias, old_h, old_cell)
        new_h = torch.empty((B, S), dtype=input.dtype, device=input.device)
        new_cell = torch.empty_like(new_h)
        saved = torch.empty(_jitop.lltm_saved_size(dtype, B, I, S), dtype=torch.uint8,
                            device=input.device)
        _jitop.lltm_forward(jctx, dtype, B, I, S, input.data_ptr(), weights.data_ptr(),
                            bias.data_ptr(), old_h.data_ptr(), old_cell.data_ptr(),
                            new_h.data_ptr(), new_cell.data_ptr(), saved.data_ptr(),
                            _jitop.stream(None, jctx.device))
        # saved holds the activations (and is the backward's scratch): kept
        # on ctx, not save_for_backward, as it is neither input nor output.
        ctx.saved = saved
        ctx.dims = (dtype, B, I, S)
        ctx.wshape, ctx.bshape = weights.shape, bias.shape
        ctx.save_for_backward(weights)
        return new_h, new_cell

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_h, grad_cell):
        (weights,) = ctx.saved_tensors
        dtype, B, I, S = ctx.dims
        jctx = context()
        like = dict(dtype=weights.dtype, device=weights.device)
        grad_h = torch.zeros((B, S), **like) if grad_h is None else grad_h.contiguous()
        grad_cell = torch.zeros((B, S), **like) if grad_cell is None else grad_cell.contiguous()
        d_old_h = torch.empty((B, S), **like)
        d_input = torch.empty((B, I), **like)
        d_weights = torch.empty(ctx.wshape, **like)
        d_bias = torch.empty(ctx.bshape, **like)
        d_old_cell = torch.empty((B, S), **like)
        _jitop.lltm_backward(jctx, dtype, B, I, S, grad_h.data_ptr(), grad_cell.data_ptr(),
                             ctx.saved.data_ptr(), weights.contiguous().data_ptr(),
                             d_old_h.data_ptr(), d_input.data_ptr(), d_weights.data_ptr(),
                             d_bias.data_ptr(), d_old_cell.data_ptr(),
                             _jitop.stream(None, jctx.device))
        return d_input, d_weights, d_bias, d_old_h, d_old_cell


class LLTM(torch.nn.Module):
    """The tutorial's LLTM module: forward(input, (old_h, old_cell)) ->
    (new_h, new_cell); weights (3S x (I + S)) and bias (1 x 3S) uniform in
    +-1/sqrt(state_size)."""

    def __init__(self, input_features, state_size):
        super().__init__()
        self.input_features = input_features
        self.state_size = state_size
        self.weights = torch.nn.Parameter(torch.empty(3 * state_size,
                                                      input_features + state_size))
        self.bias = torch.nn.Parameter(torch.empty(1, 3 * state_size))
        self.reset_parameters()

    def reset_parameters(self):
        stdv = 1.0 / math.sqrt(self.state_size)
        for weight in self.parameters():
            weight.data.uniform_(-stdv, +stdv)

    def forward(self, input, state):
        return LLTMFunction.apply(input, self.weights, self.bias, *state)


# In place (include/jitop_ops.h, kernels/inplace.cu): the tensor handed in is
# overwritten and returned, as torch's own trailing-underscore ops do. They
# have no backward, so they refuse to run where autograd would record them.
_INPLACE_DTYPES = _LN_DTYPES
_MATMUL_TF32 = 1  # JITOP_MATMUL_TF32


def _inplace_arg(t, what, fn):
    """The jitop dtype of t after checking what an in-place op needs: a
    tensor, CUDA on the default context's device, float32/float16/bfloat16,
    contiguous (a copy would be written, not t)."""
    if not isinstance(t, torch.Tensor):
        raise TypeError("%s: %s must be a torch.Tensor, not %s" % (fn, what, type(t).__name__))
    dtype = _INPLACE_DTYPES.get(t.dtype)
    if dtype is None:
        raise TypeError("%s: %s must be float32, float16 or bfloat16, not %s"
                        % (fn, what, t.dtype))
    if not t.is_cuda:
        raise ValueError("%s: %s must be a CUDA tensor, not on %s" % (fn, what, t.device))
    if not t.is_contiguous():
        raise ValueError("%s: %s must be contiguous (an in-place op cannot write through a "
                         "copy); call .contiguous() first" % (fn, what))
    if t.requires_grad and torch.is_grad_enabled():
        raise RuntimeError("%s: %s requires grad and jitop's in-place ops have no backward: "
                           "call it under torch.no_grad() or torch.inference_mode()" % (fn, what))
    return dtype


def _written(t):
    # Autograd must see the write: a graph that saved t fails at backward
    # ("modified by an inplace operation") instead of using the new values.
    bump = getattr(torch.autograd.graph, "increment_version", None)
    if bump is not None:
        bump(t)
    return t


def square_matmul_(A, W, transpose=False, tf32=False):
    """A <- A @ W (A @ W.T with transpose=True), in place; returns A.

    A is m x n (or any shape whose last dimension is n: the leading ones are
    rows), W is n x n, both contiguous CUDA tensors of one dtype (float32,
    float16, bfloat16; float32 accumulation). float32 is full float32 unless
    tf32=True. Extra device memory is bounded whatever m is
    (jitop_square_matmul_scratch_bound, kept between calls: see
    inplace_scratch_bytes / inplace_release). Queued on torch's current
    stream. W must not overlap A."""
    fn = "square_matmul_"
    dtype = _inplace_arg(A, "A", fn)
    if _inplace_arg(W, "W", fn) != dtype:
        raise TypeError("%s: W must be %s like A, not %s" % (fn, A.dtype, W.dtype))
    if A.dim() < 1:
        raise ValueError("%s: A must have at least one dimension, not shape %s"
                         % (fn, tuple(A.shape)))
    n = A.shape[-1]
    if W.dim() != 2 or W.shape[0] != W.shape[1] or W.shape[0] != n:
        raise ValueError("%s: W must be n x n with n = A.shape[-1] = %d, not shape %s"
                         % (fn, n, tuple(W.shape)))
    if W.device != A.device:
        raise ValueError("%s: W is on %s, A on %s" % (fn, W.device, A.device))
    jctx = _ctx_for(A, "A")
    m = A.numel() // n if n else 0
    if m == 0:
        return A
    _jitop.square_matmul_inplace(jctx, dtype, m, n, A.data_ptr(), W.data_ptr(),
                                 1 if transpose else 0, _MATMUL_TF32 if tf32 else 0,
                                 _jitop.stream(None, jctx.device))
    return _written(A)


def softmax_(x, dim=-1, scale=1.0, causal=False):
    """x <- softmax(scale * x) over the last dimension, in place; returns x.

    float32, float16, bfloat16 (computed in float32, max-subtracted); x a
    contiguous CUDA tensor. causal=True treats x as attention scores
    (..., Q, K) with K >= Q: query i keeps keys 0 .. i + K - Q (the mask
    aligned to the bottom right, as flash-attention does; for K == Q the
    usual lower triangle) and the masked ones are written as 0. causal=Q
    (an int) gives the queries per row group explicitly, for a tensor whose
    rows are queries in groups of Q. Queued on torch's current stream."""
    fn = "softmax_"
    dtype = _inplace_arg(x, "x", fn)
    if x.dim() < 1:
        raise ValueError("%s: x must have at least one dimension, not shape %s"
                         % (fn, tuple(x.shape)))
    if isinstance(dim, bool) or not isinstance(dim, int):
        raise TypeError("%s: dim must be an int, not %s" % (fn, type(dim).__name__))
    if dim not in (-1, x.dim() - 1):
        raise ValueError("%s: dim must be the last dimension (-1 or %d), not %d"
                         % (fn, x.dim() - 1, dim))
    if isinstance(scale, bool) or not isinstance(scale, (int, float)):
        raise TypeError("%s: scale must be a float, not %s" % (fn, type(scale).__name__))
    scale = float(scale)
    if not math.isfinite(scale):
        raise ValueError("%s: scale must be finite, not %r" % (fn, scale))
    n = x.shape[-1]
    if causal is False or causal is None:
        q = 0
    elif causal is True:
        if x.dim() < 2:
            raise ValueError("%s: causal=True needs x of shape (..., Q, K), not %s"
                             % (fn, tuple(x.shape)))
        q = x.shape[-2]
    elif isinstance(causal, int):
        q = causal
        if q < 1:
            raise ValueError("%s: causal must be True, False or a query count >= 1, not %d"
                             % (fn, q))
    else:
        raise TypeError("%s: causal must be a bool or an int (queries per group), not %s"
                        % (fn, type(causal).__name__))
    if n and q > n:
        raise ValueError("%s: causal needs at most as many queries as keys: Q = %d > K = %d"
                         % (fn, q, n))
    jctx = _ctx_for(x, "x")
    rows = x.numel() // n if n else 0
    if rows == 0:
        return x
    _jitop.softmax_inplace(jctx, dtype, rows, n, x.data_ptr(), scale, q,
                           _jitop.stream(None, jctx.device))
    return _written(x)


def inplace_scratch_bytes():
    """Device bytes the in-place ops of jitop's default context hold now
    (square_matmul_'s chunk scratch, all streams)."""
    return _jitop.inplace_scratch_bytes(context())


def inplace_release():
    """Frees that scratch (synchronizes the context first: queued work may
    still use it); the next call allocates it again."""
    _jitop.inplace_release(context())
