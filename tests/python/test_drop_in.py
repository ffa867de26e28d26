# What code written for tcnn 2.0 relies on beyond the modules themselves (issue 44, items 3-5):
# CPU inputs to CUDA modules, tcnn's error classes, its `_C` functions and native-module API
# (fwd / bwd / bwd_bwd_input), whole-model pickles that tcnn wrote, and the calls that used to crash
# or return garbage (wrong `params`, torch.jit.trace without grad, non-finite inputs).
# CUDA variants are marked `gpu` and skip without a device.
import importlib
import io
import json
import os
import pickle
import subprocess
import sys
import warnings

import pytest
import torch

import tinycudann as tcnn
from tinycudann import _C
from tnn_test_utils import CPU, HASHGRID_CONFIG, mlp_config

HERE = os.path.dirname(os.path.abspath(__file__))
CUDA = torch.device("cuda")
TORCH_LOAD_KW = {"weights_only": False} if "weights_only" in torch.load.__code__.co_varnames else {}


def grid(device=CPU, dtype=torch.float32, seed=1337):
    return tcnn.Encoding(3, HASHGRID_CONFIG, dtype=dtype, seed=seed, device=device)


def small_network(device=CPU, dtype=torch.float32):
    return tcnn.Network(3, 2, mlp_config(n_neurons=16, n_hidden_layers=2, activation="Tanh"), dtype=dtype,
                        device=device)


@pytest.fixture
def deterministic():
    """Bitwise reproducible gradients (the GPU grid's ordered reduction instead of atomics), so that
    two routes to the same gradient can be compared exactly."""
    before = _C.deterministic()
    _C.set_deterministic(True)
    yield
    _C.set_deterministic(before)


@pytest.fixture
def input_checks_off():
    """Restores the finite-input check to its state before the test."""
    before = tcnn.input_checks()
    yield
    tcnn.set_input_checks(before)


# ---------------------------------------------------------------------------------------------------
# Item 3: a CPU input to a CUDA module is moved to the parameters' device with tcnn's warning, once.

@pytest.mark.gpu
def test_cpu_input_to_cuda_module_warns_once_and_runs_there():
    enc = grid(CUDA)
    x = torch.rand(50, 3)
    expected = enc(x.to(CUDA))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("default")  # Python's default: once per message and place
        y1 = enc(x)
        y2 = enc(x)
    ours = [str(w.message) for w in caught if "CUDA tensor" in str(w.message)]
    assert len(ours) == 1 and ours[0].startswith(
        "input must be a CUDA tensor, but isn't. This indicates suboptimal performance.")  # tcnn's words
    assert y1.device == enc.params.device and y2.device == enc.params.device
    torch.testing.assert_close(y1, expected, rtol=0, atol=0)
    # Gradients reach the CPU input and the parameters, as for a CUDA input.
    xg = x.clone().requires_grad_(True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        enc(xg).float().sum().backward()
    assert xg.grad.device == CPU and xg.grad.shape == x.shape and enc.params.grad is not None


@pytest.mark.gpu
def test_cuda_input_to_cpu_module_still_raises():
    enc = grid(CPU)
    with pytest.raises(RuntimeError, match="parameters are on cpu"):
        enc(torch.rand(4, 3, device=CUDA))


def test_cpu_input_to_cpu_module_does_not_warn():
    enc = grid(CPU)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        enc(torch.rand(4, 3))


# ---------------------------------------------------------------------------------------------------
# Item 4a: errors are RuntimeErrors as in tcnn, and keep being ValueError / TypeError as before.

def test_error_classes_are_tcnn_runtime_errors_and_ours():
    assert issubclass(tcnn.TcnnError, RuntimeError)
    assert issubclass(tcnn.TcnnValueError, tcnn.TcnnError) and issubclass(tcnn.TcnnValueError, ValueError)
    assert issubclass(tcnn.TcnnTypeError, tcnn.TcnnError)
    assert issubclass(tcnn.TcnnTypeError, TypeError) and issubclass(tcnn.TcnnTypeError, ValueError)
    assert tcnn.TcnnValueError.__module__ == "tinycudann" and tcnn.TcnnValueError is _C.TcnnValueError


@pytest.mark.parametrize("make", [
    lambda: tcnn.Network(3, 2, {"otype": "NoSuchMLP"}, device=CPU),
    lambda: tcnn.Encoding(3, {"otype": "NoSuchEncoding"}, device=CPU),
    lambda: tcnn.Network(3, 2, mlp_config(n_neurons=-4), device=CPU),
    lambda: tcnn.Network(0, 2, mlp_config(), device=CPU),
    lambda: small_network()(torch.rand(4, 5)),
], ids=["network otype", "encoding otype", "bad key", "n_input_dims", "input shape"])
def test_configuration_and_shape_errors_are_runtime_errors(make):
    with pytest.raises(RuntimeError) as info:
        make()
    assert isinstance(info.value, ValueError) and isinstance(info.value, tcnn.TcnnValueError)


def test_dtype_errors_are_what_tcnn_and_we_raised():
    # tcnn's Encoding raises ValueError for a dtype it lacks; we raised TypeError: both hold, and
    # RuntimeError as for tcnn's C++ checks.
    for make in (lambda: tcnn.Encoding(3, {"otype": "Identity"}, dtype=torch.int32, device=CPU),
                 lambda: tcnn.Network(3, 2, mlp_config(), dtype=torch.float16, device=CPU)):
        with pytest.raises(ValueError) as info:
            make()
        assert isinstance(info.value, TypeError) and isinstance(info.value, RuntimeError)


def test_errors_pickle_by_name():
    e = pickle.loads(pickle.dumps(tcnn.TcnnValueError("tinycudann: a message")))
    assert type(e) is tcnn.TcnnValueError and str(e) == "tinycudann: a message"


# ---------------------------------------------------------------------------------------------------
# Item 4b: tcnn's `_C` items.

def test_c_precision_has_tcnn_values_and_exported_names():
    assert int(_C.Precision.Fp32) == 0 and int(_C.Precision.Fp16) == 1  # tcnn's values (pickles hold them)
    assert _C.Fp32 is _C.Precision.Fp32 and _C.Fp16 is _C.Precision.Fp16  # tcnn exports the values
    assert pickle.loads(pickle.dumps(_C.Precision.Fp16)) == _C.Precision.Fp16
    assert set(_C.LogSeverity.__members__) == {"Info", "Debug", "Warning", "Error", "Success"}
    assert _C.Warning is _C.LogSeverity.Warning


def test_c_small_functions():
    assert _C.batch_size_granularity() == 1  # any batch size: nothing is padded
    assert _C.default_loss_scale(_C.Precision.Fp16) == 128.0
    assert _C.default_loss_scale(_C.Precision.Fp32) == 1.0
    assert _C.has_networks() is True
    gpu = _C.has_gpu_backend() and _C.gpu_device_count() > 0
    assert _C.preferred_precision() == (_C.Precision.Fp16 if gpu else _C.Precision.Fp32)
    assert _C.supports_jit_fusion() is False and _C.supports_jit_fusion(0) is False
    _C.rtc_set_cache_dir("/nonexistent")  # accepted; nothing is compiled at run time
    _C.rtc_set_include_dir("")
    tcnn.modules.rtc_set_cache_dir(None)
    _C.free_temporary_memory()


def test_module_level_helpers_of_tcnn():
    t = torch.ones(3, dtype=torch.float16)
    null = tcnn.modules.null_tensor_like(t)
    assert null.dim() == 0 and null.dtype == torch.float16
    assert tcnn.modules.null_tensor_to_none(null) is None and tcnn.modules.null_tensor_to_none(t) is t
    assert tcnn.modules._torch_precision(_C.Precision.Fp16) == torch.float16
    assert tcnn.modules._torch_precision(_C.Precision.Fp32) == torch.float32


def test_set_log_callback_receives_library_warnings_and_none_restores_warnings():
    received = []
    _C.set_log_callback(lambda severity, message: received.append((severity, message)))
    try:
        tcnn.Network(3, 2, mlp_config(n_nuerons=8), device=CPU)  # misspelt key: the library warns
    finally:
        _C.set_log_callback(None)
    assert len(received) == 1 and received[0][0] == _C.LogSeverity.Warning and "n_nuerons" in received[0][1]
    with pytest.warns(UserWarning, match="n_nuerons"):
        tcnn.Network(3, 2, mlp_config(n_nuerons=8), device=CPU)
    with pytest.raises(TypeError, match="callable"):
        _C.set_log_callback(42)


def test_create_encoding_takes_tcnn_precision():
    a = _C.create_encoding(3, HASHGRID_CONFIG, _C.Precision.Fp16)
    b = _C.create_encoding(3, HASHGRID_CONFIG, "float16")
    assert a.param_precision() == b.param_precision() == _C.Precision.Fp16
    assert a.hyperparams() == b.hyperparams()


# ---------------------------------------------------------------------------------------------------
# Item 4c: native_tcnn_module has tcnn's API; results equal those of the module's autograd.

def native_api_cases():
    return [("grid", lambda d: grid(d)), ("grid-fp64", lambda d: grid(d, torch.float64)),
            ("network", lambda d: small_network(d))]


def test_native_module_queries():
    enc = grid(dtype=torch.float16)
    native = enc.native_tcnn_module
    assert isinstance(native, tcnn.NativeModule)
    assert native.n_input_dims() == 3 and native.n_output_dims() == enc.n_output_dims
    assert native.n_params() == enc.params.numel()
    assert native.param_precision() == _C.Precision.Fp16 and native.output_precision() == _C.Precision.Fp16
    assert native.name() == "HashGrid" and native.hyperparams()["otype"] == "Grid"  # tcnn's names too
    assert native.jit_fusion is False
    assert enc.precision == _C.Precision.Fp16  # tcnn's Encoding attribute
    net = small_network()
    assert net.native_tcnn_module.param_precision() == _C.Precision.Fp32


def test_native_initial_params_takes_one_seed_and_returns_a_tensor():
    for seed in (1337, 5):
        enc = grid(seed=seed)
        p = enc.native_tcnn_module.initial_params(seed)
        assert isinstance(p, torch.Tensor) and p.dtype == torch.float32 and p.shape == (enc.params.numel(),)
        torch.testing.assert_close(p.cpu(), enc.params.detach(), rtol=0, atol=0)


def check_native_fwd_bwd(module, device):
    native = module.native_tcnn_module
    dtype = module.dtype
    in_dtype = torch.float64 if dtype == torch.float64 else torch.float32
    x = (0.1 + 0.8 * torch.rand(37, 3, dtype=in_dtype, device=device))
    params = module.params.detach().to(dtype).clone()
    dL_dy = torch.rand(37, module.n_output_dims, device=device).to(dtype)

    # Inference: no tensor requires grad; the context is empty and bwd refuses it.
    ctx, y = native.fwd(x, params)
    assert y.shape == (37, module.n_output_dims) and y.dtype == dtype and y.device == x.device
    assert not ctx.valid
    with torch.no_grad():
        torch.testing.assert_close(y, module(x), rtol=0, atol=0)
    with pytest.raises(RuntimeError, match="inference"):
        native.bwd(ctx, x, params, y, dL_dy)

    # Training pass: gradients as the module's autograd computes them with loss scale 1.
    xg, pg = x.clone().requires_grad_(True), params.clone().requires_grad_(True)
    ctx, y = native.fwd(xg, pg)
    assert ctx.valid and y.grad_fn is None
    dL_dx, dL_dp = native.bwd(ctx, xg, pg, y, dL_dy)
    assert dL_dp.dtype == dtype and dL_dp.shape == params.shape and dL_dx.dtype == in_dtype
    xr = x.clone().requires_grad_(True)
    with torch.no_grad():
        module.params.copy_(params)
    module.params.grad = None
    yr = module(xr)
    yr.backward(dL_dy.to(yr.dtype))
    if module.loss_scale == 1.0:
        torch.testing.assert_close(dL_dx, xr.grad, rtol=0, atol=0)
        torch.testing.assert_close(dL_dp.to(module.params.dtype), module.params.grad, rtol=0, atol=0)
    # Only what requires grad is computed.
    ctx, y = native.fwd(x, pg)
    dL_dx, dL_dp = native.bwd(ctx, x, pg, y, dL_dy)
    assert dL_dx is None and dL_dp is not None
    return native, x, params, dL_dy


@pytest.mark.parametrize("name,make", native_api_cases(), ids=[c[0] for c in native_api_cases()])
def test_native_fwd_bwd_match_the_module(name, make):
    check_native_fwd_bwd(make(CPU), CPU)


@pytest.mark.gpu
@pytest.mark.parametrize("name,make", native_api_cases()[::2], ids=[c[0] for c in native_api_cases()[::2]])
def test_native_fwd_bwd_match_the_module_cuda(name, make, deterministic):
    check_native_fwd_bwd(make(CUDA), CUDA)


def check_native_bwd_bwd_input(enc, device):
    native = enc.native_tcnn_module
    if not native.supports_backward_backward():
        pytest.skip(f"{native.name()} has no second derivatives")
    dtype = enc.dtype
    x = (0.1 + 0.8 * torch.rand(19, 3, dtype=dtype, device=device)).requires_grad_(True)
    params = (enc.params.detach() + 0.1 * torch.rand_like(enc.params)).to(dtype).requires_grad_(True)
    dL_dy = torch.rand(19, enc.n_output_dims, dtype=dtype, device=device).requires_grad_(True)
    probe = torch.rand(19, 3, dtype=dtype, device=device)
    ctx, y = native.fwd(x, params)
    dL_ddLdy, dL_dp, dL_dx = native.bwd_bwd_input(ctx, x, params, probe, dL_dy)
    # Reference: torch's double backward through the module's autograd.
    xr, pr, vr = x.detach().clone().requires_grad_(True), params.detach().clone(), dL_dy.detach().clone()
    with torch.no_grad():
        enc.params.copy_(pr)
    vr.requires_grad_(True)
    (g,) = torch.autograd.grad(enc(xr), xr, grad_outputs=vr, create_graph=True)
    ref = torch.autograd.grad((g * probe).sum(), (vr, enc.params, xr))
    for got, want, what in zip((dL_ddLdy, dL_dp, dL_dx), ref, ("dL_ddLdoutput", "dL_dparams", "dL_dinput")):
        assert got is not None, what
        torch.testing.assert_close(got, want.to(got.dtype), rtol=0, atol=0, msg=what)
    # Outputs for tensors that do not require grad are None.
    assert native.bwd_bwd_input(ctx, x, params.detach(), probe, dL_dy.detach())[:2] == (None, None)


def test_native_bwd_bwd_input_matches_double_backward():
    check_native_bwd_bwd_input(grid(dtype=torch.float64), CPU)


@pytest.mark.gpu
def test_native_bwd_bwd_input_matches_double_backward_cuda(deterministic):
    check_native_bwd_bwd_input(grid(CUDA, torch.float32), CUDA)


@pytest.mark.parametrize("bad,match,kind", [
    (lambda x, p: (x.double(), p), "input must be torch.float32", TypeError),
    (lambda x, p: (x[:, :2].contiguous(), p), r"input must have shape \[batch, 3\]", ValueError),
    (lambda x, p: (x.t().contiguous().t(), p), "input must be contiguous", ValueError),
    (lambda x, p: (x, p[:10]), r"params must have shape \[\d+\]", ValueError),
    (lambda x, p: (x, p.half()), "params must be torch.float32", TypeError),
    (lambda x, p: (x, p.tolist()), "params must be a torch.Tensor", ValueError),
], ids=["input dtype", "input width", "strided input", "params length", "params dtype", "params type"])
def test_native_fwd_checks_like_tcnn(bad, match, kind):
    native = grid().native_tcnn_module
    x, p = torch.rand(8, 3), torch.zeros(native.n_params())
    with pytest.raises(RuntimeError, match=match) as info:
        native.fwd(*bad(x, p))
    assert isinstance(info.value, kind)


# ---------------------------------------------------------------------------------------------------
# Item 4d: whole-model pickles written by tcnn 2.0 load, with the same function.

def tcnn_pickle_cases():
    net = mlp_config(n_neurons=16, n_hidden_layers=2, activation="Tanh")
    return {
        "Encoding-fp32": dict(kind="Encoding", dtype=torch.float32, n_in=3, enc=HASHGRID_CONFIG),
        "Encoding-fp16": dict(kind="Encoding", dtype=torch.float16, n_in=3, enc=HASHGRID_CONFIG),
        "Network-PortableMLP": dict(kind="Network", dtype=torch.float32, n_in=3, n_out=2, net=net),
        "NetworkWithInputEncoding-PortableMLP": dict(kind="NetworkWithInputEncoding", dtype=torch.float32, n_in=3,
                                                     n_out=2, enc=HASHGRID_CONFIG, net=net),
        # tcnn's networks are float16 (its build fixes the precision); the outputs are compared where
        # this build runs FullyFusedMLP on the pickle's device.
        "NetworkWithInputEncoding-FullyFusedMLP": dict(kind="NetworkWithInputEncoding", dtype=torch.float16, n_in=3,
                                                       n_out=2, enc=HASHGRID_CONFIG,
                                                       net=mlp_config(otype="FullyFusedMLP", n_neurons=64)),
    }


def build_like_tcnn(case, device):
    """Our module with the configuration of the case, built through our own constructor."""
    if case["kind"] == "Encoding":
        return tcnn.Encoding(case["n_in"], case["enc"], dtype=case["dtype"], device=device)
    if case["kind"] == "Network":
        return tcnn.Network(case["n_in"], case["n_out"], case["net"], dtype=case["dtype"], device=device)
    return tcnn.NetworkWithInputEncoding(case["n_in"], case["n_out"], case["enc"], case["net"], dtype=case["dtype"],
                                         device=device)


def tcnn_attrs(case):
    """The configuration attributes tcnn's constructor sets, in its order."""
    if case["kind"] == "Encoding":
        return {"n_input_dims": case["n_in"], "encoding_config": case["enc"]}
    if case["kind"] == "Network":
        return {"n_input_dims": case["n_in"], "n_output_dims": case["n_out"], "network_config": case["net"]}
    return {"n_input_dims": case["n_in"], "n_output_dims": case["n_out"], "encoding_config": case["enc"],
            "network_config": case["net"]}


def write_tcnn_pickles(directory, requests, device):
    """requests: [(case name, format)]. Writes them all in one process; returns
    {(name, format): (pickle bytes, our module with the pickled parameters)}."""
    specs, modules = [], {}
    for name, fmt in requests:
        case = tcnn_pickle_cases()[name]
        ours = build_like_tcnn(case, device)
        with torch.no_grad():
            ours.params.add_(0.01 * torch.randn_like(ours.params))  # parameters no seed gives
        params_path = directory / f"{name}-{fmt}.params.pt"
        torch.save(ours.params.detach().float().cpu().clone(), params_path)
        specs.append({
            "kind": case["kind"], "attrs": tcnn_attrs(case), "dtype": str(case["dtype"]).replace("torch.", ""),
            "precision": {torch.float32: 0, torch.float16: 1}[case["dtype"]] if case["kind"] == "Encoding" else None,
            "n_output_dims": ours.n_output_dims, "seed": 1337,
            "loss_scale": 128.0 if case["dtype"] == torch.float16 else 1.0, "params": str(params_path),
            "device": str(device), "cc": 86, "format": fmt, "out": str(directory / f"{name}.{fmt}"),
        })
        modules[name, fmt] = ours
    spec_path = directory / "specs.json"
    spec_path.write_text(json.dumps(specs))
    subprocess.run([sys.executable, os.path.join(HERE, "tcnn_pickle_writer.py"), str(spec_path)], check=True,
                   cwd=str(directory))
    return {key: ((directory / f"{key[0]}.{key[1]}").read_bytes(), ours) for key, ours in modules.items()}


@pytest.fixture(scope="module")
def cpu_tcnn_pickles(tmp_path_factory):
    requests = [(name, fmt) for name in tcnn_pickle_cases() for fmt in ("torch", "pickle")]
    return write_tcnn_pickles(tmp_path_factory.mktemp("tcnn_pickles"), requests, CPU)


def check_tcnn_pickle(name, fmt, data, ours, map_location=None):
    case = tcnn_pickle_cases()[name]
    if fmt == "pickle":  # what makes these pickles tcnn's: its module paths, no attributes of ours
        assert b"tinycudann.modules" in data and b"requested_dtype" not in data
        assert (b"tinycudann_bindings._86_C" in data) == (case["kind"] == "Encoding")
    if fmt == "torch":
        loaded = torch.load(io.BytesIO(data), **TORCH_LOAD_KW, **({"map_location": map_location} if map_location else {}))
    else:
        loaded = pickle.loads(data)
    assert type(loaded) is type(ours)
    assert loaded.dtype == case["dtype"] and loaded.n_output_dims == ours.n_output_dims
    assert loaded.native_tcnn_module.hyperparams() == ours.native_tcnn_module.hyperparams()
    if case["kind"] == "Encoding":
        assert loaded.precision == ours.precision and isinstance(loaded.precision, _C.Precision)
    assert loaded.params.device.type == (map_location or ours.params.device.type)
    torch.testing.assert_close(loaded.params.cpu(), ours.params.detach().cpu(), rtol=0, atol=0)
    # Same function as our module with those parameters.
    run_on = loaded.params.device
    ours = ours.to(run_on)
    x = torch.rand(33, case["n_in"], device=run_on)
    with torch.no_grad():
        try:
            expected = ours(x)
        except tcnn.TcnnValueError as e:
            if "GPU only" not in str(e):
                raise
            pytest.skip(f"loads; the comparison of outputs needs a CPU backend of the network: {e}")
        torch.testing.assert_close(loaded(x), expected, rtol=0, atol=0)
    # It trains, and our pickle of it loads again.
    loaded(x).float().sum().backward()
    assert loaded.params.grad is not None
    again = pickle.loads(pickle.dumps(loaded))
    with torch.no_grad():
        torch.testing.assert_close(again(x), expected, rtol=0, atol=0)


@pytest.mark.parametrize("fmt", ["torch", "pickle"])
@pytest.mark.parametrize("name", list(tcnn_pickle_cases()))
def test_tcnn_pickle_loads(cpu_tcnn_pickles, name, fmt):
    check_tcnn_pickle(name, fmt, *cpu_tcnn_pickles[name, fmt])


@pytest.mark.gpu
def test_tcnn_pickles_of_cuda_modules_load_on_cuda_and_on_cpu(tmp_path):
    names = ["Encoding-fp16", "NetworkWithInputEncoding-FullyFusedMLP"]
    pickles = write_tcnn_pickles(tmp_path, [(name, "torch") for name in names], CUDA)
    for name in names:
        check_tcnn_pickle(name, "torch", *pickles[name, "torch"])
    # tcnn's parameters are CUDA tensors; map_location="cpu" loads them into a CPU module.
    data, ours = pickles["Encoding-fp16", "torch"]
    check_tcnn_pickle("Encoding-fp16", "torch", data, ours.cpu(), map_location="cpu")


def test_tcnn_bindings_names_resolve_to_our_precision():
    for cc in (75, 86, 90, 120):
        ext = importlib.import_module(f"tinycudann_bindings._{cc}_C")
        assert ext.Precision is _C.Precision
    with pytest.raises(ImportError):
        importlib.import_module("tinycudann_bindings.something_else")


def test_our_older_pickles_with_a_dtype_name_precision_load():
    enc = grid(dtype=torch.float16)
    state = enc.__getstate__()
    state["precision"] = "float16"  # what this package stored before it used _C.Precision
    copy = tcnn.Encoding.__new__(tcnn.Encoding)
    copy.__setstate__(state)
    assert copy.precision == _C.Precision.Fp16 and copy.dtype == torch.float16
    x = torch.rand(9, 3)
    torch.testing.assert_close(copy(x), enc(x), rtol=0, atol=0)


# ---------------------------------------------------------------------------------------------------
# Item 5a: params of the wrong length, shape or dtype raise before reaching C++, on every call.

def replace_params(module, tensor):
    module.params.data = tensor


@pytest.mark.parametrize("bad,match,kind", [
    (lambda p: torch.zeros(10, dtype=p.dtype, device=p.device), r"must have shape \[\d+\], got \[10\]", ValueError),
    (lambda p: torch.zeros(p.numel() + 1, dtype=p.dtype, device=p.device), r"must have shape", ValueError),
    (lambda p: p.reshape(2, -1).clone(), r"must have shape \[\d+\], got \[2, ", ValueError),
    # torch refuses integer data for a parameter that requires grad, but takes complex data.
    (lambda p: torch.zeros(p.numel(), dtype=torch.complex64, device=p.device), "floating-point", TypeError),
], ids=["short", "long", "2-D", "complex"])
@pytest.mark.parametrize("make", [lambda d: grid(d), lambda d: small_network(d)], ids=["grid", "network"])
def test_wrong_params_raise_on_every_call(make, bad, match, kind):
    module = make(CPU)
    replace_params(module, bad(module.params.detach()))
    for grad in (True, False):
        with torch.set_grad_enabled(grad), pytest.raises(RuntimeError, match=match) as info:
            module(torch.rand(5, 3))
        assert isinstance(info.value, kind)


@pytest.mark.gpu
def test_wrong_params_raise_cuda():
    module = grid(CUDA)
    replace_params(module, torch.zeros(10, device=CUDA))
    with pytest.raises(ValueError, match=r"got \[10\]"):
        module(torch.rand(5, 3, device=CUDA))
    module = grid(CUDA)
    replace_params(module, module.params.detach().cpu())  # parameters on the CPU, input on CUDA
    with pytest.raises(RuntimeError, match="parameters are on cpu"):
        module(torch.rand(5, 3, device=CUDA))


def test_params_of_another_float_dtype_still_work():
    # tcnn casts params to the parameter precision on every call; so do we.
    module = small_network()
    x = torch.rand(5, 3)
    ref = module(x)
    replace_params(module, module.params.detach().double())
    torch.testing.assert_close(module(x), ref, rtol=0, atol=0)


# ---------------------------------------------------------------------------------------------------
# Item 5b: torch.jit.trace records the module call, with and without grad.

def check_trace(module, device):
    x = torch.rand(16, 3, device=device)
    with torch.no_grad(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        traced = torch.jit.trace(module, x)
    # Nothing says that the trace might not generalise (the forward's checks compare constants).
    assert not [str(w.message) for w in caught if issubclass(w.category, torch.jit.TracerWarning)]
    x2 = torch.rand(41, 3, device=device)  # other values and another batch size
    with torch.no_grad():
        torch.testing.assert_close(traced(x2), module(x2), rtol=0, atol=0)
    # The trace replays the autograd Function, so gradients flow when run with grad.
    xg = x2.clone().requires_grad_(True)
    traced(xg).float().sum().backward()
    xr = x2.clone().requires_grad_(True)
    grad_traced = module.params.grad.clone()
    module.params.grad = None
    module(xr).float().sum().backward()
    torch.testing.assert_close(xg.grad, xr.grad, rtol=0, atol=0)
    torch.testing.assert_close(grad_traced, module.params.grad, rtol=0, atol=0)


@pytest.mark.parametrize("make", [lambda d: grid(d), lambda d: small_network(d)], ids=["grid", "network"])
def test_jit_trace_without_grad_records_the_computation(make):
    check_trace(make(CPU), CPU)


@pytest.mark.gpu
def test_jit_trace_without_grad_records_the_computation_cuda(deterministic):
    check_trace(grid(CUDA), CUDA)


# ---------------------------------------------------------------------------------------------------
# Item 5c: non-finite inputs. Without the check (the default, as tcnn) a NaN coordinate poisons the
# gradients of the 2^d * F grid entries around cell 0 of every level; with it, the call raises.

def nan_input(device, row=3):
    x = torch.rand(8, 3, device=device)
    x[row, 1] = float("nan")
    return x


def test_nan_input_poisons_grid_gradients_without_the_check(input_checks_off):
    tcnn.set_input_checks(False)
    enc = grid()
    y = enc(nan_input(CPU))
    assert torch.isnan(y).any(dim=1).nonzero().flatten().tolist() == [3]
    y.sum().backward()
    levels, features = HASHGRID_CONFIG["n_levels"], HASHGRID_CONFIG["n_features_per_level"]
    assert int(torch.isnan(enc.params.grad).sum()) == 2**3 * features * levels  # the number docs/python.md gives


def check_input_checks(module, device):
    tcnn.set_input_checks(True)
    assert tcnn.input_checks() is True
    with pytest.raises(ValueError, match=r"input row 3 is not finite: \[.*nan.*\] \(1 such rows of 8\)") as info:
        module(nan_input(device))
    assert isinstance(info.value, RuntimeError)
    x = torch.rand(8, 3, device=device)
    x[5, 0] = float("inf")
    x[6, 2] = -float("inf")
    with pytest.raises(ValueError, match=r"input row 5 is not finite.*\(2 such rows of 8\)"):
        module(x)
    with pytest.raises(ValueError, match="input row 3"):
        module.native_tcnn_module.fwd(nan_input(device), module.params.detach().to(module.dtype))
    module(torch.rand(8, 3, device=device))  # finite inputs pass
    tcnn.set_input_checks(False)
    module(nan_input(device))  # off again: computes with the NaN


def test_input_checks_raise_naming_the_first_bad_row(input_checks_off):
    check_input_checks(grid(), CPU)


@pytest.mark.gpu
def test_input_checks_raise_naming_the_first_bad_row_cuda(input_checks_off):
    check_input_checks(grid(CUDA), CUDA)


@pytest.mark.parametrize("value,expected", [("1", True), ("0", False)])
def test_input_checks_env_variable(value, expected):
    env = dict(os.environ, TNN_CHECK_INPUTS=value)
    out = subprocess.run([sys.executable, "-c", "import tinycudann; print(tinycudann.input_checks())"], env=env,
                         check=True, capture_output=True, text=True).stdout
    assert out.strip() == str(expected)
