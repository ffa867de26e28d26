#!/usr/bin/env python3
# Signed-distance-field fitting with the tinycudann package: a HashGrid + MLP learns the SDF of an
# analytic shape with an eikonal term |grad sdf| = 1, which needs the gradient of the output with
# respect to the input inside the loss (torch.autograd.grad(..., create_graph=True)) and therefore
# second derivatives through the grid and the network (double backward).
"""Fit the signed distance field of an analytic shape with tinycudann.

    fit_sdf.py [--steps N] [--batch N] [--device auto|cpu|cuda] [--network OTYPE] [--dtype DTYPE]
               [--eikonal-weight W] [--off-surface-weight W] [--out SLICE.png] [--json METRICS.json]

The shape (inside the unit cube, where the grid encoding expects its inputs) is a torus around the
y axis with a sphere above it; they are disjoint, so min(sdf_torus, sdf_sphere) is the exact signed
distance everywhere, and its gradient is the exact unit normal on the surface.

Each step samples, on the device:
  surface samples     points on the surface, half of them moved off it by N(0, 0.02) per axis:
                      loss |sdf(x) - SDF(x)| with SDF the analytic distance
  free-space samples  uniform in the cube: eikonal loss (|grad_x sdf(x)| - 1)^2 (--eikonal-weight), the
                      gradient taken with create_graph=True so that Adam sees its derivative by the
                      parameters; and SIREN's off-surface term exp(-100 |sdf(x)|) (--off-surface-weight),
                      without which spurious zero levels remain in free space (the eikonal term does
                      not fix the sign far from the surface; 0 gives the plain two-term loss)
Progress is printed every --eval-interval steps, on held-out samples: the mean |SDF error| near the
surface, the mean angle in degrees between the model's normal (grad sdf / |grad sdf|) and the
analytic normal at surface points, and the eikonal residual mean (|grad sdf| - 1)^2 in free space.
--out writes a PNG of the slice z = 0.5 (model | analytic: blue inside, orange outside, dark lines
every 0.05, the zero level white).
"""
import argparse
import json
import math
import os
import sys
import time

import torch

import tinycudann as tcnn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fit_image import save_png  # noqa: E402  (the dependency-free PNG writer)

# --- the shape ---------------------------------------------------------------------------------------

TORUS_CENTRE, TORUS_R, TORUS_r = (0.5, 0.42, 0.5), 0.25, 0.08  # around the y axis
SPHERE_CENTRE, SPHERE_R = (0.5, 0.76, 0.5), 0.12


def analytic_sdf(x):
    """Exact signed distance to the torus-and-sphere shape, [N, 3] -> [N]."""
    t = x - torch.tensor(TORUS_CENTRE, device=x.device, dtype=x.dtype)
    ring = torch.stack([t[:, [0, 2]].norm(dim=1) - TORUS_R, t[:, 1]], dim=1)
    d_torus = ring.norm(dim=1) - TORUS_r
    d_sphere = (x - torch.tensor(SPHERE_CENTRE, device=x.device, dtype=x.dtype)).norm(dim=1) - SPHERE_R
    return torch.minimum(d_torus, d_sphere)


def analytic_normal(x):
    """Unit gradient of analytic_sdf (its outward normal on the surface), [N, 3]."""
    x = x.detach().double().requires_grad_(True)
    (g,) = torch.autograd.grad(analytic_sdf(x).sum(), x)
    return torch.nn.functional.normalize(g, dim=1).float()


def surface_points(n, gen, device):
    """n points on the surface, the torus and the sphere in proportion to their areas."""
    area_torus = 4 * math.pi ** 2 * TORUS_R * TORUS_r
    area_sphere = 4 * math.pi * SPHERE_R ** 2
    n_torus = int(round(n * area_torus / (area_torus + area_sphere)))
    # The torus uniform in its two angles (its inner side, of smaller area, gets more than its share:
    # a sampling density, not a bias of the loss's minimum); the sphere uniform.
    u = torch.rand(n_torus, 2, generator=gen, device=device)
    theta, phi = 2 * math.pi * u[:, 0], 2 * math.pi * u[:, 1]
    rad = TORUS_R + TORUS_r * torch.cos(phi)
    torus = torch.stack([rad * torch.cos(theta), TORUS_r * torch.sin(phi), rad * torch.sin(theta)], dim=1)
    d = torch.nn.functional.normalize(torch.randn(n - n_torus, 3, generator=gen, device=device), dim=1)
    return torch.cat([torus + torch.tensor(TORUS_CENTRE, device=device),
                      SPHERE_R * d + torch.tensor(SPHERE_CENTRE, device=device)])


def jitter(points, gen):
    """Half of the points moved off the surface by N(0, 0.02) per axis (their SDF target is then the
    analytic distance there), half left on it; all kept inside the cube."""
    n = points.shape[0]
    offset = 0.02 * torch.randn(n, 3, generator=gen, device=points.device)
    offset[: n // 2] = 0
    return (points + offset).clamp(0.0, 1.0)


# --- the model -----------------------------------------------------------------------------------------

def make_model(args, device):
    encoding = {"otype": "HashGrid", "n_levels": args.n_levels, "n_features_per_level": 2,
                "log2_hashmap_size": args.log2_hashmap_size, "base_resolution": 16, "per_level_scale": 1.5}
    # Softplus: a smooth network gives smooth normals (with ReLU the SDF is piecewise linear in the
    # features). Every network otype but FullyFusedMLP on the GPU has second derivatives.
    network = {"otype": args.network, "n_neurons": args.n_neurons, "n_hidden_layers": 2, "activation": "Softplus",
               "output_activation": "None", "dtype": args.dtype}
    return tcnn.NetworkWithInputEncoding(3, 1, encoding, network, seed=args.seed, device=device)


def sdf_and_gradient(model, x, create_graph):
    """(sdf [N], grad_x sdf [N, 3]); the gradient stays differentiable when create_graph."""
    x = x.detach().requires_grad_(True)
    with torch.enable_grad():
        sdf = model(x).float()[:, 0]
        (grad,) = torch.autograd.grad(sdf.sum(), x, create_graph=create_graph)
    return sdf, grad


def evaluate(model, held_out):
    """On held-out samples: mean |sdf - SDF| near the surface, mean angle in degrees between the model's
    and the analytic normal on the surface, mean (|grad sdf| - 1)^2 in free space."""
    with torch.no_grad():
        err = (model(held_out["points"]).float()[:, 0] - held_out["sdf"]).abs().mean().item()
    _, grad = sdf_and_gradient(model, held_out["surface"], create_graph=False)
    cos = (torch.nn.functional.normalize(grad.detach(), dim=1) * held_out["normals"]).sum(dim=1).clamp(-1, 1)
    _, grad_free = sdf_and_gradient(model, held_out["free"], create_graph=False)
    eikonal = (grad_free.detach().norm(dim=1) - 1).square().mean().item()
    return err, torch.rad2deg(torch.acos(cos)).mean().item(), eikonal


def slice_image(model, device, size=192):
    """[size, 2 size, 3]: the model's SDF on the slice z = 0.5 next to the analytic one."""
    t = (torch.arange(size, device=device, dtype=torch.float32) + 0.5) / size
    y, x = torch.meshgrid(1 - t, t, indexing="ij")  # y up
    pts = torch.stack([x.reshape(-1), y.reshape(-1), torch.full_like(x.reshape(-1), 0.5)], dim=1)
    with torch.no_grad():
        pred = model(pts).float()[:, 0].reshape(size, size)
    truth = analytic_sdf(pts).reshape(size, size)

    def colour(d):
        inside = torch.tensor([0.25, 0.45, 0.85], device=d.device)
        outside = torch.tensor([0.95, 0.6, 0.25], device=d.device)
        img = torch.where((d < 0)[..., None], inside, outside)
        bands = (torch.frac(d.abs() / 0.05) < 0.08)[..., None]  # iso-lines every 0.05
        img = torch.where(bands, 0.6 * img, img)
        return torch.where((d.abs() < 0.004)[..., None], torch.ones_like(img), img)  # the zero level

    return torch.cat([colour(pred), colour(truth)], dim=1).cpu()


# --- training ------------------------------------------------------------------------------------------

def choose_device(name):
    if name == "auto":
        return torch.device("cuda") if torch.cuda.is_available() and tcnn._C.has_gpu_backend() else torch.device("cpu")
    return torch.device(name)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--batch", type=int, default=1 << 14, help="surface samples per step (as many free-space ones)")
    ap.add_argument("--device", default="auto", help="auto, cpu, cuda or cuda:N")
    ap.add_argument("--network", default="BlasLtMLP", help="network otype: BlasLtMLP (default) or PortableMLP")
    ap.add_argument("--dtype", default="float32", help="network dtype (float32; BlasLtMLP also float16, bfloat16)")
    ap.add_argument("--n-neurons", type=int, default=64)
    ap.add_argument("--n-levels", type=int, default=12)
    ap.add_argument("--log2-hashmap-size", type=int, default=17)
    ap.add_argument("--lr", type=float, default=1e-2)
    ap.add_argument("--eikonal-weight", type=float, default=0.1)
    ap.add_argument("--off-surface-weight", type=float, default=0.01,
                    help="weight of exp(-100 |sdf|) on the free-space samples (keeps zero levels out of free space)")
    ap.add_argument("--seed", type=int, default=1337)
    ap.add_argument("--eval-interval", type=int, default=250)
    ap.add_argument("--eval-samples", type=int, default=1 << 14, help="held-out surface samples for the metrics")
    ap.add_argument("--out", help="write the z = 0.5 slice (model | analytic) as PNG")
    ap.add_argument("--json", help="write metrics as JSON")
    ap.add_argument("--max-sdf-error", type=float, help="exit with status 1 above this mean |SDF error| (tests)")
    ap.add_argument("--max-normal-error", type=float, help="exit with status 1 above this mean angle, degrees")
    ap.add_argument("--max-eikonal", type=float, help="exit with status 1 above this mean (|grad| - 1)^2")
    args = ap.parse_args(argv)
    if args.steps < 1 or args.batch < 2 or args.eval_interval < 1 or args.eval_samples < 2:
        ap.error("--steps and --eval-interval must be positive, --batch and --eval-samples at least 2")

    device = choose_device(args.device)
    torch.manual_seed(args.seed)
    model = make_model(args, device)
    opt = torch.optim.Adam(model.parameters(), lr=args.lr, betas=(0.9, 0.99), eps=1e-15)
    print(f"fit_sdf.py: torus + sphere on {device}, model {model.native_tcnn_module.describe()}, "
          f"{model.params.numel()} params, batch {args.batch} surface + {args.batch} free-space, {args.steps} steps")

    gen = torch.Generator(device=device).manual_seed(args.seed)
    eval_gen = torch.Generator(device=device).manual_seed(args.seed + 1)
    n_eval = args.eval_samples
    held_out = {"surface": surface_points(n_eval, eval_gen, device),
                "points": jitter(surface_points(n_eval, eval_gen, device), eval_gen),
                "free": torch.rand(n_eval, 3, generator=eval_gen, device=device)}
    held_out["normals"] = analytic_normal(held_out["surface"])
    held_out["sdf"] = analytic_sdf(held_out["points"])

    def train_step():
        surf = jitter(surface_points(args.batch, gen, device), gen)
        free = torch.rand(args.batch, 3, generator=gen, device=device)
        sdf_loss = (model(surf).float()[:, 0] - analytic_sdf(surf)).abs().mean()
        sdf_free, grad = sdf_and_gradient(model, free, create_graph=True)
        eikonal = (grad.norm(dim=1) - 1).square().mean()
        loss = sdf_loss + args.eikonal_weight * eikonal
        if args.off_surface_weight > 0:
            loss = loss + args.off_surface_weight * torch.exp(-100 * sdf_free.abs()).mean()
        opt.zero_grad(set_to_none=False)
        loss.backward()  # through the input gradient: the grid's and the network's second derivatives
        opt.step()
        return sdf_loss, eikonal

    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    curve, seconds = [], 0.0
    sdf_err = normal_err = eikonal_err = float("nan")
    for step in range(args.steps):
        t0 = time.perf_counter()
        sdf_loss, eikonal = train_step()
        report = (step + 1) % args.eval_interval == 0 or step + 1 == args.steps
        if report:
            sdf_loss, eikonal = sdf_loss.item(), eikonal.item()  # synchronises
        sync()
        seconds += time.perf_counter() - t0
        if not report:
            continue
        sdf_err, normal_err, eikonal_err = evaluate(model, held_out)
        curve.append({"step": step + 1, "sdf_loss": sdf_loss, "eikonal_loss": eikonal, "sdf_error": sdf_err,
                      "normal_error_deg": normal_err, "eikonal_error": eikonal_err, "seconds": seconds})
        print(f"step {step + 1:6d}/{args.steps}  loss: sdf {sdf_loss:.5f} eikonal {eikonal:.5f}  held out: "
              f"|SDF error| {sdf_err:.5f}  normal error {normal_err:6.2f} deg  eikonal {eikonal_err:.4f}  "
              f"{(step + 1) / max(seconds, 1e-9):7.1f} steps/s", flush=True)

    print(f"final: mean |SDF error| {sdf_err:.5f} (in a unit cube), mean normal error {normal_err:.2f} degrees, "
          f"mean (|grad| - 1)^2 {eikonal_err:.4f}; {1e3 * seconds / args.steps:.2f} ms per step")
    if args.out:
        save_png(args.out, slice_image(model, device))
        print(f"wrote {args.out} (slice z = 0.5: model | analytic)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": str(device), "steps": args.steps, "batch": args.batch,
                       "model": model.native_tcnn_module.hyperparams(), "sdf_error": sdf_err,
                       "normal_error_deg": normal_err, "eikonal_error": eikonal_err,
                       "ms_per_step": 1e3 * seconds / args.steps, "curve": curve},
                      f, indent=2)
    failed = []
    if args.max_sdf_error is not None and not sdf_err <= args.max_sdf_error:
        failed.append(f"mean |SDF error| {sdf_err:.5f} > --max-sdf-error {args.max_sdf_error}")
    if args.max_normal_error is not None and not normal_err <= args.max_normal_error:
        failed.append(f"normal error {normal_err:.2f} deg > --max-normal-error {args.max_normal_error}")
    if args.max_eikonal is not None and not eikonal_err <= args.max_eikonal:
        failed.append(f"mean (|grad| - 1)^2 {eikonal_err:.4f} > --max-eikonal {args.max_eikonal}")
    for f in failed:
        print(f"fit_sdf.py: {f}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
