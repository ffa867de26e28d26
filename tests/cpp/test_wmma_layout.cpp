// FullyFusedMLP's gfx12 (RDNA4 WMMA) data flow on the CPU: one wavefront's WMMA is emulated with the
// lane maps of wmma_layout.h (the ones fully_fused_mlp_gfx12.cuh addresses its operands with), and the
// kernels' steps (weights as A from their [out][in + 8] slot, activations as B, the D -> B register
// handoff, the W^T chain, dW = dz^T a with the bias as a product with ones, accumulation in the
// reduction's fragment order) must compute MlpReference<double>'s outputs and gradients. No AMD GPU
// runs in this project: a wrong lane map or a wrong kernel index fails here.
#include "networks/activation.h"
#include "networks/fully_fused_mlp.h"
#include "networks/portable_mlp.h"
#include "networks/wmma_layout.h"
#include "test_util.h"

#include <array>
#include <cmath>
#include <set>

using namespace tnn;
using wmma::Coord;

namespace {

constexpr int kLanes = wmma::kLanes;
using Regs = std::array<std::array<double, 8>, kLanes>;  // [lane][element]: one operand of one wavefront

// v_wmma_f32_16x16x16: rebuilds A and B from the lanes by the documented maps (every element
// supplied exactly once), multiplies, and adds into D by the C/D map.
void wmma_emulated(Regs& d, const Regs& a, const Regs& b) {
    double A[16][16], B[16][16];
    int seen_a[16][16] = {}, seen_b[16][16] = {};
    for (int lane = 0; lane < kLanes; ++lane)
        for (int e = 0; e < 8; ++e) {
            const Coord x = wmma::a_coord(lane, e), y = wmma::b_coord(lane, e);
            A[x.row][x.col] = a[lane][e];
            ++seen_a[x.row][x.col];
            B[y.row][y.col] = b[lane][e];
            ++seen_b[y.row][y.col];
        }
    for (int i = 0; i < 16; ++i)
        for (int j = 0; j < 16; ++j) {
            ASSERT_EQ(seen_a[i][j], 1);
            ASSERT_EQ(seen_b[i][j], 1);
        }
    for (int lane = 0; lane < kLanes; ++lane)
        for (int e = 0; e < 8; ++e) {
            const Coord x = wmma::c_coord(lane, e);
            double s = 0;
            for (int k = 0; k < 16; ++k) s += A[x.row][k] * B[k][x.col];
            d[lane][e] += s;
        }
}

// A row-major 2-D array as the kernels keep one in LDS: `stride` elements per row.
struct Array2 {
    int rows, stride;
    std::vector<double> v;
    Array2(int r, int s) : rows(r), stride(s), v(static_cast<size_t>(r) * s, 0.0) {}
    double& at(int r, int c) { return v[static_cast<size_t>(r) * stride + c]; }
};

// The kernels' loads: 8 contiguous elements from (row, col) (a 16-byte load), or one element per
// lane element at the coordinates a gather computes.
Regs load_contiguous(Array2& m, Coord (*first)(int lane, int, int), int p, int q) {
    Regs r{};
    for (int lane = 0; lane < kLanes; ++lane) {
        const Coord c = first(lane, p, q);
        for (int e = 0; e < 8; ++e) r[lane][e] = m.at(c.row, c.col + e);
    }
    return r;
}
template <typename F> Regs load_gather(Array2& m, F coord) {
    Regs r{};
    for (int lane = 0; lane < kLanes; ++lane)
        for (int e = 0; e < 8; ++e) {
            const Coord c = coord(lane, e);
            r[lane][e] = m.at(c.row, c.col);
        }
    return r;
}
// D of (features [16c, 16c+16), rows [16m, 16m+16)) stored row-major (8 contiguous per lane).
void store_d(Array2& m, const Regs& d, int c, int mt) {
    for (int lane = 0; lane < kLanes; ++lane) {
        const Coord rc = wmma::d_to_transposed(lane, 16 * c, 16 * mt);
        for (int e = 0; e < 8; ++e) m.at(rc.row, rc.col + e) = d[lane][e];
    }
}

MlpLayout layout(int width, int n_in, int n_out, int hidden, Activation act, Activation out_act) {
    MlpLayout l;
    l.width = width, l.n_input_dims = n_in, l.n_output_dims = n_out, l.n_hidden_layers = hidden, l.bias = true;
    l.padded_input_dims = (n_in + 15) / 16 * 16, l.padded_output_dims = (n_out + 15) / 16 * 16;
    l.activation = act, l.output_activation = out_act;
    return l;
}

// The gfx12 kernels' forward and backward passes, tile by tile (16 rows, one wavefront), in fp64.
struct EmulatedFused {
    const MlpLayout& l;
    ffm::Shape s;
    wmma::Geometry geo;
    std::vector<Array2> slots;  // [out][in + 8] per layer, as load_slot lays them out
    explicit EmulatedFused(const MlpLayout& layout, const std::vector<double>& params)
        : l(layout), s(ffm::shape_of(layout)), geo{s} {
        for (int k = 0; k <= s.n_hidden; ++k) {
            const int in = geo.layer_in(k), out = geo.layer_out(k);
            Array2 w(out, in + 8);
            for (int o = 0; o < out; ++o)
                for (int i = 0; i < in; ++i) w.at(o, i) = params[geo.weight_offset(k) + int64_t(o) * in + i];
            slots.push_back(w);
        }
    }
    double bias(const std::vector<double>& p, int k, int o) const { return p[geo.bias_offset(k) + o]; }

    // Returns the outputs [rows][n_out]; with dy, also dL/dx [rows][n_in] and dL/dparams (parameter order).
    void run(const std::vector<double>& p, const std::vector<double>& x, int rows, std::vector<double>& y,
             const std::vector<double>* dy, std::vector<double>* dx, std::vector<double>* grads) {
        const int W = s.width, NC = W / 16, L = s.n_hidden;
        y.assign(static_cast<size_t>(rows) * s.n_out, 0.0);
        std::vector<double> dw(static_cast<size_t>(geo.n_params()), 0.0);  // the block's accumulators
        if (dx) dx->assign(static_cast<size_t>(rows) * s.n_in, 0.0);
        for (int row0 = 0; row0 < rows; row0 += 16) {
            const int valid = std::min(16, rows - row0);
            Array2 xt(16, s.pin + 8);  // input_to_tile
            for (int r = 0; r < 16; ++r)
                for (int c = 0; c < s.pin; ++c)
                    xt.at(r, c) = c < s.n_in ? (r < valid ? x[static_cast<size_t>(row0 + r) * s.n_in + c] : 0.0) : l.input_pad_value;
            std::vector<Array2> stash_a, stash_d;
            std::vector<Regs> h(NC);
            for (int k = 0; k < L; ++k) {
                std::vector<Regs> h2(NC);
                stash_a.emplace_back(16, W + 8);
                stash_d.emplace_back(16, W + 8);
                for (int c = 0; c < NC; ++c) {
                    Regs acc{};
                    for (int lane = 0; lane < kLanes; ++lane)
                        for (int e = 0; e < 8; ++e) acc[lane][e] = bias(p, k, 16 * c + wmma::c_coord(lane, e).row);
                    const int nk = k == 0 ? s.pin / 16 : NC;
                    for (int kk = 0; kk < nk; ++kk) {
                        const Regs a = load_contiguous(slots[k], wmma::a_from_row_major, 16 * c, 16 * kk);
                        const Regs b = k == 0 ? load_contiguous(xt, wmma::b_from_transposed, 16 * kk, 0) : h[kk];
                        wmma_emulated(acc, a, b);
                    }
                    Regs d{};
                    for (int lane = 0; lane < kLanes; ++lane)
                        for (int e = 0; e < 8; ++e) {
                            h2[c][lane][e] = activation_forward(l.activation, acc[lane][e]);
                            d[lane][e] = activation_derivative(l.activation, acc[lane][e]);
                        }
                    store_d(stash_a[k], h2[c], c, 0);
                    store_d(stash_d[k], d, c, 0);
                }
                h = h2;
            }
            // Output layer (and, for the backward pass, dz of the top layer into its tile).
            Array2 dz_top(16, std::max(W, s.pout) + 8);
            for (int c = 0; c < s.pout / 16; ++c) {
                Regs acc{};
                for (int lane = 0; lane < kLanes; ++lane)
                    for (int e = 0; e < 8; ++e) acc[lane][e] = bias(p, L, 16 * c + wmma::c_coord(lane, e).row);
                for (int kk = 0; kk < NC; ++kk)
                    wmma_emulated(acc, load_contiguous(slots[L], wmma::a_from_row_major, 16 * c, 16 * kk), h[kk]);
                Regs dz{};
                for (int lane = 0; lane < kLanes; ++lane) {
                    const Coord rc = wmma::d_to_transposed(lane, 16 * c, 0);
                    for (int e = 0; e < 8; ++e) {
                        const int col = rc.col + e;
                        if (rc.row < valid && col < s.n_out) {
                            y[static_cast<size_t>(row0 + rc.row) * s.n_out + col] = activation_forward(l.output_activation, acc[lane][e]);
                            if (dy)
                                dz[lane][e] = (*dy)[static_cast<size_t>(row0 + rc.row) * s.n_out + col] *
                                              activation_derivative(l.output_activation, acc[lane][e]);
                        }
                    }
                }
                store_d(dz_top, dz, c, 0);
            }
            if (!dy) continue;

            // Backward walk: dW of layer k from its dz tile and input tile, then the chain.
            Array2 dz_cur = dz_top;
            std::vector<Regs> dzr(NC);
            for (int k = L; k >= 0; --k) {
                const int out = geo.layer_out(k), in = geo.layer_in(k);
                Array2& act = k > 0 ? stash_a[k - 1] : xt;
                for (int mo = 0; mo < out / 16; ++mo)
                    for (int ni = 0; ni < in / 16; ++ni) {
                        Regs acc{}, accb{}, ones{};
                        for (auto& lane : ones) lane.fill(1.0);
                        const Regs a = load_gather(dz_cur, [&](int lane, int e) { return wmma::a_from_transposed(lane, 16 * mo, 0, e); });
                        const Regs b = load_gather(act, [&](int lane, int e) { return wmma::b_from_row_major(lane, 0, 16 * ni, e); });
                        wmma_emulated(acc, a, b);
                        wmma_emulated(accb, a, ones);
                        for (int lane = 0; lane < kLanes; ++lane)
                            for (int e = 0; e < 8; ++e) {
                                const Coord rc = wmma::c_coord(lane, e);
                                dw[geo.fragment_index(geo.weight_offset(k) + int64_t(16 * mo + rc.row) * in + 16 * ni + rc.col)] += acc[lane][e];
                                if (ni == 0 && wmma::holds_column0(lane)) dw[geo.bias_offset(k) + 16 * mo + rc.row] += accb[lane][e];
                            }
                    }
                // dL/da_{k-1}^T = W_k^T dz_k^T.
                const int n_chunks = in / 16;
                std::vector<Regs> dzn(NC);
                Array2 dz_next(16, std::max(W, s.pout) + 8);
                for (int c = 0; c < n_chunks; ++c) {
                    Regs acc{};
                    const int nk = k == L ? s.pout / 16 : NC;
                    for (int kk = 0; kk < nk; ++kk) {
                        const Regs a = load_gather(slots[k], [&](int lane, int e) { return wmma::a_from_transposed(lane, 16 * c, 16 * kk, e); });
                        const Regs b = k == L ? load_contiguous(dz_cur, wmma::b_from_transposed, 16 * kk, 0) : dzr[kk];
                        wmma_emulated(acc, a, b);
                    }
                    if (k > 0) {
                        Regs d{};
                        for (int lane = 0; lane < kLanes; ++lane) {
                            const Coord rc = wmma::d_to_transposed(lane, 16 * c, 0);
                            for (int e = 0; e < 8; ++e) {
                                const double fp = ffm::derivative_from_output(l.activation)
                                                      ? activation_derivative(l.activation, stash_a[k - 1].at(rc.row, rc.col + e))
                                                      : stash_d[k - 1].at(rc.row, rc.col + e);
                                d[lane][e] = acc[lane][e] * fp;
                            }
                        }
                        dzn[c] = d;
                        store_d(dz_next, d, c, 0);
                    } else if (dx) {
                        for (int lane = 0; lane < kLanes; ++lane) {
                            const Coord rc = wmma::d_to_transposed(lane, 16 * c, 0);
                            for (int e = 0; e < 8; ++e)
                                if (rc.row < valid && rc.col + e < s.n_in)
                                    (*dx)[static_cast<size_t>(row0 + rc.row) * s.n_in + rc.col + e] = acc[lane][e];
                        }
                    }
                }
                dzr = dzn;
                dz_cur = dz_next;
            }
        }
        if (grads) {  // the reduction (or the single block) reads parameter i at fragment_index(i)
            grads->assign(static_cast<size_t>(geo.n_params()), 0.0);
            for (int64_t i = 0; i < geo.n_params(); ++i) (*grads)[static_cast<size_t>(i)] = dw[static_cast<size_t>(geo.fragment_index(i))];
        }
    }
};

Tensor f64_tensor(const std::vector<double>& v, int64_t rows, int64_t cols) {
    Tensor t(rows, cols, DType::f64);
    const View w = t.view();
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c) static_cast<double*>(w.data)[r * w.stride + c] = v[static_cast<size_t>(r * cols + c)];
    return t;
}

}  // namespace

TEST(WmmaLayout, FragmentMapsAreBijections) {
    std::set<std::pair<int, int>> a, b, c;
    for (int lane = 0; lane < kLanes; ++lane)
        for (int e = 0; e < 8; ++e) {
            for (auto [set, x] : {std::pair{&a, wmma::a_coord(lane, e)}, std::pair{&b, wmma::b_coord(lane, e)},
                                  std::pair{&c, wmma::c_coord(lane, e)}}) {
                EXPECT_TRUE(x.row >= 0 && x.row < 16 && x.col >= 0 && x.col < 16);
                set->insert({x.row, x.col});
            }
        }
    EXPECT_EQ(a.size(), 256u);
    EXPECT_EQ(b.size(), 256u);
    EXPECT_EQ(c.size(), 256u);
}

TEST(WmmaLayout, VectorLoadsAndStoresCoverTheDocumentedElements) {
    // The kernels move a lane's 8 elements with one 16-byte access where the map makes them
    // consecutive along a row of the array; check that claim element by element.
    for (int lane = 0; lane < kLanes; ++lane)
        for (int e = 0; e < 8; ++e) {
            const Coord a = wmma::a_coord(lane, e), a0 = wmma::a_from_row_major(lane, 32, 48);
            EXPECT_EQ(a0.row, 32 + a.row);
            EXPECT_EQ(a0.col + e, 48 + a.col);  // W[m][k]
            const Coord b = wmma::b_coord(lane, e), b0 = wmma::b_from_transposed(lane, 16, 64);
            EXPECT_EQ(b0.row, 64 + b.col);  // X[n][k] = B[k][n]
            EXPECT_EQ(b0.col + e, 16 + b.row);
            const Coord c = wmma::c_coord(lane, e), d0 = wmma::d_to_transposed(lane, 96, 16);
            EXPECT_EQ(d0.row, 16 + c.col);  // Z[n][m] = D[m][n]
            EXPECT_EQ(d0.col + e, 96 + c.row);
            EXPECT_EQ(b0.col % 8, 0);  // 16-byte aligned in rows of 8k elements
            EXPECT_EQ(a0.col % 8, 0);
            EXPECT_EQ(d0.col % 8, 0);
        }
}

TEST(WmmaLayout, DFragmentIsTheNextLayersBFragment) {
    // The register handoff: element e of lane L of D (features x rows) must be element e of lane L
    // of B (features as K x rows), for any 16 x 16 block.
    for (int lane = 0; lane < kLanes; ++lane)
        for (int e = 0; e < 8; ++e) {
            EXPECT_EQ(wmma::c_coord(lane, e).row, wmma::b_coord(lane, e).row);
            EXPECT_EQ(wmma::c_coord(lane, e).col, wmma::b_coord(lane, e).col);
        }
}

TEST(WmmaLayout, GeometryEqualsShape) {
    // The kernels use wmma::Geometry (always inlined) for Shape's offsets and the reduction's
    // fragment order; it must stay equal to Shape's own methods.
    for (int w : {16, 32, 64, 128})
        for (int n_in : {3, 16, 33})
            for (int n_out : {1, 16, 40})
                for (int hidden : {1, 2, 5})
                    for (bool bias : {false, true}) {
                        MlpLayout l = layout(w, n_in, n_out, hidden, Activation::ReLU, Activation::None);
                        l.bias = bias;
                        const ffm::Shape s = ffm::shape_of(l);
                        const wmma::Geometry g{s};
                        ASSERT_EQ(g.n_params(), s.n_params());
                        ASSERT_EQ(g.n_matrix_params(), s.n_matrix_params());
                        for (int k = 0; k <= hidden; ++k) {
                            ASSERT_EQ(g.layer_in(k), s.layer_in(k));
                            ASSERT_EQ(g.layer_out(k), s.layer_out(k));
                            ASSERT_EQ(g.weight_offset(k), s.weight_offset(k));
                            ASSERT_EQ(g.bias_offset(k), s.bias_offset(k));
                            ASSERT_EQ(g.slot_offset(k), s.slot_offset(k));
                        }
                        for (int64_t p = 0; p < s.n_params(); ++p) ASSERT_EQ(g.fragment_index(p), s.fragment_index(p));
                    }
}

TEST(WmmaLayout, EmulatedKernelsComputeTheReferenceMlp) {
    struct Case {
        int width, n_in, n_out, hidden;
        Activation act, out_act;
    };
    // Several k-steps in layer 0 (n_in 20 -> 32 padded), several output chunks (n_out 18 -> 32),
    // both f' sources (read off a: ReLU; stored: Tanh), tails (37 rows = 2 full tiles + 5).
    for (const Case& c : {Case{16, 5, 3, 2, Activation::ReLU, Activation::None}, Case{32, 20, 18, 2, Activation::Tanh, Activation::Sigmoid},
                          Case{64, 7, 33, 3, Activation::LeakyReLU, Activation::None}, Case{32, 3, 1, 1, Activation::SiLU, Activation::Tanh}}) {
        const MlpLayout l = layout(c.width, c.n_in, c.n_out, c.hidden, c.act, c.out_act);
        const int rows = 37;
        const std::vector<double> params = test::random_vector(l.n_params(), -0.5, 0.5, 11);
        const std::vector<double> x = test::random_vector(static_cast<size_t>(rows) * c.n_in, -1, 1, 12);
        const std::vector<double> dy = test::random_vector(static_cast<size_t>(rows) * c.n_out, -1, 1, 13);

        std::vector<double> y, dx, grads;
        EmulatedFused(l, params).run(params, x, rows, y, &dy, &dx, &grads);

        Tensor xt = f64_tensor(x, rows, c.n_in), yt(rows, c.n_out, DType::f64), dyt = f64_tensor(dy, rows, c.n_out);
        Tensor dxt(rows, c.n_in, DType::f64);
        std::vector<double> ref_grads(l.n_params());
        MlpReference<double> ref(l);
        auto ctx = ref.forward(xt.view(), yt.view(), params.data(), true);
        View dxv = dxt.view();
        ref.backward(*ctx, dyt.view(), &dxv, ref_grads.data(), params.data(), GradMode::overwrite);

        // Only the order of the fp64 sums differs.
        const std::string what = msg("width ", c.width, " in ", c.n_in, " out ", c.n_out);
        test::expect_close(y, yt.to_double_vector(), 1e-12, 1e-12, what + " outputs");
        test::expect_close(dx, dxt.to_double_vector(), 1e-12, 1e-12, what + " dL/dx");
        test::expect_close(grads, ref_grads, 1e-12, 1e-12, what + " dL/dparams");
    }
}
