"""A soak of the training path users take (issue #49): tinycudann.Trainer over HashGrid + FullyFusedMLP
for many steps, a checkpoint every --every steps, and one resume in a new process that must reproduce
the uninterrupted run bit for bit (deterministic grid gradients). Records at every checkpoint the loss,
torch's and tiny-rdna4-nn's GPU memory and the process's resident host memory; memory must stay flat
after warm-up. One JSON; the last lines printed are a summary and PASS / FAIL.

    python3 bench/soak.py --out DIR [--device cuda|cpu] [--steps 100000] [--every 10000] [--batch 65536]

The resumed process (started by this one) loads the checkpoint taken at half the steps and trains to
the end with the same batches: batch k is drawn from a generator seeded with k.
"""
import argparse
import hashlib
import json
import math
import os
import subprocess
import sys
import time

import torch

import tinycudann as tcnn

GRID = {"otype": "HashGrid", "n_levels": 16, "n_features_per_level": 2, "log2_hashmap_size": 19,
        "base_resolution": 16, "per_level_scale": 1.5, "deterministic": True}
CPU_GRID = dict(GRID, n_levels=8, log2_hashmap_size=14)
NET = {"otype": "FullyFusedMLP", "activation": "ReLU", "output_activation": "None", "n_neurons": 64,
       "n_hidden_layers": 2}
LOSS = {"otype": "RelativeL2"}
OPT = {"otype": "Adam", "learning_rate": 1e-2, "beta1": 0.9, "beta2": 0.99}


def batch(step, n, device):
    gen = torch.Generator(device=device).manual_seed(1000003 * step + 17)
    x = torch.rand(n, 3, device=device, generator=gen)
    t = torch.stack([torch.sin(9 * x[:, 0]) * x[:, 1], torch.cos(7 * x[:, 2]), x[:, 0] * x[:, 2]], 1)
    return x, t


def rss_bytes():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def memory(device):
    m = {"host_rss_bytes": rss_bytes()}
    if device.type == "cuda":
        torch.cuda.synchronize()
        m["torch_allocated_bytes"] = torch.cuda.memory_allocated(device)
        m["torch_reserved_bytes"] = torch.cuda.memory_reserved(device)
        m.update({f"tnn_{k}": v for k, v in tcnn.memory_stats(device.index or 0).items()})
    return m


def digest(t):
    return hashlib.sha256(t.detach().cpu().numpy().tobytes()).hexdigest()


def make(device):
    grid = GRID if device.type == "cuda" else CPU_GRID
    model = tcnn.NetworkWithInputEncoding(3, 3, grid, NET, seed=42, device=device)
    return model, tcnn.Trainer(model, LOSS, OPT)


def train(trainer, device, start, stop, every, n, out_dir, log, save=True):
    for step in range(start, stop):
        trainer.step(*batch(step, n, device))
        done = step + 1
        if done % every == 0 or done == stop:
            loss = trainer.loss()
            entry = {"step": done, "loss": loss, "finite": math.isfinite(loss), "time_s": time.time()}
            entry.update(memory(device))
            if save:
                path = os.path.join(out_dir, f"soak_{done}.tnn")
                trainer.save(path)
                entry["checkpoint_bytes"] = os.path.getsize(path)
            log.append(entry)
            print(f"step {done:7d}  loss {loss:.6f}  " + "  ".join(
                f"{k}={v}" for k, v in entry.items() if k.endswith("bytes")), flush=True)


def resume_main(a):
    device = torch.device(a.device)
    model, trainer = make(device)
    trainer.load(a.resume)
    log = []
    train(trainer, device, trainer.step_count, a.steps, a.every, a.batch, a.out, log, save=False)
    print(json.dumps({"resumed_digest": digest(model.params), "log": log}))
    return 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--steps", type=int, default=None)
    ap.add_argument("--every", type=int, default=None)
    ap.add_argument("--batch", type=int, default=None)
    ap.add_argument("--resume", help=argparse.SUPPRESS)
    a = ap.parse_args()
    gpu = a.device.startswith("cuda")
    a.steps = a.steps or (100000 if gpu else 10000)
    a.every = a.every or a.steps // 10
    a.batch = a.batch or (1 << 16 if gpu else 1 << 10)
    os.makedirs(a.out, exist_ok=True)
    if a.resume:
        return resume_main(a)

    device = torch.device(a.device)
    model, trainer = make(device)
    log = []
    t0 = time.time()
    train(trainer, device, 0, a.steps, a.every, a.batch, a.out, log)
    seconds = time.time() - t0
    final = digest(model.params)
    half = a.steps // 2 // a.every * a.every
    proc = subprocess.run([sys.executable, __file__, "--out", a.out, "--device", a.device, "--steps", str(a.steps),
                           "--every", str(a.every), "--batch", str(a.batch),
                           "--resume", os.path.join(a.out, f"soak_{half}.tnn")],
                          capture_output=True, text=True)
    resumed = json.loads(proc.stdout.strip().splitlines()[-1]) if proc.returncode == 0 else None

    # Flat memory: from the second checkpoint on (the first includes warm-up and graph capture), GPU
    # figures must not grow at all, host RSS by at most 16 MiB (Python's allocator, log entries).
    steady = log[1:]
    growth = {}
    for key in steady[0] if steady else {}:
        if key.endswith("bytes") and key != "checkpoint_bytes":
            growth[key] = max(e[key] for e in steady) - steady[0][key]
    flat = all(v <= (16 << 20 if k == "host_rss_bytes" else 0) for k, v in growth.items())
    finite = all(e["finite"] for e in log)
    same = resumed is not None and resumed["resumed_digest"] == final
    doc = {"device": torch.cuda.get_device_name(device) if gpu else "cpu", "torch": torch.__version__,
           "date": time.strftime("%Y-%m-%d"), "steps": a.steps, "every": a.every, "batch": a.batch,
           "seconds": seconds, "ms_per_step": 1e3 * seconds / a.steps, "log": log, "growth_after_warmup": growth,
           "final_digest": final, "resumed_from": half, "resumed": resumed,
           "resume_stderr": proc.stderr[-2000:] if proc.returncode != 0 else "",
           "loss_finite": finite, "memory_flat": flat, "resume_bit_identical": same}
    with open(os.path.join(a.out, "soak.json"), "w") as f:
        json.dump(doc, f, indent=1)
    for e in log[:-1]:  # keep the last checkpoint only
        p = os.path.join(a.out, f"soak_{e['step']}.tnn")
        if os.path.exists(p) and e["step"] != half:
            os.remove(p)
    print(f"soak: {a.steps} steps in {seconds:.1f} s ({doc['ms_per_step']:.3f} ms/step); loss finite: {finite}; "
          f"memory flat after warm-up: {flat} {growth}; resume from {half} bit-identical: {same}")
    ok = finite and flat and same
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
