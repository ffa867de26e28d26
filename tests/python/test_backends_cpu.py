# Every network otype on CPU tensors through tinycudann: FullyFusedMLP and BlasLtMLP in each precision,
# and tcnn's names for them (CutlassMLP, MLP, a config without otype, MegakernelMLP), run forward and
# backward and match an fp64 torch evaluation of tcnn's MLP within their precision; tcnn's stock
# configs (its data/config*.json, retyped below) build and train on the CPU as its sample script does.
import pytest
import torch

import tinycudann as tcnn
from tnn_test_utils import CPU, EPS, mlp_config, mlp_layer_shapes, mlp_reference

# (network config, the backend it runs, its dtype)
NETWORKS = [
    ({"otype": "FullyFusedMLP"}, "FullyFusedMLP", torch.float16),
    ({"otype": "FullyFusedMLP", "dtype": "bfloat16"}, "FullyFusedMLP", torch.bfloat16),
    ({"otype": "BlasLtMLP"}, "BlasLtMLP", torch.float32),
    ({"otype": "BlasLtMLP", "tf32": True}, "BlasLtMLP", torch.float32),
    ({"otype": "BlasLtMLP", "dtype": "float16"}, "BlasLtMLP", torch.float16),
    ({"otype": "BlasLtMLP", "dtype": "bfloat16"}, "BlasLtMLP", torch.bfloat16),
    # tcnn's names: its GEMM MLP and its default otype, in tcnn's precision (float16) unless named.
    ({"otype": "CutlassMLP"}, "BlasLtMLP", torch.float16),
    ({"otype": "MLP"}, "BlasLtMLP", torch.float16),
    ({}, "BlasLtMLP", torch.float16),
    ({"otype": "CutlassMLP", "dtype": "float32"}, "BlasLtMLP", torch.float32),
    ({"otype": "MegakernelMLP"}, "FullyFusedMLP", torch.float16),
]


def network_id(entry):
    cfg = entry[0]
    return "-".join(f"{k}={v}" for k, v in cfg.items()) or "no-otype"


def config(base, **keys):
    cfg = dict(base)
    cfg.update(keys)
    return cfg


def n_terms(n_in, n_out, width, n_hidden_layers):
    """The longest accumulation chains (terms summed) behind one output and one dL/dinput element."""
    shapes = mlp_layer_shapes(n_in, n_out, width, n_hidden_layers)
    forward = sum(i for _, i in shapes)
    backward = forward + sum(o for o, _ in shapes[:-1]) + n_out
    return forward, backward


def assert_within_precision(got, ref, dtype, n, what):
    """The module computes in `dtype` (every stored value rounded, every sum accumulated): elementwise
    |got - ref| <= n eps (max|ref| + |ref|), the gamma_n bound of an n-term accumulation relative to
    the size of its terms (factor 2 for the activations' own error); whole tensor
    ||got - ref|| <= sqrt(n) eps ||ref||, the roundings adding up as a random walk (factor 2). A
    binding that passes a wrong pointer, dtype or slice is off by O(|ref|)."""
    got64, ref64 = got.detach().double().cpu(), ref.detach().double().cpu()
    eps = EPS[dtype]
    err = (got64 - ref64).abs()
    bound = n * eps * (ref64.abs().max() + ref64.abs())
    assert bool((err <= bound).all()), f"{what}: max |err| {err.max().item():.3g}, worst index {int((err - bound).argmax())}"
    assert err.norm().item() <= n**0.5 * eps * ref64.norm().item(), f"{what}: whole-tensor error {err.norm().item():.3g}"


@pytest.mark.parametrize("entry", NETWORKS, ids=network_id)
def test_forward_and_backward_on_cpu_tensors(entry):
    base, backend, dtype = entry
    cfg = config(base, n_neurons=32, n_hidden_layers=2, activation="Tanh", output_activation="Sigmoid")
    net = tcnn.Network(5, 3, cfg, device=CPU)
    assert net.native_tcnn_module.name() == backend
    assert net.native_tcnn_module.hyperparams()["otype"] == backend
    assert net.dtype == dtype
    assert net.loss_scale == (128.0 if dtype == torch.float16 else 1.0)

    x = torch.rand(70, 5, requires_grad=True)
    w = torch.rand(70, 3, dtype=torch.float64) - 0.5
    y = net(x)
    assert y.dtype == dtype and y.shape == (70, 3)
    (y.double() * w).sum().backward()

    # The fp64 reference of the same values: the parameters and the input as the module rounds them.
    ref_cfg = mlp_config(**{k: v for k, v in cfg.items() if k in ("n_neurons", "n_hidden_layers", "activation",
                                                                   "output_activation")})
    x_ref = x.detach().to(dtype).double().requires_grad_(True)
    p_ref = net.params.detach().to(dtype).double().requires_grad_(True)
    y_ref = mlp_reference(x_ref, p_ref, 3, ref_cfg)
    (y_ref * w).sum().backward()
    n_forward, n_backward = n_terms(5, 3, 32, 2)
    eps_dtype = dtype if not base.get("tf32") else torch.float32  # the CPU computes tf32 networks in fp32
    assert_within_precision(y, y_ref, eps_dtype, n_forward, f"{backend} output")
    assert_within_precision(x.grad, x_ref.grad, eps_dtype, n_backward, f"{backend} dL/dx")
    assert_within_precision(net.params.grad, p_ref.grad, eps_dtype, n_backward + 70, f"{backend} dL/dparams")


@pytest.mark.parametrize("entry", NETWORKS, ids=network_id)
def test_with_an_input_encoding_on_cpu_tensors(entry):
    base, backend, dtype = entry
    enc = {"otype": "HashGrid", "n_levels": 4, "n_features_per_level": 2, "log2_hashmap_size": 10,
           "base_resolution": 4, "per_level_scale": 1.5}
    model = tcnn.NetworkWithInputEncoding(3, 2, enc, config(base, n_neurons=16, n_hidden_layers=1), device=CPU)
    assert model.native_tcnn_module.hyperparams()["network"]["otype"] == backend
    assert model.dtype == dtype
    x = torch.rand(33, 3)
    y = model(x)
    assert y.dtype == dtype and bool(torch.isfinite(y).all())
    y.float().square().sum().backward()
    assert model.params.grad is not None and bool(torch.isfinite(model.params.grad).all())
    assert model.params.grad.abs().sum().item() > 0


def test_tcnn_names_in_the_otype_list_and_errors():
    from tinycudann import _C

    names = [n.lower() for n in _C.network_names()]
    for n in ["cutlassmlp", "mlp", "megakernelmlp", "fullyfusedmlp", "blasltmlp"]:
        assert n in names
    # Configuration errors: ValueError, dtype errors TypeError (either may also be a RuntimeError).
    with pytest.raises((ValueError, TypeError), match=r"MegakernelMLP \(tcnn's name for FullyFusedMLP\).*BlasLtMLP"):
        tcnn.Network(3, 2, mlp_config(otype="MegakernelMLP", n_neurons=256))
    with pytest.raises((ValueError, TypeError), match=r"CutlassMLP \(tcnn's name for BlasLtMLP\).*PortableMLP"):
        tcnn.Network(3, 2, mlp_config(otype="CutlassMLP", dtype="float64"))


# tcnn's stock configs (NVlabs/tiny-cuda-nn data/config.json = config_oneblob.json, and
# config_hash.json), retyped.
STOCK_OPTIMIZER = {"otype": "Adam", "learning_rate": 1e-2, "beta1": 0.9, "beta2": 0.99, "epsilon": 1e-8,
                   "l2_reg": 1e-8}
STOCK_CONFIGS = {
    "config_oneblob": {
        "loss": {"otype": "RelativeL2"},
        "optimizer": STOCK_OPTIMIZER,
        "encoding": {"otype": "OneBlob", "n_bins": 64},
        "network": {"otype": "FullyFusedMLP", "activation": "ReLU", "output_activation": "None",
                    "n_neurons": 128, "n_hidden_layers": 5},
    },
    "config_hash": {
        "loss": {"otype": "RelativeL2"},
        "optimizer": dict(STOCK_OPTIMIZER, epsilon=1e-15, l2_reg=1e-6),
        "encoding": {"otype": "HashGrid", "n_levels": 16, "n_features_per_level": 2, "log2_hashmap_size": 15,
                     "base_resolution": 16, "per_level_scale": 1.5, "fixed_point_pos": False},
        "network": {"otype": "FullyFusedMLP", "activation": "ReLU", "output_activation": "None",
                    "n_neurons": 64, "n_hidden_layers": 2},
    },
}
# The same with tcnn's other network names (nerfstudio-style configs leave the otype out).
STOCK_CONFIGS["config_hash_cutlass"] = dict(STOCK_CONFIGS["config_hash"], network={
    "otype": "CutlassMLP", "activation": "ReLU", "output_activation": "None", "n_neurons": 96, "n_hidden_layers": 2})
STOCK_CONFIGS["config_hash_no_otype"] = dict(STOCK_CONFIGS["config_hash"], network={
    "activation": "ReLU", "output_activation": "None", "n_neurons": 48, "n_hidden_layers": 1})


def image_like(x):
    """A smooth 3-channel function of 2-D positions, standing in for the sample's image."""
    return torch.stack([0.5 + 0.5 * torch.sin(6 * x[:, 0]), x[:, 0] * x[:, 1], 0.5 + 0.4 * torch.cos(5 * x[:, 1])], 1)


@pytest.mark.parametrize("name", list(STOCK_CONFIGS))
@pytest.mark.parametrize("split", [False, True], ids=["NetworkWithInputEncoding", "Encoding+Network"])
def test_stock_config_trains_like_the_sample_script(name, split):
    cfg = STOCK_CONFIGS[name]
    if split:
        encoding = tcnn.Encoding(2, cfg["encoding"], device=CPU)
        model = torch.nn.Sequential(encoding, tcnn.Network(encoding.n_output_dims, 3, cfg["network"], device=CPU))
    else:
        model = tcnn.NetworkWithInputEncoding(n_input_dims=2, n_output_dims=3, encoding_config=cfg["encoding"],
                                              network_config=cfg["network"], device=CPU)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    before = [p.detach().clone() for p in model.parameters()]
    for _ in range(4):
        batch = torch.rand(256, 2)
        targets = image_like(batch)
        output = model(batch)
        relative_l2_error = (output - targets.to(output.dtype)) ** 2 / (output.detach() ** 2 + 0.01)
        loss = relative_l2_error.mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        assert bool(torch.isfinite(loss)), f"{name}: loss {loss.item()}"
    assert any(not torch.equal(b, p) for b, p in zip(before, model.parameters())), "the step changed nothing"


@pytest.mark.gpu
@pytest.mark.parametrize("entry", NETWORKS, ids=network_id)
def test_cuda_and_cpu_tensors_compute_the_same_function(entry):
    """The module on CUDA tensors against itself on CPU tensors (same parameters): each is within its
    precision's whole-tensor bound of the fp64 reference (assert_within_precision), so the two are
    within twice that of each other; TF32's GEMM operands keep float16's 10 mantissa bits."""
    base, backend, dtype = entry
    cfg = config(base, n_neurons=64, n_hidden_layers=2, activation="ReLU", output_activation="None")
    cpu = tcnn.Network(5, 3, cfg, device=CPU)
    try:
        gpu = tcnn.Network(5, 3, cfg, device=torch.device("cuda"))
    except (ValueError, RuntimeError) as e:  # a backend without GPU kernels in this build
        pytest.skip(f"not supported on the GPU: {e}")
    with torch.no_grad():
        gpu.params.copy_(cpu.params.cuda())
    x = torch.rand(1000, 5)
    y_cpu, y_gpu = cpu(x), gpu(x.cuda()).cpu()
    n_forward, _ = n_terms(5, 3, 64, 2)
    eps = EPS[torch.float16 if base.get("tf32") else dtype]
    err = (y_gpu.double() - y_cpu.double()).norm().item()
    assert err <= 2 * n_forward**0.5 * eps * y_cpu.double().norm().item(), f"{backend}: |gpu - cpu| = {err:.3g}"
