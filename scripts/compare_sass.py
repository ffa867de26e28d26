#!/usr/bin/env python3
"""Checks that a change leaves the GPU machine code of some CUDA sources untouched, without a GPU:
compiles each source to a cubin at a base git revision and in the working tree (nvcc -cubin, the
library's flags, one architecture) and compares every kernel's .text section byte for byte. A
refactor of kernel code that compares "same" everywhere needs no new device run to keep the
measured timings and the device test results valid.

    python3 scripts/compare_sass.py [--base HEAD] [--arch sm_90] src/networks/instantiations/*.cu
"""
import argparse
import hashlib
import os
import struct
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def text_sections(path):
    """{kernel section name: (sha1, size)} of the .text.* sections of an ELF64 cubin."""
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
            out[name[len(".text."):]] = (hashlib.sha1(data[off:off + size]).hexdigest(), size)
    return out


def compile_cubin(nvcc, root, source, arch, out):
    cmd = [nvcc, "-DTNN_VERSION=\"sass\"", "-DTNN_WITH_CUDA=1", "-DTNN_WITH_GPU=1", f"-I{root}/include",
           f"-I{root}/src", "-O3", "-DNDEBUG", f"-arch={arch}", "--expt-relaxed-constexpr", "-std=c++17",
           "-x", "cu", "-cubin", os.path.join(root, source), "-o", out]
    subprocess.run(cmd, check=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("sources", nargs="+", help="CUDA sources, relative to the repository root")
    ap.add_argument("--base", default="HEAD", help="git revision to compare the working tree with")
    ap.add_argument("--arch", default="sm_90")
    ap.add_argument("--nvcc", default=os.environ.get("NVCC", "nvcc"))
    a = ap.parse_args()
    differ = 0
    with tempfile.TemporaryDirectory() as tmp:
        base_root = os.path.join(tmp, "base")
        os.makedirs(base_root)
        archive = subprocess.run(["git", "-C", REPO, "archive", a.base], check=True, capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", base_root], input=archive, check=True)
        for src in a.sources:
            rel = os.path.relpath(os.path.abspath(src), REPO)
            old, new = os.path.join(tmp, "old.cubin"), os.path.join(tmp, "new.cubin")
            compile_cubin(a.nvcc, base_root, rel, a.arch, old)
            compile_cubin(a.nvcc, REPO, rel, a.arch, new)
            before, after = text_sections(old), text_sections(new)
            for k in sorted(set(before) | set(after)):
                same = before.get(k) == after.get(k)
                differ += not same
                sizes = f"{before.get(k, (None, '-'))[1]} -> {after.get(k, (None, '-'))[1]} bytes"
                print(f"{'same' if same else 'DIFF'}  {rel}  {k[:90]}  {sizes}")
    print(f"{differ} kernel(s) differ" if differ else "all kernels identical")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
