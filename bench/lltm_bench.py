#!/usr/bin/env python3
"""LLTM side by side, in one process on one GPU: jitop (libjitop.so through
ctypes, on torch's current stream), the tutorial-equivalent torch CUDA
extension (bench/lltm_ext, built here with torch.utils.cpp_extension.load),
and the same cell in plain PyTorch (autograd). Three sizes (B, I, S): tiny
16/32/128, medium 64/256/1024, large 256/1024/4096, float32.

Each system is checked against float64 torch autograd before it is timed.
Timing: per call from the host, sync before and after a loop of n calls,
the median per-call time over several loops, for forward, backward, and a
forward+backward pair. A CUDA-graph replay time (device time without the
host) is added where the system can be captured.

    PYTHONUNBUFFERED=1 python3 bench/lltm_bench.py [--out DIR] [--lib PATH]

stdout: one JSON object per figure (bench/benchlib.py convention); stderr:
logs and the table. Writes DIR/lltm_results.md and DIR/lltm.png.
"""
import argparse
import ctypes
import datetime
import os
import statistics
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import benchlib  # noqa: E402

SIZES = [("tiny", 16, 32, 128), ("medium", 64, 256, 1024), ("large", 256, 1024, 4096)]
JITOP_FLOAT32, JITOP_FLOAT64 = 0, 3


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def find_lib(arg):
    cands = [arg] if arg else []
    if os.environ.get("JITOP_BUILD"):
        cands.append(os.path.join(os.environ["JITOP_BUILD"], "libjitop.so"))
    cands += [os.path.join(ROOT, "build", "libjitop.so")]
    for c in cands:
        if c and os.path.exists(c):
            return c
    raise FileNotFoundError("libjitop.so not found (tried %s); build it or pass --lib" % cands)


class Jitop:
    """libjitop's LLTM calls with their arguments prepared once."""

    def __init__(self, path, lltm_path=None):
        if lltm_path:
            os.environ["JITOP_LLTM_PATH"] = lltm_path
        else:
            os.environ.pop("JITOP_LLTM_PATH", None)
        self.lib = ctypes.CDLL(path)
        lib = self.lib
        lib.jitop_ctx_create.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p)]
        lib.jitop_errmsg.restype = ctypes.c_char_p
        lib.jitop_errmsg.argtypes = [ctypes.c_void_p]
        lib.jitop_lltm_saved_size.restype = ctypes.c_size_t
        lib.jitop_lltm_saved_size.argtypes = [ctypes.c_int] * 4
        self.ctx = ctypes.c_void_p()
        self.check(lib.jitop_ctx_create(None, ctypes.byref(self.ctx)), "jitop_ctx_create")
        self.name = lltm_path or "auto"

    def check(self, rc, what):
        if rc != 0:
            raise RuntimeError("%s failed (%d): %s" % (what, rc, self.lib.jitop_errmsg(None).decode()))

    def bind(self, dtype, B, I, S, t, out, saved, stream):
        """Returns (forward, backward) closures over prepared ctypes args."""
        vp = lambda x: ctypes.c_void_p(x.data_ptr() if hasattr(x, "data_ptr") else x)
        head = (self.ctx, ctypes.c_int(dtype), ctypes.c_int(B), ctypes.c_int(I), ctypes.c_int(S))
        st = ctypes.c_void_p(stream)
        fa = head + tuple(vp(t[k]) for k in ("input", "weights", "bias", "old_h", "old_cell")) + \
            (vp(out["new_h"]), vp(out["new_cell"]), vp(saved) if saved is not None else ctypes.c_void_p(0), st)
        ba = head + (vp(t["grad_h"]), vp(t["grad_cell"]), vp(saved), vp(t["weights"])) + \
            tuple(vp(out[k]) for k in ("d_old_h", "d_input", "d_weights", "d_bias", "d_old_cell")) + (st,)
        f, b = self.lib.jitop_lltm_forward, self.lib.jitop_lltm_backward

        def fwd():
            if f(*fa):
                self.check(1, "jitop_lltm_forward")

        def bwd():
            if b(*ba):
                self.check(1, "jitop_lltm_backward")
        return fwd, bwd


def time_calls(fn, sync, n, reps):
    """Per-call host time in us: sync, n calls, sync; one sample per loop."""
    fn()
    sync()
    per = []
    for _ in range(reps):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        sync()
        per.append((time.perf_counter() - t0) / n * 1e6)
    return per


def time_graph(torch, make_fn, n, reps):
    """Per-call device time in us from replaying a CUDA graph of n calls.
    make_fn(stream) returns the call bound to that CUstream (the capture
    stream is torch's current stream inside torch.cuda.graph)."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        make_fn(s.cuda_stream)()
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn = make_fn(torch.cuda.current_stream().cuda_stream)
        for _ in range(n):
            fn()
    g.replay()
    torch.cuda.synchronize()
    per = []
    for _ in range(reps):
        t0 = time.perf_counter()
        g.replay()
        torch.cuda.synchronize()
        per.append((time.perf_counter() - t0) / n * 1e6)
    return per


def write_report(out_dir, rows, graphs, checks, device, torch_version):
    """lltm_results.md (table with ratios) and lltm.png (bars, log scale)."""
    lines = []
    lines.append("# LLTM: jitop vs the torch CUDA extension vs plain PyTorch\n")
    lines.append("%s, %s, torch %s; float32 (no TF32). Per call from the host: sync, a loop of n calls, sync; "
                 "median over loops. Ratio = other / jitop (higher is better for jitop).\n" % (
                     datetime.datetime.utcnow().strftime("%Y-%m-%d %H:%M UTC"), device, torch_version))
    lines.append("Command: `PYTHONUNBUFFERED=1 python3 bench/lltm_bench.py --out bench/out` (JITOP_BENCH_MODE=%s). "
                 "jitop picks its path by size (fused kernels at tiny, cuBLAS products at medium and large); "
                 "the rows with a forced path show the other choice.\n" % benchlib.mode())
    lines.append("| size (B/I/S) | system | fwd µs | bwd µs | fwd+bwd µs | ext / jitop (fwd / bwd / fwd+bwd) | torch / jitop (fwd+bwd) |")
    lines.append("|---|---|---:|---:|---:|---:|---:|")
    dims = {s: (b, i, st) for s, b, i, st in SIZES}
    for size, *_ in SIZES:
        r = {sys_: (f, b, fb) for s, sys_, f, b, fb in rows if s == size}
        j = r.get("jitop")
        for sys_ in ("jitop", "jitop (cublas path)", "jitop (fused path)", "torch extension", "plain PyTorch"):
            if sys_ not in r:
                continue
            f, b, fb = r[sys_]
            re_ = ("%.2fx / %.2fx / **%.2fx**" % tuple(r["torch extension"][i] / j[i] for i in range(3))
                   if (j and "torch extension" in r and sys_ == "jitop") else "")
            rt_ = "%.2fx" % (r["plain PyTorch"][2] / j[2]) if (j and "plain PyTorch" in r and sys_ == "jitop") else ""
            lines.append("| %s %d/%d/%d | %s | %.1f | %.1f | %.1f | %s | %s |" % ((size,) + dims[size] + (sys_, f, b, fb, re_, rt_)))
    if graphs:
        lines.append("\nDevice time per fwd+bwd pair, replaying a CUDA graph of 50 pairs (no host cost):\n")
        lines.append("| size | system | µs |")
        lines.append("|---|---|---:|")
        for size, sys_, us in graphs:
            lines.append("| %s | %s | %.1f |" % (size, sys_, us))
    lines.append("\nCorrectness before timing (‖out − ref‖/‖ref‖ against float64 torch autograd, worst output):\n")
    lines.append("| size | system | worst rel err |")
    lines.append("|---|---|---:|")
    for size, sys_, w in checks:
        lines.append("| %s | %s | %.2e |" % (size, sys_, w))
    text = "\n".join(lines) + "\n"
    with open(os.path.join(out_dir, "lltm_results.md"), "w") as f:
        f.write(text)
    log(text)

    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, axes = plt.subplots(1, 3, figsize=(13, 4.2))
        systems_order = ["jitop", "torch extension", "plain PyTorch"]
        colors = {"jitop": "#2b7bba", "torch extension": "#e08214", "plain PyTorch": "#999999"}
        sizes_present = [s for s, *_ in SIZES if any(r[0] == s for r in rows)]
        for ax, (idx, title) in zip(axes, ((2, "forward"), (3, "backward"), (4, "forward + backward"))):
            w = 0.26
            for k, sys_ in enumerate(systems_order):
                vals = [next((r[idx] for r in rows if r[0] == s and r[1] == sys_), 0) for s in sizes_present]
                xs = [i + (k - 1) * w for i in range(len(sizes_present))]
                ax.bar(xs, vals, w, label=sys_, color=colors[sys_])
            ax.set_yscale("log")
            ax.set_xticks(range(len(sizes_present)))
            ax.set_xticklabels(["%s\n%d/%d/%d" % ((s,) + dims[s]) for s in sizes_present])
            ax.set_title("LLTM %s, µs per call (lower is better)" % title, fontsize=10)
            ax.grid(axis="y", alpha=0.3)
        axes[0].legend(fontsize=8)
        fig.suptitle("%s, float32, per call from the host (median)" % device, fontsize=10)
        fig.tight_layout()
        fig.savefig(os.path.join(out_dir, "lltm.png"), dpi=120)
        log("wrote %s" % os.path.join(out_dir, "lltm.png"))
    except Exception as e:
        log("chart not written: %s" % e)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("JITOP_BENCH_OUT", os.path.join(ROOT, "bench", "out")))
    ap.add_argument("--lib", default=None)
    ap.add_argument("--sizes", default="tiny,medium,large")
    ap.add_argument("--no-ext", action="store_true")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    what_sizes = args.sizes.split(",")
    try:
        import torch
    except Exception as e:
        benchlib.emit(benchlib.status("kernel", "lltm", "jitop-c", "LLTM fwd/bwd", "skipped", "no torch: %s" % e))
        return 0
    if not torch.cuda.is_available():
        benchlib.emit(benchlib.status("kernel", "lltm", "jitop-c", "LLTM fwd/bwd", "skipped", "no CUDA driver"))
        return 0
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dev = torch.device("cuda")
    torch.zeros(1, device=dev)  # the primary context exists before jitop looks for it
    sync = torch.cuda.synchronize
    stream = torch.cuda.current_stream().cuda_stream
    n_small = benchlib.reps(300, 100, 10)
    reps = benchlib.reps(15, 9, 3)
    data = {}      # size -> (inputs, float64 reference, calls per loop)
    rows = []      # (size, system, fwd, bwd, fb) medians
    graphs = []    # (size, system, us)
    checks = []    # (size, system, worst rel err)

    def rec(size, system, what, unit, samples, **extra):
        r = benchlib.record("kernel", "lltm", system, "%s %s" % (size, what), unit, samples, **extra)
        benchlib.emit(r)
        return r["median"]

    libpath = find_lib(args.lib)
    log("libjitop: %s" % libpath)
    systems = {"jitop": Jitop(libpath)}

    def inputs(B, I, S, dt):
        K = S + I
        g = torch.Generator(device=dev)
        g.manual_seed(time.time_ns() % (1 << 31))
        r = lambda *shape, sc=1.0: ((torch.rand(*shape, device=dev, generator=g, dtype=torch.float64) * 2 - 1) * sc).to(dt).contiguous()
        return dict(input=r(B, I), weights=r(3 * S, K, sc=2.0 / K ** 0.5), bias=r(3 * S, sc=0.5),
                    old_h=r(B, S), old_cell=r(B, S), grad_h=r(B, S), grad_cell=r(B, S))

    def reference(t):
        x = {k: v.double().clone().requires_grad_(k not in ("grad_h", "grad_cell")) for k, v in t.items()}
        X = torch.cat([x["old_h"], x["input"]], 1)
        gates = torch.addmm(x["bias"], X, x["weights"].t())
        S = t["old_cell"].shape[1]
        ig, og = torch.sigmoid(gates[:, :S]), torch.sigmoid(gates[:, S:2 * S])
        nc = x["old_cell"] + torch.nn.functional.elu(gates[:, 2 * S:]) * ig
        nh = torch.tanh(nc) * og
        gr = torch.autograd.grad([nh, nc], [x[k] for k in ("old_h", "input", "weights", "bias", "old_cell")],
                                 [x["grad_h"], x["grad_cell"]])
        return dict(new_h=nh.detach(), new_cell=nc.detach(), d_old_h=gr[0], d_input=gr[1], d_weights=gr[2],
                    d_bias=gr[3], d_old_cell=gr[4])

    def rel(a, b):
        a = a.double()
        if not torch.isfinite(a).all():
            return float("inf")
        return (torch.linalg.norm(a - b) / torch.linalg.norm(b)).item()

    def jitop_buffers(B, I, S, dt, jt):
        mk = lambda *s: torch.full(s, float("nan"), device=dev, dtype=dt)
        out = dict(new_h=mk(B, S), new_cell=mk(B, S), d_old_h=mk(B, S), d_input=mk(B, I),
                   d_weights=mk(3 * S, S + I), d_bias=mk(3 * S), d_old_cell=mk(B, S))
        esz = 8 if dt == torch.float64 else 4
        saved = torch.full((jt.lib.jitop_lltm_saved_size(JITOP_FLOAT64 if dt == torch.float64 else JITOP_FLOAT32, B, I, S) // esz,),
                           float("nan"), device=dev, dtype=dt)
        return out, saved

    def warm_gpu(seconds=0.3):
        """Keeps the GPU busy for a moment so that its clocks are up before a
        timing loop (an idle H100 sits at a low SM clock; the first short
        loop would otherwise pay the ramp). Same for every system."""
        a = torch.randn(2048, 2048, device=dev)
        t_end = time.perf_counter() + seconds
        while time.perf_counter() < t_end:
            for _ in range(10):
                a = torch.tanh(a @ a)
            sync()

    for size, B, I, S in SIZES:
        if size not in what_sizes:
            continue
        n = n_small if size != "large" else max(3, n_small // 15)
        t = inputs(B, I, S, torch.float32)
        ref = reference(t)
        log("== %s B=%d I=%d S=%d (n=%d calls x %d loops)" % (size, B, I, S, n, reps))

        # jitop: check (float32 and float64), then time
        for dt, dtype in ((torch.float32, JITOP_FLOAT32), (torch.float64, JITOP_FLOAT64)):
            try:
                jt = systems["jitop"]
                tt = {k: v.to(dt) for k, v in t.items()}
                out, saved = jitop_buffers(B, I, S, dt, jt)
                fwd, bwd = jt.bind(dtype, B, I, S, tt, out, saved, stream)
                fwd()
                bwd()
                sync()
                errs = {k: rel(out[k], ref[k]) for k in out}
                worst = max(errs.values())
                tol = 1e-4 if dt == torch.float32 else 1e-12
                name = "jitop %s" % ("f32" if dt == torch.float32 else "f64")
                log("check %-10s worst rel err %.2e %s" % (name, worst, "OK" if worst < tol else "FAIL " + str(errs)))
                benchlib.emit({"area": "check", "kernel": "lltm", "system": "jitop-c", "what": "%s %s vs float64 torch" % (size, name),
                               "worst_rel_err": worst, "ok": worst < tol, "errs": errs})
                checks.append((size, name, worst))
                if worst >= tol:
                    raise RuntimeError("jitop result wrong at %s: %s" % (size, errs))
                if dt == torch.float32:
                    warm_gpu()
                    tf = rec(size, "jitop-c", "forward per call (host)", "us", time_calls(fwd, sync, n, reps))
                    tb = rec(size, "jitop-c", "backward per call (host)", "us", time_calls(bwd, sync, n, reps))
                    tfb = rec(size, "jitop-c", "forward+backward per call (host)", "us",
                              time_calls(lambda: (fwd(), bwd()), sync, n, reps))
                    rows.append((size, "jitop", tf, tb, tfb))
                    if size == "tiny":
                        try:
                            def make(sp):
                                f2, b2 = jt.bind(dtype, B, I, S, tt, out, saved, sp)
                                return lambda: (f2(), b2())
                            tg = rec(size, "jitop-c", "forward+backward per call (CUDA graph replay)", "us",
                                     time_graph(torch, make, 50, reps))
                            graphs.append((size, "jitop", tg))
                        except Exception as e:
                            log("graph capture of jitop failed: %s" % e)
            except Exception as e:
                log(traceback.format_exc())
                benchlib.emit(benchlib.status("kernel", "lltm", "jitop-c", "%s LLTM" % size, "failed", e))

        # the other jitop path at tiny and medium (the measurement behind
        # src/ops/lltm.c's threshold): cuBLAS at tiny, the fused kernels at medium
        if size in ("tiny", "medium"):
            alt = "cublas" if size == "tiny" else "fused"
            try:
                if alt not in systems:
                    systems[alt] = Jitop(libpath, alt)  # the path is read at the context's first LLTM call
                jt = systems[alt]
                out, saved = jitop_buffers(B, I, S, torch.float32, jt)
                fwd, bwd = jt.bind(JITOP_FLOAT32, B, I, S, t, out, saved, stream)
                fwd()
                bwd()
                sync()
                os.environ.pop("JITOP_LLTM_PATH", None)
                worst = max(rel(out[k], ref[k]) for k in out)
                checks.append((size, "jitop (%s path)" % alt, worst))
                if worst >= 1e-4:
                    raise RuntimeError("jitop %s path wrong at %s: %.2e" % (alt, size, worst))
                warm_gpu()
                tf = rec(size, "jitop-c", "forward per call (host), %s path forced" % alt, "us", time_calls(fwd, sync, n, reps), detail=True)
                tb = rec(size, "jitop-c", "backward per call (host), %s path forced" % alt, "us", time_calls(bwd, sync, n, reps), detail=True)
                tfb = rec(size, "jitop-c", "forward+backward per call (host), %s path forced" % alt, "us",
                          time_calls(lambda: (fwd(), bwd()), sync, n, reps), detail=True)
                rows.append((size, "jitop (%s path)" % alt, tf, tb, tfb))
            except Exception as e:
                os.environ.pop("JITOP_LLTM_PATH", None)
                log(traceback.format_exc())
                benchlib.emit(benchlib.status("kernel", "lltm", "jitop-c", "%s LLTM %s path" % (size, alt), "failed", e))

        # plain PyTorch autograd
        try:
            xs = {k: v.clone().requires_grad_(k not in ("grad_h", "grad_cell")) for k, v in t.items()}
            ins = [xs[k] for k in ("old_h", "input", "weights", "bias", "old_cell")]

            def pf():
                X = torch.cat([xs["old_h"], xs["input"]], 1)
                gates = torch.addmm(xs["bias"], X, xs["weights"].t())
                g0, g1, g2 = gates.chunk(3, dim=1)
                nc = xs["old_cell"] + torch.nn.functional.elu(g2) * torch.sigmoid(g0)
                return torch.tanh(nc) * torch.sigmoid(g1), nc
            outs = pf()
            gr = torch.autograd.grad(list(outs), ins, [t["grad_h"], t["grad_cell"]], retain_graph=True)
            worst = max([rel(outs[0], ref["new_h"]), rel(outs[1], ref["new_cell"])] +
                        [rel(a, ref[k]) for a, k in zip(gr, ("d_old_h", "d_input", "d_weights", "d_bias", "d_old_cell"))])
            log("check %-10s worst rel err %.2e" % ("pytorch", worst))
            checks.append((size, "plain PyTorch", worst))
            bw = lambda: torch.autograd.grad(list(outs), ins, [t["grad_h"], t["grad_cell"]], retain_graph=True)
            fb = lambda: torch.autograd.grad(list(pf()), ins, [t["grad_h"], t["grad_cell"]])
            warm_gpu()
            tf = rec(size, "torch", "forward per call (host), plain PyTorch", "us", time_calls(pf, sync, n, reps))
            tb = rec(size, "torch", "backward per call (host), plain PyTorch autograd", "us", time_calls(bw, sync, n, reps))
            tfb = rec(size, "torch", "forward+backward per call (host), plain PyTorch autograd", "us", time_calls(fb, sync, n, reps))
            rows.append((size, "plain PyTorch", tf, tb, tfb))
        except Exception as e:
            log(traceback.format_exc())
            benchlib.emit(benchlib.status("kernel", "lltm", "torch", "%s LLTM" % size, "failed", e))
        data[size] = (t, ref, n)

    # Everything for jitop and plain PyTorch is measured before the extension is built
    # (a cold cpp_extension.load takes ~50 s): a run cut short keeps those figures.
    write_report(args.out, rows, graphs, checks, torch.cuda.get_device_properties(0).name, torch.__version__)
    ext = None
    if not args.no_ext:
        try:
            from torch.utils.cpp_extension import load
            # bench/run.sh hands over the build drive.py's torch phase made
            # (JITOP_LLTM_EXT_DIR): loading it again costs seconds, not the
            # ~50 s of a build, and drive.py reports the cold build itself.
            reused = bool(os.environ.get("JITOP_LLTM_EXT_DIR"))
            if reused:
                os.environ["TORCH_EXTENSIONS_DIR"] = os.environ["JITOP_LLTM_EXT_DIR"]
            os.environ.setdefault("TORCH_EXTENSIONS_DIR", "/tmp/jitop_lltm_ext_%d" % os.getpid())
            t0 = time.perf_counter()
            ext = load(name="lltm_ext", sources=[os.path.join(HERE, "lltm_ext", "lltm_cuda.cpp"),
                                                 os.path.join(HERE, "lltm_ext", "lltm_cuda_kernel.cu")],
                       extra_cuda_cflags=["-O3"], verbose=False)
            build_s = time.perf_counter() - t0
            log("extension %s in %.1f s (TORCH_EXTENSIONS_DIR=%s)" % ("loaded" if reused else "built", build_s,
                                                                      os.environ["TORCH_EXTENSIONS_DIR"]))
            if not reused:
                benchlib.emit(benchlib.record("cold", "lltm", "torch-load", "cpp_extension.load of the LLTM extension (cold unless reused)",
                                              "s", [build_s]))
        except Exception as e:
            log(traceback.format_exc())
            benchlib.emit(benchlib.status("kernel", "lltm", "torch-load", "LLTM extension", "failed", e))

    def time_ext(size, t, ref, n):
        try:
            fw = lambda: ext.forward(t["input"], t["weights"], t["bias"], t["old_h"], t["old_cell"])
            o = fw()
            bw = lambda: ext.backward(t["grad_h"], t["grad_cell"], o[1], o[2], o[3], o[4], o[5], o[6], t["weights"])
            g = bw()
            sync()
            got = dict(new_h=o[0], new_cell=o[1], d_old_h=g[0], d_input=g[1], d_weights=g[2], d_bias=g[3], d_old_cell=g[4])
            worst = max(rel(got[k], ref[k]) for k in got)
            log("check %-10s worst rel err %.2e" % ("extension", worst))
            checks.append((size, "torch extension", worst))

            def fb():
                oo = fw()
                ext.backward(t["grad_h"], t["grad_cell"], oo[1], oo[2], oo[3], oo[4], oo[5], oo[6], t["weights"])
            warm_gpu()
            tf = rec(size, "torch-load", "forward per call (host)", "us", time_calls(fw, sync, n, reps))
            tb = rec(size, "torch-load", "backward per call (host)", "us", time_calls(bw, sync, n, reps))
            tfb = rec(size, "torch-load", "forward+backward per call (host)", "us", time_calls(fb, sync, n, reps))
            rows.append((size, "torch extension", tf, tb, tfb))
            if size == "tiny":
                try:
                    tg = rec(size, "torch-load", "forward+backward per call (CUDA graph replay)", "us",
                             time_graph(torch, lambda sp: fb, 50, reps))
                    graphs.append((size, "torch extension", tg))
                except Exception as e:
                    log("graph capture of the extension failed: %s" % e)
        except Exception as e:
            log(traceback.format_exc())
            benchlib.emit(benchlib.status("kernel", "lltm", "torch-load", "%s LLTM" % size, "failed", e))

    if ext is not None:
        for size, *_ in SIZES:
            if size in data:
                time_ext(size, *data[size])

    write_report(args.out, rows, graphs, checks, torch.cuda.get_device_properties(0).name, torch.__version__)
    return 0


if __name__ == "__main__":
    sys.exit(main())
