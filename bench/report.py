#!/usr/bin/env python3
"""Turns the figures the bench programs printed (JSON lines in OUT/*.jsonl,
bench/README.md) into bench/RESULTS.md and PNG charts. A piece that is
missing shows as "not measured (reason)"; nothing is invented.

    report.py --out DIR [--results bench/RESULTS.md] [--charts bench/charts]
              [--mode full|quick|smoke] [--seconds N] [--gpu TEXT]
"""
import argparse
import datetime
import glob
import os
import platform
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib as bl  # noqa: E402

KERNELS = ["saxpy", "lltm", "layernorm"]
AREAS = [
    ("startup", "Start-up cost of each runtime",
     "Paid once per process before anything else; reported here on its own and never inside, or "
     "subtracted from, the figures below."),
    ("compile", "Cold compile (no GPU needed)",
     "An empty cache, a new process for every repetition: jitop_build of the source and op versus "
     "the same source, options and name expression through NVRTC called directly (the floor)."),
    ("hit", "Cache hit in a new process (no GPU needed)",
     "jitop_build when the entry is on disk: the stat fast path and reading the entry. Process start "
     "excluded (the whole-process figure is in the CLI table)."),
    ("build", "The command line: `jitop build` as a whole process",
     "Wall time from exec to exit, measured by the driver; `-j` scaling over every (file, arch)."),
    ("cold", "Cold: empty cache, new process, until the op is launchable",
     "After the runtime's start-up (own line above). The floor compiles every time (it keeps nothing). "
     "The torch extension builds ran side by side (up to four at a time, at most two compile jobs "
     "each on the GPU machine's cores), which can make each a little slower than alone."),
    ("warm", "Warm: cache on disk, new process, sources unchanged",
     "After the runtime's start-up. floor-cubin is the least any disk cache can cost: read a cubin "
     "file and load it, as the first module load of its process (jitop's image for the op is the same "
     "cubin: the kernel as its name expression compiles it)."),
    ("inproc", "In-process: asking again for an op already loaded", ""),
    ("edit", "Edit to live: a source edited until the new code runs",
     "jitop: a reload in the same process (explicit jitop_module_reload here; the watch's automatic "
     "hot reload in its own rows). The peers: a new load of the edited source. For saxpy the edit "
     "changes what the kernel writes and the result is checked; for the other kernels the edit is a "
     "comment (a new content hash, so a full rebuild). The torch rebuilds ran side by side (three at a time, "
     "while the torch warm, in-process and launch steps ran)."),
    ("launch", "Launch overhead: host cost per launch",
     "Batches of launches timed on the host with a sync between batches (not timed), so the queue "
     "never fills: the figure is what the caller's thread pays."),
]
# What a complete run has, per area: kernels x systems. A missing cell is
# listed as not measured, with the reason a status record gives.
EXPECTED = {
    "startup": [("-", s) for s in ("cuda-driver", "cupy", "torch")],
    "compile": [(k, s) for k in KERNELS for s in ("floor", "jitop-c")],
    "hit": [(k, "jitop-c") for k in KERNELS],
    "cold": [(k, s) for k in KERNELS for s in ("floor", "jitop-c", "cupy", "torch-load")]
    + [("saxpy", "torch-load_inline")],
    "warm": [(k, s) for k in KERNELS for s in ("floor", "jitop-c", "cupy", "torch-load")]
    + [("saxpy", "torch-load_inline")],
    "inproc": [(k, s) for k in KERNELS for s in ("floor", "jitop-c", "cupy", "torch-load")],
    "edit": [(k, s) for k in KERNELS for s in ("floor", "jitop-c", "cupy", "torch-load")],
    "launch": [("saxpy", s) for s in ("floor", "jitop-c", "cupy", "torch-load")]
    + [("lltm", s) for s in ("jitop-c", "torch-load")],
}
SYSTEM_ORDER = ["jitop-c", "jitop-watch", "jitop-cli", "floor", "floor-cubin", "cupy", "torch-load",
                "torch-load_inline", "torch", "cuda-driver"]


def sys_rank(s):
    return (SYSTEM_ORDER.index(s) if s in SYSTEM_ORDER else len(SYSTEM_ORDER), s)


def load(out):
    recs, steps = [], []
    for path in sorted(glob.glob(os.path.join(out, "*.jsonl"))):
        with open(path, errors="replace") as f:
            rs = bl.parse_records(f)
        name = os.path.basename(path)[:-6]
        if name == "steps":
            steps = rs
            continue
        for r in rs:
            r.setdefault("_src", name)
            normalize(r)
        recs.extend(rs)
    return recs, steps


SYSTEM_ALIASES = {"jitop": "jitop-c", "nvrtc": "floor"}


def normalize(r):
    """One label per kernel and system across programs: "kernels/lltm.cu"
    is "lltm", "jitop" is "jitop-c", NVRTC called directly is the floor."""
    k = r.get("kernel")
    if isinstance(k, str) and k.endswith(".cu"):
        r["kernel"] = os.path.basename(k)[:-3]
    if r.get("system") in SYSTEM_ALIASES:
        r["system"] = SYSTEM_ALIASES[r["system"]]
    return r


def is_figure(r):
    return isinstance(r.get("median"), (int, float)) and "area" in r and "status" not in r


def merge(recs):
    """One figure per (area, kernel, system, what, unit, detail): samples from
    several processes are pooled; figures without samples keep the largest n."""
    groups = {}
    for r in recs:
        if not is_figure(r):
            continue
        key = (r["area"], str(r.get("kernel", "-")), str(r.get("system", "?")), str(r.get("what", "")),
               str(r.get("unit", "")), bool(r.get("detail")))
        groups.setdefault(key, []).append(r)
    out = []
    for key, rs in groups.items():
        if all(isinstance(r.get("samples"), list) and r["samples"] for r in rs):
            samples = [x for r in rs for x in r["samples"]]
            st = bl.stats(samples)
        else:
            best = max(rs, key=lambda r: r.get("n", 1) or 1)
            st = {k: best.get(k) for k in ("median", "p10", "p90", "n")}
            st["n"] = st["n"] or 1
            samples = None
        area, kernel, system, what, unit, detail = key
        fig = {"area": area, "kernel": kernel, "system": system, "what": what, "unit": unit, "detail": detail,
               "samples": samples, "src": rs[0].get("_src", "")}
        fig.update(st)
        out.append(fig)
    return out


def fmt(v, unit=""):
    if v is None:
        return "?"
    a = abs(v)
    if a >= 100:
        s = "%.0f" % v
    elif a >= 10:
        s = "%.1f" % v
    elif a >= 1:
        s = "%.2f" % v
    elif a >= 0.01:
        s = "%.3f" % v
    else:
        s = "%.2g" % v
    return s + (" " + unit if unit else "")


TIME_UNITS = {"ns": 1e-6, "us": 1e-3, "µs": 1e-3, "ms": 1.0, "s": 1e3}


def in_common_unit(f, unit):
    """f's median in unit, or None when the units do not convert."""
    if f["unit"] == unit:
        return f["median"]
    if f["unit"] in TIME_UNITS and unit in TIME_UNITS and f["median"] is not None:
        return f["median"] * TIME_UNITS[f["unit"]] / TIME_UNITS[unit]
    return None


def ratio_text(jitop, other):
    if not other or other <= 0 or jitop is None or jitop <= 0:
        return "—"
    r = jitop / other
    if r < 1:
        return "%s× (jitop %s× faster)" % (fmt(r), fmt(1 / r))
    if r < 1.005:
        return "1.00× (same)"
    return "%s× (jitop %s slower)" % (fmt(r), ("%.0f%%" % ((r - 1) * 100)) if r < 2 else fmt(r) + "×")


# Peer steps that are jitop's step of another name: (peer 'what' prefix,
# jitop 'what' prefix).
SAME_STEP = [
    ("cpp_extension.load again", "jitop_load again"),
    ("cpp_extension.load_inline again", "jitop_load again"),
    ("RawModule(same code) again", "jitop_load again"),
]


def jitop_match(figs, area, kernel, other):
    """The jitop figure that other is compared with: the jitop row that timed
    the same thing (the same 'what'), else, when jitop has a single figure
    for this kernel and area (warm load, cold load, ...) from the program
    that timed other (else from the side-by-side driver, else from any
    program), that one. Where
    jitop timed several things and none is other's, there is no ratio: a
    ratio between two different measurements would mislead."""
    mine = [f for f in figs if f["area"] == area and f["kernel"] == kernel and not f["detail"]
            and f["system"].startswith("jitop")]
    same = [f for f in mine if f["what"] == other["what"]]
    if same:
        return preferred(same, area)
    # A load asked again in the same process is jitop_load asked again, not
    # an op lookup (which the peers' get_function rows compare with).
    for peer, ours in SAME_STEP:
        if other["what"].startswith(peer):
            match = [f for f in figs if f["area"] == area and f["kernel"] == kernel
                     and f["system"].startswith("jitop") and f["what"].startswith(ours)]
            return preferred(match, area) if match else None
    # Side by side first: the jitop rows the program that timed other timed,
    # else the side-by-side driver's (drive.py's phases time the same steps).
    mine = ([f for f in mine if f["src"] == other["src"]]
            or [f for f in mine if f["src"].startswith("drive-")] or mine)
    for system in ("jitop-c", "jitop-watch", "jitop-cli"):
        found = [f for f in mine if f["system"] == system]
        if found and len({f["what"] for f in found}) == 1:
            return preferred(found, area)
        if found:
            return None
    return None


def preferred(rows, area):
    """The figure that stands for a system when several programs measured
    it: jitop's hot reload for edit-to-live, else the side-by-side driver's."""
    return sorted(rows, key=lambda f: (area == "edit" and "hot reload" not in f["what"],
                                       not f["src"].startswith("drive-"), f["what"]))[0]


def statuses_for(recs, area, kernel, system):
    out = []
    for r in recs:
        if r.get("status") and r.get("area") == area and str(r.get("kernel")) == kernel and r.get("system") == system:
            out.append(r)
    return out


def missing_reason(recs, area, k, es, steps_why):
    """(label, reason) for an expected cell with no figure."""
    st = statuses_for(recs, area, k, es)
    if st:
        reason = "; ".join(sorted({"%s: %s" % (s["status"], s.get("reason", "")) for s in st}))
        return ("failed" if any(s["status"] == "failed" for s in st) else "not measured"), reason
    return "not measured", steps_why(area, es)


def area_table(lines, figs, recs, area, steps_why):
    rows = [f for f in figs if f["area"] == area]
    if not rows and not EXPECTED.get(area):
        for r in recs:
            if r.get("area") == area and r.get("status"):
                lines.append("- %s / %s / %s: %s (%s)" % (r.get("kernel"), r.get("system"), r.get("what"),
                                                          r.get("status"), str(r.get("reason", "")).replace("\n", " ")))
        lines.append("")
        return
    if not rows and EXPECTED.get(area):
        # Nothing measured: one line per distinct reason instead of a table of holes.
        why = {}
        for k, es in EXPECTED[area]:
            label, reason = missing_reason(recs, area, k, es, steps_why)
            why.setdefault("%s (%s)" % (label, reason), []).append("%s/%s" % (k, es) if k != "-" else es)
        for text, cells in why.items():
            lines.append("- %s: %s" % (", ".join(cells), text))
        lines.append("")
        return
    kernels = sorted({f["kernel"] for f in rows} | {k for k, _ in EXPECTED.get(area, [])},
                     key=lambda k: (KERNELS.index(k) if k in KERNELS else len(KERNELS), k))
    lines.append("| kernel | system | what was timed | median | p10 – p90 | n | jitop ÷ this |")
    lines.append("|---|---|---|---:|---:|---:|---|")
    for k in kernels:
        mine = sorted([f for f in rows if f["kernel"] == k],
                      key=lambda f: (sys_rank(f["system"]), f["detail"], f["what"]))
        have = {f["system"] for f in mine}
        for f in mine:
            unit = f["unit"]
            rt = "—"
            j = None if f["detail"] or f["system"].startswith("jitop") else jitop_match(figs, area, k, f)
            if j is not None:
                rt = ratio_text(j["median"], in_common_unit(f, j["unit"]))
            what = ("↳ " if f["detail"] else "") + f["what"]
            lines.append("| %s | %s | %s | %s | %s – %s | %s | %s |" % (
                k, f["system"], what.replace("|", "/"), fmt(f["median"], unit), fmt(f["p10"]), fmt(f["p90"]),
                f["n"], rt))
        for ek, es in EXPECTED.get(area, []):
            if ek != k or es in have:
                continue
            label, reason = missing_reason(recs, area, k, es, steps_why)
            lines.append("| %s | %s | %s | %s | | | |" % (k, es, label, ("(" + reason + ")").replace("|", "/")))
    lines.append("")


def other_areas(figs, recs):
    known = {a for a, _, _ in AREAS} | {"env"}
    found = {f["area"] for f in figs} | {r.get("area") for r in recs if r.get("status") and r.get("area")}
    return sorted(a for a in found if a and a not in known)


def steps_reason_fn(steps):
    by = {s.get("step"): s for s in steps}

    def why(area, system):
        if area in ("compile", "hit", "build"):
            s = by.get("drive-cpu")
        elif system.startswith("torch"):
            s = by.get("drive-torch")
        else:
            s = by.get("drive-gpu")
        if s and s.get("status") != "ok":
            return "%s %s: %s" % (s.get("step"), s.get("status"), s.get("reason", ""))
        return "no output for it; see the step logs in the output directory"
    return why


def targets(figs):
    """The numbers the issues ask for, where this run measured them."""
    def get(area, kernel, system, what_part=None, detail=None):
        for f in figs:
            if (f["area"] == area and f["kernel"] == kernel and f["system"] == system
                    and (what_part is None or what_part in f["what"])
                    and (detail is None or f["detail"] == detail)):
                return f
        return None
    out = []
    for k in KERNELS:
        # Like for like: a compile in a process where NVRTC is already loaded
        # (the floor links NVRTC, so its first call never shows the load;
        # jitop opens it on first use). The first-call figures stay in the
        # cold-compile table, with the whole-process rows beside them.
        j = get("compile", k, "jitop-c", "repeated in the same process")
        fl = get("compile", k, "floor", "repeated in the same process")
        if j and fl:
            r = j["median"] / fl["median"]
            out.append(("cold compile within 10%% of NVRTC directly (%s; NVRTC loaded in both)" % k,
                        "jitop ÷ floor = %.3f (%s vs %s)" % (r, fmt(j["median"], "ms"), fmt(fl["median"], "ms")),
                        r <= 1.10))
    e = get("edit", "saxpy", "jitop-c", "that reload's own rebuild")
    if e:
        out.append(("hot reload: save to first new launch at most the NVRTC compile + 5 ms (saxpy)",
                    "%s beyond that reload's own rebuild (NVRTC + write + load), median" % fmt(e["median"], "ms"),
                    e["median"] <= 5.0))
    h = get("hit", "lltm", "jitop-c", detail=False)
    if h:
        out.append(("warm hit in a new process under 0.3 ms (lltm, process start excluded)",
                    fmt(h["median"], "ms"), h["median"] < 0.3))
    n = get("build", "kernels/", "jitop-cli", "no-op")
    if n:
        out.append(("no-op `jitop build kernels/` under 10 ms wall", fmt(n["median"], "ms"), n["median"] < 10))
    s = get("build", "all", "jitop-cli", "speed-up")
    if s:
        out.append(("`jitop build -j` uses every core", s["what"] + ": " + fmt(s["median"], "×"), None))
    for k in KERNELS:
        w = get("warm", k, "jitop-c", detail=False)
        if w:
            out.append(("warm load + get in a new process under 0.3 ms beyond cuInit+context (%s)" % k,
                        fmt(w["median"], "ms"), w["median"] < 0.3))
        fc = get("warm", k, "floor-cubin", detail=False)
        if w and fc:
            # Not a target of its own: what jitop adds to the least a cache
            # of cubins on disk costs (the driver's own load of that image).
            out.append(("↳ raw driver calls loading the same cubin (floor-cubin, %s)" % k,
                        "%s; jitop adds %s" % (fmt(fc["median"], "ms"), fmt(w["median"] - fc["median"], "ms")),
                        None))
    g = get("inproc", "saxpy", "jitop-c", "jitop_op_get")
    if g:
        out.append(("getting a loaded op under 0.2 µs", fmt(g["median"], "µs"), g["median"] < 0.2))
    lc = get("launch", "saxpy", "jitop-c", "sizes checked")
    raw = get("launch", "saxpy", "jitop-c", "raw cuLaunchKernel")
    if lc and raw:
        d = lc["median"] - raw["median"]
        out.append(("jitop_launch within 0.2 µs of a raw cuLaunchKernel", "%+.3f µs (%s vs %s)" % (
            d, fmt(lc["median"], "µs"), fmt(raw["median"], "µs")), d <= 0.2))
    return out


def host_info():
    cpu = "?"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return [("host", platform.node()), ("CPU", "%s, %d cores" % (cpu, os.cpu_count() or 0)),
            ("OS", platform.platform()), ("python (driver)", platform.python_version())]


def charts(figs, chart_dir, results_dir):
    """One bar chart per area (median, p10–p90 whiskers, log scale). Returns
    (list of (area, relative path), note)."""
    # Charts of an earlier run must not sit next to this run's tables.
    for area, _, _ in AREAS:
        try:
            os.remove(os.path.join(chart_dir, "%s.png" % area))
        except OSError:
            pass
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except Exception as e:  # any import failure means: no charts, say why
        return [], "charts not made: matplotlib is not importable here (%s)" % e
    os.makedirs(chart_dir, exist_ok=True)
    made = []
    for area, title, _ in AREAS:
        if area == "build":
            continue  # rows of different kinds (cold, no-op, -j): the table says it better
        rows = [f for f in figs if f["area"] == area and not f["detail"] and f["kernel"] != "-"]
        if not rows:
            continue
        units = sorted({f["unit"] for f in rows})
        unit = max(units, key=lambda u: sum(1 for f in rows if f["unit"] == u))
        rows = [dict(f, median=in_common_unit(f, unit),
                     p10=in_common_unit(dict(f, median=f["p10"]), unit) if f["p10"] is not None else None,
                     p90=in_common_unit(dict(f, median=f["p90"]), unit) if f["p90"] is not None else None)
                for f in rows if in_common_unit(f, unit) is not None]
        kernels = sorted({f["kernel"] for f in rows}, key=lambda k: (KERNELS.index(k) if k in KERNELS else 9, k))
        systems = sorted({f["system"] for f in rows}, key=sys_rank)
        width = 0.8 / max(1, len(systems))
        fig, ax = plt.subplots(figsize=(max(6, 1.8 * len(kernels) + 2), 4))
        for i, s in enumerate(systems):
            xs, ys, lo, hi = [], [], [], []
            for x, k in enumerate(kernels):
                # One bar per system: the side-by-side driver's figure first.
                cands = [f for f in rows if f["kernel"] == k and f["system"] == s]
                f = preferred(cands, area) if cands else None
                if f is None or not f["median"] or f["median"] <= 0:
                    continue
                xs.append(x + (i - (len(systems) - 1) / 2) * width)
                ys.append(f["median"])
                lo.append(max(0.0, f["median"] - (f["p10"] if f["p10"] is not None else f["median"])))
                hi.append(max(0.0, (f["p90"] if f["p90"] is not None else f["median"]) - f["median"]))
            if xs:
                ax.bar(xs, ys, width, label=s, yerr=[lo, hi], capsize=2)
        ax.set_xticks(range(len(kernels)))
        ax.set_xticklabels(kernels)
        ax.set_yscale("log")
        ax.set_ylabel("%s (median, p10–p90; log scale)" % unit)
        ax.set_title(title, fontsize=10)
        ax.legend(fontsize=8)
        fig.tight_layout()
        path = os.path.join(chart_dir, "%s.png" % area)
        fig.savefig(path, dpi=110)
        plt.close(fig)
        made.append((area, os.path.relpath(path, results_dir)))
    return made, ""


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="the directory bench/run.sh wrote (JSON lines)")
    ap.add_argument("--results", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "RESULTS.md"))
    ap.add_argument("--charts", default=None, help="directory for the PNG charts (default: next to --results)")
    ap.add_argument("--mode", default=os.environ.get("JITOP_BENCH_MODE", "full"))
    ap.add_argument("--seconds", type=int, default=None, help="how long the run took")
    ap.add_argument("--gpu", default="?", help="the GPU arch found, or why none")
    ap.add_argument("--note", default="", help="a paragraph under the title (e.g. that this page was "
                    "made again from an earlier run's raw output)")
    a = ap.parse_args()
    results_dir = os.path.dirname(os.path.abspath(a.results))
    chart_dir = a.charts or os.path.join(results_dir, "charts")

    recs, steps = load(a.out)
    figs = merge(recs)
    env = {}
    for r in recs:
        if r.get("area") == "env" and "key" in r:
            env.setdefault(r["key"], r.get("value"))
    made, chart_note = charts(figs, chart_dir, results_dir)
    chart_of = dict(made)
    why = steps_reason_fn(steps)

    L = []
    L.append("# jitop benchmark results")
    L.append("")
    L.append("Written by `make bench` (bench/run.sh, then bench/report.py) on %s UTC, mode **%s**%s." % (
        datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M"), a.mode,
        "" if a.seconds is None else ", in %d s" % a.seconds))
    if a.note:
        L.append("")
        L.append(a.note)
    if a.mode != "full":
        L.append("")
        L.append("**This is a %s run: fewer repetitions%s. Quote only a full run's figures.**" % (
            a.mode, ", no torch extension builds" if a.mode == "quick" else ""))
    L.append("")
    L.append("Each figure is the median over its repetitions (n), with the 10th and 90th percentiles. "
             "Times are wall-clock (CLOCK_MONOTONIC in C, perf_counter in Python), after warm-up where the "
             "step allows one; device work is synchronised before a timer stops. 'jitop ÷ this' is "
             "jitop's median divided by that row's: below 1, jitop is faster. Rows marked ↳ are parts "
             "or variants of the figure above them and get no ratio. How each figure is taken: "
             "bench/README.md.")
    L.append("")
    L.append("## Machine")
    L.append("")
    L.append("| | |")
    L.append("|---|---|")
    L.append("| GPU | %s |" % a.gpu)
    for k, v in host_info():
        L.append("| %s | %s |" % (k, v))
    for k in sorted(env):
        L.append("| %s | %s |" % (k, str(env[k]).replace("|", "/")))
    L.append("")
    t = targets(figs)
    if t:
        L.append("## Targets from the issues")
        L.append("")
        L.append("| target | measured | met |")
        L.append("|---|---|---|")
        for name, val, ok in t:
            L.append("| %s | %s | %s |" % (name, val, "—" if ok is None else ("yes" if ok else "**no**")))
        L.append("")
    for area, title, text in AREAS:
        L.append("## %s" % title)
        L.append("")
        if text:
            L.append(text)
            L.append("")
        area_table(L, figs, recs, area, why)
        if area in chart_of:
            L.append("![%s](%s)" % (area, chart_of[area]))
            L.append("")
    for area in other_areas(figs, recs):
        L.append("## %s (from %s)" % (area, ", ".join(sorted(
            {r.get("_src", "?") for r in recs if r.get("area") == area}))))
        L.append("")
        area_table(L, figs, recs, area, why)
    if chart_note:
        L.append("_%s._" % chart_note)
        L.append("")
    L.append("## Steps of this run")
    L.append("")
    if steps:
        L.append("| step | status | seconds | note |")
        L.append("|---|---|---:|---|")
        for s in steps:
            L.append("| %s | %s | %s | %s |" % (s.get("step"), s.get("status"), s.get("seconds"),
                                                str(s.get("reason", "")).replace("|", "/").replace("\n", " ")))
    else:
        L.append("No step record (report.py was run without bench/run.sh).")
    L.append("")
    problems = [r for r in recs if r.get("status") == "failed"]
    if problems:
        L.append("## Failures reported by the programs")
        L.append("")
        for r in problems:
            L.append("- %s / %s / %s (%s): %s" % (r.get("area"), r.get("kernel"), r.get("system"), r.get("_src"),
                                                   str(r.get("reason", "")).replace("\n", " ")[:600]))
        L.append("")
    L.append("Raw figures: the JSON lines in the run's output directory (`bench/run.sh --out DIR`).")
    L.append("")
    tmp = a.results + ".tmp"
    with open(tmp, "w") as f:
        f.write("\n".join(L))
    os.replace(tmp, a.results)
    print("report: %d figures, %d status records -> %s%s" % (
        len(figs), sum(1 for r in recs if r.get("status")), a.results,
        (", charts in " + chart_dir) if made else ""), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
