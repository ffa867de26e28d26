"""Report of the grid benchmark (bench/run_grid_bench.sh): joins bench_grid.json (ours, with the floors
measured in the same run) with bench_grid_torch.json (PyTorch eager / torch.compile, optional) and the
tiny-cuda-nn 2.0 figures measured on the same H200, adds the floor of every row and writes
bench_grid_report.json + bench_grid_report.md; prints the main table last.

    python3 bench/bench_grid_report.py OUT_DIR

Floors (bench/notes_grid.md explains them): a pass cannot beat both
- its DRAM bytes over the measured copy bandwidth (inputs, outputs, gradient scratch), and
- its L2 operations over their measured random rate (the fastest of the run's ways of issuing them):
  forward one gather per x-pair of corners (per 32
  bytes of the pair: one sector each) at every level whose table exceeds L1_BYTES; parameter gradient
  one v4 float reduction per x-pair (the sm_90 vector RED covers both corners when they share a slot),
  deterministic one 64-bit integer reduction request per corner (per 32 bytes of its u64 words), at
  every level too large for shared memory.
The random rates were measured over a 32 MiB table or slice, the main row's footprint, with rows in
random order: rows with much smaller tables, coherent (dense, small) levels or sorted rows can beat
them; the report marks such a row's "of floor" above 100% with "*" (the floor is an estimate there).
"""
import json
import math
import os
import struct
import sys

from bench_mlp_report import FP16_PEAK  # the MLP report's measured fp16 tensor-core rate
from reuse_torch_json import reused_note

# tiny-cuda-nn 2.0 on this H200, GPU-busy time per call (ms): (forward, forward + backward).
TCNN = {20: (0.675, 2.90), 21: (1.33, 5.86)}
# The issue's PyTorch figures (2^20): eager (forward, fwd+bwd) and torch.compile; ours are measured in the run.
TORCH_ISSUE = {"eager": (11.45, 14.97), "compile": (2.84, 4.77)}
TORCH_ISSUE_MODEL_STEP = 5.75  # the issue's torch.compile grid + MLP training step, 2^20 rows
# tcnn 2.0's grid + FullyFusedMLP w64 (2 hidden, 3 -> 16) figures: (pass, rows) -> (tcnn, tcnn with JIT fusion).
TCNN_MODEL = {("train_step", 20): (3.49, 2.89), ("train_step", 18): (1.21, 1.03), ("inference", 20): (0.691, 0.662)}
MODEL_TARGET = 2.0          # training step vs tcnn's JIT figure at 2^20 (<= 1.45 ms)
SPEEDUP_TARGET = 2.0        # ours vs tcnn, forward and forward + backward, 2^20 and 2^21
DETERMINISTIC_TARGET = 1.5  # deterministic backward / fast backward
MAIN = "hash3d_f2_L16_T19_fp16"
DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}
MODEL_OUTPUTS = 16     # bench_grid.cu's model: 3 inputs -> the grid -> the MLP -> 16 outputs
ADAM_BYTES = 36        # per fp16 parameter (src/optimizers/optimizers.cu): gradient, fp32 weight, moments, step count


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def f32(v):
    return struct.unpack("f", struct.pack("f", v))[0]


def level_entries(r):
    """Entries per level as the module sizes them (TCNN_COMPAT.md), fp32 scales rounded like the C++."""
    c, d = r["config"], r["n_dims"]
    levels, base = c.get("n_levels", 16), c.get("base_resolution", 16)
    otype = c.get("otype", "HashGrid")
    kind = c.get("type", {"DenseGrid": "Dense", "TiledGrid": "Tiled"}.get(otype, "Hash"))
    log2s = f32(math.log2(f32(c.get("per_level_scale", 2.0))))
    out = []
    for level in range(levels):
        scale = f32(f32(f32(2.0 ** f32(level * log2s)) * base) - 1.0)
        res = math.ceil(scale) + 1
        n = min(res ** d, 2 ** 31 - 1)
        n = (n + 7) // 8 * 8
        if kind == "Tiled":
            n = min(n, base ** d)
        elif kind == "Hash":
            n = min(n, 2 ** c.get("log2_hashmap_size", 19))
        out.append(n)
    return out


# Levels whose table is at most this size can live in L1 (the forward's floor does not count their
# gathers), and levels whose fp32 gradient is at most this size can be reduced in shared memory (the
# backward's floor does not count their reductions): a floor must not charge work a kernel can avoid.
L1_BYTES = 64 * 1024
SHARED_BYTES = 48 * 1024


def shape(r):
    c = r["config"]
    d = r["n_dims"]
    levels = c.get("n_levels", 16)
    f = c.get("n_features_per_level", 2)
    t = DTYPE_BYTES[r["dtype"]]
    nearest = c.get("interpolation", "Linear") == "Nearest"
    return d, levels, f, t, nearest


def global_levels(r):
    """Levels whose fp32 gradient does not fit shared memory: reduced with global atomics."""
    f = shape(r)[2]
    return sum(1 for n in level_entries(r) if n * f * 4 > SHARED_BYTES)


def gather_rate(fl):
    """The fastest random 16-byte gather rate the run measured: the floor kernel's (many blocks) or one
    256-thread block per SM with 1 to 16 loads in flight (the fused MLP kernels' occupancy), whichever
    the L2 served faster; a floor must not be beatable by another way of issuing the same gathers."""
    return max(v for k, v in fl.items() if k.startswith("gather16_per_s"))


def floor_ms(r, fl):
    """(floor ms, what bounds it) of one timed pass (the helpers below work in seconds)."""
    d, levels, f, t, nearest = shape(r)
    rows, n_params, p = r["batch"], r["n_params"], r["pass"]
    bw = fl["copy_bytes_per_s"]
    entry = f * t
    pairs = 1 if nearest else 2 ** (d - 1)
    chunks_per_pair = max(1, 2 * entry // 32)  # an aligned x-pair of up to 32 bytes is one sector, one request
    io = rows * (d * 4 + levels * f * t)  # read x, write y (forward) / read x, read dL/dy (backward)

    sizes = level_entries(r)
    l2_levels = sum(1 for n in sizes if n * entry > L1_BYTES)
    n_global = global_levels(r)

    def forward():
        gathers = rows * l2_levels * pairs * chunks_per_pair
        rate = gather_rate(fl)
        return max(io / bw, gathers / rate), "gathers" if gathers / rate > io / bw else "bytes"

    def backward(det):
        corners = 1 if nearest else 2 ** d
        if det:
            # One request per corner and 32 bytes of u64 words: the kernel's lanes of one entry send its
            # words in one instruction, which the L2 merges (at 1.4 reductions' worth by the x-pair probe,
            # bench/notes_grid.md, "Rates"; counted as 1 here, so that the floor stays a lower bound).
            ops, rate = rows * n_global * corners * max(1, f * 8 // 32), fl["red_u64_per_s"]
            scratch = n_params * (8 + 8 + t)  # zero, read the u64 accumulator, write the gradient
        else:
            ops = rows * n_global * (corners // 2 if f <= 2 and not nearest else corners) * max(1, f * 4 // 16)
            rate = fl["red_v4_per_s"]
            scratch = n_params * (4 + 4 + t) if t != 4 else n_params * 4
        b = io + scratch
        return max(b / bw, ops / rate), "reductions" if ops / rate > b / bw else "bytes"

    if p == "forward":
        sec, what = forward()
    elif p in ("backward", "backward_det"):
        sec, what = backward(p == "backward_det")
    else:
        sec = forward()[0] + backward(p == "fwd_bwd_det")[0]
        what = "sum"
    return sec * 1e3, what


def xpair_floor_ms(r, fl, key):
    """The fast backward's reductions at a measured x-pair rate (bench_red_xpairs_kernel, pairs per second):
    one x-pair per (row, global level, pair of corners), at the rate of the layout named by key."""
    d, _, f, _, nearest = shape(r)
    if key not in fl or nearest or f > 2:
        return None
    return r["batch"] * global_levels(r) * 2 ** (d - 1) / fl[key] * 1e3


def model_floor_ms(m, main, fl):
    """A floor of one pass of the encoding + MLP model (bench_grid.cu's model rows): the sum of its parts'
    floors as if they ran one after another: the grid pass (floor_ms of the main row at this batch), the
    MLP's flops or bytes, whichever bounds it, and, in a training step, Adam's bytes. A kernel that fused
    the encoding into the MLP could go below it by overlapping the parts. None for another grid."""
    if m["config"].get("encoding") != main["config"]:
        return None
    b, net, train = m["batch"], m["config"]["network"], m["pass"] != "inference"
    grid_pass = ("fwd_bwd_det" if "_det" in m["pass"] else "fwd_bwd") if train else "forward"
    grid = floor_ms(dict(main, batch=b, **{"pass": grid_pass}), fl)[0] / 1e3
    n_in = main["config"]["n_levels"] * main["config"]["n_features_per_level"]
    w, hidden = net["n_neurons"], net["n_hidden_layers"]
    weights = n_in * w + (hidden - 1) * w * w + w * MODEL_OUTPUTS
    if train:  # dW of every layer and dL/da of every layer (the first one's is the encoding's gradient)
        flops, io = 3 * 2 * b * weights, b * (n_in * 2 + MODEL_OUTPUTS * 4 + n_in * 2)  # encoding, fp32 target, dL/dencoding
        adam = (main["n_params"] + weights) * ADAM_BYTES / fl["copy_bytes_per_s"]
    else:
        flops, io, adam = 2 * b * weights, b * (n_in * 2 + MODEL_OUTPUTS * 2), 0.0
    return (grid + max(flops / FP16_PEAK, io / fl["copy_bytes_per_s"]) + adam) * 1e3


def pct(fraction):
    """A fraction of the floor; above 100% marked "*": the floor's random-row rates do not hold there."""
    return f"{fraction:.0%}" + ("*" if fraction > 1.0 else "")


def fmt(v, digits=3):
    return "—" if v is None else f"{v:.{digits}f}"


def main(out_dir):
    ours = load(os.path.join(out_dir, "bench_grid.json"))
    if ours is None:
        print("bench_grid_report: no bench_grid.json", file=sys.stderr)
        return 1
    fl = ours["floors"]
    torch_doc = load(os.path.join(out_dir, "bench_grid_torch.json")) or {"results": []}
    torch_ms = {(t["impl"], t["pass"], t["batch"]): t["ms"] for t in torch_doc["results"] if "ms" in t}
    # run_grid_bench.sh marks a file it reused (TORCH_FROM) instead of measuring PyTorch in this run.
    torch_origin = reused_note(torch_doc) or ("measured in this run" if torch_ms else "no PyTorch figure in this run")

    rows = []
    for r in ours["results"]:
        if "ms" not in r:
            rows.append({"label": r.get("label"), "variant": r.get("variant"), "error": r.get("error")})
            continue
        f_ms, bound = floor_ms(r, fl)
        rows.append({"label": r["label"], "pass": r["pass"], "batch": r["batch"], "variant": r["variant"],
                     "dtype": r["dtype"], "ms": r["ms"], "floor_ms": f_ms, "bound_by": bound,
                     "fraction_of_floor": f_ms / r["ms"]})

    def ours_ms(p, batch, variant="auto", label=MAIN):
        for x in rows:
            if x.get("label") == label and x.get("pass") == p and x.get("batch") == batch and x.get("variant") == variant:
                return x
        return None

    md = ["# Grid encoding benchmark", "",
          f"Device: {ours['device']}; tiny-rdna4-nn {ours['version']}; PyTorch {torch_doc.get('torch', '—')} ({torch_origin}).",
          "GPU time per call (CUDA graphs of back-to-back calls, events, median of 5 rounds). Main row: 3D HashGrid,",
          "16 levels, F = 2, 2^19 entries per level, base 16, scale 1.5, Linear; fp32 input in [0,1], fp16",
          "parameters and output; backward = parameter gradient (overwrite).", "",
          "## Ours vs tiny-cuda-nn 2.0 and PyTorch (same H200)", "",
          "| pass | rows | ours ms | floor ms | of floor | tcnn ms | speedup vs tcnn | target | met | torch eager ms | torch.compile ms |",
          "|---|---|---|---|---|---|---|---|---|---|---|"]
    summary = {"targets": []}
    for log2 in (20, 21):
        b = 1 << log2
        for p, ti in (("forward", 0), ("fwd_bwd", 1)):
            o = ours_ms(p, b)
            tc = TCNN[log2][ti]
            te, tco = torch_ms.get(("eager", p, b)), torch_ms.get(("compile", p, b))
            if o is None:
                md.append(f"| {p} | 2^{log2} | missing | | | {tc} | | {SPEEDUP_TARGET}x | no | {fmt(te)} | {fmt(tco)} |")
                summary["targets"].append({"pass": p, "rows": b, "met": False})
                continue
            sp = tc / o["ms"]
            met = sp >= SPEEDUP_TARGET
            summary["targets"].append({"pass": p, "rows": b, "ms": o["ms"], "tcnn_ms": tc, "speedup": sp, "met": met})
            md.append(f"| {p} | 2^{log2} | {o['ms']:.3f} | {o['floor_ms']:.3f} | {pct(o['fraction_of_floor'])} | {tc} | "
                      f"{sp:.2f}x | {SPEEDUP_TARGET}x | {'yes' if met else 'NO'} | {fmt(te)} | {fmt(tco)} |")
    md += ["", f"The issue's PyTorch figures at 2^20 (forward / fwd+bwd): eager {TORCH_ISSUE['eager'][0]} / "
           f"{TORCH_ISSUE['eager'][1]} ms, torch.compile {TORCH_ISSUE['compile'][0]} / {TORCH_ISSUE['compile'][1]} ms "
           f"(another implementation; the columns above are ours, bench/bench_grid_torch.py, {torch_origin}).", "",
           "## Deterministic parameter gradient", "",
           "| rows | fast backward ms | deterministic ms | ratio | target | met | above the target us | fwd+bwd fast | "
           "fwd+bwd deterministic |",
           "|---|---|---|---|---|---|---|---|---|"]
    for log2 in (20, 21):
        b = 1 << log2
        fast, det = ours_ms("backward", b), ours_ms("backward_det", b)
        ff, fd = ours_ms("fwd_bwd", b), ours_ms("fwd_bwd_det", b)
        if fast and det:
            ratio = det["ms"] / fast["ms"]
            met = ratio <= DETERMINISTIC_TARGET
            summary["targets"].append({"pass": "backward_det / backward", "rows": b, "ratio": ratio, "met": met})
            # How far the deterministic time is from target x fast (negative: below it), in microseconds.
            above_us = 1000 * (det["ms"] - DETERMINISTIC_TARGET * fast["ms"])
            md.append(f"| 2^{log2} | {fast['ms']:.3f} | {det['ms']:.3f} | {ratio:.3f} | <= {DETERMINISTIC_TARGET} | "
                      f"{'yes' if met else 'NO'} | {above_us:.0f} | {fmt(ff and ff['ms'])} | {fmt(fd and fd['ms'])} |")
    # Forward + backward against the two passes timed alone: what one pass leaves behind for the next (in
    # L2: run 81's evict-last lines cost the forward after a backward 50 us, bench/notes_grid.md, "Design": L2 hints).
    seq_rows = []
    for log2 in (20, 21):
        b = 1 << log2
        fw, bw, fb = ours_ms("forward", b), ours_ms("backward", b), ours_ms("fwd_bwd", b)
        if fw and bw and fb:
            excess_us = 1000 * (fb["ms"] - fw["ms"] - bw["ms"])
            summary.setdefault("sequence", []).append({"rows": b, "forward_ms": fw["ms"], "backward_ms": bw["ms"],
                                                       "fwd_bwd_ms": fb["ms"], "excess_us": excess_us})
            seq_rows.append(f"| 2^{log2} | {fw['ms']:.3f} | {bw['ms']:.3f} | {fw['ms'] + bw['ms']:.3f} | {fb['ms']:.3f} | "
                            f"{excess_us:.0f} |")
    if seq_rows:
        md += ["", "Forward + backward against the passes alone (the excess is what one pass costs the next, e.g. "
               "through what it leaves in L2; at 2^20 7-11 us in runs 76-79, 82 and 84, 50 us in run 81):", "",
               "| rows | forward ms | backward ms | sum ms | fwd_bwd ms | excess us |", "|---|---|---|---|---|---|"] + seq_rows
    # The fast backward against its reductions at the x-pair rates measured in this run (bench/notes_grid.md,
    # "Rates"): today's layout (a pair sharing a 2-entry slot as one v4, the others per lane) and the
    # permuted extra arrays that are not built (the m = 3 and 7 pairs in slots of their own).
    xp_rows = []
    for log2 in (20, 21):
        fast = next((x for x in ours["results"] if x.get("label") == MAIN and x.get("pass") == "backward"
                     and x.get("batch") == 1 << log2 and x.get("variant") == "auto" and "ms" in x), None)
        if fast is None:
            continue
        today = xpair_floor_ms(fast, fl, "xpairs_v4_one_array_pairs_per_s")
        permuted = xpair_floor_ms(fast, fl, "xpairs_v4_with_b3_b7_pairs_per_s")
        if today is not None:
            xp_rows.append(f"| 2^{log2} | {fast['ms']:.3f} | {today:.3f} | {today / fast['ms']:.0%} | {fmt(permuted)} |")
    if xp_rows:
        md += ["", "Fast backward against its reductions alone at the x-pair rates of this run (`xpairs_*` floors; "
               "the shared-memory levels, x and dL/dy loads and the conversion come on top):", "",
               "| rows | fast backward ms | reductions, today's layout ms | share | with the m = 3 / 7 arrays (not built) ms |",
               "|---|---|---|---|---|"] + xp_rows
    md += ["", "## Encoding + MLP (tcnn's benchmark: the main grid + FullyFusedMLP w64, 2 hidden, 3 -> 16, L2, Adam)", "",
           "| pass | rows | ours ms | floor ms | of floor | tcnn ms | tcnn JIT ms | speedup vs JIT | target | torch eager ms | torch.compile ms |",
           "|---|---|---|---|---|---|---|---|---|---|---|"]
    main_rows = [r for r in ours["results"] if r.get("label") == MAIN and "n_params" in r]
    for m in ours.get("model", []):
        if "error" in m:
            md.append(f"| error | 2^{int(math.log2(m['batch']))} | {m['error']} | | | | | | | | |")
            continue
        log2 = int(math.log2(m["batch"]))
        # Every variant of the training step against tcnn's training step.
        base = "train_step" if m["pass"].startswith("train_step") else m["pass"]
        tc, jit = TCNN_MODEL.get((base, log2), (None, None))
        sp = jit / m["ms"] if jit else None
        target = ""
        if m["pass"] == "train_step" and log2 == 20:
            met = sp >= MODEL_TARGET
            target = f"{MODEL_TARGET}x: {'met' if met else 'NO'}"
            summary["targets"].append({"pass": "model train_step", "rows": m["batch"], "ms": m["ms"], "tcnn_jit_ms": jit,
                                       "speedup": sp, "met": met})
        te, tco = (torch_ms.get((impl, m["pass"], m["batch"])) for impl in ("eager", "compile"))
        m_floor = model_floor_ms(m, main_rows[0], fl) if main_rows else None
        m["floor_ms"] = m_floor
        of_floor = "—" if m_floor is None else pct(m_floor / m["ms"])
        md.append(f"| {m['pass']} | 2^{log2} | {m['ms']:.3f} | {fmt(m_floor)} | {of_floor} | {fmt(tc)} | {fmt(jit)} | "
                  f"{'' if sp is None else f'{sp:.2f}x'} | {target} | {fmt(te)} | {fmt(tco)} |")
    if ours.get("model"):
        md += ["", f"The issue's torch.compile grid + MLP training step at 2^20: {TORCH_ISSUE_MODEL_STEP} ms (another "
               f"implementation); the torch columns are bench/bench_grid_torch.py's TorchGridMLP ({torch_origin}). "
               "floor: the sum of the parts' floors as if run one after another (the grid pass's, the MLP's "
               f"flops at {FP16_PEAK / 1e12:.0f} TFLOP/s or bytes, and in a training step Adam's {ADAM_BYTES} bytes per parameter)."]
    torch_errors = [t for t in torch_doc["results"] if "error" in t and t.get("label") != "check"]
    if torch_errors:
        md += ["", "PyTorch figures not measured: " + "; ".join(
            f"{t.get('impl', '?')} {'/'.join(t.get('passes', [t.get('pass', '?')]))} at 2^{int(math.log2(t['batch']))}: {t['error']}"
            for t in torch_errors) + "."]
    # The locality experiment: the same rows in Morton order, and what sorting them on the device costs
    # (the codes, the radix sort and the gather of x; the output's scatter back, which the backward
    # needs once more for dL/dy, the other way round).
    loc = {x["pass"]: x["ms"] for x in ours.get("locality", []) if "ms" in x}
    sorted_rows = [x for x in rows if x.get("variant") == "morton_sorted_rows" and "ms" in x]
    if sorted_rows or ours.get("locality"):
        md += ["", "## Locality experiment (main row, 2^20 rows in Morton order)", "",
               "| pass | random rows ms | sorted rows ms | ratio | with the device sort ms | vs tcnn | target |",
               "|---|---|---|---|---|---|---|"]
        sort_ms, unsort_ms = loc.get("morton_sort"), loc.get("unsort_output")
        for x in sorted_rows:
            base = ours_ms(x["pass"], x["batch"])
            extra = None
            if sort_ms is not None and unsort_ms is not None and x["pass"] in ("forward", "fwd_bwd"):
                extra = sort_ms + (unsort_ms if x["pass"] == "forward" else 2 * unsort_ms)
            total = None if extra is None else x["ms"] + extra
            tc = {"forward": TCNN[20][0], "fwd_bwd": TCNN[20][1]}.get(x["pass"])
            ratio = f"{base['ms'] / x['ms']:.2f}x" if base else ""
            vs_tcnn = f"{tc / total:.2f}x" if tc is not None and total is not None else ""
            target = f"{SPEEDUP_TARGET}x" if tc is not None else ""
            md.append(f"| {x['pass']} | {fmt(base and base['ms'])} | {x['ms']:.3f} | {ratio} | {fmt(total)} | "
                      f"{vs_tcnn} | {target} |")
        loc_errors = [x["error"] for x in ours.get("locality", []) if "error" in x]
        if loc_errors:
            md += [""] + [f"- locality error: {e}" for e in loc_errors]
        md += ["", f"Device sort of 2^20 rows (Morton codes, 30-bit radix sort of (code, row), gather of x): "
               f"{fmt(sort_ms)} ms; scatter of a 64-byte output row per row back to the caller's order: {fmt(unsort_ms)} ms "
               "(the backward gathers dL/dy into sorted order at the same cost; fwd_bwd counts both)."]
    # The overlap experiment: a grid pass and a training step of the MLP alone, on independent data,
    # alone and side by side on two streams (eager launches timed by events).
    ov = {x["pass"]: x["ms"] for x in ours.get("overlap", []) if "ms" in x}
    if ours.get("overlap"):
        md += ["", "## Overlap experiment (2^20 rows: a grid pass beside a training step of the MLP alone)", "",
               "| grid pass | grid alone ms | MLP step alone ms | sum ms | side by side ms | saved, of the smaller part |",
               "|---|---|---|---|---|---|"]
        mlp = ov.get("mlp_step")
        for name in ("forward", "backward"):
            g, b = ov.get(f"grid_{name}"), ov.get(f"{name}_beside_mlp")
            if g is None or mlp is None or b is None:
                continue
            md.append(f"| {name} | {g:.3f} | {mlp:.3f} | {g + mlp:.3f} | {b:.3f} | {(g + mlp - b) / min(g, mlp):.0%} |")
        if "forward_then_mlp" in ov:
            md += ["", f"The grid forward then the MLP step on one stream, the same way: {ov['forward_then_mlp']:.3f} ms."]
        md += [f"- overlap error: {x['error']}" for x in ours.get("overlap", []) if "error" in x]
    md += ["", "## Kernel variants (main row, 2^20)", "", "| variant | pass | ms | of floor |", "|---|---|---|---|"]
    for x in rows:
        if x.get("label") == MAIN and x.get("batch") == 1 << 20 and "ms" in x and x["pass"] in ("forward", "backward", "backward_det", "fwd_bwd") \
                and x.get("variant") != "morton_sorted_rows":
            md.append(f"| {x['variant']} | {x['pass']} | {x['ms']:.3f} | {pct(x['fraction_of_floor'])} |")
    md += ["", "## Smaller rows (2^20)", "", "| row | pass | ms | floor ms | of floor | bound by |", "|---|---|---|---|---|---|"]
    for x in rows:
        if x.get("label") != MAIN and "ms" in x:
            label = x['label'] if x.get('variant') in (None, 'auto') else f"{x['label']} ({x['variant']})"
            md.append(f"| {label} | {x['pass']} | {x['ms']:.3f} | {x['floor_ms']:.3f} | "
                      f"{pct(x['fraction_of_floor'])} | {x['bound_by']} |")
    errors = [x for x in rows if "error" in x]
    if errors:
        md += ["", "## Errors", ""] + [f"- {x['label']} ({x['variant']}): {x['error']}" for x in errors]
    md += ["", "## Floors measured in this run", "", "| quantity | value |", "|---|---|"]
    for k, v in sorted(fl.items()):
        md.append(f"| {k} | {v / 1e12:.3f} T/s |" if "bytes" in k else f"| {k} | {v / 1e9:.1f} G/s |")

    doc = {"device": ours["device"], "floors": fl, "rows": rows, "model": ours.get("model", []),
           "locality": ours.get("locality", []), "overlap": ours.get("overlap", []), "torch": torch_doc.get("results", []),
           "torch_reused_from": torch_doc.get("reused_from"),
           "tcnn": {str(k): v for k, v in TCNN.items()}, "summary": summary}
    with open(os.path.join(out_dir, "bench_grid_report.json"), "w") as f:
        json.dump(doc, f, indent=1)
    with open(os.path.join(out_dir, "bench_grid_report.md"), "w") as f:
        f.write("\n".join(md) + "\n")
    # The main table last (what the lead sees).
    start = md.index("## Ours vs tiny-cuda-nn 2.0 and PyTorch (same H200)")
    end = md.index("## Kernel variants (main row, 2^20)")
    print("\n".join(md[start:end]))
    met = sum(1 for t in summary["targets"] if t.get("met"))
    print(f"targets met: {met} of {len(summary['targets'])}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "out/grid_bench"))
