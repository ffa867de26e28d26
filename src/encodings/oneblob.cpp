// OneBlob encoding (Mueller et al. 2019, tcnn's OneBlobEncoding): per input dimension, n_bins bins
// holding the mass of a quartic blob centred at x that falls into each bin, wrapping around [0, 1].
// Lane maths in encoding_math.h (shared with the GPU kernels); the CPU reference is PerDimEncoding.
#include "encodings/encoding_math.h"
#include "encodings/per_dim_encoding.h"

namespace tnn {

namespace {

struct OneBlobLanes {
    static constexpr const char* kName = "OneBlob";
    uint32_t n_bins, log2_bins;

    uint32_t width() const { return n_bins; }
    json hyperparams() const { return {{"otype", kName}, {"n_bins", n_bins}}; }
    PerDimLanesGpu gpu_lanes() const {
        PerDimLanesGpu g;
        g.kind = PerDimLanesGpu::Kind::OneBlob;
        g.width = width();
        g.log2_bins = log2_bins;
        return g;
    }
    template <typename A> void eval(A x, A* f, A* df, A* d2f) const {
        for (uint32_t k = 0; k < n_bins; ++k)
            oneblob_bin(x, k, log2_bins, f ? f + k : nullptr, df ? df + k : nullptr, d2f ? d2f + k : nullptr);
    }
};

}  // namespace

void register_oneblob_encoding(Registry<EncodingFactory>& r) {
    r.add("OneBlob", [](uint32_t n_dims, DType dtype, ConfigReader& cfg) {
        const uint32_t n_bins = cfg.get_uint("n_bins", 16, 1, kMaxOneBlobBins);
        if ((n_bins & (n_bins - 1)) != 0)
            cfg.fail("n_bins", msg("must be a power of two (1, 2, 4, ..., ", kMaxOneBlobBins, "), got ", n_bins));
        uint32_t log2_bins = 0;
        while ((1u << log2_bins) < n_bins) ++log2_bins;
        return std::unique_ptr<Encoding>(
            new PerDimEncoding<OneBlobLanes>(n_dims, dtype, OneBlobLanes{n_bins, log2_bins}));
    });
}

}  // namespace tnn
