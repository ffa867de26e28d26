// How encodings plug into create_encoding (one factory per otype, listed in encoding.cpp), and the
// small helpers the CPU references share: typed loads and stores, tcnn's output alignment rule.
#pragma once

#include <tnn/encoding.h>

#include <algorithm>
#include <cmath>
#include <functional>

namespace tnn {

// Builds an encoding of n_dims inputs with parameter/output dtype `dtype`; reads its keys from `r`
// (the reader's finish() is called by create_encoding).
using EncodingFactory = std::function<std::unique_ptr<Encoding>(uint32_t n_dims, DType dtype, ConfigReader& r)>;

const Registry<EncodingFactory>& encoding_registry();

// One registration function per encoding file.
void register_identity_encoding(Registry<EncodingFactory>& r);
void register_frequency_encoding(Registry<EncodingFactory>& r);
void register_triangle_wave_encoding(Registry<EncodingFactory>& r);
void register_oneblob_encoding(Registry<EncodingFactory>& r);
void register_spherical_harmonics_encoding(Registry<EncodingFactory>& r);
void register_empty_encoding(Registry<EncodingFactory>& r);
void register_grid_encodings(Registry<EncodingFactory>& r);       // Grid, HashGrid, DenseGrid, TiledGrid
void register_composite_encodings(Registry<EncodingFactory>& r);  // Composite, NRC, OneBlobFrequency
void register_permuto_encoding(Registry<EncodingFactory>& r);     // Permuto

// Config limits of the per-dimension encodings, shared with the NRC preset that nests them.
// Frequency, TriangleWave: beyond 2^63 pi (the triangle phase: 2^64) the lanes of an fp32 input are
// noise; 64 frequencies is far past any useful value.
constexpr uint32_t kMaxFrequencies = 64;
// OneBlob: tcnn's kernels place one bin per lane of a power-of-two sub-warp; 2^16 bins is a generous cap.
constexpr uint32_t kMaxOneBlobBins = 1u << 16;

// A case-insensitive choice among `names` (see ConfigReader::get_choice) as the enum E whose
// values number those names in order.
template <typename E>
E get_enum_choice(ConfigReader& cfg, const char* key, const std::string& def, const std::vector<std::string>& names) {
    const std::string name = cfg.get_choice(key, def, names);
    return static_cast<E>(std::find(names.begin(), names.end(), name) - names.begin());
}

// tcnn's required_output_alignment: inside a concatenating Composite, each nested output starts at
// a multiple of the next encoding's alignment (the lanes in between are padding). Grids need their
// n_features_per_level, Composites the lcm over their nested encodings, every other encoding 1.
class AlignedOutput {
public:
    virtual ~AlignedOutput() = default;
    virtual uint32_t required_output_alignment() const = 0;
};
inline uint32_t required_output_alignment(const Encoding& e) {
    const auto* a = dynamic_cast<const AlignedOutput*>(&e);
    return a ? a->required_output_alignment() : 1u;
}

// tcnn's initialisation of hashed feature tables (grids, Permuto): generate_random_uniform on the GPU,
// 128-thread blocks with 4 values per thread. Thread i takes draws 4i..4i+3 of the stream for elements
// i, i + N, i + 2N, i + 3N (N the total thread count); each value is fma(r, upper - lower, lower). The
// stream then continues after n draws. Reproducing that order gives tcnn's values.
inline void tcnn_uniform_init(Pcg32& rng, uint64_t n, float lower, float upper, float* params) {
    const uint64_t n_threads = (((n + 3) / 4 + 127) / 128) * 128;
    Pcg32 draws = rng;
    for (uint64_t d = 0; d < 4 * n_threads; ++d) {
        const float r = draws.next_float();
        const uint64_t idx = d / 4 + n_threads * (d % 4);
        if (idx < n) params[idx] = std::fma(r, upper - lower, lower);
    }
    rng.advance(n);
}

// Converts the elements of an fp32/fp64 input view to acc type A (CPU reference helper).
template <typename A> inline A load_input(ConstView v, int64_t r, int64_t c) {
    return v.dtype == DType::f64 ? static_cast<A>(v.at<double>(r, c)) : static_cast<A>(v.at<float>(r, c));
}
// Stores into an fp32/fp64 view (input gradients).
template <typename A> inline void store_input(View v, int64_t r, int64_t c, A x) {
    if (v.dtype == DType::f64)
        v.at<double>(r, c) = static_cast<double>(x);
    else
        v.at<float>(r, c) = static_cast<float>(x);
}

// Loads an element of storage type T as its acc type.
template <typename T> inline acc_t<T> load_as(ConstView v, int64_t r, int64_t c) {
    return static_cast<acc_t<T>>(v.at<T>(r, c));
}

// Stores an acc-type value into a view of storage type T.
template <typename T, typename A> inline void store_output(View v, int64_t r, int64_t c, A x) { v.at<T>(r, c) = T(x); }
template <> inline void store_output<float, float>(View v, int64_t r, int64_t c, float x) { v.at<float>(r, c) = x; }
template <> inline void store_output<double, double>(View v, int64_t r, int64_t c, double x) { v.at<double>(r, c) = x; }

// Writes an acc-type parameter gradient into storage type T: overwrite, or add to what is there.
template <typename T, typename A> inline void write_param_gradient(T* dst, A g, GradMode mode) {
    *dst = mode == GradMode::accumulate ? T(static_cast<A>(*dst) + g) : T(g);
}

}  // namespace tnn
