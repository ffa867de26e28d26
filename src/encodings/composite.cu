// The elementwise GPU parts of the Composite encoding: Sum / Product reductions of the nested outputs
// and the products their gradients and second-order passes need (composite.cpp's CPU loops, in the
// same order). One kernel, one thread per output element; the nested outputs arrive as padded lane
// views in the kernel arguments (at most kMaxNested of them).
#include "encodings/dispatch_gpu.h"
#include "encodings/encodings_gpu.h"

namespace tnn {

namespace {

using composite_gpu::kMaxNested;
using composite_gpu::Lanes;
using gpu::from_acc;
using gpu::to_acc;

enum class Combine : uint32_t { Sum, Product, ProductGradient, SecondOrderSum, SecondOrderProduct, ProductSecondOrder };

template <typename T> struct LaneArgs {
    const T* data[kMaxNested];
    int64_t stride[kMaxNested];
    uint32_t width[kMaxNested];
    float pad[kMaxNested];
    uint32_t count;

    __device__ __forceinline__ float at(uint32_t i, int64_t r, int64_t k) const {
        return k < width[i] ? to_acc(data[i][r * stride[i] + k]) : pad[i];
    }
};

// The product of the lanes other than i and l at (r, k), in nested order (composite.cpp's `others`).
template <typename T>
__device__ __forceinline__ float others(const LaneArgs<T>& y, int64_t r, int64_t k, uint32_t i, uint32_t l) {
    float p = 1.0f;
    for (uint32_t m = 0; m < y.count; ++m)
        if (m != i && m != l) p *= y.at(m, r, k);
    return p;
}

// out[r, k] for k < cols by `mode` (see composite_gpu in encodings_gpu.h): y are the nested outputs,
// w the second-order weights, g the output gradient, skip the left-out nested encoding.
template <typename T>
__global__ void composite_combine_kernel(Combine mode, const LaneArgs<T> y, const LaneArgs<T> w,
                                         const T* __restrict__ g, int64_t g_stride, uint32_t skip, int64_t rows,
                                         int64_t cols, T* __restrict__ out, int64_t out_stride) {
    const int64_t n = rows * cols;
    for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < n; e += int64_t(gridDim.x) * blockDim.x) {
        const int64_t r = e / cols, k = e - r * cols;
        float v = 0.0f;
        switch (mode) {
            case Combine::Sum:
                for (uint32_t i = 0; i < y.count; ++i) v = v + y.at(i, r, k);
                break;
            case Combine::Product:
                v = 1.0f;
                for (uint32_t i = 0; i < y.count; ++i) v = v * y.at(i, r, k);
                break;
            case Combine::ProductGradient:
                v = to_acc(g[r * g_stride + k]);
                for (uint32_t m = 0; m < y.count; ++m)
                    if (m != skip) v *= y.at(m, r, k);
                break;
            case Combine::SecondOrderSum:
                for (uint32_t i = 0; i < w.count; ++i) v += w.at(i, r, k);
                break;
            case Combine::SecondOrderProduct:
                for (uint32_t i = 0; i < w.count; ++i) v += w.at(i, r, k) * others(y, r, k, i, i);
                break;
            case Combine::ProductSecondOrder:
                for (uint32_t i = 0; i < w.count; ++i)
                    if (i != skip) v += w.at(i, r, k) * others(y, r, k, i, skip);
                v = to_acc(g[r * g_stride + k]) * v;
                break;
        }
        out[r * out_stride + k] = from_acc<T>(v);
    }
}

template <typename T> LaneArgs<T> lane_args(const std::vector<Lanes>& lanes) {
    if (lanes.size() > kMaxNested)
        throw UnsupportedError(msg("Composite encoding (GPU): a Sum or Product of more than ", kMaxNested,
                                   " nested encodings is not supported, got ", lanes.size()));
    LaneArgs<T> a{};
    a.count = static_cast<uint32_t>(lanes.size());
    for (size_t i = 0; i < lanes.size(); ++i) {
        a.data[i] = static_cast<const T*>(lanes[i].data);
        a.stride[i] = lanes[i].stride;
        a.width[i] = lanes[i].width;
        a.pad[i] = lanes[i].pad;
    }
    return a;
}

void combine(const Stream& stream, Combine mode, const std::vector<Lanes>& y, const std::vector<Lanes>& w,
             const ConstView* g, size_t skip, View out) {
    if (out.rows == 0 || out.cols == 0) return;
    gpu::DeviceGuard guard(stream.device().index);
    dispatch_gpu_storage(out.dtype, "Composite encoding", [&](auto t) {
        using T = decltype(t);
        composite_combine_kernel<T><<<gpu::elementwise_grid(out.numel()), gpu::kElementwiseThreads, 0,
                                      gpu::native_stream(stream)>>>(
            mode, lane_args<T>(y), lane_args<T>(w), g ? g->ptr<T>() : nullptr, g ? g->stride : 0,
            static_cast<uint32_t>(skip), out.rows, out.cols, out.ptr<T>(), out.stride);
        TNN_GPU_CHECK_LAUNCH("composite_combine_kernel");
    });
}

}  // namespace

namespace composite_gpu {

void reduce(const Stream& stream, bool product, const std::vector<Lanes>& lanes, View out) {
    combine(stream, product ? Combine::Product : Combine::Sum, lanes, {}, nullptr, 0, out);
}

void product_gradient(const Stream& stream, const std::vector<Lanes>& lanes, size_t skip, ConstView g, View dst) {
    combine(stream, Combine::ProductGradient, lanes, {}, &g, skip, dst);
}

void second_order_output(const Stream& stream, bool product, const std::vector<Lanes>& lanes,
                         const std::vector<Lanes>& w, View out) {
    combine(stream, product ? Combine::SecondOrderProduct : Combine::SecondOrderSum, lanes, w, nullptr, 0, out);
}

void product_second_order(const Stream& stream, const std::vector<Lanes>& lanes, const std::vector<Lanes>& w, size_t l,
                          ConstView g, View u) {
    combine(stream, Combine::ProductSecondOrder, lanes, w, &g, l, u);
}

void stream_wait(const Stream& waiter, const Stream& producer) { gpu::stream_wait(waiter, producer); }

}  // namespace composite_gpu

}  // namespace tnn
