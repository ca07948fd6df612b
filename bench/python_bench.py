#!/usr/bin/env python3
"""The Python package (python/, issue 23) side by side with its peers, in one
run on one GPU:

  launch   host cost per launch of saxpy (bench/kernels/saxpy.cu, 4 arguments,
           1 block of 32 threads): jitop from Python (torch tensors; ints),
           jitop from C in the same process (op._bench: jitop_launch in a C
           loop, arguments converted once), CuPy RawKernel.__call__, and a
           torch op (y.add_(x, alpha=a)). Batches of 256 launches timed on the
           host, a sync between batches (not timed), the order rotated.
  load     warm load in a new interpreter, each sample a fresh process, timed
           after the interpreter's import of the package and the CUDA context:
           jitop.load + op lookup, cupy.RawModule + get_function,
           torch.utils.cpp_extension.load (bench/torch_saxpy); `import jitop`
           on its own line.
  lltm     the LLTM step (forward + backward) tiny 16/32/128 and medium
           64/256/1024, float32: jitop.torch (autograd, and the raw C calls)
           against the tutorial's extension (bench/lltm_ext, built here with
           cpp_extension.load unless JITOP_LLTM_EXT_DIR holds a build) through
           the tutorial's autograd Function, and its raw calls.

    make bench-python        (builds the package, runs this)
    PYTHONPATH=build/python/cpython-312 python3 bench/python_bench.py [--quick]
        [--parts launch,load,lltm]

stdout: one JSON object per figure (bench/benchlib.py); stderr: a table.
A part whose peer is missing (no CuPy, no torch) prints it as skipped.
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import benchlib  # noqa: E402

SAXPY = os.path.join(HERE, "kernels", "saxpy.cu")
ROWS = []


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def emit(area, kernel, system, what, unit, samples, detail=False):
    rec = benchlib.record(area, kernel, system, what, unit, samples, detail=detail)
    benchlib.emit(rec)
    ROWS.append((area, kernel, system, what, unit, rec["median"], rec["p10"], rec["p90"]))
    return rec["median"]


def skipped(area, kernel, system, what, why):
    benchlib.emit(benchlib.status(area, kernel, system, what, "skipped", why))
    ROWS.append((area, kernel, system, what, "", None, None, None))
    log("skip %s/%s/%s: %s" % (area, kernel, system, why))


def try_import(name):
    try:
        return __import__(name)
    except Exception as e:  # an install broken in any way counts as absent
        log("no %s: %s" % (name, e))
        return None


# ----------------------------------------------------------------- launch

def part_launch(quick):
    import jitop
    torch = try_import("torch")
    cp = try_import("cupy")
    np = try_import("numpy")
    have_torch = torch is not None and torch.cuda.is_available()
    mod = jitop.load("saxpy", [SAXPY])
    op = mod.saxpy
    n, a, batch = 32, 2.0, 256
    rounds = 11 if quick else 51
    ways = {}
    if have_torch:
        x = torch.zeros(n, device="cuda")
        y = torch.zeros(n, device="cuda")
        xp, yp = x.data_ptr(), y.data_ptr()
        sync = torch.cuda.synchronize

        def jitop_tensors():
            t0 = time.perf_counter()
            for _ in range(batch):
                op(1, 32, n, a, x, y)
            return time.perf_counter() - t0

        def torch_op():
            t0 = time.perf_counter()
            for _ in range(batch):
                y.add_(x, alpha=a)
            return time.perf_counter() - t0

        ways["jitop-py"] = ("op(1, 32, n, a, x, y), torch tensors", jitop_tensors)
        ways["torch"] = ("y.add_(x, alpha=a), one torch op", torch_op)
    elif cp is not None:
        x = cp.zeros(n, dtype=cp.float32)
        y = cp.zeros(n, dtype=cp.float32)
        xp, yp = x.data.ptr, y.data.ptr
        sync = cp.cuda.Device().synchronize
    else:
        skipped("launch", "saxpy", "jitop-py", "host time per launch", "neither torch nor CuPy")
        return

    def jitop_ints():
        t0 = time.perf_counter()
        for _ in range(batch):
            op(1, 32, n, a, xp, yp)
        return time.perf_counter() - t0

    def jitop_c():
        return op._bench(batch, 1, 32, n, a, xp, yp)

    ways["jitop-py-ints"] = ("op(1, 32, n, a, x_ptr, y_ptr), pointers as ints", jitop_ints)
    ways["jitop-c"] = ("jitop_launch from C, same process and op (4 arg sizes checked)", jitop_c)
    if cp is not None and np is not None:
        kern = cp.RawKernel(open(SAXPY).read(), "saxpy", options=("-std=c++17",))
        cx = cp.zeros(n, dtype=cp.float32)
        cy = cp.zeros(n, dtype=cp.float32)
        cn, ca = np.int32(n), np.float32(a)

        def cupy_call():
            t0 = time.perf_counter()
            for _ in range(batch):
                kern((1,), (32,), (cn, ca, cx, cy))
            return time.perf_counter() - t0

        ways["cupy"] = ("RawKernel.__call__((1,), (32,), (int32, float32, x, y))", cupy_call)
    else:
        skipped("launch", "saxpy", "cupy", "RawKernel host time per launch", "no CuPy/NumPy")

    def sync_all():
        sync()
        if cp is not None:
            cp.cuda.Device().synchronize()

    names = list(ways)
    for _ in range(3):  # warm up: lazy loading, the stream lookup, clocks
        for k in names:
            ways[k][1]()
            sync_all()
    samples = {k: [] for k in names}
    for r in range(rounds):
        for j in range(len(names)):
            k = names[(r + j) % len(names)]
            samples[k].append(ways[k][1]() * 1e6 / batch)
            sync_all()
    med = {}
    for k in names:
        med[k] = emit("launch", "saxpy", k, ways[k][0] + ", host us per launch", "us", samples[k])
    if "jitop-c" in samples:
        for k in ("jitop-py", "jitop-py-ints"):
            if k in samples:
                diff = [p - c for p, c in zip(samples[k], samples["jitop-c"])]
                emit("launch", "saxpy", k, "minus jitop from C, paired rounds", "us", diff,
                     detail=True)


# ------------------------------------------------------------------- load

CHILD_JITOP = r"""
import sys, time
t0 = time.perf_counter()
import jitop
t1 = time.perf_counter()
jitop.context().cuda()                 # the driver and the primary context
t2 = time.perf_counter()
op = jitop.load("saxpy", [sys.argv[1]]).saxpy
t3 = time.perf_counter()
print("RESULT %.6f %.6f %.6f" % ((t1 - t0) * 1e3, (t3 - t2) * 1e3, (t2 - t1) * 1e3))
"""

CHILD_IMPORT = r"""
import time
t0 = time.perf_counter()
import jitop
print("RESULT %.6f" % ((time.perf_counter() - t0) * 1e3))
"""

CHILD_CUPY = r"""
import sys, time
import cupy
cupy.cuda.runtime.getDeviceCount()
cupy.empty(1, dtype=cupy.float32)
cupy.cuda.Device().synchronize()
src = open(sys.argv[1]).read()
t0 = time.perf_counter()
fn = cupy.RawModule(code=src, options=("-std=c++17",)).get_function("saxpy")
t1 = time.perf_counter()
print("RESULT %.6f" % ((t1 - t0) * 1e3))
"""

CHILD_TORCH = r"""
import os, sys, time
import torch
torch.cuda.init()
torch.empty(1, device="cuda")
torch.cuda.synchronize()
from torch.utils.cpp_extension import load
t0 = time.perf_counter()
ext = load(name="saxpy_torch_pybench", sources=[sys.argv[1]], extra_include_paths=[sys.argv[2]],
           verbose=False)
t1 = time.perf_counter()
print("RESULT %.6f" % ((t1 - t0) * 1e3))
"""


def child(code, args, env, timeout=600):
    p = subprocess.run([sys.executable, "-c", code] + list(args), env=env, capture_output=True,
                       text=True, timeout=timeout)
    for line in p.stdout.splitlines():
        if line.startswith("RESULT "):
            return [float(v) for v in line.split()[1:]]
    raise RuntimeError("child failed (%d): %s" % (p.returncode, p.stderr[-2000:]))


def part_load(quick):
    reps = 5 if quick else 15
    work = tempfile.mkdtemp(prefix="jitop-pybench-")
    env = dict(os.environ)
    env["JITOP_CACHE_DIR"] = os.path.join(work, "jitop-cache")
    env["CUPY_CACHE_DIR"] = os.path.join(work, "cupy-cache")
    env["TORCH_EXTENSIONS_DIR"] = os.path.join(work, "torch-ext")
    try:
        child(CHILD_JITOP, [SAXPY], env)  # cold: fills the cache
        imp, loads, drv = [], [], []
        for _ in range(reps):
            i, l, d = child(CHILD_JITOP, [SAXPY], env)
            imp.append(i)
            loads.append(l)
            drv.append(d)
        emit("load", "saxpy", "jitop-py", "jitop.load + op lookup, warm, new interpreter", "ms",
             loads)
        emit("load", "saxpy", "jitop-py", "driver start + primary context (not in the load)",
             "ms", drv, detail=True)
        only = [child(CHILD_IMPORT, [], env)[0] for _ in range(reps)]
        emit("import", "-", "jitop-py", "import jitop, new interpreter", "ms", only)
    except Exception as e:
        log(traceback.format_exc())
        skipped("load", "saxpy", "jitop-py", "warm load", e)
    if try_import("cupy") is not None:
        try:
            child(CHILD_CUPY, [SAXPY], env)
            emit("load", "saxpy", "cupy", "RawModule + get_function, warm, new interpreter",
                 "ms", [child(CHILD_CUPY, [SAXPY], env)[0] for _ in range(reps)])
        except Exception as e:
            log(traceback.format_exc())
            skipped("load", "saxpy", "cupy", "warm load", e)
    else:
        skipped("load", "saxpy", "cupy", "warm load", "no CuPy")
    if try_import("torch") is not None:
        src = os.path.join(HERE, "torch_saxpy", "saxpy_torch.cu")
        args = [src, os.path.join(HERE, "kernels")]
        try:
            t0 = time.perf_counter()
            child(CHILD_TORCH, args, env)  # cold: builds the extension (~a minute)
            log("torch extension built in %.1f s" % (time.perf_counter() - t0))
            emit("load", "saxpy", "torch-load",
                 "cpp_extension.load, warm, new interpreter", "ms",
                 [child(CHILD_TORCH, args, env)[0] for _ in range(max(3, reps // 3))])
        except Exception as e:
            log(traceback.format_exc())
            skipped("load", "saxpy", "torch-load", "warm load", e)
    else:
        skipped("load", "saxpy", "torch-load", "warm load", "no torch")


# ------------------------------------------------------------------- lltm

def part_lltm(quick):
    torch = try_import("torch")
    if torch is None or not torch.cuda.is_available():
        skipped("lltm", "-", "jitop-py", "LLTM step", "no torch with CUDA")
        return
    import jitop
    from jitop import _jitop
    import jitop.torch as jt

    ext = None
    try:
        from torch.utils.cpp_extension import load
        if os.environ.get("JITOP_LLTM_EXT_DIR"):
            os.environ["TORCH_EXTENSIONS_DIR"] = os.environ["JITOP_LLTM_EXT_DIR"]
        os.environ.setdefault("TORCH_EXTENSIONS_DIR", "/tmp/jitop_lltm_ext_pybench")
        t0 = time.perf_counter()
        ext = load(name="lltm_ext", sources=[os.path.join(HERE, "lltm_ext", "lltm_cuda.cpp"),
                                             os.path.join(HERE, "lltm_ext",
                                                          "lltm_cuda_kernel.cu")],
                   extra_cuda_cflags=["-O3"], verbose=False)
        log("tutorial extension ready in %.1f s" % (time.perf_counter() - t0))
    except Exception as e:
        log(traceback.format_exc())
        skipped("lltm", "-", "torch-ext", "LLTM step", e)

    class TutorialLLTM(torch.autograd.Function):
        """The tutorial's LLTMFunction over its extension."""

        @staticmethod
        def forward(ctx, input, weights, bias, old_h, old_cell):
            outputs = ext.forward(input, weights, bias, old_h, old_cell)
            new_h, new_cell = outputs[:2]
            ctx.bias_shape = bias.shape
            ctx.save_for_backward(*(list(outputs[1:]) + [weights]))
            return new_h, new_cell

        @staticmethod
        def backward(ctx, grad_h, grad_cell):
            d_old_h, d_input, d_weights, d_bias, d_old_cell = ext.backward(
                grad_h.contiguous(), grad_cell.contiguous(), *ctx.saved_tensors)
            return d_input, d_weights, d_bias.reshape(ctx.bias_shape), d_old_h, d_old_cell

    def per_iter(fn, n, loops):
        out = []
        for _ in range(loops):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(n):
                fn()
            torch.cuda.synchronize()
            out.append((time.perf_counter() - t0) * 1e6 / n)
        return out

    for label, B, I, S in (("tiny", 16, 32, 128), ("medium", 64, 256, 1024)):
        torch.manual_seed(0)
        dev = dict(device="cuda", dtype=torch.float32)
        X = torch.randn(B, I, **dev)
        W = (torch.randn(3 * S, I + S, **dev) * 0.05).requires_grad_()
        b = torch.randn(1, 3 * S, **dev).requires_grad_()
        h = torch.randn(B, S, **dev).requires_grad_()
        c = torch.randn(B, S, **dev).requires_grad_()
        gh, gc = torch.randn(B, S, **dev), torch.randn(B, S, **dev)
        n, loops = (50, 5) if quick else (200, 15)

        def step(fn):
            def run():
                nh, nc = fn.apply(X, W, b, h, c)
                torch.autograd.backward((nh, nc), (gh, gc))
            return run

        for _ in range(3):
            step(jt.LLTMFunction)()
        emit("lltm", label, "jitop-py", "forward + backward through autograd (jitop.torch)",
             "us", per_iter(step(jt.LLTMFunction), n, loops))

        # The raw calls: pointers prepared once, as a C program would.
        jctx = jitop.context()
        saved = torch.empty(_jitop.lltm_saved_size(0, B, I, S), dtype=torch.uint8,
                            device="cuda")
        outs = [torch.empty(B, S, **dev) for _ in range(2)]
        grads = [torch.empty(s, **dev) for s in ((B, S), (B, I), tuple(W.shape), (1, 3 * S),
                                                 (B, S))]
        stream = _jitop.stream(None, 0)
        fa = (jctx, 0, B, I, S, X.data_ptr(), W.data_ptr(), b.data_ptr(), h.data_ptr(),
              c.data_ptr(), outs[0].data_ptr(), outs[1].data_ptr(), saved.data_ptr(), stream)
        ba = (jctx, 0, B, I, S, gh.data_ptr(), gc.data_ptr(), saved.data_ptr(), W.data_ptr()) + \
            tuple(g.data_ptr() for g in grads) + (stream,)

        def raw_pair():
            _jitop.lltm_forward(*fa)
            _jitop.lltm_backward(*ba)

        raw_pair()
        emit("lltm", label, "jitop-py", "forward + backward, raw calls (jitop._jitop)", "us",
             per_iter(raw_pair, n, loops))
        if ext is not None:
            for _ in range(3):
                step(TutorialLLTM)()
            emit("lltm", label, "torch-ext",
                 "forward + backward through autograd (the tutorial's LLTMFunction)", "us",
                 per_iter(step(TutorialLLTM), n, loops))
            Wd = W.detach()

            def ext_pair():
                o = ext.forward(X, Wd, b.detach(), h.detach(), c.detach())
                ext.backward(gh, gc, o[1], o[2], o[3], o[4], o[5], o[6], Wd)

            ext_pair()
            emit("lltm", label, "torch-ext", "forward + backward, raw calls (ext.forward, "
                 "ext.backward)", "us", per_iter(ext_pair, n, loops))


def table():
    log("")
    log("%-7s %-7s %-14s %10s %10s %10s  %s" % ("area", "kernel", "system", "median", "p10",
                                                 "p90", "what"))
    for area, kernel, system, what, unit, med, p10, p90 in ROWS:
        if med is None:
            log("%-7s %-7s %-14s %10s %10s %10s  %s" % (area, kernel, system, "skipped", "", "",
                                                         what))
        else:
            log("%-7s %-7s %-14s %8.3f%-2s %10.3f %10.3f  %s" % (area, kernel, system, med, unit,
                                                                 p10, p90, what))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer repetitions")
    ap.add_argument("--parts", default="launch,load,lltm")
    args = ap.parse_args()
    parts = {"launch": part_launch, "load": part_load, "lltm": part_lltm}
    rc = 0
    for name in args.parts.split(","):
        try:
            parts[name](args.quick)
        except Exception:
            log(traceback.format_exc())
            rc = 1
    table()
    return rc


if __name__ == "__main__":
    sys.exit(main())
