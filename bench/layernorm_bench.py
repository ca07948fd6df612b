#!/usr/bin/env python3
"""LayerNorm: jitop (libjitop.so through ctypes) against
torch.nn.functional.layer_norm, side by side in one process, with a
device-to-device copy of the same bytes as the bandwidth ceiling.

    python3 bench/layernorm_bench.py [--out DIR] [--lib build/libjitop.so]

Shapes: N in {768, 1024, 4096, 8192, 32768} with M*N = 64M elements, for
float32, float16 and bfloat16. Bytes counted: forward x read + y written,
backward x and dy read + dx written (gamma, beta, their gradients and the
statistics are under 0.1% and left out). Each shape is first checked against
torch in float64; then each figure is the median over batches of the mean of
back-to-back calls between two CUDA events on torch's current stream (the
tensors, 256 MiB each for float32, are far larger than the 50 MiB L2, so no
rotation is needed). jitop's backward time includes its dgamma/dbeta
reduction kernel; torch's is aten.native_layer_norm_backward (the kernels
F.layer_norm's autograd runs, without the autograd bookkeeping).

stdout: one JSON object per figure (bench/README convention), then a table.
Writes DIR/layernorm_results.md and DIR/layernorm.png.
"""
import argparse
import ctypes
import json
import os
import sys


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def emit(**kw):
    print(json.dumps(kw), flush=True)


HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
PERF_N = [768, 1024, 4096, 8192, 32768]
TOTAL = 64 * 1024 * 1024
EPS = 1e-5


SHORT = {"float32": "f32", "float16": "f16", "bfloat16": "bf16"}


def write_chart(rows, device_name, path):
    """GB/s per shape for jitop and torch, with the copy ceiling. rows: dicts
    with dtype, N, copy, jt_fwd, torch_fwd, jt_bwd, torch_bwd."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, axes = plt.subplots(1, 2, figsize=(14, 5), sharey=True)
        labels = [f"{SHORT.get(r['dtype'], r['dtype'])}\nN={r['N']}" for r in rows]
        xs = range(len(rows))
        for ax, key, title in ((axes[0], "fwd", "forward"), (axes[1], "bwd", "backward")):
            ax.bar([i - 0.2 for i in xs], [r[f"jt_{key}"] for r in rows], 0.4, label="jitop")
            ax.bar([i + 0.2 for i in xs], [r[f"torch_{key}"] for r in rows], 0.4, label="torch")
            ax.plot(list(xs), [r["copy"] for r in rows], "k_", markersize=18, label="D2D copy")
            ax.set_xticks(list(xs))
            ax.set_xticklabels(labels, fontsize=7)
            ax.set_title(f"LayerNorm {title}, M*N = 64M ({device_name})")
            ax.set_ylabel("GB/s (bytes read + written)")
            ax.legend(loc="lower left")
        fig.tight_layout()
        fig.savefig(path, dpi=110)
    except Exception as ex:  # the table is the result; the chart is a view of it
        log("chart not written:", ex)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("JITOP_BENCH_OUT") or os.path.join(HERE, "out"))
    build = os.environ.get("JITOP_BUILD") or os.path.join(ROOT, "build")
    ap.add_argument("--lib", default=os.path.join(build, "libjitop.so"))
    args = ap.parse_args()
    mode = os.environ.get("JITOP_BENCH_MODE", "full")
    batches, per = {"full": (15, 10), "quick": (7, 5), "smoke": (3, 2)}.get(mode, (15, 10))

    try:
        import torch
        import torch.nn.functional as F
    except ImportError as ex:
        emit(area="kernel", kernel="layernorm", system="jitop-c", what="layernorm bench",
             status="skipped", reason=f"no torch: {ex}")
        return 0
    if not torch.cuda.is_available():
        emit(area="kernel", kernel="layernorm", system="jitop-c", what="layernorm bench",
             status="skipped", reason="no CUDA driver")
        return 0

    lib = ctypes.CDLL(args.lib)
    vp, i64, f32 = ctypes.c_void_p, ctypes.c_int64, ctypes.c_float
    lib.jitop_ctx_create.argtypes = [vp, ctypes.POINTER(vp)]
    lib.jitop_ctx_destroy.argtypes = [vp]
    lib.jitop_errmsg.restype = ctypes.c_char_p
    lib.jitop_errmsg.argtypes = [vp]
    lib.jitop_layernorm_forward.argtypes = [vp, ctypes.c_int, i64, i64, f32, vp, vp, vp, vp, vp, vp, vp]
    lib.jitop_layernorm_backward.argtypes = [vp, ctypes.c_int, i64, i64, vp, vp, vp, vp, vp, vp, vp, vp, vp]
    ctx = vp()
    rc = lib.jitop_ctx_create(None, ctypes.byref(ctx))
    if rc != 0:
        log("jitop_ctx_create failed:", lib.jitop_errmsg(None))
        return 1

    torch.cuda.init()
    dev = torch.cuda.get_device_properties(0)
    log(f"device {dev.name}, torch {torch.__version__}, lib {args.lib}, mode {mode}")
    DT = {torch.float32: 0, torch.float16: 1, torch.bfloat16: 2}
    NAME = {torch.float32: "float32", torch.float16: "float16", torch.bfloat16: "bfloat16"}
    P = lambda t: None if t is None else t.data_ptr()

    def stream():
        return torch.cuda.current_stream().cuda_stream

    def jt_fwd(x, g, b, y, mean, rstd):
        m, n = x.shape
        r = lib.jitop_layernorm_forward(ctx, DT[x.dtype], m, n, EPS, P(x), P(g), P(b), P(y),
                                        P(mean), P(rstd), stream())
        if r != 0:
            raise RuntimeError("jitop_layernorm_forward: " + lib.jitop_errmsg(None).decode())

    def jt_bwd(dy, x, g, mean, rstd, dx, dg, db):
        m, n = x.shape
        r = lib.jitop_layernorm_backward(ctx, DT[x.dtype], m, n, P(dy), P(x), P(g), P(mean), P(rstd),
                                         P(dx), P(dg), P(db), stream())
        if r != 0:
            raise RuntimeError("jitop_layernorm_backward: " + lib.jitop_errmsg(None).decode())

    def time_ms(fn):
        for _ in range(3):
            fn()
        torch.cuda.synchronize()
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        ts = []
        for _ in range(batches):
            s.record()
            for _ in range(per):
                fn()
            e.record()
            e.synchronize()
            ts.append(s.elapsed_time(e) / per)
        ts.sort()
        return ts[len(ts) // 2], ts[max(0, len(ts) // 10)], ts[min(len(ts) - 1, len(ts) * 9 // 10)]

    def rel(a, b):
        a = a.double()
        if not torch.isfinite(a).all():
            return float("inf")
        return ((a - b).norm() / b.norm()).item()

    rows, failed = [], 0
    tol = {torch.float32: 1e-4, torch.float16: 1e-2, torch.bfloat16: 1e-2}
    for dt in (torch.float32, torch.float16, torch.bfloat16):
        for n in PERF_N:
            m = TOTAL // n
            torch.manual_seed(n)
            x = (torch.randn(m, n, device="cuda") * 2 + 0.5).to(dt)
            dy = torch.randn(m, n, device="cuda").to(dt)
            g = (torch.rand(n, device="cuda") + 0.5).to(dt)
            b = torch.randn(n, device="cuda").to(dt)
            y = torch.full_like(x, float("nan"))
            dx = torch.full_like(x, float("nan"))
            dg = torch.full_like(g, float("nan"))
            db = torch.full_like(b, float("nan"))
            mean = torch.full((m,), float("nan"), device="cuda")
            rstd = torch.full((m,), float("nan"), device="cuda")
            es = x.element_size()
            label = f"{NAME[dt]} {m}x{n}"

            # correctness against torch in float64, before any timing
            jt_fwd(x, g, b, y, mean, rstd)
            jt_bwd(dy, x, g, mean, rstd, dx, dg, db)
            xr = x.double().requires_grad_(True)
            gr = g.double().requires_grad_(True)
            br = b.double().requires_grad_(True)
            ref = F.layer_norm(xr, (n,), gr, br, EPS)
            ref.backward(dy.double())
            errs = {"y": rel(y, ref.detach()), "dx": rel(dx, xr.grad), "dgamma": rel(dg, gr.grad),
                    "dbeta": rel(db, br.grad)}
            ok = all(v < tol[dt] for v in errs.values())
            log(f"{label}: rel errors vs float64 torch {errs} {'ok' if ok else 'FAILED'}")
            del xr, gr, br, ref
            if not ok:
                failed += 1
                emit(area="kernel", kernel="layernorm", system="jitop-c", what=f"forward {label}",
                     status="failed", reason=f"wrong result: {errs}")
                continue

            cp = time_ms(lambda: y.copy_(x))
            jf = time_ms(lambda: jt_fwd(x, g, b, y, mean, rstd))
            jb = time_ms(lambda: jt_bwd(dy, x, g, mean, rstd, dx, dg, db))
            tf = time_ms(lambda: F.layer_norm(x, (n,), g, b, EPS))
            _, tmean, trstd = torch.ops.aten.native_layer_norm(x, [n], g, b, EPS)
            tb = time_ms(lambda: torch.ops.aten.native_layer_norm_backward(
                dy, x, [n], tmean, trstd, g, b, [True, True, True]))
            gbs = lambda nbytes, t: nbytes / (t * 1e-3) / 1e9
            fb, bb = 2 * m * n * es, 3 * m * n * es
            row = {"dtype": NAME[dt], "M": m, "N": n, "copy": gbs(fb, cp[0]),
                   "jt_fwd": gbs(fb, jf[0]), "torch_fwd": gbs(fb, tf[0]),
                   "jt_bwd": gbs(bb, jb[0]), "torch_bwd": gbs(bb, tb[0]),
                   "jt_fwd_us": jf[0] * 1e3, "torch_fwd_us": tf[0] * 1e3,
                   "jt_bwd_us": jb[0] * 1e3, "torch_bwd_us": tb[0] * 1e3, "errs": errs}
            rows.append(row)
            n_rep = batches * per
            for sysname, what, t, nbytes in (("floor", "device-to-device copy (tensor.copy_)", cp, fb),
                                             ("jitop-c", "jitop_layernorm_forward", jf, fb),
                                             ("torch", "F.layer_norm forward", tf, fb),
                                             ("jitop-c", "jitop_layernorm_backward (dx, dgamma, dbeta)", jb, bb),
                                             ("torch", "aten.native_layer_norm_backward", tb, bb)):
                # GB/s: the median time gives the median rate; p10/p90 swap
                emit(area="kernel", kernel="layernorm", system=sysname, what=f"{what}, {label}",
                     unit="GB/s", median=gbs(nbytes, t[0]), p10=gbs(nbytes, t[2]), p90=gbs(nbytes, t[1]),
                     n=n_rep)
            log(f"{label}: copy {row['copy']:.0f} GB/s | fwd jitop {row['jt_fwd']:.0f} torch "
                f"{row['torch_fwd']:.0f} | bwd jitop {row['jt_bwd']:.0f} torch {row['torch_bwd']:.0f}")
            del x, dy, y, dx, tmean, trstd
            torch.cuda.empty_cache()
    lib.jitop_ctx_destroy(ctx)

    os.makedirs(args.out, exist_ok=True)
    head = ("| dtype | M x N | copy GB/s | fwd jitop GB/s | fwd torch GB/s | fwd jitop % of copy | "
            "fwd speedup | bwd jitop GB/s | bwd torch GB/s | bwd jitop % of copy | bwd speedup |")
    lines = [head, "|" + "---|" * 11]
    for r in rows:
        lines.append(f"| {r['dtype']} | {r['M']} x {r['N']} | {r['copy']:.0f} | {r['jt_fwd']:.0f} | "
                     f"{r['torch_fwd']:.0f} | {100 * r['jt_fwd'] / r['copy']:.0f}% | "
                     f"{r['jt_fwd'] / r['torch_fwd']:.2f}x | {r['jt_bwd']:.0f} | {r['torch_bwd']:.0f} | "
                     f"{100 * r['jt_bwd'] / r['copy']:.0f}% | {r['jt_bwd'] / r['torch_bwd']:.2f}x |")
    table = "\n".join(lines)
    print(table)
    with open(os.path.join(args.out, "layernorm_results.md"), "w") as fh:
        fh.write(f"# LayerNorm: jitop vs torch ({dev.name}, torch {torch.__version__})\n\n")
        fh.write("`python3 bench/layernorm_bench.py` (mode "
                 f"{mode}: median of {batches} batches of {per} back-to-back calls, CUDA events). "
                 "GB/s: forward x read + y written, backward x, dy read + dx written; "
                 "copy: tensor.copy_ of the forward's bytes, same run.\n\n")
        fh.write(table + "\n")
    write_chart(rows, dev.name, os.path.join(args.out, "layernorm.png"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
