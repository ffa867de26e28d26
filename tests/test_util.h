// Shared test helpers: random tensors, precision-derived tolerances, and finite-difference checks
// of a module's first and second derivatives in fp64 (the oracle for every gradient we compute).
#pragma once

#include <tnn/tnn.h>

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <vector>

namespace tnn::test {

// Uniform random values in [lo, hi) from a seeded Pcg32, converted to dtype, on the CPU.
inline Tensor random_tensor(int64_t rows, int64_t cols, DType dtype, double lo, double hi, uint64_t seed) {
    Tensor f64(rows, cols, DType::f64);
    Pcg32 rng(seed);
    for (int64_t i = 0; i < rows * cols; ++i) f64.ptr<double>()[i] = lo + (hi - lo) * rng.next_float();
    if (dtype == DType::f64) return f64;
    Tensor out(rows, cols, dtype);
    convert(Stream::cpu(), f64.view(), out.view());
    return out;
}

inline std::vector<double> random_vector(size_t n, double lo, double hi, uint64_t seed) {
    Pcg32 rng(seed);
    std::vector<double> v(n);
    for (auto& x : v) x = lo + (hi - lo) * rng.next_float();
    return v;
}

// Relative L2 error ||a - b|| / ||b|| (0 when both are zero).
inline double rel_l2(const std::vector<double>& a, const std::vector<double>& b) {
    double num = 0, den = 0;
    for (size_t i = 0; i < a.size(); ++i) {
        num += (a[i] - b[i]) * (a[i] - b[i]);
        den += b[i] * b[i];
    }
    return den == 0 ? std::sqrt(num) : std::sqrt(num / den);
}

// Expects |got - want| <= atol + rtol * |want| elementwise, reporting the first few failures.
inline void expect_close(const std::vector<double>& got, const std::vector<double>& want, double atol, double rtol,
                         const std::string& what) {
    ASSERT_EQ(got.size(), want.size()) << what;
    int failures = 0;
    for (size_t i = 0; i < got.size(); ++i) {
        const double err = std::fabs(got[i] - want[i]);
        if (!(err <= atol + rtol * std::fabs(want[i]))) {
            if (++failures <= 5)
                ADD_FAILURE() << what << "[" << i << "]: got " << got[i] << ", want " << want[i] << " (err " << err
                              << ", allowed " << atol + rtol * std::fabs(want[i]) << ")";
        }
    }
    EXPECT_EQ(failures, 0) << what << ": " << failures << " of " << got.size() << " elements out of tolerance";
}

// Scalar probe of a module in fp64: L(x, p) = sum_ij w_ij * y_ij(x, p) with fixed random weights w.
struct GradCheckResult {
    double max_param_err = 0, max_input_err = 0;
};

// Central differences with step h on every parameter and input element of an fp64 module, against
// its backward(). Tolerance: the central difference has truncation error O(h^2 * f''') and rounding
// error O(eps_64 * |L| / h); with h = 1e-6 and O(1) values both stay below ~1e-8 relative, so
// rtol = 1e-6 leaves margin without hiding real errors (a wrong gradient is off by O(1)).
// Modules with kinks (ReLU, grids at cell borders) must keep inputs away from them.
inline void check_gradients(const Module& m, const Tensor& input, const std::vector<double>& params,
                            uint64_t seed, double rtol = 1e-6, double atol = 1e-8, double h = 1e-6,
                            bool check_input = true) {
    ASSERT_EQ(m.param_dtype(), DType::f64);
    const Stream cpu;
    const int64_t rows = input.rows();
    const auto w = random_vector(static_cast<size_t>(rows * m.n_output_dims()), -1.0, 1.0, seed);
    auto eval = [&](const Tensor& x, const std::vector<double>& p) {
        Tensor y(rows, m.n_output_dims(), DType::f64);
        m.inference(cpu, x.view(), y.view(), p.data());
        double L = 0;
        for (int64_t i = 0; i < y.numel(); ++i) L += w[i] * y.ptr<double>()[i];
        return L;
    };
    Tensor y(rows, m.n_output_dims(), DType::f64), dLdy(rows, m.n_output_dims(), DType::f64);
    for (int64_t i = 0; i < dLdy.numel(); ++i) dLdy.ptr<double>()[i] = w[i];
    auto ctx = m.forward(cpu, input.view(), y.view(), params.data(), true);
    Tensor dLdx(rows, m.n_input_dims(), DType::f64);
    View dLdx_view = dLdx.view();
    std::vector<double> dLdp(m.n_params(), 0.0);
    m.backward(cpu, *ctx, input.view(), y.view(), dLdy.view(), check_input ? &dLdx_view : nullptr, dLdp.data(),
               params.data(), GradMode::overwrite);

    std::vector<double> fd_p(m.n_params());
    for (size_t i = 0; i < m.n_params(); ++i) {
        auto p = params;
        p[i] = params[i] + h;
        const double lp = eval(input, p);
        p[i] = params[i] - h;
        const double lm = eval(input, p);
        fd_p[i] = (lp - lm) / (2 * h);
    }
    expect_close(dLdp, fd_p, atol, rtol, m.describe() + " dL/dparams");
    if (!check_input) return;
    std::vector<double> fd_x(static_cast<size_t>(input.numel()));
    for (int64_t i = 0; i < input.numel(); ++i) {
        Tensor x = input.to(Device::cpu());
        x.ptr<double>()[i] += h;
        const double lp = eval(x, params);
        x.ptr<double>()[i] -= 2 * h;
        const double lm = eval(x, params);
        fd_x[i] = (lp - lm) / (2 * h);
    }
    expect_close(dLdx.to_double_vector(), fd_x, atol, rtol, m.describe() + " dL/dinput");
}

// Second derivatives: with g(x, p, u) = dL/dx for dL/dy = u, probe L'(x, p, u) = sum v * g with
// fixed random v, and check backward_backward_input's dL'/du, dL'/dp and dL'/dx by central
// differences of backward(). Same tolerance reasoning as check_gradients.
inline void check_second_derivatives(const Module& m, const Tensor& input, const std::vector<double>& params,
                                     uint64_t seed, double rtol = 1e-6, double atol = 1e-8, double h = 1e-6) {
    ASSERT_EQ(m.param_dtype(), DType::f64);
    ASSERT_TRUE(m.supports_backward_backward());
    const Stream cpu;
    const int64_t rows = input.rows();
    const uint32_t n_in = m.n_input_dims(), n_out = m.n_output_dims();
    const auto u = random_vector(static_cast<size_t>(rows * n_out), -1.0, 1.0, seed);
    const auto v = random_vector(static_cast<size_t>(rows * n_in), -1.0, 1.0, seed + 1);
    auto first = [&](const Tensor& x, const std::vector<double>& p, const std::vector<double>& uu) {
        Tensor y(rows, n_out, DType::f64), dLdy(rows, n_out, DType::f64), dLdx(rows, n_in, DType::f64);
        std::copy(uu.begin(), uu.end(), dLdy.ptr<double>());
        auto ctx = m.forward(cpu, x.view(), y.view(), p.data(), true);
        View dv = dLdx.view();
        m.backward(cpu, *ctx, x.view(), y.view(), dLdy.view(), &dv, nullptr, p.data(), GradMode::overwrite);
        double L = 0;
        for (int64_t i = 0; i < dLdx.numel(); ++i) L += v[i] * dLdx.ptr<double>()[i];
        return L;
    };
    Tensor y(rows, n_out, DType::f64), dLdy(rows, n_out, DType::f64), vv(rows, n_in, DType::f64);
    std::copy(u.begin(), u.end(), dLdy.ptr<double>());
    std::copy(v.begin(), v.end(), vv.ptr<double>());
    auto ctx = m.forward(cpu, input.view(), y.view(), params.data(), true);
    Tensor d_u(rows, n_out, DType::f64), d_x(rows, n_in, DType::f64);
    View d_u_view = d_u.view(), d_x_view = d_x.view();
    std::vector<double> d_p(m.n_params(), 0.0);
    m.backward_backward_input(cpu, *ctx, input.view(), vv.view(), dLdy.view(), &d_u_view, &d_x_view, d_p.data(),
                              params.data(), GradMode::overwrite);

    std::vector<double> fd(u.size());
    for (size_t i = 0; i < u.size(); ++i) {
        auto uu = u;
        uu[i] = u[i] + h;
        const double lp = first(input, params, uu);
        uu[i] = u[i] - h;
        fd[i] = (lp - first(input, params, uu)) / (2 * h);
    }
    expect_close(d_u.to_double_vector(), fd, atol, rtol, m.describe() + " dL'/d(dL/dy)");
    std::vector<double> fd_p(m.n_params());
    for (size_t i = 0; i < m.n_params(); ++i) {
        auto p = params;
        p[i] = params[i] + h;
        const double lp = first(input, p, u);
        p[i] = params[i] - h;
        fd_p[i] = (lp - first(input, p, u)) / (2 * h);
    }
    expect_close(d_p, fd_p, atol, rtol, m.describe() + " dL'/dparams");
    std::vector<double> fd_x(static_cast<size_t>(input.numel()));
    for (int64_t i = 0; i < input.numel(); ++i) {
        Tensor x = input.to(Device::cpu());
        x.ptr<double>()[i] += h;
        const double lp = first(x, params, u);
        x.ptr<double>()[i] -= 2 * h;
        fd_x[i] = (lp - first(x, params, u)) / (2 * h);
    }
    expect_close(d_x.to_double_vector(), fd_x, atol, rtol, m.describe() + " dL'/dinput");
}

// Initial parameters of a module as fp64 values (init in fp32, widened).
inline std::vector<double> init_params_f64(const Module& m, uint64_t seed) {
    std::vector<float> p(m.n_params());
    m.init_params(seed, p.data());
    return std::vector<double>(p.begin(), p.end());
}

}  // namespace tnn::test
