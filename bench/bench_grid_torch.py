"""PyTorch baselines for bench/bench_grid.cu (run by bench/run_grid_bench.sh): tcnn's benchmark hash grid
(3D, 16 levels, 2 features, 2^19 entries per level, base 16, scale 1.5, Linear, CoherentPrime) written
by us as vectorised PyTorch: fp32 input, fp16 parameters and output, fp32 interpolation; eager and
torch.compile. GPU time per call: CUDA graphs of back-to-back calls timed with events where capture
works, else events around back-to-back calls; median of rounds. One JSON.

    python3 bench/bench_grid_torch.py --out FILE.json [--compile_budget_s 150] [--check]

Passes (labels match bench_grid.cu): forward (no grad); fwd_bwd (forward + backward of dL/dy into
the parameters' gradient); train_step (tcnn's encoding + MLP benchmark model: this grid, then a bias-free
MLP 32 -> 64 -> 64 -> 16 with ReLU and a linear output, L2 loss, Adam; as bench_grid.cu's model rows).
--check compares the forward with the tinycudann package's when importable.
"""
import argparse
import json
import math
import os
import statistics
import sys
import time

import numpy as np
import torch

MODEL_LABEL = "hashgrid_ffmlp64_3to16_fp16"  # bench_grid.cu's label of the same model
PRIMES = (1, 2654435761, 805459861, 3674653429, 2097192037, 1434869437, 2165219737)


class TorchHashGrid(torch.nn.Module):
    """tcnn's GridEncoding (Hash type) with the level table of TCNN_COMPAT.md, in plain torch ops."""

    def __init__(self, n_dims=3, n_levels=16, n_features=2, log2_size=19, base=16, per_level_scale=1.5,
                 dtype=torch.float16):
        super().__init__()
        self.n_dims, self.n_levels, self.n_features = n_dims, n_levels, n_features
        scales, res, sizes, offsets, hashed, strides = [], [], [], [], [], []
        offset = 0
        log2_scale = np.float32(np.log2(np.float32(per_level_scale)))
        for level in range(n_levels):
            s = np.float32(np.exp2(np.float32(level) * log2_scale) * np.float32(base) - np.float32(1.0))
            r = int(math.ceil(s)) + 1
            dense = r ** n_dims
            size = min((dense + 7) // 8 * 8, 1 << log2_size)
            scales.append(float(s))
            res.append(r)
            sizes.append(size)
            offsets.append(offset)
            hashed.append(size < dense)
            strides.append([r ** d for d in range(n_dims)])
            offset += size
        self.register_buffer("scales", torch.tensor(scales, dtype=torch.float32))
        self.register_buffer("sizes", torch.tensor(sizes, dtype=torch.int64))
        self.register_buffer("offsets", torch.tensor(offsets, dtype=torch.int64))
        self.register_buffer("hashed", torch.tensor(hashed))
        # Per dimension, per level: the multiplier of the coordinate (dense stride or hash prime).
        mult = [[PRIMES[d] if hashed[l] else strides[l][d] for l in range(n_levels)] for d in range(n_dims)]
        self.register_buffer("mult", torch.tensor(mult, dtype=torch.int64))
        self.params = torch.nn.Parameter(
            (torch.rand(offset * n_features, device="cpu") * 2e-4 - 1e-4).to(dtype))

    def forward(self, x):
        n, L, F = x.shape[0], self.n_levels, self.n_features
        pos = x[:, None, :] * self.scales[None, :, None] + 0.5  # [n, L, D]
        cell = torch.floor(pos)
        w = pos - cell
        cell = cell.to(torch.int64)
        mask = 0xFFFFFFFF
        # Per dimension: the lower and upper vertex's term; a corner combines them (+ dense, ^ hash).
        lo = [(cell[:, :, d] * self.mult[d][None, :]) & mask for d in range(self.n_dims)]
        hi = [(lo[d] + self.mult[d][None, :]) & mask for d in range(self.n_dims)]
        table = self.params.view(-1, F)
        out = torch.zeros(n, L, F, device=x.device, dtype=torch.float32)
        for corner in range(1 << self.n_dims):
            terms = [hi[d] if (corner >> d) & 1 else lo[d] for d in range(self.n_dims)]
            s, h = terms[0], terms[0]
            weight = w[:, :, 0] if corner & 1 else 1 - w[:, :, 0]
            for d in range(1, self.n_dims):
                s = s + terms[d]
                h = h ^ terms[d]
                weight = weight * (w[:, :, d] if (corner >> d) & 1 else 1 - w[:, :, d])
            idx = torch.where(self.hashed[None, :], h, s & mask) % self.sizes[None, :]
            # index_select, not table[...]: on CUDA the backward of advanced indexing (index_put_ with
            # accumulate) sorts its 16 M indices per corner; index_select's (index_add_) adds with atomics.
            vals = table.index_select(0, (self.offsets[None, :] + idx).reshape(-1)).view(n, L, F)
            out = out + weight[:, :, None] * vals.float()
        return out.reshape(n, L * F).to(self.params.dtype)


class TorchGridMLP(torch.nn.Module):
    """tcnn's benchmark model (bench_grid.cu's model rows) in plain torch: TorchHashGrid, then a
    bias-free MLP 32 -> 64 -> 64 -> 16, ReLU hidden layers, linear output. Every parameter fp16 (no fp32
    master copy): torch's fastest form, so the conservative baseline; the loss in fp32."""

    def __init__(self):
        super().__init__()
        self.grid = TorchHashGrid()
        width, n_in = 64, self.grid.n_levels * self.grid.n_features
        self.mlp = torch.nn.Sequential(torch.nn.Linear(n_in, width, bias=False), torch.nn.ReLU(),
                                       torch.nn.Linear(width, width, bias=False), torch.nn.ReLU(),
                                       torch.nn.Linear(width, 16, bias=False)).half()

    def forward(self, x):
        return self.mlp(self.grid(x))


def time_ms(fn, rounds=5, round_ms=20.0, use_graph=True):
    """Median GPU ms per call of fn() (as bench/bench_mlp_torch.py)."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    fn()
    stop.record()
    torch.cuda.synchronize()
    t1 = max(start.elapsed_time(stop), 1e-3)
    inner = max(1, min(50, math.ceil(2.0 / t1)))
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
        except Exception as e:
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


def measure(label, p, impl, batch, fn, results):
    """Times fn() (time_ms) as pass p and appends the figure, or the error it raised, to results."""
    t0 = time.time()
    try:
        ms, rounds, graphed = time_ms(fn)
        results.append({"label": label, "pass": p, "impl": impl, "batch": batch, "ms": ms, "ms_rounds": rounds,
                        "graph": graphed, "seconds": time.time() - t0})
        print(f"{label:28s} {p:10s} {impl:8s} b={batch:<8d} {ms:9.4f} ms  (graph={graphed}, "
              f"{time.time() - t0:.0f} s)", flush=True)
    except Exception as e:
        results.append({"label": label, "pass": p, "impl": impl, "batch": batch,
                        "error": f"{type(e).__name__}: {e}"[:300]})
        print(f"{label:28s} {p:10s} {impl:8s} ERROR {type(e).__name__}: {str(e)[:200]}", flush=True)


def bench(label, batch, impl, passes, results):
    torch.manual_seed(0)
    grid = TorchHashGrid().cuda()
    x = torch.rand(batch, 3, device="cuda", dtype=torch.float32)
    dy = (torch.rand(batch, grid.n_levels * grid.n_features, device="cuda") * 2 - 1).half()
    fwd = torch.compile(grid) if impl == "compile" else grid
    grid.params.grad = torch.zeros_like(grid.params)

    def forward():
        with torch.no_grad():
            return fwd(x)

    def fwd_bwd():
        fwd(x).backward(dy)

    fns = {"forward": forward, "fwd_bwd": fwd_bwd}
    for p in passes:
        measure(label, p, impl, batch, fns[p], results)
    del grid, x, dy
    torch.cuda.empty_cache()


def bench_train_step(label, batch, impl, passes, results):
    """One training step (forward, L2 loss, backward, Adam) of TorchGridMLP; under torch.compile the
    forward and loss are compiled (backward through AOT autograd), the optimizer is torch's fused Adam
    (capturable, so that the step can be replayed from a CUDA graph as ours is). passes: ["train_step"]."""
    torch.manual_seed(0)
    model = TorchGridMLP().cuda()
    x = torch.rand(batch, 3, device="cuda", dtype=torch.float32)
    target = torch.rand(batch, 16, device="cuda", dtype=torch.float32)
    # bench_grid.cu's Adam: learning rate 1e-2, tcnn's defaults otherwise (beta2 0.999, epsilon 1e-8).
    opt = torch.optim.Adam(model.parameters(), lr=1e-2, betas=(0.9, 0.999), eps=1e-8, fused=True, capturable=True)

    def loss_of(x, target):
        # Scaled by 128 (tcnn's loss scale for fp16): unscaled, the fp16 output gradient of a mean over
        # 2^20 rows would be about 6e-8, fp16's smallest subnormal. Adam does not see the scale.
        return ((model(x).float() - target) ** 2).mean() * 128.0

    loss_fn = torch.compile(loss_of) if impl == "compile" else loss_of
    for p in model.parameters():
        p.grad = torch.zeros_like(p)

    def train_step():
        opt.zero_grad(set_to_none=False)
        loss_fn(x, target).backward()
        opt.step()

    for p in passes:
        measure(label, p, impl, batch, {"train_step": train_step}[p], results)
    del model, opt, x, target
    torch.cuda.empty_cache()


def check_against_package(results):
    """Our PyTorch grid and the tinycudann package's GPU grid give the same function (same parameters)."""
    try:
        import tinycudann as tcnn
    except Exception as e:
        results.append({"label": "check", "error": f"tinycudann not importable: {e}"[:200]})
        return
    torch.manual_seed(1)
    grid = TorchHashGrid().cuda()
    cfg = {"otype": "HashGrid", "n_levels": 16, "n_features_per_level": 2, "log2_hashmap_size": 19,
           "base_resolution": 16, "per_level_scale": 1.5}
    enc = tcnn.Encoding(3, cfg, dtype=torch.float16).cuda()
    with torch.no_grad():
        enc.params.copy_(grid.params.float() * 1e4)
        grid.params.copy_((grid.params.float() * 1e4).half())
        x = torch.rand(1 << 16, 3, device="cuda")
        a, b = grid(x).float(), enc(x).float()
    err = (a - b).abs().max().item()
    results.append({"label": "check", "max_abs_diff_vs_tinycudann": err, "max_abs": a.abs().max().item()})
    print(f"check: max |torch grid - tinycudann grid| = {err:.3g} (outputs up to {a.abs().max().item():.3g})")


def main():
    t0 = time.time()  # the compile budget counts from here, as the caller's time limit does
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--compile_budget_s", type=float, default=150.0)
    ap.add_argument("--check", action="store_true")
    a = ap.parse_args()
    if not torch.cuda.is_available():
        print("bench_grid_torch: no CUDA device", file=sys.stderr)
        return 1
    results = []
    label = "hash3d_f2_L16_T19_fp16"

    def write():  # after every stage, and atomically, so that a run cut short keeps what it measured
        doc = {"torch": torch.__version__, "device": torch.cuda.get_device_name(0), "results": results}
        with open(a.out + ".tmp", "w") as f:
            json.dump(doc, f, indent=1)
        os.replace(a.out + ".tmp", a.out)

    if a.check:
        check_against_package(results)
    grid, model = ["forward", "fwd_bwd"], ["train_step"]
    # The torch.compile figures (2^20: grid forward, forward + backward, training step) first,
    # so that a short compile budget drops the 2^21 grid (about 11 s of compiling) rather than them.
    stages = [(bench, label, 1 << 20, "eager", grid), (bench, label, 1 << 21, "eager", grid),
              (bench_train_step, MODEL_LABEL, 1 << 20, "eager", model), (bench, label, 1 << 20, "compile", grid),
              (bench_train_step, MODEL_LABEL, 1 << 20, "compile", model), (bench, label, 1 << 21, "compile", grid)]
    for run, stage_label, batch, impl, passes in stages:
        note = {"label": stage_label, "impl": impl, "batch": batch, "passes": passes}
        if impl == "compile" and time.time() - t0 > a.compile_budget_s:
            results.append(dict(note, error=f"skipped: torch.compile budget of {a.compile_budget_s:.0f} s spent"))
        else:
            # A placeholder on disk while the stage runs: one killed by the caller's time limit leaves a reason.
            results.append(dict(note, error="started, not finished (killed by the time limit?)"))
            write()
            results.pop()
            if impl == "compile":
                torch._dynamo.reset()
            run(stage_label, batch, impl, passes, results)
        write()
    print(f"bench_grid_torch: wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
