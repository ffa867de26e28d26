// The validating half of the module contract: every public call checks shapes, dtypes, devices
// and pointers here, once, before a module's *_impl runs.
#include <tnn/module.h>

#include "core/gpu_bridge.h"
#include "core/view_check.h"

namespace tnn {

void throw_no_gpu_backend(const std::string& what) {
    throw UnsupportedError(msg(what, ": this build of tiny-rdna4-nn has no GPU backend (configure with TNN_CUDA=ON or "
                                     "TNN_HIP=ON); use device 'cpu'"));
}

std::string Module::describe() const {
    return msg(name(), " (", m_n_input_dims, " -> ", m_n_output_dims, ", ", dtype_name(m_param_dtype), ")");
}

namespace {

// The call named in messages ("HashGrid encoding (3 -> 32, float16) forward"), formatted only when a
// message is built: every public call validates, and most calls pass.
struct Who {
    const Module& module;
    const char* method;
    operator std::string() const { return msg(*this); }
};
std::ostream& operator<<(std::ostream& os, const Who& w) { return os << w.module.describe() << " " << w.method; }

// check_view, then the view's dtype.
void check_view(const Who& who, const char* arg, ConstView v, int64_t rows, int64_t cols, DType dtype, Device device) {
    check_view(who, arg, v, rows, cols, device, "the input");
    if (v.dtype != dtype)
        throw DTypeError(msg(who, ": ", arg, " must be ", dtype_name(dtype), ", got ", dtype_name(v.dtype)));
}

// dL_dparams, where given, is memory of the input's device: a host pointer or another GPU's memory would
// fault inside a kernel, and a fault ends every model of the process.
void check_param_gradient(const Who& who, const void* dL_dparams, size_t n_params, Device dev) {
#ifdef TNN_WITH_GPU
    if (dev.is_gpu() && dL_dparams && n_params > 0 && !gpu_bridge::is_device_pointer(dL_dparams, dev.index))
        throw DeviceError(msg(who, ": dL_dparams is not memory of ", dev.str()));
#else
    (void)who, (void)dL_dparams, (void)n_params, (void)dev;
#endif  // TNN_WITH_GPU
}

}  // namespace

void Module::check_io(const char* method, const Stream& stream, ConstView input, const ConstView* output,
                      const void* params) const {
    const Who who{*this, method};
    const Device dev = input.device;
    if (!supports_device(dev))
        throw UnsupportedError(msg(who, ": ", name(), " does not run on ", dev.str(), " with dtype ",
                                   dtype_name(m_param_dtype)));
    if (stream.device() != dev)
        throw DeviceError(msg(who, ": the stream is for ", stream.device().str(), " but the input is on ", dev.str()));
    if (dev.is_gpu()) {
#ifdef TNN_WITH_GPU
        if (dev.index < 0 || dev.index >= gpu_bridge::device_count())
            throw DeviceError(msg(who, ": no GPU with index ", dev.index, " (", gpu_bridge::device_count(), " present)"));
#else
        throw_no_gpu_backend(who);
#endif  // TNN_WITH_GPU
    }
    if (input.rows < 0) throw ShapeError(msg(who, ": negative batch size ", input.rows));
    if (!accepts_input_dtype(input.dtype))
        throw DTypeError(msg(who, ": input must be ", dtype_name(input_dtype()), ", got ", dtype_name(input.dtype)));
    check_view(who, "input", input, input.rows, m_n_input_dims, dev, "the input");
    if (output) check_view(who, "output", *output, input.rows, m_n_output_dims, m_output_dtype, dev);
    if (m_n_params > 0 && !params && input.rows > 0) throw ShapeError(msg(who, ": params is a null pointer"));
#ifdef TNN_WITH_GPU
    if (dev.is_gpu() && m_n_params > 0 && input.rows > 0 && !gpu_bridge::is_device_pointer(params, dev.index))
        throw DeviceError(msg(who, ": params are not memory of ", dev.str()));
#endif  // TNN_WITH_GPU
}

void Module::check_arg(const char* method, const char* arg, ConstView v, int64_t rows, int64_t cols, DType dtype,
                       Device device) const {
    check_view(Who{*this, method}, arg, v, rows, cols, dtype, device);
}

void Module::zero_params_gradient(const Stream& stream, Device device, void* dL_dparams, GradMode mode) const {
    if (dL_dparams && mode == GradMode::overwrite && m_n_params > 0)
        fill(stream, View(dL_dparams, m_param_dtype, device, 1, static_cast<int64_t>(m_n_params)), 0.0);
}

void Module::inference(const Stream& stream, ConstView input, View output, const void* params) const {
    const ConstView out(output);
    check_io("inference", stream, input, &out, params);
    if (input.rows == 0) return;
    inference_impl(stream, input, output, params);
}

std::unique_ptr<Context> Module::forward(const Stream& stream, ConstView input, View output, const void* params,
                                         bool prepare_input_gradients) const {
    const ConstView out(output);
    check_io("forward", stream, input, &out, params);
    if (input.rows == 0) return std::make_unique<EmptyContext>();
    return forward_impl(stream, input, output, params, prepare_input_gradients);
}

void Module::backward(const Stream& stream, const Context& ctx, ConstView input, ConstView output,
                      ConstView dL_doutput, View* dL_dinput, void* dL_dparams, const void* params,
                      GradMode mode) const {
    check_io("backward", stream, input, &output, params);
    const Who who{*this, "backward"};
    check_view(who, "dL_doutput", dL_doutput, input.rows, m_n_output_dims, m_output_dtype, input.device);
    if (dL_dinput) check_view(who, "dL_dinput", *dL_dinput, input.rows, m_n_input_dims, input.dtype, input.device);
    check_param_gradient(who, dL_dparams, m_n_params, input.device);
    if (input.rows == 0) {
        zero_params_gradient(stream, input.device, dL_dparams, mode);
        return;
    }
    backward_impl(stream, ctx, input, output, dL_doutput, dL_dinput, dL_dparams, params, mode);
}

std::string Module::backward_backward_refusal(Device) const {
    return supports_backward_backward() ? std::string() : msg(name(), " has no second derivatives");
}

void Module::backward_backward_input(const Stream& stream, const Context& ctx, ConstView input, ConstView dL_ddLdinput,
                                     ConstView dL_doutput, View* dL_ddLdoutput, View* dL_dinput, void* dL_dparams,
                                     const void* params, GradMode mode) const {
    if (!supports_backward_backward())
        throw UnsupportedError(msg(describe(), ": second derivatives (backward_backward_input) are not supported by ",
                                   name()));
    check_io("backward_backward_input", stream, input, nullptr, params);
    if (const std::string why = backward_backward_refusal(input.device); !why.empty())
        throw UnsupportedError(msg(describe(), ": second derivatives (backward_backward_input) on ", input.device.str(),
                                   ": ", why));
    const Who who{*this, "backward_backward_input"};
    check_view(who, "dL_ddLdinput", dL_ddLdinput, input.rows, m_n_input_dims, input.dtype, input.device);
    check_view(who, "dL_doutput", dL_doutput, input.rows, m_n_output_dims, m_output_dtype, input.device);
    if (dL_ddLdoutput)
        check_view(who, "dL_ddLdoutput", *dL_ddLdoutput, input.rows, m_n_output_dims, m_output_dtype, input.device);
    if (dL_dinput) check_view(who, "dL_dinput", *dL_dinput, input.rows, m_n_input_dims, input.dtype, input.device);
    check_param_gradient(who, dL_dparams, m_n_params, input.device);
    if (input.rows == 0) {
        zero_params_gradient(stream, input.device, dL_dparams, mode);
        return;
    }
    backward_backward_input_impl(stream, ctx, input, dL_ddLdinput, dL_doutput, dL_ddLdoutput, dL_dinput, dL_dparams,
                                 params, mode);
}

// ---- The per-device dispatch: the one place that picks a module's CPU or GPU half.

void Module::inference_impl(const Stream& stream, ConstView input, View output, const void* params) const {
    if (input.device.is_gpu())
        inference_gpu(stream, input, output, params);
    else
        inference_cpu(stream, input, output, params);
}

std::unique_ptr<Context> Module::forward_impl(const Stream& stream, ConstView input, View output, const void* params,
                                              bool prepare_input_gradients) const {
    return input.device.is_gpu() ? forward_gpu(stream, input, output, params, prepare_input_gradients)
                                 : forward_cpu(stream, input, output, params, prepare_input_gradients);
}

void Module::backward_impl(const Stream& stream, const Context& ctx, ConstView input, ConstView output,
                           ConstView dL_doutput, View* dL_dinput, void* dL_dparams, const void* params,
                           GradMode mode) const {
    if (input.device.is_gpu())
        backward_gpu(stream, ctx, input, output, dL_doutput, dL_dinput, dL_dparams, params, mode);
    else
        backward_cpu(stream, ctx, input, output, dL_doutput, dL_dinput, dL_dparams, params, mode);
}

void Module::backward_backward_input_impl(const Stream& stream, const Context& ctx, ConstView input,
                                          ConstView dL_ddLdinput, ConstView dL_doutput, View* dL_ddLdoutput,
                                          View* dL_dinput, void* dL_dparams, const void* params,
                                          GradMode mode) const {
    if (input.device.is_gpu())
        backward_backward_input_gpu(stream, ctx, input, dL_ddLdinput, dL_doutput, dL_ddLdoutput, dL_dinput, dL_dparams,
                                    params, mode);
    else
        backward_backward_input_cpu(stream, ctx, input, dL_ddLdinput, dL_doutput, dL_ddLdoutput, dL_dinput, dL_dparams,
                                    params, mode);
}

namespace {

[[noreturn]] void throw_missing_pass(const Module& m, const char* pass, const char* device) {
    throw UnsupportedError(msg(m.describe(), ": ", pass, " is not implemented on the ", device));
}

}  // namespace

// Inference defaults to the forward pass (whichever way the module provides it), its context dropped.
void Module::inference_cpu(const Stream& stream, ConstView input, View output, const void* params) const {
    forward_impl(stream, input, output, params, false);
}

std::unique_ptr<Context> Module::forward_cpu(const Stream&, ConstView, View, const void*, bool) const {
    throw_missing_pass(*this, "forward", "CPU");
}

void Module::backward_cpu(const Stream&, const Context&, ConstView, ConstView, ConstView, View*, void*, const void*,
                          GradMode) const {
    throw_missing_pass(*this, "backward", "CPU");
}

void Module::backward_backward_input_cpu(const Stream&, const Context&, ConstView, ConstView, ConstView, View*, View*,
                                         void*, const void*, GradMode) const {
    throw_missing_pass(*this, "backward_backward_input", "CPU");
}

void Module::inference_gpu(const Stream& stream, ConstView input, View output, const void* params) const {
    forward_impl(stream, input, output, params, false);
}

std::unique_ptr<Context> Module::forward_gpu(const Stream&, ConstView, View, const void*, bool) const {
    throw_missing_pass(*this, "forward", "GPU");
}

void Module::backward_gpu(const Stream&, const Context&, ConstView, ConstView, ConstView, View*, void*, const void*,
                          GradMode) const {
    throw_missing_pass(*this, "backward", "GPU");
}

void Module::backward_backward_input_gpu(const Stream&, const Context&, ConstView, ConstView, ConstView, View*, View*,
                                         void*, const void*, GradMode) const {
    throw_missing_pass(*this, "backward_backward_input", "GPU");
}

}  // namespace tnn
