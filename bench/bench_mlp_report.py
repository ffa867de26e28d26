"""Report of the FullyFusedMLP benchmark (bench/run_mlp_bench.sh): joins bench_mlp.json (ours) with
bench_mlp_torch.json (PyTorch eager / torch.compile, optional) and tiny-cuda-nn 2.0 figures measured
on the same H200, adds the floor of every case (bytes over 4.25 TB/s, flops over 760 TFLOP/s) and
writes bench_mlp_report.json + bench_mlp_report.md; prints the table last.

    python3 bench/bench_mlp_report.py OUT_DIR
"""
import json
import os
import sys

from reuse_torch_json import reused_note

COPY_BW = 4.25e12     # bytes/s: H200 device-to-device copy bandwidth (read + write counted)
FP16_PEAK = 760e12    # flop/s: H200 dense fp16 GEMM with fp32 accumulation as measured
# tiny-cuda-nn 2.0, FullyFusedMLP, same H200, GPU-busy time per call (ms): (inference, training step).
TCNN = {"32->64->16": (0.568, 1.95), "32->128->16": (0.985, 3.39), "64->64->64": (1.144, 4.36),
        "32->16->16": (0.393, 1.27)}
TCNN_LATENCY = 0.017  # 64->64->64, batch 1..1024, inference
# PyTorch figures of issue #6 on the same H200 (ms): eager fp16 (inference, train), torch.compile
# (inference, train); None where the issue gives none. The targets count against the best of these
# and our own same-run torch measurement, whichever is faster.
ISSUE_TORCH = {"32->64->16": ((0.611, 2.07), (0.595, 1.75)), "32->128->16": ((1.18, 3.51), (1.15, 3.17)),
               "64->64->64": ((0.687, 3.71), (0.672, 2.38)), "32->16->16": ((0.262, 1.21), (None, None))}
ISSUE_TORCH_LATENCY = 0.008  # 64->64->64, batch 1..1024, eager inference
# Targets of issue #6: inference speedup over the best of tcnn / torch at 2^21, training step over
# the best of tcnn / torch.compile (every width).
INFER_TARGET = {"32->64->16": 3.0, "32->128->16": 2.0, "64->64->64": 2.0, "32->16->16": 2.0}
TRAIN_TARGET = {"32->64->16": 2.0, "32->128->16": 2.0, "64->64->64": 2.0, "32->16->16": 2.0}


def pad16(v):
    return (v + 15) // 16 * 16


def floors(r):
    """(bytes, flops) a pass cannot do without, for an MLP with 2 hidden layers and no bias."""
    b, n_in, w, n_out, hidden = r["batch"], r["n_in"], r["width"], r["n_out"], r["hidden"]
    f0 = 2 * b * pad16(n_in) * w
    fwd = f0 + 2 * b * (hidden - 1) * w * w + 2 * b * w * pad16(n_out)
    io_fwd = b * (n_in * 4 + n_out * 2)  # fp32 input in, fp16 output out
    p = r["pass"]
    if p in ("inference", "forward_ctx"):
        return io_fwd, fwd
    # backward: dW of every layer (= forward flops) and dL/da of all but the first layer; it reads the
    # input again (recomputing beats storing activations) and dL/dy.
    bwd_flops = fwd + (fwd - f0)
    if p in ("train_fused", "fused_loss_bwd"):  # one kernel: reads the input and the fp32 target, writes the fp32 loss values
        return b * (n_in * 4 + n_out * 4 + n_out * 4), fwd + bwd_flops
    if p == "fused_loss_bwd_dx":  # the same with a 16-bit input, and dL/dinput (16-bit: the first layer's chain too)
        return b * (n_in * 2 + n_out * 4 + n_out * 4 + n_in * 2), fwd + bwd_flops + f0
    io = io_fwd + b * (n_in * 4 + n_out * 2)
    if p == "train" and "L2" in r.get("what", ""):
        io += b * n_out * (2 + 4 + 2)  # the loss reads y and the fp32 target, writes dL/dy
    return io, fwd + bwd_flops


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def main(out_dir):
    ours = load(os.path.join(out_dir, "bench_mlp.json"))
    if ours is None:
        print("bench_mlp_report: no bench_mlp.json", file=sys.stderr)
        return 1
    torch_doc = load(os.path.join(out_dir, "bench_mlp_torch.json")) or {"results": []}
    torch_ms = {}
    for t in torch_doc["results"]:
        if "ms" in t:
            torch_ms[(t["label"], t["pass"], t["impl"], t["batch"])] = t["ms"]

    rows, variants = [], []
    for r in ours["results"]:
        if "ms" not in r:
            rows.append({"label": r.get("label"), "error": r.get("error")})
            continue
        # The automatic plan: every field of bench_mlp.cpp's variant at its default (0 / false).
        auto = not any(r["variant"].values())
        io, flops = floors(r)
        floor_ms = max(io / COPY_BW, flops / FP16_PEAK) * 1e3
        row = {"label": r["label"], "pass": r["pass"], "batch": r["batch"], "what": r["what"], "ms": r["ms"],
               "floor_ms": floor_ms, "floor_bytes_ms": io / COPY_BW * 1e3, "floor_flops_ms": flops / FP16_PEAK * 1e3,
               "fraction_of_floor": floor_ms / r["ms"], "variant": r["variant"]}
        if not auto:
            variants.append(row)
            continue
        key = r["label"].replace("latency ", "")
        # The fused training step (Trainer's default for these networks) is a training step too.
        base = "train" if r["pass"] == "train_fused" else r["pass"]
        if base in ("inference", "fwd_bwd", "train"):
            eager = torch_ms.get((r["label"], base, "eager", r["batch"]))
            comp = torch_ms.get((r["label"], base, "compile", r["batch"]))
            row["torch_eager_ms"], row["torch_compile_ms"] = eager, comp
            tc = None
            if r["label"] in TCNN and base in ("inference", "train"):
                tc = TCNN[r["label"]][0 if base == "inference" else 1]
            elif r["label"].startswith("latency") and r["pass"] == "inference":
                tc = TCNN_LATENCY
            row["tcnn_ms"] = tc
            issue_eager = issue_comp = None
            if r["label"] in ISSUE_TORCH and base in ("inference", "train"):
                k = 0 if base == "inference" else 1
                issue_eager, issue_comp = ISSUE_TORCH[r["label"]][0][k], ISSUE_TORCH[r["label"]][1][k]
            elif r["label"].startswith("latency") and r["pass"] == "inference":
                issue_eager = ISSUE_TORCH_LATENCY
            row["issue_torch_eager_ms"], row["issue_torch_compile_ms"] = issue_eager, issue_comp
            if base == "inference":
                best = min([v for v in (tc, eager, comp, issue_eager, issue_comp) if v], default=None)
                target = INFER_TARGET.get(key) if not r["label"].startswith("latency") else None
            elif base == "train":
                best = min([v for v in (tc, comp, issue_comp) if v], default=None)
                target = TRAIN_TARGET.get(key)
            else:  # fwd_bwd: against torch's matching part
                best = min([v for v in (eager, comp) if v], default=None)
                target = None
            row["best_baseline_ms"] = best
            row["speedup"] = best / r["ms"] if best else None
            row["target_speedup"] = target
            row["meets_target"] = (row["speedup"] >= target) if (target and row["speedup"]) else None
        rows.append(row)

    doc = {"device": ours.get("device"), "torch": torch_doc.get("torch"), "torch_reused_from": torch_doc.get("reused_from"),
           "floors": {"copy_bw": COPY_BW,
           "fp16_peak": FP16_PEAK}, "tcnn": TCNN, "rows": rows, "variants": variants}
    with open(os.path.join(out_dir, "bench_mlp_report.json"), "w") as f:
        json.dump(doc, f, indent=1)

    def fmt(v, d=4):
        return "-" if v is None else f"{v:.{d}f}"

    def torch_cell(ours_ms, issue_ms):  # the torch JSON's figure (see the title for its run), the issue's in brackets
        return fmt(ours_ms) + (f" ({issue_ms:.3f})" if issue_ms else "")

    reused = reused_note(torch_doc)
    lines = [f"# FullyFusedMLP on {ours.get('device')} (torch {torch_doc.get('torch', 'n/a')}{'; ' + reused if reused else ''})", "",
             "GPU time per call (ms), median of rounds of CUDA graphs of back-to-back calls. floor = max(bytes / "
             "4.25 TB/s, flops / 760 TFLOP/s); 'of floor' = floor / ours. speedup = best baseline / ours (inference: "
             "tcnn, torch eager, torch.compile; train: tcnn, torch.compile; fwd_bwd: torch), each torch figure the "
             f"faster of {'the reused file' if reused else 'this run'}'s and the issue's (in brackets).", "",
             "| case | pass | batch | ours | floor | of floor | torch eager | torch.compile | tcnn | speedup | target |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['label']} | error: {r['error']} | | | | | | | | | |")
            continue
        tgt = "" if not r.get("target_speedup") else (f"{r['target_speedup']:.0f}x " +
                                                        ("met" if r.get("meets_target") else "MISSED"))
        sp = "-" if not r.get("speedup") else f"{r['speedup']:.2f}x"
        lines.append(f"| {r['label']} | {r['pass']} | {r['batch']} | {fmt(r['ms'])} | {fmt(r['floor_ms'])} | "
                     f"{r['fraction_of_floor']:.0%} | {torch_cell(r.get('torch_eager_ms'), r.get('issue_torch_eager_ms'))} | "
                     f"{torch_cell(r.get('torch_compile_ms'), r.get('issue_torch_compile_ms'))} | "
                     f"{fmt(r.get('tcnn_ms'), 3)} | {sp} | {tgt} |")
    train_what = sorted({r["what"] for r in rows if r.get("pass") == "train"})
    fused_what = sorted({r["what"] for r in rows if r.get("pass") == "train_fused"})
    lines += ["", f"train = {', '.join(train_what) or 'n/a'} (tcnn's and torch's train include an L2/MSE loss and Adam).",
              f"train_fused = {', '.join(fused_what) or 'n/a'}: the Trainer's step for these networks (forward, "
              "loss and backward in the backward kernel; the same bits as train).",
              "", "## Variants (warps per block, forward / backward; kernels)", "",
              "| case | pass | fwd warps | bwd warps | kernels | ms | of floor |", "|---|---|---|---|---|---|---|"]
    for v in variants:
        kernels = "generic (run-time activation switch)" if v["variant"].get("generic") else "auto"
        if v["variant"].get("backward_m_tiles"):
            kernels += f", backward {v['variant']['backward_m_tiles']} m16 tiles per warp"
        if v["variant"].get("dy_global"):
            kernels += ", dL/doutput and target read in place"
        if v["variant"].get("fused_target_global"):
            kernels += ", fused step's target from global memory"
        if v["variant"].get("no_wgmma"):
            kernels += ", mma.sync backward (no wgmma)"
        if v["variant"].get("dx_values"):
            kernels += f", dL/dinput {v['variant']['dx_values']} value(s) per store"
        lines.append(f"| {v['label']} | {v['pass']} | {v['variant']['forward_warps'] or 'auto'} | "
                     f"{v['variant']['backward_warps'] or 'auto'} | {kernels} | {fmt(v['ms'])} | "
                     f"{v['fraction_of_floor']:.0%} |")
    md = "\n".join(lines) + "\n"
    with open(os.path.join(out_dir, "bench_mlp_report.md"), "w") as f:
        f.write(md)
    print("\n".join(lines[:lines.index("## Variants (warps per block, forward / backward; kernels)")]))  # the main table last
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "."))
