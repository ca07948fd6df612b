#!/usr/bin/env python3
"""The peers, measured the way bench/floor.c and bench/jitop_bench.c measure
jitop: CuPy (RawModule / RawKernel) and torch.utils.cpp_extension (load and
load_inline). One process runs one step; bench/drive.py starts a fresh
process where the step calls for one (cold, warm) and gives it a fresh or a
warm cache (CUPY_CACHE_DIR, TORCH_EXTENSIONS_DIR).

    peers.py cupy  --step cold|warm|inproc|launch|edit --src FILE --kernel LABEL [--op NAME] [--opt=O]...
    peers.py torch --step cold|warm|inproc|launch|edit --ext saxpy|saxpy_inline|lltm --work DIR

Every process first reports its import and CUDA start-up cost on lines of
their own (area "startup"); those are never inside the other figures.
stdout: one JSON object per figure (bench/README.md); logs on stderr.
"""
import argparse
import os
import shutil
import sys
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib as bl  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LAUNCH_BATCH = 100


def now_ms():
    return time.perf_counter() * 1e3


def env(key, value):
    bl.emit({"area": "env", "key": key, "value": str(value)})


def startup(system, what, ms):
    bl.emit(bl.record("startup", "-", system, what, "ms", [ms]))


# ---------------------------------------------------------------- CuPy

def cupy_start():
    t0 = now_ms()
    import cupy
    t1 = now_ms()
    cupy.cuda.runtime.getDeviceCount()
    a = cupy.empty(1, dtype=cupy.float32)
    cupy.cuda.Device().synchronize()
    t2 = now_ms()
    del a
    startup("cupy", "import cupy", t1 - t0)
    startup("cupy", "CUDA context + first allocation (cupy)", t2 - t1)
    env("cupy", cupy.__version__)
    return cupy


def cupy_options(src, opts):
    """The options jitop and the floor compile with: the source's directory
    on the include path and C++17 (NVRTC 13's default, which CuPy may
    override with an older one unless told)."""
    options = ["-I" + os.path.dirname(os.path.abspath(src))] + list(opts)
    if not any(o.startswith(("-std", "--std")) for o in options):
        options.append("-std=c++17")
    return tuple(options)


def cupy_module(cp, text, src, op, opts):
    """RawModule from source text; templates through name_expressions."""
    options = cupy_options(src, opts)
    names = [op] if "<" in op else None
    mod = cp.RawModule(code=text, options=options, name_expressions=names)
    return mod, mod.get_function(op)


def cupy_step(a):
    cp = cupy_start()
    import numpy as np
    area = {"cold": "cold", "warm": "warm"}.get(a.step, a.step)
    op = a.op or a.kernel
    with open(a.src) as f:
        text = f.read()
    if a.step in ("cold", "warm"):
        t0 = now_ms()
        cupy_module(cp, text, a.src, op, a.opt)
        dt = now_ms() - t0
        what = "RawModule(code) + get_function (op launchable)"
        bl.emit(bl.record(area, a.kernel, "cupy", what, "ms", [dt]))
        return
    if a.step == "inproc":
        mod, _ = cupy_module(cp, text, a.src, op, a.opt)
        gets, again = [], []
        for i in range(-1, bl.reps(50, 10, 2)):
            t0 = now_ms()
            for _ in range(100):
                mod.get_function(op)
            t1 = now_ms()
            for _ in range(10):
                cupy_module(cp, text, a.src, op, a.opt)
            t2 = now_ms()
            if i >= 0:
                gets.append((t1 - t0) * 1e3 / 100)
                again.append((t2 - t1) * 1e3 / 10)
        bl.emit(bl.record("inproc", a.kernel, "cupy", "RawModule.get_function again (per call)", "us", gets))
        bl.emit(bl.record("inproc", a.kernel, "cupy",
                          "RawModule(same code) again + get_function (per call)", "us", again, detail=True))
        return
    if a.step == "launch":
        k = cp.RawKernel(text, op, options=cupy_options(a.src, a.opt))
        x = cp.ones(1, dtype=cp.float32)
        y = cp.zeros(1, dtype=cp.float32)
        args = (np.int32(1), np.float32(2.0), x, y)
        per = []
        for i in range(-2, bl.reps(200, 50, 5)):
            t0 = now_ms()
            for _ in range(LAUNCH_BATCH):
                k((1,), (32,), args)
            t1 = now_ms()
            cp.cuda.Device().synchronize()
            if i >= 0:
                per.append((t1 - t0) * 1e3 / LAUNCH_BATCH)
        bl.emit(bl.record("launch", a.kernel, "cupy", "RawKernel call host cost per launch (1 block of 32)",
                          "us", per))
        return
    if a.step == "edit":
        x = cp.ones(256, dtype=cp.float32)
        y = cp.zeros(256, dtype=cp.float32)
        per = []
        semantic = False
        for i in range(bl.reps(10, 3, 1)):
            value = i + 1
            edited, semantic = bl.edit_text(text, value)
            with open(a.src, "w") as f:
                f.write(edited)
            y.fill(0)
            cp.cuda.Device().synchronize()
            t0 = now_ms()
            with open(a.src) as f:
                new_text = f.read()
            _, fn = cupy_module(cp, new_text, a.src, op, a.opt)
            got = None
            if semantic:
                fn((1,), (256,), (np.int32(256), np.float32(2.0), x, y))
                got = float(y[0].get())
            per.append(now_ms() - t0)
            if semantic and got != 2.0 + value:
                raise RuntimeError("after the edit y[0] = %r, expected %r: the new code did not run"
                                   % (got, 2.0 + value))
        with open(a.src, "w") as f:
            f.write(text)
        what = ("edit saved -> read + RawModule(new code) + get_function + launch + sync (result checked)"
                if semantic else "edit saved -> read + RawModule(new code) + get_function (comment edit)")
        bl.emit(bl.record("edit", a.kernel, "cupy", what, "ms", per))
        return
    raise SystemExit("unknown step " + a.step)


# ---------------------------------------------------------------- torch

def torch_start():
    t0 = now_ms()
    import torch
    t1 = now_ms()
    torch.cuda.init()
    torch.empty(1, device="cuda")
    torch.cuda.synchronize()
    t2 = now_ms()
    import torch.utils.cpp_extension  # noqa: F401
    t3 = now_ms()
    startup("torch", "import torch", t1 - t0)
    startup("torch", "CUDA context + first allocation (torch)", t2 - t1)
    startup("torch", "import torch.utils.cpp_extension", t3 - t2)
    env("torch", torch.__version__)
    env("torch.version.cuda", torch.version.cuda)
    env("gpu", torch.cuda.get_device_name(0))
    return torch


class Ext:
    """One torch extension: how to build (load/load_inline) it, how to run
    its op once (returning a value that shows which build ran), and which
    file an edit changes."""

    def __init__(self, torch, kind, work):
        self.torch, self.kind, self.work = torch, kind, work
        from torch.utils import cpp_extension
        self.cpp_extension = cpp_extension
        if kind in ("saxpy", "saxpy_inline"):
            self.edit_path = os.path.join(work, "saxpy_torch.cu")
            self.system = "torch-load" if kind == "saxpy" else "torch-load_inline"
            self.kernel = "saxpy"
        elif kind == "layernorm":
            self.system, self.kernel = "torch-load", "layernorm"
            self.edit_path = os.path.join(work, "layernorm_torch.cu")
        elif kind == "lltm":
            self.system, self.kernel = "torch-load", "lltm"
            cus = sorted(f for f in os.listdir(work) if f.endswith(".cu"))
            if not cus:
                raise RuntimeError("no .cu file in %s (bench/lltm_ext)" % work)
            self.edit_path = os.path.join(work, cus[0])
        else:
            raise SystemExit("unknown extension " + kind)

    def build(self):
        ce = self.cpp_extension
        if self.kind == "saxpy":
            return ce.load(name="jitop_bench_saxpy", sources=[self.edit_path],
                           extra_include_paths=[self.work], verbose=False)
        if self.kind == "saxpy_inline":
            with open(self.edit_path) as f:
                cuda_text = "#define SAXPY_NO_MODULE\n" + f.read()
            decl = "void saxpy_launch(torch::Tensor x, torch::Tensor y, double a);"
            return ce.load_inline(name="jitop_bench_saxpy_inline", cpp_sources=decl,
                                  cuda_sources=cuda_text, functions=["saxpy_launch"],
                                  extra_include_paths=[self.work], verbose=False)
        if self.kind == "layernorm":
            return ce.load(name="jitop_bench_layernorm", sources=[self.edit_path],
                           extra_include_paths=[self.work], verbose=False)
        # The name and flags bench/lltm_dev.py uses, so that a build made here
        # is the one the LLTM benchmark finds in the same TORCH_EXTENSIONS_DIR.
        sources = sorted(os.path.join(self.work, f) for f in os.listdir(self.work)
                         if f.endswith((".cpp", ".cu")))
        return ce.load(name="lltm_ext", sources=sources, extra_cuda_cflags=["-O3"], verbose=False)

    def inputs(self):
        t = self.torch
        if self.kernel == "saxpy":
            return (t.ones(256, device="cuda"), t.zeros(256, device="cuda"))
        if self.kernel == "layernorm":
            m, n = 4096, 1024  # the op the other systems load: rows of 1024 float32
            g = t.Generator(device="cuda").manual_seed(0)
            x = t.rand(m, n, device="cuda", generator=g) - 0.5
            return (x, t.ones(n, device="cuda"), t.zeros(n, device="cuda"), t.empty_like(x),
                    t.empty(m, device="cuda"), t.empty(m, device="cuda"))
        b, i, s = 16, 32, 128  # the tutorial's shape (DESIGN.md)
        g = t.Generator(device="cuda").manual_seed(0)
        r = lambda *shape: t.rand(*shape, device="cuda", generator=g) - 0.5  # noqa: E731
        return (r(b, i), r(3 * s, s + i), r(3 * s), r(b, s), r(b, s))

    def call(self, mod, args):
        if self.kernel == "saxpy":
            mod.saxpy_launch(args[0], args[1], 2.0)
        elif self.kernel == "layernorm":
            mod.layernorm_forward(*args, 1e-5)
        else:
            mod.forward(*args)

    def run_once(self, mod):
        """One call and a sync; for saxpy y[0] (2 + SAXPY_BIAS)."""
        args = self.inputs()
        self.call(mod, args)
        self.torch.cuda.synchronize()
        return float(args[1][0].item()) if self.kernel == "saxpy" else None


def torch_step(a):
    torch = torch_start()
    ext = Ext(torch, a.ext, a.work)
    k, system = ext.kernel, ext.system
    fn = "load_inline" if a.ext == "saxpy_inline" else "load"
    if a.step in ("cold", "warm"):
        t0 = now_ms()
        mod = ext.build()
        t1 = now_ms()
        ext.run_once(mod)
        t2 = now_ms()
        what = ("cpp_extension.%s, empty TORCH_EXTENSIONS_DIR (build + import)" % fn if a.step == "cold"
                else "cpp_extension.%s of a built extension in a new process" % fn)
        bl.emit(bl.record(a.step, k, system, what, "ms", [t1 - t0]))
        bl.emit(bl.record(a.step, k, system, "first call + sync after %s" % fn, "ms", [t2 - t1], detail=True))
        return
    if a.step == "inproc":
        ext.build()
        per = []
        for _ in range(bl.reps(5, 3, 1)):
            t0 = now_ms()
            ext.build()
            per.append(now_ms() - t0)
        bl.emit(bl.record("inproc", k, system, "cpp_extension.%s again, same sources, same process" % fn,
                          "ms", per))
        return
    if a.step == "edit":
        # The edit writes into --work: never into the sources the tree ships
        # (a copy under bench/out, make bench's default output, is fine).
        work = os.path.realpath(a.work)
        for shipped in ("bench/lltm_ext", "bench/torch_saxpy", "bench/torch_layernorm", "bench/kernels",
                        "kernels"):
            d = os.path.realpath(os.path.join(ROOT, shipped))
            if work == d or work.startswith(d + os.sep):
                raise RuntimeError("--work %s is the tree's own %s: the edit step edits a copy only"
                                   % (a.work, shipped))
        mod = ext.build()
        before = ext.run_once(mod)
        with open(ext.edit_path) as f:
            text = f.read()
        edited, semantic = bl.edit_text(text, 7)
        with open(ext.edit_path, "w") as f:
            f.write(edited)
        t0 = now_ms()
        mod = ext.build()
        got = ext.run_once(mod)
        dt = now_ms() - t0
        if semantic and got != 2.0 + 7:
            raise RuntimeError("after the edit y[0] = %r (before %r), expected 9.0: the new code did not run"
                               % (got, before))
        what = ("edit saved -> cpp_extension.%s again (rebuild + import) + call + sync%s"
                % (fn, " (result checked)" if semantic else " (comment edit)"))
        bl.emit(bl.record("edit", k, system, what, "ms", [dt]))
        return
    if a.step == "launch":
        mod = ext.build()
        args = ext.inputs()
        batch = LAUNCH_BATCH if k == "saxpy" else 20
        per, native = [], []
        x, y = (args[0], args[1]) if k == "saxpy" else (None, None)
        for i in range(-2, bl.reps(100, 30, 3)):
            t0 = now_ms()
            for _ in range(batch):
                ext.call(mod, args)
            t1 = now_ms()
            torch.cuda.synchronize()
            if k == "saxpy":
                t2 = now_ms()
                for _ in range(batch):
                    y.add_(x, alpha=2.0)
                t3 = now_ms()
                torch.cuda.synchronize()
            if i >= 0:
                per.append((t1 - t0) * 1e3 / batch)
                if k == "saxpy":
                    native.append((t3 - t2) * 1e3 / batch)
        what = ("extension saxpy_launch(x, y, a) host cost per call" if k == "saxpy"
                else "extension forward(input, weights, bias, old_h, old_cell) host cost per call "
                     "(B=16, I=32, S=128)")
        bl.emit(bl.record("launch", k, system, what, "us", per))
        if native:
            bl.emit(bl.record("launch", k, "torch", "native y.add_(x, alpha=2) host cost per call "
                              "(a built-in op, for reference)", "us", native, detail=True))
        return
    raise SystemExit("unknown step " + a.step)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="peer", required=True)
    c = sub.add_parser("cupy")
    c.add_argument("--step", required=True, choices=["cold", "warm", "inproc", "launch", "edit"])
    c.add_argument("--src", required=True)
    c.add_argument("--kernel", required=True)
    c.add_argument("--op")
    c.add_argument("--opt", action="append", default=[])
    t = sub.add_parser("torch")
    t.add_argument("--step", required=True, choices=["cold", "warm", "inproc", "launch", "edit"])
    t.add_argument("--ext", required=True, choices=["saxpy", "saxpy_inline", "lltm", "layernorm"])
    t.add_argument("--work", required=True, help="a writable copy of the extension's sources")
    a = ap.parse_args()
    kernel = a.kernel if a.peer == "cupy" else (a.ext if a.ext in ("lltm", "layernorm") else "saxpy")
    system = "cupy" if a.peer == "cupy" else ("torch-load_inline" if a.ext == "saxpy_inline" else "torch-load")
    try:
        if a.peer == "cupy":
            cupy_step(a)
        else:
            torch_step(a)
    except ImportError as e:
        bl.emit(bl.status(a.step, kernel, system, a.step, "missing", "not installed: %s" % e))
        return 0
    except Exception as e:  # a failing step is a result to report, not a crash of the run
        traceback.print_exc()
        bl.emit(bl.status(a.step, kernel, system, a.step, "failed", "%s: %s" % (type(e).__name__, e)))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
