// FullyFusedMLP's index maths on the CPU: one warp's ldmatrix / mma.sync m16n8k16 data movement is
// emulated with the lane maps of mma_layout.h (the ones the kernels use) and must compute the
// products the kernels rely on; plus the parameter / shared-memory layouts and the planner.
#include "networks/fully_fused_mlp.h"
#include "networks/mma_layout.h"
#include "test_util.h"

#include <array>
#include <set>
#include <tuple>

using namespace tnn;
using mma::Coord;
using mma::X4Pattern;

namespace {

constexpr int kLanes = 32;  // the warp the PTX fragment layouts are defined for

// A row-major 2-D array of 16-bit elements in "shared memory" (values kept as floats: the tests use
// small integers, so every product and sum below is exact).
struct Smem {
    int rows, stride;
    std::vector<float> v;
    Smem(int r, int cols) : rows(r), stride(mma::padded_row(cols)), v(static_cast<size_t>(r) * stride, 0.0f) {}
    float& at(int r, int c) { return v[static_cast<size_t>(r) * stride + c]; }
};

using Regs4 = std::array<std::array<std::array<float, 2>, 4>, kLanes>;  // [lane][register][half]

// ldmatrix.x4 over the 16x16 block at (r0, c0), each lane supplying the address x4_lane_address
// gives it (as the kernels do through x4_offset); register j of lane T receives matrix j.
Regs4 ldmatrix_x4(Smem& m, int r0, int c0, X4Pattern p, bool trans) {
    std::array<int, kLanes> row_start{};
    for (int lane = 0; lane < kLanes; ++lane) {
        const Coord a = mma::x4_lane_address(lane, p);
        row_start[lane] = (r0 + a.row) * m.stride + c0 + a.col;
        EXPECT_EQ(row_start[lane] * 2 % 16, 0) << "ldmatrix row addresses must be 16-byte aligned";
    }
    Regs4 out{};
    for (int lane = 0; lane < kLanes; ++lane)
        for (int j = 0; j < 4; ++j)
            for (int h = 0; h < 2; ++h) {
                const Coord e = mma::ldmatrix_coord(lane, h, trans);
                out[lane][j][h] = m.v[row_start[8 * j + e.row] + e.col];
            }
    return out;
}

// mma.sync m16n8k16: rebuilds A (16x16) and B (16x8) from the lanes' registers by the fragment maps
// (every element must be supplied exactly once), multiplies, and adds into the C fragments.
void mma_16816(std::array<std::array<float, 4>, kLanes>& c, const Regs4& a, const std::array<std::array<std::array<float, 2>, 2>, kLanes>& b) {
    float A[16][16], B[16][8];
    int seen_a[16][16] = {}, seen_b[16][8] = {};
    for (int lane = 0; lane < kLanes; ++lane)
        for (int r = 0; r < 4; ++r)
            for (int h = 0; h < 2; ++h) {
                const Coord x = mma::a_frag_coord(lane, r, h);
                A[x.row][x.col] = a[lane][r][h];
                ++seen_a[x.row][x.col];
                if (r < 2) {
                    const Coord y = mma::b_frag_coord(lane, r, h);
                    B[y.row][y.col] = b[lane][r][h];
                    ++seen_b[y.row][y.col];
                }
            }
    for (int i = 0; i < 16; ++i)
        for (int k = 0; k < 16; ++k) ASSERT_EQ(seen_a[i][k], 1);
    for (int k = 0; k < 16; ++k)
        for (int n = 0; n < 8; ++n) ASSERT_EQ(seen_b[k][n], 1);
    for (int lane = 0; lane < kLanes; ++lane)
        for (int i = 0; i < 4; ++i) {
            const Coord x = mma::c_frag_coord(lane, i);
            float s = 0;
            for (int k = 0; k < 16; ++k) s += A[x.row][k] * B[k][x.col];
            c[lane][i] += s;
        }
}

using BFrag = std::array<std::array<std::array<float, 2>, 2>, kLanes>;
// The two B fragments (n-tiles 0 and 1) an x4 load delivers in registers {0, 1} and {2, 3}.
BFrag b_tile(const Regs4& r, int n_tile) {
    BFrag b{};
    for (int lane = 0; lane < kLanes; ++lane) {
        b[lane][0] = r[lane][2 * n_tile];
        b[lane][1] = r[lane][2 * n_tile + 1];
    }
    return b;
}

using CFrag = std::array<std::array<float, 4>, kLanes>;
// The value a set of C fragments (n-tiles of 8 columns, starting at column 0) puts at (row, col).
float c_value(const std::vector<CFrag>& tiles, int row, int col) {
    for (int lane = 0; lane < kLanes; ++lane)
        for (int i = 0; i < 4; ++i) {
            const Coord x = mma::c_frag_coord(lane, i);
            if (x.row == row && x.col == col % 8) return tiles[col / 8][lane][i];
        }
    ADD_FAILURE() << "no lane holds (" << row << ", " << col << ")";
    return 0;
}

Smem random_matrix(int rows, int cols, uint64_t seed) {
    Smem m(rows, cols);
    Pcg32 rng(seed);
    for (int r = 0; r < rows; ++r)
        for (int c = 0; c < cols; ++c) m.at(r, c) = static_cast<float>(static_cast<int>(rng.next_float() * 7.0f) - 3);
    return m;
}

}  // namespace

TEST(FusedLayout, FragmentMapsAreBijections) {
    std::set<std::pair<int, int>> a, b, c;
    for (int lane = 0; lane < kLanes; ++lane) {
        for (int r = 0; r < 4; ++r)
            for (int h = 0; h < 2; ++h) {
                const Coord x = mma::a_frag_coord(lane, r, h);
                EXPECT_TRUE(x.row >= 0 && x.row < 16 && x.col >= 0 && x.col < 16);
                a.insert({x.row, x.col});
            }
        for (int r = 0; r < 2; ++r)
            for (int h = 0; h < 2; ++h) {
                const Coord x = mma::b_frag_coord(lane, r, h);
                EXPECT_TRUE(x.row >= 0 && x.row < 16 && x.col >= 0 && x.col < 8);
                b.insert({x.row, x.col});
            }
        for (int i = 0; i < 4; ++i) {
            const Coord x = mma::c_frag_coord(lane, i);
            EXPECT_TRUE(x.row >= 0 && x.row < 16 && x.col >= 0 && x.col < 8);
            c.insert({x.row, x.col});
        }
    }
    EXPECT_EQ(a.size(), 256u);
    EXPECT_EQ(b.size(), 128u);
    EXPECT_EQ(c.size(), 128u);
}

TEST(FusedLayout, PaddedRowsMakeLdmatrixConflictFree) {
    // The 8 rows of each 8x8 matrix must start in 8 distinct 16-byte groups of the 128-byte bank
    // window, for every row width the kernels use.
    for (int cols : {16, 32, 48, 64, 80, 128, 256, 1008})
        for (X4Pattern p : {X4Pattern::kRowsFirst, X4Pattern::kColsFirst})
            for (int j = 0; j < 4; ++j) {
                std::set<int> groups;
                for (int r = 0; r < 8; ++r) {
                    const Coord a = mma::x4_lane_address(8 * j + r, p);
                    const int byte = (a.row * mma::padded_row(cols) + a.col) * 2;
                    groups.insert(byte % 128 / 16);
                }
                EXPECT_EQ(groups.size(), 8u) << "cols " << cols << " matrix " << j;
            }
}

TEST(FusedLayout, ForwardLayerChunkComputesXTimesWTransposed) {
    // z[16 rows][16 cols of chunk c] = X[16][K] W[out][K]^T: A = X tile (kRowsFirst, ldmatrix),
    // B = [out][in] weight slot (kColsFirst, ldmatrix), as hidden_chunk / output_chunk do.
    const int K = 48, out = 32;
    Smem x = random_matrix(16, K, 1), w = random_matrix(out, K, 2);
    for (int c = 0; c < out / 16; ++c) {
        std::vector<CFrag> acc(2, CFrag{});
        for (int k = 0; k < K / 16; ++k) {
            const Regs4 a = ldmatrix_x4(x, 0, 16 * k, X4Pattern::kRowsFirst, false);
            const Regs4 b = ldmatrix_x4(w, 16 * c, 16 * k, X4Pattern::kColsFirst, false);
            mma_16816(acc[0], a, b_tile(b, 0));
            mma_16816(acc[1], a, b_tile(b, 1));
        }
        for (int r = 0; r < 16; ++r)
            for (int n = 0; n < 16; ++n) {
                float want = 0;
                for (int k = 0; k < K; ++k) want += x.at(r, k) * w.at(16 * c + n, k);
                ASSERT_EQ(c_value(acc, r, n), want) << "chunk " << c << " (" << r << ", " << n << ")";
            }
    }
}

TEST(FusedLayout, RegisterHandoffFeedsTheNextLayer) {
    // Layer 1's C fragments, packed by handoff_c_tile / handoff_c_elem, must be the A fragments of
    // layer 2: then z2 = (X W1^T) W2^T without any shared-memory round trip.
    const int K = 32, width = 32, out = 16;
    Smem x = random_matrix(16, K, 3), w1 = random_matrix(width, K, 4), w2 = random_matrix(out, width, 5);
    std::vector<Regs4> h(width / 16);  // A fragments of layer 2, k-step c
    for (int c = 0; c < width / 16; ++c) {
        std::vector<CFrag> acc(2, CFrag{});
        for (int k = 0; k < K / 16; ++k) {
            const Regs4 a = ldmatrix_x4(x, 0, 16 * k, X4Pattern::kRowsFirst, false);
            const Regs4 b = ldmatrix_x4(w1, 16 * c, 16 * k, X4Pattern::kColsFirst, false);
            mma_16816(acc[0], a, b_tile(b, 0));
            mma_16816(acc[1], a, b_tile(b, 1));
        }
        for (int lane = 0; lane < kLanes; ++lane)
            for (int r = 0; r < 4; ++r)
                for (int hh = 0; hh < 2; ++hh) {
                    h[c][lane][r][hh] = acc[mma::handoff_c_tile(r)][lane][mma::handoff_c_elem(r, hh)];
                    // The stash writes the packed pair at a_frag_coord(lane, r, 0) + (0, hh).
                    const Coord at = mma::a_frag_coord(lane, r, hh);
                    float want = 0;
                    for (int k = 0; k < K; ++k) want += x.at(at.row, k) * w1.at(16 * c + at.col, k);
                    ASSERT_EQ(h[c][lane][r][hh], want);
                }
    }
    std::vector<CFrag> acc(2, CFrag{});
    for (int k = 0; k < width / 16; ++k) {
        const Regs4 b = ldmatrix_x4(w2, 0, 16 * k, X4Pattern::kColsFirst, false);
        mma_16816(acc[0], h[k], b_tile(b, 0));
        mma_16816(acc[1], h[k], b_tile(b, 1));
    }
    for (int r = 0; r < 16; ++r)
        for (int n = 0; n < out; ++n) {
            float want = 0;
            for (int j = 0; j < width; ++j) {
                float z1 = 0;
                for (int k = 0; k < K; ++k) z1 += x.at(r, k) * w1.at(j, k);
                want += z1 * w2.at(n, j);
            }
            ASSERT_EQ(c_value(acc, r, n), want) << "(" << r << ", " << n << ")";
        }
}

TEST(FusedLayout, BackwardChainComputesDzTimesW) {
    // dL/da[16][in] = dz[16][out] W[out][in]: A = dz tile (kRowsFirst), B = the same [out][in] slot
    // read with ldmatrix.trans in the kRowsFirst pattern, as the backward chain does.
    const int out = 32, in = 48;
    Smem dz = random_matrix(16, out, 6), w = random_matrix(out, in, 7);
    for (int c = 0; c < in / 16; ++c) {
        std::vector<CFrag> acc(2, CFrag{});
        for (int k = 0; k < out / 16; ++k) {
            const Regs4 a = ldmatrix_x4(dz, 0, 16 * k, X4Pattern::kRowsFirst, false);
            const Regs4 b = ldmatrix_x4(w, 16 * k, 16 * c, X4Pattern::kRowsFirst, true);
            mma_16816(acc[0], a, b_tile(b, 0));
            mma_16816(acc[1], a, b_tile(b, 1));
        }
        for (int r = 0; r < 16; ++r)
            for (int n = 0; n < 16; ++n) {
                float want = 0;
                for (int k = 0; k < out; ++k) want += dz.at(r, k) * w.at(k, 16 * c + n);
                ASSERT_EQ(c_value(acc, r, n), want);
            }
    }
}

TEST(FusedLayout, WeightGradientComputesDzTransposedTimesActivations) {
    // dW[out][in] = dz[R][out]^T a[R][in] over R rows: A = dz read with ldmatrix.trans (kColsFirst),
    // B = a read with ldmatrix.trans (kRowsFirst), bias gradient = dz^T times a B of ones, as dw_units.
    const int R = 48, out = 32, in = 16;
    Smem dz = random_matrix(R, out, 8), act = random_matrix(R, in, 9);
    for (int m0 = 0; m0 < out; m0 += 16) {
        std::vector<CFrag> acc(2, CFrag{});
        CFrag bias{};
        BFrag ones{};
        for (auto& l : ones)
            for (auto& r : l) r = {1.0f, 1.0f};
        for (int k0 = 0; k0 < R; k0 += 16) {
            const Regs4 a = ldmatrix_x4(dz, k0, m0, X4Pattern::kColsFirst, true);
            const Regs4 b = ldmatrix_x4(act, k0, 0, X4Pattern::kRowsFirst, true);
            mma_16816(acc[0], a, b_tile(b, 0));
            mma_16816(acc[1], a, b_tile(b, 1));
            mma_16816(bias, a, ones);
        }
        for (int o = 0; o < 16; ++o) {
            float bsum = 0;
            for (int r = 0; r < R; ++r) bsum += dz.at(r, m0 + o);
            for (int n = 0; n < 8; ++n) ASSERT_EQ(c_value({bias}, o, n), bsum) << "every column holds the row sum";
            for (int i = 0; i < in; ++i) {
                float want = 0;
                for (int r = 0; r < R; ++r) want += dz.at(r, m0 + o) * act.at(r, i);
                ASSERT_EQ(c_value(acc, o, i), want) << "dW(" << m0 + o << ", " << i << ")";
            }
        }
    }
}

TEST(FusedLayout, GridWalkVisitsLaneStridedElementsInOrder) {
    // The copy loops visit element i = lane + 32 k of a [rows][cols] grid at (i / cols, i % cols).
    for (int cols = 1; cols <= 70; ++cols)
        for (int lane = 0; lane < kLanes; ++lane) {
            int i = lane;
            for (ffm::GridWalk g(lane, cols); g.r < 9; g.next(), i += kLanes) {
                ASSERT_EQ(g.r, i / cols) << "cols " << cols << " lane " << lane;
                ASSERT_EQ(g.c, i % cols) << "cols " << cols << " lane " << lane;
            }
            ASSERT_GE(i, 9 * cols) << "the walk ended early";
        }
}

TEST(FusedLayout, GridWalk2KeepsBothByteOffsetsInStep) {
    // Pitches as the kernels use them: a global row pitch (64-bit) and a padded shared-memory one.
    for (int cols = 1; cols <= 70; ++cols)
        for (int eb : {2, 4, 8, 16})
            for (int lane = 0; lane < kLanes; ++lane) {
                const int ea = 2 * eb;  // e.g. fp32 staged rows -> 16-bit tile rows
                const int64_t ap = int64_t(cols) * ea * 3 + (int64_t(1) << 33);
                const int bp = cols * eb + 16;
                ffm::GridWalk2<int64_t, int> g(lane, cols, ap, ea, bp, eb);
                for (; g.r < 9; g.next()) {
                    ASSERT_EQ(g.a, g.r * ap + int64_t(g.c) * ea) << "cols " << cols << " lane " << lane;
                    ASSERT_EQ(g.b, g.r * bp + g.c * eb) << "cols " << cols << " lane " << lane;
                }
            }
}

TEST(FusedLayout, GridWalk2NextRowEqualsNextWhereTheColumnNeverWraps) {
    // The copy loops take next_row() when wraps() is false: it must visit what next() visits.
    for (int cols = 1; cols <= 70; ++cols)
        for (int lane = 0; lane < kLanes; ++lane) {
            ffm::GridWalk2<int64_t, int> g(lane, cols, int64_t(1) << 33, 16, 272, 8), h = g;
            EXPECT_EQ(g.wraps(), !(cols <= kLanes && kLanes % cols == 0)) << "cols " << cols;
            if (g.wraps()) continue;
            for (; g.r < 40; g.next(), h.next_row()) {
                ASSERT_EQ(h.r, g.r) << "cols " << cols << " lane " << lane;
                ASSERT_EQ(h.c, g.c) << "cols " << cols << " lane " << lane;
                ASSERT_EQ(h.a, g.a) << "cols " << cols << " lane " << lane;
                ASSERT_EQ(h.b, g.b) << "cols " << cols << " lane " << lane;
            }
        }
}

TEST(FusedLayout, ShapeMatchesMlpLayout) {
    for (uint32_t width : {16u, 32u, 64u, 128u})
        for (uint32_t n_in : {1u, 3u, 16u, 32u, 33u, 100u})
            for (uint32_t n_out : {1u, 16u, 17u, 64u})
                for (uint32_t hidden : {1u, 2u, 5u})
                    for (bool bias : {false, true}) {
                        json cfg = {{"otype", "FullyFusedMLP"}, {"n_neurons", width}, {"n_hidden_layers", hidden}};
                        if (bias) cfg["bias"] = true;
                        auto net = create_network(n_in, n_out, cfg);
                        const MlpLayout& l = net->layout();
                        const ffm::Shape s = ffm::shape_of(l);
                        ASSERT_EQ(static_cast<size_t>(s.n_params()), l.n_params());
                        ASSERT_EQ(static_cast<size_t>(s.n_matrix_params()), l.n_matrix_params());
                        for (uint32_t k = 0; k < l.n_layers(); ++k) {
                            ASSERT_EQ(static_cast<size_t>(s.weight_offset(k)), l.weight_offset(k));
                            if (bias) {
                                ASSERT_EQ(static_cast<size_t>(s.bias_offset(k)), l.bias_offset(k));
                            }
                            ASSERT_EQ(s.slot_bytes(k) % 16, 0);
                            ASSERT_EQ(s.slot_offset(k) + s.slot_bytes(k),
                                      k == l.n_hidden_layers ? s.resident_weight_bytes() : s.slot_offset(k + 1));
                            ASSERT_LE(s.slot_bytes(k), s.max_slot_bytes());
                            ASSERT_EQ(s.weight_offset(k) % 4, 0);  // float4 read-modify-writes stay aligned
                        }
                    }
}

TEST(FusedLayout, WeightGradientFragmentOrderIsABijection) {
    // dw_units adds element i of lane L's C tile (mt, nt) of layer l at
    //   weight_offset(l) + ((mt * in / 8 + nt) * 32 + L) * 4 + i;
    // the reduction reads parameter p from fragment_index(p). They must agree, and cover each float once.
    for (auto [width, n_in, n_out, hidden] : std::vector<std::array<int, 4>>{{16, 3, 1, 1}, {64, 32, 16, 2}, {128, 100, 64, 3}, {32, 16, 48, 4}}) {
        MlpLayout l;
        l.width = width, l.n_input_dims = n_in, l.n_output_dims = n_out, l.n_hidden_layers = hidden, l.bias = true;
        l.padded_input_dims = (n_in + 15) / 16 * 16, l.padded_output_dims = (n_out + 15) / 16 * 16;
        const ffm::Shape s = ffm::shape_of(l);
        std::vector<int> hits(static_cast<size_t>(s.n_params()), 0);
        for (int64_t p = 0; p < s.n_params(); ++p) ++hits[static_cast<size_t>(s.fragment_index(p))];
        for (int h : hits) ASSERT_EQ(h, 1);
        for (int k = 0; k <= hidden; ++k) {
            const int in = s.layer_in(k), out = s.layer_out(k);
            for (int mt = 0; mt < out / 16; ++mt)
                for (int nt = 0; nt < in / 8; ++nt)
                    for (int lane = 0; lane < kLanes; ++lane)
                        for (int i = 0; i < 4; ++i) {
                            const Coord c = mma::c_frag_coord(lane, i);
                            const int64_t p = s.weight_offset(k) + int64_t(16 * mt + c.row) * in + 8 * nt + c.col;
                            ASSERT_EQ(s.fragment_index(p), s.weight_offset(k) + ((int64_t(mt) * (in / 8) + nt) * 32 + lane) * 4 + i);
                        }
        }
        for (int64_t p = s.n_matrix_params(); p < s.n_params(); ++p) ASSERT_EQ(s.fragment_index(p), p);
    }
}

namespace {

ffm::DeviceLimits h200_limits(int regs = 128) {
    ffm::DeviceLimits d;
    d.smem_per_block = 232448;  // 227 KiB opt-in (sm_90)
    d.smem_per_sm = d.smem_per_block + 1024;
    d.regs_per_thread = regs;
    return d;
}

ffm::Shape shape(int width, int n_in, int n_out, int hidden, bool bias = false) {
    MlpLayout l;
    l.width = width, l.n_input_dims = n_in, l.n_output_dims = n_out, l.n_hidden_layers = hidden, l.bias = bias;
    l.padded_input_dims = (n_in + 15) / 16 * 16, l.padded_output_dims = (n_out + 15) / 16 * 16;
    return ffm::shape_of(l);
}

// Regions [offset, offset + size) must be disjoint (or identical: the output staging may reuse the
// input tile), 16-byte aligned, and inside the block's shared memory.
void expect_disjoint(std::vector<std::pair<int64_t, int64_t>> regions, int64_t total, const std::string& what) {
    for (auto& [off, size] : regions) {
        EXPECT_EQ(off % 16, 0) << what;
        EXPECT_LE(off + size, total) << what;
    }
    for (size_t i = 0; i < regions.size(); ++i)
        for (size_t j = i + 1; j < regions.size(); ++j) {
            const auto [a, as] = regions[i];
            const auto [b, bs] = regions[j];
            if (as == 0 || bs == 0 || (a == b)) continue;
            EXPECT_TRUE(a + as <= b || b + bs <= a) << what << ": regions " << i << " and " << j << " overlap";
        }
}

void check_forward_plan(const ffm::Shape& s, int in_bytes, int out_bytes, const ffm::ForwardPlan& p, int64_t limit) {
    const std::string what = msg("forward plan width ", s.width, " in ", s.n_in, " out ", s.n_out);
    const int64_t R = int64_t(p.n_warps) * p.rows_per_warp;
    EXPECT_LE(p.smem_bytes, limit) << what;
    EXPECT_GE(p.blocks_per_sm, 1) << what;
    EXPECT_GE(p.raw_stride, s.n_in * in_bytes) << what;
    EXPECT_GE(p.out_stride, s.n_out * out_bytes) << what;
    EXPECT_EQ(p.x_stride, mma::padded_row(s.pin)) << what;
    const int64_t w = p.weights_resident ? s.resident_weight_bytes() : s.max_slot_bytes();
    expect_disjoint({{p.off_weights, w}, {p.off_raw, R * p.raw_stride}, {p.off_x, R * p.x_stride * 2},
                     {p.off_out, R * p.out_stride}},
                    p.smem_bytes, what);
    if (p.off_out == p.off_x) EXPECT_EQ(p.out_stride, p.x_stride * 2) << what << ": aliased rows must coincide";
}

void check_backward_plan(const ffm::Shape& s, const ffm::BackwardPlan& p, int64_t limit, bool want_dw) {
    const std::string what = msg("backward plan width ", s.width, " in ", s.n_in, " out ", s.n_out, " hidden ", s.n_hidden);
    const int64_t R = int64_t(p.n_warps) * p.rows_per_warp;
    EXPECT_LE(p.smem_bytes, limit) << what;
    const int64_t w = p.weights_resident ? s.resident_weight_bytes() : s.max_slot_bytes();
    // The wgmma kernels' stash and dz tiles are width / 64 atoms of 64-element rows (act_stride, dz_stride).
    const int64_t act_cols = p.wgmma ? s.width : p.act_stride, dz_cols = p.wgmma ? s.width : p.dz_stride;
    const int64_t stash = int64_t(s.n_hidden) * p.n_stashes * R * act_cols * 2;
    expect_disjoint({{p.off_weights, w},
                     {p.off_raw, R * p.raw_stride},
                     {p.off_dy, p.dy_in_smem ? R * p.dy_stride : 0},
                     {p.off_x, R * p.x_stride * 2},
                     {p.off_stash, p.stash_in_smem ? stash : 0},
                     {p.off_awork, p.stash_in_smem ? 0 : 2 * R * p.act_stride * 2},
                     {p.off_dz, 2 * R * dz_cols * 2},
                     {p.off_dw, p.dw_in_smem && want_dw ? s.n_params() * 4 : 0}},
                    p.smem_bytes, what);
    if (!p.stash_in_smem) EXPECT_GE(p.stash_bytes_per_block, stash) << what;
    EXPECT_GE(p.dy_stride, s.n_out * 2) << what;
    EXPECT_EQ(p.dy_stride % 32, 16) << what << ": an odd number of 16-byte units keeps the dy reads conflict-free";
    if (p.wgmma) {  // 64-column swizzled atoms on 1024-byte boundaries, with 1024 bytes of slack for the base
        EXPECT_TRUE(p.x_stride == 64 && p.act_stride == 64 && p.dz_stride == 64) << what;
        EXPECT_TRUE(p.off_x % 1024 == 0 && p.off_stash % 1024 == 0 && p.off_dz % 1024 == 0) << what;
        EXPECT_EQ(R * 64 * 2 % 1024, 0) << what << ": every atom (and so every tile) on a 1024-byte boundary";
        EXPECT_TRUE(ffm::wgmma_tile_layout(p, s)) << what << ": the launcher's check of the same";
        EXPECT_TRUE(p.stash_in_smem && p.weights_resident && p.n_warps == ffm::wgmma_backward_warps(s.width) &&
                    p.rows_per_warp == 16)
            << what;
        EXPECT_FALSE(p.dw_in_smem) << what << ": the wgmma kernel's dW partials are in global memory";
        EXPECT_LE(p.off_dw + (p.dw_in_smem && want_dw ? s.n_params() * 4 : 0) + 1024, p.smem_bytes) << what;
    } else {
        EXPECT_EQ(p.dz_stride, mma::padded_row(std::max(s.width, s.pout))) << what;
    }
}

}  // namespace

TEST(FusedPlan, BenchmarkShapesKeepEverythingOnChip) {
    // The shapes (fp32 input, fp16 output, 2 hidden layers, ReLU) on an H200 must get the
    // fast path: weights resident, activation stash in shared memory, at least 8 warps per SM; the dW
    // accumulators stay on chip up to width 64. At width 128 they would allow only 4 warps per SM, and
    // the planner moves them to the block's global slot for 8 (measured 1.75x faster on the H200).
    const auto d = h200_limits();
    for (auto [w, n_in, n_out] : std::vector<std::array<int, 3>>{{64, 32, 16}, {128, 32, 16}, {64, 64, 64}, {16, 32, 16}}) {
        const ffm::Shape s = shape(w, n_in, n_out, 2);
        const auto f = ffm::plan_forward(s, 4, 2, d);
        check_forward_plan(s, 4, 2, f, d.smem_per_block);
        EXPECT_TRUE(f.weights_resident);
        EXPECT_GE(f.n_warps * f.blocks_per_sm, 8) << "width " << w;
        const auto b = ffm::plan_backward(s, 4, 2, Activation::ReLU, true, d);
        check_backward_plan(s, b, d.smem_per_block, true);
        EXPECT_TRUE(b.weights_resident && b.stash_in_smem) << "width " << w << " in " << n_in;
        EXPECT_EQ(b.dw_in_smem, w <= 64) << "width " << w << " in " << n_in;
        EXPECT_GE(b.n_warps * b.blocks_per_sm, 8) << "width " << w;
    }
}

TEST(FusedPlan, EveryPlanFitsAndFallsBackInOrder) {
    const auto d = h200_limits();
    for (int w : {16, 32, 64, 128})
        for (int n_in : {3, 32, 100, 256})
            for (int n_out : {1, 16, 64})
                for (int hidden : {1, 2, 4, 10, 30})
                    for (Activation act : {Activation::ReLU, Activation::Sine})
                        for (bool bias : {false, true}) {
                            const ffm::Shape s = shape(w, n_in, n_out, hidden, bias);
                            const auto f = ffm::plan_forward(s, 4, 4, d);
                            check_forward_plan(s, 4, 4, f, d.smem_per_block);
                            for (bool want_dw : {true, false}) {
                                const auto b = ffm::plan_backward(s, 4, 4, act, want_dw, d);
                                check_backward_plan(s, b, d.smem_per_block, want_dw);
                                EXPECT_EQ(b.n_stashes, act == Activation::ReLU ? 1 : 2);
                            }
                        }
    // Deep and wide: weights cannot stay resident, and the stash moves to global memory.
    const ffm::Shape deep = shape(128, 32, 16, 30);
    EXPECT_FALSE(ffm::plan_forward(deep, 4, 2, d).weights_resident);
    const auto b = ffm::plan_backward(deep, 4, 2, Activation::Sine, true, d);
    EXPECT_FALSE(b.weights_resident);
    EXPECT_FALSE(b.stash_in_smem);
}

TEST(FusedPlan, OverridesForceEachFallback) {
    const auto d = h200_limits();
    const ffm::Shape s = shape(32, 7, 5, 3, true);
    ffm::PlanOverride o;
    o.stream_weights = true;
    o.stash_in_global = true;
    o.dw_in_global = true;
    o.forward_warps = 2;
    o.backward_warps = 4;
    const auto f = ffm::plan_forward(s, 4, 2, d, o);
    EXPECT_FALSE(f.weights_resident);
    EXPECT_EQ(f.n_warps, 2);
    const auto b = ffm::plan_backward(s, 4, 2, Activation::SiLU, true, d, o);
    EXPECT_FALSE(b.weights_resident || b.stash_in_smem || b.dw_in_smem);
    EXPECT_EQ(b.n_warps, 4);
    check_backward_plan(s, b, d.smem_per_block, true);
}

TEST(FusedPlan, BackwardTakesTwoMTilesPerWarpOnlyWhenNothingMovesOffChip) {
    // With the two-tile kernel's limits given, the planner takes it where it keeps the resident warps
    // (up to 8 per SM), the weights and the stash on chip (the dW accumulators may move to global
    // memory): 32->64->16 and 32->16->16, measured faster; 64->64->64 would drop to 4 warps per SM
    // (measured slower) and width 128 has no such kernel. Registers: ptxas -v of the sm_90 fp16 ReLU kernels (2026-11-30).
    struct Case {
        int w, n_in, n_out, regs1, regs2, expect_tiles;
    };
    for (const Case& c : {Case{64, 32, 16, 162, 221, 2}, Case{16, 32, 16, 112, 136, 2}, Case{32, 32, 16, 152, 156, 2},
                          Case{64, 64, 64, 162, 221, 1}, Case{128, 32, 16, 242, 242, 1}}) {
        const ffm::Shape s = shape(c.w, c.n_in, c.n_out, 2);
        const auto d1 = h200_limits(c.regs1), d2 = h200_limits(c.regs2);
        const auto b = ffm::plan_backward(s, 4, 2, Activation::ReLU, true, d1, {}, &d2);
        const int expect = ffm::has_backward_m_tiles(static_cast<uint32_t>(c.w), 2) ? c.expect_tiles : 1;
        EXPECT_EQ(b.rows_per_warp, 16 * expect) << c.n_in << "->" << c.w << "->" << c.n_out;
        check_backward_plan(s, b, d1.smem_per_block, true);
        EXPECT_TRUE(b.weights_resident && b.stash_in_smem);
        EXPECT_GE(b.n_warps * b.blocks_per_sm, 8) << c.n_in << "->" << c.w << "->" << c.n_out;
        // Without the second kernel's limits (HIP, or an override naming one tile) the plan has one tile.
        EXPECT_EQ(ffm::plan_backward(s, 4, 2, Activation::ReLU, true, d1).rows_per_warp, 16);
    }
    // Where two tiles fit nowhere but one does, the plan has one tile (no error): 64->64->64 with 8
    // warps forced (bench_mlp's variant rows found this), and a wide input at any warp count.
    const auto d1 = h200_limits(162), d2 = h200_limits(221);
    ffm::PlanOverride eight;
    eight.backward_warps = 8;
    const auto b = ffm::plan_backward(shape(64, 64, 64, 2), 4, 2, Activation::ReLU, true, d1, eight, &d2);
    EXPECT_EQ(b.rows_per_warp, 16);
    EXPECT_EQ(b.n_warps, 8);
    eight.backward_m_tiles = 2;
    EXPECT_THROW(ffm::plan_backward(shape(64, 64, 64, 2), 4, 2, Activation::ReLU, true, d2, eight), UnsupportedError);
    const ffm::Shape wide = shape(64, 800, 16, 2);
    ffm::PlanOverride two;
    two.backward_m_tiles = 2;
    EXPECT_THROW(ffm::plan_backward(wide, 4, 2, Activation::ReLU, true, d2, two), UnsupportedError);
    EXPECT_EQ(ffm::plan_backward(wide, 4, 2, Activation::ReLU, true, d1, {}, &d2).rows_per_warp, 16);
}

TEST(FusedPlan, FusedStepStagesTheTargetWhereThePlanStaysTheSame) {
    // The fused training step stages its fp32 target like dL/doutput only where the plan for 4-byte
    // rows keeps the unfused plan's warps, rows per warp and blocks per SM (so dW sums the same rows in
    // the same order); else it reads the target from global memory (ffm::gpu_backward). For the
    // benchmark shapes (fp32 input, fp16 output, ReLU, dL/dparams), without the wgmma kernel (these
    // limits): 32->64->16 loses its two-tile plan with 4-byte rows and reads from global memory (with
    // the wgmma kernel it stages, below); 64->64->64 runs a 12-warp block that reads
    // dL/doutput and the target in place (NVIDIA); the others stage. (Registers and warp bounds are those
    // of the sm_90 fp16 ReLU kernels, as in the tests above.)
    struct Case {
        int w, n_in, n_out, regs1, regs2;
        bool staged;
    };
    const bool twelve = ffm::backward_reads_dy_in_place(64, true, 1);
    for (const Case& c : {Case{64, 32, 16, 156, 239, false}, Case{16, 32, 16, 106, 136, true},
                          Case{64, 64, 64, 156, 239, !twelve}, Case{128, 32, 16, 238, 238, true}}) {
        const ffm::Shape s = shape(c.w, c.n_in, c.n_out, 2);
        auto d1 = h200_limits(c.regs1), d2 = h200_limits(c.regs2);
        d1.max_warps_per_block = ffm::backward_max_warps(static_cast<uint32_t>(c.w), true, 1);
        d2.max_warps_per_block = ffm::backward_max_warps(static_cast<uint32_t>(c.w), true, 2);
        const ffm::DeviceLimits* mt2 = ffm::has_backward_m_tiles(static_cast<uint32_t>(c.w), 2) ? &d2 : nullptr;
        const auto unfused = ffm::plan_backward(s, 4, 2, Activation::ReLU, true, d1, {}, mt2);
        const auto staged = ffm::plan_backward(s, 4, 4, Activation::ReLU, true, d1, {}, mt2);
        const bool same = unfused.dy_in_smem && staged.dy_in_smem && staged.n_warps == unfused.n_warps &&
                          staged.rows_per_warp == unfused.rows_per_warp && staged.blocks_per_sm == unfused.blocks_per_sm;
        EXPECT_EQ(same, c.staged) << c.n_in << "->" << c.w << "->" << c.n_out << ": unfused " << unfused.n_warps
                                  << " warps x " << unfused.rows_per_warp << " rows, 4-byte rows " << staged.n_warps
                                  << " x " << staged.rows_per_warp;
        check_backward_plan(s, staged, d1.smem_per_block, true);
    }
    // With the wgmma kernel (sm_90a code on an sm_90 device) 32->64->16's plans for 2- and 4-byte rows are
    // both its 12-warp block with dy rows: the fused step stages the target and sums dW as the unfused one.
    if (twelve) {
        auto d1 = h200_limits(156), d2 = h200_limits(239);
        d1.max_warps_per_block = ffm::backward_max_warps(64, true, 1), d1.wgmma = true;
        d2.max_warps_per_block = ffm::backward_max_warps(64, true, 2);
        const ffm::Shape s = shape(64, 32, 16, 2);
        const auto unfused = ffm::plan_backward(s, 4, 2, Activation::ReLU, true, d1, {}, &d2);
        const auto staged = ffm::plan_backward(s, 4, 4, Activation::ReLU, true, d1, {}, &d2);
        EXPECT_TRUE(unfused.wgmma && staged.wgmma && staged.dy_in_smem);
        EXPECT_TRUE(ffm::same_dw_order(unfused, 132, staged, 132));
    }
}

TEST(FusedPlan, TwelveWarpBlocksWhereTheKernelAllowsThem) {
    // The ReLU / linear-output kernels with one m16 tile up to width 64 allow 12 warps per block and
    // read dL/doutput in place (backward_max_warps; the planner sees it as max_warps_per_block). A
    // 12-warp block with the weights and the stash on chip comes before 8 resident warps (H200,
    // 64->64->64: fused step 1.526 vs 1.777 ms): at 64->64->64 it fits only without the dy rows and
    // with dW in the block's global slot. Without the wgmma kernel (these limits; NVIDIA builds without
    // sm_90a code) two-tile plans that keep 8 warps stay (32->64->16, 32->16->16); width 128 has no such
    // kernel. Registers: ptxas -v of the sm_90 fp16 ReLU kernels.
    if (!ffm::backward_reads_dy_in_place(64, true, 1)) {
        EXPECT_EQ(ffm::backward_max_warps(64, true, 1), ffm::kMaxWarps);  // HIP: no such kernels
        return;
    }
    auto limits = [](int regs, uint32_t width, int tiles) {
        auto d = h200_limits(regs);
        d.max_warps_per_block = ffm::backward_max_warps(width, true, tiles);
        return d;
    };
    struct Case {
        int w, n_in, n_out, regs1, regs2, warps, tiles;
        bool dy_in_smem;
    };
    for (const Case& c : {Case{64, 64, 64, 156, 239, 12, 1, false}, Case{64, 32, 16, 156, 239, 8, 2, true},
                          Case{16, 32, 16, 106, 136, 8, 2, true}, Case{128, 32, 16, 238, 238, 8, 1, true}}) {
        const ffm::Shape s = shape(c.w, c.n_in, c.n_out, 2);
        const auto d1 = limits(c.regs1, c.w, 1), d2 = limits(c.regs2, c.w, 2);
        const ffm::DeviceLimits* mt2 = ffm::has_backward_m_tiles(static_cast<uint32_t>(c.w), 2) ? &d2 : nullptr;
        const auto b = ffm::plan_backward(s, 4, 2, Activation::ReLU, true, d1, {}, mt2);
        const std::string what = msg(c.n_in, "->", c.w, "->", c.n_out);
        if (c.warps == 12) EXPECT_EQ(b.n_warps, 12) << what;
        else EXPECT_TRUE(b.n_warps <= 8 && b.n_warps * b.blocks_per_sm >= 8) << what;
        EXPECT_EQ(b.rows_per_warp, 16 * c.tiles) << what;
        EXPECT_EQ(b.dy_in_smem, c.dy_in_smem) << what;
        EXPECT_TRUE(b.weights_resident && b.stash_in_smem) << what;
        if (!b.dy_in_smem) EXPECT_EQ(b.off_x, b.off_dy) << what << ": no dy rows";
        check_backward_plan(s, b, d1.smem_per_block, true);
    }
    const ffm::Shape s = shape(64, 64, 64, 2);
    const auto d = limits(156, 64, 1);
    // Overrides: 8 warps with dy staged (the plan before 12-warp blocks), 8 warps with dy in place
    // (the same plan less the dy rows), and requests the kernel cannot serve, refused with a message.
    ffm::PlanOverride eight;
    eight.backward_warps = 8;
    const auto staged = ffm::plan_backward(s, 4, 2, Activation::ReLU, true, d, eight);
    EXPECT_TRUE(staged.dy_in_smem && staged.dw_in_smem && staged.stash_in_smem);
    eight.dy_global = true;
    const auto in_place = ffm::plan_backward(s, 4, 2, Activation::ReLU, true, d, eight);
    EXPECT_FALSE(in_place.dy_in_smem);
    EXPECT_EQ(in_place.smem_bytes, staged.smem_bytes - int64_t(8) * 16 * staged.dy_stride);
    ffm::PlanOverride twelve;
    twelve.backward_warps = 12;
    auto refusal = [&](const ffm::Shape& sh, const ffm::DeviceLimits& lim, const ffm::PlanOverride& ov) {
        try {
            ffm::plan_backward(sh, 4, 2, Activation::ReLU, true, lim, ov);
        } catch (const UnsupportedError& e) {
            return std::string(e.what());
        }
        return std::string("no error");
    };
    EXPECT_NE(refusal(shape(128, 32, 16, 2), limits(238, 128, 1), twelve).find("12 only for"), std::string::npos);
    ffm::PlanOverride three;
    three.backward_warps = 3;
    EXPECT_NE(refusal(s, d, three).find("valid: 1, 2, 4, 8, or 12"), std::string::npos);
    twelve.stash_in_global = true;
    EXPECT_NE(refusal(s, d, twelve).find("need the weights and the activation stash"), std::string::npos);
    // Smaller blocks of these kernels read dy in place only when asked: 32->256... keeps its plan.
    const auto narrow = ffm::plan_backward(shape(32, 256, 16, 1), 4, 2, Activation::ReLU, true, limits(150, 32, 1));
    EXPECT_TRUE(narrow.dy_in_smem || narrow.n_warps == 12);
    // A 12-warp plan that stages 2-byte dL/doutput but reads 4-byte rows in place (64->64->16, 3 hidden
    // layers, 16-bit input): the fused step must not stage its target there (ffm::gpu_backward checks
    // dy_in_smem of the 4-byte plan; GPU test case w64_64to16_h3_16bit_in_batch5000).
    const ffm::Shape h3 = shape(64, 64, 16, 3);
    const auto dy2 = ffm::plan_backward(h3, 2, 2, Activation::ReLU, true, d), dy4 = ffm::plan_backward(h3, 2, 4, Activation::ReLU, true, d);
    EXPECT_EQ(dy2.n_warps, 12);
    EXPECT_TRUE(dy2.dy_in_smem);
    EXPECT_EQ(dy4.n_warps, 12);
    EXPECT_FALSE(dy4.dy_in_smem);
    ffm::PlanOverride dy;
    dy.dy_global = true;
    EXPECT_THROW(ffm::plan_backward(s, 4, 2, Activation::ReLU, true, h200_limits(202), dy), UnsupportedError);
    // Two tiles never read dy in place: asked for with it, the plan has one tile.
    const auto d2 = limits(239, 64, 2);
    EXPECT_EQ(ffm::plan_backward(shape(64, 32, 16, 2), 4, 2, Activation::ReLU, true, d, dy, &d2).rows_per_warp, 16);
}

TEST(FusedPlan, WgmmaKernelForTwelveWarpPlansOfTheShapesItCovers) {
    // Where the device and the build have it (DeviceLimits::wgmma: sm_90 and sm_90a code), 12-warp plans
    // of width 64 with at most 64 (padded) inputs and outputs and no bias take the wgmma backward
    // kernel; never other widths, warps, biases or wider inputs and outputs, never with the override.
    if (!ffm::backward_reads_dy_in_place(64, true, 1)) return;  // HIP: no 12-warp kernels
    auto limits = [](bool wgmma, uint32_t width) {
        auto d = h200_limits(166);
        d.max_warps_per_block = ffm::backward_max_warps(width, true, 1);
        d.wgmma = wgmma;
        return d;
    };
    const ffm::Shape s = shape(64, 64, 64, 2);
    const auto wg = ffm::plan_backward(s, 4, 2, Activation::ReLU, true, limits(true, 64));
    const auto plain = ffm::plan_backward(s, 4, 2, Activation::ReLU, true, limits(false, 64));
    EXPECT_TRUE(wg.wgmma);
    EXPECT_FALSE(plain.wgmma);
    EXPECT_EQ(wg.n_warps, 12);
    EXPECT_EQ(plain.n_warps, 12);
    // Without row padding the 16-bit dL/doutput rows fit next to the tiles (the mma.sync plan reads dy
    // in place); the fused step drops them again for its target (ffm::gpu_backward).
    EXPECT_TRUE(wg.dy_in_smem);
    EXPECT_FALSE(plain.dy_in_smem);
    ffm::PlanOverride no_dy;
    no_dy.dy_global = true;
    const auto wg_in_place = ffm::plan_backward(s, 4, 2, Activation::ReLU, true, limits(true, 64), no_dy);
    EXPECT_TRUE(wg_in_place.wgmma && !wg_in_place.dy_in_smem);
    EXPECT_LT(wg_in_place.smem_bytes, plain.smem_bytes) << "no row padding, 1024 bytes of slack";
    check_backward_plan(s, wg, limits(true, 64).smem_per_block, true);
    ffm::PlanOverride off;
    off.no_wgmma = true;
    EXPECT_FALSE(ffm::plan_backward(s, 4, 2, Activation::ReLU, true, limits(true, 64), off).wgmma);
    ffm::PlanOverride eight;
    eight.backward_warps = 8;
    EXPECT_FALSE(ffm::plan_backward(s, 4, 2, Activation::ReLU, true, limits(true, 64), eight).wgmma);
    ffm::PlanOverride twelve;
    twelve.backward_warps = 12;
    twelve.backward_m_tiles = 1;
    twelve.dw_in_global = true;  // (small networks would keep dW on chip, with the mma.sync kernel)
    // Forced onto 12 warps, one tile, dW in global memory: 3 -> 64 -> 1 (pin 16, pout 16), 64 -> 64 -> 16
    // with 3 hidden layers and 16-bit input; no dL/dparams at all. Where dW would fit on chip, the wgmma
    // kernel still comes first (dW in the block's global slot); without it the plan keeps dW on chip.
    {
        ffm::PlanOverride on_chip = twelve;
        on_chip.dw_in_global = false;
        const auto p = ffm::plan_backward(shape(64, 3, 1, 2), 4, 2, Activation::ReLU, true, limits(true, 64), on_chip);
        EXPECT_TRUE(!p.dw_in_smem && p.wgmma);
        on_chip.no_wgmma = true;
        const auto q = ffm::plan_backward(shape(64, 3, 1, 2), 4, 2, Activation::ReLU, true, limits(true, 64), on_chip);
        EXPECT_TRUE(q.dw_in_smem && !q.wgmma);
    }
    // The planner's own choice (no override) where two m16 tiles per warp keep 8 warps, e.g. 32->64->16
    // (the grid + MLP model's network): the wgmma block where the device has it, else the two-tile plan
    // (FusedPlan.TwelveWarpBlocksWhereTheKernelAllowsThem).
    for (int in_bytes : {2, 4}) {
        const ffm::Shape s16 = shape(64, 32, 16, 2);
        auto mt2 = limits(true, 64);
        mt2.regs_per_thread = 239, mt2.max_warps_per_block = ffm::backward_max_warps(64, true, 2);
        const auto p = ffm::plan_backward(s16, in_bytes, 2, Activation::ReLU, true, limits(true, 64), {}, &mt2);
        EXPECT_TRUE(p.wgmma && p.n_warps == 12 && p.rows_per_warp == 16 && !p.dw_in_smem) << in_bytes;
        check_backward_plan(s16, p, limits(true, 64).smem_per_block, true);
        mt2.wgmma = false;
        const auto q = ffm::plan_backward(s16, in_bytes, 2, Activation::ReLU, true, limits(false, 64), {}, &mt2);
        EXPECT_TRUE(!q.wgmma && q.n_warps == 8 && q.rows_per_warp == 32) << in_bytes;
        ffm::PlanOverride two;
        two.backward_m_tiles = 2;
        const auto r = ffm::plan_backward(s16, in_bytes, 2, Activation::ReLU, true, limits(true, 64), two, &mt2);
        EXPECT_TRUE(!r.wgmma && r.n_warps == 8 && r.rows_per_warp == 32) << in_bytes;
        // Without dL/dparams (a frozen network) the preference was not measured: the plan without it.
        const auto no_dw = ffm::plan_backward(s16, in_bytes, 2, Activation::ReLU, false, limits(true, 64), {}, &mt2);
        const auto no_dw_before = ffm::plan_backward(s16, in_bytes, 2, Activation::ReLU, false, limits(false, 64), {}, &mt2);
        EXPECT_TRUE(!no_dw.wgmma && no_dw.n_warps == no_dw_before.n_warps &&
                    no_dw.rows_per_warp == no_dw_before.rows_per_warp)
            << in_bytes;
    }
    for (const auto& [sh, in_bytes, want_dw] :
         {std::tuple{shape(64, 3, 1, 2), 4, true}, std::tuple{shape(64, 64, 16, 3), 2, true},
          std::tuple{shape(64, 32, 16, 2), 4, false},
          // the GPU test's cases with several tiles per block (FullyFusedMlpGpuPlans.WgmmaBackward...)
          std::tuple{shape(64, 40, 64, 1), 4, true}, std::tuple{shape(64, 32, 48, 3), 4, true}}) {
        const auto p = ffm::plan_backward(sh, in_bytes, 2, Activation::ReLU, want_dw, limits(true, 64), twelve);
        EXPECT_TRUE(p.wgmma) << sh.n_in << " -> " << sh.n_out;
        check_backward_plan(sh, p, limits(true, 64).smem_per_block, want_dw);
        // The GPU tests compare these with the mma.sync kernel on the same 12-warp block (padded rows):
        // that plan must exist, with the same warps and tiles.
        ffm::PlanOverride mma_sync = twelve;
        mma_sync.no_wgmma = true;
        const auto plain = ffm::plan_backward(sh, in_bytes, 2, Activation::ReLU, want_dw, limits(true, 64), mma_sync);
        EXPECT_TRUE(!plain.wgmma && plain.n_warps == p.n_warps && plain.rows_per_warp == p.rows_per_warp)
            << sh.n_in << " -> " << sh.n_out;
    }
    // Not covered: a bias, more than 64 padded inputs or outputs, another width, another activation.
    ffm::Shape biased = s;
    biased.bias = true;
    for (const ffm::Shape& sh : {biased, shape(64, 65, 16, 2), shape(64, 32, 70, 2)})
        EXPECT_FALSE(ffm::plan_backward(sh, 4, 2, Activation::ReLU, true, limits(true, 64), twelve).wgmma)
            << sh.pin << " -> " << sh.pout << (sh.bias ? " bias" : "");
    EXPECT_FALSE(ffm::plan_backward(shape(32, 32, 16, 2), 4, 2, Activation::ReLU, true, limits(true, 32), twelve).wgmma);
    EXPECT_FALSE(ffm::plan_backward(shape(64, 16, 16, 1), 4, 2, Activation::Tanh, true, limits(true, 64), twelve).wgmma);
    // The fused step may replace the unfused step's plan only by one with the same dW order
    // (ffm::same_dw_order). 32->64->48: the plans with 2- and 4-byte dy rows are both the wgmma kernel's
    // 12-warp block (before the eighteenth session the 2-byte one kept dW on chip with the mma.sync
    // kernel): the same order. The 12-warp mma.sync block sums dW in another order: refused.
    // 64->64->64: the plan with dy rows and the one without are both wgmma: the same.
    const ffm::Shape s48 = shape(64, 32, 48, 2);
    const auto dy2 = ffm::plan_backward(s48, 4, 2, Activation::ReLU, true, limits(true, 64));
    const auto dy4 = ffm::plan_backward(s48, 4, 4, Activation::ReLU, true, limits(true, 64));
    EXPECT_TRUE(dy2.wgmma && dy4.wgmma && dy2.n_warps == dy4.n_warps);
    EXPECT_TRUE(ffm::same_dw_order(dy2, 132, dy4, 132));
    const auto dy2_mma_sync = ffm::plan_backward(s48, 4, 2, Activation::ReLU, true, limits(true, 64), off);
    EXPECT_EQ(dy2_mma_sync.n_warps, dy2.n_warps);
    EXPECT_FALSE(ffm::same_dw_order(dy2, 132, dy2_mma_sync, 132));
    ffm::PlanOverride in_place;
    in_place.dy_global = true;
    EXPECT_TRUE(ffm::same_dw_order(wg, 132, ffm::plan_backward(s, 4, 2, Activation::ReLU, true, limits(true, 64), in_place), 132));
    EXPECT_FALSE(ffm::same_dw_order(wg, 132, wg, 131));
}

TEST(FusedPlan, WgmmaKernelForEightWarpPlansAtWidth128) {
    // At width 128 the wgmma kernel is the 8-warp (two-warpgroup) one-tile ReLU kernel with weights and
    // stash on chip and dW in global memory: the 32->128->16 takes it where the device has it;
    // never with a bias, more than 64 padded inputs or outputs, a stash that does not fit on chip (three
    // hidden layers), another activation or the override.
    if (!ffm::backward_reads_dy_in_place(64, true, 1)) return;  // HIP: no wgmma kernels
    auto limits = [](bool wgmma) {
        auto d = h200_limits(234);
        d.max_warps_per_block = ffm::backward_max_warps(128, true, 1);
        d.wgmma = wgmma;
        return d;
    };
    EXPECT_EQ(ffm::wgmma_backward_warps(128), 8);
    for (const auto& [sh, in_bytes] : {std::pair{shape(128, 32, 16, 2), 4}, std::pair{shape(128, 64, 16, 2), 2}}) {
        const std::string what = msg(sh.n_in, " -> 128 -> ", sh.n_out);
        const auto wg = ffm::plan_backward(sh, in_bytes, 2, Activation::ReLU, true, limits(true));
        EXPECT_TRUE(wg.wgmma && wg.n_warps == 8) << what;
        check_backward_plan(sh, wg, limits(true).smem_per_block, true);
        EXPECT_FALSE(ffm::plan_backward(sh, in_bytes, 2, Activation::ReLU, true, limits(false)).wgmma) << what;
        ffm::PlanOverride off;
        off.no_wgmma = true;
        EXPECT_FALSE(ffm::plan_backward(sh, in_bytes, 2, Activation::ReLU, true, limits(true), off).wgmma) << what;
    }
    // The GPU test's cases (FullyFusedMlpGpuPlans.WgmmaBackward...: 8 warps, one tile, dW in global
    // memory), for 2- and 4-byte dy rows (backward, fused step): the wgmma plan and, with no_wgmma, the
    // mma.sync plan it is compared with on the same block.
    ffm::PlanOverride eight;
    eight.backward_warps = 8, eight.backward_m_tiles = 1, eight.dw_in_global = true;
    ffm::PlanOverride mma_sync = eight;
    mma_sync.no_wgmma = true;
    for (const auto& [sh, in_bytes] : {std::pair{shape(128, 32, 16, 2), 4}, std::pair{shape(128, 64, 16, 1), 2},
                                       std::pair{shape(128, 17, 33, 1), 4}, std::pair{shape(128, 32, 2, 2), 4},
                                       std::pair{shape(128, 3, 1, 1), 4}, std::pair{shape(128, 40, 64, 1), 4}})
        for (int dy_bytes : {2, 4}) {
            const std::string what = msg(sh.n_in, " -> 128 -> ", sh.n_out, ", ", sh.n_hidden, " hidden, dy ", dy_bytes);
            const auto wg = ffm::plan_backward(sh, in_bytes, dy_bytes, Activation::ReLU, true, limits(true), eight);
            EXPECT_TRUE(wg.wgmma) << what;
            check_backward_plan(sh, wg, limits(true).smem_per_block, true);
            const auto plain = ffm::plan_backward(sh, in_bytes, dy_bytes, Activation::ReLU, true, limits(true), mma_sync);
            EXPECT_TRUE(!plain.wgmma && plain.n_warps == wg.n_warps && plain.rows_per_warp == wg.rows_per_warp) << what;
        }
    ffm::Shape biased = shape(128, 32, 16, 2);
    biased.bias = true;
    for (const ffm::Shape& sh : {biased, shape(128, 65, 16, 2), shape(128, 32, 70, 2), shape(128, 32, 16, 3)})
        EXPECT_FALSE(ffm::plan_backward(sh, 4, 2, Activation::ReLU, true, limits(true)).wgmma)
            << sh.pin << " -> " << sh.pout << (sh.bias ? " bias" : "") << ", " << sh.n_hidden << " hidden";
    EXPECT_FALSE(ffm::plan_backward(shape(128, 32, 16, 2), 4, 2, Activation::Tanh, true, limits(true)).wgmma);
    // One hidden layer keeps dW on chip on the mma.sync kernel (the planner prefers the wgmma kernel only
    // for the width-64 12-warp blocks, where it was measured).
    {
        const auto h1 = ffm::plan_backward(shape(128, 32, 16, 1), 4, 2, Activation::ReLU, true, limits(true));
        EXPECT_TRUE(!h1.wgmma && h1.dw_in_smem && h1.n_warps == 8);
    }
    // The launcher's layout check refuses a plan laid out for the other width (its tiles too small).
    const auto p128 = ffm::plan_backward(shape(128, 32, 16, 2), 4, 2, Activation::ReLU, true, limits(true));
    EXPECT_TRUE(ffm::wgmma_tile_layout(p128, shape(128, 32, 16, 2)));
    EXPECT_FALSE(ffm::wgmma_tile_layout(p128, shape(256, 32, 16, 2)));
    ffm::BackwardPlan two_tiles = p128;
    two_tiles.rows_per_warp = 32;
    EXPECT_FALSE(ffm::wgmma_tile_layout(two_tiles, shape(128, 32, 16, 2)));
    // ... and one whose hidden layers' slots (swizzled atoms) would be off their 1024-byte boundaries.
    // With one hidden layer there are none: the one-hidden-layer cases above pass the same check, though
    // their output slots (e.g. 16 x 136 x 2 = 4352 bytes) are no multiple of 1024.
    ffm::BackwardPlan shifted = p128;
    shifted.off_weights = 512;
    EXPECT_FALSE(ffm::wgmma_tile_layout(shifted, shape(128, 32, 16, 2)));
    EXPECT_EQ(ffm::wgmma_backward_warps(32), 0);
}

TEST(FusedLayout, SwizzledTilesAreBijectiveAndConflictFree) {
    // mma::swizzle128 (the wgmma kernel's tiles): within every 1024-byte block (8 rows of 128 bytes) a
    // permutation of the 16-byte chunks that keeps each chunk's bytes together and each row in its
    // 128 bytes; an ldmatrix matrix (8 consecutive rows, one 16-byte column) lands in 8 distinct
    // 16-byte bank groups; and the kernels' step to k-step k of a lane's ldmatrix address, XOR 32 k,
    // equals the swizzled address of the chunk 2 k further right (k < 4, 1024-byte aligned tiles).
    std::vector<int> seen(2048, 0);
    for (int o = 0; o < 2048; ++o) {
        const int q = mma::swizzle128(o);
        ASSERT_TRUE(q >= 0 && q < 2048);
        ++seen[q];
        EXPECT_EQ(q / 128, o / 128) << o;
        EXPECT_EQ(q % 16, o % 16) << o;
    }
    for (int q = 0; q < 2048; ++q) EXPECT_EQ(seen[q], 1) << q;
    for (int r0 = 0; r0 < 16; r0 += 8)
        for (int chunk = 0; chunk < 8; ++chunk) {
            std::set<int> groups;
            for (int r = r0; r < r0 + 8; ++r) groups.insert(mma::swizzle128(r * 128 + chunk * 16) / 16 % 8);
            EXPECT_EQ(groups.size(), 8u) << "rows " << r0 << ".., chunk " << chunk;
        }
    for (int lane = 0; lane < 32; ++lane)
        for (auto p : {mma::X4Pattern::kRowsFirst, mma::X4Pattern::kColsFirst}) {
            const mma::Coord c = mma::x4_lane_address(lane, p);
            const int base = mma::swizzle128(c.row * 128 + c.col * 2);
            for (int k = 0; k < 4; ++k)
                EXPECT_EQ(base ^ (32 * k), mma::swizzle128(c.row * 128 + (c.col + 16 * k) * 2)) << lane << " " << k;
        }
}

TEST(FusedPlan, TwoMTilesPerWarpInTheBackwardUpToWidth64) {
    // The experiment hook: 32 rows per warp, the same shared-memory layout rules; width 128 (and any
    // width on HIP) has no such kernel and is refused with a message, never planned.
    const auto d = h200_limits();
    ffm::PlanOverride o;
    o.backward_m_tiles = 2;
    for (int w : {16, 32, 64, 128}) {
        const ffm::Shape s = shape(w, 32, 16, 2);
        if (!ffm::has_backward_m_tiles(static_cast<uint32_t>(w), 2)) {
            EXPECT_THROW(ffm::plan_backward(s, 4, 2, Activation::ReLU, true, d, o), UnsupportedError) << "width " << w;
            continue;
        }
        const auto b = ffm::plan_backward(s, 4, 2, Activation::ReLU, true, d, o);
        EXPECT_EQ(b.rows_per_warp, 32) << "width " << w;
        check_backward_plan(s, b, d.smem_per_block, true);
    }
}

TEST(FusedPlan, TooLargeLayerNamesTheAlternatives) {
    const auto d = h200_limits();
    const ffm::Shape s = shape(128, 2000, 16, 2);  // the first layer alone is 128 x 2008 x 2 bytes
    try {
        ffm::plan_forward(s, 4, 2, d);
        FAIL() << "expected UnsupportedError";
    } catch (const UnsupportedError& e) {
        EXPECT_NE(std::string(e.what()).find("BlasLtMLP"), std::string::npos) << e.what();
    }
}

TEST(FusedPlan, CopyVectorWidth) {
    alignas(16) static char buf[64];
    EXPECT_EQ(ffm::copy_vector_bytes(buf, 128, 64), 16);
    EXPECT_EQ(ffm::copy_vector_bytes(buf, 12, 12), 4);   // 3 fp32 per row
    EXPECT_EQ(ffm::copy_vector_bytes(buf + 8, 64, 32), 8);
    EXPECT_EQ(ffm::copy_vector_bytes(buf, 6, 6), 2);     // 3 fp16 per row
}

// dx_store_values (KernelArgs::dx_vec), against the kernel's conditions written out: v values per store
// need rows that start on a multiple of v * elem_bytes and a pitch of a multiple of v values; 4 values
// only for 16-bit elements (8 bytes, the widest store); a cap rounds down to 4, 2 or 1.
TEST(FusedPlan, InputGradientStoreValues) {
    alignas(16) static char buf[256];
    for (int b : {2, 4})
        for (int offset = 0; offset < 16; ++offset)
            for (int64_t stride = 1; stride <= 40; ++stride)
                for (int cap = -1; cap <= 6; ++cap) {
                    const char* p = buf + offset;
                    auto fits = [&](int v) { return offset % (v * b) == 0 && stride % v == 0; };
                    int want = b == 2 && fits(4) ? 4 : fits(2) ? 2 : 1;
                    if (cap > 0) want = std::min(want, cap >= 4 ? 4 : cap >= 2 ? 2 : 1);
                    EXPECT_EQ(ffm::dx_store_values(p, stride, b, cap), want)
                        << "element bytes " << b << ", offset " << offset << ", stride " << stride << ", cap " << cap;
                }
}

// pair_aligned (KernelArgs::dy_vec2, target_vec2, values_vec2), against the conditions written out: the
// rows' start a multiple of two elements' bytes, the pitch an even number of elements.
TEST(FusedPlan, PairAlignedRows) {
    alignas(16) static char buf[256];
    for (int b : {2, 4})
        for (int offset = 0; offset < 16; ++offset)
            for (int64_t stride = 1; stride <= 40; ++stride)
                EXPECT_EQ(ffm::pair_aligned(buf + offset, stride, b), offset % (2 * b) == 0 && stride % 2 == 0)
                    << "element bytes " << b << ", offset " << offset << ", stride " << stride;
}

TEST(FullyFusedMLP, ConfigErrorsNameTheAlternatives) {
    auto expect_error = [](const json& cfg, const char* type, const std::string& needle) {
        try {
            create_network(3, 4, cfg);
            ADD_FAILURE() << "expected " << type << " for " << cfg.dump();
        } catch (const DTypeError& e) {
            EXPECT_STREQ(type, "DTypeError") << e.what();
            EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
        } catch (const ConfigError& e) {
            EXPECT_STREQ(type, "ConfigError") << e.what();
            EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
        }
    };
    expect_error({{"otype", "FullyFusedMLP"}, {"n_neurons", 48}}, "ConfigError", "BlasLtMLP");
    expect_error({{"otype", "FullyFusedMLP"}, {"n_neurons", 256}}, "ConfigError", "16, 32, 64, 128");
    expect_error({{"otype", "FullyFusedMLP"}, {"n_neurons", 64}, {"dtype", "float32"}}, "DTypeError", "PortableMLP");
    expect_error({{"otype", "FullyFusedMLP"}, {"n_neurons", 64}, {"dtype", "float64"}}, "DTypeError", "BlasLtMLP");
    expect_error({{"otype", "FullyFusedMLP"}, {"n_neurons", 64}, {"n_hidden_layers", 0}}, "ConfigError", "at least 1");
    // Defaults follow tcnn: float16, 128 neurons, 5 hidden layers; bfloat16 and fp32 outputs are allowed.
    auto net = create_network(3, 4, {{"otype", "fullyfusedmlp"}});
    EXPECT_EQ(net->name(), "FullyFusedMLP");
    EXPECT_EQ(net->param_dtype(), DType::f16);
    EXPECT_EQ(net->width(), 128u);
    EXPECT_EQ(network_dtype({{"otype", "FullyFusedMLP"}}), DType::f16);
    auto bf = create_network(3, 4, {{"otype", "FullyFusedMLP"}, {"n_neurons", 16}, {"dtype", "bfloat16"},
                                    {"output_dtype", "float32"}});
    EXPECT_EQ(bf->param_dtype(), DType::bf16);
    EXPECT_EQ(bf->output_dtype(), DType::f32);
    EXPECT_TRUE(bf->accepts_input_dtype(DType::f32));
    EXPECT_TRUE(bf->accepts_input_dtype(DType::bf16));
    EXPECT_FALSE(bf->accepts_input_dtype(DType::f16));
    // Round trip of hyperparams.
    auto again = create_network(3, 4, bf->hyperparams());
    EXPECT_EQ(again->hyperparams(), bf->hyperparams());
}
