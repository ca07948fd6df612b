"""A kernel of your own from Python: load, launch with torch tensors (or
CuPy arrays, ints, NumPy scalars), and hot reload: run it, then edit
saxpy_kernel.cu (the scale line) and save; the next call runs the new code.

    PYTHONPATH=build/python/cpython-312 python3 examples/python/saxpy.py
"""
import os
import time

import torch

import jitop

here = os.path.dirname(os.path.abspath(__file__))
mod = jitop.load("saxpy", [os.path.join(here, "saxpy_kernel.cu")])
print([(op["name"], [p["size"] for p in op["params"]]) for op in mod.ops()])

n = 1 << 20
x = torch.ones(n, device="cuda")
y = torch.zeros(n, device="cuda")
mod.watch(lambda m, err: print("reloaded" if err is None else err))
for step in range(int(os.environ.get("STEPS", "5"))):
    y.zero_()
    mod.saxpy((n + 255) // 256, 256, n, 2.0, x, y)           # int -> int32, float -> float32
    torch.cuda.synchronize()
    print("generation", mod.generation, "y[0] =", y[0].item())
    time.sleep(1)
