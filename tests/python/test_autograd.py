# Autograd through the package on the CPU: gradcheck in fp64, several forwards before one backward,
# partial requires_grad, loss-scale bookkeeping, empty batches, and second derivatives (gradgradcheck
# where the C++ module supports them, a clear error where it does not, an eikonal step on a grid).
import pytest
import torch

import tinycudann as tcnn
from tnn_test_utils import (CPU, EPS, HASHGRID_CONFIG, apply_module, has_encoding, mlp_config, rel_l2,
                            requires_encoding)


def smooth_network(dtype=torch.float64, **kw):
    # Smooth activations: finite differences are only meaningful away from ReLU's kink.
    cfg = mlp_config(n_neurons=16, n_hidden_layers=2, activation="Tanh", output_activation="Sigmoid", **kw)
    return tcnn.Network(3, 2, cfg, dtype=dtype, device=CPU)


def test_gradcheck_network_fp64():
    net = smooth_network()
    x = torch.rand(6, 3, dtype=torch.float64, requires_grad=True)
    params = net.params.detach().clone().requires_grad_(True)
    assert torch.autograd.gradcheck(lambda x, p: apply_module(net, x, p), (x, params), eps=1e-6, atol=1e-7, rtol=1e-5)


def test_gradcheck_network_with_input_encoding_fp64():
    cfg = mlp_config(n_neurons=16, n_hidden_layers=1, activation="Tanh")
    nwie = tcnn.NetworkWithInputEncoding(2, 3, {"otype": "Identity", "scale": 3.0, "offset": -1.0}, cfg,
                                         dtype=torch.float64, device=CPU)
    x = torch.rand(5, 2, dtype=torch.float64, requires_grad=True)
    params = nwie.params.detach().clone().requires_grad_(True)
    assert torch.autograd.gradcheck(lambda x, p: apply_module(nwie, x, p), (x, params), eps=1e-6, atol=1e-7, rtol=1e-5)


def test_gradcheck_through_the_module_call():
    # The public path: module(x) with the module's own parameters (gradcheck perturbs them in place).
    net = smooth_network()
    x = torch.rand(4, 3, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x, p: net(x), (x, net.params), eps=1e-6, atol=1e-7, rtol=1e-5)


def test_several_forwards_before_one_backward():
    net = smooth_network(dtype=torch.float32)
    x1 = torch.rand(10, 3, requires_grad=True)
    x2 = torch.rand(7, 3, requires_grad=True)
    w1, w2 = torch.rand(10, 2), torch.rand(7, 2)

    # Each call separately ...
    (net(x1) * w1).sum().backward()
    g1, gx1 = net.params.grad.clone(), x1.grad.clone()
    net.params.grad = None
    (net(x2) * w2).sum().backward()
    g2, gx2 = net.params.grad.clone(), x2.grad.clone()
    net.params.grad = None
    x1.grad = x2.grad = None

    # ... and both forwards alive at once, one backward: each node keeps its own C++ context.
    y1, y2 = net(x1), net(x2)
    ((y1 * w1).sum() + (y2 * w2).sum()).backward()
    torch.testing.assert_close(net.params.grad, g1 + g2, rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(x1.grad, gx1, rtol=0, atol=0)
    torch.testing.assert_close(x2.grad, gx2, rtol=0, atol=0)


def test_backward_twice_with_retain_graph():
    net = smooth_network(dtype=torch.float32)
    x = torch.rand(8, 3)
    y = net(x).sum()
    y.backward(retain_graph=True)
    g = net.params.grad.clone()
    y.backward()
    torch.testing.assert_close(net.params.grad, 2 * g, rtol=1e-6, atol=0)


def test_only_input_or_only_params_require_grad():
    net = smooth_network(dtype=torch.float32)
    x = torch.rand(5, 3, requires_grad=True)
    net.params.requires_grad_(False)
    net(x).sum().backward()
    assert x.grad is not None and net.params.grad is None

    net.params.requires_grad_(True)
    x2 = torch.rand(5, 3)
    net(x2).sum().backward()
    assert net.params.grad is not None and torch.count_nonzero(net.params.grad) > 0


def test_empty_batch_backward_gives_zero_param_gradient():
    net = smooth_network(dtype=torch.float32)
    x = torch.rand(0, 3, requires_grad=True)
    y = net(x)
    assert y.shape == (0, 2)
    y.sum().backward()
    assert net.params.grad is not None and torch.count_nonzero(net.params.grad) == 0
    assert x.grad.shape == (0, 3)


def test_input_gradient_follows_the_cast():
    # float64 input to an fp32 module: the gradient reaches the float64 leaf through the cast.
    net = smooth_network(dtype=torch.float32)
    x = torch.rand(4, 3, dtype=torch.float64, requires_grad=True)
    net(x).sum().backward()
    assert x.grad.dtype == torch.float64
    x32 = x.detach().float().requires_grad_(True)
    net(x32).sum().backward()
    torch.testing.assert_close(x.grad, x32.grad.double(), rtol=0, atol=0)


def test_fp16_loss_scale_is_undone():
    # Identity in fp16: dL/dx = scale * dL/dy. Gradients go through C++ multiplied by loss_scale=128;
    # forgetting to divide would give 128x, dividing twice 1/128x.
    enc = tcnn.Encoding(3, {"otype": "Identity", "scale": 0.5}, dtype=torch.float16, device=CPU)
    assert enc.loss_scale == 128.0
    x = torch.rand(9, 3, requires_grad=True)
    g = torch.linspace(-2.0, 2.0, 27).reshape(9, 3).half()  # exactly representable
    enc(x).backward(g)
    torch.testing.assert_close(x.grad, 0.5 * g.float(), rtol=0, atol=0)


@requires_encoding("HashGrid")
def test_fp16_grid_gradients_are_unscaled():
    # An fp16 module with parameters: its gradients pass through C++ multiplied by 128 and must come
    # back divided (Adam would hide a constant factor, so compare with an fp64 module directly).
    grads = {}
    for dtype in (torch.float16, torch.float64):
        enc = tcnn.Encoding(3, HASHGRID_CONFIG, dtype=dtype, seed=3, device=CPU)
        x = (0.1 + 0.8 * torch.rand(200, 3, generator=torch.Generator().manual_seed(2))).requires_grad_(True)
        w = torch.rand(200, enc.n_output_dims, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
        (enc(x).double() * w).sum().backward()
        grads[dtype] = (enc.params.grad.double(), x.grad.double())
    assert grads[torch.float16][0].dtype == torch.float64
    # The fp16 module rounds its parameters and features once each; sums over <= 200 points add a
    # few more roundings: 16 eps(fp16) bounds the relative error, a missing 1/128 is off by 127.
    tol = 16 * EPS[torch.float16]
    assert rel_l2(grads[torch.float16][0], grads[torch.float64][0]) < tol
    assert rel_l2(grads[torch.float16][1], grads[torch.float64][1]) < tol


def test_changing_loss_scale_keeps_gradients():
    enc = tcnn.Encoding(2, {"otype": "Identity", "scale": 3.0}, dtype=torch.float16, device=CPU)
    x = torch.rand(4, 2, requires_grad=True)
    enc.loss_scale = 1024.0
    enc(x).sum().backward()
    torch.testing.assert_close(x.grad, torch.full_like(x, 3.0), rtol=0, atol=0)


# --- second derivatives ----------------------------------------------------------------------------

def input_gradient_fn(module):
    """(x, params, v) -> dL/dx for dL/dy = v: the function whose derivatives backward_backward_input
    provides (dL'/dv, dL'/dparams, dL'/dx)."""
    def fn(x, params, v):
        y = apply_module(module, x, params)
        (g,) = torch.autograd.grad(y, x, grad_outputs=v, create_graph=True)
        return g
    return fn


def second_order_cases():
    cases = [("Identity", {"otype": "Identity", "scale": 1.5, "offset": 0.25})]
    if has_encoding("HashGrid"):
        cases.append(("HashGrid", HASHGRID_CONFIG))
    return cases


@pytest.mark.parametrize("name,config", second_order_cases(), ids=[c[0] for c in second_order_cases()])
def test_gradgradcheck_encodings_fp64(name, config):
    enc = tcnn.Encoding(3, config, dtype=torch.float64, device=CPU)
    if not enc.native_tcnn_module.supports_backward_backward():
        pytest.skip(f"{name} does not support second derivatives")
    # Points well inside grid cells (finite differences must not straddle a cell border).
    x = (0.1 + 0.8 * torch.rand(5, 3, dtype=torch.float64)).requires_grad_(True)
    params = enc.params.detach().clone()
    if params.numel() > 0:
        params = (params + 0.1 * torch.rand_like(params)).requires_grad_(True)  # non-trivial second derivatives
    v = torch.rand(5, enc.n_output_dims, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(input_gradient_fn(enc), (x, params, v), eps=1e-6, atol=1e-7, rtol=1e-5)
    # torch's own second-order check on the plain module call, inputs only.
    assert torch.autograd.gradgradcheck(lambda x: apply_module(enc, x, params.detach()), (x,), eps=1e-6,
                                        atol=1e-7, rtol=1e-5)


def test_second_derivatives_of_network_per_support():
    net = smooth_network()
    x = torch.rand(4, 3, dtype=torch.float64, requires_grad=True)
    if net.native_tcnn_module.supports_backward_backward():
        params = net.params.detach().clone().requires_grad_(True)
        v = torch.rand(4, 2, dtype=torch.float64, requires_grad=True)
        assert torch.autograd.gradcheck(input_gradient_fn(net), (x, params, v), eps=1e-6, atol=1e-7, rtol=1e-5)
    else:
        (g,) = torch.autograd.grad(net(x).sum(), x, create_graph=True)
        with pytest.raises(ValueError, match="second derivatives"):
            g.square().sum().backward()


def test_second_derivative_through_param_gradient_is_refused():
    enc = tcnn.Encoding(3, {"otype": "Identity"}, dtype=torch.float64, device=CPU)
    net = smooth_network()
    x = torch.rand(4, 3, dtype=torch.float64, requires_grad=True)
    (gp,) = torch.autograd.grad(net(enc(x)).sum(), net.params, create_graph=True)
    with pytest.raises((ValueError, RuntimeError), match="second derivatives"):
        gp.square().sum().backward()


@requires_encoding("HashGrid")
def test_eikonal_training_step_through_grid_and_torch_mlp():
    """SDF-style training: an eikonal term |d sdf/dx| = 1 needs d/dparams of the input gradient."""
    enc = tcnn.Encoding(3, HASHGRID_CONFIG, dtype=torch.float32, device=CPU)
    if not enc.native_tcnn_module.supports_backward_backward():
        pytest.skip("HashGrid does not support second derivatives yet")
    mlp = torch.nn.Sequential(torch.nn.Linear(enc.n_output_dims, 32), torch.nn.Softplus(beta=10),
                              torch.nn.Linear(32, 1))
    opt = torch.optim.Adam(list(enc.parameters()) + list(mlp.parameters()), lr=1e-2)
    # Target: the SDF of a sphere of radius 0.3 around (0.5, 0.5, 0.5).
    x = torch.rand(512, 3)
    sdf_true = (x - 0.5).norm(dim=1, keepdim=True) - 0.3

    def loss_fn():
        xg = x.clone().requires_grad_(True)
        sdf = mlp(enc(xg).float())
        (grad,) = torch.autograd.grad(sdf.sum(), xg, create_graph=True)
        eikonal = (grad.norm(dim=1) - 1.0).square().mean()
        return (sdf - sdf_true).abs().mean() + 0.1 * eikonal, eikonal

    losses = []
    for _ in range(60):
        opt.zero_grad()
        loss, eikonal = loss_fn()
        loss.backward()
        assert enc.params.grad is not None and torch.isfinite(enc.params.grad).all()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0], losses


@requires_encoding("HashGrid")
def test_fp16_grid_second_derivatives_are_unscaled():
    # The parameter and input parts of the second-order pass run with dL/dy scaled by 128 and are
    # divided afterwards; fp16 and fp64 modules with the same parameters must then agree to fp16 precision.
    results = {}
    for dtype in (torch.float16, torch.float64):
        enc = tcnn.Encoding(3, HASHGRID_CONFIG, dtype=dtype, seed=3, device=CPU)
        if not enc.native_tcnn_module.supports_backward_backward():
            pytest.skip(f"HashGrid in {dtype} does not support second derivatives")
        with torch.no_grad():
            enc.params.copy_(torch.linspace(-1.0, 1.0, enc.params.numel()))
        x = (0.1 + 0.8 * torch.rand(64, 3, generator=torch.Generator().manual_seed(1))).requires_grad_(True)
        (g,) = torch.autograd.grad(enc(x).float().sum(), x, create_graph=True)
        g.square().sum().backward()
        results[dtype] = (enc.params.grad.double(), x.grad.double())
    # Features are rounded to fp16 (one rounding), gradients accumulate over a few levels and corners.
    tol = 32 * EPS[torch.float16]
    assert rel_l2(results[torch.float16][0], results[torch.float64][0]) < tol
    assert rel_l2(results[torch.float16][1], results[torch.float64][1]) < tol
