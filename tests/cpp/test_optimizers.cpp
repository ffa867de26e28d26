// Optimizers: Adam, SGD and Novograd against their formulas step by step (fp64 references written
// here, plus literal numbers for the rules that matter: zero-gradient skips, per-parameter step
// counters, L2 on matrix parameters only, AdaBound bounds, decays, clipping), every wrapper on top of
// SGD where the expected weights can be written down exactly, hyperparams() round trips, state()/
// load_state() continuing bit-identically, thread-count independence, and typed errors.
#include "test_util.h"

#include <tnn/tnn.h>

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

namespace tnn {
namespace {

constexpr double kEps32 = 0x1p-24;  // half an ulp of fp32 at 1: the relative error of one rounding

// The optimizer computes with fp32 hyperparameters (as tcnn does); references use the same values.
double f32(double x) { return static_cast<double>(static_cast<float>(x)); }

// A parameter vector as the trainer holds it: fp32 master weights and their copy in `dtype`
// (the same array when the dtype is fp32 and `alias` is set).
struct Params {
    std::vector<float> fp32;
    Tensor copy;
    DType dtype;
    bool alias;

    Params(const std::vector<double>& init, DType dtype_, bool alias_ = false)
        : fp32(init.begin(), init.end()), copy(1, static_cast<int64_t>(init.size()), dtype_), dtype(dtype_),
          alias(alias_ && dtype_ == DType::f32) {
        convert(Stream::cpu(), ConstView(fp32.data(), DType::f32, Device::cpu(), 1, n()), copy.view());
    }
    int64_t n() const { return static_cast<int64_t>(fp32.size()); }
    void* weights() { return alias ? static_cast<void*>(fp32.data()) : copy.data(); }
    std::vector<double> master() const { return std::vector<double>(fp32.begin(), fp32.end()); }
    std::vector<double> copy_values() const {
        if (alias) return master();
        return copy.to_double_vector();
    }
    Params clone() const {
        Params out(master(), dtype, alias);
        copy_bytes(Stream::cpu(), out.copy.data(), Device::cpu(), copy.data(), Device::cpu(), fp32.size() * dtype_size(dtype));
        return out;
    }
};

// Gradients arrive scaled by loss_scale and rounded to grad_dtype; returns what the optimizer will
// see after dividing by the loss scale (the reference's gradient).
struct Grads {
    Tensor scaled;
    std::vector<double> effective;
};
Grads make_grads(const std::vector<double>& g, float loss_scale, DType grad_dtype) {
    Tensor f64(1, static_cast<int64_t>(g.size()), DType::f64);
    for (size_t i = 0; i < g.size(); ++i) f64.ptr<double>()[i] = g[i] * loss_scale;
    Grads out{Tensor(1, static_cast<int64_t>(g.size()), grad_dtype), {}};
    convert(Stream::cpu(), f64.view(), out.scaled.view());
    const auto rounded = out.scaled.to_double_vector();
    for (double x : rounded) out.effective.push_back(static_cast<double>(static_cast<float>(x) / loss_scale));
    return out;
}

std::vector<double> step(Optimizer& opt, Params& p, const std::vector<double>& g, float loss_scale = 1.0f,
                         DType grad_dtype = DType::f32) {
    const Grads grads = make_grads(g, loss_scale, grad_dtype);
    opt.step(Stream::cpu(), loss_scale, p.fp32.data(), p.weights(), p.dtype, grads.scaled.data(), grad_dtype);
    return grads.effective;
}

const StateBlob& blob(const std::vector<StateBlob>& blobs, const std::string& name) {
    for (const auto& b : blobs)
        if (b.name == name) return b;
    static StateBlob none;
    ADD_FAILURE() << "no state blob '" << name << "'";
    return none;
}
std::vector<double> blob_floats(const Optimizer& opt, const std::string& name) {
    const auto state = opt.state(Stream::cpu());
    const StateBlob& b = blob(state, name);
    std::vector<float> v(b.bytes.size() / 4);
    std::memcpy(v.data(), b.bytes.data(), b.bytes.size());
    return std::vector<double>(v.begin(), v.end());
}
std::vector<uint32_t> blob_u32(const Optimizer& opt, const std::string& name) {
    const auto state = opt.state(Stream::cpu());
    const StateBlob& b = blob(state, name);
    std::vector<uint32_t> v(b.bytes.size() / 4);
    std::memcpy(v.data(), b.bytes.data(), b.bytes.size());
    return v;
}

std::vector<double> as_float(const float* p, size_t n) { return std::vector<double>(p, p + n); }

// ---- Adam ----

// tcnn's Adam written out in fp64 (docs/losses_optimizers.md has the same formulas).
struct AdamRef {
    double lr, beta1, beta2, eps, l2_reg, rel_decay = 0, abs_decay = 0, clip = 0, nm_factor = 1;
    bool adabound = false, opt_matrix = true, opt_non_matrix = true;
    size_t n_matrix;
    std::vector<double> w, m, v;
    std::vector<uint32_t> steps;
    uint32_t t = 0;

    void step(const std::vector<double>& g) {
        ++t;
        double lower = 0, upper = std::numeric_limits<double>::infinity();
        if (adabound) {
            lower = f32(0.1 - 0.1 / ((1 - beta2) * t + 1));
            upper = f32(0.1 + 0.1 / ((1 - beta2) * t));
        }
        for (size_t i = 0; i < w.size(); ++i) {
            const bool matrix = i < n_matrix;
            if (matrix ? !opt_matrix : (!opt_non_matrix || g[i] == 0)) continue;  // skipped: nothing moves
            const double gi = g[i] + (matrix ? l2_reg * w[i] : 0.0);
            m[i] = beta1 * m[i] + (1 - beta1) * gi;
            v[i] = beta2 * v[i] + (1 - beta2) * gi * gi;
            const uint32_t s = ++steps[i];
            const double a = lr * (matrix ? 1.0 : nm_factor) * std::sqrt(1 - std::pow(beta2, s)) / (1 - std::pow(beta1, s));
            const double eff = std::min(std::max(a / (std::sqrt(v[i]) + eps), lower), upper);
            double nw = (1 - rel_decay * a) * w[i] - std::copysign(abs_decay * a, w[i]) - eff * m[i];
            if (clip != 0) nw = std::min(std::max(nw, -clip), clip);
            w[i] = nw;
        }
    }
};

// Error bound of the fp32 optimizer against the fp64 reference after k steps: each step rounds the
// weight (|w| eps) and applies an update of size <= step_max computed in ~10 fp32 operations, one of
// which, 1 - beta2^s, cancels (beta2 / (1 - beta2) ~ 100 ulps before the square root halves it):
// (|w| + 64 step_max) eps per step; x2 because moment errors carry over to later steps. Adam's steps
// are ~lr in size (AdaBound's lower bound times a large moment can exceed that).
double adam_atol(int k, double w_max, double step_max) { return 2.0 * k * (w_max + 64 * step_max) * kEps32; }

void expect_adam_matches(const Optimizer& opt, const Params& p, const AdamRef& ref, int k, const std::string& what,
                         double step_max = 0) {
    const double atol = adam_atol(k, 2.0, step_max > 0 ? step_max : ref.lr);
    test::expect_close(p.master(), ref.w, atol, 0, what + " weights");
    test::expect_close(blob_floats(opt, "first_moments"), ref.m, 1e-30, 64 * kEps32 * k, what + " first moments");
    test::expect_close(blob_floats(opt, "second_moments"), ref.v, 1e-30, 64 * kEps32 * k, what + " second moments");
    EXPECT_EQ(blob_u32(opt, "param_steps_u32"), ref.steps) << what;
}

TEST(Adam, StepByStepSkipsZeroGradientsOfNonMatrixParamsAndRegularisesOnlyMatrices) {
    // Params 0, 1: matrix; 2, 3: non-matrix (grid). l2_reg is large so that its effect is visible.
    const json cfg = {{"otype", "Adam"}, {"learning_rate", 0.1}, {"beta1", 0.9}, {"beta2", 0.99}, {"epsilon", 1e-8},
                      {"l2_reg", 1.0}};
    for (bool alias : {false, true}) {
        auto opt = create_optimizer(cfg);
        opt->allocate(Device::cpu(), 4, 2);
        Params p({0.5, -0.8, 1.0, 0.3}, DType::f32, alias);
        AdamRef ref{f32(0.1), f32(0.9), f32(0.99), f32(1e-8), f32(1.0)};
        ref.n_matrix = 2;
        ref.w = p.master();
        ref.m = ref.v = {0, 0, 0, 0};
        ref.steps = {0, 0, 0, 0};
        const float ls = 8.0f;  // a power of two: the scaled gradients stay exact

        // Step 1. Param 1 has no gradient but is a matrix: its L2 term alone (l2 * w = -0.8) moves it,
        // and Adam's first step has size ~lr: -0.8 -> ~-0.7. Param 2 (non-matrix) gets no L2: its tiny
        // negative gradient moves it *up* by ~lr (with L2 it would go down). Param 3 is skipped.
        ref.step(step(*opt, p, {0.2, 0.0, -0.001, 0.0}, ls));
        expect_adam_matches(*opt, p, ref, 1, "step 1");
        EXPECT_NEAR(p.fp32[1], -0.7, 1e-6);
        EXPECT_NEAR(p.fp32[2], 1.1, 1e-4);  // lr * g/(|g| + eps/sqrt(1-beta2)) = 0.1 * (1 - 1e-4)
        EXPECT_EQ(p.fp32[3], 0.3f);
        EXPECT_EQ(blob_u32(*opt, "param_steps_u32"), (std::vector<uint32_t>{1, 1, 1, 0}));

        // Step 2. Param 2 has a zero gradient now: skipped, its moments keep their values. Param 3
        // takes its first step, so its bias correction uses step 1, not the optimizer's step 2.
        const auto m_before = blob_floats(*opt, "first_moments");
        ref.step(step(*opt, p, {-0.3, 0.1, 0.0, 0.4}, ls));
        expect_adam_matches(*opt, p, ref, 2, "step 2");
        EXPECT_EQ(blob_floats(*opt, "first_moments")[2], m_before[2]);
        EXPECT_EQ(blob_u32(*opt, "param_steps_u32"), (std::vector<uint32_t>{2, 2, 1, 1}));
        EXPECT_NEAR(p.fp32[3], 0.3 - 0.1, 1e-4);  // a first step again: ~lr against the gradient

        ref.step(step(*opt, p, {0.05, -0.2, 0.1, -0.3}, ls));
        expect_adam_matches(*opt, p, ref, 3, "step 3");
        EXPECT_EQ(blob_u32(*opt, "param_steps_u32"), (std::vector<uint32_t>{3, 3, 2, 2}));
        EXPECT_EQ(opt->step_count(), 3u);
        EXPECT_EQ(p.copy_values(), p.master());
    }
}

TEST(Adam, AdaBoundClampsTheStepSize) {
    auto opt = create_optimizer({{"otype", "Adam"}, {"learning_rate", 0.1}, {"beta2", 0.99}, {"l2_reg", 0.0}, {"adabound", true}});
    opt->allocate(Device::cpu(), 3, 3);
    Params p({1.0, 1.0, 1.0}, DType::f32);
    AdamRef ref{f32(0.1), f32(0.9), f32(0.99), f32(1e-8), 0.0};
    ref.adabound = true;
    ref.n_matrix = 3;
    ref.w = p.master();
    ref.m = ref.v = {0, 0, 0};
    ref.steps = {0, 0, 0};
    ref.step(step(*opt, p, {1e-4, 1e4, 0.5}));
    // Step 1: bounds lower = 0.1 - 0.1/(0.01 + 1), upper = 0.1 + 0.1/0.01 = 10.1. The bias-corrected
    // rate is 0.1 and sqrt(v) = 0.1 |g|, so the unclamped step sizes are 1/|g|: 1e4 (-> upper),
    // 1e-4 (-> lower) and 2 (inside). The update is size * m with m = 0.1 g.
    const double lower = 0.1 - 0.1 / 1.01, upper = 10.1;
    EXPECT_NEAR(p.fp32[0], 1.0 - upper * 1e-5, 1e-7);
    EXPECT_NEAR(p.fp32[1], 1.0 - lower * 1e3, 1e-5);
    EXPECT_NEAR(p.fp32[2], 1.0 - 2.0 * 0.05, 1e-6);
    expect_adam_matches(*opt, p, ref, 1, "adabound step 1", 1.0);
    ref.step(step(*opt, p, {-2e-4, 2e3, 0.1}));
    expect_adam_matches(*opt, p, ref, 2, "adabound step 2", 3.0);
}

TEST(Adam, WeightDecaysClippingAndNonMatrixLearningRateFactor) {
    const json cfg = {{"otype", "Adam"},           {"learning_rate", 0.1},
                      {"beta2", 0.99},             {"l2_reg", 0.0},
                      {"relative_decay", 0.5},     {"absolute_decay", 0.2},
                      {"clipping_magnitude", 0.9}, {"non_matrix_learning_rate_factor", 0.5}};
    auto opt = create_optimizer(cfg);
    opt->allocate(Device::cpu(), 4, 2);
    Params p({0.95, -0.4, 0.6, -0.2}, DType::f32);
    AdamRef ref{f32(0.1), f32(0.9), f32(0.99), f32(1e-8), 0.0, 0.5, f32(0.2), f32(0.9), 0.5};
    ref.n_matrix = 2;
    ref.w = p.master();
    ref.m = ref.v = {0, 0, 0, 0};
    ref.steps = {0, 0, 0, 0};
    // Step 1 by hand for param 2 (non-matrix, lr 0.05 after the factor; bias-corrected lr 0.05 as
    // sqrt(1 - 0.99) / (1 - 0.9) = 1): decayed = (1 - 0.5*0.05)*0.6 - 0.2*0.05 = 0.575, then
    // - 0.05 * m/sqrt(v) = -0.05 (g > 0): 0.525.
    ref.step(step(*opt, p, {-0.5, 0.3, 0.7, -0.1}));
    EXPECT_NEAR(p.fp32[2], 0.525, 1e-6);
    EXPECT_EQ(p.fp32[0], 0.9f);  // (1 - 0.05) 0.95 - 0.02 + 0.1 = 0.9825, clipped
    expect_adam_matches(*opt, p, ref, 1, "decay step 1");
    ref.step(step(*opt, p, {-0.5, 0.2, -0.4, 0.3}));
    expect_adam_matches(*opt, p, ref, 2, "decay step 2");
}

TEST(Adam, OptimizeMatrixOrNonMatrixParamsCanBeSwitchedOff) {
    for (bool matrix : {false, true}) {
        auto opt = create_optimizer({{"otype", "Adam"}, {matrix ? "optimize_matrix_params" : "optimize_non_matrix_params", false}});
        opt->allocate(Device::cpu(), 4, 2);
        Params p({0.1, 0.2, 0.3, 0.4}, DType::f32);
        step(*opt, p, {1, 1, 1, 1});
        const std::vector<float> initial = {0.1f, 0.2f, 0.3f, 0.4f};
        for (int i = 0; i < 4; ++i) {
            const bool switched_off = (i < 2) == matrix;
            EXPECT_EQ(p.fp32[i] == initial[i], switched_off) << i;
        }
        EXPECT_EQ(blob_u32(*opt, "param_steps_u32"),
                  matrix ? (std::vector<uint32_t>{0, 0, 1, 1}) : (std::vector<uint32_t>{1, 1, 0, 0}));
    }
}

TEST(Adam, HalfAndBfloat16WeightsAndGradients) {
    // Gradients arrive rounded to the parameter dtype; the master weights stay fp32 and the copy is
    // the master rounded (round to nearest even), bit for bit.
    for (DType dtype : {DType::f16, DType::bf16}) {
        auto opt = create_optimizer({{"otype", "Adam"}, {"learning_rate", 0.01}});
        opt->allocate(Device::cpu(), 5, 3);
        Params p({0.3, -0.7, 0.11, 0.5, -0.25}, dtype);
        AdamRef ref{f32(0.01), f32(0.9), f32(0.999), f32(1e-8), f32(1e-8)};
        ref.n_matrix = 3;
        ref.w = p.master();
        ref.m = ref.v = {0, 0, 0, 0, 0};
        ref.steps = {0, 0, 0, 0, 0};
        for (int k = 1; k <= 3; ++k) {
            ref.step(step(*opt, p, {0.013 * k, -0.2, 0.0, 0.3 / k, 0.0}, 128.0f, dtype));
            expect_adam_matches(*opt, p, ref, k, std::string("Adam ") + dtype_name(dtype));
            Tensor rounded(1, 5, dtype);
            convert(Stream::cpu(), ConstView(p.fp32.data(), DType::f32, Device::cpu(), 1, 5), rounded.view());
            EXPECT_EQ(std::memcmp(rounded.data(), p.copy.data(), 5 * dtype_size(dtype)), 0);
        }
    }
}

// ---- SGD, Novograd ----

TEST(Sgd, StepByStep) {
    auto opt = create_optimizer({{"otype", "SGD"}, {"learning_rate", 0.5}, {"l2_reg", 0.25}});
    opt->allocate(Device::cpu(), 3, 1);
    Params p({1.0, -2.0, 0.5}, DType::f32);
    // w - lr (g + l2 w), on every parameter (SGD has no matrix distinction), zero gradients included.
    step(*opt, p, {0.5, 0.0, -1.0}, 4.0f);
    EXPECT_EQ(p.master(), (std::vector<double>{1.0 - 0.5 * (0.5 + 0.25), -2.0 - 0.5 * (0.0 - 0.5), 0.5 - 0.5 * (-1.0 + 0.125)}));
    step(*opt, p, {1.0, 1.0, 1.0}, 4.0f);
    EXPECT_EQ(p.master(), (std::vector<double>{0.625 - 0.5 * (1.0 + 0.15625), -1.75 - 0.5 * (1.0 - 0.4375),
                                               0.9375 - 0.5 * (1.0 + 0.234375)}));
}

TEST(Novograd, StepByStepWithOneSecondMomentPerGroup) {
    const double lr = f32(0.1), b1 = f32(0.9), b2 = f32(0.99), eps = f32(1e-8);
    auto opt = create_optimizer({{"otype", "Novograd"}, {"learning_rate", 0.1}, {"beta1", 0.9}, {"beta2", 0.99}});
    opt->allocate(Device::cpu(), 4, 2);
    Params p({0.5, -0.5, 1.0, 2.0}, DType::f32);
    std::vector<double> w = p.master(), m(4, 0.0), v(2, 0.0);
    const std::vector<std::vector<double>> grads = {{0.3, -0.4, 1.0, 0.0}, {0.1, 0.2, -2.0, 0.5}};
    for (size_t k = 0; k < grads.size(); ++k) {
        const auto& g = grads[k];
        step(*opt, p, g, 2.0f);
        // Groups {0, 1} (matrix) and {2, 3}; on the first step both betas are 0 (exact moments).
        const double beta1 = k == 0 ? 0.0 : b1, beta2 = k == 0 ? 0.0 : b2;
        for (int group = 0; group < 2; ++group) {
            const double sq = g[2 * group] * g[2 * group] + g[2 * group + 1] * g[2 * group + 1];
            v[group] = beta2 * v[group] + (1 - beta2) * sq;
            for (int i = 2 * group; i < 2 * group + 2; ++i) {
                m[i] = beta1 * m[i] + (1 - beta1) * g[i] / (std::sqrt(v[group]) + eps);
                w[i] -= lr * m[i];
            }
        }
        if (k == 0) EXPECT_NEAR(p.fp32[0], 0.5 - 0.1 * 0.3 / 0.5, 1e-7);  // |g| of group 0 is 0.5
        test::expect_close(p.master(), w, adam_atol(static_cast<int>(k + 1), 2.0, lr), 0, "Novograd weights");
        test::expect_close(blob_floats(*opt, "group_second_moments"), v, 0, 16 * kEps32, "Novograd second moments");
    }
}

// ---- wrappers (over SGD with l2_reg 0, where every expected weight can be written down) ----

json sgd(double lr) { return {{"otype", "SGD"}, {"learning_rate", lr}, {"l2_reg", 0.0}}; }

TEST(ExponentialDecay, DecaysThePiecewiseConstantLearningRate) {
    auto opt = create_optimizer({{"otype", "ExponentialDecay"}, {"nested", sgd(1.0)}, {"decay_base", 0.5},
                                 {"decay_start", 1}, {"decay_interval", 2}, {"decay_end", 3}});
    opt->allocate(Device::cpu(), 1, 1);
    Params p({10.0}, DType::f32);
    // Before nested step k: decay when 1 <= k <= 3 and (k - 1) % 2 == 0, i.e. at k = 1 and k = 3
    // (both ends inclusive); k = 5 would be next but lies past decay_end.
    const std::vector<double> expected_lr = {1.0, 0.5, 0.5, 0.25, 0.25, 0.25, 0.25};
    double w = 10.0;
    for (size_t k = 0; k < expected_lr.size(); ++k) {
        step(*opt, p, {1.0});
        w -= expected_lr[k];
        EXPECT_EQ(p.fp32[0], w) << "step " << k;
        EXPECT_EQ(opt->learning_rate(), expected_lr[k]) << "step " << k;
    }
    // The nested optimizer keeps its configured rate between steps (hyperparams round-trip).
    EXPECT_EQ(opt->hyperparams()["nested"]["learning_rate"], 1.0);
    opt->set_learning_rate(0.5);  // the effective rate now; the base becomes 0.5 / 0.25 = 2
    EXPECT_EQ(opt->learning_rate(), 0.5f);
    step(*opt, p, {1.0});
    EXPECT_EQ(p.fp32[0], w - 0.5);
}

TEST(EMA, IsTheDebiasedExponentialAverageOfTheWeights) {
    const double d = 0.75;
    auto opt = create_optimizer({{"otype", "EMA"}, {"decay", d}, {"full_precision", true}, {"nested", sgd(1.0)}});
    opt->allocate(Device::cpu(), 2, 2);
    Params p({1.0, -1.0}, DType::f32);
    EXPECT_EQ(opt->inference_weights_fp32(), nullptr);  // nothing averaged yet: infer with the weights
    std::vector<std::vector<double>> history;
    const std::vector<std::vector<double>> grads = {{0.5, 0.25}, {-1.0, 0.5}, {0.25, -2.0}, {1.0, 1.0}};
    for (size_t k = 1; k <= grads.size(); ++k) {
        step(*opt, p, grads[k - 1]);
        history.push_back(p.master());
        // Closed form: sum_j (1-d) d^(k-j) w_j / (1 - d^k), j = 1..k.
        std::vector<double> expected(2, 0.0);
        for (size_t j = 1; j <= k; ++j)
            for (int i = 0; i < 2; ++i) expected[i] += (1 - d) * std::pow(d, k - j) * history[j - 1][i] / (1 - std::pow(d, k));
        ASSERT_NE(opt->inference_weights_fp32(), nullptr);
        // A few fp32 roundings per step on O(1) values, accumulated over k steps.
        test::expect_close(as_float(opt->inference_weights_fp32(), 2), expected, 8 * k * kEps32 * 4, 0, "EMA");
    }
}

TEST(EMA, RoundsTheAverageToTheParameterDtypeUnlessFullPrecision) {
    for (bool full : {false, true}) {
        auto opt = create_optimizer({{"otype", "EMA"}, {"decay", 0.9}, {"full_precision", full}, {"nested", sgd(0.01)}});
        opt->allocate(Device::cpu(), 3, 3);
        Params p({0.1, 0.2, 0.3}, DType::f16);
        for (int k = 0; k < 5; ++k) step(*opt, p, {1.0 / 3, -1.0 / 7, 1.0 / 11}, 128.0f, DType::f16);
        const auto ema = as_float(opt->inference_weights_fp32(), 3);
        int representable = 0;
        for (double x : ema) representable += static_cast<double>(static_cast<float>(half(static_cast<float>(x)))) == x;
        if (full) EXPECT_LT(representable, 3);
        else EXPECT_EQ(representable, 3);
    }
}

TEST(Average, IsTheMeanOfTheLastNSamplesCountingUnfilledSlotsAsZero) {
    auto opt = create_optimizer({{"otype", "Average"}, {"n_samples", 3}, {"nested", sgd(1.0)}});
    opt->allocate(Device::cpu(), 1, 0);
    Params p({8.0}, DType::f32);
    // Weights after steps 1..5: 7, 5, 4, 0, -1; means of the last three (zeros before the third step).
    const std::vector<double> grads = {1, 2, 1, 4, 1};
    const std::vector<double> expected = {7.0 / 3, 12.0 / 3, 16.0 / 3, 9.0 / 3, 3.0 / 3};
    for (size_t k = 0; k < grads.size(); ++k) {
        step(*opt, p, {grads[k]});
        EXPECT_NEAR(opt->inference_weights_fp32()[0], expected[k], 8 * kEps32 * 16) << "step " << k + 1;
    }
}

TEST(Lookahead, PullsTheWeightsTowardsTheSlowWeightsEveryNSteps) {
    auto opt = create_optimizer({{"otype", "Lookahead"}, {"alpha", 0.5}, {"n_steps", 2}, {"nested", sgd(1.0)}});
    opt->allocate(Device::cpu(), 2, 2);
    Params p({1.0, -2.0}, DType::f32);
    const std::vector<double> g = {0.25, 0.5};
    auto w0_minus = [&](double k) { return std::vector<double>{1.0 - k * g[0], -2.0 - k * g[1]}; };
    // Before nested steps 0, 2, 4: weights <- (slow + weights) / 2, slow <- weights.
    for (int i = 0; i < 3; ++i) step(*opt, p, g);
    EXPECT_EQ(p.master(), w0_minus(2));                                          // w0-g -> pull w0-g -> w0-2g
    EXPECT_EQ(as_float(opt->inference_weights_fp32(), 2), w0_minus(1));          // slow weights
    for (int i = 0; i < 2; ++i) step(*opt, p, g);
    EXPECT_EQ(p.master(), w0_minus(3));
    EXPECT_EQ(as_float(opt->inference_weights_fp32(), 2), w0_minus(2));
}

TEST(Batched, StepsWithTheMeanGradientEveryMultiplierCalls) {
    for (DType dtype : {DType::f32, DType::f16}) {
        auto opt = create_optimizer({{"otype", "Batched"}, {"batch_size_multiplier", 2}, {"nested", sgd(1.0)}});
        opt->allocate(Device::cpu(), 2, 2);
        Params p({1.0, 1.0}, dtype);
        step(*opt, p, {0.5, 0.25}, 4.0f, dtype);
        EXPECT_EQ(p.master(), (std::vector<double>{1.0, 1.0}));  // gradients pooled, no update yet
        EXPECT_EQ(opt->step_count(), 1u);
        step(*opt, p, {0.25, -0.75}, 4.0f, dtype);
        EXPECT_EQ(p.master(), (std::vector<double>{1.0 - 0.375, 1.0 + 0.25}));
        step(*opt, p, {1.0, 1.0}, 4.0f, dtype);
        step(*opt, p, {0.0, 1.0}, 4.0f, dtype);
        EXPECT_EQ(p.master(), (std::vector<double>{0.625 - 0.5, 1.25 - 1.0}));
        EXPECT_EQ(opt->step_count(), 4u);
        EXPECT_EQ(opt->hyperparams()["nested"]["otype"], "SGD");
    }
}

TEST(Composite, OptimizesSlicesWithTheirOwnOptimizers) {
    const json cfg = {{"otype", "Composite"},
                      {"nested", {{{"otype", "SGD"}, {"learning_rate", 0.5}, {"l2_reg", 0.0}, {"n_params_to_optimize", 2}},
                                  {{"otype", "Adam"}, {"learning_rate", 0.1}}}}};
    auto opt = create_optimizer(cfg);
    opt->allocate(Device::cpu(), 5, 3);  // SGD: params 0, 1; Adam: 2 (matrix), 3, 4 (non-matrix)
    Params p({1.0, 2.0, 0.5, 0.5, 0.5}, DType::f32);
    step(*opt, p, {0.5, -1.0, 0.0, 0.2, 0.0});
    EXPECT_EQ(p.fp32[0], 0.75f);
    EXPECT_EQ(p.fp32[1], 2.5f);
    // Adam: the matrix parameter steps even with a zero gradient (its tiny L2 term moves it a little);
    // the non-matrix one with a zero gradient does not; a first Adam step has size ~lr.
    EXPECT_EQ(blob_u32(*opt, "nested[1].param_steps_u32"), (std::vector<uint32_t>{1, 1, 0}));
    EXPECT_LT(p.fp32[2], 0.5f);
    EXPECT_NEAR(p.fp32[3], 0.4, 1e-3);
    EXPECT_EQ(p.fp32[4], 0.5f);
    EXPECT_EQ(opt->inference_weights_fp32(), nullptr);

    // learning_rate is a factor on every nested rate.
    EXPECT_EQ(opt->learning_rate(), 1.0f);
    opt->set_learning_rate(0.5f);
    EXPECT_EQ(opt->hyperparams()["nested"][0]["learning_rate"], 0.25);
    step(*opt, p, {1.0, 0.0, 0.0, 0.0, 0.0});
    EXPECT_EQ(p.fp32[0], 0.5f);
}

TEST(Composite, InferenceWeightsComeFromNestedWrappers) {
    const json cfg = {{"otype", "Composite"},
                      {"nested", {{{"otype", "SGD"}, {"learning_rate", 1.0}, {"l2_reg", 0.0}, {"n_params_to_optimize", 1}},
                                  {{"otype", "EMA"}, {"decay", 0.5}, {"nested", sgd(1.0)}}}}};
    auto opt = create_optimizer(cfg);
    opt->allocate(Device::cpu(), 3, 0);
    Params p({1.0, 1.0, 1.0}, DType::f32);
    step(*opt, p, {0.5, 0.5, 0.5});
    step(*opt, p, {0.5, 0.5, 0.5});
    ASSERT_NE(opt->inference_weights_fp32(), nullptr);
    // Slice 0 (SGD): the weights; slice 1 (EMA, d = 0.5): (0.5 * 0.5 + 0.5 * 0) / 0.75 over weights 0.5, 0.
    const double ema = (0.5 * 0.5 * 0.5 + 0.5 * 0.0) / 0.75;
    EXPECT_EQ(as_float(opt->inference_weights_fp32(), 3), (std::vector<double>{0.0, f32(ema), f32(ema)}));
}

TEST(Composite, SizesMustAddUpToTheModel) {
    auto sized = [](json a, json b) {
        return json{{"otype", "Composite"}, {"nested", {json{{"otype", "SGD"}, {"n_params_to_optimize", a}}, b}}};
    };
    auto expect_config_error = [](const std::function<void()>& f, const std::string& needle) {
        try {
            f();
            ADD_FAILURE() << "accepted; expected an error naming " << needle;
        } catch (const ConfigError& e) {
            EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
        }
    };
    const json two_three = sized(2, {{"otype", "Adam"}, {"n_params_to_optimize", 3}});
    EXPECT_NO_THROW(create_optimizer(two_three)->allocate(Device::cpu(), 5, 0));
    expect_config_error([&] { create_optimizer(two_three)->allocate(Device::cpu(), 6, 0); }, "n_params_to_optimize");
    expect_config_error([&] { create_optimizer(two_three)->allocate(Device::cpu(), 4, 0); }, "n_params_to_optimize");
    const json rest = sized(7, {{"otype", "Adam"}});
    EXPECT_NO_THROW(create_optimizer(rest)->allocate(Device::cpu(), 7, 0));  // the rest may be empty
    expect_config_error([&] { create_optimizer(rest)->allocate(Device::cpu(), 6, 0); }, "n_params_to_optimize");
    expect_config_error([&] { create_optimizer(sized(-3, {{"otype", "Adam"}})); }, "n_params_to_optimize");
    expect_config_error([&] { create_optimizer(sized("2", {{"otype", "Adam"}})); }, "n_params_to_optimize");
    expect_config_error([&] { create_optimizer({{"otype", "Composite"}, {"nested", {{{"otype", "SGD"}}, {{"otype", "Adam"}}}}}); },
                        "n_params_to_optimize");
    expect_config_error([&] { create_optimizer({{"otype", "Composite"}, {"nested", json::array()}}); }, "nested");
    expect_config_error([&] { create_optimizer({{"otype", "Composite"}, {"nested", {{"otype", "SGD"}}}}); }, "nested");
    expect_config_error([&] { create_optimizer({{"otype", "Composite"}}); }, "nested");
}

// ---- hyperparams, configs ----

std::vector<json> all_configs() {
    const json adam = {{"otype", "Adam"}, {"learning_rate", 0.01}};
    return {
        adam,
        {{"otype", "Adam"}, {"adabound", true}, {"relative_decay", 0.1}, {"absolute_decay", 1e-4}, {"clipping_magnitude", 4.0},
         {"non_matrix_learning_rate_factor", 2.0}, {"beta1", 0.8}, {"beta2", 0.95}, {"epsilon", 1e-6}, {"l2_reg", 1e-4}},
        {{"otype", "SGD"}, {"learning_rate", 0.02}, {"l2_reg", 1e-3}},
        {{"otype", "Novograd"}, {"learning_rate", 0.01}, {"relative_decay", 0.01}},
        {{"otype", "ExponentialDecay"}, {"nested", adam}, {"decay_start", 2}, {"decay_interval", 3}, {"decay_base", 0.5}},
        {{"otype", "EMA"}, {"decay", 0.9}, {"nested", adam}},
        {{"otype", "Average"}, {"n_samples", 4}, {"nested", adam}},
        {{"otype", "Lookahead"}, {"alpha", 0.6}, {"n_steps", 3}, {"nested", adam}},
        {{"otype", "Batched"}, {"batch_size_multiplier", 3}, {"nested", adam}},
        {{"otype", "Composite"},
         {"nested", {{{"otype", "SGD"}, {"n_params_to_optimize", 20}}, {{"otype", "EMA"}, {"decay", 0.8}, {"nested", adam}}}}},
        {{"otype", "ExponentialDecay"},
         {"decay_start", 1},
         {"decay_interval", 2},
         {"nested", {{"otype", "EMA"}, {"nested", {{"otype", "Batched"}, {"batch_size_multiplier", 2}, {"nested", adam}}}}}},
    };
}

TEST(Optimizers, HyperparamsRoundTripAndDefaults) {
    for (const auto& cfg : all_configs()) {
        auto a = create_optimizer(cfg);
        auto b = create_optimizer(a->hyperparams());
        EXPECT_EQ(a->hyperparams(), b->hyperparams()) << cfg.dump();
        EXPECT_EQ(a->name(), cfg["otype"]);
    }
    const json adam = create_optimizer(json::object())->hyperparams();  // tcnn's default otype
    EXPECT_EQ(adam["otype"], "Adam");
    EXPECT_EQ(adam["learning_rate"], 1e-3);
    EXPECT_EQ(adam["beta1"], 0.9);
    EXPECT_EQ(adam["beta2"], 0.999);
    EXPECT_EQ(adam["epsilon"], 1e-8);
    EXPECT_EQ(adam["l2_reg"], 1e-8);
    EXPECT_EQ(adam["relative_decay"], 0.0);
    EXPECT_EQ(adam["absolute_decay"], 0.0);
    EXPECT_EQ(adam["adabound"], false);
    const json decay = create_optimizer({{"otype", "ExponentialDecay"}})->hyperparams();
    EXPECT_EQ(decay["decay_base"], 0.1);
    EXPECT_EQ(decay["decay_start"], 10000);
    EXPECT_EQ(decay["decay_end"], 10000000);
    EXPECT_EQ(decay["decay_interval"], 10000);
    EXPECT_EQ(decay["nested"]["otype"], "Adam");  // nested defaults to Adam
    EXPECT_EQ(create_optimizer({{"otype", "EMA"}})->hyperparams()["decay"], 0.99);
    EXPECT_EQ(create_optimizer({{"otype", "ema"}})->name(), "EMA");  // otypes are case-insensitive
    const auto names = optimizer_names();
    for (const char* n : {"Adam", "SGD", "Novograd", "ExponentialDecay", "EMA", "Average", "Lookahead", "Batched", "Composite"})
        EXPECT_NE(std::find(names.begin(), names.end(), n), names.end()) << n;
}

void expect_config_error(const json& cfg, const std::string& needle) {
    try {
        create_optimizer(cfg);
        ADD_FAILURE() << "accepted " << cfg.dump();
    } catch (const ConfigError& e) {
        EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
}

TEST(Optimizers, BadConfigsRaiseConfigErrorsNamingTheKey) {
    expect_config_error({{"otype", "AdamW"}}, "AdamW");
    expect_config_error({{"otype", "AdamW"}}, "Novograd");  // the valid choices are listed
    expect_config_error({{"otype", "Shampoo"}}, "Shampoo");
    expect_config_error({{"otype", 1}}, "otype");
    expect_config_error(json::array(), "optimizer");
    expect_config_error({{"otype", "Adam"}, {"learning_rate", std::nan("")}}, "learning_rate");
    expect_config_error({{"otype", "Adam"}, {"learning_rate", -1e-3}}, "learning_rate");
    expect_config_error({{"otype", "Adam"}, {"learning_rate", "fast"}}, "learning_rate");
    expect_config_error({{"otype", "Adam"}, {"beta1", 1.0}}, "beta1");
    expect_config_error({{"otype", "Adam"}, {"beta2", -0.1}}, "beta2");
    expect_config_error({{"otype", "Adam"}, {"epsilon", -1e-8}}, "epsilon");
    expect_config_error({{"otype", "Adam"}, {"epsilon", 0.0}}, "epsilon");
    expect_config_error({{"otype", "Adam"}, {"adabound", 1}}, "adabound");
    expect_config_error({{"otype", "Adam"}, {"l2_reg", -1.0}}, "l2_reg");
    expect_config_error({{"otype", "SGD"}, {"learning_rate", std::nan("")}}, "learning_rate");
    expect_config_error({{"otype", "Novograd"}, {"beta1", 1.5}}, "beta1");
    expect_config_error({{"otype", "ExponentialDecay"}, {"decay_interval", 0}}, "decay_interval");
    expect_config_error({{"otype", "ExponentialDecay"}, {"decay_start", -1}}, "decay_start");
    expect_config_error({{"otype", "ExponentialDecay"}, {"decay_base", 0.0}}, "decay_base");
    expect_config_error({{"otype", "EMA"}, {"decay", 1.0}}, "decay");
    expect_config_error({{"otype", "Average"}, {"n_samples", 0}}, "n_samples");
    expect_config_error({{"otype", "Lookahead"}, {"alpha", 1.5}}, "alpha");
    expect_config_error({{"otype", "Batched"}, {"batch_size_multiplier", 0}}, "batch_size_multiplier");
    // Errors inside nested configs say where they are.
    expect_config_error({{"otype", "EMA"}, {"nested", {{"otype", "Bogus"}}}}, "optimizer.nested");
    expect_config_error({{"otype", "EMA"}, {"nested", {{"otype", "Adam"}, {"beta1", 1.0}}}}, "optimizer.nested (Adam): key 'beta1'");
    expect_config_error({{"otype", "EMA"}, {"nested", "Adam"}}, "nested");
    std::vector<std::string> warnings;
    set_log_callback([&](LogLevel, const std::string& m) { warnings.push_back(m); });
    create_optimizer({{"otype", "Adam"}, {"learnig_rate", 0.1}});
    set_log_callback(nullptr);
    ASSERT_EQ(warnings.size(), 1u);
    EXPECT_NE(warnings[0].find("'learnig_rate'"), std::string::npos) << warnings[0];
}

TEST(Optimizers, BadCallsRaiseTypedErrors) {
    auto opt = create_optimizer({{"otype", "Adam"}});
    Params p({1.0, 2.0}, DType::f32);
    Tensor g(1, 2, DType::f32);
    fill(Stream::cpu(), g.view(), 0.5);
    auto do_step = [&](float ls, const void* grads) {
        opt->step(Stream::cpu(), ls, p.fp32.data(), p.weights(), p.dtype, grads, DType::f32);
    };
    EXPECT_THROW(do_step(1.0f, g.data()), Error);  // before allocate
    EXPECT_THROW(opt->load_state(Stream::cpu(), {}), Error);
    EXPECT_THROW(opt->allocate(Device::cpu(), 2, 3), ShapeError);
    opt->allocate(Device::cpu(), 2, 1);
    EXPECT_THROW(do_step(std::nanf(""), g.data()), InputError);
    EXPECT_THROW(do_step(0.0f, g.data()), InputError);
    EXPECT_THROW(do_step(1.0f, nullptr), ShapeError);
    EXPECT_THROW(opt->step(Stream::cpu(), 1.0f, p.fp32.data(), p.fp32.data(), DType::f16, g.data(), DType::f32), DTypeError);
    EXPECT_THROW(opt->step(Stream::gpu(nullptr, 0), 1.0f, p.fp32.data(), p.weights(), p.dtype, g.data(), DType::f32),
                 DeviceError);
    EXPECT_EQ(opt->step_count(), 0u);  // failed calls change nothing
    if (!has_gpu_backend()) EXPECT_THROW(opt->allocate(Device::gpu(0), 2, 1), UnsupportedError);
}

// ---- state ----

// Random gradients with exact zeros in a third of the non-matrix entries (exercises Adam's skip).
std::vector<double> random_grads(size_t n, size_t n_matrix, uint64_t seed) {
    auto g = test::random_vector(n, -1.0, 1.0, seed);
    for (size_t i = n_matrix; i < n; i += 3) g[i] = 0.0;
    return g;
}

TEST(Optimizers, LoadedStateContinuesBitIdentically) {
    const size_t n = 37, n_matrix = 20;
    for (const auto& cfg : all_configs()) {
        for (DType dtype : {DType::f32, DType::f16}) {
            const std::string what = cfg.dump() + " " + dtype_name(dtype);
            const float ls = dtype == DType::f16 ? 128.0f : 1.0f;
            auto a = create_optimizer(cfg);
            a->allocate(Device::cpu(), n, n_matrix);
            Params pa(test::random_vector(n, -1.0, 1.0, 5), dtype);
            for (int k = 0; k < 5; ++k) step(*a, pa, random_grads(n, n_matrix, 100 + k), ls, dtype);

            const auto saved = a->state(Stream::cpu());
            auto b = create_optimizer(a->hyperparams());
            b->allocate(Device::cpu(), n, n_matrix);
            b->load_state(Stream::cpu(), saved);
            EXPECT_EQ(b->step_count(), a->step_count()) << what;
            EXPECT_EQ(b->learning_rate(), a->learning_rate()) << what;
            Params pb = pa.clone();
            for (int k = 5; k < 11; ++k) {
                step(*a, pa, random_grads(n, n_matrix, 100 + k), ls, dtype);
                step(*b, pb, random_grads(n, n_matrix, 100 + k), ls, dtype);
            }
            EXPECT_EQ(pa.fp32, pb.fp32) << what;
            EXPECT_EQ(pa.copy_values(), pb.copy_values()) << what;
            ASSERT_EQ(a->inference_weights_fp32() == nullptr, b->inference_weights_fp32() == nullptr) << what;
            if (a->inference_weights_fp32())
                EXPECT_EQ(as_float(a->inference_weights_fp32(), n), as_float(b->inference_weights_fp32(), n)) << what;
            const auto sa = a->state(Stream::cpu()), sb = b->state(Stream::cpu());
            ASSERT_EQ(sa.size(), sb.size()) << what;
            for (size_t i = 0; i < sa.size(); ++i) {
                EXPECT_EQ(sa[i].name, sb[i].name) << what;
                EXPECT_EQ(sa[i].bytes, sb[i].bytes) << what << " " << sa[i].name;
            }
        }
    }
}

TEST(Optimizers, ForeignStateIsRefused) {
    auto adam = create_optimizer({{"otype", "Adam"}});
    adam->allocate(Device::cpu(), 10, 4);
    const auto state = adam->state(Stream::cpu());
    auto sgd_opt = create_optimizer({{"otype", "SGD"}});
    sgd_opt->allocate(Device::cpu(), 10, 4);
    EXPECT_THROW(sgd_opt->load_state(Stream::cpu(), state), CheckpointError);  // unexpected blobs
    auto smaller = create_optimizer({{"otype", "Adam"}});
    smaller->allocate(Device::cpu(), 9, 4);
    EXPECT_THROW(smaller->load_state(Stream::cpu(), state), CheckpointError);  // sizes differ
    auto truncated = state;
    truncated.pop_back();
    EXPECT_THROW(adam->load_state(Stream::cpu(), truncated), CheckpointError);  // missing blob
    auto ema = create_optimizer({{"otype", "EMA"}});
    ema->allocate(Device::cpu(), 10, 4);
    EXPECT_THROW(ema->load_state(Stream::cpu(), state), CheckpointError);
}

TEST(Optimizers, AllocateResetsTheState) {
    auto opt = create_optimizer({{"otype", "Adam"}});
    opt->allocate(Device::cpu(), 3, 1);
    Params p({1, 2, 3}, DType::f32);
    step(*opt, p, {1, 1, 1});
    opt->allocate(Device::cpu(), 3, 1);
    EXPECT_EQ(opt->step_count(), 0u);
    EXPECT_EQ(blob_floats(*opt, "first_moments"), (std::vector<double>{0, 0, 0}));
    EXPECT_EQ(blob_u32(*opt, "param_steps_u32"), (std::vector<uint32_t>{0, 0, 0}));
}

TEST(Optimizers, ResultsIndependentOfThreadCount) {
    const int saved = num_threads();
    const size_t n = 100000, n_matrix = 40000;
    for (const char* otype : {"Adam", "Novograd", "EMA", "Average"}) {
        std::vector<std::vector<float>> results;
        for (int threads : {1, 4}) {
            set_num_threads(threads);
            auto opt = create_optimizer({{"otype", otype}});
            opt->allocate(Device::cpu(), n, n_matrix);
            Params p(test::random_vector(n, -1.0, 1.0, 9), DType::f16);
            for (int k = 0; k < 3; ++k) step(*opt, p, random_grads(n, n_matrix, 200 + k), 128.0f, DType::f16);
            results.push_back(p.fp32);
        }
        EXPECT_EQ(results[0], results[1]) << otype;
    }
    set_num_threads(saved);
}

}  // namespace
}  // namespace tnn
