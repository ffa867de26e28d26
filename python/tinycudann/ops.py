# The modules' passes as PyTorch custom operators (torch.library.custom_op, torch 2.4 and later), so
# that torch.compile, torch.export and torch.func trace through a tinycudann module instead of
# breaking the graph at an opaque autograd.Function. Module.forward takes this path only while torch
# compiles, exports or runs a torch.func transform; eager calls keep the autograd.Function path of
# modules.py (it keeps the forward pass's C++ context, the operators recompute it: an operator has
# nothing but tensors and constants to hand from its forward to its backward).
#
# An operator names its module by a spec: the JSON of the factory call that builds the C++ module
# (modules.py, Module._recipe). The C++ modules hold no state beyond their configuration (parameters
# are the caller's), so any process that imports tinycudann rebuilds the same module from the spec:
# an exported program carries its modules' configurations, not pointers into this process.
#
#   tinycudann::forward(spec, x, params, loss_scale) -> y
#   tinycudann::backward(spec, x, params, dL_dy, loss_scale, need_input, need_params) -> (dL_dx, dL_dparams)
#   tinycudann::backward_backward(spec, x, params, dL_dy, dL_ddLdx, loss_scale, need_dy, need_input,
#                                 need_params) -> (dL_ddLdy, dL_dx, dL_dparams)
#
# A gradient that is not asked for is an empty tensor (operators return tensors, never None).
# dL_dparams is in the master weights' dtype, unscaled (as the autograd.Function path returns it).
import json
import threading

import torch

from . import _C
from . import modules as _m

SUPPORTED = all(hasattr(torch.library, name) for name in ("custom_op", "register_fake", "register_autograd"))

_natives = {}
_natives_lock = threading.Lock()


def spec_of(recipe):
    """The operator spec of a module recipe (factory name and arguments)."""
    return json.dumps(recipe, sort_keys=True, separators=(",", ":"))


def _create(recipe):
    factory, args = recipe["factory"], recipe["args"]
    if factory == "network":
        return _C.create_network(args["n_input_dims"], args["n_output_dims"], args["network"])
    if factory == "network_with_input_encoding":
        return _C.create_network_with_input_encoding(args["n_input_dims"], args["n_output_dims"], args["encoding"],
                                                     args["network"])
    if factory == "encoding":
        return _C.create_encoding(args["n_input_dims"], args["encoding"], args["dtype"])
    raise _m.TcnnValueError(f"tinycudann: unknown module factory {factory!r} in an operator spec; valid: "
                            "network, network_with_input_encoding, encoding")


def register(spec, native):
    """Makes `native` (a modules._Native) the module of `spec` in this process."""
    with _natives_lock:
        _natives.setdefault(spec, native)


def native_of(spec):
    """The modules._Native of a spec, built from it on first use."""
    native = _natives.get(spec)
    if native is None:
        built = _m._Native(_create(json.loads(spec)))
        with _natives_lock:
            native = _natives.setdefault(spec, built)
    return native


def _empty(like):
    return torch.empty(0, dtype=like.dtype, device=like.device)


# ---- The computations (plain functions: also what the tests call on torch versions without custom
# operators). Inputs are contiguous, on one device, in the module's input dtype (Module.forward sees to
# that before it calls an operator).

def forward_impl(spec, x, params, loss_scale):
    native = native_of(spec)
    with _m._device_guard(x):
        return _m._inference(native, x, params)


def _run_forward(native, x, params, need_input):
    """The C++ forward pass with its context (the backward operators recompute it)."""
    params_native = native.params_for_call(params)
    output = native.empty_output(x)
    device, stream = _m._where(x)
    ctx = native.module.forward(device, stream, x.shape[0], x.data_ptr(), native.input_dtype_name, output.data_ptr(),
                                params_native.data_ptr(), need_input)
    return ctx, params_native, output


def backward_impl(spec, x, params, dL_doutput, loss_scale, need_input, need_params):
    native = native_of(spec)
    if not (need_input or need_params):
        return _empty(x), _empty(params)
    with _m._device_guard(x):
        ctx, params_native, output = _run_forward(native, x, params, need_input)
        scaled = _m._scaled_output_gradient(native, dL_doutput, loss_scale)
        dL_dinput, dL_dparams = native.empty_gradients(x, need_input, need_params)
        device, stream = _m._where(x)
        native.module.backward(ctx, device, stream, x.shape[0], x.data_ptr(), native.input_dtype_name,
                               output.data_ptr(), scaled.data_ptr(), _m._address(dL_dinput), _m._address(dL_dparams),
                               params_native.data_ptr(), False)
        dL_dinput, dL_dparams = _m._unscaled_gradients(dL_dinput, dL_dparams, params, loss_scale)
    return (dL_dinput if dL_dinput is not None else _empty(x),
            dL_dparams if dL_dparams is not None else _empty(params))


def backward_backward_impl(spec, x, params, dL_doutput, dL_ddLdinput, loss_scale, need_doutput, need_input,
                           need_params):
    native = native_of(spec)
    if not (need_doutput or need_input or need_params):
        return _empty(dL_doutput), _empty(x), _empty(params)
    with _m._device_guard(x):
        ctx, params_native, _ = _run_forward(native, x, params, True)
        probe = dL_ddLdinput.to(x.dtype).contiguous()
        scaled = _m._scaled_output_gradient(native, dL_doutput, loss_scale)
        dL_ddLdoutput = native.empty_output(x) if need_doutput else None
        dL_dinput, dL_dparams = native.empty_gradients(x, need_input, need_params)
        device, stream = _m._where(x)
        native.module.backward_backward_input(
            ctx, device, stream, x.shape[0], x.data_ptr(), native.input_dtype_name, probe.data_ptr(), scaled.data_ptr(),
            _m._address(dL_ddLdoutput), _m._address(dL_dinput), _m._address(dL_dparams), params_native.data_ptr(),
            False,
        )
        dL_dinput, dL_dparams = _m._unscaled_gradients(dL_dinput, dL_dparams, params, loss_scale)
    return (dL_ddLdoutput.to(dL_doutput.dtype) if dL_ddLdoutput is not None else _empty(dL_doutput),
            dL_dinput if dL_dinput is not None else _empty(x),
            dL_dparams if dL_dparams is not None else _empty(params))


if SUPPORTED:

    @torch.library.custom_op("tinycudann::forward", mutates_args=())
    def forward(spec: str, x: torch.Tensor, params: torch.Tensor, loss_scale: float) -> torch.Tensor:
        return forward_impl(spec, x, params, loss_scale)

    @torch.library.register_fake("tinycudann::forward")
    def _forward_fake(spec, x, params, loss_scale):
        native = native_of(spec)
        return x.new_empty((x.shape[0], native.n_output_dims), dtype=native.output_dtype)

    @torch.library.custom_op("tinycudann::backward", mutates_args=())
    def backward(spec: str, x: torch.Tensor, params: torch.Tensor, dL_doutput: torch.Tensor, loss_scale: float,
                 need_input: bool, need_params: bool) -> tuple[torch.Tensor, torch.Tensor]:
        return backward_impl(spec, x, params, dL_doutput, loss_scale, need_input, need_params)

    @torch.library.register_fake("tinycudann::backward")
    def _backward_fake(spec, x, params, dL_doutput, loss_scale, need_input, need_params):
        return (torch.empty_like(x) if need_input else x.new_empty(0),
                torch.empty_like(params) if need_params else params.new_empty(0))

    @torch.library.custom_op("tinycudann::backward_backward", mutates_args=())
    def backward_backward(spec: str, x: torch.Tensor, params: torch.Tensor, dL_doutput: torch.Tensor,
                          dL_ddLdinput: torch.Tensor, loss_scale: float, need_doutput: bool, need_input: bool,
                          need_params: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return backward_backward_impl(spec, x, params, dL_doutput, dL_ddLdinput, loss_scale, need_doutput, need_input,
                                      need_params)

    @torch.library.register_fake("tinycudann::backward_backward")
    def _backward_backward_fake(spec, x, params, dL_doutput, dL_ddLdinput, loss_scale, need_doutput, need_input,
                                need_params):
        return (torch.empty_like(dL_doutput) if need_doutput else dL_doutput.new_empty(0),
                torch.empty_like(x) if need_input else x.new_empty(0),
                torch.empty_like(params) if need_params else params.new_empty(0))

    def _forward_setup(ctx, inputs, output):
        spec, x, params, loss_scale = inputs
        ctx.spec, ctx.loss_scale = spec, loss_scale
        ctx.save_for_backward(x, params)

    def _forward_backward(ctx, dL_doutput):
        x, params = ctx.saved_tensors
        need_input, need_params = ctx.needs_input_grad[1], ctx.needs_input_grad[2]
        if dL_doutput is None or not (need_input or need_params):
            return None, None, None, None
        dL_dinput, dL_dparams = torch.ops.tinycudann.backward(ctx.spec, x, params, dL_doutput.contiguous(),
                                                              ctx.loss_scale, need_input, need_params)
        return None, dL_dinput if need_input else None, dL_dparams if need_params else None, None

    torch.library.register_autograd("tinycudann::forward", _forward_backward, setup_context=_forward_setup)

    def _backward_setup(ctx, inputs, output):
        spec, x, params, dL_doutput, loss_scale, need_input, need_params = inputs
        ctx.spec, ctx.loss_scale = spec, loss_scale
        ctx.save_for_backward(x, params, dL_doutput)

    def _backward_backward(ctx, dL_ddLdinput, dL_ddLdparams):
        x, params, dL_doutput = ctx.saved_tensors
        native = native_of(ctx.spec)
        if dL_ddLdparams is not None and dL_ddLdparams.numel() > 0 and bool(dL_ddLdparams.ne(0).any()):
            raise ValueError(
                f"tinycudann: {native.describe}: second derivatives through the parameter gradient are not supported "
                "(only through the input gradient, e.g. for an eikonal loss)"
            )
        need_doutput, need_input, need_params = ctx.needs_input_grad[3], ctx.needs_input_grad[1], ctx.needs_input_grad[2]
        nothing = (None,) * 7
        if dL_ddLdinput is None or dL_ddLdinput.numel() == 0 or not (need_doutput or need_input or need_params):
            return nothing
        dy, dx, dp = torch.ops.tinycudann.backward_backward(ctx.spec, x, params, dL_doutput,
                                                            dL_ddLdinput.contiguous(), ctx.loss_scale, need_doutput,
                                                            need_input, need_params)
        return (None, dx if need_input else None, dp if need_params else None, dy if need_doutput else None,
                None, None, None)

    torch.library.register_autograd("tinycudann::backward", _backward_backward, setup_context=_backward_setup)


# Looked up once: wanted() runs on every eager module call.
_is_compiling = getattr(getattr(torch, "compiler", None), "is_compiling", None) or (lambda: False)
_functorch_active = getattr(torch._C, "_are_functorch_transforms_active", None) or (lambda: False)


def wanted():
    """Whether Module.forward should call the operators: torch compiles, exports or transforms."""
    return SUPPORTED and (_is_compiling() or bool(_functorch_active()))
