#!/usr/bin/env python3
"""In-place square matmul and softmax: jitop (libjitop.so through ctypes)
against torch (out of place) and a make-torch-inplace-style warp-per-row
kernel (bench/inplace_ref/warp_row.cu, built here with
torch.utils.cpp_extension.load), side by side in one process.

    python3 bench/inplace_bench.py [--out DIR] [--lib build/libjitop.so] [--quick]
                                   [--sections mm,var,sm,paths] [--no-ref]
                                   [--variants 'NAME;NAME'] [--verbose-variants]

Square matmul A (m x n) <- A W, W n x n, for n in {1024, 4096, 8192} and m in
{4096, 65536}: float32 (full float32 on both sides; torch's default leaves
TF32 off for matmul), TF32 (jitop's JITOP_MATMUL_TF32 against torch with
allow_tf32), float16, bfloat16. Time: median over batches of back-to-back
calls between two CUDA events on torch's current stream, jitop's batches and
torch's in turn (7 of each; --quick 3). Extra memory: for
torch, torch.cuda.max_memory_allocated() over what was allocated before the
call (its output, plus any workspace its allocator gives cuBLAS); for jitop,
its own accounting (jitop_inplace_scratch_bytes after the calls) and the
device's free memory before and after the shape's first call (cuMemGetInfo:
scratch plus anything cuBLAS allocates). The warp-per-row kernel takes n up
to 2048 (its register array) and needs no extra memory.

Square matmul variants (--sections var), each a context made under its own
JITOP_INPLACE_* settings: the panel path forced on and off
(JITOP_INPLACE_MM_PANEL=1 / 0) against the automatic rule for float16 and
bfloat16 at n in {512, ..., 4096}, m in {4096, 65536} (and TF32 at the
variant shapes), and the chunked
path's copy-back settings (run with the panel path off) at n 1024 and 4096.

Softmax over rows of N (M x N = 64M elements) in place: GB/s counting one
read and one write of the tensor, against torch.softmax (out of place, the
same bytes) and a device-to-device copy of the tensor (torch's copy_).

stdout: one JSON object per figure, then the tables. Writes
DIR/inplace_results.md.
"""
import argparse
import ctypes
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def emit(**kw):
    print(json.dumps(kw), flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--lib", default=os.path.join(ROOT, "build", "libjitop.so"))
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--no-ref", action="store_true", help="skip building the warp-per-row extension")
    ap.add_argument("--sections", default="mm,var,sm,paths",
                    help="comma-separated: mm (matmul), var (matmul variants), sm (softmax), paths (softmax paths)")
    ap.add_argument("--variants", default=None,
                    help="semicolon-separated names of the matmul variants to run (default: all)")
    ap.add_argument("--verbose-variants", action="store_true",
                    help="JITOP_VERBOSE=1 for the matmul variants' contexts (their log says whether the SM partition runs)")
    ap.add_argument("--paths", default=None,
                    help="comma-separated softmax paths for the paths table (default: all)")
    args = ap.parse_args()
    import torch

    if not torch.cuda.is_available():
        emit(area="kernel", kernel="inplace", status="skipped", reason="no CUDA driver")
        return 0
    lib = ctypes.CDLL(args.lib)
    vp, i64, f32, ci, cu = ctypes.c_void_p, ctypes.c_int64, ctypes.c_float, ctypes.c_int, ctypes.c_uint
    lib.jitop_ctx_create.argtypes = [vp, ctypes.POINTER(vp)]
    lib.jitop_ctx_destroy.argtypes = [vp]
    lib.jitop_errmsg.restype = ctypes.c_char_p
    lib.jitop_errmsg.argtypes = [vp]
    lib.jitop_square_matmul_inplace.argtypes = [vp, ci, i64, i64, vp, vp, ci, cu, vp]
    lib.jitop_softmax_inplace.argtypes = [vp, ci, i64, i64, vp, f32, i64, vp]
    lib.jitop_inplace_scratch_bytes.argtypes = [vp]
    lib.jitop_inplace_scratch_bytes.restype = ctypes.c_size_t
    lib.jitop_square_matmul_scratch_bound.argtypes = [ci, i64]
    lib.jitop_square_matmul_scratch_bound.restype = ctypes.c_size_t
    lib.jitop_inplace_release.argtypes = [vp]
    torch.cuda.init()
    torch.zeros(1, device="cuda")  # the primary context, which jitop then shares
    ctx = vp()
    if lib.jitop_ctx_create(None, ctypes.byref(ctx)) != 0:
        log("jitop_ctx_create failed:", lib.jitop_errmsg(None))
        return 1
    dev = torch.cuda.get_device_properties(0)
    log(f"device {dev.name}, torch {torch.__version__}, lib {args.lib}")
    DT = {torch.float32: 0, torch.float16: 1, torch.bfloat16: 2}

    def stream():
        return torch.cuda.current_stream().cuda_stream

    def check(rc, what):
        if rc != 0:
            raise RuntimeError(what + ": " + lib.jitop_errmsg(None).decode())

    def jt_mm(a, w, tf32=False):
        check(lib.jitop_square_matmul_inplace(ctx, DT[a.dtype], a.shape[0], a.shape[1], a.data_ptr(),
                                              w.data_ptr(), 0, 1 if tf32 else 0, stream()),
              "jitop_square_matmul_inplace")

    def jt_sm(x):
        check(lib.jitop_softmax_inplace(ctx, DT[x.dtype], x.shape[0], x.shape[1], x.data_ptr(), 1.0, 0,
                                        stream()), "jitop_softmax_inplace")

    def time_ms(fn, target_ms=300.0):
        fn()
        torch.cuda.synchronize()
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        e.synchronize()
        one = max(s.elapsed_time(e), 1e-3)
        per = max(1, min(200, int(target_ms / 5 / one)))
        batches = 3 if args.quick else 5
        ts = []
        for _ in range(batches):
            s.record()
            for _ in range(per):
                fn()
            e.record()
            e.synchronize()
            ts.append(s.elapsed_time(e) / per)
        ts.sort()
        return ts[len(ts) // 2]

    def time_pair(f, g, target_ms=300.0):
        # f and g in alternating batches, so that clock and heat drift reach
        # both alike: (f's median ms, g's)
        pers, out = [], ([], [])
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        for fn in (f, g):
            fn()
            torch.cuda.synchronize()
            s.record()
            fn()
            e.record()
            e.synchronize()
            pers.append(max(1, min(200, int(target_ms / 10 / max(s.elapsed_time(e), 1e-3)))))
        for _ in range(3 if args.quick else 7):
            for i, fn in enumerate((f, g)):
                s.record()
                for _ in range(pers[i]):
                    fn()
                e.record()
                e.synchronize()
                out[i].append(s.elapsed_time(e) / pers[i])
        return tuple(sorted(ts)[len(ts) // 2] for ts in out)

    one = torch.zeros(1, 1, device="cuda")

    def make_state(c):
        # the in-place state reads its JITOP_INPLACE_* variables when the
        # context's first in-place call makes it: make it now
        check(lib.jitop_softmax_inplace(c, 0, 1, 1, one.data_ptr(), 1.0, 0, stream()), "jitop_softmax_inplace")

    sections = set(args.sections.split(","))
    ref = None
    if not args.no_ref and "mm" in sections:
        t0 = time.time()
        try:
            from torch.utils.cpp_extension import load
            os.environ.setdefault("TORCH_CUDA_ARCH_LIST", "9.0")
            ref = load(name="warp_row_ref", sources=[os.path.join(HERE, "inplace_ref", "warp_row.cu")],
                       extra_cuda_cflags=["-O3"], verbose=False)
            log(f"warp-per-row extension built in {time.time() - t0:.1f} s")
        except Exception as ex:  # reported, not hidden: the table says n/a
            log("warp-per-row extension failed to build:", ex)

    out_md = []
    # ---------------------------------------------------------------- matmul
    out_md.append("## Square matmul in place, A (m x n) <- A W\n")
    out_md.append("| dtype | m | n | jitop ms | torch.matmul ms | jitop / torch speed | warp-per-row ms |"
                  " jitop scratch MiB (bound) | jitop device delta MiB | torch extra MiB | A MiB |")
    out_md.append("|---|---|---|---|---|---|---|---|---|---|---|")
    kinds = [("float32", torch.float32, False), ("tf32", torch.float32, True),
             ("float16", torch.float16, False), ("bfloat16", torch.bfloat16, False)]
    ns = [1024, 4096, 8192]
    ms = [4096, 65536]
    for kname, dt, tf32 in (kinds if "mm" in sections else []):
        torch.backends.cuda.matmul.allow_tf32 = tf32
        for n in ns:
            for m in ms:
                es = torch.tensor([], dtype=dt).element_size()
                a = torch.randn(m, n, device="cuda", dtype=dt)
                w = (torch.randn(n, n, device="cuda", dtype=torch.float32) / n ** 0.5).to(dt)
                # correctness against torch on a copy (the first rows)
                a0 = a[:256].clone()
                want = torch.matmul(a0.double(), w.double())
                lib.jitop_inplace_release(ctx)
                torch.cuda.synchronize()
                free0 = torch.cuda.mem_get_info()[0]
                jt_mm(a0, w, tf32)
                jt_mm(a, w, tf32)
                torch.cuda.synchronize()
                delta = (free0 - torch.cuda.mem_get_info()[0]) / 2 ** 20
                err = ((a0.double() - want).norm() / want.norm()).item()
                a.copy_(torch.randn(m, n, device="cuda", dtype=dt))
                jt_mm(a, w, tf32)
                scratch = lib.jitop_inplace_scratch_bytes(ctx) / 2 ** 20
                bound = lib.jitop_square_matmul_scratch_bound(DT[dt], n) / 2 ** 20
                # torch, out of place
                del a0, want
                torch.cuda.synchronize()
                torch.cuda.reset_peak_memory_stats()
                base = torch.cuda.memory_allocated()
                o = torch.matmul(a, w)
                torch.cuda.synchronize()
                t_extra = (torch.cuda.max_memory_allocated() - base) / 2 ** 20
                del o

                def tmm():
                    torch.matmul(a, w)
                # side by side: jitop's and torch's batches in turn
                t_jt, t_torch = time_pair(lambda: jt_mm(a, w, tf32), tmm)
                t_ref = None
                if ref is not None and n <= 2048 and not tf32:
                    t_ref = time_ms(lambda: ref.warp_row_matmul_(a, w, False), target_ms=50.0)
                ratio = t_torch / t_jt
                emit(area="kernel", kernel="square_matmul_inplace", dtype=kname, m=m, n=n,
                     jitop_ms=t_jt, torch_ms=t_torch, warp_row_ms=t_ref, speed_vs_torch=ratio,
                     jitop_scratch_mib=scratch, scratch_bound_mib=bound, jitop_device_delta_mib=delta,
                     torch_extra_mib=t_extra, a_mib=m * n * es / 2 ** 20, rel_err=err)
                out_md.append(f"| {kname} | {m} | {n} | {t_jt:.3f} | {t_torch:.3f} | {ratio:.2f} | "
                              f"{'n/a' if t_ref is None else f'{t_ref:.2f}'} | {scratch:.0f} ({bound:.0f}) | "
                              f"{delta:.0f} | {t_extra:.0f} | {m * n * es / 2 ** 20:.0f} |")
                log(out_md[-1], f"rel_err {err:.2e}")
                del a, w
                torch.cuda.empty_cache()
    torch.backends.cuda.matmul.allow_tf32 = False
    lib.jitop_inplace_release(ctx)

    # the copy-back variants, each in a context of its own (the settings are
    # read from the environment when a context's in-place state is made):
    # chunk size, the copy stream, scratch buffers in turn, and SMs kept from
    # cuBLAS (its SM count target) for jitop's copy kernel
    # (JITOP_INPLACE_MM_COPY_SMS). "chunks": the products of one call, as
    # src/ops/ip_plan.c plans them (one chunk: no copy stream, so no variant
    # but the chunk size applies). tests/gpu/test_inplace.c checks that the
    # SM partition runs where planned; --verbose-variants makes the variant
    # contexts verbose, whose log says so once per context. Each variant's
    # result is checked against torch.matmul (rel_err).
    # The panel path (JITOP_INPLACE_MM_PANEL: a persistent wgmma kernel
    # writing the product straight into A, float16/bfloat16 on compute
    # capability 9.0, n % 256 == 0 and 256 <= n <= 4096): "panel on" forces
    # it where eligible, "panel off" never, "default" is the automatic rule.
    # The copy-back variants are the chunked path's settings: they run with
    # the panel path off, so that the rule cannot swap the path under them.
    out_md.append("\n## Square matmul variants: the panel path, chunk size, copy overlap, buffers, "
                  "SMs kept for the copy\n")
    out_md.append("Variants (each a context of its own, made under these settings; every other "
                  "JITOP_INPLACE_* unset):\n")
    vvars = ("JITOP_INPLACE_OVERLAP", "JITOP_INPLACE_CHUNK_MB", "JITOP_INPLACE_MM_BUFS",
             "JITOP_INPLACE_MM_COPY_SMS", "JITOP_INPLACE_MM_PANEL")
    variants = [("default (auto: panel rule, else 32 MiB x 2)", {}),
                ("panel off", {"JITOP_INPLACE_MM_PANEL": "0"}),
                ("panel on", {"JITOP_INPLACE_MM_PANEL": "1"}),
                ("no overlap (32 MiB x 1)", {"JITOP_INPLACE_OVERLAP": "0"}),
                ("copy_sms 4", {"JITOP_INPLACE_MM_COPY_SMS": "4"}),
                ("copy_sms 8", {"JITOP_INPLACE_MM_COPY_SMS": "8"}),
                ("copy_sms 16", {"JITOP_INPLACE_MM_COPY_SMS": "16"}),
                ("copy_sms 32", {"JITOP_INPLACE_MM_COPY_SMS": "32"}),
                ("copy_sms 8, 4 MiB x 2", {"JITOP_INPLACE_MM_COPY_SMS": "8", "JITOP_INPLACE_CHUNK_MB": "4"}),
                ("copy_sms 8, 8 MiB x 2", {"JITOP_INPLACE_MM_COPY_SMS": "8", "JITOP_INPLACE_CHUNK_MB": "8"}),
                ("copy_sms 8, 16 MiB x 2", {"JITOP_INPLACE_MM_COPY_SMS": "8", "JITOP_INPLACE_CHUNK_MB": "16"}),
                ("bufs 3 (32 MiB x 3)", {"JITOP_INPLACE_MM_BUFS": "3"}),
                ("copy_sms 8, bufs 3", {"JITOP_INPLACE_MM_COPY_SMS": "8", "JITOP_INPLACE_MM_BUFS": "3"}),
                ("copy_sms 8, 16 MiB x 3", {"JITOP_INPLACE_MM_COPY_SMS": "8", "JITOP_INPLACE_CHUNK_MB": "16",
                                            "JITOP_INPLACE_MM_BUFS": "3"}),
                ("copy_sms 16, 8 MiB x 4", {"JITOP_INPLACE_MM_COPY_SMS": "16", "JITOP_INPLACE_CHUNK_MB": "8",
                                            "JITOP_INPLACE_MM_BUFS": "4"})]
    # the chunked path's settings: with the panel path off
    variants = [(name, env if name.startswith("default") or "JITOP_INPLACE_MM_PANEL" in env
                 else dict(env, JITOP_INPLACE_MM_PANEL="0")) for name, env in variants]
    if args.variants:
        keep = [v.strip() for v in args.variants.split(";") if v.strip()]
        variants = [v for v in variants if v[0] in keep]
    for vname, env in variants:
        out_md.append(f"- {vname}: " + (", ".join(f"{k}={v}" for k, v in env.items()) or "nothing set"))
    out_md.append("\nchunks: the chunked path's products per call; \"panel\": the panel path "
                  "(JITOP_INPLACE_MM_PANEL=1 on an eligible shape of this device); \"N or panel\": "
                  "the automatic rule picks.\n")
    out_md.append("| dtype | m | n | variant | chunks | jitop ms | torch.matmul ms | jitop / torch | scratch MiB |")
    out_md.append("|---|---|---|---|---|---|---|---|---|")
    cc90 = torch.cuda.get_device_capability(0) == (9, 0)

    def panel_eligible(dt, n, tf32):
        # src/ops/ip_plan.c's rule (torch's allocations are 16-byte aligned):
        # 16-bit in tiles of 256 columns, TF32 in tiles of 128
        tile = 256 if dt in (torch.float16, torch.bfloat16) else 128 if tf32 else 0
        return cc90 and tile > 0 and n % tile == 0 and 256 <= n <= 4096

    vctx = {}

    def chunks_of(env, m, row):
        # src/ops/ip_plan.c's plan: whole rows of the chunk, all m when it fits,
        # a multiple of 8 rows when the SM partition runs
        rpc = max(1, int(env.get("JITOP_INPLACE_CHUNK_MB", "32")) * 2 ** 20 // row)
        if m <= rpc:
            return 1
        if int(env.get("JITOP_INPLACE_MM_COPY_SMS", "0")) > 0 and env.get("JITOP_INPLACE_OVERLAP") != "0" \
                and rpc >= 8:
            rpc -= rpc % 8
        return -(-m // rpc)

    if "var" in sections:
        for vname, env in variants:
            saved = {k: os.environ.get(k) for k in vvars + ("JITOP_VERBOSE",)}
            for k in vvars:
                os.environ.pop(k, None)
            os.environ.update(env)
            if args.verbose_variants:
                os.environ["JITOP_VERBOSE"] = "1"
            c2 = vp()
            check(lib.jitop_ctx_create(None, ctypes.byref(c2)), "jitop_ctx_create")
            make_state(c2)
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
            vctx[vname] = c2
    vshapes = (("float16", torch.float16, False, 1024, 4096), ("float16", torch.float16, False, 1024, 65536),
               ("bfloat16", torch.bfloat16, False, 1024, 4096), ("bfloat16", torch.bfloat16, False, 1024, 65536),
               ("tf32", torch.float32, True, 1024, 4096), ("tf32", torch.float32, True, 1024, 65536),
               ("float32", torch.float32, False, 1024, 4096), ("float32", torch.float32, False, 1024, 65536),
               ("float16", torch.float16, False, 4096, 4096))
    # the panel path against the chunked one over the panel's n: these shapes
    # under the three panel variants only (all of them: ~2 minutes more)
    pvars = [v for v in vctx if v.startswith("default") or v in ("panel off", "panel on")]
    vshapes = [(s, list(vctx)) for s in vshapes]
    if pvars:
        have = {(d, n, m) for _, d, _, n, m in (s for s, _ in vshapes)}
        vshapes += [((kname, dt, False, n, m), pvars)
                     for kname, dt in (("float16", torch.float16), ("bfloat16", torch.bfloat16))
                     for n in (512, 768, 1024, 1536, 2048, 4096) for m in (4096, 65536)
                     if (dt, n, m) not in have]
    for (kname, dt, tf32, n, m), vnames in (vshapes if "var" in sections else ()):
        torch.backends.cuda.matmul.allow_tf32 = tf32
        a = torch.randn(m, n, device="cuda", dtype=dt)
        w = (torch.randn(n, n, device="cuda", dtype=torch.float32) / n ** 0.5).to(dt)
        want = torch.matmul(a, w).float()
        t_torch = time_ms(lambda: torch.matmul(a, w))
        for vname in vnames:
            c2 = vctx[vname]
            venv = dict(variants)[vname]
            nch = chunks_of(venv, m, n * a.element_size())
            if panel_eligible(dt, n, tf32) and venv.get("JITOP_INPLACE_MM_PANEL") == "1":
                nch = "panel"
            elif panel_eligible(dt, n, tf32) and "JITOP_INPLACE_MM_PANEL" not in venv:
                nch = f"{nch} or panel"

            def jt2(x=a, c2=c2):
                check(lib.jitop_square_matmul_inplace(c2, DT[dt], m, n, x.data_ptr(), w.data_ptr(), 0,
                                                      1 if tf32 else 0, stream()),
                      "jitop_square_matmul_inplace")
            # correctness on a copy (every row: a wrong chunk would show)
            a1 = a.clone()
            jt2(a1)
            torch.cuda.synchronize()
            err = ((a1.float() - want).norm() / want.norm()).item()
            del a1
            t = time_ms(jt2)
            sc = lib.jitop_inplace_scratch_bytes(c2) / 2 ** 20
            emit(area="kernel", kernel="square_matmul_inplace_variant", dtype=kname, m=m, n=n, variant=vname,
                 chunks=nch, jitop_ms=t, torch_ms=t_torch, scratch_mib=sc, rel_err=err)
            out_md.append(f"| {kname} | {m} | {n} | {vname} | {nch} | {t:.3f} | {t_torch:.3f} | {t_torch / t:.2f} | "
                          f"{sc:.1f} |")
            log(out_md[-1], f"rel_err {err:.2e}")
        for c2 in vctx.values():
            lib.jitop_inplace_release(c2)
        del a, w, want
        torch.cuda.empty_cache()
    torch.backends.cuda.matmul.allow_tf32 = False
    for c2 in vctx.values():
        lib.jitop_ctx_destroy(c2)

    # --------------------------------------------------------------- softmax
    out_md.append("\n## Softmax in place over rows of N (M x N = 64M elements), GB/s (read + write)\n")
    out_md.append("| dtype | N | jitop GB/s | torch.softmax GB/s | D2D copy GB/s | jitop / copy |")
    out_md.append("|---|---|---|---|---|---|")
    total = 64 * 1024 * 1024
    for dt in ((torch.float32, torch.float16, torch.bfloat16) if "sm" in sections else ()):
        for n in (128, 256, 1024, 4096, 8192, 16384, 32768, 65536, 131072):
            m = total // n
            x = torch.randn(m, n, device="cuda", dtype=dt) * 4
            x0 = x[:64].clone()
            want = torch.softmax(x0.double(), dim=-1)
            jt_sm(x0)
            err = (x0.double() - want).abs().max().item()
            y = torch.empty_like(x)
            nbytes = 2 * x.numel() * x.element_size()
            t_jt = time_ms(lambda: jt_sm(x))
            t_torch = time_ms(lambda: torch.softmax(x, -1))
            t_copy = time_ms(lambda: y.copy_(x))
            g = lambda t: nbytes / t / 1e6
            emit(area="kernel", kernel="softmax_inplace", dtype=str(dt).split(".")[-1], N=n, M=m,
                 jitop_gbs=g(t_jt), torch_gbs=g(t_torch), copy_gbs=g(t_copy), max_abs_err=err)
            out_md.append(f"| {str(dt).split('.')[-1]} | {n} | {g(t_jt):.0f} | {g(t_torch):.0f} | "
                          f"{g(t_copy):.0f} | {t_copy / t_jt:.2f} |")
            log(out_md[-1], f"max_abs_err {err:.2e}")
            del x, y, x0, want
            torch.cuda.empty_cache()

    # long rows: each softmax path forced, each in a context of its own
    out_md.append("\n## Softmax paths for long rows (JITOP_INPLACE_SOFTMAX), GB/s\n")
    # (a path that cannot run a shape falls back to the automatic choice:
    # block over 128 bytes a thread, cluster under 64 KiB rows, split outside
    # 16 KiB (split256: 8 KiB, split128: 4 KiB) to 512 KiB rows (256 KiB,
    # 128 KiB), see src/ops/inplace.c; lean, lean256: split and split256 with
    # softmax_lean's arithmetic; leanblock: block with it; lean2, lean2_256,
    # lean2_128, lean2block: split, split256, split128, block with
    # softmax_lean2's, each exponential once)
    pnames = ("auto", "block", "cluster", "long", "split", "split256", "split128", "lean",
              "lean256", "leanblock", "lean2", "lean2_256", "lean2_128", "lean2block")
    if args.paths:
        pnames = tuple(p for p in args.paths.split(",") if p)
    out_md.append("| dtype | N | " + " | ".join(pnames) + " | copy | best / copy |")
    out_md.append("|---" * (len(pnames) + 4) + "|")
    pctx = {}
    for pname in (pnames if "paths" in sections else ()):
        saved = os.environ.get("JITOP_INPLACE_SOFTMAX")
        if pname != "auto":
            os.environ["JITOP_INPLACE_SOFTMAX"] = pname
        c2 = vp()
        check(lib.jitop_ctx_create(None, ctypes.byref(c2)), "jitop_ctx_create")
        make_state(c2)
        pctx[pname] = c2
        if saved is None:
            os.environ.pop("JITOP_INPLACE_SOFTMAX", None)
        else:
            os.environ["JITOP_INPLACE_SOFTMAX"] = saved
    for dt in ((torch.float32, torch.float16, torch.bfloat16) if "paths" in sections else ()):
        for n in (16384, 24576, 32768, 40000, 49152, 65536, 131072):
            m = total // n
            x = torch.randn(m, n, device="cuda", dtype=dt) * 4
            y = torch.empty_like(x)
            nbytes = 2 * x.numel() * x.element_size()
            xs = x[:8].clone()
            want = torch.softmax(xs.double(), dim=-1)
            row, errs = [], []
            for pname, c2 in pctx.items():
                xc = xs.clone()
                check(lib.jitop_softmax_inplace(c2, DT[dt], 8, n, xc.data_ptr(), 1.0, 0, stream()),
                      "jitop_softmax_inplace")
                errs.append((xc.double() - want).abs().max().item())

                def f(c2=c2):
                    check(lib.jitop_softmax_inplace(c2, DT[dt], m, n, x.data_ptr(), 1.0, 0, stream()),
                          "jitop_softmax_inplace")
                row.append(nbytes / time_ms(f) / 1e6)
            cp = nbytes / time_ms(lambda: y.copy_(x)) / 1e6
            name = str(dt).split(".")[-1]
            emit(area="kernel", kernel="softmax_inplace_paths", dtype=name, N=n,
                 **{f"{k}_gbs": v for k, v in zip(pctx, row)}, copy_gbs=cp,
                 **{f"{k}_max_abs_err": v for k, v in zip(pctx, errs)})
            out_md.append(f"| {name} | {n} | " + " | ".join(f"{v:.0f}" for v in row) +
                          f" | {cp:.0f} | {max(row) / cp:.2f} |")
            log(out_md[-1], "max_abs_err " + " ".join(f"{k} {v:.1e}" for k, v in zip(pctx, errs)))
            del x, y, xs, want
            torch.cuda.empty_cache()
    for c2 in pctx.values():
        lib.jitop_ctx_destroy(c2)

    lib.jitop_ctx_destroy(ctx)
    text = "\n".join(out_md) + "\n"
    print(text)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "inplace_results.md"), "w") as f:
        f.write(f"Device: {dev.name}; torch {torch.__version__}\n\n" + text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
