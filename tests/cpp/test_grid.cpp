// Tests of the grid encodings: properties of the index/hash maths in grid_math.h (indices in range,
// dense levels bijective, the formulas of TCNN_COMPAT.md), hand-computed parameter counts and
// outputs, fp64 finite-difference first and second derivatives for every option, coarse-to-fine,
// tcnn's initialisation order, thread-count independence and config errors.
#include "encodings/grid_math.h"
#include "grid_accuracy.h"
#include "test_util.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <string>
#include <vector>

namespace tnn::test {
namespace {

using grid::GridType;
using grid::HashType;
using grid::Interpolation;

const Stream kCpu;

// The hash factors of TCNN_COMPAT.md, restated here so the tests check grid_math.h against them.
constexpr uint32_t kCoherentPrimes[7] = {1u,          2654435761u, 805459861u, 3674653429u,
                                         2097192037u, 1434869437u, 2165219737u};

std::vector<double> run(const Module& m, const Tensor& x, const std::vector<double>& params) {
    Tensor y(x.rows(), m.n_output_dims(), m.output_dtype());
    std::vector<uint8_t> p(m.n_params() * dtype_size(m.param_dtype()));
    dispatch_dtype(m.param_dtype(), [&](auto t) {
        using T = decltype(t);
        for (size_t i = 0; i < m.n_params(); ++i) reinterpret_cast<T*>(p.data())[i] = T(params.at(i));
    });
    m.inference(kCpu, x.view(), y.view(), p.data());
    return y.to_double_vector();
}

Tensor rows_f64(const std::vector<std::vector<double>>& rows) {
    Tensor t(static_cast<int64_t>(rows.size()), static_cast<int64_t>(rows[0].size()), DType::f64);
    for (size_t r = 0; r < rows.size(); ++r)
        for (size_t c = 0; c < rows[r].size(); ++c) t.ptr<double>()[r * rows[0].size() + c] = rows[r][c];
    return t;
}

// ---- grid_math.h properties ------------------------------------------------------------------------

TEST(GridMath, ScaleAndResolutionOfPowerOfTwoLevels) {
    // base 16, per_level_scale 2: scale = 16 * 2^l - 1 exactly, 16 * 2^l vertices per dimension.
    for (uint32_t l = 0; l < 16; ++l) {
        const float s = grid::grid_scale(l, 1.0f, 16);
        EXPECT_EQ(s, 16.0f * std::ldexp(1.0f, l) - 1.0f);
        EXPECT_EQ(grid::grid_resolution(s), 16u << l);
    }
    EXPECT_EQ(grid::grid_resolution(2.5f), 4u);
    EXPECT_EQ(grid::grid_resolution(-0.5f), 1u);
}

TEST(GridMath, MaxDenseResolutionIsTheLargestThatFits32Bits) {
    for (uint32_t d = 1; d <= grid::kMaxDims; ++d) {
        const uint64_t r = grid::max_dense_resolution(d);
        EXPECT_LE(grid::pow_saturating(r, d), 0xFFFFFFFFull) << d;
        EXPECT_GT(grid::pow_saturating(r + 1, d), 0xFFFFFFFFull) << d;
    }
}

TEST(GridMath, LevelEntries) {
    // Hash: min(next_multiple_of_8(res^d), 2^log2)
    EXPECT_EQ(grid::level_entries(GridType::Hash, 3, 16, 16, 19), 4096u);
    EXPECT_EQ(grid::level_entries(GridType::Hash, 3, 128, 16, 19), 1u << 19);
    EXPECT_EQ(grid::level_entries(GridType::Hash, 2, 3, 3, 19), 16u);  // 9 -> 16
    // Dense keeps the rounded dense count; Tiled caps it at base^d (not rounded).
    EXPECT_EQ(grid::level_entries(GridType::Dense, 3, 100, 16, 4), 1000000u);
    EXPECT_EQ(grid::level_entries(GridType::Tiled, 2, 32, 3, 19), 9u);
    // Beyond 2^31 vertices the dense count is capped at 2^31 - 1 and rounded up to 2^31.
    EXPECT_EQ(grid::level_entries(GridType::Dense, 3, 2000, 16, 19), 1ull << 31);
}

TEST(GridMath, DenseLevelsAreBijectiveAndFollowTheFormula) {
    for (uint32_t d = 1; d <= 4; ++d)
        for (uint32_t res : {1u, 2u, 3u, 5u}) {
            const uint32_t size = static_cast<uint32_t>(grid::level_entries(GridType::Dense, d, res, res, 19));
            std::set<uint32_t> seen;
            uint32_t pos[grid::kMaxDims];
            const uint32_t n = static_cast<uint32_t>(grid::pow_saturating(res, d));
            for (uint32_t i = 0; i < n; ++i) {
                uint32_t rem = i, expected = 0, stride = 1;
                for (uint32_t k = 0; k < d; ++k) {
                    pos[k] = rem % res;
                    rem /= res;
                    expected += pos[k] * stride;  // x fastest
                    stride *= res;
                }
                const uint32_t idx = grid::grid_index(GridType::Dense, HashType::CoherentPrime, d, size, res, pos);
                EXPECT_EQ(idx, expected);
                EXPECT_LT(idx, size);
                seen.insert(idx);
            }
            EXPECT_EQ(seen.size(), n) << "d=" << d << " res=" << res;
        }
}

TEST(GridMath, HashIndicesAreInRangeAndFollowTheFormula) {
    const auto coords = random_vector(7 * 500, 0, 5000, 3);
    for (uint32_t d = 1; d <= 7; ++d) {
        const uint32_t size = 1u << 12, res = 5000;  // res^d > size: hashed for every d
        for (int s = 0; s < 500; ++s) {
            uint32_t pos[7];
            uint32_t h = 0;
            for (uint32_t k = 0; k < d; ++k) {
                pos[k] = static_cast<uint32_t>(coords[7 * s + k]);
                h ^= pos[k] * kCoherentPrimes[k];
            }
            for (HashType ht : {HashType::Prime, HashType::CoherentPrime, HashType::ReversedPrime, HashType::Rng,
                                HashType::BaseConvert})
                EXPECT_LT(grid::grid_index(GridType::Hash, ht, d, size, res, pos), size);
            EXPECT_EQ(grid::grid_index(GridType::Hash, HashType::CoherentPrime, d, size, res, pos), h % size);
        }
    }
}

// A hash level whose dense grid fits (next8(res^d) <= 2^log2) is indexed densely, not hashed.
TEST(GridMath, HashLevelThatFitsIsDense) {
    const uint32_t res = 7, d = 3, size = static_cast<uint32_t>(grid::level_entries(GridType::Hash, d, res, 7, 19));
    ASSERT_EQ(size, 344u);  // 343 rounded up to 8
    const uint32_t pos[3] = {3, 5, 6};
    EXPECT_EQ(grid::grid_index(GridType::Hash, HashType::CoherentPrime, d, size, res, pos), 3u + 5u * 7u + 6u * 49u);
}

// Tiled levels wrap the dense index modulo base^d.
TEST(GridMath, TiledLevelsWrap) {
    const uint32_t base = 4, res = 16, d = 2;
    const uint32_t size = static_cast<uint32_t>(grid::level_entries(GridType::Tiled, d, res, base, 19));
    ASSERT_EQ(size, 16u);
    const uint32_t pos[2] = {13, 9};
    EXPECT_EQ(grid::grid_index(GridType::Tiled, HashType::CoherentPrime, d, size, res, pos), (13u + 9u * 16u) % 16u);
}

// tcnn's overflow guard: past max_dense_resolution the stride counts as 0xFFFFFFFF, so a Hash level
// hashes and a Dense level collapses to entry 0 (a tcnn quirk we keep).
TEST(GridMath, OverflowingResolutionUsesTheHash) {
    const uint32_t pos[3] = {1000, 2000, 3000}, res = 0x659 + 1, size = 1u << 19;
    const uint32_t h = (1000u * kCoherentPrimes[0]) ^ (2000u * kCoherentPrimes[1]) ^ (3000u * kCoherentPrimes[2]);
    EXPECT_EQ(grid::grid_index(GridType::Hash, HashType::CoherentPrime, 3, size, res, pos), h % size);
    EXPECT_EQ(grid::grid_index(GridType::Dense, HashType::CoherentPrime, 3, 1u << 31, res, pos), 0u);
}

TEST(GridMath, OtherHashes) {
    // Rng: a PCG32 seeded 1337 jumped `step` ahead; in 1D step is the coordinate itself.
    const uint32_t pos1[1] = {5};
    Pcg32 rng(1337);
    for (int i = 0; i < 5; ++i) rng.next_uint();
    EXPECT_EQ(grid::grid_hash(HashType::Rng, 1, pos1), rng.next_uint());
    // BaseConvert: k = ((0 + x) * 2531011 + y) * 2531011 (mod 2^32).
    const uint32_t pos2[2] = {1, 2};
    const uint64_t k = ((uint64_t(1) * 2531011u % (1ull << 32) + 2) * 2531011u) % (1ull << 32);
    EXPECT_EQ(grid::grid_hash(HashType::BaseConvert, 2, pos2), static_cast<uint32_t>(k));
    // Prime differs from CoherentPrime only in the first factor.
    const uint32_t pos3[3] = {7, 11, 13};
    EXPECT_EQ(grid::grid_hash(HashType::Prime, 3, pos3) ^ grid::grid_hash(HashType::CoherentPrime, 3, pos3),
              (7u * 1958374283u) ^ 7u);
    EXPECT_EQ(grid::grid_hash(HashType::ReversedPrime, 1, pos3), 7u * 2165219737u);
}

TEST(GridMath, CellCoordinateSaturatesLikeTheGpu) {
    EXPECT_EQ(grid::cell_coordinate(3.0f), 3u);
    EXPECT_EQ(grid::cell_coordinate(-1.0f), 0xFFFFFFFFu);
    EXPECT_EQ(grid::cell_coordinate(1e20f), 0x7FFFFFFFu);
    EXPECT_EQ(grid::cell_coordinate(-1e20f), 0x80000000u);
    EXPECT_EQ(grid::cell_coordinate(std::nanf("")), 0u);
}

// Corner weights form a partition of unity, so their x-derivatives sum to zero.
TEST(GridMath, CornerWeightsPartitionUnity) {
    const auto xs = random_vector(7, 0, 1, 9);
    for (Interpolation interp : {Interpolation::Linear, Interpolation::Smoothstep})
        for (uint32_t d = 1; d <= 7; ++d) {
            grid::AxisWeight<double> a[7];
            for (uint32_t k = 0; k < d; ++k) a[k] = grid::axis_weight<double>(xs[k], 12.0, interp);
            double sum = 0, grad_sum[7] = {0};
            for (uint32_t c = 0; c < (1u << d); ++c) {
                sum += grid::corner_weight(d, a, c);
                double g[7];
                grid::corner_weight_gradient(d, a, c, g);
                for (uint32_t k = 0; k < d; ++k) grad_sum[k] += g[k];
            }
            EXPECT_NEAR(sum, 1.0, 1e-14);
            for (uint32_t k = 0; k < d; ++k) EXPECT_NEAR(grad_sum[k], 0.0, 1e-12);
        }
}

// tcnn: level l is off when l >= max_level * n_levels + 1e-3.
TEST(GridMath, LevelActive) {
    for (uint32_t l = 0; l < 16; ++l) {
        EXPECT_EQ(grid::level_active(l, 0.5f, 16, 2), l <= 8) << l;
        EXPECT_EQ(grid::level_active(l, 0.0f, 16, 2), l == 0) << l;
        EXPECT_TRUE(grid::level_active(l, 1000.0f, 16, 2));
    }
    // The 1e-3 slack: 0.49995 * 16 = 7.9992 still keeps level 8, 0.4999 * 16 = 7.9984 does not.
    EXPECT_TRUE(grid::level_active(8, 0.49995f, 16, 2));
    EXPECT_FALSE(grid::level_active(8, 0.4999f, 16, 2));
}

// ---- parameter counts (by hand) --------------------------------------------------------------------

size_t n_params(uint32_t n_dims, const json& cfg) { return create_encoding(n_dims, cfg)->n_params(); }

TEST(Grid, ParameterCounts) {
    // 3D defaults: resolutions 16 * 2^l; 16^3, 32^3, 64^3 fit into 2^19 entries, levels 3..15 are full tables.
    EXPECT_EQ(n_params(3, {{"otype", "HashGrid"}}), 2u * (4096u + 32768u + 262144u + 13u * 524288u));
    // 2D, 8 levels, 2^15 entries: 16^2, 32^2, 64^2, 128^2 fit, 256^2 and up are hashed.
    EXPECT_EQ(n_params(2, {{"otype", "HashGrid"}, {"n_levels", 8}, {"log2_hashmap_size", 15}}),
              2u * (256u + 1024u + 4096u + 16384u + 4u * 32768u));
    // Dense 3D, base 4, 3 levels of 4^3, 8^3, 16^3 vertices, 4 features.
    EXPECT_EQ(n_params(3, {{"otype", "DenseGrid"},
                           {"n_levels", 3},
                           {"base_resolution", 4},
                           {"per_level_scale", 2.0},
                           {"n_features_per_level", 4}}),
              4u * (64u + 512u + 4096u));
    // Dense 2D, base 3, one level: 9 vertices rounded up to 16 entries.
    EXPECT_EQ(
        n_params(2, {{"otype", "DenseGrid"}, {"n_levels", 1}, {"base_resolution", 3}, {"n_features_per_level", 1}}),
        16u);
    // Tiled 2D, base 8: every level holds at most 8^2 = 64 entries.
    EXPECT_EQ(n_params(2, {{"otype", "TiledGrid"}, {"n_levels", 3}, {"base_resolution", 8}}), 2u * 3u * 64u);
    // 1D hash, 32 entries: 16, 32, then 32, 32.
    EXPECT_EQ(
        n_params(1, {{"otype", "HashGrid"}, {"n_levels", 4}, {"log2_hashmap_size", 5}, {"n_features_per_level", 1}}),
        16u + 32u + 32u + 32u);
    // 7D, base 2: 2^7 and 4^7 vertices.
    EXPECT_EQ(
        n_params(7, {{"otype", "HashGrid"}, {"n_levels", 2}, {"base_resolution", 2}, {"n_features_per_level", 1}}),
        128u + 16384u);
    // n_features sets n_levels * n_features_per_level.
    EXPECT_EQ(create_encoding(2, {{"otype", "Grid"}, {"n_features", 8}, {"n_features_per_level", 4}})->n_output_dims(),
              8u);
}

TEST(Grid, DenseDefaultScaleReaches256) {
    auto e = create_encoding(3, {{"otype", "DenseGrid"}, {"n_levels", 5}});
    EXPECT_NEAR(e->hyperparams()["per_level_scale"].get<double>(), 2.0, 2e-7);  // (256/16)^(1/4) in fp32
    EXPECT_EQ(e->hyperparams()["type"], "Dense");
    EXPECT_EQ(e->padding_value(), 0.0f);
    EXPECT_EQ(e->name(), "DenseGrid");
}

// ---- hand-computed outputs ------------------------------------------------------------------------

// A 2D dense level of 3x3 vertices (base_resolution 3, scale 2) with V[i] = i^2 at entry i = x + 3y.
// x = (0.2, 0.6): pos = 2x + 0.5 = (0.9, 1.7), cell (0, 1), local (0.9, 0.7).
// Corners (0,1), (1,1), (0,2), (1,2) -> entries 3, 4, 6, 7 with bilinear weights
// 0.1*0.3, 0.9*0.3, 0.1*0.7, 0.9*0.7 = 0.03, 0.27, 0.07, 0.63: y = 0.27 + 4.32 + 2.52 + 30.87 = 37.98.
TEST(Grid, HandComputedDenseLevel) {
    auto cfg = [](const char* interp) {
        return json{{"otype", "DenseGrid"},
                    {"n_levels", 1},
                    {"base_resolution", 3},
                    {"n_features_per_level", 1},
                    {"interpolation", interp}};
    };
    std::vector<double> p(16);
    for (int i = 0; i < 16; ++i) p[i] = i * i;
    const Tensor x = rows_f64({{0.2, 0.6}});
    expect_close(run(*create_encoding(2, cfg("Linear"), DType::f64), x, p), {37.98}, 0, 1e-13, "Linear");
    // Nearest: the lower vertex (0, 1) -> entry 3.
    EXPECT_EQ(run(*create_encoding(2, cfg("Nearest"), DType::f64), x, p), std::vector<double>{9.0});
    // Smoothstep: w = 3t^2 - 2t^3: 0.972 and 0.784.
    const double wx = 0.972, wy = 0.784;
    const double want = (1 - wx) * (1 - wy) * 9 + wx * (1 - wy) * 16 + (1 - wx) * wy * 36 + wx * wy * 49;
    expect_close(run(*create_encoding(2, cfg("Smoothstep"), DType::f64), x, p), {want}, 0, 1e-13, "Smoothstep");
}

// The upper vertex at x = 1 lies past the grid and wraps modulo the level size (TCNN_COMPAT.md):
// 2D dense, 4x4 vertices = 16 entries, V[i] = i. x = (0.2, 1.0): pos = 3x + 0.5 = (1.1, 3.5), cell
// (1, 3), local (0.1, 0.5); corners (1,3), (2,3), (1,4), (2,4) -> entries 13, 14, 17 % 16 = 1, 18 % 16 = 2:
// y = 0.45 * 13 + 0.05 * 14 + 0.45 * 1 + 0.05 * 2 = 7.1.
TEST(Grid, UpperVertexWrapsModuloTheLevelSize) {
    const json cfg = {{"otype", "DenseGrid"}, {"n_levels", 1}, {"base_resolution", 4}, {"n_features_per_level", 1}};
    auto e = create_encoding(2, cfg, DType::f64);
    ASSERT_EQ(e->n_params(), 16u);
    std::vector<double> p(16);
    for (int i = 0; i < 16; ++i) p[i] = i;
    expect_close(run(*e, rows_f64({{0.2, 1.0}}), p), {7.1}, 0, 1e-13, "wrapped corner");
}

// Two features per entry, feature fastest; and a second level after the first in the vector.
TEST(Grid, ParameterLayoutIsLevelMajorFeatureFastest) {
    const json cfg = {{"otype", "DenseGrid"},      {"n_levels", 2},
                      {"base_resolution", 2},      {"per_level_scale", 2.0},
                      {"n_features_per_level", 2}, {"interpolation", "Nearest"}};
    auto e = create_encoding(1, cfg, DType::f64);
    // level 0: scale 1, 2 vertices -> 8 entries; level 1: scale 3, 4 vertices -> 8 entries.
    ASSERT_EQ(e->n_params(), 2u * (8u + 8u));
    std::vector<double> p(e->n_params());
    for (size_t i = 0; i < p.size(); ++i) p[i] = static_cast<double>(i);
    // x = 0.8: level 0 pos = 1.3 -> vertex 1 (params 2, 3); level 1 pos = 2.9 -> vertex 2 (16 + 4, 16 + 5).
    EXPECT_EQ(run(*e, rows_f64({{0.8}}), p), (std::vector<double>{2, 3, 20, 21}));
}

// A hashed level: 2D, 4x4 vertices, 8 entries: entry = (x * 1 ^ y * 2654435761) mod 8.
TEST(Grid, HandComputedHashLevel) {
    const json cfg = {{"otype", "HashGrid"},       {"n_levels", 1},
                      {"base_resolution", 4},      {"log2_hashmap_size", 3},
                      {"n_features_per_level", 1}, {"interpolation", "Nearest"}};
    auto e = create_encoding(2, cfg, DType::f64);
    ASSERT_EQ(e->n_params(), 8u);
    std::vector<double> p = {10, 11, 12, 13, 14, 15, 16, 17};
    // x = (0.4, 0.9): pos = 3x + 0.5 = (1.7, 3.2) -> vertex (1, 3).
    const uint32_t entry = ((1u * 1u) ^ (3u * 2654435761u)) % 8u;
    EXPECT_EQ(run(*e, rows_f64({{0.4, 0.9}}), p), std::vector<double>{10.0 + entry});
}

// ---- derivatives (fp64 finite differences) ---------------------------------------------------------

// Random inputs in [0, 1] whose positions stay `margin` away from every cell border at every level,
// so that central differences (h = 1e-6) never straddle a kink of the piecewise interpolation.
Tensor safe_inputs(const Module& m, const json& hyper, int64_t rows, uint64_t seed) {
    const uint32_t d = m.n_input_dims(), n_levels = hyper["n_levels"];
    const float log2s = std::log2(hyper["per_level_scale"].get<float>());
    const uint32_t base = hyper["base_resolution"];
    std::vector<std::vector<double>> out;
    const auto cand = random_vector(static_cast<size_t>(d) * 4000, 0, 1, seed);
    for (size_t i = 0; i + d <= cand.size() && static_cast<int64_t>(out.size()) < rows; i += d) {
        bool ok = true;
        for (uint32_t l = 0; l < n_levels && ok; ++l) {
            const double s = grid::grid_scale(l, log2s, base);
            for (uint32_t k = 0; k < d; ++k) {
                const double pos = s * cand[i + k] + 0.5, frac = pos - std::floor(pos);
                if (frac < 1e-3 || frac > 1 - 1e-3) ok = false;
            }
        }
        if (ok) out.emplace_back(cand.begin() + i, cand.begin() + i + d);
    }
    EXPECT_EQ(static_cast<int64_t>(out.size()), rows);
    return rows_f64(out);
}

struct GridCase {
    uint32_t n_dims;
    json config;
};

std::vector<GridCase> grid_cases() {
    std::vector<GridCase> v;
    auto hash = [](uint32_t d, uint32_t F, const char* interp, const char* hash_name = "CoherentPrime") {
        return json{{"otype", "HashGrid"},     {"n_levels", 3},          {"n_features_per_level", F},
                    {"base_resolution", 3},    {"per_level_scale", 1.7}, {"log2_hashmap_size", d >= 5 ? 6 : 5},
                    {"interpolation", interp}, {"hash", hash_name}};
    };
    for (const char* interp : {"Linear", "Smoothstep", "Nearest"})
        for (uint32_t d : {1u, 2u, 3u}) v.push_back({d, hash(d, 2, interp)});
    for (uint32_t F : {1u, 4u, 8u}) v.push_back({2, hash(2, F, "Linear")});
    for (uint32_t d : {4u, 5u, 6u, 7u}) v.push_back({d, hash(d, 1, "Smoothstep")});
    for (const char* h : {"Prime", "ReversedPrime", "Rng", "BaseConvert"}) v.push_back({3, hash(3, 2, "Linear", h)});
    v.push_back({3,
                 {{"otype", "DenseGrid"},
                  {"n_levels", 2},
                  {"base_resolution", 3},
                  {"per_level_scale", 1.5},
                  {"interpolation", "Smoothstep"}}});
    v.push_back({2, {{"otype", "TiledGrid"}, {"n_levels", 2}, {"base_resolution", 4}, {"n_features_per_level", 4}}});
    return v;
}

TEST(Grid, FirstDerivativesMatchFiniteDifferences) {
    for (const auto& c : grid_cases()) {
        SCOPED_TRACE(c.config.dump());
        auto e = create_encoding(c.n_dims, c.config, DType::f64);
        const Tensor x = safe_inputs(*e, e->hyperparams(), 4, 7 + c.n_dims);
        check_gradients(*e, x, random_vector(e->n_params(), -1, 1, 5), 13);
    }
}

TEST(Grid, SecondDerivativesMatchFiniteDifferences) {
    for (const auto& c : grid_cases()) {
        SCOPED_TRACE(c.config.dump());
        auto e = create_encoding(c.n_dims, c.config, DType::f64);
        const Tensor x = safe_inputs(*e, e->hyperparams(), 3, 19 + c.n_dims);
        check_second_derivatives(*e, x, random_vector(e->n_params(), -1, 1, 6), 17);
    }
}

// Linear interpolation: dL/dx is constant along its own axis inside a cell (zero diagonal Hessian)
// but not across axes; a Nearest grid's second-order pass is zero throughout.
TEST(Grid, LinearHasCrossButNoDiagonalSecondDerivative) {
    const json cfg = {{"otype", "DenseGrid"}, {"n_levels", 1}, {"base_resolution", 4}, {"n_features_per_level", 1}};
    auto e = create_encoding(2, cfg, DType::f64);
    const auto p = random_vector(e->n_params(), -1, 1, 3);
    const Tensor x = rows_f64({{0.3, 0.55}});
    Tensor y(1, 1, DType::f64), g(1, 1, DType::f64), w(1, 2, DType::f64), dx(1, 2, DType::f64);
    fill(kCpu, g.view(), 1.0);
    auto ctx = e->forward(kCpu, x.view(), y.view(), p.data(), true);
    View dxv = dx.view();
    // v = e_0: dL'/dx_0 = d2y/dx0^2 = 0, dL'/dx_1 = d2y/(dx0 dx1) != 0 for generic values.
    w.ptr<double>()[0] = 1.0;
    w.ptr<double>()[1] = 0.0;
    e->backward_backward_input(kCpu, *ctx, x.view(), w.view(), g.view(), nullptr, &dxv, nullptr, p.data(),
                               GradMode::overwrite);
    EXPECT_EQ(dx.ptr<double>()[0], 0.0);
    EXPECT_NE(dx.ptr<double>()[1], 0.0);
}

// ---- coarse-to-fine ------------------------------------------------------------------------------

// With finer levels switched off, the derivatives are those of the remaining levels.
TEST(Grid, DerivativesWithMaxLevel) {
    const json cfg = {{"otype", "HashGrid"},
                      {"n_levels", 4},
                      {"base_resolution", 3},
                      {"log2_hashmap_size", 6},
                      {"interpolation", "Smoothstep"}};
    auto e = create_encoding(2, cfg, DType::f64);
    e->set_max_level(0.3f);  // levels 0 and 1 stay (l < 1.2 + 1e-3)
    const Tensor x = safe_inputs(*e, e->hyperparams(), 4, 3);
    const auto p = random_vector(e->n_params(), -1, 1, 7);
    check_gradients(*e, x, p, 11);
    check_second_derivatives(*e, x, p, 13);
}

TEST(Grid, SetMaxLevelZeroesFinerLevelsAndTheirGradients) {
    const json cfg = {{"otype", "HashGrid"}, {"n_levels", 4}, {"base_resolution", 4}, {"log2_hashmap_size", 6}};
    auto e = create_encoding(2, cfg, DType::f64);
    const auto p = random_vector(e->n_params(), -1, 1, 4);
    const Tensor x = random_tensor(8, 2, DType::f64, 0, 1, 2);
    const auto full = run(*e, x, p);
    e->set_max_level(0.5f);  // levels l < 0.5 * 4 + 1e-3 stay: 0, 1, 2
    Tensor y(8, 8, DType::f64), g(8, 8, DType::f64);
    fill(kCpu, g.view(), 1.0);
    auto ctx = e->forward(kCpu, x.view(), y.view(), p.data(), false);
    const auto yv = y.to_double_vector();
    for (int r = 0; r < 8; ++r)
        for (int k = 0; k < 8; ++k) EXPECT_EQ(yv[r * 8 + k], k < 6 ? full[r * 8 + k] : 0.0);
    std::vector<double> dp(e->n_params(), 5.0);
    e->set_max_level(1.0f);  // backward follows the forward pass's setting (kept in the context)
    e->backward(kCpu, *ctx, x.view(), y.view(), g.view(), nullptr, dp.data(), p.data(), GradMode::overwrite);
    // Level 3 starts after the first three levels: 16 + 64 (8^2 rounds to 64) + 64 (12^2 > 64 -> 64).
    const size_t level3 = 2 * (16 + 64 + 64);
    double before = 0;
    for (size_t i = 0; i < dp.size(); ++i) {
        if (i >= level3)
            EXPECT_EQ(dp[i], 0.0) << i;
        else
            before += std::fabs(dp[i]);
    }
    EXPECT_GT(before, 0.0);
}

// ---- initialisation ---------------------------------------------------------------------------------

// tcnn's GPU draw order (generate_random_uniform with 4 draws per thread and 128-thread blocks):
// element i + N*j takes draw 4i + j, N = 128 * ceil(ceil(n/4) / 128); values fma(r, 2e-4, -1e-4).
TEST(Grid, InitialisationFollowsTcnnDrawOrder) {
    auto e = create_encoding(2, {{"otype", "HashGrid"}, {"n_levels", 2}, {"log2_hashmap_size", 8}});
    const size_t n = e->n_params();
    ASSERT_EQ(n, 2u * (256u + 256u));
    Pcg32 rng(1337);
    std::vector<float> p(n);
    e->init_params(rng, p.data());
    const size_t N = 128 * (((n + 3) / 4 + 127) / 128);
    Pcg32 seq(1337);
    std::vector<float> draws(4 * N);
    for (auto& d : draws) d = seq.next_float();
    for (size_t i = 0; i < n; ++i) {
        const float r = draws[4 * (i % N) + i / N];
        EXPECT_EQ(p[i], std::fma(r, 2e-4f, -1e-4f)) << i;
        EXPECT_GE(p[i], -1e-4f);
        EXPECT_LT(p[i], 1e-4f);
    }
    // The stream continues after n draws.
    Pcg32 after(1337);
    after.advance(n);
    EXPECT_EQ(rng.next_uint(), after.next_uint());
}

// ---- determinism and dtypes -----------------------------------------------------------------------

TEST(Grid, GradientsDoNotDependOnThreadCount) {
    const json cfg = {{"otype", "HashGrid"}, {"n_levels", 6}, {"base_resolution", 4}, {"log2_hashmap_size", 10}};
    auto e = create_encoding(3, cfg, DType::f32);
    std::vector<float> p(e->n_params());
    e->init_params(7, p.data());
    const Tensor x = random_tensor(3000, 3, DType::f32, 0, 1, 3);
    const Tensor g = random_tensor(3000, e->n_output_dims(), DType::f32, -1, 1, 4);
    Tensor y(3000, e->n_output_dims(), DType::f32), dx(3000, 3, DType::f32);
    auto grads = [&](int threads) {
        set_num_threads(threads);
        std::vector<float> dp(e->n_params());
        auto ctx = e->forward(kCpu, x.view(), y.view(), p.data(), true);
        View dxv = dx.view();
        e->backward(kCpu, *ctx, x.view(), y.view(), g.view(), &dxv, dp.data(), p.data(), GradMode::overwrite);
        std::vector<float> all = dp;
        for (double v : dx.to_double_vector()) all.push_back(static_cast<float>(v));
        return all;
    };
    const auto one = grads(1), four = grads(4), three = grads(3);
    set_num_threads(0);
    EXPECT_EQ(one, four);
    EXPECT_EQ(one, three);
}

// Accumulate mode adds to what is there; overwrite replaces it.
TEST(Grid, GradientModes) {
    auto e = create_encoding(2, {{"otype", "HashGrid"}, {"n_levels", 2}, {"log2_hashmap_size", 6}}, DType::f64);
    const auto p = random_vector(e->n_params(), -1, 1, 1);
    const Tensor x = random_tensor(10, 2, DType::f64, 0, 1, 2);
    const Tensor g = random_tensor(10, 4, DType::f64, -1, 1, 3);
    Tensor y(10, 4, DType::f64);
    auto ctx = e->forward(kCpu, x.view(), y.view(), p.data(), false);
    std::vector<double> a(e->n_params(), 0.0), b(e->n_params(), 0.25);
    e->backward(kCpu, *ctx, x.view(), y.view(), g.view(), nullptr, a.data(), p.data(), GradMode::overwrite);
    e->backward(kCpu, *ctx, x.view(), y.view(), g.view(), nullptr, b.data(), p.data(), GradMode::accumulate);
    for (size_t i = 0; i < a.size(); ++i) EXPECT_DOUBLE_EQ(b[i], a[i] + 0.25);
}

// Stochastic interpolation (tcnn): each row and level sends its whole dL/dy to one corner, chosen
// by random_val(1337, row + level * rows) against the interpolation weights.
TEST(Grid, StochasticInterpolationPicksOneCorner) {
    const json cfg = {{"otype", "DenseGrid"},
                      {"n_levels", 1},
                      {"base_resolution", 5},
                      {"n_features_per_level", 1},
                      {"stochastic_interpolation", true}};
    auto e = create_encoding(2, cfg, DType::f64);
    const auto p = random_vector(e->n_params(), -1, 1, 1);
    const Tensor x = random_tensor(20, 2, DType::f64, 0, 1, 5);
    Tensor y(20, 1, DType::f64), g(20, 1, DType::f64);
    fill(kCpu, g.view(), 1.0);
    auto ctx = e->forward(kCpu, x.view(), y.view(), p.data(), false);
    std::vector<double> dp(e->n_params());
    e->backward(kCpu, *ctx, x.view(), y.view(), g.view(), nullptr, dp.data(), p.data(), GradMode::overwrite);
    std::vector<double> want(e->n_params(), 0.0);
    for (int r = 0; r < 20; ++r) {
        const float s = grid::stochastic_sample(static_cast<uint32_t>(r));
        uint32_t v[2];
        for (int k = 0; k < 2; ++k) {
            const double pos = 4.0 * x.ptr<double>()[r * 2 + k] + 0.5, cell = std::floor(pos);
            v[k] = static_cast<uint32_t>(cell) + (s >= pos - cell ? 0u : 1u);
        }
        want[v[0] + 5 * v[1]] += 1.0;
    }
    EXPECT_EQ(dp, want);
}

TEST(Grid, ReducedPrecisionGradients) {
    for (DType dt : {DType::f16, DType::bf16}) {
        SCOPED_TRACE(dtype_name(dt));
        const json cfg = {{"otype", "HashGrid"}, {"n_levels", 3}, {"base_resolution", 4}, {"log2_hashmap_size", 7}};
        auto e32 = create_encoding(3, cfg, DType::f32);
        auto elo = create_encoding(3, cfg, dt);
        const size_t n = e32->n_params();
        auto to_lo = [&](double v) { return dt == DType::f16 ? float(half(float(v))) : float(bfloat16(float(v))); };
        std::vector<float> p32(n);
        std::vector<uint16_t> plo(n);
        const auto pr = random_vector(n, -1, 1, 2);
        for (size_t i = 0; i < n; ++i) {
            p32[i] = to_lo(pr[i]);
            plo[i] = dt == DType::f16 ? half(p32[i]).bits : bfloat16(p32[i]).bits;
        }
        const Tensor x = random_tensor(64, 3, DType::f32, 0, 1, 3);
        const Tensor g32 = random_tensor(64, 6, DType::f32, -1, 1, 4);
        Tensor glo(64, 6, dt);
        convert(kCpu, g32.view(), glo.view());
        Tensor g32r(64, 6, DType::f32);  // the same (rounded) upstream gradient in fp32
        convert(kCpu, glo.view(), g32r.view());
        Tensor y32(64, 6, DType::f32), ylo(64, 6, dt), dx32(64, 3, DType::f32), dxlo(64, 3, DType::f32);
        auto c32 = e32->forward(kCpu, x.view(), y32.view(), p32.data(), true);
        auto clo = elo->forward(kCpu, x.view(), ylo.view(), plo.data(), true);
        std::vector<float> dp32(n);
        std::vector<uint16_t> dplo(n);
        View v32 = dx32.view(), vlo = dxlo.view();
        e32->backward(kCpu, *c32, x.view(), y32.view(), g32r.view(), &v32, dp32.data(), p32.data(),
                      GradMode::overwrite);
        elo->backward(kCpu, *clo, x.view(), ylo.view(), glo.view(), &vlo, dplo.data(), plo.data(), GradMode::overwrite);
        // Outputs and parameter gradients are computed in fp32 and rounded once: half an ulp of the
        // dtype (plus fp16's subnormal spacing 2^-24 near zero). Input gradients stay fp32 and see
        // the same values in the same order, so they agree to fp32 rounding.
        const double rtol = dtype_epsilon(dt) / 2, atol = dt == DType::f16 ? std::ldexp(1.0, -24) : 1e-38;
        expect_close(ylo.to_double_vector(), y32.to_double_vector(), atol, rtol, "output");
        std::vector<double> a(n), b(n);
        for (size_t i = 0; i < n; ++i) {
            a[i] = dt == DType::f16 ? float(half::from_bits(dplo[i])) : float(bfloat16::from_bits(dplo[i]));
            b[i] = dp32[i];
        }
        expect_close(a, b, atol, rtol, "dL/dparams");
        expect_close(dxlo.to_double_vector(), dx32.to_double_vector(), 0, 4 * dtype_epsilon(DType::f32), "dL/dx");
    }
}

// The encoding's x-derivatives where the field is nearly constant (tests/grid_accuracy.h).
TEST(Grid, InputGradientsOfANearlyConstantFieldAreAccurate) { expect_accurate_input_gradients_of_a_flat_field(kCpu); }

// ---- config errors ---------------------------------------------------------------------------------

TEST(Grid, BadConfigs) {
    const std::vector<std::pair<json, std::vector<std::string>>> cases = {
        {{{"otype", "HashGrid"}, {"n_features_per_level", 3}}, {"n_features_per_level", "1, 2, 4 or 8", "3"}},
        {{{"otype", "HashGrid"}, {"n_levels", 0}}, {"n_levels", "[1, 128]"}},
        {{{"otype", "HashGrid"}, {"n_levels", 129}}, {"n_levels", "[1, 128]"}},
        {{{"otype", "HashGrid"}, {"hash", "Murmur"}}, {"hash", "CoherentPrime", "Murmur"}},
        {{{"otype", "HashGrid"}, {"interpolation", "Cubic"}}, {"interpolation", "Nearest", "Linear", "Smoothstep"}},
        {{{"otype", "Grid"}, {"type", "Sparse"}}, {"type", "Hash", "Dense", "Tiled"}},
        {{{"otype", "HashGrid"}, {"n_levels", "16"}}, {"n_levels", "integer"}},
        {{{"otype", "HashGrid"}, {"per_level_scale", 0}}, {"per_level_scale", "greater than 0"}},
        {{{"otype", "HashGrid"}, {"log2_hashmap_size", 32}}, {"log2_hashmap_size", "[0, 31]"}},
        {{{"otype", "HashGrid"}, {"n_features", 8}, {"n_levels", 4}}, {"n_features", "n_levels"}},
        {{{"otype", "HashGrid"}, {"n_features", 7}}, {"n_features", "multiple"}},
        {{{"otype", "HashGrid"}, {"fixed_point_pos", true}}, {"fixed_point_pos", "not supported"}},
        {{{"otype", "HashGrid"}, {"interpolation", 1}}, {"interpolation", "string"}},
        {{{"otype", "DenseGrid"}, {"n_levels", 8}, {"base_resolution", 512}, {"per_level_scale", 2.0}}, {"2^32"}},
        // Level scales of 2^31 and more: cells and resolutions would leave 32 bits (level 27 of the defaults is
        // 16 * 2^27 - 1, which rounds to 2^31 in fp32); inf past fp32's range.
        {{{"otype", "HashGrid"}, {"n_levels", 28}}, {"level 27", "2^31", "n_levels", "per_level_scale"}},
        {{{"otype", "HashGrid"}, {"n_levels", 2}, {"per_level_scale", 1e30}}, {"level 1", "1.6e+31", "2^31"}},
        {{{"otype", "HashGrid"}, {"n_levels", 3}, {"per_level_scale", 1e30}}, {"level 2", "inf", "2^31"}},
        {{{"otype", "HashGrid"}, {"base_resolution", 2147483647}, {"per_level_scale", 0.5}}, {"level 0", "2^31"}},
    };
    for (const auto& [cfg, words] : cases) {
        SCOPED_TRACE(cfg.dump());
        try {
            create_encoding(3, cfg);
            ADD_FAILURE() << "no ConfigError";
        } catch (const ConfigError& e) {
            const std::string what = e.what();
            for (const auto& s : words) EXPECT_NE(what.find(s), std::string::npos) << what << " lacks '" << s << "'";
        }
    }
    // The finest level below 2^31: 16 * 2^26 - 1.
    EXPECT_NO_THROW(create_encoding(3, {{"otype", "HashGrid"}, {"n_levels", 27}}));
    EXPECT_THROW(create_encoding(8, {{"otype", "HashGrid"}}), ConfigError);  // 1 to 7 input dims
    try {
        create_encoding(8, {{"otype", "HashGrid"}});
    } catch (const ConfigError& e) {
        EXPECT_NE(std::string(e.what()).find("1 to 7"), std::string::npos) << e.what();
    }
}

}  // namespace
}  // namespace tnn::test
