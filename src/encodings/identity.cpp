// Identity encoding: y = scale * x + offset, per dimension (tcnn's IdentityEncoding). CPU reference
// through PerDimEncoding (the lane maths is one multiply-add, so the GPU kernels need no header).
#include "encodings/per_dim_encoding.h"

namespace tnn {

namespace {

struct IdentityLanes {
    static constexpr const char* kName = "Identity";
    float scale, offset;

    uint32_t width() const { return 1; }
    json hyperparams() const { return {{"otype", kName}, {"scale", scale}, {"offset", offset}}; }
    PerDimLanesGpu gpu_lanes() const {
        PerDimLanesGpu g;
        g.kind = PerDimLanesGpu::Kind::Identity;
        g.scale = scale;
        g.offset = offset;
        return g;
    }
    template <typename A> void eval(A x, A* f, A* df, A* d2f) const {
        if (f) *f = static_cast<A>(scale) * x + static_cast<A>(offset);
        if (df) *df = static_cast<A>(scale);
        if (d2f) *d2f = A(0);
    }
};

}  // namespace

void register_identity_encoding(Registry<EncodingFactory>& r) {
    r.add("Identity", [](uint32_t n_dims, DType dtype, ConfigReader& cfg) {
        IdentityLanes lanes;
        lanes.scale = static_cast<float>(cfg.get_float("scale", 1.0));
        lanes.offset = static_cast<float>(cfg.get_float("offset", 0.0));
        return std::unique_ptr<Encoding>(new PerDimEncoding<IdentityLanes>(n_dims, dtype, lanes));
    });
}

}  // namespace tnn
