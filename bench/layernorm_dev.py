#!/usr/bin/env python3
"""Kernel development harness for kernels/layernorm.cu, independent of the C
library: compiles the .cu with CuPy's RawModule (NVRTC), checks every
instance it runs against a float64 torch reference, and times launch-shape
variants against torch.nn.functional.layer_norm and a device-to-device copy,
all in one process (one device call).

    python3 bench/layernorm_dev.py [--out DIR] [--quick]

Writes DIR/layernorm_dev.json (every figure) and prints a table last.
The launch-shape rule below is the one src/ops/layernorm.c implements for
rows of whole vectors (not its rows of any alignment).
"""
import argparse
import json
import math
import os
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F
import cupy as cp

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.join(HERE, "..", "kernels", "layernorm.cu")
CTYPE = {torch.float32: "float", torch.float16: "__half", torch.bfloat16: "__nv_bfloat16"}
DNAME = {torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16"}
TOL = {torch.float32: 1e-4, torch.float16: 1e-2, torch.bfloat16: 1e-2}
PERF_N = [768, 1024, 4096, 8192, 32768]
TOTAL = 64 * 1024 * 1024


def log(*a):
    print(*a, file=sys.stderr, flush=True)


# ----------------------------------------------------------------- shapes

def vec_for(n, esize, ptrs):
    v = 16 // esize
    while v > 1 and (n % v != 0 or any(p % (v * esize) for p in ptrs)):
        v //= 2
    return v


def threads_per_row(nvec, vec_bytes, max_bytes, rule="warps"):
    """The fewest threads holding the row at max_bytes each: a power of two up
    to a warp, whole warps above (rule "warps", the default of
    src/ops/layernorm.c), or a power of two throughout ("pow2")."""
    per = max(1, max_bytes // vec_bytes)
    need = (nvec + per - 1) // per
    if rule == "warps" and need > 32:
        return (need + 31) // 32 * 32
    tt = 1
    while tt < need:
        tt *= 2
    return tt


def shape_for(n, esize, vec, max_bytes, max_tpr, rule="warps"):
    """(TPR, CL) or None when the row needs the generic kernel."""
    tt = threads_per_row(n // vec, vec * esize, max_bytes, rule)
    if tt <= max_tpr:
        return tt, 1
    cl = 1
    while cl * max_tpr < tt:
        cl *= 2
    if cl > 8:
        return None
    return max_tpr, cl


def rows_per_block(tpr, cl):
    return 128 // tpr if (cl == 1 and tpr < 128) else 1


class Kern:
    def __init__(self, mod, name):
        self.name = name
        self.fn = mod.get_function(name)

    def __call__(self, grid, block, args):
        self.fn((grid,), (block,), args)


# per-SM limits of sm_90 used to size the persistent backward grid
def blocks_per_sm(fn, block, cl, dyn=0):
    regs = max(fn.num_regs, 1)
    smem = fn.shared_size_bytes + dyn
    per_warp = ((regs * 32 + 255) // 256) * 256
    warps_regs = (16384 // per_warp) * 4 if per_warp <= 16384 else 0
    wpb = (block + 31) // 32
    by_regs = warps_regs // wpb
    by_threads = 2048 // block
    by_smem = (228 * 1024) // (smem + 1024) if smem else 32
    return max(1, min(by_regs, by_threads, by_smem, 32))


class LN:
    def __init__(self, options=()):
        code = open(SRC).read()
        self.code = code
        self.options = tuple(["-std=c++17"] + list(options))
        self.names = []
        self.mod = None
        self.cache = {}

    def compile(self, names):
        self.names = sorted(set(names))
        t0 = time.time()
        self.mod = cp.RawModule(code=self.code, options=self.options, name_expressions=self.names)
        self.mod.compile()
        log(f"compiled {len(self.names)} instances with {self.options} in {time.time() - t0:.1f} s")

    def get(self, name):
        if name not in self.cache:
            self.cache[name] = self.mod.get_function(name)
        return self.cache[name]


def fwd_name(dt, n, affine, vec, tpr, cl):
    if tpr is None:
        return f"layernorm_fwd_generic<{CTYPE[dt]}, {str(affine).lower()}, {vec}>"
    if cl == 1:
        return f"layernorm_fwd<{CTYPE[dt]}, {n}, {str(affine).lower()}, {vec}, {tpr}>"
    return f"layernorm_fwd_cluster<{CTYPE[dt]}, {n}, {str(affine).lower()}, {vec}, {tpr}, {cl}>"


def bwd_name(dt, n, affine, vec, tpr, cl, sacc=True):
    if tpr is None:
        return f"layernorm_bwd_generic<{CTYPE[dt]}, {str(affine).lower()}, {vec}>"
    tail = "" if sacc else ", false"
    if cl == 1:
        return f"layernorm_bwd<{CTYPE[dt]}, {n}, {str(affine).lower()}, {vec}, {tpr}{tail}>"
    return f"layernorm_bwd_cluster<{CTYPE[dt]}, {n}, {str(affine).lower()}, {vec}, {tpr}, {cl}{tail}>"


def bwd_dyn_smem(n, esize, cfg, affine, sacc=True):
    vec, tpr, cl = cfg
    if tpr is None or not affine or not sacc:
        return 0
    block = tpr * rows_per_block(tpr, cl)
    tt = tpr * cl
    vpt = (n // vec + tt - 1) // tt
    return 2 * block * vpt * vec * 4


def reduce_block(p):
    """layernorm_bwd_reduce's block for p partial rows (src/ops/layernorm.c's
    ln_reduce_rows): 32 columns x about p / 16 threads each."""
    r = 1
    while r < 32 and r * 16 < p:
        r *= 2
    return 32 * r


def red_name(dt):
    return f"layernorm_bwd_reduce<{CTYPE[dt]}>"


P = lambda t: np.uint64(t.data_ptr()) if t is not None else np.uint64(0)


def run_fwd(ln, dt, m, n, cfg, x, g, b, y, mean, rstd, eps):
    vec, tpr, cl = cfg
    name = fwd_name(dt, n, g is not None or b is not None, vec, tpr, cl)
    fn = ln.get(name)
    if tpr is None:
        fn((m,), (512,), (P(x), P(g), P(b), P(y), P(mean), P(rstd), np.int64(m), np.int32(n), np.float32(eps)))
    else:
        rows = rows_per_block(tpr, cl)
        fn((((m + rows - 1) // rows) * cl,), (tpr * rows,),
           (P(x), P(g), P(b), P(y), P(mean), P(rstd), np.int64(m), np.float32(eps)))


def bwd_grid(ln, dt, m, n, cfg, affine, sacc=True):
    vec, tpr, cl = cfg
    fn = ln.get(bwd_name(dt, n, affine, vec, tpr, cl, sacc))
    es = torch.tensor([], dtype=dt).element_size()
    dyn = bwd_dyn_smem(n, es, cfg, affine, sacc)
    if tpr is None:
        block, rows = 512, 1
    else:
        rows = rows_per_block(tpr, cl)
        block = tpr * rows
    if dyn + fn.shared_size_bytes > 227 * 1024:
        raise ValueError(f"{dyn} bytes of dynamic shared memory: over the 227 KiB a block may have")
    if dyn + fn.shared_size_bytes > 48 * 1024 and fn.max_dynamic_shared_size_bytes < dyn:
        fn.max_dynamic_shared_size_bytes = dyn
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    groups = max(1, sms * blocks_per_sm(fn, block, cl or 1, dyn) // (cl or 1))
    groups = min(groups, (m + rows - 1) // rows)
    return fn, groups, block, dyn


def run_bwd(ln, dt, m, n, cfg, dy, x, g, mean, rstd, dx, dg, db, ws, affine, sacc=True):
    vec, tpr, cl = cfg
    fn, groups, block, dyn = bwd_grid(ln, dt, m, n, cfg, affine, sacc)
    if tpr is None:
        fn((groups,), (block,), (P(dy), P(x), P(g), P(mean), P(rstd), P(dx), P(ws), np.int64(m), np.int32(n)))
    else:
        fn((groups * cl,), (block,), (P(dy), P(x), P(g), P(mean), P(rstd), P(dx), P(ws), np.int64(m)),
           shared_mem=dyn)
    if affine:
        red = ln.get(red_name(dt))
        red(((n + 31) // 32, 2), (reduce_block(groups),), (P(ws), np.int64(groups), np.int32(n), P(dg), P(db)))
    return groups


def relerr(out, ref):
    out = out.double()
    if not torch.isfinite(out).all():
        return float("inf")
    den = ref.norm().item()
    return (out - ref).norm().item() / (den if den > 0 else 1.0)


# ---------------------------------------------------------- correctness

DEFAULT = dict(fwd_bytes=128, bwd_bytes=32, fwd_tpr=1024, bwd_tpr=1024)


def pick(n, esize, ptrs, bytes_, max_tpr, force_generic=False):
    vec = vec_for(n, esize, ptrs)
    if bytes_ == DEFAULT["bwd_bytes"] and esize == 4 and n * esize > 65536:
        bytes_ = 64  # src/ops/layernorm.c: long float32 rows
    s = None if force_generic else shape_for(n, esize, vec, bytes_, max_tpr)
    return (vec, None, None) if s is None else (vec, s[0], s[1])


def correctness_cases(quick):
    ns = [1, 7, 32, 33, 768, 1000, 1024, 4096, 8192, 12288, 32768, 65536]
    cases = []
    for dt in (torch.float32, torch.float16, torch.bfloat16):
        for n in ns:
            ms = [1, 3, 1030] if n <= 8192 else [1, 3, 64]
            for m in ms:
                for affine in (True, False):
                    for mode in ("plain", "inplace", "unaligned", "generic"):
                        if mode != "plain" and m != 3:
                            continue
                        cases.append((dt, n, m, affine, mode))
    cases.append((torch.float32, 300007, 2, True, "plain"))  # beyond the specialized kernels
    cases.append((torch.bfloat16, 131072, 3, True, "plain"))
    return cases


def case_names(case, cfgs):
    dt, n, m, affine, mode = case
    es = torch.tensor([], dtype=dt).element_size()
    ptrs = [es] if mode == "unaligned" else [0]
    f = pick(n, es, ptrs, cfgs["fwd_bytes"], cfgs["fwd_tpr"], mode == "generic")
    b = pick(n, es, ptrs, cfgs["bwd_bytes"], cfgs["bwd_tpr"], mode == "generic")
    return f, b


def check_case(ln, case, cfgs, eps=1e-5):
    dt, n, m, affine, mode = case
    f, b = case_names(case, cfgs)
    off = 1 if mode == "unaligned" else 0
    dev = "cuda"
    gen = torch.Generator(device=dev)
    gen.manual_seed(hash(case) & 0xffffffff)

    def buf(rows, cols, fill=None):
        t = torch.empty(rows * cols + off, dtype=dt, device=dev)
        if fill is None:
            t.normal_(generator=gen)
        else:
            t.fill_(fill)
        return t[off:].view(rows, cols)

    x = buf(m, n)
    x.mul_(2.0).add_(0.5)  # non-zero mean, non-unit variance
    g = buf(1, n).view(n) if affine else None
    bb = buf(1, n).view(n) if affine else None
    if affine:
        g.mul_(0.5).add_(1.0)
    y = x if mode == "inplace" else buf(m, n, float("nan"))
    mean = torch.full((m,), float("nan"), device=dev)
    rstd = torch.full((m,), float("nan"), device=dev)
    x64 = x.double().clone()
    run_fwd(ln, dt, m, n, f, x, g, bb, y, mean, rstd, eps)
    ref = F.layer_norm(x64, (n,), g.double() if affine else None, bb.double() if affine else None, eps)
    mu64 = x64.mean(-1)
    rs64 = 1.0 / torch.sqrt(x64.var(-1, unbiased=False) + eps)
    res = {"fwd": relerr(y, ref), "mean": relerr(mean, mu64), "rstd": relerr(rstd, rs64)}
    # backward, from the saved float32 statistics of a fresh x
    x = buf(m, n)
    x.mul_(2.0).add_(0.5)
    x64 = x.double().clone()
    mean32 = x64.mean(-1).float()
    rstd32 = (1.0 / torch.sqrt(x64.var(-1, unbiased=False) + eps)).float()
    dy = buf(m, n)
    dy64 = dy.double().clone()
    dx = dy if mode == "inplace" else buf(m, n, float("nan"))
    dg = torch.full((n,), float("nan"), dtype=dt, device=dev) if affine else None
    db = torch.full((n,), float("nan"), dtype=dt, device=dev) if affine else None
    vec, tpr, cl = b
    _, groups, _, _ = bwd_grid(ln, dt, m, n, b, affine)
    ws = torch.full((max(1, groups) * 2 * n,), float("nan"), device=dev) if affine else None
    run_bwd(ln, dt, m, n, b, dy, x, g, mean32, rstd32, dx, dg, db, ws, affine)
    xr = x64.clone().requires_grad_(True)
    g64 = g.double().clone().requires_grad_(True) if affine else None
    b64 = bb.double().clone().requires_grad_(True) if affine else None
    out = F.layer_norm(xr, (n,), g64, b64, eps)
    out.backward(dy64)
    res["dx"] = relerr(dx, xr.grad)
    if n == 1:  # the exact dx is 0: measure against the size of the terms that cancel
        term = (dy64 * (g.double() if affine else 1.0) * rstd32.double().view(-1, 1))
        res["dx"] = (dx.double() - xr.grad).norm().item() / term.norm().item()
    if affine:
        res["dgamma"] = relerr(dg, g64.grad)
        res["dbeta"] = relerr(db, b64.grad)
    tol = TOL[dt]
    ok = all(v < tol for v in res.values())
    return ok, res, (f, b)


# ----------------------------------------------------------------- timing

def time_it(fn, batches=10, per=10, warm=3):
    """Median over batches of the mean time of `per` back-to-back calls
    between two events: the host queues ahead of the device, so its launch
    cost stays out of the figure (kernels here run for 50 us and more)."""
    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    ts = []
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for _ in range(batches):
        s.record()
        for _ in range(per):
            fn()
        e.record()
        e.synchronize()
        ts.append(s.elapsed_time(e) / per)
    ts.sort()
    return ts[len(ts) // 2]


def variants(n, esize, kind):
    """Distinct launch shapes over the rule's knobs: ((TPR, CL), max_bytes,
    max_tpr, sacc)."""
    out, seen = [], set()
    if kind == "fwd":
        knobs = [(mb, mt, True) for mb in (64, 128) for mt in (512, 1024)]
    else:
        knobs = [(mb, mt, True) for mb in (16, 32, 64) for mt in (512, 1024)]
    for mb, mt, sa in knobs:
        s = shape_for(n, esize, 16 // esize, mb, mt)
        if s is not None and (s, sa) not in seen:
            seen.add((s, sa))
            out.append((s, mb, mt, sa))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(HERE, "out"))
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    torch.manual_seed(0)
    dev = torch.cuda.get_device_properties(0)
    log(f"device {dev.name}, {dev.multi_processor_count} SMs, torch {torch.__version__}, cupy {cp.__version__}")
    results = {"device": dev.name, "correct": [], "perf": []}

    # every instance this run needs, per option set
    cases = correctness_cases(args.quick)
    names = set()
    for c in cases:
        f, b = case_names(c, DEFAULT)
        dt, n, m, affine, mode = c
        names.add(fwd_name(dt, n, affine, *f))
        names.add(bwd_name(dt, n, affine, *b))
        names.add(red_name(dt))
    perf_names = set()
    for dt in CTYPE:
        es = torch.tensor([], dtype=dt).element_size()
        for n in PERF_N:
            for (tpr, cl), _, _, _ in variants(n, es, "fwd"):
                perf_names.add(fwd_name(dt, n, True, 16 // es, tpr, cl))
            for (tpr, cl), _, _, sa in variants(n, es, "bwd"):
                perf_names.add(bwd_name(dt, n, True, 16 // es, tpr, cl, sa))
            perf_names.add(red_name(dt))
    ln = LN()
    ln.compile(names | perf_names)

    # correctness
    nfail = 0
    t0 = time.time()
    for c in cases:
        try:
            ok, res, cfg = check_case(ln, c, DEFAULT)
        except Exception as ex:  # a launch failure is a failed case, not the end of the run
            ok, res, cfg = False, {"error": repr(ex)}, None
            torch.cuda.synchronize()
        dt, n, m, affine, mode = c
        results["correct"].append({"dtype": DNAME[dt], "N": n, "M": m, "affine": affine, "mode": mode,
                                   "ok": ok, "err": res, "cfg": str(cfg)})
        if not ok:
            nfail += 1
            log(f"FAIL {DNAME[dt]} N={n} M={m} affine={affine} {mode} cfg={cfg}: {res}")
    log(f"correctness: {len(cases) - nfail}/{len(cases)} passed in {time.time() - t0:.1f} s")
    worst = {}
    for r in results["correct"]:
        if "error" in r["err"]:
            continue
        for k, v in r["err"].items():
            key = (r["dtype"], k)
            worst[key] = max(worst.get(key, 0), v)
    for k, v in sorted(worst.items()):
        log(f"  worst rel err {k[0]} {k[1]}: {v:.2e}")

    # performance
    eps = 1e-5
    table = []
    for dt in (torch.float32, torch.float16, torch.bfloat16):
        es = torch.tensor([], dtype=dt).element_size()
        for n in PERF_N:
            m = TOTAL // n
            x = torch.randn(m, n, device="cuda", dtype=dt)
            y = torch.empty_like(x)
            dy = torch.randn_like(x)
            dx = torch.empty_like(x)
            g = (torch.rand(n, device="cuda") + 0.5).to(dt)
            b = torch.randn(n, device="cuda").to(dt)
            mean = torch.empty(m, device="cuda")
            rstd = torch.empty(m, device="cuda")
            nbytes = m * n * es
            tc = time_it(lambda: y.copy_(x))
            copy_bw = 2 * nbytes / tc / 1e6
            tf_t = time_it(lambda: F.layer_norm(x, (n,), g, b, eps))
            _, tmean, trstd = torch.ops.aten.native_layer_norm(x, [n], g, b, eps)
            smean = tmean.float().reshape(-1).contiguous()
            srstd = trstd.float().reshape(-1).contiguous()
            tb_t = time_it(lambda: torch.ops.aten.native_layer_norm_backward(dy, x, [n], tmean, trstd, g, b,
                                                                            [True, True, True]))
            ref = F.layer_norm(x.double(), (n,), g.double(), b.double(), eps)
            xr = x.double().clone().requires_grad_(True)
            g64 = g.double().clone().requires_grad_(True)
            b64 = b.double().clone().requires_grad_(True)
            F.layer_norm(xr, (n,), g64, b64, eps).backward(dy.double())
            row = {"dtype": DNAME[dt], "N": n, "M": m, "copy_GBs": copy_bw,
                   "torch_fwd_GBs": 2 * nbytes / tf_t / 1e6, "torch_bwd_GBs": 3 * nbytes / tb_t / 1e6,
                   "fwd": [], "bwd": []}
            for hint, mod in (("stream", ln),):
                for (tpr, cl), mb, mt, _ in variants(n, es, "fwd"):
                    cfg = (16 // es, tpr, cl)
                    y.fill_(float("nan"))
                    run_fwd(mod, dt, m, n, cfg, x, g, b, y, mean, rstd, eps)
                    err = relerr(y, ref)
                    t = time_it(lambda: run_fwd(mod, dt, m, n, cfg, x, g, b, y, mean, rstd, eps))
                    fn = mod.get(fwd_name(dt, n, True, *cfg))
                    row["fwd"].append({"hint": hint, "tpr": tpr, "cl": cl, "max_bytes": mb, "ms": t,
                                       "GBs": 2 * nbytes / t / 1e6, "err": err, "regs": fn.num_regs})
                for (tpr, cl), mb, mt, sa in variants(n, es, "bwd"):
                    cfg = (16 // es, tpr, cl)
                    try:
                        fn, groups, _, dyn = bwd_grid(mod, dt, m, n, cfg, True, sa)
                    except Exception as ex:
                        log(f"bwd variant {tpr}/{cl} skipped: {ex!r}")
                        continue
                    ws = torch.empty(groups * 2 * n, device="cuda")
                    dg = torch.empty(n, device="cuda", dtype=dt)
                    db = torch.empty(n, device="cuda", dtype=dt)
                    dx.fill_(float("nan"))
                    try:
                        run_bwd(mod, dt, m, n, cfg, dy, x, g, smean, srstd, dx, dg, db, ws, True, sa)
                        err = max(relerr(dx, xr.grad), relerr(dg, g64.grad), relerr(db, b64.grad))
                        t = time_it(lambda: run_bwd(mod, dt, m, n, cfg, dy, x, g, smean, srstd,
                                                    dx, dg, db, ws, True, sa))
                    except Exception as ex:
                        log(f"bwd variant {tpr}/{cl}/sacc={sa} failed: {ex!r}")
                        err, t = float("inf"), float("inf")
                    row["bwd"].append({"hint": "sacc" if sa else "regacc", "tpr": tpr, "cl": cl,
                                       "max_bytes": mb, "ms": t, "GBs": 3 * nbytes / t / 1e6, "err": err,
                                       "regs": fn.num_regs, "groups": groups, "smem": dyn})
            results["perf"].append(row)
            bf = max((v for v in row["fwd"] if v["err"] < TOL[dt]), key=lambda v: v["GBs"], default=None)
            bb = max((v for v in row["bwd"] if v["err"] < TOL[dt]), key=lambda v: v["GBs"], default=None)
            table.append((DNAME[dt], n, m, copy_bw, row["torch_fwd_GBs"], bf, row["torch_bwd_GBs"], bb))
            log(f"{DNAME[dt]} N={n}: copy {copy_bw:.0f} torch fwd {row['torch_fwd_GBs']:.0f} bwd {row['torch_bwd_GBs']:.0f}")
            for v in row["fwd"] + row["bwd"]:
                log(f"   {v}")
            del x, y, dy, dx, ref, xr, g64, b64
            torch.cuda.empty_cache()
            with open(os.path.join(args.out, "layernorm_dev.json"), "w") as fh:
                json.dump(results, fh, indent=1)

    print(f"correctness {len(cases) - nfail}/{len(cases)} passed")
    for k, v in sorted(worst.items()):
        print(f"worst {k[0]} {k[1]} {v:.2e}")
    print("dtype N copy | torch_fwd best_fwd(%copy tpr/cl/hint) | torch_bwd best_bwd(%copy tpr/cl/hint)")
    for d, n, m, c, tf, bf, tb, bb in table:
        fs = f"{bf['GBs']:.0f}({100 * bf['GBs'] / c:.0f}% {bf['tpr']}/{bf['cl']}/{bf['hint']})" if bf else "none"
        bs = f"{bb['GBs']:.0f}({100 * bb['GBs'] / c:.0f}% {bb['tpr']}/{bb['cl']}/{bb['hint']})" if bb else "none"
        print(f"{d} {n} {c:.0f} | {tf:.0f} {fs} | {tb:.0f} {bs}")
    return 1 if nfail else 0


if __name__ == "__main__":
    sys.exit(main())
