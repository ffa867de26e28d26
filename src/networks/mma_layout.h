// Where each lane's registers sit in the tiles of NVIDIA's warp-level tensor-core instructions
// (mma.sync m16n8k16 with fp16/bf16 inputs and fp32 accumulators, ldmatrix.x4), as host+device
// functions. FullyFusedMLP's kernels address shared memory only through these; tests/cpp/
// test_fused_layout.cpp emulates one warp with them on the CPU and checks that it computes A*B.
#pragma once

#include <tnn/dtype.h>

#include <cstdint>

namespace tnn::mma {

// Source of every fact below: NVIDIA PTX ISA 9.0, sections 9.7.14.5.8 "Matrix Fragments for
// mma.m16n8k16 with floating point type" and 9.7.14.5.15 "ldmatrix" (figure 104). With
//   g = lane >> 2 (groupID), t = lane & 3 (threadID_in_group),
// and each 32-bit register holding two 16-bit elements, lower index in the low half:
//   A (16x16, row-major "row"):  reg r, half h -> row g + 8*(r & 1),  col 2t + h + 8*(r >> 1)
//   B (16x8,  "col"):            reg r, half h -> k   2t + h + 8*r,   n   g
//   C/D (16x8, fp32):            elem i        -> row g + 8*(i >> 1), col 2t + (i & 1)
//   ldmatrix.m8n8.x4.b16: lanes 8j..8j+7 give the addresses of rows 0..7 of matrix j (16 bytes
//   each, 16-byte aligned); register j of lane T then holds of matrix j the elements
//   (row T/4, cols 2(T%4), 2(T%4)+1), or with .trans (rows 2(T%4), 2(T%4)+1, col T/4).
constexpr int kTileM = 16, kTileN = 8, kTileK = 16;

struct Coord {
    int row, col;
};

TNN_HD constexpr int group_of(int lane) { return lane >> 2; }
TNN_HD constexpr int thread_in_group(int lane) { return lane & 3; }

TNN_HD constexpr Coord a_frag_coord(int lane, int reg, int half) {
    return {group_of(lane) + 8 * (reg & 1), 2 * thread_in_group(lane) + half + 8 * (reg >> 1)};
}
// (k, n) of B fragment element.
TNN_HD constexpr Coord b_frag_coord(int lane, int reg, int half) {
    return {2 * thread_in_group(lane) + half + 8 * reg, group_of(lane)};
}
TNN_HD constexpr Coord c_frag_coord(int lane, int elem) {
    return {group_of(lane) + 8 * (elem >> 1), 2 * thread_in_group(lane) + (elem & 1)};
}

// Element `half` of the register a lane receives from one 8x8 matrix, as (row, col) of the matrix
// as it is stored (row-major, one 16-byte row per address).
TNN_HD constexpr Coord ldmatrix_coord(int lane, int half, bool trans) {
    return trans ? Coord{2 * thread_in_group(lane) + half, group_of(lane)}
                 : Coord{group_of(lane), 2 * thread_in_group(lane) + half};
}

// The two ways our kernels cover a 16x16 block of a row-major array with one ldmatrix.x4; the
// function gives the (row, col) offset inside the block whose address `lane` supplies.
//  kRowsFirst: matrix j = rows 8*(j&1).., cols 8*(j>>1)..  Registers come out as
//     non-trans: the A fragment of a [m][k] block (a0..a3);
//     trans:     the B fragments of a [k][n] block: {b0, b1} of n-tile 0, then of n-tile 1.
//  kColsFirst: matrix j = rows 8*(j>>1).., cols 8*(j&1)..  Registers come out as
//     non-trans: the B fragments of an [n][k] block: {b0, b1} of n-tile 0, then of n-tile 1;
//     trans:     the A fragment of a [k][m] block (a0..a3).
enum class X4Pattern : uint8_t { kRowsFirst, kColsFirst };

TNN_HD constexpr Coord x4_matrix_origin(int matrix, X4Pattern p) {
    return p == X4Pattern::kRowsFirst ? Coord{8 * (matrix & 1), 8 * (matrix >> 1)}
                                      : Coord{8 * (matrix >> 1), 8 * (matrix & 1)};
}
TNN_HD constexpr Coord x4_lane_address(int lane, X4Pattern p) {
    return {x4_matrix_origin(lane >> 3, p).row + (lane & 7), x4_matrix_origin(lane >> 3, p).col};
}

// The register-resident layer handoff (FlashAttention-2's observation): the fp32 C fragments of
// output columns [16c, 16c+16) (n-tiles j = 0, 1) hold exactly the elements of the A fragment of
// k-step c of the next layer. A register r packs C tile (r >> 1), elements 2*(r & 1) and +1.
TNN_HD constexpr int handoff_c_tile(int a_reg) { return a_reg >> 1; }
TNN_HD constexpr int handoff_c_elem(int a_reg, int half) { return 2 * (a_reg & 1) + half; }

// Shared-memory rows of 16-bit tiles are padded by 8 elements (16 bytes): with a row of
// (16k + 8) elements the 8 rows an ldmatrix matrix reads start in 8 different 16-byte bank
// groups (row stride / 16 bytes is odd), so ldmatrix is conflict-free without a swizzle.
constexpr int kRowPad = 8;
TNN_HD constexpr int padded_row(int cols) { return cols + kRowPad; }

// The wgmma backward kernel's tiles instead (BackwardPlan::wgmma): rows of 64 16-bit elements (128
// bytes) without padding, the 16-byte chunk index of row r XORed with r % 8, each tile 1024-byte
// aligned: PTX's 128-byte swizzle, the layout wgmma reads from shared memory (PTX ISA 9.0, 9.7.15.5.1
// "Shared Memory Matrix Layout"; bench/wgmma_probe.cu checked it on the H200). Byte offset o = row *
// 128 + column bytes of the plain layout -> its place. The 8 rows an ldmatrix matrix reads keep their
// chunk column XOR distinct row residues: 8 different 16-byte bank groups, conflict-free too.
TNN_HD constexpr int swizzle128(int o) { return o ^ ((o >> 3) & 0x70); }

}  // namespace tnn::mma
