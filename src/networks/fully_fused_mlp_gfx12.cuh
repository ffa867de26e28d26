// FullyFusedMLP kernels for AMD gfx12 (RDNA4, wave32 WMMA 16x16x16 with fp16/bf16 inputs and fp32
// accumulators): the HIP build's counterpart of fully_fused_mlp_kernels.cuh, with the same
// Kernels<H, W> entry points, KernelArgs and shared-memory plans, included only by
// src/networks/instantiations/fully_fused_w*_*.cu in HIP builds. Device passes for other targets
// (gfx11) get a trapping stub: the launcher refuses non-gfx12 devices before it launches.
//
// Forward: each wavefront owns 16 * MT rows per tile and computes every layer as Z^T = W X^T
// (M = output features, N = rows, K = input features), so the fp32 D fragments of a layer, once
// activated and rounded to 16 bits, are exactly the B fragments of the next layer (wmma_layout.h):
// activations stay in registers between layers. W comes from the block's copy in LDS
// ([out][in + 8], 16-byte loads: a lane's A elements are 8 consecutive inputs of one weight row);
// layer 0 reads its B fragments from the wavefront's 16-bit input tile the same way.
//
// Backward: recomputes the forward pass of each tile and keeps a (and f'(z) where it cannot be read
// off a) of every hidden layer in the stash; then walks the layers down. dz of the block's rows
// goes to LDS, one __syncthreads, and every wavefront adds its share of dW = dz^T a (K = rows) into
// fp32 accumulators private to the block, in the order fully_fused_mlp_reduce_kernel expects
// (Shape::fragment_index); dz chains through dL/da_{l-1}^T = W_l^T dz_l^T, whose D fragments are
// again the next step's B fragments. Operands read along a column (W^T, dz^T, a for dW) are
// gathered with 16-bit LDS loads.
//
// Not measured on hardware (docs/amd.md): tile shapes and the LDS gathers are a first design.
#pragma once

#include "gpu/gpu.h"
#include "networks/activation.h"
#include "networks/fully_fused_mlp.h"
#include "networks/wmma_layout.h"

#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <type_traits>
#include <utility>

#if !defined(TNN_WITH_HIP)
#error "fully_fused_mlp_gfx12.cuh uses AMD gfx12 WMMA builtins; include it only in HIP builds"
#endif  // !TNN_WITH_HIP

// The device pass that has gfx12 WMMA; the host pass parses the same code.
#if defined(__GFX12__) || !defined(__HIP_DEVICE_COMPILE__)
#define TNN_FFM_GFX12_BODY 1
#endif  // __GFX12__ || !__HIP_DEVICE_COMPILE__

namespace tnn::ffm {

namespace gfx12 {

constexpr int kLanes = wmma::kLanes;

typedef _Float16 v8h __attribute__((ext_vector_type(8)));
typedef short v8s __attribute__((ext_vector_type(8)));
typedef float v8f __attribute__((ext_vector_type(8)));

// Eight 16-bit elements of one operand, element e in the low (even e) or high half of r[e / 2]:
// the order of a v8f16 / v8bf16 vector in four VGPRs.
struct Frag {
    uint32_t r[4];
};

// ---- 16-bit values: the network's storage type T (gpu_half or gpu_bf16) as raw bits.
template <typename T> __device__ __forceinline__ uint32_t bits16(float v) {
    const T t = gpu::from_acc<T>(v);  // round to nearest even, as the CPU reference
    uint16_t u;
    memcpy(&u, &t, 2);
    return u;
}
template <typename T> __device__ __forceinline__ float from_bits16(uint32_t u16) {
    if constexpr (std::is_same_v<T, gpu_half>) {
        const uint16_t u = static_cast<uint16_t>(u16);
        _Float16 h;
        memcpy(&h, &u, 2);
        return static_cast<float>(h);
    } else {
        const uint32_t w = u16 << 16;  // bf16 is the upper half of an fp32
        float f;
        memcpy(&f, &w, 4);
        return f;
    }
}
template <typename T> __device__ __forceinline__ Frag pack8(const float (&v)[8]) {
    Frag f;
#pragma unroll
    for (int i = 0; i < 4; ++i) f.r[i] = bits16<T>(v[2 * i]) | (bits16<T>(v[2 * i + 1]) << 16);
    return f;
}
template <typename T> __device__ __forceinline__ void unpack8(const Frag& f, float (&v)[8]) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        v[2 * i] = from_bits16<T>(f.r[i] & 0xffffu);
        v[2 * i + 1] = from_bits16<T>(f.r[i] >> 16);
    }
}

// 8 contiguous 16-bit elements (16 bytes, 16-byte aligned) in LDS or global memory.
__device__ __forceinline__ Frag load8(const void* p) {
    const uint4 v = *static_cast<const uint4*>(p);
    return Frag{{v.x, v.y, v.z, v.w}};
}
__device__ __forceinline__ void store8(void* p, const Frag& f) {
    *static_cast<uint4*>(p) = make_uint4(f.r[0], f.r[1], f.r[2], f.r[3]);
}
// 8 16-bit elements `stride` elements apart (a column of a row-major array).
template <typename T> __device__ __forceinline__ Frag gather8(const T* p, int64_t stride) {
    const uint16_t* q = reinterpret_cast<const uint16_t*>(p);
    Frag f;
#pragma unroll
    for (int i = 0; i < 4; ++i) f.r[i] = uint32_t(q[2 * i * stride]) | (uint32_t(q[(2 * i + 1) * stride]) << 16);
    return f;
}

// D += A * B over one 16 x 16 x 16 step (the only instruction that needs gfx12).
template <typename T> __device__ __forceinline__ void wmma(v8f& d, const Frag& a, const Frag& b) {
#if defined(__GFX12__)
    if constexpr (std::is_same_v<T, gpu_half>)
        d = __builtin_amdgcn_wmma_f32_16x16x16_f16_w32_gfx12(__builtin_bit_cast(v8h, a), __builtin_bit_cast(v8h, b), d);
    else
        d = __builtin_amdgcn_wmma_f32_16x16x16_bf16_w32_gfx12(__builtin_bit_cast(v8s, a), __builtin_bit_cast(v8s, b), d);
#else
    __builtin_trap();
#endif  // __GFX12__
}

// f(std::integral_constant<int, 0>{}), ..., f(<N - 1>): a loop whose index is a compile-time constant,
// for loops that index register arrays (fragments) and whose bodies are too large for the unroller
// to be trusted: an array indexed at run time would live in scratch memory.
template <typename F, int... I> __device__ __forceinline__ void static_for_impl(F& f, std::integer_sequence<int, I...>) {
    (f(std::integral_constant<int, I>{}), ...);
}
template <int N, typename F> __device__ __forceinline__ void static_for(F&& f) {
    static_for_impl(f, std::make_integer_sequence<int, N>{});
}

// Lambdas of the kernels are inlined as the functions around them are (an out-of-line lambda
// would keep its captures, and the fragments they reference, in scratch memory).
#define TNN_FFM_INLINE __attribute__((always_inline))

// activation.h's formulas (written once, for the CPU reference too) evaluated with the hardware's
// fast exp, sin, cos and log (v_exp_f32, v_sin_f32, ... via HIP's __expf / __sinf / __cosf /
// __logf): as in the NVIDIA kernels' FastFloat, their error is far below the fp16/bf16 rounding
// every activation goes through, and the accurate library versions (sin's argument reduction
// above all) cost registers that the fragments need. tanh keeps tanhf.
struct FastFloat {
    float v;
    FastFloat() = default;
    template <typename S> __device__ constexpr explicit FastFloat(S x) : v(static_cast<float>(x)) {}
};
__device__ inline FastFloat operator+(FastFloat a, FastFloat b) { return FastFloat(a.v + b.v); }
__device__ inline FastFloat operator-(FastFloat a, FastFloat b) { return FastFloat(a.v - b.v); }
__device__ inline FastFloat operator*(FastFloat a, FastFloat b) { return FastFloat(a.v * b.v); }
__device__ inline FastFloat operator/(FastFloat a, FastFloat b) { return FastFloat(__fdividef(a.v, b.v)); }
__device__ inline FastFloat operator-(FastFloat a) { return FastFloat(-a.v); }
__device__ inline bool operator>(FastFloat a, FastFloat b) { return a.v > b.v; }
__device__ inline FastFloat exp(FastFloat a) { return FastFloat(__expf(a.v)); }
__device__ inline FastFloat sin(FastFloat a) { return FastFloat(__sinf(a.v)); }
__device__ inline FastFloat cos(FastFloat a) { return FastFloat(__cosf(a.v)); }
__device__ inline FastFloat log1p(FastFloat a) { return FastFloat(__logf(1.0f + a.v)); }
__device__ inline FastFloat sqrt(FastFloat a) { return FastFloat(sqrtf(a.v)); }
__device__ inline FastFloat tanh(FastFloat a) { return FastFloat(tanhf(a.v)); }
template <Activation A> __device__ __forceinline__ float act_fwd(float z) { return activation_forward(A, FastFloat(z)).v; }
template <Activation A> __device__ __forceinline__ float act_deriv(float z) { return activation_derivative(A, FastFloat(z)).v; }

// The activation as a compile-time constant inside f (the epilogues carry no per-element branch).
template <typename F> __device__ __forceinline__ void with_activation(Activation a, F&& f) {
    using A = Activation;
    switch (a) {
        case A::None: f(std::integral_constant<A, A::None>{}); break;
        case A::ReLU: f(std::integral_constant<A, A::ReLU>{}); break;
        case A::LeakyReLU: f(std::integral_constant<A, A::LeakyReLU>{}); break;
        case A::Exponential: f(std::integral_constant<A, A::Exponential>{}); break;
        case A::Sine: f(std::integral_constant<A, A::Sine>{}); break;
        case A::Sigmoid: f(std::integral_constant<A, A::Sigmoid>{}); break;
        case A::Squareplus: f(std::integral_constant<A, A::Squareplus>{}); break;
        case A::Softplus: f(std::integral_constant<A, A::Softplus>{}); break;
        case A::Tanh: f(std::integral_constant<A, A::Tanh>{}); break;
        case A::SiLU: f(std::integral_constant<A, A::SiLU>{}); break;
    }
}

// ---- Block-wide and wavefront-wide data movement.

// Layer l's slot (matrix [out][in + 8] in T, then out fp32 biases), all threads of the block.
template <typename T> __device__ __forceinline__ void load_slot(const KernelArgs& args, int l, char* slot) {
    const Shape& s = args.shape;
    const wmma::Geometry geo{s};  // Shape's maths, always inlined
    const int in = geo.layer_in(l), out = geo.layer_out(l), ws = in + 8;
    const T* w = static_cast<const T*>(args.params) + geo.weight_offset(l);
    T* dst = reinterpret_cast<T*>(slot);
    if (args.params_aligned) {
        const int cpr = in / 8;  // 16-byte chunks per row
        for (int i = threadIdx.x; i < out * cpr; i += blockDim.x) {
            const int r = i / cpr, c = (i - r * cpr) * 8;
            store8(dst + r * ws + c, load8(w + int64_t(r) * in + c));
        }
    } else {
        for (int i = threadIdx.x; i < out * in; i += blockDim.x) {
            const int r = i / in, c = i - r * in;
            dst[r * ws + c] = w[i];
        }
    }
    if (s.bias) {
        const T* b = static_cast<const T*>(args.params) + geo.bias_offset(l);
        float* bdst = reinterpret_cast<float*>(slot + int64_t(out) * ws * 2);
        for (int o = threadIdx.x; o < out; o += blockDim.x) bdst[o] = gpu::to_acc(b[o]);
    }
}

// Rows [row0, row0 + n_rows) of the input (fp32 or T) -> the wavefront's 16-bit tile [n_rows][x_stride]:
// columns < n_in from the input, n_in..pin-1 = pad_value (tcnn's padding lanes), rows >= valid zero.
template <typename T>
__device__ __forceinline__ void input_to_tile(const KernelArgs& args, T* x, int x_stride, int64_t row0, int n_rows,
                                              int valid, int lane) {
    const Shape& s = args.shape;
    const T pad = gpu::from_acc<T>(args.pad_value), zero = gpu::from_acc<T>(0.0f);
    for (int i = lane; i < n_rows * s.pin; i += kLanes) {
        const int r = i / s.pin, c = i - r * s.pin;
        T v = c < s.n_in ? zero : pad;
        if (r < valid && c < s.n_in) {
            const int64_t o = (row0 + r) * args.in_stride + c;
            v = args.in_f32 ? gpu::from_acc<T>(static_cast<const float*>(args.in)[o]) : static_cast<const T*>(args.in)[o];
        }
        x[r * x_stride + c] = v;
    }
}

// ---- Wavefront-level layer pieces. acc[m]: the D fragment of output features [16c, 16c + 16) x
// rows [16m, 16m + 16) of the wavefront's tile.

template <int MT> __device__ __forceinline__ void init_acc(v8f (&acc)[MT], const float* bias, int lane) {
#pragma unroll
    for (int e = 0; e < 8; ++e) {
        const float b = bias ? bias[wmma::c_coord(lane, e).row] : 0.0f;
#pragma unroll
        for (int m = 0; m < MT; ++m) acc[m][e] = b;
    }
}

// The A fragment of W rows [16c, 16c + 16) x inputs [16k, 16k + 16) from a [out][in + 8] slot.
__device__ __forceinline__ Frag weight_a(const char* slot, int ws_bytes, int c, int k, int lane) {
    const wmma::Coord rc = wmma::a_from_row_major(lane, 16 * c, 16 * k);
    return load8(slot + int64_t(rc.row) * ws_bytes + rc.col * 2);
}
// The A fragment of W^T: inputs [16c, 16c + 16) x outputs [16k, 16k + 16) of the same slot.
template <typename T> __device__ __forceinline__ Frag weight_t_a(const char* slot, int ws, int c, int k, int lane) {
    const wmma::Coord rc = wmma::a_from_transposed(lane, 16 * c, 16 * k, 0);
    return gather8(reinterpret_cast<const T*>(slot) + int64_t(rc.row) * ws + rc.col, ws);
}
// The B fragment of rows [16m, 16m + 16) x features [16k, 16k + 16) of a row-major 16-bit
// [rows][stride] tile (the input tile, a stash or dz tile read as X^T).
template <typename T> __device__ __forceinline__ Frag tile_b(const T* tile, int stride, int m, int k, int lane) {
    const wmma::Coord rc = wmma::b_from_transposed(lane, 16 * k, 16 * m);
    return load8(tile + int64_t(rc.row) * stride + rc.col);
}
// Where a lane's 8 D elements of (features 16c.., rows 16m..) go in a row-major [rows][stride] tile.
template <typename T> __device__ __forceinline__ T* tile_d(T* tile, int stride, int m, int c, int lane) {
    const wmma::Coord rc = wmma::d_to_transposed(lane, 16 * c, 16 * m);
    return tile + int64_t(rc.row) * stride + rc.col;
}

// Pre-activations of features [16c, 16c + 16) of a hidden layer: bias + W X^T, with X the 16-bit
// input tile (layer 0, K = 16 * nk0) or the previous layer's activations in registers (K = 16 * NC).
template <typename T, int MT, int NC>
__device__ __forceinline__ void hidden_chunk(v8f (&acc)[MT], bool first, int c, const Frag (&h)[MT][NC], const T* x,
                                             int x_stride, int nk0, const char* slot, int ws_bytes, const float* bias,
                                             int lane) {
    init_acc(acc, bias ? bias + 16 * c : nullptr, lane);
    if (first) {
        for (int k = 0; k < nk0; ++k) {
            const Frag a = weight_a(slot, ws_bytes, c, k, lane);
#pragma unroll
            for (int m = 0; m < MT; ++m) wmma<T>(acc[m], a, tile_b(x, x_stride, m, k, lane));
        }
    } else {
#pragma unroll
        for (int k = 0; k < NC; ++k) {
            const Frag a = weight_a(slot, ws_bytes, c, k, lane);
#pragma unroll
            for (int m = 0; m < MT; ++m) wmma<T>(acc[m], a, h[m][k]);
        }
    }
}

// Where a layer's operands are: its slot in LDS, its row pitch, its fp32 biases (or none).
struct LayerSlot {
    const char* slot;
    int ws;  // elements per weight row (in + 8)
    const float* bias;
};
__device__ __forceinline__ LayerSlot layer_slot(const char* slot, int in, int out, bool bias) {
    const int ws = in + 8;
    return {slot, ws, bias ? reinterpret_cast<const float*>(slot + int64_t(out) * ws * 2) : nullptr};
}

// ============================================================================================
// Forward kernel (inference and forward-with-context; the context is empty: backward recomputes).
// ============================================================================================

template <typename T, int W>
__global__ void __launch_bounds__(kMaxWarps * kLanes) fully_fused_mlp_gfx12_forward_kernel(const KernelArgs args) {
#if defined(TNN_FFM_GFX12_BODY)
    constexpr int MT = forward_m_tiles(W), RW = 16 * MT, NC = W / 16;
    extern __shared__ __align__(16) char smem[];
    const ForwardPlan& p = args.fwd;
    const Shape& s = args.shape;
    const wmma::Geometry geo{s};  // Shape's maths, always inlined
    const int lane = threadIdx.x % kLanes, warp = threadIdx.x / kLanes, nw = blockDim.x / kLanes;
    const int R = nw * RW, L = s.n_hidden;
    const int64_t n_tiles = (args.rows + R - 1) / R;
    char* wsm = smem + p.off_weights;
    T* x = reinterpret_cast<T*>(smem + p.off_x) + warp * RW * p.x_stride;

    // Streamed weights: one slot, reloaded before every layer by the whole block.
    auto ensure_layer = [&](int l) TNN_FFM_INLINE -> const char* {
        if (p.weights_resident) return wsm + geo.slot_offset(l);
        __syncthreads();
        load_slot<T>(args, l, wsm);
        __syncthreads();
        return wsm;
    };
    if (p.weights_resident)
        for (int l = 0; l <= L; ++l) load_slot<T>(args, l, wsm + geo.slot_offset(l));
    __syncthreads();

    for (int64_t tile = blockIdx.x; tile < n_tiles; tile += gridDim.x) {
        const int64_t row0 = tile * R + warp * RW;
        const int64_t left = args.rows - row0;
        const int valid = left <= 0 ? 0 : left < RW ? static_cast<int>(left) : RW;
        input_to_tile<T>(args, x, p.x_stride, row0, RW, valid, lane);
        gpu::sync_warp();
        if (valid > 0 || !p.weights_resident) {  // streamed weights: every wavefront meets the block barriers
            Frag h[MT][NC];
            for (int l = 0; l < L; ++l) {
                const LayerSlot w = layer_slot(ensure_layer(l), geo.layer_in(l), W, s.bias);
                Frag h2[MT][NC];
                with_activation(args.act, [&](auto A) TNN_FFM_INLINE {  // outside the chunks: one straight-line block each
                    static_for<NC>([&](auto cc) TNN_FFM_INLINE {
                        constexpr int c = decltype(cc)::value;
                        v8f acc[MT];
                        hidden_chunk<T>(acc, l == 0, c, h, x, p.x_stride, s.pin / 16, w.slot, w.ws * 2, w.bias, lane);
#pragma unroll
                        for (int m = 0; m < MT; ++m) {
                            float a[8];
#pragma unroll
                            for (int e = 0; e < 8; ++e) a[e] = act_fwd<decltype(A)::value>(acc[m][e]);
                            h2[m][c] = pack8<T>(a);
                        }
                    });
                });
#pragma unroll
                for (int m = 0; m < MT; ++m)
#pragma unroll
                    for (int k = 0; k < NC; ++k) h[m][k] = h2[m][k];
            }
            // Output layer: a lane's 8 D elements are 8 consecutive outputs of one row.
            const LayerSlot w = layer_slot(ensure_layer(L), W, s.pout, s.bias);
            const int out_bytes = args.out_f32 ? 4 : 2;
            with_activation(args.out_act, [&](auto A) TNN_FFM_INLINE {
                for (int c = 0; c < s.pout / 16; ++c) {
                    v8f acc[MT];
                    hidden_chunk<T>(acc, false, c, h, x, p.x_stride, 0, w.slot, w.ws * 2, w.bias, lane);
#pragma unroll
                    for (int m = 0; m < MT; ++m) {
                        const wmma::Coord rc = wmma::d_to_transposed(lane, 16 * c, 16 * m);
                        if (rc.row >= valid) continue;
                        float v[8];
#pragma unroll
                        for (int e = 0; e < 8; ++e) v[e] = act_fwd<decltype(A)::value>(acc[m][e]);
                        char* o = static_cast<char*>(args.out) + ((row0 + rc.row) * args.out_stride + rc.col) * out_bytes;
                        if (args.out_vec == 16 && rc.col + 8 <= s.n_out) {
                            if (args.out_f32) {
                                reinterpret_cast<float4*>(o)[0] = make_float4(v[0], v[1], v[2], v[3]);
                                reinterpret_cast<float4*>(o)[1] = make_float4(v[4], v[5], v[6], v[7]);
                            } else {
                                store8(o, pack8<T>(v));
                            }
                        } else {
#pragma unroll
                            for (int e = 0; e < 8; ++e) {
                                if (rc.col + e >= s.n_out) break;
                                if (args.out_f32) reinterpret_cast<float*>(o)[e] = v[e];
                                else reinterpret_cast<T*>(o)[e] = gpu::from_acc<T>(v[e]);
                            }
                        }
                    }
                }
            });
        }
        gpu::sync_warp();  // the input tile is rewritten by the next tile
    }
#else
    __builtin_trap();  // not a gfx12 target: the launcher never launches this
#endif  // TNN_FFM_GFX12_BODY
}

// ============================================================================================
// Backward kernel.
// ============================================================================================

// dW[out][in] += dz^T act over the tile's R rows for this wavefront's share of 16 x 16 units;
// bias[out] += column sums of dz (a WMMA against a B of ones) in the units of inputs 0..15.
// dz: [R][dz_stride] rows of dz, act: [R][act_stride] rows of the layer input. dw_layer points at
// the block's accumulators of this layer's weights (parameter index weight_offset(l) + i at
// dw_block[fragment_index(weight_offset(l) + i)]), db at its bias accumulators (plain order).
template <typename T>
__device__ __forceinline__ void dw_layer(const T* dz, int dz_stride, const T* act, int act_stride, const Shape& s,
                                         int l, int R, float* dw_block, float* db, int lane, int warp, int nw) {
    const wmma::Geometry geo{s};
    const int out = geo.layer_out(l), in = geo.layer_in(l);
    const int n_units_n = in / 16, units = (out / 16) * n_units_n;
    const int64_t w0 = geo.weight_offset(l);
    Frag ones;
    const uint32_t one = bits16<T>(1.0f) | (bits16<T>(1.0f) << 16);
#pragma unroll
    for (int i = 0; i < 4; ++i) ones.r[i] = one;
    for (int u = warp; u < units; u += nw) {
        const int m0 = (u / n_units_n) * 16, n0 = (u % n_units_n) * 16;
        const bool with_bias = db != nullptr && n0 == 0;
        v8f acc = {}, accb = {};
        for (int k0 = 0; k0 < R; k0 += 16) {
            const wmma::Coord ar = wmma::a_from_transposed(lane, m0, k0, 0);
            const wmma::Coord br = wmma::b_from_row_major(lane, k0, n0, 0);
            const Frag a = gather8(dz + int64_t(ar.row) * dz_stride + ar.col, dz_stride);
            const Frag b = gather8(act + int64_t(br.row) * act_stride + br.col, act_stride);
            wmma<T>(acc, a, b);
            if (with_bias) wmma<T>(accb, a, ones);
        }
        // Each element of dW belongs to exactly one lane of one wavefront: plain read-modify-writes.
#pragma unroll
        for (int e = 0; e < 8; ++e) {
            const wmma::Coord rc = wmma::c_coord(lane, e);
            dw_block[geo.fragment_index(w0 + int64_t(m0 + rc.row) * in + n0 + rc.col)] += acc[e];
            if (with_bias && wmma::holds_column0(lane)) db[m0 + rc.row] += accb[e];
        }
    }
}

template <typename T, int W>
__global__ void __launch_bounds__(kMaxWarps * kLanes) fully_fused_mlp_gfx12_backward_kernel(const KernelArgs args) {
#if defined(TNN_FFM_GFX12_BODY)
    constexpr int MT = 1, RW = 16 * MT, NC = W / 16;  // has_backward_m_tiles: one m16 tile on HIP
    extern __shared__ __align__(16) char smem[];
    const BackwardPlan& p = args.bwd;
    const Shape& s = args.shape;
    const wmma::Geometry geo{s};  // Shape's maths, always inlined
    const int lane = threadIdx.x % kLanes, warp = threadIdx.x / kLanes, nw = blockDim.x / kLanes;
    const int R = nw * RW, L = s.n_hidden;
    const int64_t n_tiles = (args.rows + R - 1) / R;
    const bool want_dw = args.dw_partials != nullptr || args.grads != nullptr, want_dx = args.dx != nullptr;
    const int64_t np = geo.n_params();
    char* wsm = smem + p.off_weights;
    T* X = reinterpret_cast<T*>(smem + p.off_x);
    T* stash = p.stash_in_smem ? reinterpret_cast<T*>(smem + p.off_stash)
                               : reinterpret_cast<T*>(static_cast<char*>(args.stash) + blockIdx.x * p.stash_bytes_per_block);
    T* DZ = reinterpret_cast<T*>(smem + p.off_dz);
    float* dw = p.dw_in_smem ? reinterpret_cast<float*>(smem + p.off_dw) : args.dw_partials + blockIdx.x * np;
    const int64_t tile_elems = int64_t(R) * p.act_stride, dz_elems = int64_t(R) * p.dz_stride;
    auto stash_a = [&](int l) TNN_FFM_INLINE { return stash + (int64_t(l) * p.n_stashes) * tile_elems; };
    auto stash_d = [&](int l) TNN_FFM_INLINE { return stash + (int64_t(l) * p.n_stashes + 1) * tile_elems; };
    const int dy_bytes = args.dy_f32 ? 4 : 2;

    auto ensure_layer = [&](int l) TNN_FFM_INLINE -> const char* {
        if (p.weights_resident) return wsm + geo.slot_offset(l);
        __syncthreads();
        load_slot<T>(args, l, wsm);
        __syncthreads();
        return wsm;
    };

    if (want_dw)
        for (int64_t i = threadIdx.x; i < np; i += blockDim.x) dw[i] = 0.0f;
    if (p.weights_resident)
        for (int l = 0; l <= L; ++l) load_slot<T>(args, l, wsm + geo.slot_offset(l));
    __syncthreads();

    for (int64_t tile = blockIdx.x; tile < n_tiles; tile += gridDim.x) {
        const int64_t row0 = tile * R + warp * RW;
        const int64_t left = args.rows - row0;
        const int valid = left <= 0 ? 0 : left < RW ? static_cast<int>(left) : RW;
        const int wrow = warp * RW;  // first block-local row of this wavefront
        T* x = X + wrow * p.x_stride;
        input_to_tile<T>(args, x, p.x_stride, row0, RW, valid, lane);
        gpu::sync_warp();

        // ---- Recomputed forward pass; a (and f'(z)) of hidden layers go to the stash.
        Frag h[MT][NC];
        for (int l = 0; l < L; ++l) {
            const LayerSlot w = layer_slot(ensure_layer(l), geo.layer_in(l), W, s.bias);
            T* at = stash_a(l) + int64_t(wrow) * p.act_stride;
            T* dt = p.n_stashes > 1 ? stash_d(l) + int64_t(wrow) * p.act_stride : nullptr;
            Frag h2[MT][NC];
            with_activation(args.act, [&](auto A) TNN_FFM_INLINE {
                constexpr Activation ACT = decltype(A)::value;
                static_for<NC>([&](auto cc) TNN_FFM_INLINE {
                    constexpr int c = decltype(cc)::value;
                    v8f acc[MT];
                    hidden_chunk<T>(acc, l == 0, c, h, x, p.x_stride, s.pin / 16, w.slot, w.ws * 2, w.bias, lane);
#pragma unroll
                    for (int m = 0; m < MT; ++m) {
                        float a[8];
#pragma unroll
                        for (int e = 0; e < 8; ++e) a[e] = act_fwd<ACT>(acc[m][e]);
                        h2[m][c] = pack8<T>(a);
                        store8(tile_d(at, p.act_stride, m, c, lane), h2[m][c]);
                        if constexpr (!derivative_from_output(ACT)) {
                            float d[8];
#pragma unroll
                            for (int e = 0; e < 8; ++e) d[e] = act_deriv<ACT>(acc[m][e]);
                            store8(tile_d(dt, p.act_stride, m, c, lane), pack8<T>(d));
                        }
                    }
                });
            });
#pragma unroll
            for (int m = 0; m < MT; ++m)
#pragma unroll
                for (int k = 0; k < NC; ++k) h[m][k] = h2[m][k];
        }
        {
            // Output layer: dz = round_T(dL/dy * f_out'(z)), zero for padded columns and rows past the batch.
            const LayerSlot w = layer_slot(ensure_layer(L), W, s.pout, s.bias);
            T* dz_top = DZ + (L & 1) * dz_elems + int64_t(wrow) * p.dz_stride;
            with_activation(args.out_act, [&](auto A) TNN_FFM_INLINE {
                for (int c = 0; c < s.pout / 16; ++c) {
                    v8f acc[MT];
                    hidden_chunk<T>(acc, false, c, h, x, p.x_stride, 0, w.slot, w.ws * 2, w.bias, lane);
#pragma unroll
                    for (int m = 0; m < MT; ++m) {
                        const wmma::Coord rc = wmma::d_to_transposed(lane, 16 * c, 16 * m);
                        float d[8];
#pragma unroll
                        for (int e = 0; e < 8; ++e) {
                            d[e] = 0.0f;
                            if (rc.row < valid && rc.col + e < s.n_out) {
                                const int64_t o = (row0 + rc.row) * args.dy_stride + rc.col + e;
                                const float g = dy_bytes == 4 ? static_cast<const float*>(args.dy)[o]
                                                              : gpu::to_acc(static_cast<const T*>(args.dy)[o]);
                                d[e] = g * act_deriv<decltype(A)::value>(acc[m][e]);
                            }
                        }
                        store8(tile_d(dz_top, p.dz_stride, m, c, lane), pack8<T>(d));
                    }
                }
            });
        }

        // ---- Backward through the layers.
        Frag dzr[MT][NC];  // dz of the current hidden layer as B fragments (K = W)
        for (int l = L; l >= 0; --l) {
            const T* dz_cur = DZ + (l & 1) * dz_elems;
            const T* act_src = l > 0 ? stash_a(l - 1) : X;
            const int act_stride = l > 0 ? p.act_stride : p.x_stride;
            __syncthreads();  // every wavefront's dz rows (and stash rows) of this layer are written
            if (want_dw)
                dw_layer<T>(dz_cur, p.dz_stride, act_src, act_stride, s, l, R, dw, s.bias ? dw + geo.bias_offset(l) : nullptr,
                            lane, warp, nw);
            if (l == 0 && !want_dx) break;

            // dL/da_{l-1}^T = W_l^T dz_l^T: A = W_l^T gathered from the [out][in + 8] slot.
            const char* slot = (l == L) ? (p.weights_resident ? wsm + geo.slot_offset(l) : wsm) : ensure_layer(l);
            const int ws = geo.layer_in(l) + 8;
            const T* dz_rows = dz_cur + int64_t(wrow) * p.dz_stride;
            auto chain_chunk = [&](int c, v8f (&acc)[MT]) TNN_FFM_INLINE {
#pragma unroll
                for (int m = 0; m < MT; ++m) acc[m] = v8f{};
                if (l == L) {
                    for (int k = 0; k < s.pout / 16; ++k) {
                        const Frag a = weight_t_a<T>(slot, ws, c, k, lane);
#pragma unroll
                        for (int m = 0; m < MT; ++m) wmma<T>(acc[m], a, tile_b(dz_rows, p.dz_stride, m, k, lane));
                    }
                } else {
#pragma unroll
                    for (int k = 0; k < NC; ++k) {
                        const Frag a = weight_t_a<T>(slot, ws, c, k, lane);
#pragma unroll
                        for (int m = 0; m < MT; ++m) wmma<T>(acc[m], a, dzr[m][k]);
                    }
                }
            };
            if (l > 0) {
                // dz_{l-1} = round_T(dL/da_{l-1} * f'(z_{l-1})): f' from the stash.
                const T* at = stash_a(l - 1) + int64_t(wrow) * p.act_stride;
                const T* dt = p.n_stashes > 1 ? stash_d(l - 1) + int64_t(wrow) * p.act_stride : nullptr;
                T* zt = DZ + ((l - 1) & 1) * dz_elems + int64_t(wrow) * p.dz_stride;
                Frag dzn[MT][NC];
                // f'(z_{l-1}): 1 (None), read off a (ReLU, LeakyReLU: a > 0 <=> z > 0), or the stored f'(z).
                // The choice is made once, outside the chunks.
                const float lo = args.act == Activation::ReLU ? 0.0f : 0.01f;
                auto chain_layer = [&](auto kind) TNN_FFM_INLINE {
                    constexpr int KIND = decltype(kind)::value;
                    static_for<NC>([&](auto cc) TNN_FFM_INLINE {
                        constexpr int c = decltype(cc)::value;
                        v8f acc[MT];
                        chain_chunk(c, acc);
#pragma unroll
                        for (int m = 0; m < MT; ++m) {
                            float d[8];
                            if constexpr (KIND == 0) {
#pragma unroll
                                for (int e = 0; e < 8; ++e) d[e] = 1.0f;
                            } else if constexpr (KIND == 1) {
                                float a[8];
                                unpack8<T>(load8(tile_d(at, p.act_stride, m, c, lane)), a);
#pragma unroll
                                for (int e = 0; e < 8; ++e) d[e] = a[e] > 0.0f ? 1.0f : lo;
                            } else {
                                unpack8<T>(load8(tile_d(dt, p.act_stride, m, c, lane)), d);
                            }
                            float v[8];
#pragma unroll
                            for (int e = 0; e < 8; ++e) v[e] = acc[m][e] * d[e];
                            dzn[m][c] = pack8<T>(v);
                            store8(tile_d(zt, p.dz_stride, m, c, lane), dzn[m][c]);
                        }
                    });
                };
                if (args.act == Activation::None) chain_layer(std::integral_constant<int, 0>{});
                else if (derivative_from_output(args.act)) chain_layer(std::integral_constant<int, 1>{});
                else chain_layer(std::integral_constant<int, 2>{});
#pragma unroll
                for (int m = 0; m < MT; ++m)
#pragma unroll
                    for (int k = 0; k < NC; ++k) dzr[m][k] = dzn[m][k];
            } else {
                // dL/dx = (W_0^T dz_0^T)^T, first n_in columns, in the input dtype.
                for (int c = 0; c < s.pin / 16; ++c) {
                    v8f acc[MT];
                    chain_chunk(c, acc);
#pragma unroll
                    for (int m = 0; m < MT; ++m) {
                        const wmma::Coord rc = wmma::d_to_transposed(lane, 16 * c, 16 * m);
                        if (rc.row >= valid) continue;
#pragma unroll
                        for (int e = 0; e < 8; ++e) {
                            if (rc.col + e >= s.n_in) break;
                            const int64_t o = (row0 + rc.row) * args.dx_stride + rc.col + e;
                            if (args.in_f32) static_cast<float*>(args.dx)[o] = acc[m][e];
                            else static_cast<T*>(args.dx)[o] = gpu::from_acc<T>(acc[m][e]);
                        }
                    }
                }
            }
        }
        __syncthreads();  // the tile's stash, dz and input rows are read by every wavefront until here
    }

    if (want_dw && args.grads) {
        // A single block (the launcher's choice for small batches): its accumulators are the whole
        // sum; dL/dparams in parameter order and the network dtype, as the reduction would write it.
        __syncthreads();
        T* g = static_cast<T*>(args.grads);
        for (int64_t i = threadIdx.x; i < np; i += blockDim.x) {
            float v = dw[geo.fragment_index(i)];
            if (args.accumulate) v += gpu::to_acc(g[i]);
            g[i] = gpu::from_acc<T>(v);
        }
    } else if (want_dw && p.dw_in_smem) {  // the block's accumulators -> its global slot (same order)
        __syncthreads();
        float* dst = args.dw_partials + blockIdx.x * np;
        for (int64_t i = threadIdx.x; i < np; i += blockDim.x) dst[i] = dw[i];
    }
#else
    __builtin_trap();  // not a gfx12 target: the launcher never launches this
#endif  // TNN_FFM_GFX12_BODY
}

}  // namespace gfx12

// ============================================================================================
// Host side of one instantiation. AMD has no opt-in for dynamic LDS (a workgroup may use up to
// the device's sharedMemPerBlock), so the *_info calls only read the kernel's attributes. One
// kernel per pass serves every activation (`relu` picks an NVIDIA-only flavour).
// ============================================================================================

template <typename H> using device_of = gpu::device_t<H>;

namespace gfx12 {
// The kernels load 16 bytes at a time from every 16-bit tile of the plan: rows of 8k elements.
inline void check_plan_strides(const char* pass, std::initializer_list<int> strides) {
    for (int s : strides)
        if (s % 8 != 0)
            throw Error(msg("FullyFusedMLP (gfx12): the ", pass, " plan has a tile row of ", s,
                            " elements; the kernels need multiples of 8 (16 bytes)"));
}
}  // namespace gfx12

template <typename H, int W> KernelInfo Kernels<H, W>::forward_info(int, bool) {
    auto* k = gfx12::fully_fused_mlp_gfx12_forward_kernel<device_of<H>, W>;
    gpu_func_attributes_t a;
    TNN_GPU_CHECK(gpu_func_get_attributes(&a, k));
    return KernelInfo{a.numRegs, int(a.localSizeBytes), kMaxWarps};
}

template <typename H, int W> KernelInfo Kernels<H, W>::backward_info(int, bool, int) {
    auto* k = gfx12::fully_fused_mlp_gfx12_backward_kernel<device_of<H>, W>;
    gpu_func_attributes_t a;
    TNN_GPU_CHECK(gpu_func_get_attributes(&a, k));
    return KernelInfo{a.numRegs, int(a.localSizeBytes), kMaxWarps};
}

template <typename H, int W> void Kernels<H, W>::forward(const KernelArgs& args, int grid, void* stream) {
    if (args.fwd.rows_per_warp != 16 * forward_m_tiles(W))
        throw Error(msg("FullyFusedMLP (gfx12): the forward plan's ", args.fwd.rows_per_warp,
                        " rows per wavefront do not match the kernel's ", 16 * forward_m_tiles(W)));
    gfx12::check_plan_strides("forward", {args.fwd.x_stride});
    gfx12::fully_fused_mlp_gfx12_forward_kernel<device_of<H>, W>
        <<<grid, args.fwd.n_warps * gfx12::kLanes, args.fwd.smem_bytes, static_cast<gpu_stream_t>(stream)>>>(args);
    TNN_GPU_CHECK_LAUNCH("fully_fused_mlp_gfx12_forward_kernel");
}

template <typename H, int W> void Kernels<H, W>::backward(const KernelArgs& args, int grid, void* stream) {
    if (args.bwd.rows_per_warp != 16)
        throw Error(msg("FullyFusedMLP (gfx12): the backward plan's ", args.bwd.rows_per_warp,
                        " rows per wavefront do not match the kernel's 16"));
    if (!args.bwd.dy_in_smem)
        throw Error("FullyFusedMLP (gfx12): the backward kernel stages dL/doutput; the plan reads it in place");
    if (args.bwd.wgmma)
        throw Error("FullyFusedMLP (gfx12): a plan for NVIDIA's wgmma backward kernel reached the gfx12 kernels");
    gfx12::check_plan_strides("backward", {args.bwd.x_stride, args.bwd.act_stride, args.bwd.dz_stride});
    gfx12::fully_fused_mlp_gfx12_backward_kernel<device_of<H>, W>
        <<<grid, args.bwd.n_warps * gfx12::kLanes, args.bwd.smem_bytes, static_cast<gpu_stream_t>(stream)>>>(args);
    TNN_GPU_CHECK_LAUNCH("fully_fused_mlp_gfx12_backward_kernel");
}

}  // namespace tnn::ffm
