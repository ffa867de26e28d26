#!/usr/bin/env python3
"""ISA audit of a HIP build (TNN_HIP=ON): for every kernel of every GPU object, the VGPRs, SGPRs,
static LDS, scratch and WMMA instructions of its code object for one AMD target, as a markdown
table (build output: `make test` writes build-hip/isa-audit.md), a per-source summary of it (the
table docs/amd.md shows), and the checks CI enforces: every GPU source has a code object for the
target, and the FullyFusedMLP gfx12 kernels use WMMA and no scratch (no spills, no stack).

Usage: scripts/isa_audit.py BUILD_DIR [--arch gfx1201] [--out BUILD_DIR/isa-audit.md] [--summary FILE]
Exit status 1 when a check fails (the tables are written either way)."""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile

# Kernels that must use the matrix cores and must not touch scratch memory.
MUST_WMMA_NO_SCRATCH = re.compile(r"fully_fused_mlp_gfx12_(forward|backward)_kernel")


def cache_value(build, key):
    with open(os.path.join(build, "CMakeCache.txt")) as f:
        for line in f:
            if line.startswith(key + ":"):
                return line.split("=", 1)[1].strip()
    return ""


def tool(llvm_bin, name):
    for cand in (os.path.join(llvm_bin, name), shutil.which(name + "-19") or "", shutil.which(name) or ""):
        if cand and os.path.exists(cand):
            return cand
    sys.exit(f"isa_audit: {name} not found next to the HIP clang ({llvm_bin})")


def run(cmd):
    return subprocess.run(cmd, check=True, capture_output=True, text=True).stdout


def kernels_of(readelf, code_object):
    """Kernel records from the AMDGPU metadata note: name -> {key: value}."""
    notes = run([readelf, "--notes", code_object])
    kernels, cur = [], None
    for line in notes.splitlines():
        if line.startswith("  - ."):  # a record of the amdhsa.kernels list starts
            cur = {}
            kernels.append(cur)
        elif not line.startswith("    "):  # anything less indented ends it
            cur = None
        m = re.match(r"^(?:  - |    )\.(\w+):\s*(.*)$", line)  # the record's own keys, not its .args
        if m and cur is not None:
            cur.setdefault(m.group(1), m.group(2).strip())
    return [k for k in kernels if "name" in k and "vgpr_count" in k]


def wmma_counts(objdump, code_object):
    counts, name = {}, None
    for line in run([objdump, "-d", code_object]).splitlines():
        m = re.match(r"^[0-9a-f]+ <(.+)>:$", line)
        if m:
            name = m.group(1)
            counts.setdefault(name, 0)
        elif name and "v_wmma_" in line:
            counts[name] += 1
    return counts


def short_name(demangled):
    """tnn::ffm::gfx12::fully_fused_mlp_gfx12_forward_kernel<__half, 64>(tnn::ffm::KernelArgs) ->
    fully_fused_mlp_gfx12_forward_kernel<__half, 64>"""
    s = demangled.strip()
    if s.endswith(")"):  # drop the parameter list: the parenthesis that closes at the end, matched
        depth = 0
        for i in range(len(s) - 1, -1, -1):
            depth += {")": 1, "(": -1}.get(s[i], 0)
            if depth == 0:
                s = s[:i]
                break
    if s.startswith("void "):  # kernels return void; the demangler writes it for templates
        s = s[len("void "):]
    depth, cut = 0, 0
    for i, ch in enumerate(s):  # last '::' outside template brackets
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif depth == 0 and s.startswith("::", i):
            cut = i + 2
    s = s[cut:]
    s = re.sub(r"\(anonymous namespace\)::|tnn::|ffm::|gfx12::|std::", "", s)
    return s.replace("integral_constant<", "ic<")


def summary(rows, objects, fused, failures, arch, version):
    """Per source: kernels, the largest VGPR / SGPR / static LDS figures, kernels that touch scratch,
    WMMA instructions; then every checked FullyFusedMLP kernel on its own row."""
    out = [f"ISA audit summary for {arch} ({version}): {len(objects)} sources, {len(rows)} kernels, "
           f"{sum(1 for r in rows if r['scratch'] or r['spills'])} of them with scratch; "
           + ("every check passed." if not failures else f"{len(failures)} violations."), "",
           "| source | kernels | max VGPRs | max SGPRs | max static LDS | with scratch | WMMA |",
           "|---|---:|---:|---:|---:|---:|---:|"]
    for src in sorted({r["src"] for r in rows}):
        rs = [r for r in rows if r["src"] == src]
        out.append(f"| {src} | {len(rs)} | {max(r['vgpr'] for r in rs)} | {max(r['sgpr'] for r in rs)} | "
                   f"{max(r['lds'] for r in rs)} | {sum(1 for r in rs if r['scratch'] or r['spills'])} | "
                   f"{sum(r['wmma'] for r in rs)} |")
    out += ["", "| FullyFusedMLP gfx12 kernel | VGPRs | SGPRs | scratch | WMMA |", "|---|---:|---:|---:|---:|"]
    for r in sorted(fused, key=lambda r: r["kernel"]):
        out.append(f"| `{r['kernel']}` | {r['vgpr']} | {r['sgpr']} | {r['scratch']} | {r['wmma']} |")
    return "\n".join(out) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("build")
    ap.add_argument("--arch", default="gfx1201")
    ap.add_argument("--out", default=None, help="the whole table, one row per kernel")
    ap.add_argument("--summary", default=None, help="one row per source, and the checked kernels")
    args = ap.parse_args()
    build = os.path.abspath(args.build)
    clang = cache_value(build, "TNN_HIP_CLANG")
    if not clang:
        sys.exit(f"isa_audit: {build} is not a TNN_HIP=ON build")
    llvm_bin = os.path.dirname(os.path.realpath(clang))
    objcopy, bundler, readelf, objdump, cxxfilt = (tool(llvm_bin, n) for n in (
        "llvm-objcopy", "clang-offload-bundler", "llvm-readelf", "llvm-objdump", "llvm-cxxfilt"))
    version = run([clang, "--version"]).splitlines()[0]

    objects = []
    for root, _, files in os.walk(os.path.join(build, "hip-objects")):
        objects += [os.path.join(root, f) for f in files if f.endswith(".cu.o")]
    objects.sort()
    if not objects:
        sys.exit(f"isa_audit: no HIP objects under {build}/hip-objects (build the tnn_hip_objects target first)")

    rows, failures, no_device_code = [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        for obj in objects:
            src = os.path.relpath(obj, os.path.join(build, "hip-objects"))[: -len(".o")]
            fatbin, co = os.path.join(tmp, "fatbin"), os.path.join(tmp, "co")
            # A source without kernels (host-side runtime code) has no device code object at all.
            if ".hip_fatbin" not in run([readelf, "-S", "-W", obj]):
                no_device_code.append(src)
                continue
            run([objcopy, f"--dump-section=.hip_fatbin={fatbin}", obj])
            target = f"hipv4-amdgcn-amd-amdhsa--{args.arch}"
            if target not in run([bundler, "--list", "--type=o", f"--input={fatbin}"]).split():
                failures.append(f"{src}: no {args.arch} code object")
                continue
            run([bundler, "--unbundle", "--type=o", f"--input={fatbin}", f"--targets={target}", f"--output={co}"])
            wmma = wmma_counts(objdump, co)
            kernels = kernels_of(readelf, co)
            names = run([cxxfilt] + [k["name"] for k in kernels]).splitlines() if kernels else []
            for k, demangled in zip(kernels, names):
                rec = {
                    "src": src,
                    "kernel": short_name(demangled),
                    "vgpr": int(k.get("vgpr_count", 0)),
                    "sgpr": int(k.get("sgpr_count", 0)),
                    "lds": int(k.get("group_segment_fixed_size", 0)),
                    "scratch": int(k.get("private_segment_fixed_size", 0)),
                    # VGPR spills go to scratch memory; SGPR spills go to VGPR lanes (no memory traffic).
                    "spills": int(k.get("vgpr_spill_count", 0)),
                    "sgpr_spills": int(k.get("sgpr_spill_count", 0)),
                    "wmma": wmma.get(k["name"], 0),
                }
                rows.append(rec)
                if MUST_WMMA_NO_SCRATCH.search(demangled):
                    if rec["wmma"] == 0:
                        failures.append(f"{src}: {rec['kernel']} has no WMMA instruction")
                    if rec["scratch"] or rec["spills"]:
                        failures.append(f"{src}: {rec['kernel']} uses scratch ({rec['scratch']} bytes, {rec['spills']} spilled VGPRs)")
    fused = [r for r in rows if MUST_WMMA_NO_SCRATCH.search(r["kernel"])]
    if not fused:
        failures.append("no FullyFusedMLP gfx12 kernel found")

    out = []
    out.append("# ISA audit: HIP kernels for " + args.arch)
    out.append("")
    out.append("Generated by `scripts/isa_audit.py` from the code objects of a `TNN_HIP=ON` build (`make test`")
    out.append("writes it to `build-hip/isa-audit.md`). Compiler: " + version + ". Flags and targets:")
    out.append("`cmake/hip.cmake`. Per kernel: registers per lane, static LDS (dynamic LDS is sized at launch:")
    out.append("FullyFusedMLP's plans stay within the 64 KiB a workgroup may use), scratch bytes per lane and spilled")
    out.append("registers, and the number of `v_wmma_*` instructions. Checked: every GPU source has a " + args.arch)
    out.append("code object; the FullyFusedMLP gfx12 kernels contain WMMA and use no scratch.")
    out.append("")
    if no_device_code:
        out.append("Sources with host code only (no kernels, no code object): " +
                   ", ".join(f"`{s}`" for s in no_device_code) + ".")
        out.append("")
    n_scratch = sum(1 for r in rows if r["scratch"] or r["spills"])
    out.append(f"{len(objects)} sources, {len(rows)} kernels; FullyFusedMLP kernels: {len(fused)}, "
               f"WMMA in each: {min((r['wmma'] for r in fused), default=0)}..{max((r['wmma'] for r in fused), default=0)}, "
               f"max VGPRs {max((r['vgpr'] for r in fused), default=0)}; kernels with scratch: {n_scratch}.")
    out.append("")
    out.append("| source | kernel | VGPRs | SGPRs | LDS (static) | scratch | VGPR spills | SGPR spills (to VGPRs) | WMMA |")
    out.append("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for r in sorted(rows, key=lambda r: (r["src"], r["kernel"])):
        out.append(f"| {r['src']} | `{r['kernel']}` | {r['vgpr']} | {r['sgpr']} | {r['lds']} | {r['scratch']} | "
                   f"{r['spills']} | {r['sgpr_spills']} | {r['wmma']} |")
    out.append("")
    if failures:
        out.append("## Violations")
        out.append("")
        out += [f"- {f}" for f in failures]
        out.append("")
    text = "\n".join(out)
    for path, content in ((args.out, text), (args.summary, summary(rows, objects, fused, failures, args.arch, version))):
        if path:
            os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
            with open(path, "w") as f:
                f.write(content)
    print(f"isa_audit: {len(objects)} sources, {len(rows)} kernels for {args.arch}; "
          f"FullyFusedMLP kernels {len(fused)} (WMMA in each: {min((r['wmma'] for r in fused), default=0)}+), "
          f"kernels with scratch: {n_scratch}" + (f"; wrote {args.out}" if args.out else ""))
    for f in failures:
        print("isa_audit: FAILED: " + f, file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
