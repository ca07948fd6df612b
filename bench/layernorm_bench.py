#!/usr/bin/env python3
"""LayerNorm: jitop (libjitop.so through ctypes) against
torch.nn.functional.layer_norm, side by side in one process, with a
device-to-device copy of the same bytes as the bandwidth ceiling.

    python3 bench/layernorm_bench.py [--out DIR] [--lib build/libjitop.so]
    python3 bench/layernorm_bench.py --sweep [--odd] [--rules warps,pow2] [--out DIR]
    python3 bench/layernorm_bench.py --sweep --n 24576,65536 \
        --variants 'base=;fit=JITOP_LN_PLAN=fwd_cluster_tpr=512,fwd_fit=1'

Shapes: N in {768, 1024, 4096, 8192, 32768} with M*N = 64M elements, for
float32, float16 and bfloat16. --sweep: every multiple of 256 up to 8192,
then every 1024 to 16384, every 2048 to 32768 and every 4096 to 65536 (56
row lengths, M*N ~ 64M); --sweep --odd: row lengths that the 16-byte vector
does not divide (odd N, and 16-bit N that are 2 or 4 mod 8), which take
kernels/layernorm.cu's rows of any alignment, 255 to 65535 (files
layernorm_sweep_odd.*); each (rule, dtype, N) gets a context of its own
with a cache directory of its own, prewarmed first by parallel `jitop build
--op` processes, so that no compile lands in the timed loop and no shape's
instances are folded into another's. --rules times jitop once per
threads-per-row rule (JITOP_LN_THREADS) in the same run, for an A/B;
--variants generalizes it: each variant is a name and a set of environment
assignments (bench/ln_variants.py), e.g. a JITOP_LN_PLAN, applied when its
contexts are created and to its prewarms (a cache of its own per variant and
shape); every variant is checked against float64 before it is timed, and
one that fails a shape (wrong result or an error) is reported and left out
of that shape's figures. Bytes counted: forward x read + y written,
backward x and dy read + dx written (gamma, beta, their gradients and the
statistics are under 0.1% and left out). Each shape is first checked against
torch in float64; then each figure is the median over batches of the mean of
back-to-back calls between two CUDA events on torch's current stream, each
batch queued behind a busy-wait kernel so that the events time the GPU and
not the host's issuing of the first call (--timing plain: without the gate),
and the systems' batches (every variant, the copy, torch) taken in turn (the
tensors, 256 MiB each for float32, are far larger than the 50 MiB L2, so no
rotation is needed). jitop's backward time includes its dgamma/dbeta
reduction kernel; torch's is aten.native_layer_norm_backward (the kernels
F.layer_norm's autograd runs, without the autograd bookkeeping).

stdout: one JSON object per figure (bench/README convention), then a table.
Writes DIR/layernorm_results.md and DIR/layernorm.png (--sweep:
DIR/layernorm_sweep.md, DIR/layernorm_sweep.json, DIR/layernorm_sweep.png:
GB/s over N, one line per system and dtype, the copy as the ceiling).
"""
import argparse
import concurrent.futures
import ctypes
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ln_variants  # noqa: E402


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def emit(**kw):
    print(json.dumps(kw), flush=True)


HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
PERF_N = [768, 1024, 4096, 8192, 32768]
SWEEP_N = (list(range(256, 8193, 256)) + list(range(9216, 16385, 1024)) +
           list(range(18432, 32769, 2048)) + list(range(36864, 65537, 4096)))
# Rows the 16-byte vector does not divide: odd hidden sizes near the usual
# ones, primes, and 16-bit rows 2, 4 or 6 elements past a multiple of 8.
ODD_N = [255, 385, 769, 1023, 1025, 1030, 1537, 2049, 2052, 3071, 3079, 4097, 4100, 4102, 5001,
         6145, 7919, 8191, 10001, 12289, 14999, 16383, 20001, 24577, 28673, 32769, 40001, 49153,
         57347, 65535]
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
            ax.bar([i - 0.2 for i in xs], [r[f"jt_{key}"] or 0 for r in rows], 0.4, label="jitop")
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


def write_sweep_chart(rows, rules, device_name, path):
    """GB/s over N: forward and backward panels, one line per system and
    dtype (jitop per rule), the copy of the same run as the ceiling."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, axes = plt.subplots(2, 3, figsize=(18, 9), sharex=True)
        colors = {"copy": "black", "torch": "tab:orange"}
        palette = ["tab:blue", "tab:green", "tab:purple", "tab:red", "tab:brown", "tab:pink",
                   "tab:gray", "tab:olive", "tab:cyan"]
        for col, dt in enumerate(("float32", "float16", "bfloat16")):
            mine = sorted((r for r in rows if r["dtype"] == dt), key=lambda r: r["N"])
            if not mine:
                continue
            ns = [r["N"] for r in mine]
            for row_i, key in enumerate(("fwd", "bwd")):
                ax = axes[row_i][col]
                ax.plot(ns, [r["copy"] for r in mine], color=colors["copy"], lw=1, label="D2D copy")
                ax.plot(ns, [r[f"torch_{key}"] for r in mine], color=colors["torch"], marker=".",
                        ms=3, lw=1, label="F.layer_norm")
                for k, rule in enumerate(rules):
                    ax.plot(ns, [r.get(f"jt_{key}_{rule}") or float("nan") for r in mine],
                            color=palette[k % len(palette)],
                            marker=".", ms=3, lw=1.2 if k == 0 else 0.8,
                            ls="-" if k == 0 else "--", label=f"jitop ({rule})")
                ax.set_xscale("log", base=2)
                ax.set_title(f"{dt} {'forward' if key == 'fwd' else 'backward'}")
                ax.set_ylabel("GB/s")
                ax.grid(True, alpha=0.3)
                if row_i == 1:
                    ax.set_xlabel("N (row length), M*N ~ 64M")
                ax.legend(fontsize=7, loc="lower right")
        fig.suptitle(f"LayerNorm over row length ({device_name})")
        fig.tight_layout()
        fig.savefig(path, dpi=100)
    except Exception as ex:  # the table is the result; the chart is a view of it
        log("chart not written:", ex)


def prewarm(cli, cache_base, variants, shapes, jobs):
    """One `jitop build --op` process per (variant, dtype, N), jobs at a
    time: the compiles of the sweep on every core, before anything is
    timed."""
    short = {"float32": "f32", "float16": "f16", "bfloat16": "bf16"}
    rules = [name for name, _ in variants]

    def one(item):
        rule, dt, n = item
        env = dict(ln_variants.env_of(variants, rule),
                   JITOP_CACHE_DIR=os.path.join(cache_base, rule, f"{dt}_{n}"))
        r = subprocess.run([cli, "build", "--op", f"layernorm:{short[dt]}:{n}"], env=env,
                           capture_output=True, text=True)
        return item, r.returncode, (r.stdout + r.stderr).strip()

    items = [(rule, dt, n) for rule in rules for dt, n in shapes]
    failed = 0
    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as ex:
        for (rule, dt, n), rc, out in ex.map(one, items):
            if rc != 0:
                failed += 1
                log(f"prewarm {rule} {dt} {n} failed: {out}")
    return failed


def pct(r, key):
    """r[key] as a percentage of the copy, or None when that variant failed."""
    v = r.get(key)
    return None if v is None else 100 * v / r["copy"]


def fmt(v, spec, none="fail"):
    return none if v is None else format(v, spec)


def ab_table(rows, rules):
    """One line per (shape, variant): GB/s, % of the copy and speedup over
    torch for each pass; the best variant of a shape and pass in bold."""
    lines = ["| dtype | N | variant | fwd GB/s | fwd % of copy | fwd vs torch | bwd GB/s | "
             "bwd % of copy | bwd vs torch |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        best = {}
        for key in ("fwd", "bwd"):
            got = [(r.get(f"jt_{key}_{k}"), k) for k in rules if r.get(f"jt_{key}_{k}") is not None]
            best[key] = max(got)[1] if got else None
        for k in rules:
            cells = []
            for key in ("fwd", "bwd"):
                v = r.get(f"jt_{key}_{k}")
                p = fmt(pct(r, f"jt_{key}_{k}"), ".0f") + ("%" if v is not None else "")
                if v is not None and best[key] == k and len(rules) > 1:
                    p = f"**{p}**"
                cells += [fmt(v, ".0f"), p, fmt(None if v is None else v / r[f"torch_{key}"], ".2f") +
                          ("x" if v is not None else "")]
            lines.append(f"| {r['dtype']} | {r['N']} | {k} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def report(rows, rules, sweep, out, device_name, torch_version, mode, batches, per, cmd, variants,
           timing):
    """The table (and with several variants or --sweep, the worst case of
    each dtype and variant against the issue's goals; with several variants
    an A/B table of every shape and variant) to stdout and DIR, the chart;
    sweep: the sweep files' base name ("" without --sweep)."""
    os.makedirs(out, exist_ok=True)
    head = ("| dtype | M x N | copy GB/s | fwd jitop GB/s | fwd torch GB/s | fwd jitop % of copy | "
            "fwd speedup | bwd jitop GB/s | bwd torch GB/s | bwd jitop % of copy | bwd speedup |")
    lines = [f"First variant ({rules[0]}):\n", head, "|" + "---|" * 11]
    for r in rows:
        jf, jb = r.get("jt_fwd"), r.get("jt_bwd")
        lines.append(f"| {r['dtype']} | {r['M']} x {r['N']} | {r['copy']:.0f} | {fmt(jf, '.0f')} | "
                     f"{r['torch_fwd']:.0f} | {fmt(pct(r, 'jt_fwd'), '.0f')}% | "
                     f"{fmt(None if jf is None else jf / r['torch_fwd'], '.2f')}x | {fmt(jb, '.0f')} | "
                     f"{r['torch_bwd']:.0f} | {fmt(pct(r, 'jt_bwd'), '.0f')}% | "
                     f"{fmt(None if jb is None else jb / r['torch_bwd'], '.2f')}x |")
    table = "\n".join(lines)
    if len(rules) > 1:
        table = ab_table(rows, rules) + "\n\n" + table
    print(table)
    summary = []
    if rows:
        for dtn in sorted({r["dtype"] for r in rows}):
            mine = [r for r in rows if r["dtype"] == dtn]
            for rule in rules:
                ok = [r for r in mine if r.get(f"jt_fwd_{rule}") is not None and
                      r.get(f"jt_bwd_{rule}") is not None]
                if not ok:
                    summary.append(f"| {dtn} | {rule} | fail | fail | fail | fail |")
                    continue
                fw = [pct(r, f"jt_fwd_{rule}") for r in ok]
                bw = [pct(r, f"jt_bwd_{rule}") for r in ok]
                bw512 = [pct(r, f"jt_bwd_{rule}") for r in ok if r["N"] >= 512]
                sf = min(r[f"jt_fwd_{rule}"] / r["torch_fwd"] for r in ok)
                sb = min(r[f"jt_bwd_{rule}"] / r["torch_bwd"] for r in ok)
                worst_f = min(ok, key=lambda r: r[f"jt_fwd_{rule}"] / r["copy"])
                worst_b = min(ok, key=lambda r: r[f"jt_bwd_{rule}"] / r["copy"])
                failed = len(mine) - len(ok)
                summary.append(f"| {dtn} | {rule} | {min(fw):.0f}% (N={worst_f['N']}) | "
                               f"{min(bw512) if bw512 else float('nan'):.0f}% "
                               f"(N={worst_b['N']}: {min(bw):.0f}%) | {sf:.2f}x | {sb:.2f}x"
                               f"{f' ({failed} shapes failed)' if failed else ''} |")
    stitle = ("| dtype | variant | fwd % of copy, worst (N) | bwd % of copy, worst N >= 512 (worst N) | "
              "fwd vs torch, worst | bwd vs torch, worst |\n|---|---|---|---|---|---|\n")
    name = sweep if sweep else "layernorm_results"
    with open(os.path.join(out, name + ".md"), "w") as fh:
        fh.write(f"# LayerNorm: jitop vs torch ({device_name}, torch {torch_version})\n\n")
        how = ("queued behind a busy-wait, so that the events time the GPU alone" if timing == "gated"
               else "timed as they are issued")
        fh.write(f"`{cmd}` (mode {mode}: median of {batches} batches of {per} back-to-back calls, "
                 f"CUDA events, each batch {how}; the systems' batches taken in turn). GB/s: forward x read + y written, backward x, dy read + dx written; "
                 "copy: tensor.copy_ of the forward's bytes, same run.\n\n")
        if len(rules) > 1 or any(e for _, e in variants):
            fh.write(f"Variants: {ln_variants.describe(variants)}\n\n")
        if summary:
            fh.write(stitle + "\n".join(summary) + "\n\n")
        fh.write(table + "\n")
    if summary:
        print(stitle + "\n".join(summary))
    if sweep:
        with open(os.path.join(out, sweep + ".json"), "w") as fh:
            json.dump({"device": device_name, "torch": torch_version, "rules": rules,
                       "variants": [{"name": n, "env": e} for n, e in variants], "rows": rows}, fh)
        write_sweep_chart(rows, rules, device_name, os.path.join(out, sweep + ".png"))
    else:
        write_chart(rows, device_name, os.path.join(out, "layernorm.png"))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("JITOP_BENCH_OUT") or os.path.join(HERE, "out"))
    build = os.environ.get("JITOP_BUILD") or os.path.join(ROOT, "build")
    ap.add_argument("--lib", default=os.path.join(build, "libjitop.so"))
    ap.add_argument("--cli", default=os.path.join(build, "jitop"))
    ap.add_argument("--sweep", action="store_true", help="every row length of the sweep")
    ap.add_argument("--odd", action="store_true",
                    help="with --sweep: the row lengths the 16-byte vector does not divide")
    ap.add_argument("--rules", default="warps",
                    help="threads-per-row rules to time jitop with (JITOP_LN_THREADS), comma-separated")
    ap.add_argument("--variants", default="",
                    help="named sets of environment assignments to time jitop with, "
                         "'NAME=KEY=VALUE ...;NAME2=...' (bench/ln_variants.py); overrides --rules")
    ap.add_argument("--n", default="", help="row lengths instead of the default set, comma-separated")
    ap.add_argument("--dtypes", default="float32,float16,bfloat16")
    ap.add_argument("--timing", choices=("gated", "plain"), default="gated",
                    help="gated: each batch queued behind a busy-wait, events time the GPU alone; "
                         "plain: events around the calls as they are issued (host time of the first "
                         "call included)")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 4, help="parallel prewarms (--sweep)")
    args = ap.parse_args()
    mode = os.environ.get("JITOP_BENCH_MODE", "full")
    batches, per = {"full": (15, 10), "quick": (7, 5), "smoke": (3, 2)}.get(mode, (15, 10))
    try:
        variants = (ln_variants.parse(args.variants) if args.variants else
                    ln_variants.from_rules([r for r in args.rules.split(",") if r]))
    except ValueError as ex:
        ap.error(f"--variants: {ex}")
    rules = [name for name, _ in variants]  # the variants' names
    if args.odd and not args.sweep:
        ap.error("--odd goes with --sweep")
    sweep, timing = args.sweep, args.timing
    cmd = "python3 bench/layernorm_bench.py" + (" --sweep" if sweep else "") + \
        (" --odd" if args.odd else "") + \
        (" --timing plain" if timing == "plain" else "") + \
        (f" --n {args.n}" if args.n else "") + (f" --dtypes {args.dtypes}" if args.dtypes !=
                                                 "float32,float16,bfloat16" else "") + \
        (f" --variants '{args.variants}'" if args.variants else
         f" --rules {args.rules}" if args.rules != "warps" else "")

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

    torch.cuda.init()
    dev = torch.cuda.get_device_properties(0)
    log(f"device {dev.name}, torch {torch.__version__}, lib {args.lib}, mode {mode}, variants {ln_variants.describe(variants)}")
    DT = {torch.float32: 0, torch.float16: 1, torch.bfloat16: 2}
    NAME = {torch.float32: "float32", torch.float16: "float16", torch.bfloat16: "bfloat16"}
    BY_NAME = {v: k for k, v in NAME.items()}
    P = lambda t: None if t is None else t.data_ptr()
    dtypes = [BY_NAME[d] for d in args.dtypes.split(",") if d]
    ns = [int(v) for v in args.n.split(",") if v] or (
        (ODD_N if args.odd else SWEEP_N) if sweep else PERF_N)

    # One context per rule (the rule is read when a context first uses
    # LayerNorm); with --sweep one per (rule, shape), each on its own cache.
    cache_base = None
    if sweep:
        cache_base = tempfile.mkdtemp(prefix="jitop-ln-sweep-")
        shapes = [(NAME[dt], n) for dt in dtypes for n in ns]
        import time
        t0 = time.time()
        bad = prewarm(args.cli, cache_base, variants, shapes, args.jobs)
        log(f"prewarmed {len(shapes) * len(rules)} (variant, shape) pairs with {args.jobs} jobs in "
            f"{time.time() - t0:.1f} s, {bad} failed")

    outer_env = dict(os.environ)

    def make_ctx(rule, dt, n):
        # the variant's environment while the context is created and first
        # uses LayerNorm (which reads it): every key some variant sets is
        # put back to the run's value first, so that none leaks into the next
        env = ln_variants.env_of(variants, rule, outer_env)
        for k in {k for _, e in variants for k in e}:
            if k in env:
                os.environ[k] = env[k]
            else:
                os.environ.pop(k, None)
        if cache_base:
            os.environ["JITOP_CACHE_DIR"] = os.path.join(cache_base, rule, f"{NAME[dt]}_{n}")
        ctx = vp()
        rc = lib.jitop_ctx_create(None, ctypes.byref(ctx))
        if rc != 0:
            raise RuntimeError("jitop_ctx_create failed: " + lib.jitop_errmsg(None).decode())
        return ctx

    def stream():
        return torch.cuda.current_stream().cuda_stream

    def jt_fwd(ctx, x, g, b, y, mean, rstd):
        m, n = x.shape
        r = lib.jitop_layernorm_forward(ctx, DT[x.dtype], m, n, EPS, P(x), P(g), P(b), P(y),
                                        P(mean), P(rstd), stream())
        if r != 0:
            raise RuntimeError("jitop_layernorm_forward: " + lib.jitop_errmsg(None).decode())

    def jt_bwd(ctx, dy, x, g, mean, rstd, dx, dg, db):
        m, n = x.shape
        r = lib.jitop_layernorm_backward(ctx, DT[x.dtype], m, n, P(dy), P(x), P(g), P(mean), P(rstd),
                                         P(dx), P(dg), P(db), stream())
        if r != 0:
            raise RuntimeError("jitop_layernorm_backward: " + lib.jitop_errmsg(None).decode())

    # Each batch: `per` back-to-back calls between two CUDA events. Gated
    # (the default): the batch is queued behind a busy-wait kernel, so every
    # call is in the queue before the first starts and the events time the
    # GPU alone. Plain: the first call's host work (ctypes, argument
    # marshalling: tens of microseconds, more for a Python-called op than
    # for tensor.copy_) lands inside the timed interval, which at ~0.1 ms a
    # call understates a kernel by several percent against the copy
    # (bench/layernorm_NOTES.md, run 11).
    gate = {"cycles": 1 << 21}  # ~1 ms at the H100's clock; doubled when short

    def batch_ms(fn, s, e):
        while True:
            if timing == "gated":
                torch.cuda._sleep(gate["cycles"])
            s.record()
            for _ in range(per):
                fn()
            e.record()
            # the start event already passed while calls were still being
            # queued: the gate was too short, the GPU may have waited
            late = timing == "gated" and s.query()
            e.synchronize()
            if not late:
                return s.elapsed_time(e) / per
            if gate["cycles"] >= 1 << 31:
                raise RuntimeError("bench: a 1-second busy-wait did not cover queueing one batch")
            gate["cycles"] *= 2

    def time_many(fns):
        """(median, p10, p90) ms per call of each fn, their batches taken in
        turn (fn 0, fn 1, ..., fn 0, ...) so that clock and heat drift reach
        every system alike."""
        for fn in fns:
            for _ in range(3):
                fn()
        torch.cuda.synchronize()
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        ts = [[] for _ in fns]
        for _ in range(batches):
            for i, fn in enumerate(fns):
                ts[i].append(batch_ms(fn, s, e))
        out = []
        for t in ts:
            t.sort()
            out.append((t[len(t) // 2], t[max(0, len(t) // 10)], t[min(len(t) - 1, len(t) * 9 // 10)]))
        return out

    def rel(a, b):
        a = a.double()
        if not torch.isfinite(a).all():
            return float("inf")
        return ((a - b).norm() / b.norm()).item()

    # without --sweep one context per variant, made at the first shape just
    # before its first LayerNorm call (the check), which is when a context
    # reads the variant's environment
    shared_ctx = {}
    rows, failed = [], 0
    tol = {torch.float32: 1e-4, torch.float16: 1e-2, torch.bfloat16: 1e-2}
    gbs = lambda nbytes, t: nbytes / (t * 1e-3) / 1e9
    for dt in dtypes:
        for n in ns:
            m = max(1, TOTAL // n)
            torch.manual_seed(n)
            x = (torch.randn(m, n, device="cuda") * 2 + 0.5).to(dt)
            dy = torch.randn(m, n, device="cuda").to(dt)
            g = (torch.rand(n, device="cuda") + 0.5).to(dt)
            b = torch.randn(n, device="cuda").to(dt)
            es = x.element_size()
            label = f"{NAME[dt]} {m}x{n}"
            fb, bb = 2 * m * n * es, 3 * m * n * es
            # the float64 reference, once per shape
            xr = x.double().requires_grad_(True)
            gr = g.double().requires_grad_(True)
            br = b.double().requires_grad_(True)
            ref = F.layer_norm(xr, (n,), gr, br, EPS)
            ref.backward(dy.double())
            want = {"y": ref.detach(), "dx": xr.grad, "dgamma": gr.grad, "dbeta": br.grad}
            del xr, gr, br, ref
            row = {"dtype": NAME[dt], "M": m, "N": n}
            live = []  # (rule, ctx, buffers) of each variant that passed the check
            for rule in rules:
                try:
                    if sweep:
                        ctx = make_ctx(rule, dt, n)
                    else:
                        if rule not in shared_ctx:
                            shared_ctx[rule] = make_ctx(rule, None, 0)
                        ctx = shared_ctx[rule]
                except RuntimeError as ex:
                    failed += 1
                    log(f"{label} [{rule}]: {ex}")
                    emit(area="kernel", kernel="layernorm", system="jitop-c",
                         what=f"layernorm {label} ({rule})", status="failed", reason=str(ex))
                    continue
                bufs = dict(y=torch.full_like(x, float("nan")), dx=torch.full_like(x, float("nan")),
                            dg=torch.full_like(g, float("nan")), db=torch.full_like(b, float("nan")),
                            mean=torch.full((m,), float("nan"), device="cuda"),
                            rstd=torch.full((m,), float("nan"), device="cuda"))
                # correctness against torch in float64, before any timing (a
                # variant whose plan the op refuses fails here, named)
                try:
                    jt_fwd(ctx, x, g, b, bufs["y"], bufs["mean"], bufs["rstd"])
                    jt_bwd(ctx, dy, x, g, bufs["mean"], bufs["rstd"], bufs["dx"], bufs["dg"], bufs["db"])
                    errs = {"y": rel(bufs["y"], want["y"]), "dx": rel(bufs["dx"], want["dx"]),
                            "dgamma": rel(bufs["dg"], want["dgamma"]), "dbeta": rel(bufs["db"], want["dbeta"])}
                    ok = all(v < tol[dt] for v in errs.values())
                    why = f"wrong result: {errs}"
                except RuntimeError as ex:
                    errs, ok, why = None, False, str(ex)
                log(f"{label} [{rule}]: rel errors vs float64 torch {errs} {'ok' if ok else 'FAILED: ' + why}")
                if ok:
                    row[f"errs_{rule}"] = errs
                    live.append((rule, ctx, bufs))
                    continue
                failed += 1
                emit(area="kernel", kernel="layernorm", system="jitop-c",
                     what=f"layernorm {label} ({rule})", status="failed", reason=why)
                if rule not in shared_ctx:
                    lib.jitop_ctx_destroy(ctx)
            bufs = None  # the last variant's buffers, not held into the next shape
            del want
            if not live:
                continue
            y = torch.empty_like(x)
            _, tmean, trstd = torch.ops.aten.native_layer_norm(x, [n], g, b, EPS)
            fns = []
            for rule, ctx, q in live:
                fns.append(lambda ctx=ctx, q=q: jt_fwd(ctx, x, g, b, q["y"], q["mean"], q["rstd"]))
                fns.append(lambda ctx=ctx, q=q: jt_bwd(ctx, dy, x, g, q["mean"], q["rstd"], q["dx"],
                                                       q["dg"], q["db"]))
            fns += [lambda: y.copy_(x), lambda: F.layer_norm(x, (n,), g, b, EPS),
                    lambda: torch.ops.aten.native_layer_norm_backward(
                        dy, x, [n], tmean, trstd, g, b, [True, True, True])]
            times = time_many(fns)
            for i, (rule, ctx, q) in enumerate(live):
                jf, jb = times[2 * i], times[2 * i + 1]
                row[f"jt_fwd_{rule}"], row[f"jt_bwd_{rule}"] = gbs(fb, jf[0]), gbs(bb, jb[0])
                suffix = "" if rule == rules[0] else f" [{rule}]"
                for what, t, nbytes in (("jitop_layernorm_forward", jf, fb),
                                        ("jitop_layernorm_backward (dx, dgamma, dbeta)", jb, bb)):
                    emit(area="kernel", kernel="layernorm", system="jitop-c",
                         what=f"{what}, {label}{suffix}", unit="GB/s",
                         median=gbs(nbytes, t[0]), p10=gbs(nbytes, t[2]), p90=gbs(nbytes, t[1]),
                         n=batches * per)
                if rule not in shared_ctx:
                    lib.jitop_ctx_destroy(ctx)
            del live, fns
            q = None
            cp, tf, tb = times[-3:]
            row.update({"copy": gbs(fb, cp[0]), "torch_fwd": gbs(fb, tf[0]), "torch_bwd": gbs(bb, tb[0])})
            row["jt_fwd"], row["jt_bwd"] = row.get(f"jt_fwd_{rules[0]}"), row.get(f"jt_bwd_{rules[0]}")
            rows.append(row)
            for sysname, what, t, nbytes in (("floor", "device-to-device copy (tensor.copy_)", cp, fb),
                                             ("torch", "F.layer_norm forward", tf, fb),
                                             ("torch", "aten.native_layer_norm_backward", tb, bb)):
                # GB/s: the median time gives the median rate; p10/p90 swap
                emit(area="kernel", kernel="layernorm", system=sysname, what=f"{what}, {label}",
                     unit="GB/s", median=gbs(nbytes, t[0]), p10=gbs(nbytes, t[2]), p90=gbs(nbytes, t[1]),
                     n=batches * per)
            alt = "".join(f" | {r}: fwd {fmt(row.get(f'jt_fwd_{r}'), '.0f')} "
                          f"bwd {fmt(row.get(f'jt_bwd_{r}'), '.0f')}" for r in rules[1:])
            log(f"{label}: copy {row['copy']:.0f} GB/s | fwd jitop {fmt(row['jt_fwd'], '.0f')} torch "
                f"{row['torch_fwd']:.0f} | bwd jitop {fmt(row['jt_bwd'], '.0f')} torch "
                f"{row['torch_bwd']:.0f}{alt}")
            del x, dy, y, tmean, trstd
            torch.cuda.empty_cache()
    for ctx in shared_ctx.values():
        lib.jitop_ctx_destroy(ctx)

    report(rows, rules, ("layernorm_sweep_odd" if args.odd else "layernorm_sweep") if sweep else "",
           args.out, dev.name, torch.__version__, mode, batches, per, cmd, variants,
           timing)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
