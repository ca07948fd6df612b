#!/usr/bin/env python3
"""LayerNorm's cost per call against rows: time(M) = a + b M, fitted over
M = 128 ... 4096 rows (up to 256M elements) for jitop's forward and
backward (affine, dgamma and dbeta) and for tensor.copy_ of the same bytes
(the forward's; 1.5x them for the backward's three tensors). a is what a
call costs beyond its rows (launch, pipeline fill and drain, the dgamma/
dbeta partial rows and their reduction, a persistent grid's last pass), b's
ratio to the copy's the steady-state fraction of copy bandwidth. Each point:
the median of 9 batches of 10 back-to-back calls between CUDA events, each
batch queued behind a busy-wait.

    python3 bench/layernorm_fixed.py [build/libjitop.so] f16:65536 f32:49152 ...

JITOP_VERBOSE=1 also prints each instance's plan and, for cluster
kernels, how many clusters the persistent grid holds at once.
(bench/layernorm_NOTES.md, run 14.)
"""
import ctypes
import os
import statistics as st
import sys

import torch

args = sys.argv[1:]
lib_path = args.pop(0) if args and args[0].endswith(".so") else os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "build", "libjitop.so")
lib = ctypes.CDLL(lib_path)
vp, i64, f32 = ctypes.c_void_p, ctypes.c_int64, ctypes.c_float
lib.jitop_ctx_create.argtypes = [vp, ctypes.POINTER(vp)]
lib.jitop_errmsg.restype = ctypes.c_char_p
lib.jitop_errmsg.argtypes = [vp]
lib.jitop_layernorm_forward.argtypes = [vp, ctypes.c_int, i64, i64, f32, vp, vp, vp, vp, vp, vp, vp]
lib.jitop_layernorm_backward.argtypes = [vp, ctypes.c_int, i64, i64, vp, vp, vp, vp, vp, vp, vp,
                                         vp, vp]
DT = {"f32": (torch.float32, 0), "f16": (torch.float16, 1), "bf16": (torch.bfloat16, 2)}


def checked(what, rc):
    if rc != 0:
        raise RuntimeError(f"{what}: {lib.jitop_errmsg(None).decode()}")


def timeit(fn, per=10, batches=9):
    """Median over batches of the mean of `per` back-to-back calls, in us."""
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    fn()
    torch.cuda.synchronize()
    out = []
    for _ in range(batches):
        torch.cuda._sleep(1 << 22)  # the calls queue behind it: the events time the GPU
        s.record()
        for _ in range(per):
            fn()
        e.record()
        e.synchronize()
        out.append(s.elapsed_time(e) / per * 1000)
    return st.median(out)


def fit(ms, ts):
    """Least squares t = a + b m: (a, b)."""
    mx, my = st.mean(ms), st.mean(ts)
    b = sum((m - mx) * (t - my) for m, t in zip(ms, ts)) / sum((m - mx) ** 2 for m in ms)
    return my - b * mx, b


def main():
    ctx = vp()
    checked("jitop_ctx_create", lib.jitop_ctx_create(None, ctypes.byref(ctx)))
    for spec in args:
        dn, n = spec.split(":")
        n = int(n)
        dt, code = DT[dn]
        rows = [r for r in (128, 256, 512, 1024, 2048, 4096) if r * n <= (1 << 28)]
        res = {"fwd": [], "bwd": [], "copy": [], "copy3": []}
        for m in rows:
            x = torch.randn(m, n, device="cuda", dtype=dt)
            y = torch.empty_like(x)
            g = torch.randn(n, device="cuda", dtype=dt)
            b = torch.randn(n, device="cuda", dtype=dt)
            mean = torch.empty(m, device="cuda")
            rstd = torch.empty(m, device="cuda")
            dy = torch.randn_like(x)
            dx = torch.empty_like(x)
            dg = torch.empty_like(g)
            db = torch.empty_like(g)
            P = lambda t: t.data_ptr()  # noqa: E731
            sp = lambda: torch.cuda.current_stream().cuda_stream  # noqa: E731

            def fwd():
                checked("jitop_layernorm_forward", lib.jitop_layernorm_forward(
                    ctx, code, m, n, 1e-5, P(x), P(g), P(b), P(y), P(mean), P(rstd), sp()))

            def bwd():
                checked("jitop_layernorm_backward", lib.jitop_layernorm_backward(
                    ctx, code, m, n, P(dy), P(x), P(g), P(mean), P(rstd), P(dx), P(dg), P(db),
                    sp()))

            fwd()
            bwd()
            res["fwd"].append(timeit(fwd))
            res["bwd"].append(timeit(bwd))
            res["copy"].append(timeit(lambda: y.copy_(x)))
            # the backward's three tensors' bytes (x, dy read, dx written)
            z = torch.empty(3 * m * n // 2 + 1, device="cuda", dtype=dt)
            w = torch.empty_like(z)
            res["copy3"].append(timeit(lambda: w.copy_(z)))
            del x, y, dy, dx, z, w
        line = [f"{spec}: rows {rows}"]
        for k in ("fwd", "copy", "bwd", "copy3"):
            a, b = fit(rows, res[k])
            res[k + "_fit"] = (a, b)
            line.append(f"{k} us {[round(v, 1) for v in res[k]]} fixed {a:.1f} us/row {b * 1000:.1f} ns")
        for k, c in (("fwd", "copy"), ("bwd", "copy3")):
            line.append(f"{k}: steady {100 * res[c + '_fit'][1] / res[k + '_fit'][1]:.1f}% of copy, "
                        f"at {rows[-1]} rows {100 * res[c][-1] / res[k][-1]:.1f}%, "
                        f"fixed {res[k + '_fit'][0] - res[c + '_fit'][0]:+.1f} us over copy")
        print("\n  ".join(line), flush=True)


if __name__ == "__main__":
    main()
