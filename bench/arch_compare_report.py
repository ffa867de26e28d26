#!/usr/bin/env python3
"""The FullyFusedMLP benchmark of builds for different CUDA architecture lists on one GPU, side by side
(bench/run_arch_compare.sh): for each benchmark row (shape, pass, batch) the time of each build and its
ratio to the first build's. Prints markdown.

Usage: bench/arch_compare_report.py DIR... where each DIR is one build's $OUT/arch-<list> folder
(holding bench/bench_mlp.json), the first being the reference (e.g. arch-90a, then arch-90)."""
import json
import os
import sys


def load(folder):
    path = os.path.join(folder, "bench", "bench_mlp.json")
    with open(path) as f:
        data = json.load(f)
    name = os.path.basename(os.path.normpath(folder))
    arch = name[len("arch-"):] if name.startswith("arch-") else name
    rows = {(r["label"], r["pass"], r["batch"]): r["ms"] for r in data.get("rows", [])}
    return arch.replace("_", ";"), data.get("device", "?"), rows


def main(folders):
    if len(folders) < 2:
        sys.exit(__doc__)
    builds = [load(f) for f in folders]
    devices = sorted({device for _, device, _ in builds})
    if len(devices) != 1:
        sys.exit(f"arch_compare_report: the folders were measured on different devices: {devices}")
    ref_arch, _, ref_rows = builds[0]
    print(f"# FullyFusedMLP by build architectures on {devices[0]}\n")
    print(f"Times in ms (bench/bench_mlp.cpp --quick, one run each); ratio = time / time of the "
          f"`{ref_arch}` build. `90a`: the wgmma backward kernels on Hopper; `90`: the mma.sync kernels "
          f"every other GPU runs; `80`: compute_80 PTX compiled by the driver (pre-sm_90 code paths).\n")
    header = ["shape", "pass", "batch"] + [f"`{a}` ms" for a, _, _ in builds] + [f"`{a}` / `{ref_arch}`" for a, _, _ in builds[1:]]
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for key in ref_rows:
        times = [rows.get(key) for _, _, rows in builds]
        cells = list(map(str, key)) + ["-" if t is None else f"{t:.3f}" for t in times]
        cells += ["-" if t is None or not times[0] else f"{t / times[0]:.2f}" for t in times[1:]]
        print("| " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main(sys.argv[1:])
