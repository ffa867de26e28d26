// GPU kernels of the SphericalHarmonics encoding: one thread per row evaluates sh_math.h's basis (the
// CPU reference's code) for its direction 2u - 1, templated on the degree so that the recurrences
// unroll; outputs, input gradients and the second-order pass as in spherical_harmonics.cpp.
#include "encodings/dispatch_gpu.h"
#include "encodings/encodings_gpu.h"
#include "encodings/sh_math.h"

#include <type_traits>

namespace tnn {

namespace {

using gpu::from_acc;
using gpu::to_acc;

constexpr int kThreads = 128;

__device__ __forceinline__ void direction(const float* __restrict__ x, int64_t row, int64_t stride, float* p) {
    for (int i = 0; i < 3; ++i) p[i] = x[row * stride + i] * 2.0f - 1.0f;
}

template <typename T, uint32_t DEGREE>
__global__ void __launch_bounds__(kThreads)
    spherical_harmonics_forward_kernel(int64_t rows, const float* __restrict__ x, int64_t x_stride, T* __restrict__ y,
                                       int64_t y_stride) {
    const int64_t row = int64_t(blockIdx.x) * kThreads + threadIdx.x;
    if (row >= rows) return;
    constexpr uint32_t n = DEGREE * DEGREE;
    float p[3], out[n];
    direction(x, row, x_stride, p);
    sh_basis(DEGREE, p[0], p[1], p[2], out);
    for (uint32_t k = 0; k < n; ++k) y[row * y_stride + k] = from_acc<T>(out[k]);
}

// dL/du_i = 2 sum_k g_k dY_k/dx_i
template <typename T, uint32_t DEGREE>
__global__ void __launch_bounds__(kThreads)
    spherical_harmonics_backward_kernel(int64_t rows, const float* __restrict__ x, int64_t x_stride,
                                        const T* __restrict__ g, int64_t g_stride, float* __restrict__ dx,
                                        int64_t dx_stride) {
    const int64_t row = int64_t(blockIdx.x) * kThreads + threadIdx.x;
    if (row >= rows) return;
    constexpr uint32_t n = DEGREE * DEGREE;
    float p[3], out[n], grad[3 * n];
    direction(x, row, x_stride, p);
    sh_basis(DEGREE, p[0], p[1], p[2], out, grad);
    for (uint32_t i = 0; i < 3; ++i) {
        float s = 0.0f;
        for (uint32_t k = 0; k < n; ++k) s += to_acc(g[row * g_stride + k]) * grad[i * n + k];
        dx[row * dx_stride + i] = 2.0f * s;
    }
}

// With v = dL'/d(dL/du): dL'/dg_k = 2 sum_i v_i dY_k/dx_i; dL'/du_h = 4 sum_k g_k sum_i v_i d2Y_k/(dx_i dx_h).
template <typename T, uint32_t DEGREE>
__global__ void __launch_bounds__(kThreads)
    spherical_harmonics_second_order_kernel(int64_t rows, const float* __restrict__ x, int64_t x_stride,
                                            const float* __restrict__ v, int64_t v_stride, const T* __restrict__ g,
                                            int64_t g_stride, T* __restrict__ dgrad, int64_t dgrad_stride,
                                            float* __restrict__ dx, int64_t dx_stride) {
    const int64_t row = int64_t(blockIdx.x) * kThreads + threadIdx.x;
    if (row >= rows) return;
    constexpr uint32_t n = DEGREE * DEGREE;
    // Hessian slot of (i, h) in sh_basis's [xx, yy, zz, xy, xz, yz] layout.
    constexpr uint32_t kSlot[3][3] = {{0, 3, 4}, {3, 1, 5}, {4, 5, 2}};
    float p[3], vv[3], out[n], grad[3 * n], hess[6 * n];
    direction(x, row, x_stride, p);
    for (int i = 0; i < 3; ++i) vv[i] = v[row * v_stride + i];
    sh_basis(DEGREE, p[0], p[1], p[2], out, grad, dx ? hess : nullptr);
    if (dgrad)
        for (uint32_t k = 0; k < n; ++k)
            dgrad[row * dgrad_stride + k] =
                from_acc<T>(2.0f * (vv[0] * grad[k] + vv[1] * grad[n + k] + vv[2] * grad[2 * n + k]));
    if (dx)
        for (uint32_t h = 0; h < 3; ++h) {
            float s = 0.0f;
            for (uint32_t k = 0; k < n; ++k) {
                float hv = 0.0f;
                for (uint32_t i = 0; i < 3; ++i) hv += vv[i] * hess[kSlot[i][h] * n + k];
                s += to_acc(g[row * g_stride + k]) * hv;
            }
            dx[row * dx_stride + h] = 4.0f * s;
        }
}

// The one place where the degree and the storage type become template parameters.
template <typename FN> void dispatch(uint32_t degree, DType dtype, FN&& f) {
    dispatch_gpu_storage(dtype, "SphericalHarmonics", [&](auto t) {
        switch (degree) {
            case 1: f(t, std::integral_constant<uint32_t, 1>{}); return;
            case 2: f(t, std::integral_constant<uint32_t, 2>{}); return;
            case 3: f(t, std::integral_constant<uint32_t, 3>{}); return;
            case 4: f(t, std::integral_constant<uint32_t, 4>{}); return;
            case 5: f(t, std::integral_constant<uint32_t, 5>{}); return;
            case 6: f(t, std::integral_constant<uint32_t, 6>{}); return;
            case 7: f(t, std::integral_constant<uint32_t, 7>{}); return;
            case 8: f(t, std::integral_constant<uint32_t, 8>{}); return;
        }
        throw UnsupportedError(msg("SphericalHarmonics (GPU): degree ", degree, " (1 to ", kShMaxDegree, ")"));
    });
}

dim3 row_grid(int64_t rows) { return dim3(static_cast<unsigned>(gpu::ceil_div<int64_t>(rows, kThreads))); }

}  // namespace

namespace spherical_harmonics_gpu {

void forward(uint32_t degree, const Stream& stream, ConstView input, View output) {
    gpu::DeviceGuard guard(stream.device().index);
    dispatch(degree, output.dtype, [&](auto t, auto d) {
        using T = decltype(t);
        spherical_harmonics_forward_kernel<T, decltype(d)::value><<<row_grid(input.rows), kThreads, 0,
                                                                    gpu::native_stream(stream)>>>(
            input.rows, input.ptr<float>(), input.stride, output.ptr<T>(), output.stride);
        TNN_GPU_CHECK_LAUNCH("spherical_harmonics_forward_kernel");
    });
}

void backward(uint32_t degree, const Stream& stream, ConstView input, ConstView dL_doutput, View dL_dinput) {
    gpu::DeviceGuard guard(stream.device().index);
    dispatch(degree, dL_doutput.dtype, [&](auto t, auto d) {
        using T = decltype(t);
        spherical_harmonics_backward_kernel<T, decltype(d)::value><<<row_grid(input.rows), kThreads, 0,
                                                                     gpu::native_stream(stream)>>>(
            input.rows, input.ptr<float>(), input.stride, dL_doutput.ptr<T>(), dL_doutput.stride,
            dL_dinput.ptr<float>(), dL_dinput.stride);
        TNN_GPU_CHECK_LAUNCH("spherical_harmonics_backward_kernel");
    });
}

void backward_backward_input(uint32_t degree, const Stream& stream, ConstView input, ConstView dL_ddLdinput,
                             ConstView dL_doutput, View* dL_ddLdoutput, View* dL_dinput) {
    gpu::DeviceGuard guard(stream.device().index);
    dispatch(degree, dL_doutput.dtype, [&](auto t, auto d) {
        using T = decltype(t);
        spherical_harmonics_second_order_kernel<T, decltype(d)::value><<<row_grid(input.rows), kThreads, 0,
                                                                         gpu::native_stream(stream)>>>(
            input.rows, input.ptr<float>(), input.stride, dL_ddLdinput.ptr<float>(), dL_ddLdinput.stride,
            dL_doutput.ptr<T>(), dL_doutput.stride, dL_ddLdoutput ? dL_ddLdoutput->ptr<T>() : nullptr,
            dL_ddLdoutput ? dL_ddLdoutput->stride : 0, dL_dinput ? dL_dinput->ptr<float>() : nullptr,
            dL_dinput ? dL_dinput->stride : 0);
        TNN_GPU_CHECK_LAUNCH("spherical_harmonics_second_order_kernel");
    });
}

}  // namespace spherical_harmonics_gpu

}  // namespace tnn
