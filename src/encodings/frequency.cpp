// Frequency encoding (NeRF's positional encoding, tcnn's FrequencyEncoding): per input dimension,
// sin and cos of 2^k pi x for k = 0..n_frequencies-1. Lane maths in encoding_math.h (shared with the
// GPU kernels); the CPU reference is PerDimEncoding.
#include "encodings/encoding_math.h"
#include "encodings/per_dim_encoding.h"

namespace tnn {

namespace {

// Lane dim*2n + 2k + s holds sin(2^k pi x_dim + s pi/2).
struct FrequencyLanes {
    static constexpr const char* kName = "Frequency";
    uint32_t n_frequencies;

    uint32_t width() const { return 2 * n_frequencies; }
    json hyperparams() const { return {{"otype", kName}, {"n_frequencies", n_frequencies}}; }
    PerDimLanesGpu gpu_lanes() const {
        PerDimLanesGpu g;
        g.kind = PerDimLanesGpu::Kind::Frequency;
        g.width = width();
        return g;
    }
    template <typename A> void eval(A x, A* f, A* df, A* d2f) const {
        for (uint32_t j = 0; j < width(); ++j)
            frequency_lane(x, j, f ? f + j : nullptr, df ? df + j : nullptr, d2f ? d2f + j : nullptr);
    }
};

}  // namespace

void register_frequency_encoding(Registry<EncodingFactory>& r) {
    r.add("Frequency", [](uint32_t n_dims, DType dtype, ConfigReader& cfg) {
        FrequencyLanes lanes{cfg.get_uint("n_frequencies", 12, 0, kMaxFrequencies)};
        return std::unique_ptr<Encoding>(new PerDimEncoding<FrequencyLanes>(n_dims, dtype, lanes));
    });
}

}  // namespace tnn
