// Host-side properties of grid_gpu.h, the maths the GPU grid kernels use beyond grid_math.h: the
// per-dimension corner-index shortcut equals grid::grid_index for every grid type, XOR hash and
// dimension (levels that hash, fit densely or overflow 32 bits), and the fixed-point format of the
// deterministic gradient never overflows, is exact under reordering and is accurate. Runs everywhere
// (no GPU needed).
#include "encodings/grid_gpu.h"
#include "test_util.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

namespace tnn::test {
namespace {

using grid::GridType;
using grid::HashType;
using grid_gpu::IndexMode;

template <uint32_t D> void check_corner_shortcut(GridType type, HashType hash, uint32_t size, uint32_t resolution,
                                                 uint64_t seed) {
    uint32_t factors[grid::kMaxDims];
    ASSERT_TRUE(grid_gpu::hash_factors(hash, factors));
    const grid_gpu::LevelInfo L = grid_gpu::make_level_info(type, D, 0, size, resolution, 1.0f);
    Pcg32 rng(seed);
    for (int s = 0; s < 200; ++s) {
        uint32_t cell[D];
        for (uint32_t d = 0; d < D; ++d) {
            // Coordinates anywhere in the level, near its upper border (the upper vertex wraps), and huge
            // (uint32 wrap-around of the products).
            const uint32_t kind = rng.next_uint() % 4;
            cell[d] = kind == 0 ? rng.next_uint() : (kind == 1 ? resolution - 1 : rng.next_uint() % resolution);
        }
        const grid_gpu::CornerTerms<D> t = grid_gpu::corner_terms<D>(L, cell, factors);
        for (uint32_t c = 0; c < (1u << D); ++c) {
            uint32_t pos[D];
            grid::corner_position(D, cell, c, pos);
            const uint32_t want = grid::grid_index(type, hash, D, size, resolution, pos);
            ASSERT_EQ(grid_gpu::corner_index<D>(L, t, c), want)
                << "D=" << D << " type=" << int(type) << " hash=" << int(hash) << " size=" << size
                << " res=" << resolution << " corner=" << c;
        }
    }
}

template <uint32_t D> void check_all_levels_of_dim() {
    // (size, resolution) pairs: dense fits, hashed (power-of-two and not), tiled wrap, and a resolution
    // beyond max_dense_resolution (stride saturates: Hash hashes, Dense/Tiled collapse to entry 0).
    const uint32_t big = grid::max_dense_resolution(D) < 0xFFFFFFFFu ? grid::max_dense_resolution(D) + 1 : 70000u;
    const std::vector<std::pair<uint32_t, uint32_t>> levels = {
        {8, 2}, {1u << 12, 3}, {1u << 12, 5000}, {1000, 64}, {24, 7}, {1u << 19, big}, {1, 9}, {7, 9}};
    uint64_t seed = 1;
    for (GridType type : {GridType::Hash, GridType::Dense, GridType::Tiled})
        for (HashType hash : {HashType::Prime, HashType::CoherentPrime, HashType::ReversedPrime})
            for (const auto& [size, res] : levels) check_corner_shortcut<D>(type, hash, size, res, seed++);
}

TEST(GridGpuMath, CornerShortcutEqualsGridIndex) {
    check_all_levels_of_dim<1>();
    check_all_levels_of_dim<2>();
    check_all_levels_of_dim<3>();
    check_all_levels_of_dim<4>();
    check_all_levels_of_dim<5>();
    check_all_levels_of_dim<6>();
    check_all_levels_of_dim<7>();
}

TEST(GridGpuMath, IndexModesFollowGridIndex) {
    // 3D: 16^3 = 4096 entries fit a 2^19 table densely; 128^3 do not (hash); past 0x659 the dense
    // index would overflow 32 bits.
    EXPECT_EQ(grid_gpu::index_mode(GridType::Hash, 3, 4096, 16), IndexMode::Dense);
    EXPECT_EQ(grid_gpu::index_mode(GridType::Hash, 3, 1u << 19, 128), IndexMode::Hash);
    EXPECT_EQ(grid_gpu::index_mode(GridType::Dense, 3, 1u << 31, 0x65A), IndexMode::Zero);
    EXPECT_EQ(grid_gpu::index_mode(GridType::Hash, 3, 1u << 19, 0x65A), IndexMode::Hash);
    EXPECT_EQ(grid_gpu::index_mode(GridType::Tiled, 2, 16, 32), IndexMode::Dense);
    const grid_gpu::LevelInfo pow2 = grid_gpu::make_level_info(GridType::Hash, 3, 8, 1u << 12, 100, 2.0f);
    const grid_gpu::LevelInfo odd = grid_gpu::make_level_info(GridType::Tiled, 2, 8, 9, 32, 2.0f);
    EXPECT_TRUE(grid_gpu::level_pow2(pow2));
    EXPECT_FALSE(grid_gpu::level_pow2(odd));
    for (uint32_t i : {0u, 5u, 4095u, 4096u, 123456789u}) {
        EXPECT_EQ(grid_gpu::wrap_index(pow2, i), i % 4096u);
        EXPECT_EQ(grid_gpu::wrap_index(odd, i), i % 9u);
    }
}

TEST(GridGpuMath, HashFactorsOnlyForXorHashes) {
    uint32_t f[grid::kMaxDims];
    EXPECT_TRUE(grid_gpu::hash_factors(HashType::CoherentPrime, f));
    EXPECT_EQ(f[0], 1u);
    EXPECT_EQ(f[1], 2654435761u);
    EXPECT_FALSE(grid_gpu::hash_factors(HashType::Rng, f));
    EXPECT_FALSE(grid_gpu::hash_factors(HashType::BaseConvert, f));
}

// ---- fixed point -------------------------------------------------------------------------------

TEST(GridGpuMath, FixedPointExponentBoundsTheSum) {
    for (float m : {1e-30f, 1e-6f, 0.5f, 1.0f, 3.0f, 1e6f, 3e38f})
        for (int64_t rows : {int64_t(1), int64_t(1000), int64_t(1) << 21, int64_t(1) << 31}) {
            const int k = grid_gpu::fixed_point_exponent(m, rows);
            const double b = grid_gpu::fixed_point_bound(m, rows);
            EXPECT_LT(std::ldexp(b, k), std::ldexp(1.0, 62)) << m << " " << rows;   // no overflow
            EXPECT_GE(std::ldexp(b, k), std::ldexp(1.0, 61)) << m << " " << rows;   // and no wasted bits
        }
    EXPECT_EQ(grid_gpu::fixed_point_exponent(0.0f, 100), 0);
    EXPECT_EQ(grid_gpu::fixed_point_exponent(INFINITY, 100), grid_gpu::kNonFiniteExponent);
    EXPECT_EQ(grid_gpu::fixed_point_exponent(NAN, 100), grid_gpu::kNonFiniteExponent);
    EXPECT_TRUE(std::isnan(grid_gpu::from_fixed_point(5, grid_gpu::kNonFiniteExponent)));
}

// The property the deterministic path rests on: integer sums do not depend on the order, and the
// result is within (number of terms) * 2^-(k+1) of the exact sum, far below fp32's resolution.
TEST(GridGpuMath, FixedPointSumsAreOrderIndependentAndAccurate) {
    const int64_t rows = 4096;
    std::vector<float> c(static_cast<size_t>(rows));
    Pcg32 rng(77);
    float max_abs = 0;
    for (auto& v : c) {
        // Magnitudes over 12 orders: the small ones must survive next to the large ones.
        v = (rng.next_float() - 0.5f) * std::ldexp(1.0f, -static_cast<int>(rng.next_uint() % 40));
        max_abs = std::max(max_abs, std::fabs(v));
    }
    const int k = grid_gpu::fixed_point_exponent(max_abs, rows);
    auto sum_in_order = [&](const std::vector<size_t>& order) {
        long long s = 0;
        for (size_t i : order) s += grid_gpu::to_fixed_point(c[i], k);
        return grid_gpu::from_fixed_point(s, k);
    };
    std::vector<size_t> order(c.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    const float forward = sum_in_order(order);
    std::mt19937 shuffle(5);
    for (int t = 0; t < 5; ++t) {
        std::shuffle(order.begin(), order.end(), shuffle);
        const float again = sum_in_order(order);
        EXPECT_EQ(std::memcmp(&forward, &again, sizeof(float)), 0) << "order " << t;
    }
    double exact = 0;
    for (float v : c) exact += v;
    // Rounding: rows * 2^-(k+1) from the contributions plus half an fp32 ulp of the result.
    const double allowed = rows * std::ldexp(1.0, -(k + 1)) + std::fabs(exact) * std::ldexp(1.0, -24);
    EXPECT_LE(std::fabs(forward - exact), allowed);
    EXPECT_LT(rows * std::ldexp(1.0, -(k + 1)), 1e-9 * max_abs);  // far below fp32 resolution of max_abs
}

TEST(GridGpuMath, FixedPointRoundsToNearestEven) {
    EXPECT_EQ(grid_gpu::to_fixed_point(1.5f, 0), 2);
    EXPECT_EQ(grid_gpu::to_fixed_point(2.5f, 0), 2);
    EXPECT_EQ(grid_gpu::to_fixed_point(-2.5f, 0), -2);
    EXPECT_EQ(grid_gpu::to_fixed_point(0.75f, 2), 3);
    EXPECT_EQ(grid_gpu::to_fixed_point(1e-30f, 10), 0);
    EXPECT_EQ(grid_gpu::from_fixed_point(3, 2), 0.75f);
}

}  // namespace
}  // namespace tnn::test
