// GPU kernels of the Permuto encoding, templated on the storage type T and the input dimension N (1..8
// compiled exactly, 0: any dimension up to permuto::kMaxDims read from the arguments), and their
// launchers. Each kernel evaluates permuto_math.h (the CPU reference's code) for one (row, level), or
// one row over all levels (input gradient). Compiled once per N in instantiations/permuto_d*.cu;
// permuto.cu picks the table for the encoding's dimension and plans the gradient reductions.
#pragma once

#include "encodings/dispatch_gpu.h"
#include "encodings/grid_gpu.h"
#include "encodings/permuto_gpu.h"
#include "gpu/gpu.h"

#include <stdint.h>

// The loops over a simplex's d + 1 vertices: unrolled fully where d is a template constant (N > 0).
// Where it is a run-time value (N = 0, 9 to 32 dimensions) clang reports a plain unroll request it
// cannot honour as a warning (an error under -Werror), so HIP asks for no unrolling there; nvcc
// unrolls what it can.
#if defined(__HIP_DEVICE_COMPILE__)
#define TNN_PERMUTO_PRAGMA(x) _Pragma(#x)
#define TNN_UNROLL_VERTICES(N) TNN_PERMUTO_PRAGMA(unroll((N) > 0 ? (N) + 1 : 1))
#else
#define TNN_UNROLL_VERTICES(N) TNN_UNROLL
#endif  // defined(__HIP_DEVICE_COMPILE__)

namespace tnn::permuto_gpu {

constexpr int kThreads = 128;

// An encoding's table as the kernels read it (one copy per launch, by value).
struct KernelArgs {
    uint32_t n_dims;       // N, or the runtime dimension when N = 0
    uint32_t n_active;     // levels [0, n_active) are on
    uint32_t n_features;   // per level, 1..8
    uint32_t mask;         // entries per level - 1 (a power of two minus one)
    uint32_t seed;         // of the levels' shifts
    uint32_t n_grad_dims;  // max_input_grad_dims
    uint64_t level_values; // values per level: (mask + 1) * n_features
    float scales[permuto::kMaxLevels];
    float dim_factors[permuto::kMaxDims];
};

// One launch: its arguments, stream and positions x [rows, n_dims] (fp32).
struct Call {
    const KernelArgs* args;
    gpu_stream_t stream;
    int64_t rows;
    const float* x;
    int64_t x_stride;
};

// Array capacity and loop bound of a kernel for N: exact (unrolled) for N > 0.
template <uint32_t N> constexpr uint32_t capacity() { return N > 0 ? N : permuto::kMaxDims; }
template <uint32_t N> __device__ __forceinline__ uint32_t dims(const KernelArgs& a) { return N > 0 ? N : a.n_dims; }

// The simplex of (row, level), its weights, the vertices' value offsets in the parameter vector and the
// level's per-dimension scales.
template <uint32_t N> struct DevicePoint {
    static constexpr uint32_t C = capacity<N>();
    float scale[C];
    permuto::Simplex<float, C> s;
    float w[C + 1];
    uint64_t value[C + 1];
};

template <uint32_t N>
__device__ __forceinline__ void locate(const KernelArgs& a, uint32_t level, const float* __restrict__ x, int64_t row,
                                       int64_t x_stride, DevicePoint<N>& p) {
    constexpr uint32_t C = capacity<N>();
    const uint32_t n = dims<N>(a);
    float shift[C], xr[C];
    permuto::level_shifts(a.seed, level, n, shift);
    for (uint32_t i = 0; i < n; ++i) {
        p.scale[i] = a.scales[level] * a.dim_factors[i];  // as permuto_levels computes it on the host
        xr[i] = x[row * x_stride + i];
    }
    permuto::locate(n, xr, shift, p.scale, p.s);
    permuto::barycentric(n, p.s.rest, p.s.rank, 1.0f, p.w);
    const uint64_t base = static_cast<uint64_t>(level) * a.level_values;
    TNN_UNROLL_VERTICES(N)
    for (uint32_t k = 0; k <= n; ++k)
        p.value[k] = base + static_cast<uint64_t>(permuto::vertex_entry(n, p.s.rem0, p.s.rank, k, a.mask)) * a.n_features;
}

// The weights' tangent along the row's v (the second-order pass's dL'/d(dL/dx)).
template <uint32_t N>
__device__ __forceinline__ void tangent(const KernelArgs& a, const DevicePoint<N>& p, const float* __restrict__ v,
                                        int64_t row, int64_t v_stride, float* E) {
    float vr[capacity<N>()];
    const uint32_t n = dims<N>(a);
    for (uint32_t i = 0; i < n; ++i) vr[i] = v[row * v_stride + i];
    permuto::weight_tangent(n, a.n_grad_dims, p.s, vr, p.scale, E);
}

// ---- forward: y_{l,f} = sum_k w_k V_k[f], a thread per (row, level) -------------------------------------

template <typename T, uint32_t N>
__global__ void __launch_bounds__(kThreads)
    permuto_forward_kernel(const KernelArgs a, int64_t rows, const float* __restrict__ x, int64_t x_stride,
                           const T* __restrict__ params, T* __restrict__ y, int64_t y_stride) {
    const int64_t row = int64_t(blockIdx.x) * kThreads + threadIdx.x;
    const uint32_t level = blockIdx.y, F = a.n_features;
    if (row >= rows) return;
    float acc[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
    if (level < a.n_active) {
        DevicePoint<N> p;
        locate<N>(a, level, x, row, x_stride, p);
        TNN_UNROLL_VERTICES(N)
        for (uint32_t k = 0; k <= dims<N>(a); ++k)
            TNN_UNROLL
            for (uint32_t f = 0; f < 8; ++f)
                if (f < F) acc[f] = fmaf(p.w[k], gpu::to_acc(params[p.value[k] + f]), acc[f]);  // vertex order, as tcnn
    }
    T* out = y + row * y_stride + level * F;
    TNN_UNROLL
    for (uint32_t f = 0; f < 8; ++f)
        if (f < F) out[f] = gpu::from_acc<T>(acc[f]);
}

// ---- dL/dx: a thread per row over the levels (no atomics: each row's sum in level order) ----------------

template <typename T, uint32_t N>
__global__ void __launch_bounds__(kThreads)
    permuto_input_grad_kernel(const KernelArgs a, int64_t rows, const float* __restrict__ x, int64_t x_stride,
                              const T* __restrict__ g, int64_t g_stride, const T* __restrict__ params,
                              float* __restrict__ dx, int64_t dx_stride) {
    constexpr uint32_t C = capacity<N>();
    const int64_t row = int64_t(blockIdx.x) * kThreads + threadIdx.x;
    if (row >= rows) return;
    const uint32_t n = dims<N>(a), F = a.n_features;
    float sum[C], part[C], G[C + 1];
    for (uint32_t i = 0; i < n; ++i) sum[i] = 0.0f;
    for (uint32_t level = 0; level < a.n_active; ++level) {
        DevicePoint<N> p;
        locate<N>(a, level, x, row, x_stride, p);
        float gl[8];
        TNN_UNROLL
        for (uint32_t f = 0; f < 8; ++f) gl[f] = f < F ? gpu::to_acc(g[row * g_stride + level * F + f]) : 0.0f;
        // G_k = sum_f g_f (V_k[f] - V_0[f]) (grid::value_step: see permuto.cpp).
        TNN_UNROLL_VERTICES(N)
        for (uint32_t k = 0; k <= n; ++k) {
            float gv = 0.0f;
            TNN_UNROLL
            for (uint32_t f = 0; f < 8; ++f)
                if (f < F)
                    gv += gl[f] * grid::value_step(gpu::to_acc(params[p.value[k] + f]), gpu::to_acc(params[p.value[0] + f]));
            G[k] = gv;
        }
        permuto::input_gradient(n, a.n_grad_dims, p.s, G, p.scale, part);
        for (uint32_t i = 0; i < n; ++i) sum[i] += part[i];
    }
    for (uint32_t i = 0; i < n; ++i) dx[row * dx_stride + i] = sum[i];
}

// ---- parameter gradients, a thread per (row, level) -------------------------------------------------------
// Vertex k of (row, level) receives coef_k g_{l,f}: coef = w (first order) or the weight tangent E along v
// (second order). Sinks: fp32 atomics (fast), or 64-bit fixed point whose sum is order-independent
// (deterministic; grid_gpu.h's format, exponent per level).

struct FloatSink {
    float* acc;
    __device__ __forceinline__ void add(uint32_t, uint64_t i, float c) const { atomicAdd(acc + i, c); }
};

struct FixedSink {
    unsigned long long* acc;
    const int* exponents;
    __device__ __forceinline__ void add(uint32_t level, uint64_t i, float c) const {
        const int e = exponents[level];
        if (e == grid_gpu::kNonFiniteExponent) return;  // the conversion writes NaN for the level
        atomicAdd(acc + i, static_cast<unsigned long long>(grid_gpu::to_fixed_point(c, e)));
    }
};

// The row's coefficients and upstream gradient at a level; false when the level is off.
template <typename T, uint32_t N, bool SECOND>
__device__ __forceinline__ bool contributions(const KernelArgs& a, uint32_t level, int64_t row, const float* __restrict__ x,
                                              int64_t x_stride, const float* __restrict__ v, int64_t v_stride,
                                              const T* __restrict__ g, int64_t g_stride, DevicePoint<N>& p, float* coef,
                                              float* gl) {
    if (level >= a.n_active) return false;
    locate<N>(a, level, x, row, x_stride, p);
    const uint32_t n = dims<N>(a), F = a.n_features;
    if (SECOND) {
        tangent<N>(a, p, v, row, v_stride, coef);
    } else {
        TNN_UNROLL_VERTICES(N)
        for (uint32_t k = 0; k <= n; ++k) coef[k] = p.w[k];
    }
    TNN_UNROLL
    for (uint32_t f = 0; f < 8; ++f) gl[f] = f < F ? gpu::to_acc(g[row * g_stride + level * F + f]) : 0.0f;
    return true;
}

template <typename T, uint32_t N, bool SECOND, typename SINK>
__global__ void __launch_bounds__(kThreads)
    permuto_param_grad_kernel(const KernelArgs a, int64_t rows, const float* __restrict__ x, int64_t x_stride,
                              const float* __restrict__ v, int64_t v_stride, const T* __restrict__ g, int64_t g_stride,
                              const SINK sink) {
    constexpr uint32_t C = capacity<N>();
    const int64_t row = int64_t(blockIdx.x) * kThreads + threadIdx.x;
    const uint32_t level = blockIdx.y, F = a.n_features;
    if (row >= rows) return;
    DevicePoint<N> p;
    float coef[C + 1], gl[8];
    if (!contributions<T, N, SECOND>(a, level, row, x, x_stride, v, v_stride, g, g_stride, p, coef, gl)) return;
    TNN_UNROLL_VERTICES(N)
    for (uint32_t k = 0; k <= dims<N>(a); ++k)
        TNN_UNROLL
        for (uint32_t f = 0; f < 8; ++f)
            if (f < F) sink.add(level, p.value[k] + f, coef[k] * gl[f]);
}

// The deterministic path's per-level bound: the largest per-row sum over vertices and features of
// |coef_k g_f| (an entry gets at most that from one row), as fp32 bits (non-negative: ordered as
// unsigned integers; NaN above inf) maximised with integer atomics.
template <typename T, uint32_t N, bool SECOND>
__global__ void __launch_bounds__(kThreads)
    permuto_param_bound_kernel(const KernelArgs a, int64_t rows, const float* __restrict__ x, int64_t x_stride,
                               const float* __restrict__ v, int64_t v_stride, const T* __restrict__ g, int64_t g_stride,
                               unsigned int* __restrict__ bound_bits) {
    constexpr uint32_t C = capacity<N>();
    const int64_t row = int64_t(blockIdx.x) * kThreads + threadIdx.x;
    const uint32_t level = blockIdx.y, F = a.n_features;
    if (row >= rows) return;
    DevicePoint<N> p;
    float coef[C + 1], gl[8];
    if (!contributions<T, N, SECOND>(a, level, row, x, x_stride, v, v_stride, g, g_stride, p, coef, gl)) return;
    float gsum = 0.0f, csum = 0.0f;
    TNN_UNROLL
    for (uint32_t f = 0; f < 8; ++f)
        if (f < F) gsum += fabsf(gl[f]);
    TNN_UNROLL_VERTICES(N)
    for (uint32_t k = 0; k <= dims<N>(a); ++k) csum += fabsf(coef[k]);
    atomicMax(bound_bits + level, __float_as_uint(csum * gsum) & 0x7FFFFFFFu);
}

// ---- second order: dL'/d(dL/dy)_{l,f} = sum_k E_k V_k[f], a thread per (row, level) ---------------------

template <typename T, uint32_t N>
__global__ void __launch_bounds__(kThreads)
    permuto_second_order_kernel(const KernelArgs a, int64_t rows, const float* __restrict__ x, int64_t x_stride,
                                const float* __restrict__ v, int64_t v_stride, const T* __restrict__ params,
                                T* __restrict__ out, int64_t out_stride) {
    constexpr uint32_t C = capacity<N>();
    const int64_t row = int64_t(blockIdx.x) * kThreads + threadIdx.x;
    const uint32_t level = blockIdx.y, F = a.n_features;
    if (row >= rows) return;
    float acc[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
    if (level < a.n_active) {
        DevicePoint<N> p;
        float E[C + 1];
        locate<N>(a, level, x, row, x_stride, p);
        tangent<N>(a, p, v, row, v_stride, E);
        TNN_UNROLL_VERTICES(N)
        for (uint32_t k = 0; k <= dims<N>(a); ++k)
            TNN_UNROLL
            for (uint32_t f = 0; f < 8; ++f)
                if (f < F)
                    acc[f] += E[k] * grid::value_step(gpu::to_acc(params[p.value[k] + f]), gpu::to_acc(params[p.value[0] + f]));
    }
    T* o = out + row * out_stride + level * F;
    TNN_UNROLL
    for (uint32_t f = 0; f < 8; ++f)
        if (f < F) o[f] = gpu::from_acc<T>(acc[f]);
}

// ---- launchers ----------------------------------------------------------------------------------------

struct Launchers {
    void (*forward)(const Call&, DType, uint32_t n_levels, const void* params, void* y, int64_t y_stride);
    void (*input_grad)(const Call&, DType, const void* g, int64_t g_stride, const void* params, float* dx,
                       int64_t dx_stride);
    void (*param_grad_float)(const Call&, DType, bool second, const float* v, int64_t v_stride, const void* g,
                             int64_t g_stride, float* acc);
    void (*param_grad_fixed)(const Call&, DType, bool second, const float* v, int64_t v_stride, const void* g,
                             int64_t g_stride, unsigned long long* acc, const int* exponents);
    void (*param_bound)(const Call&, DType, bool second, const float* v, int64_t v_stride, const void* g,
                        int64_t g_stride, unsigned int* bound_bits);
    void (*second_order)(const Call&, DType, uint32_t n_levels, const float* v, int64_t v_stride, const void* params,
                         void* out, int64_t out_stride);
};

// Defined per N in instantiations/permuto_d*.cu (N = 0: any dimension).
template <uint32_t N> const Launchers& launchers();

inline dim3 level_grid(int64_t rows, uint32_t n_levels) {
    return dim3(static_cast<unsigned>(gpu::ceil_div<int64_t>(rows, kThreads)), n_levels);
}

template <uint32_t N> Launchers make_launchers() {
    Launchers L;
    L.forward = [](const Call& c, DType dt, uint32_t n_levels, const void* params, void* y, int64_t y_stride) {
        dispatch_gpu_storage(dt, "Permuto encoding", [&](auto t) {
            using T = decltype(t);
            permuto_forward_kernel<T, N><<<level_grid(c.rows, n_levels), kThreads, 0, c.stream>>>(
                *c.args, c.rows, c.x, c.x_stride, static_cast<const T*>(params), static_cast<T*>(y), y_stride);
            TNN_GPU_CHECK_LAUNCH("permuto_forward_kernel");
        });
    };
    L.input_grad = [](const Call& c, DType dt, const void* g, int64_t g_stride, const void* params, float* dx,
                      int64_t dx_stride) {
        dispatch_gpu_storage(dt, "Permuto encoding", [&](auto t) {
            using T = decltype(t);
            permuto_input_grad_kernel<T, N><<<level_grid(c.rows, 1), kThreads, 0, c.stream>>>(
                *c.args, c.rows, c.x, c.x_stride, static_cast<const T*>(g), g_stride, static_cast<const T*>(params), dx,
                dx_stride);
            TNN_GPU_CHECK_LAUNCH("permuto_input_grad_kernel");
        });
    };
    L.param_grad_float = [](const Call& c, DType dt, bool second, const float* v, int64_t v_stride, const void* g,
                            int64_t g_stride, float* acc) {
        dispatch_gpu_storage(dt, "Permuto encoding", [&](auto t) {
            using T = decltype(t);
            dispatch_bool(second, [&](auto s) {
                permuto_param_grad_kernel<T, N, decltype(s)::value, FloatSink>
                    <<<level_grid(c.rows, c.args->n_active), kThreads, 0, c.stream>>>(
                        *c.args, c.rows, c.x, c.x_stride, v, v_stride, static_cast<const T*>(g), g_stride, FloatSink{acc});
                TNN_GPU_CHECK_LAUNCH("permuto_param_grad_kernel");
            });
        });
    };
    L.param_grad_fixed = [](const Call& c, DType dt, bool second, const float* v, int64_t v_stride, const void* g,
                            int64_t g_stride, unsigned long long* acc, const int* exponents) {
        dispatch_gpu_storage(dt, "Permuto encoding", [&](auto t) {
            using T = decltype(t);
            dispatch_bool(second, [&](auto s) {
                permuto_param_grad_kernel<T, N, decltype(s)::value, FixedSink>
                    <<<level_grid(c.rows, c.args->n_active), kThreads, 0, c.stream>>>(
                        *c.args, c.rows, c.x, c.x_stride, v, v_stride, static_cast<const T*>(g), g_stride,
                        FixedSink{acc, exponents});
                TNN_GPU_CHECK_LAUNCH("permuto_param_grad_kernel");
            });
        });
    };
    L.param_bound = [](const Call& c, DType dt, bool second, const float* v, int64_t v_stride, const void* g,
                       int64_t g_stride, unsigned int* bound_bits) {
        dispatch_gpu_storage(dt, "Permuto encoding", [&](auto t) {
            using T = decltype(t);
            dispatch_bool(second, [&](auto s) {
                permuto_param_bound_kernel<T, N, decltype(s)::value>
                    <<<level_grid(c.rows, c.args->n_active), kThreads, 0, c.stream>>>(
                        *c.args, c.rows, c.x, c.x_stride, v, v_stride, static_cast<const T*>(g), g_stride, bound_bits);
                TNN_GPU_CHECK_LAUNCH("permuto_param_bound_kernel");
            });
        });
    };
    L.second_order = [](const Call& c, DType dt, uint32_t n_levels, const float* v, int64_t v_stride,
                        const void* params, void* out, int64_t out_stride) {
        dispatch_gpu_storage(dt, "Permuto encoding", [&](auto t) {
            using T = decltype(t);
            permuto_second_order_kernel<T, N><<<level_grid(c.rows, n_levels), kThreads, 0, c.stream>>>(
                *c.args, c.rows, c.x, c.x_stride, v, v_stride, static_cast<const T*>(params), static_cast<T*>(out),
                out_stride);
            TNN_GPU_CHECK_LAUNCH("permuto_second_order_kernel");
        });
    };
    return L;
}

}  // namespace tnn::permuto_gpu
