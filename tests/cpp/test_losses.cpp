// Losses: values against the formulas written out here in fp64, gradients against central
// differences of the summed values (with the relative losses' denominators frozen, as tcnn treats
// them), every prediction dtype, the data pdf in both layouts, thread-count independence, sum(), and
// the typed errors of bad calls and configs.
#include "test_util.h"

#include <tnn/tnn.h>

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

namespace tnn {
namespace {

const std::vector<std::string> kLosses = {"L2",   "L1",    "RelativeL2",   "RelativeL1", "RelativeL2Luminance",
                                          "MAPE", "SMAPE", "CrossEntropy", "Variance"};

bool is_relative(const std::string& loss) {
    return loss == "RelativeL2" || loss == "RelativeL1" || loss == "RelativeL2Luminance" || loss == "SMAPE";
}

// Ranges that keep every loss smooth around the data: CrossEntropy and Variance divide by (or take
// the log of) the prediction, so it stays positive; elsewhere predictions and targets are signed.
struct Ranges {
    double p_lo, p_hi, t_lo, t_hi;
};
Ranges ranges_for(const std::string& loss) {
    if (loss == "CrossEntropy") return {0.1, 1.0, 0.0, 1.0};
    if (loss == "Variance") return {0.5, 1.5, -1.0, 1.0};
    return {-1.0, 1.0, -1.0, 1.0};
}

// The losses as documented (docs/losses_optimizers.md), in fp64. `den_p` is the prediction the
// relative losses divide by and `lum` the row luminance; the gradient check freezes both.
double formula(const std::string& loss, double p, double t, double pdf, double n, double den_p, double lum) {
    const double d = p - t;
    if (loss == "L2") return d * d / pdf / n;
    if (loss == "L1") return std::fabs(d) / pdf / n;
    if (loss == "RelativeL2") return d * d / (den_p * den_p + 0.01) / pdf / n;
    if (loss == "RelativeL1") return std::fabs(d) / (std::fabs(den_p) + 0.01) / pdf / n;
    if (loss == "RelativeL2Luminance") return d * d / (lum * lum + 0.01) / pdf / n;
    if (loss == "MAPE") return std::fabs(d) / (std::fabs(t) + 0.01) / pdf / n;
    if (loss == "SMAPE") return std::fabs(d) / (0.5 * (std::fabs(t) + std::fabs(den_p)) + 0.01) / pdf / n;
    if (loss == "CrossEntropy") return -t / pdf / n * std::log(p);
    if (loss == "Variance") return t * t / pdf / n * (1.0 / p - 1.0 / pdf);
    ADD_FAILURE() << "no formula for " << loss;
    return 0;
}

double row_luminance(const std::vector<double>& p, int64_t r, int64_t cols) {
    const double* x = &p[r * cols];
    double red = x[0], green = x[1], blue = x[2];
    if (cols >= 6) {
        red += x[3];
        green += x[4];
        blue += x[5];
    }
    return 0.299 * red + 0.587 * green + 0.114 * blue;
}

enum class Pdf { none, per_sample, per_element };

struct Case {
    int64_t rows, cols;
    Tensor prediction, target, pdf;
    Pdf pdf_kind;
    const ConstView* pdf_ptr() const { return pdf_kind == Pdf::none ? nullptr : &pdf_view; }
    ConstView pdf_view;
};

Case make_case(const std::string& loss, DType dtype, int64_t rows, int64_t cols, Pdf pdf_kind, uint64_t seed) {
    const Ranges rg = ranges_for(loss);
    const DType target_dtype = dtype == DType::f64 ? DType::f64 : DType::f32;
    Case c{rows, cols, test::random_tensor(rows, cols, dtype, rg.p_lo, rg.p_hi, seed),
           test::random_tensor(rows, cols, target_dtype, rg.t_lo, rg.t_hi, seed + 1), Tensor(), pdf_kind, ConstView()};
    if (pdf_kind != Pdf::none) {
        c.pdf = test::random_tensor(rows, pdf_kind == Pdf::per_sample ? 1 : cols, target_dtype, 0.5, 2.0, seed + 2);
        c.pdf_view = c.pdf.view();
    }
    return c;
}

double pdf_at(const Case& c, const std::vector<double>& pdf, int64_t r, int64_t col) {
    if (c.pdf_kind == Pdf::none) return 1.0;
    return c.pdf_kind == Pdf::per_sample ? pdf[r] : pdf[r * c.cols + col];
}

struct Result {
    std::vector<double> values, gradients;
};

Result evaluate(const Loss& loss, float loss_scale, const Case& c) {
    const DType values_dtype = c.prediction.dtype() == DType::f64 ? DType::f64 : DType::f32;
    Tensor values(c.rows, c.cols, values_dtype), gradients(c.rows, c.cols, c.prediction.dtype());
    loss.evaluate(Stream::cpu(), loss_scale, c.prediction.view(), c.target.view(), c.pdf_ptr(), values.view(),
                  gradients.view());
    return {values.to_double_vector(), gradients.to_double_vector()};
}

// The values of `loss` at the case's own data, from the formulas (denominators not frozen).
std::vector<double> formula_values(const std::string& loss, const Case& c) {
    const auto p = c.prediction.to_double_vector(), t = c.target.to_double_vector();
    const auto pdf = c.pdf_kind == Pdf::none ? std::vector<double>() : c.pdf.to_double_vector();
    const double n = static_cast<double>(c.rows * c.cols);
    std::vector<double> out(p.size());
    for (int64_t r = 0; r < c.rows; ++r) {
        const double lum = c.cols >= 3 ? row_luminance(p, r, c.cols) : 0.0;
        for (int64_t col = 0; col < c.cols; ++col) {
            const size_t i = static_cast<size_t>(r * c.cols + col);
            out[i] = formula(loss, p[i], t[i], pdf_at(c, pdf, r, col), n, p[i], lum);
        }
    }
    return out;
}

double sum_of(const std::vector<double>& v) {
    double s = 0;
    for (double x : v) s += x;
    return s;
}

// ---- fp64: values and gradients ----

// In fp64 both sides do the same handful of operations on the same inputs: a few ulps of fp64.
constexpr double kF64ValueRtol = 64 * 0x1p-52;

TEST(Losses, Fp64ValuesMatchTheFormulas) {
    for (const auto& name : kLosses) {
        for (Pdf pdf : {Pdf::none, Pdf::per_sample, Pdf::per_element}) {
            auto loss = create_loss({{"otype", name}});
            const Case c = make_case(name, DType::f64, 5, 7, pdf, 11);
            const Result res = evaluate(*loss, 1.0f, c);
            test::expect_close(res.values, formula_values(name, c), 1e-300, kF64ValueRtol,
                               name + " values (pdf " + std::to_string(static_cast<int>(pdf)) + ")");
        }
    }
}

// gradient_i must be loss_scale * d(sum of values)/d(prediction_i). For the relative losses the
// derivative is the one with the denominators (which depend on the prediction) held constant, so
// the central difference runs over the formula with frozen denominators; for every other loss it
// runs over Loss::evaluate itself. Tolerance as in test_util.h's check_gradients: h = 1e-6 makes
// truncation and rounding errors of the central difference ~1e-9 relative; a wrong gradient is off by O(1).
TEST(Losses, Fp64GradientsAreScaledDerivativesOfTheSummedValues) {
    const double h = 1e-6, rtol = 1e-6, atol = 1e-9;
    const float loss_scale = 3.0f;
    for (const auto& name : kLosses) {
        for (Pdf pdf_kind : {Pdf::none, Pdf::per_sample, Pdf::per_element}) {
            auto loss = create_loss({{"otype", name}});
            const int64_t rows = 4, cols = name == "RelativeL2Luminance" ? 6 : 3;
            const Case c = make_case(name, DType::f64, rows, cols, pdf_kind, 21);
            const Result res = evaluate(*loss, loss_scale, c);
            const auto p = c.prediction.to_double_vector(), t = c.target.to_double_vector();
            const auto pdf = pdf_kind == Pdf::none ? std::vector<double>() : c.pdf.to_double_vector();
            const double n = static_cast<double>(rows * cols);

            std::vector<double> fd(p.size()), fd_unfrozen(p.size());
            for (int64_t r = 0; r < rows; ++r) {
                const double lum = row_luminance(p, r, cols);
                for (int64_t col = 0; col < cols; ++col) {
                    const size_t i = static_cast<size_t>(r * cols + col);
                    // Through evaluate: every value may depend on p_i (the luminance reads the row).
                    Case moved = make_case(name, DType::f64, rows, cols, pdf_kind, 21);
                    moved.prediction.ptr<double>()[i] = p[i] + h;
                    const double up = sum_of(evaluate(*loss, 1.0f, moved).values);
                    moved.prediction.ptr<double>()[i] = p[i] - h;
                    const double down = sum_of(evaluate(*loss, 1.0f, moved).values);
                    fd_unfrozen[i] = loss_scale * (up - down) / (2 * h);
                    // Frozen denominators: only element i's term moves.
                    const double pd = pdf_at(c, pdf, r, col);
                    fd[i] = loss_scale *
                            (formula(name, p[i] + h, t[i], pd, n, p[i], lum) - formula(name, p[i] - h, t[i], pd, n, p[i], lum)) /
                            (2 * h);
                }
            }
            const std::string what = name + " gradients (pdf " + std::to_string(static_cast<int>(pdf_kind)) + ")";
            if (is_relative(name)) {
                test::expect_close(res.gradients, fd, atol, rtol, what + " vs frozen-denominator derivative");
                // And the denominators really are held constant: the full derivative differs.
                EXPECT_GT(test::rel_l2(res.gradients, fd_unfrozen), 1e-3) << what;
            } else {
                test::expect_close(res.gradients, fd_unfrozen, atol, rtol, what + " vs derivative of evaluate");
            }
        }
    }
}

// RelativeL2Luminance below six channels uses channels 0..2 only; channels 3..5 join from six on.
TEST(Losses, LuminanceUsesThreeOrSixChannels) {
    auto loss = create_loss({{"otype", "RelativeL2Luminance"}});
    for (int64_t cols : {3, 4, 5, 6, 8}) {
        const Case c = make_case("RelativeL2Luminance", DType::f64, 3, cols, Pdf::none, 31);
        test::expect_close(evaluate(*loss, 1.0f, c).values, formula_values("RelativeL2Luminance", c), 1e-300,
                           kF64ValueRtol, "RelativeL2Luminance cols " + std::to_string(cols));
    }
}

// ---- reduced precision ----

// Values are computed in fp32 from inputs the fp64 reference sees exactly: at most ~8 fp32 roundings
// (one libm call for CrossEntropy, <= 1 ulp), each <= 2^-24 relative to the terms involved. Variance
// subtracts two terms, so the bound is relative to the larger magnitude in the tensor (atol).
// Gradients get one more rounding, to the prediction dtype: half an ulp of that dtype.
TEST(Losses, ReducedPrecisionMatchesTheFp64Reference) {
    const double eps32 = 0x1p-24;
    for (DType dtype : {DType::f32, DType::f16, DType::bf16}) {
        const float loss_scale = dtype == DType::f32 ? 1.0f : 128.0f;
        for (const auto& name : kLosses) {
            auto loss = create_loss({{"otype", name}});
            const Case c = make_case(name, dtype, 6, 5, Pdf::per_sample, 41);
            const Result res = evaluate(*loss, loss_scale, c);

            Case c64 = make_case(name, DType::f64, 6, 5, Pdf::per_sample, 41);
            convert(Stream::cpu(), c.prediction.view(), c64.prediction.view());  // the same rounded inputs
            convert(Stream::cpu(), c.target.view(), c64.target.view());
            convert(Stream::cpu(), c.pdf.view(), c64.pdf.view());
            const Result ref = evaluate(*loss, loss_scale, c64);

            double max_value = 0, max_grad = 0;
            for (double v : ref.values) max_value = std::max(max_value, std::fabs(v));
            for (double g : ref.gradients) max_grad = std::max(max_grad, std::fabs(g));
            const std::string what = name + " " + dtype_name(dtype);
            test::expect_close(res.values, ref.values, 16 * eps32 * max_value, 8 * eps32, what + " values");
            test::expect_close(res.gradients, ref.gradients, 16 * eps32 * max_grad, 0.5 * dtype_epsilon(dtype) + 8 * eps32,
                               what + " gradients");
        }
    }
}

TEST(Losses, GradientsAreWrittenInThePredictionDtype) {
    // The gradient must be the rounded fp32 result, not a truncation: compare with half(float) exactly.
    auto loss = create_loss({{"otype", "L2"}});
    const Case c = make_case("L2", DType::f16, 3, 4, Pdf::none, 51);
    Tensor values(3, 4, DType::f32), gradients(3, 4, DType::f16);
    loss->evaluate(Stream::cpu(), 128.0f, c.prediction.view(), c.target.view(), nullptr, values.view(), gradients.view());
    const auto p = c.prediction.to_float_vector(), t = c.target.to_float_vector();
    for (size_t i = 0; i < p.size(); ++i) {
        const float d = p[i] - t[i];
        EXPECT_EQ(gradients.ptr<half>()[i].bits, half(128.0f * (2 * d) / 12.0f).bits) << i;
    }
}

// ---- determinism, strides, sum ----

TEST(Losses, ResultsIndependentOfThreadCount) {
    const int saved = num_threads();
    for (const auto& name : {"L2", "RelativeL2Luminance", "CrossEntropy"}) {
        auto loss = create_loss({{"otype", name}});
        const Case c = make_case(name, DType::f16, 20000, 7, Pdf::per_element, 61);
        set_num_threads(1);
        const Result one = evaluate(*loss, 128.0f, c);
        Tensor v1(20000, 7, DType::f32), g1(20000, 7, DType::f16);
        loss->evaluate(Stream::cpu(), 128.0f, c.prediction.view(), c.target.view(), c.pdf_ptr(), v1.view(), g1.view());
        const double s1 = sum(Stream::cpu(), v1.view());
        set_num_threads(4);
        const Result four = evaluate(*loss, 128.0f, c);
        EXPECT_EQ(one.values, four.values) << name;
        EXPECT_EQ(one.gradients, four.gradients) << name;
        EXPECT_EQ(sum(Stream::cpu(), v1.view()), s1) << name;
    }
    set_num_threads(saved);
}

TEST(Losses, StridedViewsReadAndWriteOnlyTheirElements) {
    auto loss = create_loss({{"otype", "L1"}});
    const Case c = make_case("L1", DType::f32, 4, 3, Pdf::none, 71);
    const Result dense = evaluate(*loss, 1.0f, c);
    // The same data inside wider buffers (stride 5); the padding columns must stay untouched.
    Tensor p(4, 5, DType::f32), t(4, 5, DType::f32), v(4, 5, DType::f32), g(4, 5, DType::f32);
    fill(Stream::cpu(), v.view(), -7.0);
    fill(Stream::cpu(), g.view(), -7.0);
    copy(Stream::cpu(), c.prediction.view(), p.view().cols_slice(1, 3));
    copy(Stream::cpu(), c.target.view(), t.view().cols_slice(1, 3));
    loss->evaluate(Stream::cpu(), 1.0f, ConstView(p.view()).cols_slice(1, 3), ConstView(t.view()).cols_slice(1, 3), nullptr,
                   v.view().cols_slice(1, 3), g.view().cols_slice(1, 3));
    const auto vv = v.to_double_vector(), gg = g.to_double_vector();
    for (int64_t r = 0; r < 4; ++r)
        for (int64_t col = 0; col < 5; ++col) {
            const size_t i = static_cast<size_t>(r * 5 + col);
            if (col == 0 || col == 4) {
                EXPECT_EQ(vv[i], -7.0);
                EXPECT_EQ(gg[i], -7.0);
            } else {
                EXPECT_EQ(vv[i], dense.values[static_cast<size_t>(r * 3 + col - 1)]);
                EXPECT_EQ(gg[i], dense.gradients[static_cast<size_t>(r * 3 + col - 1)]);
            }
        }
}

TEST(Losses, SumIsAnFp64Sum) {
    // Positive fp32 values: any summation order in fp64 is within n * eps64 * sum of the exact sum.
    const Tensor v = test::random_tensor(3000, 11, DType::f32, 0.0, 1.0, 81);
    const auto x = v.to_double_vector();
    const double naive = sum_of(x);
    const double n = static_cast<double>(x.size());
    EXPECT_NEAR(sum(Stream::cpu(), v.view()), naive, n * 0x1p-52 * naive);
    // Far below fp32 resolution: an fp32 accumulator would lose this.
    Tensor big(2, 1, DType::f64);
    big.ptr<double>()[0] = 1e16;
    big.ptr<double>()[1] = 1.0;
    EXPECT_EQ(sum(Stream::cpu(), big.view()), 1e16 + 1.0);
    EXPECT_EQ(sum(Stream::cpu(), Tensor(0, 3, DType::f32).view()), 0.0);
    EXPECT_THROW(sum(Stream::cpu(), Tensor(2, 2, DType::f16).view()), DTypeError);
}

TEST(Losses, EmptyBatchIsANoOp) {
    auto loss = create_loss({{"otype", "L2"}});
    Tensor p(0, 3, DType::f32), t(0, 3, DType::f32), v(0, 3, DType::f32), g(0, 3, DType::f32);
    EXPECT_NO_THROW(loss->evaluate(Stream::cpu(), 1.0f, p.view(), t.view(), nullptr, v.view(), g.view()));
}

// ---- configs ----

TEST(Losses, RegistryNamesHyperparamsAndDefaults) {
    EXPECT_EQ(loss_names(), kLosses);
    for (const auto& name : kLosses) {
        auto loss = create_loss({{"otype", name}});
        EXPECT_EQ(loss->name(), name);
        EXPECT_EQ(create_loss(loss->hyperparams())->hyperparams(), loss->hyperparams());
    }
    EXPECT_EQ(create_loss({{"otype", "mape"}})->name(), "MAPE");       // case-insensitive, tcnn spells it Mape
    EXPECT_EQ(create_loss({{"otype", "Smape"}})->name(), "SMAPE");
    EXPECT_EQ(create_loss(json::object())->name(), "RelativeL2");    // tcnn's default otype
}

TEST(Losses, BadConfigsRaiseConfigErrorsNamingTheProblem) {
    try {
        create_loss({{"otype", "Huberish"}});
        ADD_FAILURE() << "unknown otype accepted";
    } catch (const ConfigError& e) {
        const std::string what = e.what();
        EXPECT_NE(what.find("Huberish"), std::string::npos) << what;
        EXPECT_NE(what.find("RelativeL2Luminance"), std::string::npos) << what;  // lists the choices
    }
    EXPECT_THROW(create_loss({{"otype", 3}}), ConfigError);
    EXPECT_THROW(create_loss(json::array()), ConfigError);
    std::vector<std::string> warnings;
    set_log_callback([&](LogLevel, const std::string& m) { warnings.push_back(m); });
    create_loss({{"otype", "L2"}, {"scale", 2}});
    set_log_callback(nullptr);
    ASSERT_EQ(warnings.size(), 1u);
    EXPECT_NE(warnings[0].find("'scale'"), std::string::npos) << warnings[0];
}

// ---- bad calls ----

TEST(Losses, BadCallsRaiseTypedErrors) {
    auto loss = create_loss({{"otype", "L2"}});
    const Stream cpu;
    Tensor p(4, 3, DType::f32), t(4, 3, DType::f32), v(4, 3, DType::f32), g(4, 3, DType::f32);
    auto call = [&](ConstView pp, ConstView tt, const ConstView* pdf, View vv, View gg, float ls = 1.0f) {
        loss->evaluate(cpu, ls, pp, tt, pdf, vv, gg);
    };
    EXPECT_NO_THROW(call(p.view(), t.view(), nullptr, v.view(), g.view()));
    EXPECT_THROW(call(p.view(), Tensor(4, 2, DType::f32).view(), nullptr, v.view(), g.view()), ShapeError);
    EXPECT_THROW(call(p.view(), Tensor(5, 3, DType::f32).view(), nullptr, v.view(), g.view()), ShapeError);
    EXPECT_THROW(call(p.view(), t.view(), nullptr, Tensor(4, 2, DType::f32).view(), g.view()), ShapeError);
    EXPECT_THROW(call(p.view(), t.view(), nullptr, v.view(), Tensor(3, 3, DType::f32).view()), ShapeError);
    const Tensor bad_pdf(4, 2, DType::f32), pdf_rows(3, 1, DType::f32), pdf_f16(4, 1, DType::f16);
    const ConstView bad_pdf_v = bad_pdf.view(), pdf_rows_v = pdf_rows.view(), pdf_f16_v = pdf_f16.view();
    EXPECT_THROW(call(p.view(), t.view(), &bad_pdf_v, v.view(), g.view()), ShapeError);
    EXPECT_THROW(call(p.view(), t.view(), &pdf_rows_v, v.view(), g.view()), ShapeError);
    EXPECT_THROW(call(p.view(), t.view(), &pdf_f16_v, v.view(), g.view()), DTypeError);
    EXPECT_THROW(call(p.view(), Tensor(4, 3, DType::f16).view(), nullptr, v.view(), g.view()), DTypeError);
    EXPECT_THROW(call(p.view(), t.view(), nullptr, Tensor(4, 3, DType::bf16).view(), g.view()), DTypeError);
    EXPECT_THROW(call(p.view(), t.view(), nullptr, v.view(), Tensor(4, 3, DType::f16).view()), DTypeError);
    EXPECT_THROW(call(p.view(), t.view(), nullptr, v.view(), g.view(), std::nanf("")), InputError);
    EXPECT_THROW(call(p.view(), t.view(), nullptr, v.view(), g.view(), 0.0f), InputError);
    // A view that claims to live on a GPU next to CPU views, and a GPU stream for CPU views.
    ConstView t_gpu(t.data(), DType::f32, Device::gpu(0), 4, 3);
    EXPECT_THROW(call(p.view(), t_gpu, nullptr, v.view(), g.view()), DeviceError);
    EXPECT_THROW(loss->evaluate(Stream::gpu(nullptr, 0), 1.0f, p.view(), t.view(), nullptr, v.view(), g.view()), DeviceError);
    EXPECT_THROW(call(ConstView(nullptr, DType::f32, Device::cpu(), 4, 3), t.view(), nullptr, v.view(), g.view()), ShapeError);
    // RelativeL2Luminance needs R, G and B.
    auto lum = create_loss({{"otype", "RelativeL2Luminance"}});
    Tensor p2(4, 2, DType::f32), t2(4, 2, DType::f32), v2(4, 2, DType::f32), g2(4, 2, DType::f32);
    EXPECT_THROW(lum->evaluate(cpu, 1.0f, p2.view(), t2.view(), nullptr, v2.view(), g2.view()), ShapeError);
}

TEST(Losses, GpuViewsWithoutAGpuBackendAreUnsupported) {
    if (has_gpu_backend()) GTEST_SKIP() << "this build has a GPU backend";
    auto loss = create_loss({{"otype", "L2"}});
    Tensor p(4, 3, DType::f32);
    const Device gpu = Device::gpu(0);
    ConstView pg(p.data(), DType::f32, gpu, 4, 3);
    View vg(p.data(), DType::f32, gpu, 4, 3);
    EXPECT_THROW(loss->evaluate(Stream::gpu(nullptr, 0), 1.0f, pg, pg, nullptr, vg, vg), UnsupportedError);
    EXPECT_THROW(sum(Stream::gpu(nullptr, 0), pg), UnsupportedError);
}

}  // namespace
}  // namespace tnn
