#!/usr/bin/env python3
"""The README's plot: speed against tiny-cuda-nn 2.0 of the headline workloads, from the committed
results (bench/results/h200/bench_grid.json and bench_mlp.json: the C++ API on an H200;
bench/results/h100/bench_python.json: the Python API on an H100). Needs matplotlib (Debian:
python3-matplotlib, `scripts/install_deps.sh bench`); nothing else in the project does.

    python3 bench/plot_results.py [--out docs/performance.png]
"""
import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

from bench_grid_report import MAIN, TCNN_MODEL  # noqa: E402  tiny-cuda-nn 2.0's figures on the H200
from bench_mlp_report import TCNN as TCNN_MLP  # noqa: E402

MODEL = "hashgrid_ffmlp64_3to16_fp16"


def load(rel):
    with open(os.path.join(ROOT, rel)) as f:
        return json.load(f)


def cpp_rows():
    """(label, ours ms, tcnn ms, torch.compile ms or None) for the C++ API on the H200."""
    grid, mlp = load("bench/results/h200/bench_grid.json"), load("bench/results/h200/bench_mlp.json")
    rows = []

    def grid_ms(pass_, batch):
        return next(r["ms"] for r in grid["rows"] if r.get("label") == MAIN and r["pass"] == pass_
                    and r["batch"] == batch and r.get("variant") in (None, "auto") and "ms" in r)

    def torch_ms(label, pass_, batch):
        hits = [t["ms"] for t in grid["torch"] if t["label"] == label and t["pass"] == pass_
                and t["batch"] == batch and t["impl"] == "compile" and "ms" in t]
        return hits[0] if hits else None

    for pass_, name, i in (("forward", "HashGrid forward", 0), ("fwd_bwd", "HashGrid forward + backward", 1)):
        rows.append((name + ", 2^20", grid_ms(pass_, 1 << 20), grid["tcnn"]["20"][i], torch_ms(MAIN, pass_, 1 << 20)))
    step = next(m["ms"] for m in grid["model"] if m["pass"] == "train_step" and m["batch"] == 1 << 20)
    rows.append(("HashGrid + FullyFusedMLP\ntraining step, 2^20 (tcnn: JIT)", step, TCNN_MODEL[("train_step", 20)][1],
                 torch_ms(MODEL, "train_step", 1 << 20)))
    for shape, pass_, name, i in (("32->64->16", "inference", "FullyFusedMLP inference", 0),
                                  ("64->64->64", "inference", "FullyFusedMLP inference", 0),
                                  ("32->64->16", "train_fused", "FullyFusedMLP training step", 1),
                                  ("64->64->64", "train_fused", "FullyFusedMLP training step", 1)):
        r = next(r for r in mlp["rows"] if r["label"] == shape and r["pass"] == pass_)
        compiled = [v for v in (r.get("torch_compile_ms"), r.get("issue_torch_compile_ms")) if v]
        rows.append((f"{name}\n{shape}, 2^21", r["ms"], TCNN_MLP[shape][i], min(compiled) if compiled else None))
    return rows, mlp["device"]


def python_rows():
    """(label, script ms, Trainer ms or None, tcnn ms) for the Python API on the H100."""
    doc = load("bench/results/h100/bench_python.json")
    ms = {(r["row"], r["impl"]): r["ms"] for r in doc["results"] if "ms" in r}
    rows = []
    for row, name in (("mlp_train_32_64_16", "FullyFusedMLP training step\n32->64->16, 2^21"),
                      ("mlp_train_64_64_64", "FullyFusedMLP training step\n64->64->64, 2^21"),
                      ("grid_train", "HashGrid + FullyFusedMLP\ntraining step, 2^20"),
                      ("grid_inference", "HashGrid + FullyFusedMLP\ninference, 2^20")):
        ref = doc["tcnn_reference"][row]
        tcnn = min(v for k, v in ref.items() if k.startswith("tcnn"))
        rows.append((name, ms[(row, "script")], ms.get((row, "trainer")), tcnn))
    return rows, doc["device"], doc["date"]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.path.join(ROOT, "docs", "performance.png"))
    args = ap.parse_args()
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        sys.exit(f"plot_results: needs matplotlib (Debian: python3-matplotlib): {e}")

    cpp, cpp_device = cpp_rows()
    py, py_device, py_date = python_rows()
    fig, axes = plt.subplots(1, 2, figsize=(12, 5.2), gridspec_kw={"width_ratios": [len(cpp), len(py)]})
    colors = {"ours": "#2b6cb0", "compile": "#9bbbe0", "trainer": "#2b6cb0", "script": "#9bbbe0"}

    ax = axes[0]
    x = range(len(cpp))
    ax.bar([i - 0.2 for i in x], [t / o for _, o, t, _ in cpp], 0.4, color=colors["ours"], label="vs tiny-cuda-nn 2.0")
    ax.bar([i + 0.2 for i in x], [(c / o if c else 0) for _, o, _, c in cpp], 0.4, color=colors["compile"],
           label="vs torch.compile")
    ax.set_xticks(list(x))
    ax.set_xticklabels([r[0] for r in cpp], rotation=35, ha="right", fontsize=8)
    ax.set_title(f"C++ API, {cpp_device.split(' (')[0]}", fontsize=10)

    ax = axes[1]
    x = range(len(py))
    ax.bar([i - 0.2 for i in x], [(t / tr if tr else 0) for _, _, tr, t in py], 0.4, color=colors["trainer"],
           label="tinycudann.Trainer vs tiny-cuda-nn 2.0")
    ax.bar([i + 0.2 for i in x], [t / s for _, s, _, t in py], 0.4, color=colors["script"],
           label="tcnn-style script vs tiny-cuda-nn 2.0")
    ax.set_xticks(list(x))
    ax.set_xticklabels([r[0] for r in py], rotation=35, ha="right", fontsize=8)
    ax.set_title(f"Python API, {py_device} ({py_date})", fontsize=10)

    for ax in axes:
        ax.axhline(1.0, color="black", linewidth=0.8)
        ax.set_ylabel("speedup (their time / ours)")
        ax.legend(fontsize=8, loc="upper left")
        ax.grid(axis="y", alpha=0.3)
    fig.suptitle("GPU time per call against tiny-cuda-nn 2.0 and PyTorch (higher is faster; 1 = as fast)", fontsize=11)
    fig.tight_layout()
    fig.savefig(args.out, dpi=90)
    print(f"plot_results: wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
