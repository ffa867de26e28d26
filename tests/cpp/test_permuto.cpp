// Tests of the Permuto encoding: properties of the lattice maths in permuto_math.h (weights a partition
// of unity that reproduces the point, vertices on the lattice, entries in range, shifts reproducible,
// tangents and input gradients consistent), then the module: sizes and layout, tcnn's initialisation,
// fp64 finite-difference first and second derivatives, gradient modes, coarse-to-fine, reduced
// precision, Composite and NetworkWithInputEncoding, and config errors.
#include "encodings/encoding_registry.h"
#include "encodings/permuto.h"
#include "encodings/permuto_math.h"
#include "test_util.h"

#include <tnn/model.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <set>
#include <string>
#include <vector>

namespace tnn::test {
namespace {

using permuto::kMaxDims;

const Stream kCpu;

// One level's lattice for tests of the maths alone: scale 8 * 1.5^level, tcnn's default seed.
PermutoLevels test_levels(uint32_t n_dims, uint32_t n_levels = 3) {
    return permuto_levels(n_dims, n_levels, 8.0f, 1.5f, 1337);
}

struct Located {
    permuto::Simplex<double, kMaxDims> s;
    double e[kMaxDims + 1];
    double w[kMaxDims + 1];
};

Located locate64(uint32_t d, const double* x, const PermutoLevels& L, uint32_t level) {
    Located p;
    double c[kMaxDims];
    for (uint32_t i = 0; i < d; ++i)
        c[i] = (x[i] + static_cast<double>(L.shift_of(level)[i])) * static_cast<double>(L.scale_of(level)[i]);
    permuto::elevate(d, c, p.e);
    permuto::find_simplex(d, p.e, p.s);
    permuto::barycentric(d, p.s.rest, p.s.rank, 1.0, p.w);
    return p;
}

const uint32_t kDims[] = {1, 2, 3, 4, 5, 7, 8, 12, 16, 24, 32};

// ---- permuto_math.h properties ------------------------------------------------------------------------

TEST(PermutoMath, ShiftsAreReproducibleAndInRange) {
    // tcnn: a PCG32 seeded with `seed`, advanced by level * d, draws mapped by fmaf(r, 10, -5).
    for (uint32_t d : {1u, 3u, 7u}) {
        float a[kMaxDims], b[kMaxDims];
        for (uint32_t l = 0; l < 4; ++l) {
            permuto::level_shifts(1337, l, d, a);
            permuto::level_shifts(1337, l, d, b);
            Pcg32 rng(1337);
            rng.advance(uint64_t(l) * d);
            for (uint32_t i = 0; i < d; ++i) {
                EXPECT_EQ(a[i], b[i]);
                EXPECT_EQ(a[i], std::fma(rng.next_float(), 10.0f, -5.0f));
                EXPECT_GE(a[i], -5.0f);
                EXPECT_LT(a[i], 5.0f);
            }
        }
        permuto::level_shifts(7, 0, d, b);
        permuto::level_shifts(1337, 0, d, a);
        EXPECT_NE(a[0], b[0]) << "the seed changes the shifts";
    }
}

TEST(PermutoMath, ScalesFollowTheFormula) {
    for (uint32_t i = 0; i < kMaxDims; ++i)
        EXPECT_EQ(permuto::dim_factor(i), static_cast<float>(1.0 / std::sqrt((i + 1.0) * (i + 2.0))));
    // Power-of-two per_level_scale: exact powers.
    for (uint32_t l = 0; l < 8; ++l) EXPECT_EQ(permuto::level_scale(16.0f, 2.0f, l), 16.0f * std::ldexp(1.0f, l));
    const PermutoLevels L = permuto_levels(3, 2, 4.0f, 3.0f, 9);
    EXPECT_EQ(L.scale_of(1)[2], L.level_scale[1] * permuto::dim_factor(2));
}

// The weights are a partition of unity with non-negative entries, and their combination of the
// simplex's vertices (full d + 1 coordinates) is the elevated point: the point lies in that simplex.
// Vertex k is a remainder-k lattice point (coordinates = k mod d + 1, summing to 0), and the ranks are
// a permutation of 0..d. Tolerance: the weights come from residuals |e_j - rem0_j| <= d + 1 and the
// elevated coordinates from d sums of terms <= max|e|, each rounded in fp64: a few (d + 1) max(1,
// max|e|) eps64.
TEST(PermutoMath, WeightsArePartitionOfUnityAndReproduceThePoint) {
    const double eps = DBL_EPSILON;
    for (uint32_t d : kDims) {
        SCOPED_TRACE(d);
        const PermutoLevels L = test_levels(d);
        const auto xs = random_vector(200 * d, 0, 1, d);
        for (int r = 0; r < 200; ++r)
            for (uint32_t l = 0; l < L.n_levels; ++l) {
                const Located p = locate64(d, &xs[r * d], L, l);
                double emax = 1;
                for (uint32_t j = 0; j <= d; ++j) emax = std::max(emax, std::fabs(p.e[j]));
                const double tol = 8 * (d + 1) * emax * eps;
                double sum = 0;
                std::vector<int> ranks;
                for (uint32_t k = 0; k <= d; ++k) {
                    EXPECT_GE(p.w[k], -tol) << "row " << r << " level " << l << " vertex " << k;
                    sum += p.w[k];
                    ranks.push_back(p.s.rank[k]);
                }
                EXPECT_NEAR(sum, 1.0, tol);
                std::sort(ranks.begin(), ranks.end());
                for (uint32_t k = 0; k <= d; ++k) ASSERT_EQ(ranks[k], static_cast<int>(k));
                for (uint32_t j = 0; j <= d; ++j) {
                    double comb = 0;
                    for (uint32_t k = 0; k <= d; ++k) {
                        const int32_t c = static_cast<int32_t>(permuto::vertex_coordinate(d, p.s.rem0, p.s.rank, k, j));
                        comb += p.w[k] * c;
                    }
                    EXPECT_NEAR(comb, p.e[j], 4 * tol) << "row " << r << " level " << l << " coordinate " << j;
                }
                for (uint32_t k = 0; k <= d; ++k) {
                    int64_t coord_sum = 0;
                    for (uint32_t j = 0; j <= d; ++j) {
                        const int32_t c = static_cast<int32_t>(permuto::vertex_coordinate(d, p.s.rem0, p.s.rank, k, j));
                        coord_sum += c;
                        EXPECT_EQ(((c % int32_t(d + 1)) + int32_t(d + 1)) % int32_t(d + 1), int32_t(k % (d + 1)));
                    }
                    EXPECT_EQ(coord_sum, 0) << "vertex " << k;
                }
            }
    }
}

// Vertex entries are in range, follow the base-convert hash of the first d coordinates, and are a
// pure function of the input (same point, same entries).
TEST(PermutoMath, VertexEntriesInRangeAndFollowTheHash) {
    for (uint32_t d : {1u, 3u, 6u, 32u}) {
        const PermutoLevels L = test_levels(d, 1);
        const auto xs = random_vector(100 * d, 0, 1, 40 + d);
        for (int r = 0; r < 100; ++r) {
            const Located p = locate64(d, &xs[r * d], L, 0);
            for (uint32_t log2 : {0u, 4u, 19u, 31u}) {
                const uint32_t mask = static_cast<uint32_t>((uint64_t(1) << log2) - 1);
                for (uint32_t k = 0; k <= d; ++k) {
                    uint32_t h = 0;
                    for (uint32_t i = 0; i < d; ++i) {
                        h += permuto::vertex_coordinate(d, p.s.rem0, p.s.rank, k, i);
                        h *= 2531011u;
                    }
                    const uint32_t e = permuto::vertex_entry(d, p.s.rem0, p.s.rank, k, mask);
                    EXPECT_EQ(e, h & mask);
                    EXPECT_LE(e, mask);
                    const Located again = locate64(d, &xs[r * d], L, 0);
                    EXPECT_EQ(permuto::vertex_entry(d, again.s.rem0, again.s.rank, k, mask), e);
                }
            }
            // The d + 1 vertices are distinct lattice points.
            std::set<std::vector<uint32_t>> vertices;
            for (uint32_t k = 0; k <= d; ++k) {
                std::vector<uint32_t> v;
                for (uint32_t i = 0; i <= d; ++i) v.push_back(permuto::vertex_coordinate(d, p.s.rem0, p.s.rank, k, i));
                vertices.insert(v);
            }
            EXPECT_EQ(vertices.size(), d + 1u);
        }
    }
}

// Random points at least `margin` (in weight) inside their simplex at every level of L.
std::vector<double> inner_points(uint32_t d, const PermutoLevels& L, int n, double margin, uint64_t seed,
                                 double lo = 0.0, double hi = 1.0) {
    std::vector<double> out;
    Pcg32 rng(seed);
    std::vector<double> x(d);
    for (int attempts = 0; static_cast<int>(out.size()) < n * static_cast<int>(d); ++attempts) {
        if (attempts > 1000000) throw Error("test: no inner points");
        for (auto& v : x) v = lo + (hi - lo) * rng.next_float();
        bool ok = true;
        for (uint32_t l = 0; l < L.n_levels && ok; ++l)
            ok = permuto::min_weight(d, x.data(), L.shift_of(l), L.scale_of(l)) >= margin;
        if (ok) out.insert(out.end(), x.begin(), x.end());
    }
    return out;
}

// The weight tangent along v is the derivative of the weights (central differences inside the
// simplex are exact for a linear function up to rounding: eps64 |w| / h), and input_gradient is its
// adjoint: sum_i v_i dx_i(G) = sum_k G_k E_k(v) for any G.
TEST(PermutoMath, TangentAndInputGradientAreTheDerivativeAndItsAdjoint) {
    for (uint32_t d : {1u, 2u, 3u, 5u, 9u}) {
        SCOPED_TRACE(d);
        const PermutoLevels L = test_levels(d, 2);
        const auto xs = inner_points(d, L, 20, 1e-3, 70 + d);
        const auto vs = random_vector(20 * d, -1, 1, 71);
        const auto Gs = random_vector(20 * (d + 1), -1, 1, 72);
        for (int r = 0; r < 20; ++r)
            for (uint32_t l = 0; l < 2; ++l) {
                const double* x = &xs[r * d];
                const double* v = &vs[r * d];
                const Located p = locate64(d, x, L, l);
                double E[kMaxDims + 1];
                permuto::weight_tangent(d, d, p.s, v, L.scale_of(l), E);
                const double h = 1e-7;
                std::vector<double> xp(x, x + d), xm(x, x + d);
                for (uint32_t i = 0; i < d; ++i) {
                    xp[i] += h * v[i];
                    xm[i] -= h * v[i];
                }
                const Located pp = locate64(d, xp.data(), L, l), pm = locate64(d, xm.data(), L, l);
                double esum = 0;
                for (uint32_t k = 0; k <= d; ++k) {
                    EXPECT_NEAR(E[k], (pp.w[k] - pm.w[k]) / (2 * h), 1e-6) << "vertex " << k;
                    esum += E[k];
                }
                EXPECT_NEAR(esum, 0.0, 1e-12);
                double G[kMaxDims + 1], dx[kMaxDims];
                for (uint32_t k = 0; k <= d; ++k) G[k] = Gs[r * (d + 1) + k];
                permuto::input_gradient(d, d, p.s, G, L.scale_of(l), dx);
                double lhs = 0, rhs = 0, mag = 0;
                for (uint32_t i = 0; i < d; ++i) lhs += v[i] * dx[i];
                for (uint32_t k = 0; k <= d; ++k) {
                    rhs += G[k] * E[k];
                    mag += std::fabs(G[k] * E[k]);
                }
                EXPECT_NEAR(lhs, rhs, 64 * DBL_EPSILON * (mag + 1));
            }
    }
}

// max_input_grad_dims: dimensions from n_grad_dims on have no input gradient and no tangent.
TEST(PermutoMath, GradientDimensionsLimit) {
    const uint32_t d = 4;
    const PermutoLevels L = test_levels(d, 1);
    const double x[4] = {0.2, 0.4, 0.6, 0.8}, v[4] = {0.3, -0.2, 0.7, 0.5}, vcut[4] = {0.3, -0.2, 0, 0};
    const Located p = locate64(d, x, L, 0);
    double E[kMaxDims + 1], Ecut[kMaxDims + 1];
    permuto::weight_tangent(d, 2, p.s, v, L.scale_of(0), E);
    permuto::weight_tangent(d, d, p.s, vcut, L.scale_of(0), Ecut);
    for (uint32_t k = 0; k <= d; ++k) EXPECT_EQ(E[k], Ecut[k]);
    double G[kMaxDims + 1] = {1, -2, 0.5, 3, -1}, dx[kMaxDims];
    permuto::input_gradient(d, 2, p.s, G, L.scale_of(0), dx);
    EXPECT_NE(dx[0], 0.0);
    EXPECT_EQ(dx[2], 0.0);
    EXPECT_EQ(dx[3], 0.0);
}

// fp32 and fp64 find the same simplex away from its faces, and their weights differ by the fp32
// rounding of the elevated coordinates: about (d + 3) roundings of terms up to max|e|, over d + 1.
TEST(PermutoMath, FloatAgreesWithDoubleAwayFromFaces) {
    for (uint32_t d : {2u, 3u, 6u, 16u}) {
        const PermutoLevels L = test_levels(d, 3);
        const auto xs = inner_points(d, L, 50, 1e-3, 90 + d);
        for (int r = 0; r < 50; ++r)
            for (uint32_t l = 0; l < 3; ++l) {
                const Located p = locate64(d, &xs[r * d], L, l);
                float xf[kMaxDims];
                for (uint32_t i = 0; i < d; ++i) xf[i] = static_cast<float>(xs[r * d + i]);
                permuto::Simplex<float, kMaxDims> sf;
                permuto::locate(d, xf, L.shift_of(l), L.scale_of(l), sf);
                float wf[kMaxDims + 1];
                permuto::barycentric(d, sf.rest, sf.rank, 1.0f, wf);
                double emax = 1;
                for (uint32_t j = 0; j <= d; ++j) emax = std::max(emax, std::fabs(p.e[j]));
                // x itself is rounded to fp32 (relative 2^-24) and moves e by up to the same max|e| scale.
                const double tol = FLT_EPSILON * emax * (d + 4);
                for (uint32_t k = 0; k <= d; ++k) {
                    EXPECT_EQ(sf.rank[k], p.s.rank[k]);
                    EXPECT_EQ(sf.rem0[k], p.s.rem0[k]);
                    EXPECT_NEAR(wf[k], p.w[k], tol);
                }
            }
    }
}

// Inputs outside the contract (inf, NaN, huge) give some value, never an out-of-range rank or entry.
TEST(PermutoMath, OutOfContractInputsStayInRange) {
    const uint32_t d = 3;
    const PermutoLevels L = test_levels(d, 1);
    for (double bad : {double(INFINITY), -double(INFINITY), double(NAN), 1e30, -1e30, 3e9}) {
        const double x[3] = {bad, 0.5, bad};
        const Located p = locate64(d, x, L, 0);
        for (uint32_t k = 0; k <= d; ++k) {
            EXPECT_GE(p.s.rank[k], 0);
            EXPECT_LE(p.s.rank[k], static_cast<int>(d));
            EXPECT_LE(permuto::vertex_entry(d, p.s.rem0, p.s.rank, k, 255u), 255u);
        }
    }
}

// ---- the module ------------------------------------------------------------------------------------

json permuto_config(uint32_t n_levels, uint32_t F, uint32_t log2, double base_scale = 4.0, double pls = 1.5) {
    return {{"otype", "Permuto"},    {"n_levels", n_levels},    {"n_features_per_level", F},
            {"log2_hashmap_size", log2}, {"base_scale", base_scale}, {"per_level_scale", pls}};
}

PermutoLevels levels_of(uint32_t d, const json& cfg) {
    return permuto_levels(d, cfg.value("n_levels", 16u), cfg.value("base_scale", 16.0f),
                          cfg.value("per_level_scale", 2.0f), cfg.value("seed", 1337u));
}

Tensor rows_tensor(const std::vector<double>& v, uint32_t d) {
    Tensor t(static_cast<int64_t>(v.size() / d), d, DType::f64);
    std::copy(v.begin(), v.end(), t.ptr<double>());
    return t;
}

TEST(Permuto, SizesLayoutAndNames) {
    auto e = create_encoding(3, {{"otype", "permuto"}});  // case-insensitive; tcnn's defaults
    EXPECT_EQ(e->name(), "Permuto");
    EXPECT_EQ(e->n_input_dims(), 3u);
    EXPECT_EQ(e->n_output_dims(), 32u);
    EXPECT_EQ(e->n_params(), 16u * (1u << 19) * 2u);
    EXPECT_EQ(e->padding_value(), 0.0f);
    EXPECT_EQ(required_output_alignment(*e), 2u);
    EXPECT_TRUE(e->supports_backward_backward());
    const json h = e->hyperparams();
    EXPECT_EQ(h["base_scale"], 16.0);
    EXPECT_EQ(h["per_level_scale"], 2.0);
    EXPECT_EQ(h["seed"], 1337);
    EXPECT_EQ(h["max_input_grad_dims"], 3);
    EXPECT_EQ(h["interpolation"], "Linear");
    const auto names = encoding_names();
    EXPECT_NE(std::find(names.begin(), names.end(), "Permuto"), names.end());
    // tcnn's aliases for the total width.
    EXPECT_EQ(create_encoding(2, {{"otype", "Permuto"}, {"n_features", 12}, {"n_features_per_level", 4}})
                  ->n_output_dims(),
              12u);
    EXPECT_EQ(create_encoding(2, {{"otype", "Permuto"}, {"n_grid_features", 6}, {"log2_hashmap_size", 4}})
                  ->hyperparams()["n_levels"],
              3);
}

TEST(Permuto, HyperparamsRoundTrip) {
    for (const json& cfg : {permuto_config(3, 4, 6, -2.5, 1.3), json{{"otype", "Permuto"},
                                                                      {"n_levels", 2},
                                                                      {"log2_hashmap_size", 5},
                                                                      {"seed", 4000000000u},
                                                                      {"max_input_grad_dims", 1},
                                                                      {"deterministic", true}}}) {
        auto a = create_encoding(4, cfg);
        auto b = create_encoding(4, a->hyperparams());
        EXPECT_EQ(a->hyperparams(), b->hyperparams());
        const auto p = random_vector(a->n_params(), -1, 1, 3);
        const Tensor x = random_tensor(20, 4, DType::f64, 0, 1, 4);
        auto a64 = create_encoding(4, cfg, DType::f64), b64 = create_encoding(4, a->hyperparams(), DType::f64);
        Tensor ya(20, a->n_output_dims(), DType::f64), yb(20, a->n_output_dims(), DType::f64);
        a64->inference(kCpu, x.view(), ya.view(), p.data());
        b64->inference(kCpu, x.view(), yb.view(), p.data());
        EXPECT_EQ(ya.to_double_vector(), yb.to_double_vector());
    }
}

// tcnn's hyperparams() add scales_table and shifts_table; they are accepted when they match.
TEST(Permuto, AcceptsMatchingTcnnTables) {
    const json base = permuto_config(3, 2, 6, 16.0, 2.0);
    const PermutoLevels L = levels_of(2, base);
    json cfg = base;
    cfg["scales_table"] = L.scale;
    cfg["shifts_table"] = L.shift;
    EXPECT_NO_THROW(create_encoding(2, cfg));
    cfg["shifts_table"][4] = L.shift[4] + 0.01;
    EXPECT_THROW(create_encoding(2, cfg), ConfigError);
}

TEST(Permuto, InitialisationIsTcnnsUniform) {
    auto e = create_encoding(3, permuto_config(2, 2, 8));
    const size_t n = e->n_params();
    Pcg32 a(1337), b(1337);
    std::vector<float> p(n), q(n);
    e->init_params(a, p.data());
    tcnn_uniform_init(b, n, -1e-4f, 1e-4f, q.data());
    EXPECT_EQ(p, q);
    for (float v : p) {
        EXPECT_GE(v, -1e-4f);
        EXPECT_LT(v, 1e-4f);
    }
    EXPECT_EQ(a.next_uint(), b.next_uint());
}

// A constant table gives that constant (the weights sum to 1), at every level and input dimension.
TEST(Permuto, ConstantTableGivesTheConstant) {
    for (uint32_t d : {1u, 3u, 8u, 32u}) {
        auto e = create_encoding(d, permuto_config(3, 2, 5), DType::f64);
        const std::vector<double> p(e->n_params(), 0.75);
        const Tensor x = random_tensor(40, d, DType::f64, 0, 1, d);
        Tensor y(40, e->n_output_dims(), DType::f64);
        e->inference(kCpu, x.view(), y.view(), p.data());
        for (double v : y.to_double_vector()) EXPECT_NEAR(v, 0.75, 1e-12) << d;
    }
}

// Output = sum_k w_k V[entry_k] computed from the maths header: a level with one entry per vertex
// value set to the entry's index makes the output the weighted entry index.
TEST(Permuto, OutputIsTheWeightedSumOfTheVertexEntries) {
    const uint32_t d = 3;
    const json cfg = permuto_config(2, 1, 10);
    auto e = create_encoding(d, cfg, DType::f64);
    std::vector<double> p(e->n_params());
    for (size_t i = 0; i < p.size(); ++i) p[i] = static_cast<double>(i % 1024) / 1024.0;
    const auto xs = random_vector(30 * d, 0, 1, 5);
    const Tensor x = rows_tensor(xs, d);
    Tensor y(30, 2, DType::f64);
    e->inference(kCpu, x.view(), y.view(), p.data());
    const PermutoLevels L = levels_of(d, cfg);
    for (int r = 0; r < 30; ++r)
        for (uint32_t l = 0; l < 2; ++l) {
            const Located q = locate64(d, &xs[r * d], L, l);
            double want = 0;
            for (uint32_t k = 0; k <= d; ++k)
                want += q.w[k] * permuto::vertex_entry(d, q.s.rem0, q.s.rank, k, 1023u) / 1024.0;
            EXPECT_NEAR(y.ptr<double>()[r * 2 + l], want, 1e-14);
        }
}

struct DerivativeCase {
    uint32_t d;
    json cfg;
};

std::vector<DerivativeCase> derivative_cases() {
    std::vector<DerivativeCase> v;
    v.push_back({1, permuto_config(3, 2, 4)});
    v.push_back({2, permuto_config(2, 4, 4, 3.0, 2.0)});
    v.push_back({3, permuto_config(3, 1, 5)});
    json limited = permuto_config(2, 2, 4);
    limited["max_input_grad_dims"] = 3;
    v.push_back({5, limited});
    v.push_back({9, permuto_config(1, 2, 4)});
    return v;
}

// fp64 central differences (test_util.h's tolerances): the encoding is linear in its parameters and
// piecewise linear in x, so the differences are exact up to rounding away from the simplex faces. With
// max_input_grad_dims < d the input gradient is cut on purpose (tested against the full one below).
TEST(Permuto, GradientsMatchFiniteDifferences) {
    for (const auto& c : derivative_cases()) {
        SCOPED_TRACE(c.cfg.dump() + " d=" + std::to_string(c.d));
        auto e = create_encoding(c.d, c.cfg, DType::f64);
        const Tensor x = rows_tensor(inner_points(c.d, levels_of(c.d, c.cfg), 4, 1e-3, 11 + c.d), c.d);
        const auto p = random_vector(e->n_params(), -1, 1, 12);
        check_gradients(*e, x, p, 13, 1e-6, 1e-8, 1e-6, !c.cfg.contains("max_input_grad_dims"));
    }
}

// Second order: dL'/d(dL/dy) and dL'/dparams against differences of backward(); dL'/dx is exactly 0
// (the weights are linear in x inside a simplex), which the differences confirm.
TEST(Permuto, SecondDerivativesMatchFiniteDifferences) {
    for (const auto& c : derivative_cases()) {
        SCOPED_TRACE(c.cfg.dump() + " d=" + std::to_string(c.d));
        auto e = create_encoding(c.d, c.cfg, DType::f64);
        const Tensor x = rows_tensor(inner_points(c.d, levels_of(c.d, c.cfg), 4, 1e-3, 21 + c.d), c.d);
        const auto p = random_vector(e->n_params(), -1, 1, 22);
        check_second_derivatives(*e, x, p, 23);
    }
}

// max_input_grad_dims = m: the leading m input gradients are those of the full encoding, the others 0.
TEST(Permuto, MaxInputGradDimsZeroesTheOtherDimensions) {
    json cfg = permuto_config(2, 2, 6);
    auto full = create_encoding(3, cfg, DType::f64);
    cfg["max_input_grad_dims"] = 1;
    auto e = create_encoding(3, cfg, DType::f64);
    const auto p = random_vector(e->n_params(), -1, 1, 1);
    const Tensor x = random_tensor(10, 3, DType::f64, 0, 1, 2), g = random_tensor(10, 4, DType::f64, -1, 1, 3);
    auto input_gradient = [&](const Encoding& enc) {
        Tensor y(10, 4, DType::f64), dx(10, 3, DType::f64);
        auto ctx = enc.forward(kCpu, x.view(), y.view(), p.data(), true);
        View dxv = dx.view();
        enc.backward(kCpu, *ctx, x.view(), y.view(), g.view(), &dxv, nullptr, p.data(), GradMode::overwrite);
        return dx.to_double_vector();
    };
    const auto v = input_gradient(*e), w = input_gradient(*full);
    double first = 0;
    for (int r = 0; r < 10; ++r) {
        EXPECT_EQ(v[r * 3], w[r * 3]);
        first += std::fabs(v[r * 3]);
        EXPECT_EQ(v[r * 3 + 1], 0.0);
        EXPECT_EQ(v[r * 3 + 2], 0.0);
    }
    EXPECT_GT(first, 0.0);
}

// Accumulate mode adds to what is there; overwrite replaces it (both orders).
TEST(Permuto, GradientModes) {
    auto e = create_encoding(2, permuto_config(2, 2, 6), DType::f64);
    const auto p = random_vector(e->n_params(), -1, 1, 1);
    const Tensor x = random_tensor(10, 2, DType::f64, 0, 1, 2), g = random_tensor(10, 4, DType::f64, -1, 1, 3);
    const Tensor v = random_tensor(10, 2, DType::f64, -1, 1, 4);
    Tensor y(10, 4, DType::f64);
    auto ctx = e->forward(kCpu, x.view(), y.view(), p.data(), false);
    std::vector<double> a(e->n_params(), 3.0), b(e->n_params(), 0.25), a2(e->n_params(), 3.0), b2(e->n_params(), 0.25);
    e->backward(kCpu, *ctx, x.view(), y.view(), g.view(), nullptr, a.data(), p.data(), GradMode::overwrite);
    e->backward(kCpu, *ctx, x.view(), y.view(), g.view(), nullptr, b.data(), p.data(), GradMode::accumulate);
    e->backward_backward_input(kCpu, *ctx, x.view(), v.view(), g.view(), nullptr, nullptr, a2.data(), p.data(),
                               GradMode::overwrite);
    e->backward_backward_input(kCpu, *ctx, x.view(), v.view(), g.view(), nullptr, nullptr, b2.data(), p.data(),
                               GradMode::accumulate);
    double nonzero = 0;
    for (size_t i = 0; i < a.size(); ++i) {
        EXPECT_DOUBLE_EQ(b[i], a[i] + 0.25);
        EXPECT_DOUBLE_EQ(b2[i], a2[i] + 0.25);
        nonzero += std::fabs(a[i]) + std::fabs(a2[i]);
    }
    EXPECT_GT(nonzero, 0.0);
}

// Coarse-to-fine: levels l >= max_level * n_levels + 1e-3 output 0 and get no gradient; backward follows
// the forward pass's setting.
TEST(Permuto, SetMaxLevelZeroesFinerLevelsAndTheirGradients) {
    auto e = create_encoding(2, permuto_config(4, 2, 5), DType::f64);
    const auto p = random_vector(e->n_params(), -1, 1, 4);
    const Tensor x = random_tensor(8, 2, DType::f64, 0, 1, 2);
    Tensor full(8, 8, DType::f64), y(8, 8, DType::f64), g(8, 8, DType::f64), dx(8, 2, DType::f64);
    e->inference(kCpu, x.view(), full.view(), p.data());
    fill(kCpu, g.view(), 1.0);
    e->set_max_level(0.5f);  // levels l < 0.5 * 4 + 1e-3 stay: 0, 1, 2
    auto ctx = e->forward(kCpu, x.view(), y.view(), p.data(), true);
    e->set_max_level(1.0f);
    const auto yv = y.to_double_vector(), fv = full.to_double_vector();
    for (int r = 0; r < 8; ++r)
        for (int k = 0; k < 8; ++k) EXPECT_EQ(yv[r * 8 + k], k < 6 ? fv[r * 8 + k] : 0.0);
    std::vector<double> dp(e->n_params(), 5.0);
    View dxv = dx.view();
    e->backward(kCpu, *ctx, x.view(), y.view(), g.view(), &dxv, dp.data(), p.data(), GradMode::overwrite);
    const size_t level3 = 3 * 32 * 2;  // 32 entries of 2 features per level
    double before = 0;
    for (size_t i = 0; i < dp.size(); ++i) {
        if (i >= level3) EXPECT_EQ(dp[i], 0.0) << i;
        else before += std::fabs(dp[i]);
    }
    EXPECT_GT(before, 0.0);
}

TEST(Permuto, GradientsDoNotDependOnThreadCount) {
    auto e = create_encoding(3, permuto_config(4, 2, 10), DType::f32);
    std::vector<float> p(e->n_params());
    e->init_params(7, p.data());
    const Tensor x = random_tensor(2000, 3, DType::f32, 0, 1, 3);
    const Tensor g = random_tensor(2000, e->n_output_dims(), DType::f32, -1, 1, 4);
    Tensor y(2000, e->n_output_dims(), DType::f32), dx(2000, 3, DType::f32);
    auto grads = [&](int threads) {
        set_num_threads(threads);
        std::vector<float> dp(e->n_params());
        auto ctx = e->forward(kCpu, x.view(), y.view(), p.data(), true);
        View dxv = dx.view();
        e->backward(kCpu, *ctx, x.view(), y.view(), g.view(), &dxv, dp.data(), p.data(), GradMode::overwrite);
        std::vector<float> all = dp;
        for (double v : dx.to_double_vector()) all.push_back(static_cast<float>(v));
        return all;
    };
    const auto one = grads(1), three = grads(3);
    set_num_threads(0);
    EXPECT_EQ(one, three);
}

// fp16 / bf16 parameters: outputs and parameter gradients are computed in fp32 and rounded once (half
// an ulp of the dtype, plus fp16's subnormal spacing near zero); input gradients stay fp32 and see the
// same values in the same order.
TEST(Permuto, ReducedPrecisionMatchesFp32) {
    for (DType dt : {DType::f16, DType::bf16}) {
        SCOPED_TRACE(dtype_name(dt));
        const json cfg = permuto_config(3, 2, 7);
        auto e32 = create_encoding(3, cfg, DType::f32);
        auto elo = create_encoding(3, cfg, dt);
        const size_t n = e32->n_params();
        const Tensor pr = random_tensor(1, static_cast<int64_t>(n), dt, -1, 1, 2);
        Tensor p32(1, static_cast<int64_t>(n), DType::f32);
        convert(kCpu, pr.view(), p32.view());
        const Tensor x = random_tensor(64, 3, DType::f32, 0, 1, 3);
        const Tensor glo = random_tensor(64, 6, dt, -1, 1, 4);
        Tensor g32(64, 6, DType::f32);
        convert(kCpu, glo.view(), g32.view());
        Tensor y32(64, 6, DType::f32), ylo(64, 6, dt), dx32(64, 3, DType::f32), dxlo(64, 3, DType::f32);
        Tensor dp32(1, static_cast<int64_t>(n), DType::f32), dplo(1, static_cast<int64_t>(n), dt);
        auto c32 = e32->forward(kCpu, x.view(), y32.view(), p32.data(), true);
        auto clo = elo->forward(kCpu, x.view(), ylo.view(), pr.data(), true);
        View v32 = dx32.view(), vlo = dxlo.view();
        e32->backward(kCpu, *c32, x.view(), y32.view(), g32.view(), &v32, dp32.data(), p32.data(), GradMode::overwrite);
        elo->backward(kCpu, *clo, x.view(), ylo.view(), glo.view(), &vlo, dplo.data(), pr.data(), GradMode::overwrite);
        const double rtol = dtype_epsilon(dt) / 2, atol = dt == DType::f16 ? std::ldexp(1.0, -24) : 1e-38;
        expect_close(ylo.to_double_vector(), y32.to_double_vector(), atol, rtol, "output");
        expect_close(dplo.to_double_vector(), dp32.to_double_vector(), atol, rtol, "dL/dparams");
        expect_close(dxlo.to_double_vector(), dx32.to_double_vector(), 0, 4 * dtype_epsilon(DType::f32), "dL/dx");
    }
}

// Nested in a Composite (its own dimensions, tcnn's alignment) and in front of an MLP (padding 0,
// gradients through both).
TEST(Permuto, InCompositeAndNetworkWithInputEncoding) {
    const json permuto = {{"otype", "Permuto"}, {"n_levels", 2}, {"n_features_per_level", 2},
                          {"log2_hashmap_size", 4}, {"base_scale", 4.0}, {"n_dims_to_encode", 2}};
    const json composite = {{"otype", "Composite"},
                            {"nested", {{{"otype", "Identity"}, {"n_dims_to_encode", 1}}, permuto}}};
    auto c = create_encoding(3, composite, DType::f64);
    EXPECT_EQ(c->n_output_dims(), 1u + 4u + 1u);  // Identity, alignment padding to 2, Permuto's 4 lanes
    const json p_alone = {{"otype", "Permuto"}, {"n_levels", 2}, {"log2_hashmap_size", 4}, {"base_scale", 4.0}};
    auto alone = create_encoding(2, p_alone, DType::f64);
    const PermutoLevels L = levels_of(2, p_alone);
    std::vector<double> xs;
    const auto inner = inner_points(2, L, 4, 1e-3, 3);
    const auto first = random_vector(4, 0, 1, 4);
    for (int r = 0; r < 4; ++r) xs.insert(xs.end(), {first[r], inner[2 * r], inner[2 * r + 1]});
    const Tensor x = rows_tensor(xs, 3);
    const auto p = random_vector(c->n_params(), -1, 1, 5);
    check_gradients(*c, x, p, 6);
    check_second_derivatives(*c, x, p, 7);

    json mlp = {{"otype", "PortableMLP"}, {"n_neurons", 8}, {"n_hidden_layers", 1}, {"activation", "Tanh"},
                {"dtype", "float64"}};
    auto m = create_network_with_input_encoding(2, 1, p_alone, mlp);
    EXPECT_EQ(m->n_params(), m->network().n_params() + m->encoding().n_params());
    EXPECT_EQ(m->network().layout().input_pad_value, 0.0f);
    std::vector<double> mp = init_params_f64(*m, 8);
    const auto big = random_vector(m->encoding().n_params(), -1, 1, 9);
    std::copy(big.begin(), big.end(), mp.end() - static_cast<std::ptrdiff_t>(big.size()));
    check_gradients(*m, rows_tensor(inner, 2), mp, 10);
}

// ---- config errors ---------------------------------------------------------------------------------

TEST(Permuto, BadConfigs) {
    const std::vector<std::pair<json, std::vector<std::string>>> cases = {
        {{{"otype", "Permuto"}, {"n_features_per_level", 3}}, {"n_features_per_level", "1, 2, 4 or 8", "3"}},
        {{{"otype", "Permuto"}, {"n_levels", 0}}, {"n_levels", "[1, 32]"}},
        {{{"otype", "Permuto"}, {"n_levels", 33}}, {"n_levels", "[1, 32]"}},
        {{{"otype", "Permuto"}, {"log2_hashmap_size", 32}}, {"log2_hashmap_size", "[0, 31]"}},
        {{{"otype", "Permuto"}, {"per_level_scale", 0}}, {"per_level_scale", "greater than 0"}},
        {{{"otype", "Permuto"}, {"base_scale", "16"}}, {"base_scale", "number"}},
        {{{"otype", "Permuto"}, {"interpolation", "Smoothstep"}}, {"interpolation", "Linear", "Smoothstep"}},
        {{{"otype", "Permuto"}, {"max_input_grad_dims", 4}}, {"max_input_grad_dims", "[0, 3]"}},
        {{{"otype", "Permuto"}, {"seed", -1}}, {"seed"}},
        {{{"otype", "Permuto"}, {"seed", 4294967296ll}}, {"seed"}},
        {{{"otype", "Permuto"}, {"n_features", 8}, {"n_levels", 4}}, {"n_features", "n_levels"}},
        {{{"otype", "Permuto"}, {"n_features", 7}}, {"n_features", "multiple"}},
        {{{"otype", "Permuto"}, {"n_features", 8}, {"n_grid_features", 8}}, {"n_features", "n_grid_features"}},
        {{{"otype", "Permuto"}, {"n_levels", 4}, {"log2_hashmap_size", 31}, {"n_features_per_level", 8}},
         {"2^32", "log2_hashmap_size"}},
        {{{"otype", "Permuto"}, {"base_scale", 1e9}}, {"level 0", "32 bits", "base_scale"}},
        {{{"otype", "Permuto"}, {"n_levels", 32}, {"per_level_scale", 3.0}}, {"level", "32 bits"}},
        {{{"otype", "Permuto"}, {"n_levels", 2}, {"per_level_scale", 1e38}, {"base_scale", 1e38}}, {"level 0"}},
        {{{"otype", "Permuto"}, {"scales_table", {1, 2}}}, {"scales_table", "48"}},
    };
    for (const auto& [cfg, words] : cases) {
        SCOPED_TRACE(cfg.dump());
        try {
            create_encoding(3, cfg);
            ADD_FAILURE() << "no ConfigError";
        } catch (const ConfigError& e) {
            const std::string what = e.what();
            for (const auto& s : words) EXPECT_NE(what.find(s), std::string::npos) << what << " lacks '" << s << "'";
        }
    }
    for (uint32_t bad : {0u, 33u}) {
        try {
            create_encoding(bad, {{"otype", "Permuto"}});
            ADD_FAILURE() << "no ConfigError for " << bad << " dims";
        } catch (const ConfigError& e) {
            const std::string what = e.what();
            EXPECT_TRUE(what.find("1 to 32") != std::string::npos || what.find("at least 1") != std::string::npos)
                << what;
        }
    }
    EXPECT_NO_THROW(create_encoding(32, {{"otype", "Permuto"}, {"n_levels", 2}, {"log2_hashmap_size", 4}}));
}

}  // namespace
}  // namespace tnn::test
