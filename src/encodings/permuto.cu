// Permuto encoding on the GPU: the entry points permuto.cpp calls. Builds the kernel arguments from the
// module's level table, takes scratch from the stream's temporary memory, and launches the kernels of
// permuto_kernels_gpu.h (compiled per input dimension in instantiations/permuto_d*.cu).
//
// Parameter gradients: fp32 atomics straight into an fp32 gradient, or into fp32 scratch converted to
// fp16 / bf16 at the end (the fast path; the order of the additions, so the last bits, vary from run to
// run). With `deterministic` (or tnn::set_deterministic) the contributions go through 64-bit fixed point
// whose integer sums do not depend on the order (grid_gpu.h's format): bitwise reproducible. dL/dx sums
// each row's levels in order in one thread and is always reproducible; so are the outputs.
// No host synchronisation and no driver allocation: capturable in a graph.
#include "encodings/permuto_kernels_gpu.h"

#include <tnn/runtime.h>

#include <algorithm>

namespace tnn::permuto_gpu {

namespace {

const Launchers& launchers_for(uint32_t n_dims) {
    switch (n_dims) {
        case 1: return launchers<1>();
        case 2: return launchers<2>();
        case 3: return launchers<3>();
        case 4: return launchers<4>();
        case 5: return launchers<5>();
        case 6: return launchers<6>();
        case 7: return launchers<7>();
        case 8: return launchers<8>();
    }
    if (n_dims >= 1 && n_dims <= permuto::kMaxDims) return launchers<0>();
    throw UnsupportedError(msg("Permuto encoding (GPU): ", n_dims, " input dimensions (1 to ", permuto::kMaxDims, ")"));
}

KernelArgs make_args(const PermutoDesc& d, uint32_t n_active) {
    KernelArgs a;
    a.n_dims = d.n_dims;
    a.n_active = std::min(n_active, d.n_levels);
    a.n_features = d.n_features;
    a.mask = static_cast<uint32_t>((uint64_t(1) << d.log2_table) - 1);
    a.seed = d.seed;
    a.n_grad_dims = d.n_grad_dims;
    a.level_values = (uint64_t(1) << d.log2_table) * d.n_features;
    for (uint32_t l = 0; l < permuto::kMaxLevels; ++l) a.scales[l] = d.scales[l];
    for (uint32_t i = 0; i < permuto::kMaxDims; ++i) a.dim_factors[i] = d.dim_factors[i];
    return a;
}

void zero(const Stream& stream, void* p, size_t bytes) {
    if (bytes > 0) TNN_GPU_CHECK(gpu_memset_async(p, 0, bytes, gpu::native_stream(stream)));
}

// exponents[l] = fixed_point_exponent(bound of level l) for the levels [0, n_levels).
__global__ void permuto_fixed_point_exponent_kernel(const unsigned int* __restrict__ bound_bits, uint32_t n_levels,
                                                    int64_t rows, int* __restrict__ exponents) {
    const uint32_t l = blockIdx.x * blockDim.x + threadIdx.x;
    if (l < n_levels) exponents[l] = grid_gpu::fixed_point_exponent(__uint_as_float(bound_bits[l]), rows);
}

// dst[i] = T(s[i]) or T(dst[i] + s[i]) from the fp32 scratch (grid-stride).
template <typename T>
__global__ void permuto_gradient_from_float_kernel(const float* __restrict__ s, T* __restrict__ dst, int64_t n,
                                                   bool accumulate) {
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
        const float v = accumulate ? gpu::to_acc(dst[i]) + s[i] : s[i];
        dst[i] = gpu::from_acc<T>(v);
    }
}

// dst[i] = the fixed-point sum as a value of level i / level_values (grid-stride); overwrite or accumulate.
template <typename T>
__global__ void permuto_gradient_from_fixed_kernel(const unsigned long long* __restrict__ s,
                                                   const int* __restrict__ exponents, uint64_t level_values,
                                                   T* __restrict__ dst, int64_t n, bool accumulate) {
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
        const int e = exponents[static_cast<uint64_t>(i) / level_values];
        const float g = grid_gpu::from_fixed_point(static_cast<long long>(s[i]), e);
        dst[i] = gpu::from_acc<T>(accumulate ? gpu::to_acc(dst[i]) + g : g);
    }
}

// dL/dparams of a first-order (v == nullptr) or second-order pass, coefficients times dL/dy = g.
void param_gradient(const PermutoDesc& desc, const Call& c, const Stream& stream, const float* v, int64_t v_stride,
                    ConstView g, void* dL_dparams, GradMode mode) {
    const Launchers& L = launchers_for(desc.n_dims);
    const bool second = v != nullptr, accumulate = mode == GradMode::accumulate;
    const size_t n = desc.n_params;
    const gpu_stream_t s = c.stream;
    const bool any = c.args->n_active > 0;
    if (!(desc.deterministic || tnn::deterministic())) {
        if (desc.dtype == DType::f32) {
            // Straight into the caller's fp32 gradient; overwrite starts from zero.
            if (!accumulate) zero(stream, dL_dparams, n * sizeof(float));
            if (any) L.param_grad_float(c, desc.dtype, second, v, v_stride, g.data, g.stride, static_cast<float*>(dL_dparams));
            return;
        }
        Tensor scratch = Tensor::temporary(stream, 1, static_cast<int64_t>(n), DType::f32);
        zero(stream, scratch.data(), n * sizeof(float));
        if (any) L.param_grad_float(c, desc.dtype, second, v, v_stride, g.data, g.stride, scratch.ptr<float>());
        dispatch_gpu_storage(desc.dtype, "Permuto encoding", [&](auto t) {
            using T = decltype(t);
            permuto_gradient_from_float_kernel<T><<<gpu::elementwise_grid(static_cast<int64_t>(n)),
                                                    gpu::kElementwiseThreads, 0, s>>>(
                scratch.ptr<float>(), static_cast<T*>(dL_dparams), static_cast<int64_t>(n), accumulate);
            TNN_GPU_CHECK_LAUNCH("permuto_gradient_from_float_kernel");
        });
        return;
    }
    // Deterministic: per-level bound -> fixed-point exponent -> 64-bit integer atomics -> conversion.
    Buffer acc_buffer = Buffer::temporary(stream, n * sizeof(unsigned long long));
    Buffer level_buffer = Buffer::temporary(stream, 2 * permuto::kMaxLevels * sizeof(int));
    auto* acc = static_cast<unsigned long long*>(acc_buffer.data());
    auto* bound_bits = static_cast<unsigned int*>(level_buffer.data());
    int* exponents = reinterpret_cast<int*>(bound_bits + permuto::kMaxLevels);
    zero(stream, acc, n * sizeof(unsigned long long));
    zero(stream, level_buffer.data(), level_buffer.bytes());
    if (any) L.param_bound(c, desc.dtype, second, v, v_stride, g.data, g.stride, bound_bits);
    permuto_fixed_point_exponent_kernel<<<1, permuto::kMaxLevels, 0, s>>>(bound_bits, desc.n_levels, c.rows, exponents);
    TNN_GPU_CHECK_LAUNCH("permuto_fixed_point_exponent_kernel");
    if (any) L.param_grad_fixed(c, desc.dtype, second, v, v_stride, g.data, g.stride, acc, exponents);
    dispatch_gpu_storage(desc.dtype, "Permuto encoding", [&](auto t) {
        using T = decltype(t);
        permuto_gradient_from_fixed_kernel<T><<<gpu::elementwise_grid(static_cast<int64_t>(n)),
                                                gpu::kElementwiseThreads, 0, s>>>(
            acc, exponents, c.args->level_values, static_cast<T*>(dL_dparams), static_cast<int64_t>(n), accumulate);
        TNN_GPU_CHECK_LAUNCH("permuto_gradient_from_fixed_kernel");
    });
}

}  // namespace

void forward(const PermutoDesc& d, const Stream& stream, ConstView input, View output, const void* params,
             uint32_t n_active) {
    gpu::DeviceGuard guard(stream.device().index);
    const KernelArgs args = make_args(d, n_active);
    const Call c{&args, gpu::native_stream(stream), input.rows, input.ptr<float>(), input.stride};
    launchers_for(d.n_dims).forward(c, d.dtype, d.n_levels, params, output.data, output.stride);
}

void backward(const PermutoDesc& d, const Stream& stream, ConstView input, ConstView dL_doutput, View* dL_dinput,
              void* dL_dparams, const void* params, GradMode mode, uint32_t n_active) {
    gpu::DeviceGuard guard(stream.device().index);
    const KernelArgs args = make_args(d, n_active);
    const Call c{&args, gpu::native_stream(stream), input.rows, input.ptr<float>(), input.stride};
    if (dL_dparams) param_gradient(d, c, stream, nullptr, 0, dL_doutput, dL_dparams, mode);
    if (dL_dinput)
        launchers_for(d.n_dims).input_grad(c, d.dtype, dL_doutput.data, dL_doutput.stride, params,
                                           dL_dinput->ptr<float>(), dL_dinput->stride);
}

void backward_backward_input(const PermutoDesc& d, const Stream& stream, ConstView input, ConstView dL_ddLdinput,
                             ConstView dL_doutput, View* dL_ddLdoutput, View* dL_dinput, void* dL_dparams,
                             const void* params, GradMode mode, uint32_t n_active) {
    gpu::DeviceGuard guard(stream.device().index);
    const KernelArgs args = make_args(d, n_active);
    const Call c{&args, gpu::native_stream(stream), input.rows, input.ptr<float>(), input.stride};
    if (dL_dparams)
        param_gradient(d, c, stream, dL_ddLdinput.ptr<float>(), dL_ddLdinput.stride, dL_doutput, dL_dparams, mode);
    if (dL_ddLdoutput)
        launchers_for(d.n_dims).second_order(c, d.dtype, d.n_levels, dL_ddLdinput.ptr<float>(), dL_ddLdinput.stride,
                                             params, dL_ddLdoutput->data, dL_ddLdoutput->stride);
    // The weights are linear in x inside a simplex: the second-order pass has no x-derivative.
    if (dL_dinput) fill(stream, *dL_dinput, 0.0);
}

}  // namespace tnn::permuto_gpu
