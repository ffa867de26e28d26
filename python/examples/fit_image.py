#!/usr/bin/env python3
# Image fitting with the tinycudann package, the Python twin of `tnn fit-image`: a
# NetworkWithInputEncoding learns RGB(u, v) from random pixel coordinates each step (bilinear targets
# at pixel centres), trained with torch.optim; PSNR is measured on the full pixel grid as in C++.
"""Fit an image with tinycudann.

    fit_image.py [IMAGE] [--config CFG.json] [--steps N] [--batch N] [--device auto|cpu|cuda]
                 [--mode eager|graph|trainer|all] [--out OUT.png] [--json METRICS.json]

The three ways to train a tinycudann module from PyTorch (--mode):
  eager    the module in a plain PyTorch loop: torch loss, loss.backward(), torch.optim.Adam
  graph    the same step captured once with torch.cuda.graph and replayed (CUDA only; --cuda-graph)
  trainer  tinycudann.Trainer: the C++ step (forward, loss, backward, Adam; one CUDA graph on a GPU)
  all      each of them in turn from the same initial weights, then a table of their times

IMAGE defaults to the bundled data/default.png (`tnn make-image` writes it); the name `synthetic`
selects a small generated picture. The config is tcnn's JSON (encoding, network, loss, optimizer);
the default is data/config_gpu.json or data/config_cpu.json for the device.
"""
import argparse
import json
import math
import os
import struct
import sys
import time
import zlib

import torch

import tinycudann as tcnn

HERE = os.path.dirname(os.path.abspath(__file__))


# --- images ----------------------------------------------------------------------------------------

def data_path(name):
    """$TNN_DATA_DIR, else ./data, else the source tree's data/ (as the tnn program looks)."""
    if os.environ.get("TNN_DATA_DIR"):
        return os.path.join(os.environ["TNN_DATA_DIR"], name)
    if os.path.exists(os.path.join("data", name)):
        return os.path.join("data", name)
    return os.path.join(HERE, "..", "..", "data", name)


def _png_unfilter(raw, width, height, channels):
    """PNG scanline filters (None, Sub, Up, Average, Paeth) undone; 8-bit samples."""
    stride = width * channels
    out = bytearray(stride * height)
    prev = bytearray(stride)
    pos = 0
    for y in range(height):
        ftype = raw[pos]
        line = bytearray(raw[pos + 1:pos + 1 + stride])
        pos += 1 + stride
        for i in range(stride):
            a = line[i - channels] if i >= channels else 0
            b = prev[i]
            if ftype == 1:
                line[i] = (line[i] + a) & 0xFF
            elif ftype == 2:
                line[i] = (line[i] + b) & 0xFF
            elif ftype == 3:
                line[i] = (line[i] + ((a + b) >> 1)) & 0xFF
            elif ftype == 4:
                c = prev[i - channels] if i >= channels else 0
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 0xFF
        out[y * stride:(y + 1) * stride] = line
        prev = line
    return bytes(out)


def _read_png(path):
    """A minimal reader for 8-bit, non-interlaced grey/RGB/RGBA PNGs (what stb and most tools write),
    used when Pillow is not installed."""
    with open(path, "rb") as f:
        data = f.read()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError(f"{path}: not a PNG file (install Pillow for other formats)")
    pos, idat, header = 8, [], None
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos:pos + 4])
        kind, body = data[pos + 4:pos + 8], data[pos + 8:pos + 8 + length]
        pos += 12 + length
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat.append(body)
        elif kind == b"IEND":
            break
    width, height, depth, color, _, _, interlace = header
    channels = {0: 1, 2: 3, 4: 2, 6: 4}.get(color)
    if depth != 8 or channels is None or interlace:
        raise ValueError(f"{path}: only 8-bit non-interlaced grey/RGB/RGBA PNGs are read without Pillow")
    pixels = _png_unfilter(zlib.decompress(b"".join(idat)), width, height, channels)
    img = torch.frombuffer(bytearray(pixels), dtype=torch.uint8).reshape(height, width, channels)
    img = img[..., :1].expand(-1, -1, 3) if channels <= 2 else img[..., :3]
    return img.float() / 255.0


def load_image(path):
    """[H, W, 3] float32 in [0, 1]."""
    try:
        from PIL import Image
    except ImportError:
        return _read_png(path)
    with Image.open(path) as im:
        rgb = im.convert("RGB")
        data = torch.frombuffer(bytearray(rgb.tobytes()), dtype=torch.uint8)
        return data.reshape(rgb.height, rgb.width, 3).float() / 255.0


def save_png(path, img):
    """Writes [H, W, 3] values in [0, 1] as an 8-bit RGB PNG (no dependencies)."""
    h, w, _ = img.shape
    px = bytes((img.clamp(0, 1) * 255.0 + 0.5).to(torch.uint8).cpu().reshape(-1).tolist())
    raw = b"".join(b"\x00" + px[y * w * 3:(y + 1) * w * 3] for y in range(h))

    def chunk(kind, body):
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body) & 0xFFFFFFFF)

    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
                + chunk(b"IDAT", zlib.compress(raw, 6)) + chunk(b"IEND", b""))


def synthetic_image(size=256):
    """A small generated picture with smooth gradients, rings of rising frequency and sharp edges."""
    t = (torch.arange(size, dtype=torch.float64) + 0.5) / size
    v, u = torch.meshgrid(t, t, indexing="ij")
    img = torch.stack([0.2 + 0.6 * u, 0.3 + 0.4 * v, 0.6 - 0.4 * u * v], dim=-1)
    d = ((u - 0.6) ** 2 + (v - 0.4) ** 2).sqrt()
    ring = 0.5 + 0.5 * torch.sin(2 * math.pi * 30 * d * d / 0.3)
    img = torch.where((d < 0.3)[..., None], torch.stack([ring, 0.8 * ring, 1 - ring], dim=-1), img)
    checker = ((u * 16).floor() + (v * 16).floor()) % 2
    img = torch.where((v > 0.85)[..., None], checker[..., None].expand(-1, -1, 3), img)
    return img.float()


def bilinear(img, uv):
    """Bilinear lookup at uv in [0,1]^2 (pixel (i, j) centred at ((i+0.5)/W, (j+0.5)/H), clamped at
    the border), the lookup `tnn fit-image` uses for its targets."""
    h, w, _ = img.shape
    x = (uv[:, 0] * w - 0.5).clamp(0, w - 1)
    y = (uv[:, 1] * h - 0.5).clamp(0, h - 1)
    x0, y0 = x.floor().long(), y.floor().long()
    x1, y1 = (x0 + 1).clamp(max=w - 1), (y0 + 1).clamp(max=h - 1)
    fx, fy = (x - x0)[:, None], (y - y0)[:, None]
    top = img[y0, x0] * (1 - fx) + img[y0, x1] * fx
    bottom = img[y1, x0] * (1 - fx) + img[y1, x1] * fx
    return top * (1 - fy) + bottom * fy


def pixel_centres(h, w, device):
    ys = (torch.arange(h, device=device, dtype=torch.float32) + 0.5) / h
    xs = (torch.arange(w, device=device, dtype=torch.float32) + 0.5) / w
    v, u = torch.meshgrid(ys, xs, indexing="ij")
    return torch.stack([u.reshape(-1), v.reshape(-1)], dim=1)


def reconstruct(model, img, chunk=1 << 18):
    h, w, _ = img.shape
    coords = pixel_centres(h, w, img.device)
    with torch.no_grad():
        out = torch.cat([model(coords[i:i + chunk]).float() for i in range(0, coords.shape[0], chunk)])
    return out.reshape(h, w, 3)


def psnr(a, b):
    """PSNR in dB of a against b, values clamped to [0,1], mean over all pixels and channels."""
    mse = (a.clamp(0, 1).double() - b.clamp(0, 1).double()).square().mean().item()
    return 99.0 if mse == 0 else 10.0 * math.log10(1.0 / mse)


# --- training --------------------------------------------------------------------------------------

def make_loss(config):
    """tcnn's losses on [batch, 3], averaged over every output; the relative ones hold their
    denominator constant, as tcnn does."""
    otype = config.get("otype", "RelativeL2").lower()
    if otype == "l2":
        return lambda p, t: (p - t).square().mean()
    if otype == "l1":
        return lambda p, t: (p - t).abs().mean()
    if otype == "relativel2":
        return lambda p, t: ((p - t).square() / (p.detach().square() + 0.01)).mean()
    if otype == "relativel1":
        return lambda p, t: ((p - t).abs() / (p.detach().abs() + 0.01)).mean()
    raise ValueError(f"fit_image.py: loss otype '{config.get('otype')}' is not implemented here; "
                     "use L2, L1, RelativeL2 or RelativeL1")


def make_optimizer(config, model, capturable):
    """tcnn's Adam through torch.optim.Adam; tcnn's l2_reg (on the MLP weight matrices only) is
    applied by regularise() before each step."""
    otype = config.get("otype", "Adam")
    if otype.lower() != "adam":
        raise ValueError(f"fit_image.py: optimizer otype '{otype}' is not implemented here; use Adam")
    kwargs = {"lr": config.get("learning_rate", 1e-3), "betas": (config.get("beta1", 0.9), config.get("beta2", 0.999)),
              "eps": config.get("epsilon", 1e-8)}
    if capturable:
        kwargs["capturable"] = True
    opt = torch.optim.Adam(model.parameters(), **kwargs)
    l2_reg = config.get("l2_reg", 1e-8)
    n_matrix = model.native_tcnn_module.n_matrix_params()

    def regularise():
        if l2_reg > 0 and n_matrix > 0:
            model.params.grad[:n_matrix].add_(model.params.detach()[:n_matrix], alpha=l2_reg)

    return opt, regularise


def choose_device(name):
    if name == "auto":
        return torch.device("cuda") if torch.cuda.is_available() and tcnn._C.has_gpu_backend() else torch.device("cpu")
    return torch.device(name)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("image", nargs="?", default=None, help="image file, or 'synthetic' (default: data/default.png)")
    ap.add_argument("--config", help="model config JSON (encoding, network, loss, optimizer)")
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--batch", type=int, default=1 << 14)
    ap.add_argument("--device", default="auto", help="auto, cpu, cuda or cuda:N")
    ap.add_argument("--seed", type=int, default=1337)
    ap.add_argument("--eval-interval", type=int, default=250)
    ap.add_argument("--mode", choices=["eager", "graph", "trainer", "all"], default="eager",
                    help="how to train (see above); default eager")
    ap.add_argument("--cuda-graph", action="store_true", help="the same as --mode graph")
    ap.add_argument("--n-neurons", type=int, help="override the network's n_neurons")
    ap.add_argument("--out", help="write the reconstruction as PNG")
    ap.add_argument("--json", help="write metrics as JSON")
    ap.add_argument("--min-psnr", type=float, help="exit with status 1 if the final PSNR is lower (for tests)")
    args = ap.parse_args(argv)
    if args.steps < 1 or args.batch < 1 or args.eval_interval < 1:
        ap.error("--steps, --batch and --eval-interval must be positive")

    if args.cuda_graph:
        args.mode = "graph"
    device = choose_device(args.device)
    config_path = args.config or data_path("config_gpu.json" if device.type == "cuda" else "config_cpu.json")
    with open(config_path) as f:
        config = json.load(f)
    if args.n_neurons:
        config["network"]["n_neurons"] = args.n_neurons

    if args.image == "synthetic":
        image_name, img = "synthetic", synthetic_image()
    else:
        image_name = args.image or data_path("default.png")
        if args.image is None and not os.path.exists(image_name):
            print(f"fit_image.py: {image_name} not found (`tnn make-image` writes it); using the synthetic image")
            image_name, img = "synthetic", synthetic_image()
        else:
            img = load_image(image_name)
    img = img.to(device)
    h, w, _ = img.shape

    modes = ["eager", "graph", "trainer"] if args.mode == "all" else [args.mode]
    if device.type != "cuda":
        if args.mode == "graph":
            ap.error("--mode graph (--cuda-graph) needs a CUDA device")
        modes = [m for m in modes if m != "graph"]
    print(f"fit_image.py: {image_name} ({w}x{h}) on {device}, config {config_path}")
    runs = [train(mode, config, img, device, args) for mode in modes]
    if len(runs) > 1:
        print("\nmode      ms/step (wall)  steps/s  final PSNR")
        for r in runs:
            print(f"{r['mode']:8s}  {r['ms_per_step']:14.3f}  {r['steps_per_second']:7.1f}  {r['final_psnr']:8.2f} dB")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(runs[0] if len(runs) == 1 else {"runs": runs}, f, indent=2)
    worst = min(r["final_psnr"] for r in runs)
    if args.min_psnr is not None and worst < args.min_psnr:
        print(f"fit_image.py: final PSNR {worst:.2f} dB is below --min-psnr {args.min_psnr}", file=sys.stderr)
        return 1
    return 0


def train(mode, config, img, device, args):
    """Trains a fresh model (same seed in every mode) for args.steps steps; returns its metrics."""
    h, w, _ = img.shape
    torch.manual_seed(args.seed)
    model = tcnn.NetworkWithInputEncoding(2, 3, config.get("encoding", {"otype": "Identity"}), config["network"],
                                          seed=args.seed, device=device)
    print(f"[{mode}] model: {model.native_tcnn_module.describe()}, {model.params.numel()} params, "
          f"batch {args.batch}, steps {args.steps}")

    def sample():
        # Sampled on the device from torch's generator: no host work in the step (it can be captured).
        uv = torch.rand(args.batch, 2, device=device)
        return uv, bilinear(img, uv)

    start = 0
    if mode == "trainer":
        # The loss and optimizer configs go to the C++ Trainer as they are (every tcnn loss and
        # optimizer, l2_reg included); it updates model.params in place.
        trainer = tcnn.Trainer(model, config.get("loss", {"otype": "RelativeL2"}),
                               config.get("optimizer", {"otype": "Adam"}))

        def step_fn():
            trainer.step(*sample())
            return None

        def loss_value(_):
            return trainer.loss()
    else:
        loss_fn = make_loss(config.get("loss", {}))
        opt, regularise = make_optimizer(config.get("optimizer", {}), model, capturable=mode == "graph")

        def train_step():
            uv, target = sample()
            loss = loss_fn(model(uv).float(), target)
            opt.zero_grad(set_to_none=False)
            loss.backward()
            regularise()
            opt.step()
            return loss

        def loss_value(loss):
            return loss.item()  # synchronises

        step_fn = train_step
        if mode == "graph":
            # torch's recipe: warm up on a side stream (allocations, Adam state), then capture one
            # step; the warm-up steps are real training steps and count towards --steps.
            start = min(3, args.steps)
            side = torch.cuda.Stream(device)
            side.wait_stream(torch.cuda.current_stream(device))
            with torch.cuda.stream(side):
                for _ in range(start):
                    train_step()
            torch.cuda.current_stream(device).wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, stream=side):
                static_loss = train_step()

            def step_fn():
                graph.replay()
                return static_loss

    curve, train_seconds, last_loss, last_psnr = [], 0.0, float("nan"), float("nan")
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    sync()
    for step in range(start, args.steps):
        t0 = time.perf_counter()
        loss = step_fn()
        report = (step + 1) % args.eval_interval == 0 or step + 1 == args.steps
        if report:
            last_loss = loss_value(loss)
            sync()
        train_seconds += time.perf_counter() - t0
        if not report:
            continue
        last_psnr = psnr(reconstruct(model, img), img)
        rate = (step + 1 - start) / max(train_seconds, 1e-9)
        curve.append({"step": step + 1, "loss": last_loss, "psnr": last_psnr, "seconds": train_seconds})
        print(f"[{mode}] step {step + 1:6d}/{args.steps}  loss {last_loss:.5f}  PSNR {last_psnr:6.2f} dB  "
              f"{rate:7.1f} steps/s", flush=True)

    result = reconstruct(model, img)
    final_psnr = psnr(result, img)
    rate = (args.steps - start) / max(train_seconds, 1e-9)
    print(f"[{mode}] final PSNR {final_psnr:.2f} dB after {args.steps} steps ({rate:.1f} steps/s, "
          f"{1e3 / rate:.3f} ms per step, {train_seconds:.1f}s training)")
    if args.out:
        out = args.out if args.mode != "all" else args.out.replace(".png", f"_{mode}.png")
        save_png(out, result)
        print(f"[{mode}] wrote {out}")
    return {"mode": mode, "device": str(device), "steps": args.steps, "batch": args.batch, "seed": args.seed,
            "config": config, "final_psnr": final_psnr, "final_loss": last_loss, "train_seconds": train_seconds,
            "steps_per_second": rate, "ms_per_step": 1e3 / rate, "curve": curve}


if __name__ == "__main__":
    sys.exit(main())
