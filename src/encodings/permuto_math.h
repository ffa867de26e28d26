// Permutohedral lattice maths of the Permuto encoding (Rosu & Behnke's PermutoSDF encoding; tcnn's
// `Permuto`), shared by the CPU reference (permuto.cpp) and the GPU kernels (permuto_kernels_gpu.h).
// Host+device and pure, property-tested on the CPU in tests/cpp/test_permuto.cpp.
//
// A level maps x in R^d to the hyperplane sum = 0 of R^(d+1) ("elevation"), where the permutohedral
// lattice A*_d tiles space with simplices of d+1 vertices. The point's simplex is found by rounding
// to the nearest lattice point of remainder 0 and sorting the residuals (their rank); its barycentric
// weights interpolate the d+1 vertices' feature vectors, which live in a hashed table per level. Cost:
// d+1 lookups and O(d^2) arithmetic, where a cube grid takes 2^d lookups. The weights are linear in x
// inside each simplex, so the Hessian of the encoding in x is zero there.
//
// Positions are fp32 (fp64 in the fp64 CPU oracle); the level's lattice (per-dimension scales and
// shifts) is fp32 for every precision, so the oracle evaluates the same function.
#pragma once

#include <tnn/dtype.h>
#include <tnn/rng.h>

#include "encodings/grid_math.h"
#include "encodings/hd_math.h"

#include <math.h>
#include <stdint.h>

namespace tnn::permuto {

constexpr uint32_t kMaxDims = 32;    // positions per row; arrays of the kernels are sized by it
constexpr uint32_t kMaxLevels = 32;  // tcnn's PERMUTO_MAX_N_LEVELS
// Shifts of a level's lattice are uniform in [-kShiftHalfRange, kShiftHalfRange) (tcnn: [-5, 5)), so that
// the levels' vertices do not line up (and neither do their hash collisions).
constexpr float kShiftHalfRange = 5.0f;
// The vertex hash multiplies by a base-convert factor: see grid::base_convert_hash.

// ---- a level's lattice -------------------------------------------------------------------------------

// Per-dimension factor 1 / sqrt((i + 1)(i + 2)) of the elevation (makes the lattice's cells equally
// sized along every input axis), rounded once from fp64 so that host and device agree bit for bit
// (tcnn multiplies by rsqrtf, within 2 ulp of this).
inline float dim_factor(uint32_t dim) {
    return static_cast<float>(1.0 / sqrt(static_cast<double>(dim + 1) * static_cast<double>(dim + 2)));
}

// The lattice scale of level l: base_scale * per_level_scale^l as tcnn evaluates it in fp32.
inline float level_scale(float base_scale, float per_level_scale, uint32_t level) {
    return base_scale * exp2f(static_cast<float>(level) * log2f(per_level_scale));
}

// The d shifts of level l: a PCG32 seeded with `seed`, advanced by l * d draws, then d draws mapped to
// [-5, 5) with one rounding (tcnn's fmaf(r, 10, -5)).
TNN_HD inline void level_shifts(uint32_t seed, uint32_t level, uint32_t n_dims, float* shift) {
    Pcg32 rng(seed);
    rng.advance(static_cast<uint64_t>(level) * n_dims);
    for (uint32_t i = 0; i < n_dims; ++i)
        shift[i] = hd::fma(rng.next_float(), 2.0f * kShiftHalfRange, -kShiftHalfRange);
}

// ---- locating a point ---------------------------------------------------------------------------------

// Elevation of lattice-space coordinates c (c_i = (x_i + shift_i) * scale_i) onto sum = 0 in R^(d+1):
//   e_0 = sum_i c_i,   e_j = sum_{i >= j} c_i - j c_{j-1}   (j = 1..d)
// Linear, with de_j/dc_i = [i >= j] - j [i == j - 1]. Written with fma so that CPU and GPU round alike.
template <typename F> TNN_HD inline void elevate(uint32_t n_dims, const F* c, F* e) {
    F sum = F(0);
    for (uint32_t j = n_dims; j > 0; --j) {
        e[j] = hd::fma(-static_cast<F>(j), c[j - 1], sum);
        sum += c[j - 1];
    }
    e[0] = sum;
}

// The simplex containing an elevated point: the remainder-0 lattice point rem0 it was rounded to
// (coordinates multiples of d + 1, possibly moved by d + 1 in one coordinate to make the point's
// residuals a valid ordering), the rank of each residual e_j - rem0_j in [0, d], and the residuals
// relative to the final rem0. CAP >= d is the array capacity.
template <typename F, uint32_t CAP> struct Simplex {
    F rest[CAP + 1];
    int32_t rem0[CAP + 1];
    int32_t rank[CAP + 1];
};

// floor(v) as int32, saturating (NaN -> 0): out-of-contract inputs (inf, huge) give garbage, never UB.
template <typename F> TNN_HD inline int32_t floor_to_int(F v) {
    return static_cast<int32_t>(grid::cell_coordinate(hd::floor(v)));
}

template <typename F, uint32_t CAP> TNN_HD inline void find_simplex(uint32_t n_dims, const F* e, Simplex<F, CAP>& s) {
    const uint32_t n1 = n_dims + 1;
    const F inv_n1 = F(1) / static_cast<F>(n1);
    // Nearest multiple of d + 1 per coordinate (ties down, as tcnn): quotient q_j; the residuals
    // e_j - rem0_j rank the coordinates. Sums in uint32: wrap-around is defined for any input.
    uint32_t q_sum = 0;
    F residual[CAP + 1];
    for (uint32_t j = 0; j <= n_dims; ++j) {
        const F v = e[j] * inv_n1;
        const F down = hd::floor(v), up = -hd::floor(-v);
        const bool take_up = up * static_cast<F>(n1) - e[j] < e[j] - down * static_cast<F>(n1);
        const int32_t q = floor_to_int(take_up ? up : down);
        s.rem0[j] = static_cast<int32_t>(static_cast<uint32_t>(q) * n1);
        q_sum += static_cast<uint32_t>(q);
        residual[j] = e[j] - static_cast<F>(s.rem0[j]);
        s.rank[j] = 0;
    }
    for (uint32_t i = 0; i < n_dims; ++i)
        for (uint32_t j = i + 1; j <= n_dims; ++j) {
            if (residual[i] < residual[j]) ++s.rank[i];
            else ++s.rank[j];
        }
    // The rounded point is off the plane by sum_j q_j (|sum| <= (d + 1) / 2 since sum_j e_j = 0): shift
    // every rank by it and wrap those that leave [0, d], moving that coordinate of rem0 by d + 1. The
    // remainder keeps the ranks in range for out-of-contract inputs too (it is the identity otherwise).
    const int32_t shift = static_cast<int32_t>(q_sum) % static_cast<int32_t>(n1);
    for (uint32_t j = 0; j <= n_dims; ++j) {
        int32_t r = s.rank[j] + shift;
        if (r < 0) {
            r += static_cast<int32_t>(n1);
            s.rem0[j] = static_cast<int32_t>(static_cast<uint32_t>(s.rem0[j]) + n1);
        } else if (r > static_cast<int32_t>(n_dims)) {
            r -= static_cast<int32_t>(n1);
            s.rem0[j] = static_cast<int32_t>(static_cast<uint32_t>(s.rem0[j]) - n1);
        }
        s.rank[j] = r;
        s.rest[j] = e[j] - static_cast<F>(s.rem0[j]);
    }
}

// x (d positions) -> lattice coordinates of one level -> elevated point -> its simplex.
// shift, scale: the level's d shifts and per-dimension scales (scale_l * dim_factor(i)).
template <typename F, uint32_t CAP>
TNN_HD inline void locate(uint32_t n_dims, const F* x, const float* shift, const float* scale, Simplex<F, CAP>& s) {
    F c[CAP], e[CAP + 1];
    for (uint32_t i = 0; i < n_dims; ++i) c[i] = (x[i] + static_cast<F>(shift[i])) * static_cast<F>(scale[i]);
    elevate(n_dims, c, e);
    find_simplex(n_dims, e, s);
}

// ---- weights, vertices ---------------------------------------------------------------------------------

// v[j] for the j whose rank is `r` (ranks are a permutation of 0..d): a sum of selected values rather than
// an indexed read, so that unrolled device code keeps its arrays in registers (an index computed at run
// time puts them in local memory). Exact: the other terms are zeros.
template <typename F> TNN_HD inline F of_rank(uint32_t n_dims, const int32_t* rank, const F* v, int32_t r) {
    F x = F(0);
    for (uint32_t j = 0; j <= n_dims; ++j) x += rank[j] == r ? v[j] : F(0);
    return x;
}

// Barycentric coordinates of the simplex's d + 1 vertices from the residuals r (Adams et al. 2010):
// the residual of the coordinate of rank m, over d + 1, adds to vertex d - m and is taken from vertex
// d + 1 - m, where vertex d + 1 is vertex 0 again; vertex 0 also gets `one`. With r the residuals and
// one = 1: the weights (>= 0, sum 1). Being linear, the same map takes residual tangents (one = 0) to
// weight tangents (sum 0). out: d + 1 values.
template <typename F>
TNN_HD inline void barycentric(uint32_t n_dims, const F* r, const int32_t* rank, F one, F* out) {
    const F inv_n1 = F(1) / static_cast<F>(n_dims + 1);
    F delta[kMaxDims + 1];
    for (uint32_t j = 0; j <= n_dims; ++j) delta[j] = r[j] * inv_n1;
    const int32_t n = static_cast<int32_t>(n_dims);
    out[0] = of_rank(n_dims, rank, delta, n) + (one - of_rank(n_dims, rank, delta, 0));
    for (uint32_t k = 1; k <= n_dims; ++k)
        out[k] = of_rank(n_dims, rank, delta, n - static_cast<int32_t>(k)) -
                 of_rank(n_dims, rank, delta, n + 1 - static_cast<int32_t>(k));
}

// Coordinate i of vertex k (the remainder-k lattice point of the simplex): rem0_i + k, minus d + 1
// where the coordinate's rank exceeds d - k. uint32: wraps instead of overflowing.
TNN_HD inline uint32_t vertex_coordinate(uint32_t n_dims, const int32_t* rem0, const int32_t* rank, uint32_t k,
                                         uint32_t i) {
    const uint32_t c = static_cast<uint32_t>(rem0[i]) + k;
    return rank[i] > static_cast<int32_t>(n_dims - k) ? c - (n_dims + 1) : c;
}

// Entry of vertex k in its level's table of `mask + 1` (a power of two) entries: the base-convert hash
// of the vertex's first d coordinates (the last is redundant: they sum to 0).
TNN_HD inline uint32_t vertex_entry(uint32_t n_dims, const int32_t* rem0, const int32_t* rank, uint32_t k,
                                    uint32_t mask) {
    uint32_t h = 0;
    for (uint32_t i = 0; i < n_dims; ++i) h = grid::base_convert_step(h, vertex_coordinate(n_dims, rem0, rank, k, i));
    return h & mask;
}

// ---- derivatives ---------------------------------------------------------------------------------------

// Tangent of the elevated point along dx = v (scale_i v_i in lattice space; shifts drop out), with v_i
// for i >= n_grad_dims taken as 0 (tcnn's max_input_grad_dims). de: d + 1 values.
template <typename F>
TNN_HD inline void elevated_tangent(uint32_t n_dims, uint32_t n_grad_dims, const F* v, const float* scale, F* de) {
    F c[kMaxDims];
    for (uint32_t i = 0; i < n_dims; ++i) c[i] = i < n_grad_dims ? v[i] * static_cast<F>(scale[i]) : F(0);
    elevate(n_dims, c, de);
}

// dW_k = sum_i v_i dw_k/dx_i (sum over k is 0): the weights' tangent along v. out: d + 1 values.
template <typename F, uint32_t CAP>
TNN_HD inline void weight_tangent(uint32_t n_dims, uint32_t n_grad_dims, const Simplex<F, CAP>& s, const F* v,
                                  const float* scale, F* out) {
    F de[CAP + 1];
    elevated_tangent(n_dims, n_grad_dims, v, scale, de);
    barycentric(n_dims, de, s.rank, F(0), out);
}

// G[k] for k = index, as of_rank: a selection, not an indexed read.
template <typename F> TNN_HD inline F at_index(uint32_t n_dims, const F* G, int32_t index) {
    F x = F(0);
    for (uint32_t k = 0; k <= n_dims; ++k) x += static_cast<int32_t>(k) == index ? G[k] : F(0);
    return x;
}

// dL/dx from G_k = dL/dw_k (d + 1 values): the adjoint of barycentric (dL/de_j = (G[d - rank_j] -
// G[d + 1 - rank_j]) / (d + 1), vertex d + 1 being vertex 0), then of elevate (dL/dc_i = sum_{j <= i}
// dL/de_j - (i + 1) dL/de_{i+1}), then dc_i/dx_i = scale_i. dx_i = 0 for i >= n_grad_dims.
template <typename F, uint32_t CAP>
TNN_HD inline void input_gradient(uint32_t n_dims, uint32_t n_grad_dims, const Simplex<F, CAP>& s, const F* G,
                                  const float* scale, F* dx) {
    const F inv_n1 = F(1) / static_cast<F>(n_dims + 1);
    const int32_t n = static_cast<int32_t>(n_dims);
    F de[CAP + 1];
    for (uint32_t j = 0; j <= n_dims; ++j) {
        const int32_t up = n - s.rank[j], down = s.rank[j] == 0 ? 0 : n + 1 - s.rank[j];
        de[j] = (at_index(n_dims, G, up) - at_index(n_dims, G, down)) * inv_n1;
    }
    F prefix = F(0);
    for (uint32_t i = 0; i < n_dims; ++i) {
        prefix += de[i];
        dx[i] = i < n_grad_dims ? static_cast<F>(scale[i]) * hd::fma(-static_cast<F>(i + 1), de[i + 1], prefix) : F(0);
    }
}

// The smallest barycentric weight of x at a level: how far x is from the faces of its simplex, where
// the encoding's x-derivative jumps (tests keep their points away from them).
template <typename F>
inline F min_weight(uint32_t n_dims, const F* x, const float* shift, const float* scale) {
    Simplex<F, kMaxDims> s;
    locate(n_dims, x, shift, scale, s);
    F w[kMaxDims + 1];
    barycentric(n_dims, s.rest, s.rank, F(1), w);
    F m = w[0];
    for (uint32_t k = 1; k <= n_dims; ++k) m = hd::fmin(m, w[k]);
    return m;
}

}  // namespace tnn::permuto
