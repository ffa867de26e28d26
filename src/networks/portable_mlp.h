// PortableMLP: the readable reference MLP. Its CPU implementation (MlpReference<T>) is the oracle
// every other network backend is tested against, and the CPU backend of every network otype.
#pragma once

#include <tnn/network.h>

#include <memory>
#include <string>
#include <vector>

namespace tnn {

// Where a backend's GPU kernels round beyond what every backend rounds (below), so that its CPU
// backend computes what they compute.
struct MlpRounding {
    // The hidden layers' f'(z) is stored in T before it multiplies dL/da (FullyFusedMLP keeps it in a
    // 16-bit stash), for the activations whose derivative is not read off the stored activation.
    bool derivative_in_storage = false;
};

// The CPU reference of a tcnn MLP with storage type T (float, double, half, bfloat16), and the CPU
// backend of every network otype. It rounds where the GPU kernels round: the input (padding
// included) to T; each hidden activation to T; the output layer's f(z) straight to the output dtype;
// each dz to T (dz = round_T(dL/da * f'(z)), dL/da and every other sum accumulated in acc_t<T>);
// dL/dinput straight to the input dtype; dL/dparams once, from the acc_t<T> sum (plus the old value
// when accumulating), to T. The derivative of None / ReLU / LeakyReLU hidden layers is read off the
// stored activation (a > 0), as the kernels do; the others' from the acc_t<T> pre-activation.
// The second-order pass (backward_backward_input, maths in portable_mlp.cpp) rounds alike: the probe
// dL'/d(dL/dinput) to T (it is a GEMM operand), each tangent activation adot = round_T(zdot * f'(z))
// (zdot accumulated in acc_t<T>), each second-order dz to T, dL'/d(dL/doutput) straight to the output
// dtype, dL'/dinput and dL'/dparams as dL/dinput and dL/dparams. With derivative_in_storage, the
// hidden layers' f''(z) is rounded to T like f'(z).
template <typename T> class MlpReference {
public:
    using A = acc_t<T>;
    static constexpr int64_t kBlock = 64;  // rows per block; activations are stored [block][feature][row]

    struct Ctx : Context {
        int64_t rows = 0;
        std::vector<A> input;                  // padded input, rounded to T
        std::vector<std::vector<A>> pre, post;  // per layer: pre-activation z, post-activation a
    };

    explicit MlpReference(const MlpLayout& layout, MlpRounding rounding = {}) : m_l(layout), m_rounding(rounding) {}
    std::unique_ptr<Ctx> forward(ConstView input, View output, const T* params, bool keep_context) const;
    void backward(const Ctx& ctx, ConstView dL_doutput, View* dL_dinput, T* dL_dparams, const T* params,
                  GradMode mode) const;
    // For a scalar L'(dL/dinput) with probe v = dL'/d(dL/dinput): dL'/d(dL/doutput), dL'/dparams (mode as
    // in backward) and dL'/dinput; each optional.
    void backward_backward_input(const Ctx& ctx, ConstView dL_ddLdinput, ConstView dL_doutput, View* dL_ddLdoutput,
                                 View* dL_dinput, T* dL_dparams, const T* params, GradMode mode) const;

private:
    const MlpLayout& m_l;
    MlpRounding m_rounding;
};

// The CPU backend of a network module: MlpReference<T> for the module's dtype (the parameters,
// gradients and context are of that type) with the rounding rules of its GPU kernels. Arguments are
// validated by the module; rows > 0. `who` names the module in errors (a context that does not come
// from a CPU forward of this network, or of another batch size).
namespace mlp_cpu {
std::unique_ptr<Context> forward(const MlpLayout& layout, DType dtype, MlpRounding rounding, ConstView input,
                                 View output, const void* params, bool keep_context);
void backward(const MlpLayout& layout, DType dtype, MlpRounding rounding, const std::string& who, const Context& ctx,
              ConstView input, ConstView dL_doutput, View* dL_dinput, void* dL_dparams, const void* params,
              GradMode mode);
void backward_backward_input(const MlpLayout& layout, DType dtype, MlpRounding rounding, const std::string& who,
                             const Context& ctx, ConstView input, ConstView dL_ddLdinput, ConstView dL_doutput,
                             View* dL_ddLdoutput, View* dL_dinput, void* dL_dparams, const void* params,
                             GradMode mode);
}  // namespace mlp_cpu

// The CPU half every MLP backend shares: the mlp_cpu passes with the backend's rounding rules.
class CpuReferenceNetwork : public Network {
protected:
    CpuReferenceNetwork(const MlpLayout& layout, DType dtype, DType output_dtype, MlpRounding rounding)
        : Network(layout, dtype, output_dtype), m_cpu_rounding(rounding) {}

    void inference_cpu(const Stream&, ConstView input, View output, const void* params) const override {
        mlp_cpu::forward(m_layout, param_dtype(), m_cpu_rounding, input, output, params, false);
    }
    std::unique_ptr<Context> forward_cpu(const Stream&, ConstView input, View output, const void* params,
                                         bool) const override {
        return mlp_cpu::forward(m_layout, param_dtype(), m_cpu_rounding, input, output, params, true);
    }
    void backward_cpu(const Stream&, const Context& ctx, ConstView input, ConstView, ConstView dL_doutput,
                      View* dL_dinput, void* dL_dparams, const void* params, GradMode mode) const override {
        mlp_cpu::backward(m_layout, param_dtype(), m_cpu_rounding, describe(), ctx, input, dL_doutput, dL_dinput,
                          dL_dparams, params, mode);
    }
    void backward_backward_input_cpu(const Stream&, const Context& ctx, ConstView input, ConstView dL_ddLdinput,
                                     ConstView dL_doutput, View* dL_ddLdoutput, View* dL_dinput, void* dL_dparams,
                                     const void* params, GradMode mode) const override {
        mlp_cpu::backward_backward_input(m_layout, param_dtype(), m_cpu_rounding, describe(), ctx, input, dL_ddLdinput,
                                         dL_doutput, dL_ddLdoutput, dL_dinput, dL_dparams, params, mode);
    }

private:
    MlpRounding m_cpu_rounding;
};

#ifdef TNN_WITH_GPU
// The GPU implementation (portable_mlp.cu): fp32 only, the same function and layout as
// MlpReference<float>. Arguments are validated by the module; rows > 0.
namespace portable_mlp_gpu {
void inference(const MlpLayout& layout, const Stream& stream, ConstView input, View output, const float* params);
std::unique_ptr<Context> forward(const MlpLayout& layout, const Stream& stream, ConstView input, View output,
                                 const float* params);
void backward(const MlpLayout& layout, const Stream& stream, const Context& ctx, ConstView input, ConstView dL_doutput,
              View* dL_dinput, float* dL_dparams, const float* params, GradMode mode);
void backward_backward_input(const MlpLayout& layout, const Stream& stream, const Context& ctx, ConstView input,
                             ConstView dL_ddLdinput, ConstView dL_doutput, View* dL_ddLdoutput, View* dL_dinput,
                             float* dL_dparams, const float* params, GradMode mode);
}  // namespace portable_mlp_gpu
#endif  // TNN_WITH_GPU

}  // namespace tnn
