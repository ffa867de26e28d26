# torch.nn.Modules over tiny-rdna4-nn's C++ modules: one flat `params` parameter, autograd through
# torch.autograd.Function (tcnn's loss scaling, several forwards before one backward, double
# backward where the C++ module has it). Tensors reach C++ as addresses plus the current stream.
import contextlib
import gc
import numbers
import warnings

import torch
from torch.autograd.function import once_differentiable

from . import _C

DEFAULT_SEED = 1337

_DTYPE_BY_NAME = {
    "float32": torch.float32,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "float64": torch.float64,
}
_NAME_BY_DTYPE = {v: k for k, v in _DTYPE_BY_NAME.items()}


def free_temporary_memory():
    """Returns cached temporary GPU memory of tiny-rdna4-nn to the driver (tcnn's function)."""
    # Contexts of finished graphs may still hold temporaries until Python collects them.
    gc.collect()
    _C.free_temporary_memory()


def supports_jit_fusion():
    """tcnn's runtime-compiled kernel fusion does not exist here; modules always run unfused."""
    return False


def _dtype_name(dtype, what):
    if dtype not in _NAME_BY_DTYPE:
        raise TypeError(
            f"tinycudann: {what} must be one of torch.float32, torch.float16, torch.bfloat16, torch.float64, "
            f"got {dtype!r}"
        )
    return _NAME_BY_DTYPE[dtype]


def _check_dims(value, what):
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"tinycudann: {what} must be an int, got {type(value).__name__}")
    if value < 1:
        raise ValueError(f"tinycudann: {what} must be at least 1, got {value}")
    return int(value)


def _check_config(config, what):
    if not isinstance(config, dict):
        raise TypeError(f"tinycudann: {what} must be a dict (a tcnn JSON config), got {type(config).__name__}")
    return config


def _default_device():
    # tcnn creates its parameters on the current CUDA device; we do too when this build can use it.
    if _C.has_gpu_backend() and torch.cuda.is_available():
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def _where(t):
    """(device index, native stream handle) for the C++ call; -1 and 0 for the CPU."""
    if t.device.type == "cpu":
        return -1, 0
    if t.device.type == "cuda":  # also ROCm builds of torch, whose streams are hipStream_t
        return t.device.index, torch.cuda.current_stream(t.device).cuda_stream
    raise RuntimeError(f"tinycudann: tensors on {t.device} are not supported; use cpu or cuda tensors")


def _device_guard(t):
    # GPU kernels launch on the current device, which must be the one that owns the stream.
    if t.device.type == "cuda" and t.device.index != torch.cuda.current_device():
        return torch.cuda.device(t.device)
    return contextlib.nullcontext()


def _address(t):
    return 0 if t is None else t.data_ptr()


class _Native:
    """A C++ module and the facts about it that every call needs, looked up once."""

    def __init__(self, module):
        self.module = module
        self.n_input_dims = module.n_input_dims()
        self.n_output_dims = module.n_output_dims()
        self.n_params = module.n_params()
        self.param_dtype = _DTYPE_BY_NAME[module.param_dtype()]
        self.output_dtype = _DTYPE_BY_NAME[module.output_dtype()]
        self.input_dtype = _DTYPE_BY_NAME[module.input_dtype()]
        self.input_dtype_name = module.input_dtype()
        self.describe = module.describe()

    def params_for_call(self, params):
        return params.to(self.param_dtype).contiguous()

    def empty_output(self, x):
        return torch.empty((x.shape[0], self.n_output_dims), dtype=self.output_dtype, device=x.device)

    def empty_gradients(self, x, need_input, need_params):
        """(dL_dx, dL_dparams) buffers for the C++ call; None where not needed."""
        dL_dinput = torch.empty(x.shape, dtype=x.dtype, device=x.device) if need_input else None
        dL_dparams = torch.empty(self.n_params, dtype=self.param_dtype, device=x.device) if need_params else None
        return dL_dinput, dL_dparams


# Loss scaling as tcnn: fp16 gradients are computed for 128 * dL_dy so that small values stay normal
# numbers, then unscaled -- the parameter gradient in fp32, after leaving fp16.
def _scaled_output_gradient(native, dL_doutput, scale):
    scaled = dL_doutput.to(native.output_dtype)
    if scale != 1.0:
        scaled = scaled * scale
    return scaled.contiguous()


def _unscaled_gradients(dL_dinput, dL_dparams, params, scale):
    if dL_dinput is not None and scale != 1.0:
        dL_dinput.div_(scale)
    if dL_dparams is not None:
        dL_dparams = dL_dparams.to(params.dtype)
        if scale != 1.0:
            dL_dparams.div_(scale)
    return dL_dinput, dL_dparams


def _inference(native, x, params):
    output = native.empty_output(x)
    params_native = native.params_for_call(params.detach())
    device, stream = _where(x)
    native.module.inference(
        device, stream, x.shape[0], x.data_ptr(), native.input_dtype_name, output.data_ptr(), params_native.data_ptr()
    )
    return output


class _ModuleFunction(torch.autograd.Function):
    """y = module(x, params). The C++ context of each forward lives in this node until it is freed."""

    @staticmethod
    def forward(ctx, native, loss_scale, x, params):
        ctx.set_materialize_grads(False)
        params_native = native.params_for_call(params)
        output = native.empty_output(x)
        device, stream = _where(x)
        ctx.native_ctx = native.module.forward(
            device, stream, x.shape[0], x.data_ptr(), native.input_dtype_name, output.data_ptr(),
            params_native.data_ptr(), ctx.needs_input_grad[2],
        )
        ctx.native = native
        ctx.loss_scale = loss_scale
        # The copy in the parameter dtype that this forward used (params itself for fp32 modules).
        ctx.params_native = params_native
        ctx.save_for_backward(x, params, output)
        return output

    @staticmethod
    def backward(ctx, dL_doutput):
        if dL_doutput is None:
            return None, None, None, None
        x, params, output = ctx.saved_tensors
        need_input, need_params = ctx.needs_input_grad[2], ctx.needs_input_grad[3]
        if not (need_input or need_params):
            return None, None, None, None
        # A Function of its own, so that create_graph=True records how the gradients depend on
        # (dL_doutput, x, params): that is what double backward differentiates.
        dL_dinput, dL_dparams = _BackwardFunction.apply(ctx, dL_doutput, x, params, output)
        return None, None, dL_dinput if need_input else None, dL_dparams if need_params else None


class _BackwardFunction(torch.autograd.Function):
    """(dL_dx, dL_dparams) = module.backward(x, params, dL_dy), differentiable once more in x,
    params and dL_dy through the C++ backward_backward_input."""

    @staticmethod
    def forward(ctx, fwd, dL_doutput, x, params, output):
        ctx.set_materialize_grads(False)
        native, scale = fwd.native, fwd.loss_scale
        scaled = _scaled_output_gradient(native, dL_doutput, scale)
        dL_dinput, dL_dparams = native.empty_gradients(x, fwd.needs_input_grad[2], fwd.needs_input_grad[3])
        device, stream = _where(x)
        native.module.backward(
            fwd.native_ctx, device, stream, x.shape[0], x.data_ptr(), native.input_dtype_name, output.data_ptr(),
            scaled.data_ptr(), _address(dL_dinput), _address(dL_dparams), fwd.params_native.data_ptr(), False,
        )
        dL_dinput, dL_dparams = _unscaled_gradients(dL_dinput, dL_dparams, params, scale)
        ctx.fwd = fwd
        ctx.save_for_backward(x, params, dL_doutput)
        return dL_dinput, dL_dparams

    @staticmethod
    @once_differentiable
    def backward(ctx, dL_ddLdinput, dL_ddLdparams):
        if dL_ddLdparams is not None and dL_ddLdparams.numel() > 0:
            raise ValueError(
                f"tinycudann: {ctx.fwd.native.describe}: second derivatives through the parameter gradient "
                "are not supported (only through the input gradient, e.g. for an eikonal loss)"
            )
        if dL_ddLdinput is None:
            return None, None, None, None, None
        x, params, dL_doutput = ctx.saved_tensors
        fwd = ctx.fwd
        native, scale = fwd.native, fwd.loss_scale
        need_doutput, need_input, need_params = ctx.needs_input_grad[1], ctx.needs_input_grad[2], ctx.needs_input_grad[3]
        if not (need_doutput or need_input or need_params):
            return None, None, None, None, None
        probe = dL_ddLdinput.to(x.dtype).contiguous()
        # dL_dx is linear in dL_dy: d(dL_dx)/d(dL_dy) needs no scaling; the terms that are linear in
        # dL_dy (parameter and input parts) are computed with the scaled dL_dy and unscaled after.
        scaled = _scaled_output_gradient(native, dL_doutput, scale)
        dL_ddLdoutput = native.empty_output(x) if need_doutput else None
        dL_dinput, dL_dparams = native.empty_gradients(x, need_input, need_params)
        device, stream = _where(x)
        native.module.backward_backward_input(
            fwd.native_ctx, device, stream, x.shape[0], x.data_ptr(), native.input_dtype_name, probe.data_ptr(),
            scaled.data_ptr(), _address(dL_ddLdoutput), _address(dL_dinput), _address(dL_dparams),
            fwd.params_native.data_ptr(), False,
        )
        if dL_ddLdoutput is not None:
            dL_ddLdoutput = dL_ddLdoutput.to(dL_doutput.dtype)
        dL_dinput, dL_dparams = _unscaled_gradients(dL_dinput, dL_dparams, params, scale)
        return None, dL_ddLdoutput, dL_dinput, dL_dparams, None


class Module(torch.nn.Module):
    """Base of Network, Encoding and NetworkWithInputEncoding: a C++ module and its flat parameters.

    `params` is one 1-D torch.nn.Parameter in float32 (float64 for float64 modules): master weights
    that each call casts to the module's parameter dtype. Subclasses set their configuration
    attributes and implement _native_tcnn_module(); pickling rebuilds the C++ module from them.
    """

    def __init__(self, seed=DEFAULT_SEED, device=None):
        super().__init__()
        if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or seed < 0:
            raise ValueError(f"tinycudann: seed must be a non-negative int, got {seed!r}")
        self.seed = int(seed)
        self._init_native()
        native = self._native
        initial = torch.zeros(native.n_params, dtype=torch.float32)
        if native.n_params > 0:
            self.native_tcnn_module.initial_params(self.seed, initial.data_ptr())
        master_dtype = torch.float64 if native.param_dtype == torch.float64 else torch.float32
        device = torch.device(device) if device is not None else _default_device()
        self.params = torch.nn.Parameter(initial.to(device=device, dtype=master_dtype), requires_grad=True)
        # tcnn: fp16 gradients are computed for a loss scaled by 128; fp32/bf16/fp64 need no scaling.
        self.loss_scale = 128.0 if native.param_dtype == torch.float16 else 1.0

    def _init_native(self):
        self.native_tcnn_module = self._native_tcnn_module()
        self._native = _Native(self.native_tcnn_module)
        self.dtype = self._native.param_dtype
        self.n_output_dims = self._native.n_output_dims

    def _native_tcnn_module(self):
        raise NotImplementedError

    def forward(self, x):
        native = self._native
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"tinycudann: {native.describe}: the input must be a torch.Tensor, got {type(x).__name__}")
        if x.dim() != 2 or x.shape[1] != native.n_input_dims:
            raise ValueError(
                f"tinycudann: {native.describe}: the input must have shape [batch, {native.n_input_dims}], "
                f"got {list(x.shape)}"
            )
        if x.is_complex():
            raise TypeError(f"tinycudann: {native.describe}: complex inputs are not supported, got {x.dtype}")
        params = self.params
        if params.device != x.device:
            raise RuntimeError(
                f"tinycudann: {native.describe}: the input is on {x.device} but the parameters are on "
                f"{params.device}; move the module with .to({str(x.device)!r})"
            )
        # tcnn casts every input to float32 (float64 for float64 modules) and makes it contiguous.
        x = x.to(native.input_dtype).contiguous()
        with _device_guard(x):
            if torch.is_grad_enabled() and (x.requires_grad or params.requires_grad):
                output = _ModuleFunction.apply(native, self.loss_scale, x, params)
            else:
                output = _inference(native, x, params)
        return self._finish_output(output)

    def _finish_output(self, output):
        return output

    @property
    def jit_fusion(self):
        return False

    @jit_fusion.setter
    def jit_fusion(self, value):
        if value:
            warnings.warn("tinycudann: JIT fusion is not supported by tiny-rdna4-nn; the module runs unfused")

    def __getstate__(self):
        state = self.__dict__.copy()
        # The C++ module is not picklable; it is rebuilt from the configs in __setstate__.
        del state["native_tcnn_module"]
        del state["_native"]
        return state

    def __setstate__(self, state):
        super().__setstate__(state)
        self._init_native()

    def extra_repr(self):
        return (
            f"n_input_dims={self.n_input_dims}, n_output_dims={self.n_output_dims}, seed={self.seed}, "
            f"dtype={self.dtype}, hyperparams={self.native_tcnn_module.hyperparams()}"
        )


def _network_config(network_config, dtype, output_dtype):
    """The network config with the dtype / output_dtype keyword arguments applied (they win)."""
    config = dict(_check_config(network_config, "network_config"))
    if dtype is not None:
        config["dtype"] = _dtype_name(dtype, "dtype")
    if output_dtype is not None:
        config["output_dtype"] = _dtype_name(output_dtype, "output_dtype")
    return config


class NetworkWithInputEncoding(Module):
    """An input encoding followed by a network, as one module (parameters: network's, then encoding's).

    Takes [batch, n_input_dims] inputs (cast to float32) and returns [batch, n_output_dims] in the
    network's dtype. Beyond tcnn: `dtype` sets the network (and so the encoding) dtype, default the
    config's "dtype" key or the network otype's default; `output_dtype=torch.float32` asks a
    half-precision network for fp32 outputs; `device` places the parameters.
    """

    def __init__(self, n_input_dims, n_output_dims, encoding_config, network_config, seed=DEFAULT_SEED,
                 dtype=None, output_dtype=None, device=None):
        self.n_input_dims = _check_dims(n_input_dims, "n_input_dims")
        self.n_output_dims = _check_dims(n_output_dims, "n_output_dims")
        self.encoding_config = _check_config(encoding_config, "encoding_config")
        self.network_config = _check_config(network_config, "network_config")
        self.requested_dtype = dtype
        self.requested_output_dtype = output_dtype
        super().__init__(seed=seed, device=device)

    def _native_tcnn_module(self):
        config = _network_config(self.network_config, self.requested_dtype, self.requested_output_dtype)
        return _C.create_network_with_input_encoding(self.n_input_dims, self.n_output_dims, self.encoding_config, config)


class Network(Module):
    """A network (PortableMLP, BlasLtMLP, FullyFusedMLP, ...) from [batch, n_input_dims] to
    [batch, n_output_dims]. Keyword arguments beyond tcnn as for NetworkWithInputEncoding."""

    def __init__(self, n_input_dims, n_output_dims, network_config, seed=DEFAULT_SEED, dtype=None,
                 output_dtype=None, device=None):
        self.n_input_dims = _check_dims(n_input_dims, "n_input_dims")
        self.n_output_dims = _check_dims(n_output_dims, "n_output_dims")
        self.network_config = _check_config(network_config, "network_config")
        self.requested_dtype = dtype
        self.requested_output_dtype = output_dtype
        super().__init__(seed=seed, device=device)

    def _native_tcnn_module(self):
        config = _network_config(self.network_config, self.requested_dtype, self.requested_output_dtype)
        return _C.create_network(self.n_input_dims, self.n_output_dims, config)


class Encoding(Module):
    """An input encoding from [batch, n_input_dims] float32 positions to [batch, n_output_dims]
    features in `dtype` (tcnn's None: float16 when the parameters live on a GPU, float32 on the
    CPU). Beyond tcnn: float64 and bfloat16, `output_dtype=torch.float32`, `device`."""

    def __init__(self, n_input_dims, encoding_config, seed=DEFAULT_SEED, dtype=None, output_dtype=None,
                 device=None):
        self.n_input_dims = _check_dims(n_input_dims, "n_input_dims")
        self.encoding_config = _check_config(encoding_config, "encoding_config")
        if dtype is None:
            on_gpu = (torch.device(device) if device is not None else _default_device()).type == "cuda"
            dtype = torch.float16 if on_gpu else torch.float32
        self.precision = _dtype_name(dtype, "dtype")
        if output_dtype is not None and output_dtype not in (dtype, torch.float32):
            raise TypeError(
                f"tinycudann: Encoding output_dtype must be its dtype ({dtype}) or torch.float32, got {output_dtype!r}"
            )
        self.requested_output_dtype = output_dtype
        super().__init__(seed=seed, device=device)

    def _native_tcnn_module(self):
        return _C.create_encoding(self.n_input_dims, self.encoding_config, self.precision)

    def _finish_output(self, output):
        # Encodings compute in their own dtype; an fp32 output is a cast on top (autograd included).
        if self.requested_output_dtype is not None and output.dtype != self.requested_output_dtype:
            return output.to(self.requested_output_dtype)
        return output
