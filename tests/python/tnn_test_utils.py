# Shared helpers of the tinycudann tests: configs, an fp64 torch reference of tcnn's MLP (written
# from the layout in TCNN_COMPAT.md, independent of the C++ code), precision-derived tolerances and
# queries for what this build registers (so tests of future otypes skip until they land).
import pytest
import torch

from tinycudann import _C
from tinycudann.modules import _ModuleFunction

# Machine epsilon (2^-mantissa bits) per dtype: the unit of every tolerance below.
EPS = {
    torch.float64: 2.0**-52,
    torch.float32: 2.0**-23,
    torch.float16: 2.0**-10,
    torch.bfloat16: 2.0**-7,
}

CPU = torch.device("cpu")


def mlp_config(otype="PortableMLP", n_neurons=32, n_hidden_layers=2, activation="ReLU", output_activation="None",
               **extra):
    cfg = {"otype": otype, "n_neurons": n_neurons, "n_hidden_layers": n_hidden_layers, "activation": activation,
           "output_activation": output_activation}
    cfg.update(extra)
    return cfg


HASHGRID_CONFIG = {"otype": "HashGrid", "n_levels": 4, "n_features_per_level": 2, "log2_hashmap_size": 8,
                   "base_resolution": 4, "per_level_scale": 1.5}


def has_encoding(name):
    return any(n.lower() == name.lower() for n in _C.encoding_names())


def has_network(name):
    return any(n.lower() == name.lower() for n in _C.network_names())


def requires_encoding(name):
    return pytest.mark.skipif(not has_encoding(name), reason=f"encoding {name} is not registered in this build yet")


def next_multiple(v, m):
    return (v + m - 1) // m * m


def activation(name, z):
    """tcnn's activations (TCNN_COMPAT.md), in torch."""
    name = name.lower()
    if name == "none":
        return z
    if name == "relu":
        return torch.relu(z)
    if name == "leakyrelu":
        return torch.where(z > 0, z, 0.01 * z)
    if name == "exponential":
        return torch.exp(z)
    if name == "sine":
        return torch.sin(z)
    if name == "sigmoid":
        return torch.sigmoid(z)
    if name == "squareplus":
        x = 10.0 * z
        return 0.5 * (x + torch.sqrt(x * x + 4.0)) / 10.0
    if name == "softplus":
        return torch.nn.functional.softplus(10.0 * z) / 10.0
    if name == "tanh":
        return torch.tanh(z)
    if name == "silu":
        return z * torch.sigmoid(z)
    raise ValueError(name)


def mlp_layer_shapes(n_in, n_out, width, n_hidden_layers):
    """[(out, in)] per weight matrix on the padded sizes, in parameter order."""
    pin, pout = next_multiple(n_in, 16), next_multiple(n_out, 16)
    if n_hidden_layers == 0:
        return [(pout, pin)]
    return [(width, pin)] + [(width, width)] * (n_hidden_layers - 1) + [(pout, width)]


def mlp_n_params(n_in, n_out, width, n_hidden_layers):
    return sum(o * i for o, i in mlp_layer_shapes(n_in, n_out, width, n_hidden_layers))


def mlp_reference(x, params, n_out, cfg, pad_value=1.0):
    """tcnn's MLP in the dtype of x (use float64): padded input lanes hold pad_value, no biases,
    row-major [out x in] matrices back to back, padded outputs dropped."""
    rows, n_in = x.shape
    shapes = mlp_layer_shapes(n_in, n_out, cfg["n_neurons"], cfg["n_hidden_layers"])
    pad = torch.full((rows, shapes[0][1] - n_in), pad_value, dtype=x.dtype, device=x.device)
    a = torch.cat([x, pad], dim=1)
    offset = 0
    for layer, (o, i) in enumerate(shapes):
        w = params[offset:offset + o * i].reshape(o, i).to(x.dtype)
        offset += o * i
        last = layer == len(shapes) - 1
        a = activation(cfg["output_activation"] if last else cfg["activation"], a @ w.t())
    assert offset == params.numel()
    return a[:, :n_out]


def assert_close_to_reference(got, ref, dtype, k, what):
    """|got - ref| <= atol + rtol |ref| elementwise with atol = rtol = k * eps(dtype): k counts the
    roundings a value goes through (inputs, each layer's accumulation and activation), so a layout
    or indexing bug (an O(1) error) can never pass, and rounding alone always does."""
    tol = k * EPS[dtype]
    got64, ref64 = got.detach().to(torch.float64).cpu(), ref.detach().to(torch.float64).cpu()
    err = (got64 - ref64).abs()
    bound = tol + tol * ref64.abs()
    worst = (err - bound).max().item() if err.numel() else 0.0
    assert worst <= 0, (
        f"{what}: max |err| {err.max().item():.3g} exceeds the {dtype} tolerance {tol:.3g} (k={k}) "
        f"at index {int((err - bound).argmax())}"
    )


def rel_l2(got, ref):
    got64, ref64 = got.detach().to(torch.float64).cpu(), ref.detach().to(torch.float64).cpu()
    denom = ref64.norm().item()
    return (got64 - ref64).norm().item() / denom if denom > 0 else (got64 - ref64).norm().item()


def apply_module(module, x, params):
    """The module as a function of (x, params), for gradcheck over explicit parameter tensors."""
    return _ModuleFunction.apply(module._native, module.loss_scale, x, params)


def smooth_target(x):
    """A smooth function of 2-D inputs in [0,1]^2 for training tests."""
    return torch.stack([torch.sin(3.0 * x[:, 0]) * torch.cos(2.0 * x[:, 1]),
                        0.5 * x[:, 0] * x[:, 1] - 0.25], dim=1)


def cuda_device_usable(module):
    """Whether the module's C++ implementation runs on CUDA tensors in this build."""
    return _C.has_gpu_backend() and torch.cuda.is_available() and module.native_tcnn_module.supports_device(
        torch.cuda.current_device())
