// TriangleWave encoding (neural radiance caching, tcnn's TriangleWaveEncoding): per input dimension,
// n_frequencies triangle waves of halving periods, a cheap stand-in for Frequency. Lane maths in
// encoding_math.h (shared with the GPU kernels); the CPU reference is PerDimEncoding.
#include "encodings/encoding_math.h"
#include "encodings/per_dim_encoding.h"

namespace tnn {

namespace {

// Lane dim*n + k holds the triangle wave of frequency 2^k (see triangle_wave_lane).
struct TriangleWaveLanes {
    static constexpr const char* kName = "TriangleWave";
    uint32_t n_frequencies;

    uint32_t width() const { return n_frequencies; }
    json hyperparams() const { return {{"otype", kName}, {"n_frequencies", n_frequencies}}; }
    PerDimLanesGpu gpu_lanes() const {
        PerDimLanesGpu g;
        g.kind = PerDimLanesGpu::Kind::TriangleWave;
        g.width = width();
        return g;
    }
    template <typename A> void eval(A x, A* f, A* df, A* d2f) const {
        for (uint32_t k = 0; k < n_frequencies; ++k)
            triangle_wave_lane(x, k, f ? f + k : nullptr, df ? df + k : nullptr, d2f ? d2f + k : nullptr);
    }
};

}  // namespace

void register_triangle_wave_encoding(Registry<EncodingFactory>& r) {
    r.add("TriangleWave", [](uint32_t n_dims, DType dtype, ConfigReader& cfg) {
        TriangleWaveLanes lanes{cfg.get_uint("n_frequencies", 12, 0, kMaxFrequencies)};
        return std::unique_ptr<Encoding>(new PerDimEncoding<TriangleWaveLanes>(n_dims, dtype, lanes));
    });
}

}  // namespace tnn
