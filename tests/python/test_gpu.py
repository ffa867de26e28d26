# The package on CUDA tensors (marker `gpu`): every module and dtype this build runs on the GPU,
# against an fp64 CPU reference with the same parameters (forward and gradients, odd batch sizes),
# streams and devices, CUDA graph capture and replay (inference and a whole training step), and
# training. A case the build cannot run on the GPU is skipped with "not supported", not failed.
import copy
import pickle

import pytest
import torch

import tinycudann as tcnn
from tinycudann import _C
from tnn_test_utils import CPU, EPS, HASHGRID_CONFIG, has_encoding, has_network, mlp_config, rel_l2, smooth_target

pytestmark = pytest.mark.gpu

CUDA = torch.device("cuda")


class Case:
    """One module configuration: kind is network, encoding or nwie; n_layers counts weight matrices."""

    def __init__(self, name, kind, dtype, n_in, n_out=None, net=None, enc=None):
        self.name, self.kind, self.dtype, self.n_in, self.n_out, self.net, self.enc = name, kind, dtype, n_in, n_out, net, enc
        self.n_layers = net["n_hidden_layers"] + 1 if net else 0

    def __repr__(self):
        return self.name

    def build(self, device, dtype=None, net_otype=None, **kwargs):
        dtype = dtype or self.dtype
        net = dict(self.net, otype=net_otype) if net_otype and self.net else self.net
        if self.kind == "network":
            return tcnn.Network(self.n_in, self.n_out, net, dtype=dtype, device=device, **kwargs)
        if self.kind == "encoding":
            return tcnn.Encoding(self.n_in, self.enc, dtype=dtype, device=device, **kwargs)
        return tcnn.NetworkWithInputEncoding(self.n_in, self.n_out, self.enc, net, dtype=dtype, device=device, **kwargs)

    def registered(self):
        ok = self.net is None or has_network(self.net["otype"])
        return ok and (self.enc is None or has_encoding(self.enc["otype"]))


def _cases():
    f32, f16, bf16 = torch.float32, torch.float16, torch.bfloat16
    net = lambda otype: mlp_config(otype=otype, n_neurons=64, n_hidden_layers=2, activation="ReLU")
    cases = []
    for otype, dtype in [("PortableMLP", f32), ("BlasLtMLP", f32), ("BlasLtMLP", f16), ("BlasLtMLP", bf16),
                         ("FullyFusedMLP", f16), ("FullyFusedMLP", bf16)]:
        cases.append(Case(f"{otype}-{str(dtype)[6:]}", "network", dtype, 5, 3, net=net(otype)))
    for dtype in (f32, f16):
        cases.append(Case(f"Identity-{str(dtype)[6:]}", "encoding", dtype, 3, enc={"otype": "Identity", "scale": 0.5}))
        cases.append(Case(f"HashGrid-{str(dtype)[6:]}", "encoding", dtype, 3, enc=HASHGRID_CONFIG))
    cases.append(Case("Identity+PortableMLP-float32", "nwie", f32, 3, 4, net=net("PortableMLP"), enc={"otype": "Identity"}))
    cases.append(Case("HashGrid+FullyFusedMLP-float16", "nwie", f16, 3, 4, net=net("FullyFusedMLP"), enc=HASHGRID_CONFIG))
    cases.append(Case("HashGrid+BlasLtMLP-float32", "nwie", f32, 3, 4, net=net("BlasLtMLP"), enc=HASHGRID_CONFIG))
    return cases


CASES = _cases()


def gpu_module(case, **kw):
    """The case's module on the GPU, or a skip that says why this build cannot run it."""
    if not case.registered():
        pytest.skip(f"{case}: not registered in this build yet")
    try:
        module = case.build(CUDA, **kw)
    except (ValueError, TypeError) as e:  # e.g. a dtype a backend does not offer
        pytest.skip(f"{case}: not supported: {e}")
    if not module.native_tcnn_module.supports_device(torch.cuda.current_device()):
        pytest.skip(f"{case}: not supported on the GPU in this build")
    return module


def reference_module(case, gpu):
    """The same function on the CPU in float64 (networks as PortableMLP, which shares the parameter
    layout of every MLP backend), with the GPU module's parameters."""
    try:
        ref = case.build(CPU, dtype=torch.float64, net_otype="PortableMLP")
    except (ValueError, TypeError) as e:
        pytest.skip(f"{case}: no float64 CPU reference: {e}")
    with torch.no_grad():
        ref.params.copy_(gpu.params.detach().double().cpu())
    return ref


def tolerance(case, dtype, backward=False):
    """Relative L2 tolerance. fp32 error grows with the accumulation over each layer's width (up to
    ~64 eps per layer here); fp16/bf16 accumulate in fp32, so their error is the rounding of each
    layer's input and output (~4 eps per layer). Encodings round their output once. Backward passes
    chain through every layer and reduce over the batch: 4x. Capped at 0.3, far below the ~1 of a
    wrong layout or gradient."""
    per_layer = 64 if dtype == torch.float32 else 4
    c = per_layer * (case.n_layers + 1)
    if backward:
        c *= 4
    return min(0.3, c * EPS[dtype])


def inputs(case, batch, seed=0):
    gen = torch.Generator().manual_seed(seed)
    # Away from 0 and 1: grid cell borders and the hash wrap are tested in C++.
    return 0.05 + 0.9 * torch.rand(batch, case.n_in, generator=gen)


@pytest.mark.parametrize("batch", [1, 100, 257, 5000])
@pytest.mark.parametrize("case", CASES, ids=repr)
def test_forward_matches_cpu_fp64_reference(case, batch):
    gpu = gpu_module(case)
    ref = reference_module(case, gpu)
    x = inputs(case, batch)
    y = gpu(x.to(CUDA))
    assert y.device.type == "cuda" and y.dtype == gpu.dtype and y.shape == (batch, gpu.n_output_dims)
    y_ref = ref(x.double())
    err = rel_l2(y, y_ref)
    assert err <= tolerance(case, gpu.dtype), f"{case} batch {batch}: relative L2 error {err:.3g}"


@pytest.mark.parametrize("case", CASES, ids=repr)
def test_gradients_match_cpu_fp64_reference(case):
    gpu = gpu_module(case)
    ref = reference_module(case, gpu)
    batch = 777
    x = inputs(case, batch)
    w = torch.rand(batch, gpu.n_output_dims, generator=torch.Generator().manual_seed(1))

    xg = x.to(CUDA).detach().clone().requires_grad_(True)
    (gpu(xg).float() * w.to(CUDA)).sum().backward()
    xr = x.detach().double().requires_grad_(True)
    (ref(xr) * w.double()).sum().backward()

    tol = tolerance(case, gpu.dtype, backward=True)
    if gpu.params.numel() > 0:
        assert gpu.params.grad.dtype == torch.float32
        err = rel_l2(gpu.params.grad, ref.params.grad)
        assert err <= tol, f"{case}: dL/dparams relative L2 error {err:.3g} > {tol:.3g}"
    err = rel_l2(xg.grad, xr.grad)
    assert err <= tol, f"{case}: dL/dx relative L2 error {err:.3g} > {tol:.3g}"


@pytest.mark.parametrize("case", CASES, ids=repr)
def test_empty_batch(case):
    gpu = gpu_module(case)
    x = torch.zeros(0, case.n_in, device=CUDA, requires_grad=True)
    y = gpu(x)
    assert y.shape == (0, gpu.n_output_dims) and y.device.type == "cuda"
    y.float().sum().backward()
    if gpu.params.numel() > 0:
        assert torch.count_nonzero(gpu.params.grad) == 0


def first_gpu_case(kinds=("network", "nwie")):
    for case in CASES:
        if case.kind in kinds and case.registered():
            try:
                module = case.build(CUDA)
            except (ValueError, TypeError):
                continue
            if module.native_tcnn_module.supports_device(torch.cuda.current_device()):
                return case
    pytest.skip("no network runs on the GPU in this build yet")


def test_default_device_and_dtype_follow_tcnn():
    case = first_gpu_case()
    module = case.build(None)
    assert module.params.device.type == "cuda"  # tcnn creates its parameters on the GPU
    enc = tcnn.Encoding(3, {"otype": "Identity"})
    assert enc.dtype == torch.float16 and enc.params.device.type == "cuda"


def test_device_mismatch_raises_or_moves_as_tcnn():
    case = first_gpu_case()
    cpu_module = case.build(CPU, net_otype="PortableMLP", dtype=torch.float32)
    with pytest.raises(RuntimeError, match="parameters are on cpu"):
        cpu_module(torch.rand(4, case.n_in, device=CUDA))
    # A CPU input to a CUDA module is copied to the GPU with tcnn's warning (test_drop_in.py).
    gpu = gpu_module(case)
    with pytest.warns(UserWarning, match="input must be a CUDA tensor"):
        gpu(torch.rand(4, case.n_in))


def test_side_stream_gives_the_same_result():
    gpu = gpu_module(first_gpu_case())
    x = torch.rand(3000, gpu.n_input_dims, device=CUDA)
    with torch.no_grad():
        y_default = gpu(x)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            y_side = gpu(x)
        torch.cuda.current_stream().wait_stream(side)
    torch.testing.assert_close(y_side, y_default, rtol=0, atol=0)  # inference is bitwise reproducible


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs")
def test_module_on_second_gpu_while_first_is_current():
    case = first_gpu_case()
    dev1 = torch.device("cuda", 1)
    module = case.build(dev1)
    ref = case.build(CUDA)
    with torch.no_grad():
        ref.params.copy_(module.params.to(CUDA))
    x = torch.rand(500, case.n_in)
    assert torch.cuda.current_device() == 0
    y1 = module(x.to(dev1))
    assert y1.device == dev1
    torch.testing.assert_close(y1.cpu(), ref(x.to(CUDA)).cpu(), rtol=0, atol=0)


def warm_up(fn, times):
    """The warm-up of torch's capture recipe: run the calls a few times on a side stream. Returns that
    stream; capturing on it (torch.cuda.graph(..., stream=...)) or on torch's own capture stream both
    work, since temporaries of a capturing stream are graph memory (docs/python.md)."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(times):
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    return stream


def test_cuda_graph_inference_capture_and_replay():
    gpu = gpu_module(first_gpu_case())
    static_x = torch.rand(4096, gpu.n_input_dims, device=CUDA)
    with torch.no_grad():
        stream = warm_up(lambda: gpu(static_x), 2)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=stream):
            static_y = gpu(static_x)
        for seed in range(3):
            new_x = torch.rand(4096, gpu.n_input_dims, device=CUDA, generator=torch.Generator(CUDA).manual_seed(seed))
            static_x.copy_(new_x)
            graph.replay()
            torch.testing.assert_close(static_y, gpu(new_x), rtol=0, atol=0)


def test_cuda_graph_training_step_capture_and_replay():
    case = first_gpu_case()
    model = gpu_module(case)
    x = torch.rand(2048, case.n_in, device=CUDA)
    target = torch.rand(2048, model.n_output_dims, device=CUDA)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2, capturable=True)

    def step():
        loss = (model(x).float() - target).square().mean()
        opt.zero_grad(set_to_none=False)  # gradients stay in place: the graph reads and writes the same memory
        loss.backward()
        # Detached: a loss that keeps its autograd graph keeps the parameters' AccumulateGrad node of one
        # warm-up stream alive into the next capture on another stream (torch 2.11 warns about it).
        return loss.detach()

    def step_and_update():
        loss = step()
        opt.step()
        return loss

    # One captured forward+backward equals the eager one (up to the summation order of atomics).
    eager_loss = step().item()
    eager_grad = model.params.grad.clone()
    stream = warm_up(step, 2)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        static_loss = step()
    graph.replay()
    torch.cuda.synchronize()
    assert static_loss.item() == eager_loss  # forward is bitwise reproducible
    assert rel_l2(model.params.grad, eager_grad) <= 64 * EPS[model.dtype]

    # A whole training step (forward, backward, Adam) in one graph: replaying it must train exactly
    # like running the same steps eagerly. A twin model (same seed) with its own optimizer runs the
    # warm-up steps and then the steps the graph replays; all kernels are deterministic, so the
    # losses must agree to rounding of torch's own reductions.
    stream = warm_up(step_and_update, 2)
    graph2 = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph2, stream=stream):
        static_loss2 = step_and_update()
    losses = []
    for _ in range(20):
        graph2.replay()
        losses.append(static_loss2.item())

    twin = gpu_module(case)
    twin_opt = torch.optim.Adam(twin.parameters(), lr=1e-2, capturable=True)

    def twin_step():
        loss = (twin(x).float() - target).square().mean()
        twin_opt.zero_grad(set_to_none=False)
        loss.backward()
        twin_opt.step()
        return loss

    twin_eager = [twin_step().item() for _ in range(2 + 20)][2:]
    assert all(torch.isfinite(torch.tensor(losses)))
    assert losses[-1] < losses[0]
    torch.testing.assert_close(torch.tensor(losses), torch.tensor(twin_eager), rtol=1e-5, atol=0)


def test_cuda_graph_capture_without_warm_up():
    # torch.cuda.graph captures on a private stream of its own; nothing ran on it before.
    gpu = gpu_module(first_gpu_case())
    static_x = torch.rand(1000, gpu.n_input_dims, device=CUDA)
    with torch.no_grad():
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            static_y = gpu(static_x)
        for seed in range(2):
            gen = torch.Generator(CUDA).manual_seed(seed)
            static_x.copy_(torch.rand(1000, gpu.n_input_dims, device=CUDA, generator=gen))
            graph.replay()
            torch.testing.assert_close(static_y, gpu(static_x), rtol=0, atol=0)


def test_cuda_graph_whole_network_capture_follows_torch_recipe():
    """torch's documented recipe for whole-network capture (torch.cuda.graph, CUDA Graphs notes), line
    by line with this package's model in place of torch's: warm-up on a side stream, capture on
    torch.cuda.graph's own private stream, replays on new data. The replays must train exactly like the
    same steps run eagerly by a twin with the same initial parameters."""
    case = first_gpu_case()
    model = gpu_module(case)
    N, D_in, D_out = 640, case.n_in, model.n_output_dims
    loss_fn = torch.nn.MSELoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)

    # Placeholders used for capture
    static_input = torch.randn(N, D_in, device='cuda')
    static_target = torch.randn(N, D_out, device='cuda')
    warm_input, warm_target = static_input.clone(), static_target.clone()

    # warmup
    # Uses static_input and static_target here for convenience,
    # but in a real setting, because the warmup includes optimizer.step()
    # you must use a few batches of real data.
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for i in range(3):
            optimizer.zero_grad(set_to_none=True)
            y_pred = model(static_input)
            loss = loss_fn(y_pred.float(), static_target)  # .float(): half networks return float16
            loss.backward()
            optimizer.step()
    torch.cuda.current_stream().wait_stream(s)
    # Not in torch's recipe: the last warm-up loss would keep its autograd graph, and with it the
    # parameters' AccumulateGrad nodes of the warm-up stream, alive into the capture on another stream
    # (torch 2.11 warns that the streams do not match).
    del y_pred, loss

    # capture
    g = torch.cuda.CUDAGraph()
    # Sets grads to None before capture, so backward() will create
    # .grad attributes with allocations from the graph's private pool
    optimizer.zero_grad(set_to_none=True)
    with torch.cuda.graph(g):
        static_y_pred = model(static_input)
        static_loss = loss_fn(static_y_pred.float(), static_target)
        static_loss.backward()
        optimizer.step()

    real_inputs = [torch.rand_like(static_input) for _ in range(10)]
    real_targets = [torch.rand_like(static_target) for _ in range(10)]

    losses = []
    for data, target in zip(real_inputs, real_targets):
        # Fills the graph's input memory with new data to compute on
        static_input.copy_(data)
        static_target.copy_(target)
        # replay() includes forward, backward, and step.
        # You don't even need to call optimizer.zero_grad() between iterations
        # because the captured backward refills static .grad tensors in place.
        g.replay()
        # Params have been updated. static_y_pred, static_loss, and .grad
        # attributes hold values from computing on this iteration's data.
        losses.append(static_loss.item())

    # The capture itself ran nothing: the twin does the three warm-up steps and the ten replayed ones.
    twin = gpu_module(case)
    twin_optimizer = torch.optim.SGD(twin.parameters(), lr=0.1)
    twin_losses = []
    for i, (data, target) in enumerate([(warm_input, warm_target)] * 3 + list(zip(real_inputs, real_targets))):
        twin_optimizer.zero_grad(set_to_none=True)
        twin_loss = loss_fn(twin(data).float(), target)
        twin_loss.backward()
        twin_optimizer.step()
        if i >= 3:
            twin_losses.append(twin_loss.item())
    assert all(torch.isfinite(torch.tensor(losses)))
    # The module's kernels are deterministic; torch's MSE reduction in and out of a graph may round
    # differently: 1e-5 is a few hundred float32 ulps, far below the change of one SGD step.
    torch.testing.assert_close(torch.tensor(losses), torch.tensor(twin_losses), rtol=1e-5, atol=0)
    torch.testing.assert_close(model.params.detach(), twin.params.detach(), rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("case", [c for c in CASES if c.kind != "encoding"], ids=repr)
def test_training_on_cuda_reduces_loss(case):
    model = gpu_module(case)
    n_out = model.n_output_dims
    if case.n_in < 2:
        pytest.skip("needs 2 input dims")
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    gen = torch.Generator(CUDA).manual_seed(0)

    def target(x):
        t = smooth_target(x[:, :2])
        return t.repeat(1, (n_out + 1) // 2)[:, :n_out]

    x_eval = torch.rand(4096, case.n_in, device=CUDA, generator=gen)
    with torch.no_grad():
        initial = (model(x_eval).float() - target(x_eval)).square().mean().item()
    for _ in range(300):
        x = torch.rand(4096, case.n_in, device=CUDA, generator=gen)
        loss = (model(x).float() - target(x)).square().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    with torch.no_grad():
        final = (model(x_eval).float() - target(x_eval)).square().mean().item()
    assert final < initial / 10, (initial, final)


def test_half_network_output_dtype_and_fp32_opt_in():
    case = next((c for c in CASES if c.kind == "network" and c.dtype == torch.float16 and c.registered()), None)
    if case is None:
        pytest.skip("no float16 network registered yet")
    half = gpu_module(case)
    assert half.loss_scale == 128.0
    full = gpu_module(case, output_dtype=torch.float32)
    with torch.no_grad():
        full.params.copy_(half.params)
    x = torch.rand(300, case.n_in, device=CUDA)
    y16 = half(x)
    try:
        y32 = full(x)
    except ValueError as e:
        pytest.skip(f"{case}: fp32 output not supported: {e}")
    assert y16.dtype == torch.float16 and y32.dtype == torch.float32
    # The fp32 output skips only the final rounding to fp16.
    assert rel_l2(y16, y32) <= 2 * EPS[torch.float16]


def test_pickle_and_state_dict_across_devices():
    case = first_gpu_case()
    gpu = gpu_module(case)
    with torch.no_grad():
        gpu.params.add_(0.01)
    clone = pickle.loads(pickle.dumps(gpu))
    assert clone.params.device.type == "cuda"
    x = torch.rand(64, case.n_in, device=CUDA)
    torch.testing.assert_close(clone(x), gpu(x), rtol=0, atol=0)
    deep = copy.deepcopy(gpu)
    torch.testing.assert_close(deep(x), gpu(x), rtol=0, atol=0)
    other = case.build(CUDA)
    other.load_state_dict({k: v.cpu() for k, v in gpu.state_dict().items()})
    torch.testing.assert_close(other(x), gpu(x), rtol=0, atol=0)


@pytest.mark.parametrize("name", ["Identity", "HashGrid"])
def test_second_derivatives_on_gpu_match_cpu(name):
    case = next(c for c in CASES if c.kind == "encoding" and c.enc["otype"] == name and c.dtype == torch.float32)
    gpu = gpu_module(case)
    if not gpu.native_tcnn_module.supports_backward_backward():
        pytest.skip(f"{name}: second derivatives not supported on the GPU in this build")
    ref = reference_module(case, gpu)
    x = inputs(case, 333)
    results = []
    for module, xin in ((gpu, x.to(CUDA)), (ref, x.double())):
        xin = xin.detach().clone().requires_grad_(True)
        (g,) = torch.autograd.grad(module(xin).float().sum(), xin, create_graph=True)
        g.square().sum().backward()
        results.append((xin.grad, module.params.grad))
    tol = tolerance(case, torch.float32, backward=True)
    assert rel_l2(results[0][0], results[1][0]) <= tol
    if gpu.params.numel() > 0:
        assert rel_l2(results[0][1], results[1][1]) <= tol


def test_free_temporary_memory_after_gpu_work():
    gpu = gpu_module(first_gpu_case())
    gpu(torch.rand(10000, gpu.n_input_dims, device=CUDA)).float().sum().backward()
    tcnn.free_temporary_memory()
    torch.cuda.synchronize()
    assert _C.has_gpu_backend()


def test_build_has_code_for_the_device():
    # The build's architectures cover the GPU it is tested on; build_info names the code it runs.
    info = tcnn.build_info()
    assert info["gpu_architectures"], info
    device = info["devices"][torch.cuda.current_device()]
    assert device["code"], device
    if info["gpu_backend"] == "CUDA":
        assert "machine code" in device["code"] or "PTX" in device["code"], device
