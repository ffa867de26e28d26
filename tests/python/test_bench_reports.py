# The benchmark tooling that runs on the device (bench/*.py) checked here on recorded data, without a
# GPU: the grid report's floors stay lower bounds of the main rows, every report says where its
# PyTorch figures come from, a reused PyTorch file keeps its origin, and bench_grid_torch.py measures
# the issue's torch.compile figures first when its compile budget runs short.
import json
import math
import shutil
import subprocess
import sys
import types
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench"
DATA = Path(__file__).resolve().parent / "data"  # raw outputs of the device runs of 2026-11-29 to 2026-12-01 (H200)
RUN88 = DATA / "bench_grid_h200.json"          # the full grid benchmark, PyTorch in the same run
RUN88_TORCH = DATA / "bench_grid_torch_h200.json"
MAIN = "hash3d_f2_L16_T19_fp16"


def run(script, *args):
    return subprocess.run([sys.executable, str(BENCH / script), *map(str, args)], capture_output=True, text=True)


def grid_report(tmp_path, torch_json=None, reused=False):
    shutil.copy(RUN88, tmp_path / "bench_grid.json")
    if torch_json is not None:
        if reused:
            assert run("reuse_torch_json.py", torch_json, tmp_path / "bench_grid_torch.json").returncode == 0
        else:
            shutil.copy(torch_json, tmp_path / "bench_grid_torch.json")
    done = run("bench_grid_report.py", tmp_path)
    assert done.returncode == 0, done.stderr
    return (tmp_path / "bench_grid_report.md").read_text(), json.loads((tmp_path / "bench_grid_report.json").read_text())


def test_grid_floors_stay_below_the_main_rows(tmp_path):
    _, report = grid_report(tmp_path, RUN88_TORCH)
    main = [r for r in report["rows"] if r.get("label") == MAIN and "ms" in r and r["variant"] != "morton_sorted_rows"]
    assert {r["pass"] for r in main} >= {"forward", "backward", "backward_det", "fwd_bwd", "fwd_bwd_det"}
    for r in main:  # random rows over the main table's 28 MB: the case the floors' rates were measured for
        assert 0 < r["floor_ms"] <= r["ms"], r
    model = [m for m in report["model"] if "ms" in m]
    assert {m["pass"] for m in model} >= {"train_step", "inference", "train_step_det"}
    for m in model:
        assert 0 < m["floor_ms"] <= m["ms"], m


@pytest.mark.parametrize("case", ["measured", "reused", "none"])
def test_grid_report_says_where_the_pytorch_figures_come_from(tmp_path, case):
    text, report = grid_report(tmp_path, None if case == "none" else RUN88_TORCH, reused=case == "reused")
    torch_lines = [line for line in text.splitlines() if line.startswith("Device:") or "bench_grid_torch.py" in line]
    assert len(torch_lines) == 3  # the header, the grid table's note, the model table's note
    for line in torch_lines:
        assert ("measured in this run" in line.replace("NOT measured in this run", "")) == (case == "measured"), line
    assert (f"NOT measured in this run: reused from {RUN88_TORCH}" in text) == (case == "reused")
    assert report["torch_reused_from"] == (str(RUN88_TORCH) if case == "reused" else None)
    assert ("no PyTorch figure in this run" in text) == (case == "none")


def test_reused_pytorch_file_keeps_its_origin_and_a_missing_one_fails(tmp_path):
    first, second = tmp_path / "first.json", tmp_path / "second.json"
    assert run("reuse_torch_json.py", RUN88_TORCH, first).returncode == 0
    assert run("reuse_torch_json.py", first, second).returncode == 0
    assert json.loads(second.read_text())["reused_from"] == str(RUN88_TORCH)
    missing = run("reuse_torch_json.py", tmp_path / "none.json", tmp_path / "out.json")
    assert missing.returncode != 0 and "not a PyTorch baseline JSON" in missing.stderr
    (tmp_path / "bad.json").write_text('{"torch": "2.11"}')
    assert run("reuse_torch_json.py", tmp_path / "bad.json", tmp_path / "out.json").returncode != 0
    assert not (tmp_path / "out.json").exists()


def test_mlp_report_says_when_its_pytorch_figures_are_reused(tmp_path):
    shutil.copy(DATA / "bench_mlp_h200.json", tmp_path / "bench_mlp.json")
    torch_json = DATA / "bench_mlp_torch_h200.json"
    assert run("reuse_torch_json.py", torch_json, tmp_path / "bench_mlp_torch.json").returncode == 0
    assert run("bench_mlp_report.py", tmp_path).returncode == 0
    title = (tmp_path / "bench_mlp_report.md").read_text().splitlines()[0]
    assert f"NOT measured in this run: reused from {torch_json}" in title


@pytest.fixture
def grid_torch(monkeypatch):
    """bench_grid_torch with its measurements replaced by stubs that record the order of the stages."""
    monkeypatch.syspath_prepend(str(BENCH))
    import bench_grid_torch as module
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda i: "stub")
    monkeypatch.setattr(torch, "_dynamo", types.SimpleNamespace(reset=lambda: None), raising=False)
    calls = []

    def bench(label, batch, impl, passes, results):
        calls.append((label, batch, impl, tuple(passes)))
        results += [{"label": label, "pass": p, "impl": impl, "batch": batch, "ms": 1.0} for p in passes]

    monkeypatch.setattr(module, "bench", bench)
    monkeypatch.setattr(module, "bench_train_step", bench)
    return module, calls


def test_grid_torch_runs_every_stage_in_budget_and_the_issue_figures_first(grid_torch, tmp_path, monkeypatch):
    module, calls = grid_torch
    out = tmp_path / "torch.json"
    monkeypatch.setattr(sys, "argv", ["bench_grid_torch.py", "--out", str(out), "--compile_budget_s", "1000"])
    assert module.main() == 0
    compiled = [(label, batch, passes) for label, batch, impl, passes in calls if impl == "compile"]
    assert compiled == [(MAIN, 1 << 20, ("forward", "fwd_bwd")), (module.MODEL_LABEL, 1 << 20, ("train_step",)),
                        (MAIN, 1 << 21, ("forward", "fwd_bwd"))]
    results = json.loads(out.read_text())["results"]
    assert len(results) == 10 and not [r for r in results if "error" in r]


def test_grid_torch_names_the_stages_a_spent_budget_skipped(grid_torch, tmp_path, monkeypatch):
    module, calls = grid_torch
    out = tmp_path / "torch.json"
    monkeypatch.setattr(sys, "argv", ["bench_grid_torch.py", "--out", str(out), "--compile_budget_s", "-1"])
    assert module.main() == 0
    assert [c for c in calls if c[2] == "compile"] == []
    skipped = [r for r in json.loads(out.read_text())["results"] if "error" in r]
    assert len(skipped) == 3 and all("torch.compile budget" in r["error"] for r in skipped)
    assert not (tmp_path / "torch.json.tmp").exists()


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_torch_grid_baseline_computes_our_grid(device):
    """bench_grid_torch.py's PyTorch grid (the baseline of every speedup over PyTorch) must do the work
    ours does: the same levels, hashing and interpolation, here against the package's grid on the same
    device (the CPU reference, and the GPU kernels where there is one) with the same parameters. Both
    interpolate with fp32 positions, rounded in another order: a position x * s_l is off by up to an ulp
    of s_l, which moves each of the 2^D corner weights by up to D such ulps, so a level's output may
    differ by 2^D * (D * ulp(s_l) + eps) * max|param|. A wrong hash, size or offset would pick other
    entries: errors of the parameters' own size."""
    import tinycudann as tcnn

    sys.path.insert(0, str(BENCH))
    try:
        import bench_grid_torch
    finally:
        sys.path.remove(str(BENCH))
    grid = bench_grid_torch.TorchHashGrid(dtype=torch.float32).to(device)
    cfg = {"otype": "HashGrid", "n_levels": 16, "n_features_per_level": 2, "log2_hashmap_size": 19,
           "base_resolution": 16, "per_level_scale": 1.5}
    ours = tcnn.Encoding(3, cfg, dtype=torch.float32).to(device)  # the package puts modules on CUDA when it can
    with torch.no_grad():
        grid.params.uniform_(-1.0, 1.0)
        ours.params.copy_(grid.params)
    x = torch.rand(4096, 3, device=device)
    diff = (grid(x) - ours(x)).detach().abs().amax(dim=0).view(16, 2).amax(dim=1).cpu()
    eps = torch.finfo(torch.float32).eps
    ulp = torch.tensor([eps * 2.0 ** math.floor(math.log2(float(s))) for s in grid.scales])  # fp32 ulp of s_l
    bound = 2 ** 3 * (3 * ulp + eps) * 1.0  # + the 2^D products' and sums' own roundings
    assert bool((diff <= bound).all()), (diff, bound)
