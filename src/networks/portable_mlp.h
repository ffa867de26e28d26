// PortableMLP: the readable reference MLP. Its CPU implementation (mlp_reference<T>) is the oracle
// every other network backend is tested against.
#pragma once

#include <tnn/network.h>

namespace tnn {

// The CPU reference of a tcnn MLP with storage type T (float, double, half, bfloat16): activations
// are rounded to T between layers and the backward pass rounds each layer's gradient to T, as a
// naive kernel in that precision would; all sums accumulate in acc_t<T>.
template <typename T> class MlpReference {
public:
    using A = acc_t<T>;
    static constexpr int64_t kBlock = 64;  // rows per block; activations are stored [block][feature][row]

    struct Ctx : Context {
        int64_t rows = 0;
        std::vector<A> input;                  // padded input, rounded to T
        std::vector<std::vector<A>> pre, post;  // per layer: pre-activation z, post-activation a
    };

    explicit MlpReference(const MlpLayout& layout) : m_l(layout) {}
    std::unique_ptr<Ctx> forward(ConstView input, View output, const T* params, bool keep_context) const;
    void backward(const Ctx& ctx, ConstView dL_doutput, View* dL_dinput, T* dL_dparams, const T* params,
                  GradMode mode) const;

private:
    const MlpLayout& m_l;
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
}  // namespace portable_mlp_gpu
#endif  // TNN_WITH_GPU

}  // namespace tnn
