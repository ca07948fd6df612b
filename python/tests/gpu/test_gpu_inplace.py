"""jitop.torch.square_matmul_ and softmax_ against float64 references on
fresh random inputs: every dtype, plain and transposed W, odd shapes, masks,
extreme rows; the tensors sit between poisoned guard regions that must come
back untouched (nothing outside A or x is written), W is unchanged, the
scratch stays within its bound whatever m is, and the ops run on torch's
current stream (a non-default stream that is still busy when they are
called)."""
import math
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("no CUDA device for torch", allow_module_level=True)

import jitop.torch as jt  # noqa: E402
from jitop import _jitop  # noqa: E402

DTYPES = (torch.float32, torch.float16, torch.bfloat16)
CODE = {torch.float32: 0, torch.float16: 1, torch.bfloat16: 2}
GUARD = 4096  # elements each side (keeps 16-byte alignment)
POISON = -1234.5


def guarded(shape, dtype):
    """A contiguous tensor of shape inside a larger buffer whose both ends are
    POISON; returns (tensor, check) where check() asserts the ends are intact."""
    numel = math.prod(shape)
    buf = torch.full((GUARD + numel + GUARD,), POISON, dtype=dtype, device="cuda")
    t = buf[GUARD:GUARD + numel].view(shape)
    assert t.is_contiguous()
    before = buf[:GUARD].clone()

    def check():
        assert torch.equal(buf[:GUARD], before), "written before the tensor"
        assert torch.equal(buf[GUARD + numel:], before), "written after the tensor"
    return t, check


def matmul_case(m, n, dtype, transpose, tf32=False, seed=0):
    torch.manual_seed(seed + 1000 * m + n)
    A, check = guarded((m, n), dtype)
    A.copy_(torch.randn(m, n, device="cuda"))
    W = (torch.randn(n, n, device="cuda") / math.sqrt(n)).to(dtype)
    W0 = W.clone()
    Ad, Wd = A.double(), W.double()
    if transpose:
        Wd = Wd.t()
    ref = Ad @ Wd
    # The size of one element's products: errors are relative to it (or to
    # the element, where that is larger), so that TF32 rounding (~1e-3 per
    # product) fails the float32 tolerance.
    typical = ((Ad * Ad) @ (Wd * Wd)).sqrt()
    out = jt.square_matmul_(A, W, transpose=transpose, tf32=tf32)
    assert out is A
    torch.cuda.synchronize()
    check()
    assert torch.equal(W, W0), "W was written"
    got = A.double()
    assert torch.isfinite(got).all()
    return ((got - ref).abs() / torch.maximum(ref.abs(), typical).clamp_min(1e-30)).max().item()


# float32: full float32 (cuBLAS or jitop's kernel; TF32 would be ~1e-3); half types: the output's
# rounding (2^-11, 2^-8 relative) and float32 accumulation.
MATMUL_TOL = {torch.float32: 5e-5, torch.float16: 1.5e-3, torch.bfloat16: 1e-2}
MATMUL_SHAPES = ((1, 1), (7, 1), (1, 17), (7, 17), (1000, 64), (3, 65), (1000, 768),
                 (65536, 64), (7, 1024), (1000, 1024), (333, 4096), (5, 12288))


def test_square_matmul_matches_float64():
    for m, n in MATMUL_SHAPES:
        for dtype in DTYPES:
            for transpose in (False, True):
                err = matmul_case(m, n, dtype, transpose)
                assert err <= MATMUL_TOL[dtype], (m, n, dtype, transpose, err)


def test_square_matmul_tf32_and_batched_shape():
    for m, n in ((1000, 1024), (7, 17)):
        for transpose in (False, True):
            err = matmul_case(m, n, torch.float32, transpose, tf32=True)
            assert err <= 1e-2, (m, n, transpose, err)
    # leading dimensions are rows
    torch.manual_seed(5)
    A = torch.randn(2, 3, 96, 768, device="cuda")
    W = torch.randn(768, 768, device="cuda") / math.sqrt(768)
    ref = A.double() @ W.double()
    jt.square_matmul_(A, W)
    assert (A.double() - ref).abs().max() < 1e-4


def test_square_matmul_scratch_does_not_grow_with_m():
    n = 768
    for dtype in DTYPES:
        bound = _jitop.square_matmul_scratch_bound(CODE[dtype], n)
        assert bound > 0
        for m in (1000, 65536):
            jt.inplace_release()
            assert jt.inplace_scratch_bytes() == 0
            err = matmul_case(m, n, dtype, False, seed=7)
            assert err <= MATMUL_TOL[dtype]
            held = jt.inplace_scratch_bytes()
            assert 0 < held <= bound, (m, dtype, held, bound)
        # 65536 rows of A are far more than the bound: the product went
        # through the scratch in chunks.
        assert bound < 65536 * n * torch.tensor([], dtype=dtype).element_size()
    jt.inplace_release()
    assert jt.inplace_scratch_bytes() == 0


def test_ops_run_on_torchs_current_stream():
    # The stream is kept busy (_sleep) before the input is filled: an op that
    # ran on another stream would read the old input.
    torch.manual_seed(9)
    s = torch.cuda.Stream()
    m, n = 4096, 1024
    src = torch.randn(m, n, device="cuda")
    W = torch.randn(n, n, device="cuda") / math.sqrt(n)
    x_src = torch.randn(512, 1000, device="cuda")
    A = torch.zeros(m, n, device="cuda")
    x = torch.zeros(512, 1000, device="cuda")
    # compiled, loaded and cuBLAS set up first, so that the timed part is
    # only the queueing
    jt.square_matmul_(A, W)
    jt.softmax_(x)
    A.zero_()
    x.zero_()
    torch.cuda.synchronize()
    with torch.cuda.stream(s):
        torch.cuda._sleep(100_000_000)
        A.copy_(src)
        x.copy_(x_src)
        jt.square_matmul_(A, W)
        jt.softmax_(x)
    s.synchronize()
    assert (A.double() - src.double() @ W.double()).abs().max() < 1e-3
    assert (x.double() - torch.softmax(x_src.double(), -1)).abs().max() < 1e-6


def softmax_check(x, ref, dtype):
    rtol, atol = {torch.float32: (5e-5, 1e-9), torch.float16: (2e-3, 1e-7),
                  torch.bfloat16: (1e-2, 1e-9)}[dtype]
    got = x.double()
    assert not torch.isnan(got).any()
    bad = (got - ref).abs() > rtol * ref.abs() + atol
    assert not bad.any(), ((got - ref).abs().max().item(), bad.nonzero()[:4].tolist())


SOFTMAX_N = (1, 2, 3, 17, 100, 256, 1000, 1024, 2049, 4096, 8191, 16384, 32768, 50000, 65536)


def test_softmax_matches_float64():
    for n in SOFTMAX_N:
        for rows in (1, 7, max(1, min(1000, (1 << 22) // n))):
            for dtype in DTYPES:
                scale = (1.0, 0.125, -0.5)[(n + rows) % 3]
                torch.manual_seed(n * 31 + rows)
                x, check = guarded((rows, n), dtype)
                x.copy_(torch.randn(rows, n, device="cuda") * 3)
                ref = torch.softmax(x.double() * scale, -1)
                assert jt.softmax_(x, scale=scale) is x
                torch.cuda.synchronize()
                check()
                softmax_check(x, ref, dtype)


def causal_reference(x, q):
    k = x.shape[-1]
    i = torch.arange(q, device="cuda").view(q, 1)
    j = torch.arange(k, device="cuda").view(1, k)
    keep = j <= i + (k - q)  # bottom-right aligned
    return torch.softmax(x.double().masked_fill(~keep, float("-inf")), -1)


def test_softmax_causal():
    for shape in ((2, 3, 17, 17), (1, 2, 5, 40), (3, 1, 128, 128), (1, 1, 1, 1),
                  (2, 64, 100), (1, 1000, 1000)):
        for dtype in DTYPES:
            torch.manual_seed(sum(shape))
            x, check = guarded(shape, dtype)
            x.copy_(torch.randn(shape, device="cuda"))
            ref = causal_reference(x, shape[-2])
            y = x.clone()
            jt.softmax_(x, causal=True)
            torch.cuda.synchronize()
            check()
            softmax_check(x, ref, dtype)
            # causal=Q on the rows flattened: the same thing
            jt.softmax_(y.view(-1, shape[-1]), causal=shape[-2])
            assert torch.equal(x, y)


def test_softmax_extreme_rows():
    big = {torch.float32: 3e38, torch.float16: 6e4, torch.bfloat16: 3e38}
    for dtype in DTYPES:
        for n in (5, 1000, 4096, 50000):
            torch.manual_seed(n)
            x, check = guarded((5, n), dtype)
            x[0] = 7.0                                         # all equal
            x[1] = -big[dtype]                                 # all equal, huge
            x[2] = torch.randn(n, device="cuda").sign() * big[dtype]  # +-max: x - max overflows
            x[3] = torch.randn(n, device="cuda") * (big[dtype] / 8)  # (randn * 3e38 is inf)
            x[4] = big[dtype]
            ref = torch.softmax(x.double(), -1)
            jt.softmax_(x)
            torch.cuda.synchronize()
            check()
            assert torch.isfinite(x).all()
            softmax_check(x, ref, dtype)
            assert torch.allclose(x[0].double(), torch.full((n,), 1.0 / n, device="cuda",
                                                            dtype=torch.float64),
                                  rtol={torch.float32: 1e-6}.get(dtype, 1e-2), atol=0)
    # +inf elements share their row (torch.softmax would give NaN), also when
    # scale * x overflows or a negative scale turns -inf into +inf
    for dtype in DTYPES:
        for n in (5, 1000, 50000):
            x = torch.randn(2, n, device="cuda").to(dtype)
            x[:, 1::3] = float("inf")
            x[1, 2::3] = float("-inf")
            inf_pos, ninf_pos = x[0] == float("inf"), x[1] == float("-inf")
            y = x.clone()
            jt.softmax_(x, scale=2.0)
            jt.softmax_(y, scale=-1.5)
            torch.cuda.synchronize()
            want0 = inf_pos.double() / inf_pos.sum()
            want1 = ninf_pos.double() / ninf_pos.sum()
            rtol = {torch.float32: 1e-6}.get(dtype, 1e-2)
            assert torch.allclose(x[0].double(), want0, rtol=rtol, atol=0), (dtype, n)
            assert torch.allclose(y[1].double(), want1, rtol=rtol, atol=0), (dtype, n)
    # a row with nothing to keep is zeros (torch.softmax would give NaN)
    x = torch.randn(3, 300, device="cuda")
    x[1] = float("-inf")
    ref = torch.softmax(x.double(), -1)
    ref[1] = 0
    jt.softmax_(x)
    softmax_check(x, ref, torch.float32)


def test_argument_errors_on_real_tensors():
    A = torch.randn(8, 64, device="cuda")
    with pytest.raises(TypeError, match="A must be float32, float16 or bfloat16"):
        jt.square_matmul_(A.double(), torch.randn(64, 64, device="cuda").double())
    with pytest.raises(ValueError, match="A must be contiguous"):
        jt.square_matmul_(A.t(), torch.randn(8, 8, device="cuda"))
    with pytest.raises(ValueError, match="W must be n x n"):
        jt.square_matmul_(A, torch.randn(64, 32, device="cuda"))
    with pytest.raises(ValueError, match="A must be a CUDA tensor"):
        jt.square_matmul_(A.cpu(), torch.randn(64, 64))
    with pytest.raises(TypeError, match="W must be torch.float32 like A"):
        jt.square_matmul_(A, torch.randn(64, 64, device="cuda").half())
    sq = torch.randn(64, 64, device="cuda")
    with pytest.raises(ValueError, match="w overlaps a"):
        jt.square_matmul_(sq, sq)
    with pytest.raises(ValueError, match="dim must be the last dimension"):
        jt.softmax_(A, dim=0)
    w = torch.randn(64, 64, device="cuda", requires_grad=True)
    with pytest.raises(RuntimeError, match="W requires grad"):
        jt.square_matmul_(A, w)
    before = A.clone()
    with torch.no_grad():
        jt.square_matmul_(A, w)
    assert (A.double() - before.double() @ w.detach().double()).abs().max() < 1e-4
    # autograd sees the write: a graph that saved A refuses to backward
    a = torch.randn(8, 64, device="cuda", requires_grad=True)
    h = a * 2
    y = (h * h).sum()  # saves h
    with torch.no_grad():
        jt.softmax_(h)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.backward()
