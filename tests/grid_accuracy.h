// A check shared by the CPU and GPU test programs: the grid encoding's x-derivatives where its field
// is nearly constant, against the fp64 CPU reference, within a bound derived from fp32 rounding.
#pragma once

#include "encodings/grid_math.h"
#include "test_util.h"

#include <array>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

namespace tnn::test {

// A field of nearly equal values (0.5 +- 1e-3, a smooth field's neighbourhood): the x-derivatives
// sum dW_c/dx V_c over corners whose weight derivatives sum to 0, so summed as V_c their terms are
// about 500 times the result and cancel. Taken as V_c - V_0 (grid::value_step) the terms are of the
// result's size. Positions are exact in fp32 (x = k / 1024, integer scales with per_level_scale 2), so
// fp32 and fp64 see the same cells and fractions (Linear weights exact too; Smoothstep's polynomial is
// rounded, counted below), and the fp32 error is rounding only, bounded per row
// by eps32 x (roundings in one term and the sum) x S, S the sum of the terms' magnitudes:
//   dL/dx_d:          S = sum_l |dw_d/dx| sum_f |g_lf| max|V_c - V_0|, since sum_c |dW_c/dx_d| = |dw_d/dx|
//   dL'/d(dL/dy)_lf:  S = sum_d |v_d| |dw_d/dx| max|V_c - V_0|
//   dL'/dx_h:         S = sum_l sum_f |g_lf| max|V_c - V_0| (sum_{g != h} |v_g| 4 |dw_g/dx| |dw_h/dx|
//                         + |v_h| 2 |d2w_h/dx2|), since sum_c |d2W_c/(dx_g dx_h)| is 4 |dw_g| |dw_h| for
//                         g != h (four sign patterns of the two bits) and 2 |d2w_h| on the diagonal
// with |dw/dx| <= 1.5 scale (Smoothstep's largest slope; Linear's is scale), |d2w/dx2| <= 6 scale^2
// (Smoothstep; 0 for Linear), max|V_c - V_0| <= 2e-3.
// Roundings per term: the weight derivative's D - 1 products, its factors (1 - w, Smoothstep's
// polynomial: 4) and the slope (1), the difference (0: exact by Sterbenz), the product with g or
// v and the feature sum (F + 1); then the sum of C x L (or C, D) terms. The Hessian term has D - 1
// products, the factors (4) and slopes (2: scale^2 w''), the sum over g with v (D + 1) and the
// product with the feature sum (F + 2), then C x L terms.
// Elementwise the bound is the worst case (n roundings of eps each); over the whole tensor the
// roundings of independent rows add like random errors, so the L2 norm of the error is held to
// eps sqrt(n) times the L2 norm of the S values (the whole-tensor check of STYLE.md item 9).
inline void expect_accurate_input_gradients_of_a_flat_field(const Stream& stream) {
    const uint32_t D = 3, F = 2, L = 4, C = 1u << D;
    const int64_t rows = 512;
    for (const char* interp : {"Linear", "Smoothstep"}) {
        SCOPED_TRACE(interp);
        const json cfg = {{"otype", "HashGrid"},         {"n_levels", L},         {"n_features_per_level", F},
                          {"log2_hashmap_size", 14},     {"base_resolution", 16}, {"per_level_scale", 2.0},
                          {"interpolation", interp}};
        auto e32 = create_encoding(D, cfg, DType::f32);
        auto e64 = create_encoding(D, cfg, DType::f64);
        const size_t n = e32->n_params();
        std::vector<float> p32(n);
        std::vector<double> p64(n);
        const auto u = random_vector(n, -1, 1, 21);
        for (size_t i = 0; i < n; ++i) p64[i] = p32[i] = static_cast<float>(0.5 + 1e-3 * u[i]);

        const auto kx = random_vector(static_cast<size_t>(rows) * D, 0, 1024, 22);
        const auto g = random_vector(static_cast<size_t>(rows) * L * F, -1, 1, 23);
        const auto v = random_vector(static_cast<size_t>(rows) * D, -1, 1, 24);
        auto tensors = [&](DType t, Device dev) {
            Tensor x(rows, D, t), gt(rows, L * F, t), vt(rows, D, t);
            dispatch_dtype(t, [&](auto z) {
                using T = decltype(z);
                for (size_t i = 0; i < kx.size(); ++i) x.ptr<T>()[i] = T(std::floor(kx[i]) / 1024.0);
                for (size_t i = 0; i < g.size(); ++i) gt.ptr<T>()[i] = T(static_cast<float>(g[i]));
                for (size_t i = 0; i < v.size(); ++i) vt.ptr<T>()[i] = T(static_cast<float>(v[i]));
            });
            return std::array<Tensor, 3>{x.to(dev), gt.to(dev), vt.to(dev)};
        };
        // dL/dx, dL'/d(dL/dy) and dL'/dx, as doubles.
        auto run_grads = [&](const Encoding& e, DType t, const Stream& s, const void* host_params) {
            const Device dev = s.device();
            auto [x, gt, vt] = tensors(t, dev);
            Tensor p(1, static_cast<int64_t>(n), t);
            std::memcpy(p.data(), host_params, n * dtype_size(t));
            const Tensor pd = p.to(dev);
            Tensor y(rows, L * F, t, dev), dx(rows, D, t, dev), dg(rows, L * F, t, dev), dx2(rows, D, t, dev);
            auto ctx = e.forward(s, x.view(), y.view(), pd.data(), true);
            View dxv = dx.view(), dgv = dg.view(), dx2v = dx2.view();
            e.backward(s, *ctx, x.view(), y.view(), gt.view(), &dxv, nullptr, pd.data(), GradMode::overwrite);
            e.backward_backward_input(s, *ctx, x.view(), vt.view(), gt.view(), &dgv, &dx2v, nullptr, pd.data(),
                                      GradMode::overwrite);
            s.synchronize();
            return std::array<std::vector<double>, 3>{dx.to(Device::cpu()).to_double_vector(),
                                                       dg.to(Device::cpu()).to_double_vector(),
                                                       dx2.to(Device::cpu()).to_double_vector()};
        };
        const auto got = run_grads(*e32, DType::f32, stream, p32.data());
        const auto want = run_grads(*e64, DType::f64, Stream::cpu(), p64.data());

        const double eps = dtype_epsilon(DType::f32), step = 2e-3;
        const double term = (D - 1) + 4 + 1 + (F + 1), term2 = (D - 1) + 4 + 2 + (D + 1) + (F + 2);
        const bool smooth = std::string(interp) == "Smoothstep";
        std::vector<double> slope(L), curve(L);  // 1.5 scale_l; 6 scale_l^2 (Smoothstep) or 0
        for (uint32_t l = 0; l < L; ++l) {
            const double scale = grid::grid_scale(l, 1.0f, 16);
            slope[l] = 1.5 * scale;
            curve[l] = smooth ? 6 * scale * scale : 0.0;
        }
        // Whole-tensor sums per quantity: squared errors and squared S, and the roundings n.
        double err2[3] = {0, 0, 0}, scale2[3] = {0, 0, 0};
        const double n_terms[3] = {term + C * L, term + C + D, term2 + C * L};
        auto whole = [&](int q, double got_v, double want_v, double s_v) {
            err2[q] += (got_v - want_v) * (got_v - want_v);
            scale2[q] += s_v * s_v;
        };
        for (int64_t r = 0; r < rows; ++r) {
            double s = 0;
            for (uint32_t l = 0; l < L; ++l)
                for (uint32_t f = 0; f < F; ++f) s += slope[l] * std::fabs(g[(r * L + l) * F + f]) * step;
            for (uint32_t d = 0; d < D; ++d) {
                const double bound = eps * (term + C * L) * s;
                EXPECT_NEAR(got[0][r * D + d], want[0][r * D + d], bound) << "dL/dx, row " << r << " dim " << d;
                whole(0, got[0][r * D + d], want[0][r * D + d], s);
            }
            for (uint32_t h = 0; h < D; ++h) {
                double s2 = 0;
                for (uint32_t l = 0; l < L; ++l) {
                    double gs = 0, hs = std::fabs(v[r * D + h]) * 2 * curve[l];
                    for (uint32_t f = 0; f < F; ++f) gs += std::fabs(g[(r * L + l) * F + f]);
                    for (uint32_t k = 0; k < D; ++k)
                        if (k != h) hs += std::fabs(v[r * D + k]) * 4 * slope[l] * slope[l];
                    s2 += gs * step * hs;
                }
                const double bound = eps * (term2 + C * L) * s2;
                EXPECT_NEAR(got[2][r * D + h], want[2][r * D + h], bound) << "dL'/dx, row " << r << " dim " << h;
                whole(2, got[2][r * D + h], want[2][r * D + h], s2);
            }
            double vs = 0;
            for (uint32_t d = 0; d < D; ++d) vs += std::fabs(v[r * D + d]);
            for (uint32_t l = 0; l < L; ++l)
                for (uint32_t f = 0; f < F; ++f) {
                    const double bound = eps * (term + C + D) * vs * slope[l] * step;
                    EXPECT_NEAR(got[1][(r * L + l) * F + f], want[1][(r * L + l) * F + f], bound)
                        << "dL'/d(dL/dy), row " << r << " level " << l << " feature " << f;
                    whole(1, got[1][(r * L + l) * F + f], want[1][(r * L + l) * F + f], vs * slope[l] * step);
                }
        }
        const char* names[3] = {"dL/dx", "dL'/d(dL/dy)", "dL'/dx"};
        for (int q = 0; q < 3; ++q)
            EXPECT_LE(std::sqrt(err2[q]), eps * std::sqrt(n_terms[q] * scale2[q])) << names[q] << ", whole tensor";
    }
}

}  // namespace tnn::test
