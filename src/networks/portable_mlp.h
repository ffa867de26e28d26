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

}  // namespace tnn
