#!/usr/bin/env python3
"""The qualification smoke of an installed tinycudann (docs/amd.md "Qualification smoke"): for every
network backend this build runs on the device (CUDA/HIP tensors when torch sees a GPU and the build has
a GPU backend, else the CPU), a HashGrid + network model is trained with Adam (the loss must fall),
saved and reloaded in a second Python process (bit for bit), launched 64 times (bitwise identical),
checked for prefix invariance (the first k rows of a batch of n equal a batch of those k rows), for a
parameter hot-swap A -> B -> A, and for two models on two non-default streams (two threads on the CPU)
against the same models run one after the other; unknown and unsupported backends must be refused;
and the FP16-vs-FP32 speed ratios at batches 1024 and 16384 are measured in the RDNA4 port's report
shape. Writes one JSON evidence file and summary.txt into --evidence-dir; exit status 0 when no check
failed. scripts/qualify.sh runs it from a fresh clone and install; this file also runs on its own
against whatever `import tinycudann` finds."""
import argparse
import datetime
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import traceback

import torch

SCHEMA = "tiny-rdna4-nn-qualify/1"

# HashGrid of 16 levels x 4 features: 64 network inputs, so the network is the port's
# 64->64->64->64 shape (width 64, two hidden layers, 64 outputs for the speed pairs).
GRID = {"otype": "HashGrid", "n_levels": 16, "n_features_per_level": 4, "log2_hashmap_size": 15,
        "base_resolution": 16, "per_level_scale": 1.5}
WIDTH, HIDDEN, N_IN, N_OUT = 64, 2, 3, 4


def network(otype, dtype=None, width=WIDTH):
    cfg = {"otype": otype, "n_neurons": width, "n_hidden_layers": HIDDEN, "activation": "ReLU",
           "output_activation": "None"}
    if dtype:
        cfg["dtype"] = dtype
    return cfg


def backend_list(gpu_backend):
    """(id, network config) of every backend the smoke tries, in the names the build's users write:
    the RDNA4 port's on a HIP build, ours (tcnn's precision spelled out) elsewhere."""
    if gpu_backend == "HIP":
        return [("PortableMLP-float32", network("PortableMLP")),
                ("HipBLASLtMLP", network("HipBLASLtMLP")),
                ("HipBLASLtMLPFP16", network("HipBLASLtMLPFP16")),
                ("RocWMMAWidth64MLP", network("RocWMMAWidth64MLP"))]
    return [("PortableMLP-float32", network("PortableMLP")),
            ("BlasLtMLP-float32", network("BlasLtMLP", "float32")),
            ("BlasLtMLP-float16", network("BlasLtMLP", "float16")),
            ("FullyFusedMLP-float16", network("FullyFusedMLP", "float16"))]


def speed_pairs(gpu_backend):
    """(name, slower backend, faster backend): the port's FP16-vs-FP32 pair and its fused-vs-BLAS pair."""
    if gpu_backend == "HIP":
        return [("fp16_vs_fp32", network("HipBLASLtMLP"), network("HipBLASLtMLPFP16")),
                ("fused_w64_vs_blaslt_fp16", network("HipBLASLtMLPFP16"), network("RocWMMAWidth64MLP"))]
    return [("fp16_vs_fp32", network("BlasLtMLP", "float32"), network("BlasLtMLP", "float16")),
            ("fused_w64_vs_blaslt_fp16", network("BlasLtMLP", "float16"), network("FullyFusedMLP", "float16"))]


def target_function(x):
    """A smooth target in [0,1]^3 -> R^4 that a small grid model fits quickly."""
    return torch.stack([torch.sin(2 * math.pi * x[:, 0]), torch.cos(2 * math.pi * x[:, 1]), x[:, 0] * x[:, 2],
                        0.5 + 0.25 * torch.sin(math.pi * (x[:, 1] + x[:, 2]))], dim=1)


def same_bits(a, b):
    """Bitwise equality of two tensors of one dtype and shape (NaNs with the same payload are equal)."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    a, b = a.detach().contiguous().cpu(), b.detach().contiguous().cpu()
    if a.numel() == 0:
        return True
    width = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[a.element_size()]
    return bool(torch.equal(a.view(width), b.view(width)))


def max_abs_diff(a, b):
    d = (a.detach().double().cpu() - b.detach().double().cpu()).abs()
    return float(d.max()) if d.numel() else 0.0


class Run:
    """The evidence being collected: checks with status, figures and timing."""

    def __init__(self):
        self.checks = []

    def check(self, name, backend, fn):
        start = time.perf_counter()
        try:
            status, figures, detail = fn()
        except Exception as e:  # a crash of a check is its failure, with the traceback as evidence
            status, figures, detail = "fail", {}, f"{type(e).__name__}: {e}\n{traceback.format_exc(limit=4)}"
        entry = {"check": name, "backend": backend, "status": status, "figures": figures, "detail": detail,
                 "seconds": round(time.perf_counter() - start, 3)}
        self.checks.append(entry)
        mark = {"pass": "ok  ", "fail": "FAIL", "skip": "skip"}[status]
        print(f"  [{mark}] {name:<20} {backend or '':<22} {detail.splitlines()[0] if detail else ''}", flush=True)
        return entry


# ---- The environment.

def environment(tcnn):
    from tinycudann import _C
    env = {"python": sys.version.split()[0], "python_executable": sys.executable, "torch": torch.__version__,
           "torch_cuda": torch.version.cuda, "torch_hip": getattr(torch.version, "hip", None),
           "tinycudann": tcnn.__version__, "tinycudann_file": os.path.abspath(tcnn.__file__),
           "extension_file": os.path.abspath(_C.__file__), "gpu_backend": _C.gpu_backend_name(),
           "gpu_device_count": _C.gpu_device_count(), "cpu_threads": _C.num_threads(),
           "platform": platform.platform(), "machine": platform.machine()}
    env["cpu"] = cpu_model()
    return env


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            return next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), None)
    except OSError:
        return platform.processor() or platform.machine()


def device_info(device):
    if device.type == "cpu":
        return {"kind": "cpu", "name": cpu_model(), "cores": os.cpu_count()}
    p = torch.cuda.get_device_properties(device)
    arch = getattr(p, "gcnArchName", None) or f"sm_{p.major}{p.minor}"
    return {"kind": "cuda", "index": device.index, "name": p.name, "arch": arch.split(":")[0],
            "memory_bytes": int(p.total_memory), "multiprocessors": int(p.multi_processor_count),
            "count": torch.cuda.device_count()}


def git_commit(source):
    def git(*args):
        return subprocess.run(["git", "-C", source, *args], capture_output=True, text=True, timeout=30)
    r = git("rev-parse", "HEAD")
    if r.returncode != 0:
        return {"sha": None, "dirty": None, "source": source}
    dirty = git("status", "--porcelain", "--untracked-files=no").stdout.strip() != ""
    return {"sha": r.stdout.strip(), "dirty": dirty, "source": source}


# ---- Per-backend checks.

class Sizes:
    def __init__(self, device, quick):
        gpu = device.type == "cuda"
        self.train_batch = 16384 if gpu else (256 if quick else 2048)
        self.train_steps = 300 if gpu else (30 if quick else 150)
        self.batch = 4096 + 77 if gpu else (300 + 7 if quick else 1000 + 77)
        self.launches = 64
        self.prefix_ks = [1, 7, 128, 255, 1000, 4096, self.batch - 1]
        self.stream_rounds = 16 if gpu else 4


def synchronize(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def make_model(tcnn, net_cfg, device, seed=1337):
    return tcnn.NetworkWithInputEncoding(N_IN, N_OUT, GRID, net_cfg, seed=seed, device=device)


def inputs(n, device, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.rand(n, N_IN, generator=g).to(device)


def check_train(tcnn, net_cfg, device, sizes):
    model = make_model(tcnn, net_cfg, device)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2, betas=(0.9, 0.99), eps=1e-15)
    losses = []
    g = torch.Generator().manual_seed(7)
    grad_ok = None
    for step in range(sizes.train_steps):
        x = torch.rand(sizes.train_batch, N_IN, generator=g).to(device)
        y = model(x)
        loss = (y.float() - target_function(x)).square().mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if step == 0:
            grad = model.params.grad
            grad_ok = bool(torch.isfinite(grad).all()) and float(grad.abs().sum()) > 0
        opt.step()
        losses.append(float(loss))  # one sync per step: the smoke measures correctness here, not speed
    head = statistics.fmean(losses[:3])
    tail = statistics.fmean(losses[-max(3, len(losses) // 10):])
    finite = all(math.isfinite(v) for v in losses)
    ok = finite and grad_ok and tail < 0.5 * head
    figures = {"steps": sizes.train_steps, "batch": sizes.train_batch, "initial_loss": head, "final_loss": tail,
               "final_over_initial": tail / head if head else None, "gradient_finite_nonzero": grad_ok,
               "losses_finite": finite}
    detail = f"loss {head:.4g} -> {tail:.4g} in {sizes.train_steps} Adam steps (must fall below half)"
    return ("pass" if ok else "fail"), figures, detail, model


def check_checkpoint(tcnn, model, net_cfg, device, sizes, workdir, backend_id):
    x = inputs(sizes.batch, device, 11)
    with torch.no_grad():
        y = model(x)
    path = os.path.join(workdir, f"checkpoint-{backend_id}.pt")
    torch.save({"encoding": GRID, "network": net_cfg, "n_input_dims": N_IN, "n_output_dims": N_OUT,
                "state_dict": model.state_dict(), "x": x.cpu(), "y": y.cpu(), "device": str(device)}, path)
    child = subprocess.run([sys.executable, os.path.abspath(__file__), "--reload", path],
                           capture_output=True, text=True, timeout=600, env=dict(os.environ))
    if child.returncode != 0:
        return "fail", {"file_bytes": os.path.getsize(path)}, f"the reloading process failed:\n{child.stderr[-3000:]}"
    got = json.loads(child.stdout.strip().splitlines()[-1])
    import tinycudann
    same_install = got["tinycudann_file"] == os.path.abspath(tinycudann.__file__)
    ok = got["params_same_bits"] and got["output_same_bits"] and same_install
    figures = {"file_bytes": os.path.getsize(path), "n_params": int(model.params.numel()), "rows": sizes.batch,
               **got, "same_install_in_both_processes": same_install}
    detail = ("state_dict saved, reloaded in a second process: params and outputs bit for bit"
              if ok else f"reload differs: {got}")
    return ("pass" if ok else "fail"), figures, detail


def reload_main(path):
    """The second process of check_checkpoint: rebuilds the model, loads the state_dict, runs the
    saved inputs, compares bits; prints one JSON line."""
    import tinycudann as tcnn
    saved = torch.load(path)
    device = torch.device(saved["device"])
    model = tcnn.NetworkWithInputEncoding(saved["n_input_dims"], saved["n_output_dims"], saved["encoding"],
                                          saved["network"], device=device)
    model.load_state_dict(saved["state_dict"])
    with torch.no_grad():
        y = model(saved["x"].to(device))
    print(json.dumps({"params_same_bits": same_bits(model.params, saved["state_dict"]["params"]),
                      "output_same_bits": same_bits(y, saved["y"]), "output_max_abs_diff": max_abs_diff(y, saved["y"]),
                      "tinycudann_file": os.path.abspath(tcnn.__file__), "pid": os.getpid()}))


def check_launches(model, device, sizes):
    x = inputs(sizes.batch, device, 12)
    differing = {"inference": [], "training_forward": []}
    with torch.no_grad():
        first = model(x)
        for i in range(1, sizes.launches):
            if not same_bits(model(x), first):
                differing["inference"].append(i)
    first_fwd = model(x).detach()  # params require grad: the training forward pass (with a context)
    for i in range(1, sizes.launches):
        if not same_bits(model(x).detach(), first_fwd):
            differing["training_forward"].append(i)
    # Inference and the training forward may run different kernels (fused epilogues, plans): whether
    # they agree bitwise is recorded, not required.
    ok = not differing["inference"] and not differing["training_forward"]
    figures = {"launches": sizes.launches, "rows": sizes.batch, "differing_launches": differing,
               "inference_equals_training_forward": same_bits(first, first_fwd)}
    detail = (f"{sizes.launches} inference and {sizes.launches} training-forward launches bitwise identical"
              if ok else f"launches differ: {differing}")
    return ("pass" if ok else "fail"), figures, detail


def check_prefix(model, device, sizes):
    n = sizes.batch
    x = inputs(n, device, 13)
    with torch.no_grad():
        whole = model(x)
        failed = {}
        ks = sorted({k for k in sizes.prefix_ks if 0 < k < n})
        for k in ks:
            part = model(x[:k].clone())
            if not same_bits(part, whole[:k]):
                rows_off = int(((part.float() != whole[:k].float()).any(dim=1)).sum())
                failed[str(k)] = {"rows_differing": rows_off, "max_abs_diff": max_abs_diff(part, whole[:k])}
    figures = {"n": n, "k": ks, "failed": failed}
    detail = (f"the first k rows of a batch of {n} equal a batch of k, k in {ks}" if not failed
              else f"prefix differs for k in {sorted(failed, key=int)} (batch-size-dependent results)")
    return ("pass" if not failed else "fail"), figures, detail


def check_hot_swap(tcnn, model, net_cfg, device, sizes):
    x = inputs(sizes.batch, device, 14)
    other = make_model(tcnn, net_cfg, device, seed=4242)
    a, b = model.params.detach().clone(), other.params.detach().clone()
    with torch.no_grad():
        ya = model(x)
        model.params.copy_(b)
        yb = model(x)
        model.params.copy_(a)
        ya2 = model(x)
        model.load_state_dict({"params": b})
        yb2 = model(x)
        model.load_state_dict({"params": a})
        ya3 = model(x)
    distinct = not same_bits(ya, yb)
    ok = distinct and same_bits(ya, ya2) and same_bits(yb, yb2) and same_bits(ya, ya3)
    figures = {"rows": sizes.batch, "a_and_b_differ": distinct, "a_again_in_place": same_bits(ya, ya2),
               "b_by_load_state_dict": same_bits(yb, yb2), "a_again_by_load_state_dict": same_bits(ya, ya3)}
    detail = ("params A -> B -> A (in place and by load_state_dict) give A's bits again" if ok
              else f"hot swap differs: {figures}")
    return ("pass" if ok else "fail"), figures, detail


def check_two_streams(tcnn, net_cfg, device, sizes):
    m1, m2 = make_model(tcnn, net_cfg, device, seed=21), make_model(tcnn, net_cfg, device, seed=22)
    x1, x2 = inputs(sizes.batch + 3, device, 15), inputs(sizes.batch // 2 + 5, device, 16)
    rounds = sizes.stream_rounds
    with torch.no_grad():
        y1, y2 = m1(x1), m2(x2)  # one after the other
        synchronize(device)
        outs1, outs2 = [None] * rounds, [None] * rounds
        if device.type == "cuda":
            s1, s2 = torch.cuda.Stream(device), torch.cuda.Stream(device)
            current = torch.cuda.current_stream(device)
            s1.wait_stream(current)
            s2.wait_stream(current)
            for r in range(rounds):  # both streams launched before anything waits
                with torch.cuda.stream(s1):
                    outs1[r] = m1(x1)
                with torch.cuda.stream(s2):
                    outs2[r] = m2(x2)
            current.wait_stream(s1)
            current.wait_stream(s2)
            synchronize(device)
            how = "two non-default CUDA/HIP streams, launches interleaved"
        else:
            def worker(m, x, outs):
                for r in range(rounds):
                    outs[r] = m(x)
            threads = [threading.Thread(target=worker, args=(m1, x1, outs1)),
                       threading.Thread(target=worker, args=(m2, x2, outs2))]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            how = "two CPU threads at once (the CPU has no streams)"
    bad1 = [r for r in range(rounds) if outs1[r] is None or not same_bits(outs1[r], y1)]
    bad2 = [r for r in range(rounds) if outs2[r] is None or not same_bits(outs2[r], y2)]
    ok = not bad1 and not bad2
    figures = {"how": how, "rounds": rounds, "rows": [x1.shape[0], x2.shape[0]], "model1_rounds_differing": bad1,
               "model2_rounds_differing": bad2}
    detail = f"{how}: equal to one after the other" if ok else f"{how}: differ in rounds {bad1} / {bad2}"
    return ("pass" if ok else "fail"), figures, detail


# ---- Whole-build checks.

def check_import(expect_install):
    import tinycudann
    from tinycudann import _C
    files = {"tinycudann": os.path.abspath(tinycudann.__file__), "_C": os.path.abspath(_C.__file__)}
    if not expect_install:
        return "skip", files, "no --expect-install given: the import is whatever the path finds"
    root = os.path.abspath(expect_install)
    ok = all(f.startswith(root + os.sep) for f in files.values())
    return ("pass" if ok else "fail"), {**files, "install": root}, (
        f"tinycudann and its extension import from the install {root}" if ok
        else f"tinycudann is imported from elsewhere than the install {root}: {files}")


def expect_refusal(make, needles):
    try:
        make()
    except (ValueError, TypeError, RuntimeError) as e:
        message = str(e)
        missing = [n for n in needles if n not in message]
        return not missing, {"error": type(e).__name__, "message": message, "missing_text": missing}
    return False, {"error": None, "message": "accepted"}


def check_refuse_unknown(tcnn, device):
    ok, fig = expect_refusal(lambda: tcnn.Network(3, 2, network("NoSuchMLP"), device=device),
                             ["unknown network otype 'NoSuchMLP'", "PortableMLP", "BlasLtMLP", "FullyFusedMLP"])
    return ("pass" if ok else "fail"), fig, "an unknown otype is refused naming the valid choices" if ok else fig["message"]


def check_refuse_unsupported(tcnn, device, gpu_backend, available_ids):
    cases = {}
    # A configuration no backend takes: FullyFusedMLP at width 256 names the backend that runs it.
    ok, cases["FullyFusedMLP_width_256"] = expect_refusal(
        lambda: tcnn.Network(3, 2, network("FullyFusedMLP", "float16", width=256), device=device),
        ["n_neurons 256", "BlasLtMLP"])
    results = [ok]
    # A backend this build does not run: the RDNA4 port's names outside a HIP build with their backend.
    for name in ("HipBLASLtMLP", "HipBLASLtMLPFP16", "RocWMMAWidth64MLP"):
        if gpu_backend == "HIP" and name in available_ids:
            continue
        ok, cases[name] = expect_refusal(lambda: tcnn.Network(3, 2, network(name), device=device),
                                         [f"{name} is the AMD RDNA4 port's name for"])
        results.append(ok)
    ok = all(results)
    return ("pass" if ok else "fail"), cases, (
        f"refused with what to use instead: {', '.join(cases)}" if ok else f"a refusal is missing or unclear: {cases}")


# ---- Speed: the FP16-vs-FP32 ratios in the port's report shape.

def time_ms(fn, device, reps, rounds=5):
    """Median over `rounds` of the mean time of `reps` calls, in ms (device time on a GPU)."""
    for _ in range(3):
        fn()
    synchronize(device)
    per_round = []
    for _ in range(rounds):
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(reps):
                fn()
            end.record()
            end.synchronize()
            per_round.append(start.elapsed_time(end) / reps)
        else:
            t0 = time.perf_counter()
            for _ in range(reps):
                fn()
            per_round.append((time.perf_counter() - t0) * 1e3 / reps)
    return statistics.median(per_round)


def measure(tcnn, net_cfg, device, batch, quick):
    """ms of inference and of a training step (forward, backward, Adam) of the bare 64->64->64->64
    network at `batch`."""
    net = tcnn.Network(64, 64, net_cfg, device=device)
    x = torch.rand(batch, 64, device=device)
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)

    def infer():
        with torch.no_grad():
            net(x)

    def step():
        y = net(x)
        loss = y.float().square().mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    reps = (50 if batch <= 1024 else 20) if device.type == "cuda" else (3 if quick else 5)
    return {"inference_ms": time_ms(infer, device, reps), "train_step_ms": time_ms(step, device, reps)}


def speed(tcnn, device, gpu_backend, available_cfgs, quick, batches=(1024, 16384)):
    out = {"definition": "ratio = ms of the first backend / ms of the second (higher: the second is faster); "
                         "overall = geometric mean of the ratios over the batches (the port's '2.28x overall' is "
                         "the geometric mean of its 1.00x at 1024 and 5.2x at 16384)",
           "network": "64->64->64->64 (n_neurons 64, 2 hidden layers, ReLU), bare Network, fp32 inputs",
           "device_time": device.type == "cuda"}
    for name, slow_cfg, fast_cfg in speed_pairs(gpu_backend):
        pair = {"first": slow_cfg, "second": fast_cfg, "batches": {}}
        if slow_cfg["otype"] + slow_cfg.get("dtype", "") not in available_cfgs or \
                fast_cfg["otype"] + fast_cfg.get("dtype", "") not in available_cfgs:
            pair["skipped"] = "a backend of the pair does not run here"
            out[name] = pair
            continue
        ratios = {"inference": [], "train_step": []}
        for batch in batches:
            a, b = measure(tcnn, slow_cfg, device, batch, quick), measure(tcnn, fast_cfg, device, batch, quick)
            entry = {"first": a, "second": b,
                     "inference_ratio": a["inference_ms"] / b["inference_ms"],
                     "train_step_ratio": a["train_step_ms"] / b["train_step_ms"]}
            ratios["inference"].append(entry["inference_ratio"])
            ratios["train_step"].append(entry["train_step_ratio"])
            pair["batches"][str(batch)] = entry
        for k, v in ratios.items():
            pair[f"{k}_overall"] = math.exp(statistics.fmean(math.log(r) for r in v))
        out[name] = pair
    return out


def speed_lines(sp):
    lines = []
    labels = {"fp16_vs_fp32": "FP16 path vs FP32", "fused_w64_vs_blaslt_fp16": "fused width 64 vs BLAS-Lt FP16"}
    for name, label in labels.items():
        pair = sp.get(name)
        if not pair or pair.get("skipped"):
            lines.append(f"{label}: skipped ({pair.get('skipped') if pair else 'not measured'})")
            continue
        for what in ("train_step", "inference"):
            per = ", ".join(f"{float(v[f'{what}_ratio']):.2f}x at batch {b}" for b, v in pair["batches"].items())
            lines.append(f"{label}, {what.replace('_', ' ')}: {pair[f'{what}_overall']:.2f}x overall, {per}")
    return lines


# ---- Main.

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--evidence-dir", help="folder for the JSON evidence and summary.txt")
    ap.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto",
                    help="auto: CUDA/HIP tensors when torch sees a GPU and the build has a GPU backend, else the CPU")
    ap.add_argument("--quick", action="store_true", help="small sizes (the CPU test suite's run)")
    ap.add_argument("--no-timing", action="store_true", help="skip the speed ratios")
    ap.add_argument("--expect-install", help="the import must resolve under this folder")
    ap.add_argument("--source", default=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                    help="the source tree whose commit is recorded")
    ap.add_argument("--install-json", help="a JSON file of the install step (qualify.sh) to include")
    ap.add_argument("--reload", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.reload:
        reload_main(a.reload)
        return 0
    if not a.evidence_dir:
        ap.error("--evidence-dir is required")

    import tinycudann as tcnn
    from tinycudann import _C
    gpu_backend = _C.gpu_backend_name()
    if a.device == "auto":
        device = torch.device("cuda", 0) if gpu_backend != "none" and torch.cuda.is_available() else torch.device("cpu")
    elif a.device == "cuda":
        if gpu_backend == "none" or not torch.cuda.is_available():
            print(f"qualify: --device cuda, but the build's GPU backend is {gpu_backend} and torch "
                  f"{'sees' if torch.cuda.is_available() else 'does not see'} a GPU", file=sys.stderr)
            return 2
        device = torch.device("cuda", 0)
    else:
        device = torch.device("cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    os.makedirs(a.evidence_dir, exist_ok=True)
    sizes = Sizes(device, a.quick)
    run = Run()
    started = time.time()
    print(f"qualify: tinycudann {tcnn.__version__} ({gpu_backend} build) from {os.path.dirname(tcnn.__file__)}, "
          f"device {device}", flush=True)

    run.check("import", None, lambda: check_import(a.expect_install))
    backends = []
    available_cfgs = set()
    with tempfile.TemporaryDirectory(prefix="tnn-qualify-") as workdir:
        for backend_id, net_cfg in backend_list(gpu_backend):
            entry = {"id": backend_id, "network": net_cfg}
            try:
                probe = make_model(tcnn, net_cfg, device)
                if not probe.native_tcnn_module.supports_device(-1 if device.type == "cpu" else device.index):
                    raise ValueError(f"{probe.native_tcnn_module.describe} does not run on {device}")
                built = probe.native_tcnn_module.hyperparams()["network"]
                entry.update(available=True, module=built["otype"], dtype=built["dtype"], hyperparams=built)
                available_cfgs.add(net_cfg["otype"] + net_cfg.get("dtype", ""))
                del probe
            except (ValueError, TypeError, RuntimeError) as e:
                entry.update(available=False, reason=str(e))
            backends.append(entry)
            if not entry["available"]:
                run.check("backend", backend_id, lambda e=entry: ("skip", {}, f"not in this build/device: {e['reason']}"))
                continue
            print(f"backend {backend_id} ({entry['module']}, {entry['dtype']}) on {device}", flush=True)
            holder = {}

            def train(net_cfg=net_cfg):
                status, figures, detail, model = check_train(tcnn, net_cfg, device, sizes)
                holder["model"] = model
                return status, figures, detail
            run.check("train", backend_id, train)
            model = holder.get("model") or make_model(tcnn, net_cfg, device)
            run.check("checkpoint_reload", backend_id,
                      lambda: check_checkpoint(tcnn, model, net_cfg, device, sizes, workdir, backend_id))
            run.check("launches_64", backend_id, lambda: check_launches(model, device, sizes))
            run.check("prefix_invariance", backend_id, lambda: check_prefix(model, device, sizes))
            run.check("param_hot_swap", backend_id, lambda: check_hot_swap(tcnn, model, net_cfg, device, sizes))
            run.check("two_streams", backend_id, lambda: check_two_streams(tcnn, net_cfg, device, sizes))
            del model, holder
    run.check("refuse_unknown", None, lambda: check_refuse_unknown(tcnn, device))
    available_ids = {b["network"]["otype"] for b in backends if b["available"]}
    run.check("refuse_unsupported", None, lambda: check_refuse_unsupported(tcnn, device, gpu_backend, available_ids))
    sp = None
    if a.no_timing:
        run.check("speed", None, lambda: ("skip", {}, "--no-timing"))
    else:
        def timing():
            nonlocal sp
            sp = speed(tcnn, device, gpu_backend, available_cfgs, a.quick)
            return "pass", {}, "; ".join(speed_lines(sp)[:1]) + " (figures, not a gate)"
        run.check("speed", None, timing)

    counts = {s: sum(c["status"] == s for c in run.checks) for s in ("pass", "fail", "skip")}
    commit = git_commit(a.source)
    report = {
        "schema": SCHEMA,
        "created_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join([os.path.basename(sys.argv[0])] + sys.argv[1:]),
        "commit": commit,
        "install": json.load(open(a.install_json)) if a.install_json else None,
        "environment": environment(tcnn),
        "device": device_info(device),
        "sizes": vars(sizes),
        "backends": backends,
        "checks": run.checks,
        "speed": sp,
        "summary": {"passed": counts["pass"], "failed": counts["fail"], "skipped": counts["skip"],
                    "result": "PASS" if counts["fail"] == 0 else "FAIL",
                    "seconds": round(time.time() - started, 1)},
    }
    dev = report["device"]
    tag = (dev.get("arch") or "cpu").replace("/", "_")
    sha = (commit["sha"] or "unknown")[:12]
    path = os.path.join(a.evidence_dir, f"qualify-{sha}-{tag}.json")
    with open(path, "w") as f:
        json.dump(report, f, indent=1, default=str)
        f.write("\n")
    lines = [f"tiny-rdna4-nn qualification smoke: {report['summary']['result']} "
             f"({counts['pass']} passed, {counts['fail']} failed, {counts['skip']} skipped, "
             f"{report['summary']['seconds']} s)",
             f"commit {commit['sha']}{' (with uncommitted changes)' if commit['dirty'] else ''}",
             f"device {dev['kind']}: {dev.get('name')} {dev.get('arch', '')}".rstrip(),
             f"tinycudann {tcnn.__version__} ({gpu_backend} build) from {os.path.dirname(tcnn.__file__)}; "
             f"torch {torch.__version__}"]
    for b in backends:
        if not b["available"]:
            lines.append(f"  {b['id']}: not available ({b['reason'].splitlines()[0][:160]})")
            continue
        mine = [c for c in run.checks if c["backend"] == b["id"]]
        bad = [c["check"] for c in mine if c["status"] == "fail"]
        lines.append(f"  {b['id']}: {'FAIL ' + ', '.join(bad) if bad else 'all ' + str(len(mine)) + ' checks passed'}")
    for c in run.checks:
        if c["backend"] is None:
            lines.append(f"  {c['check']}: {c['status']}" + (f" ({c['detail'].splitlines()[0]})" if c["status"] != "pass" else ""))
    if sp:
        lines += ["speed (" + ("device time" if sp["device_time"] else "CPU wall time") + "):"]
        lines += ["  " + s for s in speed_lines(sp)]
    lines.append(f"evidence: {path}")
    with open(os.path.join(a.evidence_dir, "summary.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0 if counts["fail"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
