// What the GPU grid kernels add to grid_math.h: the per-level table the kernels read (index mode,
// modulo mask), the corner-index shortcut they use (per-dimension terms combined by + or XOR, equal to
// grid::grid_index), and the fixed-point format of the deterministic parameter gradient. Host+device
// and pure, property-tested on the CPU (tests/gpu/test_gpu_encodings_host.cpp). The entry points of
// grid.cu (called by grid.cpp) and the benchmark's variant switch are declared at the end.
#pragma once

#include <tnn/module.h>

#include "encodings/grid_math.h"

#include <math.h>
#include <stdint.h>

// Full unrolling of loops over dimensions and corners in device code (a plain loop on the host).
#if defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__)
#define TNN_UNROLL _Pragma("unroll")
#else
#define TNN_UNROLL
#endif  // defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__)

namespace tnn::grid_gpu {

// How a level turns vertex coordinates into an entry index (decided once per level on the host with
// grid::grid_index's rules): the dense index, a hash, or 0 (a Dense/Tiled level too fine for a 32-bit
// dense index: tcnn's stride saturates and every vertex lands on entry 0).
enum class IndexMode : uint32_t { Dense = 0, Hash = 1, Zero = 2 };

// One level as the kernels see it (20 bytes).
struct LevelInfo {
    uint32_t offset;      // first entry of the level in the parameter vector
    uint32_t size;        // entries
    uint32_t resolution;  // vertices per dimension
    float scale;          // pos = fma(scale, x, 0.5): the CPU reference's fp32 value, bit for bit
    uint32_t mode_mask;   // bits 0-1: IndexMode; bit 2: size is a power of two (the modulo is a mask)
};

TNN_HD inline IndexMode level_mode(const LevelInfo& L) { return static_cast<IndexMode>(L.mode_mask & 3u); }
TNN_HD inline bool level_pow2(const LevelInfo& L) { return (L.mode_mask & 4u) != 0; }

// The index mode grid::grid_index uses for a level.
TNN_HD inline IndexMode index_mode(grid::GridType type, uint32_t n_dims, uint32_t level_size, uint32_t resolution) {
    const bool dense_fits = resolution <= grid::max_dense_resolution(n_dims);
    const uint64_t stride = dense_fits ? grid::pow_saturating(resolution, n_dims) : 0xFFFFFFFFull;
    if (type == grid::GridType::Hash && level_size < stride) return IndexMode::Hash;
    return dense_fits ? IndexMode::Dense : IndexMode::Zero;
}

TNN_HD inline LevelInfo make_level_info(grid::GridType type, uint32_t n_dims, uint32_t offset, uint32_t size,
                                        uint32_t resolution, float scale) {
    LevelInfo L;
    L.offset = offset;
    L.size = size;
    L.resolution = resolution;
    L.scale = scale;
    const bool pow2 = size != 0 && (size & (size - 1)) == 0;
    L.mode_mask = static_cast<uint32_t>(index_mode(type, n_dims, size, resolution)) | (pow2 ? 4u : 0u);
    return L;
}

// The XOR-of-products hashes (Prime, CoherentPrime, ReversedPrime) factor per dimension, which the
// corner shortcut needs; Rng and BaseConvert do not (false) and go through grid::grid_index per corner.
TNN_HD inline bool hash_factors(grid::HashType hash, uint32_t* factors) {
    // The factors of grid::grid_hash: coordinate 0 of an all-ones position picks factor 0, and so on.
    if (hash != grid::HashType::Prime && hash != grid::HashType::CoherentPrime && hash != grid::HashType::ReversedPrime) {
        for (uint32_t d = 0; d < grid::kMaxDims; ++d) factors[d] = 0u;
        return false;
    }
    for (uint32_t d = 0; d < grid::kMaxDims; ++d) {
        uint32_t unit[grid::kMaxDims] = {};
        unit[d] = 1u;
        factors[d] = grid::grid_hash(hash, d + 1, unit);
    }
    return true;
}

// Per-dimension terms of a cell's corners: the lower vertex along d contributes lo[d], the upper one
// hi[d]; a corner's raw index is their sum (Dense: coordinate * resolution^d) or XOR (hash:
// coordinate * factor_d), in uint32 arithmetic. (c + 1) * m = c * m + m holds modulo 2^32 too.
template <uint32_t N_DIMS> struct CornerTerms {
    uint32_t lo[N_DIMS], hi[N_DIMS];
};

template <uint32_t N_DIMS>
TNN_HD inline CornerTerms<N_DIMS> corner_terms(const LevelInfo& L, const uint32_t* cell, const uint32_t* factors) {
    CornerTerms<N_DIMS> t;
    const IndexMode mode = level_mode(L);
    // The multiplier picked by masks, not branches: the kernels evaluate this per level and thread.
    const uint32_t hash = mode == IndexMode::Hash ? ~0u : 0u, keep = mode == IndexMode::Zero ? 0u : ~0u;
    uint32_t stride = 1;
    TNN_UNROLL
    for (uint32_t d = 0; d < N_DIMS; ++d) {
        const uint32_t m = ((factors[d] & hash) | (stride & ~hash)) & keep;
        t.lo[d] = cell[d] * m;
        t.hi[d] = t.lo[d] + m;
        stride *= L.resolution;
    }
    return t;
}

// i mod size: a mask for power-of-two sizes (every hashed level); otherwise the division only when
// i is out of range (dense levels: the upper vertex at x = 1 or inputs outside [0, 1]; tiled levels),
// so that warps whose indices are in range skip it.
TNN_HD inline uint32_t wrap_index(const LevelInfo& L, uint32_t i) {
    if (level_pow2(L)) return i & (L.size - 1u);
    if (i >= L.size) i %= L.size;
    return i;
}

// Entry index of corner `corner` (bit d set: upper vertex along d).
template <uint32_t N_DIMS>
TNN_HD inline uint32_t corner_index(const LevelInfo& L, const CornerTerms<N_DIMS>& t, uint32_t corner) {
    uint32_t sum = 0, x = 0;
    TNN_UNROLL
    for (uint32_t d = 0; d < N_DIMS; ++d) {
        const uint32_t v = ((corner >> d) & 1u) ? t.hi[d] : t.lo[d];
        sum += v;
        x ^= v;
    }
    return wrap_index(L, level_mode(L) == IndexMode::Hash ? x : sum);
}

// ---- fixed point of the deterministic parameter gradient ------------------------------------------
// Every contribution c to a level's gradient is rounded to the integer c * 2^k and added with 64-bit
// integer atomics, which are associative: the sum, and so the gradient, is bit-identical whatever the
// order of the additions. k is chosen per level from a bound B on the sum of |c| over the level (rows
// times the largest per-row sum of |c|), so that B * 2^k <= 2^62: no entry can overflow, and each
// contribution is rounded by at most 2^-(k+1) <= B * 2^-62, far below fp32's resolution of B.

// The exponent meaning "a contribution was not finite": the level's gradient is NaN.
constexpr int kNonFiniteExponent = -100000;

// The per-level bound from the largest per-row sum of |c| (an fp32 value, reduced by the kernels with
// an integer atomicMax on its bits) and the row count; the relative margin 2^-16 covers the fp32
// rounding of the per-row sums and of the contributions themselves.
TNN_HD inline double fixed_point_bound(float max_row_sum, int64_t rows) {
    return static_cast<double>(max_row_sum) * static_cast<double>(rows) * (1.0 + 1.0 / 65536.0);
}

// k for a level whose largest per-row sum of |c| is `max_row_sum`: the largest k with B * 2^k < 2^62
// (0 when B is 0: every contribution is 0), or kNonFiniteExponent.
TNN_HD inline int fixed_point_exponent(float max_row_sum, int64_t rows) {
    if (!(max_row_sum <= 3.402823466e38f)) return kNonFiniteExponent;  // inf or NaN
    const double bound = fixed_point_bound(max_row_sum, rows);
    if (!(bound > 0.0)) return 0;
    int e = 0;
    (void)frexp(bound, &e);  // bound < 2^e
    return 62 - e;
}

// The integer a contribution adds: c * 2^k rounded to nearest even (|c| * 2^k <= 2^62 by the choice of
// k). The device form scales in fp32, which is exact except where the result is below 2^-126 and so
// rounds to 0 either way.
TNN_HD inline long long to_fixed_point(float c, int k) {
#if defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__)
    return __float2ll_rn(scalbnf(c, k));
#else
    return static_cast<long long>(rint(ldexp(static_cast<double>(c), k)));
#endif  // __CUDA_ARCH__ || __HIP_DEVICE_COMPILE__
}

// The value of an accumulated integer as fp32 (one rounding of s * 2^-k, through fp64).
TNN_HD inline float from_fixed_point(long long s, int k) {
    if (k == kNonFiniteExponent) return NAN;
    return static_cast<float>(ldexp(static_cast<double>(s), -k));
}

}  // namespace tnn::grid_gpu

#ifdef TNN_WITH_GPU
namespace tnn::grid_gpu {

// Everything about a grid that the GPU passes need, built once by the module.
struct GridDesc {
    uint32_t n_dims = 0, n_levels = 0, n_features = 0;  // n_features: per level
    DType dtype = DType::f32;
    grid::GridType type = grid::GridType::Hash;
    grid::HashType hash = grid::HashType::CoherentPrime;
    grid::Interpolation interpolation = grid::Interpolation::Linear;
    bool stochastic_interpolation = false;
    bool deterministic = false;  // the config key; tnn::deterministic() is read per call as well
    size_t n_params = 0;
    LevelInfo levels[grid::kMaxLevels] = {};
};

// Entry points (grid.cu). Arguments are validated by the module; rows > 0. n_active: the levels
// [0, n_active) that are on (set_max_level, as recorded by the forward pass).
void forward(const GridDesc& g, const Stream& stream, ConstView input, View output, const void* params,
             uint32_t n_active);
void backward(const GridDesc& g, const Stream& stream, ConstView input, ConstView dL_doutput, View* dL_dinput,
              void* dL_dparams, const void* params, GradMode mode, uint32_t n_active);
void backward_backward_input(const GridDesc& g, const Stream& stream, ConstView input, ConstView dL_ddLdinput,
                             ConstView dL_doutput, View* dL_ddLdoutput, View* dL_dinput, void* dL_dparams,
                             const void* params, GradMode mode, uint32_t n_active);

// Kernel variants, for bench/bench_grid.cu to compare (-1: the automatic choice). Process-wide; not
// for use while other threads run grids.
struct Variant {
    int chunked_loads = -1;   // forward: 16-byte loads shared by x-neighbour corners (0: one load per value)
    int forward_threads = 0;  // threads per forward block (0: 256)
    int shared_kib = -1;      // gradient: shared memory per block for small levels (-1: 48 KiB, no opt-in,
                              // but 96 KiB where Tiled grids take split fixed point by default (shared_fixed);
                              // 0: no shared-memory levels; more: opt in, up to the device's maximum)
    int vector_atomics = -1;  // fast gradient: sm_90 v2/v4 float reductions (0: scalar)
    int fast_mapping = -1;    // fast gradient: 0 a thread per (row, level), x-pairs merged into one v4;
                              // 1 a thread per (row, level, corner), reductions coalesced by sector;
                              // 2 (or more) a thread per (row, corner) over a group of levels (x read once
                              // per group; L2 hints only at 2)
                              // (-1: 2, or 0 for first-order Nearest / stochastic rows: one corner each)
    int det_mapping = -1;     // deterministic: 0 a thread per (row, level); 1 per (row, level, feature);
                              // 2 per (row, level, corner, feature); 3 per (row, feature) over a group of
                              // levels (-1: 3 when F > 1, else 2, or 0 for first-order Nearest /
                              // stochastic rows)
    int level_group_kib = 0;  // gradient mappings over groups of levels: accumulator KiB per group
                              // (0: 32768 in fp32, 36864 in 64-bit fixed point)
    int level_major_grads = -1;  // gradient: 1 copies dL/dy to level-major order before the level passes
                                 // (-1, 0: each pass reads the caller's rows; measured faster, run 61)
    int overlap_shared = -1;     // gradient: the shared-memory levels on a second stream, beside the
                                 // global levels (0: one after the other on the caller's stream; -1: 1)
    int vector_grad_loads = -1;  // gradient: a (row, level)'s F values of dL/dy in one load when aligned
                                 // (0: one load per value; -1: 1)
    int slot_pairs = -1;         // fast gradient with a thread per corner (fast_mapping 1, 2): an x-pair
                                 // whose entries share a 2-entry slot leaves as one reduction from the
                                 // lane of corner x (0: a reduction per lane, merged by the coalescer; -1: 1)
    int shared_fixed = -1;       // fast gradient's shared-memory levels: 1 accumulates in split fixed point
                                 // (two native 32-bit integer atomics per value) instead of fp32 slots, whose
                                 // atomics are compare-and-swap loops; 0 fp32 slots (-1: 1 with 96 KiB of
                                 // shared memory per block for Tiled grids on CUDA devices, whose levels all go
                                 // through shared memory with thousands of rows per entry; 0 for the others,
                                 // where the 8-byte slots' extra passes cost more than they save (run 79), and
                                 // on AMD GPUs, which add floats in LDS natively)
    int det_shared_words = -1;   // deterministic gradient's shared-memory levels: 1 three native 32-bit
                                 // integer words per value (12-byte slots, at most 2^16 additions per slot
                                 // and block), 0 one 64-bit slot, whose shared atomics are compare-and-swap
                                 // loops on NVIDIA GPUs; the same bits either way (-1: 1 on CUDA devices,
                                 // 0 on AMD GPUs, which add 64-bit integers in LDS natively; NVIDIA builds
                                 // only, elsewhere 1 is an UnsupportedError)
    int l2_hints = -1;           // fast gradient over groups of levels (fast_mapping 2), sm_90: 1 marks the
                                 // x and dL/dy loads evict-first in L2 and the reductions evict-last, 2 the
                                 // loads only, 0 no hints (-1: 1 into our fp32 scratch, 0.6-1.7% faster in
                                 // runs 77-79; 2 into the caller's fp32 gradient, whose lines would stay
                                 // evict-last after the call)
    int discard_scratch = 1;     // sm_90: the conversion drops the fast gradient's fp32 scratch (with l2_hints
                                 // 1) and the deterministic one's 64-bit accumulator from L2 once read (no
                                 // write-back, no evict-last lines left); 0 keeps them
    int det_bulk = -1;           // deterministic gradient, a thread per (row, feature) over groups of levels,
                                 // F = 2, first order: 1 sends an x-pair of adjacent entries (32 contiguous
                                 // bytes) as one sm_90 bulk reduction from shared memory, 0 as 64-bit integer
                                 // reductions per lane; the same bits either way (-1: 1 on NVIDIA sm_90 and
                                 // later, 0 elsewhere; 1 on an older NVIDIA GPU issues the four values as
                                 // atomics; on AMD GPUs 1 is an UnsupportedError)
    int staged_scratch = -1;     // gradient over groups of levels into scratch (fast_mapping 2 into fp32
                                 // scratch, det_mapping 3): 1 zeroes a group's part of the scratch just
                                 // before the group's kernel and converts it just after, while its lines are
                                 // in L2, the other levels first / last; 0 zeroes the whole scratch first
                                 // and converts it at the end (-1: 1)
    int bound_chunks = -1;       // deterministic bound pass on the caller's rows, Linear / Nearest / stochastic:
                                 // 1 running maxima over the rows' 16-byte chunks (a thread per chunk position),
                                 // 0 a thread per row with a warp maximum per level (before the twenty-fifth
                                 // session); the same exponents (-1: 1)
    int fused_zeroing = -1;      // staged scratch: 1 zeroes the first group's part with the other levels (one
                                 // memset where they meet) and each later group's part in the previous group's
                                 // conversion (deterministic gradient; one launch fewer per group); 0 a memset
                                 // per part (before the twenty-fifth session) (-1: 1)
    int poison_scratch = 0;      // tests: 1 fills the gradient's scratch with 0xFF bytes (NaN) in fp32, 0x7F
                                 // (about 2^63) in fixed point first, so that a part left unzeroed shows
};
void set_variant(const Variant& v);
Variant variant();
// Test hook: launches of the deterministic gradient's bulk-pair kernel (Variant::det_bulk) so far (counted
// where the launcher launched it).
uint64_t bulk_pair_launches();
// Test hook: groups of levels whose part of the gradient's scratch was converted right after their kernel
// (Variant::staged_scratch) so far.
uint64_t staged_scratch_groups();
// Test hook: groups of levels whose part of the scratch the previous group's conversion zeroed
// (Variant::fused_zeroing) so far.
uint64_t fused_zeroings();
// Test hook: gradient passes whose scratch went in parts (Variant::staged_scratch) so far. With fused
// zeroing, the deterministic conversion zeroes the next group's part when its values are one range (the
// fast path's never does): then every group but each pass's first (fused_zeroings).
uint64_t staged_scratch_passes();
// Test hooks: launches of the deterministic bound pass on the caller's dL/dy rows so far (staged in
// shared memory or as running maxima over their chunks), and of the second kind alone.
uint64_t staged_bound_launches();
uint64_t chunk_bound_launches();

}  // namespace tnn::grid_gpu
#endif  // TNN_WITH_GPU
