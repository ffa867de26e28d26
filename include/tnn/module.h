// The module contract shared by encodings, networks and composed models: sizes, dtypes, JSON
// hyperparameters, caller-owned flat parameters, and inference / forward -> Context / backward /
// backward_backward_input. Public methods validate their arguments, then call the private *_impl.
#pragma once

#include <tnn/config.h>
#include <tnn/rng.h>
#include <tnn/tensor.h>

#include <cstdint>
#include <memory>
#include <string>

namespace tnn {

enum class GradMode { overwrite, accumulate };

// Per-call state a forward pass leaves for its backward pass. Modules keep nothing between calls.
struct Context {
    virtual ~Context() = default;
};

class Module {
public:
    virtual ~Module() = default;

    uint32_t n_input_dims() const { return m_n_input_dims; }
    uint32_t n_output_dims() const { return m_n_output_dims; }
    size_t n_params() const { return m_n_params; }
    // The leading parameters that are MLP weight matrices: Adam applies L2 regularisation to these
    // and never skips them; every later parameter (biases, grids) is skipped when its gradient is 0.
    size_t n_matrix_params() const { return m_n_matrix_params; }
    DType param_dtype() const { return m_param_dtype; }
    DType output_dtype() const { return m_output_dtype; }
    // The input dtype this module takes: fp32 (fp64 for fp64 modules); networks also take their own dtype.
    DType input_dtype() const { return m_param_dtype == DType::f64 ? DType::f64 : DType::f32; }
    virtual bool accepts_input_dtype(DType t) const { return t == input_dtype(); }

    virtual std::string name() const = 0;  // the canonical otype
    virtual json hyperparams() const = 0;  // round-trips through the module's factory
    // Fills n_params() fp32 values on the host with the module's initialisation for this seed
    // (a Pcg32 seeded with it, drawn in parameter order, as tcnn does).
    void init_params(uint64_t seed, float* params_fp32) const {
        Pcg32 rng(seed);
        init_params(rng, params_fp32);
    }
    virtual void init_params(Pcg32& rng, float* params_fp32) const = 0;
    // Devices this module can run on (for a clear error before any work is done).
    virtual bool supports_device(Device d) const { return true; }
    virtual bool supports_backward_backward() const { return false; }
    // Why backward_backward_input does not run on device d (a module may have it on one backend only),
    // or "" where it does. The public method asks before any work, so a composed module never stops
    // halfway; composed modules pass on their parts' reasons.
    virtual std::string backward_backward_refusal(Device d) const;
    bool supports_backward_backward_on(Device d) const { return backward_backward_refusal(d).empty(); }
    // A short description for error messages: "HashGrid encoding (3 -> 32, float16)".
    std::string describe() const;

    void inference(const Stream& stream, ConstView input, View output, const void* params) const;
    std::unique_ptr<Context> forward(const Stream& stream, ConstView input, View output, const void* params,
                                     bool prepare_input_gradients) const;
    // dL_dinput (optional, dtype of the input) is always overwritten; dL_dparams (optional, param
    // dtype, n_params() values) is overwritten or accumulated into according to `mode`.
    void backward(const Stream& stream, const Context& ctx, ConstView input, ConstView output, ConstView dL_doutput,
                  View* dL_dinput, void* dL_dparams, const void* params, GradMode mode) const;
    // Second-order pass for a scalar L' that depends on dL_dinput (e.g. an eikonal loss):
    // given dL'/d(dL_dinput) [rows, n_in], computes dL'/d(dL_doutput) [rows, n_out] (optional),
    // dL'/dparams (optional, mode as above) and dL'/dinput (optional, overwritten).
    void backward_backward_input(const Stream& stream, const Context& ctx, ConstView input, ConstView dL_ddLdinput,
                                 ConstView dL_doutput, View* dL_ddLdoutput, View* dL_dinput, void* dL_dparams,
                                 const void* params, GradMode mode) const;

protected:
    Module(uint32_t n_input_dims, uint32_t n_output_dims, size_t n_params, DType param_dtype, DType output_dtype,
           size_t n_matrix_params = 0)
        : m_n_input_dims(n_input_dims), m_n_output_dims(n_output_dims), m_n_params(n_params),
          m_n_matrix_params(n_matrix_params), m_param_dtype(param_dtype), m_output_dtype(output_dtype) {}
    // For modules whose sizes are only known at the end of their constructor.
    void set_sizes(uint32_t n_in, uint32_t n_out, size_t n_params, size_t n_matrix_params = 0) {
        m_n_input_dims = n_in;
        m_n_output_dims = n_out;
        m_n_params = n_params;
        m_n_matrix_params = n_matrix_params;
    }
    void set_output_dtype(DType t) { m_output_dtype = t; }

    // Called with validated arguments and rows > 0. By default each pass runs the half for the input's
    // device below; modules made of other modules (which dispatch through them) override these instead.
    virtual void inference_impl(const Stream& stream, ConstView input, View output, const void* params) const;
    virtual std::unique_ptr<Context> forward_impl(const Stream& stream, ConstView input, View output,
                                                  const void* params, bool prepare_input_gradients) const;
    virtual void backward_impl(const Stream& stream, const Context& ctx, ConstView input, ConstView output,
                               ConstView dL_doutput, View* dL_dinput, void* dL_dparams, const void* params,
                               GradMode mode) const;
    virtual void backward_backward_input_impl(const Stream& stream, const Context& ctx, ConstView input,
                                              ConstView dL_ddLdinput, ConstView dL_doutput, View* dL_ddLdoutput,
                                              View* dL_dinput, void* dL_dparams, const void* params,
                                              GradMode mode) const;

    // The passes per device. The CPU halves are the reference every module has; the GPU halves are
    // overridden in builds with a GPU backend (the public methods refuse GPU views in the others). A
    // half that a module lacks throws UnsupportedError naming it. Inference defaults to the forward.
    virtual void inference_cpu(const Stream& stream, ConstView input, View output, const void* params) const;
    virtual std::unique_ptr<Context> forward_cpu(const Stream& stream, ConstView input, View output,
                                                 const void* params, bool prepare_input_gradients) const;
    virtual void backward_cpu(const Stream& stream, const Context& ctx, ConstView input, ConstView output,
                              ConstView dL_doutput, View* dL_dinput, void* dL_dparams, const void* params,
                              GradMode mode) const;
    virtual void backward_backward_input_cpu(const Stream& stream, const Context& ctx, ConstView input,
                                             ConstView dL_ddLdinput, ConstView dL_doutput, View* dL_ddLdoutput,
                                             View* dL_dinput, void* dL_dparams, const void* params,
                                             GradMode mode) const;
    virtual void inference_gpu(const Stream& stream, ConstView input, View output, const void* params) const;
    virtual std::unique_ptr<Context> forward_gpu(const Stream& stream, ConstView input, View output,
                                                 const void* params, bool prepare_input_gradients) const;
    virtual void backward_gpu(const Stream& stream, const Context& ctx, ConstView input, ConstView output,
                              ConstView dL_doutput, View* dL_dinput, void* dL_dparams, const void* params,
                              GradMode mode) const;
    virtual void backward_backward_input_gpu(const Stream& stream, const Context& ctx, ConstView input,
                                             ConstView dL_ddLdinput, ConstView dL_doutput, View* dL_ddLdoutput,
                                             View* dL_dinput, void* dL_dparams, const void* params,
                                             GradMode mode) const;

    // The checks every public pass makes of its stream, input, output (optional) and params.
    void check_io(const char* method, const Stream& stream, ConstView input, const ConstView* output,
                  const void* params) const;
    // The checks the public passes make of each further view (dL/doutput, dL/dinput, ...), for a
    // subclass's own entry points: rows x cols, stride, dtype, on `device`, not null and (GPU) memory of
    // that device. Errors name this module, `method` and `arg`.
    void check_arg(const char* method, const char* arg, ConstView v, int64_t rows, int64_t cols, DType dtype,
                   Device device) const;
    // The backward passes of an empty batch: it contributes nothing, but overwrite mode still means
    // "the gradient is zero".
    void zero_params_gradient(const Stream& stream, Device device, void* dL_dparams, GradMode mode) const;

private:
    uint32_t m_n_input_dims, m_n_output_dims;
    size_t m_n_params, m_n_matrix_params;
    DType m_param_dtype, m_output_dtype;
};

// An empty context for modules that need none.
struct EmptyContext : Context {};

// Throws UnsupportedError naming the module when a GPU method is called in a build without a GPU
// backend; used by modules' device dispatch.
[[noreturn]] void throw_no_gpu_backend(const std::string& what);

}  // namespace tnn
