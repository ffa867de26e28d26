"""The public Python API's speed (issue #42): every workload of the issue's table through `tinycudann`
as a user calls it, beside the same model in plain PyTorch (eager and torch.compile) measured in the
same run, tiny-cuda-nn 2.0's figures from the issue (an H100, its own run), and each row's floor from
the copy bandwidth, the tensor-core rate and the random-gather rate measured at the start of this run.

    python3 bench/bench_python.py --out FILE.json [--md FILE.md] [--quick] [--no-compile]

How each figure is taken:
- "script": the user's unchanged tcnn-style step: y = module(x); loss in torch; loss.backward();
  torch.optim.Adam (its default implementation) over module.params. GPU time per step from CUDA events
  around back-to-back steps, median of rounds.
- "trainer": tinycudann.Trainer(model, loss, optimizer).step(x, target), the same model, loss and Adam.
- "graph": the script's step captured whole with torch.cuda.graph (Adam(capturable=True)), replayed.
- "torch": the same model in plain PyTorch (fp16 nn.Linear MLP; the hash grid of bench_grid_torch.py),
  eager, and torch.compile where --no-compile is not given.
- latency rows: one call end to end (host included), CUDA events around each call, median.
- image fit: wall time per step (host included) of a loop that draws 2^18 random pixels and their
  bilinear targets on the GPU and trains; also the script's step under
  torch.compile(mode="reduce-overhead") (torch 2.4+, through the custom operators of tinycudann/ops.py).
"""
import argparse
import json
import math
import os
import statistics
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import tinycudann as tcnn  # noqa: E402

# tiny-cuda-nn 2.0 (commit 6ee3546, sm_90, one H100), issue #42's table: GPU-busy ms per call.
TCNN = {
    "mlp_train_32_64_16": {"tcnn": 2.30, "tcnn_jit": 1.68, "torch_fp16": 2.79},
    "mlp_train_32_128_16": {"tcnn": 3.84, "torch_fp16": 4.73},
    "mlp_train_64_64_64": {"tcnn": 5.25, "torch_fp16": 4.92},
    "grid_train": {"tcnn": 3.98, "tcnn_jit": 3.40},
    "grid_inference": {"tcnn": 0.744, "tcnn_jit": 0.728},
    "latency_64_64_64": {"tcnn": 0.120, "torch_graph": 0.025},
    "image_fit": {"tcnn": 1.58},
}

GRID = {"otype": "HashGrid", "n_levels": 16, "n_features_per_level": 2, "log2_hashmap_size": 19,
        "base_resolution": 16, "per_level_scale": 1.5}
IMAGE_GRID = {"otype": "HashGrid", "n_levels": 16, "n_features_per_level": 2, "log2_hashmap_size": 15,
              "base_resolution": 16, "per_level_scale": 1.5}


def mlp(width, hidden=2):
    return {"otype": "FullyFusedMLP", "activation": "ReLU", "output_activation": "None", "n_neurons": width,
            "n_hidden_layers": hidden}


# ---- timing ----------------------------------------------------------------------------------------

def gpu_ms(fn, rounds=5, round_ms=30.0, warmup=3):
    """Median GPU ms per call of fn(): events around back-to-back calls."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    fn()
    b.record()
    torch.cuda.synchronize()
    n = max(1, min(500, math.ceil(round_ms / max(a.elapsed_time(b), 1e-3))))
    out = []
    for _ in range(rounds):
        a.record()
        for _ in range(n):
            fn()
        b.record()
        torch.cuda.synchronize()
        out.append(a.elapsed_time(b) / n)
    return statistics.median(out), out


def latency_ms(fn, calls=200, warmup=20):
    """Median ms of one call end to end: events right before and after each call, host included."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(calls):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return statistics.median(times), times[:20]


def wall_ms(fn, steps=200, warmup=20):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(steps):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) * 1e3 / steps, []


def graph_of(step, warmup=3):
    """step() captured whole with torch.cuda.graph after warm-up steps on a side stream (torch's recipe)."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(warmup):
            step()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        step()
    return g.replay


# ---- ceilings and floors ---------------------------------------------------------------------------

def measure_ceilings():
    """Copy bandwidth (bytes read + written), fp16 tensor-core rate, random 8-byte gather rate."""
    src = torch.empty(1 << 30, dtype=torch.uint8, device="cuda").random_(0, 255)
    dst = torch.empty_like(src)
    ms, _ = gpu_ms(lambda: dst.copy_(src), rounds=5, round_ms=20)
    copy_gbs = 2 * src.numel() / ms / 1e6
    del src, dst
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.float16)
    bm = torch.randn(8192, 8192, device="cuda", dtype=torch.float16)
    ms, _ = gpu_ms(lambda: a @ bm, rounds=5, round_ms=20)
    tflops = 2 * 8192**3 / ms / 1e9
    del a, bm
    gather = gather_rate()
    return {"copy_GBps": copy_gbs, "fp16_TFLOPs": tflops, "gather_G_per_s": gather}


def gather_rate():
    """Random 8-byte loads per second from a 32 MiB table (one hash-grid level set of 2^19 entries of
    two fp16 features is 2 MiB; 16 of them are 32 MiB, L2 resident): the rate that bounds the grid's
    corner gathers. A Triton kernel (no write traffic but one float per program); None without Triton."""
    try:
        import triton
        import triton.language as tl
    except ImportError:
        return None

    @triton.jit
    def probe(table, out, mask_bits, BLOCK: tl.constexpr, LOADS: tl.constexpr):
        # BLOCK x LOADS independent random loads per program, all addresses known up front.
        pid = tl.program_id(0)
        i = (pid * BLOCK + tl.arange(0, BLOCK))[:, None] * LOADS + tl.arange(0, LOADS)[None, :]
        h = ((i.to(tl.int64) * 2654435761) ^ (i.to(tl.int64) >> 7)) & mask_bits
        v = tl.load(table + h)
        tl.store(out + pid, tl.sum(tl.sum(v, 1), 0).to(tl.float32))

    n_entries = (32 << 20) // 8
    table = torch.randint(0, 1 << 20, (n_entries,), device="cuda", dtype=torch.int64)
    n = 1 << 22
    BLOCK, LOADS = 128, 16
    out = torch.empty(triton.cdiv(n, BLOCK), device="cuda")
    fn = lambda: probe[(triton.cdiv(n, BLOCK),)](table, out, n_entries - 1, BLOCK=BLOCK, LOADS=LOADS)
    ms, _ = gpu_ms(fn, rounds=5, round_ms=20)
    return n * LOADS / ms / 1e6


def mlp_flops(n_in, width, n_out, hidden, rows):
    """One forward pass, padded as the kernels compute it (inputs and outputs to multiples of 16)."""
    pin, pout = (n_in + 15) // 16 * 16, (n_out + 15) // 16 * 16
    return 2.0 * rows * (pin * width + (hidden - 1) * width * width + width * pout)


def floor_ms(c, bytes_=0.0, flops=0.0, gathers=0.0):
    t_bytes = bytes_ / (c["copy_GBps"] * 1e6)
    t_flops = flops / (c["fp16_TFLOPs"] * 1e9)
    t_gather = gathers / (c["gather_G_per_s"] * 1e6) if c.get("gather_G_per_s") else 0.0
    return max(t_bytes, t_flops) + t_gather


# ---- models ----------------------------------------------------------------------------------------

def torch_mlp(n_in, width, n_out, hidden):
    layers, d = [], n_in
    for _ in range(hidden):
        layers += [torch.nn.Linear(d, width, bias=False), torch.nn.ReLU()]
        d = width
    layers.append(torch.nn.Linear(d, n_out, bias=False))
    return torch.nn.Sequential(*layers).cuda().half()


def l2(y, t):
    return ((y.float() - t) ** 2).mean()


def script_step(model, opt, x, t, loss_fn=l2):
    def step():
        loss = loss_fn(model(x), t)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    return step


def kernel_profile(step, steps=5):
    """GPU time per step of each kernel of step() (torch.profiler), largest first: where a step's time goes."""
    from torch.profiler import ProfilerActivity, profile
    for _ in range(3):
        step()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            step()
        torch.cuda.synchronize()
    rows = []
    for e in prof.key_averages():
        us = getattr(e, "device_time_total", None)
        if us is None:
            us = getattr(e, "cuda_time_total", 0)
        if us > 0:
            rows.append({"kernel": e.key[:120], "us_per_step": us / steps, "calls_per_step": e.count / steps})
    rows.sort(key=lambda r: -r["us_per_step"])
    return rows[:25]


def record(results, row, impl, ms, extra=None, **kw):
    r = {"row": row, "impl": impl, "ms": ms}
    r.update(kw)
    if extra:
        r.update(extra)
    results.append(r)
    print(f"  {row:22s} {impl:18s} {ms:9.4f} ms", flush=True)


def guarded(results, row, impl, fn):
    try:
        fn()
    except Exception as e:  # one failing row must not lose the others
        results.append({"row": row, "impl": impl, "error": f"{type(e).__name__}: {e}"[:400]})
        print(f"  {row:22s} {impl:18s} ERROR {type(e).__name__}: {str(e)[:200]}", flush=True)


# ---- rows ------------------------------------------------------------------------------------------

def mlp_train_rows(results, ceil, shape, rows, do_compile):
    n_in, width, n_out = shape
    name = f"mlp_train_{n_in}_{width}_{n_out}"
    torch.manual_seed(0)
    x = torch.rand(rows, n_in, device="cuda")
    t = torch.rand(rows, n_out, device="cuda")
    # Floor of the script's step: x read twice (forward, backward), y written and dL/dy read in fp16,
    # the torch loss's minimum (y and t read, dL/dy written); 3 passes of the MLP's flops.
    bytes_ = rows * (2 * n_in * 4 + 2 * n_out * 2 + n_out * (2 + 4 + 2))
    fl = floor_ms(ceil, bytes_, 3 * mlp_flops(n_in, width, n_out, 2, rows))

    def ours():
        model = tcnn.Network(n_in, n_out, mlp(width))
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
        step = script_step(model, opt, x, t)
        ms, rounds = gpu_ms(step)
        record(results, name, "script", ms, floor_ms=fl, rounds=rounds, profile=kernel_profile(step))

    def trainer():
        model = tcnn.Network(n_in, n_out, mlp(width))
        tr = tcnn.Trainer(model, {"otype": "L2"}, {"otype": "Adam", "learning_rate": 1e-3})
        ms, rounds = gpu_ms(lambda: tr.step(x, t))
        record(results, name, "trainer", ms, floor_ms=fl, rounds=rounds, graph_steps=tr.graph_steps)

    def plain(compiled):
        model = torch_mlp(n_in, width, n_out, 2)
        fwd = torch.compile(model) if compiled else model
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
        ms, rounds = gpu_ms(script_step(lambda v: fwd(v.half()), opt, x, t))
        record(results, name, "torch_compile" if compiled else "torch_eager", ms, floor_ms=fl, rounds=rounds)

    def user_part():
        # The user's own share of the script's step: the same torch loss and backward on an fp16 output
        # of the same shape, and torch's Adam over as many parameters, without any module of ours.
        y = torch.rand(rows, n_out, device="cuda", dtype=torch.float16).requires_grad_()
        p = torch.nn.Parameter(torch.zeros(tcnn.Network(n_in, n_out, mlp(width)).params.numel(), device="cuda"))
        opt = torch.optim.Adam([p], lr=1e-3)

        def step():
            loss = l2(y, t)
            opt.zero_grad(set_to_none=True)
            y.grad = None
            loss.backward()
            p.grad = torch.zeros_like(p)
            opt.step()
        ms, rounds = gpu_ms(step)
        record(results, name, "user_torch_part", ms, rounds=rounds)

    guarded(results, name, "script", ours)
    guarded(results, name, "user_torch_part", user_part)
    guarded(results, name, "trainer", trainer)
    guarded(results, name, "torch_eager", lambda: plain(False))
    if do_compile:
        guarded(results, name, "torch_compile", lambda: plain(True))


def grid_rows(results, ceil, rows, do_compile):
    torch.manual_seed(0)
    x = torch.rand(rows, 3, device="cuda")
    t = torch.rand(rows, 16, device="cuda")
    n_levels, corners = GRID["n_levels"], 4  # 3-D: 8 corners, 4 x-pairs of adjacent entries per level
    gathers = rows * n_levels * corners
    model_probe = tcnn.NetworkWithInputEncoding(3, 16, GRID, mlp(64))
    n_params = model_probe.params.numel()
    del model_probe
    # Training floor: the grid's gathers twice (forward loads, backward reductions, at the gather
    # rate), the MLP's 3 flop passes, encoding round trip (written, read twice in fp16), torch loss,
    # and torch's Adam (p, g, m, v read; p, m, v written: 28 bytes per fp32 parameter) plus the fp16
    # copy of the parameters (4 read + 2 written) and the fp16 gradient taken to fp32 (2 + 4).
    enc_bytes = rows * 32 * 2 * 3
    train_bytes = enc_bytes + rows * 16 * (2 + 2 + 2 + 4 + 2) + n_params * (28 + 6 + 6)
    fl_train = floor_ms(ceil, train_bytes, 3 * mlp_flops(32, 64, 16, 2, rows), 2 * gathers)
    fl_inf = floor_ms(ceil, rows * (3 * 4 + 16 * 2) + rows * 32 * 2 * 2, mlp_flops(32, 64, 16, 2, rows), gathers)

    def ours_train():
        model = tcnn.NetworkWithInputEncoding(3, 16, GRID, mlp(64))
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
        step = script_step(model, opt, x, t)
        ms, rounds = gpu_ms(step)
        record(results, "grid_train", "script", ms, floor_ms=fl_train, rounds=rounds, profile=kernel_profile(step))

    def trainer():
        model = tcnn.NetworkWithInputEncoding(3, 16, GRID, mlp(64))
        tr = tcnn.Trainer(model, {"otype": "L2"}, {"otype": "Adam", "learning_rate": 1e-3})
        ms, rounds = gpu_ms(lambda: tr.step(x, t))
        record(results, "grid_train", "trainer", ms, floor_ms=fl_train, rounds=rounds, graph_steps=tr.graph_steps)

    def ours_inf():
        model = tcnn.NetworkWithInputEncoding(3, 16, GRID, mlp(64))

        def inf():
            with torch.no_grad():
                model(x)
        ms, rounds = gpu_ms(inf)
        record(results, "grid_inference", "script", ms, floor_ms=fl_inf, rounds=rounds)

    def plain(compiled):
        from bench_grid_torch import TorchGridMLP
        model = TorchGridMLP().cuda()
        fwd = torch.compile(model) if compiled else model
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
        tag = "torch_compile" if compiled else "torch_eager"
        ms, rounds = gpu_ms(script_step(fwd, opt, x, t), rounds=3)
        record(results, "grid_train", tag, ms, floor_ms=fl_train, rounds=rounds)

        def inf():
            with torch.no_grad():
                fwd(x)
        ms, rounds = gpu_ms(inf, rounds=3)
        record(results, "grid_inference", tag, ms, floor_ms=fl_inf, rounds=rounds)

    def user_part():
        y = torch.rand(rows, 16, device="cuda", dtype=torch.float16).requires_grad_()
        p = torch.nn.Parameter(torch.zeros(n_params, device="cuda"))
        opt = torch.optim.Adam([p], lr=1e-3)

        def step():
            loss = l2(y, t)
            opt.zero_grad(set_to_none=True)
            y.grad = None
            loss.backward()
            p.grad = torch.zeros_like(p)
            opt.step()
        ms, rounds = gpu_ms(step)
        record(results, "grid_train", "user_torch_part", ms, rounds=rounds)

    guarded(results, "grid_train", "script", ours_train)
    guarded(results, "grid_train", "user_torch_part", user_part)
    guarded(results, "grid_train", "trainer", trainer)
    guarded(results, "grid_inference", "script", ours_inf)
    guarded(results, "grid_train", "torch_eager", lambda: plain(False))
    if do_compile:
        guarded(results, "grid_train", "torch_compile", lambda: plain(True))


def latency_rows(results, ceil):
    x = torch.rand(1, 64, device="cuda")

    def ours():
        model = tcnn.Network(64, 64, mlp(64))

        def call():
            with torch.no_grad():
                return model(x)
        ms, sample = latency_ms(call)
        record(results, "latency_64_64_64", "script", ms, sample=sample)

    def plain_graph():
        model = torch_mlp(64, 64, 64, 2)
        static_x = x.clone()
        with torch.no_grad():
            replay = graph_of(lambda: model(static_x.half()))
        ms, sample = latency_ms(replay)
        record(results, "latency_64_64_64", "torch_graph", ms, sample=sample)

    def plain_eager():
        model = torch_mlp(64, 64, 64, 2)

        def call():
            with torch.no_grad():
                return model(x.half())
        ms, sample = latency_ms(call)
        record(results, "latency_64_64_64", "torch_eager", ms, sample=sample)

    def probes():
        # What a call costs on this host before any work of ours: an output allocation, and the raw
        # C++ inference with a preallocated output and weights already in the module's dtype.
        model = tcnn.Network(64, 64, mlp(64))
        out = torch.empty(1, 64, device="cuda", dtype=torch.float16)
        p16 = model.params.detach().half()
        nat = model._native.module
        stream = torch.cuda.current_stream().cuda_stream
        ms, _ = latency_ms(lambda: torch.empty(1, 64, device="cuda", dtype=torch.float16))
        record(results, "latency_64_64_64", "probe_torch_empty", ms)
        ms, _ = latency_ms(lambda: nat.inference(0, stream, 1, x.data_ptr(), "float32", out.data_ptr(), p16.data_ptr()))
        record(results, "latency_64_64_64", "probe_raw_cpp_call", ms)
        with torch.no_grad():
            replay = graph_of(lambda: model(x))
        ms, _ = latency_ms(replay)
        record(results, "latency_64_64_64", "graph", ms)

    guarded(results, "latency_64_64_64", "script", ours)
    guarded(results, "latency_64_64_64", "probes", probes)
    guarded(results, "latency_64_64_64", "torch_graph", plain_graph)
    guarded(results, "latency_64_64_64", "torch_eager", plain_eager)


def image_fit_rows(results, ceil, steps, do_compile=True):
    """tcnn's image sample's workload: 2-D grid (2^15 per level) + FullyFusedMLP 64x2 -> RGB,
    RelativeL2, Adam, 2^18 random pixels with bilinear targets drawn on the GPU each step."""
    torch.manual_seed(0)
    h = w = 1024
    image = torch.rand(1, 3, h, w, device="cuda")
    n = 1 << 18
    net = dict(mlp(64), output_activation="None")

    def sample():
        # Random pixel positions and their bilinear colours (pixel centres at (i + 0.5) / size).
        xy = torch.rand(n, 2, device="cuda")
        t = torch.nn.functional.grid_sample(image, (xy * 2 - 1).view(1, 1, n, 2), mode="bilinear",
                                            padding_mode="border", align_corners=False)
        return xy, t.view(3, n).t()

    def rel_l2(y, t):
        y = y.float()
        return ((y - t) ** 2 / (y.detach() ** 2 + 0.01)).mean()

    def eager():
        model = tcnn.NetworkWithInputEncoding(2, 3, IMAGE_GRID, net)
        opt = torch.optim.Adam(model.parameters(), lr=1e-2)

        def step():
            xy, t = sample()
            loss = rel_l2(model(xy), t)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
        ms, _ = wall_ms(step, steps)
        record(results, "image_fit", "script", ms)

    def captured():
        model = tcnn.NetworkWithInputEncoding(2, 3, IMAGE_GRID, net)
        opt = torch.optim.Adam(model.parameters(), lr=1e-2, capturable=True)

        def step():
            xy, t = sample()
            loss = rel_l2(model(xy), t)
            opt.zero_grad(set_to_none=False)
            loss.backward()
            opt.step()
        replay = graph_of(step)
        ms, _ = wall_ms(replay, steps)
        record(results, "image_fit", "graph", ms)

    def trainer():
        model = tcnn.NetworkWithInputEncoding(2, 3, IMAGE_GRID, net)
        tr = tcnn.Trainer(model, {"otype": "RelativeL2"}, {"otype": "Adam", "learning_rate": 1e-2})

        def step():
            xy, t = sample()
            tr.step(xy, t)
        ms, _ = wall_ms(step, steps)
        record(results, "image_fit", "trainer", ms, graph_steps=tr.graph_steps, profile=kernel_profile(step))
        gpu, _ = gpu_ms(step)
        record(results, "image_fit", "trainer_gpu_busy", gpu)
        xy, t = sample()
        gpu, _ = gpu_ms(lambda: tr.step(xy, t))
        record(results, "image_fit", "trainer_step_only_gpu_busy", gpu)
        ms, _ = wall_ms(lambda: tr.step(xy, t), steps)
        record(results, "image_fit", "trainer_step_only_wall", ms)
        gpu, _ = gpu_ms(sample)
        record(results, "image_fit", "sampling_gpu_busy", gpu)

    def compiled():
        # The same step under torch.compile(mode="reduce-overhead"): Dynamo traces through the custom
        # operators (tinycudann/ops.py), Inductor fuses the loss and Adam, CUDA graphs replay it.
        model = tcnn.NetworkWithInputEncoding(2, 3, IMAGE_GRID, net)
        opt = torch.optim.Adam(model.parameters(), lr=1e-2, capturable=True)

        @torch.compile(mode="reduce-overhead", fullgraph=True)
        def fwd_bwd(xy, t):
            loss = rel_l2(model(xy), t)
            loss.backward()
            return loss

        @torch.compile(mode="reduce-overhead", fullgraph=False)
        def opt_step():
            opt.step()

        def step():
            xy, t = sample()
            fwd_bwd(xy, t)
            opt_step()
            opt.zero_grad(set_to_none=False)
        ms, _ = wall_ms(step, steps)
        record(results, "image_fit", "compile_reduce_overhead", ms)

    guarded(results, "image_fit", "script", eager)
    guarded(results, "image_fit", "graph", captured)
    guarded(results, "image_fit", "trainer", trainer)
    if do_compile and tcnn.ops.SUPPORTED:
        guarded(results, "image_fit", "compile_reduce_overhead", compiled)


# ---- report ----------------------------------------------------------------------------------------

TARGETS = {
    "mlp_train_32_64_16": ("script", "1.8x the best of tcnn (JIT) and torch", 1.8),
    "mlp_train_32_128_16": ("script", "1.8x the best of tcnn and torch", 1.8),
    "mlp_train_64_64_64": ("script", "1.8x the best of tcnn and torch", 1.8),
    "grid_train": ("script", "1.5x tcnn JIT, or within 10% of the floor", 1.5),
    "latency_64_64_64": ("script", "no slower than torch's CUDA-graph replay", 1.0),
    "image_fit": ("trainer", "<= 0.40 ms wall per step", None),
}


def report(doc):
    res = doc["results"]
    by = {}
    for r in res:
        if "ms" in r:
            by.setdefault(r["row"], {})[r["impl"]] = r
    lines = [f"# Python API benchmark ({doc['device']}, torch {doc['torch']}, {doc['date']})", "",
             f"Ceilings measured in this run: copy {doc['ceilings']['copy_GBps']:.0f} GB/s, fp16 tensor cores "
             f"{doc['ceilings']['fp16_TFLOPs']:.0f} TFLOP/s, random 8-byte gathers "
             f"{doc['ceilings']['gather_G_per_s'] or float('nan'):.1f} G/s. tcnn: tiny-cuda-nn 2.0's figures "
             "from issue #42 (H100). ms per step (GPU-busy) unless the row says wall.", "",
             "| row | ours: script | of which the user's torch loss + Adam | ours: Trainer | ours: graph | torch eager | torch.compile | tcnn (JIT) | best baseline | script vs best | floor | script of floor |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for row, impls in by.items():
        ref = TCNN.get(row, {})
        base = [v for k, v in ref.items()]
        for k in ("torch_eager", "torch_compile", "torch_graph"):
            if k in impls:
                base.append(impls[k]["ms"])
        best = min(base) if base else None
        get = lambda k: f"{impls[k]['ms']:.3f}" if k in impls else ""
        script = impls.get("script")
        fl = next((v.get("floor_ms") for v in impls.values() if v.get("floor_ms")), None)
        tc = ref.get("tcnn", "")
        jit = ref.get("tcnn_jit")
        tcs = f"{tc} ({jit})" if jit else f"{tc}"
        ratio = f"{best / script['ms']:.2f}x" if script and best else ""
        of_floor = f"{fl / script['ms']:.0%}" if script and fl else ""
        lines.append(f"| {row} | {get('script')} | {get('user_torch_part')} | {get('trainer')} | {get('graph')} | {get('torch_eager')} | "
                     f"{get('torch_compile')} | {tcs} | {best if best is None else f'{best:.3f}'} | {ratio} | "
                     f"{'' if fl is None else f'{fl:.3f}'} | {of_floor} |")
    for r in res:
        if r.get("profile"):
            lines += ["", f"Kernels of {r['row']} ({r['impl']}), us per step:", ""]
            lines += [f"- {k['us_per_step']:8.1f} us  x{k['calls_per_step']:.0f}  {k['kernel']}" for k in r["profile"][:15]]
    compiled = by.get("image_fit", {}).get("compile_reduce_overhead")
    if compiled:
        graph = by["image_fit"].get("graph")
        vs = f" ({graph['ms'] / compiled['ms']:.2f}x the hand-captured torch.cuda.graph step)" if graph else ""
        lines += ["", f"image_fit under torch.compile(mode=\"reduce-overhead\"): {compiled['ms']:.3f} ms wall per step{vs}."]
    errors = [r for r in res if "error" in r]
    if errors:
        lines += ["", "Errors:"] + [f"- {r['row']} {r['impl']}: {r['error']}" for r in errors]
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--md")
    ap.add_argument("--quick", action="store_true", help="fewer image-fit steps")
    ap.add_argument("--no-compile", action="store_true")
    ap.add_argument("--only", default="", help="comma-separated row groups: mlp,grid,latency,image")
    a = ap.parse_args()
    if not torch.cuda.is_available():
        print("bench_python: no CUDA device", file=sys.stderr)
        return 1
    only = set(a.only.split(",")) if a.only else {"mlp", "grid", "latency", "image"}
    results = []
    ceil = measure_ceilings()
    print("ceilings:", json.dumps(ceil), flush=True)
    if "latency" in only:
        latency_rows(results, ceil)
    if "image" in only:
        image_fit_rows(results, ceil, 100 if a.quick else 300, not a.no_compile)
    if "mlp" in only:
        for shape in [(32, 64, 16), (32, 128, 16), (64, 64, 64)]:
            mlp_train_rows(results, ceil, shape, 1 << 21, not a.no_compile)
    if "grid" in only:
        grid_rows(results, ceil, 1 << 20, not a.no_compile)
    doc = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__, "tinycudann": tcnn.__version__,
           "date": time.strftime("%Y-%m-%d"), "ceilings": ceil, "tcnn_reference": TCNN, "results": results}
    with open(a.out, "w") as f:
        json.dump(doc, f, indent=1)
    md = report(doc)
    if a.md:
        with open(a.md, "w") as f:
            f.write(md)
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
