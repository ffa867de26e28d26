# The Permuto encoding (permutohedral lattice, tcnn's `Permuto`) through the package on the CPU: forward and
# backward with a property the lattice guarantees (the weights of a level sum to 1), gradcheck in fp64,
# gradgradcheck through the encoding, NetworkWithInputEncoding and Composite, and config errors.
import pytest
import torch

import tinycudann as tcnn
from tnn_test_utils import CPU, EPS, apply_module, mlp_config, requires_encoding

pytestmark = requires_encoding("Permuto")

CONFIG = {"otype": "Permuto", "n_levels": 3, "n_features_per_level": 2, "log2_hashmap_size": 6,
          "base_scale": 4.0, "per_level_scale": 1.5}


def points(n, d, seed, dtype=torch.float64):
    # Fixed draws, so that a check never flakes: gradcheck's differences (eps 1e-6) must not carry a point
    # across a simplex face, where the x-derivative jumps; a face within 1e-6 of a point drawn at random
    # has a chance of about scale x 1e-6 per level, and the seeds below are fixed.
    g = torch.Generator().manual_seed(seed)
    return 0.1 + 0.8 * torch.rand(n, d, generator=g, dtype=dtype)


def random_params(module, seed):
    g = torch.Generator().manual_seed(seed)
    return (2 * torch.rand(module.params.numel(), generator=g, dtype=module.params.dtype) - 1)


def input_gradient_fn(module):
    """(x, params, v) -> dL/dx for dL/dy = v: the function whose derivatives backward_backward_input gives."""
    def fn(x, params, v):
        y = apply_module(module, x, params)
        (g,) = torch.autograd.grad(y, x, grad_outputs=v, create_graph=True)
        return g
    return fn


def test_forward_backward_fp32():
    enc = tcnn.Encoding(3, CONFIG, device=CPU)
    assert enc.n_output_dims == 6
    assert enc.params.numel() == 3 * 64 * 2
    x = points(50, 3, 1, torch.float32).requires_grad_(True)
    y = enc(x)
    assert y.shape == (50, 6) and y.dtype == torch.float32
    y.sum().backward()
    assert torch.isfinite(x.grad).all() and torch.isfinite(enc.params.grad).all()
    # dL/dy = 1: every row hands its level's vertices weights that sum to 1, per feature. fp32 sums of 50 rows of
    # 4 weights each: 200 roundings of values up to 50.
    per_level = enc.params.grad.view(3, 64, 2).sum(dim=1).double()
    torch.testing.assert_close(per_level, torch.full((3, 2), 50.0, dtype=torch.float64), rtol=0,
                               atol=200 * EPS[torch.float32] * 50)


def test_constant_table_gives_the_constant():
    enc = tcnn.Encoding(5, CONFIG, dtype=torch.float64, device=CPU)
    with torch.no_grad():
        enc.params.fill_(0.25)
    y = enc(points(20, 5, 2))
    torch.testing.assert_close(y, torch.full_like(y, 0.25), rtol=0, atol=16 * EPS[torch.float64])


def test_gradcheck_fp64():
    enc = tcnn.Encoding(3, CONFIG, dtype=torch.float64, device=CPU)
    x = points(6, 3, 3).requires_grad_(True)
    params = random_params(enc, 4).requires_grad_(True)
    assert torch.autograd.gradcheck(lambda x, p: apply_module(enc, x, p), (x, params), eps=1e-6, atol=1e-7,
                                    rtol=1e-5)


def test_gradgradcheck_fp64():
    enc = tcnn.Encoding(3, CONFIG, dtype=torch.float64, device=CPU)
    assert enc.native_tcnn_module.supports_backward_backward()
    x = points(5, 3, 5).requires_grad_(True)
    params = random_params(enc, 6).requires_grad_(True)
    v = torch.rand(5, enc.n_output_dims, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(input_gradient_fn(enc), (x, params, v), eps=1e-6, atol=1e-7, rtol=1e-5)
    assert torch.autograd.gradgradcheck(lambda x: apply_module(enc, x, params.detach()), (x,), eps=1e-6,
                                        atol=1e-7, rtol=1e-5)


def test_eikonal_style_step_through_the_encoding():
    # |dy/dx|^2 as a loss: its parameter gradient comes from the second-order pass; the x-Hessian is zero
    # inside a simplex, so the loss's gradient in x is exactly zero.
    enc = tcnn.Encoding(3, CONFIG, dtype=torch.float64, device=CPU)
    with torch.no_grad():
        enc.params.copy_(random_params(enc, 7))
    x = points(8, 3, 8).requires_grad_(True)
    y = enc(x)
    (g,) = torch.autograd.grad(y[:, 0].sum(), x, create_graph=True)
    g.square().sum().backward()
    assert enc.params.grad is not None and enc.params.grad.abs().sum() > 0
    assert torch.equal(x.grad, torch.zeros_like(x))


def test_network_with_input_encoding_fp64():
    cfg = mlp_config(n_neurons=16, n_hidden_layers=1, activation="Tanh")
    model = tcnn.NetworkWithInputEncoding(3, 2, CONFIG, cfg, dtype=torch.float64, device=CPU)
    n_enc = 3 * 64 * 2
    params = model.params.detach().clone()
    params[-n_enc:] = 2 * torch.rand(n_enc, generator=torch.Generator().manual_seed(9), dtype=torch.float64) - 1
    params.requires_grad_(True)
    x = points(5, 3, 10).requires_grad_(True)
    assert torch.autograd.gradcheck(lambda x, p: apply_module(model, x, p), (x, params), eps=1e-6, atol=1e-7,
                                    rtol=1e-5)
    if model.native_tcnn_module.supports_backward_backward():
        v = torch.rand(5, 2, dtype=torch.float64, requires_grad=True)
        assert torch.autograd.gradcheck(input_gradient_fn(model), (x, params, v), eps=1e-6, atol=1e-7, rtol=1e-5)


def test_in_a_composite():
    cfg = {"otype": "Composite", "nested": [{"otype": "Identity", "n_dims_to_encode": 1},
                                            dict(CONFIG, n_dims_to_encode=2)]}
    enc = tcnn.Encoding(3, cfg, dtype=torch.float64, device=CPU)
    assert enc.n_output_dims == 1 + 1 + 6  # Identity, padding to Permuto's alignment of 2, 3 levels x 2
    x = points(4, 3, 11).requires_grad_(True)
    params = random_params(enc, 12).requires_grad_(True)
    assert torch.autograd.gradcheck(lambda x, p: apply_module(enc, x, p), (x, params), eps=1e-6, atol=1e-7,
                                    rtol=1e-5)


@pytest.mark.parametrize("bad,word", [({"interpolation": "Smoothstep"}, "interpolation"),
                                      ({"n_features_per_level": 3}, "n_features_per_level"),
                                      ({"n_levels": 33}, "n_levels"),
                                      ({"max_input_grad_dims": 4}, "max_input_grad_dims")])
def test_config_errors(bad, word):
    with pytest.raises(ValueError, match=word):
        tcnn.Encoding(3, dict(CONFIG, **bad), device=CPU)


@pytest.mark.gpu
def test_cuda_matches_the_cpu_fp64_reference():
    # The output and the parameter gradient are continuous in x (a vertex enters or leaves a simplex with
    # weight 0), so an fp32 simplex that differs from the fp64 one near a face changes them by rounding
    # only. Their fp32 error is dominated by the weights' rounding: 2 (d + 3) eps E (E = 6 s (1 + sum_i
    # 1/sqrt((i+1)(i+2))), s the finest level's scale; docs/encodings.md, tests/gpu/test_gpu_encodings.cpp)
    # plus 4 (d + 1) eps, relative to the values' size.
    d = 3
    scale = CONFIG["base_scale"] * CONFIG["per_level_scale"] ** (CONFIG["n_levels"] - 1)
    E = 6 * scale * (1 + sum((i + 1) ** -0.5 * (i + 2) ** -0.5 for i in range(d)))
    tol = (2 * (d + 3) * E + 4 * (d + 1)) * EPS[torch.float32]
    gpu = tcnn.Encoding(d, CONFIG, dtype=torch.float32, device="cuda")
    ref = tcnn.Encoding(d, CONFIG, dtype=torch.float64, device=CPU)
    with torch.no_grad():
        ref.params.copy_(random_params(ref, 13))
        gpu.params.copy_(ref.params.float().cuda())
    x = points(333, d, 14, torch.float32)
    w = torch.rand(333, 6, generator=torch.Generator().manual_seed(15))
    results = []
    for module, xin, win in ((gpu, x.cuda(), w.cuda()), (ref, x.double(), w.double())):
        y = module(xin)
        (y * win).sum().backward()
        results.append((y.double().cpu(), module.params.grad.double().cpu()))
    for got, want in zip(results[0], results[1]):
        assert (got - want).norm() <= tol * want.norm()
    # The eikonal-style step on CUDA tensors: the second-order pass runs, x's gradient is exactly 0.
    xg = x.cuda().requires_grad_(True)
    (g,) = torch.autograd.grad(gpu(xg)[:, 0].sum(), xg, create_graph=True)
    gpu.params.grad = None
    g.square().sum().backward()
    assert torch.equal(xg.grad, torch.zeros_like(xg))
    assert torch.isfinite(gpu.params.grad).all() and gpu.params.grad.abs().sum() > 0
