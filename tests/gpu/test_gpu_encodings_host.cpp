// Host-side properties of grid_gpu.h, the maths the GPU grid kernels use beyond grid_math.h: the
// per-dimension corner-index shortcut equals grid::grid_index for every grid type, XOR hash and
// dimension (levels that hash, fit densely or overflow 32 bits), and the fixed-point format of the
// deterministic gradient never overflows, is exact under reordering and is accurate, and the
// gradient's reduction plan (grid_plan.h) keeps its invariants. Runs everywhere (no GPU needed).
#include "encodings/grid_gpu.h"
#include "encodings/grid_plan.h"
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

#ifdef TNN_WITH_GPU  // GridDesc and the plan: GPU builds only
// A grid of `sizes.size()` levels of the given entry counts (offsets and resolutions do not matter to
// the plan).
grid_gpu::GridDesc plan_grid(uint32_t n_dims, uint32_t n_features, grid::Interpolation interpolation,
                             const std::vector<uint32_t>& sizes) {
    grid_gpu::GridDesc g;
    g.n_dims = n_dims;
    g.n_features = n_features;
    g.n_levels = static_cast<uint32_t>(sizes.size());
    g.interpolation = interpolation;
    for (uint32_t l = 0; l < g.n_levels; ++l)
        g.levels[l] = grid_gpu::make_level_info(GridType::Hash, n_dims, 0, sizes[l], 2, 1.0f);
    return g;
}

// The plan of the parameter gradient's reductions, over dimensions 1-7, Linear and Nearest rows, 1-8
// features, fp32 / 64-bit / 32-bit-word slots, the default and opt-in budgets and batch sizes from 1
// to 2^24: every level is reduced once (globally, or in shared-memory items covering its features
// once with a power-of-two group), the slots fit the budget, the blocks cover the rows, and with the
// deterministic gradient's 32-bit words no slot can take more than kWordsMaxAdds contributions per
// block (their low sums would overflow).
TEST(GridGpuPlan, ItemsCoverEachLevelOnceWithinTheBudgetAndTheWordsCap) {
    const std::vector<uint32_t> sizes = {8, 64, 512, 4096, 1u << 15, 1u << 19};
    int64_t capped = 0;
    for (uint32_t D = 1; D <= grid::kMaxDims; ++D)
        for (grid::Interpolation interp : {grid::Interpolation::Linear, grid::Interpolation::Nearest})
            for (uint32_t F : {1u, 2u, 4u, 8u})
                for (size_t acc_bytes : {size_t(4), size_t(8), size_t(12)})
                    for (size_t budget : {size_t(48) << 10, size_t(100) << 10, size_t(227) << 10})
                        for (int64_t rows : {int64_t(1), int64_t(7), int64_t(3000), int64_t(1) << 20, int64_t(1) << 24}) {
                            SCOPED_TRACE(msg("D ", D, " nearest ", interp == grid::Interpolation::Nearest, " F ", F,
                                             " slot bytes ", acc_bytes, " budget ", budget, " rows ", rows));
                            const grid_gpu::GridDesc g = plan_grid(D, F, interp, sizes);
                            const bool words = acc_bytes == 12;
                            const int64_t touches = interp == grid::Interpolation::Nearest ? 1 : int64_t(1) << D;
                            const grid_gpu::ReductionPlan p = grid_gpu::plan_reduction(
                                    g, rows, g.n_levels, false, acc_bytes, budget, words ? grid_gpu::kWordsMaxAdds : 0);
                            ASSERT_EQ(p.all.count, g.n_levels);
                            std::vector<uint32_t> covered(g.n_levels * F, 0), global(g.n_levels, 0);
                            for (uint32_t i = 0; i < p.all.count; ++i) EXPECT_EQ(p.all.ids[i], i);
                            for (uint32_t i = 0; i < p.global.count; ++i) ++global[p.global.ids[i]];
                            size_t most = 0;
                            for (uint32_t i = 0; i < p.shared.count; ++i) {
                                const auto& item = p.shared.items[i];
                                ASSERT_LT(item.level, g.n_levels);
                                EXPECT_TRUE(item.fs > 0 && F % item.fs == 0 && (item.fs & (item.fs - 1)) == 0);
                                for (uint32_t f = item.f0; f < item.f0 + item.fs && f < F; ++f)
                                    ++covered[item.level * F + f];
                                most = std::max<size_t>(most, size_t(g.levels[item.level].size) * item.fs * acc_bytes);
                            }
                            for (uint32_t l = 0; l < g.n_levels; ++l)
                                for (uint32_t f = 0; f < F; ++f)
                                    EXPECT_EQ(covered[l * F + f] + global[l], 1u) << "level " << l << " feature " << f;
                            EXPECT_EQ(p.shared_bytes, most);
                            EXPECT_LE(p.shared_bytes, budget);
                            if (p.shared.count == 0) continue;
                            EXPECT_EQ(p.rows_per_block % grid_gpu::kThreads, 0);
                            EXPECT_GE(p.rows_per_block, int64_t(grid_gpu::kThreads));
                            EXPECT_GE(int64_t(p.blocks_per_item) * p.rows_per_block, rows);
                            EXPECT_LT(int64_t(p.blocks_per_item - 1) * p.rows_per_block, rows);
                            if (words) {
                                EXPECT_LE(p.rows_per_block * touches, grid_gpu::kWordsMaxAdds);
                                capped += p.rows_per_block * touches == grid_gpu::kWordsMaxAdds ? 1 : 0;
                            }
                        }
    EXPECT_GT(capped, 0) << "no plan reached the words' cap: the test does not exercise it";
    // The GPU test's cases: a 16^3 Tiled level of F = 2 takes one feature per 48 KiB block in words
    // (4096 x 12 bytes), both with 100 KiB; 7-D Linear rows are capped at 512 rows per block.
    const grid_gpu::GridDesc tiled = plan_grid(3, 2, grid::Interpolation::Linear, {4096, 4096, 4096});
    const grid_gpu::ReductionPlan t48 = grid_gpu::plan_reduction(tiled, 20000, 3, false, 12, 48 << 10, grid_gpu::kWordsMaxAdds);
    EXPECT_EQ(t48.shared.count, 6u);
    EXPECT_EQ(t48.shared_bytes, size_t(48) << 10);
    const grid_gpu::ReductionPlan t100 = grid_gpu::plan_reduction(tiled, 20000, 3, false, 12, 100 << 10, grid_gpu::kWordsMaxAdds);
    EXPECT_EQ(t100.shared.count, 3u);
    const grid_gpu::GridDesc d7 = plan_grid(7, 2, grid::Interpolation::Linear, {512, 512});
    EXPECT_EQ(grid_gpu::plan_reduction(d7, 3000, 2, false, 12, 48 << 10, grid_gpu::kWordsMaxAdds).rows_per_block, 512);
    EXPECT_EQ(grid_gpu::plan_reduction(d7, 3000, 2, false, 8, 48 << 10).rows_per_block, 1024);
    // The second-order pass has no shared-memory items.
    EXPECT_EQ(grid_gpu::plan_reduction(tiled, 20000, 3, true, 12, 48 << 10, grid_gpu::kWordsMaxAdds).shared.count, 0u);
}

// Launch shapes at huge batches: a launch that one grid cannot address is refused with the largest batch it
// takes, never wrapped. The deterministic corner kernel of a 7-D F = 1 grid runs 2 rows per block and level;
// with 32 levels 2^28 + 2 rows made bpl * levels wrap to 32 blocks in 32 bits (levels 1-31 got nothing).
TEST(GridGpuPlan, LaunchesPastTheGridLimitAreRefusedNotWrapped) {
    const uint64_t nvidia = grid_gpu::max_launch_blocks(false, 256), amd = grid_gpu::max_launch_blocks(true, 256);
    EXPECT_EQ(nvidia, 0x7FFFFFFFu);
    EXPECT_EQ(amd * 256, 0xFFFFFF00u);  // blocks x threads below 2^32
    // The largest batch that fits: (2^31 - 1) / 32 runs of blocks, 2 rows per block.
    const int64_t most = int64_t(nvidia / 32) * 2;
    const grid_gpu::RowBlocks fits = grid_gpu::row_blocks("k", most, 2, 32, 256, false);
    EXPECT_EQ(fits.per_copy, uint32_t(most / 2));
    EXPECT_EQ(uint64_t(fits.total), uint64_t(most / 2) * 32);
    for (int64_t rows : {most + 1, (int64_t(1) << 28) + 2, int64_t(1) << 40}) {
        SCOPED_TRACE(rows);
        try {
            grid_gpu::row_blocks("grid_param_grad_corner_fixed_kernel", rows, 2, 32, 256, false);
            ADD_FAILURE() << "no UnsupportedError";
        } catch (const UnsupportedError& e) {
            const std::string what = e.what();
            for (const std::string s : {std::string("grid_param_grad_corner_fixed_kernel"), msg(rows, " rows"),
                                        msg("at most ", most, " rows"), std::string("split the batch")})
                EXPECT_NE(what.find(s), std::string::npos) << what << " lacks '" << s << "'";
        }
    }
    // AMD: the work-items count. 16 levels of 32 rows per block: 2^25 rows are 2^24 blocks, one too many.
    EXPECT_THROW(grid_gpu::row_blocks("k", int64_t(1) << 25, 32, 16, 256, true), UnsupportedError);
    EXPECT_EQ(grid_gpu::row_blocks("k", (int64_t(1) << 25) - 32, 32, 16, 256, true).total, amd - amd % 16);
    EXPECT_NO_THROW(grid_gpu::row_blocks("k", int64_t(1) << 25, 32, 16, 256, false));
    // Partial blocks round up; one copy is the plain row grid.
    EXPECT_EQ(grid_gpu::row_blocks("k", 1, 256, 1, 256).total, 1u);
    EXPECT_EQ(grid_gpu::row_blocks("k", 257, 256, 3, 256).per_copy, 2u);
    EXPECT_EQ(grid_gpu::row_blocks("k", 257, 256, 3, 256).total, 6u);
}
#endif  // TNN_WITH_GPU

}  // namespace
}  // namespace tnn::test
