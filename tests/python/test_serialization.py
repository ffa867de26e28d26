# Saving and restoring modules: state_dict ({"params": ...}), torch.save of a state_dict, pickle
# and deepcopy (which rebuild the C++ module from the stored configs).
import copy
import io
import pickle

import pytest
import torch

import tinycudann as tcnn
from tnn_test_utils import CPU, mlp_config


def make_modules():
    cfg = mlp_config(n_neurons=16, n_hidden_layers=2, activation="Tanh")
    return [
        tcnn.Network(3, 2, cfg, seed=11, device=CPU),
        tcnn.Network(3, 2, cfg, seed=11, dtype=torch.float64, device=CPU),
        tcnn.NetworkWithInputEncoding(3, 2, {"otype": "Identity", "scale": 2.0}, cfg, seed=11, device=CPU),
        tcnn.Encoding(3, {"otype": "Identity", "offset": 0.5}, dtype=torch.float16, device=CPU),
        tcnn.Encoding(3, {"otype": "Identity"}, dtype=torch.float16, output_dtype=torch.float32, device=CPU),
    ]


def trained(module):
    # Parameters that differ from any seed's initialisation.
    with torch.no_grad():
        module.params.add_(0.01 * torch.randn_like(module.params))
    return module


def same_function(a, b):
    x = torch.rand(20, a.n_input_dims)
    ya, yb = a(x), b(x)
    assert ya.dtype == yb.dtype
    torch.testing.assert_close(ya, yb, rtol=0, atol=0)


@pytest.mark.parametrize("index", range(5))
def test_state_dict_round_trip(index):
    src = trained(make_modules()[index])
    sd = src.state_dict()
    assert list(sd.keys()) == ["params"]
    dst = make_modules()[index]
    with torch.no_grad():
        dst.params.zero_()
    dst.load_state_dict(sd)
    torch.testing.assert_close(dst.params, src.params, rtol=0, atol=0)
    same_function(src, dst)


def test_state_dict_through_torch_save():
    src = trained(make_modules()[0])
    buf = io.BytesIO()
    torch.save(src.state_dict(), buf)
    buf.seek(0)
    dst = make_modules()[0]
    dst.load_state_dict(torch.load(buf))
    same_function(src, dst)


def test_load_state_dict_of_wrong_size_raises():
    a = tcnn.Network(3, 2, mlp_config(n_neurons=16), device=CPU)
    b = tcnn.Network(3, 2, mlp_config(n_neurons=32), device=CPU)
    with pytest.raises(RuntimeError, match="params"):
        a.load_state_dict(b.state_dict())


@pytest.mark.parametrize("index", range(5))
def test_pickle_round_trip(index):
    src = trained(make_modules()[index])
    dst = pickle.loads(pickle.dumps(src))
    assert type(dst) is type(src)
    assert dst.native_tcnn_module is not src.native_tcnn_module
    assert dst.native_tcnn_module.hyperparams() == src.native_tcnn_module.hyperparams()
    assert (dst.n_input_dims, dst.n_output_dims, dst.dtype, dst.seed, dst.loss_scale) == \
        (src.n_input_dims, src.n_output_dims, src.dtype, src.seed, src.loss_scale)
    torch.testing.assert_close(dst.params, src.params, rtol=0, atol=0)
    same_function(src, dst)
    # The copy trains on its own.
    x = torch.rand(8, src.n_input_dims, requires_grad=True)
    dst(x).float().sum().backward()
    assert x.grad is not None


def test_deepcopy_is_independent():
    src = make_modules()[0]
    dst = copy.deepcopy(src)
    with torch.no_grad():
        dst.params.add_(1.0)
    assert not torch.equal(src.params, dst.params)


def test_whole_module_torch_save():
    src = trained(make_modules()[2])
    buf = io.BytesIO()
    torch.save(src, buf)
    buf.seek(0)
    kwargs = {"weights_only": False} if "weights_only" in torch.load.__code__.co_varnames else {}
    dst = torch.load(buf, **kwargs)
    same_function(src, dst)
