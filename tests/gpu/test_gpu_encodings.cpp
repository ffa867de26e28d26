// Every encoding on every backend against the CPU fp64 reference: one list of cases (grid types,
// interpolations, features per level, dimensions 1..7, hashes, set_max_level, stochastic and
// deterministic gradients, Permuto lattices of 1 to 32 dimensions, the parameter-free encodings,
// Composites; batch sizes 0, 1, odd) x {fp32, fp16, bf16}, comparing forward, inference, backward (dL/dx,
// dL/dparams) and the second-order pass. Then GPU-only properties: bitwise determinism of the ordered grid
// and Permuto gradients (run to run, across kernel variants, global switch), load paths, accumulate mode,
// strided views, graph capture, streams.
#include "gpu_test_util.h"

#include "encodings/grid_gpu.h"
#include "encodings/grid_math.h"
#include "encodings/permuto.h"
#include "encodings/permuto_math.h"
#include "grid_accuracy.h"

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <thread>
#include <tuple>

using namespace tnn;
using namespace tnn::test;

namespace {

// A grid inside a case's config: the test keeps inputs away from its cell borders, where the fp32
// positions of the GPU (and of tcnn) and the fp64 positions of the reference may fall in different
// cells (the output is continuous there, its x-derivative is not).
struct GridSpec {
    uint32_t first_dim, n_dims, n_levels, base_resolution;
    float per_level_scale;
};
// A TriangleWave: inputs stay away from its kinks (same reason).
struct TriangleSpec {
    uint32_t first_dim, n_dims, n_frequencies;
};
// A Permuto encoding: inputs stay away from the faces of their simplices (same reason), given its
// lattice (the levels' fp32 scales and shifts, which the fp64 reference shares).
struct PermutoSpec {
    uint32_t first_dim, n_dims;
    PermutoLevels levels;
};

struct EncodingCase {
    std::string name;
    uint32_t n_dims;
    json config;
    int64_t batch;
    std::vector<GridSpec> grids = {};
    std::vector<TriangleSpec> triangles = {};
    std::vector<PermutoSpec> permutos = {};
    // Sensitivity of the outputs to fp32 rounding of the input-dependent argument, in units of that
    // rounding (see error_model): grids 3 D (max_scale + 1), Frequency 2^n pi, ...
    double argument_terms = 2;
    // Intermediate results stored in the encoding's dtype along the longest chain (a Product composite
    // stores the nested outputs and the nested output gradients): each adds eps_dtype relative error.
    double dtype_roundings = 0;
    double lo = 0.0, hi = 1.0;
    float max_level = 1000.0f;  // set_max_level
    // Stochastic interpolation picks corners by comparing an fp32 sample with the fp32 weight: the
    // parameter gradient is compared with the CPU result in the same precision, not fp64.
    bool reference_is_naive = false;
};

std::ostream& operator<<(std::ostream& os, const EncodingCase& c) { return os << c.name; }

json grid_config(const char* otype, std::initializer_list<std::pair<const char*, json>> keys) {
    json j = {{"otype", otype}};
    for (const auto& [k, v] : keys) j[k] = v;
    return j;
}

// 3 D (S + 1): the fp32 position scale * x + 0.5 is off by up to eps (S + 1); each of the D weight
// factors moves by that times its slope (at most 1.5, smoothstep), and a corner weight has D factors.
double grid_argument_terms(uint32_t n_dims, uint32_t n_levels, uint32_t base, float per_level_scale) {
    const float s = grid::grid_scale(n_levels - 1, std::log2(per_level_scale), base);
    return 3.0 * n_dims * (static_cast<double>(std::max(s, 1.0f)) + 1.0);
}

// The fp32 weights of a Permuto level, off by the rounding of the elevated coordinates: x + shift (|.| <= 6)
// and its product with the scale s_i, then the elevation's d sums and one fma of terms up to
// E = 6 scale (1 + sum_i dim_factor(i)): (d + 3) eps E per coordinate. Two residuals over d + 1 move each
// weight, and the d + 1 weights move the output by 2 (d + 3) eps E max|V|; the residuals' own rounding
// (|r| <= d + 1), the 1/(d + 1) and the sums add about 4 (d + 1) eps.
double permuto_argument_terms(const PermutoLevels& L) {
    double factors = 1.0, scale = 0.0;
    for (uint32_t i = 0; i < L.n_dims; ++i) factors += permuto::dim_factor(i);
    for (float s : L.level_scale) scale = std::max(scale, std::fabs(static_cast<double>(s)));
    return 2.0 * (L.n_dims + 3) * 6.0 * scale * factors + 4.0 * (L.n_dims + 1);
}

EncodingCase permuto_case(std::string name, uint32_t n_dims, json config, int64_t batch) {
    EncodingCase c{std::move(name), n_dims, config, batch};
    const PermutoLevels L = permuto_levels(n_dims, config.value("n_levels", 16u), config.value("base_scale", 16.0f),
                                           config.value("per_level_scale", 2.0f), config.value("seed", 1337u));
    c.argument_terms = permuto_argument_terms(L);
    c.permutos = {{0, n_dims, L}};
    return c;
}

EncodingCase grid_case(std::string name, uint32_t n_dims, json config, int64_t batch) {
    const std::string type = config.value("type", std::string("Hash"));
    const uint32_t n_levels = config.value("n_levels", 16u), base = config.value("base_resolution", 16u);
    const bool dense = config["otype"] == "DenseGrid" || type == "Dense";
    const float default_scale =
        dense && n_levels > 1 ? std::exp(std::log(256.0f / static_cast<float>(base)) / static_cast<float>(n_levels - 1))
                              : (dense ? 1.0f : 2.0f);
    const float scale = config.value("per_level_scale", default_scale);
    EncodingCase c{std::move(name), n_dims, config, batch};
    c.grids = {{0, n_dims, n_levels, base, scale}};
    c.argument_terms = grid_argument_terms(n_dims, n_levels, base, scale);
    return c;
}

const std::vector<EncodingCase>& encoding_cases() {
    static const std::vector<EncodingCase> cases = [] {
        std::vector<EncodingCase> v;
        // ---- grids: types, interpolations, features per level, dimensions, hashes
        v.push_back(grid_case("hash3d_f2_linear", 3,
                              grid_config("HashGrid", {{"n_levels", 8}, {"log2_hashmap_size", 12},
                                                       {"base_resolution", 4}, {"per_level_scale", 1.5}}),
                              1000));
        v.push_back(grid_case("hash3d_f2_deterministic", 3,
                              grid_config("HashGrid", {{"n_levels", 8}, {"log2_hashmap_size", 12},
                                                       {"base_resolution", 4}, {"per_level_scale", 1.5},
                                                       {"deterministic", true}}),
                              1000));
        // Deterministic F = 2 grids whose levels are too large for shared memory: the global kernel's
        // x-pairs of adjacent entries as bulk reductions on NVIDIA GPUs (Variant::det_bulk), hashed and
        // dense levels, batches that end inside a warp.
        v.push_back(grid_case("hash3d_f2_deterministic_global", 3,
                              grid_config("HashGrid", {{"n_levels", 4}, {"log2_hashmap_size", 14},
                                                       {"base_resolution", 8}, {"per_level_scale", 2.0},
                                                       {"deterministic", true}}),
                              3001));
        v.push_back(grid_case("dense3d_f2_deterministic_global", 3,
                              grid_config("DenseGrid", {{"n_levels", 2}, {"base_resolution", 24},
                                                        {"per_level_scale", 1.5}, {"deterministic", true}}),
                              2001));
        v.push_back(grid_case("hash2d_f4_smoothstep", 2,
                              grid_config("HashGrid", {{"n_levels", 4}, {"n_features_per_level", 4},
                                                       {"log2_hashmap_size", 10}, {"base_resolution", 8},
                                                       {"interpolation", "Smoothstep"}}),
                              777));
        v.push_back(grid_case("dense3d_f1_linear", 3,
                              grid_config("DenseGrid", {{"n_levels", 3}, {"n_features_per_level", 1},
                                                        {"base_resolution", 4}}),
                              1000));
        v.push_back(grid_case("dense3d_f1_deterministic_smoothstep", 3,
                              grid_config("DenseGrid", {{"n_levels", 3}, {"n_features_per_level", 1},
                                                        {"base_resolution", 4}, {"interpolation", "Smoothstep"},
                                                        {"deterministic", true}}),
                              4097));
        v.push_back(grid_case("tiled2d_f8_nearest", 2,
                              grid_config("TiledGrid", {{"n_levels", 2}, {"n_features_per_level", 8},
                                                        {"base_resolution", 5}, {"interpolation", "Nearest"}}),
                              513));
        v.push_back(grid_case("tiled3d_f2_linear_batch7", 3,
                              grid_config("TiledGrid", {{"n_levels", 3}, {"base_resolution", 3}}), 7));
        v.push_back(grid_case("hash1d_f2_batch1", 1,
                              grid_config("HashGrid", {{"n_levels", 6}, {"log2_hashmap_size", 6}}), 1));
        v.push_back(grid_case("hash4d_f2", 4,
                              grid_config("HashGrid", {{"n_levels", 4}, {"log2_hashmap_size", 12},
                                                       {"base_resolution", 4}}),
                              1000));
        v.push_back(grid_case("hash5d_f1", 5,
                              grid_config("HashGrid", {{"n_levels", 2}, {"n_features_per_level", 1},
                                                       {"log2_hashmap_size", 8}, {"base_resolution", 2}}),
                              333));
        v.push_back(grid_case("hash6d_f2_deterministic", 6,
                              grid_config("HashGrid", {{"n_levels", 2}, {"log2_hashmap_size", 8},
                                                       {"base_resolution", 2}, {"deterministic", true}}),
                              333));
        v.push_back(grid_case("hash7d_f4", 7,
                              grid_config("HashGrid", {{"n_levels", 2}, {"n_features_per_level", 4},
                                                       {"log2_hashmap_size", 8}, {"base_resolution", 2}}),
                              200));
        v.push_back(grid_case("hash3d_f8_smoothstep_deterministic", 3,
                              grid_config("HashGrid", {{"n_levels", 3}, {"n_features_per_level", 8},
                                                       {"log2_hashmap_size", 9}, {"interpolation", "Smoothstep"},
                                                       {"deterministic", true}}),
                              1000));
        for (const char* hash : {"Prime", "ReversedPrime", "Rng", "BaseConvert"})
            v.push_back(grid_case(std::string("hash3d_") + hash, 3,
                                  grid_config("HashGrid", {{"n_levels", 3}, {"log2_hashmap_size", 8}, {"hash", hash}}),
                                  500));
        v.push_back(grid_case("hash2d_nearest_tiny_table", 2,
                              grid_config("HashGrid", {{"n_levels", 3}, {"log2_hashmap_size", 2},
                                                       {"interpolation", "Nearest"}}),
                              300));
        {
            EncodingCase c = grid_case("hash3d_max_level_half", 3,
                                       grid_config("HashGrid", {{"n_levels", 6}, {"log2_hashmap_size", 10},
                                                                {"base_resolution", 4}}),
                                       700);
            c.max_level = 0.5f;
            v.push_back(c);
        }
        {
            EncodingCase c = grid_case("hash3d_stochastic", 3,
                                       grid_config("HashGrid", {{"n_levels", 4}, {"log2_hashmap_size", 10},
                                                                {"stochastic_interpolation", true}}),
                                       1000);
            c.reference_is_naive = true;
            v.push_back(c);
        }
        v.push_back(grid_case("hash3d_empty_batch", 3, grid_config("HashGrid", {{"n_levels", 2}}), 0));
        // ---- Permuto: dimensions (1..8 compiled exactly, 12 and 32 by the any-dimension kernels), features
        // per level, max_input_grad_dims, deterministic gradients, coarse-to-fine, an empty batch
        auto permuto_config = [](std::initializer_list<std::pair<const char*, json>> keys) {
            json j = {{"otype", "Permuto"}, {"base_scale", 8.0}, {"per_level_scale", 1.5}};
            for (const auto& [k, val] : keys) j[k] = val;
            return j;
        };
        v.push_back(permuto_case("permuto3d_f2", 3, permuto_config({{"n_levels", 4}, {"log2_hashmap_size", 10}}), 1000));
        v.push_back(permuto_case("permuto3d_f2_deterministic", 3,
                                 permuto_config({{"n_levels", 4}, {"log2_hashmap_size", 10}, {"deterministic", true}}), 1000));
        v.push_back(permuto_case("permuto2d_f4", 2,
                                 permuto_config({{"n_levels", 3}, {"n_features_per_level", 4}, {"log2_hashmap_size", 8}}), 777));
        v.push_back(permuto_case("permuto1d_f1_batch1", 1,
                                 permuto_config({{"n_levels", 5}, {"n_features_per_level", 1}, {"log2_hashmap_size", 6}}), 1));
        v.push_back(permuto_case("permuto5d_f8_grad_dims3", 5,
                                 permuto_config({{"n_levels", 2}, {"n_features_per_level", 8}, {"log2_hashmap_size", 8},
                                          {"max_input_grad_dims", 3}}),
                                 333));
        v.push_back(permuto_case("permuto8d_f2_deterministic", 8,
                                 permuto_config({{"n_levels", 2}, {"log2_hashmap_size", 9}, {"deterministic", true}}), 257));
        v.push_back(permuto_case("permuto12d_f1", 12,
                                 permuto_config({{"n_levels", 2}, {"n_features_per_level", 1}, {"log2_hashmap_size", 8}}), 200));
        v.push_back(permuto_case("permuto32d_f2_deterministic", 32,
                                 permuto_config({{"n_levels", 2}, {"log2_hashmap_size", 8}, {"base_scale", 2.0},
                                          {"deterministic", true}}),
                                 64));
        {
            EncodingCase c = permuto_case("permuto3d_max_level_half", 3,
                                          permuto_config({{"n_levels", 6}, {"log2_hashmap_size", 8}, {"base_scale", 4.0}}), 700);
            c.max_level = 0.5f;
            v.push_back(c);
        }
        v.push_back(permuto_case("permuto3d_empty_batch", 3, permuto_config({{"n_levels", 2}, {"log2_hashmap_size", 6}}), 0));
        // ---- parameter-free encodings
        v.push_back({"identity", 3, {{"otype", "Identity"}, {"scale", 1.5}, {"offset", 0.25}}, 1000});
        {
            // sin(2^k pi x) with an fp32 argument off by eps 2^k pi |x|: 2^(n-1) pi for n frequencies.
            EncodingCase c{"frequency", 2, {{"otype", "Frequency"}, {"n_frequencies", 6}}, 1000};
            c.argument_terms = 32 * 3.1416 + 4;
            v.push_back(c);
        }
        {
            EncodingCase c{"triangle_wave", 3, {{"otype", "TriangleWave"}, {"n_frequencies", 5}}, 777};
            c.triangles = {{0, 3, 5}};
            c.argument_terms = 32 + 4;
            v.push_back(c);
        }
        {
            // The blob's polynomial in u = n t: relative rounding of about 8 operations, times n.
            EncodingCase c{"oneblob", 2, {{"otype", "OneBlob"}, {"n_bins", 8}}, 1000};
            c.lo = -0.3;
            c.hi = 1.3;
            c.argument_terms = 8 * 8;
            v.push_back(c);
        }
        for (uint32_t degree : {1u, 4u, 8u}) {
            // Recurrences over l and m: each basis function is a product/sum chain of about 4 degree^2 roundings.
            EncodingCase c{msg("sh", degree), 3, {{"otype", "SphericalHarmonics"}, {"degree", degree}}, 333};
            c.argument_terms = 4.0 * degree * degree;
            v.push_back(c);
        }
        v.push_back({"empty", 2, {{"otype", "Empty"}}, 100});
        // ---- composites
        {
            EncodingCase c{"composite_concat",
                           5,
                           {{"otype", "Composite"},
                            {"nested",
                             {{{"otype", "SphericalHarmonics"}, {"degree", 3}, {"n_dims_to_encode", 3}},
                              {{"otype", "Frequency"}, {"n_frequencies", 3}, {"n_dims_to_encode", 2},
                               {"dims_to_encode_begin", 1}},
                              {{"otype", "HashGrid"}, {"n_dims_to_encode", 2}, {"dims_to_encode_begin", 3},
                               {"n_levels", 2}, {"base_resolution", 3}, {"log2_hashmap_size", 4},
                               {"interpolation", "Smoothstep"}}}}},
                           1000};
            c.grids = {{3, 2, 2, 3, 2.0f}};
            c.argument_terms = std::max(grid_argument_terms(2, 2, 3, 2.0f), 8 * 3.1416);
            v.push_back(c);
        }
        {
            EncodingCase c{"composite_sum",
                           3,
                           {{"otype", "Composite"},
                            {"reduction", "Sum"},
                            {"nested",
                             {{{"otype", "Frequency"}, {"n_frequencies", 2}, {"n_dims_to_encode", 1}},
                              {{"otype", "OneBlob"}, {"n_bins", 4}, {"n_dims_to_encode", 1}, {"dims_to_encode_begin", 2}},
                              {{"otype", "SphericalHarmonics"}, {"degree", 2}, {"n_dims_to_encode", 3},
                               {"dims_to_encode_begin", 0}}}}},
                           777};
            c.argument_terms = 32;
            v.push_back(c);
        }
        {
            EncodingCase c{"composite_product",
                           4,
                           {{"otype", "Composite"},
                            {"reduction", "Product"},
                            {"nested",
                             {{{"otype", "Frequency"}, {"n_frequencies", 1}, {"n_dims_to_encode", 1}},
                              {{"otype", "DenseGrid"}, {"n_dims_to_encode", 2}, {"n_levels", 1}, {"base_resolution", 3},
                               {"deterministic", true}},
                              {{"otype", "Identity"}, {"n_dims_to_encode", 2}, {"dims_to_encode_begin", 2},
                               {"offset", 0.5}}}}},
                           1000};
            c.grids = {{1, 2, 1, 3, 1.0f}};
            c.argument_terms = grid_argument_terms(2, 1, 3, 1.0f);
            // Stored: each nested output (3) and each nested output gradient (1), second order one more.
            c.dtype_roundings = 5;
            v.push_back(c);
        }
        {
            EncodingCase c{"nested_composite",
                           4,
                           {{"otype", "Composite"},
                            {"nested",
                             {{{"otype", "Composite"},
                               {"n_dims_to_encode", 2},
                               {"reduction", "Product"},
                               {"nested",
                                {{{"otype", "Identity"}, {"n_dims_to_encode", 2}, {"dims_to_encode_begin", 0}},
                                 {{"otype", "Frequency"}, {"n_frequencies", 1}, {"n_dims_to_encode", 1},
                                  {"dims_to_encode_begin", 1}}}}},
                              {{"otype", "OneBlob"}, {"n_bins", 4}}}}},
                           501};
            c.argument_terms = 32;
            c.dtype_roundings = 5;  // the inner Product composite, as composite_product
            v.push_back(c);
        }
        {
            const json nested_permuto = {{"otype", "Permuto"}, {"n_dims_to_encode", 3}, {"n_levels", 3},
                                         {"log2_hashmap_size", 7}, {"base_scale", 4.0}};
            EncodingCase c{"composite_permuto",
                           4,
                           {{"otype", "Composite"},
                            {"nested", {{{"otype", "Frequency"}, {"n_frequencies", 2}, {"n_dims_to_encode", 1}},
                                        nested_permuto}}},
                           500};
            const PermutoLevels L = permuto_levels(3, 3, 4.0f, 2.0f, 1337);
            c.argument_terms = std::max(permuto_argument_terms(L), 8 * 3.1416);
            c.permutos = {{1, 3, L}};
            v.push_back(c);
        }
        {
            EncodingCase c{"nrc_preset", 9, {{"otype", "NRC"}, {"n_frequencies", 4}, {"n_bins", 4}}, 257};
            c.triangles = {{0, 3, 4}};
            c.argument_terms = 32;
            v.push_back(c);
        }
        return v;
    }();
    return cases;
}

// ---- data --------------------------------------------------------------------------------------------

double round_to_dtype(double v, DType t) {
    switch (t) {
        case DType::f16: return static_cast<float>(tnn::half(static_cast<float>(v)));
        case DType::bf16: return static_cast<float>(tnn::bfloat16(static_cast<float>(v)));
        default: return static_cast<float>(v);
    }
}

// Whether an input row keeps `margin` away from every cell border of the case's grids and every kink
// of its triangle waves (in the fp64 arithmetic of the reference; the fp32 value differs by less).
bool safe_row(const EncodingCase& c, const float* x) {
    for (const GridSpec& g : c.grids)
        for (uint32_t l = 0; l < g.n_levels; ++l) {
            const float scale = grid::grid_scale(l, std::log2(g.per_level_scale), g.base_resolution);
            for (uint32_t d = 0; d < g.n_dims; ++d) {
                const double pos = static_cast<double>(scale) * x[g.first_dim + d] + 0.5;
                // fp32 rounding of pos: at most half an ulp, 2^-24 |pos|; 8 of them is a safe margin.
                const double margin = std::max(1e-6, 8 * std::ldexp(std::fabs(pos), -24));
                if (std::fabs(pos - std::round(pos)) < margin) return false;
            }
        }
    for (const PermutoSpec& p : c.permutos)
        for (uint32_t l = 0; l < p.levels.n_levels; ++l) {
            // The fp32 weights are within about argument_terms eps / (2 (d + 1)) of the fp64 ones
            // (permuto_argument_terms): 8 times that keeps both on the same side of every face.
            double x64[permuto::kMaxDims];
            for (uint32_t i = 0; i < p.n_dims; ++i) x64[i] = x[p.first_dim + i];
            const double terms = permuto_argument_terms(p.levels);
            const double margin = std::max(1e-6, 4 * terms * dtype_epsilon(DType::f32) / (p.n_dims + 1));
            if (permuto::min_weight(p.n_dims, x64, p.levels.shift_of(l), p.levels.scale_of(l)) < margin) return false;
        }
    for (const TriangleSpec& t : c.triangles)
        for (uint32_t k = 0; k < t.n_frequencies; ++k)
            for (uint32_t d = 0; d < t.n_dims; ++d) {
                const double v2 = 2 * (std::ldexp(static_cast<double>(x[t.first_dim + d]), static_cast<int>(k) - 1) +
                                       0.25 * k);
                if (std::fabs(v2 - std::round(v2)) < 1e-4) return false;
            }
    return true;
}

struct EncodingData {
    std::vector<double> x, params, dL_dy, v;  // x, v: fp32 values; params, dL_dy: values of the dtype
};

EncodingData make_data(const EncodingCase& c, const Encoding& e, DType dtype, uint64_t seed) {
    EncodingData d;
    Pcg32 rng(seed);
    const uint32_t n_in = e.n_input_dims();
    std::vector<float> row(n_in);
    int attempts = 0;
    while (d.x.size() < static_cast<size_t>(c.batch) * n_in) {
        for (auto& v : row) v = static_cast<float>(c.lo + (c.hi - c.lo) * rng.next_float());
        if (++attempts > 1000000) throw Error("test: no safe input rows for " + c.name);
        if (!safe_row(c, row.data())) continue;
        d.x.insert(d.x.end(), row.begin(), row.end());
    }
    // O(1) parameters (the initialisation's 1e-4 would hide errors in the outputs' low bits).
    for (size_t i = 0; i < e.n_params(); ++i) d.params.push_back(round_to_dtype(2 * rng.next_float() - 1, dtype));
    for (int64_t i = 0; i < c.batch * e.n_output_dims(); ++i)
        d.dL_dy.push_back(round_to_dtype(2 * rng.next_float() - 1, dtype));
    for (int64_t i = 0; i < c.batch * n_in; ++i) d.v.push_back(static_cast<float>(2 * rng.next_float() - 1));
    return d;
}

Tensor upload(const std::vector<double>& v, int64_t rows, int64_t cols, DType dtype, Device device) {
    Tensor f64(rows, cols, DType::f64);
    if (!v.empty()) std::memcpy(f64.data(), v.data(), v.size() * sizeof(double));
    if (dtype == DType::f64) return to_device(f64, device);
    Tensor t(rows, cols, dtype);
    convert(Stream::cpu(), f64.view(), t.view());
    return to_device(t, device);
}

std::vector<double> download(const Tensor& t) { return t.to(Device::cpu()).to_double_vector(); }

// A case's x (fp32), parameters and dL/dy (the encoding's dtype) on a device, for tests that call
// forward / backward with buffers of their own instead of run_encoding's.
struct DeviceInputs {
    Tensor x, p, g;
};
DeviceInputs upload_inputs(const EncodingCase& c, const Encoding& e, const EncodingData& data, Device device) {
    const DType t = e.param_dtype();
    return {upload(data.x, c.batch, c.n_dims, DType::f32, device),
            upload(data.params, 1, static_cast<int64_t>(e.n_params()), t, device),
            upload(data.dL_dy, c.batch, e.n_output_dims(), t, device)};
}

struct EncodingResult {
    std::vector<double> y, y_inference, dL_dx, dL_dparams;       // first order
    std::vector<double> dL_ddLdy, dL_dx2, dL_dparams2;           // backward_backward_input
};

// Forward (with context), inference, backward and backward_backward_input (overwrite; outputs and
// gradients first filled with garbage, so that an element a kernel leaves unwritten shows) of `e` on the
// stream's device; results back on the host.
EncodingResult run_encoding(const Encoding& e, const Stream& stream, const EncodingData& d, int64_t batch,
                            GradMode mode = GradMode::overwrite, double prefill = 7.0) {
    const Device dev = stream.device();
    const DType t = e.param_dtype(), in_t = e.input_dtype();
    const int64_t n_in = e.n_input_dims(), n_out = e.n_output_dims(), n_params = static_cast<int64_t>(e.n_params());
    const Tensor x = upload(d.x, batch, n_in, in_t, dev), v = upload(d.v, batch, n_in, in_t, dev);
    const Tensor p = upload(d.params, 1, n_params, t, dev), g = upload(d.dL_dy, batch, n_out, t, dev);
    Tensor y(batch, n_out, t, dev), yi(batch, n_out, t, dev), dx(batch, n_in, in_t, dev), dp(1, n_params, t, dev);
    Tensor w(batch, n_out, t, dev), dx2(batch, n_in, in_t, dev), dp2(1, n_params, t, dev);
    for (Tensor* z : {&y, &yi, &dx, &dp, &w, &dx2, &dp2}) fill(stream, z->view(), prefill);
    const void* params = n_params > 0 ? p.data() : nullptr;
    auto ctx = e.forward(stream, x.view(), y.view(), params, true);
    e.inference(stream, x.view(), yi.view(), params);
    View dx_view = dx.view(), w_view = w.view(), dx2_view = dx2.view();
    e.backward(stream, *ctx, x.view(), y.view(), g.view(), &dx_view, n_params > 0 ? dp.data() : nullptr, params, mode);
    e.backward_backward_input(stream, *ctx, x.view(), v.view(), g.view(), &w_view, &dx2_view,
                              n_params > 0 ? dp2.data() : nullptr, params, mode);
    stream.synchronize();
    return {download(y), download(yi), download(dx), download(dp), download(w), download(dx2), download(dp2)};
}

// ---- error model (tests/gpu/gpu_test_util.h: expect_matches_reference) ----------------------------

// Rounding terms of an fp32 computation (n32: accumulated fp32 roundings relative to the result's
// scale) with `roundings` intermediate results stored in the module's dtype t, stored in dtype `out`:
// eps32 n32 + roundings eps_t + eps_out, expressed in units of eps_out.
AccumulationError stored(DType out, double n32, double roundings, DType t) {
    const double eps32 = dtype_epsilon(DType::f32), eps = dtype_epsilon(out);
    return {eps, (eps32 * n32 + roundings * dtype_epsilon(t)) / eps + (out == DType::f32 ? 0.0 : 1.0)};
}

struct ErrorModel {
    AccumulationError y, dL_dx, dL_dparams, dL_ddLdy, dL_dx2, dL_dparams2;
};

// Terms per quantity: C contributions per output (corners, lanes), L levels, F features, the batch for
// parameter gradients (every row adds to an entry), D for the second-order sums over dimensions, plus
// the case's argument sensitivity. dL/dx is fp32 whatever the dtype (inputs are fp32).
ErrorModel error_model(const EncodingCase& c, const Encoding& e) {
    // Contributions per output: a grid's 2^D corners, a Permuto level's d + 1 vertices.
    double corners = c.grids.empty() ? 64.0 : std::ldexp(1.0, c.grids[0].n_dims);
    double L = c.grids.empty() ? 1.0 : c.grids[0].n_levels;
    if (!c.permutos.empty()) {
        corners = c.permutos[0].n_dims + 1.0;
        L = c.permutos[0].levels.n_levels;
    }
    const double D = e.n_input_dims(), P = c.argument_terms;
    const double per_row = corners * L * 8;  // corners x levels x at most 8 features feed one dL/dx
    const DType t = e.param_dtype();
    const double R = c.dtype_roundings;
    ErrorModel m;
    m.y = stored(t, corners + P, R, t);
    m.dL_dx = stored(DType::f32, per_row + P, R, t);
    m.dL_dparams = stored(t, static_cast<double>(c.batch) * corners + P, R, t);
    m.dL_ddLdy = stored(t, corners * D + P, R, t);
    m.dL_dx2 = stored(DType::f32, per_row * D * D + P, R, t);
    m.dL_dparams2 = stored(t, static_cast<double>(c.batch) * corners * D + P, R, t);
    return m;
}

std::vector<float> to_float(const std::vector<double>& v) { return std::vector<float>(v.begin(), v.end()); }

void compare(const std::vector<double>& got, const std::vector<double>& ref, const std::vector<double>& naive,
             AccumulationError err, const std::string& what) {
    expect_matches_reference(to_float(got), ref, to_float(naive), err, what);
}

// ---- the case list on every backend and dtype ---------------------------------------------------

using EncodingParam = std::tuple<EncodingCase, DType, Device>;

class EncodingBackends : public ::testing::TestWithParam<EncodingParam> {};

TEST_P(EncodingBackends, MatchesFp64Reference) {
    const auto& [c, dtype, device] = GetParam();
    TNN_SKIP_UNLESS_USABLE(device);
    const auto enc = create_encoding(c.n_dims, c.config, dtype);
    const auto enc64 = create_encoding(c.n_dims, c.config, DType::f64);
    enc->set_max_level(c.max_level);
    enc64->set_max_level(c.max_level);
    ASSERT_TRUE(enc->supports_device(device)) << enc->describe();
    const EncodingData data = make_data(c, *enc, dtype, 1234);

    const EncodingResult ref = run_encoding(*enc64, Stream::cpu(), data, c.batch);
    const EncodingResult naive = run_encoding(*enc, Stream::cpu(), data, c.batch);
    TestStream stream(device);
    const EncodingResult got = run_encoding(*enc, stream, data, c.batch);

    const ErrorModel m = error_model(c, *enc);
    compare(got.y, ref.y, naive.y, m.y, "forward output");
    compare(got.y_inference, ref.y, naive.y, m.y, "inference output");
    expect_same_bits(to_float(got.y), to_float(got.y_inference), "forward vs inference");
    compare(got.dL_dx, ref.dL_dx, naive.dL_dx, m.dL_dx, "dL/dinput");
    compare(got.dL_dparams, c.reference_is_naive ? naive.dL_dparams : ref.dL_dparams, naive.dL_dparams,
            m.dL_dparams, "dL/dparams");
    compare(got.dL_ddLdy, ref.dL_ddLdy, naive.dL_ddLdy, m.dL_ddLdy, "second order: dL'/d(dL/dy)");
    compare(got.dL_dx2, ref.dL_dx2, naive.dL_dx2, m.dL_dx2, "second order: dL'/dinput");
    compare(got.dL_dparams2, ref.dL_dparams2, naive.dL_dparams2, m.dL_dparams2, "second order: dL'/dparams");
    if (c.batch == 0)
        for (double v : got.dL_dparams) ASSERT_EQ(v, 0.0) << "an empty batch must give a zero gradient";
    if (c.max_level < 1.0f && !got.y.empty()) {
        // Switched-off levels output exactly 0 (levels >= 0.5 * 6 + 1e-3: 4 and 5).
        const int64_t n_out = enc->n_output_dims();
        for (int64_t r = 0; r < c.batch; ++r)
            for (int64_t k = 8; k < n_out; ++k) ASSERT_EQ(got.y[r * n_out + k], 0.0) << "row " << r << " lane " << k;
    }
}

std::string param_name(const ::testing::TestParamInfo<EncodingParam>& info) {
    const DType t = std::get<1>(info.param);
    const char* dt = t == DType::f32 ? "f32" : (t == DType::f16 ? "f16" : "bf16");
    return std::get<0>(info.param).name + "_" + dt + "_" + backend_label(std::get<2>(info.param));
}

INSTANTIATE_TEST_SUITE_P(Cases, EncodingBackends,
                         ::testing::Combine(::testing::ValuesIn(encoding_cases()),
                                            ::testing::Values(DType::f32, DType::f16, DType::bf16),
                                            ::testing::ValuesIn(test_backends())),
                         param_name);

// ---- GPU-only properties ------------------------------------------------------------------------------

const EncodingCase& case_named(const std::string& name) {
    for (const auto& c : encoding_cases())
        if (c.name == name) return c;
    throw Error("no encoding test case named " + name);
}

#ifdef TNN_WITH_GPU
// A kernel variant with some fields set (the rest automatic).
grid_gpu::Variant variant_with(const std::function<void(grid_gpu::Variant&)>& set) {
    grid_gpu::Variant v;
    set(v);
    return v;
}
#endif  // TNN_WITH_GPU

// Restores the process-wide switches a test changes.
struct SwitchGuard {
    ~SwitchGuard() {
        set_deterministic(false);
#ifdef TNN_WITH_GPU
        grid_gpu::set_variant({});
#endif  // TNN_WITH_GPU
    }
};

#ifdef TNN_WITH_GPU
// The fp32 kernels' x-derivatives where the field is nearly constant: the CPU test's bound
// (tests/grid_accuracy.h) against the fp64 CPU reference.
TEST(GridGpu, InputGradientsOfANearlyConstantFieldAreAccurate) {
    TNN_SKIP_WITHOUT_GPU();
    TestStream stream(Device::gpu(0));
    expect_accurate_input_gradients_of_a_flat_field(stream);
}

TEST(GridGpu, DeterministicGradientIsBitwiseReproducible) {
    TNN_SKIP_WITHOUT_GPU();
    SwitchGuard guard;
    for (const char* name : {"hash3d_f2_deterministic", "dense3d_f1_deterministic_smoothstep",
                             "hash3d_f8_smoothstep_deterministic", "hash6d_f2_deterministic"})
        for (DType dtype : {DType::f32, DType::f16, DType::bf16}) {
            const EncodingCase& c = case_named(name);
            SCOPED_TRACE(msg(name, " ", dtype_name(dtype)));
            const auto enc = create_encoding(c.n_dims, c.config, dtype);
            const EncodingData data = make_data(c, *enc, dtype, 99);
            TestStream stream(Device::gpu(0));
            const EncodingResult a = run_encoding(*enc, stream, data, c.batch);
            free_temporary_memory();  // other memory, other timing: the bits must not change
            const EncodingResult b = run_encoding(*enc, stream, data, c.batch);
            expect_same_bits(to_float(a.dL_dparams), to_float(b.dL_dparams), "dL/dparams run to run");
            expect_same_bits(to_float(a.dL_dparams2), to_float(b.dL_dparams2), "dL'/dparams run to run");
            // Integer sums do not depend on how the work is split: shared-memory levels off or capped,
            // a thread per (row, level), per feature, per (corner, feature).
            const std::vector<grid_gpu::Variant> variants = {
                variant_with([](auto& v) { v.shared_kib = 0; }), variant_with([](auto& v) { v.shared_kib = 48; }),
                variant_with([](auto& v) { v.det_mapping = 0; }), variant_with([](auto& v) { v.det_mapping = 1; }),
                variant_with([](auto& v) { v.det_mapping = 2; }),
                variant_with([](auto& v) { v.det_mapping = 3; }),
                variant_with([](auto& v) { v.det_mapping = 3; v.level_group_kib = 64; }),
                variant_with([](auto& v) { v.level_major_grads = 1; }),
                variant_with([](auto& v) { v.overlap_shared = 0; }),
                variant_with([](auto& v) { v.vector_grad_loads = 0; }),
#if defined(TNN_WITH_CUDA)  // the words kernel is built for NVIDIA only
                variant_with([](auto& v) { v.det_shared_words = 1; }),
                variant_with([](auto& v) { v.det_shared_words = 1; v.shared_kib = 100; }),
#endif  // TNN_WITH_CUDA
                variant_with([](auto& v) { v.det_shared_words = 0; }),
                variant_with([](auto& v) { v.det_bulk = 0; }),
                variant_with([](auto& v) { v.det_bulk = 0; v.shared_kib = 0; }),
                variant_with([](auto& v) { v.staged_scratch = 0; }),
                variant_with([](auto& v) { v.det_mapping = 3; v.level_group_kib = 64; v.staged_scratch = 0; })};
            for (const grid_gpu::Variant& v : variants) {
                grid_gpu::set_variant(v);
                const EncodingResult e = run_encoding(*enc, stream, data, c.batch);
                grid_gpu::set_variant({});
                expect_same_bits(to_float(a.dL_dparams), to_float(e.dL_dparams), "dL/dparams across kernel variants");
                expect_same_bits(to_float(a.dL_dparams2), to_float(e.dL_dparams2), "dL'/dparams across kernel variants");
            }
            // The global switch on a config without the key gives the same bits.
            json plain = c.config;
            plain.erase("deterministic");
            const auto enc_plain = create_encoding(c.n_dims, plain, dtype);
            set_deterministic(true);
            const EncodingResult s = run_encoding(*enc_plain, stream, data, c.batch);
            set_deterministic(false);
            expect_same_bits(to_float(a.dL_dparams), to_float(s.dL_dparams), "tnn::set_deterministic(true)");
            // Every other result is deterministic anyway (no atomics).
            expect_same_bits(to_float(a.y), to_float(b.y), "output run to run");
            expect_same_bits(to_float(a.dL_dx), to_float(b.dL_dx), "dL/dinput run to run");
        }
}

// The deterministic gradient's bulk pairs (Variant::det_bulk, NVIDIA): an x-pair of adjacent entries sent
// as one bulk reduction of 32 bytes from shared memory gives the bits of the per-lane 64-bit reductions:
// hashed and dense levels (adjacent 1 time in 2 / always), Smoothstep, 2-D and 6-D grids, batches that
// end inside a warp (the shuffles' lane masks), rings of 4 slots reused (with all levels in one group a
// row issues up to 16 bulk operations in 3-D and 64 in 6-D; one level per group: 4 in 3-D, none reused),
// levels in one group or one per group, and the shared-memory levels on or off. The hook checks that the
// bulk kernel ran where it should (by default on sm_90 and later, always when asked for), and not when
// switched off.
TEST(GridGpu, DeterministicBulkPairsGiveTheLanesBits) {
    TNN_SKIP_WITHOUT_GPU();
#if !defined(TNN_WITH_CUDA)
    GTEST_SKIP() << "bulk reductions are built for NVIDIA GPUs only";
#else
    SwitchGuard guard;
    const int cc = gpu::device_properties(0).capability;
    const bool bulk_default = gpu::is_nvidia_sm90_or_later(cc);
    std::vector<EncodingCase> cases = {case_named("hash3d_f2_deterministic_global"),
                                       case_named("dense3d_f2_deterministic_global"),
                                       case_named("hash3d_f2_deterministic"), case_named("hash6d_f2_deterministic")};
    cases.push_back(grid_case("hash2d_f2_smoothstep_deterministic", 2,
                              grid_config("HashGrid", {{"n_levels", 6}, {"log2_hashmap_size", 15},
                                                       {"base_resolution", 16}, {"per_level_scale", 2.0},
                                                       {"interpolation", "Smoothstep"}, {"deterministic", true}}),
                              50001));
    for (const EncodingCase& c : cases)
        for (DType dtype : {DType::f32, DType::f16, DType::bf16}) {
            SCOPED_TRACE(msg(c.name, " ", dtype_name(dtype)));
            const auto enc = create_encoding(c.n_dims, c.config, dtype);
            const EncodingData data = make_data(c, *enc, dtype, 17);
            TestStream stream(Device::gpu(0));
            for (const int shared_kib : {-1, 0})
                for (const int group_kib : {0, 64}) {
                    SCOPED_TRACE(msg("shared_kib ", shared_kib, ", level_group_kib ", group_kib));
                    auto with = [&](int bulk) {
                        return variant_with([&](auto& v) {
                            v.shared_kib = shared_kib;
                            v.level_group_kib = group_kib;
                            v.det_bulk = bulk;
                        });
                    };
                    grid_gpu::set_variant(with(0));
                    const uint64_t before = grid_gpu::bulk_pair_launches();
                    const EncodingResult lanes = run_encoding(*enc, stream, data, c.batch);
                    EXPECT_EQ(grid_gpu::bulk_pair_launches(), before) << "det_bulk = 0 launched the bulk kernel";
                    // The default (bulk pairs on sm_90 and later, the lanes before) and bulk pairs asked for
                    // (an older NVIDIA GPU then issues the four values as atomics).
                    for (const int bulk_switch : {-1, 1}) {
                        SCOPED_TRACE(msg("det_bulk ", bulk_switch));
                        const uint64_t launches = grid_gpu::bulk_pair_launches();
                        grid_gpu::set_variant(with(bulk_switch));
                        const EncodingResult bulk = run_encoding(*enc, stream, data, c.batch);
                        grid_gpu::set_variant({});
                        if (shared_kib == 0)  // every level global: the bulk kernel runs where it is chosen
                            EXPECT_EQ(grid_gpu::bulk_pair_launches() > launches, bulk_switch == 1 || bulk_default)
                                << "compute capability " << cc;
                        expect_same_bits(to_float(lanes.dL_dparams), to_float(bulk.dL_dparams),
                                         "dL/dparams, bulk pairs");
                        expect_same_bits(to_float(lanes.dL_dparams2), to_float(bulk.dL_dparams2), "dL'/dparams");
                        size_t nonzero = 0;
                        for (double g : bulk.dL_dparams) nonzero += g != 0.0;
                        EXPECT_GT(nonzero, bulk.dL_dparams.size() / 8) << "most entries should receive something";
                    }
                }
        }
#endif  // TNN_WITH_CUDA
}

// The deterministic bound pass reads dL/dy from the caller's rows where they allow (the listed levels'
// values whole 16-byte chunks, at most 128 bytes per row): as running maxima over the rows' chunks
// (Linear, Nearest, stochastic: grid_param_bound_chunks_kernel), or staged in shared memory
// (Smoothstep, or Variant::bound_chunks = 0); else one load per row and level. dL/dy copied level-major
// first (Variant::level_major_grads) takes the last way. All give the same exponents, so the same bits:
// fp32 / fp16 / bf16, F = 1, 2, 4 and 8 (a level in two chunks, and up to eight levels in one), rows of
// 8 to 128 bytes (chunks per row 1 to 8, three and six among them), 3-D and 6-D, Nearest, stochastic,
// Smoothstep, overwrite and accumulate. The data makes a wrong read visible: each level's dL/dy is scaled
// by its own power of two (2^(l % 4)), and its largest value, 3.9x the rest, sits in the last row,
// inside the last (partial) block, so that a level or row read wrongly, or a block dropped, moves a
// level's bound across a power of two and its exponent with it. Passes: finite; a huge x in a middle row's
// last dimension (FLT_MAX over the geometric mean of the first and last level's scales; Linear: the finer
// levels' positions overflow and those levels go NaN, the coarser ones stay finite: the running maxima's
// per-level test of rows outside |x| <= 2^20); NaN in one dL/dy value of a middle row (its level NaN);
// NaN in that x (Linear: every level NaN). One case has more rows than a pass of the chunks pass's grid.
// Hooks check which pass ran. (The gradients depend on the bounds through the exponents only: a bound
// off by less than its power of two would not show.)
TEST(GridGpu, DeterministicBoundOnStagedRowsGivesTheSameBits) {
    TNN_SKIP_WITHOUT_GPU();
    SwitchGuard guard;
    std::vector<EncodingCase> cases = {case_named("hash3d_f2_deterministic_global"),
                                       case_named("dense3d_f2_deterministic_global"),
                                       case_named("hash3d_f2_deterministic"), case_named("hash6d_f2_deterministic"),
                                       case_named("hash3d_f8_smoothstep_deterministic")};
    const auto hash = [](const json& extra) {
        json config = {{"otype", "HashGrid"}, {"log2_hashmap_size", 12}, {"base_resolution", 4},
                       {"per_level_scale", 1.5}, {"deterministic", true}};
        config.update(extra);
        return config;
    };
    cases.push_back(grid_case("hash3d_f2_L16_deterministic", 3,
                              hash({{"n_levels", 16}, {"base_resolution", 4}, {"per_level_scale", 1.3}}), 20001));
    cases.push_back(grid_case("hash3d_f2_L6_deterministic", 3, hash({{"n_levels", 6}}), 3001));
    cases.push_back(grid_case("hash3d_f1_L16_deterministic", 3,
                              hash({{"n_levels", 16}, {"n_features_per_level", 1}, {"per_level_scale", 1.3}}), 3001));
    cases.push_back(grid_case("hash3d_f4_L4_deterministic", 3, hash({{"n_levels", 4}, {"n_features_per_level", 4}}), 3001));
    cases.push_back(grid_case("hash3d_f8_L2_deterministic", 3, hash({{"n_levels", 2}, {"n_features_per_level", 8}}), 3001));
    cases.push_back(grid_case("hash3d_nearest_L12_deterministic", 3,
                              hash({{"n_levels", 12}, {"interpolation", "Nearest"}}), 3001));
    cases.push_back(grid_case("hash3d_stochastic_L8_deterministic", 3,
                              hash({{"n_levels", 8}, {"stochastic_interpolation", true}}), 3001));
    // More rows than one pass of the chunks pass's grid (on the H200 at most 1056 blocks: 33 792 rows a
    // pass for 128-byte rows, 67 584 for 64-byte ones), so that threads visit rows several passes apart and
    // the middle row's huge x and NaN lie passes away from the first.
    cases.push_back(grid_case("hash3d_f2_L16_many_passes_deterministic", 3,
                              hash({{"n_levels", 16}, {"per_level_scale", 1.3}}), 300001));
    for (const EncodingCase& c : cases)
        for (DType dtype : {DType::f32, DType::f16, DType::bf16}) {
            SCOPED_TRACE(msg(c.name, " ", dtype_name(dtype)));
            const auto enc = create_encoding(c.n_dims, c.config, dtype);
            EncodingData data = make_data(c, *enc, dtype, 19);
            const int64_t n_out = enc->n_output_dims(), F = c.config.value("n_features_per_level", 2);
            ASSERT_NE(c.batch % 256, 0) << "the last row must sit in a partial block";
            for (int64_t i = 0; i < c.batch * n_out; ++i) data.dL_dy[size_t(i)] *= double(1 << ((i % n_out) / F % 4));
            for (int64_t l = 0; l < n_out / F; ++l)
                data.dL_dy[size_t((c.batch - 1) * n_out + l * F)] = 3.9 * double(1 << (l % 4));
            const size_t row_bytes = size_t(n_out) * dtype_size(dtype);
            const bool staged_expected = row_bytes % 16 == 0 && row_bytes <= 128;
            const bool linear = c.config.value("interpolation", "Linear") == "Linear" &&
                                !c.config.value("stochastic_interpolation", false);
            const bool chunks_expected = staged_expected && (c.config.value("interpolation", "Linear") != "Smoothstep" ||
                                                             c.config.value("stochastic_interpolation", false));
            TestStream stream(Device::gpu(0));
            const int64_t mid = c.batch / 2;
            // Between the first and the last level's scale: the finer levels' positions overflow, not the coarser.
            const float log2_scale = std::log2(c.config.value("per_level_scale", 2.0f));
            const uint32_t base = c.config.value("base_resolution", 16u), n_levels = c.config.value("n_levels", 16u);
            const double x_big = double(std::numeric_limits<float>::max()) /
                                 std::sqrt(double(grid::grid_scale(0, log2_scale, base)) *
                                           double(grid::grid_scale(n_levels - 1, log2_scale, base)));
            for (int pass : {0, 1, 2, 3}) {
                SCOPED_TRACE(pass == 0   ? "finite"
                             : pass == 1 ? "a huge x in a row"
                             : pass == 2 ? "NaN in a dL/dy value"
                                         : "NaN in x");
                EncodingData d = data;
                const size_t last_dim = size_t(mid * c.n_dims + c.n_dims - 1);
                if (pass == 1) d.x[last_dim] = x_big;
                if (pass == 2) d.dL_dy[size_t(mid * n_out + (n_out / F / 2) * F)] = std::numeric_limits<double>::quiet_NaN();
                if (pass == 3) d.x[last_dim] = std::numeric_limits<double>::quiet_NaN();
                for (GradMode mode : {GradMode::overwrite, GradMode::accumulate}) {
                    grid_gpu::set_variant({});
                    uint64_t launches = grid_gpu::staged_bound_launches();
                    const uint64_t chunk_launches = grid_gpu::chunk_bound_launches();
                    const EncodingResult chunks = run_encoding(*enc, stream, d, c.batch, mode);
                    EXPECT_EQ(grid_gpu::staged_bound_launches() > launches, staged_expected) << row_bytes << " bytes per row";
                    EXPECT_EQ(grid_gpu::chunk_bound_launches() > chunk_launches, chunks_expected);
                    grid_gpu::set_variant(variant_with([](auto& v) { v.bound_chunks = 0; }));
                    const uint64_t chunk_launches_off = grid_gpu::chunk_bound_launches();
                    const EncodingResult staged = run_encoding(*enc, stream, d, c.batch, mode);
                    EXPECT_EQ(grid_gpu::chunk_bound_launches(), chunk_launches_off) << "bound_chunks = 0";
                    grid_gpu::set_variant(variant_with([](auto& v) { v.level_major_grads = 1; }));
                    launches = grid_gpu::staged_bound_launches();
                    const EncodingResult level_major = run_encoding(*enc, stream, d, c.batch, mode);
                    EXPECT_EQ(grid_gpu::staged_bound_launches(), launches) << "the level-major copy is not staged";
                    grid_gpu::set_variant({});
                    expect_same_bits(to_float(staged.dL_dparams), to_float(level_major.dL_dparams),
                                     "dL/dparams, bound pass on staged rows and on level-major dL/dy");
                    expect_same_bits(to_float(chunks.dL_dparams), to_float(level_major.dL_dparams),
                                     "dL/dparams, bound pass as running maxima and on level-major dL/dy");
                    size_t n_nan = 0, n_finite = 0;
                    for (double v : level_major.dL_dparams) (std::isnan(v) ? n_nan : n_finite) += v != 0.0;
                    if (pass == 0) EXPECT_EQ(n_nan, 0u);
                    if (pass == 2) EXPECT_GT(n_nan, 0u) << "the NaN's level";
                    if (pass == 2 || (pass == 1 && linear)) EXPECT_GT(n_finite, 0u) << "levels left finite";
                    if (pass == 1 && linear) EXPECT_GT(n_nan, 0u) << "levels whose position overflows";
                    if (pass == 3 && linear) EXPECT_EQ(n_finite, 0u) << "a NaN position makes every level NaN";
                    if (pass == 3 && linear) EXPECT_GT(n_nan, 0u);
                }
            }
        }
}

// Kernel variants (load paths, shared-memory levels, vector atomics) all match the reference; the
// forward output does not depend on the load path at all.
TEST(GridGpu, KernelVariantsAgree) {
    TNN_SKIP_WITHOUT_GPU();
    SwitchGuard guard;
    for (const char* name : {"hash3d_f2_linear", "dense3d_f1_linear", "tiled2d_f8_nearest", "hash2d_f4_smoothstep"})
        for (DType dtype : {DType::f32, DType::f16}) {
            const EncodingCase& c = case_named(name);
            SCOPED_TRACE(msg(name, " ", dtype_name(dtype)));
            const auto enc = create_encoding(c.n_dims, c.config, dtype);
            const auto enc64 = create_encoding(c.n_dims, c.config, DType::f64);
            const EncodingData data = make_data(c, *enc, dtype, 5);
            const EncodingResult ref = run_encoding(*enc64, Stream::cpu(), data, c.batch);
            const EncodingResult naive = run_encoding(*enc, Stream::cpu(), data, c.batch);
            TestStream stream(Device::gpu(0));
            const EncodingResult base = run_encoding(*enc, stream, data, c.batch);
            const ErrorModel m = error_model(c, *enc);
            const std::vector<grid_gpu::Variant> variants = {
                variant_with([](auto& v) { v.chunked_loads = 0; }),
                variant_with([](auto& v) { v.forward_threads = 64; }),
                variant_with([](auto& v) { v.forward_threads = 512; }),
                variant_with([](auto& v) { v.shared_kib = 0; }),
                variant_with([](auto& v) { v.shared_kib = 48; }),
                variant_with([](auto& v) { v.fast_mapping = 0; }),
                variant_with([](auto& v) { v.fast_mapping = 1; }),
                variant_with([](auto& v) { v.fast_mapping = 2; }),
                variant_with([](auto& v) { v.fast_mapping = 2; v.level_group_kib = 64; }),
                variant_with([](auto& v) { v.fast_mapping = 1; v.slot_pairs = 0; }),
                variant_with([](auto& v) { v.fast_mapping = 2; v.slot_pairs = 0; }),
                variant_with([](auto& v) { v.fast_mapping = 2; v.l2_hints = 0; }),
                variant_with([](auto& v) { v.fast_mapping = 2; v.l2_hints = 1; }),
                variant_with([](auto& v) { v.fast_mapping = 2; v.l2_hints = 1; v.discard_scratch = 0; }),
                variant_with([](auto& v) { v.shared_fixed = 0; }),
                variant_with([](auto& v) { v.shared_fixed = 1; }),
                variant_with([](auto& v) { v.shared_fixed = 1; v.shared_kib = 100; }),
                variant_with([](auto& v) { v.fast_mapping = 2; v.l2_hints = 2; v.level_group_kib = 64; }),
                variant_with([](auto& v) {
                    v.fast_mapping = 0;
                    v.vector_atomics = 0;
                }),
                variant_with([](auto& v) { v.level_major_grads = 0; }),
                variant_with([](auto& v) { v.level_major_grads = 1; }),
                variant_with([](auto& v) { v.vector_grad_loads = 0; }),
                variant_with([](auto& v) { v.vector_grad_loads = 0; v.level_major_grads = 1; }),
                variant_with([](auto& v) { v.fast_mapping = 2; v.staged_scratch = 0; }),
                variant_with([](auto& v) { v.fast_mapping = 2; v.level_group_kib = 64; v.staged_scratch = 0; })};
            for (const grid_gpu::Variant& v : variants) {
                grid_gpu::set_variant(v);
                const EncodingResult got = run_encoding(*enc, stream, data, c.batch);
                grid_gpu::set_variant({});
                expect_same_bits(to_float(got.y), to_float(base.y), "forward output across variants");
                compare(got.dL_dparams, ref.dL_dparams, naive.dL_dparams, m.dL_dparams, "dL/dparams of a variant");
            }
        }
}

// The fast gradient's slot pairs (Variant::slot_pairs) reduce whole 2-entry slots: a level with an odd
// number of entries (Tiled, 3^3) must not get them, or its last entry's slot reaches into the next level
// and, for the last level, past the gradient (3 levels of 27 F = 2 entries, the last one 16-byte aligned:
// floats 162 and 163 of a 162-float gradient). fp32 parameters, so the kernels reduce straight into the
// caller's buffer: guard values after it (-0 and a subnormal, which any float atomic would turn into +0)
// must keep their bits, and the gradient matches the reference. In accumulate mode the entries that
// receive nothing keep their bits too (a +0 added beside a neighbour's contribution would flush a
// subnormal and turn -0 into +0).
TEST(GridGpu, SlotPairsStayInsideTheirLevelAndLeaveOtherEntriesAlone) {
    TNN_SKIP_WITHOUT_GPU();
    SwitchGuard guard;
    const float kGuards[2] = {-0.0f, 1e-40f};
    for (int mapping : {1, 2})
        for (int64_t batch : {int64_t(7), int64_t(512)}) {
            SCOPED_TRACE(msg("fast_mapping ", mapping, " batch ", batch));
            grid_gpu::set_variant(variant_with([&](auto& v) {
                v.shared_kib = 0;  // every level through the corner kernels
                v.fast_mapping = mapping;
            }));
            const EncodingCase c = grid_case("tiled3d_f2_odd_levels", 3,
                                             grid_config("TiledGrid", {{"n_levels", 3}, {"base_resolution", 3}}), batch);
            const auto enc = create_encoding(c.n_dims, c.config, DType::f32);
            const EncodingData data = make_data(c, *enc, DType::f32, 41);
            const EncodingResult naive = run_encoding(*enc, Stream::cpu(), data, c.batch);
            const EncodingResult ref =
                run_encoding(*create_encoding(c.n_dims, c.config, DType::f64), Stream::cpu(), data, c.batch);
            const ErrorModel m = error_model(c, *enc);
            const int64_t n = static_cast<int64_t>(enc->n_params()), kGuard = 16;
            ASSERT_EQ(n % 2, 0) << "27 entries of F = 2 per level";
            const Device gpu = Device::gpu(0);
            TestStream stream(gpu);
            const DeviceInputs in = upload_inputs(c, *enc, data, gpu);
            const Tensor &x = in.x, &p = in.p, &g = in.g;
            Tensor y(c.batch, enc->n_output_dims(), DType::f32, gpu);
            std::vector<double> prefill(static_cast<size_t>(n + kGuard));
            for (size_t i = 0; i < prefill.size(); ++i) prefill[i] = kGuards[i % 2];
            for (GradMode mode : {GradMode::overwrite, GradMode::accumulate}) {
                SCOPED_TRACE(mode == GradMode::overwrite ? "overwrite" : "accumulate");
                Tensor dp = upload(prefill, 1, n + kGuard, DType::f32, gpu);
                auto ctx = enc->forward(stream, x.view(), y.view(), p.data(), false);
                enc->backward(stream, *ctx, x.view(), y.view(), g.view(), nullptr, dp.data(), p.data(), mode);
                stream.stream().synchronize();
                const std::vector<double> got = download(dp);
                for (int64_t i = n; i < n + kGuard; ++i) {
                    const float v = static_cast<float>(got[i]), want = kGuards[i % 2];
                    EXPECT_EQ(std::memcmp(&v, &want, sizeof v), 0) << "guard value " << i - n << " after the gradient";
                }
                if (mode == GradMode::overwrite)
                    compare(std::vector<double>(got.begin(), got.begin() + n), ref.dL_dparams, naive.dL_dparams,
                            m.dL_dparams, "dL/dparams");
                for (int64_t i = 0; i < n; ++i) {
                    if (naive.dL_dparams[i] != 0.0) continue;  // entries with contributions: compared above
                    const float v = static_cast<float>(got[i]);
                    const float want = mode == GradMode::overwrite ? 0.0f : kGuards[i % 2];
                    EXPECT_EQ(std::memcmp(&v, &want, sizeof v), 0) << "entry " << i << " without contributions";
                }
            }
        }
}

// The shared-memory levels in split fixed point (Variant::shared_fixed): every level of a small Tiled grid
// is reduced in shared memory, and the gradient matches the fp64 reference (fp32 and fp16 parameters,
// 3 and 20 blocks of 1024 rows per level; Linear, and Nearest, whose rows feed one corner). The default
// Tiled grid (16^3 tiles, F = 2: 64 KiB of 8-byte slots per level) with the default variant, which on
// CUDA devices is split fixed point with 96 KiB per block (an opt-in launch). A NaN in one row's dL/dy
// and an infinite x in another send their blocks to fp32 slots: the entries those rows touch are NaN
// exactly where the CPU's are.
TEST(GridGpu, SharedFixedSlotsMatchTheReferenceAndPropagateNonFinite) {
    TNN_SKIP_WITHOUT_GPU();
    SwitchGuard guard;
    struct Case {
        const char* name;
        json config;
        int64_t batch;
        int shared_fixed;  // the variant's value (-1: the default)
    };
    const json small_tiles = grid_config("TiledGrid", {{"n_levels", 4}, {"base_resolution", 6}});
    const std::vector<Case> cases = {
            {"tiled3d_f2_shared", small_tiles, 3000, 1},
            {"tiled3d_f2_shared", small_tiles, 20000, 1},
            {"tiled3d_nearest_shared",
             grid_config("TiledGrid", {{"n_levels", 2}, {"base_resolution", 6}, {"interpolation", "Nearest"}}), 8000, 1},
            {"tiled3d_f2_default", grid_config("TiledGrid", {{"n_levels", 2}, {"base_resolution", 16}}), 8192, -1}};
    for (const Case& k : cases)
        for (DType dtype : {DType::f32, DType::f16}) {
            SCOPED_TRACE(msg(k.name, " ", dtype_name(dtype), " batch ", k.batch));
            grid_gpu::set_variant(variant_with([&](auto& v) { v.shared_fixed = k.shared_fixed; }));
            const EncodingCase c = grid_case(k.name, 3, k.config, k.batch);
            const auto enc = create_encoding(c.n_dims, c.config, dtype);
            EncodingData data = make_data(c, *enc, dtype, 43);
            const ErrorModel m = error_model(c, *enc);
            {
                const EncodingResult naive = run_encoding(*enc, Stream::cpu(), data, c.batch);
                const EncodingResult ref =
                    run_encoding(*create_encoding(c.n_dims, c.config, DType::f64), Stream::cpu(), data, c.batch);
                TestStream stream(Device::gpu(0));
                const EncodingResult got = run_encoding(*enc, stream, data, c.batch);
                compare(got.dL_dparams, ref.dL_dparams, naive.dL_dparams, m.dL_dparams, "dL/dparams");
            }
            data.dL_dy[3 * enc->n_output_dims() + 1] = std::numeric_limits<double>::quiet_NaN();
            data.x[size_t(k.batch - 5) * c.n_dims] = std::numeric_limits<double>::infinity();
            const EncodingResult naive = run_encoding(*enc, Stream::cpu(), data, c.batch);
            TestStream stream(Device::gpu(0));
            const EncodingResult got = run_encoding(*enc, stream, data, c.batch);
            size_t n_nan = 0;
            for (size_t i = 0; i < naive.dL_dparams.size(); ++i) {
                n_nan += std::isnan(naive.dL_dparams[i]) ? 1 : 0;
                EXPECT_EQ(std::isnan(got.dL_dparams[i]), std::isnan(naive.dL_dparams[i])) << "entry " << i;
            }
            EXPECT_GT(n_nan, 0u) << "the case must reach NaN entries";
        }
}

#if defined(TNN_WITH_CUDA)  // the words kernel is built for NVIDIA only
// The deterministic gradient's shared-memory levels in three 32-bit words per value
// (Variant::det_shared_words) add the same integers to the global accumulator as 64-bit slots, so the
// gradient has the same bits either way, and matches the reference: Tiled grids (16^3 entries of 12
// bytes are one feature per 48 KiB block), the opt-in budget (both features of a level per block), a
// 7-D grid (2^7 corners per row: the plan caps a block at 512 rows so that no slot takes more than
// 2^16 additions; GridGpuPlan tests the cap on the CPU), Nearest rows (one corner each); then NaN in
// dL/dy and inf in x reach the GPU gradient wherever they reach the CPU's (whose whole level is NaN on
// the deterministic path).
TEST(GridGpu, DeterministicSharedWordsGiveTheSlotsBits) {
    TNN_SKIP_WITHOUT_GPU();
    SwitchGuard guard;
    struct Case {
        const char* name;
        uint32_t n_dims;
        json config;
        int64_t batch;
    };
    const std::vector<Case> cases = {
            {"tiled3d_f2_det", 3, grid_config("TiledGrid", {{"n_levels", 3}, {"base_resolution", 16}, {"deterministic", true}}),
             20000},
            {"tiled3d_nearest_det", 3,
             grid_config("TiledGrid", {{"n_levels", 2}, {"base_resolution", 6}, {"interpolation", "Nearest"},
                                       {"deterministic", true}}),
             9000},
            {"hash7d_f2_det", 7,
             grid_config("HashGrid", {{"n_levels", 2}, {"log2_hashmap_size", 9}, {"base_resolution", 2},
                                      {"deterministic", true}}),
             3000}};
    const std::vector<grid_gpu::Variant> variants = {
            variant_with([](auto& v) { v.det_shared_words = 0; }), variant_with([](auto& v) { v.det_shared_words = 1; }),
            variant_with([](auto& v) { v.det_shared_words = 1; v.shared_kib = 100; })};
    for (const Case& k : cases)
        for (DType dtype : {DType::f32, DType::f16}) {
            SCOPED_TRACE(msg(k.name, " ", dtype_name(dtype)));
            const EncodingCase c = grid_case(k.name, k.n_dims, k.config, k.batch);
            const auto enc = create_encoding(c.n_dims, c.config, dtype);
            EncodingData data = make_data(c, *enc, dtype, 47);
            const ErrorModel m = error_model(c, *enc);
            TestStream stream(Device::gpu(0));
            std::vector<double> finite_base;  // pass 0's gradient (64-bit slots)
            // Passes: finite; NaN in dL/dy at the last level only (that level NaN, the others, the
            // shared-memory ones among them, reduced as usual); then inf in x too (every level NaN).
            for (int pass : {0, 1, 2}) {
                const bool non_finite = pass > 0;
                SCOPED_TRACE(pass == 0 ? "finite" : pass == 1 ? "NaN in dL/dy" : "NaN in dL/dy, inf in x");
                if (pass == 1)
                    data.dL_dy[3 * enc->n_output_dims() + enc->n_output_dims() - 1] = std::numeric_limits<double>::quiet_NaN();
                if (pass == 2) data.x[size_t(k.batch - 5) * c.n_dims] = std::numeric_limits<double>::infinity();
                const EncodingResult naive = run_encoding(*enc, Stream::cpu(), data, c.batch);
                const EncodingResult base = run_encoding(*enc, stream, data, c.batch);
                if (!non_finite) {
                    const EncodingResult ref =
                        run_encoding(*create_encoding(c.n_dims, c.config, DType::f64), Stream::cpu(), data, c.batch);
                    compare(base.dL_dparams, ref.dL_dparams, naive.dL_dparams, m.dL_dparams, "dL/dparams");
                    finite_base = base.dL_dparams;
                } else {  // a non-finite contribution makes its whole level NaN on the deterministic path
                    size_t n_nan = 0, missed = 0;
                    for (size_t i = 0; i < naive.dL_dparams.size(); ++i)
                        if (std::isnan(naive.dL_dparams[i])) {
                            ++n_nan;
                            missed += std::isnan(base.dL_dparams[i]) ? 0 : 1;
                        }
                    EXPECT_GT(n_nan, 0u) << "the case must reach NaN entries";
                    EXPECT_EQ(missed, 0u) << "entries NaN on the CPU but not here";
                    if (pass == 1) {
                        // Exponents are per level: the levels before the last one (whose parameters come
                        // first) keep pass 0's bits; the last level is NaN as a whole: one NaN range.
                        const std::vector<double>& got = base.dL_dparams;
                        size_t first_nan = got.size();
                        for (size_t i = 0; i < got.size() && first_nan == got.size(); ++i)
                            if (std::isnan(got[i])) first_nan = i;
                        EXPECT_GT(first_nan, 0u) << "a NaN in the last level's dL/dy must leave the others finite";
                        size_t differ = 0, finite_after = 0;
                        for (size_t i = 0; i < got.size(); ++i) {
                            if (i < first_nan) differ += std::memcmp(&got[i], &finite_base[i], sizeof(double)) != 0;
                            else finite_after += std::isnan(got[i]) ? 0 : 1;
                        }
                        EXPECT_EQ(differ, 0u) << "entries of the finite levels changed";
                        EXPECT_EQ(finite_after, 0u) << "the NaN level is not one range at the end";
                    }
                }
                for (const grid_gpu::Variant& v : variants) {
                    SCOPED_TRACE(msg("det_shared_words ", v.det_shared_words, " shared_kib ", v.shared_kib));
                    grid_gpu::set_variant(v);
                    const EncodingResult got = run_encoding(*enc, stream, data, c.batch);
                    grid_gpu::set_variant({});
                    expect_same_bits(to_float(got.dL_dparams), to_float(base.dL_dparams), "dL/dparams");
                }
            }
        }
}
#endif  // TNN_WITH_CUDA

// The fast gradient's conversion from the fp32 scratch to fp16 / bf16 parameters: four values per thread
// when the gradient is 4-element aligned (grid_gradient_from_float_quads_kernel, with its tail: 162
// values for the Tiled case, 162 % 4 = 2), one per thread otherwise (the gradient one element further
// on), in overwrite and accumulate mode; the deterministic one's from 64-bit integers the same way, two
// values per thread when aligned (grid_gradient_from_fixed_kernel; F = 2 and F = 1 levels), one
// otherwise. The overwritten gradient matches the reference; accumulating onto a prefill gives the
// prefill plus the overwritten gradient within one rounding of each to the dtype and the fp32 atomics'
// reordering.
TEST(GridGpu, GradientConversionAccumulatesAtEveryAlignment) {
    TNN_SKIP_WITHOUT_GPU();
    SwitchGuard guard;
    const EncodingCase tiled = grid_case("tiled3d_f2_162_values", 3,
                                         grid_config("TiledGrid", {{"n_levels", 3}, {"base_resolution", 3}}), 300);
    // Tiled, F = 1, 5^3 entries per level, deterministic: level 0's 125 values are 62 pairs and a tail, and
    // level 1 starts at value 125, odd (one value per thread).
    const EncodingCase tiled_odd = grid_case("tiled3d_f1_125_deterministic", 3,
                                             grid_config("TiledGrid", {{"n_levels", 2}, {"n_features_per_level", 1},
                                                                       {"base_resolution", 5}, {"deterministic", true}}),
                                             300);
    for (const EncodingCase* c : {&case_named("hash3d_f2_linear"), &tiled, &case_named("hash3d_f2_deterministic"),
                                  &case_named("dense3d_f1_deterministic_smoothstep"), &tiled_odd})
        for (DType dtype : {DType::f16, DType::bf16})
            for (int64_t offset : {int64_t(0), int64_t(1)}) {
                SCOPED_TRACE(msg(c->name, " ", dtype_name(dtype), " offset ", offset));
                const auto enc = create_encoding(c->n_dims, c->config, dtype);
                const EncodingData data = make_data(*c, *enc, dtype, 43);
                const EncodingResult naive = run_encoding(*enc, Stream::cpu(), data, c->batch);
                const EncodingResult ref =
                    run_encoding(*create_encoding(c->n_dims, c->config, DType::f64), Stream::cpu(), data, c->batch);
                const int64_t n = static_cast<int64_t>(enc->n_params());
                const Device gpu = Device::gpu(0);
                TestStream stream(gpu);
                const DeviceInputs in = upload_inputs(*c, *enc, data, gpu);
                const Tensor &x = in.x, &p = in.p, &g = in.g;
                Tensor y(c->batch, enc->n_output_dims(), dtype, gpu);
                std::vector<double> prefill(static_cast<size_t>(n + offset));
                Pcg32 rng(47);
                for (double& v : prefill) v = 2.0 * rng.next_float() - 1.0;
                auto run = [&](GradMode mode) {
                    Tensor dp = upload(prefill, 1, n + offset, dtype, gpu);
                    void* at = static_cast<char*>(dp.data()) + offset * static_cast<int64_t>(dtype_size(dtype));
                    auto ctx = enc->forward(stream, x.view(), y.view(), p.data(), false);
                    enc->backward(stream, *ctx, x.view(), y.view(), g.view(), nullptr, at, p.data(), mode);
                    stream.stream().synchronize();
                    const std::vector<double> all = download(dp);
                    return std::vector<double>(all.begin() + offset, all.end());
                };
                const std::vector<double> over = run(GradMode::overwrite), acc = run(GradMode::accumulate);
                compare(over, ref.dL_dparams, naive.dL_dparams, error_model(*c, *enc).dL_dparams, "overwritten dL/dparams");
                // The prefill as stored (rounded to the dtype), then the expected sums.
                const std::vector<double> stored = [&] {
                    const std::vector<double> all = download(upload(prefill, 1, n + offset, dtype, gpu));
                    return std::vector<double>(all.begin() + offset, all.end());
                }();
                std::vector<double> want(static_cast<size_t>(n));
                for (int64_t i = 0; i < n; ++i) want[i] = stored[i] + over[i];
                const double eps = dtype_epsilon(dtype), m = max_abs(over);
                const double atol = static_cast<double>(c->batch) * 8 * dtype_epsilon(DType::f32) * (1 + m) + eps * m;
                expect_close(acc, want, atol, eps, "accumulated gradient");
            }
}

// The gradient's scratch in parts (Variant::staged_scratch): each group of levels' part zeroed just before
// its kernel and converted just after, the other levels (shared memory, beside) zeroed first and converted
// last. Every run fills the scratch with garbage first (Variant::poison_scratch: NaN in fp32, about 2^63
// in fixed point), so that a part left unzeroed shows. With 1 KiB groups every level is a group of its own:
// - Dense levels of 6^3 = 216 entries (F = 2): every other level starts in the middle of a 128-byte line
//   of fp32 scratch, where the conversion may drop only the lines wholly inside the level (a line dropped
//   too early loses its sums);
// - Tiled levels of 5^3 = 125 entries, F = 4 fp32 (2000 bytes) and F = 2 fixed point (2000 bytes): the
//   levels' starts take every 16-byte offset in their line (lead 0-7 of convert_values);
// - Tiled levels of 7^3 = 343 entries, F = 1 (1372 bytes of fp32, more than a group): fp32 levels starting
//   12, 8 or 4 bytes past a 16-byte boundary and fixed-point ones 8 bytes past (the head of convert_values:
//   3, 2, 1 or 1 values one per thread up to the boundary);
// - Dense levels 0 (216 entries, shared memory, the rest) and 1 (global, a group) share a 128-byte line,
//   with rows near (1, 1, 1) so that level 0's last entries, in that line, get large sums: the group's
//   conversion must leave the line to the rest's.
// First- and second-order passes; the fast gradient against the reference (overwrite and accumulate), the
// deterministic one bit for bit against the whole scratch (both modes). Hooks count the groups converted
// in parts (some for every staged variant, none for the whole scratch), the passes that staged (all four
// of the two runs without shared-memory levels; the second-order pass never has any, so it may stage
// where the first-order one does not) and the deterministic conversions that zeroed the next group's
// part (Variant::fused_zeroing; against a memset per part): every group but each staged pass's first.
TEST(GridGpu, GradientScratchInStagedGroups) {
    TNN_SKIP_WITHOUT_GPU();
    SwitchGuard guard;
    auto with_det = [](json j) {
        j["deterministic"] = true;
        return j;
    };
    const json dense = grid_config("DenseGrid", {{"n_levels", 6}, {"base_resolution", 6}, {"per_level_scale", 1.0}});
    const json tiled4 = grid_config("TiledGrid", {{"n_levels", 8}, {"n_features_per_level", 4},
                                                  {"base_resolution", 5}, {"per_level_scale", 1.0}});
    const json tiled2 = grid_config("TiledGrid", {{"n_levels", 8}, {"base_resolution", 5}, {"per_level_scale", 1.0}});
    const json tiled1 = grid_config("TiledGrid", {{"n_levels", 8}, {"n_features_per_level", 1},
                                                  {"base_resolution", 7}, {"per_level_scale", 1.0}});
    const json mixed = grid_config("DenseGrid", {{"n_levels", 2}, {"base_resolution", 6}, {"per_level_scale", 4.0}});
    struct StagedCase {
        EncodingCase c;
        bool corner_rows;  // half the rows near (1, 1, 1)
    };
    const std::vector<StagedCase> cases = {
        {grid_case("dense3d_f2_216_entries", 3, dense, 500), false},
        {grid_case("dense3d_f2_216_entries_deterministic", 3, with_det(dense), 500), false},
        {grid_case("tiled3d_f4_125_entries", 3, tiled4, 400), false},
        {grid_case("tiled3d_f2_125_entries_deterministic", 3, with_det(tiled2), 400), false},
        {grid_case("tiled3d_f1_343_entries", 3, tiled1, 400), false},
        {grid_case("tiled3d_f1_343_entries_deterministic", 3, with_det(tiled1), 400), false},
        {grid_case("dense3d_f2_shared_line_with_a_group", 3, mixed, 600), true},
        {case_named("hash3d_f2_linear"), false},
        {case_named("hash3d_f2_deterministic"), false},
        {case_named("hash6d_f2_deterministic"), false}};
    auto staged_variant = [](int shared_kib, int group_kib, int staged, int fused = 1) {
        return variant_with([=](auto& v) {
            v.shared_kib = shared_kib;
            v.level_group_kib = group_kib;
            v.staged_scratch = staged;
            v.fused_zeroing = fused;
            v.poison_scratch = 1;
        });
    };
    // The whole scratch first: the reference for the deterministic bits. Fused zeroing (the first group's
    // part with the rest, later ones in the previous group's conversion) and a memset per part.
    const std::vector<grid_gpu::Variant> variants = {
        staged_variant(0, 1, 0), staged_variant(0, 1, 1), staged_variant(0, 1, 1, 0), staged_variant(-1, 1, 1),
        staged_variant(-1, 1, 1, 0), staged_variant(0, 0, 1), staged_variant(-1, 0, 1), staged_variant(-1, 0, 0)};
    for (const StagedCase& sc : cases)
        for (DType dtype : {DType::f32, DType::f16, DType::bf16}) {
            const EncodingCase& c = sc.c;
            SCOPED_TRACE(msg(c.name, " ", dtype_name(dtype)));
            const bool det = c.config.value("deterministic", false);
            const auto enc = create_encoding(c.n_dims, c.config, dtype);
            EncodingData data = make_data(c, *enc, dtype, 61);
            if (sc.corner_rows)
                for (size_t i = 0; i < data.x.size() / 2; ++i) data.x[i] = 1.0 - 0.02 * data.x[i];
            const EncodingResult ref =
                run_encoding(*create_encoding(c.n_dims, c.config, DType::f64), Stream::cpu(), data, c.batch);
            const EncodingResult naive = run_encoding(*enc, Stream::cpu(), data, c.batch);
            const ErrorModel m = error_model(c, *enc);
            TestStream stream(Device::gpu(0));
            std::vector<EncodingResult> whole;  // overwrite, accumulate
            for (const grid_gpu::Variant& v : variants) {
                SCOPED_TRACE(msg("shared_kib ", v.shared_kib, " level_group_kib ", v.level_group_kib, " staged ",
                                 v.staged_scratch, " fused_zeroing ", v.fused_zeroing));
                grid_gpu::set_variant(v);
                const uint64_t groups_before = grid_gpu::staged_scratch_groups();
                const uint64_t fused_before = grid_gpu::fused_zeroings();
                const uint64_t passes_before = grid_gpu::staged_scratch_passes();
                const EncodingResult got = run_encoding(*enc, stream, data, c.batch);
                const uint64_t overwrite_passes = grid_gpu::staged_scratch_passes() - passes_before;
                const EncodingResult acc = run_encoding(*enc, stream, data, c.batch, GradMode::accumulate, 0.5);
                const uint64_t staged_groups = grid_gpu::staged_scratch_groups() - groups_before;
                const uint64_t fused = grid_gpu::fused_zeroings() - fused_before;
                const uint64_t staged_passes = grid_gpu::staged_scratch_passes() - passes_before;
                grid_gpu::set_variant({});
                // A run has two gradient passes (backward, backward_backward_input); the accumulate run
                // stages as the overwrite one.
                EXPECT_EQ(staged_passes, 2 * overwrite_passes) << "staged passes";
                EXPECT_LE(staged_passes, 4u) << "staged passes";
                EXPECT_EQ(staged_groups == 0, staged_passes == 0) << "staged passes";
                // Only the deterministic conversion zeroes the next group's part: every group but the first
                // of each staged pass (each group here one range of levels).
                if (v.fused_zeroing == 0 || !det) EXPECT_EQ(fused, 0u) << "fused zeroings";
                else EXPECT_EQ(fused, staged_groups - staged_passes) << "fused zeroings";
                // Staged wherever there is scratch (not the fast path's fp32 parameters) and the global
                // levels go in groups (the shared-memory levels can take them all; the deterministic
                // gradient groups levels for F > 1 only).
                const bool grouped = !det || c.config.value("n_features_per_level", 2) > 1;
                if (v.staged_scratch == 0 || (!det && dtype == DType::f32) || !grouped)
                    EXPECT_EQ(staged_groups, 0u) << "groups converted in parts";
                else if (v.shared_kib == 0)
                    EXPECT_EQ(staged_passes, 4u) << "every pass staged without shared-memory levels";
                compare(got.dL_dparams, ref.dL_dparams, naive.dL_dparams, m.dL_dparams, "dL/dparams");
                compare(got.dL_dparams2, ref.dL_dparams2, naive.dL_dparams2, m.dL_dparams2, "dL'/dparams");
                if (det) {
                    if (whole.empty()) whole = {got, acc};
                    expect_same_bits(to_float(whole[0].dL_dparams), to_float(got.dL_dparams), "dL/dparams staged or not");
                    expect_same_bits(to_float(whole[0].dL_dparams2), to_float(got.dL_dparams2),
                                     "dL'/dparams staged or not");
                    expect_same_bits(to_float(whole[1].dL_dparams), to_float(acc.dL_dparams),
                                     "accumulated dL/dparams staged or not");
                } else {
                    // 0.5 + the overwritten gradient, which the atomics reach in another order (c.batch * 8
                    // terms of fp32 rounding), stored in the dtype.
                    std::vector<double> want(got.dL_dparams.size());
                    for (size_t i = 0; i < want.size(); ++i) want[i] = 0.5 + got.dL_dparams[i];
                    const double eps = dtype_epsilon(dtype), mx = max_abs(got.dL_dparams);
                    const double atol = c.batch * 8 * dtype_epsilon(DType::f32) * (1 + mx) + eps * mx;
                    expect_close(acc.dL_dparams, want, atol, eps, "accumulated dL/dparams");
                }
            }
        }
}

// The level-major copy of dL/dy goes through shared memory in groups of levels (23 levels of F = 8 fp32
// values per launch, 47 of fp16): 56 levels take three launches in fp32 and two in fp16, and a batch of
// 300 rows ends in a partial block of 44 rows. Integer sums give the same bits whatever the layout g
// is read in.
TEST(GridGpu, LevelMajorGradientCopyInGroups) {
    TNN_SKIP_WITHOUT_GPU();
    SwitchGuard guard;
    const EncodingCase c = grid_case("hash3d_f8_L56_deterministic", 3,
                                     grid_config("HashGrid", {{"n_levels", 56}, {"n_features_per_level", 8},
                                                              {"log2_hashmap_size", 10}, {"base_resolution", 2},
                                                              {"per_level_scale", 1.05}, {"deterministic", true}}),
                                     300);
    for (DType dtype : {DType::f32, DType::f16}) {
        SCOPED_TRACE(dtype_name(dtype));
        const auto enc = create_encoding(c.n_dims, c.config, dtype);
        const EncodingData data = make_data(c, *enc, dtype, 31);
        TestStream stream(Device::gpu(0));
        grid_gpu::set_variant(variant_with([](auto& v) { v.level_major_grads = 0; }));
        const EncodingResult rows = run_encoding(*enc, stream, data, c.batch);
        grid_gpu::set_variant(variant_with([](auto& v) { v.level_major_grads = 1; }));
        const EncodingResult levels = run_encoding(*enc, stream, data, c.batch);
        grid_gpu::set_variant({});
        expect_same_bits(to_float(rows.dL_dparams), to_float(levels.dL_dparams), "dL/dparams, g level-major");
        expect_same_bits(to_float(rows.dL_dparams2), to_float(levels.dL_dparams2), "dL'/dparams, g level-major");
    }
}

// A graph replay's dL/dparams against the eager one: the same bits on the deterministic path, else
// within the reordering of batch * 8 fp32 additions per entry (2^D = 8 corners in 3D), and for 16-bit
// gradients (`dtype`) one rounding of those sums to the dtype apart (plus its smallest subnormal).
void expect_replay(const std::vector<double>& got, const std::vector<double>& want, bool det, int64_t batch,
                   const std::string& what, DType dtype = DType::f32) {
    if (det) {
        expect_same_bits(to_float(got), to_float(want), what);
    } else {
        const double tol = static_cast<double>(batch) * 8 * dtype_epsilon(DType::f32) * (1 + max_abs(want));
        if (dtype == DType::f32) expect_close(got, want, tol, 0.0, what);
        else expect_close(got, want, tol + std::ldexp(1.0, -24), 2 * dtype_epsilon(dtype), what);
    }
}

// The parameter gradient forks its shared-memory levels onto a second stream of the calling thread
// (created on first use) and joins it back: a capture on a thread that never ran a grid backward before
// must record both branches. Replays give the eager bits (deterministic), and the fast path's gradient
// within the fp32 atomics' reordering, with and without the overlap.
TEST(GridGpu, BackwardCapturedOnANewThreadReplays) {
    TNN_SKIP_WITHOUT_GPU();
    SwitchGuard guard;
    for (const char* name : {"hash3d_f2_deterministic", "hash3d_f2_linear"})
        for (int overlap : {-1, 0}) {
            SCOPED_TRACE(msg(name, " overlap_shared ", overlap));
            grid_gpu::set_variant(variant_with([&](auto& v) { v.overlap_shared = overlap; }));
            const EncodingCase& c = case_named(name);
            const auto enc = create_encoding(c.n_dims, c.config, DType::f32);
            const EncodingData data = make_data(c, *enc, DType::f32, 17);
            const bool det = c.config.value("deterministic", false);
            std::thread worker([&] {
                const Device gpu = Device::gpu(0);
                TestStream stream(gpu);
                const int64_t n_params = static_cast<int64_t>(enc->n_params());
                const DeviceInputs in = upload_inputs(c, *enc, data, gpu);
                const Tensor &x = in.x, &p = in.p, &g = in.g;
                Tensor y(c.batch, enc->n_output_dims(), DType::f32, gpu), dp(1, n_params, DType::f32, gpu);
                auto step = [&] {
                    auto ctx = enc->forward(stream, x.view(), y.view(), p.data(), false);
                    enc->backward(stream, *ctx, x.view(), y.view(), g.view(), nullptr, dp.data(), p.data(),
                                  GradMode::overwrite);
                };
                TestGraph graph(stream);
                try {
                    step();
                } catch (const std::exception& e) {
                    FAIL() << "the grid's backward must be capturable: " << e.what();
                }
                ASSERT_TRUE(graph.end());
                step();  // eager, after the capture
                stream.stream().synchronize();
                const std::vector<double> want = download(dp);
                for (int replay = 0; replay < 2; ++replay) {
                    fill(stream, dp.view(), 3.0);
                    ASSERT_TRUE(graph.launch());
                    stream.stream().synchronize();
                    expect_replay(download(dp), want, det, c.batch, "graph replay dL/dparams");
                }
            });
            worker.join();
        }
}

// Accumulate mode leaves the levels that get nothing as the caller had them, bit for bit, as the CPU does:
// levels switched off by set_max_level (here 4 and 5 of 6), and every level of a second-order Nearest
// pass. Their entries hold -0, a NaN with a payload and a subnormal, which `dst + 0` would change (-0 to
// +0, the payload to the canonical NaN; fp32 keeps the subnormal only if nothing flushes it). The fast
// path's scratch (fp16 / bf16) and the deterministic path's conversions, whole and staged; fp32 fast
// accumulates into the caller's values directly. The active levels still get the CPU's gradient.
TEST(GridGpu, AccumulateLeavesLevelsThatGetNothingAlone) {
    TNN_SKIP_WITHOUT_GPU();
    SwitchGuard guard;
    for (const char* interp : {"Linear", "Nearest"})
        for (bool det : {false, true})
            for (DType dtype : {DType::f32, DType::f16, DType::bf16})
                for (int staged : {0, -1}) {
                    SCOPED_TRACE(msg(interp, det ? " deterministic " : " fast ", dtype_name(dtype), " staged ",
                                     staged));
                    const json cfg = grid_config("HashGrid", {{"n_levels", 6}, {"log2_hashmap_size", 12},
                                                              {"base_resolution", 4}, {"interpolation", interp},
                                                              {"deterministic", det}});
                    const EncodingCase c = grid_case("hash3d_max_level_accumulate", 3, cfg, 3000);
                    const auto enc = create_encoding(c.n_dims, c.config, dtype);
                    enc->set_max_level(0.5f);  // levels >= 0.5 * 6 + 1e-3 are off: 4 and 5
                    const EncodingData data = make_data(c, *enc, dtype, 77);
                    const int64_t n_params = static_cast<int64_t>(enc->n_params());
                    const int64_t first_off = static_cast<int64_t>(enc->n_params()) -
                                              2 * int64_t(2) * (int64_t(1) << 12);  // levels 4 and 5: 2^12 x F = 2
                    // The caller's gradient: 0.25 everywhere, special values on the switched-off levels.
                    std::vector<double> prefill(static_cast<size_t>(n_params), 0.25);
                    const double specials[] = {-0.0, std::nan(""), std::ldexp(1.0, -130), 3.0};
                    for (int64_t i = first_off; i < n_params; ++i) prefill[i] = specials[i % 4];
                    TestStream stream(Device::gpu(0));
                    grid_gpu::set_variant(variant_with([&](auto& v) {
                        v.staged_scratch = staged;
                        v.level_group_kib = 64;  // several groups
                    }));
                    const DeviceInputs in = upload_inputs(c, *enc, data, Device::gpu(0));
                    Tensor y(c.batch, enc->n_output_dims(), dtype, Device::gpu(0));
                    Tensor dx(c.batch, 3, DType::f32, Device::gpu(0));
                    Tensor w(c.batch, enc->n_output_dims(), dtype, Device::gpu(0));
                    const Tensor vin = upload(data.v, c.batch, 3, DType::f32, Device::gpu(0));
                    auto ctx = enc->forward(stream, in.x.view(), y.view(), in.p.data(), true);
                    for (int order : {1, 2}) {
                        SCOPED_TRACE(msg("order ", order));
                        Tensor dp = upload(prefill, 1, n_params, dtype, Device::gpu(0));
                        const std::vector<double> before = download(dp);
                        if (order == 1) {
                            enc->backward(stream, *ctx, in.x.view(), y.view(), in.g.view(), nullptr, dp.data(),
                                          in.p.data(), GradMode::accumulate);
                        } else {
                            View w_view = w.view(), dx_view = dx.view();
                            enc->backward_backward_input(stream, *ctx, in.x.view(), vin.view(), in.g.view(), &w_view,
                                                         &dx_view, dp.data(), in.p.data(), GradMode::accumulate);
                        }
                        stream.stream().synchronize();
                        const std::vector<double> after = download(dp);
                        // Untouched: the switched-off levels, and every level of the second-order Nearest pass.
                        const int64_t untouched = order == 2 && std::string(interp) == "Nearest" ? 0 : first_off;
                        const std::vector<float> b(before.begin() + untouched, before.end()),
                                a(after.begin() + untouched, after.end());
                        expect_same_bits(a, b, "levels that get nothing");
                        if (untouched > 0) {
                            double changed = 0;
                            for (int64_t i = 0; i < untouched; ++i) changed += after[i] != before[i] ? 1 : 0;
                            EXPECT_GT(changed, 0) << "the active levels got no gradient";
                        }
                    }
                    grid_gpu::set_variant({});
                }
}

// Two threads, two Tiled grids whose shared-memory levels opt in to different sizes past 48 KiB (the
// split fixed-point slots, 96 KiB budget: both features of a 16^3 level, 65552 bytes; one feature of a
// 20^3 level, 64016 bytes). The opt-in is an attribute of the kernel: when each call set its own size, one
// thread's smaller size could land between the other's setting and its launch, which then failed. Every
// call must succeed and give the thread's first gradient (fp32 atomics: within their reordering).
TEST(GridGpu, SharedMemoryOptInFromTwoThreads) {
    TNN_SKIP_WITHOUT_GPU();
    SwitchGuard guard;
    grid_gpu::set_variant({});
    const std::vector<EncodingCase> cases = {
        grid_case("tiled3d_b16", 3, grid_config("TiledGrid", {{"n_levels", 2}, {"base_resolution", 16},
                                                              {"per_level_scale", 1.0}}), 20000),
        grid_case("tiled3d_b20", 3, grid_config("TiledGrid", {{"n_levels", 2}, {"base_resolution", 20},
                                                              {"per_level_scale", 1.0}}), 20000)};
    std::vector<std::thread> workers;
    std::vector<std::string> errors(cases.size());
    for (size_t t = 0; t < cases.size(); ++t)
        workers.emplace_back([&, t] {
            const EncodingCase& c = cases[t];
            const auto enc = create_encoding(c.n_dims, c.config, DType::f32);
            const EncodingData data = make_data(c, *enc, DType::f32, 41 + t);
            const Device gpu = Device::gpu(0);
            TestStream stream(gpu);
            const DeviceInputs in = upload_inputs(c, *enc, data, gpu);
            Tensor y(c.batch, enc->n_output_dims(), DType::f32, gpu);
            Tensor dp(1, static_cast<int64_t>(enc->n_params()), DType::f32, gpu);
            std::vector<double> first;
            try {
                for (int i = 0; i < 60; ++i) {
                    auto ctx = enc->forward(stream, in.x.view(), y.view(), in.p.data(), false);
                    enc->backward(stream, *ctx, in.x.view(), y.view(), in.g.view(), nullptr, dp.data(), in.p.data(),
                                  GradMode::overwrite);
                    if (i == 0 || i == 59) {
                        stream.stream().synchronize();
                        if (i == 0) first = download(dp);
                        else expect_replay(download(dp), first, false, c.batch, msg(c.name, " dL/dparams, call 60"));
                    }
                }
            } catch (const std::exception& e) {
                errors[t] = e.what();
            }
        });
    for (auto& w : workers) w.join();
    for (size_t t = 0; t < cases.size(); ++t) EXPECT_EQ(errors[t], "") << cases[t].name;
}

// Side streams follow the caller's stream: two captures open at once on one thread, each forking its
// shared-memory levels, and while they are open eager backwards on more streams than a thread keeps side
// streams for (kSideStreams = 8 in grid.cu), so that the least recently used are replaced, never one
// inside an open capture. Every eager result and every replay gives the first eager result (bits on the
// deterministic path). Relaxed capture mode: the eager calls' temporary memory may come from the driver.
// Then a capture in global mode past the kept number of side streams.
TEST(GridGpu, SideStreamsFollowTheCallersStream) {
    TNN_SKIP_WITHOUT_GPU();
    SwitchGuard guard;
    grid_gpu::set_variant(variant_with([](auto& v) { v.overlap_shared = 1; }));
    for (const char* name : {"hash3d_f2_deterministic", "hash3d_f2_linear"}) {
        SCOPED_TRACE(name);
        const EncodingCase& c = case_named(name);
        const auto enc = create_encoding(c.n_dims, c.config, DType::f32);
        const EncodingData data = make_data(c, *enc, DType::f32, 23);
        const bool det = c.config.value("deterministic", false);
        const Device gpu = Device::gpu(0);
        const int64_t n_params = static_cast<int64_t>(enc->n_params());
        const DeviceInputs in = upload_inputs(c, *enc, data, gpu);
        const Tensor &x = in.x, &p = in.p, &g = in.g;
        // One output pair per backward: the two captures and 10 eager calls on their own streams.
        constexpr int kEager = 10, kRuns = 2 + kEager;
        std::vector<std::unique_ptr<TestStream>> streams;
        std::vector<Tensor> ys, dps;
        for (int i = 0; i < kRuns; ++i) {
            streams.push_back(std::make_unique<TestStream>(gpu));
            ys.emplace_back(c.batch, enc->n_output_dims(), DType::f32, gpu);
            dps.emplace_back(1, n_params, DType::f32, gpu);
        }
        auto backward = [&](int i) {
            const Stream s = streams[i]->stream();
            auto ctx = enc->forward(s, x.view(), ys[i].view(), p.data(), false);
            enc->backward(s, *ctx, x.view(), ys[i].view(), g.view(), nullptr, dps[i].data(), p.data(),
                          GradMode::overwrite);
        };
        TestStream first(gpu);
        Tensor y0(c.batch, enc->n_output_dims(), DType::f32, gpu), dp0(1, n_params, DType::f32, gpu);
        {
            auto ctx = enc->forward(first, x.view(), y0.view(), p.data(), false);
            enc->backward(first, *ctx, x.view(), y0.view(), g.view(), nullptr, dp0.data(), p.data(), GradMode::overwrite);
        }
        first.stream().synchronize();
        const std::vector<double> want = download(dp0);
        {
            TestGraph a(*streams[0], gpu_stream_capture_mode_relaxed);
            backward(0);
            TestGraph b(*streams[1], gpu_stream_capture_mode_relaxed);
            backward(1);
            for (int i = 2; i < kRuns; ++i) backward(i);
            ASSERT_TRUE(b.end());
            ASSERT_TRUE(a.end());
            for (int i = 2; i < kRuns; ++i) {
                streams[i]->stream().synchronize();
                expect_replay(download(dps[i]), want, det, c.batch, msg("eager backward ", i, " during the captures"));
            }
            for (int i : {0, 1}) fill(*streams[i], dps[i].view(), 3.0);
            ASSERT_TRUE(a.launch());
            ASSERT_TRUE(b.launch());
            for (int i : {0, 1}) {
                streams[i]->stream().synchronize();
                expect_replay(download(dps[i]), want, det, c.batch, msg("replay of capture ", i));
            }
        }
        // A capture in the default (global) mode on yet another stream, the thread now holding the most
        // side streams it keeps: a capturing caller adds one and destroys none during its capture.
        TestStream late(gpu);
        TestGraph graph(late);
        {
            auto ctx = enc->forward(late, x.view(), y0.view(), p.data(), false);
            enc->backward(late, *ctx, x.view(), y0.view(), g.view(), nullptr, dp0.data(), p.data(), GradMode::overwrite);
        }
        ASSERT_TRUE(graph.end());
        fill(late, dp0.view(), 3.0);
        ASSERT_TRUE(graph.launch());
        late.stream().synchronize();
        expect_replay(download(dp0), want, det, c.batch, "replay of a global-mode capture past the kept side streams");
    }
}

// Parameters that are not 16-byte aligned (a grid after a PortableMLP with an odd parameter count)
// take the one-load-per-value path: same output bits.
TEST(GridGpu, MisalignedParametersGiveTheSameOutput) {
    TNN_SKIP_WITHOUT_GPU();
    for (const char* name : {"hash3d_f2_linear", "dense3d_f1_linear", "hash2d_f4_smoothstep", "tiled2d_f8_nearest"})
        for (DType dtype : {DType::f32, DType::f16, DType::bf16}) {
            const EncodingCase& c = case_named(name);
            SCOPED_TRACE(msg(name, " ", dtype_name(dtype)));
            const auto enc = create_encoding(c.n_dims, c.config, dtype);
            const EncodingData data = make_data(c, *enc, dtype, 6);
            const Device gpu = Device::gpu(0);
            TestStream stream(gpu);
            const int64_t n_params = static_cast<int64_t>(enc->n_params());
            std::vector<double> shifted(1, 0.0);
            shifted.insert(shifted.end(), data.params.begin(), data.params.end());
            const Tensor p = upload(data.params, 1, n_params, dtype, gpu), q = upload(shifted, 1, n_params + 1, dtype, gpu);
            const Tensor x = upload(data.x, c.batch, c.n_dims, DType::f32, gpu);
            Tensor y1(c.batch, enc->n_output_dims(), dtype, gpu), y2(c.batch, enc->n_output_dims(), dtype, gpu);
            enc->inference(stream, x.view(), y1.view(), p.data());
            enc->inference(stream, x.view(), y2.view(), static_cast<const char*>(q.data()) + dtype_size(dtype));
            stream.stream().synchronize();
            expect_same_bits(to_float(download(y1)), to_float(download(y2)), "aligned vs misaligned parameters");
        }
}

// Accumulate mode adds the gradient once: bit-exact for the deterministic fp32 path (one fp32 add per
// value), within the fp32 atomics' reordering for the fast path.
TEST(GridGpu, AccumulateAddsToTheGradient) {
    TNN_SKIP_WITHOUT_GPU();
    for (const char* name : {"hash3d_f2_deterministic", "hash3d_f2_linear"}) {
        const EncodingCase& c = case_named(name);
        SCOPED_TRACE(name);
        const auto enc = create_encoding(c.n_dims, c.config, DType::f32);
        const EncodingData data = make_data(c, *enc, DType::f32, 8);
        TestStream stream(Device::gpu(0));
        const EncodingResult once = run_encoding(*enc, stream, data, c.batch);
        const EncodingResult acc = run_encoding(*enc, stream, data, c.batch, GradMode::accumulate, 0.5);
        std::vector<float> want(once.dL_dparams.size()), want2(once.dL_dparams2.size());
        for (size_t i = 0; i < want.size(); ++i) want[i] = 0.5f + static_cast<float>(once.dL_dparams[i]);
        for (size_t i = 0; i < want2.size(); ++i) want2[i] = 0.5f + static_cast<float>(once.dL_dparams2[i]);
        if (c.config.value("deterministic", false)) {
            expect_same_bits(to_float(acc.dL_dparams), want, "accumulated dL/dparams");
            expect_same_bits(to_float(acc.dL_dparams2), want2, "accumulated dL'/dparams");
        } else {
            // The atomics add the batch's terms to 0.5 in another order: c.batch * 8 terms of fp32 rounding.
            const double tol = c.batch * 8 * dtype_epsilon(DType::f32) * (1 + max_abs(once.dL_dparams));
            expect_close(acc.dL_dparams, std::vector<double>(want.begin(), want.end()), tol, 0.0, "accumulated dL/dparams");
        }
    }
}

// Strided input, output and gradient views (a column slice of wider tensors) give the same bits as
// contiguous ones.
TEST(GridGpu, StridedViews) {
    TNN_SKIP_WITHOUT_GPU();
    const EncodingCase& c = case_named("hash3d_f2_deterministic");
    const auto enc = create_encoding(c.n_dims, c.config, DType::f16);
    const EncodingData data = make_data(c, *enc, DType::f16, 12);
    const Device gpu = Device::gpu(0);
    TestStream stream(gpu);
    const EncodingResult want = run_encoding(*enc, stream, data, c.batch);
    const int64_t n_out = enc->n_output_dims();
    std::vector<double> x_wide, g_wide;
    for (int64_t r = 0; r < c.batch; ++r) {
        x_wide.push_back(-5.0);  // column 0: not part of the view
        for (int d = 0; d < 3; ++d) x_wide.push_back(data.x[r * 3 + d]);
        x_wide.push_back(-7.0);
        g_wide.push_back(3.0);
        for (int64_t k = 0; k < n_out; ++k) g_wide.push_back(data.dL_dy[r * n_out + k]);
    }
    const Tensor xw = upload(x_wide, c.batch, 5, DType::f32, gpu), gw = upload(g_wide, c.batch, n_out + 1, DType::f16, gpu);
    const Tensor p = upload(data.params, 1, static_cast<int64_t>(enc->n_params()), DType::f16, gpu);
    Tensor yw(c.batch, n_out + 3, DType::f16, gpu), dxw(c.batch, 4, DType::f32, gpu);
    Tensor dp(1, static_cast<int64_t>(enc->n_params()), DType::f16, gpu);
    const ConstView x = xw.view().cols_slice(1, 3), g = gw.view().cols_slice(1, n_out);
    View y = yw.view().cols_slice(2, n_out), dx = dxw.view().cols_slice(1, 3);
    auto ctx = enc->forward(stream, x, y, p.data(), true);
    enc->backward(stream, *ctx, x, y, g, &dx, dp.data(), p.data(), GradMode::overwrite);
    stream.stream().synchronize();
    const std::vector<double> yv = download(yw), dxv = download(dxw);
    std::vector<double> y_got, dx_got;
    for (int64_t r = 0; r < c.batch; ++r) {
        for (int64_t k = 0; k < n_out; ++k) y_got.push_back(yv[r * (n_out + 3) + 2 + k]);
        for (int d = 0; d < 3; ++d) dx_got.push_back(dxv[r * 4 + 1 + d]);
    }
    expect_same_bits(to_float(y_got), to_float(want.y), "strided output");
    expect_same_bits(to_float(dx_got), to_float(want.dL_dx), "strided dL/dinput");
    expect_same_bits(to_float(download(dp)), to_float(want.dL_dparams), "dL/dparams from strided views");
}

// A warmed-up forward + backward (both gradient paths) replays from a captured graph with the same bits.
TEST(GridGpu, TrainingStepReplaysFromACapturedGraph) {
    TNN_SKIP_WITHOUT_GPU();
    for (const char* name : {"hash3d_f2_deterministic", "composite_product"}) {
        const EncodingCase& c = case_named(name);
        SCOPED_TRACE(name);
        const auto enc = create_encoding(c.n_dims, c.config, DType::f16);
        const EncodingData data = make_data(c, *enc, DType::f16, 21);
        const Device gpu = Device::gpu(0);
        TestStream stream(gpu);
        const EncodingResult want = run_encoding(*enc, stream, data, c.batch);  // also the warm-up
        const int64_t n_out = enc->n_output_dims(), n_params = static_cast<int64_t>(enc->n_params());
        const DeviceInputs in = upload_inputs(c, *enc, data, gpu);
        const Tensor &x = in.x, &p = in.p, &g = in.g;
        Tensor y(c.batch, n_out, DType::f16, gpu), dp(1, n_params, DType::f16, gpu), dx(c.batch, c.n_dims, DType::f32, gpu);
        TestGraph graph(stream);
        try {
            auto ctx = enc->forward(stream, x.view(), y.view(), p.data(), true);
            View dx_view = dx.view();
            enc->backward(stream, *ctx, x.view(), y.view(), g.view(), &dx_view, dp.data(), p.data(),
                          GradMode::overwrite);
        } catch (const std::exception& e) {
            FAIL() << "a warmed-up encoding step must be capturable: " << e.what();
        }
        ASSERT_TRUE(graph.end());
        for (int replay = 0; replay < 2; ++replay) {
            fill(stream, y.view(), 0.0);
            fill(stream, dp.view(), 0.0);
            ASSERT_TRUE(graph.launch());
            stream.stream().synchronize();
            expect_same_bits(to_float(download(y)), to_float(want.y), "graph replay output");
            expect_same_bits(to_float(download(dp)), to_float(want.dL_dparams), "graph replay dL/dparams");
            expect_same_bits(to_float(download(dx)), to_float(want.dL_dx), "graph replay dL/dinput");
        }
    }
}

// The fast gradient of 16-bit grids (fp32 scratch, converted at the end; on sm_90 the conversion drops
// the scratch's L2 lines once read) captured in a graph: replays after the scratch's pool memory was
// reused give the eager gradient within the fp32 atomics' reordering plus one rounding to T apart.
TEST(GridGpu, HalfGradientReplaysFromACapturedGraph) {
    TNN_SKIP_WITHOUT_GPU();
    SwitchGuard guard;
    grid_gpu::set_variant({});
    for (DType dtype : {DType::f16, DType::bf16}) {
        const EncodingCase& c = case_named("hash3d_f2_linear");
        SCOPED_TRACE(dtype_name(dtype));
        const auto enc = create_encoding(c.n_dims, c.config, dtype);
        const EncodingData data = make_data(c, *enc, dtype, 29);
        const Device gpu = Device::gpu(0);
        TestStream stream(gpu);
        const int64_t n_params = static_cast<int64_t>(enc->n_params());
        const DeviceInputs in = upload_inputs(c, *enc, data, gpu);
        const Tensor &x = in.x, &p = in.p, &g = in.g;
        Tensor y(c.batch, enc->n_output_dims(), dtype, gpu), dp(1, n_params, dtype, gpu);
        auto step = [&] {
            auto ctx = enc->forward(stream, x.view(), y.view(), p.data(), false);
            enc->backward(stream, *ctx, x.view(), y.view(), g.view(), nullptr, dp.data(), p.data(), GradMode::overwrite);
        };
        step();  // eager: the reference, and the warm-up
        stream.stream().synchronize();
        const std::vector<double> want = download(dp);
        TestGraph graph(stream);
        step();
        ASSERT_TRUE(graph.end());
        for (int replay = 0; replay < 2; ++replay) {
            fill(stream, dp.view(), 3.0);
            step();  // eager between replays: the pool hands the scratch's memory out again
            fill(stream, dp.view(), 3.0);
            ASSERT_TRUE(graph.launch());
            stream.stream().synchronize();
            expect_replay(download(dp), want, false, c.batch, "graph replay dL/dparams", dtype);
        }
    }
}

// A scratch larger than one pass of the conversion's grid (more than 65536 blocks x 256 threads of
// quads: 4 hashed levels of 2^22 entries, F = 8, 2^27 values), so that its grid-stride loop (and the
// discard of each whole line) runs twice: the fast gradient against the deterministic one, which goes
// through another conversion kernel, within the fp32 reordering plus one rounding; entries no row
// touched exactly zero.
TEST(GridGpu, LargeGradientConversionLoopsOverTheScratch) {
    TNN_SKIP_WITHOUT_GPU();
    SwitchGuard guard;
    grid_gpu::set_variant({});
    const json config = {{"otype", "HashGrid"}, {"n_levels", 4}, {"n_features_per_level", 8}, {"log2_hashmap_size", 22},
                         {"base_resolution", 256}, {"per_level_scale", 2.0}, {"interpolation", "Linear"}};
    json det_config = config;
    det_config["deterministic"] = true;
    const auto fast = create_encoding(3, config, DType::f16), det = create_encoding(3, det_config, DType::f16);
    const int64_t rows = 4096, n_params = static_cast<int64_t>(fast->n_params()), n_out = fast->n_output_dims();
    ASSERT_GT(n_params / 4, gpu::kMaxElementwiseBlocks * gpu::kElementwiseThreads)
        << "the case must need two passes of the conversion's grid";
    const Device gpu = Device::gpu(0);
    TestStream stream(gpu);
    std::vector<float> p32(static_cast<size_t>(n_params));
    fast->init_params(5, p32.data());
    const Tensor x = upload(random_vector(size_t(rows) * 3, 0.0, 1.0, 41), rows, 3, DType::f32, gpu);
    const Tensor p = upload(std::vector<double>(p32.begin(), p32.end()), 1, n_params, DType::f16, gpu);
    const Tensor g = upload(random_vector(size_t(rows * n_out), -1.0, 1.0, 43), rows, n_out, DType::f16, gpu);
    Tensor y(rows, n_out, DType::f16, gpu), dp(1, n_params, DType::f16, gpu);
    auto gradient = [&](const Encoding& e) {
        fill(stream, dp.view(), 3.0);
        auto ctx = e.forward(stream, x.view(), y.view(), p.data(), false);
        e.backward(stream, *ctx, x.view(), y.view(), g.view(), nullptr, dp.data(), p.data(), GradMode::overwrite);
        stream.stream().synchronize();
        return download(dp);
    };
    const std::vector<double> want = gradient(*det), got = gradient(*fast);
    size_t touched = 0;
    for (double v : want) touched += v != 0.0;
    EXPECT_GT(touched, size_t(0));
    expect_replay(got, want, false, rows, "fast against deterministic", DType::f16);
    size_t nonzero_untouched = 0;
    for (size_t i = 0; i < want.size(); ++i) nonzero_untouched += want[i] == 0.0 && got[i] != 0.0;
    EXPECT_EQ(nonzero_untouched, size_t(0)) << "entries no row touched must be zero";
}

// A Product composite keeps its nested outputs in the forward stream's temporary memory: a backward
// on another stream, without synchronisation in between, must see them.
TEST(CompositeGpu, BackwardOnAnotherStream) {
    TNN_SKIP_WITHOUT_GPU();
    const EncodingCase& c = case_named("composite_product");
    const auto enc = create_encoding(c.n_dims, c.config, DType::f32);
    const EncodingData data = make_data(c, *enc, DType::f32, 31);
    const Device gpu = Device::gpu(0);
    TestStream s1(gpu), s2(gpu);
    const EncodingResult want = run_encoding(*enc, s1, data, c.batch);
    const int64_t n_out = enc->n_output_dims(), n_params = static_cast<int64_t>(enc->n_params());
    const DeviceInputs in = upload_inputs(c, *enc, data, gpu);
    const Tensor &x = in.x, &p = in.p, &g = in.g;
    Tensor y(c.batch, n_out, DType::f32, gpu), dp(1, n_params, DType::f32, gpu), dx(c.batch, c.n_dims, DType::f32, gpu);
    auto ctx = enc->forward(s1, x.view(), y.view(), p.data(), true);
    View dx_view = dx.view();
    enc->backward(s2, *ctx, x.view(), y.view(), g.view(), &dx_view, dp.data(), p.data(), GradMode::overwrite);
    ctx.reset();
    // New work on s1 may reuse the context's memory: it must wait for the backward on s2.
    Tensor scratch = Tensor::temporary(s1, c.batch, 4, DType::f32);
    fill(s1, scratch.view(), -1.0);
    s2.stream().synchronize();
    s1.stream().synchronize();
    expect_same_bits(to_float(download(dp)), to_float(want.dL_dparams), "dL/dparams with backward on another stream");
    expect_same_bits(to_float(download(dx)), to_float(want.dL_dx), "dL/dinput with backward on another stream");
}

// ---- Permuto ------------------------------------------------------------------------------------------

// The deterministic parameter gradients (fixed point, first and second order) are the same bits run to
// run, with other temporary memory, and with the global switch instead of the key; outputs and dL/dx
// have no atomics and are reproducible anyway.
TEST(PermutoGpu, DeterministicGradientIsBitwiseReproducible) {
    TNN_SKIP_WITHOUT_GPU();
    SwitchGuard guard;
    for (const char* name : {"permuto3d_f2_deterministic", "permuto8d_f2_deterministic", "permuto32d_f2_deterministic"})
        for (DType dtype : {DType::f32, DType::f16, DType::bf16}) {
            const EncodingCase& c = case_named(name);
            SCOPED_TRACE(msg(name, " ", dtype_name(dtype)));
            const auto enc = create_encoding(c.n_dims, c.config, dtype);
            const EncodingData data = make_data(c, *enc, dtype, 99);
            TestStream stream(Device::gpu(0));
            const EncodingResult a = run_encoding(*enc, stream, data, c.batch);
            free_temporary_memory();
            const EncodingResult b = run_encoding(*enc, stream, data, c.batch);
            expect_same_bits(to_float(a.dL_dparams), to_float(b.dL_dparams), "dL/dparams run to run");
            expect_same_bits(to_float(a.dL_dparams2), to_float(b.dL_dparams2), "dL'/dparams run to run");
            json plain = c.config;
            plain.erase("deterministic");
            const auto enc_plain = create_encoding(c.n_dims, plain, dtype);
            set_deterministic(true);
            const EncodingResult g = run_encoding(*enc_plain, stream, data, c.batch);
            set_deterministic(false);
            expect_same_bits(to_float(a.dL_dparams), to_float(g.dL_dparams), "tnn::set_deterministic(true)");
            expect_same_bits(to_float(a.dL_dparams2), to_float(g.dL_dparams2), "tnn::set_deterministic(true), second order");
            expect_same_bits(to_float(a.y), to_float(b.y), "output run to run");
            expect_same_bits(to_float(a.dL_dx), to_float(b.dL_dx), "dL/dinput run to run");
            expect_same_bits(to_float(a.dL_ddLdy), to_float(b.dL_ddLdy), "dL'/d(dL/dy) run to run");
        }
}

TEST(PermutoGpu, AccumulateAddsToTheGradient) {
    TNN_SKIP_WITHOUT_GPU();
    for (const char* name : {"permuto3d_f2_deterministic", "permuto3d_f2"}) {
        const EncodingCase& c = case_named(name);
        SCOPED_TRACE(name);
        const auto enc = create_encoding(c.n_dims, c.config, DType::f32);
        const EncodingData data = make_data(c, *enc, DType::f32, 8);
        TestStream stream(Device::gpu(0));
        const EncodingResult once = run_encoding(*enc, stream, data, c.batch);
        const EncodingResult acc = run_encoding(*enc, stream, data, c.batch, GradMode::accumulate, 0.5);
        std::vector<float> want(once.dL_dparams.size()), want2(once.dL_dparams2.size());
        for (size_t i = 0; i < want.size(); ++i) want[i] = 0.5f + static_cast<float>(once.dL_dparams[i]);
        for (size_t i = 0; i < want2.size(); ++i) want2[i] = 0.5f + static_cast<float>(once.dL_dparams2[i]);
        if (c.config.value("deterministic", false)) {
            expect_same_bits(to_float(acc.dL_dparams), want, "accumulated dL/dparams");
            expect_same_bits(to_float(acc.dL_dparams2), want2, "accumulated dL'/dparams");
        } else {
            // The atomics add the batch's terms to 0.5 in another order: batch x (d + 1) x F terms of fp32
            // rounding on values up to 1 + max|gradient|.
            const double terms = static_cast<double>(c.batch) * (c.n_dims + 1) * 2;
            const double tol = terms * dtype_epsilon(DType::f32) * (1 + max_abs(once.dL_dparams));
            const double tol2 = terms * dtype_epsilon(DType::f32) * (1 + max_abs(once.dL_dparams2));
            expect_close(acc.dL_dparams, std::vector<double>(want.begin(), want.end()), tol, 0.0, "accumulated dL/dparams");
            expect_close(acc.dL_dparams2, std::vector<double>(want2.begin(), want2.end()), tol2, 0.0,
                         "accumulated dL'/dparams");
        }
    }
}

// Strided input, output and gradient views (column slices of wider tensors) give the same bits as
// contiguous ones.
TEST(PermutoGpu, StridedViews) {
    TNN_SKIP_WITHOUT_GPU();
    const EncodingCase& c = case_named("permuto3d_f2_deterministic");
    const auto enc = create_encoding(c.n_dims, c.config, DType::f16);
    const EncodingData data = make_data(c, *enc, DType::f16, 12);
    const Device gpu = Device::gpu(0);
    TestStream stream(gpu);
    const EncodingResult want = run_encoding(*enc, stream, data, c.batch);
    const int64_t n_out = enc->n_output_dims();
    std::vector<double> x_wide, g_wide;
    for (int64_t r = 0; r < c.batch; ++r) {
        x_wide.push_back(-5.0);
        for (int d = 0; d < 3; ++d) x_wide.push_back(data.x[r * 3 + d]);
        x_wide.push_back(-7.0);
        g_wide.push_back(3.0);
        for (int64_t k = 0; k < n_out; ++k) g_wide.push_back(data.dL_dy[r * n_out + k]);
    }
    const Tensor xw = upload(x_wide, c.batch, 5, DType::f32, gpu), gw = upload(g_wide, c.batch, n_out + 1, DType::f16, gpu);
    const Tensor p = upload(data.params, 1, static_cast<int64_t>(enc->n_params()), DType::f16, gpu);
    Tensor yw(c.batch, n_out + 3, DType::f16, gpu), dxw(c.batch, 4, DType::f32, gpu);
    Tensor dp(1, static_cast<int64_t>(enc->n_params()), DType::f16, gpu);
    const ConstView x = xw.view().cols_slice(1, 3), g = gw.view().cols_slice(1, n_out);
    View y = yw.view().cols_slice(2, n_out), dx = dxw.view().cols_slice(1, 3);
    auto ctx = enc->forward(stream, x, y, p.data(), true);
    enc->backward(stream, *ctx, x, y, g, &dx, dp.data(), p.data(), GradMode::overwrite);
    stream.stream().synchronize();
    const std::vector<double> yv = download(yw), dxv = download(dxw);
    std::vector<double> y_got, dx_got;
    for (int64_t r = 0; r < c.batch; ++r) {
        for (int64_t k = 0; k < n_out; ++k) y_got.push_back(yv[r * (n_out + 3) + 2 + k]);
        for (int d = 0; d < 3; ++d) dx_got.push_back(dxv[r * 4 + 1 + d]);
    }
    expect_same_bits(to_float(y_got), to_float(want.y), "strided output");
    expect_same_bits(to_float(dx_got), to_float(want.dL_dx), "strided dL/dinput");
    expect_same_bits(to_float(download(dp)), to_float(want.dL_dparams), "dL/dparams from strided views");
}

// A warmed-up forward + backward + second-order pass replays from a captured graph with the same bits
// (deterministic gradients; fp16 parameters: the scratch and conversion are captured too).
TEST(PermutoGpu, TrainingStepReplaysFromACapturedGraph) {
    TNN_SKIP_WITHOUT_GPU();
    const EncodingCase& c = case_named("permuto3d_f2_deterministic");
    const auto enc = create_encoding(c.n_dims, c.config, DType::f16);
    const EncodingData data = make_data(c, *enc, DType::f16, 21);
    const Device gpu = Device::gpu(0);
    TestStream stream(gpu);
    const EncodingResult want = run_encoding(*enc, stream, data, c.batch);  // also the warm-up
    const int64_t n_out = enc->n_output_dims(), n_params = static_cast<int64_t>(enc->n_params());
    const DeviceInputs in = upload_inputs(c, *enc, data, gpu);
    const Tensor &x = in.x, &p = in.p, &g = in.g;
    const Tensor v = upload(data.v, c.batch, c.n_dims, DType::f32, gpu);
    Tensor y(c.batch, n_out, DType::f16, gpu), dp(1, n_params, DType::f16, gpu), dx(c.batch, c.n_dims, DType::f32, gpu);
    Tensor w(c.batch, n_out, DType::f16, gpu), dp2(1, n_params, DType::f16, gpu), dx2(c.batch, c.n_dims, DType::f32, gpu);
    TestGraph graph(stream);
    try {
        auto ctx = enc->forward(stream, x.view(), y.view(), p.data(), true);
        View dx_view = dx.view(), w_view = w.view(), dx2_view = dx2.view();
        enc->backward(stream, *ctx, x.view(), y.view(), g.view(), &dx_view, dp.data(), p.data(), GradMode::overwrite);
        enc->backward_backward_input(stream, *ctx, x.view(), v.view(), g.view(), &w_view, &dx2_view, dp2.data(),
                                     p.data(), GradMode::overwrite);
    } catch (const std::exception& e) {
        FAIL() << "a warmed-up Permuto step must be capturable: " << e.what();
    }
    ASSERT_TRUE(graph.end());
    for (int replay = 0; replay < 2; ++replay) {
        for (Tensor* t : {&y, &dp, &dx, &w, &dp2, &dx2}) fill(stream, t->view(), 7.0);
        ASSERT_TRUE(graph.launch());
        stream.stream().synchronize();
        expect_same_bits(to_float(download(y)), to_float(want.y), "graph replay output");
        expect_same_bits(to_float(download(dp)), to_float(want.dL_dparams), "graph replay dL/dparams");
        expect_same_bits(to_float(download(dx)), to_float(want.dL_dx), "graph replay dL/dinput");
        expect_same_bits(to_float(download(w)), to_float(want.dL_ddLdy), "graph replay dL'/d(dL/dy)");
        expect_same_bits(to_float(download(dp2)), to_float(want.dL_dparams2), "graph replay dL'/dparams");
        expect_same_bits(to_float(download(dx2)), to_float(want.dL_dx2), "graph replay dL'/dinput");
    }
}
#endif  // TNN_WITH_GPU

TEST(EncodingsGpu, Fp64IsCpuOnly) {
    TNN_SKIP_WITHOUT_GPU();
    const auto enc = create_encoding(3, {{"otype", "HashGrid"}, {"n_levels", 2}}, DType::f64);
    EXPECT_FALSE(enc->supports_device(Device::gpu(0)));
    Tensor x(4, 3, DType::f64, Device::gpu(0)), y(4, 4, DType::f64, Device::gpu(0)), p(1, 64, DType::f64, Device::gpu(0));
    EXPECT_THROW(enc->inference(Stream::gpu(nullptr, 0), x.view(), y.view(), p.data()), UnsupportedError);
}

// A host gradient buffer would fault inside the kernels: refused up front (as every network's:
// test_gpu_networks.cpp's NetworkGpuErrors).
TEST(EncodingsGpu, HostParamGradientIsRefused) {
    TNN_SKIP_WITHOUT_GPU();
    const Device gpu = Device::gpu(0);
    const Stream stream = Stream::gpu(nullptr, 0);
    const auto grid = create_encoding(3, {{"otype", "HashGrid"}, {"n_levels", 2}, {"log2_hashmap_size", 8}}, DType::f32);
    Tensor x(10, 3, DType::f32, gpu), gp(1, static_cast<int64_t>(grid->n_params()), DType::f32, gpu);
    Tensor gy(10, grid->n_output_dims(), DType::f32, gpu);
    fill(stream, x.view(), 0.5);
    fill(stream, gp.view(), 0.01);
    auto gctx = grid->forward(stream, x.view(), gy.view(), gp.data(), false);
    std::vector<float> grid_grad(grid->n_params(), 7.0f);
    EXPECT_THROW(grid->backward(stream, *gctx, x.view(), gy.view(), gy.view(), nullptr, grid_grad.data(), gp.data(),
                                GradMode::overwrite),
                 DeviceError);
    EXPECT_EQ(grid_grad, std::vector<float>(grid->n_params(), 7.0f)) << "nothing written";
    stream.synchronize();
}

}  // namespace
