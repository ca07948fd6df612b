"""The LLTM of PyTorch's C++/CUDA extension tutorial, written with jitop.

The tutorial builds lltm_cuda.cpp + lltm_cuda_kernel.cu with
torch.utils.cpp_extension.load (about a minute of nvcc, then a warm load per
process); with jitop the same cell is the shipped kernels/lltm.cu, compiled
by NVRTC on first use and cached:

    PYTHONPATH=build/python/cpython-312 python3 examples/python/lltm.py
"""
import torch

import jitop.torch as jt

rnn = jt.LLTM(input_features=32, state_size=128).cuda()      # the tutorial's LLTM
X = torch.randn(16, 32, device="cuda")
h = torch.randn(16, 128, device="cuda")
C = torch.randn(16, 128, device="cuda")

new_h, new_C = rnn(X, (h, C))                                # forward: one launch
(new_h.sum() + new_C.sum()).backward()                      # backward: autograd
print("new_h", tuple(new_h.shape), "weights.grad norm %.4f" % rnn.weights.grad.norm())

# The same step from your own kernel file, hot-reloaded while you edit it:
#   mod = jitop.load("lltm", ["my_lltm.cu"]); mod.watch()
#   mod.lltm_forward(blocks, threads, X, W, b, h, C, new_h, new_C)
