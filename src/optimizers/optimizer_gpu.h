// The GPU halves of the optimizers (optimizers.cu): the per-step scalars each optimizer's host half
// computes and uploads (one small launch), and one launcher per update rule over the flat parameter
// array. Kernels read the scalars from device memory, never from their arguments, so that a graph of
// the launches replays every later step (GpuSplitStep in optimizer_impl.h, docs/gpu.md).
// Declared in every build; defined in GPU builds (CPU builds get stubs that are never reached).
#pragma once

#include <tnn/tensor.h>

#include "optimizers/optimizer_math.h"

#include <cstddef>
#include <cstdint>

namespace tnn::optimizer_gpu {

// This step's scalars, as they sit in device memory. active == 0: a wrapper skips the step (Batched
// between two updates of its nested optimizer) and the kernels return at once.
struct AdamScalars {
    AdamStepParams h;
    uint32_t active;
};
struct SgdScalars {
    float learning_rate, l2_reg;
    uint32_t active;
};
struct NovogradScalars {
    float learning_rate, beta1, beta2, epsilon, relative_decay, absolute_decay;
    uint32_t active;
};
struct EmaScalars {
    float decay, debias_old, debias_new;
    uint32_t full_precision;
    uint32_t use_nested;  // average the nested optimizer's inference weights instead of the weights
    uint32_t active;
};
struct AverageScalars {
    uint32_t slot, n_samples, active;
};
struct LookaheadScalars {
    float alpha;
    uint32_t copy_first;  // the slow weights start as the weights (the nested optimizer's first step)
    uint32_t pull;        // this step pulls the weights towards the slow weights
    uint32_t active;
};
struct BatchedScalars {
    uint32_t first;          // the pool restarts with this gradient
    uint32_t nested_active;  // the pool is complete: its mean feeds the nested optimizer
    uint32_t batch_size_multiplier, active;
};
// Composite's scalars are words: [0] the step assembles inference weights, [1 + i] slice i takes
// them from its nested optimizer (else from the trained weights).

// Copies `bytes` (a multiple of 4) host bytes to device memory in stream order: a kernel whose
// arguments carry the bytes, so the host copy may change as soon as this returns.
void upload(const Stream& stream, void* device_dst, const void* host_src, size_t bytes);

void adam_step(const Stream& stream, const AdamScalars* scalars, float loss_scale, size_t n, size_t n_matrix,
               const void* gradients, DType grad_dtype, float* weights_fp32, void* weights, DType weights_dtype,
               float* first_moments, float* second_moments, uint32_t* param_steps);
void sgd_step(const Stream& stream, const SgdScalars* scalars, float loss_scale, size_t n, const void* gradients,
              DType grad_dtype, float* weights_fp32, void* weights, DType weights_dtype);
// Novograd: group norms (fixed-order fp64 sums into `partials`, novograd_partials() values), the
// group second moments, then the update: three launches.
size_t novograd_partials(size_t n, size_t n_matrix);
void novograd_step(const Stream& stream, const NovogradScalars* scalars, float loss_scale, size_t n, size_t n_matrix,
                   const void* gradients, DType grad_dtype, float* weights_fp32, void* weights, DType weights_dtype,
                   float* first_moments, float* group_second_moments, double* partials);
// nested_inference may be nullptr when scalars never set use_nested.
void ema_step(const Stream& stream, const EmaScalars* scalars, size_t n, const void* weights, DType weights_dtype,
              const float* nested_inference, float* ema);
void average_step(const Stream& stream, const AverageScalars* scalars, size_t n, const void* weights,
                  DType weights_dtype, float* samples, float* average);
void lookahead_step(const Stream& stream, const LookaheadScalars* scalars, size_t n, float* weights_fp32,
                    void* weights, DType weights_dtype, float* slow);
// Adds the gradients to the pool; when the pool is complete and `mean` is not nullptr, also writes the
// pool rounded to grad_dtype into `mean` (the nested optimizer's gradients).
void batched_step(const Stream& stream, const BatchedScalars* scalars, size_t n, const void* gradients,
                  DType grad_dtype, float* pool, void* mean);
// Slice `slice` of Composite's inference weights: n values from nested_inference (may be nullptr when
// the flag is never set) or weights_fp32, as flags say.
void composite_gather(const Stream& stream, const uint32_t* flags, size_t slice, size_t n,
                      const float* nested_inference, const float* weights_fp32, float* inference);

}  // namespace tnn::optimizer_gpu
