// Index, hash and interpolation maths of the multi-resolution grid encodings (tcnn's GridEncoding:
// HashGrid, DenseGrid, TiledGrid), shared by the CPU reference (grid.cpp) and the GPU kernels.
// Host+device; every function is a pure function of its arguments, property-tested on the CPU in
// tests/cpp/test_grid.cpp. Sizes, scales and hashes follow tcnn bit for bit (uint32 wrap-around
// included); positions are fp32 as in tcnn, or fp64 in the fp64 CPU reference.
#pragma once

#include <tnn/dtype.h>
#include <tnn/rng.h>

#include "encodings/hd_math.h"

#include <stdint.h>

namespace tnn::grid {

enum class GridType : uint8_t { Hash, Dense, Tiled };
enum class HashType : uint8_t { Prime, CoherentPrime, ReversedPrime, Rng, BaseConvert };
enum class Interpolation : uint8_t { Nearest, Linear, Smoothstep };

constexpr uint32_t kMaxDims = 7;      // the prime hashes have 7 factors (tcnn instantiates 2..4 dims)
constexpr uint32_t kMaxLevels = 128;  // tcnn's MAX_N_LEVELS

// ---- level geometry ------------------------------------------------------------------------------

// The fp32 scale of level `level`: positions map to pos = scale * x + 0.5. base_resolution counts
// vertices, hence the -1 (tcnn's grid_scale).
TNN_HD inline float grid_scale(uint32_t level, float log2_per_level_scale, uint32_t base_resolution) {
    return exp2f(static_cast<float>(level) * log2_per_level_scale) * static_cast<float>(base_resolution) - 1.0f;
}

// Vertices per dimension of a level (tcnn's grid_resolution); scales in (-1, 0] give 1.
TNN_HD inline uint32_t grid_resolution(float scale) {
    const float c = ceilf(scale);
    return (c > 0.0f ? static_cast<uint32_t>(c) : 0u) + 1u;
}

// base^exponent in uint64, saturating at 2^63 (enough to compare against 32-bit limits).
TNN_HD inline uint64_t pow_saturating(uint64_t base, uint32_t exponent) {
    uint64_t r = 1;
    for (uint32_t i = 0; i < exponent; ++i) {
        if (base != 0 && r > (uint64_t(1) << 63) / base) return uint64_t(1) << 63;
        r *= base;
    }
    return r;
}

// Entries (feature vectors of n_features_per_level values) that level storage holds, as tcnn sizes
// it: the dense vertex count resolution^d, capped at 2^31 - 1, rounded up to a multiple of 8; Dense
// keeps it, Tiled caps it at base_resolution^d, Hash at 2^log2_hashmap_size.
TNN_HD inline uint64_t level_entries(GridType type, uint32_t n_dims, uint32_t resolution, uint32_t base_resolution,
                                     uint32_t log2_hashmap_size) {
    const uint64_t dense = pow_saturating(resolution, n_dims);
    uint64_t entries = dense > (uint64_t(1) << 31) ? uint64_t(0x7FFFFFFF) : dense;
    entries = (entries + 7) / 8 * 8;
    if (type == GridType::Tiled) {
        const uint64_t tile = pow_saturating(base_resolution, n_dims);
        entries = tile < entries ? tile : entries;
    } else if (type == GridType::Hash) {
        const uint64_t table = uint64_t(1) << log2_hashmap_size;
        entries = table < entries ? table : entries;
    }
    return entries;
}

// ---- indexing ------------------------------------------------------------------------------------

// XOR of coordinate_i * factor_i in uint32 arithmetic (tcnn's lcg_hash family).
TNN_HD inline uint32_t xor_hash(uint32_t n_dims, const uint32_t* pos, const uint32_t* factors) {
    uint32_t r = 0;
    for (uint32_t i = 0; i < n_dims; ++i) r ^= pos[i] * factors[i];
    return r;
}

// The coordinates as base-2531011 digits, in uint32 arithmetic (tcnn's base_convert_hash): any number
// of dimensions, one coordinate per step from k = 0. The grids' BaseConvert hash and the Permuto
// encoding's vertex hash.
TNN_HD inline uint32_t base_convert_step(uint32_t k, uint32_t coordinate) { return (k + coordinate) * 2531011u; }
TNN_HD inline uint32_t base_convert_hash(uint32_t n_dims, const uint32_t* pos) {
    uint32_t k = 0;
    for (uint32_t i = 0; i < n_dims; ++i) k = base_convert_step(k, pos[i]);
    return k;
}

// tcnn's grid hashes. CoherentPrime (the default) multiplies x by 1, so neighbouring x share cache
// lines; Prime and ReversedPrime use seven large factors; Rng jumps a PCG32 seeded 1337 ahead by the
// coordinates packed into 64 bits; BaseConvert treats the coordinates as base-2531011 digits.
TNN_HD inline uint32_t grid_hash(HashType hash, uint32_t n_dims, const uint32_t* pos) {
    switch (hash) {
        case HashType::Prime: {
            const uint32_t f[kMaxDims] = {1958374283u, 2654435761u, 805459861u, 3674653429u,
                                          2097192037u, 1434869437u, 2165219737u};
            return xor_hash(n_dims, pos, f);
        }
        case HashType::CoherentPrime: {
            const uint32_t f[kMaxDims] = {1u,          2654435761u, 805459861u, 3674653429u,
                                          2097192037u, 1434869437u, 2165219737u};
            return xor_hash(n_dims, pos, f);
        }
        case HashType::ReversedPrime: {
            const uint32_t f[kMaxDims] = {2165219737u, 1434869437u, 2097192037u, 3674653429u,
                                          805459861u,  2654435761u, 1958374283u};
            return xor_hash(n_dims, pos, f);
        }
        case HashType::Rng: {
            const uint32_t bits_per_dim = 64 / n_dims;
            uint64_t step = 0;
            for (uint32_t i = 0; i < n_dims; ++i) step ^= static_cast<uint64_t>(pos[i]) << (i * bits_per_dim);
            Pcg32 rng(1337);
            rng.advance(step);
            return rng.next_uint();
        }
        case HashType::BaseConvert: return base_convert_hash(n_dims, pos);
    }
    return 0;
}

// The largest resolution r with r^d <= 2^32 - 1, per d (tcnn's MAX_BASES): the dense index of a
// finer level would overflow, so tcnn treats its stride as 0xFFFFFFFF.
TNN_HD inline uint32_t max_dense_resolution(uint32_t n_dims) {
    const uint32_t max_bases[kMaxDims + 1] = {0u, 0xFFFFFFFFu, 0xFFFFu, 0x659u, 0xFFu, 0x54u, 0x28u, 0x17u};
    return max_bases[n_dims];
}

// Entry index in [0, level_size) of the vertex at integer coordinates pos (tcnn's grid_index):
// the dense index (x fastest) when the level stores every vertex, else (Hash only) the hash; then
// modulo level_size, which wraps Tiled levels and the upper vertex at x = 1.
TNN_HD inline uint32_t grid_index(GridType type, HashType hash, uint32_t n_dims, uint32_t level_size,
                                  uint32_t resolution, const uint32_t* pos) {
    uint32_t stride = 1, index = 0;
    if (resolution <= max_dense_resolution(n_dims)) {
        for (uint32_t d = 0; d < n_dims; ++d) {
            index += pos[d] * stride;
            stride *= resolution;
        }
    } else {
        stride = 0xFFFFFFFFu;
    }
    if (type == GridType::Hash && level_size < stride) index = grid_hash(hash, n_dims, pos);
    return index % level_size;
}

// ---- positions and interpolation weights -------------------------------------------------------------

// float -> int32 as the GPU converts (saturating, NaN -> 0), then reinterpreted as uint32: tcnn's
// (uint32_t)(int)floorf(pos), without C++'s undefined behaviour out of range.
template <typename F> TNN_HD inline uint32_t cell_coordinate(F floored) {
#if defined(__CUDA_ARCH__)
    // The conversion instruction itself saturates and turns NaN into 0: one instruction instead of the
    // three tests below, which cost the gradient kernels about a tenth of their instructions.
    if constexpr (sizeof(F) == 4) return static_cast<uint32_t>(__float2int_rz(floored));
    else return static_cast<uint32_t>(__double2int_rz(floored));
#else
    if (!(floored == floored)) return 0u;
    if (floored >= F(2147483647.0)) return 0x7FFFFFFFu;
    if (floored <= F(-2147483648.0)) return 0x80000000u;
    return static_cast<uint32_t>(static_cast<int32_t>(floored));
#endif  // __CUDA_ARCH__
}

// Interpolation weight w(t) of the upper vertex for the local coordinate t in [0, 1), and its first
// and second derivatives in t. Nearest uses no weights (its outputs are piecewise constant).
template <typename F> TNN_HD inline void interpolation_weight(Interpolation interp, F t, F* w, F* dw, F* d2w) {
    if (interp == Interpolation::Smoothstep) {
        *w = t * t * (F(3) - F(2) * t);
        *dw = F(6) * t * (F(1) - t);
        *d2w = F(6) - F(12) * t;
    } else {
        *w = t;
        *dw = F(1);
        *d2w = F(0);
    }
}

// One position coordinate at one level: pos = fma(scale, x, 0.5) (the 0.5 offset staggers levels
// against each other), the cell's lower vertex floor(pos), and the interpolation weight of the upper
// vertex with its derivatives with respect to x (chain rule: d/dx = scale * d/dt).
template <typename F> struct AxisWeight {
    uint32_t cell;
    F w, dw_dx, d2w_dx2;
};

template <typename F> TNN_HD inline F axis_position(F x, F scale) { return hd::fma(scale, x, F(0.5)); }

template <typename F> TNN_HD inline AxisWeight<F> axis_weight(F x, F scale, Interpolation interp) {
    const F pos = axis_position(x, scale);
    const F fl = hd::floor(pos);
    AxisWeight<F> a;
    a.cell = cell_coordinate(fl);
    F w, dw, d2w;
    interpolation_weight(interp, pos - fl, &w, &dw, &d2w);
    a.w = w;
    a.dw_dx = scale * dw;
    a.d2w_dx2 = scale * scale * d2w;
    return a;
}

// Corner c of a cell is a bit mask: bit d set means the upper vertex along dimension d.
TNN_HD inline void corner_position(uint32_t n_dims, const uint32_t* cell, uint32_t corner, uint32_t* out) {
    for (uint32_t d = 0; d < n_dims; ++d) out[d] = cell[d] + ((corner >> d) & 1u);
}

// The corner's factor along dimension d: w or 1 - w, and its derivatives in x_d.
template <typename F> TNN_HD inline F corner_factor(const AxisWeight<F>& a, bool upper) {
    return upper ? a.w : F(1) - a.w;
}
template <typename F> TNN_HD inline F corner_factor_dx(const AxisWeight<F>& a, bool upper) {
    return upper ? a.dw_dx : -a.dw_dx;
}
template <typename F> TNN_HD inline F corner_factor_dx2(const AxisWeight<F>& a, bool upper) {
    return upper ? a.d2w_dx2 : -a.d2w_dx2;
}

// Interpolation weight W_c = prod_d factor_d of corner c.
template <typename F> TNN_HD inline F corner_weight(uint32_t n_dims, const AxisWeight<F>* a, uint32_t corner) {
    F W = F(1);
    for (uint32_t d = 0; d < n_dims; ++d) W *= corner_factor(a[d], (corner >> d) & 1u);
    return W;
}

// dW_c/dx_g for every g.
template <typename F>
TNN_HD inline void corner_weight_gradient(uint32_t n_dims, const AxisWeight<F>* a, uint32_t corner, F* grad) {
    for (uint32_t g = 0; g < n_dims; ++g) {
        F p = corner_factor_dx(a[g], (corner >> g) & 1u);
        for (uint32_t d = 0; d < n_dims; ++d)
            if (d != g) p *= corner_factor(a[d], (corner >> d) & 1u);
        grad[g] = p;
    }
}

// A corner's value as the x-derivatives use it: V_c - V_0, corner 0's value taken off. The corner
// weights sum to 1 at every x, so every derivative of them sums to 0 over the corners, and
// sum_c dW_c V_c = sum_c dW_c (V_c - V_0). Neighbouring values are close (a smooth field), so the
// differences are small and exact where they are within a factor 2 (Sterbenz); summed as V_c the
// terms are large, of both signs, and cancel, losing bits of the result (tcnn takes differences along
// each dimension, V_hi - V_lo, for the same reason).
template <typename F> TNN_HD inline F value_step(F value, F value_at_corner0) { return value - value_at_corner0; }

// out_h = sum_g v_g d2W_c/(dx_g dx_h): the Hessian of the corner weight applied to a direction v
// (the second-order pass's dL'/d(dL/dx)). Off-diagonal terms come from the product structure and
// exist for Linear too; the diagonal needs w'' (zero for Linear).
template <typename F> TNN_HD inline void corner_weight_hessian_dot(uint32_t n_dims, const AxisWeight<F>* a,
                                                                   uint32_t corner, const F* v, F* out) {
    for (uint32_t h = 0; h < n_dims; ++h) {
        F sum = F(0);
        for (uint32_t g = 0; g < n_dims; ++g) {
            F p = g == h ? corner_factor_dx2(a[h], (corner >> h) & 1u)
                         : corner_factor_dx(a[g], (corner >> g) & 1u) * corner_factor_dx(a[h], (corner >> h) & 1u);
            for (uint32_t d = 0; d < n_dims; ++d)
                if (d != g && d != h) p *= corner_factor(a[d], (corner >> d) & 1u);
            sum += v[g] * p;
        }
        out[h] = sum;
    }
}

// ---- coarse-to-fine ----------------------------------------------------------------------------

// tcnn's set_max_level: with max_level a fraction of the levels, level l is switched off (zero
// output, no gradient) when l >= max_level * n_levels + 1e-3 (fp32, evaluated as tcnn does).
TNN_HD inline bool level_active(uint32_t level, float max_level, uint32_t n_levels, uint32_t n_features_per_level) {
    const float limit =
        (max_level * static_cast<float>(n_levels * n_features_per_level)) / static_cast<float>(n_features_per_level);
    return !(static_cast<float>(level) >= limit + 1e-3f);
}

// The levels that are on form a prefix [0, n) (level_active is monotone in the level): its length,
// which the GPU passes take instead of max_level.
inline uint32_t n_active_levels(float max_level, uint32_t n_levels, uint32_t n_features_per_level) {
    uint32_t n = 0;
    while (n < n_levels && level_active(n, max_level, n_levels, n_features_per_level)) ++n;
    return n;
}

// ---- stochastic interpolation ------------------------------------------------------------------

// tcnn's random_val(1337, i + level * n_rows): the uniform sample that picks one corner per
// element and level in the backward pass when stochastic_interpolation is on.
TNN_HD inline float stochastic_sample(uint32_t element_and_level) {
    Pcg32 rng((uint64_t(1337) << 32) | element_and_level);
    return rng.next_float();
}

}  // namespace tnn::grid
