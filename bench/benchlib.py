"""Shared by the Python bench programs: the output convention of bench/README.md
(one JSON object per figure on stdout, with its samples), order statistics
that match bench_util.c, the run mode, and the edit the edit-to-live
benchmarks make. Standard library only: report.py and drive.py run where
numpy is missing."""
import json
import os
import sys

MODES = ("full", "quick", "smoke")


def mode():
    """JITOP_BENCH_MODE: full (default), quick or smoke."""
    m = os.environ.get("JITOP_BENCH_MODE", "full")
    return m if m in MODES else "full"


def reps(full, quick, smoke):
    return {"full": full, "quick": quick, "smoke": smoke}[mode()]


def percentile(sorted_samples, q):
    """Linear interpolation between closest ranks (as bench_util.c)."""
    n = len(sorted_samples)
    pos = q * (n - 1)
    lo = int(pos)
    hi = min(lo + 1, n - 1)
    return sorted_samples[lo] + (sorted_samples[hi] - sorted_samples[lo]) * (pos - lo)


def stats(samples):
    s = sorted(float(x) for x in samples)
    if not s:
        return {"median": 0.0, "p10": 0.0, "p90": 0.0, "min": 0.0, "max": 0.0, "n": 0}
    return {"median": percentile(s, 0.5), "p10": percentile(s, 0.1), "p90": percentile(s, 0.9),
            "min": s[0], "max": s[-1], "n": len(s)}


def record(area, kernel, system, what, unit, samples, detail=False, **extra):
    rec = {"area": area, "kernel": kernel, "system": system, "what": what, "unit": unit}
    rec.update(stats(samples))
    rec["samples"] = [round(float(x), 6) for x in samples]
    if detail:
        rec["detail"] = True
    rec.update(extra)
    return rec


def status(area, kernel, system, what, state, reason):
    return {"area": area, "kernel": kernel, "system": system, "what": what,
            "status": state, "reason": str(reason)}


def emit(rec, out=None):
    """Prints one record as a JSON line and flushes (a later crash or timeout
    keeps what was measured)."""
    out = out or sys.stdout
    out.write(json.dumps(rec) + "\n")
    out.flush()


def log(*args):
    print(*args, file=sys.stderr, flush=True)


def edit_text(text, value):
    """The edit of the edit-to-live benchmarks (as bench_args.c): rewrite the
    first '#define SAXPY_BIAS ' line to '<value>.0f', else append a comment
    (a new content hash, the same code). Returns (text, semantic)."""
    key = "#define SAXPY_BIAS "
    at = text.find(key)
    if at >= 0:
        eol = text.find("\n", at)
        eol = len(text) if eol < 0 else eol
        return text[:at] + "%s%d.0f" % (key, value) + text[eol:], True
    return text + "\n// bench edit %d\n" % value, False


def parse_records(lines):
    """The JSON records among lines (other lines are logs and are skipped)."""
    out = []
    for line in lines:
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if isinstance(rec, dict):
            out.append(rec)
    return out
