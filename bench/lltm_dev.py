#!/usr/bin/env python3
"""Kernel development for kernels/lltm.cu without the C library: compiles the
file with CuPy's RawModule on the device, checks every variant against float64
torch autograd, and times the variants next to the tutorial extension, the
cuBLAS path (cuBLAS through CuPy plus lltm.cu's elementwise kernels) and plain
PyTorch. One device call answers which variant to ship at each size.

    PYTHONUNBUFFERED=1 python3 bench/lltm_dev.py [--out DIR] [--no-ext]

stdout: one JSON object per figure (bench convention), then a short table.
"""
import argparse
import json
import os
import statistics
import sys
import time
import traceback

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SIZES = {"tiny": (16, 32, 128), "medium": (64, 256, 1024), "large": (256, 1024, 4096)}


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def emit(**kw):
    print(json.dumps(kw), flush=True)


def time_calls(fn, sync, n, reps):
    """Per-call host time in us: sync, n calls, sync; median over reps loops."""
    fn()
    sync()
    per = []
    for _ in range(reps):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        sync()
        per.append((time.perf_counter() - t0) / n * 1e6)
    per.sort()
    return {"median": statistics.median(per), "p10": per[len(per) // 10],
            "p90": per[(len(per) * 9) // 10], "n": n * reps}


class Jit:
    """lltm.cu's kernels through CuPy, with the dispatch lltm.c implements."""

    def __init__(self, cp, prefetch):
        self.cp = cp
        src = open(os.path.join(ROOT, "kernels", "lltm.cu")).read()
        self.names = sorted({n for pair in ALL_VARIANTS for n in pair if n != "cublas"} | {
            "lltm_bwd_gates<float,false>", "lltm_bwd_gates<float,true>",
            "lltm_bwd_gates<double,false>", "lltm_bwd_gates<double,true>",
            "lltm_fwd_pointwise<float>", "lltm_fwd_pointwise<double>",
            "lltm_copy_x<float>", "lltm_copy_x<double>"})
        t0 = time.perf_counter()
        self.mod = cp.RawModule(code=src, options=("-std=c++17", "--gpu-architecture=sm_90",
                                                   "-DLLTM_PREFETCH=%d" % prefetch),
                                name_expressions=self.names)
        self.k = {n: self.mod.get_function(n) for n in self.names}
        log("compiled lltm.cu (prefetch=%d) in %.0f ms" % (prefetch, (time.perf_counter() - t0) * 1e3))
        for n in self.names:
            f = self.k[n]
            log("  %-48s regs %3d  local %d" % (n, f.num_regs, f.local_size_bytes))

    @staticmethod
    def parse(name):
        inner = name[name.index("<") + 1:-1].split(",")
        return inner

    def fwd_launch(self, name, B, I, S, ptrs, stream):
        p = self.parse(name)
        BM, BN, TM, TN, KS = int(p[1]), int(p[2]), int(p[4]), int(p[5]), int(p[6])
        nt = (BM // TM) * (BN // TN) * KS
        grid = ((S + BN - 1) // BN, (B + BM - 1) // BM)
        self.k[name](grid, (nt,), tuple(ptrs) + (np.int32(B), np.int32(I), np.int32(S)),
                     stream=stream)

    def bwd_launch(self, name, B, I, S, ptrs, stream):
        p = self.parse(name)
        BM1, BN1, TM1, TN1, KS1, BM2, BN2 = (int(x) for x in p[3:10])
        nt = (BM1 // TM1) * (BN1 // TN1) * KS1
        K = S + I
        ndx = ((K + BN1 - 1) // BN1) * ((B + BM1 - 1) // BM1)
        ndw = ((K + 1 + BN2 - 1) // BN2) * ((3 * S + BM2 - 1) // BM2)
        self.k[name]((ndx + ndw,), (nt,), tuple(ptrs) + (np.int32(B), np.int32(I), np.int32(S)),
                     stream=stream)

    def gates_launch(self, T, bias, B, I, S, ptrs, stream):
        self.k["lltm_bwd_gates<%s,%s>" % (T, "true" if bias else "false")](
            ((S + 7) // 8,), (8, 32), tuple(ptrs) + (np.int32(B), np.int32(I), np.int32(S)),
            stream=stream)


# (forward, backward) pairs; the first of each list is what src/ops/lltm.c ships.
VARIANTS = {
    ("float", "small"): [
        ("lltm_fwd<float,8,4,16,1,1,16,true>", "lltm_bwd<float,true,16,8,4,1,1,24,32,32,2,2,3>"),
        ("lltm_fwd<float,8,4,32,1,1,8,true>", "lltm_bwd<float,true,32,8,4,1,1,16,32,32,2,1,1>"),
        ("lltm_fwd<float,16,8,32,2,1,4,true>", "lltm_bwd<float,true,32,16,32,2,2,4,32,32,2,1,1>"),
        ("lltm_fwd<float,16,8,16,2,1,1,true>", "lltm_bwd<float,true,16,16,32,2,2,1,32,32,2,4,1>"),
        ("lltm_fwd<float,16,8,16,2,1,4,true>", "lltm_bwd<float,true,32,16,32,2,2,2,32,32,2,2,1>"),
        ("lltm_fwd<float,16,8,32,2,1,4,true>", "lltm_bwd<float,false,16,32,64,4,4,1,64,64,8,4,1>"),
        ("cublas", "cublas")],
    ("float", "large"): [
        ("cublas", "cublas"),
        ("lltm_fwd<float,32,32,16,4,2,1,true>", "lltm_bwd<float,false,16,32,64,4,4,1,64,64,8,4,1>")],
    ("double", "small"): [
        ("lltm_fwd<double,16,8,16,2,1,4,true>", "lltm_bwd<double,true,16,16,32,2,2,2,32,32,2,2,1>"),
        ("lltm_fwd<double,16,8,16,2,1,4,true>", "lltm_bwd<double,false,16,16,32,2,2,1,32,32,2,4,1>"),
        ("cublas", "cublas")],
}
VARIANTS[("double", "large")] = VARIANTS[("double", "small")]
ALL_VARIANTS = [p for v in VARIANTS.values() for p in v]


def saved_elems(B, I, S):
    return B * (7 * S + S + I)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("JITOP_BENCH_OUT", "bench/out"))
    ap.add_argument("--no-ext", action="store_true")
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    import torch
    import cupy as cp
    from cupy_backends.cuda.libs import cublas

    torch.backends.cuda.matmul.allow_tf32 = False
    dev = torch.device("cuda")
    tstream = torch.cuda.current_stream()
    cstream = cp.cuda.ExternalStream(tstream.cuda_stream)
    sync = torch.cuda.synchronize
    results = []

    def rec(size, system, what, st, unit="us"):
        d = dict(area="kernel", kernel="lltm", system=system, what="%s %s" % (size, what),
                 unit=unit, **st)
        emit(**d)
        results.append(d)

    jits = {}
    for pf in (1,):
        try:
            jits[pf] = Jit(cp, pf)
        except Exception:
            log(traceback.format_exc())

    ext = None
    if not args.no_ext:
        try:
            from torch.utils.cpp_extension import load
            os.environ.setdefault("TORCH_EXTENSIONS_DIR", "/tmp/lltm_ext_build")
            t0 = time.perf_counter()
            ext = load(name="lltm_ext", sources=[os.path.join(ROOT, "bench/lltm_ext/lltm_cuda.cpp"),
                                                 os.path.join(ROOT, "bench/lltm_ext/lltm_cuda_kernel.cu")],
                       extra_cuda_cflags=["-O3"], verbose=False)
            build_s = time.perf_counter() - t0
            log("extension built in %.1f s" % build_s)
            emit(area="cold", kernel="lltm", system="torch-load", what="cpp_extension.load of the LLTM extension, cold",
                 unit="s", median=build_s, p10=build_s, p90=build_s, n=1)
        except Exception:
            log(traceback.format_exc())

    handle = cp.cuda.device.get_cublas_handle()
    cublas.setStream(handle, tstream.cuda_stream)
    cublas.setPointerMode(handle, 0)
    try:
        cublas.setMathMode(handle, 0)
    except Exception:
        log("setMathMode failed (ignored)")
    one32, zero32 = np.ones(1, np.float32), np.zeros(1, np.float32)
    one64, zero64 = np.ones(1, np.float64), np.zeros(1, np.float64)

    def gemm(T, ta, tb, m, n, k, A, lda, Bm, ldb, C, ldc, beta=0):
        if T == "float":
            f, one, zb = cublas.sgemm, one32, (one32 if beta else zero32)
        else:
            f, one, zb = cublas.dgemm, one64, (one64 if beta else zero64)
        f(handle, ta, tb, m, n, k, one.ctypes.data, A, lda, Bm, ldb, zb.ctypes.data, C, ldc)

    def make_inputs(B, I, S, tdt):
        g = torch.Generator(device="cuda")
        g.manual_seed(int(time.time_ns() % (1 << 31)))
        r = lambda *shape, sc=1.0: (torch.rand(*shape, device=dev, generator=g, dtype=torch.float64) * 2 - 1) * sc
        K = S + I
        d = dict(input=r(B, I), weights=r(3 * S, K, sc=1.0 / np.sqrt(K) * 2), bias=r(3 * S, sc=0.5),
                 old_h=r(B, S), old_cell=r(B, S), grad_h=r(B, S), grad_cell=r(B, S))
        return {k: v.to(tdt).contiguous() for k, v in d.items()}, d

    def reference(d64):
        x = {k: v.clone().requires_grad_(k in ("input", "weights", "bias", "old_h", "old_cell"))
             for k, v in d64.items()}
        X = torch.cat([x["old_h"], x["input"]], 1)
        gates = torch.addmm(x["bias"], X, x["weights"].t())
        S = x["old_cell"].shape[1]
        ig, og, cc = torch.sigmoid(gates[:, :S]), torch.sigmoid(gates[:, S:2 * S]), torch.nn.functional.elu(gates[:, 2 * S:])
        nc = x["old_cell"] + cc * ig
        nh = torch.tanh(nc) * og
        grads = torch.autograd.grad([nh, nc], [x["old_h"], x["input"], x["weights"], x["bias"], x["old_cell"]],
                                    [x["grad_h"], x["grad_cell"]])
        return dict(new_h=nh.detach(), new_cell=nc.detach(), d_old_h=grads[0], d_input=grads[1],
                    d_weights=grads[2], d_bias=grads[3], d_old_cell=grads[4])

    def rel(a, b):
        a = a.double()
        if torch.isnan(a).any():
            return float("inf")
        return (torch.linalg.norm(a - b) / torch.linalg.norm(b)).item()

    class Run:
        """One configured jitop-like path with its buffers."""

        def __init__(self, jit, T, B, I, S, d, fwd, bwd):
            self.jit, self.T, self.B, self.I, self.S, self.d = jit, T, B, I, S, d
            self.fwd, self.bwd = fwd, bwd
            tdt = d["input"].dtype
            K = S + I
            mk = lambda *s: torch.full(s, float("nan"), device=dev, dtype=tdt)
            self.o = dict(new_h=mk(B, S), new_cell=mk(B, S), d_old_h=mk(B, S), d_input=mk(B, I),
                          d_weights=mk(3 * S, K), d_bias=mk(3 * S), d_old_cell=mk(B, S))
            self.saved = mk(saved_elems(B, I, S))
            self.K = K

        def p(self, name):
            return self.d[name].data_ptr() if name in self.d else self.o[name].data_ptr()

        def forward(self):
            B, I, S, K, T = self.B, self.I, self.S, self.K, self.T
            sv = self.saved.data_ptr()
            es = self.saved.element_size()
            if self.fwd == "cublas":
                self.jit.k["lltm_copy_x<%s>" % T](((B * K + 255) // 256,), (256,),
                                                  (self.p("input"), self.p("old_h"), sv, np.int32(B), np.int32(I), np.int32(S)),
                                                  stream=cstream)
                gemm(T, 1, 0, 3 * S, B, K, self.p("weights"), K, sv + 4 * B * S * es, K, sv, 4 * S)
                n = B * S
                self.jit.k["lltm_fwd_pointwise<%s>" % T](((n + 255) // 256,), (256,),
                                                         (self.p("bias"), self.p("old_cell"), self.p("new_h"), self.p("new_cell"), sv,
                                                          np.int32(B), np.int32(S)), stream=cstream)
            else:
                self.jit.fwd_launch(self.fwd, B, I, S,
                                    [self.p(n) for n in ("input", "weights", "bias", "old_h", "old_cell", "new_h", "new_cell")] + [sv],
                                    cstream)

        def backward(self):
            B, I, S, K, T = self.B, self.I, self.S, self.K, self.T
            sv = self.saved.data_ptr()
            es = self.saved.element_size()
            G = sv + (4 * B * S + B * K) * es
            X = sv + 4 * B * S * es
            if self.bwd == "cublas":
                self.jit.gates_launch(T, True, B, I, S, [self.p("grad_h"), self.p("grad_cell"), sv,
                                                         self.p("d_old_cell"), self.p("d_bias")], cstream)
                gemm(T, 0, 0, S, B, 3 * S, self.p("weights"), K, G, 3 * S, self.p("d_old_h"), S)
                gemm(T, 0, 0, I, B, 3 * S, self.p("weights") + S * es, K, G, 3 * S, self.p("d_input"), I)
                gemm(T, 0, 1, K, 3 * S, B, X, K, G, 3 * S, self.p("d_weights"), K)
            else:
                if "false" in self.bwd.split(",")[1]:
                    self.jit.gates_launch(T, False, B, I, S, [self.p("grad_h"), self.p("grad_cell"), sv,
                                                              self.p("d_old_cell"), self.p("d_bias")], cstream)
                self.jit.bwd_launch(self.bwd, B, I, S,
                                    [self.p("grad_h"), self.p("grad_cell"), sv, self.p("weights")] +
                                    [self.p(n) for n in ("d_old_h", "d_input", "d_weights", "d_bias", "d_old_cell")],
                                    cstream)

        def check(self, ref):
            self.forward()
            self.backward()
            sync()
            return {k: rel(self.o[k], ref[k]) for k in self.o}

    def variants(T, size):
        return VARIANTS[(T, "large" if size == "large" else "small")]

    mode_n = 20 if args.quick else 200
    table = []
    # correctness: odd sizes and the three named ones, both types
    checks = [(1, 1, 1), (3, 5, 7), (17, 33, 65), (16, 32, 128), (64, 256, 1024), (256, 1024, 4096)]
    for pf, jit in jits.items():
        for (B, I, S) in checks:
            for T, tdt in (("float", torch.float32), ("double", torch.float64)):
                if T == "double" and B * S > 64 * 1024:
                    continue
                d, d64 = make_inputs(B, I, S, tdt)
                ref = reference(d64)
                for fv, bv in variants(T, "large" if B * S >= 256 * 4096 else "x"):
                    try:
                        r = Run(jit, T, B, I, S, d, fv, bv)
                        errs = r.check(ref)
                        worst = max(errs.values())
                        ok = worst < (2e-4 if T == "float" else 1e-10)
                        log("check pf=%d %-6s B=%d I=%d S=%d %-40s %-48s worst %.2e %s %s" % (
                            pf, T, B, I, S, fv, bv, worst, "OK" if ok else "FAIL",
                            "" if ok else json.dumps({k: "%.1e" % v for k, v in errs.items()})))
                        emit(area="check", kernel="lltm", system="jitop-cupy", what="pf%d %s %dx%dx%d %s %s" % (pf, T, B, I, S, fv, bv),
                             worst_rel=worst, ok=ok, errs=errs)
                    except Exception:
                        log(traceback.format_exc())
                del d, d64, ref

    # timing
    for size, (B, I, S) in SIZES.items():
        d, d64 = make_inputs(B, I, S, torch.float32)
        n = mode_n if size != "large" else max(5, mode_n // 10)
        reps = 11
        for pf, jit in jits.items():
            for fv, bv in variants("float", size):
                try:
                    r = Run(jit, "float", B, I, S, d, fv, bv)
                    tf = time_calls(r.forward, sync, n, reps)
                    tb = time_calls(r.backward, sync, n, reps)
                    tfb = time_calls(lambda: (r.forward(), r.backward()), sync, n, reps)
                    tag = "pf%d %s | %s" % (pf, fv, bv)
                    rec(size, "jitop-cupy", "fwd " + tag, tf)
                    rec(size, "jitop-cupy", "bwd " + tag, tb)
                    rec(size, "jitop-cupy", "fwd+bwd " + tag, tfb)
                    table.append((size, "cupy " + tag, tf["median"], tb["median"], tfb["median"]))
                except Exception:
                    log(traceback.format_exc())
        # the extension
        if ext is not None:
            try:
                outs = ext.forward(d["input"], d["weights"], d["bias"], d["old_h"], d["old_cell"])
                fw = lambda: ext.forward(d["input"], d["weights"], d["bias"], d["old_h"], d["old_cell"])
                bw = lambda: ext.backward(d["grad_h"], d["grad_cell"], outs[1], outs[2], outs[3], outs[4], outs[5], outs[6], d["weights"])

                def fb():
                    o = fw()
                    ext.backward(d["grad_h"], d["grad_cell"], o[1], o[2], o[3], o[4], o[5], o[6], d["weights"])
                tf, tb, tfb = (time_calls(f, sync, n, reps) for f in (fw, bw, fb))
                for w, t in (("fwd", tf), ("bwd", tb), ("fwd+bwd", tfb)):
                    rec(size, "torch-load", w + " extension", t)
                table.append((size, "torch extension", tf["median"], tb["median"], tfb["median"]))
            except Exception:
                log(traceback.format_exc())
        # plain pytorch autograd
        try:
            xs = {k: v.clone().requires_grad_(k in ("input", "weights", "bias", "old_h", "old_cell")) for k, v in d.items()}

            def pf_():
                X = torch.cat([xs["old_h"], xs["input"]], 1)
                gates = torch.addmm(xs["bias"], X, xs["weights"].t())
                ig, og, g2 = gates.chunk(3, dim=1)
                nc = xs["old_cell"] + torch.nn.functional.elu(g2) * torch.sigmoid(ig)
                return torch.tanh(nc) * torch.sigmoid(og), nc
            outs = pf_()
            ins = [xs[k] for k in ("old_h", "input", "weights", "bias", "old_cell")]
            bw = lambda: torch.autograd.grad(list(outs), ins, [d["grad_h"], d["grad_cell"]], retain_graph=True)
            fb = lambda: torch.autograd.grad(list(pf_()), ins, [d["grad_h"], d["grad_cell"]])
            tf, tb, tfb = (time_calls(f, sync, n, reps) for f in (pf_, bw, fb))
            for w, t in (("fwd", tf), ("bwd", tb), ("fwd+bwd", tfb)):
                rec(size, "torch", w + " plain PyTorch autograd", t)
            table.append((size, "plain pytorch", tf["median"], tb["median"], tfb["median"]))
        except Exception:
            log(traceback.format_exc())
        # bare cuBLAS products at this size (the floor of the products)
        try:
            K = S + I
            x = torch.randn(B, K, device=dev)
            w = torch.randn(3 * S, K, device=dev)
            c = torch.empty(B, 3 * S, device=dev)
            t = time_calls(lambda: gemm("float", 1, 0, 3 * S, B, K, w.data_ptr(), K, x.data_ptr(), K, c.data_ptr(), 3 * S),
                           sync, n, reps)
            rec(size, "floor", "one cuBLAS sgemm B x 3S x K (host-timed)", t)
            table.append((size, "cublas sgemm X.W^T", t["median"], 0, 0))
        except Exception:
            log(traceback.format_exc())
        del d, d64

    with open(os.path.join(args.out, "lltm_dev.json"), "w") as f:
        json.dump(results, f, indent=1)
    log("\n%-8s %-92s %9s %9s %9s" % ("size", "system", "fwd us", "bwd us", "f+b us"))
    for row in table:
        log("%-8s %-92s %9.1f %9.1f %9.1f" % row)


if __name__ == "__main__":
    main()
