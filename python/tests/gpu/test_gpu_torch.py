"""jitop.torch against PyTorch: layer_norm against F.layer_norm (values and
gradients against a float64 reference, gradcheck), LLTM against the
tutorial's Python LLTM in float64 and gradcheck in float64."""
import math
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("no CUDA device for torch", allow_module_level=True)

import torch.nn.functional as F  # noqa: E402

import jitop.torch as jt  # noqa: E402


def test_layer_norm_matches_float64_reference():
    torch.manual_seed(0)
    for shape, norm in (((64, 1024), (1024,)), ((4, 8, 96), (8, 96)), ((3, 1), (1,)),
                        ((5, 5000), (5000,))):
        x = torch.randn(shape, device="cuda", requires_grad=True)
        w = torch.randn(norm, device="cuda", requires_grad=True)
        b = torch.randn(norm, device="cuda", requires_grad=True)
        dy = torch.randn(shape, device="cuda")
        y = jt.layer_norm(x, norm, w, b, 1e-5)
        y.backward(dy)
        xd, wd, bd = (t.detach().double().requires_grad_() for t in (x, w, b))
        ref = F.layer_norm(xd, norm, wd, bd, 1e-5)
        ref.backward(dy.double())
        assert (y.double() - ref).abs().max() < 1e-4
        assert (x.grad.double() - xd.grad).abs().max() < 1e-3
        assert (w.grad.double() - wd.grad).abs().max() < 1e-3 * math.sqrt(x.numel())
        assert (b.grad.double() - bd.grad).abs().max() < 1e-3 * math.sqrt(x.numel())


def test_layer_norm_no_affine_and_half():
    x = torch.randn(32, 256, device="cuda")
    assert torch.allclose(jt.layer_norm(x, (256,)), F.layer_norm(x, (256,)), atol=1e-5)
    for dt in (torch.float16, torch.bfloat16):
        xh = x.to(dt)
        w = torch.randn(256, device="cuda", dtype=dt)
        b = torch.randn(256, device="cuda", dtype=dt)
        got = jt.layer_norm(xh, (256,), w, b).float()
        ref = F.layer_norm(xh.float(), (256,), w.float(), b.float())
        assert (got - ref).abs().max() < 5e-2
    with pytest.raises(TypeError, match="float64"):
        jt.layer_norm(x.double(), (256,))


def test_layer_norm_gradcheck():
    # The kernels compute in float32: gradcheck with float32 tolerances.
    torch.manual_seed(1)
    x = torch.randn(4, 16, device="cuda", requires_grad=True)
    w = torch.randn(16, device="cuda", requires_grad=True)
    b = torch.randn(16, device="cuda", requires_grad=True)
    assert torch.autograd.gradcheck(lambda x, w, b: jt.layer_norm(x, (16,), w, b),
                                    (x, w, b), eps=1e-2, atol=2e-2, rtol=2e-2)


def lltm_reference(input, weights, bias, old_h, old_cell):
    """The tutorial's Python LLTM (LLTM.forward in the tutorial)."""
    X = torch.cat([old_h, input], dim=1)
    gate_weights = F.linear(X, weights, bias)
    gates = gate_weights.chunk(3, dim=1)
    input_gate = torch.sigmoid(gates[0])
    output_gate = torch.sigmoid(gates[1])
    candidate_cell = F.elu(gates[2])
    new_cell = old_cell + candidate_cell * input_gate
    new_h = torch.tanh(new_cell) * output_gate
    return new_h, new_cell


def lltm_inputs(B, I, S, dtype):
    torch.manual_seed(2)
    kw = dict(device="cuda", dtype=dtype)
    ts = (torch.randn(B, I, **kw), torch.randn(3 * S, I + S, **kw) * 0.1,
          torch.randn(1, 3 * S, **kw), torch.randn(B, S, **kw), torch.randn(B, S, **kw))
    return tuple(t.requires_grad_() for t in ts)


def test_lltm_matches_tutorial_float64():
    for B, I, S in ((16, 32, 128), (3, 5, 7), (64, 256, 1024)):
        args = [t.detach().requires_grad_() for t in lltm_inputs(B, I, S, torch.float64)]
        ref_args = [t.detach().clone().requires_grad_() for t in args]
        h, c = jt.LLTMFunction.apply(*args)
        rh, rc = lltm_reference(*ref_args)
        gh, gc = torch.randn_like(h), torch.randn_like(c)
        (h * gh + c * gc).sum().backward()
        (rh * gh + rc * gc).sum().backward()
        assert torch.allclose(h, rh, atol=1e-10) and torch.allclose(c, rc, atol=1e-10)
        for a, r in zip(args, ref_args):
            assert torch.allclose(a.grad, r.grad, atol=1e-9), (B, I, S)


def test_lltm_gradcheck_float64():
    args = lltm_inputs(3, 4, 5, torch.float64)
    assert torch.autograd.gradcheck(jt.LLTMFunction.apply, args, eps=1e-6, atol=1e-6)


def test_lltm_module_float32():
    torch.manual_seed(3)
    rnn = jt.LLTM(32, 128).cuda()
    assert rnn.weights.shape == (384, 160) and rnn.bias.shape == (1, 384)
    x = torch.randn(16, 32, device="cuda")
    h = torch.randn(16, 128, device="cuda")
    c = torch.randn(16, 128, device="cuda")
    new_h, new_cell = rnn(x, (h, c))
    ref_h, ref_c = lltm_reference(x.double(), rnn.weights.double(), rnn.bias.double(),
                                  h.double(), c.double())
    assert (new_h.double() - ref_h).abs().max() < 1e-4
    (new_h.sum() + new_cell.sum()).backward()
    assert rnn.weights.grad is not None and rnn.bias.grad.shape == (1, 384)
