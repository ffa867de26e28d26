// The CPU reference shared by the parameter-free encodings whose outputs for input dimension d are
// W functions of x_d alone (Identity, Frequency, TriangleWave, OneBlob): y[d*W + j] = f_j(x_d).
// Forward, backward and the second-order pass follow from f, f' and f'':
//   dL/dx_d = sum_j g[d*W+j] f_j'(x_d)
//   for L' with v = dL'/d(dL/dx):  dL'/dg[d*W+j] = v_d f_j'(x_d),  dL'/dx_d = v_d sum_j g[d*W+j] f_j''(x_d)
#pragma once

#include "core/parallel.h"
#include "encodings/encoding_registry.h"
#include "encodings/encodings_gpu.h"

#include <vector>

namespace tnn {

// LANES describes one encoding:
//   uint32_t width() const;                                       W outputs per input dimension
//   template <typename A> void eval(A x, A* f, A* df, A* d2f) const;  the W lanes at x (null = skip)
//   static constexpr const char* kName;  json hyperparams() const;
//   PerDimLanesGpu gpu_lanes() const;                             the same lanes for the GPU kernels
template <typename LANES> class PerDimEncoding final : public Encoding {
public:
    PerDimEncoding(uint32_t n_dims, DType dtype, LANES lanes)
        : Encoding(n_dims, n_dims * lanes.width(), 0, dtype, dtype), m_lanes(lanes) {}

    std::string name() const override { return LANES::kName; }
    json hyperparams() const override { return m_lanes.hyperparams(); }
    void init_params(Pcg32&, float*) const override {}
    // GPU kernels (per_dim_encoding.cu) exist for fp32, fp16 and bf16.
    bool supports_device(Device d) const override { return d.is_cpu() || param_dtype() != DType::f64; }
    bool supports_backward_backward() const override { return true; }
    const LANES& lanes() const { return m_lanes; }

private:
    // Rows per parallel chunk: each row is independent, so the chunking never changes a result.
    static constexpr int64_t kGrain = 256;

    template <typename F> void with_type(F&& f) const { dispatch_dtype(param_dtype(), f); }

#ifdef TNN_WITH_GPU
    std::unique_ptr<Context> forward_gpu(const Stream& stream, ConstView in, View out, const void*,
                                         bool) const override {
        per_dim_gpu::forward(m_lanes.gpu_lanes(), stream, in, out);
        return std::make_unique<EmptyContext>();
    }

    void backward_gpu(const Stream& stream, const Context&, ConstView in, ConstView, ConstView dL_dout, View* dL_din,
                      void*, const void*, GradMode) const override {
        if (dL_din) per_dim_gpu::backward(m_lanes.gpu_lanes(), stream, in, dL_dout, *dL_din);
    }

    void backward_backward_input_gpu(const Stream& stream, const Context&, ConstView in, ConstView dL_ddLdin,
                                     ConstView dL_dout, View* dL_ddLdout, View* dL_din, void*, const void*,
                                     GradMode) const override {
        if (dL_ddLdout || dL_din)
            per_dim_gpu::backward_backward_input(m_lanes.gpu_lanes(), stream, in, dL_ddLdin, dL_dout, dL_ddLdout,
                                                 dL_din);
    }
#endif  // TNN_WITH_GPU

    std::unique_ptr<Context> forward_cpu(const Stream&, ConstView in, View out, const void*, bool) const override {
        with_type([&](auto t) {
            using T = decltype(t);
            using A = acc_t<T>;
            const uint32_t W = m_lanes.width();
            parallel_for(in.rows, kGrain, [&](int64_t r0, int64_t r1) {
                std::vector<A> f(W);
                for (int64_t r = r0; r < r1; ++r)
                    for (uint32_t d = 0; d < n_input_dims(); ++d) {
                        m_lanes.eval(load_input<A>(in, r, d), f.data(), static_cast<A*>(nullptr),
                                     static_cast<A*>(nullptr));
                        for (uint32_t j = 0; j < W; ++j) store_output<T>(out, r, d * W + j, f[j]);
                    }
            });
        });
        return std::make_unique<EmptyContext>();
    }

    void backward_cpu(const Stream&, const Context&, ConstView in, ConstView, ConstView dL_dout, View* dL_din, void*,
                      const void*, GradMode) const override {
        if (!dL_din) return;
        with_type([&](auto t) {
            using T = decltype(t);
            using A = acc_t<T>;
            const uint32_t W = m_lanes.width();
            parallel_for(in.rows, kGrain, [&](int64_t r0, int64_t r1) {
                std::vector<A> df(W);
                for (int64_t r = r0; r < r1; ++r)
                    for (uint32_t d = 0; d < n_input_dims(); ++d) {
                        m_lanes.eval(load_input<A>(in, r, d), static_cast<A*>(nullptr), df.data(),
                                     static_cast<A*>(nullptr));
                        A g = A(0);
                        for (uint32_t j = 0; j < W; ++j) g += load_as<T>(dL_dout, r, d * W + j) * df[j];
                        store_input(*dL_din, r, d, g);
                    }
            });
        });
    }

    void backward_backward_input_cpu(const Stream&, const Context&, ConstView in, ConstView dL_ddLdin,
                                     ConstView dL_dout, View* dL_ddLdout, View* dL_din, void*, const void*,
                                     GradMode) const override {
        if (!dL_ddLdout && !dL_din) return;
        with_type([&](auto t) {
            using T = decltype(t);
            using A = acc_t<T>;
            const uint32_t W = m_lanes.width();
            parallel_for(in.rows, kGrain, [&](int64_t r0, int64_t r1) {
                std::vector<A> df(W), d2f(W);
                for (int64_t r = r0; r < r1; ++r)
                    for (uint32_t d = 0; d < n_input_dims(); ++d) {
                        m_lanes.eval(load_input<A>(in, r, d), static_cast<A*>(nullptr), df.data(), d2f.data());
                        const A v = load_input<A>(dL_ddLdin, r, d);
                        if (dL_ddLdout)
                            for (uint32_t j = 0; j < W; ++j) store_output<T>(*dL_ddLdout, r, d * W + j, v * df[j]);
                        if (dL_din) {
                            A s = A(0);
                            for (uint32_t j = 0; j < W; ++j) s += load_as<T>(dL_dout, r, d * W + j) * d2f[j];
                            store_input(*dL_din, r, d, v * s);
                        }
                    }
            });
        });
    }

    LANES m_lanes;
};

}  // namespace tnn
