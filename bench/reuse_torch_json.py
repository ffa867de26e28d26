#!/usr/bin/env python3
"""Copies a PyTorch baseline JSON of an earlier run (TORCH_FROM of run_grid_bench.sh / run_mlp_bench.sh)
into this run's output, with "reused_from" naming its origin (kept when the file was itself a reused
copy), so that the reports do not present those figures as measured in this run. Exits non-zero, with
a message, when the source is missing or is not such a JSON.

usage: reuse_torch_json.py SOURCE DESTINATION"""
import json
import sys


def reused_note(doc):
    """What the reports say of a PyTorch JSON this script copied, or None for one measured in the run."""
    return f"NOT measured in this run: reused from {doc['reused_from']}" if "reused_from" in doc else None


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    try:
        with open(sys.argv[1]) as f:
            doc = json.load(f)
        if not isinstance(doc, dict) or not isinstance(doc.get("results"), list):
            raise ValueError("no 'results' list")
    except (OSError, ValueError) as e:
        sys.exit(f"reuse_torch_json: {sys.argv[1]}: not a PyTorch baseline JSON ({e})")
    doc.setdefault("reused_from", sys.argv[1])
    with open(sys.argv[2], "w") as f:
        json.dump(doc, f, indent=1)
