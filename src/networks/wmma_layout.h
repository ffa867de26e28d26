// Where each lane's elements sit in the tiles of AMD's gfx12 (RDNA4) wave32 WMMA instructions
// (v_wmma_f32_16x16x16_f16 / _bf16: A 16x16, B 16x16 in 16 bits, C/D 16x16 fp32), as host+device
// functions. FullyFusedMLP's gfx12 kernels (fully_fused_mlp_gfx12.cuh) address their operands only
// through these; tests/cpp/test_wmma_layout.cpp emulates one wavefront with them on the CPU and
// checks that the kernels' data flow computes the reference MLP.
#pragma once

#include <tnn/dtype.h>

#include <cstdint>

namespace tnn::wmma {

// Source of the facts below: AMD GPUOpen, "Using the Matrix Cores of AMD RDNA 4 architecture GPUs"
// (T. Harada, A. Yoshimura, 2025), which describes the gfx12 operand layout of
// __builtin_amdgcn_wmma_*_16x16x16_*_w32_gfx12 with laneWrapped = lane % 16, laneGroup = lane / 16
// and 8 elements per lane, with the RDNA3 duplication of A/B and the even/odd row split of C/D both
// removed; the same layout is in AMD's RDNA4 ISA reference guide (WMMA VGPR layouts) and in LLVM's
// AMDGPU backend (the _gfx12 builtins take v8f16 / v8bf16 / v8f32 per lane). With
//   r = lane % 16, g = lane / 16 (0 or 1), element e = 0..7 of the lane's 8-element vector
//   (16-bit operands: two per VGPR, e = 2v + h in VGPR v, half h; fp32 C/D: VGPR e):
//   A (M x K = 16 x 16):  element e -> row m = r,          col k = 8g + e
//   B (K x N = 16 x 16):  element e -> row k = 8g + e,     col n = r
//   C, D (M x N, fp32):   element e -> row m = 8g + e,     col n = r
// So a lane's A elements are 8 consecutive k of one row of a row-major [M][K] array, its B elements
// 8 consecutive k of one row of a row-major [N][K] array (B^T), and its D elements 8 consecutive m
// of one column: D of a 16 x 16 product has exactly the shape of the B operand of a product whose
// K is that M. FullyFusedMLP uses this: it computes Z^T = W X^T (M = output features, N = batch
// rows), so a layer's activations leave the WMMA as the next layer's B operand, in registers.
// gfx11 (RDNA3) differs (A and B duplicated in both lane halves, C/D rows interleaved): nothing here
// applies to it.
constexpr int kLanes = 32;  // the wavefront the layout is defined for (wave32)
constexpr int kTile = 16;   // M = N = K
constexpr int kElems = 8;   // elements per lane of every operand

struct Coord {
    int row, col;
};

TNN_HD constexpr int lane_row(int lane) { return lane % 16; }   // r
TNN_HD constexpr int lane_half(int lane) { return lane / 16; }  // g

TNN_HD constexpr Coord a_coord(int lane, int e) { return {lane_row(lane), 8 * lane_half(lane) + e}; }
TNN_HD constexpr Coord b_coord(int lane, int e) { return {8 * lane_half(lane) + e, lane_row(lane)}; }
TNN_HD constexpr Coord c_coord(int lane, int e) { return {8 * lane_half(lane) + e, lane_row(lane)}; }

// ---- How the kernels use the maps, as (row, col) in the arrays they read. Each returns the first
// of the lane's 8 elements; the others follow contiguously (along the array's row) exactly where
// the "contiguous" functions below say so, which the tests check against the maps above.

// A = rows [m0, m0+16) x cols [k0, k0+16) of a row-major [M][K] array (a weight matrix W[out][in]):
// 8 contiguous elements of row m0 + r.
TNN_HD constexpr Coord a_from_row_major(int lane, int m0, int k0) {
    return {m0 + a_coord(lane, 0).row, k0 + a_coord(lane, 0).col};
}
// B = X^T for X a row-major [N][K] array (activations [batch][features]): 8 contiguous elements of
// row n0 + r of X.
TNN_HD constexpr Coord b_from_transposed(int lane, int k0, int n0) {
    return {n0 + b_coord(lane, 0).col, k0 + b_coord(lane, 0).row};
}
// D = rows [m0, m0+16) x cols [n0, n0+16) of Z^T, stored into Z, a row-major [N][M] array
// ([batch][features]): 8 contiguous elements of row n0 + r of Z.
TNN_HD constexpr Coord d_to_transposed(int lane, int m0, int n0) {
    return {n0 + c_coord(lane, 0).col, m0 + c_coord(lane, 0).row};
}
// A = Y^T for Y a row-major [K][M] array: the backward chain reads W[out][in] as A = W^T (K = out,
// M = in), the weight gradient reads dZ[batch][out] as A = dZ^T (K = batch, M = out). Element e is
// Y[k0 + 8g + e][m0 + r]: one column of Y, 8 elements a row apart.
TNN_HD constexpr Coord a_from_transposed(int lane, int m0, int k0, int e) {
    return {k0 + a_coord(lane, e).col, m0 + a_coord(lane, e).row};
}
// B = rows [k0, k0+16) x cols [n0, n0+16) of a row-major [K][N] array (the weight gradient reads
// activations [batch][features] as B with K = batch): element e is at row k0 + 8g + e, col n0 + r.
TNN_HD constexpr Coord b_from_row_major(int lane, int k0, int n0, int e) {
    return {k0 + b_coord(lane, e).row, n0 + b_coord(lane, e).col};
}

// The bias gradient of output features [m0, m0+16) is the row sum of dZ^T: a WMMA against a B of
// ones puts it in every column; the lanes holding column 0 (r == 0: lanes 0 and 16) own it.
TNN_HD constexpr bool holds_column0(int lane) { return lane_row(lane) == 0; }

}  // namespace tnn::wmma

// ---- FullyFusedMLP's parameter and shared-memory offsets (ffm::Shape) for the gfx12 kernels, as
// force-inlined functions of Shape's fields. AMDGPU inlines a callee of several basic blocks that
// has no inline hint only into callers of at most amdgpu-inline-max-bb blocks, which the kernels
// exceed; an out-of-line Shape method would then take the address of the kernel arguments (a copy
// in scratch memory). tests/cpp/test_wmma_layout.cpp checks that each equals Shape's own method.
#include "networks/fully_fused_mlp.h"

namespace tnn::wmma {

#if defined(__HIPCC__) || defined(__CUDACC__)
#define TNN_WMMA_INLINE __host__ __device__ __forceinline__
#else
#define TNN_WMMA_INLINE inline
#endif  // __HIPCC__ || __CUDACC__

struct Geometry {
    const ffm::Shape& s;
    TNN_WMMA_INLINE int layer_in(int l) const { return l == 0 ? s.pin : s.width; }
    TNN_WMMA_INLINE int layer_out(int l) const { return l == s.n_hidden ? s.pout : s.width; }
    TNN_WMMA_INLINE int64_t weight_offset(int l) const {
        return l == 0 ? 0 : int64_t(s.width) * s.pin + int64_t(l - 1) * s.width * s.width;
    }
    TNN_WMMA_INLINE int64_t n_matrix_params() const { return weight_offset(s.n_hidden) + int64_t(s.pout) * s.width; }
    TNN_WMMA_INLINE int64_t bias_offset(int l) const { return n_matrix_params() + int64_t(l) * s.width; }
    TNN_WMMA_INLINE int64_t n_params() const {
        return s.bias ? n_matrix_params() + int64_t(s.n_hidden) * s.width + s.pout : n_matrix_params();
    }
    TNN_WMMA_INLINE int64_t slot_bytes(int l) const {
        return int64_t(layer_out(l)) * (layer_in(l) + 8) * 2 + (s.bias ? int64_t(layer_out(l)) * 4 : 0);
    }
    TNN_WMMA_INLINE int64_t slot_offset(int l) const { return l == 0 ? 0 : slot_bytes(0) + int64_t(l - 1) * slot_bytes(1); }
    // Where the reduction (fully_fused_mlp_reduce_kernel) reads parameter `param` of the per-block
    // weight-gradient partials: Shape::fragment_index.
    TNN_WMMA_INLINE int64_t fragment_index(int64_t param) const {
        const int64_t nm = n_matrix_params(), w1 = weight_offset(1), wl = weight_offset(s.n_hidden);
        if (param >= nm) return param;
        const int l = param < w1 ? 0 : param >= wl ? s.n_hidden : 1 + static_cast<int>((param - w1) / (int64_t(s.width) * s.width));
        const int in = layer_in(l);
        const int64_t local = param - weight_offset(l);
        const int row = static_cast<int>(local / in), col = static_cast<int>(local % in);
        const int lane = 4 * (row % 8) + (col % 8) / 2, elem = 2 * ((row % 16) / 8) + col % 2;
        return weight_offset(l) + ((int64_t(row / 16) * (in / 8) + col / 8) * 32 + lane) * 4 + elem;
    }
};

}  // namespace tnn::wmma
