// Every optimizer's update on the GPU: one thread per parameter of the flat array (Adam: four, when
// the arrays allow 16-byte accesses) over the rules of optimizer_math.h (the CPU loops' maths, in
// their order of operations), reading this step's scalars from device memory (optimizer_gpu.h).
// Compiled without FMA contraction (CMakeLists.txt), so the weights and state equal the CPU's bit for
// bit, except where docs/gpu.md says otherwise (Novograd's group norm is summed in another order;
// Adam's bias correction for a parameter whose own step count lags the optimizer's uses the device
// powf).
#include "optimizers/optimizer_gpu.h"

#include "gpu/gpu.h"

#include <algorithm>
#include <cstring>

namespace tnn::optimizer_gpu {

namespace {

using gpu::ceil_div;
using gpu::dispatch_device_dtype;
using gpu::elementwise_grid;
using gpu::kElementwiseThreads;

// A stored value as fp32, as the CPU's to_float (fp64 narrowed, fp16/bf16 widened).
template <typename T> __device__ __forceinline__ float as_float(T x) { return static_cast<float>(gpu::to_acc(x)); }
// The fp32 value x has after rounding to storage type W (the CPU's round_through<W>).
template <typename W> __device__ __forceinline__ float round_through(float x) { return as_float(gpu::from_acc<W>(x)); }

#define TNN_FOR_EACH_PARAM(i, n) \
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < (n); i += int64_t(gridDim.x) * blockDim.x)

// ---- Kernels. `weights` may alias `weights_fp32` (fp32 models), so neither is __restrict__.

constexpr int kUploadWords = 64;
struct UploadWords {
    uint32_t words[kUploadWords];
};

__global__ void optimizer_upload_kernel(UploadWords src, uint32_t n_words, uint32_t* __restrict__ dst) {
    if (threadIdx.x < n_words) dst[threadIdx.x] = src.words[threadIdx.x];
}

template <typename G, typename W>
__global__ void adam_step_kernel(const AdamScalars* __restrict__ scalars, float loss_scale, int64_t n, int64_t n_matrix,
                                 const G* __restrict__ gradients, float* weights_fp32, W* weights,
                                 float* __restrict__ first_moments, float* __restrict__ second_moments,
                                 uint32_t* __restrict__ param_steps) {
    if (!scalars->active) return;
    const AdamStepParams h = scalars->h;
    TNN_FOR_EACH_PARAM(i, n) {
        adam_update(h, i < n_matrix, as_float(gradients[i]) / loss_scale, weights_fp32[i], first_moments[i],
                    second_moments[i], param_steps[i]);
        weights[i] = gpu::from_acc<W>(weights_fp32[i]);
    }
}

// Four consecutive values as one unit: one load or store of up to 16 bytes (two for fp64).
template <typename T> using Quad = gpu::Packed<T, 4>;
template <typename T> bool quad_aligned(const void* p) { return gpu::aligned(p, alignof(Quad<T>)); }

// adam_step_kernel four parameters per thread, for arrays that all start at a Quad boundary: each
// array moves in 16-byte units, so that more bytes are in flight per thread (the step is bound by
// memory: 36 bytes per fp16 parameter). Per parameter the same adam_update as the scalar kernel, so
// the same bits. A quad none of whose parameters adam_update would change (non-matrix parameters with
// zero gradients, or a group that is not optimised) does not read its moments and step counts, as the
// scalar kernel skips them. The last n % 4 parameters go to the first threads of the grid, one each.
template <typename G, typename W>
__global__ void adam_step_quads_kernel(const AdamScalars* __restrict__ scalars, float loss_scale, int64_t n,
                                       int64_t n_matrix, const G* __restrict__ gradients, float* weights_fp32,
                                       W* weights, float* __restrict__ first_moments,
                                       float* __restrict__ second_moments, uint32_t* __restrict__ param_steps) {
    if (!scalars->active) return;
    const AdamStepParams h = scalars->h;
    const int64_t n_quads = n / 4;
    TNN_FOR_EACH_PARAM(q, n_quads) {
        const int64_t i0 = q * 4;
        const Quad<G> g = reinterpret_cast<const Quad<G>*>(gradients)[q];
        Quad<float> w = reinterpret_cast<const Quad<float>*>(weights_fp32)[q];
        float grad[4];
        bool changes = false;
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            grad[k] = as_float(g.v[k]) / loss_scale;
            const bool is_matrix = i0 + k < n_matrix;
            changes |= is_matrix ? h.optimize_matrix_params : (h.optimize_non_matrix_params && grad[k] != 0.0f);
        }
        if (changes) {
            Quad<float> m = reinterpret_cast<Quad<float>*>(first_moments)[q];
            Quad<float> v = reinterpret_cast<Quad<float>*>(second_moments)[q];
            Quad<uint32_t> steps = reinterpret_cast<Quad<uint32_t>*>(param_steps)[q];
#pragma unroll
            for (int k = 0; k < 4; ++k) adam_update(h, i0 + k < n_matrix, grad[k], w.v[k], m.v[k], v.v[k], steps.v[k]);
            reinterpret_cast<Quad<float>*>(first_moments)[q] = m;
            reinterpret_cast<Quad<float>*>(second_moments)[q] = v;
            reinterpret_cast<Quad<uint32_t>*>(param_steps)[q] = steps;
            reinterpret_cast<Quad<float>*>(weights_fp32)[q] = w;
        }
        Quad<W> out;
#pragma unroll
        for (int k = 0; k < 4; ++k) out.v[k] = gpu::from_acc<W>(w.v[k]);
        reinterpret_cast<Quad<W>*>(weights)[q] = out;
    }
    const int64_t i = n_quads * 4 + blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
    if (i < n) {
        adam_update(h, i < n_matrix, as_float(gradients[i]) / loss_scale, weights_fp32[i], first_moments[i],
                    second_moments[i], param_steps[i]);
        weights[i] = gpu::from_acc<W>(weights_fp32[i]);
    }
}

template <typename G, typename W>
__global__ void sgd_step_kernel(const SgdScalars* __restrict__ scalars, float loss_scale, int64_t n,
                                const G* __restrict__ gradients, float* weights_fp32, W* weights) {
    if (!scalars->active) return;
    const float lr = scalars->learning_rate, l2_reg = scalars->l2_reg;
    TNN_FOR_EACH_PARAM(i, n) {
        weights_fp32[i] = sgd_update(lr, l2_reg, as_float(gradients[i]) / loss_scale, weights_fp32[i]);
        weights[i] = gpu::from_acc<W>(weights_fp32[i]);
    }
}

// Novograd's squared gradient norms, per group (matrix parameters, the others). Block b sums a chunk of
// kNormChunk parameters of one group in fp64: blocks [0, matrix_blocks) the matrix group, the rest the
// other group. Each thread adds a fixed strided subset in order, then a fixed tree: the order depends
// on the sizes only.
constexpr int kNormThreads = 256;
constexpr int64_t kNormChunk = kNormThreads * 16;

__device__ __forceinline__ void block_sum_to(double value, double* out) {
    __shared__ double shared[kNormThreads];
    shared[threadIdx.x] = value;
    __syncthreads();
    for (int width = kNormThreads / 2; width > 0; width /= 2) {
        if (static_cast<int>(threadIdx.x) < width) shared[threadIdx.x] += shared[threadIdx.x + width];
        __syncthreads();
    }
    if (threadIdx.x == 0) *out = shared[0];
}

template <typename G>
__global__ void __launch_bounds__(kNormThreads)
    novograd_norm_kernel(const NovogradScalars* __restrict__ scalars, const G* __restrict__ gradients, int64_t n,
                         int64_t n_matrix, int64_t matrix_blocks, double* __restrict__ partials) {
    if (!scalars->active) return;
    const bool matrix = blockIdx.x < matrix_blocks;
    const int64_t chunk = matrix ? blockIdx.x : blockIdx.x - matrix_blocks;
    const int64_t group_end = matrix ? n_matrix : n;
    const int64_t begin = (matrix ? 0 : n_matrix) + chunk * kNormChunk;
    const int64_t end = begin + kNormChunk < group_end ? begin + kNormChunk : group_end;
    double acc = 0.0;
    for (int64_t i = begin + threadIdx.x; i < end; i += kNormThreads) {
        const float g = as_float(gradients[i]);
        acc += static_cast<double>(g * g);
    }
    block_sum_to(acc, &partials[blockIdx.x]);
}

// Block 0 folds the matrix group's partial sums into its second moment, block 1 the other group's.
__global__ void __launch_bounds__(kNormThreads)
    novograd_moment_kernel(const NovogradScalars* __restrict__ scalars, float loss_scale,
                           const double* __restrict__ partials, int64_t matrix_blocks, int64_t other_blocks,
                           float* __restrict__ group_second_moments) {
    if (!scalars->active) return;
    const int64_t first = blockIdx.x == 0 ? 0 : matrix_blocks, count = blockIdx.x == 0 ? matrix_blocks : other_blocks;
    if (count == 0) return;  // an empty group keeps its moment, as on the CPU
    double acc = 0.0;
    for (int64_t b = threadIdx.x; b < count; b += kNormThreads) acc += partials[first + b];
    __shared__ double total;
    block_sum_to(acc, &total);
    __syncthreads();
    if (threadIdx.x == 0) {
        float& v = group_second_moments[blockIdx.x];
        v = novograd_second_moment(scalars->beta2, v, static_cast<float>(total), loss_scale);
    }
}

template <typename G, typename W>
__global__ void novograd_update_kernel(const NovogradScalars* __restrict__ scalars, float loss_scale, int64_t n,
                                       int64_t n_matrix, const G* __restrict__ gradients, float* weights_fp32,
                                       W* weights, float* __restrict__ first_moments,
                                       const float* __restrict__ group_second_moments) {
    if (!scalars->active) return;
    const NovogradScalars s = *scalars;
    const float v_matrix = group_second_moments[0], v_other = group_second_moments[1];
    TNN_FOR_EACH_PARAM(i, n) {
        novograd_update(s.learning_rate, s.beta1, s.epsilon, s.relative_decay, s.absolute_decay,
                        i < n_matrix ? v_matrix : v_other, as_float(gradients[i]) / loss_scale, weights_fp32[i],
                        first_moments[i]);
        weights[i] = gpu::from_acc<W>(weights_fp32[i]);
    }
}

template <typename W>
__global__ void ema_step_kernel(const EmaScalars* __restrict__ scalars, int64_t n, const W* __restrict__ weights,
                                const float* __restrict__ nested_inference, float* __restrict__ ema) {
    if (!scalars->active) return;
    const EmaScalars s = *scalars;
    TNN_FOR_EACH_PARAM(i, n) {
        const float w = s.use_nested ? nested_inference[i] : as_float(weights[i]);
        const float filtered = ema_update(s.decay, s.debias_old, s.debias_new, ema[i], w);
        ema[i] = s.full_precision ? filtered : round_through<W>(filtered);
    }
}

template <typename W>
__global__ void average_step_kernel(const AverageScalars* __restrict__ scalars, int64_t n,
                                    const W* __restrict__ weights, float* __restrict__ samples,
                                    float* __restrict__ average) {
    if (!scalars->active) return;
    const AverageScalars s = *scalars;
    float* sample = samples + static_cast<int64_t>(s.slot) * n;
    TNN_FOR_EACH_PARAM(i, n) {
        const float w = as_float(weights[i]);
        average[i] = round_through<W>(average_update(average[i], w, sample[i], s.n_samples));
        sample[i] = w;
    }
}

template <typename W>
__global__ void lookahead_step_kernel(const LookaheadScalars* __restrict__ scalars, int64_t n, float* weights_fp32,
                                      W* weights, float* __restrict__ slow) {
    if (!scalars->active) return;
    const LookaheadScalars s = *scalars;
    if (!s.copy_first && !s.pull) return;
    TNN_FOR_EACH_PARAM(i, n) {
        if (s.copy_first) slow[i] = as_float(weights[i]);
        if (s.pull) {
            const float pulled = lookahead_update(s.alpha, slow[i], weights_fp32[i]);
            weights_fp32[i] = pulled;
            weights[i] = gpu::from_acc<W>(pulled);
            slow[i] = as_float(weights[i]);
        }
    }
}

template <typename G>
__global__ void batched_step_kernel(const BatchedScalars* __restrict__ scalars, int64_t n,
                                    const G* __restrict__ gradients, float* __restrict__ pool, G* __restrict__ mean) {
    if (!scalars->active) return;
    const BatchedScalars s = *scalars;
    const bool write_mean = mean && s.nested_active;
    TNN_FOR_EACH_PARAM(i, n) {
        const float pooled = batched_accumulate(s.first, pool[i], as_float(gradients[i]), s.batch_size_multiplier);
        pool[i] = pooled;
        if (write_mean) mean[i] = gpu::from_acc<G>(pooled);
    }
}

__global__ void composite_gather_kernel(const uint32_t* __restrict__ flags, int64_t slice, int64_t n,
                                        const float* __restrict__ nested_inference,
                                        const float* __restrict__ weights_fp32, float* __restrict__ inference) {
    if (!flags[0]) return;
    const float* src = flags[1 + slice] ? nested_inference : weights_fp32;
    TNN_FOR_EACH_PARAM(i, n) inference[i] = src[i];
}

#undef TNN_FOR_EACH_PARAM

// Calls f(G{}, W{}) with the device storage types of the gradient and weight dtypes.
template <typename F> void dispatch_grad_weight(DType grad_dtype, DType weights_dtype, F&& f) {
    dispatch_device_dtype(grad_dtype, [&](auto g) { dispatch_device_dtype(weights_dtype, [&](auto w) { f(g, w); }); });
}

int64_t blocks_of(size_t n) { return ceil_div<int64_t>(static_cast<int64_t>(n), kNormChunk); }

}  // namespace

// ---- Launchers.

void upload(const Stream& stream, void* device_dst, const void* host_src, size_t bytes) {
    if (bytes % 4 != 0) throw Error(msg("optimizer scalars: ", bytes, " bytes is not a whole number of 32-bit words"));
    gpu::DeviceGuard guard(stream.device().index);
    const size_t n_words = bytes / 4;
    for (size_t first = 0; first < n_words; first += kUploadWords) {
        UploadWords words{};
        const size_t count = n_words - first < size_t(kUploadWords) ? n_words - first : size_t(kUploadWords);
        std::memcpy(words.words, static_cast<const uint32_t*>(host_src) + first, count * 4);
        optimizer_upload_kernel<<<1, kUploadWords, 0, gpu::native_stream(stream)>>>(
            words, static_cast<uint32_t>(count), static_cast<uint32_t*>(device_dst) + first);
        TNN_GPU_CHECK_LAUNCH("optimizer_upload_kernel");
    }
}

void adam_step(const Stream& stream, const AdamScalars* scalars, float loss_scale, size_t n, size_t n_matrix,
               const void* gradients, DType grad_dtype, float* weights_fp32, void* weights, DType weights_dtype,
               float* first_moments, float* second_moments, uint32_t* param_steps) {
    if (n == 0) return;
    gpu::DeviceGuard guard(stream.device().index);
    dispatch_grad_weight(grad_dtype, weights_dtype, [&](auto g, auto w) {
        using G = decltype(g);
        using W = decltype(w);
        const bool quads = quad_aligned<G>(gradients) && quad_aligned<W>(weights) && quad_aligned<float>(weights_fp32) &&
                           quad_aligned<float>(first_moments) && quad_aligned<float>(second_moments) &&
                           quad_aligned<uint32_t>(param_steps);
        const gpu_stream_t s = gpu::native_stream(stream);
        const auto count = static_cast<int64_t>(n), matrix = static_cast<int64_t>(n_matrix);
        const G* grads = static_cast<const G*>(gradients);
        W* copy = static_cast<W*>(weights);
        if (quads) {
            adam_step_quads_kernel<G, W><<<elementwise_grid(std::max<int64_t>(count / 4, 1)), kElementwiseThreads, 0, s>>>(
                scalars, loss_scale, count, matrix, grads, weights_fp32, copy, first_moments, second_moments, param_steps);
            TNN_GPU_CHECK_LAUNCH("adam_step_quads_kernel");
        } else {  // a slice of a Composite optimizer may start anywhere
            adam_step_kernel<G, W><<<elementwise_grid(count), kElementwiseThreads, 0, s>>>(
                scalars, loss_scale, count, matrix, grads, weights_fp32, copy, first_moments, second_moments, param_steps);
            TNN_GPU_CHECK_LAUNCH("adam_step_kernel");
        }
    });
}

void sgd_step(const Stream& stream, const SgdScalars* scalars, float loss_scale, size_t n, const void* gradients,
              DType grad_dtype, float* weights_fp32, void* weights, DType weights_dtype) {
    if (n == 0) return;
    gpu::DeviceGuard guard(stream.device().index);
    dispatch_grad_weight(grad_dtype, weights_dtype, [&](auto g, auto w) {
        using G = decltype(g);
        using W = decltype(w);
        sgd_step_kernel<G, W><<<elementwise_grid(n), kElementwiseThreads, 0, gpu::native_stream(stream)>>>(
            scalars, loss_scale, static_cast<int64_t>(n), static_cast<const G*>(gradients), weights_fp32,
            static_cast<W*>(weights));
        TNN_GPU_CHECK_LAUNCH("sgd_step_kernel");
    });
}

size_t novograd_partials(size_t n, size_t n_matrix) {
    return static_cast<size_t>(blocks_of(n_matrix) + blocks_of(n - n_matrix));
}

void novograd_step(const Stream& stream, const NovogradScalars* scalars, float loss_scale, size_t n, size_t n_matrix,
                   const void* gradients, DType grad_dtype, float* weights_fp32, void* weights, DType weights_dtype,
                   float* first_moments, float* group_second_moments, double* partials) {
    if (n == 0) return;
    gpu::DeviceGuard guard(stream.device().index);
    const gpu_stream_t s = gpu::native_stream(stream);
    const int64_t matrix_blocks = blocks_of(n_matrix), other_blocks = blocks_of(n - n_matrix);
    dispatch_device_dtype(grad_dtype, [&](auto g) {
        using G = decltype(g);
        novograd_norm_kernel<G><<<static_cast<unsigned>(matrix_blocks + other_blocks), kNormThreads, 0, s>>>(
            scalars, static_cast<const G*>(gradients), static_cast<int64_t>(n), static_cast<int64_t>(n_matrix),
            matrix_blocks, partials);
        TNN_GPU_CHECK_LAUNCH("novograd_norm_kernel");
    });
    novograd_moment_kernel<<<2, kNormThreads, 0, s>>>(scalars, loss_scale, partials, matrix_blocks, other_blocks,
                                                      group_second_moments);
    TNN_GPU_CHECK_LAUNCH("novograd_moment_kernel");
    dispatch_grad_weight(grad_dtype, weights_dtype, [&](auto g, auto w) {
        using G = decltype(g);
        using W = decltype(w);
        novograd_update_kernel<G, W><<<elementwise_grid(n), kElementwiseThreads, 0, s>>>(
            scalars, loss_scale, static_cast<int64_t>(n), static_cast<int64_t>(n_matrix),
            static_cast<const G*>(gradients), weights_fp32, static_cast<W*>(weights), first_moments,
            group_second_moments);
        TNN_GPU_CHECK_LAUNCH("novograd_update_kernel");
    });
}

void ema_step(const Stream& stream, const EmaScalars* scalars, size_t n, const void* weights, DType weights_dtype,
              const float* nested_inference, float* ema) {
    if (n == 0) return;
    gpu::DeviceGuard guard(stream.device().index);
    dispatch_device_dtype(weights_dtype, [&](auto w) {
        using W = decltype(w);
        ema_step_kernel<W><<<elementwise_grid(n), kElementwiseThreads, 0, gpu::native_stream(stream)>>>(
            scalars, static_cast<int64_t>(n), static_cast<const W*>(weights), nested_inference, ema);
        TNN_GPU_CHECK_LAUNCH("ema_step_kernel");
    });
}

void average_step(const Stream& stream, const AverageScalars* scalars, size_t n, const void* weights,
                  DType weights_dtype, float* samples, float* average) {
    if (n == 0) return;
    gpu::DeviceGuard guard(stream.device().index);
    dispatch_device_dtype(weights_dtype, [&](auto w) {
        using W = decltype(w);
        average_step_kernel<W><<<elementwise_grid(n), kElementwiseThreads, 0, gpu::native_stream(stream)>>>(
            scalars, static_cast<int64_t>(n), static_cast<const W*>(weights), samples, average);
        TNN_GPU_CHECK_LAUNCH("average_step_kernel");
    });
}

void lookahead_step(const Stream& stream, const LookaheadScalars* scalars, size_t n, float* weights_fp32,
                    void* weights, DType weights_dtype, float* slow) {
    if (n == 0) return;
    gpu::DeviceGuard guard(stream.device().index);
    dispatch_device_dtype(weights_dtype, [&](auto w) {
        using W = decltype(w);
        lookahead_step_kernel<W><<<elementwise_grid(n), kElementwiseThreads, 0, gpu::native_stream(stream)>>>(
            scalars, static_cast<int64_t>(n), weights_fp32, static_cast<W*>(weights), slow);
        TNN_GPU_CHECK_LAUNCH("lookahead_step_kernel");
    });
}

void batched_step(const Stream& stream, const BatchedScalars* scalars, size_t n, const void* gradients,
                  DType grad_dtype, float* pool, void* mean) {
    if (n == 0) return;
    gpu::DeviceGuard guard(stream.device().index);
    dispatch_device_dtype(grad_dtype, [&](auto g) {
        using G = decltype(g);
        batched_step_kernel<G><<<elementwise_grid(n), kElementwiseThreads, 0, gpu::native_stream(stream)>>>(
            scalars, static_cast<int64_t>(n), static_cast<const G*>(gradients), pool, static_cast<G*>(mean));
        TNN_GPU_CHECK_LAUNCH("batched_step_kernel");
    });
}

void composite_gather(const Stream& stream, const uint32_t* flags, size_t slice, size_t n,
                      const float* nested_inference, const float* weights_fp32, float* inference) {
    if (n == 0) return;
    gpu::DeviceGuard guard(stream.device().index);
    composite_gather_kernel<<<elementwise_grid(n), kElementwiseThreads, 0, gpu::native_stream(stream)>>>(
        flags, static_cast<int64_t>(slice), static_cast<int64_t>(n), nested_inference, weights_fp32, inference);
    TNN_GPU_CHECK_LAUNCH("composite_gather_kernel");
}

}  // namespace tnn::optimizer_gpu
