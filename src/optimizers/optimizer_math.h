// Per-parameter update rules of every optimizer, in fp32 with tcnn's order of operations. Host+device:
// the CPU loops in src/optimizers/*.cpp and a later optimizers.cu (one thread per parameter of the
// flat array) share this one copy. Gradients reach these functions already divided by the loss scale
// unless the name says otherwise; rounding to the parameter dtype happens in the callers.
#pragma once

#include <tnn/dtype.h>

#include <float.h>
#include <math.h>
#include <stdint.h>

namespace tnn {

// Relative decay shrinks a weight in proportion to itself (like L2), absolute decay by a constant
// step towards zero (like L1). Both arrive already multiplied by the learning rate.
TNN_HD inline float weight_decay(float relative, float absolute, float weight) {
    return (1.0f - relative) * weight - ::copysignf(absolute, weight);
}

struct AdamStepParams {
    float learning_rate;
    float non_matrix_learning_rate_factor;
    float beta1, beta2, epsilon;
    float l2_reg;
    float relative_decay, absolute_decay;
    float clipping_magnitude;          // 0: no clipping
    float lower_lr_bound, upper_lr_bound;  // AdaBound; [0, FLT_MAX] without it
    bool optimize_matrix_params, optimize_non_matrix_params;
    // adam_bias_correction(beta1, beta2, cached_step), computed once per step: most parameters share
    // the optimizer's step count, and powf per parameter would dominate the CPU loop.
    uint32_t cached_step;
    float cached_bias_correction;
};

// The learning-rate factor that removes the bias of zero-initialised moments after `step` updates.
TNN_HD inline float adam_bias_correction(float beta1, float beta2, uint32_t step) {
    return ::sqrtf(1.0f - ::powf(beta2, static_cast<float>(step))) / (1.0f - ::powf(beta1, static_cast<float>(step)));
}

// AdaBound's bounds on the per-parameter step size for optimizer step `step` (1-based).
TNN_HD inline void adam_lr_bounds(bool adabound, float beta2, uint32_t step, float& lower, float& upper) {
    if (!adabound) {
        lower = 0.0f;
        upper = FLT_MAX;
        return;
    }
    lower = 0.1f - 0.1f / ((1.0f - beta2) * static_cast<float>(step) + 1.0f);
    upper = 0.1f + 0.1f / ((1.0f - beta2) * static_cast<float>(step));
}

// One Adam step of one parameter. Matrix parameters always step (with L2 regularisation); other
// parameters skip a step whose gradient is exactly zero, step counter included, because a hash-grid
// entry no sample touched has no information (its moments must not decay). The bias correction uses
// the parameter's own step counter for the same reason. Returns false when the parameter is skipped.
TNN_HD inline bool adam_update(const AdamStepParams& h, bool is_matrix, float gradient, float& weight,
                               float& first_moment, float& second_moment, uint32_t& param_step) {
    if (is_matrix ? !h.optimize_matrix_params : (!h.optimize_non_matrix_params || gradient == 0.0f)) return false;
    if (is_matrix) gradient += h.l2_reg * weight;
    const float gradient_sq = gradient * gradient;
    first_moment = h.beta1 * first_moment + (1.0f - h.beta1) * gradient;
    second_moment = h.beta2 * second_moment + (1.0f - h.beta2) * gradient_sq;
    float lr = h.learning_rate;
    if (!is_matrix) lr *= h.non_matrix_learning_rate_factor;
    const uint32_t step = ++param_step;
    lr *= step == h.cached_step ? h.cached_bias_correction : adam_bias_correction(h.beta1, h.beta2, step);
    const float effective_lr = ::fminf(::fmaxf(lr / (::sqrtf(second_moment) + h.epsilon), h.lower_lr_bound), h.upper_lr_bound);
    float new_weight = weight_decay(h.relative_decay * lr, h.absolute_decay * lr, weight) - effective_lr * first_moment;
    if (h.clipping_magnitude != 0.0f)
        new_weight = ::fminf(::fmaxf(new_weight, -h.clipping_magnitude), h.clipping_magnitude);
    weight = new_weight;
    return true;
}

// Plain SGD; L2 regularisation applies to every parameter (tcnn's SGD has no matrix distinction).
TNN_HD inline float sgd_update(float learning_rate, float l2_reg, float gradient, float weight) {
    gradient += l2_reg * weight;
    return weight - learning_rate * gradient;
}

// Novograd (Ginsburg et al. 2019): one second moment per parameter group, from the group's sum of
// squared *scaled* gradients; beta2 = 0 on the first step sets it exactly.
TNN_HD inline float novograd_second_moment(float beta2, float second_moment, float scaled_grad_sq_sum, float loss_scale) {
    return beta2 * second_moment + (1.0f - beta2) * scaled_grad_sq_sum / loss_scale / loss_scale;
}

// Novograd's per-parameter update; beta1 = 0 on the first step.
TNN_HD inline void novograd_update(float learning_rate, float beta1, float epsilon, float relative_decay,
                                   float absolute_decay, float group_second_moment, float gradient, float& weight,
                                   float& first_moment) {
    first_moment = beta1 * first_moment + (1.0f - beta1) * gradient / (::sqrtf(group_second_moment) + epsilon);
    weight = weight_decay(relative_decay * learning_rate, absolute_decay * learning_rate, weight) -
             learning_rate * first_moment;
}

// EMA with debiasing: `ema` holds the debiased average after step k-1; debias_old = 1 - decay^(k-1)
// turns it back into the biased running sum, debias_new = 1 / (1 - decay^k) debiases the new one.
TNN_HD inline float ema_update(float decay, float debias_old, float debias_new, float ema, float weight) {
    return (ema * decay * debias_old + weight * (1.0f - decay)) * debias_new;
}

// Sliding-window average over the last n_samples weights (zeros before the window has filled):
// add the new sample's share, drop the share of the sample it replaces.
TNN_HD inline float average_update(float average, float weight, float replaced_sample, uint32_t n_samples) {
    return average + (weight - replaced_sample) / static_cast<float>(n_samples);
}

// Lookahead (Zhang et al. 2019): every n_steps, the slow weights move alpha of the way to the fast ones.
TNN_HD inline float lookahead_update(float alpha, float slow_weight, float fast_weight) {
    return slow_weight * (1.0f - alpha) + fast_weight * alpha;
}

// Batched: the mean of batch_size_multiplier consecutive (still loss-scaled) gradients.
TNN_HD inline float batched_accumulate(bool first, float pool, float scaled_gradient, uint32_t batch_size_multiplier) {
    return (first ? 0.0f : pool) + scaled_gradient / static_cast<float>(batch_size_multiplier);
}

}  // namespace tnn
