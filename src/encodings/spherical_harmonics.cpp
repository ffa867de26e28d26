// SphericalHarmonics encoding (tcnn's SphericalHarmonicsEncoding): a 3D direction given in [0,1]^3
// is mapped by 2u - 1 to [-1,1]^3 and encoded by the degree^2 real spherical harmonics of sh_math.h
// (shared with the GPU kernels). CPU reference below: forward, backward and the second-order pass.
#include "core/parallel.h"
#include "encodings/encoding_registry.h"
#include "encodings/encodings_gpu.h"
#include "encodings/sh_math.h"

#include <vector>

namespace tnn {

namespace {

class SphericalHarmonicsEncoding final : public Encoding {
public:
    SphericalHarmonicsEncoding(uint32_t degree, DType dtype)
        : Encoding(3, degree * degree, 0, dtype, dtype), m_degree(degree) {}

    std::string name() const override { return "SphericalHarmonics"; }
    json hyperparams() const override { return {{"otype", "SphericalHarmonics"}, {"degree", m_degree}}; }
    void init_params(Pcg32&, float*) const override {}
    // GPU kernels (spherical_harmonics.cu) exist for fp32, fp16 and bf16.
    bool supports_device(Device d) const override { return d.is_cpu() || param_dtype() != DType::f64; }
    bool supports_backward_backward() const override { return true; }

private:
    static constexpr int64_t kGrain = 256;  // rows per parallel chunk; rows are independent

    template <typename F> void with_type(F&& f) const { dispatch_dtype(param_dtype(), f); }

    // u in [0,1]^3 -> the direction 2u - 1; every derivative in u picks up a factor 2 per order.
    template <typename A> static void direction(ConstView in, int64_t r, A* xyz) {
        for (int i = 0; i < 3; ++i) xyz[i] = load_input<A>(in, r, i) * A(2) - A(1);
    }

#ifdef TNN_WITH_GPU
    std::unique_ptr<Context> forward_gpu(const Stream& stream, ConstView in, View out, const void*,
                                         bool) const override {
        spherical_harmonics_gpu::forward(m_degree, stream, in, out);
        return std::make_unique<EmptyContext>();
    }

    void backward_gpu(const Stream& stream, const Context&, ConstView in, ConstView, ConstView dL_dout, View* dL_din,
                      void*, const void*, GradMode) const override {
        if (dL_din) spherical_harmonics_gpu::backward(m_degree, stream, in, dL_dout, *dL_din);
    }

    void backward_backward_input_gpu(const Stream& stream, const Context&, ConstView in, ConstView dL_ddLdin,
                                     ConstView dL_dout, View* dL_ddLdout, View* dL_din, void*, const void*,
                                     GradMode) const override {
        if (dL_ddLdout || dL_din)
            spherical_harmonics_gpu::backward_backward_input(m_degree, stream, in, dL_ddLdin, dL_dout, dL_ddLdout,
                                                             dL_din);
    }
#endif  // TNN_WITH_GPU

    std::unique_ptr<Context> forward_cpu(const Stream&, ConstView in, View out, const void*, bool) const override {
        with_type([&](auto t) {
            using T = decltype(t);
            using A = acc_t<T>;
            const uint32_t n = n_output_dims();
            parallel_for(in.rows, kGrain, [&](int64_t r0, int64_t r1) {
                std::vector<A> y(n);
                for (int64_t r = r0; r < r1; ++r) {
                    A p[3];
                    direction(in, r, p);
                    sh_basis(m_degree, p[0], p[1], p[2], y.data());
                    for (uint32_t k = 0; k < n; ++k) store_output<T>(out, r, k, y[k]);
                }
            });
        });
        return std::make_unique<EmptyContext>();
    }

    // dL/du_i = 2 sum_k g_k dY_k/dx_i
    void backward_cpu(const Stream&, const Context&, ConstView in, ConstView, ConstView dL_dout, View* dL_din, void*,
                      const void*, GradMode) const override {
        if (!dL_din) return;
        with_type([&](auto t) {
            using T = decltype(t);
            using A = acc_t<T>;
            const uint32_t n = n_output_dims();
            parallel_for(in.rows, kGrain, [&](int64_t r0, int64_t r1) {
                std::vector<A> y(n), grad(3 * n);
                for (int64_t r = r0; r < r1; ++r) {
                    A p[3];
                    direction(in, r, p);
                    sh_basis(m_degree, p[0], p[1], p[2], y.data(), grad.data());
                    for (uint32_t i = 0; i < 3; ++i) {
                        A s = A(0);
                        for (uint32_t k = 0; k < n; ++k) s += load_as<T>(dL_dout, r, k) * grad[i * n + k];
                        store_input(*dL_din, r, i, A(2) * s);
                    }
                }
            });
        });
    }

    // With v = dL'/d(dL/du): dL'/dg_k = 2 sum_i v_i dY_k/dx_i and dL'/du_h = 4 sum_k g_k sum_i v_i d2Y_k/(dx_i dx_h).
    void backward_backward_input_cpu(const Stream&, const Context&, ConstView in, ConstView dL_ddLdin,
                                     ConstView dL_dout, View* dL_ddLdout, View* dL_din, void*, const void*,
                                     GradMode) const override {
        if (!dL_ddLdout && !dL_din) return;
        // Hessian slot of (i, h) in sh_basis's [xx, yy, zz, xy, xz, yz] layout.
        static constexpr uint32_t kSlot[3][3] = {{0, 3, 4}, {3, 1, 5}, {4, 5, 2}};
        with_type([&](auto t) {
            using T = decltype(t);
            using A = acc_t<T>;
            const uint32_t n = n_output_dims();
            parallel_for(in.rows, kGrain, [&](int64_t r0, int64_t r1) {
                std::vector<A> y(n), grad(3 * n), hess(6 * n);
                for (int64_t r = r0; r < r1; ++r) {
                    A p[3], v[3];
                    direction(in, r, p);
                    for (int i = 0; i < 3; ++i) v[i] = load_input<A>(dL_ddLdin, r, i);
                    sh_basis(m_degree, p[0], p[1], p[2], y.data(), grad.data(), dL_din ? hess.data() : nullptr);
                    if (dL_ddLdout)
                        for (uint32_t k = 0; k < n; ++k)
                            store_output<T>(*dL_ddLdout, r, k,
                                            A(2) * (v[0] * grad[k] + v[1] * grad[n + k] + v[2] * grad[2 * n + k]));
                    if (dL_din)
                        for (uint32_t h = 0; h < 3; ++h) {
                            A s = A(0);
                            for (uint32_t k = 0; k < n; ++k) {
                                A hv = A(0);
                                for (uint32_t i = 0; i < 3; ++i) hv += v[i] * hess[kSlot[i][h] * n + k];
                                s += load_as<T>(dL_dout, r, k) * hv;
                            }
                            store_input(*dL_din, r, h, A(4) * s);
                        }
                }
            });
        });
    }

    uint32_t m_degree;
};

}  // namespace

void register_spherical_harmonics_encoding(Registry<EncodingFactory>& r) {
    r.add("SphericalHarmonics", [](uint32_t n_dims, DType dtype, ConfigReader& cfg) {
        const uint32_t degree = cfg.get_uint("degree", 4, 1, kShMaxDegree);
        if (n_dims != 3)
            throw ConfigError(msg("SphericalHarmonics encoding: encodes 3D directions, so it needs n_dims = 3 (got ",
                                  n_dims, "); in a Composite, give it \"n_dims_to_encode\": 3"));
        return std::unique_ptr<Encoding>(new SphericalHarmonicsEncoding(degree, dtype));
    });
}

}  // namespace tnn
