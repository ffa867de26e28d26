// GPU entry points of the parameter-free encodings (per-dimension lanes: Identity, Frequency,
// TriangleWave, OneBlob; SphericalHarmonics) and the elementwise parts of Composite (Sum / Product
// reductions and their gradients). Implemented in per_dim_encoding.cu, spherical_harmonics.cu and
// composite.cu; called by the modules with validated arguments and rows > 0. Grids: grid_gpu.h.
#pragma once

#include <tnn/module.h>

#include <cstdint>
#include <vector>

namespace tnn {

// The lanes of a per-dimension encoding as its GPU kernels evaluate them (encoding_math.h).
struct PerDimLanesGpu {
    enum class Kind : uint32_t { Identity, Frequency, TriangleWave, OneBlob } kind = Kind::Identity;
    uint32_t width = 1;      // outputs per input dimension
    float scale = 1.0f, offset = 0.0f;  // Identity
    uint32_t log2_bins = 0;  // OneBlob
};

#ifdef TNN_WITH_GPU
namespace per_dim_gpu {
// y[r, d * W + j] = f_j(x[r, d])
void forward(const PerDimLanesGpu& lanes, const Stream& stream, ConstView input, View output);
// dL/dx[r, d] = sum_j g[r, d * W + j] f_j'(x[r, d])
void backward(const PerDimLanesGpu& lanes, const Stream& stream, ConstView input, ConstView dL_doutput,
              View dL_dinput);
// dL'/d(dL/dy)[r, d * W + j] = v[r, d] f_j'(x); dL'/dx[r, d] = v[r, d] sum_j g[r, d * W + j] f_j''(x)
void backward_backward_input(const PerDimLanesGpu& lanes, const Stream& stream, ConstView input, ConstView dL_ddLdinput,
                             ConstView dL_doutput, View* dL_ddLdoutput, View* dL_dinput);
}  // namespace per_dim_gpu

namespace spherical_harmonics_gpu {
void forward(uint32_t degree, const Stream& stream, ConstView input, View output);
void backward(uint32_t degree, const Stream& stream, ConstView input, ConstView dL_doutput, View dL_dinput);
void backward_backward_input(uint32_t degree, const Stream& stream, ConstView input, ConstView dL_ddLdinput,
                             ConstView dL_doutput, View* dL_ddLdoutput, View* dL_dinput);
}  // namespace spherical_harmonics_gpu

namespace composite_gpu {
// The most nested encodings a Sum / Product composite reduces on the GPU (kernel arguments).
constexpr size_t kMaxNested = 16;

// A [rows, width] tensor of the composite's dtype read with padding: lane k is data[r * stride + k]
// for k < width, else pad (a nested output and its padding value, or a second-order weight and 0).
struct Lanes {
    const void* data = nullptr;
    int64_t stride = 0;
    uint32_t width = 0;
    float pad = 0.0f;
};

// out[r, k] = sum_i (or prod_i) lanes_i(r, k), for k < out.cols.
void reduce(const Stream& stream, bool product, const std::vector<Lanes>& lanes, View out);
// dst[r, k] = g[r, k] * prod_{m != skip} lanes_m(r, k), for k < dst.cols.
void product_gradient(const Stream& stream, const std::vector<Lanes>& lanes, size_t skip, ConstView g, View dst);
// out[r, k] = sum_i w_i(r, k) (Sum) or sum_i w_i(r, k) prod_{m != i} lanes_m(r, k) (Product).
void second_order_output(const Stream& stream, bool product, const std::vector<Lanes>& lanes,
                         const std::vector<Lanes>& w, View out);
// u[r, k] = g[r, k] * sum_{i != l} w_i(r, k) prod_{m != i, l} lanes_m(r, k), for k < u.cols.
void product_second_order(const Stream& stream, const std::vector<Lanes>& lanes, const std::vector<Lanes>& w, size_t l,
                          ConstView g, View u);
// Orders later work on `waiter` after the work queued on `producer` (no-op for the same stream).
void stream_wait(const Stream& waiter, const Stream& producer);
}  // namespace composite_gpu
#endif  // TNN_WITH_GPU

}  // namespace tnn
