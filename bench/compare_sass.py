#!/usr/bin/env python3
"""Checks that a change leaves the GPU machine code of some CUDA sources untouched, without a GPU:
compiles each source to a cubin at a base git revision and in the working tree (nvcc -cubin, the
library's flags, -fmad=false for TNN_EXACT_FP_SOURCES, one architecture) and compares every kernel's .text section byte for byte. A
refactor of kernel code that compares "same" everywhere needs no new device run to keep the
measured timings and the device test results valid.

    python3 bench/compare_sass.py [--base HEAD] [--arch sm_90] src/networks/instantiations/*.cu

--strip REGEX (repeatable) removes matches from the kernel names of both trees before they are paired,
for a change that renames kernels without touching their code (e.g. a new defaulted template argument
and an unused parameter: one --strip for the argument's mangled type, one for the parameter list).
Two kernels of one tree whose names become equal are an error, not a silent pairing.
"""
import argparse
import hashlib
import os
import re
import struct
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def text_sections(path, strip=()):
    """{kernel section name: (sha1, size)} of the .text.* sections of an ELF64 cubin; the regexes in
    `strip` are removed from the names."""
    data = open(path, "rb").read()
    shoff = struct.unpack_from("<Q", data, 0x28)[0]
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)

    def header(i):
        return struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize)

    names_off = header(shstrndx)[4]
    out = {}
    for i in range(shnum):
        name_off, _, _, _, off, size = header(i)[:6]
        name = data[names_off + name_off:].split(b"\0", 1)[0].decode()
        if name.startswith(".text."):
            # Kernels in an anonymous namespace carry a hash of the file's path, which differs between
            # the two trees: the name is compared without it.
            kernel = re.sub(r"\d+_GLOBAL__N__[0-9a-f]+_\d+_\w*?_[0-9a-f]{8}", "(anonymous)", name[len(".text."):])
            for r in strip:
                kernel = re.sub(r, "", kernel)
            if kernel in out:
                sys.exit(f"compare_sass: two kernels of {path} are both named {kernel} after --strip")
            out[kernel] = (hashlib.sha1(data[off:off + size]).hexdigest(), size)
    return out


def exact_fp_sources(root):
    """The sources CMakeLists.txt compiles without FMA contraction (TNN_EXACT_FP_SOURCES)."""
    m = re.search(r"set\(TNN_EXACT_FP_SOURCES([^)]*)\)", open(os.path.join(root, "CMakeLists.txt")).read())
    return set(m.group(1).split()) if m else set()


def compile_cubin(nvcc, root, source, arch, out, exact_fp):
    cmd = [nvcc, "-DTNN_VERSION=\"sass\"", "-DTNN_WITH_CUDA=1", "-DTNN_WITH_GPU=1", f"-I{root}/include",
           f"-I{root}/src", "-O3", "-DNDEBUG", f"-arch={arch}", "--expt-relaxed-constexpr", "-std=c++17",
           "-x", "cu", "-cubin", os.path.join(root, source), "-o", out]
    if source in exact_fp:
        cmd.insert(1, "-fmad=false")
    subprocess.run(cmd, check=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("sources", nargs="+", help="CUDA sources, relative to the repository root")
    ap.add_argument("--base", default="HEAD", help="git revision to compare the working tree with")
    ap.add_argument("--arch", default="sm_90")
    ap.add_argument("--nvcc", default=os.environ.get("NVCC", "nvcc"))
    ap.add_argument("--strip", action="append", default=[], help="regex removed from kernel names before pairing")
    a = ap.parse_args()

    differ = 0
    with tempfile.TemporaryDirectory() as tmp:
        base_root = os.path.join(tmp, "base")
        os.makedirs(base_root)
        archive = subprocess.run(["git", "-C", REPO, "archive", a.base], check=True, capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", base_root], input=archive, check=True)
        base_exact, head_exact = exact_fp_sources(base_root), exact_fp_sources(REPO)
        for src in a.sources:
            rel = os.path.relpath(os.path.abspath(src), REPO)
            old, new = os.path.join(tmp, "old.cubin"), os.path.join(tmp, "new.cubin")
            compile_cubin(a.nvcc, base_root, rel, a.arch, old, base_exact)
            compile_cubin(a.nvcc, REPO, rel, a.arch, new, head_exact)
            before, after = text_sections(old, a.strip), text_sections(new, a.strip)
            for k in sorted(set(before) | set(after)):
                same = before.get(k) == after.get(k)
                differ += not same
                sizes = f"{before.get(k, (None, '-'))[1]} -> {after.get(k, (None, '-'))[1]} bytes"
                print(f"{'same' if same else 'DIFF'}  {rel}  {k[:90]}  {sizes}")
    print(f"{differ} kernel(s) differ" if differ else "all kernels identical")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
