# Second derivatives through the package's networks (double backward, e.g. for an eikonal loss):
# torch.autograd.gradcheck / gradgradcheck in fp64 on CPU tensors through Network and
# NetworkWithInputEncoding, every network otype on CPU tensors against fp64 (loss scaling included),
# and torch.autograd.grad(..., create_graph=True) on CUDA tensors against the CPU (marked gpu).
import math

import pytest
import torch

import tinycudann as tcnn
from tnn_test_utils import CPU, EPS, HASHGRID_CONFIG, apply_module, has_encoding, mlp_config, next_multiple, rel_l2

ACTIVATIONS = ["None", "ReLU", "LeakyReLU", "Exponential", "Sine", "Sigmoid", "Squareplus", "Softplus", "Tanh", "SiLU"]


def input_gradient_fn(module):
    """(x, params, v) -> dL/dx for dL/dy = v: the function whose derivatives backward_backward_input
    provides (dL'/dv, dL'/dparams, dL'/dx)."""
    def fn(x, params, v):
        y = apply_module(module, x, params)
        (g,) = torch.autograd.grad(y, x, grad_outputs=v, create_graph=True)
        return g
    return fn


def moderate_params(module):
    # Xavier weights at half scale keep every activation (Exponential included) O(1); biases random.
    p = module.params.detach().clone()
    return (0.5 * p).requires_grad_(True)


# gradcheck's finite differences (eps 1e-6 in fp64) have truncation error ~1e-12 and rounding error
# ~1e-10 relative for O(1) values: atol 1e-7 / rtol 1e-5 leave margin, a wrong term is off by O(1).
FD = dict(eps=1e-6, atol=1e-7, rtol=1e-5)


@pytest.mark.parametrize("act", ACTIVATIONS)
def test_gradcheck_input_gradient_of_network_fp64(act):
    # Each activation as hidden activation, with the next one in the list as output activation.
    out_act = ACTIVATIONS[(ACTIVATIONS.index(act) + 3) % len(ACTIVATIONS)]
    cfg = mlp_config(n_neurons=8, n_hidden_layers=2, activation=act, output_activation=out_act, bias=True)
    net = tcnn.Network(3, 2, cfg, dtype=torch.float64, device=CPU)
    assert net.native_tcnn_module.supports_backward_backward()
    x = (2 * torch.rand(4, 3, dtype=torch.float64) - 1).requires_grad_(True)
    v = torch.rand(4, 2, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(input_gradient_fn(net), (x, moderate_params(net), v), **FD)


def test_gradgradcheck_network_fp64():
    # torch's own second-order check on the module call (inputs; the parameters are constants here,
    # their second-order part is the gradcheck above).
    cfg = mlp_config(n_neurons=16, n_hidden_layers=2, activation="SiLU", output_activation="Softplus")
    net = tcnn.Network(3, 2, cfg, dtype=torch.float64, device=CPU)
    x = torch.rand(5, 3, dtype=torch.float64, requires_grad=True)
    params = net.params.detach()
    assert torch.autograd.gradgradcheck(lambda x: apply_module(net, x, params), (x,), **FD)


def test_gradcheck_through_the_module_call():
    # The public path: net(x) with the module's own parameters, create_graph through autograd.grad.
    cfg = mlp_config(n_neurons=16, n_hidden_layers=1, activation="Tanh", output_activation="None")
    net = tcnn.Network(2, 1, cfg, dtype=torch.float64, device=CPU)

    def eikonal_gradient(x, p):
        (g,) = torch.autograd.grad(net(x).sum(), x, create_graph=True)
        return g
    x = torch.rand(6, 2, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(eikonal_gradient, (x, net.params), **FD)


def inside_grid_cells(config, rows, dims=3, margin=1e-3, seed=0):
    """Points at least `margin` (in cell units) from every level's cell borders, where a grid's input
    gradient jumps: gradcheck's steps of 1e-6 stay inside one cell."""
    gen = torch.Generator().manual_seed(seed)
    cand = 0.05 + 0.9 * torch.rand(50 * rows, dims, dtype=torch.float64, generator=gen)
    ok = torch.ones(cand.shape[0], dtype=torch.bool)
    for level in range(config["n_levels"]):
        scale = math.exp2(level * math.log2(config["per_level_scale"])) * config["base_resolution"] - 1
        frac = torch.frac(scale * cand + 0.5)
        ok &= ((frac > margin) & (frac < 1 - margin)).all(dim=1)
    assert int(ok.sum()) >= rows
    return cand[ok][:rows].clone()


@pytest.mark.skipif(not has_encoding("HashGrid"), reason="no HashGrid in this build")
@pytest.mark.parametrize("act", ["Softplus", "ReLU"])
def test_gradcheck_network_with_input_encoding_fp64(act):
    cfg = mlp_config(n_neurons=16, n_hidden_layers=2, activation=act, output_activation="None")
    model = tcnn.NetworkWithInputEncoding(3, 1, HASHGRID_CONFIG, cfg, dtype=torch.float64, device=CPU)
    assert model.native_tcnn_module.supports_backward_backward()
    x = inside_grid_cells(HASHGRID_CONFIG, 4).requires_grad_(True)
    # The grid starts at +-1e-4: larger values make its terms visible next to the network's.
    params = (model.params.detach() + 0.2 * torch.rand_like(model.params)).requires_grad_(True)
    v = torch.rand(4, 1, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(input_gradient_fn(model), (x, params, v), **FD)
    assert torch.autograd.gradgradcheck(lambda x: apply_module(model, x, params.detach()), (x,), **FD)


# ---- Every network otype on CPU tensors in its precision, against the same function in fp64.

def term_counts(n_in, n_out, width, hidden, batch):
    """mlp_accuracy.h's chains: the forward fan-ins, the first-order input gradient's, and a weight
    gradient's (plus the batch)."""
    pin, pout = next_multiple(n_in, 16), next_multiple(n_out, 16)
    fan_in = [pin] + [width] * hidden
    fan_out = [width] * hidden + [n_out]
    forward = sum(fan_in)
    input_grad = forward + sum(fan_out)
    return forward, input_grad, input_grad + batch


def eikonal_gradients(model, x, params):
    """d/dparams and d/dx of mean((|dy/dx| - 1)^2): the SDF training term, through double backward."""
    x = x.clone().requires_grad_(True)
    y = apply_module(model, x, params)
    (g,) = torch.autograd.grad(y.to(torch.float64).sum(), x, create_graph=True)
    loss = (g.norm(dim=1) - 1.0).square().mean()
    return torch.autograd.grad(loss, (params, x))


@pytest.mark.parametrize("otype,dtype", [("PortableMLP", torch.float32), ("BlasLtMLP", torch.float32),
                                         ("BlasLtMLP", torch.float16), ("BlasLtMLP", torch.bfloat16),
                                         ("FullyFusedMLP", torch.float16), ("FullyFusedMLP", torch.bfloat16)])
def test_every_otype_on_cpu_matches_fp64(otype, dtype):
    width, hidden, batch = 32, 2, 50
    cfg = mlp_config(otype=otype, n_neurons=width, n_hidden_layers=hidden, activation="Softplus",
                     output_activation="None")
    net = tcnn.Network(3, 1, cfg, dtype=dtype, device=CPU)
    ref = tcnn.Network(3, 1, dict(cfg, otype="PortableMLP"), dtype=torch.float64, device=CPU)
    x = torch.rand(batch, 3, generator=torch.Generator().manual_seed(1))
    params = net.params.detach().clone().requires_grad_(True)
    params64 = params.detach().double().to(dtype).double().requires_grad_(True)  # the module's rounded weights
    got_p, got_x = eikonal_gradients(net, x, params)
    ref_p, ref_x = eikonal_gradients(ref, x.double(), params64)
    # The probe v = d loss / d(dL/dx) carries the first-order input gradient's error (input_grad
    # terms), the second-order pass adds its own chain (mlp_second_order.h: input_grad for dL'/dx,
    # param_grad for dL'/dparams): the whole-tensor bound sqrt(n) eps of mlp_accuracy.h on their sum.
    # The 16-bit modules go through loss scaling (x128 in, /128 out): a missing or double unscaling
    # is off by a factor 128.
    _, input_grad, param_grad = term_counts(3, 1, width, hidden, batch)
    eps = EPS[dtype]
    assert rel_l2(got_x, ref_x) <= math.sqrt(2 * input_grad) * eps
    assert rel_l2(got_p, ref_p) <= math.sqrt(input_grad + param_grad) * eps


# ---- CUDA tensors: create_graph=True on the GPU against the same module on the CPU.

def cuda_models():
    f32, f16 = torch.float32, torch.float16
    net = lambda otype: mlp_config(otype=otype, n_neurons=64, n_hidden_layers=2, activation="Softplus")
    return [("PortableMLP-float32", lambda d: tcnn.Network(3, 1, net("PortableMLP"), dtype=f32, device=d)),
            ("BlasLtMLP-float32", lambda d: tcnn.Network(3, 1, net("BlasLtMLP"), dtype=f32, device=d)),
            ("BlasLtMLP-float16", lambda d: tcnn.Network(3, 1, net("BlasLtMLP"), dtype=f16, device=d)),
            ("HashGrid+BlasLtMLP-float32",
             lambda d: tcnn.NetworkWithInputEncoding(3, 1, HASHGRID_CONFIG, net("BlasLtMLP"), dtype=f32, device=d))]


@pytest.mark.gpu
@pytest.mark.parametrize("name,make", cuda_models(), ids=[c[0] for c in cuda_models()])
def test_create_graph_on_cuda_matches_cpu(name, make):
    if "HashGrid" in name and not has_encoding("HashGrid"):
        pytest.skip("no HashGrid in this build")
    cuda = torch.device("cuda")
    model_gpu, model_cpu = make(cuda), make(CPU)
    with torch.no_grad():
        model_cpu.params.copy_(model_gpu.params.cpu())
    x = inside_grid_cells(HASHGRID_CONFIG, 1000).float()
    got = eikonal_gradients(model_gpu, x.to(cuda), model_gpu.params)
    want = eikonal_gradients(model_cpu, x, model_cpu.params)
    # Both devices round the same values to the same dtype; they differ by summation order and the
    # GPU's special-function units (each part of the error either makes against fp64). With the CPU
    # within sqrt(n) eps of fp64 (test_every_otype_on_cpu_matches_fp64) and the GPU within 4 times the
    # CPU's error plus sqrt(n) eps (the GPU tests' bound, tests/gpu/mlp_gpu_bounds.h), the two devices
    # are within 6 sqrt(n) eps of each other. The grid adds n_levels * 2^3 corners * 2 features terms.
    dtype = model_gpu.dtype
    _, input_grad, param_grad = term_counts(3, 1, 64, 2, 1000)
    if "HashGrid" in name:
        grid_terms = HASHGRID_CONFIG["n_levels"] * 8 * HASHGRID_CONFIG["n_features_per_level"]
        input_grad, param_grad = input_grad + grid_terms, param_grad + grid_terms
    eps = EPS[dtype]
    assert rel_l2(got[1], want[1]) <= 6 * math.sqrt(2 * input_grad) * eps
    assert rel_l2(got[0], want[0]) <= 6 * math.sqrt(input_grad + param_grad) * eps


@pytest.mark.gpu
def test_fully_fused_mlp_on_cuda_refuses_naming_the_alternatives():
    cfg = mlp_config(otype="FullyFusedMLP", n_neurons=64, n_hidden_layers=2)
    net = tcnn.Network(3, 1, cfg, dtype=torch.float16, device=torch.device("cuda"))
    x = torch.rand(256, 3, device="cuda", requires_grad=True)
    (g,) = torch.autograd.grad(net(x).float().sum(), x, create_graph=True)
    with pytest.raises(ValueError, match="BlasLtMLP"):
        g.square().sum().backward()


def test_build_reports_second_order_support():
    # Every network otype supports it on the CPU (FullyFusedMLP refuses only on the GPU, above).
    for otype in ("PortableMLP", "BlasLtMLP", "FullyFusedMLP"):
        net = tcnn.Network(3, 1, mlp_config(otype=otype, n_neurons=16, n_hidden_layers=1), device=CPU)
        assert net.native_tcnn_module.supports_backward_backward(), otype
