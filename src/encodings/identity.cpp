// Identity encoding: y = scale * x + offset, per dimension (tcnn's IdentityEncoding). CPU reference
// here; GPU kernels in identity.cu.
#include "encodings/encoding_registry.h"

namespace tnn {

namespace {

class IdentityEncoding final : public Encoding {
public:
    IdentityEncoding(uint32_t n_dims, DType dtype, float scale, float offset)
        : Encoding(n_dims, n_dims, 0, dtype, dtype), m_scale(scale), m_offset(offset) {}

    std::string name() const override { return "Identity"; }
    json hyperparams() const override { return {{"otype", "Identity"}, {"scale", m_scale}, {"offset", m_offset}}; }
    void init_params(Pcg32&, float*) const override {}
    bool supports_device(Device d) const override { return d.is_cpu(); }
    bool supports_backward_backward() const override { return true; }

private:
    template <typename F> void with_type(F&& f) const { dispatch_dtype(param_dtype(), f); }

    std::unique_ptr<Context> forward_impl(const Stream&, ConstView in, View out, const void*, bool) const override {
        with_type([&](auto t) {
            using T = decltype(t);
            using A = acc_t<T>;
            for (int64_t r = 0; r < in.rows; ++r)
                for (int64_t c = 0; c < in.cols; ++c)
                    store_output<T>(out, r, c, static_cast<A>(m_scale) * load_input<A>(in, r, c) + static_cast<A>(m_offset));
        });
        return std::make_unique<EmptyContext>();
    }

    // dL/dx = scale * dL/dy
    void backward_impl(const Stream&, const Context&, ConstView in, ConstView, ConstView dL_dout, View* dL_din, void*,
                       const void*, GradMode) const override {
        if (!dL_din) return;
        with_type([&](auto t) {
            using T = decltype(t);
            using A = acc_t<T>;
            for (int64_t r = 0; r < in.rows; ++r)
                for (int64_t c = 0; c < in.cols; ++c) {
                    const A g = static_cast<A>(m_scale) * static_cast<A>(dL_dout.at<T>(r, c));
                    if (dL_din->dtype == DType::f64) dL_din->at<double>(r, c) = static_cast<double>(g);
                    else dL_din->at<float>(r, c) = static_cast<float>(g);
                }
        });
    }

    // dL/dx is linear in dL/dy: d(dL/dx)/d(dL/dy) = scale, and it does not depend on x.
    void backward_backward_input_impl(const Stream& stream, const Context&, ConstView in, ConstView dL_ddLdin,
                                      ConstView, View* dL_ddLdout, View* dL_din, void*, const void*,
                                      GradMode) const override {
        if (dL_din) fill(stream, *dL_din, 0.0);
        if (!dL_ddLdout) return;
        with_type([&](auto t) {
            using T = decltype(t);
            using A = acc_t<T>;
            for (int64_t r = 0; r < in.rows; ++r)
                for (int64_t c = 0; c < in.cols; ++c)
                    store_output<T>(*dL_ddLdout, r, c, static_cast<A>(m_scale) * load_input<A>(dL_ddLdin, r, c));
        });
    }

    float m_scale, m_offset;
};

}  // namespace

void register_identity_encoding(Registry<EncodingFactory>& r) {
    r.add("Identity", [](uint32_t n_dims, DType dtype, ConfigReader& cfg) {
        const float scale = static_cast<float>(cfg.get_float("scale", 1.0));
        const float offset = static_cast<float>(cfg.get_float("offset", 0.0));
        return std::unique_ptr<Encoding>(new IdentityEncoding(n_dims, dtype, scale, offset));
    });
}

}  // namespace tnn
