// PortableMLP on the GPU (fp32), the same function and parameter layout as MlpReference<float>:
// forward is one tiled shared-memory GEMM per layer with bias and activation fused into its epilogue;
// backward is one GEMM per layer for dL/da (activation derivative fused) plus one for dL/dW whose
// reduction over the batch runs in fixed slabs summed in a fixed order (bitwise reproducible).
#include "networks/portable_mlp.h"

#include "gpu/gpu.h"
#include "networks/activation.h"

#include <algorithm>

namespace tnn {

namespace {

using gpu::ceil_div;
using gpu::elementwise_grid;
using gpu::kElementwiseThreads;
using gpu::round_up;

// ---- Tiling. A block of 16 x 16 threads computes a 64 x 64 output tile, each thread a 4 x 4 grid of
// outputs strided by 16 (so a warp's stores to one output row are 16 consecutive floats), walking the
// reduction in steps of 16 held in shared memory.
constexpr int kTile = 64;
constexpr int kTileK = 16;
constexpr int kThreadsPerDim = 16;
constexpr int kThreads = kThreadsPerDim * kThreadsPerDim;
constexpr int kMicro = kTile / kThreadsPerDim;
constexpr int kLoadsPerThread = kTile * kTileK / kThreads;
static_assert(kTile * kTileK % kThreads == 0, "tile loads must split evenly over the threads");

// A row-major matrix as a GEMM operand, with tcnn's padding computed on the fly: element (r, c) is
// ptr[r * ld + c] for c < cols_valid, pad_value for cols_valid <= c < cols_padded, and 0 beyond or
// for r >= rows. This is how padded input lanes, padded output rows and ragged tiles are handled
// without any host-side copy.
struct Operand {
    const float* ptr = nullptr;
    int64_t ld = 0, rows = 0, cols_valid = 0, cols_padded = 0;
    float pad_value = 0.0f;

    __device__ __forceinline__ float at(int64_t r, int64_t c) const {
        if (r >= rows) return 0.0f;
        if (c < cols_valid) return ptr[r * ld + c];
        return c < cols_padded ? pad_value : 0.0f;
    }
};

Operand dense(const float* ptr, int64_t rows, int64_t cols, int64_t ld) { return Operand{ptr, ld, rows, cols, cols, 0.0f}; }

// Two operands of the same width one above the other: rows [0, top.rows) of `top`, then `bottom`. The
// second-order weight gradient sums over both in one reduction (d adot^T + e a^T) without a copy.
struct StackedOperand {
    Operand top, bottom;

    __device__ __forceinline__ float at(int64_t r, int64_t c) const {
        return r < top.rows ? top.at(r, c) : bottom.at(r - top.rows, c);
    }
};

// Fetches this thread's share of a kTileK x kTile tile into registers. ROW_IS_K: the operand's rows run
// along the reduction (consecutive threads read consecutive columns, 256-byte rows); otherwise its
// columns do (16 consecutive threads read one 64-byte row segment).
template <bool ROW_IS_K, typename OP>
__device__ __forceinline__ void fetch_tile(const OP& op, int64_t mn0, int64_t k0, float (&regs)[kLoadsPerThread]) {
#pragma unroll
    for (int j = 0; j < kLoadsPerThread; ++j) {
        const int e = threadIdx.x + j * kThreads;
        if (ROW_IS_K)
            regs[j] = op.at(k0 + e / kTile, mn0 + e % kTile);
        else
            regs[j] = op.at(mn0 + e / kTileK, k0 + e % kTileK);
    }
}

// The +1 column keeps the transposing stores (!ROW_IS_K) at most 2-way bank conflicted.
using SharedTile = float[kTileK][kTile + 1];

template <bool ROW_IS_K>
__device__ __forceinline__ void stash_tile(SharedTile& tile, const float (&regs)[kLoadsPerThread]) {
#pragma unroll
    for (int j = 0; j < kLoadsPerThread; ++j) {
        const int e = threadIdx.x + j * kThreads;
        if (ROW_IS_K)
            tile[e / kTile][e % kTile] = regs[j];
        else
            tile[e % kTileK][e / kTileK] = regs[j];
    }
}

// acc[i][j] = sum over k in [k_begin, k_end) of A(m0 + ty + 16 i, k) * B(k, n0 + tx + 16 j), with
// A(m, k) = a.at(m, k) (or a.at(k, m) when A_ROW_IS_K) and B(k, n) = b.at(n, k) (or b.at(k, n) when
// B_ROW_IS_K). Every output adds its terms in increasing k: the result depends on nothing else.
// The next tile is fetched into registers while the current one is multiplied.
template <bool A_ROW_IS_K, bool B_ROW_IS_K, typename OA, typename OB>
__device__ __forceinline__ void gemm_tile(const OA& a, const OB& b, int64_t m0, int64_t n0, int64_t k_begin,
                                          int64_t k_end, float (&acc)[kMicro][kMicro]) {
    __shared__ SharedTile a_tile, b_tile;
    const int tx = threadIdx.x % kThreadsPerDim, ty = threadIdx.x / kThreadsPerDim;
#pragma unroll
    for (int i = 0; i < kMicro; ++i)
#pragma unroll
        for (int j = 0; j < kMicro; ++j) acc[i][j] = 0.0f;
    float a_regs[kLoadsPerThread], b_regs[kLoadsPerThread];
    if (k_begin < k_end) {
        fetch_tile<A_ROW_IS_K>(a, m0, k_begin, a_regs);
        fetch_tile<B_ROW_IS_K>(b, n0, k_begin, b_regs);
    }
    for (int64_t k0 = k_begin; k0 < k_end; k0 += kTileK) {
        stash_tile<A_ROW_IS_K>(a_tile, a_regs);
        stash_tile<B_ROW_IS_K>(b_tile, b_regs);
        __syncthreads();
        if (k0 + kTileK < k_end) {
            fetch_tile<A_ROW_IS_K>(a, m0, k0 + kTileK, a_regs);
            fetch_tile<B_ROW_IS_K>(b, n0, k0 + kTileK, b_regs);
        }
#pragma unroll
        for (int k = 0; k < kTileK; ++k) {
            float av[kMicro], bv[kMicro];
#pragma unroll
            for (int i = 0; i < kMicro; ++i) av[i] = a_tile[k][ty + kThreadsPerDim * i];
#pragma unroll
            for (int j = 0; j < kMicro; ++j) bv[j] = b_tile[k][tx + kThreadsPerDim * j];
#pragma unroll
            for (int i = 0; i < kMicro; ++i)
#pragma unroll
                for (int j = 0; j < kMicro; ++j) acc[i][j] = fmaf(av[i], bv[j], acc[i][j]);
        }
        __syncthreads();
    }
}

// ---- Kernels.

// z[m, n] = sum_k a(m, k) W[n, k] (+ bias[n]); post[m, n] = act(z); pre[m, n] = z when pre != nullptr.
// Grid: (m tiles, n tiles).
template <Activation ACT>
__global__ void __launch_bounds__(kThreads)
    portable_mlp_forward_kernel(Operand a, Operand w, int64_t M, int64_t N, int64_t K, const float* __restrict__ bias,
                                float* __restrict__ pre, int64_t ld_pre, float* __restrict__ post, int64_t ld_post) {
    const int64_t m0 = int64_t(blockIdx.x) * kTile, n0 = int64_t(blockIdx.y) * kTile;
    float acc[kMicro][kMicro];
    gemm_tile<false, false>(a, w, m0, n0, 0, K, acc);
    const int tx = threadIdx.x % kThreadsPerDim, ty = threadIdx.x / kThreadsPerDim;
#pragma unroll
    for (int i = 0; i < kMicro; ++i) {
        const int64_t m = m0 + ty + kThreadsPerDim * i;
        if (m >= M) continue;
#pragma unroll
        for (int j = 0; j < kMicro; ++j) {
            const int64_t n = n0 + tx + kThreadsPerDim * j;
            if (n >= N) continue;
            float z = acc[i][j];
            if (bias) z += bias[n];
            if (pre) pre[m * ld_pre + n] = z;
            post[m * ld_post + n] = activation_forward(ACT, z);
        }
    }
}

// d[m, n] = sum_k g(m, k) W[k, n], times act'(saved[m, n]) unless ACT is None, into out[m, n].
// `saved` is what the derivative needs (activation_derivative reads only the sign for ReLU and
// LeakyReLU, so the post-activation serves there). Grid: (m tiles, n tiles).
template <Activation ACT>
__global__ void __launch_bounds__(kThreads)
    portable_mlp_backward_data_kernel(Operand g, Operand w, int64_t M, int64_t N, int64_t K,
                                      const float* __restrict__ saved, int64_t ld_saved, float* __restrict__ out,
                                      int64_t ld_out) {
    const int64_t m0 = int64_t(blockIdx.x) * kTile, n0 = int64_t(blockIdx.y) * kTile;
    float acc[kMicro][kMicro];
    gemm_tile<false, true>(g, w, m0, n0, 0, K, acc);
    const int tx = threadIdx.x % kThreadsPerDim, ty = threadIdx.x / kThreadsPerDim;
#pragma unroll
    for (int i = 0; i < kMicro; ++i) {
        const int64_t m = m0 + ty + kThreadsPerDim * i;
        if (m >= M) continue;
#pragma unroll
        for (int j = 0; j < kMicro; ++j) {
            const int64_t n = n0 + tx + kThreadsPerDim * j;
            if (n >= N) continue;
            float d = acc[i][j];
            if constexpr (ACT != Activation::None) d *= activation_derivative(ACT, saved[m * ld_saved + n]);
            out[m * ld_out + n] = d;
        }
    }
}

// How a gradient kernel writes: one slab's partial sum, or the final value (overwrite / accumulate).
enum class GradWrite : int { partial, overwrite, accumulate };

__device__ __forceinline__ void write_grad(float* out, int64_t index, int64_t slab, int64_t slab_stride, GradWrite mode,
                                           float value) {
    switch (mode) {
        case GradWrite::partial: out[slab * slab_stride + index] = value; break;
        case GradWrite::overwrite: out[index] = value; break;
        case GradWrite::accumulate: out[index] += value; break;
    }
}

// dW[o, i] over the rows of slab blockIdx.z: sum_r dz(r, o) a(r, i), r ascending. Grid: (i tiles,
// o tiles, slabs). A is Operand, or StackedOperand for the second-order pass.
template <typename A>
__global__ void __launch_bounds__(kThreads)
    portable_mlp_weight_grad_kernel(Operand dz, A a, int64_t n_out, int64_t n_in, int64_t batch, int64_t slab_rows,
                                    float* __restrict__ out, int64_t slab_stride, GradWrite mode) {
    const int64_t m0 = int64_t(blockIdx.y) * kTile, n0 = int64_t(blockIdx.x) * kTile, slab = blockIdx.z;
    const int64_t k_begin = slab * slab_rows, k_end = k_begin + slab_rows < batch ? k_begin + slab_rows : batch;
    float acc[kMicro][kMicro];
    gemm_tile<true, true>(dz, a, m0, n0, k_begin, k_end, acc);
    const int tx = threadIdx.x % kThreadsPerDim, ty = threadIdx.x / kThreadsPerDim;
#pragma unroll
    for (int i = 0; i < kMicro; ++i) {
        const int64_t o = m0 + ty + kThreadsPerDim * i;
        if (o >= n_out) continue;
#pragma unroll
        for (int j = 0; j < kMicro; ++j) {
            const int64_t in = n0 + tx + kThreadsPerDim * j;
            if (in < n_in) write_grad(out, o * n_in + in, slab, slab_stride, mode, acc[i][j]);
        }
    }
}

// db[o] over the rows of slab blockIdx.y: sum_r dz(r, o), r ascending. Grid: (o blocks, slabs).
__global__ void portable_mlp_bias_grad_kernel(Operand dz, int64_t n_out, int64_t batch, int64_t slab_rows,
                                              float* __restrict__ out, int64_t slab_stride, GradWrite mode) {
    const int64_t o = int64_t(blockIdx.x) * blockDim.x + threadIdx.x, slab = blockIdx.y;
    if (o >= n_out) return;
    const int64_t r_end = (slab + 1) * slab_rows < batch ? (slab + 1) * slab_rows : batch;
    float sum = 0.0f;
    for (int64_t r = slab * slab_rows; r < r_end; ++r) sum += dz.at(r, o);
    write_grad(out, o, slab, slab_stride, mode, sum);
}

// out[i] (=|+=) sum over slabs s = 0, 1, ... of partials[s * n + i].
__global__ void portable_mlp_reduce_slabs_kernel(const float* __restrict__ partials, int64_t n, int64_t slabs,
                                                 float* __restrict__ out, GradWrite mode) {
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
        float sum = 0.0f;
        for (int64_t s = 0; s < slabs; ++s) sum += partials[s * n + i];
        write_grad(out, i, 0, 0, mode, sum);
    }
}

// dz[m, n] = dL_dout[m, n] * act'(z[m, n]) for the output layer ([M, N] contiguous dz and z).
template <Activation ACT>
__global__ void portable_mlp_output_grad_kernel(const float* __restrict__ dL_dout, int64_t ld, const float* __restrict__ z,
                                                int64_t M, int64_t N, float* __restrict__ dz) {
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < M * N; i += int64_t(gridDim.x) * blockDim.x)
        dz[i] = dL_dout[(i / N) * ld + i % N] * activation_derivative(ACT, z[i]);
}

// ---- Second order (the maths in portable_mlp.cpp).

// The tangent forward of one layer: zdot[m, n] = sum_k t(m, k) W[n, k] (no bias), kept in zdot when
// non-null; out[m, n] = zdot act'(saved[m, n]) (zdot itself for None). Grid: (m tiles, n tiles).
template <Activation ACT>
__global__ void __launch_bounds__(kThreads)
    portable_mlp_tangent_kernel(Operand t, Operand w, int64_t M, int64_t N, int64_t K, const float* __restrict__ saved,
                                int64_t ld_saved, float* __restrict__ zdot, int64_t ld_zdot, float* __restrict__ out,
                                int64_t ld_out) {
    const int64_t m0 = int64_t(blockIdx.x) * kTile, n0 = int64_t(blockIdx.y) * kTile;
    float acc[kMicro][kMicro];
    gemm_tile<false, false>(t, w, m0, n0, 0, K, acc);
    const int tx = threadIdx.x % kThreadsPerDim, ty = threadIdx.x / kThreadsPerDim;
#pragma unroll
    for (int i = 0; i < kMicro; ++i) {
        const int64_t m = m0 + ty + kThreadsPerDim * i;
        if (m >= M) continue;
#pragma unroll
        for (int j = 0; j < kMicro; ++j) {
            const int64_t n = n0 + tx + kThreadsPerDim * j;
            if (n >= N) continue;
            const float zd = acc[i][j];
            if (zdot) zdot[m * ld_zdot + n] = zd;
            float a = zd;
            if constexpr (ACT != Activation::None) a *= activation_derivative(ACT, saved[m * ld_saved + n]);
            out[m * ld_out + n] = a;
        }
    }
}

// The output layer's d and e ([M, N] each, contiguous, e right after d): d = u act'(z),
// e = u act''(z) zdot. z is unused for None.
template <Activation ACT>
__global__ void portable_mlp_second_output_kernel(const float* __restrict__ dL_dout, int64_t ld,
                                                  const float* __restrict__ z, const float* __restrict__ zdot,
                                                  int64_t M, int64_t N, float* __restrict__ de) {
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < M * N; i += int64_t(gridDim.x) * blockDim.x) {
        const float u = dL_dout[(i / N) * ld + i % N];
        if constexpr (ACT == Activation::None) {
            de[i] = u;
            de[M * N + i] = 0.0f;
        } else {
            de[i] = u * activation_derivative(ACT, z[i]);
            de[M * N + i] = u * activation_second_derivative(ACT, z[i]) * zdot[i];
        }
    }
}

// One hidden layer's d and e from the products below it, in place: buf holds g = W^T d in rows [0, M)
// and h = W^T e in rows [M, 2M) ([2M, N] contiguous); afterwards d = g act'(z) and e = h act'(z) +
// g act''(z) zdot. `saved` feeds act' as in backward; `pre` and `zdot` are read only where act'' != 0.
template <Activation ACT>
__global__ void portable_mlp_second_combine_kernel(float* __restrict__ buf, const float* __restrict__ saved,
                                                   const float* __restrict__ pre, const float* __restrict__ zdot,
                                                   int64_t M, int64_t N) {
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < M * N; i += int64_t(gridDim.x) * blockDim.x) {
        const float g = buf[i], h = buf[M * N + i];
        float d1 = 1.0f;
        if constexpr (ACT != Activation::None) d1 = activation_derivative(ACT, saved[i]);
        float e = h * d1;
        if constexpr (!derivative_from_output(ACT)) e += g * activation_second_derivative(ACT, pre[i]) * zdot[i];
        buf[i] = g * d1;
        buf[M * N + i] = e;
    }
}

// ---- Launchers.

dim3 tile_grid(int64_t m, int64_t n, int64_t z = 1) {
    return dim3(static_cast<unsigned>(ceil_div<int64_t>(m, kTile)), static_cast<unsigned>(ceil_div<int64_t>(n, kTile)),
                static_cast<unsigned>(z));
}

void launch_forward(gpu_stream_t s, Activation act, const Operand& a, const Operand& w, int64_t M, int64_t N,
                    int64_t K, const float* bias, float* pre, int64_t ld_pre, float* post, int64_t ld_post) {
    dispatch_activation(act, [&](auto tag) {
        portable_mlp_forward_kernel<decltype(tag)::value>
            <<<tile_grid(M, N), kThreads, 0, s>>>(a, w, M, N, K, bias, pre, ld_pre, post, ld_post);
        TNN_GPU_CHECK_LAUNCH("portable_mlp_forward_kernel");
    });
}

void launch_backward_data(gpu_stream_t s, Activation act, const Operand& g, const Operand& w, int64_t M, int64_t N,
                          int64_t K, const float* saved, int64_t ld_saved, float* out, int64_t ld_out) {
    dispatch_activation(act, [&](auto tag) {
        portable_mlp_backward_data_kernel<decltype(tag)::value>
            <<<tile_grid(M, N), kThreads, 0, s>>>(g, w, M, N, K, saved, ld_saved, out, ld_out);
        TNN_GPU_CHECK_LAUNCH("portable_mlp_backward_data_kernel");
    });
}

void launch_tangent(gpu_stream_t s, Activation act, const Operand& t, const Operand& w, int64_t M, int64_t N,
                    int64_t K, const float* saved, int64_t ld_saved, float* zdot, int64_t ld_zdot, float* out,
                    int64_t ld_out) {
    dispatch_activation(act, [&](auto tag) {
        portable_mlp_tangent_kernel<decltype(tag)::value>
            <<<tile_grid(M, N), kThreads, 0, s>>>(t, w, M, N, K, saved, ld_saved, zdot, ld_zdot, out, ld_out);
        TNN_GPU_CHECK_LAUNCH("portable_mlp_tangent_kernel");
    });
}

// Pre-activations are kept only where the derivative needs more than the sign of the output:
// None needs nothing, ReLU and LeakyReLU read the post-activation (z > 0 exactly when act(z) > 0).
bool keeps_preactivation(Activation a) {
    return a != Activation::None && a != Activation::ReLU && a != Activation::LeakyReLU;
}

// The batch split of a weight-gradient reduction. It depends only on the shapes (never on the device
// or the stream), so the summation order, and with it every bit of the gradient, is fixed: each slab
// of slab_rows rows (a multiple of the GEMM step) sums in row order, slabs are added in slab order.
struct SlabPlan {
    int64_t slabs = 1, slab_rows = 0;
};

SlabPlan plan_slabs(int64_t batch, int64_t n_out, int64_t n_in) {
    constexpr int64_t kTargetBlocks = 1024;          // enough blocks to fill any current GPU
    constexpr int64_t kMinSlabRows = 256;            // below this a block does too little work
    constexpr int64_t kMaxPartialFloats = 1 << 24;   // 64 MiB of partial sums at most
    const int64_t tiles = ceil_div<int64_t>(n_out, kTile) * ceil_div<int64_t>(n_in, kTile);
    int64_t slabs = std::min({ceil_div(kTargetBlocks, tiles), ceil_div(batch, kMinSlabRows),
                              std::max<int64_t>(1, kMaxPartialFloats / (n_out * n_in)), int64_t(65535)});
    slabs = std::max<int64_t>(1, slabs);
    SlabPlan p;
    p.slab_rows = round_up<int64_t>(ceil_div(batch, slabs), kTileK);
    p.slabs = ceil_div(batch, p.slab_rows);
    return p;
}

// Floats of slab partial sums that layer_param_gradient needs at most over the layers, for `rows`
// rows in the weight reduction (0 when no layer splits).
int64_t partial_floats(const MlpLayout& l, int64_t rows) {
    int64_t floats = 0;
    for (uint32_t layer = 0; layer < l.n_layers(); ++layer) {
        const int64_t n_out = l.layer_out(layer), n_in = l.layer_in(layer);
        const SlabPlan p = plan_slabs(rows, n_out, n_in);
        if (p.slabs > 1) floats = std::max(floats, p.slabs * (n_out * n_in + (l.bias ? n_out : 0)));
    }
    return floats;
}

// Layer li's parameter gradient: dW[o, i] = sum over `rows` rows of dz(r, o) a(r, i) and (with bias)
// db[o] = sum over bias_rows rows of bias_dz(r, o), written or added per `final_write`. The slab plan
// is the weight reduction's; `partials` holds partial_floats(l, rows) floats.
template <typename A>
void layer_param_gradient(gpu_stream_t s, const MlpLayout& l, uint32_t li, const Operand& dz, const A& a, int64_t rows,
                          const Operand& bias_dz, int64_t bias_rows, float* dL_dparams, float* partials,
                          GradWrite final_write) {
    const int64_t n_out = l.layer_out(li), n_in = l.layer_in(li);
    const SlabPlan p = plan_slabs(rows, n_out, n_in);
    const bool split = p.slabs > 1;
    const GradWrite write = split ? GradWrite::partial : final_write;
    float* w_grad = dL_dparams + l.weight_offset(li);
    portable_mlp_weight_grad_kernel<A><<<tile_grid(n_in, n_out, p.slabs), kThreads, 0, s>>>(
        dz, a, n_out, n_in, rows, p.slab_rows, split ? partials : w_grad, n_out * n_in, write);
    TNN_GPU_CHECK_LAUNCH("portable_mlp_weight_grad_kernel");
    if (split) {
        portable_mlp_reduce_slabs_kernel<<<elementwise_grid(n_out * n_in), kElementwiseThreads, 0, s>>>(
            partials, n_out * n_in, p.slabs, w_grad, final_write);
        TNN_GPU_CHECK_LAUNCH("portable_mlp_reduce_slabs_kernel");
    }
    if (!l.bias) return;
    // The bias reduction reuses the weight plan's slab rows (bias_rows <= rows: at most p.slabs slabs).
    const int64_t bias_slabs = ceil_div(bias_rows, p.slab_rows);
    const bool bias_split = split && bias_slabs > 1;
    float* b_grad = dL_dparams + l.bias_offset(li);
    float* b_partials = bias_split ? partials + p.slabs * n_out * n_in : b_grad;
    const dim3 grid(static_cast<unsigned>(ceil_div<int64_t>(n_out, kElementwiseThreads)),
                    static_cast<unsigned>(bias_split ? bias_slabs : 1));
    portable_mlp_bias_grad_kernel<<<grid, kElementwiseThreads, 0, s>>>(bias_dz, n_out, bias_rows,
                                                                       bias_split ? p.slab_rows : bias_rows, b_partials,
                                                                       n_out, bias_split ? GradWrite::partial
                                                                                         : final_write);
    TNN_GPU_CHECK_LAUNCH("portable_mlp_bias_grad_kernel");
    if (bias_split) {
        portable_mlp_reduce_slabs_kernel<<<elementwise_grid(n_out), kElementwiseThreads, 0, s>>>(
            b_partials, n_out, bias_slabs, b_grad, final_write);
        TNN_GPU_CHECK_LAUNCH("portable_mlp_reduce_slabs_kernel");
    }
}

struct GpuMlpContext : Context {
    Stream stream;
    int64_t rows = 0;
    Tensor post;     // [n_hidden * rows, width]: a_l of hidden layer l in rows [l * rows, (l + 1) * rows)
    Tensor pre;      // same shape, z_l, when the hidden activation keeps pre-activations
    Tensor pre_out;  // [rows, n_output_dims]: z of the output layer, when output_activation != None
};

float* layer_rows(const Tensor& t, uint32_t layer, int64_t rows, uint32_t width) {
    return t.numel() == 0 ? nullptr : t.ptr<float>() + static_cast<int64_t>(layer) * rows * width;
}

Operand input_operand(const MlpLayout& l, ConstView input) {
    return Operand{input.ptr<float>(), input.stride, input.rows, l.n_input_dims, l.padded_input_dims, l.input_pad_value};
}

// Runs every layer; hidden layer l writes its activations to post[l] (and z to pre[l] when non-null).
void forward_layers(const MlpLayout& l, gpu_stream_t s, ConstView input, View output, const float* params,
                    const std::vector<float*>& post, const std::vector<float*>& pre, float* pre_out) {
    const int64_t M = input.rows;
    const uint32_t n_layers = l.n_layers();
    Operand a = input_operand(l, input);
    for (uint32_t layer = 0; layer < n_layers; ++layer) {
        const bool last = layer + 1 == n_layers;
        const int64_t K = l.layer_in(layer), N = last ? l.n_output_dims : l.width;
        // The padded output rows of W_out are never read: their outputs are dropped.
        const Operand w = dense(params + l.weight_offset(layer), N, K, K);
        const float* bias = l.bias ? params + l.bias_offset(layer) : nullptr;
        if (last) {
            launch_forward(s, l.output_activation, a, w, M, N, K, bias, pre_out, N, output.ptr<float>(), output.stride);
        } else {
            launch_forward(s, l.activation, a, w, M, N, K, bias, pre[layer], N, post[layer], N);
            a = dense(post[layer], M, N, N);
        }
    }
}

}  // namespace

namespace portable_mlp_gpu {

void inference(const MlpLayout& l, const Stream& stream, ConstView input, View output, const float* params) {
    gpu::DeviceGuard guard(stream.device().index);
    const int64_t M = input.rows;
    Tensor ping, pong;
    std::vector<float*> post(l.n_hidden_layers), pre(l.n_hidden_layers, nullptr);
    if (l.n_hidden_layers > 0) ping = Tensor::temporary(stream, M, l.width, DType::f32);
    if (l.n_hidden_layers > 1) pong = Tensor::temporary(stream, M, l.width, DType::f32);
    for (uint32_t i = 0; i < l.n_hidden_layers; ++i) post[i] = (i % 2 == 0 ? ping : pong).ptr<float>();
    forward_layers(l, gpu::native_stream(stream), input, output, params, post, pre, nullptr);
}

std::unique_ptr<Context> forward(const MlpLayout& l, const Stream& stream, ConstView input, View output,
                                 const float* params) {
    gpu::DeviceGuard guard(stream.device().index);
    const int64_t M = input.rows;
    auto ctx = std::make_unique<GpuMlpContext>();
    ctx->stream = stream;
    ctx->rows = M;
    const int64_t hidden_rows = static_cast<int64_t>(l.n_hidden_layers) * M;
    ctx->post = Tensor::temporary(stream, hidden_rows, l.width, DType::f32);
    if (keeps_preactivation(l.activation)) ctx->pre = Tensor::temporary(stream, hidden_rows, l.width, DType::f32);
    if (l.output_activation != Activation::None)
        ctx->pre_out = Tensor::temporary(stream, M, l.n_output_dims, DType::f32);
    std::vector<float*> post(l.n_hidden_layers), pre(l.n_hidden_layers);
    for (uint32_t i = 0; i < l.n_hidden_layers; ++i) {
        post[i] = layer_rows(ctx->post, i, M, l.width);
        pre[i] = layer_rows(ctx->pre, i, M, l.width);
    }
    forward_layers(l, gpu::native_stream(stream), input, output, params, post, pre,
                   ctx->pre_out.numel() ? ctx->pre_out.ptr<float>() : nullptr);
    return ctx;
}

void backward(const MlpLayout& l, const Stream& stream, const Context& context, ConstView input, ConstView dL_doutput,
              View* dL_dinput, float* dL_dparams, const float* params, GradMode mode) {
    const auto* found = dynamic_cast<const GpuMlpContext*>(&context);
    if (!found) throw Error("PortableMLP backward (GPU): the context does not come from a GPU forward of this module");
    const GpuMlpContext& ctx = *found;
    if (ctx.rows != input.rows)
        throw ShapeError(msg("PortableMLP backward (GPU): the forward pass had ", ctx.rows, " rows, the input has ",
                             input.rows));
    if (!dL_dinput && !dL_dparams) return;
    gpu::DeviceGuard guard(stream.device().index);
    const gpu_stream_t s = gpu::native_stream(stream);
    // A backward on another stream than its forward first waits for the forward's work.
    gpu::stream_wait(stream, ctx.stream);

    const int64_t M = input.rows;
    const uint32_t n_layers = l.n_layers(), top = n_layers - 1;
    const GradWrite final_write = mode == GradMode::accumulate ? GradWrite::accumulate : GradWrite::overwrite;

    // dz of the output layer: dL/dout itself, or dL/dout * act_out'(z) when there is an output activation.
    Operand g{dL_doutput.ptr<float>(), dL_doutput.stride, M, l.n_output_dims, l.n_output_dims, 0.0f};
    Tensor dz_top;
    if (l.output_activation != Activation::None) {
        dz_top = Tensor::temporary(stream, M, l.n_output_dims, DType::f32);
        dispatch_activation(l.output_activation, [&](auto tag) {
            portable_mlp_output_grad_kernel<decltype(tag)::value><<<elementwise_grid(M * l.n_output_dims),
                                                                    kElementwiseThreads, 0, s>>>(
                dL_doutput.ptr<float>(), dL_doutput.stride, ctx.pre_out.ptr<float>(), M, l.n_output_dims,
                dz_top.ptr<float>());
            TNN_GPU_CHECK_LAUNCH("portable_mlp_output_grad_kernel");
        });
        g = dense(dz_top.ptr<float>(), M, l.n_output_dims, l.n_output_dims);
    }

    Tensor dz[2];
    const uint32_t n_dz = l.n_hidden_layers == 0 ? 0 : (l.n_hidden_layers == 1 ? 1 : 2);
    for (uint32_t i = 0; i < n_dz; ++i) dz[i] = Tensor::temporary(stream, M, l.width, DType::f32);

    // One scratch buffer for slab partial sums, sized for the largest layer, reused layer after layer
    // (the stream orders each layer's reduction before the next layer's partials overwrite it).
    Tensor partials;
    if (dL_dparams) {
        const int64_t floats = partial_floats(l, M);
        if (floats > 0) partials = Tensor::temporary(stream, 1, floats, DType::f32);
    }

    for (int64_t layer = top; layer >= 0; --layer) {
        const uint32_t li = static_cast<uint32_t>(layer);
        const int64_t n_out = l.layer_out(li), n_in = l.layer_in(li);
        // Rows of W past the valid outputs (the output layer's padding) meet dz == 0: skip them.
        const int64_t K = layer == top ? l.n_output_dims : n_out;
        const Operand a_prev = layer == 0 ? input_operand(l, input)
                                          : dense(layer_rows(ctx.post, li - 1, M, l.width), M, l.width, l.width);
        if (dL_dparams)
            layer_param_gradient(s, l, li, g, a_prev, M, g, M, dL_dparams,
                                 partials.numel() ? partials.ptr<float>() : nullptr, final_write);
        // W_l viewed with its rows (outputs) along the reduction: B(k = o, n = i) = W[o, i].
        const Operand w = dense(params + l.weight_offset(li), K, n_in, n_in);
        if (layer > 0) {
            const uint32_t below = li - 1;
            const float* saved = keeps_preactivation(l.activation) ? layer_rows(ctx.pre, below, M, l.width)
                                                                   : layer_rows(ctx.post, below, M, l.width);
            float* out = dz[below % 2].ptr<float>();
            launch_backward_data(s, l.activation, g, w, M, l.width, K, saved, l.width, out, l.width);
            g = dense(out, M, l.width, l.width);
        } else if (dL_dinput) {
            // Only the real input lanes get a gradient; the padded lanes are constants.
            launch_backward_data(s, Activation::None, g, w, M, l.n_input_dims, K, nullptr, 0, dL_dinput->ptr<float>(),
                                 dL_dinput->stride);
        }
    }
    // The context's memory returns to the forward stream's pool when the context dies: make that
    // stream wait for this backward, so a later allocation there cannot overwrite what it still reads.
    gpu::stream_wait(ctx.stream, stream);
}

// Second order (the maths in portable_mlp.cpp), all fp32: the tangent forward (one GEMM per layer,
// act' fused into its epilogue, zdot kept where act'' needs it), then one reverse sweep in which d and
// e of a layer sit one above the other in one [2M, width] buffer, so that W^T [d; e] is one GEMM, the
// weight gradient sum_r d adot^T + e a^T one reduction over 2M rows, and the bias gradient sums e.
void backward_backward_input(const MlpLayout& l, const Stream& stream, const Context& context, ConstView input,
                             ConstView dL_ddLdinput, ConstView dL_doutput, View* dL_ddLdoutput, View* dL_dinput,
                             float* dL_dparams, const float* params, GradMode mode) {
    const auto* found = dynamic_cast<const GpuMlpContext*>(&context);
    if (!found)
        throw Error("PortableMLP backward_backward_input (GPU): the context does not come from a GPU forward of this "
                    "module");
    const GpuMlpContext& ctx = *found;
    if (ctx.rows != input.rows)
        throw ShapeError(msg("PortableMLP backward_backward_input (GPU): the forward pass had ", ctx.rows,
                             " rows, the input has ", input.rows));
    if (!dL_ddLdoutput && !dL_dinput && !dL_dparams) return;
    gpu::DeviceGuard guard(stream.device().index);
    const gpu_stream_t s = gpu::native_stream(stream);
    gpu::stream_wait(stream, ctx.stream);

    const int64_t M = input.rows, W = l.width, n_out = l.n_output_dims;
    const uint32_t n_layers = l.n_layers(), top = n_layers - 1, n_hidden = l.n_hidden_layers;
    const Activation act = l.activation, out_act = l.output_activation;
    const bool smooth = !derivative_from_output(act);  // act'' != 0: e needs zdot of the hidden layers

    // Tangent forward. adot[l] = act'(z_l) zdot_l of hidden layer l (rows [l M, (l + 1) M)); zdot of
    // the hidden layers where act'' needs it; zdot_top always (e_top, and the tangent output).
    const int64_t hidden_rows = static_cast<int64_t>(n_hidden) * M;
    Tensor adot = Tensor::temporary(stream, hidden_rows, W, DType::f32);
    Tensor zdot = smooth ? Tensor::temporary(stream, hidden_rows, W, DType::f32) : Tensor();
    Tensor zdot_top = Tensor::temporary(stream, M, n_out, DType::f32);
    Tensor ydot_scratch;
    View ydot;
    if (dL_ddLdoutput) {
        ydot = *dL_ddLdoutput;
    } else {
        ydot_scratch = Tensor::temporary(stream, M, n_out, DType::f32);
        ydot = ydot_scratch.view();
    }
    // The input direction [v, 0]: the padded lanes are constants.
    const Operand v_op{dL_ddLdinput.ptr<float>(), dL_ddLdinput.stride, M, l.n_input_dims, l.padded_input_dims, 0.0f};
    Operand t = v_op;
    for (uint32_t layer = 0; layer < n_layers; ++layer) {
        const int64_t K = l.layer_in(layer);
        if (layer == top) {
            const Operand w = dense(params + l.weight_offset(layer), n_out, K, K);
            launch_tangent(s, out_act, t, w, M, n_out, K, ctx.pre_out.numel() ? ctx.pre_out.ptr<float>() : nullptr,
                           n_out, zdot_top.ptr<float>(), n_out, ydot.ptr<float>(), ydot.stride);
            break;
        }
        const Operand w = dense(params + l.weight_offset(layer), W, K, K);
        const float* saved = keeps_preactivation(act) ? layer_rows(ctx.pre, layer, M, l.width)
                                                      : layer_rows(ctx.post, layer, M, l.width);
        float* out = layer_rows(adot, layer, M, l.width);
        launch_tangent(s, act, t, w, M, W, K, saved, W, smooth ? layer_rows(zdot, layer, M, l.width) : nullptr, W, out,
                       W);
        t = dense(out, M, W, W);
    }
    if (!dL_dinput && !dL_dparams) {
        gpu::stream_wait(ctx.stream, stream);
        return;
    }

    // d and e of the output layer, [2M, n_out].
    Tensor de_top = Tensor::temporary(stream, 2 * M, n_out, DType::f32);
    dispatch_activation(out_act, [&](auto tag) {
        portable_mlp_second_output_kernel<decltype(tag)::value><<<elementwise_grid(M * n_out), kElementwiseThreads, 0,
                                                                  s>>>(
            dL_doutput.ptr<float>(), dL_doutput.stride, ctx.pre_out.numel() ? ctx.pre_out.ptr<float>() : nullptr,
            zdot_top.ptr<float>(), M, n_out, de_top.ptr<float>());
        TNN_GPU_CHECK_LAUNCH("portable_mlp_second_output_kernel");
    });
    Tensor de[2];
    for (uint32_t i = 0; i < std::min<uint32_t>(n_hidden, 2); ++i) de[i] = Tensor::temporary(stream, 2 * M, W, DType::f32);
    Tensor partials;
    if (dL_dparams) {
        const int64_t floats = partial_floats(l, 2 * M);
        if (floats > 0) partials = Tensor::temporary(stream, 1, floats, DType::f32);
    }
    const GradWrite final_write = mode == GradMode::accumulate ? GradWrite::accumulate : GradWrite::overwrite;

    Operand g = dense(de_top.ptr<float>(), 2 * M, n_out, n_out);  // [d; e] of the current layer
    for (int64_t layer = top; layer >= 0; --layer) {
        const uint32_t li = static_cast<uint32_t>(layer);
        const int64_t n_in = l.layer_in(li);
        const int64_t K = layer == top ? n_out : W;  // valid outputs of this layer
        const Operand e_op = dense(g.ptr + M * g.ld, M, K, g.ld);
        if (dL_dparams) {
            // [adot; a] of the layer below: the input direction and the padded input at the bottom.
            const StackedOperand ta =
                layer == 0 ? StackedOperand{v_op, input_operand(l, input)}
                           : StackedOperand{dense(layer_rows(adot, li - 1, M, l.width), M, W, W),
                                            dense(layer_rows(ctx.post, li - 1, M, l.width), M, W, W)};
            layer_param_gradient(s, l, li, g, ta, 2 * M, e_op, M, dL_dparams,
                                 partials.numel() ? partials.ptr<float>() : nullptr, final_write);
        }
        const Operand w = dense(params + l.weight_offset(li), K, n_in, n_in);
        if (layer == 0) {
            if (dL_dinput)
                launch_backward_data(s, Activation::None, e_op, w, M, l.n_input_dims, K, nullptr, 0,
                                     dL_dinput->ptr<float>(), dL_dinput->stride);
            break;
        }
        // [W^T d; W^T e] in one GEMM over 2M rows, then d and e of the layer below in place.
        const uint32_t below = li - 1;
        float* out = de[below % 2].ptr<float>();
        launch_backward_data(s, Activation::None, g, w, 2 * M, W, K, nullptr, 0, out, W);
        const float* saved = keeps_preactivation(act) ? layer_rows(ctx.pre, below, M, l.width)
                                                      : layer_rows(ctx.post, below, M, l.width);
        dispatch_activation(act, [&](auto tag) {
            portable_mlp_second_combine_kernel<decltype(tag)::value>
                <<<elementwise_grid(M * W), kElementwiseThreads, 0, s>>>(
                    out, saved, layer_rows(ctx.pre, below, M, l.width),
                    smooth ? layer_rows(zdot, below, M, l.width) : nullptr, M, W);
            TNN_GPU_CHECK_LAUNCH("portable_mlp_second_combine_kernel");
        });
        g = dense(out, 2 * M, W, W);
    }
    gpu::stream_wait(ctx.stream, stream);
}

}  // namespace portable_mlp_gpu

}  // namespace tnn
