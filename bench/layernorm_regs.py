#!/usr/bin/env python3
"""Registers, spills and occupancy of the LayerNorm instances a plan picks,
without a GPU: for each variant (bench/ln_variants.py) and shape, the
instance names come from `jitop build --op layernorm:DT:N` under the
variant's environment (JITOP_VERBOSE names them, with the split of the
row), then one NVRTC compile per variant of kernels/layernorm.cu with those
names for sm_90 and --ptxas-options=-v gives each one's registers, spill
bytes and shared memory, from which the blocks resident per SM follow
(sm_90: 65536 registers, 2048 threads, 32 blocks, 228 KiB shared memory
per SM, 1 KiB of it reserved per block).

    python3 bench/layernorm_regs.py --variants 'base=;fit=JITOP_LN_PLAN=fwd_fit=1' \\
        --shapes f16:24576,bf16:65536 [--md FILE]

Prints a markdown table (affine instances, forward and backward).
"""
import argparse
import ctypes
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import ln_variants  # noqa: E402

ES = {"f32": 4, "f16": 2, "bf16": 2}
LINE = re.compile(r"layernorm (forward|backward) \S+ N=(\d+): (\S.*?>): (.*)$")


def plan_lines(cli, env, dt, n, cache):
    env = dict(env, JITOP_VERBOSE="1", JITOP_CACHE_DIR=cache)
    r = subprocess.run([cli, "build", "--arch", "sm_90", "--op", f"layernorm:{dt}:{n}"], env=env,
                       capture_output=True, text=True)
    out = r.stdout + r.stderr
    if r.returncode != 0:
        raise RuntimeError(f"jitop build --op layernorm:{dt}:{n}: {out.strip()}")
    got = {}
    for line in out.splitlines():
        m = LINE.search(line)
        if m and ", true" in m.group(3).split(">")[0]:
            got[m.group(1)] = (m.group(3), m.group(4))
    return got


def shape_of(name, why, dt, n):
    """(block threads, dynamic shared bytes) of an instance from its name and
    JITOP_VERBOSE's description (the launch rule of src/ops/layernorm.c)."""
    es = ES[dt]
    args = [a.strip() for a in name[name.index("<") + 1:-1].split(",")]
    if "_generic<" in name:
        return 512, 0
    if name.startswith("layernorm_bwd_bulk<"):
        # S stages of x and dy, then gamma's share in float32
        tpr, cl = int(args[3]), int(args[4])
        stages = int(args[5]) if len(args) > 5 else 2
        return tpr, (n // cl) * (2 * stages * es + 4)
    if name.startswith("layernorm_fwd_bulk<"):
        # S stages of x, then with GB 1 (affine) gamma's and beta's shares
        # (GB 2 holds them in registers)
        tpr, cl = int(args[3]), int(args[4])
        stages = int(args[5]) if len(args) > 5 else 2
        gb = int(args[6]) == 1 if len(args) > 6 and args[2] == "true" else 0
        return tpr, (stages + 2 * gb) * (n // cl) * es
    vec, tpr = int(args[3]), int(args[4])
    cl = int(args[5]) if "_cluster<" in name else 1
    rows = 128 // tpr if cl == 1 and tpr < 128 else 1
    block = tpr * rows
    dyn = 0
    if name.startswith("layernorm_bwd"):
        # the accumulators; rows of any alignment (vec does not divide n):
        # of the body's n // vec - 1 vectors and the head/tail elements,
        # then gamma's body vectors (kernels/layernorm.cu ln_bwd_smem_bytes)
        tt = tpr * cl
        shift = n % vec != 0
        nvec = n // vec - shift
        vpt = (nvec + tt - 1) // tt
        xs = (n % vec + vec + tt - 1) // tt if shift else 0
        dyn = 2 * block * (vpt * vec + xs) * 4 + (vpt * block * 16 if shift else 0)
    return block, dyn


def blocks_per_sm(regs, block, smem):
    per_warp = (regs * 32 + 255) // 256 * 256
    warps = (65536 // per_warp) if per_warp else 64
    b = min(warps // ((block + 31) // 32), 2048 // block, 32)
    if smem:
        b = min(b, (228 * 1024) // (smem + 1024))
    return b


class Nvrtc:
    def __init__(self, path):
        self.lib = ctypes.CDLL(path)
        self.lib.nvrtcGetErrorString.restype = ctypes.c_char_p

    def check(self, r, what):
        if r != 0:
            raise RuntimeError(f"{what}: {self.lib.nvrtcGetErrorString(r).decode()}")

    def ptxas(self, src, path, names, includes):
        """{name: ptxas info text} for each name, and the whole log."""
        L, p = self.lib, ctypes.c_void_p()
        self.check(L.nvrtcCreateProgram(ctypes.byref(p), src.encode(), path.encode(), 0, None, None),
                   "nvrtcCreateProgram")
        try:
            for nm in names:
                self.check(L.nvrtcAddNameExpression(p, nm.encode()), f"nvrtcAddNameExpression {nm}")
            opts = ["--gpu-architecture=sm_90", "--ptxas-options=-v", f"-I{os.path.dirname(path)}"]
            opts += [f"-I{d}" for d in includes]
            arr = (ctypes.c_char_p * len(opts))(*[o.encode() for o in opts])
            rc = L.nvrtcCompileProgram(p, len(opts), arr)
            size = ctypes.c_size_t()
            self.check(L.nvrtcGetProgramLogSize(p, ctypes.byref(size)), "nvrtcGetProgramLogSize")
            buf = ctypes.create_string_buffer(size.value)
            self.check(L.nvrtcGetProgramLog(p, buf), "nvrtcGetProgramLog")
            log = buf.value.decode(errors="replace")
            if rc != 0:
                raise RuntimeError(f"NVRTC failed:\n{log}")
            lowered = {}
            for nm in names:
                s = ctypes.c_char_p()
                self.check(L.nvrtcGetLoweredName(p, nm.encode(), ctypes.byref(s)), "nvrtcGetLoweredName")
                lowered[s.value.decode()] = nm
        finally:
            L.nvrtcDestroyProgram(ctypes.byref(p))
        info, cur = {}, None
        for line in log.splitlines():
            m = re.search(r"Compiling entry function '([^']+)'", line)
            if m:
                cur = lowered.get(m.group(1))
                continue
            if cur is not None:
                info[cur] = info.get(cur, "") + line + "\n"
        return info, log


def parse_info(text):
    regs = re.search(r"Used (\d+) registers", text)
    spill = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", text)
    smem = re.search(r"(\d+) bytes smem", text)
    return (int(regs.group(1)) if regs else -1,
            (int(spill.group(1)), int(spill.group(2))) if spill else (0, 0),
            int(smem.group(1)) if smem else 0)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--variants", default="base=")
    ap.add_argument("--shapes", required=True, help="DT:N,... (DT f32, f16 or bf16)")
    build = os.environ.get("JITOP_BUILD") or os.path.join(ROOT, "build")
    ap.add_argument("--cli", default=os.path.join(build, "jitop"))
    cuda = os.environ.get("CUDA_HOME", "/usr/local/cuda")
    ap.add_argument("--nvrtc", default=os.path.join(cuda, "lib64", "libnvrtc.so"))
    ap.add_argument("--md", help="also write the table here")
    args = ap.parse_args()
    variants = ln_variants.parse(args.variants)
    shapes = []
    for s in args.shapes.split(","):
        dt, n = s.split(":")
        if dt not in ES:
            raise SystemExit(f"shape {s}: dtype is f32, f16 or bf16")
        shapes.append((dt, int(n)))
    src_path = os.path.join(os.environ.get("JITOP_KERNEL_DIR") or os.path.join(ROOT, "kernels"), "layernorm.cu")
    src = open(src_path).read()
    nv = Nvrtc(args.nvrtc)
    rows = ["| variant | shape | pass | instance | block | regs | spill st/ld B | smem B (static+dyn) "
            "| blocks/SM | threads/SM |", "|---|---|---|---|---|---|---|---|---|---|"]
    with tempfile.TemporaryDirectory(prefix="jitop-ln-regs-") as tmp:
        for vname, _ in variants:
            env = ln_variants.env_of(variants, vname)
            found = []
            for dt, n in shapes:
                got = plan_lines(args.cli, env, dt, n, os.path.join(tmp, vname))
                for pas in ("forward", "backward"):
                    if pas in got:
                        found.append((dt, n, pas) + got[pas])
            names = sorted({f[3] for f in found})
            info, _ = nv.ptxas(src, src_path, names, [os.path.join(cuda, "include")])
            for dt, n, pas, name, why in found:
                regs, (st, ld), smem = parse_info(info.get(name, ""))
                block, dyn = shape_of(name, why, dt, n)
                b = blocks_per_sm(regs, block, smem + dyn) if regs > 0 else 0
                rows.append(f"| {vname} | {dt} {n} | {pas[:3]} | `{name}` | {block} | {regs} | "
                            f"{st}/{ld} | {smem}+{dyn} | {b} | {b * block} |")
                print(rows[-1], flush=True)
    table = "\n".join(rows)
    if args.md:
        with open(args.md, "w") as fh:
            fh.write(f"Variants: {ln_variants.describe(variants)}\n\n{table}\n")
    print("\n" + table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
