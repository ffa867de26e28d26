# The custom operators (tinycudann/ops.py) that torch.compile, torch.export and torch.func trace
# through. Their computations are checked on every torch against the eager autograd.Function path
# (same C++ passes, so the same bits); registration, torch.library.opcheck, compiling without graph
# breaks and export need torch 2.4 or later and skip on older ones (CI has 1.13); the CUDA variants
# are marked gpu.
import io
import json
import pickle

import pytest
import torch

import tinycudann as tcnn
from tinycudann import ops
from tnn_test_utils import CPU, HASHGRID_CONFIG, mlp_config

needs_ops = pytest.mark.skipif(not ops.SUPPORTED, reason=f"custom operators need torch 2.4 or later (torch {torch.__version__})")
needs_compile = pytest.mark.skipif(not ops.SUPPORTED or not hasattr(torch, "compile"),
                                   reason=f"torch.compile with custom operators needs torch 2.4 or later (torch {torch.__version__})")

NET = mlp_config(n_neurons=16, n_hidden_layers=2, activation="Tanh", output_activation="None")
GRID = dict(HASHGRID_CONFIG, n_levels=4, log2_hashmap_size=10)


def models(device=CPU):
    yield "Network fp32", tcnn.Network(3, 2, NET, dtype=torch.float32, device=device)
    yield "NetworkWithInputEncoding", tcnn.NetworkWithInputEncoding(3, 2, GRID, NET, dtype=torch.float32, device=device)
    yield "Encoding", tcnn.Encoding(3, GRID, dtype=torch.float32, device=device)


def eager_grads(model, x, dy):
    x = x.detach().clone().requires_grad_(True)
    y = model(x)
    dx, dp = torch.autograd.grad(y, (x, model.params), dy)
    return y.detach(), dx, dp


@pytest.mark.parametrize("name,model", list(models()), ids=lambda v: v if isinstance(v, str) else "")
def test_operator_computations_equal_the_eager_path(name, model):
    torch.manual_seed(0)
    x = torch.rand(37, 3)
    spec = model._op_spec()
    dy = torch.randn(37, model.n_output_dims).to(model.dtype)
    y, dx, dp = eager_grads(model, x, dy)
    assert torch.equal(ops.forward_impl(spec, x, model.params.detach(), model.loss_scale), y)
    odx, odp = ops.backward_impl(spec, x, model.params.detach(), dy.contiguous(), model.loss_scale, True, True)
    assert torch.equal(odx, dx) and torch.equal(odp, dp)
    # Only what is asked for is computed; the rest is an empty tensor.
    odx, odp = ops.backward_impl(spec, x, model.params.detach(), dy.contiguous(), model.loss_scale, False, True)
    assert odx.numel() == 0 and torch.equal(odp, dp)


def test_backward_backward_equals_double_backward_of_the_eager_path():
    torch.manual_seed(1)
    model = tcnn.NetworkWithInputEncoding(3, 2, GRID, NET, dtype=torch.float32, device=CPU)
    x = torch.rand(19, 3, requires_grad=True)
    dy = torch.randn(19, 2, requires_grad=True)
    v = torch.randn(19, 3)
    (g,) = torch.autograd.grad(model(x), x, dy, create_graph=True)
    ddy, ddx, ddp = torch.autograd.grad(g, (dy, x, model.params), v)
    spec = model._op_spec()
    o = ops.backward_backward_impl(spec, x.detach(), model.params.detach(), dy.detach(), v, model.loss_scale, True,
                                   True, True)
    assert torch.equal(o[0], ddy) and torch.equal(o[1], ddx) and torch.equal(o[2], ddp)


def test_spec_rebuilds_the_same_module_in_a_fresh_registry():
    model = tcnn.NetworkWithInputEncoding(3, 2, GRID, NET, device=CPU)
    spec = model._op_spec()
    recipe = json.loads(spec)
    assert recipe["factory"] == "network_with_input_encoding"
    saved = ops._natives.pop(spec)
    try:
        rebuilt = ops.native_of(spec)
        assert rebuilt is not saved
        assert rebuilt.module.hyperparams() == model.native_tcnn_module.hyperparams()
        assert rebuilt.n_params == model.params.numel()
    finally:
        ops._natives[spec] = saved


def test_spec_is_not_pickled_and_comes_back_after_loading():
    model = tcnn.Network(3, 2, NET, device=CPU)
    spec = model._op_spec()
    loaded = pickle.load(io.BytesIO(pickle.dumps(model)))
    assert loaded._op_spec() == spec


def test_an_unknown_factory_in_a_spec_is_a_clear_error():
    with pytest.raises(tcnn.TcnnValueError, match="unknown module factory"):
        ops.native_of(ops.spec_of({"factory": "nope", "args": {}}))


def test_eager_calls_do_not_take_the_operators():
    assert not ops.wanted()


# ---- torch 2.4 and later -----------------------------------------------------------------------

def op_samples(device):
    torch.manual_seed(2)
    model = tcnn.NetworkWithInputEncoding(3, 2, GRID, NET, dtype=torch.float32, device=device)
    spec = model._op_spec()
    x = torch.rand(33, 3, device=device)
    p = model.params.detach().clone().requires_grad_(True)
    dy = torch.randn(33, 2, device=device)
    v = torch.randn(33, 3, device=device)
    return spec, x, p, dy, v, model.loss_scale


@needs_ops
@pytest.mark.parametrize("device", [CPU, pytest.param(torch.device("cuda"), marks=pytest.mark.gpu)], ids=str)
def test_opcheck_every_operator(device):
    spec, x, p, dy, v, scale = op_samples(device)
    xg = x.clone().requires_grad_(True)
    torch.library.opcheck(torch.ops.tinycudann.forward.default, (spec, xg, p, scale))
    torch.library.opcheck(torch.ops.tinycudann.backward.default, (spec, xg, p, dy.requires_grad_(True), scale, True, True))
    torch.library.opcheck(torch.ops.tinycudann.backward_backward.default,
                          (spec, x, p.detach(), dy.detach(), v, scale, True, True, True))


@needs_compile
@pytest.mark.parametrize("device", [CPU, pytest.param(torch.device("cuda"), marks=pytest.mark.gpu)], ids=str)
def test_compiled_model_has_no_graph_break_and_matches_eager(device):
    torch.manual_seed(3)
    model = tcnn.NetworkWithInputEncoding(3, 2, GRID, NET, device=device)
    x = torch.rand(64, 3, device=device)
    explain = torch._dynamo.explain(model)(x)
    assert explain.graph_break_count == 0, explain.break_reasons
    compiled = torch.compile(model, fullgraph=True)
    with torch.no_grad():
        assert torch.equal(compiled(x), model(x))


@needs_compile
@pytest.mark.parametrize("device", [CPU, pytest.param(torch.device("cuda"), marks=pytest.mark.gpu)], ids=str)
def test_compiled_training_step_matches_eager(device):
    torch.manual_seed(4)
    model = tcnn.NetworkWithInputEncoding(3, 2, GRID, NET, device=device)
    x = torch.rand(128, 3, device=device)
    target = torch.rand(128, 2, device=device)

    def step(x, target):
        y = model(x).float()
        loss = ((y - target) ** 2 / (y.detach() ** 2 + 0.01)).mean()
        loss.backward()
        return loss

    explain = torch._dynamo.explain(step)(x, target)
    assert explain.graph_break_count == 0, explain.break_reasons
    model.params.grad = None
    eager_loss = step(x, target)
    eager_grad = model.params.grad.clone()
    model.params.grad = None
    compiled_loss = torch.compile(step, fullgraph=True)(x, target)
    # Inductor may reorder the loss's own float reductions: the loss within fp32 rounding of a mean of
    # 256 terms; the parameter gradient goes through the same C++ backward with that dL/dy.
    assert torch.allclose(compiled_loss, eager_loss, rtol=1e-5, atol=0)
    assert torch.allclose(model.params.grad, eager_grad, rtol=1e-4, atol=1e-7)


@needs_ops
def test_export_of_an_inference_model():
    if not hasattr(torch, "export"):
        pytest.skip("torch.export is missing")
    model = tcnn.NetworkWithInputEncoding(3, 2, GRID, NET, device=CPU)
    x = torch.rand(16, 3)
    exported = torch.export.export(model, (x,))
    with torch.no_grad():
        assert torch.equal(exported.module()(x), model(x))


@needs_ops
def test_torch_func_grad_through_the_operators():
    model = tcnn.Network(3, 1, NET, dtype=torch.float32, device=CPU)
    x = torch.rand(8, 3)

    def f(x):
        return model(x).float().sum()

    g = torch.func.grad(f)(x)
    xe = x.clone().requires_grad_(True)
    (ge,) = torch.autograd.grad(f(xe), xe)
    assert torch.equal(g, ge)
