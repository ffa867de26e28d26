# The tinycudann API surface on CPU tensors: tcnn's names and attributes, the one `params`
# parameter, output shapes and dtypes, any batch size, input casting, and bad arguments raising
# ValueError / TypeError with a message that says what is wrong.
import pytest
import torch

import tinycudann as tcnn
from tinycudann import _C
from tnn_test_utils import CPU, mlp_config, mlp_n_params


def test_exports():
    for name in ["Network", "Encoding", "NetworkWithInputEncoding", "free_temporary_memory", "supports_jit_fusion"]:
        assert hasattr(tcnn, name), name
    assert tcnn.supports_jit_fusion() is False
    tcnn.free_temporary_memory()  # callable without a GPU
    assert isinstance(tcnn.__version__, str) and tcnn.__version__


def test_build_info():
    info = tcnn.build_info()
    assert set(info) == {"version", "gpu_backend", "gpu_architectures", "devices"}
    assert info["version"] == tcnn.__version__
    assert info["gpu_backend"] in ("CUDA", "HIP", "none")
    # The architectures compiled in: none without a GPU backend, CMake's entries with one ("90a-real").
    assert isinstance(info["gpu_architectures"], list)
    assert (info["gpu_backend"] == "none") == (info["gpu_architectures"] == [])
    assert len(info["devices"]) == _C.gpu_device_count()
    for device in info["devices"]:
        assert device["description"]
        assert device["code"] is not None or "TNN_" in device["error"], device


def test_network_attributes_and_params():
    cfg = mlp_config(n_neurons=16, n_hidden_layers=2)
    net = tcnn.Network(3, 5, cfg, device=CPU)
    assert net.n_input_dims == 3 and net.n_output_dims == 5
    assert [name for name, _ in net.named_parameters()] == ["params"]
    assert net.params.dim() == 1 and net.params.dtype == torch.float32 and net.params.requires_grad
    assert net.params.numel() == mlp_n_params(3, 5, 16, 2) == net.native_tcnn_module.n_params()
    assert net.dtype == torch.float32 and net.loss_scale == 1.0 and net.seed == 1337
    assert net.jit_fusion is False
    hp = net.native_tcnn_module.hyperparams()
    assert hp["otype"] == "PortableMLP" and hp["n_neurons"] == 16
    assert "PortableMLP" in repr(net)


def test_initial_params_depend_on_seed_only():
    cfg = mlp_config()
    a, b, c = (tcnn.Network(2, 1, cfg, seed=s, device=CPU) for s in (7, 7, 8))
    assert torch.equal(a.params, b.params)
    assert not torch.equal(a.params, c.params)
    # Xavier-uniform on the padded sizes: every value within the bound of its matrix, none all-zero.
    bound = (6.0 / (16 + 32)) ** 0.5
    first = a.params[: 32 * 16]
    assert first.abs().max() <= bound and first.abs().max() > 0.5 * bound


@pytest.mark.parametrize("batch", [0, 1, 7, 64, 65, 1000])
def test_any_batch_size(batch):
    net = tcnn.Network(3, 2, mlp_config(), device=CPU)
    x_all = torch.rand(1000, 3)
    y_all = net(x_all)
    y = net(x_all[:batch])
    assert y.shape == (batch, 2) and y.dtype == torch.float32
    # Rows are independent: a smaller batch gives the same rows (no padding or tail effects).
    torch.testing.assert_close(y, y_all[:batch], rtol=0, atol=0)


def test_input_is_cast_and_made_contiguous():
    net = tcnn.Network(3, 2, mlp_config(), device=CPU)
    base = torch.rand(3, 40, dtype=torch.float64)
    x_strided = base.t()  # [40, 3], not contiguous, float64
    assert not x_strided.is_contiguous()
    ref = net(x_strided.to(torch.float32).contiguous())
    torch.testing.assert_close(net(x_strided), ref, rtol=0, atol=0)
    ints = torch.randint(0, 2, (10, 3))
    torch.testing.assert_close(net(ints), net(ints.float()), rtol=0, atol=0)


def test_float64_network():
    net = tcnn.Network(3, 2, mlp_config(), dtype=torch.float64, device=CPU)
    assert net.dtype == torch.float64 and net.params.dtype == torch.float64
    y = net(torch.rand(4, 3))
    assert y.dtype == torch.float64


def test_network_dtype_from_config_key():
    net = tcnn.Network(3, 2, mlp_config(dtype="float64"), device=CPU)
    assert net.dtype == torch.float64


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64])
def test_encoding_dtypes(dtype):
    enc = tcnn.Encoding(3, {"otype": "Identity", "scale": 0.5, "offset": 0.25}, dtype=dtype, device=CPU)
    assert enc.n_input_dims == 3 and enc.n_output_dims == 3 and enc.dtype == dtype
    assert enc.params.numel() == 0
    assert enc.loss_scale == (128.0 if dtype == torch.float16 else 1.0)
    x = torch.rand(6, 3)
    y = enc(x)
    assert y.dtype == dtype and y.shape == (6, 3)
    # 0.5 x + 0.25 for x in [0,1) is exact in every dtype's range up to the rounding of the result.
    torch.testing.assert_close(y, (0.5 * x.double() + 0.25).to(dtype), rtol=0, atol=0)


def test_encoding_default_dtype_on_cpu_is_float32():
    enc = tcnn.Encoding(2, {"otype": "Identity"}, device=CPU)
    assert enc.dtype == torch.float32


def test_encoding_fp32_output_opt_in():
    enc = tcnn.Encoding(2, {"otype": "Identity"}, dtype=torch.float16, output_dtype=torch.float32, device=CPU)
    x = torch.rand(5, 2)
    y = enc(x)
    assert y.dtype == torch.float32
    torch.testing.assert_close(y, x.half().float(), rtol=0, atol=0)


def test_network_with_input_encoding_matches_network():
    cfg = mlp_config()
    nwie = tcnn.NetworkWithInputEncoding(3, 2, {"otype": "Identity"}, cfg, seed=5, device=CPU)
    net = tcnn.Network(3, 2, cfg, seed=5, device=CPU)
    # Identity has no parameters, so [network params, encoding params] is the network's vector.
    assert nwie.params.numel() == net.params.numel()
    torch.testing.assert_close(nwie.params, net.params, rtol=0, atol=0)
    x = torch.rand(33, 3)
    torch.testing.assert_close(nwie(x), net(x), rtol=0, atol=0)
    assert nwie.native_tcnn_module.hyperparams()["encoding"]["otype"] == "Identity"


def test_inference_path_has_no_graph():
    net = tcnn.Network(3, 2, mlp_config(), device=CPU)
    x = torch.rand(9, 3)
    y_grad = net(x)
    assert y_grad.grad_fn is not None  # params require grad
    with torch.no_grad():
        y_nograd = net(x)
    assert y_nograd.grad_fn is None
    torch.testing.assert_close(y_nograd, y_grad.detach(), rtol=0, atol=0)
    net.params.requires_grad_(False)
    assert net(x).grad_fn is None


def test_jit_fusion_setter_warns():
    net = tcnn.Network(3, 2, mlp_config(), device=CPU)
    with pytest.warns(UserWarning, match="JIT fusion"):
        net.jit_fusion = True
    assert net.jit_fusion is False


# --- bad arguments ---------------------------------------------------------------------------------

def test_wrong_input_width_raises_value_error():
    net = tcnn.Network(3, 2, mlp_config(), device=CPU)
    with pytest.raises(ValueError, match=r"\[batch, 3\].*\[4, 4\]"):
        net(torch.rand(4, 4))
    with pytest.raises(ValueError, match=r"\[batch, 3\]"):
        net(torch.rand(2, 4, 3))
    with pytest.raises(TypeError, match="torch.Tensor"):
        net([[0.0, 0.0, 0.0]])
    with pytest.raises(TypeError, match="complex"):
        net(torch.zeros(2, 3, dtype=torch.complex64))


def test_unknown_otypes_raise_value_error_with_choices():
    with pytest.raises(ValueError, match="unknown network otype 'NoSuchMLP'.*PortableMLP"):
        tcnn.Network(3, 2, mlp_config(otype="NoSuchMLP"))
    with pytest.raises(ValueError, match="unknown encoding otype 'NoSuchEncoding'.*Identity"):
        tcnn.Encoding(3, {"otype": "NoSuchEncoding"}, device=CPU)
    with pytest.raises(ValueError, match="otype"):
        tcnn.Encoding(3, {"scale": 2.0}, device=CPU)


def test_every_registered_network_otype_is_accepted():
    from tinycudann import _C

    for otype in _C.network_names():
        try:
            net = tcnn.Network(3, 2, mlp_config(otype=otype, n_neurons=64), device=CPU)
        except (ValueError, TypeError) as e:  # a GPU-only backend may refuse a CPU-only build
            assert otype in str(e), f"{otype}: the error must name the backend: {e}"
            continue
        # tcnn's names run the backend they name (test_backends_cpu.py).
        backend = {"cutlassmlp": "blasltmlp", "mlp": "blasltmlp", "megakernelmlp": "fullyfusedmlp",
                   "hipblasltmlp": "blasltmlp", "hipblasltmlpfp16": "blasltmlp", "rocwmmawidth64mlp": "fullyfusedmlp"}
        assert net.native_tcnn_module.name().lower() == backend.get(otype.lower(), otype.lower())


def test_bad_config_values_raise_value_error():
    with pytest.raises(ValueError, match="n_neurons"):
        tcnn.Network(3, 2, mlp_config(n_neurons=0))
    with pytest.raises(ValueError, match="activation"):
        tcnn.Network(3, 2, mlp_config(activation="Swish"))
    with pytest.raises(ValueError, match="n_input_dims"):
        tcnn.Network(0, 2, mlp_config())
    with pytest.raises(TypeError, match="n_output_dims"):
        tcnn.Network(3, 2.5, mlp_config())
    with pytest.raises(TypeError, match="network_config"):
        tcnn.Network(3, 2, '{"otype": "PortableMLP"}')
    with pytest.raises(ValueError, match="seed"):
        tcnn.Network(3, 2, mlp_config(), seed=-1)


def test_dtype_errors_raise_type_error():
    with pytest.raises(TypeError, match="dtype"):
        tcnn.Encoding(3, {"otype": "Identity"}, dtype=torch.int32)
    # From the C++ library (DTypeError): an unknown dtype name, an output dtype a network cannot write.
    with pytest.raises(TypeError, match="unknown dtype 'float8'"):
        tcnn.Network(3, 2, mlp_config(dtype="float8"))
    with pytest.raises(TypeError, match="output_dtype"):
        tcnn.Network(3, 2, mlp_config(), dtype=torch.float64, output_dtype=torch.float16)
    with pytest.raises(TypeError, match="output_dtype"):
        tcnn.Encoding(3, {"otype": "Identity"}, dtype=torch.float16, output_dtype=torch.bfloat16, device=CPU)


def test_unknown_config_key_warns():
    with pytest.warns(UserWarning, match="n_nuerons"):
        tcnn.Network(3, 2, mlp_config(n_nuerons=8), device=CPU)
