#!/usr/bin/env python3
"""Aggregates the per-case JSON files of bench/run_blaslt_report.sh into the BlasLtMLP report:
summary JSON, a markdown table and a PNG plot.

Three studies, told apart by the label prefix of each case:
  precision:  BlasLtMLP float16 and bfloat16 against float32 (speedup = t_fp32 / t_16bit per round)
  portable:   BlasLtMLP float32 against PortableMLP float32 on the GPU
  fused:      FullyFusedMLP float16 against BlasLtMLP float16
Per case the speedup is the median over the paired rounds of (reference time / variant time);
categories report geometric means over their cases, per pass (inference, training step) and both.

usage: bench_blaslt_report.py CASES_DIR OUT_DIR
"""
import json
import math
import os
import sys

STUDIES = {
    "precision": {"title": "BlasLtMLP: float16 / bfloat16 against float32",
                  "reference": "BlasLtMLP:float32",
                  "variants": ["BlasLtMLP:float16", "BlasLtMLP:bfloat16"]},
    "portable": {"title": "BlasLtMLP float32 against PortableMLP float32 (GPU)",
                 "reference": "PortableMLP:float32",
                 "variants": ["BlasLtMLP:float32"]},
    "fused": {"title": "FullyFusedMLP float16 against BlasLtMLP float16",
              "reference": "BlasLtMLP:float16",
              "variants": ["FullyFusedMLP:float16"]},
}
PASSES = [("inference", "inference_ms"), ("train", "train_ms")]


def regime(batch):
    if batch <= 1024:
        return "latency (batch 1024)"
    if batch <= 16384:
        return "throughput (batch 16384)"
    return f"throughput (batch 2^{int(round(math.log2(batch)))})"


def geomean(values):
    values = [v for v in values if v and v > 0 and math.isfinite(v)]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


def median(values):
    values = sorted(values)
    n = len(values)
    if n == 0:
        return None
    return values[n // 2] if n % 2 else 0.5 * (values[n // 2 - 1] + values[n // 2])


def paired_speedup(ref_ms, var_ms):
    """Median over rounds of ref / variant (rounds are paired: same round, adjacent in time)."""
    ratios = [r / v for r, v in zip(ref_ms, var_ms) if r > 0 and v > 0]
    return median(ratios)


def fmt(x, digits=2, suffix="x"):
    return "n/a" if x is None else f"{x:.{digits}f}{suffix}"


def load_cases(cases_dir):
    cases = []
    for name in sorted(os.listdir(cases_dir)):
        if not name.endswith(".json"):
            continue
        with open(os.path.join(cases_dir, name)) as f:
            try:
                case = json.load(f)
            except json.JSONDecodeError as e:
                case = {"label": name, "error": f"unreadable JSON: {e}"}
        study, _, short = case.get("label", name).partition(":")
        case["study"], case["name"] = study, short or study
        cases.append(case)
    return cases


def analyse(cases):
    report = {"device": next((c["device"] for c in cases if "device" in c), "unknown"), "studies": {}}
    for study, spec in STUDIES.items():
        rows, notes = [], []
        for case in [c for c in cases if c["study"] == study]:
            if "error" in case:
                notes.append(f"{case['name']}: error: {case['error']}")
                continue
            variants = case.get("variants", {})
            ref = variants.get(spec["reference"], {})
            if "skipped" in ref or not ref:
                notes.append(f"{case['name']}: skipped: {ref.get('skipped', 'no reference result')}")
                continue
            for vname in spec["variants"]:
                var = variants.get(vname)
                if var is None:
                    continue
                if "skipped" in var:
                    notes.append(f"{case['name']} {vname}: skipped: {var['skipped']}")
                    continue
                row = {"case": case["name"], "variant": vname, "batch": case["batch"], "width": case["width"],
                       "depth": case["depth"], "grid": case["grid"], "regime": regime(case["batch"]),
                       "kind": "network + HashGrid" if case["grid"] else "network"}
                for pname, key in PASSES:
                    row[f"{pname}_ms_reference"] = ref[f"{key}_median"]
                    row[f"{pname}_ms"] = var[f"{key}_median"]
                    row[f"{pname}_speedup"] = paired_speedup(ref[key], var[key])
                row["peak_bytes_reference"] = ref["peak_bytes"]
                row["peak_bytes"] = var["peak_bytes"]
                row["memory_factor"] = ref["peak_bytes"] / var["peak_bytes"] if var["peak_bytes"] else None
                rows.append(row)
        summary = {}
        for vname in spec["variants"]:
            vrows = [r for r in rows if r["variant"] == vname]
            if not vrows:
                continue
            groups = {"overall": vrows}
            for key in sorted({r["regime"] for r in vrows}, key=lambda k: min(r["batch"] for r in vrows if r["regime"] == k)):
                groups[key] = [r for r in vrows if r["regime"] == key]
            for key in sorted({r["kind"] for r in vrows}):
                groups[key] = [r for r in vrows if r["kind"] == key]
            summary[vname] = {
                name: {"cases": len(g),
                       "inference": geomean([r["inference_speedup"] for r in g]),
                       "train": geomean([r["train_speedup"] for r in g]),
                       "both": geomean([r[f"{p}_speedup"] for r in g for p, _ in PASSES]),
                       "memory_factor": geomean([r["memory_factor"] for r in g])}
                for name, g in groups.items()}
        report["studies"][study] = {"title": spec["title"], "reference": spec["reference"], "rows": rows,
                                    "summary": summary, "notes": notes}
    return report


def markdown(report):
    out = [f"# BlasLtMLP report ({report['device']})", ""]
    out.append("Speedup = reference GPU time / variant GPU time (median of paired rounds); categories are "
               "geometric means over their cases. Memory factor = reference peak bytes / variant peak bytes. "
               "Training step = forward + backward (dL/dparams), no loss or optimizer.")
    out.append("")
    for study in report["studies"].values():
        out.append(f"## {study['title']}")
        out.append("")
        for vname, groups in study["summary"].items():
            out.append(f"**{vname}** against {study['reference']}")
            out.append("")
            out.append("| category | cases | inference | training step | both | memory factor |")
            out.append("|---|---:|---:|---:|---:|---:|")
            for name, g in groups.items():
                out.append(f"| {name} | {g['cases']} | {fmt(g['inference'])} | {fmt(g['train'])} | {fmt(g['both'])} "
                           f"| {fmt(g['memory_factor'])} |")
            out.append("")
        if study["rows"]:
            out.append("| case | variant | batch | width | depth | inference ms (ref / var) | speedup "
                       "| train ms (ref / var) | speedup | peak MiB (ref / var) |")
            out.append("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
            for r in study["rows"]:
                out.append(
                    f"| {r['case']} | {r['variant']} | {r['batch']} | {r['width']} | {r['depth']} "
                    f"| {r['inference_ms_reference']:.4f} / {r['inference_ms']:.4f} | {fmt(r['inference_speedup'])} "
                    f"| {r['train_ms_reference']:.4f} / {r['train_ms']:.4f} | {fmt(r['train_speedup'])} "
                    f"| {r['peak_bytes_reference'] / 2**20:.1f} / {r['peak_bytes'] / 2**20:.1f} |")
            out.append("")
        for note in study["notes"]:
            out.append(f"- {note}")
        if study["notes"]:
            out.append("")
    return "\n".join(out) + "\n"


def short_variant(study, vname):
    """The part of a variant name that differs from the study's reference: the dtype or the otype."""
    otype, dtype = vname.split(":")
    return dtype if otype == study["reference"].split(":")[0] else otype


def plot(report, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        return f"no plot: matplotlib is not available ({e})"
    studies = [s for s in report["studies"].values() if s["rows"]]
    if not studies:
        return "no plot: no results"
    fig, axes = plt.subplots(len(studies), 1, figsize=(max(10, 0.45 * max(len(s["rows"]) for s in studies)),
                                                       4.2 * len(studies)), squeeze=False)
    for ax, study in zip(axes[:, 0], studies):
        rows = study["rows"]
        labels = [f"{r['case']}\n{short_variant(study, r['variant'])}" for r in rows]
        xs = range(len(rows))
        ax.bar([x - 0.2 for x in xs], [r["inference_speedup"] or 0 for r in rows], width=0.4, label="inference")
        ax.bar([x + 0.2 for x in xs], [r["train_speedup"] or 0 for r in rows], width=0.4, label="training step")
        ax.axhline(1.0, color="black", linewidth=0.8)
        ax.set_yscale("log")
        ax.set_ylabel(f"speedup vs {study['reference']}")
        ax.set_title(study["title"])
        ax.set_xticks(list(xs))
        ax.set_xticklabels(labels, rotation=70, fontsize=7)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return None


def main():
    if len(sys.argv) != 3:
        print(__doc__)
        return 2
    cases_dir, out_dir = sys.argv[1], sys.argv[2]
    report = analyse(load_cases(cases_dir))
    with open(os.path.join(out_dir, "blaslt_report.json"), "w") as f:
        json.dump(report, f, indent=1)
    md = markdown(report)
    note = plot(report, os.path.join(out_dir, "blaslt_report.png"))
    if note:
        md += f"\n{note}\n"
    with open(os.path.join(out_dir, "blaslt_report.md"), "w") as f:
        f.write(md)
    # The headline numbers for the log.
    for study_name, study in report["studies"].items():
        for vname, groups in study["summary"].items():
            parts = [f"{name}: {fmt(g['both'])}" for name, g in groups.items()]
            print(f"{study_name:9s} {vname:22s} vs {study['reference']:20s} " + "; ".join(parts))
            if "overall" in groups:
                print(f"{'':9s} {'':22s}    memory factor {fmt(groups['overall']['memory_factor'])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
