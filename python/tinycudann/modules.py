# torch.nn.Modules over tiny-rdna4-nn's C++ modules: one flat `params` parameter, autograd through
# torch.autograd.Function (tcnn's loss scaling, several forwards before one backward, double
# backward where the C++ module has it). Tensors reach C++ as addresses plus the current stream.
# Also tcnn's layer below the modules (NativeModule: fwd / bwd / bwd_bwd_input on tensors) and what
# it takes to load whole-model pickles that tcnn wrote.
import contextlib
import gc
import importlib.abc
import importlib.util
import numbers
import os
import re
import sys
import warnings

import torch
from torch.autograd.function import once_differentiable

from . import _C

DEFAULT_SEED = 1337

# Errors (created in _C): each is also a RuntimeError, which is what tcnn raises.
TcnnError = _C.TcnnError
TcnnValueError = _C.TcnnValueError
TcnnTypeError = _C.TcnnTypeError

_DTYPE_BY_NAME = {
    "float32": torch.float32,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "float64": torch.float64,
}
_NAME_BY_DTYPE = {v: k for k, v in _DTYPE_BY_NAME.items()}

_DTYPE_BY_PRECISION = {
    _C.Precision.Fp32: torch.float32,
    _C.Precision.Fp16: torch.float16,
    _C.Precision.Bf16: torch.bfloat16,
    _C.Precision.Fp64: torch.float64,
}
_PRECISION_BY_DTYPE = {v: k for k, v in _DTYPE_BY_PRECISION.items()}


def free_temporary_memory():
    """Returns cached temporary GPU memory of tiny-rdna4-nn to the driver (tcnn's function)."""
    # Contexts of finished graphs may still hold temporaries until Python collects them.
    gc.collect()
    _C.free_temporary_memory()


def memory_stats(device=None):
    """tiny-rdna4-nn's own GPU temporaries on a device (default: the current CUDA device): bytes held
    from the driver and in use, and the driver allocations and frees so far. Tensors that torch
    allocates (parameters, outputs, gradients) are torch's: see torch.cuda.memory_stats."""
    if device is None:
        device = torch.cuda.current_device() if torch.cuda.is_available() else -1
    elif isinstance(device, (str, torch.device)):
        device = torch.device(device).index or 0
    return _C.memory_stats(int(device))


def build_info():
    """How this tinycudann was built and what it runs on: its version, the GPU backend ("CUDA", "HIP"
    or "none"), the GPU architectures compiled in as the build named them (CUDA: CMake's spelling,
    e.g. ["80", "86-real", "90a-real", "120"]; chosen at build time by TNN_CUDA_ARCHITECTURES,
    docs/gpu.md) and, for each GPU present, the code it runs ("sm_90a machine code") or, when the
    build has none for it, code None and the error that its first use raises."""
    devices = []
    for index in range(_C.gpu_device_count()):
        device = {"index": index, "description": _C.gpu_device_description(index)}
        try:
            device["code"] = _C.gpu_device_code(index)
        except TcnnError as e:
            device["code"] = None
            device["error"] = str(e)
        devices.append(device)
    return {
        "version": _C.version(),
        "gpu_backend": _C.gpu_backend_name(),
        "gpu_architectures": _C.gpu_architectures().split(),
        "devices": devices,
    }


def supports_jit_fusion():
    """tcnn's runtime-compiled kernel fusion does not exist here; modules always run unfused."""
    return False


def _torch_precision(precision):
    """The torch dtype of a _C.Precision (tcnn's helper of the same name)."""
    if precision not in _DTYPE_BY_PRECISION:
        raise TcnnTypeError(f"tinycudann: unknown precision {precision!r}; valid: {list(_C.Precision.__members__)}")
    return _DTYPE_BY_PRECISION[precision]


def _as_precision(value):
    """The _C.Precision of an Encoding's `precision` attribute, which may be ours, the enum of a
    pickle that tcnn wrote (Fp32 / Fp16 by name, whichever module provided it), or a dtype name
    (pickles of this package before it stored a Precision)."""
    if isinstance(value, str) and value in _DTYPE_BY_NAME:
        return _PRECISION_BY_DTYPE[_DTYPE_BY_NAME[value]]
    if value in _DTYPE_BY_PRECISION:
        return value
    name = getattr(value, "name", None)
    if name in _C.Precision.__members__:
        return _C.Precision.__members__[name]
    raise TcnnTypeError(f"tinycudann: unknown Encoding precision {value!r}; valid: {list(_C.Precision.__members__)}")


def null_tensor_like(tensor):
    """tcnn's placeholder for an absent gradient: a 0-dimensional empty tensor like `tensor`."""
    return torch.empty([], dtype=tensor.dtype, device=tensor.device)


def null_tensor_to_none(tensor):
    """None for tcnn's 0-dimensional placeholder, else the tensor."""
    return None if len(tensor.shape) == 0 else tensor


def rtc_set_cache_dir(dir):
    """tcnn's cache directory of runtime-compiled kernels (tcnn after 2.0). Nothing is compiled at
    run time here; the call is accepted and does nothing."""
    _C.rtc_set_cache_dir(str(dir) if dir else "")


# Optional check that inputs are finite (tinycudann.set_input_checks, env TNN_CHECK_INPUTS=1). Off by
# default: it costs one pass over the input and a device-to-host sync per call.
_input_checks = os.environ.get("TNN_CHECK_INPUTS", "").strip().lower() not in ("", "0", "false", "off", "no")


def set_input_checks(enabled):
    """Turn the finite-input check of every forward on or off (also: env TNN_CHECK_INPUTS=1).

    On, a forward whose input holds a NaN or an infinity raises TcnnValueError naming the first such
    row, instead of computing with it (a grid turns one NaN coordinate into NaN gradients of the
    2^d * n_features entries around cell 0 of every level, which the optimizer then spreads). It
    costs one pass over the input and a device-to-host synchronisation per call, and cannot run
    inside CUDA graph capture (raises there).
    """
    global _input_checks
    _input_checks = bool(enabled)


def input_checks():
    """Whether set_input_checks (or TNN_CHECK_INPUTS) turned the finite-input check on."""
    return _input_checks


def _check_finite_rows(describe, x):
    if torch.jit.is_tracing():
        return  # a traced graph has no Python checks; checking the example input would mislead
    if x.device.type == "cuda" and torch.cuda.is_current_stream_capturing():
        raise TcnnError(
            f"tinycudann: {describe}: the finite-input check (set_input_checks / TNN_CHECK_INPUTS) synchronises "
            "the device and cannot run during CUDA graph capture; turn it off with tinycudann.set_input_checks(False)"
        )
    bad = ~torch.isfinite(x)
    if bool(bad.any()):
        rows = bad.any(dim=1).nonzero()
        row = int(rows[0])
        raise TcnnValueError(
            f"tinycudann: {describe}: input row {row} is not finite: {x[row].tolist()} ({rows.shape[0]} such rows "
            f"of {x.shape[0]}); the finite-input check is on (tinycudann.set_input_checks(False) or TNN_CHECK_INPUTS=0 "
            "turns it off)"
        )


def _check_call(native, x, params):
    """The checks of Module.forward before any computation."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"tinycudann: {native.describe}: the input must be a torch.Tensor, got {type(x).__name__}")
    if x.dim() != 2 or x.shape[1] != native.n_input_dims:
        raise TcnnValueError(
            f"tinycudann: {native.describe}: the input must have shape [batch, {native.n_input_dims}], "
            f"got {list(x.shape)}"
        )
    if x.is_complex():
        raise TcnnTypeError(f"tinycudann: {native.describe}: complex inputs are not supported, got {x.dtype}")
    _check_module_params(native, params)


def _check_module_params(native, params):
    # The C++ module reads n_params values at params' address: anything else must stop here.
    if not isinstance(params, torch.Tensor):
        raise TcnnValueError(
            f"tinycudann: {native.describe}: `params` must be a tensor of {native.n_params} values, got "
            f"{type(params).__name__}"
        )
    if params.dim() != 1 or params.shape[0] != native.n_params:
        raise TcnnValueError(
            f"tinycudann: {native.describe}: `params` must have shape [{native.n_params}], got {list(params.shape)}; "
            "load parameters with load_state_dict or copy_ into params instead of replacing params.data"
        )
    if not params.is_floating_point():
        raise TcnnTypeError(
            f"tinycudann: {native.describe}: `params` must be a floating-point tensor (float32 master weights), "
            f"got {params.dtype}"
        )


def _to_params_device(native, x, params):
    """x on the device of the parameters: a CPU input to a CUDA module is copied there with a
    warning, as tcnn does; other mismatches raise."""
    if x.device == params.device:
        return x
    if x.device.type == "cpu" and params.device.type == "cuda":
        # The message starts with tcnn's words, so that warning filters written for tcnn match it.
        # warnings' default filter shows it once per process (the message text does not vary per call).
        warnings.warn(
            "input must be a CUDA tensor, but isn't. This indicates suboptimal performance. "
            f"(tinycudann: {native.describe}: the input is copied from cpu to {params.device} on every call)"
        )
        return x.to(params.device)
    raise TcnnError(
        f"tinycudann: {native.describe}: the input is on {x.device} but the parameters are on "
        f"{params.device}; move the module with .to({str(x.device)!r})"
    )


def _dtype_name(dtype, what):
    if dtype not in _NAME_BY_DTYPE:
        raise TcnnTypeError(
            f"tinycudann: {what} must be one of torch.float32, torch.float16, torch.bfloat16, torch.float64, "
            f"got {dtype!r}"
        )
    return _NAME_BY_DTYPE[dtype]


def _check_dims(value, what):
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"tinycudann: {what} must be an int, got {type(value).__name__}")
    if value < 1:
        raise TcnnValueError(f"tinycudann: {what} must be at least 1, got {value}")
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


# The current stream's raw handle without building a torch.cuda.Stream object (several microseconds a
# call on a slow host); the public API where a torch build lacks it.
_current_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)


def _where(t):
    """(device index, native stream handle) for the C++ call; -1 and 0 for the CPU."""
    device = t.device
    if device.type == "cpu":
        return -1, 0
    if device.type == "cuda":  # also ROCm builds of torch, whose streams are hipStream_t
        if _current_raw_stream is not None:
            return device.index, _current_raw_stream(device.index)
        return device.index, torch.cuda.current_stream(device).cuda_stream
    raise TcnnError(f"tinycudann: tensors on {t.device} are not supported; use cpu or cuda tensors")


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
        # Detached: the C++ calls read the storage this returns, which stays alive with it even if the
        # caller replaces params.data before the backward pass.
        return params.detach().to(self.param_dtype).contiguous()

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
    device, stream = _where(x)
    if params.dtype is torch.float32 and params.is_contiguous():
        # fp32 master weights go as they are: a half-precision module rounds them in the same C++ call.
        native.module.inference(device, stream, x.shape[0], x.data_ptr(), native.input_dtype_name,
                                output.data_ptr(), params.data_ptr(), "float32")
    else:
        params_native = native.params_for_call(params)
        native.module.inference(device, stream, x.shape[0], x.data_ptr(), native.input_dtype_name,
                                output.data_ptr(), params_native.data_ptr())
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


def _initial_params_cpu(module, seed):
    """The module's initial parameters for `seed`: n_params float32 values on the CPU."""
    initial = torch.zeros(module.n_params(), dtype=torch.float32)
    if initial.numel() > 0:
        module.initial_params(seed, initial.data_ptr())
    return initial


class NativeModule:
    """tcnn's native module API (`module.native_tcnn_module`) over a C++ module of ours.

    fwd / bwd / bwd_bwd_input take and return tensors with tcnn's signatures and checks: inputs
    [batch, n_input_dims] float32 (float64 for float64 modules), params 1-D of n_params in the
    parameter precision, all contiguous and on one device (CPU or CUDA here). Gradients are
    returned where the corresponding tensor requires grad, None elsewhere; no loss scaling is
    applied (tcnn's callers scale). Our additions (describe(), supports_backward_backward(), ...)
    are passed through; the package's modules call the C++ module directly.
    """

    def __init__(self, module, facts=None):
        self._module = module
        self._facts = facts if facts is not None else _Native(module)

    # tcnn's queries
    def n_input_dims(self):
        return self._module.n_input_dims()

    def n_output_dims(self):
        return self._module.n_output_dims()

    def n_params(self):
        return self._module.n_params()

    def param_precision(self):
        return self._module.param_precision()

    def output_precision(self):
        return self._module.output_precision()

    def hyperparams(self):
        return self._module.hyperparams()

    def name(self):
        return self._module.name()

    @property
    def jit_fusion(self):
        return False

    @jit_fusion.setter
    def jit_fusion(self, value):
        if value:
            warnings.warn("tinycudann: JIT fusion is not supported by tiny-rdna4-nn; the module runs unfused")

    # ours
    def n_matrix_params(self):
        return self._module.n_matrix_params()

    def param_dtype(self):
        return self._module.param_dtype()

    def output_dtype(self):
        return self._module.output_dtype()

    def input_dtype(self):
        return self._module.input_dtype()

    def accepts_input_dtype(self, dtype):
        return self._module.accepts_input_dtype(dtype)

    def describe(self):
        return self._module.describe()

    def supports_device(self, device):
        return self._module.supports_device(device)

    def supports_backward_backward(self, device=None):
        """Second derivatives on some device, or on `device` (an int index, -1 or "cpu", or a torch.device)."""
        if device is None:
            return self._module.supports_backward_backward()
        if isinstance(device, (str, torch.device)):
            device = torch.device(device)
            device = -1 if device.type == "cpu" else (device.index or 0)
        return self._module.supports_backward_backward(int(device))

    def __repr__(self):
        return f"NativeModule({self._facts.describe})"

    def initial_params(self, seed):
        """n_params float32 initial values for `seed`, on the device where modules put their
        parameters by default (the current CUDA device when there is one, as tcnn; else the CPU)."""
        return _initial_params_cpu(self._module, seed).to(_default_device())

    def fwd(self, input, params):
        """(context, output): the forward pass, or inference (an empty context) when neither input
        nor params requires grad."""
        n = self._facts
        rows = self._check_input(input, "input")
        self._check_params(params, input.device)
        if _input_checks:
            _check_finite_rows(n.describe, input)
        output = torch.empty((rows, n.n_output_dims), dtype=n.output_dtype, device=input.device)
        device, stream = _where(input)
        with _device_guard(input):
            if not (input.requires_grad or params.requires_grad):
                self._module.inference(device, stream, rows, input.data_ptr(), n.input_dtype_name, output.data_ptr(),
                                       params.data_ptr())
                return _C.Context(), output
            ctx = self._module.forward(device, stream, rows, input.data_ptr(), n.input_dtype_name, output.data_ptr(),
                                       params.data_ptr(), input.requires_grad)
        return ctx, output

    def bwd(self, ctx, input, params, output, dL_doutput):
        """(dL_dinput, dL_dparams) of a fwd that returned `ctx`; each None unless input /
        params requires grad. dL_dparams is in the parameter precision."""
        n = self._facts
        self._check_context(ctx, "bwd")
        rows = self._check_input(input, "input")
        self._check_params(params, input.device)
        self._check_output(output, "output", rows, input.device)
        self._check_output(dL_doutput, "dL_doutput", rows, input.device)
        dL_dinput = torch.empty_like(input) if input.requires_grad else None
        dL_dparams = torch.empty(n.n_params, dtype=n.param_dtype, device=input.device) if params.requires_grad else None
        if dL_dinput is not None or dL_dparams is not None:
            device, stream = _where(input)
            with _device_guard(input):
                self._module.backward(ctx, device, stream, rows, input.data_ptr(), n.input_dtype_name,
                                      output.data_ptr(), dL_doutput.data_ptr(), _address(dL_dinput),
                                      _address(dL_dparams), params.data_ptr(), False)
        return dL_dinput, dL_dparams

    def bwd_bwd_input(self, ctx, input, params, dL_ddLdinput, dL_doutput):
        """(dL_ddLdoutput, dL_dparams, dL_dinput) for a loss on the input gradient that bwd
        computed: the derivatives by dL_doutput, params and input of <dL_ddLdinput, dL_dinput>.
        Each is None unless the tensor it belongs to requires grad."""
        n = self._facts
        self._check_context(ctx, "bwd_bwd_input")
        rows = self._check_input(input, "input")
        self._check_params(params, input.device)
        self._check_input(dL_ddLdinput, "dL_ddLdinput", rows)
        self._check_output(dL_doutput, "dL_doutput", rows, input.device)
        dL_ddLdoutput = torch.empty_like(dL_doutput) if dL_doutput.requires_grad else None
        dL_dparams = torch.empty(n.n_params, dtype=n.param_dtype, device=input.device) if params.requires_grad else None
        dL_dinput = torch.empty_like(input) if input.requires_grad else None
        if dL_ddLdoutput is not None or dL_dparams is not None or dL_dinput is not None:
            device, stream = _where(input)
            with _device_guard(input):
                self._module.backward_backward_input(
                    ctx, device, stream, rows, input.data_ptr(), n.input_dtype_name, dL_ddLdinput.data_ptr(),
                    dL_doutput.data_ptr(), _address(dL_ddLdoutput), _address(dL_dinput), _address(dL_dparams),
                    params.data_ptr(), False,
                )
        return dL_ddLdoutput, dL_dparams, dL_dinput

    # tcnn's CHECK_THROWs, with messages: every check raises a RuntimeError subclass, as tcnn.
    def _check_tensor(self, t, what, shape, dtype, device=None):
        """shape: the sizes, where a str names a size that may take any value ("batch")."""
        n = self._facts
        if not isinstance(t, torch.Tensor):
            raise TcnnValueError(f"tinycudann: {n.describe}: {what} must be a torch.Tensor, got {type(t).__name__}")
        if t.dim() != len(shape) or any(not isinstance(s, str) and t.shape[i] != s for i, s in enumerate(shape)):
            raise TcnnValueError(
                f"tinycudann: {n.describe}: {what} must have shape [{', '.join(map(str, shape))}], got {list(t.shape)}"
            )
        if t.dtype != dtype:
            raise TcnnTypeError(f"tinycudann: {n.describe}: {what} must be {dtype}, got {t.dtype}")
        if device is not None and t.device != device:
            raise TcnnError(f"tinycudann: {n.describe}: {what} is on {t.device}, the input on {device}")
        if not t.is_contiguous():
            raise TcnnValueError(f"tinycudann: {n.describe}: {what} must be contiguous")

    def _check_input(self, t, what, rows=None):
        """Checks an input-shaped tensor ([rows, n_input_dims]; any rows when None); returns its rows."""
        n = self._facts
        self._check_tensor(t, what, ["batch" if rows is None else rows, n.n_input_dims], n.input_dtype)
        return t.shape[0]

    def _check_params(self, params, device):
        n = self._facts
        self._check_tensor(params, "params", [n.n_params], n.param_dtype, device)

    def _check_output(self, t, what, rows, device):
        n = self._facts
        self._check_tensor(t, what, [rows, n.n_output_dims], n.output_dtype, device)

    def _check_context(self, ctx, method):
        if not isinstance(ctx, _C.Context) or not ctx.valid:
            raise TcnnError(
                f"tinycudann: {self._facts.describe}: {method} needs the context of a fwd that ran with input or params "
                "requiring grad; this one is empty (fwd ran in inference mode)"
            )


class Module(torch.nn.Module):
    """Base of Network, Encoding and NetworkWithInputEncoding: a C++ module and its flat parameters.

    `params` is one 1-D torch.nn.Parameter in float32 (float64 for float64 modules): master weights
    that each call casts to the module's parameter dtype. Subclasses set their configuration
    attributes and implement _recipe() (the C++ factory call); pickling, and the custom operators
    that torch.compile traces (ops.py), rebuild the C++ module from it.
    """

    def __init__(self, seed=DEFAULT_SEED, device=None):
        super().__init__()
        if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or seed < 0:
            raise TcnnValueError(f"tinycudann: seed must be a non-negative int, got {seed!r}")
        self.seed = int(seed)
        self._init_native()
        native = self._native
        initial = _initial_params_cpu(native.module, self.seed)
        master_dtype = torch.float64 if native.param_dtype == torch.float64 else torch.float32
        device = torch.device(device) if device is not None else _default_device()
        self.params = torch.nn.Parameter(initial.to(device=device, dtype=master_dtype), requires_grad=True)
        # tcnn: fp16 gradients are computed for a loss scaled by 128; fp32/bf16/fp64 need no scaling.
        self.loss_scale = 128.0 if native.param_dtype == torch.float16 else 1.0

    def _init_native(self):
        module = self._native_tcnn_module()
        if isinstance(module, NativeModule):
            module = module._module
        self._native = _Native(module)
        self.native_tcnn_module = NativeModule(module, self._native)
        self.dtype = self._native.param_dtype
        self.n_output_dims = self._native.n_output_dims
        self._spec = None
        if _ops.SUPPORTED:
            try:
                self._op_spec()
            except TcnnError:
                pass  # raised again where an operator is needed

    def _native_tcnn_module(self):
        return _ops._create(self._recipe())

    def _recipe(self):
        """The C++ factory call that builds this module: {"factory": name, "args": {...}} (ops.py)."""
        raise NotImplementedError

    def _op_spec(self):
        """This module's spec for the custom operators (ops.py): its recipe as JSON. Made once, outside
        any tracing (Dynamo reads it as a constant)."""
        spec = self._spec
        if spec is None:
            try:
                spec = _ops.spec_of(self._recipe())
            except NotImplementedError as e:
                raise TcnnError(
                    f"tinycudann: {type(self).__name__} does not implement _recipe(), which torch.compile / "
                    "torch.export / torch.func need to rebuild its C++ module"
                ) from e
            except (TypeError, ValueError) as e:
                raise TcnnValueError(
                    f"tinycudann: {self._native.describe}: torch.compile / torch.export / torch.func need the module's "
                    f"configuration as JSON, and it is not ({e})"
                ) from e
            _ops.register(spec, self._native)
            self._spec = spec
        return spec

    def forward(self, x):
        native = self._native
        params = self.params
        tracing = torch.jit.is_tracing()
        if tracing:
            with warnings.catch_warnings():
                # The checks compare sizes that are constants of the module; the tracer's warning
                # that such a comparison "might not generalize" does not apply to them.
                warnings.simplefilter("ignore", torch.jit.TracerWarning)
                _check_call(native, x, params)
        else:
            _check_call(native, x, params)
        x = _to_params_device(native, x, params)
        # tcnn casts every input to float32 (float64 for float64 modules) and makes it contiguous.
        if x.dtype is not native.input_dtype:
            x = x.to(native.input_dtype)
        if not x.is_contiguous():
            x = x.contiguous()
        if _ops.wanted():
            # torch.compile / torch.export / torch.func: the custom operators (ops.py), which they trace
            # through. The finite-input check synchronises, so it is not made there.
            return self._finish_output(torch.ops.tinycudann.forward(self._op_spec(), x, params, self.loss_scale))
        if _input_checks:
            _check_finite_rows(native.describe, x)
        with _device_guard(x):
            # Under torch.jit.trace the computation must be an autograd Function even without grad:
            # the tracer records a Function call (and replays it), but not the raw C++ call of
            # _inference, which would leave only the allocation of the output in the trace.
            if tracing or (torch.is_grad_enabled() and (x.requires_grad or params.requires_grad)):
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
        self.native_tcnn_module.jit_fusion = value

    @jit_fusion.deleter
    def jit_fusion(self):
        raise AttributeError("tinycudann: `jit_fusion` cannot be deleted")

    def __getstate__(self):
        state = self.__dict__.copy()
        # The C++ module is not picklable; it is rebuilt from the configs in __setstate__.
        del state["native_tcnn_module"]
        del state["_native"]
        state["_spec"] = None
        return state

    def __setstate__(self, state):
        state = dict(state)
        self._complete_state(state)
        super().__setstate__(state)
        self._init_native()

    def _complete_state(self, state):
        """Fills in what a pickle written by tcnn 2.0 lacks (it holds tcnn's attributes only)."""

    def extra_repr(self):
        return (
            f"n_input_dims={self.n_input_dims}, n_output_dims={self.n_output_dims}, seed={self.seed}, "
            f"dtype={self.dtype}, hyperparams={self.native_tcnn_module.hyperparams()}"
        )


def _complete_network_state(state):
    # tcnn's network precision is fixed by its build (float16 with tensor cores) and stored in
    # `dtype`: a tcnn pickle is rebuilt in that precision.
    if "requested_dtype" not in state:
        state["requested_dtype"] = state.get("dtype")
    state.setdefault("requested_output_dtype", None)


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

    def _recipe(self):
        config = _network_config(self.network_config, self.requested_dtype, self.requested_output_dtype)
        return {"factory": "network_with_input_encoding",
                "args": {"n_input_dims": self.n_input_dims, "n_output_dims": self.n_output_dims,
                         "encoding": self.encoding_config, "network": config}}

    def _complete_state(self, state):
        _complete_network_state(state)


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

    def _recipe(self):
        config = _network_config(self.network_config, self.requested_dtype, self.requested_output_dtype)
        return {"factory": "network",
                "args": {"n_input_dims": self.n_input_dims, "n_output_dims": self.n_output_dims, "network": config}}

    def _complete_state(self, state):
        _complete_network_state(state)


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
        _dtype_name(dtype, "dtype")
        self.precision = _PRECISION_BY_DTYPE[dtype]  # a _C.Precision, as tcnn's attribute
        if output_dtype is not None and output_dtype not in (dtype, torch.float32):
            raise TcnnTypeError(
                f"tinycudann: Encoding output_dtype must be its dtype ({dtype}) or torch.float32, got {output_dtype!r}"
            )
        self.requested_output_dtype = output_dtype
        super().__init__(seed=seed, device=device)

    def _recipe(self):
        dtype = _NAME_BY_DTYPE[_torch_precision(_as_precision(self.precision))]
        return {"factory": "encoding",
                "args": {"n_input_dims": self.n_input_dims, "encoding": self.encoding_config, "dtype": dtype}}

    def _complete_state(self, state):
        state["precision"] = _as_precision(state["precision"])
        state.setdefault("requested_output_dtype", None)

    def _finish_output(self, output):
        # Encodings compute in their own dtype; an fp32 output is a cast on top (autograd included).
        if self.requested_output_dtype is not None and output.dtype != self.requested_output_dtype:
            return output.to(self.requested_output_dtype)
        return output


# tcnn's extension module is `tinycudann_bindings._<cc>_C` (cc: the compute capability it was built
# for), and a pickled tcnn Encoding names that module's Precision enum. Where no tcnn is installed,
# these names resolve to a stand-in holding our _C.Precision (its Fp32 / Fp16 have tcnn's values,
# which is what the pickle stores). The finder goes last in sys.meta_path: an installed tcnn's own
# modules are always found first.
_TCNN_BINDINGS_NAME = re.compile(r"tinycudann_bindings(\._\d+_C)?")


class _TcnnBindingsFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname, path=None, target=None):
        match = _TCNN_BINDINGS_NAME.fullmatch(fullname)
        if match is None:
            return None
        return importlib.util.spec_from_loader(fullname, self, is_package=match.group(1) is None)

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        module.__doc__ = "tinycudann's stand-in for tcnn's extension, for loading pickles that tcnn wrote"
        if not hasattr(module, "__path__"):
            module.Precision = _C.Precision


if not any(type(f).__name__ == "_TcnnBindingsFinder" for f in sys.meta_path):
    sys.meta_path.append(_TcnnBindingsFinder())

from . import ops as _ops  # noqa: E402  (ops.py uses this module's helpers)
