// Every loss on the GPU: one launch per evaluate, one thread per element over loss_element
// (loss_math.h), the CPU reference's maths in its order of operations. This file is compiled without
// FMA contraction (CMakeLists.txt), so values and gradients equal the CPU's bit for bit; the one
// exception is CrossEntropy's value, whose device log may differ from the host's by an ulp.
#include "losses/loss_gpu.h"

#include "gpu/gpu.h"

#include <type_traits>

namespace tnn {

namespace {

using gpu::elementwise_grid;
using gpu::kElementwiseThreads;

// A float32 or float64 [rows, cols] view (target, pdf, values): which one is a runtime flag, a
// uniform branch, instead of a template parameter per combination.
struct WideOperand {
    void* data = nullptr;
    int64_t stride = 0;
    bool f64 = false;
};

WideOperand wide(const ConstView& v) { return WideOperand{const_cast<void*>(v.data), v.stride, v.dtype == DType::f64}; }

// Reads element (r, c) in the compute type A, as the CPU's load_f does.
template <typename A> __device__ __forceinline__ A load_wide(const WideOperand& v, int64_t r, int64_t c) {
    const int64_t o = r * v.stride + c;
    return v.f64 ? static_cast<A>(static_cast<const double*>(v.data)[o])
                 : static_cast<A>(static_cast<const float*>(v.data)[o]);
}

template <typename A> __device__ __forceinline__ void store_wide(const WideOperand& v, int64_t r, int64_t c, A x) {
    const int64_t o = r * v.stride + c;
    if (v.f64) static_cast<double*>(v.data)[o] = static_cast<double>(x);
    else static_cast<float*>(v.data)[o] = static_cast<float>(x);
}

// values[r, c] and gradients[r, c] for every element of prediction [rows, cols] (P: device storage
// type; A: float, or double for fp64 predictions). pdf.data == nullptr: no pdf; otherwise per element
// or, with one column, per sample. The luminance is recomputed by every element of its row.
template <LossKind K, typename P>
__global__ void loss_evaluate_kernel(float loss_scale, const P* prediction, int64_t prediction_stride,
                                     WideOperand target, WideOperand pdf, bool pdf_per_element, WideOperand values,
                                     P* gradients, int64_t gradient_stride, int64_t rows, int64_t cols) {
    using A = std::conditional_t<std::is_same_v<P, double>, double, float>;
    const int64_t n_elements = rows * cols;
    const A n = static_cast<A>(n_elements);
    const A ls = static_cast<A>(loss_scale);
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n_elements;
         i += int64_t(gridDim.x) * blockDim.x) {
        const int64_t r = i / cols, c = i - r * cols;
        const P* p_row = prediction + r * prediction_stride;
        A lum = A(0);
        if constexpr (K == LossKind::relative_l2_luminance) {
            A red = gpu::to_acc(p_row[0]), green = gpu::to_acc(p_row[1]), blue = gpu::to_acc(p_row[2]);
            if (cols >= 6) {
                red += gpu::to_acc(p_row[3]);
                green += gpu::to_acc(p_row[4]);
                blue += gpu::to_acc(p_row[5]);
            }
            lum = loss_luminance(red, green, blue);
        }
        const A pdf_value = pdf.data ? load_wide<A>(pdf, r, pdf_per_element ? c : 0) : A(1);
        const LossTerm<A> term =
            loss_element<K, A>(gpu::to_acc(p_row[c]), load_wide<A>(target, r, c), pdf_value, lum, n, ls);
        store_wide(values, r, c, term.value);
        gradients[r * gradient_stride + c] = gpu::from_acc<P>(term.gradient);
    }
}

}  // namespace

namespace loss_gpu {

void evaluate(LossKind kind, const Stream& stream, float loss_scale, ConstView prediction, ConstView target,
              const ConstView* data_pdf, View values, View gradients) {
    const int64_t rows = prediction.rows, cols = prediction.cols;
    if (rows == 0 || cols == 0) return;
    gpu::DeviceGuard guard(stream.device().index);
    const WideOperand pdf = data_pdf ? wide(*data_pdf) : WideOperand{};
    const bool pdf_per_element = data_pdf && data_pdf->cols == cols;
    dispatch_loss_kind(kind, [&](auto k) {
        gpu::dispatch_device_dtype(prediction.dtype, [&](auto p) {
            using P = decltype(p);
            loss_evaluate_kernel<decltype(k)::value, P>
                <<<elementwise_grid(rows * cols), kElementwiseThreads, 0, gpu::native_stream(stream)>>>(
                    loss_scale, prediction.ptr<P>(), prediction.stride, wide(target), pdf, pdf_per_element,
                    wide(ConstView(values)), gradients.ptr<P>(), gradients.stride, rows, cols);
            TNN_GPU_CHECK_LAUNCH("loss_evaluate_kernel");
        });
    });
}

}  // namespace loss_gpu

}  // namespace tnn
