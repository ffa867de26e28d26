#!/usr/bin/env python3
"""Summarises a per-SASS-instruction Nsight Compute export (the *_sass.csv files that
bench/run_mlp_bench.sh writes with NCU_SHAPES): executed instructions and stall samples by opcode, the
stall reasons, and executed instructions per warp tile (the kernel's rows / rows per warp tile) in
blocks of consecutive instructions, which is where the overhead of a kernel shows without line info.

    python3 bench/ncu_sass_summary.py FILE_sass.csv --tiles N [--block 128] [--top 14]
"""
import argparse
import collections
import csv


def number(s):
    try:
        return float(s.replace(",", ""))
    except ValueError:
        return 0.0


def opcode(source):
    words = source.split()
    if not words:
        return None
    op = words[1] if words[0].startswith("@") and len(words) > 1 else words[0]
    return op.split(".")[0]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("csv")
    ap.add_argument("--tiles", type=float, required=True, help="warp tiles the kernel processed")
    ap.add_argument("--block", type=int, default=128, help="instructions per block in the block table")
    ap.add_argument("--top", type=int, default=14)
    a = ap.parse_args()

    rows = list(csv.reader(open(a.csv)))
    header, data = rows[1], rows[2:]  # row 0 names the kernel
    col = {h: i for i, h in enumerate(header)}
    executed = [number(r[col["Instructions Executed"]]) for r in data]
    samples = [number(r[col["Warp Stall Sampling (All Samples)"]]) for r in data]
    ops = [opcode(r[col["Source"]]) for r in data]
    total_i, total_s = sum(executed), sum(samples)
    print(f"{rows[0][1] if len(rows[0]) > 1 else ''}")
    print(f"executed instructions {total_i:.0f}, stall samples {total_s:.0f}, "
          f"instructions per warp tile {total_i / a.tiles:.0f}")

    by_i, by_s = collections.Counter(), collections.Counter()
    for op, n, s in zip(ops, executed, samples):
        if op:
            by_i[op] += n
            by_s[op] += s
    print("opcode      instr%  stall%")
    for op, n in by_i.most_common(a.top):
        print(f"{op:10s} {100 * n / total_i:6.1f}  {100 * by_s[op] / max(total_s, 1):6.1f}")

    reasons = collections.Counter()
    for h in header:
        if h.startswith("stall_") and "Not Issued" not in h:
            reasons[h[len("stall_"):]] = sum(number(r[col[h]]) for r in data)
    rt = sum(reasons.values()) or 1
    print("stall reasons: " + ", ".join(f"{k} {100 * v / rt:.1f}%" for k, v in reasons.most_common(10)))

    print(f"instructions per warp tile by block of {a.block} SASS instructions (blocks above 20):")
    for i in range(0, len(data), a.block):
        n = sum(executed[i:i + a.block]) / a.tiles
        if n <= 20:
            continue
        mix = collections.Counter()
        for op, e in zip(ops[i:i + a.block], executed[i:i + a.block]):
            if op:
                mix[op] += e / a.tiles
        print(f"  {i:5d} {n:6.0f}  " + " ".join(f"{k}:{v:.0f}" for k, v in mix.most_common(6)))


if __name__ == "__main__":
    main()
