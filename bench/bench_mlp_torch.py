"""PyTorch baselines for bench/bench_mlp.cpp (run by bench/run_mlp_bench.sh): the same MLPs as an
fp16 nn.Sequential (Linear without bias, ReLU; fp32 input cast to fp16; fp16 output), eager and
torch.compile. GPU time per call: CUDA graphs of back-to-back calls timed with events where
capture works (eager), else events around back-to-back calls; median of rounds. One JSON.

    python3 bench/bench_mlp_torch.py --out FILE.json [--batch_log2 21] [--compile_budget_s 150]

Passes (labels and passes match bench_mlp.cpp): inference; fwd_bwd (forward + backward with a
fixed dL/dy, no loss, no optimizer); train (forward + MSE loss + backward + fused Adam).
"""
import argparse
import json
import math
import statistics
import sys
import time

import torch


def make_model(n_in, width, n_out, hidden):
    layers, d = [], n_in
    for _ in range(hidden):
        layers += [torch.nn.Linear(d, width, bias=False), torch.nn.ReLU()]
        d = width
    layers.append(torch.nn.Linear(d, n_out, bias=False))
    return torch.nn.Sequential(*layers).cuda().half()


def time_ms(fn, rounds=5, round_ms=20.0, use_graph=True):
    """Median GPU ms per call of fn()."""
    for _ in range(3):  # warm-up (autotuning, allocator)
        fn()
    torch.cuda.synchronize()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    fn()
    stop.record()
    torch.cuda.synchronize()
    t1 = max(start.elapsed_time(stop), 1e-3)
    inner = max(1, min(200, math.ceil(2.0 / t1)))
    graph = None
    if use_graph:
        try:
            s = torch.cuda.Stream()
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                for _ in range(2):
                    fn()
            torch.cuda.current_stream().wait_stream(s)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                for _ in range(inner):
                    fn()
        except Exception as e:  # capture not possible for this callable: plain back-to-back calls
            print(f"  (no graph: {type(e).__name__}: {str(e)[:100]})", flush=True)
            graph = None
    run = (lambda: graph.replay()) if graph is not None else (lambda: [fn() for _ in range(inner)])
    start.record()
    run()
    stop.record()
    torch.cuda.synchronize()
    per_run = max(start.elapsed_time(stop), 1e-3)
    launches = max(1, math.ceil(round_ms / per_run))
    out = []
    for _ in range(rounds):
        start.record()
        for _ in range(launches):
            run()
        stop.record()
        torch.cuda.synchronize()
        out.append(start.elapsed_time(stop) / (launches * inner))
    return statistics.median(out), out, graph is not None


def bench(label, n_in, width, n_out, hidden, batch, impl, passes, results):
    torch.manual_seed(0)
    model = make_model(n_in, width, n_out, hidden)
    x = torch.rand(batch, n_in, device="cuda", dtype=torch.float32)
    target = torch.rand(batch, n_out, device="cuda", dtype=torch.float32)
    dy = (torch.rand(batch, n_out, device="cuda") * 2 - 1).half()
    fwd = model
    if impl == "compile":
        fwd = torch.compile(model)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, fused=True, capturable=True)

    def inference():
        with torch.no_grad():
            return fwd(x.half())

    def fwd_bwd():
        y = fwd(x.half())
        y.backward(dy)

    def train():
        y = fwd(x.half())
        loss = torch.nn.functional.mse_loss(y.float(), target)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=False)

    fns = {"inference": inference, "fwd_bwd": fwd_bwd, "train": train}
    for p in passes:
        t0 = time.time()
        try:
            ms, rounds, graphed = time_ms(fns[p], use_graph=True)
            results.append({"label": label, "pass": p, "impl": impl, "batch": batch, "ms": ms, "ms_rounds": rounds,
                            "graph": graphed, "seconds": time.time() - t0})
            print(f"{label:28s} {p:10s} {impl:8s} b={batch:<8d} {ms:9.4f} ms  (graph={graphed}, "
                  f"{time.time() - t0:.0f} s)", flush=True)
        except Exception as e:
            results.append({"label": label, "pass": p, "impl": impl, "batch": batch, "error": f"{type(e).__name__}: {e}"[:300]})
            print(f"{label:28s} {p:10s} {impl:8s} ERROR {type(e).__name__}: {str(e)[:200]}", flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--batch_log2", type=int, default=21)
    ap.add_argument("--compile_budget_s", type=float, default=150.0)
    a = ap.parse_args()
    if not torch.cuda.is_available():
        print("bench_mlp_torch: no CUDA device", file=sys.stderr)
        return 1
    results, big = [], 1 << a.batch_log2
    shapes = [(32, 64, 16), (32, 128, 16), (64, 64, 64), (32, 16, 16)]
    for n_in, w, n_out in shapes:
        bench(f"{n_in}->{w}->{n_out}", n_in, w, n_out, 2, big, "eager", ["inference", "fwd_bwd", "train"], results)
    for b in (1, 128, 1024):
        bench("latency 64->64->64", 64, 64, 64, 2, b, "eager", ["inference", "fwd_bwd"], results)
    t0 = time.time()
    for n_in, w, n_out in shapes:
        if time.time() - t0 > a.compile_budget_s:
            results.append({"label": f"{n_in}->{w}->{n_out}", "impl": "compile",
                            "error": f"skipped: torch.compile budget of {a.compile_budget_s:.0f} s spent"})
            continue
        torch._dynamo.reset()
        bench(f"{n_in}->{w}->{n_out}", n_in, w, n_out, 2, big, "compile", ["inference", "train"], results)
    doc = {"torch": torch.__version__, "device": torch.cuda.get_device_name(0), "batch_log2": a.batch_log2,
           "results": results}
    with open(a.out, "w") as f:
        json.dump(doc, f, indent=1)
    print(f"bench_mlp_torch: wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
