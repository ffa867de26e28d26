// Per-element maths of every loss (tcnn's formulas and order of operations), host+device so the
// CPU loop in loss.cpp and a later GPU kernel (losses.cu: one thread per element) share one copy.
// A is the compute type: float for fp32/fp16/bf16 predictions, double for fp64 ones.
#pragma once

#include <tnn/dtype.h>

#include <math.h>
#include <stdint.h>

#include <type_traits>

namespace tnn {

enum class LossKind : uint8_t {
    l2,
    l1,
    relative_l2,
    relative_l1,
    relative_l2_luminance,
    mape,
    smape,
    cross_entropy,
    variance
};

template <typename A> struct LossTerm {
    A value;     // this element's share of the loss (already divided by N and the pdf)
    A gradient;  // loss_scale * d(value)/d(prediction), with the relative losses' denominators held constant
};

// Overloads that exist on the host and on the device for float and double.
TNN_HD inline float loss_abs(float x) { return ::fabsf(x); }
TNN_HD inline double loss_abs(double x) { return ::fabs(x); }
TNN_HD inline float loss_copysign(float m, float s) { return ::copysignf(m, s); }
TNN_HD inline double loss_copysign(double m, double s) { return ::copysign(m, s); }
TNN_HD inline float loss_log(float x) { return ::logf(x); }
TNN_HD inline double loss_log(double x) { return ::log(x); }

// a * b + c with both roundings: in device code never contracted into one FMA, so that the formulas
// give the same bits in the FullyFusedMLP kernels' fused training step (compiled with contraction) as
// in losses.cu (compiled without). Host code (the CPU loop) uses a * b + c as written: with x86-64's
// baseline instruction set the compiler has no FMA to contract it into.
template <typename A> TNN_HD inline A loss_mul_add(A a, A b, A c) {
#if defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__)
    if constexpr (std::is_same_v<A, float>) return __fadd_rn(__fmul_rn(a, b), c);
    else return __dadd_rn(__dmul_rn(a, b), c);
#else
    return a * b + c;
#endif
}

// The prediction's luminance for RelativeL2Luminance: channels 0..2 are RGB; with 6 or more channels,
// channels 3..5 are a second RGB triple that is added first (tcnn's six-channel convention).
template <typename A> TNN_HD inline A loss_luminance(A r, A g, A b) {
    return A(0.299) * r + A(0.587) * g + A(0.114) * b;
}

// One element. p: prediction, t: target, pdf: the sample's data pdf (1 without one), lum: the row's
// luminance (RelativeL2Luminance only), n: the number of real outputs N = rows * cols.
// The relative losses divide by a function of the prediction that the gradient treats as a constant
// (Noise2Noise convention, as tcnn): d/dp of d^2/(p^2+0.01) is taken as 2d/(p^2+0.01).
template <LossKind K, typename A>
TNN_HD inline LossTerm<A> loss_element(A p, A t, A pdf, A lum, A n, A loss_scale) {
    const A d = p - t;
    const A eps = A(0.01);
    LossTerm<A> out;
    if constexpr (K == LossKind::l2) {
        out.value = d * d / pdf / n;
        out.gradient = loss_scale * (A(2) * d / pdf) / n;
    } else if constexpr (K == LossKind::l1) {
        out.value = loss_abs(d) / pdf / n;
        out.gradient = loss_scale * loss_copysign(A(1) / pdf, d) / n;
    } else if constexpr (K == LossKind::relative_l2 || K == LossKind::relative_l2_luminance) {
        const A base = K == LossKind::relative_l2 ? p : lum;
        const A denom = loss_mul_add(base, base, eps);
        out.value = d * d / denom / pdf / n;
        out.gradient = loss_scale * (A(2) * d / denom / pdf) / n;
    } else if constexpr (K == LossKind::relative_l1 || K == LossKind::mape || K == LossKind::smape) {
        A denom;
        if constexpr (K == LossKind::relative_l1) denom = loss_abs(p) + eps;
        else if constexpr (K == LossKind::mape) denom = loss_abs(t) + eps;
        else denom = loss_mul_add(A(0.5), loss_abs(t) + loss_abs(p), eps);
        const A scale = A(1) / denom / pdf;
        out.value = loss_abs(d) * scale / n;
        out.gradient = loss_scale * loss_copysign(scale, d) / n;
    } else if constexpr (K == LossKind::cross_entropy) {
        // -t log p per element; the prediction is expected to be a probability in (0, 1].
        const A factor = -t / pdf / n;
        out.value = factor * loss_log(p);
        out.gradient = loss_scale * (factor / p);
    } else {  // LossKind::variance
        // Importance-sampling variance (Neural Importance Sampling): t^2/(pdf N) * (1/p - 1/pdf).
        const A factor = t * t / pdf / n;
        out.value = factor / p - factor / pdf;
        out.gradient = loss_scale * (-factor / (p * p));
    }
    return out;
}

// The losses FullyFusedMLP's fused training step computes inside its backward kernel: the term
// depends on the prediction and target of one element only, and no formula has a product followed
// by a sum that loss_mul_add does not pin down.
TNN_HD constexpr bool is_fused_loss_kind(LossKind k) {
    return k == LossKind::l2 || k == LossKind::l1 || k == LossKind::relative_l2 || k == LossKind::relative_l1 ||
           k == LossKind::mape || k == LossKind::smape;
}

// Calls f(std::integral_constant<LossKind, K>{}) for the runtime kind: the one place that turns a
// loss kind into a template parameter (host code: the CPU loop and the GPU launcher).
template <typename F> decltype(auto) dispatch_loss_kind(LossKind kind, F&& f) {
    switch (kind) {
        case LossKind::l2: return f(std::integral_constant<LossKind, LossKind::l2>{});
        case LossKind::l1: return f(std::integral_constant<LossKind, LossKind::l1>{});
        case LossKind::relative_l2: return f(std::integral_constant<LossKind, LossKind::relative_l2>{});
        case LossKind::relative_l1: return f(std::integral_constant<LossKind, LossKind::relative_l1>{});
        case LossKind::relative_l2_luminance:
            return f(std::integral_constant<LossKind, LossKind::relative_l2_luminance>{});
        case LossKind::mape: return f(std::integral_constant<LossKind, LossKind::mape>{});
        case LossKind::smape: return f(std::integral_constant<LossKind, LossKind::smape>{});
        case LossKind::cross_entropy: return f(std::integral_constant<LossKind, LossKind::cross_entropy>{});
        case LossKind::variance: return f(std::integral_constant<LossKind, LossKind::variance>{});
    }
    return f(std::integral_constant<LossKind, LossKind::l2>{});
}

}  // namespace tnn
