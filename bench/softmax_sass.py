#!/usr/bin/env python3
"""SASS instructions per element of the in-place softmax kernels (no GPU needed).

    python3 bench/softmax_sass.py [--arch sm_90] [--all-paths]

Each kernel of a pair is compiled twice through NVRTC as jitop compiles it
(--gpu-architecture and the include folders, the rest NVRTC's defaults), at two
row lengths whose per-thread shares differ by D elements (the same block and
cluster shape, loops fully unrolled): the difference of their instruction
counts over D is what one more element a thread costs, every pass included
(max, sum, output), the per-vector loads, stores and branches too.

By default kernels/inplace.cu is first rewritten so that only the common path
is left (scale > 0, finite maximum; softmax_lean2: |c mt| under its limit): the
branches for scale < 0, scale 0, +inf maxima and the huge rows are compiled
out, so the count is what that path executes, not the sum of all the
alternatives the binary holds. Every rewritten condition must be found, else
the script stops (the source changed). --all-paths counts the file as it is.

An sm_90 instruction is 16 bytes: the count is the .text size over 16. Where
cuobjdump is found (the CUDA toolkit's bin/, or PATH), the difference is also
given per mnemonic (MUFU.EX2, FFMA, ...); without it, per raw opcode field (the
instruction's low 12 bits). Fields named by compiling one-op kernels (ex2,
fmaf, x * a, s + x): 0x308 MUFU, 0x223 FFMA, 0x220 FMUL, 0x221 FADD (0xc2x:
the same with a uniform-register operand), 0x918 NOP (left out); inferred from
where they appear: 0x23e F2FP (pack two floats), 0x230 HADD2.F32 (float16 to
float), 0x231 HMUL2, 0x232 HFMA2, 0x209 FMNMX, 0x240 HMNMX2, 0x812 LOP3,
0x819 SHF, 0x816 PRMT, 0x824 IMAD.
"""
import argparse
import collections
import ctypes
import ctypes.util
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CUDA = os.environ.get("CUDA_HOME", "/usr/local/cuda")

# (label, kernel at 2D elements a thread, kernel at D elements a thread, D)
PAIRS = [
    ("bf16 lean 8x256", "softmax_lean<__nv_bfloat16, 65536, 8, 256, 8>",
     "softmax_lean<__nv_bfloat16, 32768, 8, 256, 8>", 16),
    ("bf16 lean2 8x256", "softmax_lean2<__nv_bfloat16, 65536, 8, 256, 8>",
     "softmax_lean2<__nv_bfloat16, 32768, 8, 256, 8>", 16),
    ("f16 lean 8x256", "softmax_lean<__half, 65536, 8, 256, 8>",
     "softmax_lean<__half, 32768, 8, 256, 8>", 16),
    ("f16 lean2 8x256", "softmax_lean2<__half, 65536, 8, 256, 8>",
     "softmax_lean2<__half, 32768, 8, 256, 8>", 16),
    ("f32 lean 8x256", "softmax_lean<float, 65536, 4, 256, 8>",
     "softmax_lean<float, 32768, 4, 256, 8>", 16),
    ("f32 lean2 8x256", "softmax_lean2<float, 65536, 4, 256, 8>",
     "softmax_lean2<float, 32768, 4, 256, 8>", 16),
    ("f32 rows 1024", "softmax_rows<float, 32768, 4, 1024, false>",
     "softmax_rows<float, 16384, 4, 1024, false>", 16),
    ("f32 rows_lean2 1024", "softmax_rows_lean2<float, 32768, 4, 1024>",
     "softmax_rows_lean2<float, 16384, 4, 1024>", 16),
]

# the common path's conditions (regex, replacement), each to be found
COMMON = [
    (r"if \(LN && sg != 0\.f\) \{", "if (LN) {"),
    (r"(?m)^(\s*)if \(sg != 0\.f\) \{", r"\1if (true) {"),
    (r"(?m)^(\s*)if \(sg > 0\.f\) \{", r"\1if (true) {"),
    (r"if \(__all_sync\(0xffffffffu, fabsf\(k\) <= ip_one_limit<T>\(\)\)\)", "if (true)"),
    (r"\} else if \(LN && lm != IP_PINF\) \{", "} else if (LN) {"),
    (r"\} else if \(LN && mx != IP_PINF\) \{", "} else if (LN) {"),
]


def nvrtc_lib():
    for name in ("libnvrtc.so", "libnvrtc.so.13", "libnvrtc.so.12"):
        for d in (os.path.join(CUDA, "lib64"), ""):
            try:
                return ctypes.CDLL(os.path.join(d, name) if d else name)
            except OSError:
                pass
    found = ctypes.util.find_library("nvrtc")
    if found:
        return ctypes.CDLL(found)
    sys.exit("softmax_sass: libnvrtc not found (set CUDA_HOME)")


def compile_cubin(nv, src, names, arch):
    """The cubin of src with names instantiated, and each name's lowered name."""
    prog = ctypes.c_void_p()
    r = nv.nvrtcCreateProgram(ctypes.byref(prog), src.encode(), b"inplace.cu", 0, None, None)
    if r != 0:
        sys.exit(f"nvrtcCreateProgram: {r}")
    try:
        for n in names:
            if nv.nvrtcAddNameExpression(prog, n.encode()) != 0:
                sys.exit(f"nvrtcAddNameExpression {n}")
        opts = [f"--gpu-architecture={arch}", f"-I{os.path.join(ROOT, 'kernels')}",
                f"-I{os.path.join(CUDA, 'include')}"]
        arr = (ctypes.c_char_p * len(opts))(*[o.encode() for o in opts])
        r = nv.nvrtcCompileProgram(prog, len(opts), arr)
        size = ctypes.c_size_t()
        nv.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
        log = ctypes.create_string_buffer(size.value)
        nv.nvrtcGetProgramLog(prog, log)
        if r != 0:
            sys.exit(f"nvrtcCompileProgram failed ({r}):\n{log.value.decode(errors='replace')}")
        if nv.nvrtcGetCUBINSize(prog, ctypes.byref(size)) != 0:
            sys.exit("nvrtcGetCUBINSize failed")
        cubin = ctypes.create_string_buffer(size.value)
        if nv.nvrtcGetCUBIN(prog, cubin) != 0:
            sys.exit("nvrtcGetCUBIN failed")
        lowered = {}
        for n in names:
            p = ctypes.c_char_p()
            if nv.nvrtcGetLoweredName(prog, n.encode(), ctypes.byref(p)) != 0:
                sys.exit(f"nvrtcGetLoweredName {n}")
            lowered[n] = p.value.decode()
        return cubin.raw, lowered
    finally:
        nv.nvrtcDestroyProgram(ctypes.byref(prog))


def text_sections(elf):
    """{function: code bytes} from an ELF64 cubin's .text.<function> sections."""
    shoff = struct.unpack_from("<Q", elf, 0x28)[0]
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", elf, 0x3A)
    hdr = [struct.unpack_from("<IIQQQQIIQQ", elf, shoff + i * shentsize) for i in range(shnum)]
    so = hdr[shstrndx][4]
    out = {}
    for h in hdr:
        name = elf[so + h[0]:elf.index(b"\0", so + h[0])].decode()
        if name.startswith(".text."):
            out[name[6:]] = elf[h[4]:h[4] + h[5]]
    return out


def opcode_hist(code):
    c = collections.Counter()
    for i in range(0, len(code), 16):
        c[hex(struct.unpack_from("<Q", code, i)[0] & 0xFFF)] += 1
    del c["0x918"]  # NOP (alignment padding)
    return c


def mnemonic_hists(cubin, tool):
    """{function: Counter of mnemonics} from cuobjdump -sass."""
    with tempfile.NamedTemporaryFile(suffix=".cubin", delete=False) as f:
        f.write(cubin)
        path = f.name
    try:
        text = subprocess.run([tool, "-sass", path], check=True, capture_output=True,
                              text=True).stdout
    finally:
        os.unlink(path)
    out, cur = {}, None
    for line in text.splitlines():
        m = re.match(r"\s*Function : (\S+)", line)
        if m:
            cur = out.setdefault(m.group(1), collections.Counter())
            continue
        m = re.match(r"\s*/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z0-9_.]+)", line)
        if m and cur is not None and not m.group(1).startswith("NOP"):
            cur[m.group(1)] += 1
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--arch", default="sm_90")
    ap.add_argument("--all-paths", action="store_true",
                    help="count the file as it is (every branch's code)")
    args = ap.parse_args()
    with open(os.path.join(ROOT, "kernels", "inplace.cu")) as f:
        src = f.read()
    if not args.all_paths:
        for pat, rep in COMMON:
            src, k = re.subn(pat, rep, src)
            if k == 0:
                sys.exit(f"softmax_sass: '{pat}' not in kernels/inplace.cu (the source changed)")
    names = sorted({n for p in PAIRS for n in p[1:3]})
    cubin, lowered = compile_cubin(nvrtc_lib(), src, names, args.arch)
    code = text_sections(cubin)
    tool = shutil.which("cuobjdump") or (os.path.join(CUDA, "bin", "cuobjdump")
                                         if os.path.exists(os.path.join(CUDA, "bin", "cuobjdump"))
                                         else None)
    mn = mnemonic_hists(cubin, tool) if tool else None
    print(f"# SASS instructions per element a thread ({args.arch}, "
          f"{'all paths' if args.all_paths else 'common path'}; "
          f"{'cuobjdump mnemonics' if mn else 'raw opcode fields: no cuobjdump'})")
    for label, big, small, d in PAIRS:
        a, b = code[lowered[big]], code[lowered[small]]
        per = (len(a) - len(b)) / 16 / d
        if mn:
            ha, hb = mn[lowered[big]], mn[lowered[small]]
        else:
            ha, hb = opcode_hist(a), opcode_hist(b)
        diff = {k: (ha[k] - hb[k]) / d for k in set(ha) | set(hb) if ha[k] != hb[k]}
        parts = " ".join(f"{k} {v:g}" for k, v in sorted(diff.items(), key=lambda x: -x[1])
                         if abs(v) >= 0.25)
        print(f"{label:22s} {per:5.2f} / element  ({big}: {len(a) // 16}, {small}: "
              f"{len(b) // 16})\n    {parts}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
