#!/usr/bin/env python3
"""Runs the measurements of bench/floor, bench/jitop_bench, the jitop CLI and
bench/peers.py in fresh processes, with a fresh or a warm cache for each, and
appends every figure (JSON lines, bench/README.md) to OUT/drive-PHASE.jsonl.

    drive.py --phase cpu|gpu|torch --out DIR --build DIR [--budget SECONDS]

cpu:   compile-and-cache, needs no GPU: cold compile jitop vs NVRTC, cache hit
       in a new process, `jitop build` cold / no-op, `jitop build -j` scaling.
gpu:   cold, warm, in-process, edit-to-live and launch for the floor, jitop
       (C API) and CuPy.
torch: torch.utils.cpp_extension.load / load_inline: cold, warm, in-process,
       edit-to-live, launch.

Repetitions come from JITOP_BENCH_MODE (full, quick, smoke) and stop early,
with the count stated, when the phase's time budget runs out. Anything not
measured gets a record saying why.
"""
import argparse
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib as bl  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PY = sys.executable or "python3"

# The kernels every area is measured on, with the op asked for: an extern "C"
# name or a template instance (the float forward the shipped C op asks for,
# read from src/<kernel>.c; the default when none is found there).
# JITOP_BENCH_OP_<KERNEL> overrides the op.
KERNELS = [
    ("saxpy", "bench/kernels/saxpy.cu", "saxpy"),
    ("lltm", "kernels/lltm.cu", "lltm_fwd<float, 8, 4, 16, 1, 1, 16, true>"),
    ("layernorm", "kernels/layernorm.cu", "layernorm_fwd<float, 1024, true>"),
]
SYSTEMS_GPU = ("floor", "jitop-c", "cupy")
# layernorm.cu uses thread-block clusters, so sm_90 is the oldest arch here.
BUILD_ARCHS = {"full": "sm_90,sm_100,sm_103,sm_120", "quick": "sm_90,sm_100", "smoke": "sm_90,sm_100"}


def shipped_op(kernel, default):
    """The float forward instance src/<kernel>.c asks for (its template
    arguments change while the kernel is tuned), else the default."""
    try:
        with open(os.path.join(ROOT, "src", kernel + ".c")) as f:
            text = f.read()
    except OSError:
        return default
    m = re.search(r'"(%s_fwd<float[^"%%]*true>)"' % re.escape(kernel), text)
    return m.group(1) if m else default


def kernels():
    out = []
    for k, src, op in KERNELS:
        op = os.environ.get("JITOP_BENCH_OP_" + k.upper()) or (op if k == "saxpy" else shipped_op(k, op))
        out.append((k, os.path.join(ROOT, src), op))
    return out


class Driver:
    def __init__(self, phase, out, build, budget):
        self.phase, self.out, self.build = phase, out, build
        self.deadline = time.monotonic() + budget
        os.makedirs(out, exist_ok=True)
        # Caches and copies live under OUT (run.sh removes them at the end):
        # the torch phase's built LLTM extension is reused by lltm_bench.py.
        self.tmp = os.path.join(out, "work-" + phase)
        shutil.rmtree(self.tmp, ignore_errors=True)
        os.makedirs(self.tmp, mode=0o700)
        self.rec = open(os.path.join(out, "drive-%s.jsonl" % phase), "a")
        self.log = open(os.path.join(out, "drive-%s.log" % phase), "a")
        self.floor = os.path.join(build, "bench", "floor")
        self.jb = os.path.join(build, "bench", "jitop_bench")
        self.cli = os.environ.get("JITOP_CLI") or os.path.join(build, "jitop")
        self.n = 0
        self.last_stdout = ""

    def left(self):
        return self.deadline - time.monotonic()

    def fresh(self, name):
        self.n += 1
        d = os.path.join(self.tmp, "%s-%d" % (name, self.n))
        # 0700: jitop refuses a cache root that group or others may write.
        os.makedirs(d, mode=0o700)
        return d

    def put(self, rec):
        self.rec.write(json.dumps(rec) + "\n")
        self.rec.flush()

    def note(self, area, kernel, system, what, state, reason):
        self.put(bl.status(area, kernel, system, what, state, reason))

    def run(self, argv, tag, env=None, timeout=120):
        """Runs one process. Returns (records, wall_ms, cpu_s, ok). Its JSON
        lines are kept; a crash, a non-zero exit or a timeout becomes a
        "failed" record for tag = (area, kernel, system, what)."""
        timeout = max(1.0, min(timeout, self.left()))
        e = dict(os.environ)
        e.update(env or {})
        self.log.write("$ %s\n" % " ".join(argv))
        self.log.flush()
        ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        try:
            p = subprocess.run(argv, env=e, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               timeout=timeout, text=True)
            rc, so, se = p.returncode, p.stdout, p.stderr
        except subprocess.TimeoutExpired as x:
            rc = None
            so = x.stdout.decode(errors="replace") if isinstance(x.stdout, bytes) else (x.stdout or "")
            se = x.stderr.decode(errors="replace") if isinstance(x.stderr, bytes) else (x.stderr or "")
        except OSError as x:
            rc, so, se = -1, "", str(x)
        wall = (time.perf_counter() - t0) * 1e3
        ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (ru1.ru_utime + ru1.ru_stime) - (ru0.ru_utime + ru0.ru_stime)
        self.log.write(se)
        self.log.write("[exit %s, %.1f ms]\n" % (rc, wall))
        self.log.flush()
        recs = [r for r in bl.parse_records(so.splitlines()) if "area" in r]
        for r in recs:
            self.put(r)
        self.last_stdout = so
        failed_rec = any(r.get("status") in ("failed", "missing", "skipped") for r in recs)
        if rc is None:
            self.note(*tag, "failed", "timed out after %.0f s" % timeout)
            return recs, wall, cpu, False
        if rc != 0 and not failed_rec:
            last = [ln for ln in se.strip().splitlines() if ln.strip()][-3:]
            self.note(*tag, "failed", "exit status %s: %s" % (rc, " | ".join(last) or "no message"))
        return recs, wall, cpu, rc == 0 and not failed_rec

    def whole(self, area, kernel, system, what, wall):
        self.put(bl.record(area, kernel, system, what, "ms", [wall], detail=True))


def reps(full, quick, smoke):
    return bl.reps(full, quick, smoke)


def copy_src(d, src):
    """A private copy of src's directory (its headers come along); returns the
    copied source's path. Edits touch only copies."""
    dst = os.path.join(d, "src")
    shutil.copytree(os.path.dirname(src), dst)
    return os.path.join(dst, os.path.basename(src))


def detect_arch(drv):
    """(arch, have_gpu, why)."""
    try:
        p = subprocess.run([drv.floor, "arch"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True, timeout=60)
        if p.returncode == 0 and p.stdout.strip().startswith("sm_"):
            return p.stdout.strip(), True, ""
        why = p.stderr.strip() or "floor arch exited %d" % p.returncode
    except (OSError, subprocess.TimeoutExpired) as e:
        why = str(e)
    return os.environ.get("JITOP_ARCH", "sm_90"), False, why


# ---------------------------------------------------------------- cpu

def phase_cpu(drv):
    arch, gpu, why = detect_arch(drv)
    drv.put({"area": "env", "key": "compile arch", "value": arch + ("" if gpu else " (no GPU here: %s)" % why)})
    r_cold, r_warm = reps(5, 2, 1), reps(10, 3, 1)
    for k, src, op in kernels():
        if not os.path.exists(src):
            for area in ("compile", "hit", "build"):
                drv.note(area, k, "jitop-c", area, "skipped", "%s does not exist" % src)
            continue
        base = ["--src", src, "--kernel", k, "--op", op, "--arch", arch]
        warm_cache = None
        done = 0
        for rep in range(r_cold):
            if rep and drv.left() < 20:
                break
            drv.run([drv.floor, "compile"] + base + ["--reps", str(5 if rep == 0 else 1)],
                    ("compile", k, "floor", "NVRTC compile"))
            cache = drv.fresh("cache")
            drv.run([drv.jb, "compile"] + base, ("compile", k, "jitop-c", "jitop_build"),
                    env={"JITOP_CACHE_DIR": cache})
            warm_cache = warm_cache or cache
            done += 1
        for rep in range(r_warm):
            if rep and drv.left() < 15:
                break
            drv.run([drv.jb, "compile"] + base, ("hit", k, "jitop-c", "jitop_build hit"),
                    env={"JITOP_CACHE_DIR": warm_cache})
        # The CLI as a whole process: what a build step or a user pays.
        cli_cache = None
        for rep in range(r_cold):
            if rep and drv.left() < 15:
                break
            cache = drv.fresh("cli")
            cli_cache = cli_cache or cache
            recs, wall, _, ok = drv.run([drv.cli, "build", "--arch", arch, "--cache-dir", cache, "--json", src],
                                        ("build", k, "jitop-cli", "jitop build, empty cache"))
            if ok:
                drv.put(bl.record("build", k, "jitop-cli", "jitop build FILE, empty cache (whole process wall; "
                                  "whole file, no name expressions)", "ms", [wall]))
                cli_ms(drv, k, "jitop build FILE, empty cache: the ms it reports (--json)")
        for rep in range(r_warm):
            if rep and drv.left() < 10:
                break
            recs, wall, _, ok = drv.run([drv.cli, "build", "--arch", arch, "--cache-dir", cli_cache, "--json", src],
                                        ("build", k, "jitop-cli", "jitop build, cache hit"))
            if ok:
                drv.put(bl.record("build", k, "jitop-cli", "jitop build FILE, all cached (whole process wall)",
                                  "ms", [wall]))
                cli_ms(drv, k, "jitop build FILE, all cached: the ms it reports (--json)")
    cli_noop(drv, arch, r_warm)
    cli_scaling(drv)


def cli_ms(drv, k, what):
    """The per-file time `jitop build --json` itself reports, as a detail row."""
    for line in drv.last_stdout.splitlines():
        try:
            r = json.loads(line)
        except ValueError:
            continue
        if isinstance(r, dict) and isinstance(r.get("ms"), (int, float)) and "area" not in r:
            drv.put(bl.record("build", k, "jitop-cli", what, "ms", [r["ms"]], detail=True))


def cli_noop(drv, arch, r_warm):
    """Issue 2: a no-op `jitop build kernels/` under 10 ms for the whole process."""
    kdir = os.path.join(ROOT, "kernels")
    cache = drv.fresh("noop")
    tag = ("build", "kernels/", "jitop-cli", "no-op jitop build kernels/")
    _, _, _, ok = drv.run([drv.cli, "build", "--arch", arch, "--cache-dir", cache, kdir], tag)
    if not ok:
        return
    walls = []
    for rep in range(max(r_warm, 5)):
        if rep and drv.left() < 5:
            break
        _, wall, _, ok = drv.run([drv.cli, "build", "--arch", arch, "--cache-dir", cache, kdir], tag)
        if not ok:
            return
        walls.append(wall)
    drv.put(bl.record("build", "kernels/", "jitop-cli", "no-op jitop build kernels/ (whole process wall)",
                      "ms", walls))


def cli_scaling(drv):
    """`jitop build -j`: every (file, arch) of kernels/ and saxpy.cu, empty
    cache, with 1 job and with one per core; CPU busy = (user+sys) / wall."""
    archs = BUILD_ARCHS[bl.mode()]
    files = [os.path.join(ROOT, "kernels"), os.path.join(ROOT, "bench", "kernels", "saxpy.cu")]
    nfiles = len([f for f in os.listdir(files[0]) if f.endswith(".cu")]) + 1
    cores = os.cpu_count() or 1
    label = "%d files x %d archs (%s)" % (nfiles, len(archs.split(",")), archs)
    jobs = sorted({1, max(1, cores // 2), cores})
    walls = {}
    for j in jobs:
        samples, busy = [], []
        for rep in range(reps(3, 1, 1)):
            if drv.left() < 30 and (j != 1 or rep):
                break
            cache = drv.fresh("scale")
            _, wall, cpu, ok = drv.run([drv.cli, "build", "-j", str(j), "--arch", archs, "--cache-dir", cache] + files,
                                       ("build", "all", "jitop-cli", "jitop build -j %d" % j), timeout=240)
            if not ok:
                break
            samples.append(wall)
            busy.append(cpu * 1e3 / wall)
        if not samples:
            drv.note("build", "all", "jitop-cli", "jitop build -j %d" % j, "skipped",
                     "out of the phase's time budget or failed (see drive-cpu.log)")
            continue
        walls[j] = bl.stats(samples)["median"]
        drv.put(bl.record("build", "all", "jitop-cli", "jitop build -j %d, %s, empty cache (wall)" % (j, label),
                          "ms", samples))
        drv.put(bl.record("build", "all", "jitop-cli", "jitop build -j %d: CPU busy, (user+sys)/wall" % j,
                          "cores", busy, detail=True))
    if 1 in walls and len(walls) > 1:
        top = max(walls)
        drv.put(bl.record("build", "all", "jitop-cli", "speed-up of -j %d over -j 1 (%d cores; ratio of medians)"
                          % (top, cores), "x", [walls[1] / walls[top]], detail=True))


# ---------------------------------------------------------------- gpu

def gpu_skip_all(drv, why):
    for area in ("cold", "warm", "inproc", "edit", "launch"):
        for k, _, _ in kernels():
            if area == "launch" and k != "saxpy":
                continue
            for s in SYSTEMS_GPU:
                drv.note(area, k, s, area, "skipped", why)


def gpu_areas():
    """JITOP_BENCH_AREAS (comma-separated, e.g. "warm") narrows the GPU
    phase to some areas; one cold rep always runs, since it fills the
    caches the warm reps load from."""
    want = os.environ.get("JITOP_BENCH_AREAS", "")
    return set(a.strip() for a in want.split(",") if a.strip()) or {"cold", "warm", "inproc", "edit", "launch"}


def phase_gpu(drv):
    arch, gpu, why = detect_arch(drv)
    if not gpu:
        gpu_skip_all(drv, "no GPU: %s" % why)
        return
    drv.put({"area": "env", "key": "gpu arch", "value": arch})
    try:
        smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total",
                              "--format=csv,noheader"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                             text=True, timeout=20)
        if smi.returncode == 0 and smi.stdout.strip():
            drv.put({"area": "env", "key": "nvidia-smi", "value": smi.stdout.strip().splitlines()[0]})
    except (OSError, subprocess.TimeoutExpired):
        pass
    areas = gpu_areas()
    r_cold, r_warm = reps(5, 2, 1) if "cold" in areas else 1, reps(10, 3, 1)
    # The C systems' warm figures sit near the 0.3 ms goal and move +-0.03 ms
    # between runs of 10 (one new process each, p10-p90 0.25-0.36 ms): more
    # processes for them (cheap), the Python peers' 10 (a second each).
    r_warm_c = reps(25, 5, 1)
    for k, src, op in kernels():
        if not os.path.exists(src):
            for area in ("cold", "warm", "inproc", "edit"):
                for s in SYSTEMS_GPU:
                    drv.note(area, k, s, area, "skipped", "%s does not exist" % src)
            continue
        gpu_kernel(drv, k, src, op, r_cold, (r_warm, r_warm_c) if "warm" in areas else (0, 0), areas)
    if "launch" in areas:
        k, src, op = kernels()[0]
        gpu_launch(drv, k, src, op)


def gpu_kernel(drv, k, src, op, r_cold, r_warm, areas):
    """r_warm: (new processes for the Python peer, for the C systems)."""
    base = ["--src", src, "--kernel", k, "--op", op]
    cupy = [PY, os.path.join(ROOT, "bench", "peers.py"), "cupy", "--src", src, "--kernel", k, "--op", op]
    cubin = os.path.join(drv.fresh("floor"), "floor.cubin")
    jcache = ccache = None
    # Cold: every rep a new process and an empty cache, the systems in turn.
    for rep in range(r_cold):
        if rep and drv.left() < 60:
            break
        _, wall, _, ok = drv.run([drv.floor, "load", "--area", "cold", "--cubin", cubin] + base,
                                 ("cold", k, "floor", "compile + load"))
        if ok:
            drv.whole("cold", k, "floor", "whole process: exec to exit", wall)
        c = drv.fresh("jcache")
        jcache = jcache or c
        _, wall, _, ok = drv.run([drv.jb, "load", "--area", "cold"] + base, ("cold", k, "jitop-c", "load"),
                                 env={"JITOP_CACHE_DIR": c})
        if ok:
            drv.whole("cold", k, "jitop-c", "whole process: exec to exit", wall)
        c = drv.fresh("cupycache")
        ccache = ccache or c
        _, wall, _, ok = drv.run(cupy + ["--step", "cold"], ("cold", k, "cupy", "RawModule"),
                                 env={"CUPY_CACHE_DIR": c})
        if ok:
            drv.whole("cold", k, "cupy", "whole process: exec to exit (python + import cupy)", wall)
    # Warm: new processes on the caches the first cold rep filled, the
    # systems in turn.
    r_py, r_c = r_warm
    for rep in range(max(r_py, r_c)):
        if rep and drv.left() < 45:
            break
        if rep < r_c:
            _, wall, _, ok = drv.run([drv.floor, "load", "--area", "warm", "--cubin", cubin] + base,
                                     ("warm", k, "floor", "compile + load"))
            if ok:
                drv.whole("warm", k, "floor", "whole process: exec to exit", wall)
            _, wall, _, ok = drv.run([drv.jb, "load", "--area", "warm"] + base, ("warm", k, "jitop-c", "load"),
                                     env={"JITOP_CACHE_DIR": jcache})
            if ok:
                drv.whole("warm", k, "jitop-c", "whole process: exec to exit", wall)
        if rep < r_py:
            _, wall, _, ok = drv.run(cupy + ["--step", "warm"], ("warm", k, "cupy", "RawModule"),
                                     env={"CUPY_CACHE_DIR": ccache})
            if ok:
                drv.whole("warm", k, "cupy", "whole process: exec to exit (python + import cupy)", wall)
    # In-process: one process each, many repetitions inside.
    if "inproc" in areas:
        drv.run([drv.floor, "inproc"] + base, ("inproc", k, "floor", "get again"))
        drv.run([drv.jb, "inproc"] + base, ("inproc", k, "jitop-c", "get again"), env={"JITOP_CACHE_DIR": jcache})
        drv.run(cupy + ["--step", "inproc"], ("inproc", k, "cupy", "get again"), env={"CUPY_CACHE_DIR": ccache})
    # Edit to live: each system edits its own copy of the source.
    if "edit" not in areas:
        return
    if drv.left() < 30:
        for s in SYSTEMS_GPU:
            drv.note("edit", k, s, "edit", "skipped", "out of the phase's time budget")
        return
    copy = copy_src(drv.fresh("edit"), src)
    drv.run([drv.floor, "edit", "--src", copy, "--kernel", k, "--op", op], ("edit", k, "floor", "edit"))
    copy = copy_src(drv.fresh("edit"), src)
    drv.run([drv.jb, "edit", "--src", copy, "--kernel", k, "--op", op], ("edit", k, "jitop-c", "edit"),
            env={"JITOP_CACHE_DIR": drv.fresh("jcache")})
    copy = copy_src(drv.fresh("edit"), src)
    drv.run([PY, os.path.join(ROOT, "bench", "peers.py"), "cupy", "--step", "edit", "--src", copy,
             "--kernel", k, "--op", op], ("edit", k, "cupy", "edit"), env={"CUPY_CACHE_DIR": drv.fresh("cupycache")})


def gpu_launch(drv, k, src, op):
    base = ["--src", src, "--kernel", k, "--op", op]
    drv.run([drv.floor, "launch"] + base, ("launch", k, "floor", "launch"))
    drv.run([drv.jb, "launch"] + base, ("launch", k, "jitop-c", "launch"), env={"JITOP_CACHE_DIR": drv.fresh("jc")})
    drv.run([PY, os.path.join(ROOT, "bench", "peers.py"), "cupy", "--step", "launch"] + base,
            ("launch", k, "cupy", "launch"), env={"CUPY_CACHE_DIR": drv.fresh("cc")})
    lltm = [x for x in kernels() if x[0] == "lltm"][0]
    drv.run([drv.jb, "lltm-launch", "--src", lltm[1], "--kernel", "lltm"], ("launch", "lltm", "jitop-c", "forward"),
            env={"JITOP_CACHE_DIR": drv.fresh("jc")})


# ---------------------------------------------------------------- torch

TORCH_EXTS = [("saxpy", "torch-load", "saxpy"), ("saxpy_inline", "torch-load_inline", "saxpy"),
              ("lltm", "torch-load", "lltm"), ("layernorm", "torch-load", "layernorm")]


def ext_sources(ext):
    if ext in ("saxpy", "saxpy_inline"):
        return [os.path.join(ROOT, "bench", "torch_saxpy", "saxpy_torch.cu"),
                os.path.join(ROOT, "bench", "kernels", "saxpy.cu")]
    if ext == "layernorm":
        return [os.path.join(ROOT, "bench", "torch_layernorm", "layernorm_torch.cu"),
                os.path.join(ROOT, "kernels", "layernorm.cu")]
    d = os.path.join(ROOT, "bench", "lltm_ext")
    if not os.path.isdir(d):
        return []
    return [os.path.join(d, f) for f in sorted(os.listdir(d)) if f.endswith((".cpp", ".cu", ".h", ".cuh"))]


def torch_skip(drv, areas, exts, why):
    for area in areas:
        for ext, system, k in exts:
            if (area == "edit" and ext == "saxpy_inline") or (area == "launch" and ext == "layernorm"):
                continue
            drv.note(area, k, system, area, "skipped", why)


def phase_torch(drv):
    peers = [PY, os.path.join(ROOT, "bench", "peers.py"), "torch"]
    arch, gpu, why = detect_arch(drv)
    if not gpu:
        torch_skip(drv, ("cold", "warm", "inproc", "edit", "launch"), TORCH_EXTS, "no GPU: %s" % why)
        return
    if bl.mode() == "quick":
        torch_skip(drv, ("cold", "warm", "inproc", "edit", "launch"), TORCH_EXTS,
                   "--quick: torch extension builds skipped (a cold build takes about a minute)")
        return
    # (ext, system, kernel, sources dir, TORCH_EXTENSIONS_DIR, roles). The
    # LLTM extension is measured from the tree itself (its build is then the
    # one lltm_bench.py finds) and edited in a copy built side by side.
    exts = []
    for ext, system, k in TORCH_EXTS:
        srcs = ext_sources(ext)
        if not srcs:
            torch_skip(drv, ("cold", "warm", "inproc", "edit", "launch"), [(ext, system, k)],
                       "bench/lltm_ext/ (the tutorial's LLTM extension) is not in the tree")
            continue
        d = drv.fresh("torch-" + ext)
        copy = os.path.join(d, "src")
        os.makedirs(copy)
        for f in srcs:
            shutil.copy(f, copy)
        if ext == "lltm":
            exts.append((ext, system, k, os.path.dirname(srcs[0]), os.path.join(d, "ext"), ("main",)))
            exts.append((ext, system, k, copy, os.path.join(d, "ext-edit"), ("edit",)))
        elif ext in ("saxpy", "layernorm"):
            exts.append((ext, system, k, copy, os.path.join(d, "ext"), ("main", "edit")))
        else:
            exts.append((ext, system, k, copy, os.path.join(d, "ext"), ("main",)))
    # Cold builds run side by side (each uses at most 2 compile jobs; the
    # GPU machine has 16 cores): four one-minute builds in about one minute.
    procs = []
    for e in exts:
        argv = peers + ["--step", "cold", "--ext", e[0], "--work", e[3]]
        procs.append((e, start(drv, argv, {"TORCH_EXTENSIONS_DIR": e[4]})))
    built = []
    for e, p in procs:
        if finish(drv, p, ("cold", e[2], e[1], "cpp_extension cold build"), timeout=min(300, drv.left())):
            built.append(e)
    for e in built:
        if e[0] == "lltm" and "main" in e[5]:
            with open(os.path.join(drv.out, "torch_lltm_ext_dir"), "w") as f:
                f.write(e[4] + "\n")
    if any(r.get("status") == "missing" for r in read_back(drv)):
        torch_skip(drv, ("warm", "inproc", "edit", "launch"), TORCH_EXTS, "torch is not installed")
        return
    # Each edit rebuilds its own, already built, copy (about a minute) while
    # the warm, in-process and launch steps run: after them, the rebuilds did
    # not fit in the phase's time (it shares make bench's 10 minutes). An
    # edit in a copy of its own (lltm) starts at once; one that edits the
    # copy the steps load (saxpy, layernorm) starts only when that copy's
    # own steps are done, or they would load the edited source and measure a
    # rebuild. Those run first, so that their edits start early.
    edit_procs = []

    def start_edit(e):
        if e not in built:
            drv.note("edit", e[2], e[1], "edit", "skipped", "the cold build of its copy failed")
            return
        argv = peers + ["--step", "edit", "--ext", e[0], "--work", e[3]]
        edit_procs.append((e, start(drv, argv, {"TORCH_EXTENSIONS_DIR": e[4]})))

    for e in exts:
        if "edit" in e[5] and "main" not in e[5]:
            start_edit(e)
    r_warm = reps(3, 1, 1)
    for e in sorted(exts, key=lambda e: "edit" not in e[5]):
        ext, system, k, work, extdir, roles = e
        if "main" not in roles:
            continue
        env = {"TORCH_EXTENSIONS_DIR": extdir}
        if e not in built:
            torch_skip(drv, ("warm", "inproc", "launch"), [(ext, system, k)], "the cold build failed")
            if "edit" in roles:
                start_edit(e)
            continue
        for rep in range(r_warm):
            if rep and drv.left() < 60:
                break
            _, wall, _, ok = drv.run(peers + ["--step", "warm", "--ext", ext, "--work", work],
                                     ("warm", k, system, "load again"), env=env)
            if ok:
                drv.whole("warm", k, system, "whole process: exec to exit (python + import torch)", wall)
        if ext != "saxpy_inline":
            drv.run(peers + ["--step", "inproc", "--ext", ext, "--work", work],
                    ("inproc", k, system, "load again"), env=env)
        # Launch overhead is measured for saxpy and the LLTM forward (the
        # launch area's kernels), not for the LayerNorm op.
        if ext not in ("saxpy_inline", "layernorm"):
            drv.run(peers + ["--step", "launch", "--ext", ext, "--work", work],
                    ("launch", k, system, "launch"), env=env)
        if "edit" in roles:
            start_edit(e)
    # The edits' rebuilds (about a minute each) finish now; they ran side by
    # side with the steps above.
    for e, p in edit_procs:
        # finish() counts its timeout from the process's start.
        finish(drv, p, ("edit", e[2], e[1], "cpp_extension rebuild after an edit"),
               timeout=min(300.0, time.perf_counter() - p[1] + drv.left()))


def start(drv, argv, env):
    e = dict(os.environ)
    e.update(env)
    drv.log.write("$ %s &\n" % " ".join(argv))
    drv.log.flush()
    return (subprocess.Popen(argv, env=e, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True),
            time.perf_counter())


def finish(drv, started, tag, timeout):
    p, t0 = started
    try:
        so, se = p.communicate(timeout=max(1.0, timeout - (time.perf_counter() - t0)))
        rc = p.returncode
    except subprocess.TimeoutExpired:
        p.kill()
        so, se = p.communicate()
        rc = None
    drv.log.write(se or "")
    drv.log.write("[exit %s, %.1f s]\n" % (rc, time.perf_counter() - t0))
    drv.log.flush()
    recs = bl.parse_records((so or "").splitlines())
    for r in recs:
        drv.put(r)
    bad = any(r.get("status") in ("failed", "missing", "skipped") for r in recs)
    if rc is None:
        drv.note(*tag, "failed", "timed out after %.0f s" % timeout)
        return False
    if rc != 0 and not bad:
        last = [ln for ln in (se or "").strip().splitlines() if ln.strip()][-3:]
        drv.note(*tag, "failed", "exit status %s: %s" % (rc, " | ".join(last) or "no message"))
    return rc == 0 and not bad


def read_back(drv):
    with open(os.path.join(drv.out, "drive-%s.jsonl" % drv.phase)) as f:
        return bl.parse_records(f)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--phase", required=True, choices=["cpu", "gpu", "torch"])
    ap.add_argument("--out", required=True, help="directory for the results (JSON lines) and logs")
    ap.add_argument("--build", required=True, help="build directory holding jitop and bench/ programs")
    ap.add_argument("--budget", type=float, default=180, help="seconds this phase may take")
    a = ap.parse_args()
    drv = Driver(a.phase, os.path.abspath(a.out), os.path.abspath(a.build), a.budget)
    try:
        {"cpu": phase_cpu, "gpu": phase_gpu, "torch": phase_torch}[a.phase](drv)
    finally:
        if a.phase != "torch":
            shutil.rmtree(drv.tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
