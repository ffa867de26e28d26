# Parity of the package's outputs and gradients with an fp64 torch evaluation of tcnn's documented
# MLP layout (tnn_test_utils.mlp_reference), for fp32 and fp64 modules: this is what catches a
# binding that passes the wrong pointer, dtype, row count or parameter slice.
import pytest
import torch

import tinycudann as tcnn
from tnn_test_utils import CPU, assert_close_to_reference, mlp_config, mlp_reference

ACTIVATIONS = ["ReLU", "LeakyReLU", "Sine", "Sigmoid", "Squareplus", "Softplus", "Tanh", "SiLU", "Exponential"]


@pytest.mark.parametrize("act", ACTIVATIONS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_network_forward_matches_fp64_reference(act, dtype):
    cfg = mlp_config(n_neurons=32, n_hidden_layers=2, activation=act, output_activation="None")
    net = tcnn.Network(5, 3, cfg, dtype=dtype, device=CPU)
    x = torch.rand(130, 5, dtype=torch.float64)
    y = net(x)
    ref = mlp_reference(x.to(dtype).double(), net.params.double(), 3, cfg)
    # Each of 3 layers sums <= 32 products (error <= 32 eps relative to the sum of |terms|, and the
    # terms are O(|result|) at Xavier init) plus a rounded activation: 3 * (32 + 2) ~ 100 roundings.
    assert_close_to_reference(y, ref, dtype, k=128, what=f"{act} {dtype}")


@pytest.mark.parametrize("out_act", ["Sigmoid", "Tanh", "Sine", "SiLU"])
def test_output_activation(out_act):
    cfg = mlp_config(n_neurons=16, n_hidden_layers=1, activation="Tanh", output_activation=out_act)
    net = tcnn.Network(2, 4, cfg, dtype=torch.float64, device=CPU)
    x = torch.rand(40, 2, dtype=torch.float64)
    ref = mlp_reference(x, net.params, 4, cfg)
    assert_close_to_reference(net(x), ref, torch.float64, k=64, what=out_act)


def test_no_hidden_layer_network():
    cfg = mlp_config(n_neurons=16, n_hidden_layers=0, activation="ReLU")
    net = tcnn.Network(20, 17, cfg, dtype=torch.float64, device=CPU)  # paddings to 32 on both sides
    x = torch.rand(10, 20, dtype=torch.float64)
    assert_close_to_reference(net(x), mlp_reference(x, net.params, 17, cfg), torch.float64, k=64, what="0 hidden")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_network_gradients_match_fp64_reference(dtype):
    cfg = mlp_config(n_neurons=32, n_hidden_layers=2, activation="Tanh", output_activation="Sigmoid")
    net = tcnn.Network(4, 3, cfg, dtype=dtype, device=CPU)
    x = torch.rand(70, 4, dtype=dtype, requires_grad=True)
    w = torch.rand(70, 3, dtype=torch.float64)
    (net(x).double() * w).sum().backward()

    x_ref = x.detach().double().requires_grad_(True)
    p_ref = net.params.detach().double().requires_grad_(True)
    (mlp_reference(x_ref, p_ref, 3, cfg) * w).sum().backward()
    # Backward sums over the batch (70 rows) for the parameter gradients and over 32 lanes per layer.
    assert_close_to_reference(x.grad, x_ref.grad, dtype, k=256, what="dL/dx")
    assert_close_to_reference(net.params.grad, p_ref.grad, dtype, k=1024, what="dL/dparams")


def test_fp32_module_is_close_to_fp64_module_with_same_params():
    cfg = mlp_config(n_neurons=64, n_hidden_layers=3, activation="ReLU")
    n32 = tcnn.Network(3, 2, cfg, device=CPU)
    n64 = tcnn.Network(3, 2, cfg, dtype=torch.float64, device=CPU)
    with torch.no_grad():
        n64.params.copy_(n32.params)
    x = torch.rand(100, 3)
    assert_close_to_reference(n32(x), n64(x), torch.float32, k=512, what="fp32 vs fp64 module")


def test_identity_encoding_then_network_matches_reference():
    enc_cfg = {"otype": "Identity", "scale": 2.0, "offset": -0.5}
    cfg = mlp_config(n_neurons=32, n_hidden_layers=2, activation="ReLU")
    nwie = tcnn.NetworkWithInputEncoding(3, 2, enc_cfg, cfg, dtype=torch.float64, device=CPU)
    x = torch.rand(50, 3, dtype=torch.float64)
    ref = mlp_reference(2.0 * x - 0.5, nwie.params, 2, cfg)
    assert_close_to_reference(nwie(x), ref, torch.float64, k=128, what="Identity -> MLP")
