#!/usr/bin/env python3
"""The tutorial's LLTM as an extension (issue 22, "Numbers"): torch's
cpp_extension.load of bench/lltm_ext/ (lltm_cuda.cpp + lltm_cuda_kernel.cu)
against jitop's one jitop_load of examples/lltm_extension/lltm_host.c +
kernels/lltm.cu. Needs a GPU, torch (for its half) and ninja; run from the
repository root:

    python3 bench/host_vs_torch.py --out DIR

Every phase runs in a fresh process of its own, so no phase profits from
another's warm memory:
  cold   empty build folder / empty jitop cache, n=1 (a cold build is the
         expensive part; one sample, labelled n=1);
  warm   the same folder / cache, a new process each time (--warm reps);
  edit   torch: append a comment to the copied lltm_cuda.cpp, then a new
         process loads (ninja rebuilds the .cpp object and relinks) - the
         edit-and-rerun loop torch offers (an in-process load after an edit
         renames the module to name_v1 and rebuilds the .cu too); n=1 by
         default. jitop: one process loads a copy of lltm_host.c, watches it
         (jitop_watch), and times from the save of an edit (its
         lltm_host_version() returns N + 1) to the first call that sees
         the new code, with no restart (--edits saves, medians).
Times: load_ms = the load call(s) (torch: cpp_extension.load; jitop:
ctx_create + jitop_load + jitop_fn_get); first_call_ms = from the same start
to one LLTM forward (B=16, I=32, S=128) synced, CUDA context and buffers
included. import torch and interpreter start are outside both, except in
torch's edit "wall" figure, which is the whole rerun from the save.

Prints a table and one JSON object per figure (bench/benchlib.py's records)
on stdout; DIR gets host_vs_torch.jsonl, host_vs_torch.md and the logs."""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import benchlib  # noqa: E402  (bench/, standard library only)

AREA, KERNEL = "host_ext", "lltm"

TORCH_CHILD = r"""
import json, os, sys, time
src, build, name = sys.argv[1:4]
import torch
from torch.utils import cpp_extension
t0 = time.perf_counter()
mod = cpp_extension.load(name=name, build_directory=build, verbose=False,
                         sources=[os.path.join(src, "lltm_cuda.cpp"),
                                  os.path.join(src, "lltm_cuda_kernel.cu")])
t1 = time.perf_counter()
B, I, S = 16, 32, 128
f = lambda *shape: torch.full(shape, 0.01, device="cuda", dtype=torch.float32)
new_h, new_c = mod.forward(f(B, I), f(3 * S, S + I), f(3 * S), f(B, S), f(B, S))[:2]
torch.cuda.synchronize()
t2 = time.perf_counter()
if not bool(torch.isfinite(new_h).all()):
    sys.exit("lltm forward gave non-finite values")
print(json.dumps({"load_ms": (t1 - t0) * 1e3, "first_call_ms": (t2 - t0) * 1e3}))
"""


def log(msg):
    sys.stderr.write("host_vs_torch: %s\n" % msg)
    sys.stderr.flush()


def run_json(cmd, logf, timeout, label):
    """Runs cmd, returns (its last stdout line as JSON, wall ms); stderr to logf."""
    logf.write("--- %s\n" % label)
    logf.flush()
    t0 = time.perf_counter()
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=logf, timeout=timeout, cwd=ROOT,
                       universal_newlines=True)
    wall = (time.perf_counter() - t0) * 1e3
    if p.returncode != 0:
        raise RuntimeError("%s exited %d (see the log)" % (label, p.returncode))
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
    if not lines:
        raise RuntimeError("%s printed no figures" % label)
    return json.loads(lines[-1]), wall


def build_driver(work, logf):
    """build/libjitop.a through the Makefile, then the driver the way the
    Makefile links examples (libffi, the CUDA driver's stub)."""
    jobs = str(min(8, os.cpu_count() or 2))
    subprocess.run(["make", "-j" + jobs, "build/libjitop.a"], cwd=ROOT, stdout=logf,
                   stderr=logf, check=True)
    cuda = os.environ.get("CUDA_HOME", "/usr/local/cuda")
    deps = os.environ.get("DEPS_PREFIX", "")
    inc = ["-I" + os.path.join(ROOT, "include"), "-I" + cuda + "/include"]
    lib = ["-L" + cuda + "/lib64", "-Wl,-rpath," + cuda + "/lib64"]
    if deps:
        inc += ["-I%s/usr/include" % deps, "-I%s/usr/include/x86_64-linux-gnu" % deps]
        lib += ["-L%s/usr/lib/x86_64-linux-gnu" % deps,
                "-Wl,-rpath,%s/usr/lib/x86_64-linux-gnu" % deps]
    exe = os.path.join(work, "host_vs_torch_driver")
    cmd = ([os.environ.get("CC", "cc"), "-std=c11", "-O2", "-Wall", "-Wextra", "-Werror",
            "-pthread", "-D_GNU_SOURCE"] + inc +
           ["-o", exe, os.path.join(HERE, "host_vs_torch_driver.c"),
            os.path.join(ROOT, "build", "libjitop.a")] + lib +
           ["-ldl", "-lpthread", "-lm", "-lffi", "-L" + cuda + "/lib64/stubs", "-lcuda"])
    logf.write("$ %s\n" % " ".join(cmd))
    logf.flush()
    subprocess.run(cmd, cwd=ROOT, stdout=logf, stderr=logf, check=True)
    return exe


def jitop_half(args, work, logf, emit):
    exe = build_driver(work, logf)
    cache = os.path.join(work, "jitop_cache")
    host = os.path.join(ROOT, "examples", "lltm_extension", "lltm_host.c")
    cu = os.path.join(ROOT, "kernels", "lltm.cu")
    r, _ = run_json([exe, "load", cache, host, cu], logf, 300, "jitop cold load")
    emit("jitop", "cold load", [r["load_ms"]], note="n=1, empty cache")
    emit("jitop", "cold first call", [r["first_call_ms"]], note="n=1, empty cache")
    warm = [run_json([exe, "load", cache, host, cu], logf, 120, "jitop warm load")[0]
            for _ in range(args.warm)]
    emit("jitop", "warm load", [w["load_ms"] for w in warm], note="new process each")
    emit("jitop", "warm first call", [w["first_call_ms"] for w in warm],
         note="new process each")
    # The edit works on a copy (its lltm_host_version() is what changes);
    # same bytes as the example, so its load is a cache hit.
    edit_dir = os.path.join(work, "jitop_edit")
    os.makedirs(edit_dir)
    copy = os.path.join(edit_dir, "lltm_host.c")
    shutil.copyfile(host, copy)
    r, _ = run_json([exe, "edit", cache, copy, cu, str(args.edits)], logf, 300,
                    "jitop edit")
    emit("jitop", "edit to live", r["edit_ms"],
         note="save of lltm_host.c to the first call of the new code, in process (jitop_watch)")
    emit("jitop", "edit to first call", r["edit_first_call_ms"],
         note="save to one lltm_forward synced in the new code")


def torch_half(args, work, logf, emit):
    src = os.path.join(work, "torch_src")
    build = os.path.join(work, "torch_build")
    shutil.copytree(os.path.join(HERE, "lltm_ext"), src)
    os.makedirs(build)
    name = "lltm_hvt_%d_%d" % (os.getpid(), int(time.time()))
    child = [sys.executable, "-c", TORCH_CHILD, src, build, name]
    r, _ = run_json(child, logf, 400, "torch cold load")
    emit("torch", "cold load", [r["load_ms"]], note="n=1, empty build folder")
    emit("torch", "cold first call", [r["first_call_ms"]], note="n=1, empty build folder")
    warm = [run_json(child, logf, 200, "torch warm load")[0] for _ in range(args.warm)]
    emit("torch", "warm load", [w["load_ms"] for w in warm], note="new process each")
    emit("torch", "warm first call", [w["first_call_ms"] for w in warm],
         note="new process each")
    loads, calls, walls = [], [], []
    for e in range(args.torch_edits):
        t0 = time.perf_counter()
        with open(os.path.join(src, "lltm_cuda.cpp"), "a") as f:
            f.write("\n// host_vs_torch edit %d\n" % (e + 1))
        r, _ = run_json(child, logf, 400, "torch load after edit %d" % (e + 1))
        walls.append((time.perf_counter() - t0) * 1e3)
        loads.append(r["load_ms"])
        calls.append(r["first_call_ms"])
    n = "n=%d" % args.torch_edits
    emit("torch", "edit: rebuild load", loads, note=n + ", new process after the edit")
    emit("torch", "edit: rebuild first call", calls, note=n + ", from the load's start")
    emit("torch", "edit to first call (wall)", walls,
         note=n + ", save to first call: interpreter, import torch, rebuild, forward")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="folder for the figures and logs")
    ap.add_argument("--warm", type=int, default=5, help="warm loads, each a new process")
    ap.add_argument("--edits", type=int, default=5, help="jitop saves in its edit process")
    ap.add_argument("--torch-edits", type=int, default=1, help="torch edit-and-rerun samples")
    ap.add_argument("--only", choices=("jitop", "torch"), help="one half only")
    ap.add_argument("--keep", action="store_true", help="keep the temp folder")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    work = tempfile.mkdtemp(prefix="host_vs_torch.")
    jsonl = open(os.path.join(args.out, "host_vs_torch.jsonl"), "w")
    recs = []

    def emit(system, what, samples, **extra):
        rec = benchlib.record(AREA, KERNEL, system, what, "ms", samples, **extra)
        recs.append(rec)
        benchlib.emit(rec)
        benchlib.emit(rec, jsonl)

    t_start = time.perf_counter()
    ok = True
    for half, fn in (("jitop", jitop_half), ("torch", torch_half)):
        if args.only and args.only != half:
            continue
        with open(os.path.join(args.out, "host_vs_torch.%s.log" % half), "w") as logf:
            try:
                fn(args, work, logf, emit)
            except Exception as e:  # one half failing still reports the other
                ok = False
                st = benchlib.status(AREA, KERNEL, half, "all", "failed", e)
                benchlib.emit(st)
                benchlib.emit(st, jsonl)
                log("%s half failed: %s (log: %s)" % (half, e, logf.name))
    jsonl.close()
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    else:
        log("kept %s" % work)

    rows = ["| system | what | median ms | p10 | p90 | n | note |", "|---|---|---|---|---|---|---|"]
    for r in recs:
        rows.append("| %s | %s | %.2f | %.2f | %.2f | %d | %s |" % (
            r["system"], r["what"], r["median"], r["p10"], r["p90"], r["n"], r.get("note", "")))
    table = "\n".join(rows)
    with open(os.path.join(args.out, "host_vs_torch.md"), "w") as f:
        f.write(table + "\n")
    sys.stderr.write("\n" + table + "\n\ntotal %.1f s\n" % (time.perf_counter() - t_start))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
