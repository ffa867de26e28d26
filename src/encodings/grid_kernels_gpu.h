// The grid encodings' GPU kernels and their launchers, templated on the device storage type, the input
// dimension and the features per level. Included only by grid.cu and by the per-dimension
// instantiation files (instantiations/grid_d*.cu), which compile make_launchers<N_DIMS> once each.
//
// Thread mappings (docs/encodings.md "GPU" has the reasoning and bench/notes_grid.md the numbers):
// - forward: one thread per (row, level), levels fastest, so a warp writes whole output rows and the
//   gathers of all levels are in flight at once; x-neighbour corners share 16-byte loads.
// - parameter gradient: one level (or a group of levels, about 16 MiB of accumulators) at a time, so
//   that the accumulators being reduced stay in L2; a thread per (row, corner) over the group's levels
//   (fp32; x-neighbours that share a 32-byte sector leave as one request, and L2 reductions cost the
//   same per request whatever their width) or per (row, feature) over the group's levels (64-bit
//   fixed point: an entry's F words leave as one request; per (row, level, corner, feature) when
//   F = 1); levels small enough for shared memory are reduced there (one block per row chunk, on a
//   second stream beside the global levels) and flushed with coalesced atomics.
// - input gradient and the second-order pass: one thread per row, levels in order (as the CPU).
#pragma once

#include "encodings/dispatch_gpu.h"
#include "encodings/grid_gpu.h"
#include "encodings/grid_plan.h"
#include "gpu/gpu.h"

#include <string.h>

#include <mutex>
#include <set>
#include <type_traits>
#include <utility>

namespace tnn::grid_gpu {

using grid::Interpolation;
using gpu::from_acc;
using gpu::to_acc;

// ---- kernel arguments -----------------------------------------------------------------------------

// Passed by value (graphs capture it): the level table and what every kernel needs to index it.
struct KernelArgs {
    LevelInfo levels[grid::kMaxLevels];
    uint32_t factors[grid::kMaxDims];  // XOR-hash factors (hash_factors)
    uint32_t n_levels, n_active;
    uint32_t hash;           // grid::HashType, for generic_hash levels
    uint32_t interpolation;  // grid::Interpolation
    uint32_t generic_hash;   // Rng / BaseConvert: hashed corners go through grid::grid_index
    uint32_t stochastic;     // stochastic_interpolation
};

// Where the parameter-gradient kernels find dL/dy of (row, level): element row * row_stride +
// level * level_stride (+ feature). The caller's row-major rows: (stride, F). The level-major copy
// param_gradient makes first (grid_level_major_kernel): (F, rows * F), so that a level's pass reads
// its rows' values contiguously instead of one 32-byte sector of every row per level.
struct GradLayout {
    int64_t row_stride, level_stride;
    // A (row, level)'s F values start aligned to gpu::Packed<T, F> (Variant::vector_grad_loads): one load each.
    bool vec = false;
    __host__ __device__ int64_t at(int64_t row, uint32_t level) const { return row * row_stride + level * level_stride; }
};

// Shared memory a kernel may use without opting in, on every device.
constexpr size_t kSharedBytes = 48 * 1024;
// Dynamic shared memory grid_param_grad_shared_split_kernel needs beyond its slots (the block's bound).
constexpr size_t kSplitSharedExtra = 16;

// ---- storage types -----------------------------------------------------------------------------

// One level entry: F values of T, 2..32 bytes. kPerChunk entries share a 16-byte chunk when smaller.
template <typename T, uint32_t F> struct Entry {
    static constexpr uint32_t kBytes = F * sizeof(T);
    static constexpr uint32_t kPerChunk = kBytes >= 16 ? 1 : 16 / kBytes;
    static constexpr uint32_t kChunks = kBytes >= 16 ? kBytes / 16 : 1;  // chunks per entry
    static constexpr uint32_t kWords = (kBytes + 3) / 4;
};

// A 16-bit storage value (its bits in the low half of a word) as fp32, and back.
template <typename T> __device__ __forceinline__ float half_bits_to_float(uint32_t bits) {
    const uint16_t b = static_cast<uint16_t>(bits);
    T h;
    memcpy(&h, &b, 2);
    return to_acc(h);
}
template <typename T> __device__ __forceinline__ uint32_t float_to_half_bits(float v) {
    const T h = from_acc<T>(v);
    uint16_t b;
    memcpy(&b, &h, 2);
    return b;
}

// N values of T packed in words (fp32: one per word; 16-bit types: two, the first in the low half).
template <typename T, uint32_t N> __device__ __forceinline__ void decode_words(const uint32_t* w, float (&out)[N]) {
    TNN_UNROLL
    for (uint32_t i = 0; i < N; ++i) {
        if constexpr (sizeof(T) == 4)
            out[i] = __uint_as_float(w[i]);
        else
            out[i] = half_bits_to_float<T>((i & 1u) ? (w[i / 2] >> 16) : (w[i / 2] & 0xFFFFu));
    }
}
template <typename T, uint32_t N> __device__ __forceinline__ void encode_words(const float (&v)[N], uint32_t* w) {
    TNN_UNROLL
    for (uint32_t i = 0; i < N; ++i) {
        if constexpr (sizeof(T) == 4)
            w[i] = __float_as_uint(v[i]);
        else if (i & 1u)
            w[i / 2] |= float_to_half_bits<T>(v[i]) << 16;
        else
            w[i / 2] = float_to_half_bits<T>(v[i]);
    }
}

__device__ __forceinline__ uint32_t select_word(const uint4& q, uint32_t i) {
    return i == 0 ? q.x : (i == 1 ? q.y : (i == 2 ? q.z : q.w));
}

// Entry j (< kPerChunk) of a 16-byte chunk; the selects keep every value in registers.
template <typename T, uint32_t F> __device__ __forceinline__ void entry_from_chunk(const uint4& q, uint32_t j, float (&v)[F]) {
    using E = Entry<T, F>;
    uint32_t w[E::kWords];
    if constexpr (E::kBytes == 2) {
        const uint32_t word = select_word(q, j >> 1);
        w[0] = (j & 1u) ? (word >> 16) : (word & 0xFFFFu);
    } else {
        TNN_UNROLL
        for (uint32_t m = 0; m < E::kWords; ++m) w[m] = select_word(q, j * E::kWords + m);
    }
    decode_words<T, F>(w, v);
}

// Entry i of a level as fp32 values: one load per value.
template <typename T, uint32_t F> __device__ __forceinline__ void load_entry(const T* __restrict__ base, uint32_t i, float (&v)[F]) {
    TNN_UNROLL
    for (uint32_t f = 0; f < F; ++f) v[f] = to_acc(base[size_t(i) * F + f]);
}

// Entries i0 and i1 (x-neighbours) of a level. CHUNKED (the level is 16-byte aligned and a multiple of
// 16 bytes): entries below 16 bytes come from their 16-byte chunk, and i1 reuses i0's chunk when they
// share it (for the CoherentPrime hash and dense levels: 1 - 1/kPerChunk of the time).
template <typename T, uint32_t F, bool CHUNKED>
__device__ __forceinline__ void load_pair(const T* __restrict__ base, uint32_t i0, uint32_t i1, float (&v0)[F],
                                          float (&v1)[F]) {
    using E = Entry<T, F>;
    if constexpr (!CHUNKED) {
        load_entry<T, F>(base, i0, v0);
        load_entry<T, F>(base, i1, v1);
    } else if constexpr (E::kBytes >= 16) {
        const uint4* chunks = reinterpret_cast<const uint4*>(base);
        uint32_t w0[E::kWords], w1[E::kWords];
        TNN_UNROLL
        for (uint32_t c = 0; c < E::kChunks; ++c) {
            const uint4 q0 = chunks[size_t(i0) * E::kChunks + c], q1 = chunks[size_t(i1) * E::kChunks + c];
            w0[4 * c] = q0.x, w0[4 * c + 1] = q0.y, w0[4 * c + 2] = q0.z, w0[4 * c + 3] = q0.w;
            w1[4 * c] = q1.x, w1[4 * c + 1] = q1.y, w1[4 * c + 2] = q1.z, w1[4 * c + 3] = q1.w;
        }
        decode_words<T, F>(w0, v0);
        decode_words<T, F>(w1, v1);
    } else {
        const uint4* chunks = reinterpret_cast<const uint4*>(base);
        const uint32_t c0 = i0 / E::kPerChunk, c1 = i1 / E::kPerChunk;
        const uint4 q0 = chunks[c0];
        uint4 q1 = q0;
        if (c1 != c0) q1 = chunks[c1];
        entry_from_chunk<T, F>(q0, i0 % E::kPerChunk, v0);
        entry_from_chunk<T, F>(q1, i1 % E::kPerChunk, v1);
    }
}

// Stores F values at dst: one vector store when VEC (dst aligned to min(kBytes, 16)), else per value.
template <typename T, uint32_t F> __device__ __forceinline__ void store_entry(T* dst, const float (&v)[F], bool vec) {
    using E = Entry<T, F>;
    if constexpr (E::kBytes >= 4) {
        if (vec) {
            uint32_t w[E::kWords];
            encode_words<T, F>(v, w);
            if constexpr (E::kBytes == 4) {
                *reinterpret_cast<uint32_t*>(dst) = w[0];
            } else if constexpr (E::kBytes == 8) {
                *reinterpret_cast<uint2*>(dst) = make_uint2(w[0], w[1]);
            } else {
                TNN_UNROLL
                for (uint32_t c = 0; c < E::kChunks; ++c)
                    reinterpret_cast<uint4*>(dst)[c] = make_uint4(w[4 * c], w[4 * c + 1], w[4 * c + 2], w[4 * c + 3]);
            }
            return;
        }
    }
    TNN_UNROLL
    for (uint32_t f = 0; f < F; ++f) dst[f] = from_acc<T>(v[f]);
}

// ---- per-level maths ------------------------------------------------------------------------------

// Cell and interpolation weights of one row at one level (grid::axis_weight, so the same fp32 values
// as the CPU reference).
template <uint32_t D> struct Located {
    uint32_t cell[D];
    float w[D];
};

template <uint32_t D>
__device__ __forceinline__ Located<D> locate(const float* __restrict__ x, float scale, Interpolation interp) {
    Located<D> p;
    TNN_UNROLL
    for (uint32_t d = 0; d < D; ++d) {
        const grid::AxisWeight<float> a = grid::axis_weight<float>(x[d], scale, interp);
        p.cell[d] = a.cell;
        p.w[d] = a.w;
    }
    return p;
}

// W_c = prod_d (w_d or 1 - w_d), multiplied in the order of grid::corner_weight (same bits).
template <uint32_t D> __device__ __forceinline__ float corner_weight(const float (&w)[D], uint32_t corner) {
    float W = 1.0f;
    TNN_UNROLL
    for (uint32_t d = 0; d < D; ++d) W *= ((corner >> d) & 1u) ? w[d] : 1.0f - w[d];
    return W;
}

// Entry index of a corner: the per-dimension shortcut, or grid::grid_index for Rng / BaseConvert.
template <uint32_t D>
__device__ __forceinline__ uint32_t corner_entry(const KernelArgs& a, const LevelInfo& L, const CornerTerms<D>& t,
                                                 const uint32_t (&cell)[D], uint32_t corner) {
    if (a.generic_hash && level_mode(L) == IndexMode::Hash) {
        uint32_t pos[D];
        grid::corner_position(D, cell, corner, pos);
        return grid::grid_index(grid::GridType::Hash, static_cast<grid::HashType>(a.hash), D, L.size, L.resolution,
                                pos);
    }
    return corner_index<D>(L, t, corner);
}

// Loops over 2^(D-1) x-pairs or 2^D corners are unrolled up to 8 iterations (code size beyond).
template <uint32_t N> constexpr int kUnroll = N <= 8 ? static_cast<int>(N) : 2;

// ---- forward ---------------------------------------------------------------------------------------

// y[row, level * F + f] = sum_c W_c V_c[f] in corner order with fma (the CPU reference's order), or the
// lower vertex's value for Nearest; 0 for switched-off levels. Block: rows_per_block * n_levels threads;
// dynamic shared memory: the level table (n_levels entries: the rest of the SM's 256 KiB stays L1).
template <typename T, uint32_t D, uint32_t F, bool CHUNKED>
__global__ void grid_forward_kernel(const KernelArgs a, int64_t rows, uint32_t rows_per_block,
                                    const float* __restrict__ x, int64_t x_stride, const T* __restrict__ params,
                                    T* __restrict__ y, int64_t y_stride, bool vec_store) {
    extern __shared__ LevelInfo levels[];
    for (uint32_t i = threadIdx.x; i < a.n_levels; i += blockDim.x) levels[i] = a.levels[i];
    __syncthreads();
    const uint32_t local_row = threadIdx.x / a.n_levels, level = threadIdx.x - local_row * a.n_levels;
    const int64_t row = int64_t(blockIdx.x) * rows_per_block + local_row;
    if (local_row >= rows_per_block || row >= rows) return;

    float out[F];
    TNN_UNROLL
    for (uint32_t f = 0; f < F; ++f) out[f] = 0.0f;
    if (level < a.n_active) {
        const LevelInfo L = levels[level];
        const T* __restrict__ V = params + size_t(L.offset) * F;
        const auto interp = static_cast<Interpolation>(a.interpolation);
        const Located<D> p = locate<D>(x + row * x_stride, L.scale, interp);
        const CornerTerms<D> t = corner_terms<D>(L, p.cell, a.factors);
        if (interp == Interpolation::Nearest) {
            load_entry<T, F>(V, corner_entry<D>(a, L, t, p.cell, 0), out);
        } else {
            constexpr uint32_t kPairs = 1u << (D - 1);
#pragma unroll(kUnroll<kPairs>)
            for (uint32_t pair = 0; pair < kPairs; ++pair) {
                const uint32_t c0 = pair << 1, c1 = c0 | 1u;
                float v0[F], v1[F];
                load_pair<T, F, CHUNKED>(V, corner_entry<D>(a, L, t, p.cell, c0), corner_entry<D>(a, L, t, p.cell, c1),
                                         v0, v1);
                const float W0 = corner_weight<D>(p.w, c0), W1 = corner_weight<D>(p.w, c1);
                TNN_UNROLL
                for (uint32_t f = 0; f < F; ++f) out[f] = fmaf(W0, v0[f], out[f]);
                TNN_UNROLL
                for (uint32_t f = 0; f < F; ++f) out[f] = fmaf(W1, v1[f], out[f]);
            }
        }
    }
    store_entry<T, F>(y + row * y_stride + size_t(level) * F, out, vec_store);
}

// ---- parameter gradient ---------------------------------------------------------------------------
// Contributions dL/dV_c[f] += weight_c * g[f], weight W_c (first order; Nearest: 1 at the lower
// vertex; stochastic: 1 at one sampled corner) or E_c = sum_d v_d dW_c/dx_d (the second-order pass).
// A sink receives them: global float atomics (FloatSink), 64-bit fixed-point atomics (FixedSink),
// shared memory (SharedSink), or the bound of the fixed-point scale (BoundSink).

// sm_90's vector float reductions (one L2 operation for 2 or 4 consecutive floats; p aligned to 8 /
// 16 bytes); elsewhere one atomic per value. The return value is unused, so atomicAdd becomes a RED.
__device__ __forceinline__ void red_add2(float* p, float a, float b) {
#if defined(TNN_WITH_CUDA) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("red.global.add.v2.f32 [%0], {%1, %2};" ::"l"(p), "f"(a), "f"(b) : "memory");
#else
    atomicAdd(p, a);
    atomicAdd(p + 1, b);
#endif  // TNN_WITH_CUDA && __CUDA_ARCH__ >= 900
}
__device__ __forceinline__ void red_add4(float* p, float a, float b, float c, float d) {
#if defined(TNN_WITH_CUDA) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("red.global.add.v4.f32 [%0], {%1, %2, %3, %4};" ::"l"(p), "f"(a), "f"(b), "f"(c), "f"(d) : "memory");
#else
    atomicAdd(p, a);
    atomicAdd(p + 1, b);
    atomicAdd(p + 2, c);
    atomicAdd(p + 3, d);
#endif  // TNN_WITH_CUDA && __CUDA_ARCH__ >= 900
}
// red_add2 / red_add4 with an L2 eviction policy (createpolicy); without the policy form, plain ones.
__device__ __forceinline__ void red_add2(float* p, float a, float b, unsigned long long policy) {
#if defined(TNN_WITH_CUDA) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("red.global.add.L2::cache_hint.v2.f32 [%0], {%1, %2}, %3;" ::"l"(p), "f"(a), "f"(b), "l"(policy)
                 : "memory");
#else
    (void)policy;
    red_add2(p, a, b);
#endif  // TNN_WITH_CUDA && __CUDA_ARCH__ >= 900
}
__device__ __forceinline__ void red_add4(float* p, float a, float b, float c, float d, unsigned long long policy) {
#if defined(TNN_WITH_CUDA) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("red.global.add.L2::cache_hint.v4.f32 [%0], {%1, %2, %3, %4}, %5;" ::"l"(p), "f"(a), "f"(b), "f"(c),
                 "f"(d), "l"(policy)
                 : "memory");
#else
    (void)policy;
    red_add4(p, a, b, c, d);
#endif  // TNN_WITH_CUDA && __CUDA_ARCH__ >= 900
}

// L2 eviction hints (sm_90 builds; Variant::l2_hints): the corner kernels' streaming loads (x, dL/dy:
// read once per group of levels) marked evict-first, and their reductions into the group's
// accumulators evict-last, so that the stream does not push the accumulators out of L2. The policies
// come from createpolicy (no side effects, so the compiler may hoist it); elsewhere plain accesses.
#if defined(TNN_WITH_CUDA) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define TNN_GRID_L2_HINTS 1
__device__ __forceinline__ unsigned long long l2_evict_first_policy() {
    unsigned long long p;
    asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(p));
    return p;
}
__device__ __forceinline__ unsigned long long l2_evict_last_policy() {
    unsigned long long p;
    asm("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(p));
    return p;
}
#endif  // TNN_WITH_CUDA && __CUDA_ARCH__ >= 900
// A 4-byte word at p (an fp32 x, or a (row, level)'s F = 2 values of dL/dy in fp16 / bf16), marked
// evict-first in L2 when `hint`.
__device__ __forceinline__ uint32_t load_streaming_word(const void* p, bool hint) {
#if defined(TNN_GRID_L2_HINTS)
    if (hint) {
        uint32_t v;
        asm volatile("ld.global.L2::cache_hint.b32 %0, [%1], %2;" : "=r"(v) : "l"(p), "l"(l2_evict_first_policy()));
        return v;
    }
#endif  // TNN_GRID_L2_HINTS
    (void)hint;
    return *static_cast<const uint32_t*>(p);
}
__device__ __forceinline__ float load_streaming(const float* p, bool hint) {
#if defined(TNN_GRID_L2_HINTS)
    if (hint) return __uint_as_float(load_streaming_word(p, true));
#endif  // TNN_GRID_L2_HINTS
    (void)hint;
    return *p;
}

// fp32 accumulation into acc (n_params floats, the level at offset * F). vec: vector reductions are
// wanted; each level checks the alignment they need (Tiled levels of base^d entries start anywhere).
struct FloatSink {
    float* acc;
    bool vec;
    bool slot_pairs;  // Variant::slot_pairs (the corner kernels); off where acc holds the caller's values
    uint8_t l2_hints = 0;  // Variant::l2_hints (the corner kernels over groups of levels): 1 loads evict-first
                           // and reductions evict-last, 2 the loads only

    struct Level {
        float* base;
        bool vec;    // entries aligned for one v2 (F = 2) / v4 (F >= 4) reduction each
        bool pair;   // 2-entry slots aligned for one v2 (F = 1) / v4 (F = 2) reduction
        bool slots;  // pair, an even number of entries, and the corner kernels' lanes use it (slot_pairs)
        bool keep;   // slot reductions marked evict-last in L2 (l2_hints 1)
        __device__ __forceinline__ bool skip() const { return false; }
        template <uint32_t F> __device__ __forceinline__ void add(uint32_t i, float w, const float (&g)[F]) const {
            float* p = base + size_t(i) * F;
            if constexpr (F == 1) {
                atomicAdd(p, w * g[0]);
            } else if constexpr (F == 2) {
                if (vec) red_add2(p, w * g[0], w * g[1]);
                else atomicAdd(p, w * g[0]), atomicAdd(p + 1, w * g[1]);
            } else {
                TNN_UNROLL
                for (uint32_t f = 0; f < F; f += 4) {
                    if (vec) red_add4(p + f, w * g[f], w * g[f + 1], w * g[f + 2], w * g[f + 3]);
                    else atomicAdd(p + f, w * g[f]), atomicAdd(p + f + 1, w * g[f + 1]), atomicAdd(p + f + 2, w * g[f + 2]), atomicAdd(p + f + 3, w * g[f + 3]);
                }
            }
        }
        // Two different entries of one 2F-float slot (entries 2j and 2j + 1), which one reduction can add.
        // For CoherentPrime levels this holds whenever the cell's x coordinate is even (x and x + 1 differ
        // in bit 0 only), for dense levels when i0 is even.
        template <uint32_t F> __device__ __forceinline__ bool shares_slot(uint32_t i0, uint32_t i1) const {
            return F <= 2 && pair && (i0 ^ i1) == 1u;
        }
        // One reduction of entry i's 2-entry slot: `own` added to entry i, `other` to its slot neighbour i ^ 1.
        template <uint32_t F>
        __device__ __forceinline__ void reduce_slot(uint32_t i, const float (&own)[F], const float (&other)[F]) const {
            const bool low = (i & 1u) == 0;
            float* p = base + size_t(i & ~1u) * F;
            float lo[F], hi[F];
            TNN_UNROLL
            for (uint32_t f = 0; f < F; ++f) {
                lo[f] = low ? own[f] : other[f];
                hi[f] = low ? other[f] : own[f];
            }
#if defined(TNN_GRID_L2_HINTS)
            if (keep) {
                const unsigned long long policy = l2_evict_last_policy();
                if constexpr (F == 1) red_add2(p, lo[0], hi[0], policy);
                else red_add4(p, lo[0], lo[1], hi[0], hi[1], policy);
                return;
            }
#endif  // TNN_GRID_L2_HINTS
            if constexpr (F == 1) red_add2(p, lo[0], hi[0]);
            else red_add4(p, lo[0], lo[1], hi[0], hi[1]);
        }
        template <uint32_t F>
        __device__ __forceinline__ void add_slot(uint32_t i0, float w0, uint32_t i1, float w1, const float (&g)[F]) const {
            float c0[F], c1[F];
            TNN_UNROLL
            for (uint32_t f = 0; f < F; ++f) c0[f] = w0 * g[f], c1[f] = w1 * g[f];
            reduce_slot<F>(i0, c0, c1);
        }
        template <uint32_t F>
        __device__ __forceinline__ void add_pair(uint32_t i0, float w0, uint32_t i1, float w1, const float (&g)[F]) const {
            if constexpr (F <= 2) {
                if (shares_slot<F>(i0, i1)) {
                    add_slot<F>(i0, w0, i1, w1, g);
                    return;
                }
            }
            add<F>(i0, w0, g);
            add<F>(i1, w1, g);
        }
        // The corner kernels' lanes with `slots` (the warp's lanes `lanes`, those whose rows exist, all call
        // it together; corners x and x + 1 of an x-pair on lanes 2k and 2k + 1): each lane makes one
        // reduction of a whole 2-entry slot, its own contribution next to its x-neighbour's when their
        // entries share the slot (the lane of corner x + 1 then adds nothing), else next to zeros. One
        // reduction of a slot costs the L2 what any one reduction does (104 G/s), where two lanes'
        // reductions merged into one request to a sector cost 1.4 times that (75 G pairs/s;
        // bench/notes_grid.md section 8). The +0 added beside a lone contribution leaves a sum as it is
        // unless it is -0 or subnormal (float atomics flush to zero): so slots only where both entries
        // belong to the level (an even number of entries, Level::slots) and where the accumulator is
        // scratch zeroed for the call, not the caller's gradient added to (FloatSink::slot_pairs).
#if defined(TNN_WITH_CUDA)
        template <uint32_t F>
        __device__ __forceinline__ void add_lanes(unsigned lanes, uint32_t corner, uint32_t i, float w,
                                                  const float (&g)[F]) const {
            static_assert(F <= 2, "slots of two entries: F = 1 or 2");
            uint32_t j;
            float wj;
            if (lanes == 0xFFFFFFFFu) {  // a whole warp (all but a batch's last): no convergence check
                j = __shfl_xor_sync(0xFFFFFFFFu, i, 1);
                wj = __shfl_xor_sync(0xFFFFFFFFu, w, 1);
            } else {
                j = __shfl_xor_sync(lanes, i, 1);
                wj = __shfl_xor_sync(lanes, w, 1);
            }
            const bool shared = (i ^ j) == 1u;
            if (shared && (corner & 1u) != 0) return;
            float own[F], other[F];
            TNN_UNROLL
            for (uint32_t f = 0; f < F; ++f) own[f] = w * g[f], other[f] = shared ? wj * g[f] : 0.0f;
            reduce_slot<F>(i, own, other);
        }
#endif  // TNN_WITH_CUDA
    };
    template <uint32_t F> __device__ __forceinline__ Level level(uint32_t, const LevelInfo& L) const {
        float* base = acc + size_t(L.offset) * F;
        const uintptr_t addr = reinterpret_cast<uintptr_t>(base);
        const uintptr_t entry_alignment = F >= 4 ? 16 : 4 * F, pair_alignment = 8 * F;
        const bool pair = vec && F <= 2 && addr % pair_alignment == 0;
        return Level{base, vec && addr % entry_alignment == 0, pair, pair && slot_pairs && (L.size & 1u) == 0,
                     l2_hints == 1};
    }
};

// 64-bit fixed point (see grid_gpu.h): exact integer sums, bit-identical in any order.
struct FixedSink {
    unsigned long long* acc;
    const int* exponents;  // per level

    struct Level {
        unsigned long long* base;
        int k;
        // A non-finite contribution in the level: the conversion writes NaN for all of it.
        __device__ __forceinline__ bool skip() const { return k == kNonFiniteExponent; }
        template <uint32_t F> __device__ __forceinline__ void add(uint32_t i, float w, const float (&g)[F]) const {
            unsigned long long* p = base + size_t(i) * F;
            TNN_UNROLL
            for (uint32_t f = 0; f < F; ++f) {
                const long long q = to_fixed_point(w * g[f], k);
                if (q != 0) atomicAdd(p + f, static_cast<unsigned long long>(q));
            }
        }
        template <uint32_t F>
        __device__ __forceinline__ void add_pair(uint32_t i0, float w0, uint32_t i1, float w1, const float (&g)[F]) const {
            add<F>(i0, w0, g);
            add<F>(i1, w1, g);
        }
    };
    template <uint32_t F> __device__ __forceinline__ Level level(uint32_t level, const LevelInfo& L) const {
        return Level{acc + size_t(L.offset) * F, exponents[level]};
    }
};

// Fixed point, one feature: thread f of a row adds feature f (see grid_param_grad_lanes_kernel).
struct FixedLaneSink {
    unsigned long long* base;  // the level's accumulator + the thread's feature
    uint32_t stride;           // F
    int k;
    __device__ __forceinline__ void add_fixed(uint32_t i, long long q) const {  // an integer already scaled
        if (q != 0) atomicAdd(base + size_t(i) * stride, static_cast<unsigned long long>(q));
    }
    template <uint32_t N> __device__ __forceinline__ void add(uint32_t i, float w, const float (&g)[N]) const {
        add_fixed(i, to_fixed_point(w * g[0], k));
    }
    template <uint32_t N>
    __device__ __forceinline__ void add_pair(uint32_t i0, float w0, uint32_t i1, float w1, const float (&g)[N]) const {
        add<N>(i0, w0, g);
        add<N>(i1, w1, g);
    }
};

// The lanes of the calling thread's warp whose rows exist, for the corner kernels and the bulk pairs (rows
// of kCorners consecutive lanes, row0 the block's first): the rows that exist come first, so the lanes are a prefix.
// An explicit mask, as the shuffles of add_lanes need (__activemask would not promise that the lanes of
// a pair are converged there).
template <uint32_t kCorners>
__device__ __forceinline__ unsigned row_lanes(int64_t row0, int64_t rows) {
    const int64_t left = rows - (row0 + int64_t(threadIdx.x & ~31u) / kCorners);
    const int64_t n = left * kCorners;
    return n >= 32 ? 0xFFFFFFFFu : n <= 0 ? 0u : (1u << n) - 1u;
}

// sm_90's bulk reductions (cp.reduce.async.bulk): `BulkRing` of a thread sends 32 contiguous bytes of
// 64-bit integers from its ring of shared slots to global memory as one operation of the TMA unit,
// where integer reductions from lanes have no vector form. The L2 takes one such operation at about the
// cost of a request merged from two lanes (75 G/s against 104 G/s for a single reduction; bench/
// bulk_reduce_probe.cu, runs 104-105 of 2026-12-02). A slot is reused only once the operation that
// read it last has read it (wait_group.read: at most kBulkRing - 1 pending); finish() waits for every
// operation to complete before the thread exits. Elsewhere (other architectures, the host pass) the
// four values go as integer atomics: the same sums.
#if defined(TNN_WITH_CUDA)
constexpr bool kBulkPairsBuilt = true;  // grid_param_grad_lanes_levels_kernel's BULK form exists
constexpr uint32_t kBulkRing = 4;
struct BulkRing {
    uint32_t slots;  // shared address of the thread's kBulkRing slots of 32 bytes
    uint32_t count;  // operations issued
    __device__ __forceinline__ void add4(unsigned long long* dst, long long a, long long b, long long c,
                                         long long d) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
        if (count >= kBulkRing) asm volatile("cp.async.bulk.wait_group.read %0;" ::"n"(kBulkRing - 1) : "memory");
        const uint32_t s = slots + (count % kBulkRing) * 32u;
        asm volatile("st.shared.v2.u64 [%0], {%1, %2};" ::"r"(s), "l"(a), "l"(b) : "memory");
        asm volatile("st.shared.v2.u64 [%0], {%1, %2};" ::"r"(s + 16u), "l"(c), "l"(d) : "memory");
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
        asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.u64 [%0], [%1], 32;" ::"l"(
                         __cvta_generic_to_global(dst)),
                     "r"(s)
                     : "memory");
        asm volatile("cp.async.bulk.commit_group;" ::: "memory");
        ++count;
#else  // (same integers, one atomic each)
        const long long v[4] = {a, b, c, d};
        for (int i = 0; i < 4; ++i)
            if (v[i] != 0) atomicAdd(dst + i, static_cast<unsigned long long>(v[i]));
#endif  // __CUDA_ARCH__ >= 900
    }
    __device__ __forceinline__ void finish() const {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
        if (count != 0) asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
#endif  // __CUDA_ARCH__ >= 900
    }
};

// Fixed point, F = 2, first order, a thread per (row, feature) as FixedLaneSink (Variant::det_bulk): an
// x-pair whose entries are adjacent (CoherentPrime levels whenever the cell's x is even, dense levels
// always) fills 32 contiguous bytes, both entries' two words, and leaves as one bulk reduction from the
// lane of feature 0 (its neighbour lane's two values by shuffle) instead of two requests merged from two
// lanes each; other pairs as FixedLaneSink. The integers are the same, so the sums and bits are.
// `lanes`: the warp's lanes whose rows exist (row_lanes), all of which call add_pair together.
struct FixedBulkPairSink {
    FixedLaneSink lane;  // the level's words of the thread's feature: pairs that are not adjacent, one corner
    unsigned long long* level;  // the level's accumulator: entry i's words at level + 2 i
    uint32_t f;                 // the thread's feature
    unsigned lanes;
    BulkRing* ring;  // feature 0's lanes issue
    template <uint32_t N> __device__ __forceinline__ void add(uint32_t i, float w, const float (&g)[N]) const {
        lane.add<N>(i, w, g);
    }
    template <uint32_t N>
    __device__ __forceinline__ void add_pair(uint32_t i0, float w0, uint32_t i1, float w1, const float (&g)[N]) const {
        const long long q0 = to_fixed_point(w0 * g[0], lane.k), q1 = to_fixed_point(w1 * g[0], lane.k);
        const long long o0 = __shfl_xor_sync(lanes, q0, 1), o1 = __shfl_xor_sync(lanes, q1, 1);
        if (i1 != i0 + 1u && i0 != i1 + 1u) {
            lane.add_fixed(i0, q0);
            lane.add_fixed(i1, q1);
            return;
        }
        if (f != 0 || (q0 | o0 | q1 | o1) == 0) return;  // nothing to add: the lanes skip zeros too
        if (i0 < i1) ring->add4(level + 2 * size_t(i0), q0, o0, q1, o1);
        else ring->add4(level + 2 * size_t(i1), q1, o1, q0, o0);
    }
};

// The calling thread's ring of slots among a block's ROWS rings (one per row: its lane of feature 0 issues).
template <uint32_t ROWS> __device__ __forceinline__ BulkRing bulk_ring(uint32_t slot_row) {
    __shared__ alignas(16) unsigned long long slots[ROWS * kBulkRing * 4];
    return BulkRing{static_cast<uint32_t>(__cvta_generic_to_shared(slots + slot_row * kBulkRing * 4)), 0};
}
#else
constexpr bool kBulkPairsBuilt = false;
#endif  // TNN_WITH_CUDA

// The largest per-row sum of |contribution| of a block (all of one level), for the fixed-point scale.
// max_f |g_f|, or NaN when a g_f is NaN (fmaxf drops NaN, and a NaN gradient must still be seen).
template <uint32_t F> __device__ __forceinline__ float max_abs_keep_nan(const float (&g)[F]) {
    float m = 0.0f;
    TNN_UNROLL
    for (uint32_t f = 0; f < F; ++f) m = fmaxf(m, fabsf(g[f]));
    TNN_UNROLL
    for (uint32_t f = 0; f < F; ++f)
        if (g[f] != g[f]) m = g[f];
    return m;
}

struct BoundSink {
    struct Level {
        float* sum;
        template <uint32_t F> __device__ __forceinline__ void add(uint32_t, float w, const float (&g)[F]) const {
            *sum += fabsf(w) * max_abs_keep_nan<F>(g);
        }
        template <uint32_t F>
        __device__ __forceinline__ void add_pair(uint32_t, float w0, uint32_t, float w1, const float (&g)[F]) const {
            add<F>(0, w0, g);
            add<F>(0, w1, g);
        }
    };
};

// Accumulation into shared memory, features [f0, f0 + fs) of the level: slot i * fs + f - f0.
template <typename ACC> struct SharedSink {
    ACC* slots;
    uint32_t f0, fs;
    int k;  // fixed point (ACC = unsigned long long)

    template <uint32_t F> __device__ __forceinline__ void add(uint32_t i, float w, const float (&g)[F]) const {
        TNN_UNROLL
        for (uint32_t f = 0; f < F; ++f) {
            if (f < f0 || f >= f0 + fs) continue;
            ACC* slot = slots + size_t(i) * fs + (f - f0);
            if constexpr (sizeof(ACC) == 4) {
                atomicAdd(slot, w * g[f]);
            } else {
                const long long q = to_fixed_point(w * g[f], k);
                if (q != 0) atomicAdd(slot, static_cast<unsigned long long>(q));
            }
        }
    }
    template <uint32_t F>
    __device__ __forceinline__ void add_pair(uint32_t i0, float w0, uint32_t i1, float w1, const float (&g)[F]) const {
        add<F>(i0, w0, g);
        add<F>(i1, w1, g);
    }
};

// The deterministic gradient's shared-memory slots as three native 32-bit integer words per value
// (grid_param_grad_shared_words_kernel), where a 64-bit shared atomic is a compare-and-swap loop on NVIDIA
// GPUs (ATOMS.CAST.SPIN.64 in the SASS, run 77). A contribution's fixed-point value q (the level's
// exponent, as for the 64-bit slots) is added as its bits [0, 16) and [16, 32), unsigned, to `low` and
// `mid`, and its bits [32, 64) to `high`. With at most kWordsMaxAdds contributions per slot (the plan caps
// a block's rows) the low and mid sums stay below 2^32, exact; the high sum may wrap, which moves it by a
// multiple of 2^32 and so 2^32 * high by a multiple of 2^64: 2^32 * high + 2^16 * mid + low is the sum of
// the q modulo 2^64, the value a 64-bit slot would hold, and the global accumulator gets the same integers.
// (kWordsMaxAdds: grid_plan.h.)
struct WordsSink {
    uint32_t* low;  // then mid and high, n_slots words each
    uint32_t n_slots, f0, fs;
    int k;

    template <uint32_t F> __device__ __forceinline__ void add(uint32_t i, float w, const float (&g)[F]) const {
        TNN_UNROLL
        for (uint32_t f = 0; f < F; ++f) {
            if (f < f0 || f >= f0 + fs) continue;
            const unsigned long long q = static_cast<unsigned long long>(to_fixed_point(w * g[f], k));
            const size_t slot = size_t(i) * fs + (f - f0);
            const uint32_t lo = static_cast<uint32_t>(q) & 0xFFFFu, mid = static_cast<uint32_t>(q) >> 16;
            const uint32_t hi = static_cast<uint32_t>(q >> 32);
            if (lo != 0) atomicAdd(low + slot, lo);
            if (mid != 0) atomicAdd(low + n_slots + slot, mid);
            if (hi != 0) atomicAdd(low + 2 * size_t(n_slots) + slot, hi);
        }
    }
    template <uint32_t F>
    __device__ __forceinline__ void add_pair(uint32_t i0, float w0, uint32_t i1, float w1, const float (&g)[F]) const {
        add<F>(i0, w0, g);
        add<F>(i1, w1, g);
    }
};

// Shared-memory slots in split fixed point (grid_param_grad_shared_split_kernel): a contribution c becomes
// q = c * 2^k rounded to nearest, added as its low `lo_bits` bits (unsigned) to lo[slot] and the rest
// (q >> lo_bits, signed) to hi[slot]. Both are 32-bit integer atomics, which shared memory does
// natively, where a float atomic is a compare-and-swap loop (ATOMS.CAST.SPIN in the SASS of the float
// sink, run 77). The kernel picks k and lo_bits so that neither sum can overflow, so the slot's value
// hi * 2^lo_bits + lo is the exact sum of the q.
struct SplitSink {
    uint32_t* lo;
    int* hi;
    uint32_t f0, fs;
    int k;
    uint32_t lo_bits;

    template <uint32_t F> __device__ __forceinline__ void add(uint32_t i, float w, const float (&g)[F]) const {
        TNN_UNROLL
        for (uint32_t f = 0; f < F; ++f) {
            if (f < f0 || f >= f0 + fs) continue;
            const long long q = to_fixed_point(w * g[f], k);
            const size_t slot = size_t(i) * fs + (f - f0);
            const uint32_t low = static_cast<uint32_t>(q) & ((1u << lo_bits) - 1u);
            const int high = static_cast<int>(q >> lo_bits);
            if (low != 0) atomicAdd(lo + slot, low);
            if (high != 0) atomicAdd(hi + slot, high);
        }
    }
    template <uint32_t F>
    __device__ __forceinline__ void add_pair(uint32_t i0, float w0, uint32_t i1, float w1, const float (&g)[F]) const {
        add<F>(i0, w0, g);
        add<F>(i1, w1, g);
    }
};

// Sends one row's contributions at one level to `sink`. x, v: the row's input and (SECOND) its
// dL'/d(dL/dx); g: its dL/dy at the level.
template <uint32_t D, uint32_t F, bool SECOND, typename SINK>
__device__ __forceinline__ void row_contributions(const KernelArgs& a, const LevelInfo& L, uint32_t level, int64_t row,
                                                  int64_t rows, const float* __restrict__ x,
                                                  const float* __restrict__ v, const float (&g)[F], const SINK& sink) {
    const auto interp = static_cast<Interpolation>(a.interpolation);
    if constexpr (SECOND) {
        if (interp == Interpolation::Nearest) return;  // the weights are constant in x
        grid::AxisWeight<float> axis[D];
        float vd[D];
        uint32_t cell[D];
        TNN_UNROLL
        for (uint32_t d = 0; d < D; ++d) {
            axis[d] = grid::axis_weight<float>(x[d], L.scale, interp);
            cell[d] = axis[d].cell;
            vd[d] = v[d];
        }
        const CornerTerms<D> t = corner_terms<D>(L, cell, a.factors);
        // Not unrolled: with the corner a compile-time constant the compiler folds its weight's factors
        // differently (last-bit differences, measured on the H200 for D = 3), and the deterministic
        // gradient must give the same bits whichever kernel enumerates the corners (the per-corner
        // kernels see a run-time corner).
#pragma unroll 1
        for (uint32_t c = 0; c < (1u << D); ++c) {
            float grad[D];
            grid::corner_weight_gradient(D, axis, c, grad);
            float E = 0.0f;
            TNN_UNROLL
            for (uint32_t d = 0; d < D; ++d) E += vd[d] * grad[d];
            sink.template add<F>(corner_entry<D>(a, L, t, cell, c), E, g);
        }
    } else {
        const Located<D> p = locate<D>(x, L.scale, interp);
        const CornerTerms<D> t = corner_terms<D>(L, p.cell, a.factors);
        if (interp == Interpolation::Nearest) {
            sink.template add<F>(corner_entry<D>(a, L, t, p.cell, 0), 1.0f, g);
        } else if (a.stochastic) {
            // tcnn: one corner per element and level, upper along d when the sample < w_d.
            const float s = grid::stochastic_sample(static_cast<uint32_t>(row + int64_t(level) * rows));
            uint32_t corner = 0;
            TNN_UNROLL
            for (uint32_t d = 0; d < D; ++d)
                if (!(s >= p.w[d])) corner |= 1u << d;
            sink.template add<F>(corner_entry<D>(a, L, t, p.cell, corner), 1.0f, g);
        } else {
            constexpr uint32_t kPairs = 1u << (D - 1);
#pragma unroll(kUnroll<kPairs>)
            for (uint32_t pair = 0; pair < kPairs; ++pair) {
                const uint32_t c0 = pair << 1, c1 = c0 | 1u;
                sink.template add_pair<F>(corner_entry<D>(a, L, t, p.cell, c0), corner_weight<D>(p.w, c0),
                                          corner_entry<D>(a, L, t, p.cell, c1), corner_weight<D>(p.w, c1), g);
            }
        }
    }
}

template <typename T, uint32_t F>
__device__ __forceinline__ void load_gradient(const T* __restrict__ g, int64_t row, int64_t stride, uint32_t level,
                                              float (&out)[F]) {
    TNN_UNROLL
    for (uint32_t f = 0; f < F; ++f) out[f] = to_acc(g[row * stride + size_t(level) * F + f]);
}
// A (row, level)'s F values of dL/dy at p: one load when `vec` (aligned, GradLayout::vec), else one per value;
// `hint`: a 4-byte load marked evict-first in L2 (load_streaming_word).
template <typename T, uint32_t F>
__device__ __forceinline__ void load_gradient_values(const T* __restrict__ p, bool vec, float (&out)[F],
                                                     bool hint = false) {
    if constexpr (sizeof(gpu::Packed<T, F>) == 4 && F > 1) {
        if (vec && hint) {
            const uint32_t word = load_streaming_word(p, true);
            gpu::Packed<T, F> packed;
            memcpy(&packed, &word, 4);
            TNN_UNROLL
            for (uint32_t f = 0; f < F; ++f) out[f] = to_acc(packed.v[f]);
            return;
        }
    }
    if (F > 1 && vec) {
        const gpu::Packed<T, F> w = *reinterpret_cast<const gpu::Packed<T, F>*>(p);  // one load, not F
        TNN_UNROLL
        for (uint32_t f = 0; f < F; ++f) out[f] = to_acc(w.v[f]);
        return;
    }
    TNN_UNROLL
    for (uint32_t f = 0; f < F; ++f) out[f] = to_acc(p[f]);
}
template <typename T, uint32_t F>
__device__ __forceinline__ void load_gradient(const T* __restrict__ g, const GradLayout& layout, int64_t row,
                                              uint32_t level, float (&out)[F]) {
    load_gradient_values<T, F>(g + layout.at(row, level), layout.vec, out);
}

// Rows [0, n_rows) of per_row units U (row r at src + r * stride units) into shared memory as units S
// (U whole S units), row r at staged + r * pitch: pitch = per_row * sizeof(U) / sizeof(S) + 1 keeps a
// thread-per-row read of one unit in consecutive rows in different banks. The block's threads take
// consecutive units: each row's loads are contiguous across lanes. The caller synchronises after.
template <typename U, typename S>
__device__ __forceinline__ void stage_rows(const U* __restrict__ src, int64_t stride, uint32_t n_rows, uint32_t per_row,
                                           S* staged, uint32_t pitch) {
    static_assert(sizeof(U) % sizeof(S) == 0, "stage_rows: whole units");
    constexpr uint32_t kParts = sizeof(U) / sizeof(S);
    for (uint32_t i = threadIdx.x; i < n_rows * per_row; i += kThreads) {
        const uint32_t r = i / per_row, e = i - r * per_row;
        const U u = src[r * stride + e];
        S parts[kParts];
        memcpy(parts, &u, sizeof(U));
        TNN_UNROLL
        for (uint32_t p = 0; p < kParts; ++p) staged[r * pitch + e * kParts + p] = parts[p];
    }
}

// dL/dy of levels [level0, level0 + n_levels) from the caller's rows to level-major order, as words W
// (2, 4, 8 or 16 bytes; k words per (row, level), all of a level's F values): word j of (row, level)
// goes to out[(level * rows + row) * k + j]; the caller's row r starts at g + r * g_stride (in words).
// A block stages kLevelMajorRows rows in shared memory: it reads them row by row (each row's words of
// those levels contiguous) and writes them level by level (each level's kLevelMajorRows * k words
// contiguous). The staged rows are one word longer than their data, so that the writes' reads of
// one level in consecutive rows fall in different banks. Shared memory: kLevelMajorRows *
// (n_levels * k + 1) words (the launcher splits the levels into groups that fit kSharedBytes).
constexpr uint32_t kLevelMajorRows = 64;
template <typename W>
__global__ void __launch_bounds__(kThreads)
    grid_level_major_kernel(int64_t rows, uint32_t level0, uint32_t n_levels, uint32_t k, const W* __restrict__ g,
                            int64_t g_stride, W* __restrict__ out) {
    extern __shared__ unsigned char level_major_bytes[];
    W* staged = reinterpret_cast<W*>(level_major_bytes);
    const int64_t row0 = int64_t(blockIdx.x) * kLevelMajorRows;
    const uint32_t n_rows = static_cast<uint32_t>(rows - row0 < kLevelMajorRows ? rows - row0 : kLevelMajorRows);
    const uint32_t per_row = n_levels * k, pitch = per_row + 1;
    stage_rows(g + row0 * g_stride + size_t(level0) * k, g_stride, n_rows, per_row, staged, pitch);
    __syncthreads();
    const uint32_t per_level = n_rows * k;
    for (uint32_t i = threadIdx.x; i < n_levels * per_level; i += kThreads) {
        const uint32_t l = i / per_level, e = i - l * per_level;
        out[(int64_t(level0 + l) * rows + row0) * k + e] = staged[(e / k) * pitch + l * k + e % k];
    }
}

// Global-atomic reduction, one thread per row of level list.ids[blockIdx.x / blocks_per_level].
// SINK: FloatSink or FixedSink.
template <typename T, uint32_t D, uint32_t F, bool SECOND, typename SINK>
__global__ void __launch_bounds__(kThreads)
    grid_param_grad_kernel(const KernelArgs a, const LevelList list, uint32_t blocks_per_level, int64_t rows,
                           const float* __restrict__ x, int64_t x_stride, const float* __restrict__ v,
                           int64_t v_stride, const T* __restrict__ g, GradLayout g_layout, const SINK sink) {
    const uint32_t level = list.ids[blockIdx.x / blocks_per_level];
    const int64_t row = int64_t(blockIdx.x % blocks_per_level) * kThreads + threadIdx.x;
    if (row >= rows) return;
    const LevelInfo& L = a.levels[level];
    const auto s = sink.template level<F>(level, L);
    if (s.skip()) return;
    float gv[F];
    load_gradient<T, F>(g, g_layout, row, level, gv);
    row_contributions<D, F, SECOND>(a, L, level, row, rows, x + row * x_stride, SECOND ? v + row * v_stride : nullptr,
                                    gv, s);
}

// The deterministic global reduction with F threads per (row, level): thread f of a row adds feature
// f, so the F integer reductions of a corner come from consecutive lanes of one instruction and reach
// L2 as one sector request instead of F (integer reductions have no vector form). Blocks hold
// kThreads / F rows, level-major like grid_param_grad_kernel.
template <typename T, uint32_t D, uint32_t F, bool SECOND>
__global__ void __launch_bounds__(kThreads)
    grid_param_grad_lanes_kernel(const KernelArgs a, const LevelList list, uint32_t blocks_per_level, int64_t rows,
                                 const float* __restrict__ x, int64_t x_stride, const float* __restrict__ v,
                                 int64_t v_stride, const T* __restrict__ g, GradLayout g_layout,
                                 unsigned long long* __restrict__ acc, const int* __restrict__ exponents) {
    constexpr uint32_t kRowsPerBlock = kThreads / F;
    const uint32_t level = list.ids[blockIdx.x / blocks_per_level];
    const int64_t row = int64_t(blockIdx.x % blocks_per_level) * kRowsPerBlock + threadIdx.x / F;
    const uint32_t f = threadIdx.x % F;
    if (row >= rows) return;
    const int k = exponents[level];
    if (k == kNonFiniteExponent) return;  // the conversion writes NaN for the level
    const LevelInfo& L = a.levels[level];
    const float gv[1] = {to_acc(g[g_layout.at(row, level) + f])};
    const FixedLaneSink sink{acc + size_t(L.offset) * F + f, F, k};
    row_contributions<D, 1, SECOND>(a, L, level, row, rows, x + row * x_stride, SECOND ? v + row * v_stride : nullptr,
                                    gv, sink);
}

// The same over several levels: a thread per (row, feature) adds its feature's contributions at every
// level of `list` (a group of levels whose accumulators stay in L2 together), reading the row's x (and
// v) once for all of them; blocks hold kThreads / F rows. BULK (F = 2, first order; acc 16-byte
// aligned): x-pairs of adjacent entries as bulk reductions (FixedBulkPairSink), kBulkRing slots of 32
// bytes per row in shared memory.
template <typename T, uint32_t D, uint32_t F, bool SECOND, bool BULK = false>
__global__ void __launch_bounds__(kThreads)
    grid_param_grad_lanes_levels_kernel(const KernelArgs a, const LevelList list, int64_t rows,
                                        const float* __restrict__ x, int64_t x_stride, const float* __restrict__ v,
                                        int64_t v_stride, const T* __restrict__ g, GradLayout g_layout,
                                        unsigned long long* __restrict__ acc, const int* __restrict__ exponents) {
    constexpr uint32_t kRowsPerBlock = kThreads / F;
    const int64_t row0 = int64_t(blockIdx.x) * kRowsPerBlock, row = row0 + threadIdx.x / F;
    const uint32_t f = threadIdx.x % F;
    if (row >= rows) return;
#if defined(TNN_WITH_CUDA)
    static_assert(!BULK || (F == 2 && !SECOND), "bulk pairs: F = 2, first order");
    BulkRing ring{0, 0};
    unsigned lanes = 0;
    if constexpr (BULK) ring = bulk_ring<kRowsPerBlock>(threadIdx.x / F), lanes = row_lanes<F>(row0, rows);
#else
    static_assert(!BULK, "bulk reductions: NVIDIA sm_90");
#endif  // TNN_WITH_CUDA
    float xr[D], vr[D];
    TNN_UNROLL
    for (uint32_t d = 0; d < D; ++d) {
        xr[d] = x[row * x_stride + d];
        vr[d] = SECOND ? v[row * v_stride + d] : 0.0f;
    }
    for (uint32_t i = 0; i < list.count; ++i) {
        const uint32_t level = list.ids[i];
        const int k = exponents[level];
        if (k == kNonFiniteExponent) continue;  // the conversion writes NaN for the level
        const LevelInfo& L = a.levels[level];
        const float gv[1] = {to_acc(g[g_layout.at(row, level) + f])};
        const FixedLaneSink lane{acc + size_t(L.offset) * F + f, F, k};
#if defined(TNN_WITH_CUDA)
        if constexpr (BULK) {
            const FixedBulkPairSink sink{lane, acc + size_t(L.offset) * F, f, lanes, &ring};
            row_contributions<D, 1, SECOND>(a, L, level, row, rows, xr, vr, gv, sink);
            continue;
        }
#endif  // TNN_WITH_CUDA
        row_contributions<D, 1, SECOND>(a, L, level, row, rows, xr, vr, gv, lane);
    }
#if defined(TNN_WITH_CUDA)
    if constexpr (BULK) ring.finish();
#endif  // TNN_WITH_CUDA
}

// Corner `corner` of a row at a level: its entry and weight (as row_contributions computes them);
// false when the corner receives nothing (Nearest and stochastic interpolation feed one corner).
// `factors`: a.factors, or the caller's copy in registers (the corner kernels over groups of levels read
// them once: indexed constant loads under the level's mode cost branches per level).
template <uint32_t D, bool SECOND>
__device__ __forceinline__ bool corner_contribution(const KernelArgs& a, const LevelInfo& L, uint32_t level,
                                                   int64_t row, int64_t rows, const float* __restrict__ x,
                                                   const float* __restrict__ v, uint32_t corner, uint32_t& entry,
                                                   float& weight, const uint32_t* factors) {
    const auto interp = static_cast<Interpolation>(a.interpolation);
    if constexpr (SECOND) {
        if (interp == Interpolation::Nearest) return false;
        grid::AxisWeight<float> axis[D];
        uint32_t cell[D];
        TNN_UNROLL
        for (uint32_t d = 0; d < D; ++d) {
            axis[d] = grid::axis_weight<float>(x[d], L.scale, interp);
            cell[d] = axis[d].cell;
        }
        float grad[D];
        grid::corner_weight_gradient(D, axis, corner, grad);
        weight = 0.0f;
        TNN_UNROLL
        for (uint32_t d = 0; d < D; ++d) weight += v[d] * grad[d];
        entry = corner_entry<D>(a, L, corner_terms<D>(L, cell, factors), cell, corner);
        return true;
    } else {
        const Located<D> p = locate<D>(x, L.scale, interp);
        if (interp == Interpolation::Nearest) {
            if (corner != 0) return false;
            weight = 1.0f;
        } else if (a.stochastic) {
            const float s = grid::stochastic_sample(static_cast<uint32_t>(row + int64_t(level) * rows));
            uint32_t chosen = 0;
            TNN_UNROLL
            for (uint32_t d = 0; d < D; ++d)
                if (!(s >= p.w[d])) chosen |= 1u << d;
            if (corner != chosen) return false;
            weight = 1.0f;
        } else {
            weight = corner_weight<D>(p.w, corner);
        }
        entry = corner_entry<D>(a, L, corner_terms<D>(L, p.cell, factors), p.cell, corner);
        return true;
    }
}

// A corner kernel's reduction: FloatSink::Level::add_lanes where the level's slots allow it and every
// corner of the row receives a contribution (first-order Linear / Smoothstep: the lanes of a warp reach
// it together), else a reduction of the lane's own entry. sm_90 only: elsewhere a slot's reduction is
// one atomic per value, and the zeros would cost atomics of their own.
template <uint32_t D, uint32_t F, bool SECOND>
__device__ __forceinline__ void add_corner(const KernelArgs& a, const FloatSink::Level& lvl, unsigned lanes,
                                           uint32_t corner, uint32_t entry, float w, const float (&g)[F]) {
#if defined(TNN_WITH_CUDA) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    if constexpr (F <= 2 && !SECOND) {
        if (lvl.slots && static_cast<Interpolation>(a.interpolation) != Interpolation::Nearest && !a.stochastic) {
            lvl.template add_lanes<F>(lanes, corner, entry, w, g);
            return;
        }
    }
#else
    (void)a, (void)lanes, (void)corner;
#endif  // TNN_WITH_CUDA && __CUDA_ARCH__ >= 900
    lvl.template add<F>(entry, w, g);
}

// Global-atomic reduction with a thread per (row, level, corner), corners of a row on consecutive
// lanes: the x-neighbours' reductions leave one warp instruction together and reach L2 as one request
// whenever they fall in one 32-byte sector (3 times in 4 for F = 2 with CoherentPrime or dense
// indexing), more often than the 16-byte slots of FloatSink::add_pair (1 in 2).
template <typename T, uint32_t D, uint32_t F, bool SECOND>
__global__ void __launch_bounds__(kThreads)
    grid_param_grad_corner_kernel(const KernelArgs a, const LevelList list, uint32_t blocks_per_level, int64_t rows,
                                  const float* __restrict__ x, int64_t x_stride, const float* __restrict__ v,
                                  int64_t v_stride, const T* __restrict__ g, GradLayout g_layout, const FloatSink sink) {
    constexpr uint32_t kCorners = 1u << D, kRowsPerBlock = kThreads / kCorners;
    const uint32_t level = list.ids[blockIdx.x / blocks_per_level];
    const int64_t row0 = int64_t(blockIdx.x % blocks_per_level) * kRowsPerBlock, row = row0 + threadIdx.x / kCorners;
    if (row >= rows) return;
    const LevelInfo& L = a.levels[level];
    const uint32_t corner = threadIdx.x % kCorners;
    uint32_t entry;
    float w;
    if (!corner_contribution<D, SECOND>(a, L, level, row, rows, x + row * x_stride,
                                        SECOND ? v + row * v_stride : nullptr, corner, entry, w, a.factors))
        return;
    float gv[F];
    load_gradient<T, F>(g, g_layout, row, level, gv);
    add_corner<D, F, SECOND>(a, sink.template level<F>(level, L), row_lanes<kCorners>(row0, rows), corner, entry, w,
                             gv);
}

// The same over several levels: a thread per (row, corner) adds its corner's contribution at every
// level of `list` (a group of levels whose accumulators stay in L2 together), reading the row's x (and
// v) once for all of them instead of once per level; blocks hold kThreads / 2^D rows.
template <typename T, uint32_t D, uint32_t F, bool SECOND>
__global__ void __launch_bounds__(kThreads)
    grid_param_grad_corner_levels_kernel(const KernelArgs a, const LevelList list, int64_t rows,
                                         const float* __restrict__ x, int64_t x_stride, const float* __restrict__ v,
                                         int64_t v_stride, const T* __restrict__ g, GradLayout g_layout,
                                         const FloatSink sink) {
    constexpr uint32_t kCorners = 1u << D, kRowsPerBlock = kThreads / kCorners;
    const int64_t row0 = int64_t(blockIdx.x) * kRowsPerBlock, row = row0 + threadIdx.x / kCorners;
    if (row >= rows) return;
    const unsigned lanes = row_lanes<kCorners>(row0, rows);
    const bool hint = sink.l2_hints != 0;
    float xr[D], vr[D];
    uint32_t factors[D];
    TNN_UNROLL
    for (uint32_t d = 0; d < D; ++d) {
        xr[d] = load_streaming(x + row * x_stride + d, hint);
        vr[d] = SECOND ? load_streaming(v + row * v_stride + d, hint) : 0.0f;
        factors[d] = a.factors[d];
    }
    const uint32_t corner = threadIdx.x % kCorners;
    const T* __restrict__ g_row = g + row * g_layout.row_stride;
    for (uint32_t i = 0; i < list.count; ++i) {
        const uint32_t level = list.ids[i];
        const LevelInfo& L = a.levels[level];
        uint32_t entry;
        float w;
        if (!corner_contribution<D, SECOND>(a, L, level, row, rows, xr, vr, corner, entry, w, factors)) continue;
        float gv[F];
        load_gradient_values<T, F>(g_row + size_t(level) * g_layout.level_stride, g_layout.vec, gv, hint);
        add_corner<D, F, SECOND>(a, sink.template level<F>(level, L), lanes, corner, entry, w, gv);
    }
}

// The deterministic reduction with a thread per (row, level, corner, feature), features fastest: an
// entry's F words and its x-neighbour's, when they share a 32-byte sector, leave as one request.
template <typename T, uint32_t D, uint32_t F, bool SECOND>
__global__ void __launch_bounds__(kThreads)
    grid_param_grad_corner_fixed_kernel(const KernelArgs a, const LevelList list, uint32_t blocks_per_level,
                                        int64_t rows, const float* __restrict__ x, int64_t x_stride,
                                        const float* __restrict__ v, int64_t v_stride, const T* __restrict__ g,
                                        GradLayout g_layout, unsigned long long* __restrict__ acc,
                                        const int* __restrict__ exponents) {
    constexpr uint32_t kLanes = (1u << D) * F, kRowsPerBlock = kThreads / kLanes;
    static_assert(kRowsPerBlock >= 1, "a (row, level) must fit one block");
    const uint32_t level = list.ids[blockIdx.x / blocks_per_level];
    const int64_t row = int64_t(blockIdx.x % blocks_per_level) * kRowsPerBlock + threadIdx.x / kLanes;
    if (row >= rows) return;
    const int k = exponents[level];
    if (k == kNonFiniteExponent) return;  // the conversion writes NaN for the level
    const uint32_t lane = threadIdx.x % kLanes, corner = lane / F, f = lane % F;
    const LevelInfo& L = a.levels[level];
    uint32_t entry;
    float w;
    if (!corner_contribution<D, SECOND>(a, L, level, row, rows, x + row * x_stride,
                                        SECOND ? v + row * v_stride : nullptr, corner, entry, w, a.factors))
        return;
    const long long q = to_fixed_point(w * to_acc(g[g_layout.at(row, level) + f]), k);
    if (q != 0) atomicAdd(acc + (size_t(L.offset) + entry) * F + f, static_cast<unsigned long long>(q));
}

// The block's rows [begin, end) of a shared-memory item send their first-order contributions at `level`
// to `sink` (threads stride over the rows).
template <typename T, uint32_t D, uint32_t F, typename SINK>
__device__ __forceinline__ void shared_item_rows(const KernelArgs& a, const LevelInfo& L, uint32_t level,
                                                 int64_t begin, int64_t end, int64_t rows, const float* __restrict__ x,
                                                 int64_t x_stride, const T* __restrict__ g, const GradLayout& g_layout,
                                                 const SINK& sink) {
    for (int64_t row = begin + threadIdx.x; row < end; row += kThreads) {
        float gv[F];
        load_gradient<T, F>(g, g_layout, row, level, gv);
        row_contributions<D, F, false>(a, L, level, row, rows, x + row * x_stride, nullptr, gv, sink);
    }
}

// The slots of a shared-memory item, as the policy of shared_item_block: OneWordSlots<ACC> keeps one
// ACC per value (float: the fast gradient; unsigned long long: the deterministic gradient's 64-bit
// fixed point), ThreeWordSlots WordsSink's three 32-bit words per value (bits [0, 16), [16, 32) and
// [32, 64) of the fixed-point value; NVIDIA builds only). total() is the value a slot adds to the
// level's accumulator: for the words 2^32 * high + 2^16 * mid + low, the 64-bit slot's integer.
template <typename ACC> struct OneWordSlots {
    using Acc = ACC;
    using Word = ACC;
    static constexpr uint32_t kWordsPerValue = 1;
    __device__ static SharedSink<ACC> sink(Word* words, uint32_t, uint32_t f0, uint32_t fs, int k) {
        return SharedSink<ACC>{words, f0, fs, k};
    }
    __device__ static Acc total(const Word* words, uint32_t, uint32_t i) { return words[i]; }
};
#if defined(TNN_WITH_CUDA)
struct ThreeWordSlots {
    using Acc = unsigned long long;
    using Word = uint32_t;
    static constexpr uint32_t kWordsPerValue = 3;
    __device__ static WordsSink sink(Word* words, uint32_t n_slots, uint32_t f0, uint32_t fs, int k) {
        return WordsSink{words, n_slots, f0, fs, k};
    }
    __device__ static Acc total(const Word* words, uint32_t n_slots, uint32_t i) {
        return (static_cast<unsigned long long>(words[2 * n_slots + i]) << 32) +
               (static_cast<unsigned long long>(words[n_slots + i]) << 16) + words[i];
    }
};
#endif  // TNN_WITH_CUDA

// Adds the nonzero slot totals of a shared-memory item (features [f0, f0 + fs) of each entry) to its
// level's accumulator `out`: consecutive threads, consecutive addresses.
template <uint32_t F, typename SLOTS>
__device__ __forceinline__ void flush_slot_totals(const typename SLOTS::Word* words, uint32_t n_slots, uint32_t f0,
                                                  uint32_t fs, typename SLOTS::Acc* __restrict__ out) {
    for (uint32_t i = threadIdx.x; i < n_slots; i += kThreads) {
        const typename SLOTS::Acc value = SLOTS::total(words, n_slots, i);
        if (value != typename SLOTS::Acc(0)) atomicAdd(out + size_t(i / fs) * F + f0 + i % fs, value);
    }
}

// Shared-memory reduction of small levels, one block's work: block b reduces item
// items[b / blocks_per_item] over rows [(b % blocks_per_item) * rows_per_block, +rows_per_block) into
// SLOTS in `shared` (dynamic shared memory, zeroed here), then adds the nonzero slot totals to the global
// accumulator (consecutive threads, consecutive addresses). Fixed point (64-bit Acc): the level's
// exponent; a level with a non-finite exponent is left to the conversion, which writes NaN for it.
template <typename T, uint32_t D, uint32_t F, typename SLOTS>
__device__ __forceinline__ void shared_item_block(const KernelArgs& a, const SharedItems& items,
                                                  uint32_t blocks_per_item, int64_t rows_per_block, int64_t rows,
                                                  const float* __restrict__ x, int64_t x_stride,
                                                  const T* __restrict__ g, const GradLayout& g_layout,
                                                  typename SLOTS::Acc* __restrict__ acc,
                                                  const int* __restrict__ exponents, unsigned char* shared) {
    using Acc = typename SLOTS::Acc;
    using Word = typename SLOTS::Word;
    Word* words = reinterpret_cast<Word*>(shared);
    const SharedItems::Item item = items.items[blockIdx.x / blocks_per_item];
    const uint32_t level = item.level, f0 = item.f0, fs = item.fs;
    const LevelInfo& L = a.levels[level];
    int k = 0;
    if constexpr (sizeof(Acc) == 8) {
        k = exponents[level];
        if (k == kNonFiniteExponent) return;
    }
    const uint32_t n_slots = L.size * fs;
    for (uint32_t i = threadIdx.x; i < SLOTS::kWordsPerValue * n_slots; i += kThreads) words[i] = Word(0);
    __syncthreads();
    const int64_t begin = int64_t(blockIdx.x % blocks_per_item) * rows_per_block;
    const int64_t end = begin + rows_per_block < rows ? begin + rows_per_block : rows;
    shared_item_rows<T, D, F>(a, L, level, begin, end, rows, x, x_stride, g, g_layout,
                              SLOTS::sink(words, n_slots, f0, fs, k));
    __syncthreads();
    flush_slot_totals<F, SLOTS>(words, n_slots, f0, fs, acc + size_t(L.offset) * F);
}

// shared_item_block with one ACC per slot: float (the fast gradient) or 64-bit fixed point (the
// deterministic one).
template <typename T, uint32_t D, uint32_t F, typename ACC>
__global__ void __launch_bounds__(kThreads)
    grid_param_grad_shared_kernel(const KernelArgs a, const SharedItems items, uint32_t blocks_per_item,
                                  int64_t rows_per_block, int64_t rows, const float* __restrict__ x, int64_t x_stride,
                                  const T* __restrict__ g, GradLayout g_layout, ACC* __restrict__ acc,
                                  const int* __restrict__ exponents) {
    extern __shared__ unsigned char shared_bytes[];
    shared_item_block<T, D, F, OneWordSlots<ACC>>(a, items, blocks_per_item, rows_per_block, rows, x, x_stride, g,
                                                  g_layout, acc, exponents, shared_bytes);
}

#if defined(TNN_WITH_CUDA)
// The deterministic gradient's shared_item_block with WordsSink's three words per slot
// (Variant::det_shared_words; 12 bytes per slot, rows_per_block * 2^D <= kWordsMaxAdds). The same
// arguments as grid_param_grad_shared_kernel<..., unsigned long long>, and the same integers reach
// `acc`. NVIDIA builds only: AMD GPUs add 64-bit integers in LDS natively.
template <typename T, uint32_t D, uint32_t F>
__global__ void __launch_bounds__(kThreads)
    grid_param_grad_shared_words_kernel(const KernelArgs a, const SharedItems items, uint32_t blocks_per_item,
                                        int64_t rows_per_block, int64_t rows, const float* __restrict__ x,
                                        int64_t x_stride, const T* __restrict__ g, GradLayout g_layout,
                                        unsigned long long* __restrict__ acc, const int* __restrict__ exponents) {
    extern __shared__ unsigned char shared_bytes[];
    shared_item_block<T, D, F, ThreeWordSlots>(a, items, blocks_per_item, rows_per_block, rows, x, x_stride, g,
                                               g_layout, acc, exponents, shared_bytes);
}
#endif  // TNN_WITH_CUDA

// A first-order row's sum of |contribution| at a level, bounded without enumerating its corners: the
// weights W_c of Linear / Smoothstep corners sum to prod_d (|w_d| + |1 - w_d|) (= 1 for weights in
// [0, 1]), so the sum is at most that product times max_f |g_f|; 2^-10 of headroom covers the
// rounding of the contributions' own products (D <= 7 roundings of 2^-24 each). Smoothstep evaluates the
// product from the row's weights, so a non-finite input still makes the level NaN. Nearest and
// stochastic interpolation feed one corner with weight 1. No entry, hash or corner loop: the bound
// pass costs about a read of x and dL/dy.
// Linear, without the weights: a weight w = pos - floor(pos) of a finite position lies in [0, 1], where
// w + fl(1 - w) rounds to exactly 1 (1 - w is exact for w >= 1/2; below, fl(1 - w) is within 2^-25 of
// 1 - w, and a sum within 2^-25 of 1 rounds to 1, the tie 1 - 2^-25 to even), so the product is 1.0f
// and the bound m (1 + 2^-10), the same bits as the product's form; a position that is not finite
// makes w, and so the bound, NaN in both forms.
template <uint32_t D, uint32_t F>
__device__ __forceinline__ float first_order_row_bound(const KernelArgs& a, const LevelInfo& L,
                                                       const float* __restrict__ x, const float (&g)[F]) {
    const float m = max_abs_keep_nan<F>(g);
    const auto interp = static_cast<Interpolation>(a.interpolation);
    if (interp == Interpolation::Nearest || a.stochastic) return m;
    if (interp == Interpolation::Linear) {
        bool finite = true;
        TNN_UNROLL
        for (uint32_t d = 0; d < D; ++d) finite = finite && isfinite(grid::axis_position(x[d], L.scale));
        return finite ? m * (1.0f + 1.0f / 1024.0f) : __int_as_float(0x7FFFFFFF);
    }
    const Located<D> p = locate<D>(x, L.scale, interp);
    float weights = 1.0f;
    TNN_UNROLL
    for (uint32_t d = 0; d < D; ++d) weights *= fabsf(p.w[d]) + fabsf(1.0f - p.w[d]);
    return m * weights * (1.0f + 1.0f / 1024.0f);
}

// The largest of v over the lanes of a warp (all lanes must take part): one warp reduction instruction
// (redux.sync) on NVIDIA sm_80 and later, where five shuffles and maxima were a third of the bound pass's
// instructions per level (the pass was instruction-bound, run 116); shuffles elsewhere.
// A lane's value from the lane whose index differs by the bits of `lanes` (all lanes take part).
__device__ __forceinline__ uint32_t shfl_xor_bits(uint32_t v, int lanes) {
#if defined(TNN_WITH_HIP)
    return static_cast<uint32_t>(__shfl_xor(v, lanes));
#else
    return __shfl_xor_sync(0xFFFFFFFFu, v, lanes);
#endif  // TNN_WITH_HIP
}
__device__ __forceinline__ uint32_t warp_max(uint32_t v) {
#if !defined(TNN_WITH_HIP) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    v = __reduce_max_sync(0xFFFFFFFFu, v);
#else
    for (int lanes = warpSize / 2; lanes > 0; lanes /= 2) v = max(v, shfl_xor_bits(v, lanes));
#endif
    return v;
}

// The fast gradient's shared-memory levels in split fixed point (Variant::shared_fixed): as
// grid_param_grad_shared_kernel, but the slots are SplitSink's integer pairs (8 bytes per slot). A first
// pass over the block's rows finds the largest sum of |contributions| one row sends to the level
// (first_order_row_bound); with n rows, n * bound * 2^k < 2^(29 + lo_bits), and lo_bits such that
// n * 2^D contributions of fewer than 2^lo_bits each fit 32 bits: then |sum of hi| < 2^30 + n * 2^D and
// the sum of lo < 2^32. The flush converts each slot's exact sum with one rounding (from_fixed_point) and
// adds it with a global float atomic. A block whose bound is not finite (NaN or inf in x or dL/dy)
// accumulates in float slots as grid_param_grad_shared_kernel does, so that non-finite values propagate
// the same way. The resolution n * bound * 2^-(29 + lo_bits) is absolute: about 2^-33 of the block's
// largest row sum for the main row's blocks, finer than the fp32 slots' rounding of any partial sum near
// that size, but a slot whose sum is tiny next to it keeps fewer significant bits than fp32 slots would.
// (A product w * g rounded up beside a subnormal g can exceed its row's bound, by at most 2x; the sums
// keep 2x of headroom in hi below 2^31 for that.) Dynamic shared memory: the slots (8 bytes each), then
// one 16-byte unit for the block's bound, which launchers count (kSplitSharedExtra).
template <typename T, uint32_t D, uint32_t F>
__global__ void __launch_bounds__(kThreads)
    grid_param_grad_shared_split_kernel(const KernelArgs a, const SharedItems items, uint32_t blocks_per_item,
                                        int64_t rows_per_block, int64_t rows, const float* __restrict__ x,
                                        int64_t x_stride, const T* __restrict__ g, GradLayout g_layout,
                                        float* __restrict__ acc) {
    extern __shared__ unsigned char shared_bytes[];
    const SharedItems::Item item = items.items[blockIdx.x / blocks_per_item];
    const uint32_t level = item.level, f0 = item.f0, fs = item.fs;
    const LevelInfo& L = a.levels[level];
    const uint32_t n_slots = L.size * fs;
    uint32_t* lo = reinterpret_cast<uint32_t*>(shared_bytes);
    int* hi = reinterpret_cast<int*>(lo + n_slots);
    unsigned int& block_bound_bits = *reinterpret_cast<unsigned int*>(shared_bytes + size_t(n_slots) * 8);
    for (uint32_t i = threadIdx.x; i < 2 * n_slots; i += kThreads) lo[i] = 0u;
    if (threadIdx.x == 0) block_bound_bits = 0u;
    __syncthreads();
    const int64_t begin = int64_t(blockIdx.x % blocks_per_item) * rows_per_block;
    const int64_t end = begin + rows_per_block < rows ? begin + rows_per_block : rows;
    uint32_t bits = 0;  // non-negative floats (and NaN above inf) order as their bits
    for (int64_t row = begin + threadIdx.x; row < end; row += kThreads) {
        float gv[F];
        load_gradient<T, F>(g, g_layout, row, level, gv);
        bits = max(bits, __float_as_uint(fabsf(first_order_row_bound<D, F>(a, L, x + row * x_stride, gv))));
    }
    bits = warp_max(bits);
    if (threadIdx.x % warpSize == 0) atomicMax(&block_bound_bits, bits);
    __syncthreads();
    const uint32_t bound_bits = block_bound_bits;
    if (bound_bits == 0 || end <= begin) return;  // every contribution is 0
    // Contributions one slot can receive from the block: at most 2^D per row (one for Nearest and
    // stochastic rows, which feed one corner).
    const bool one_corner = static_cast<Interpolation>(a.interpolation) == Interpolation::Nearest || a.stochastic;
    const uint64_t most = static_cast<uint64_t>(rows_per_block) << (one_corner ? 0u : D);
    const uint32_t lo_bits = 32u - (64u - static_cast<uint32_t>(__clzll(static_cast<long long>(most - 1))));
    float* out = acc + size_t(L.offset) * F;
    if (bound_bits >= 0x7F800000u || lo_bits < 8u) {
        float* slots = reinterpret_cast<float*>(shared_bytes);  // zeroed above
        shared_item_rows<T, D, F>(a, L, level, begin, end, rows, x, x_stride, g, g_layout,
                                  SharedSink<float>{slots, f0, fs, 0});
        __syncthreads();
        flush_slot_totals<F, OneWordSlots<float>>(slots, n_slots, f0, fs, out);
        return;
    }
    int e = 0;
    (void)frexp(static_cast<double>(__uint_as_float(bound_bits)) * static_cast<double>(end - begin) *
                        (1.0 + 1.0 / 65536.0),
                &e);  // n * bound < 2^e
    const SplitSink sink{lo, hi, f0, fs, static_cast<int>(29u + lo_bits) - e, lo_bits};
    shared_item_rows<T, D, F>(a, L, level, begin, end, rows, x, x_stride, g, g_layout, sink);
    __syncthreads();
    for (uint32_t i = threadIdx.x; i < n_slots; i += kThreads) {
        const long long sum = static_cast<long long>(hi[i]) * (1ll << lo_bits) + static_cast<long long>(lo[i]);
        if (sum != 0) atomicAdd(out + size_t(i / fs) * F + f0 + i % fs, from_fixed_point(sum, sink.k));
    }
}

// The first-order bound of every listed level in one pass over the rows: a thread per row reads its x
// once and its dL/dy level after level (contiguous across the warp in the level-major layout); block
// maxima per level in shared memory (a warp maximum first, then one shared atomic per warp and
// level), then one global atomicMax per block and level.
// STAGED (the caller's rows, the listed levels consecutive from `first` and their values kStagedWords
// words or fewer, 16-byte aligned, BoundStaging): the block first copies its rows' values to shared memory
// with 16-byte loads of consecutive lanes, then each thread reads its row's there (rows one word apart
// in banks; dynamic shared memory of bound_staging_bytes, 17 KiB for the main row's 64 bytes per row).
// Without, a warp's load of one level touches every row's sector once per level: the pass was bound by L1
// throughput (66 us of the deterministic backward at 2^20, run 110). A thread per listed level over every
// step-th staged row instead (x staged beside dL/dy, a running maximum, one shared atomic per thread, no
// warp maximum) measured about 22 us slower (every deterministic row of run 118, the unstaged one not).
constexpr uint32_t kStagedWords = 32;  // 128 bytes of dL/dy per row
// The bound pass a launcher ran: none (no level listed), a load per row and level, staged rows
// (grid_param_bound_rows_kernel), running maxima over the rows' chunks (grid_param_bound_chunks_kernel),
// the second-order pass.
enum class BoundPass { none, rows, staged_rows, chunks, second };
struct BoundStaging {
    uint32_t first = 0;  // the first listed level
    uint32_t words = 0;  // 4-byte words of the listed levels' values per row (a multiple of 4)
};
inline size_t bound_staging_bytes(const BoundStaging& st) {
    return st.words == 0 ? 0 : size_t(kThreads) * (st.words + 1) * sizeof(uint32_t);
}
template <typename T, uint32_t D, uint32_t F, bool STAGED>
__global__ void __launch_bounds__(kThreads)
    grid_param_bound_rows_kernel(const KernelArgs a, const LevelList list, int64_t rows, const float* __restrict__ x,
                                 int64_t x_stride, const T* __restrict__ g, GradLayout g_layout, BoundStaging st,
                                 unsigned int* __restrict__ bound_bits) {
    __shared__ unsigned int block_max[grid::kMaxLevels];
    for (uint32_t i = threadIdx.x; i < list.count; i += kThreads) block_max[i] = 0;
    const int64_t row0 = int64_t(blockIdx.x) * kThreads, row = row0 + threadIdx.x;
    const bool active = row < rows;
    [[maybe_unused]] const uint32_t* staged_row = nullptr;
    if constexpr (STAGED) {
        extern __shared__ uint32_t staged[];  // bound_staging_bytes(st)
        const uint32_t pitch = st.words + 1;
        const int64_t n_rows = rows - row0 < kThreads ? rows - row0 : kThreads;
        stage_rows(reinterpret_cast<const uint4*>(g + g_layout.at(row0, st.first)),
                   g_layout.row_stride * int64_t(sizeof(T)) / 16, uint32_t(n_rows), st.words / 4, staged, pitch);
        staged_row = staged + threadIdx.x * pitch;
    }
    __syncthreads();
    float xr[D];
    TNN_UNROLL
    for (uint32_t d = 0; d < D; ++d) xr[d] = active ? x[row * x_stride + d] : 0.0f;
    for (uint32_t i = 0; i < list.count; ++i) {
        const uint32_t level = list.ids[i];
        uint32_t bits = 0;
        if (active) {
            float gv[F];
            if constexpr (STAGED) {
                const T* values = reinterpret_cast<const T*>(staged_row) + size_t(level - st.first) * F;
                TNN_UNROLL
                for (uint32_t f = 0; f < F; ++f) gv[f] = to_acc(values[f]);
            } else {
                load_gradient<T, F>(g, g_layout, row, level, gv);
            }
            bits = __float_as_uint(fabsf(first_order_row_bound<D, F>(a, a.levels[level], xr, gv)));
        }
        bits = warp_max(bits);
        if (threadIdx.x % warpSize == 0 && bits != 0) atomicMax(&block_max[i], bits);
    }
    __syncthreads();
    for (uint32_t i = threadIdx.x; i < list.count; i += kThreads)
        if (block_max[i] != 0) atomicMax(bound_bits + list.ids[i], block_max[i]);
}

// Where a bound pass puts its results: the bits of each level's bound (atomicMax, zeroed by the caller).
// The chunks pass also computes every level's exponent (n_levels: all the grid's levels) in its last
// block when `exponents` is set; blocks_done: a counter zeroed by the caller. max_blocks: the chunks
// pass's grid at most (the caller passes SMs x 2048 / 256; with the kernel's 55 registers 4 blocks of 256
// fit an sm_90 SM, so that is two waves of equal blocks).
struct BoundOut {
    unsigned int* bound_bits = nullptr;
    int* exponents = nullptr;
    unsigned int* blocks_done = nullptr;
    uint32_t n_levels = 0;
    uint32_t max_blocks = 0;
};
constexpr float kBoundPlainX = 1048576.0f;  // 2^20
constexpr float kBoundPlainScale = 1.2676506002282294e30f;  // 2^100: 2^120 + 0.5 is finite in fp32

// The largest magnitudes of two words of storage values, lane by lane (a 32-bit value or two 16-bit ones).
template <typename T> __device__ __forceinline__ uint32_t max_magnitude_bits(uint32_t acc, uint32_t w) {
    if constexpr (sizeof(T) == 4) {
        return max(acc, w & 0x7FFFFFFFu);
    } else {
        static_assert(sizeof(T) == 2, "max_magnitude_bits: 16- or 32-bit values");
        w &= 0x7FFF7FFFu;
#if defined(TNN_WITH_HIP)
        return max(acc & 0xFFFFu, w & 0xFFFFu) | (max(acc >> 16, w >> 16) << 16);
#else
        return __vmaxu2(acc, w);
#endif  // TNN_WITH_HIP
    }
}
template <typename T> __device__ __forceinline__ uint4 max_magnitude_bits(uint4 acc, uint4 w) {
    return make_uint4(max_magnitude_bits<T>(acc.x, w.x), max_magnitude_bits<T>(acc.y, w.y),
                      max_magnitude_bits<T>(acc.z, w.z), max_magnitude_bits<T>(acc.w, w.w));
}

// The first-order bound of Linear, Nearest and stochastic rows as running maxima (no weights: see
// first_order_row_bound), for the caller's rows when bound_staging applies; n_levels: the listed ones.
// A row's listed values are P = st.words / 4 16-byte chunks; a block's threads take consecutive chunks
// (P per row, so each thread keeps one chunk position p and the same levels for all its rows, and a
// warp's loads are contiguous) and walk the rows a pass of the grid apart, keeping per 32-bit word the
// largest magnitude of its values as integer bits: IEEE formats order |v| as their bits without the
// sign, NaN above inf above every finite value, so the maximum of the masked bits is max |g| with a NaN
// kept. Linear needs the positions to be finite: |x| <= kBoundPlainX at a level whose |scale| <=
// kBoundPlainScale always gives a finite fma(scale, x, 0.5), so only other rows (NaN, inf, huge x) test
// their levels one by one, and mark a level with a non-finite position with the largest NaN bits. At
// the end fl(m (1 + 2^-10)) is taken once per value instead of once per row: rounding is monotone, so
// the maximum is the same float, and the level bounds are the same bits as
// grid_param_bound_rows_kernel's where they are finite; a NaN bound may keep another NaN's bits, and
// every NaN gives the same exponent, so the gradients are the same bits (test:
// DeterministicBoundOnStagedRowsGivesTheSameBits). About 4 instructions per (row, level) for the main
// row, where the thread per row with a warp maximum per level took about 30 (run 120: 46 us at 2^20,
// instruction-bound; run 123: 25 us, bound by its DRAM reads).
template <typename T, uint32_t D, uint32_t F>
__global__ void __launch_bounds__(kThreads)
    grid_param_bound_chunks_kernel(const KernelArgs a, BoundStaging st, uint32_t n_levels, int64_t rows,
                                   const float* __restrict__ x, int64_t x_stride, const T* __restrict__ g,
                                   GradLayout g_layout, BoundOut out) {
    unsigned int* __restrict__ bound_bits = out.bound_bits;
    constexpr uint32_t V = 16 / sizeof(T);  // values per chunk
    __shared__ unsigned int block_max[grid::kMaxLevels];
    for (uint32_t i = threadIdx.x; i < n_levels; i += kThreads) block_max[i] = 0;
    const uint32_t P = st.words / 4, rows_per_pass = kThreads / P, t = threadIdx.x, p = t % P;
    const bool active = t < rows_per_pass * P;
    const bool check_x = static_cast<Interpolation>(a.interpolation) == Interpolation::Linear && !a.stochastic;
    // Every level of the thread's chunk keeps the positions of |x| <= 2^20 finite (or no test: x reads 0).
    bool plain_scales = true;
    TNN_UNROLL
    for (uint32_t j = 0; j < V; ++j)
        plain_scales = plain_scales && (!check_x || fabsf(a.levels[st.first + (p * V + j) / F].scale) <= kBoundPlainScale);
    uint4 m = make_uint4(0u, 0u, 0u, 0u);
    // Pass k of the grid covers rows_per_pass * gridDim.x consecutive rows; kBatch passes' loads in flight.
    const int64_t row0 = int64_t(blockIdx.x) * rows_per_pass + t / P, pass_rows = int64_t(gridDim.x) * rows_per_pass;
    constexpr uint32_t kBatch = 4;
    for (int64_t k0 = 0; active && row0 + k0 * pass_rows < rows; k0 += kBatch) {
        uint4 v[kBatch];
        float xr[kBatch][D];
        bool in[kBatch];
        TNN_UNROLL
        for (uint32_t u = 0; u < kBatch; ++u) {
            const int64_t row = row0 + (k0 + u) * pass_rows;
            in[u] = row < rows;
            v[u] = in[u] ? reinterpret_cast<const uint4*>(g + g_layout.at(row, st.first))[p] : make_uint4(0u, 0u, 0u, 0u);
            TNN_UNROLL
            for (uint32_t d = 0; d < D; ++d) xr[u][d] = in[u] && check_x ? x[row * x_stride + d] : 0.0f;
        }
        TNN_UNROLL
        for (uint32_t u = 0; u < kBatch; ++u) {
            m = max_magnitude_bits<T>(m, v[u]);
            bool plain = plain_scales || !in[u];
            TNN_UNROLL
            for (uint32_t d = 0; d < D; ++d) plain = plain && fabsf(xr[u][d]) <= kBoundPlainX;  // false for NaN
            if (plain) continue;
            uint32_t nan_words[4] = {0u, 0u, 0u, 0u};
#pragma unroll 1
            for (uint32_t j = 0; j < V; ++j) {
                const float scale = a.levels[st.first + (p * V + j) / F].scale;
                bool finite = true;
                TNN_UNROLL
                for (uint32_t d = 0; d < D; ++d) finite = finite && isfinite(grid::axis_position(xr[u][d], scale));
                if (!finite) nan_words[j * sizeof(T) / 4] |= sizeof(T) == 4 ? 0x7FFFFFFFu : 0x7FFFu << (16 * (j % 2));
            }
            m = max_magnitude_bits<T>(m, make_uint4(nan_words[0], nan_words[1], nan_words[2], nan_words[3]));
        }
    }
    // Lanes l and l ^ o hold the same chunk position when P divides o (P a power of two: every thread is
    // active); the first P lanes of the warp then hold the warp's maxima.
    const bool pow2 = (P & (P - 1)) == 0 && P <= uint32_t(warpSize);
    if (pow2) {
        for (int o = warpSize / 2; o >= int(P); o /= 2) {
            m = max_magnitude_bits<T>(m, make_uint4(shfl_xor_bits(m.x, o), shfl_xor_bits(m.y, o), shfl_xor_bits(m.z, o),
                                                    shfl_xor_bits(m.w, o)));
        }
    }
    __syncthreads();  // block_max zeroed
    if (active && (!pow2 || t % warpSize < P)) {
        const uint32_t words[4] = {m.x, m.y, m.z, m.w};
        TNN_UNROLL
        for (uint32_t j = 0; j < V; ++j) {
            float v;
            if constexpr (sizeof(T) == 4) v = __uint_as_float(words[j]);
            else v = half_bits_to_float<T>(words[j / 2] >> (16 * (j % 2)));
            const uint32_t bits = __float_as_uint(fabsf(check_x ? v * (1.0f + 1.0f / 1024.0f) : v));
            if (bits != 0) atomicMax(&block_max[(p * V + j) / F], bits);
        }
    }
    __syncthreads();
    for (uint32_t i = threadIdx.x; i < n_levels; i += kThreads)
        if (block_max[i] != 0) atomicMax(bound_bits + st.first + i, block_max[i]);
    if (out.exponents == nullptr) return;
    // The last block to finish turns every level's bound into its exponent (grid_fixed_point_exponent_kernel's
    // work, without its launch): the other blocks' maxima are visible to it after their fences.
    __shared__ bool last;
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) last = atomicAdd(out.blocks_done, 1u) == gridDim.x - 1;
    __syncthreads();
    if (!last) return;
    __threadfence();
    for (uint32_t l = threadIdx.x; l < out.n_levels; l += kThreads)
        out.exponents[l] = fixed_point_exponent(__uint_as_float(atomicOr(bound_bits + l, 0u)), rows);
}

// The second-order pass's bound, level-major blocks like grid_param_grad_kernel: the weights
// dW_c/dx . v have no identity like the first order's, so every corner of the row is summed. Per
// level, the largest per-row sum of |contribution| as fp32 bits (atomicMax on the bits orders
// non-negative floats; NaN bits exceed +inf's).
template <typename T, uint32_t D, uint32_t F>
__global__ void __launch_bounds__(kThreads)
    grid_param_bound_second_kernel(const KernelArgs a, const LevelList list, uint32_t blocks_per_level, int64_t rows,
                                   const float* __restrict__ x, int64_t x_stride, const float* __restrict__ v,
                                   int64_t v_stride, const T* __restrict__ g, GradLayout g_layout,
                                   unsigned int* __restrict__ bound_bits) {
    __shared__ unsigned int block_max;
    if (threadIdx.x == 0) block_max = 0;
    __syncthreads();
    const uint32_t level = list.ids[blockIdx.x / blocks_per_level];
    const int64_t row = int64_t(blockIdx.x % blocks_per_level) * kThreads + threadIdx.x;
    if (row < rows) {
        float gv[F], sum = 0.0f;
        load_gradient<T, F>(g, g_layout, row, level, gv);
        const BoundSink::Level s{&sum};
        row_contributions<D, F, true>(a, a.levels[level], level, row, rows, x + row * x_stride, v + row * v_stride,
                                      gv, s);
        atomicMax(&block_max, __float_as_uint(fabsf(sum)));
    }
    __syncthreads();
    if (threadIdx.x == 0 && block_max != 0) atomicMax(bound_bits + level, block_max);
}

// ---- input gradient and second-order rows (one thread per row; grid_math.h's functions as is) --------

// dL/dx_d = sum_l sum_c dW_c/dx_d sum_f g_{l,f} (V_c[f] - V_0[f]) (zero for Nearest; grid::value_step).
template <typename T, uint32_t D, uint32_t F>
__global__ void __launch_bounds__(kThreads)
    grid_input_grad_kernel(const KernelArgs a, int64_t rows, const float* __restrict__ x, int64_t x_stride,
                           const T* __restrict__ g, int64_t g_stride, const T* __restrict__ params,
                           float* __restrict__ dx_out, int64_t dx_stride) {
    const int64_t row = int64_t(blockIdx.x) * kThreads + threadIdx.x;
    if (row >= rows) return;
    const auto interp = static_cast<Interpolation>(a.interpolation);
    float dx[D];
    TNN_UNROLL
    for (uint32_t d = 0; d < D; ++d) dx[d] = 0.0f;
    for (uint32_t l = 0; interp != Interpolation::Nearest && l < a.n_active; ++l) {
        const LevelInfo& L = a.levels[l];
        const T* __restrict__ V = params + size_t(L.offset) * F;
        grid::AxisWeight<float> axis[D];
        uint32_t cell[D];
        TNN_UNROLL
        for (uint32_t d = 0; d < D; ++d) {
            axis[d] = grid::axis_weight<float>(x[row * x_stride + d], L.scale, interp);
            cell[d] = axis[d].cell;
        }
        const CornerTerms<D> t = corner_terms<D>(L, cell, a.factors);
        float gl[F], val0[F];
        load_gradient<T, F>(g, row, g_stride, l, gl);
#pragma unroll(kUnroll<(1u << D)>)
        for (uint32_t c = 0; c < (1u << D); ++c) {
            float val[F], grad[D];
            load_entry<T, F>(V, corner_entry<D>(a, L, t, cell, c), val);
            float gv = 0.0f;
            TNN_UNROLL
            for (uint32_t f = 0; f < F; ++f) {
                if (c == 0) val0[f] = val[f];
                gv += gl[f] * grid::value_step(val[f], val0[f]);
            }
            grid::corner_weight_gradient(D, axis, c, grad);
            TNN_UNROLL
            for (uint32_t d = 0; d < D; ++d) dx[d] += grad[d] * gv;
        }
    }
    TNN_UNROLL
    for (uint32_t d = 0; d < D; ++d) dx_out[row * dx_stride + d] = dx[d];
}

// The second-order pass's row outputs (grid.cpp's second_order_rows): dL'/d(dL/dy) and dL'/dx.
template <typename T, uint32_t D, uint32_t F>
__global__ void __launch_bounds__(kThreads)
    grid_second_order_rows_kernel(const KernelArgs a, int64_t rows, const float* __restrict__ x, int64_t x_stride,
                                  const float* __restrict__ v, int64_t v_stride, const T* __restrict__ g,
                                  int64_t g_stride, const T* __restrict__ params, T* __restrict__ dgrad,
                                  int64_t dgrad_stride, float* __restrict__ dx_out, int64_t dx_stride) {
    const int64_t row = int64_t(blockIdx.x) * kThreads + threadIdx.x;
    if (row >= rows) return;
    const auto interp = static_cast<Interpolation>(a.interpolation);
    float vd[D], dx[D];
    TNN_UNROLL
    for (uint32_t d = 0; d < D; ++d) {
        vd[d] = v[row * v_stride + d];
        dx[d] = 0.0f;
    }
    for (uint32_t l = 0; l < a.n_levels; ++l) {
        float dg[F];
        TNN_UNROLL
        for (uint32_t f = 0; f < F; ++f) dg[f] = 0.0f;
        if (l < a.n_active && interp != Interpolation::Nearest) {
            const LevelInfo& L = a.levels[l];
            const T* __restrict__ V = params + size_t(L.offset) * F;
            grid::AxisWeight<float> axis[D];
            uint32_t cell[D];
            TNN_UNROLL
            for (uint32_t d = 0; d < D; ++d) {
                axis[d] = grid::axis_weight<float>(x[row * x_stride + d], L.scale, interp);
                cell[d] = axis[d].cell;
            }
            const CornerTerms<D> t = corner_terms<D>(L, cell, a.factors);
            float gl[F], val0[F];
            load_gradient<T, F>(g, row, g_stride, l, gl);
#pragma unroll(kUnroll<(1u << D)>)
            for (uint32_t c = 0; c < (1u << D); ++c) {
                float val[F], grad[D], hv[D];
                load_entry<T, F>(V, corner_entry<D>(a, L, t, cell, c), val);
                grid::corner_weight_gradient(D, axis, c, grad);
                float E = 0.0f;
                TNN_UNROLL
                for (uint32_t d = 0; d < D; ++d) E += vd[d] * grad[d];
                float gv = 0.0f;
                TNN_UNROLL
                for (uint32_t f = 0; f < F; ++f) {
                    if (c == 0) val0[f] = val[f];
                    const float step = grid::value_step(val[f], val0[f]);
                    dg[f] += E * step;
                    gv += gl[f] * step;
                }
                if (dx_out) {
                    grid::corner_weight_hessian_dot(D, axis, c, vd, hv);
                    TNN_UNROLL
                    for (uint32_t d = 0; d < D; ++d) dx[d] += hv[d] * gv;
                }
            }
        }
        if (dgrad) {
            TNN_UNROLL
            for (uint32_t f = 0; f < F; ++f) dgrad[row * dgrad_stride + size_t(l) * F + f] = from_acc<T>(dg[f]);
        }
    }
    if (dx_out) {
        TNN_UNROLL
        for (uint32_t d = 0; d < D; ++d) dx_out[row * dx_stride + d] = dx[d];
    }
}

// ---- gradient conversion ---------------------------------------------------------------------------

// The gradient value a (overwrite) or *dst + a (accumulate; *dst is read only then), rounded once to T.
template <typename T>
__device__ __forceinline__ T gradient_value(float a, const T* dst, bool accumulate) {
    return from_acc<T>(accumulate ? to_acc(*dst) + a : a);
}
template <typename T>
__global__ void grid_gradient_from_float_kernel(const float* __restrict__ acc, T* __restrict__ dst, int64_t n,
                                                bool accumulate) {
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
        dst[i] = gradient_value(acc[i], dst + i, accumulate);
}

// The 128-byte L2 line at p (128-byte aligned) dropped without being written back (PTX discard: a weak
// write of an indeterminate value). For the fp32 scratch whose reductions were marked evict-last
// (Variant::l2_hints 1): once converted those lines are dead, and evict-last lines left behind keep
// L2 from the next kernels (the forward after a backward measured 3% slower with them, run 81); and
// for the deterministic gradient's 64-bit accumulator, whose dirty lines would be written back (~6 us
// of its backward, run 113).
__device__ __forceinline__ void discard_l2_line(const void* p) {
#if defined(TNN_GRID_L2_HINTS)
    asm volatile("discard.global.L2 [%0], 128;" : : "l"(p) : "memory");
#else
    (void)p;
#endif  // TNN_GRID_L2_HINTS
}

// The conversion's loop over n values of acc (A: float or 64-bit words), N per thread where N A fill
// 16 bytes, acc and dst starting the same number of values past a 16-byte boundary and an N-element one
// (gpu::Packed): the head (the values before acc's first 16-byte boundary, fewer than N) and the tail
// (the n % N values after the groups) one per item, the groups between one 16-byte load and one store each.
// value(a) is an A as fp32. lines (these n values dead after this kernel): each 128-byte line of acc that
// lies wholly inside the n values leaves L2 unwritten once its 128 / 16 groups are read. Thread v takes
// item v - lead, where lead is the number of 16-byte groups before the first group in its line, so that a
// line's groups are consecutive lanes of one warp in one iteration (the blocks' steps are multiples of 32)
// and a warp barrier orders their loads before the discard by the line's first lane (acc is not const:
// the discard writes it, and no read-only-cache loads may be used). A line shared with values outside
// [acc, acc + n) stays, the head's among them.
template <uint32_t N, typename T, typename A, typename VALUE>
__device__ __forceinline__ void convert_values(A* acc, T* __restrict__ dst, int64_t n, bool accumulate, bool lines,
                                               VALUE value) {
    static_assert(N * sizeof(A) == 16, "convert_values: 16-byte groups");
    constexpr int64_t kGroupsPerLine = 128 / 16;
    using Group = gpu::Packed<T, N>;
    const auto past = static_cast<int64_t>(reinterpret_cast<uintptr_t>(acc) % 16 / sizeof(A));
    const int64_t head = past == 0 ? 0 : (N - past < n ? N - past : n);
    A* body = acc + head;
    T* body_dst = dst + head;
    const int64_t groups = (n - head) / N, tail = (n - head) % N, items = groups + tail + head;
    const int64_t step = int64_t(gridDim.x) * blockDim.x;
    const int64_t lead = lines ? int64_t(reinterpret_cast<uintptr_t>(body) % 128 / 16) : 0;
    // Every lane of a warp runs the same iterations (the warp barrier below).
    for (int64_t first = int64_t(blockIdx.x) * blockDim.x; first < lead + items; first += step) {
        const int64_t v = first + threadIdx.x, i = v - lead;
        if (i >= groups && i < items) {
            // The tail's values, then the head's.
            const int64_t j = i < groups + tail ? head + N * groups + (i - groups) : i - groups - tail;
            dst[j] = gradient_value(value(acc[j]), dst + j, accumulate);
        } else if (i >= 0 && i < groups) {
            const uint4 u = reinterpret_cast<const uint4*>(body)[i];
            A av[N];
            memcpy(av, &u, 16);
            Group q;
            if (accumulate) q = reinterpret_cast<const Group*>(body_dst)[i];
            TNN_UNROLL
            for (uint32_t k = 0; k < N; ++k) q.v[k] = gradient_value(value(av[k]), q.v + k, accumulate);
            reinterpret_cast<Group*>(body_dst)[i] = q;
        }
        if (lines) {
            gpu::sync_warp();
            if (v % kGroupsPerLine == 0 && i >= 0 && i + kGroupsPerLine <= groups) discard_l2_line(body + N * i);
        }
    }
}

// The same, four values per thread (convert_values).
template <typename T>
__global__ void grid_gradient_from_float_quads_kernel(float* __restrict__ acc, T* __restrict__ dst, int64_t n,
                                                      bool accumulate, bool discard) {
    convert_values<4>(acc, dst, n, accumulate, discard, [](float a) { return a; });
}

// The same from the fixed-point accumulator for the levels of `list`; blockIdx.y is the list's item (the
// level, its exponent). `pairs` (acc 16-byte and dst two-value aligned): two values per thread
// (convert_values, a level starting at an odd word with a head of one value), the whole 128-byte lines
// inside it dropped when `discard`; else one per thread. blockIdx.y = list.count (a launch with one more
// row of blocks): zero the zero_count words from `zero` instead (the next group of levels' part of the
// accumulator, disjoint from the list's: ScratchParts, Variant::fused_zeroing).
template <typename T>
__global__ void grid_gradient_from_fixed_kernel(const KernelArgs a, const LevelList list, uint32_t n_features,
                                                unsigned long long* acc, const int* __restrict__ exponents,
                                                T* __restrict__ dst, bool accumulate, bool pairs, bool discard,
                                                unsigned long long* __restrict__ zero, int64_t zero_count) {
    if (blockIdx.y == list.count) {
        for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < zero_count;
             i += int64_t(gridDim.x) * blockDim.x)
            zero[i] = 0ull;
        return;
    }
    const uint32_t level = list.ids[blockIdx.y];
    const LevelInfo& L = a.levels[level];
    const int k = exponents[level];
    const int64_t begin = int64_t(L.offset) * n_features, n = int64_t(L.size) * n_features;
    const auto value = [k](unsigned long long w) { return from_fixed_point(static_cast<long long>(w), k); };
    if (pairs) {
        convert_values<2>(acc + begin, dst + begin, n, accumulate, discard, value);
        return;
    }
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
        dst[begin + i] = gradient_value(value(acc[begin + i]), dst + begin + i, accumulate);
}

// grid_param_bound_rows_kernel's staging where it applies: the caller's rows (level_stride F), the listed
// levels consecutive, their values whole 16-byte chunks (kStagedWords words or fewer) at 16-byte aligned
// addresses in every row; else words = 0 (a load per row and level).
template <typename T, uint32_t F>
BoundStaging bound_staging(const LevelList& list, const T* g, const GradLayout& layout) {
    BoundStaging st;
    if (list.count == 0 || layout.level_stride != F) return st;
    for (uint32_t i = 1; i < list.count; ++i)
        if (list.ids[i] != list.ids[0] + i) return st;
    const size_t bytes = size_t(list.count) * F * sizeof(T);
    const auto first = reinterpret_cast<uintptr_t>(g + layout.at(0, list.ids[0]));
    if (bytes % 16 != 0 || bytes / 4 > kStagedWords || first % 16 != 0 ||
        (static_cast<size_t>(layout.row_stride) * sizeof(T)) % 16 != 0)
        return st;
    st.first = list.ids[0];
    st.words = static_cast<uint32_t>(bytes / 4);
    return st;
}

// ---- launchers ---------------------------------------------------------------------------------------

// One call's shared arguments as the launchers take them (raw pointers and sizes).
struct Call {
    const KernelArgs* args;
    gpu_stream_t stream;
    int64_t rows;
    const float* x;
    int64_t x_stride;
};

// The launchers of one input dimension: a small table of functions that take the storage type and
// the features per level at run time (void pointers: float, gpu_half or gpu_bf16 by `dtype`).
// make_launchers<D> fills it; instantiations/grid_d<D>.cu compiles it, grid.cu picks the table by D.
struct Launchers {
    void (*forward)(const Call&, DType, uint32_t n_features, const void* params, void* y, int64_t y_stride,
                    bool vec_store, bool chunked, uint32_t threads);
    // Global-atomic parameter gradient of the listed levels (second: weights E_c of the second-order pass).
    void (*param_grad_float)(const Call&, DType, uint32_t n_features, bool second, const LevelList&, const float* v,
                             int64_t v_stride, const void* g, GradLayout g_layout, const FloatSink&);
    void (*param_grad_fixed)(const Call&, DType, uint32_t n_features, bool second, const LevelList&, const float* v,
                             int64_t v_stride, const void* g, GradLayout g_layout, const FixedSink&);
    // The same with one thread per (row, level, feature) (grid_param_grad_lanes_kernel), or per (row,
    // level, corner, feature) (grid_param_grad_corner_fixed_kernel; false when 2^D * F exceeds a block).
    void (*param_grad_fixed_lanes)(const Call&, DType, uint32_t n_features, bool second, const LevelList&,
                                   const float* v, int64_t v_stride, const void* g, GradLayout g_layout,
                                   unsigned long long* acc, const int* exponents);
    // bulk: x-pairs of adjacent entries as bulk reductions where the kernel has them (F = 2, first order;
    // Variant::det_bulk; NVIDIA only, acc 16-byte aligned).
    // Returns whether it launched the bulk-pair kernel.
    bool (*param_grad_fixed_lane_levels)(const Call&, DType, uint32_t n_features, bool second, const LevelList&,
                                         const float* v, int64_t v_stride, const void* g, GradLayout g_layout,
                                         unsigned long long* acc, const int* exponents, bool bulk);
    bool (*param_grad_fixed_corners)(const Call&, DType, uint32_t n_features, bool second, const LevelList&,
                                     const float* v, int64_t v_stride, const void* g, GradLayout g_layout,
                                     unsigned long long* acc, const int* exponents);
    // Fast path with one thread per (row, level, corner) (grid_param_grad_corner_kernel), or per (row,
    // corner) over all levels of the list (grid_param_grad_corner_levels_kernel).
    void (*param_grad_float_corners)(const Call&, DType, uint32_t n_features, bool second, const LevelList&,
                                     const float* v, int64_t v_stride, const void* g, GradLayout g_layout,
                                     const FloatSink&);
    void (*param_grad_float_corner_levels)(const Call&, DType, uint32_t n_features, bool second, const LevelList&,
                                           const float* v, int64_t v_stride, const void* g, GradLayout g_layout,
                                           const FloatSink&);
    // Shared-memory parameter gradient of small levels (first order), into a float or fixed-point accumulator.
    // split: grid_param_grad_shared_split_kernel (Variant::shared_fixed; shared_bytes then 8 per slot).
    void (*param_grad_shared_float)(const Call&, DType, uint32_t n_features, const SharedItems&,
                                    uint32_t blocks_per_item, int64_t rows_per_block, size_t shared_bytes,
                                    const void* g, GradLayout g_layout, float* acc, bool split);
    // words: grid_param_grad_shared_words_kernel (Variant::det_shared_words; 12 bytes per slot; NVIDIA only).
    void (*param_grad_shared_fixed)(const Call&, DType, uint32_t n_features, const SharedItems&,
                                    uint32_t blocks_per_item, int64_t rows_per_block, size_t shared_bytes,
                                    const void* g, GradLayout g_layout, unsigned long long* acc, const int* exponents,
                                    bool words);
    // Returns which pass it launched (BoundPass). chunks: the first-order pass over the caller's rows as
    // running maxima (grid_param_bound_chunks_kernel) where it applies (Linear, Nearest, stochastic).
    // With the chunks pass and out.exponents, the exponents are computed too.
    BoundPass (*param_bound)(const Call&, DType, uint32_t n_features, bool second, const LevelList&, const float* v,
                             int64_t v_stride, const void* g, GradLayout g_layout, const BoundOut& out,
                             bool chunks);
    void (*input_grad)(const Call&, DType, uint32_t n_features, const void* g, int64_t g_stride, const void* params,
                       float* dx, int64_t dx_stride);
    void (*second_order_rows)(const Call&, DType, uint32_t n_features, const float* v, int64_t v_stride,
                              const void* g, int64_t g_stride, const void* params, void* dgrad, int64_t dgrad_stride,
                              float* dx, int64_t dx_stride);
};

// The one place where the storage dtype and the features per level become template parameters:
// f(T{}, std::integral_constant<uint32_t, F>{}).
template <typename FN> void dispatch_storage(DType dtype, uint32_t n_features, FN&& f) {
    dispatch_gpu_storage(dtype, "grid encoding", [&](auto t) {
        switch (n_features) {
            case 1: f(t, std::integral_constant<uint32_t, 1>{}); return;
            case 2: f(t, std::integral_constant<uint32_t, 2>{}); return;
            case 4: f(t, std::integral_constant<uint32_t, 4>{}); return;
            case 8: f(t, std::integral_constant<uint32_t, 8>{}); return;
        }
        throw UnsupportedError(msg("grid encoding (GPU): ", n_features, " features per level (1, 2, 4 or 8)"));
    });
}

// Lets `kernel` launch with the current device's whole opt-in shared memory per block (less its static
// shared memory), once per kernel and device. The limit is an attribute of the kernel, not of a launch:
// setting each call's own size would race with another thread launching the kernel with a larger one.
template <typename K> void opt_in_shared_memory(K* kernel) {
    static std::mutex mutex;
    static std::set<std::pair<const void*, int>> done;
    int device = 0;
    TNN_GPU_CHECK(gpu_get_device(&device));
    const std::pair<const void*, int> key(reinterpret_cast<const void*>(kernel), device);
    const std::lock_guard<std::mutex> lock(mutex);
    if (done.count(key) != 0) return;
    gpu_func_attributes_t a;
    TNN_GPU_CHECK(gpu_func_get_attributes(&a, kernel));
    const size_t optin = gpu::device_properties(device).smem_per_block_optin;
    const int bytes = static_cast<int>(optin > a.sharedSizeBytes ? optin - a.sharedSizeBytes : 0);
    TNN_GPU_CHECK(gpu_func_set_attribute(kernel, gpu_func_attribute_max_dynamic_shared_memory_size, bytes));
    done.insert(key);  // after success: a failed attempt is tried again by the next call
}

template <uint32_t D, typename SINK>
void launch_param_grad(const Call& c, DType dtype, uint32_t n_features, bool second, const LevelList& list,
                       const float* v, int64_t v_stride, const void* g, GradLayout g_layout, const SINK& sink) {
    if (list.count == 0) return;
    dispatch_storage(dtype, n_features, [&](auto t, auto f) {
        using T = decltype(t);
        constexpr uint32_t F = decltype(f)::value;
        const RowBlocks b = row_blocks("grid_param_grad_kernel", c.rows, kThreads, list.count, kThreads);
        const T* gt = static_cast<const T*>(g);
        dispatch_bool(second, [&](auto sec) {
            constexpr bool SECOND = decltype(sec)::value;
            grid_param_grad_kernel<T, D, F, SECOND, SINK><<<dim3(b.total), kThreads, 0, c.stream>>>(
                    *c.args, list, b.per_copy, c.rows, c.x, c.x_stride, v, v_stride, gt, g_layout, sink);
        });
        TNN_GPU_CHECK_LAUNCH("grid_param_grad_kernel");
    });
}

template <uint32_t D, typename ACC>
void launch_param_grad_shared(const Call& c, DType dtype, uint32_t n_features, const SharedItems& items,
                              uint32_t blocks_per_item, int64_t rows_per_block, size_t shared_bytes, const void* g,
                              GradLayout g_layout, ACC* acc, const int* exponents, bool words = false) {
    if (items.count == 0) return;
#if !defined(TNN_WITH_CUDA)
    if (words)
        throw UnsupportedError("grid encoding (GPU): Variant::det_shared_words (three 32-bit words per "
                               "shared-memory slot) is built for NVIDIA GPUs only");
#endif  // TNN_WITH_CUDA
    dispatch_storage(dtype, n_features, [&](auto t, auto f) {
        using T = decltype(t);
        constexpr uint32_t F = decltype(f)::value;
        auto kernel = grid_param_grad_shared_kernel<T, D, F, ACC>;
#if defined(TNN_WITH_CUDA)
        if constexpr (std::is_same_v<ACC, unsigned long long>)
            if (words) kernel = grid_param_grad_shared_words_kernel<T, D, F>;  // rows capped by plan_reduction
#endif  // TNN_WITH_CUDA
        const char* name = words ? "grid_param_grad_shared_words_kernel" : "grid_param_grad_shared_kernel";
        // b.per_copy = the plan's blocks_per_item (the same ceil(rows / rows_per_block)), checked here.
        const RowBlocks b = row_blocks(name, c.rows, rows_per_block, items.count, kThreads);
        if (shared_bytes > kSharedBytes) opt_in_shared_memory(kernel);  // grid.cu keeps it within the device's
        kernel<<<dim3(b.total), kThreads, shared_bytes, c.stream>>>(*c.args, items, blocks_per_item, rows_per_block,
                                                                    c.rows, c.x, c.x_stride, static_cast<const T*>(g),
                                                                    g_layout, acc, exponents);
        if (words)
            TNN_GPU_CHECK_LAUNCH("grid_param_grad_shared_words_kernel");
        else
            TNN_GPU_CHECK_LAUNCH("grid_param_grad_shared_kernel");
    });
}

template <uint32_t D> Launchers make_launchers() {
    Launchers l;
    l.forward = [](const Call& c, DType dtype, uint32_t n_features, const void* params, void* y, int64_t y_stride,
                   bool vec_store, bool chunked, uint32_t threads) {
        dispatch_storage(dtype, n_features, [&](auto t, auto f) {
            using T = decltype(t);
            constexpr uint32_t F = decltype(f)::value;
            const uint32_t rows_per_block = threads / c.args->n_levels > 0 ? threads / c.args->n_levels : 1;
            const unsigned block = rows_per_block * c.args->n_levels;
            const dim3 grid(row_blocks("grid_forward_kernel", c.rows, rows_per_block, 1, block).total);
            const T* p = static_cast<const T*>(params);
            T* out = static_cast<T*>(y);
            const size_t table = c.args->n_levels * sizeof(LevelInfo);
            dispatch_bool(chunked, [&](auto chunk) {
                grid_forward_kernel<T, D, F, decltype(chunk)::value><<<grid, block, table, c.stream>>>(
                        *c.args, c.rows, rows_per_block, c.x, c.x_stride, p, out, y_stride, vec_store);
            });
            TNN_GPU_CHECK_LAUNCH("grid_forward_kernel");
        });
    };
    l.param_grad_float = [](const Call& c, DType dtype, uint32_t n_features, bool second, const LevelList& list,
                            const float* v, int64_t v_stride, const void* g, GradLayout g_layout, const FloatSink& sink) {
        launch_param_grad<D>(c, dtype, n_features, second, list, v, v_stride, g, g_layout, sink);
    };
    l.param_grad_fixed = [](const Call& c, DType dtype, uint32_t n_features, bool second, const LevelList& list,
                            const float* v, int64_t v_stride, const void* g, GradLayout g_layout, const FixedSink& sink) {
        launch_param_grad<D>(c, dtype, n_features, second, list, v, v_stride, g, g_layout, sink);
    };
    l.param_grad_fixed_lanes = [](const Call& c, DType dtype, uint32_t n_features, bool second, const LevelList& list,
                                  const float* v, int64_t v_stride, const void* g, GradLayout g_layout,
                                  unsigned long long* acc, const int* exponents) {
        if (list.count == 0) return;
        dispatch_storage(dtype, n_features, [&](auto t, auto f) {
            using T = decltype(t);
            constexpr uint32_t F = decltype(f)::value;
            const RowBlocks b = row_blocks("grid_param_grad_lanes_kernel", c.rows, kThreads / F, list.count, kThreads);
            const T* gt = static_cast<const T*>(g);
            dispatch_bool(second, [&](auto sec) {
                constexpr bool SECOND = decltype(sec)::value;
                grid_param_grad_lanes_kernel<T, D, F, SECOND><<<dim3(b.total), kThreads, 0, c.stream>>>(
                        *c.args, list, b.per_copy, c.rows, c.x, c.x_stride, v, v_stride, gt, g_layout, acc, exponents);
            });
            TNN_GPU_CHECK_LAUNCH("grid_param_grad_lanes_kernel");
        });
    };
    l.param_grad_fixed_lane_levels = [](const Call& c, DType dtype, uint32_t n_features, bool second,
                                        const LevelList& list, const float* v, int64_t v_stride, const void* g,
                                        GradLayout g_layout, unsigned long long* acc, const int* exponents,
                                        bool bulk) {
        bool bulk_launched = false;
        if (list.count == 0) return bulk_launched;
        dispatch_storage(dtype, n_features, [&](auto t, auto f) {
            using T = decltype(t);
            constexpr uint32_t F = decltype(f)::value;
            const uint32_t blocks = row_blocks("grid_param_grad_lanes_levels_kernel", c.rows, kThreads / F, 1, kThreads).total;
            const T* gt = static_cast<const T*>(g);
            // Bulk pairs: CUDA, F = 2, first order (grid.cu refuses Variant::det_bulk = 1 on AMD GPUs).
#if defined(TNN_WITH_CUDA)
            bulk_launched = F == 2 && bulk && !second;
#else
            (void)bulk;
#endif  // TNN_WITH_CUDA
            dispatch_bool(second, [&](auto sec) {
                constexpr bool SECOND = decltype(sec)::value;
                dispatch_bool(bulk_launched, [&](auto b) {
                    constexpr bool BULK = decltype(b)::value && F == 2 && !SECOND && kBulkPairsBuilt;
                    grid_param_grad_lanes_levels_kernel<T, D, F, SECOND, BULK><<<blocks, kThreads, 0, c.stream>>>(
                            *c.args, list, c.rows, c.x, c.x_stride, v, v_stride, gt, g_layout, acc, exponents);
                });
            });
            TNN_GPU_CHECK_LAUNCH("grid_param_grad_lanes_levels_kernel");
        });
        return bulk_launched;
    };
    l.param_grad_fixed_corners = [](const Call& c, DType dtype, uint32_t n_features, bool second,
                                    const LevelList& list, const float* v, int64_t v_stride, const void* g,
                                    GradLayout g_layout, unsigned long long* acc, const int* exponents) {
        bool launched = false;
        dispatch_storage(dtype, n_features, [&](auto t, auto f) {
            using T = decltype(t);
            constexpr uint32_t F = decltype(f)::value;
            if constexpr ((1u << D) * F <= kThreads) {
                launched = true;
                if (list.count == 0) return;
                const RowBlocks b = row_blocks("grid_param_grad_corner_fixed_kernel", c.rows, kThreads / ((1u << D) * F),
                                               list.count, kThreads);
                const T* gt = static_cast<const T*>(g);
                dispatch_bool(second, [&](auto sec) {
                    constexpr bool SECOND = decltype(sec)::value;
                    grid_param_grad_corner_fixed_kernel<T, D, F, SECOND><<<dim3(b.total), kThreads, 0, c.stream>>>(
                            *c.args, list, b.per_copy, c.rows, c.x, c.x_stride, v, v_stride, gt, g_layout, acc, exponents);
                });
                TNN_GPU_CHECK_LAUNCH("grid_param_grad_corner_fixed_kernel");
            }
        });
        return launched;
    };
    l.param_grad_float_corners = [](const Call& c, DType dtype, uint32_t n_features, bool second,
                                    const LevelList& list, const float* v, int64_t v_stride, const void* g,
                                    GradLayout g_layout, const FloatSink& sink) {
        if (list.count == 0) return;
        dispatch_storage(dtype, n_features, [&](auto t, auto f) {
            using T = decltype(t);
            constexpr uint32_t F = decltype(f)::value;
            const RowBlocks b = row_blocks("grid_param_grad_corner_kernel", c.rows, kThreads >> D, list.count, kThreads);
            const T* gt = static_cast<const T*>(g);
            dispatch_bool(second, [&](auto sec) {
                constexpr bool SECOND = decltype(sec)::value;
                grid_param_grad_corner_kernel<T, D, F, SECOND><<<dim3(b.total), kThreads, 0, c.stream>>>(
                        *c.args, list, b.per_copy, c.rows, c.x, c.x_stride, v, v_stride, gt, g_layout, sink);
            });
            TNN_GPU_CHECK_LAUNCH("grid_param_grad_corner_kernel");
        });
    };
    l.param_grad_float_corner_levels = [](const Call& c, DType dtype, uint32_t n_features, bool second,
                                          const LevelList& list, const float* v, int64_t v_stride, const void* g,
                                          GradLayout g_layout, const FloatSink& sink) {
        if (list.count == 0) return;
        dispatch_storage(dtype, n_features, [&](auto t, auto f) {
            using T = decltype(t);
            constexpr uint32_t F = decltype(f)::value;
            const uint32_t blocks = row_blocks("grid_param_grad_corner_levels_kernel", c.rows, kThreads >> D, 1, kThreads).total;
            const T* gt = static_cast<const T*>(g);
            dispatch_bool(second, [&](auto sec) {
                constexpr bool SECOND = decltype(sec)::value;
                grid_param_grad_corner_levels_kernel<T, D, F, SECOND><<<blocks, kThreads, 0, c.stream>>>(
                        *c.args, list, c.rows, c.x, c.x_stride, v, v_stride, gt, g_layout, sink);
            });
            TNN_GPU_CHECK_LAUNCH("grid_param_grad_corner_levels_kernel");
        });
    };
    l.param_grad_shared_float = [](const Call& c, DType dtype, uint32_t n_features, const SharedItems& items,
                                   uint32_t bpi, int64_t rows_per_block, size_t shared_bytes, const void* g,
                                   GradLayout g_layout, float* acc, bool split) {
        if (!split) {
            launch_param_grad_shared<D>(c, dtype, n_features, items, bpi, rows_per_block, shared_bytes, g, g_layout,
                                        acc, nullptr);
            return;
        }
        if (items.count == 0) return;
        dispatch_storage(dtype, n_features, [&](auto t, auto f) {
            using T = decltype(t);
            constexpr uint32_t F = decltype(f)::value;
            const auto kernel = grid_param_grad_shared_split_kernel<T, D, F>;
            const size_t bytes = shared_bytes + kSplitSharedExtra;  // grid.cu plans the slots within budget - extra
            const RowBlocks b = row_blocks("grid_param_grad_shared_split_kernel", c.rows, rows_per_block, items.count,
                                           kThreads);  // b.per_copy = bpi, as above
            if (bytes > kSharedBytes) opt_in_shared_memory(kernel);
            kernel<<<dim3(b.total), kThreads, bytes, c.stream>>>(
                    *c.args, items, bpi, rows_per_block, c.rows, c.x, c.x_stride, static_cast<const T*>(g), g_layout,
                    acc);
            TNN_GPU_CHECK_LAUNCH("grid_param_grad_shared_split_kernel");
        });
    };
    l.param_grad_shared_fixed = [](const Call& c, DType dtype, uint32_t n_features, const SharedItems& items,
                                   uint32_t bpi, int64_t rows_per_block, size_t shared_bytes, const void* g,
                                   GradLayout g_layout, unsigned long long* acc, const int* exponents, bool words) {
        launch_param_grad_shared<D>(c, dtype, n_features, items, bpi, rows_per_block, shared_bytes, g, g_layout, acc,
                                    exponents, words);
    };
    l.param_bound = [](const Call& c, DType dtype, uint32_t n_features, bool second, const LevelList& list,
                       const float* v, int64_t v_stride, const void* g, GradLayout g_layout, const BoundOut& out,
                       bool chunks) {
        BoundPass pass = BoundPass::none;
        unsigned int* bound_bits = out.bound_bits;
        if (list.count == 0) return pass;
        dispatch_storage(dtype, n_features, [&](auto t, auto f) {
            using T = decltype(t);
            constexpr uint32_t F = decltype(f)::value;
            const T* gt = static_cast<const T*>(g);
            if (second) {
                pass = BoundPass::second;
                const RowBlocks b = row_blocks("grid_param_bound_second_kernel", c.rows, kThreads, list.count, kThreads);
                grid_param_bound_second_kernel<T, D, F><<<dim3(b.total), kThreads, 0, c.stream>>>(
                        *c.args, list, b.per_copy, c.rows, c.x, c.x_stride, v, v_stride, gt, g_layout, bound_bits);
                TNN_GPU_CHECK_LAUNCH("grid_param_bound_second_kernel");
                return;
            }
            const BoundStaging st = bound_staging<T, F>(list, gt, g_layout);
            const bool no_weights = static_cast<Interpolation>(c.args->interpolation) != Interpolation::Smoothstep ||
                                    c.args->stochastic != 0;
            if (chunks && st.words != 0 && no_weights) {
                pass = BoundPass::chunks;
                const int64_t passes = gpu::ceil_div<int64_t>(c.rows, kThreads / (st.words / 4));
                const int64_t cap = out.max_blocks > 0 && out.max_blocks < passes ? out.max_blocks : passes;
                const auto blocks = static_cast<uint32_t>(cap > 0 ? cap : 1);
                grid_param_bound_chunks_kernel<T, D, F><<<dim3(blocks), kThreads, 0, c.stream>>>(
                    *c.args, st, list.count, c.rows, c.x, c.x_stride, gt, g_layout, out);
                TNN_GPU_CHECK_LAUNCH("grid_param_bound_chunks_kernel");
                return;
            }
            pass = st.words != 0 ? BoundPass::staged_rows : BoundPass::rows;
            const uint32_t blocks = row_blocks("grid_param_bound_rows_kernel", c.rows, kThreads, 1, kThreads).total;
            dispatch_bool(st.words != 0, [&](auto staged) {
                grid_param_bound_rows_kernel<T, D, F, decltype(staged)::value>
                    <<<dim3(blocks), kThreads, bound_staging_bytes(st), c.stream>>>(
                        *c.args, list, c.rows, c.x, c.x_stride, gt, g_layout, st, bound_bits);
            });
            TNN_GPU_CHECK_LAUNCH("grid_param_bound_rows_kernel");
        });
        return pass;
    };
    l.input_grad = [](const Call& c, DType dtype, uint32_t n_features, const void* g, int64_t g_stride,
                      const void* params, float* dx, int64_t dx_stride) {
        dispatch_storage(dtype, n_features, [&](auto t, auto f) {
            using T = decltype(t);
            constexpr uint32_t F = decltype(f)::value;
            const uint32_t blocks = row_blocks("grid_input_grad_kernel", c.rows, kThreads, 1, kThreads).total;
            grid_input_grad_kernel<T, D, F><<<dim3(blocks), kThreads, 0, c.stream>>>(
                    *c.args, c.rows, c.x, c.x_stride, static_cast<const T*>(g), g_stride, static_cast<const T*>(params),
                    dx, dx_stride);
            TNN_GPU_CHECK_LAUNCH("grid_input_grad_kernel");
        });
    };
    l.second_order_rows = [](const Call& c, DType dtype, uint32_t n_features, const float* v, int64_t v_stride,
                             const void* g, int64_t g_stride, const void* params, void* dgrad, int64_t dgrad_stride,
                             float* dx, int64_t dx_stride) {
        dispatch_storage(dtype, n_features, [&](auto t, auto f) {
            using T = decltype(t);
            constexpr uint32_t F = decltype(f)::value;
            const uint32_t blocks = row_blocks("grid_second_order_rows_kernel", c.rows, kThreads, 1, kThreads).total;
            grid_second_order_rows_kernel<T, D, F><<<dim3(blocks), kThreads, 0, c.stream>>>(
                    *c.args, c.rows, c.x, c.x_stride, v, v_stride, static_cast<const T*>(g), g_stride,
                    static_cast<const T*>(params), static_cast<T*>(dgrad), dgrad_stride, dx, dx_stride);
            TNN_GPU_CHECK_LAUNCH("grid_second_order_rows_kernel");
        });
    };
    return l;
}

// The table of each input dimension, compiled in instantiations/grid_d<D>.cu.
template <uint32_t D> const Launchers& launchers();
template <> const Launchers& launchers<1>();
template <> const Launchers& launchers<2>();
template <> const Launchers& launchers<3>();
template <> const Launchers& launchers<4>();
template <> const Launchers& launchers<5>();
template <> const Launchers& launchers<6>();
template <> const Launchers& launchers<7>();

}  // namespace tnn::grid_gpu
