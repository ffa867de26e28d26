// GPU kernels of the per-dimension encodings (Identity, Frequency, TriangleWave, OneBlob): every
// output lane is a function of one input value, so outputs are computed one thread per element
// (coalesced writes) and input gradients one thread per (row, dimension), summing the lanes in the
// CPU reference's order. The lane maths is encoding_math.h's, shared with per_dim_encoding.h.
#include "encodings/dispatch_gpu.h"
#include "encodings/encoding_math.h"
#include "encodings/encodings_gpu.h"

namespace tnn {

namespace {

using gpu::from_acc;
using gpu::to_acc;
using Kind = PerDimLanesGpu::Kind;

// Lane j of one input value (null outputs are skipped). Identity rounds the product before adding
// (no fma), as the CPU reference does.
__device__ __forceinline__ void eval_lane(const PerDimLanesGpu& L, float x, uint32_t j, float* f, float* df,
                                          float* d2f) {
    switch (L.kind) {
        case Kind::Identity:
            if (f) *f = __fadd_rn(__fmul_rn(L.scale, x), L.offset);
            if (df) *df = L.scale;
            if (d2f) *d2f = 0.0f;
            return;
        case Kind::Frequency: frequency_lane(x, j, f, df, d2f); return;
        case Kind::TriangleWave: triangle_wave_lane(x, j, f, df, d2f); return;
        case Kind::OneBlob: oneblob_bin(x, j, L.log2_bins, f, df, d2f); return;
    }
}

// y[r, d * W + j] = f_j(x[r, d]), one thread per output element.
template <typename T>
__global__ void per_dim_forward_kernel(const PerDimLanesGpu L, int64_t rows, uint32_t n_dims, const float* __restrict__ x,
                                       int64_t x_stride, T* __restrict__ y, int64_t y_stride) {
    const int64_t cols = int64_t(n_dims) * L.width, n = rows * cols;
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
        const int64_t r = i / cols, c = i - r * cols;
        const uint32_t d = static_cast<uint32_t>(c / L.width), j = static_cast<uint32_t>(c - int64_t(d) * L.width);
        float f;
        eval_lane(L, x[r * x_stride + d], j, &f, nullptr, nullptr);
        y[r * y_stride + c] = from_acc<T>(f);
    }
}

// One thread per (row, dimension): dL/dx = sum_j g_j f_j'(x) (grad) and/or v sum_j g_j f_j''(x) (second).
template <typename T, bool SECOND>
__global__ void per_dim_input_grad_kernel(const PerDimLanesGpu L, int64_t rows, uint32_t n_dims,
                                          const float* __restrict__ x, int64_t x_stride, const float* __restrict__ v,
                                          int64_t v_stride, const T* __restrict__ g, int64_t g_stride,
                                          float* __restrict__ dx, int64_t dx_stride) {
    const int64_t n = rows * n_dims;
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
        const int64_t r = i / n_dims;
        const uint32_t d = static_cast<uint32_t>(i - r * n_dims);
        const float xv = x[r * x_stride + d];
        float s = 0.0f;
        for (uint32_t j = 0; j < L.width; ++j) {
            float deriv;
            eval_lane(L, xv, j, nullptr, SECOND ? nullptr : &deriv, SECOND ? &deriv : nullptr);
            s += to_acc(g[r * g_stride + int64_t(d) * L.width + j]) * deriv;
        }
        dx[r * dx_stride + d] = SECOND ? v[r * v_stride + d] * s : s;
    }
}

// dL'/d(dL/dy)[r, d * W + j] = v[r, d] f_j'(x[r, d]), one thread per element.
template <typename T>
__global__ void per_dim_second_order_output_kernel(const PerDimLanesGpu L, int64_t rows, uint32_t n_dims,
                                                   const float* __restrict__ x, int64_t x_stride,
                                                   const float* __restrict__ v, int64_t v_stride, T* __restrict__ out,
                                                   int64_t out_stride) {
    const int64_t cols = int64_t(n_dims) * L.width, n = rows * cols;
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
        const int64_t r = i / cols, c = i - r * cols;
        const uint32_t d = static_cast<uint32_t>(c / L.width), j = static_cast<uint32_t>(c - int64_t(d) * L.width);
        float df;
        eval_lane(L, x[r * x_stride + d], j, nullptr, &df, nullptr);
        out[r * out_stride + c] = from_acc<T>(v[r * v_stride + d] * df);
    }
}

constexpr const char* kWho = "per-dimension encoding";

}  // namespace

namespace per_dim_gpu {

void forward(const PerDimLanesGpu& lanes, const Stream& stream, ConstView input, View output) {
    if (output.cols == 0) return;
    gpu::DeviceGuard guard(stream.device().index);
    dispatch_gpu_storage(output.dtype, kWho, [&](auto t) {
        using T = decltype(t);
        per_dim_forward_kernel<T><<<gpu::elementwise_grid(output.numel()), gpu::kElementwiseThreads, 0,
                                    gpu::native_stream(stream)>>>(lanes, input.rows, static_cast<uint32_t>(input.cols),
                                                                  input.ptr<float>(), input.stride, output.ptr<T>(),
                                                                  output.stride);
        TNN_GPU_CHECK_LAUNCH("per_dim_forward_kernel");
    });
}

void backward(const PerDimLanesGpu& lanes, const Stream& stream, ConstView input, ConstView dL_doutput,
              View dL_dinput) {
    gpu::DeviceGuard guard(stream.device().index);
    dispatch_gpu_storage(dL_doutput.dtype, kWho, [&](auto t) {
        using T = decltype(t);
        per_dim_input_grad_kernel<T, false><<<gpu::elementwise_grid(input.numel()), gpu::kElementwiseThreads, 0,
                                              gpu::native_stream(stream)>>>(
            lanes, input.rows, static_cast<uint32_t>(input.cols), input.ptr<float>(), input.stride, nullptr, 0,
            dL_doutput.ptr<T>(), dL_doutput.stride, dL_dinput.ptr<float>(), dL_dinput.stride);
        TNN_GPU_CHECK_LAUNCH("per_dim_input_grad_kernel");
    });
}

void backward_backward_input(const PerDimLanesGpu& lanes, const Stream& stream, ConstView input, ConstView dL_ddLdinput,
                             ConstView dL_doutput, View* dL_ddLdoutput, View* dL_dinput) {
    gpu::DeviceGuard guard(stream.device().index);
    const gpu_stream_t s = gpu::native_stream(stream);
    dispatch_gpu_storage(dL_doutput.dtype, kWho, [&](auto t) {
        using T = decltype(t);
        if (dL_ddLdoutput && dL_ddLdoutput->cols > 0) {
            per_dim_second_order_output_kernel<T><<<gpu::elementwise_grid(dL_ddLdoutput->numel()),
                                                    gpu::kElementwiseThreads, 0, s>>>(
                lanes, input.rows, static_cast<uint32_t>(input.cols), input.ptr<float>(), input.stride,
                dL_ddLdinput.ptr<float>(), dL_ddLdinput.stride, dL_ddLdoutput->ptr<T>(), dL_ddLdoutput->stride);
            TNN_GPU_CHECK_LAUNCH("per_dim_second_order_output_kernel");
        }
        if (dL_dinput) {
            per_dim_input_grad_kernel<T, true><<<gpu::elementwise_grid(input.numel()), gpu::kElementwiseThreads, 0, s>>>(
                lanes, input.rows, static_cast<uint32_t>(input.cols), input.ptr<float>(), input.stride,
                dL_ddLdinput.ptr<float>(), dL_ddLdinput.stride, dL_doutput.ptr<T>(), dL_doutput.stride,
                dL_dinput->ptr<float>(), dL_dinput->stride);
            TNN_GPU_CHECK_LAUNCH("per_dim_input_grad_kernel");
        }
    });
}

}  // namespace per_dim_gpu

}  // namespace tnn
