// FullyFusedMLP kernels (NVIDIA sm_80+: mma.sync m16n8k16, ldmatrix, cp.async): the whole MLP in
// one kernel per pass. Included only by src/networks/instantiations/fully_fused_w*_*.cu, one
// (dtype, width) per translation unit; fully_fused_mlp.cu dispatches to them.
//
// Forward (inference and training): persistent blocks; each warp owns 16*MT rows per tile. Weights
// of all layers sit in shared memory ([out][in + 8], loaded once per block with cp.async) and feed
// the MMAs through ldmatrix; activations never leave registers between layers (the fp32 C fragments
// of a layer are the A fragments of the next once packed to 16 bits, see mma_layout.h). Input rows
// of the next tile stream in with cp.async while the current tile computes; outputs leave through a
// per-warp staging tile with 16-byte stores. No block-wide synchronisation in the main loop.
//
// Backward: recomputes the forward pass of each tile (reading the input again is cheaper than
// storing activations) and keeps a, f'(z) of every hidden layer in a shared-memory stash; then walks
// the layers down: dz of the block's rows goes to shared memory, one __syncthreads, every warp adds
// dz^T a over the tile for its share of dW (ldmatrix.trans on both operands) into fp32 accumulators
// private to the block, and chains dz through W^T (ldmatrix.trans) in registers. Each block writes
// its accumulators once; fully_fused_mlp_reduce_kernel sums the blocks in a fixed order (a single
// block writes dL/dparams itself). The wgmma flavours of the 12-warp width-64 and the 8-warp
// width-128 kernels (sm_90a, template WG; fully_fused_mlp.h) instead keep their tiles swizzled and
// compute dW by wgmma, in jobs of 64 rows x 32 columns of a layer over all the block's rows, each job by
// one warpgroup, added to the block's slot in global memory; at width 128 the hidden layers' forward
// recompute and chain also go through wgmma (their weights as swizzled atoms, load_slot_sw).
//
// Each kernel comes in two flavours (template RELU, see with_hidden_activation): compiled for ReLU
// hidden layers with a linear output, or switching the activation at run time.
#pragma once

#include "gpu/gpu.h"
#include "networks/activation.h"
#include "networks/fully_fused_mlp.h"
#include "networks/mma_layout.h"

#include <cmath>
#include <cstdint>
#include <type_traits>

#if !defined(TNN_WITH_CUDA)
#error "fully_fused_mlp_kernels.cuh uses NVIDIA tensor-core PTX; include it only in CUDA builds"
#endif  // !TNN_WITH_CUDA

// Until src/gpu/gpu.h maps them (requested): kernel attributes for the launch plan.
#ifndef gpu_func_set_attribute
#define gpu_func_set_attribute cudaFuncSetAttribute
#define gpu_func_get_attributes cudaFuncGetAttributes
#define gpu_func_attribute_max_dynamic_shared_memory_size cudaFuncAttributeMaxDynamicSharedMemorySize
using gpu_func_attributes_t = cudaFuncAttributes;
#endif  // gpu_func_set_attribute

namespace tnn::ffm {

using mma::X4Pattern;

// ============================================================================================
// PTX wrappers. All are volatile: they read shared memory that plain stores wrote, and the
// compiler must neither merge them across barriers nor move them into divergent code.
// ============================================================================================

__device__ __forceinline__ uint32_t smem_addr(const void* p) { return static_cast<uint32_t>(__cvta_generic_to_shared(p)); }

template <bool TRANS> __device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t addr) {
    if constexpr (TRANS)
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                     : "r"(addr));
    else
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                     : "r"(addr));
}

// D = A * B + D, A 16x16 and B 16x8 in T (fp16 or bf16), D fp32.
template <typename T>
__device__ __forceinline__ void mma_16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    if constexpr (std::is_same_v<T, gpu_half>)
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                     "{%0,%1,%2,%3};\n"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    else
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                     "{%0,%1,%2,%3};\n"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Asynchronous global -> shared copy of BYTES (4, 8 or 16); with valid == false nothing is read and
// the destination is zero-filled (src-size 0).
template <int BYTES> __device__ __forceinline__ void cp_async(uint32_t dst, const void* src, bool valid) {
    const int n = valid ? BYTES : 0;
    const size_t g = __cvta_generic_to_global(src);
    if constexpr (BYTES == 16)
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(g), "r"(n) : "memory");
    else
        asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;\n" ::"r"(dst), "l"(g), "n"(BYTES), "r"(n)
                     : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_all;\n" ::: "memory"); }

// ============================================================================================
// The wgmma kernels' tiles (wgmma_backward_shape): 16-bit atoms [rows][64] with the 128-byte swizzle,
// the 16-byte chunk index of a row XORed with row % 8, from 1024-byte aligned bases. The template flag
// SW says which layout a tile has: 0, the padded row-major layout of every other kernel (the same
// expressions as before SW existed); 1, one atom (width 64: 64 columns); above 1, two atoms side by
// side, columns 64..127 SW bytes after columns 0..63 (width 128: SW = the block's 128 rows x 128 bytes).
// Wherever a function below takes SW, columns past 63 need SW > 1.
// ============================================================================================

using mma::swizzle128;
// Element (row, col) of a tile with `stride` elements per row (64 per atom when SW).
template <int SW, typename T> __device__ __forceinline__ T* tile_at(T* tile, int stride, int row, int col) {
    if constexpr (SW > 1) {
        using C = std::conditional_t<std::is_const_v<T>, const char, char>;
        return reinterpret_cast<T*>(reinterpret_cast<C*>(tile) + (col >> 6) * SW +
                                    swizzle128((row * 64 + (col & 63)) * 2));
    } else if constexpr (SW == 1) {
        using C = std::conditional_t<std::is_const_v<T>, const char, char>;
        return reinterpret_cast<T*>(reinterpret_cast<C*>(tile) + swizzle128((row * 64 + col) * 2));
    } else {
        return tile + row * stride + col;
    }
}

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define TNN_FFM_WGMMA_BUILT 1  // this device pass assembles wgmma (sm_90a)
#else
#define TNN_FFM_WGMMA_BUILT 0
#endif
// The host knows whether the module the driver loads on an sm_90 device holds the wgmma instructions
// from TNN_CUDA_WGMMA, which CMake defines when the architectures include sm_90a machine code and no
// plain sm_90 machine code (then the sm_90a code is the only code for such a device; other devices
// never take the kernel). A device-side flag read back at run time would need a copy, which a CUDA
// graph capture in progress refuses.

// wgmma's ordering instructions (PTX ISA 9.7.15): a no-op without sm_90a code, where the MMA and the
// reduction below trap instead (the planner never picks the kernel then).
#if TNN_FFM_WGMMA_BUILT
#define TNN_FFM_WG_ASM(...) asm volatile(__VA_ARGS__)
#else
#define TNN_FFM_WG_ASM(...) ((void)0)
#endif
__device__ __forceinline__ void wgmma_fence() { TNN_FFM_WG_ASM("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { TNN_FFM_WG_ASM("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
// Waits until at most PENDING committed groups are in flight.
// Pins registers the next wgmmas accumulate into (or read) in place across the fence / wait: the
// compiler may otherwise move their initialisation past wgmma.fence (CUTLASS's warpgroup_fence_operand).
template <int N> __device__ __forceinline__ void wgmma_fence_operand(float (&d)[N]) {
#pragma unroll
    for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i])::"memory");
}
template <int PENDING> __device__ __forceinline__ void wgmma_wait() {
    TNN_FFM_WG_ASM("wgmma.wait_group.sync.aligned %0;\n" ::"n"(PENDING) : "memory");
}
// *p += a (4 floats, 16-byte aligned, global memory) without waiting for the old values: the slot's
// read-modify-write done in L2 (red.global.add.v4.f32, sm_90). Each element of a slot has one writer
// thread, so the adds to it happen in that thread's program order, each rounded to nearest as the
// load-add-store it replaces (which left 30% of the wgmma kernel's stall samples waiting for the loads:
// run 35 of 2026-11-30); unlike it, subnormal operands and sums are flushed to zero (PTX's rule for f32
// reductions): at most 2^-126 absolute per add, i.e. (adds to the element) x 2^-126 over a sum.
__device__ __forceinline__ void red_add4(float* p, const float (&a)[4]) {
#if TNN_FFM_WGMMA_BUILT
    asm volatile("red.global.add.v4.f32 [%0], {%1, %2, %3, %4};\n" ::"l"(p), "f"(a[0]), "f"(a[1]), "f"(a[2]), "f"(a[3])
                 : "memory");
#else
    (void)p, (void)a;
    __trap();
#endif
}
// Generic-proxy shared stores made visible to the tensor cores' (async proxy) reads after the next barrier.
__device__ __forceinline__ void fence_proxy_async_smem() { TNN_FFM_WG_ASM("fence.proxy.async.shared::cta;\n" ::: "memory"); }
// Shared-memory matrix descriptors of swizzled tiles: the byte address / 16 in bits 0-13, no
// leading-dimension offset (unused with 64 columns: the probe gave the same result for any value), 1024
// bytes between 8-row groups (SBO, bits 32-45, in 16-byte units) and the 128-byte swizzle (bits 62-63
// = 1). Adding 128 moves a descriptor 16 rows (2048 bytes) on: the address field cannot carry into the
// others below 256 KiB of shared memory. wgmma_desc_lo gives the address field; kWgmmaDescHi | it the descriptor.
constexpr uint64_t kWgmmaDescHi = uint64_t((1024u >> 4) | (1u << 30)) << 32;
__device__ __forceinline__ uint32_t wgmma_desc_lo(uint32_t addr) { return (addr & 0x3FFFF) >> 4; }
// d (64 x 32 fp32 over the warpgroup; this warp's rows 16 (warp % 4) .. + 15 in mma.sync C-fragment
// order, n8 tile j in d[4 j .. 4 j + 3]) += A * B, A the first tile's transpose and B the second tile's
// rows, from descriptors of [16 rows][64] swizzled tiles (M-major A, N-major B; B may start 64 bytes into
// its rows for columns 32..63: the swizzle applies to the final addresses). m64n32, not m64n64: the
// 32 accumulators of m64n64 made ptxas spill in the 168-register kernel.
template <typename T>
__device__ __forceinline__ void wgmma_m64n32k16_tt(float (&d)[16], uint64_t da, uint64_t db) {
#if TNN_FFM_WGMMA_BUILT
#define TNN_FFM_WG_D8(o)                                                                                         \
    "+f"(d[o]), "+f"(d[o + 1]), "+f"(d[o + 2]), "+f"(d[o + 3]), "+f"(d[o + 4]), "+f"(d[o + 5]), "+f"(d[o + 6]), \
        "+f"(d[o + 7])
#define TNN_FFM_WG_D16 "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15"
    if constexpr (std::is_same_v<T, gpu_half>)
        asm volatile("wgmma.mma_async.sync.aligned.m64n32k16.f32.f16.f16 {" TNN_FFM_WG_D16 "}, %16, %17, 1, 1, 1, 1, 1;\n"
                     : TNN_FFM_WG_D8(0), TNN_FFM_WG_D8(8)
                     : "l"(da), "l"(db));
    else
        asm volatile("wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 {" TNN_FFM_WG_D16 "}, %16, %17, 1, 1, 1, 1, 1;\n"
                     : TNN_FFM_WG_D8(0), TNN_FFM_WG_D8(8)
                     : "l"(da), "l"(db));
#undef TNN_FFM_WG_D8
#undef TNN_FFM_WG_D16
#else
    (void)d, (void)da, (void)db;
    __trap();
#endif
}

// d (64 x 64 fp32 over the warpgroup; this warp's rows 16 (warp % 4) .. + 15 in mma.sync C-fragment
// order, n8 tile j in d[4 j .. 4 j + 3]) += A * B, A this warp's 16 rows of one k-step as the mma.sync
// A fragment a (registers), B 16 x 64 from a descriptor of a swizzled atom: K-major (TNSPB 0: the
// forward's B = W^T, W's rows) or N-major (TNSPB 1: the chain's B = W). The width-128 wgmma kernel's
// hidden layers (bench/wgmma_probe.cu: the same bits as mma.sync on the same operands).
template <typename T, int TNSPB>
__device__ __forceinline__ void wgmma_m64n64k16_rs(float (&d)[32], const uint32_t (&a)[4], uint64_t db) {
#if TNN_FFM_WGMMA_BUILT
#define TNN_FFM_WG_D8(o)                                                                                         \
    "+f"(d[o]), "+f"(d[o + 1]), "+f"(d[o + 2]), "+f"(d[o + 3]), "+f"(d[o + 4]), "+f"(d[o + 5]), "+f"(d[o + 6]), \
        "+f"(d[o + 7])
#define TNN_FFM_WG_D32                                                                                            \
    "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28," \
    "%29,%30,%31"
    if constexpr (std::is_same_v<T, gpu_half>)
        asm volatile("wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 {" TNN_FFM_WG_D32
                     "}, {%32,%33,%34,%35}, %36, 1, 1, 1, %37;\n"
                     : TNN_FFM_WG_D8(0), TNN_FFM_WG_D8(8), TNN_FFM_WG_D8(16), TNN_FFM_WG_D8(24)
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "n"(TNSPB));
    else
        asm volatile("wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {" TNN_FFM_WG_D32
                     "}, {%32,%33,%34,%35}, %36, 1, 1, 1, %37;\n"
                     : TNN_FFM_WG_D8(0), TNN_FFM_WG_D8(8), TNN_FFM_WG_D8(16), TNN_FFM_WG_D8(24)
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "n"(TNSPB));
#undef TNN_FFM_WG_D8
#undef TNN_FFM_WG_D32
#else
    (void)d, (void)a, (void)db;
    __trap();
#endif
}

// ============================================================================================
// 16-bit pairs: the low half holds the element with the lower column index (PTX fragment order).
// ============================================================================================

template <typename T> __device__ __forceinline__ uint32_t pack2(float lo, float hi) {
    uint32_t u;
    if constexpr (std::is_same_v<T, gpu_half>) {
        const __half2 h = __floats2half2_rn(lo, hi);
        memcpy(&u, &h, 4);
    } else {
        const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
        memcpy(&u, &h, 4);
    }
    return u;
}
template <typename T> __device__ __forceinline__ float2 unpack2(uint32_t u) {
    if constexpr (std::is_same_v<T, gpu_half>) {
        __half2 h;
        memcpy(&h, &u, 4);
        return __half22float2(h);
    } else {
        __nv_bfloat162 h;
        memcpy(&h, &u, 4);
        return __bfloat1622float2(h);
    }
}

// activation.h's formulas (written once, for the CPU reference too) evaluated with the special
// function unit: exp, sin, cos, log through __expf/__sinf/__cosf/__logf and division by
// __fdividef. Their errors (~2^-21 relative, or absolute for sin/cos over the |z| < 10^3 that
// networks produce) are ~2^10 times below fp16/bf16 rounding, which every activation goes through
// or is compared at; the accurate library versions would add a slow path per element of every
// epilogue (measured: 20 s of ptxas time per kernel for Sine alone, and spills). tanh keeps tanhf:
// the hardware tanh.approx is only good to 2^-11.
struct FastFloat {
    float v;
    FastFloat() = default;
    template <typename S> TNN_HD constexpr explicit FastFloat(S x) : v(static_cast<float>(x)) {}
};
TNN_HD inline FastFloat operator+(FastFloat a, FastFloat b) { return FastFloat(a.v + b.v); }
TNN_HD inline FastFloat operator-(FastFloat a, FastFloat b) { return FastFloat(a.v - b.v); }
TNN_HD inline FastFloat operator*(FastFloat a, FastFloat b) { return FastFloat(a.v * b.v); }
TNN_HD inline FastFloat operator-(FastFloat a) { return FastFloat(-a.v); }
TNN_HD inline bool operator>(FastFloat a, FastFloat b) { return a.v > b.v; }
#if defined(__CUDA_ARCH__)
__device__ inline FastFloat operator/(FastFloat a, FastFloat b) { return FastFloat(__fdividef(a.v, b.v)); }
__device__ inline FastFloat exp(FastFloat a) { return FastFloat(__expf(a.v)); }
__device__ inline FastFloat sin(FastFloat a) { return FastFloat(__sinf(a.v)); }
__device__ inline FastFloat cos(FastFloat a) { return FastFloat(__cosf(a.v)); }
__device__ inline FastFloat log1p(FastFloat a) { return FastFloat(__logf(1.0f + a.v)); }
__device__ inline FastFloat sqrt(FastFloat a) { return FastFloat(sqrtf(a.v)); }
__device__ inline FastFloat tanh(FastFloat a) { return FastFloat(tanhf(a.v)); }
#else
inline FastFloat operator/(FastFloat a, FastFloat b) { return FastFloat(a.v / b.v); }
inline FastFloat exp(FastFloat a) { return FastFloat(std::exp(a.v)); }
inline FastFloat sin(FastFloat a) { return FastFloat(std::sin(a.v)); }
inline FastFloat cos(FastFloat a) { return FastFloat(std::cos(a.v)); }
inline FastFloat log1p(FastFloat a) { return FastFloat(std::log1p(a.v)); }
inline FastFloat sqrt(FastFloat a) { return FastFloat(std::sqrt(a.v)); }
inline FastFloat tanh(FastFloat a) { return FastFloat(std::tanh(a.v)); }
#endif  // __CUDA_ARCH__

template <Activation A> __device__ __forceinline__ float act_fwd(float z) { return activation_forward(A, FastFloat(z)).v; }
template <Activation A> __device__ __forceinline__ float act_deriv(float z) { return activation_derivative(A, FastFloat(z)).v; }

// The activation as a compile-time constant inside f, switched once per 16-column chunk so the
// elementwise loops carry no per-element branch.
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

// The kernels come in two flavours: RELU = true is compiled for ReLU hidden layers and a linear
// output (the common configuration, tcnn's default) and has no switch at all, so the unrolled chunk
// loops are straight-line code whose MMA chains ptxas can interleave; RELU = false switches at run
// time per 16-column chunk (any activation pair, one copy of the MMA loops).
template <bool RELU, typename F> __device__ __forceinline__ void with_hidden_activation(Activation a, F&& f) {
    if constexpr (RELU) f(std::integral_constant<Activation, Activation::ReLU>{});
    else with_activation(a, f);
}
template <bool RELU, typename F> __device__ __forceinline__ void with_output_activation(Activation a, F&& f) {
    if constexpr (RELU) f(std::integral_constant<Activation, Activation::None>{});
    else with_activation(a, f);
}

// Both halves of the 16-bit pair v where the matching half of a is positive, +0 elsewhere: the ReLU
// derivative applied to an already rounded dz pair with one compare and one AND, instead of unpacking
// a, comparing and multiplying in fp32. Equal to pack2(x * (a > 0), ...) except that a masked element
// is always +0 (never -0, and never NaN from an fp32 inf or NaN times 0), which no sum of products
// can tell apart.
template <typename T> __device__ __forceinline__ uint32_t mask_positive2(uint32_t v, uint32_t a) {
    if constexpr (std::is_same_v<T, gpu_half>) {
        __half2 ha;
        memcpy(&ha, &a, 4);
        return v & __hgt2_mask(ha, __float2half2_rn(0.0f));
    } else {
        __nv_bfloat162 ha;
        memcpy(&ha, &a, 4);
        return v & __hgt2_mask(ha, __float2bfloat162_rn(0.0f));
    }
}

// ============================================================================================
// Row movement between global memory and per-warp shared-memory tiles.
// ============================================================================================

// Whether the row copy loops of the width-W kernels take the loop without the column-wrap test
// where the copies per row divide 32 (STRAIGHT below). Measured on the H200 (run 15 of 2026-11-30,
// both kernels): faster at width 16 (inference 0.105 -> 0.098 ms) and for 64->64->64 (forward +
// backward 1.686 -> 1.641), within 4% either way for 32->64->16, and 4-9% slower at width 128
// (inference 0.479 -> 0.503, the 2x target lost): so not at width 128.
template <int W> constexpr bool kStraightCopies = W <= 64;

// Issues asynchronous copies of n_rows rows of row_bytes bytes (V bytes at a time); rows >= n_valid
// are zero-filled without reading. V == 2 (an odd 16-bit width or pitch) falls back to plain loads.
template <int V, bool STRAIGHT>
__device__ __forceinline__ void rows_to_smem_v(char* dst, int dst_stride, const char* src, int64_t src_stride,
                                               const char* any_valid_src, int row_bytes, int n_rows, int n_valid,
                                               int lane) {
    const int cpr = row_bytes / V;  // V is a power of two: a shift
    if (cpr == 0) return;
    const uint32_t d0 = smem_addr(dst);
    auto copy = [&](const GridWalk2<int64_t, int>& g) {
        const bool valid = g.r < n_valid;
        const char* s = valid ? src + g.a : any_valid_src;
        if constexpr (V >= 4)
            cp_async<V>(d0 + g.b, s, valid);
        else
            *reinterpret_cast<uint16_t*>(dst + g.b) = valid ? *reinterpret_cast<const uint16_t*>(s) : uint16_t(0);
    };
    GridWalk2<int64_t, int> g(lane, cpr, src_stride, V, dst_stride, V);
    if (!STRAIGHT || g.wraps()) {
#pragma unroll 2
        for (; g.r < n_rows; g.next()) copy(g);
    } else {  // the copies per row divide 32 (e.g. 32 fp32 inputs): every lane stays in its column
#pragma unroll 2
        for (; g.r < n_rows; g.next_row()) copy(g);
    }
}
template <bool STRAIGHT>
__device__ __forceinline__ void rows_to_smem(int vec, char* dst, int dst_stride, const char* src, int64_t src_stride,
                                             const char* any_valid_src, int row_bytes, int n_rows, int n_valid,
                                             int lane) {
    switch (vec) {
        case 16: rows_to_smem_v<16, STRAIGHT>(dst, dst_stride, src, src_stride, any_valid_src, row_bytes, n_rows, n_valid, lane); break;
        case 8: rows_to_smem_v<8, STRAIGHT>(dst, dst_stride, src, src_stride, any_valid_src, row_bytes, n_rows, n_valid, lane); break;
        case 4: rows_to_smem_v<4, STRAIGHT>(dst, dst_stride, src, src_stride, any_valid_src, row_bytes, n_rows, n_valid, lane); break;
        default: rows_to_smem_v<2, STRAIGHT>(dst, dst_stride, src, src_stride, any_valid_src, row_bytes, n_rows, n_valid, lane); break;
    }
}

template <int V>
__device__ __forceinline__ void rows_to_global_v(char* dst, int64_t dst_stride, const char* src, int src_stride,
                                                 int row_bytes, int n_rows, int lane) {
    using Vec = std::conditional_t<V == 16, uint4, std::conditional_t<V == 8, uint2, std::conditional_t<V == 4, uint32_t, uint16_t>>>;
    const int cpr = row_bytes / V;
    if (cpr == 0) return;
#pragma unroll 2
    for (GridWalk2<int64_t, int> g(lane, cpr, dst_stride, V, src_stride, V); g.r < n_rows; g.next())
        *reinterpret_cast<Vec*>(dst + g.a) = *reinterpret_cast<const Vec*>(src + g.b);
}
__device__ __forceinline__ void rows_to_global(int vec, char* dst, int64_t dst_stride, const char* src, int src_stride,
                                               int row_bytes, int n_rows, int lane) {
    switch (vec) {
        case 16: rows_to_global_v<16>(dst, dst_stride, src, src_stride, row_bytes, n_rows, lane); break;
        case 8: rows_to_global_v<8>(dst, dst_stride, src, src_stride, row_bytes, n_rows, lane); break;
        case 4: rows_to_global_v<4>(dst, dst_stride, src, src_stride, row_bytes, n_rows, lane); break;
        default: rows_to_global_v<2>(dst, dst_stride, src, src_stride, row_bytes, n_rows, lane); break;
    }
}

// One step of raw_to_tile_e: E elements at src (fp32 or T) to d (T).
template <typename T, bool F32, int E> __device__ __forceinline__ void raw_to_tile_step(const char* src, T* d) {
    if constexpr (F32) {
        if constexpr (E == 4) {
            const float4 v = *reinterpret_cast<const float4*>(src);
            *reinterpret_cast<uint2*>(d) = make_uint2(pack2<T>(v.x, v.y), pack2<T>(v.z, v.w));
        } else if constexpr (E == 2) {
            const float2 v = *reinterpret_cast<const float2*>(src);
            *reinterpret_cast<uint32_t*>(d) = pack2<T>(v.x, v.y);
        } else {
            *d = gpu::from_acc<T>(*reinterpret_cast<const float*>(src));
        }
    } else {
        if constexpr (E == 8) *reinterpret_cast<uint4*>(d) = *reinterpret_cast<const uint4*>(src);
        else if constexpr (E == 2) *reinterpret_cast<uint32_t*>(d) = *reinterpret_cast<const uint32_t*>(src);
        else *d = *reinterpret_cast<const T*>(src);
    }
}

// Converts n_rows raw input rows (fp32 or T, as staged) into the 16-bit tile [row][x_stride]:
// columns < n_in from the input, columns n_in..pin-1 = pad_value (tcnn's padding lanes). E
// elements per step (4 fp32 -> 8 bytes, 8 T -> 16 bytes, 2, or 1); unrolled so that the shared
// memory loads of several steps are in flight together.
// SW: the tile is swizzled (each step's E elements stay inside one 16-byte chunk).
template <typename T, bool F32, int E, bool STRAIGHT, int SW>
__device__ __forceinline__ void raw_to_tile_e(const char* raw, int raw_stride, T* x, int x_stride, int n_rows, int n_in,
                                              int lane) {
    const int q = n_in / E;  // E is a power of two: a shift
    char* xb = reinterpret_cast<char*>(x);
    auto dst = [&](int b) { return reinterpret_cast<T*>(xb + (SW ? swizzle128(b) : b)); };
    GridWalk2<int, int> g(lane, q, raw_stride, E * (F32 ? 4 : 2), x_stride * 2, E * 2);
    if (!STRAIGHT || g.wraps()) {
#pragma unroll 4
        for (; g.r < n_rows; g.next()) raw_to_tile_step<T, F32, E>(raw + g.a, dst(g.b));
    } else {  // the steps per row divide 32 (e.g. 32 fp32 inputs): every lane stays in its column
#pragma unroll 4
        for (; g.r < n_rows; g.next_row()) raw_to_tile_step<T, F32, E>(raw + g.a, dst(g.b));
    }
}
template <typename T, bool STRAIGHT, int SW = 0>
__device__ __forceinline__ void raw_to_tile(const char* raw, int raw_stride, T* x, int x_stride, int n_rows, int n_in,
                                            int pin, bool in_f32, float pad_value, int lane) {
    if (in_f32) {
        if ((n_in & 3) == 0) raw_to_tile_e<T, true, 4, STRAIGHT, SW>(raw, raw_stride, x, x_stride, n_rows, n_in, lane);
        else if ((n_in & 1) == 0) raw_to_tile_e<T, true, 2, STRAIGHT, SW>(raw, raw_stride, x, x_stride, n_rows, n_in, lane);
        else raw_to_tile_e<T, true, 1, STRAIGHT, SW>(raw, raw_stride, x, x_stride, n_rows, n_in, lane);
    } else {
        if ((n_in & 7) == 0) raw_to_tile_e<T, false, 8, STRAIGHT, SW>(raw, raw_stride, x, x_stride, n_rows, n_in, lane);
        else if ((n_in & 1) == 0) raw_to_tile_e<T, false, 2, STRAIGHT, SW>(raw, raw_stride, x, x_stride, n_rows, n_in, lane);
        else raw_to_tile_e<T, false, 1, STRAIGHT, SW>(raw, raw_stride, x, x_stride, n_rows, n_in, lane);
    }
    const int n_pad = pin - n_in;
    if (n_pad > 0) {
        const T pad = gpu::from_acc<T>(pad_value);
        for (GridWalk2<int, int> g(lane, n_pad, x_stride, 1, 0, 0); g.r < n_rows; g.next()) {
            // (row 0, column row * x_stride + col) is (row, col) in the padded and one-atom layouts, not
            // with two atoms (tile_at would take the row for an atom index).
            if constexpr (SW > 1) *tile_at<SW>(x, x_stride, g.r, n_in + g.c) = pad;
            else *tile_at<SW>(x, x_stride, 0, n_in + g.a) = pad;
        }
    }
}

// Loads layer l's slot (matrix [out][in + 8] in T, then out fp32 biases) with cp.async, all threads
// of the block participating. The caller commits and waits.
template <typename T>
__device__ __forceinline__ void load_slot(const KernelArgs& args, int l, char* slot) {
    const Shape& s = args.shape;
    const int in = s.layer_in(l), out = s.layer_out(l), ws = mma::padded_row(in);
    const T* w = static_cast<const T*>(args.params) + s.weight_offset(l);
    T* dst = reinterpret_cast<T*>(slot);
    if (args.params_aligned) {
        const int cpr = in / 8;  // 16-byte chunks per row
        for (int i = threadIdx.x; i < out * cpr; i += blockDim.x) {
            const int r = i / cpr, c = (i - r * cpr) * 8;
            cp_async<16>(smem_addr(dst + r * ws + c), w + int64_t(r) * in + c, true);
        }
    } else {
        for (int i = threadIdx.x; i < out * in; i += blockDim.x) {
            const int r = i / in, c = i - r * in;
            dst[r * ws + c] = w[i];
        }
    }
    if (s.bias) {
        const T* b = static_cast<const T*>(args.params) + s.bias_offset(l);
        float* bdst = reinterpret_cast<float*>(slot + int64_t(out) * ws * 2);
        for (int o = threadIdx.x; o < out; o += blockDim.x) bdst[o] = gpu::to_acc(b[o]);
    }
}

// The width-128 wgmma kernel's hidden layers (1 .. L - 1, [W][W], no bias): the matrix in its slot as
// two swizzled atoms [W rows][64] (input columns 0..63, then 64..127, W * 128 bytes apart), the layout
// the wgmma B descriptors of the forward (K-major) and the chain (N-major, one atom per 64 output
// columns) read; 32 KiB of the slot's 34 KiB, which is 1024-byte aligned at width 128 (every slot is a
// multiple of 2048 bytes). All threads of the block participate; the caller commits and waits.
template <typename T, int W>
__device__ __forceinline__ void load_slot_sw(const KernelArgs& args, int l, char* slot) {
    const T* w = static_cast<const T*>(args.params) + args.shape.weight_offset(l);
    constexpr int cpr = W / 8;  // 16-byte chunks per row
    for (int i = threadIdx.x; i < W * cpr; i += blockDim.x) {
        const int r = i / cpr, c = (i - r * cpr) * 8;
        char* dst = slot + (c >> 6) * (W * 128) + swizzle128((r * 64 + (c & 63)) * 2);
        if (args.params_aligned) {
            cp_async<16>(smem_addr(dst), w + int64_t(r) * W + c, true);
        } else {
#pragma unroll
            for (int e = 0; e < 8; ++e) reinterpret_cast<T*>(dst)[e] = w[int64_t(r) * W + c + e];
        }
    }
}

// ============================================================================================
// Warp-level layer pieces. acc[m][j][i]: m16 tile m of the warp's rows, n8 tile j of the current
// 16-column chunk, element i of the C fragment (mma_layout.h).
// ============================================================================================

template <int MT> __device__ __forceinline__ void init_acc(float (&acc)[MT][2][4], const float* bias, int lane) {
    const int t = mma::thread_in_group(lane);
#pragma unroll
    for (int j = 0; j < 2; ++j) {
        const float2 b = bias ? *reinterpret_cast<const float2*>(bias + 8 * j + 2 * t) : make_float2(0.0f, 0.0f);
#pragma unroll
        for (int m = 0; m < MT; ++m) {
            acc[m][j][0] = b.x;
            acc[m][j][1] = b.y;
            acc[m][j][2] = b.x;
            acc[m][j][3] = b.y;
        }
    }
}

// Byte offset of the address a lane supplies to an ldmatrix.x4 over a 16x16 block at (0, 0) of a
// row-major 16-bit array with row pitch `stride_bytes`.
__device__ __forceinline__ int x4_offset(int lane, X4Pattern p, int stride_bytes) {
    const mma::Coord c = mma::x4_lane_address(lane, p);
    return c.row * stride_bytes + c.col * 2;
}
// The same as a shared address for the block at (0, 0) of `tile` (stride elements per row); SW: a
// swizzled tile whose base is 1024-byte aligned.
template <int SW>
__device__ __forceinline__ uint32_t lane_x4_addr(const void* tile, int stride, X4Pattern p, int lane) {
    return smem_addr(tile) + (SW ? swizzle128(x4_offset(lane, p, 128)) : x4_offset(lane, p, stride * 2));
}

// acc += A * B over nk k-steps, A fragments in registers (k-steps >= nk unused). b_addr: this lane's
// ldmatrix address for k-step 0; each k-step adds b_kstep bytes.
template <typename T, int MT, int KS, bool BTRANS>
__device__ __forceinline__ void mma_chunk_regs(float (&acc)[MT][2][4], const uint32_t (&a)[MT][KS][4], int nk,
                                               uint32_t b_addr, int b_kstep) {
#pragma unroll
    for (int k = 0; k < KS; ++k) {
        if (k < nk) {
            uint32_t b[4];
            ldmatrix_x4<BTRANS>(b, b_addr + k * b_kstep);
#pragma unroll
            for (int m = 0; m < MT; ++m) {
                mma_16816<T>(acc[m][0], a[m][k], b[0], b[1]);
                mma_16816<T>(acc[m][1], a[m][k], b[2], b[3]);
            }
        }
    }
}

// acc[c] += A * B_c for all NC 16-column chunks at once, A read from a row-major 16-bit tile in
// shared memory (a_addr: this lane's kRowsFirst address for m-tile 0, k-step 0; a_mstep bytes per
// 16 rows) over a run-time number of k-steps, k outermost: each A fragment is read once and feeds
// NC x MT x 2 MMAs on independent accumulators (a k-loop per chunk would serialise the chunks
// behind its branches). b_addr + c * b_cstep + k * b_kstep: this lane's B address of chunk c, k-step k.
// SW: A is a swizzled tile (a_addr from lane_x4_addr<SW>, SW >= 1; its first atom): k-step k is at the
// lane's address XOR 32 k (k < 4: the chunk index's upper two bits, which the row's swizzle leaves to
// the XOR).
template <typename T, int MT, int NC, bool BTRANS, int SW = 0>
__device__ __forceinline__ void mma_chunks_smem_a(float (&acc)[NC][MT][2][4], uint32_t a_addr, int a_mstep, int nk,
                                                  uint32_t b_addr, int b_cstep, int b_kstep) {
    for (int k = 0; k < nk; ++k) {
        uint32_t a[MT][4];
#pragma unroll
        for (int m = 0; m < MT; ++m)
            ldmatrix_x4<false>(a[m], SW ? (a_addr + m * a_mstep) ^ uint32_t(k * 32) : a_addr + m * a_mstep + k * 32);
#pragma unroll
        for (int c = 0; c < NC; ++c) {
            uint32_t b[4];
            ldmatrix_x4<BTRANS>(b, b_addr + c * b_cstep + k * b_kstep);
#pragma unroll
            for (int m = 0; m < MT; ++m) {
                mma_16816<T>(acc[c][m][0], a[m], b[0], b[1]);
                mma_16816<T>(acc[c][m][1], a[m], b[2], b[3]);
            }
        }
    }
}

// acc += A * B for one 16-column chunk, A read from a row-major 16-bit tile in shared memory (as
// above, SW the same), k-loop inside: the generic kernels' form, whose chunks are separated by the
// activation switch anyway and which keeps only one chunk's accumulators live.
template <typename T, int MT, bool BTRANS, int SW = 0>
__device__ __forceinline__ void mma_chunk_smem(float (&acc)[MT][2][4], uint32_t a_addr, int a_mstep, int nk,
                                               uint32_t b_addr, int b_kstep) {
    for (int k = 0; k < nk; ++k) {
        uint32_t b[4];
        ldmatrix_x4<BTRANS>(b, b_addr + k * b_kstep);
#pragma unroll
        for (int m = 0; m < MT; ++m) {
            uint32_t a[4];
            ldmatrix_x4<false>(a, SW ? (a_addr + m * a_mstep) ^ uint32_t(k * 32) : a_addr + m * a_mstep + k * 32);
            mma_16816<T>(acc[m][0], a, b[0], b[1]);
            mma_16816<T>(acc[m][1], a, b[2], b[3]);
        }
    }
}

// Where a layer's operands are: its slot in shared memory and this lane's ldmatrix address for the
// B fragments of output columns 0..15, k-step 0 (the [out][in + 8] matrix read as B = W^T).
struct LayerSlot {
    uint32_t b_base;
    int ws;             // bytes per weight row
    const float* bias;  // out fp32 biases or nullptr
};
__device__ __forceinline__ LayerSlot layer_slot(const char* slot, int in, int out, bool bias, int lane) {
    const int ws = mma::padded_row(in) * 2;
    return {smem_addr(slot) + x4_offset(lane, X4Pattern::kColsFirst, ws), ws,
            bias ? reinterpret_cast<const float*>(slot + int64_t(out) * ws) : nullptr};
}

// Pre-activations of all columns of layer 0 (bias + X W^T, X the 16-bit input tile in shared
// memory, K = 16 * nk) as NC chunks of accumulators.
template <typename T, int MT, int NC, int SW = 0>
__device__ __forceinline__ void first_layer(float (&acc)[NC][MT][2][4], uint32_t x_addr, int x_mstep, int nk,
                                            const LayerSlot& w, int lane) {
#pragma unroll
    for (int c = 0; c < NC; ++c) init_acc(acc[c], w.bias ? w.bias + 16 * c : nullptr, lane);
    mma_chunks_smem_a<T, MT, NC, false, SW>(acc, x_addr, x_mstep, nk, w.b_base, 16 * w.ws, 32);
}

// Layer 0 of the ReLU kernels runs all chunks at once up to width 64; at width 128 the 64 more live
// accumulators would push the forward kernel past 128 registers, so it goes chunk by chunk.
template <bool RELU, int W> constexpr bool kLayer0AllChunks = RELU && W <= 64;

// The same for output columns [16c, 16c + 16) only.
template <typename T, int MT, int SW = 0>
__device__ __forceinline__ void first_layer_chunk(float (&acc)[MT][2][4], int c, uint32_t x_addr, int x_mstep, int nk,
                                                  const LayerSlot& w, int lane) {
    init_acc(acc, w.bias ? w.bias + 16 * c : nullptr, lane);
    mma_chunk_smem<T, MT, false, SW>(acc, x_addr, x_mstep, nk, w.b_base + c * 16 * w.ws, 32);
}

// Pre-activations of output columns [16c, 16c + 16) of a hidden layer l >= 1 (A: the previous
// layer's activations in registers, K = 16 * NC).
template <typename T, int MT, int NC>
__device__ __forceinline__ void hidden_chunk(float (&acc)[MT][2][4], int c, const uint32_t (&h)[MT][NC][4],
                                             const LayerSlot& w, int lane) {
    init_acc(acc, w.bias ? w.bias + 16 * c : nullptr, lane);
    mma_chunk_regs<T, MT, NC, false>(acc, h, NC, w.b_base + c * 16 * w.ws, 32);
}

// Pre-activations of output columns [16c, 16c + 16) of the output layer.
template <typename T, int MT, int NC>
__device__ __forceinline__ void output_chunk(float (&acc)[MT][2][4], int c, const uint32_t (&h)[MT][NC][4],
                                             const LayerSlot& w, int lane) {
    init_acc(acc, w.bias ? w.bias + 16 * c : nullptr, lane);
    mma_chunk_regs<T, MT, NC, false>(acc, h, NC, w.b_base + c * 16 * w.ws, 32);
}

// Packs the activated chunk c into A fragments of the next layer (the register handoff) and hands
// each packed pair with its (row in the warp's tile, column) to `store` (for the stash).
template <typename T, int MT, int NC, class F, class Store>
__device__ __forceinline__ void pack_chunk(const float (&acc)[MT][2][4], uint32_t (&next)[MT][NC][4], int c, int lane,
                                           F&& f, Store&& store) {
#pragma unroll
    for (int m = 0; m < MT; ++m)
#pragma unroll
        for (int r = 0; r < 4; ++r) {
            const int j = mma::handoff_c_tile(r);
            const uint32_t v = pack2<T>(f(acc[m][j][mma::handoff_c_elem(r, 0)]), f(acc[m][j][mma::handoff_c_elem(r, 1)]));
            next[m][c][r] = v;
            const mma::Coord rc = mma::a_frag_coord(lane, r, 0);
            store(16 * m + rc.row, 16 * c + rc.col, r, v);
        }
}

// Calls f(m, j, hh, row, col) for each pair (acc[m][j][2 hh], acc[m][j][2 hh + 1]) of C-fragment
// elements a lane holds for 16-column chunk c: row 16 m + gq + 8 hh of the warp's tile, columns col
// and col + 1 (mma_layout.h).
template <int MT, class F> __device__ __forceinline__ void for_each_c_pair(int c, int lane, F&& f) {
    const int t = mma::thread_in_group(lane), gq = mma::group_of(lane);
#pragma unroll
    for (int m = 0; m < MT; ++m)
#pragma unroll
        for (int j = 0; j < 2; ++j)
#pragma unroll
            for (int hh = 0; hh < 2; ++hh) f(m, j, hh, 16 * m + gq + 8 * hh, 16 * c + 8 * j + 2 * t);
}

// Runs f(E{}, FULL{}) with the element type of a staged tile (float, or the network dtype T) and a
// run-time flag both turned into compile-time values: E::type, FULL::value.
template <typename X> struct TypeTag { using type = X; };
template <typename T, class F> __device__ __forceinline__ void with_f32_and_full(bool f32, bool full, F&& f) {
    if (f32) {
        if (full) f(TypeTag<float>{}, std::true_type{});
        else f(TypeTag<float>{}, std::false_type{});
    } else {
        if (full) f(TypeTag<T>{}, std::true_type{});
        else f(TypeTag<T>{}, std::false_type{});
    }
}

// Writes f(acc) of output chunk c into the per-warp staging tile (rows of out_stride bytes, OutT =
// float or T), columns < n_out only. FULL: the whole chunk is inside n_out (no per-element checks).
template <typename T, typename OutT, bool FULL, int MT, class F>
__device__ __forceinline__ void stage_output_chunk(const float (&acc)[MT][2][4], char* out, int out_stride, int c,
                                                   int n_out, int lane, F&& f) {
    // The loops are written out rather than through for_each_c_pair: that form compiled to different
    // forward SASS (1-2% larger), and the forward's timings were measured with this one.
    const int t = mma::thread_in_group(lane), gq = mma::group_of(lane);
    char* base = out + gq * out_stride + (16 * c + 2 * t) * int(sizeof(OutT));
#pragma unroll
    for (int m = 0; m < MT; ++m)
#pragma unroll
        for (int j = 0; j < 2; ++j)
#pragma unroll
            for (int hh = 0; hh < 2; ++hh) {
                const int col = 16 * c + 8 * j + 2 * t;
                OutT* o = reinterpret_cast<OutT*>(base + (16 * m + 8 * hh) * out_stride) + 8 * j;
                const float v0 = f(acc[m][j][2 * hh]), v1 = f(acc[m][j][2 * hh + 1]);
                if (FULL || col + 1 < n_out) {
                    if constexpr (std::is_same_v<OutT, float>) *reinterpret_cast<float2*>(o) = make_float2(v0, v1);
                    else *reinterpret_cast<uint32_t*>(o) = pack2<T>(v0, v1);
                } else if (col < n_out) {
                    if constexpr (std::is_same_v<OutT, float>) o[0] = v0;
                    else o[0] = gpu::from_acc<T>(v0);
                }
            }
}
template <typename T, int MT, class F>
__device__ __forceinline__ void stage_output(const float (&acc)[MT][2][4], bool out_f32, char* out, int out_stride,
                                             int c, int n_out, int lane, F&& f) {
    with_f32_and_full<T>(out_f32, 16 * c + 16 <= n_out, [&](auto e, auto full) {
        stage_output_chunk<T, typename decltype(e)::type, decltype(full)::value>(acc, out, out_stride, c, n_out, lane, f);
    });
}

// ============================================================================================
// Forward kernel (inference and forward-with-context; the context is empty: backward recomputes).
// ============================================================================================

// The ReLU flavour asks for two blocks of 8 warps per SM (<= 128 registers, which it meets without
// spills at every width): the forward pass is latency bound, and 16 warps per SM beat 8 by ~1.8x on
// the H200 at width 128 (2026-11-29 warps sweep).
template <typename T, int W, bool RELU>
__global__ void __launch_bounds__(kMaxWarps * 32, RELU ? 2 : 1)
    fully_fused_mlp_forward_kernel(const __grid_constant__ KernelArgs args) {
    constexpr int MT = forward_m_tiles(W), RW = 16 * MT, NC = W / 16;
    extern __shared__ __align__(16) char smem[];
    const ForwardPlan& p = args.fwd;
    const Shape& s = args.shape;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    const int R = nw * RW, L = s.n_hidden;
    const int64_t n_tiles = (args.rows + R - 1) / R;
    const int in_bytes = args.in_f32 ? 4 : 2, out_bytes = args.out_f32 ? 4 : 2;
    char* wsm = smem + p.off_weights;
    char* raw = smem + p.off_raw + int64_t(warp) * RW * p.raw_stride;
    T* x = reinterpret_cast<T*>(smem + p.off_x) + warp * RW * p.x_stride;
    char* out = smem + p.off_out + int64_t(warp) * RW * p.out_stride;
    const char* in_base = static_cast<const char*>(args.in);
    const int64_t in_pitch = args.in_stride * in_bytes;

    auto issue_input = [&](int64_t tile) {
        const int64_t row0 = tile * R + warp * RW;
        const int valid = static_cast<int>(min(max(args.rows - row0, int64_t(0)), int64_t(RW)));
        rows_to_smem<kStraightCopies<W>>(args.in_vec, raw, p.raw_stride, in_base + (valid > 0 ? row0 * in_pitch : 0), in_pitch, in_base,
                     s.n_in * in_bytes, RW, valid, lane);
    };
    // Streamed weights: one slot, reloaded before every layer by the whole block.
    auto ensure_layer = [&](int l) -> const char* {
        if (p.weights_resident) return wsm + s.slot_offset(l);
        __syncthreads();
        load_slot<T>(args, l, wsm);
        cp_async_commit();
        cp_async_wait_all();
        __syncthreads();
        return wsm;
    };

    if (p.weights_resident)
        for (int l = 0; l <= L; ++l) load_slot<T>(args, l, wsm + s.slot_offset(l));
    if (blockIdx.x < n_tiles) issue_input(blockIdx.x);
    cp_async_commit();
    cp_async_wait_all();
    __syncthreads();

    for (int64_t tile = blockIdx.x; tile < n_tiles; tile += gridDim.x) {
        const int64_t row0 = tile * R + warp * RW;
        const int valid = static_cast<int>(min(max(args.rows - row0, int64_t(0)), int64_t(RW)));
        raw_to_tile<T, kStraightCopies<W>>(raw, p.raw_stride, x, p.x_stride, RW, s.n_in, s.pin, args.in_f32, args.pad_value, lane);
        __syncwarp();
        if (tile + gridDim.x < n_tiles) issue_input(tile + gridDim.x);
        cp_async_commit();

        if (valid > 0 || !p.weights_resident) {
            // Hidden layers. RELU: straight-line chunks; otherwise the activation is switched per
            // 16-column chunk inside the epilogue, so the MMA loops exist once.
            const uint32_t x_addr = smem_addr(x) + x4_offset(lane, X4Pattern::kRowsFirst, p.x_stride * 2);
            uint32_t h[MT][NC][4];
            {
                const LayerSlot w = layer_slot(ensure_layer(0), s.pin, W, s.bias, lane);
                if constexpr (kLayer0AllChunks<RELU, W>) {  // all chunks at once (k outermost), then the epilogues
                    float acc[NC][MT][2][4];
                    first_layer<T>(acc, x_addr, 16 * p.x_stride * 2, s.pin / 16, w, lane);
#pragma unroll
                    for (int c = 0; c < NC; ++c)
                        pack_chunk<T>(acc[c], h, c, lane, [](float z) { return act_fwd<Activation::ReLU>(z); },
                                      [](int, int, int, uint32_t) {});
                } else {
#pragma unroll
                    for (int c = 0; c < NC; ++c) {
                        float acc[MT][2][4];
                        first_layer_chunk<T>(acc, c, x_addr, 16 * p.x_stride * 2, s.pin / 16, w, lane);
                        // (RELU: layer 0 is a ReLU hidden layer, no switch compiled in)
                        with_hidden_activation<RELU>(args.act, [&](auto A) {
                            pack_chunk<T>(acc, h, c, lane, [](float z) { return act_fwd<decltype(A)::value>(z); },
                                          [](int, int, int, uint32_t) {});
                        });
                    }
                }
            }
            for (int l = 1; l < L; ++l) {
                const LayerSlot w = layer_slot(ensure_layer(l), W, W, s.bias, lane);
                uint32_t h2[MT][NC][4];
#pragma unroll
                for (int c = 0; c < NC; ++c) {
                    float acc[MT][2][4];
                    hidden_chunk<T>(acc, c, h, w, lane);
                    with_hidden_activation<RELU>(args.act, [&](auto A) {
                        pack_chunk<T>(acc, h2, c, lane, [](float z) { return act_fwd<decltype(A)::value>(z); },
                                      [](int, int, int, uint32_t) {});
                    });
                }
#pragma unroll
                for (int m = 0; m < MT; ++m)
#pragma unroll
                    for (int k = 0; k < NC; ++k)
#pragma unroll
                        for (int r = 0; r < 4; ++r) h[m][k][r] = h2[m][k][r];
            }
            // Output layer -> staging tile (output dtype, n_out columns).
            const LayerSlot w = layer_slot(ensure_layer(L), W, s.pout, s.bias, lane);
            for (int c = 0; c < s.pout / 16; ++c) {
                float acc[MT][2][4];
                output_chunk<T>(acc, c, h, w, lane);
                with_output_activation<RELU>(args.out_act, [&](auto A) {
                    stage_output<T>(acc, args.out_f32, out, p.out_stride, c, s.n_out, lane,
                                    [](float z) { return act_fwd<decltype(A)::value>(z); });
                });
            }
            __syncwarp();
            if (valid > 0)
                rows_to_global(args.out_vec, static_cast<char*>(args.out) + row0 * args.out_stride * out_bytes,
                               args.out_stride * out_bytes, out, p.out_stride, s.n_out * out_bytes, valid, lane);
            __syncwarp();
        }
        cp_async_wait_all();
        __syncwarp();
    }
}

// ============================================================================================
// Backward kernel.
// ============================================================================================

// Backward's recomputed hidden layer, chunk c: a = f(z) goes to the next layer's A fragments (the
// caller stores the layer's a to the stash, store_a_tile); f'(z) goes to its stash tile when it cannot
// be read off a later.
template <typename T, Activation ACT, int MT, int NC>
__device__ __forceinline__ void hidden_chunk_to_stash(const float (&acc)[MT][2][4], uint32_t (&next)[MT][NC][4], int c,
                                                      int lane, T* d_tile, int stride) {
    pack_chunk<T>(acc, next, c, lane, [](float z) { return act_fwd<ACT>(z); }, [](int, int, int, uint32_t) {});
    if constexpr (!derivative_from_output(ACT)) {
#pragma unroll
        for (int m = 0; m < MT; ++m)
#pragma unroll
            for (int r = 0; r < 4; ++r) {
                const int j = mma::handoff_c_tile(r);
                const mma::Coord rc = mma::a_frag_coord(lane, r, 0);
                *reinterpret_cast<uint32_t*>(d_tile + (16 * m + rc.row) * stride + 16 * c + rc.col) =
                    pack2<T>(act_deriv<ACT>(acc[m][j][mma::handoff_c_elem(r, 0)]),
                             act_deriv<ACT>(acc[m][j][mma::handoff_c_elem(r, 1)]));
            }
    }
}

// Stores a layer's activations, held as A fragments, into this warp's rows of a stash tile. Called
// with a pointer derived from the kernel's shared-memory array (the compiler then emits shared
// stores) or with a global one; a pointer that may be either compiles to generic accesses, which the
// profile showed waiting on the long scoreboard.
template <typename T, int MT, int NC, int SW = 0>
__device__ __forceinline__ void store_a_tile(const uint32_t (&a)[MT][NC][4], T* tile, int stride, int lane) {
#pragma unroll
    for (int m = 0; m < MT; ++m)
#pragma unroll
        for (int c = 0; c < NC; ++c)
#pragma unroll
            for (int r = 0; r < 4; ++r) {
                const mma::Coord rc = mma::a_frag_coord(lane, r, 0);
                *reinterpret_cast<uint32_t*>(tile_at<SW>(tile, stride, 16 * m + rc.row, 16 * c + rc.col)) = a[m][c][r];
            }
}

// Output layer of the backward pass, chunk c: dz = round_T(dL/dy * f_out'(z)) into the dz tile
// (rows of this warp), zero for columns >= n_out and rows >= valid. dL/dy comes from the per-warp
// staged tile (rows of dy_stride bytes, DyT = float or T). FULL: all rows valid and the chunk inside
// n_out (no per-element checks).
template <typename T, typename DyT, bool FULL, int MT, int SW, class D>
__device__ __forceinline__ void output_dz_chunk_t(const float (&acc)[MT][2][4], const char* dyt, int dy_stride,
                                                  bool pairs, T* dz, int dz_stride, int c, int n_out, int valid,
                                                  int lane, D&& deriv) {
    for_each_c_pair<MT>(c, lane, [&](int m, int j, int hh, int row, int col) {
        const DyT* dr = reinterpret_cast<const DyT*>(dyt + row * dy_stride) + col;
        const bool v0 = FULL || (row < valid && col < n_out), v1 = FULL || (row < valid && col + 1 < n_out);
        float2 g = make_float2(0.0f, 0.0f);
        if (v1 && pairs) {
            if constexpr (std::is_same_v<DyT, float>) g = *reinterpret_cast<const float2*>(dr);
            else g = unpack2<T>(*reinterpret_cast<const uint32_t*>(dr));
        } else {
            if (v0) g.x = gpu::to_acc(dr[0]);
            if (v1) g.y = gpu::to_acc(dr[1]);
        }
        const float d0 = v0 ? g.x * deriv(acc[m][j][2 * hh]) : 0.0f;
        const float d1 = v1 ? g.y * deriv(acc[m][j][2 * hh + 1]) : 0.0f;
        *reinterpret_cast<uint32_t*>(tile_at<SW>(dz, dz_stride, row, col)) = pack2<T>(d0, d1);
    });
}
template <typename T, int MT, int SW = 0, class D>
__device__ __forceinline__ void output_dz_chunk(const float (&acc)[MT][2][4], bool dy_f32, const char* dyt,
                                                int dy_stride, bool pairs, T* dz, int dz_stride, int c, int n_out,
                                                int valid, int lane, D&& deriv) {
    with_f32_and_full<T>(dy_f32, valid >= 16 * MT && 16 * c + 16 <= n_out, [&](auto e, auto full) {
        output_dz_chunk_t<T, typename decltype(e)::type, decltype(full)::value, MT, SW>(acc, dyt, dy_stride, pairs, dz,
                                                                                dz_stride, c, n_out, valid, lane, deriv);
    });
}

// Calls f(std::integral_constant<LossKind, K>{}) for the fused training step's loss (one of
// is_fused_loss_kind, which the host checked).
template <typename F> __device__ __forceinline__ void with_fused_loss_kind(LossKind k, F&& f) {
    using K = LossKind;
    switch (k) {
        case K::l1: f(std::integral_constant<K, K::l1>{}); break;
        case K::relative_l2: f(std::integral_constant<K, K::relative_l2>{}); break;
        case K::relative_l1: f(std::integral_constant<K, K::relative_l1>{}); break;
        case K::mape: f(std::integral_constant<K, K::mape>{}); break;
        case K::smape: f(std::integral_constant<K, K::smape>{}); break;
        default: f(std::integral_constant<K, K::l2>{}); break;
    }
}

// v rounded to the output dtype (fp32, or the network dtype T) and back.
template <typename T> __device__ __forceinline__ float round_output(bool y_f32, float v) {
    return y_f32 ? v : gpu::to_acc(gpu::from_acc<T>(v));
}
// The fp32 target pairs under this lane's output fragments of chunk c in m16 tile mm: from the staged
// tile (KernelArgs::staged_target) or from global memory; zero past the batch and the outputs. The
// global-target mode of the two-tile kernels loads chunk 0 this way at the start of the tile, so that
// the loads are in flight during the recomputed forward pass instead of stalling the epilogue.
// staged: the rows are in shared memory at dyt (dy_stride bytes per row: the dy rows of staged_target,
// or the raw rows of target_in_raw). SPLIT (the wgmma kernel): the shared rows are read in a branch of
// their own, so that the loads are shared-memory loads rather than generic ones with their address
// tests (measured there, runs 42-43 of 2026-11-30; in the other kernels the moved code cost the
// instruction-fetch-bound width-128 kernel ~4%, so they keep one generic load for both cases).
template <int MT, bool SPLIT = false>
__device__ __forceinline__ void load_target_pairs(const KernelArgs& args, bool staged, const char* dyt, int dy_stride,
                                                  int c, int mm, int valid, int64_t row0, int lane, float2 (&t)[2][2]) {
    const int n_out = args.shape.n_out;
    for_each_c_pair<MT>(c, lane, [&](int m, int j, int hh, int row, int col) {
        if (m != mm) return;
        if constexpr (SPLIT) {
            const bool ok0 = row < valid && col < n_out, ok1 = row < valid && col + 1 < n_out;
            if (staged) {
                const float* tr = reinterpret_cast<const float*>(dyt + row * dy_stride) + col;
                t[j][hh] = ok1 ? *reinterpret_cast<const float2*>(tr) : make_float2(ok0 ? tr[0] : 0.0f, 0.0f);
                return;
            }
            const float* tr = args.target + (row0 + row) * args.target_stride + col;
            if (ok1 && args.target_vec2) {
                t[j][hh] = *reinterpret_cast<const float2*>(tr);
            } else {
                t[j][hh] = make_float2(ok0 ? tr[0] : 0.0f, ok1 ? tr[1] : 0.0f);
            }
        } else {
            const float* tr = staged ? reinterpret_cast<const float*>(dyt + row * dy_stride) + col
                                     : args.target + (row0 + row) * args.target_stride + col;
            const bool ok0 = row < valid && col < n_out, ok1 = row < valid && col + 1 < n_out;
            if (ok1 && (staged || args.target_vec2)) {
                t[j][hh] = *reinterpret_cast<const float2*>(tr);
            } else {
                t[j][hh] = make_float2(ok0 ? tr[0] : 0.0f, ok1 ? tr[1] : 0.0f);
            }
        }
    });
}

// The fused training step's output layer, chunk c (rows of this warp, global rows from row0), given
// y = f_out(z) rounded to the output dtype as the forward pass stores it (round_output),
// d = f_out'(z) and the target pairs t (load_target_pairs): the loss term of y and the target as
// losses.cu computes it (loss_element, no pdf); its value to args.values; dz =
// round_T(round_out(gradient) * d) as output_dz_chunk computes it from a stored gradient. So the step
// equals forward + Loss::evaluate + backward bit for bit.
// One m16 tile (MM) at a time, so that y, d and the target t cost 24 registers, not 24 * MT. The loss
// kind and whether N is a power of two are decided once, outside the element loop, and the elements
// past the batch or the outputs are masked rather than branched around, so that the element code is
// straight-line.
// STREAM: the value pairs leave as streaming stores (st.global.cs; measured with the wgmma kernel only).
template <typename T, int MT, int MM, int SW = 0, bool STREAM = false>
__device__ __forceinline__ void output_loss_dz_tile(const KernelArgs& args, const float (&y)[2][4], const float (&d)[2][4],
                                                    const float2 (&t)[2][2], T* dz, int dz_stride, int c, int valid,
                                                    int64_t row0, int lane) {
    const int n_out = args.shape.n_out;
    auto body = [&](auto kind, auto pow2) {
        constexpr LossKind K = decltype(kind)::value;
        for_each_c_pair<MT>(c, lane, [&](int m, int j, int hh, int row, int col) {
            if (m != MM) return;
            const bool ok[2] = {row < valid && col < n_out, row < valid && col + 1 < n_out};
            const float tv[2] = {t[j][hh].x, t[j][hh].y};
            float g[2], v[2];
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                // loss_element divides by N; when N is a power of two, x / N == x * (1 / N) exactly, so
                // the term is taken with N = 1 (x / 1 folds away) and scaled: the same bits, no IEEE
                // division subroutine.
                LossTerm<float> term;
                if constexpr (decltype(pow2)::value) {
                    term = loss_element<K, float>(y[j][2 * hh + e], tv[e], 1.0f, 0.0f, 1.0f, args.loss_scale);
                    term.value *= args.loss_inv_n;
                    term.gradient *= args.loss_inv_n;
                } else {
                    term = loss_element<K, float>(y[j][2 * hh + e], tv[e], 1.0f, 0.0f, args.loss_n, args.loss_scale);
                }
                v[e] = ok[e] ? term.value : 0.0f;
                g[e] = ok[e] ? round_output<T>(args.out_f32, term.gradient) * d[j][2 * hh + e] : 0.0f;
            }
            float* vr = args.values + (row0 + row) * args.values_stride + col;
            if (ok[1] && args.values_vec2) {
                if constexpr (STREAM) __stcs(reinterpret_cast<float2*>(vr), make_float2(v[0], v[1]));
                else *reinterpret_cast<float2*>(vr) = make_float2(v[0], v[1]);
            } else {
                if (ok[0]) vr[0] = v[0];
                if (ok[1]) vr[1] = v[1];
            }
            *reinterpret_cast<uint32_t*>(tile_at<SW>(dz, dz_stride, row, col)) = pack2<T>(g[0], g[1]);
        });
    };
    with_fused_loss_kind(args.loss_kind, [&](auto kind) {
        if (args.loss_inv_n != 0.0f) body(kind, std::true_type{});
        else body(kind, std::false_type{});
    });
}

// Backward chain, chunk c of dL/da_{l-1}: dz_{l-1} = round_T(dL/da * f'(z_{l-1})) with f' read off the
// stored a (None, ReLU, LeakyReLU; ACT = that activation) or the stored f'(z) (any other ACT). The
// result goes to the A fragments for the next chain step and to the dz tile for the dW pass.
template <typename T, Activation ACT, int MT, int NC, int SW = 0>
__device__ __forceinline__ void chain_chunk_to_dz(const float (&acc)[MT][2][4], uint32_t (&dzn)[MT][NC][4], int c, int lane,
                                                  const T* a_tile, const T* d_tile, int act_stride, T* dz_tile,
                                                  int dz_stride) {
#pragma unroll
    for (int m = 0; m < MT; ++m)
#pragma unroll
        for (int r = 0; r < 4; ++r) {
            const int j = mma::handoff_c_tile(r);
            const mma::Coord rc = mma::a_frag_coord(lane, r, 0);
            const int row = 16 * m + rc.row, col = 16 * c + rc.col;
            const float z0 = acc[m][j][mma::handoff_c_elem(r, 0)], z1 = acc[m][j][mma::handoff_c_elem(r, 1)];
            if constexpr (ACT == Activation::ReLU) {
                const uint32_t v = mask_positive2<T>(pack2<T>(z0, z1), *reinterpret_cast<const uint32_t*>(tile_at<SW>(a_tile, act_stride, row, col)));
                dzn[m][c][r] = v;
                *reinterpret_cast<uint32_t*>(tile_at<SW>(dz_tile, dz_stride, row, col)) = v;
                continue;
            }
            float2 d;
            if constexpr (ACT == Activation::None) {
                d = make_float2(1.0f, 1.0f);
            } else if constexpr (derivative_from_output(ACT)) {
                const float2 a = unpack2<T>(*reinterpret_cast<const uint32_t*>(tile_at<SW>(a_tile, act_stride, row, col)));
                d = make_float2(a.x > 0.0f ? 1.0f : 0.01f, a.y > 0.0f ? 1.0f : 0.01f);  // LeakyReLU
            } else {
                d = unpack2<T>(*reinterpret_cast<const uint32_t*>(tile_at<SW>(d_tile, act_stride, row, col)));
            }
            const uint32_t v = pack2<T>(z0 * d.x, z1 * d.y);
            dzn[m][c][r] = v;
            *reinterpret_cast<uint32_t*>(tile_at<SW>(dz_tile, dz_stride, row, col)) = v;
        }
}

// A layer's weight-gradient accumulators: in shared memory (smem, derived from the kernel's shared
// array so that the read-modify-writes compile to shared loads and stores) or in the block's global
// slot.
struct DwTarget {
    bool in_smem;
    float* smem;
    float* global;
    __device__ DwTarget offset(int64_t o) const { return {in_smem, smem + o, global + o}; }
};
__device__ __forceinline__ void add4(float* p, const float (&a)[4]) {
    float4 v = *reinterpret_cast<float4*>(p);
    v.x += a[0];
    v.y += a[1];
    v.z += a[2];
    v.w += a[3];
    *reinterpret_cast<float4*>(p) = v;
}

// Offset (floats) of this lane's 4 accumulators of C tile (m0 / 16 + mu, n0 / 8 + j) of a layer's
// dW in fragment order (Shape::fragment_index).
__device__ __forceinline__ int64_t dw_fragment_offset(int m0, int n0, int mu, int j, int in, int lane) {
    const int mt = m0 / 16 + mu, nt = n0 / 8 + j;
    return ((int64_t(mt) * (in / 8) + nt) * 32 + lane) * 4;
}

// dW[out][in] += DZ^T * ACT over the tile's R rows for this warp's share of (MU x 16) x (NU x 16)
// units; bias[out] += column sums of DZ (an extra MMA against a B of ones) in the units that hold
// input columns 0..15. DZ: [R][dz_stride] rows of dz, ACT: [R][act_stride] rows of the layer input.
template <typename T, int MU, int NU, bool PREFETCH>
__device__ __forceinline__ void dw_units(const T* dz, int dz_stride, const T* act, int act_stride, int out, int in, int R,
                                         const DwTarget& dw, float* db, int lane, int warp, int nw) {
    const int n_units_n = in / (16 * NU), units = (out / (16 * MU)) * n_units_n;
    const uint32_t a_lane = smem_addr(dz) + x4_offset(lane, X4Pattern::kColsFirst, dz_stride * 2);
    const uint32_t b_lane = smem_addr(act) + x4_offset(lane, X4Pattern::kRowsFirst, act_stride * 2);
    const uint32_t ones = pack2<T>(1.0f, 1.0f);
    const int gq = mma::group_of(lane), t = mma::thread_in_group(lane);
    for (int u = warp; u < units; u += nw) {
        const int m0 = (u / n_units_n) * 16 * MU, n0 = (u % n_units_n) * 16 * NU;
        const bool with_bias = db != nullptr && n0 == 0;
        float acc[MU][2 * NU][4] = {};
        float accb[MU][4] = {};
        // Accumulators in the block's global slot: loaded before the k-loop, so that the L2 latency
        // hides behind the MMAs instead of stalling the add after them (in the profile of run 25,
        // 3% of the 64->64->64 fused kernel's stall samples sat on that add). 16x16 units of the ReLU
        // kernels only (8 registers; the larger units, and the generic two-tile kernel, would spill).
        constexpr bool kPrefetch = PREFETCH && MU * NU == 1;
        float4 prev[MU][2 * NU];
        if (kPrefetch && !dw.in_smem)
#pragma unroll
            for (int mu = 0; mu < MU; ++mu)
#pragma unroll
                for (int j = 0; j < 2 * NU; ++j)
                    prev[mu][j] = *reinterpret_cast<const float4*>(dw.global + dw_fragment_offset(m0, n0, mu, j, in, lane));
        // This lane's ldmatrix addresses for k-step 0, advanced by one 16-row step per iteration.
        uint32_t a_k = a_lane + m0 * 2, b_k = b_lane + n0 * 2;
        const uint32_t a_step = 16 * dz_stride * 2, b_step = 16 * act_stride * 2;
#pragma unroll 2
        for (int k0 = 0; k0 < R; k0 += 16, a_k += a_step, b_k += b_step) {
            uint32_t a[MU][4];
#pragma unroll
            for (int mu = 0; mu < MU; ++mu) ldmatrix_x4<true>(a[mu], a_k + 16 * mu * 2);
#pragma unroll
            for (int nu = 0; nu < NU; ++nu) {
                uint32_t b[4];
                ldmatrix_x4<true>(b, b_k + 16 * nu * 2);
#pragma unroll
                for (int mu = 0; mu < MU; ++mu) {
                    mma_16816<T>(acc[mu][2 * nu], a[mu], b[0], b[1]);
                    mma_16816<T>(acc[mu][2 * nu + 1], a[mu], b[2], b[3]);
                }
            }
            if (with_bias)
#pragma unroll
                for (int mu = 0; mu < MU; ++mu) mma_16816<T>(accb[mu], a[mu], ones, ones);
        }
        // Each element of dW belongs to exactly one lane of one warp: plain read-modify-write of the
        // lane's 4 floats of C tile (mt, nt) in fragment order (Shape::fragment_index).
#pragma unroll
        for (int mu = 0; mu < MU; ++mu) {
#pragma unroll
            for (int j = 0; j < 2 * NU; ++j) {
                const int64_t o = dw_fragment_offset(m0, n0, mu, j, in, lane);
                if (dw.in_smem) {
                    add4(dw.smem + o, acc[mu][j]);
                } else if (!kPrefetch) {
                    add4(dw.global + o, acc[mu][j]);
                } else {
                    const float4 v = prev[mu][j];
                    *reinterpret_cast<float4*>(dw.global + o) =
                        make_float4(v.x + acc[mu][j][0], v.y + acc[mu][j][1], v.z + acc[mu][j][2], v.w + acc[mu][j][3]);
                }
            }
            if (with_bias && t == 0) {  // every column of the ones-product holds the row sum
                db[m0 + 16 * mu + gq] += accb[mu][0];
                db[m0 + 16 * mu + gq + 8] += accb[mu][2];
            }
        }
    }
}

// Picks the largest unit that still gives every warp work (runtime shape -> compile-time tile).
// PREFETCH: see dw_units.
template <typename T, bool PREFETCH>
__device__ __forceinline__ void dw_layer(const T* dz, int dz_stride, const T* act, int act_stride, int out, int in, int R,
                                         const DwTarget& dw, float* db, int lane, int warp, int nw) {
    auto units = [&](int mu, int nu) { return (out % (16 * mu) || in % (16 * nu)) ? 0 : (out / (16 * mu)) * (in / (16 * nu)); };
    if (units(2, 2) >= nw)
        dw_units<T, 2, 2, PREFETCH>(dz, dz_stride, act, act_stride, out, in, R, dw, db, lane, warp, nw);
    else if (units(2, 1) >= nw)
        dw_units<T, 2, 1, PREFETCH>(dz, dz_stride, act, act_stride, out, in, R, dw, db, lane, warp, nw);
    else if (units(1, 2) >= nw)
        dw_units<T, 1, 2, PREFETCH>(dz, dz_stride, act, act_stride, out, in, R, dw, db, lane, warp, nw);
    else
        dw_units<T, 1, 1, PREFETCH>(dz, dz_stride, act, act_stride, out, in, R, dw, db, lane, warp, nw);
}

constexpr int kWgGroups = kWgmmaWarps / 4;  // warpgroups of the width-64 wgmma kernel's block
constexpr int kWgN = 32;                      // columns of one dW job (wgmma_m64n32k16_tt)
// The wgmma kernels' dW over the block's R rows, 64 rows (64 mh ..) and N = kWgN columns (N h ..) of one
// layer by the calling warpgroup (lane, w4 = warp % 4): dw (the block's slot) += DZ[:, 64 mh ..]^T
// ACT[:, N h .. N h + N), DZ and ACT swizzled tiles of R rows in the layout SW (1024-byte aligned; columns
// past out / in hold anything: the rows and columns of the product they reach are not stored). With one
// atom (SW = 1, width 64) mh is 0; with two (SW > 1), the job's 64 rows are DZ's atom mh and its N
// columns lie in one of ACT's atoms. R / 16 wgmma m64n32k16 accumulating in k-step order from 0; warp
// w4 holds rows 64 mh + 16 w4 .. + 15 of the product in C-fragment order, i.e. the accumulators of C
// tiles (4 mh + w4, N h / 8 + j) in fragment order (Shape::fragment_index), added to the slot with red_add4.
// Width 64 (SW = 1): the k-loop commits two k-steps per group and waits for all groups but the last
// (so up to two groups, four wgmmas, in flight), as GEMM main loops do: fully unrolled, ptxas spilled
// at the kernel's 168 registers; rolled with one commit at the end, it waited for every wgmma before
// the next (WARPGROUP.DEPBAR after each HGMMA: run 33 of 2026-11-30). Width 128 (SW > 1): below.
template <typename T, int R, int SW>
__device__ __forceinline__ void dw_cols_wgmma(const T* dz, const T* act, int out, int in, int mh, int h, float* dw,
                                              int lane, int w4) {
    constexpr int N = kWgN;
    static_assert(SW >= 1, "swizzled tiles");
    // The descriptors' address fields (32-bit adds: they cannot carry into the constant high half).
    uint32_t a, b;
    if constexpr (SW == 1) {
        a = wgmma_desc_lo(smem_addr(dz)), b = wgmma_desc_lo(smem_addr(act)) + (N / 8) * h;  // 2 N h bytes on
    } else {  // atom mh of DZ; ACT's atom N h / 64, 2 (N h % 64) bytes into its rows
        a = wgmma_desc_lo(smem_addr(dz) + mh * SW);
        b = wgmma_desc_lo(smem_addr(act) + ((N * h) >> 6) * SW) + ((N * h) & 63) / 8;
    }
    float d[N / 2];
#pragma unroll
    for (int i = 0; i < N / 2; ++i) d[i] = 0.0f;
    static_assert(R % 32 == 0, "two k-steps a group");
    if constexpr (SW == 1) {
#pragma unroll 1
        for (int k = 0; k < R / 32; ++k, a += 256, b += 256) {  // 32 rows on
            wgmma_fence();
            wgmma_m64n32k16_tt<T>(d, kWgmmaDescHi | a, kWgmmaDescHi | b);
            wgmma_m64n32k16_tt<T>(d, kWgmmaDescHi | (a + 128), kWgmmaDescHi | (b + 128));
            wgmma_commit();
            wgmma_wait<1>();
        }
        wgmma_wait<0>();
        if (64 * mh + 16 * w4 >= out) return;
#pragma unroll
        for (int j = 0; j < N / 8; ++j) {
            if (8 * ((N / 8) * h + j) >= in) break;
            red_add4(dw + dw_fragment_offset(64 * mh, N * h, w4, j, in, lane),
                     *reinterpret_cast<const float(*)[4]>(d + 4 * j));
        }
    } else {
        // Width 128 (up to 255 registers a thread; 193 used): all R / 16 k-steps unrolled in one group (the rolled loop
        // cost ~24 instructions per two k-steps, run 48 of 2026-11-30), and the slot's
        // fragment offsets as one base plus constants (they step 32 x 4 floats per n8 tile).
        wgmma_fence();
#pragma unroll
        for (int k = 0; k < R / 16; ++k) wgmma_m64n32k16_tt<T>(d, kWgmmaDescHi | (a + 128 * k), kWgmmaDescHi | (b + 128 * k));
        wgmma_commit();
        wgmma_wait<0>();
        if (64 * mh + 16 * w4 >= out) return;
        float* const base = dw + dw_fragment_offset(64 * mh, N * h, w4, 0, in, lane);
#pragma unroll
        for (int j = 0; j < N / 8; ++j) {
            if (8 * ((N / 8) * h + j) >= in) break;
            red_add4(base + 128 * j, *reinterpret_cast<const float(*)[4]>(d + 4 * j));
        }
    }
}

// Chunk c (16 columns) of dL/dx from the C fragments of rows row0 .. row0 + valid, in the input dtype
// (fp32, else T), each value rounded by from_acc, so the bits do not depend on how they are stored:
// - KernelArgs::dx_vec 4 (16-bit input): the 4 lanes of a quad hold a fragment row's 16 columns as two
//   pairs each (columns 2q, 2q + 1 and 8 + 2q, 9 + 2q); four shuffles give lane q columns 4q .. 4q + 3,
//   stored as 8 bytes: the quad writes the row's 32 bytes with one instruction;
// - dx_vec 2: a lane's two adjacent columns in one 4- or 8-byte store (fp32: a quad's stores cover 32
//   contiguous bytes);
// - else, and where a store would reach past n_in, one value per store.
// Two values already rounded by from_acc, packed. Not pack2: from_acc<bf16> keeps a NaN's upper bits,
// which pack2's paired conversion (cvt.rn.bf16x2.f32) need not, so a pair store could write other NaN
// bits than the one-value store beside it (same rounding for every other value).
template <typename T> __device__ __forceinline__ uint32_t pack_bits(T lo, T hi) {
    uint16_t a, b;
    memcpy(&a, &lo, sizeof(a));
    memcpy(&b, &hi, sizeof(b));
    return uint32_t(a) | (uint32_t(b) << 16);
}
template <typename T, int MT>
__device__ __forceinline__ void store_dx_chunk(const KernelArgs& args, const float (&acc)[MT][2][4], int c, int64_t row0,
                                               int valid, int n_in, int lane) {
    if (!args.in_f32 && args.dx_vec == 4) {
        const int q = lane & 3, src = (lane & ~3) | (2 * (q & 1));
#pragma unroll
        for (int m = 0; m < MT; ++m)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                uint32_t w[2];  // columns 8j + 2q, 8j + 2q + 1 of the row, packed
#pragma unroll
                for (int j = 0; j < 2; ++j)
                    w[j] = pack_bits(gpu::from_acc<T>(acc[m][j][2 * h]), gpu::from_acc<T>(acc[m][j][2 * h + 1]));
                // Lane q takes pairs 2q and 2q + 1: lanes 2(q & 1) and 2(q & 1) + 1 of its quad, word q >> 1.
                const uint32_t a0 = __shfl_sync(0xffffffffu, w[0], src), a1 = __shfl_sync(0xffffffffu, w[1], src);
                const uint32_t b0 = __shfl_sync(0xffffffffu, w[0], src + 1), b1 = __shfl_sync(0xffffffffu, w[1], src + 1);
                const uint2 out = q >> 1 ? make_uint2(a1, b1) : make_uint2(a0, b0);
                const int row = 16 * m + mma::c_frag_coord(lane, 2 * h).row, col = 16 * c + 4 * q;
                if (row >= valid || col >= n_in) continue;
                T* d = static_cast<T*>(args.dx) + (row0 + row) * args.dx_stride + col;
                if (col + 3 < n_in) {
                    *reinterpret_cast<uint2*>(d) = out;
                } else {  // the columns inside n_in, one per store (value i: 16 bits of word i / 2)
#pragma unroll
                    for (int i = 0; i < 3; ++i)
                        if (col + i < n_in) {
                            const auto bits = static_cast<uint16_t>((i < 2 ? out.x : out.y) >> (16 * (i & 1)));
                            memcpy(d + i, &bits, sizeof(bits));
                        }
                }
            }
        return;
    }
    for_each_c_pair<MT>(c, lane, [&](int m, int j, int hh, int row, int col) {
        if (row >= valid || col >= n_in) return;
        const int64_t o = (row0 + row) * args.dx_stride + col;
        const float lo = acc[m][j][2 * hh], hi = acc[m][j][2 * hh + 1];
        const bool both = col + 1 < n_in, pair = both && args.dx_vec >= 2;
        if (args.in_f32) {
            float* d = static_cast<float*>(args.dx) + o;
            if (pair) {
                *reinterpret_cast<float2*>(d) = make_float2(lo, hi);
            } else {
                d[0] = lo;
                if (both) d[1] = hi;
            }
        } else {
            T* d = static_cast<T*>(args.dx) + o;
            const T t0 = gpu::from_acc<T>(lo), t1 = gpu::from_acc<T>(hi);
            if (pair) {
                *reinterpret_cast<uint32_t*>(d) = pack_bits(t0, t1);
            } else {
                d[0] = t0;
                if (both) d[1] = t1;
            }
        }
    });
}

// WG: the wgmma flavour (wgmma_backward_shape; W = 64 or 128, RELU, MT = 1, launched with
// wgmma_backward_warps(W) warps).
template <typename T, int W, bool RELU, int MT, bool WG = false>
__global__ void __launch_bounds__(backward_max_warps(W, RELU, MT) * 32, 1)
    fully_fused_mlp_backward_kernel(const __grid_constant__ KernelArgs args) {
    static_assert(!WG || ((W == 64 || W == 128) && RELU && MT == 1 &&
                          backward_max_warps(W, RELU, MT) == wgmma_backward_warps(W)),
                  "the wgmma backward kernels are the one-tile ReLU kernels of widths 64 and 128");
    constexpr int RW = 16 * MT, NC = W / 16;
    // The wgmma kernels' block rows (a plan with other warps is refused) and tile layout (tile_at): one
    // swizzled atom at width 64; at width 128 the stash and hidden dz tiles are two, kWgRows x 128 bytes
    // apart (the x and top dz tiles, <= 64 columns, use the first).
    constexpr int kWgRows = WG ? 16 * wgmma_backward_warps(W) : 0;
    constexpr int SW = !WG ? 0 : W == 64 ? 1 : kWgRows * 128;
    // The target reads in a shared-memory branch of their own and the streaming loss-value stores: the
    // width-64 wgmma kernel only. At width 128 the other kernels' forms measured 1.7% faster (run 57 of
    // 2026-11-30; the shared-row branch had cost the mma.sync width-128 kernel 3-4%).
    constexpr bool kWg64 = WG && W == 64;
    // The 12-warp kernels (ReLU / linear output, one tile, width <= 64) alone are compiled with what
    // plans without dy rows need: dL/doutput read in place (BackwardPlan::dy_in_smem false), the fused
    // step's target through the raw rows (KernelArgs::target_in_raw, which the launcher sets only for
    // such plans) or else loaded one output chunk ahead.
    constexpr bool kDyInPlace = backward_reads_dy_in_place(W, RELU, MT);
    // Row pitches (elements) known at compile time: the stash tiles and the dz tiles of the hidden
    // layers (the planner's act_stride; the dz region is planned for max(W, pout) + 8 and the top
    // layer's dz, pout columns wide, uses p.dz_stride). The wgmma kernels' tiles are atoms with rows of
    // 64 elements (two atoms per stash and hidden dz tile at width 128).
    constexpr int AS = WG ? 64 : W + 8, DS = WG ? 64 : W + 8;
    extern __shared__ __align__(16) char smem_base[];
    // The wgmma kernel's tiles need 1024-byte alignment: its plan asked for 1024 bytes more.
    char* const smem = WG ? smem_base + ((1024u - (smem_addr(smem_base) & 1023u)) & 1023u) : smem_base;
    const BackwardPlan& p = args.bwd;
    const Shape& s = args.shape;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    const int R = nw * RW, L = s.n_hidden;
    const int64_t n_tiles = (args.rows + R - 1) / R;
    const int in_bytes = args.in_f32 ? 4 : 2, dy_bytes = args.dy_f32 ? 4 : 2;
    const bool want_dw = args.dw_partials != nullptr || args.grads != nullptr, want_dx = args.dx != nullptr;
    char* wsm = smem + p.off_weights;
    char* raw = smem + p.off_raw + int64_t(warp) * RW * p.raw_stride;
    char* dyt = smem + p.off_dy + int64_t(warp) * RW * p.dy_stride;
    T* X = reinterpret_cast<T*>(smem + p.off_x);
    T* stash = p.stash_in_smem ? reinterpret_cast<T*>(smem + p.off_stash)
                               : reinterpret_cast<T*>(static_cast<char*>(args.stash) + blockIdx.x * p.stash_bytes_per_block);
    // The same, typed by where it is (see store_a_tile): one of them is used.
    T* const stash_smem_tile = reinterpret_cast<T*>(smem + p.off_stash);
    T* const stash_global = reinterpret_cast<T*>(static_cast<char*>(args.stash) + blockIdx.x * p.stash_bytes_per_block);
    T* awork = reinterpret_cast<T*>(smem + p.off_awork);
    T* DZ = reinterpret_cast<T*>(smem + p.off_dz);
    float* dw = p.dw_in_smem ? reinterpret_cast<float*>(smem + p.off_dw)
                             : args.dw_partials + int64_t(blockIdx.x) * s.n_params();
    const DwTarget dw_target{p.dw_in_smem, reinterpret_cast<float*>(smem + p.off_dw),
                             args.dw_partials + blockIdx.x * s.n_params()};
    // Tile sizes; with two atoms (SW > 1) W columns of kWgRows rows, whose atoms' rows are 64 wide (the
    // top layer's dz rows too: wrow * (SW > 1 ? DS : p.dz_stride) below, written out at each use, which
    // keeps the other kernels' machine code as it was: a variable for it changed all of them).
    const int64_t tile_elems = SW > 1 ? int64_t(kWgRows) * W : int64_t(R) * p.act_stride,
                  dz_elems = SW > 1 ? int64_t(kWgRows) * W : int64_t(R) * p.dz_stride;
    auto stash_d = [&](int l) { return stash + (int64_t(l) * p.n_stashes + 1) * tile_elems; };
    const char* in_base = static_cast<const char*>(args.in);
    const char* dy_base = static_cast<const char*>(args.dy);
    const int64_t in_pitch = args.in_stride * in_bytes, dy_pitch = args.dy_stride * dy_bytes;

    auto rows_valid = [&](int64_t tile) {
        return static_cast<int>(min(max(args.rows - (tile * R + warp * RW), int64_t(0)), int64_t(RW)));
    };
    auto issue_input = [&](int64_t tile) {
        const int64_t row0 = tile * R + warp * RW;
        const int valid = rows_valid(tile);
        rows_to_smem<kStraightCopies<W>>(args.in_vec, raw, p.raw_stride, in_base + (valid > 0 ? row0 * in_pitch : 0), in_pitch, in_base,
                     s.n_in * in_bytes, RW, valid, lane);
    };
    // dy rows go through shared memory: dL/doutput (unfused) or the staged target (fused step).
    const bool stage_dy = p.dy_in_smem && (!args.fused_loss || args.staged_target);
    auto issue_dy = [&](int64_t tile) {
        const int64_t row0 = tile * R + warp * RW;
        const int valid = rows_valid(tile);
        rows_to_smem<kStraightCopies<W>>(args.dy_vec, dyt, p.dy_stride, dy_base + (valid > 0 ? row0 * dy_pitch : 0), dy_pitch, dy_base,
                     s.n_out * dy_bytes, RW, valid, lane);
    };
    auto ensure_layer = [&](int l) -> const char* {
        if (p.weights_resident) return wsm + s.slot_offset(l);
        if constexpr (SW > 1) __trap();  // (its hidden layers' swizzled slots are resident; the launcher checks)
        __syncthreads();
        load_slot<T>(args, l, wsm);
        cp_async_commit();
        cp_async_wait_all();
        __syncthreads();
        return wsm;
    };

    if (want_dw)
        for (int64_t i = threadIdx.x; i < s.n_params() / 4; i += blockDim.x)
            reinterpret_cast<float4*>(dw)[i] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (p.weights_resident)
        for (int l = 0; l <= L; ++l) {
            if constexpr (SW > 1) {  // the hidden layers in the swizzled layout of their wgmmas
                if (l > 0 && l < L) {
                    load_slot_sw<T, W>(args, l, wsm + s.slot_offset(l));
                    continue;
                }
            }
            load_slot<T>(args, l, wsm + s.slot_offset(l));
        }
    if (blockIdx.x < n_tiles) {
        issue_input(blockIdx.x);
        if (stage_dy) issue_dy(blockIdx.x);
    }
    cp_async_commit();
    cp_async_wait_all();
    if constexpr (SW > 1) fence_proxy_async_smem();  // the weights, read by wgmma
    __syncthreads();

    for (int64_t tile = blockIdx.x; tile < n_tiles; tile += gridDim.x) {
        const int64_t row0 = tile * R + warp * RW;
        const int valid = rows_valid(tile);
        const int wrow = warp * RW;  // first block-local row of this warp
        raw_to_tile<T, kStraightCopies<W>, SW>(raw, p.raw_stride, X + wrow * p.x_stride, p.x_stride, RW, s.n_in, s.pin,
                                               args.in_f32, args.pad_value, lane);
        __syncwarp();
        const bool has_next = tile + gridDim.x < n_tiles;
        // target_in_raw (kDyInPlace kernels only): this tile's target rows into the raw rows now, the next
        // tile's input after the loss epilogue.
        const bool target_raw = kDyInPlace && args.target_in_raw;
        if (target_raw) {
            rows_to_smem<kStraightCopies<W>>(args.target_vec, raw, p.raw_stride,
                                             reinterpret_cast<const char*>(args.target + (valid > 0 ? row0 * args.target_stride : 0)),
                                             args.target_stride * 4, reinterpret_cast<const char*>(args.target),
                                             s.n_out * 4, RW, valid, lane);
        } else if (has_next) {
            issue_input(tile + gridDim.x);
        }
        cp_async_commit();
        // Where the epilogue reads the target: staged dy rows, the raw rows, or global memory.
        const bool target_staged = args.staged_target || target_raw;
        const char* const target_rows = target_raw ? raw : dyt;
        const int target_pitch = target_raw ? p.raw_stride : p.dy_stride;

        // The fused step's target for output chunk 0 when it is not staged: in flight during the forward.
        // Kernels with two m16 tiles per warp (measured, run 13: 32->64->16 0.936 vs 1.031 ms) and the
        // kernels that may run 12 warps (kDyInPlace, whatever warps a plan gives them), which also load
        // chunk c + 1 while chunk c computes (the profile of run 25 of 2026-11-30 had 11% of the
        // 64->64->64 fused kernel's stall samples on the first use of an in-place target pair). Only
        // where the target is neither staged nor in the raw rows. The one-tile kernel at width 128
        // keeps its registers.
        const bool target_pre = RELU && (MT == 2 || kDyInPlace) && args.fused_loss && !target_staged;
        float2 tpre[MT][2][2];
        if (target_pre)
#pragma unroll
            for (int m = 0; m < MT; ++m) load_target_pairs<MT, kWg64>(args, false, dyt, p.dy_stride, 0, m, valid, row0, lane, tpre[m]);

        // ---- Recomputed forward pass; a (and f'(z)) of hidden layers go to the stash.
        uint32_t h[MT][NC][4];
        auto stash_d_tile = [&](int l) { return p.n_stashes > 1 ? stash_d(l) + wrow * AS : nullptr; };
        // Layer l's activations (A fragments) -> this warp's rows of its stash tile.
        auto stash_layer = [&](int l, const uint32_t (&a)[MT][NC][4]) {
            const int64_t o = (int64_t(l) * p.n_stashes) * tile_elems + wrow * AS;
            if (WG || p.stash_in_smem) store_a_tile<T, MT, NC, SW>(a, stash_smem_tile + o, AS, lane);
            else store_a_tile<T>(a, stash_global + o, AS, lane);
        };
        const uint32_t x_addr = lane_x4_addr<SW>(X + wrow * p.x_stride, p.x_stride, X4Pattern::kRowsFirst, lane);
        {
            // !WG && s.bias: the wgmma kernel's shapes have no bias (no bias code is compiled into it).
            const LayerSlot w = layer_slot(ensure_layer(0), s.pin, W, !WG && s.bias, lane);
            T* dt = stash_d_tile(0);
            if constexpr (kLayer0AllChunks<RELU, W>) {  // all chunks at once (k outermost), then the epilogues
                float acc[NC][MT][2][4];
                first_layer<T, MT, NC, SW>(acc, x_addr, 16 * p.x_stride * 2, s.pin / 16, w, lane);
#pragma unroll
                for (int c = 0; c < NC; ++c) hidden_chunk_to_stash<T, Activation::ReLU>(acc[c], h, c, lane, dt, AS);
            } else {
#pragma unroll
                for (int c = 0; c < NC; ++c) {
                    float acc[MT][2][4];
                    first_layer_chunk<T, MT, SW>(acc, c, x_addr, 16 * p.x_stride * 2, s.pin / 16, w, lane);
                    // (RELU: layer 0 is a ReLU hidden layer, no switch compiled in)
                    with_hidden_activation<RELU>(args.act, [&](auto A) {
                        hidden_chunk_to_stash<T, decltype(A)::value>(acc, h, c, lane, dt, AS);
                    });
                }
            }
            stash_layer(0, h);
        }
        for (int l = 1; l < L; ++l) {
            const LayerSlot w = layer_slot(ensure_layer(l), W, W, !WG && s.bias, lane);
            T* dt = stash_d_tile(l);
            uint32_t h2[MT][NC][4];
            if constexpr (SW > 1) {
                // Width 128: z = a W^T by wgmma from the activations in registers (K-major B, the
                // swizzled slot; resident), two halves of 64 output columns (32 accumulators each), each
                // 8 k-steps.
                // The descriptors' address field as a base plus constants (the slot is 1024-byte aligned).
                const uint32_t wb = wgmma_desc_lo(smem_addr(wsm + s.slot_offset(l)));
#pragma unroll
                for (int nh = 0; nh < 2; ++nh) {
                    float d[32];
#pragma unroll
                    for (int i = 0; i < 32; ++i) d[i] = 0.0f;
                    wgmma_fence_operand(d);
                    wgmma_fence();
#pragma unroll
                    for (int k = 0; k < NC; ++k)  // k-step k: atom k / 4, 32 (k % 4) bytes into its rows
                        wgmma_m64n64k16_rs<T, 0>(
                            d, h[0][k], kWgmmaDescHi | (wb + (((k >> 2) * (W * 128) + 32 * (k & 3) + nh * 64 * 128) >> 4)));
                    wgmma_commit();
                    wgmma_wait<0>();
                    wgmma_fence_operand(d);
#pragma unroll
                    for (int c4 = 0; c4 < 4; ++c4) {
                        float acc[MT][2][4];
#pragma unroll
                        for (int j = 0; j < 2; ++j)
#pragma unroll
                            for (int i = 0; i < 4; ++i) acc[0][j][i] = d[4 * (2 * c4 + j) + i];
                        hidden_chunk_to_stash<T, Activation::ReLU>(acc, h2, 4 * nh + c4, lane, dt, AS);
                    }
                }
            } else {
#pragma unroll
                for (int c = 0; c < NC; ++c) {
                    float acc[MT][2][4];
                    hidden_chunk<T>(acc, c, h, w, lane);
                    with_hidden_activation<RELU>(args.act, [&](auto A) {
                        hidden_chunk_to_stash<T, decltype(A)::value>(acc, h2, c, lane, dt, AS);
                    });
                }
            }
            stash_layer(l, h2);
#pragma unroll
            for (int m = 0; m < MT; ++m)
#pragma unroll
                for (int k = 0; k < NC; ++k)
#pragma unroll
                    for (int r = 0; r < 4; ++r) h[m][k][r] = h2[m][k][r];
        }
        {
            // Output layer: dz = round_T(dL/dy * f_out'(z)), zero for padded columns and rows past the batch.
            const LayerSlot w = layer_slot(ensure_layer(L), W, s.pout, !WG && s.bias, lane);
            T* dz_top = DZ + (L & 1) * dz_elems;
            if (target_raw) {  // this warp's target rows have landed in its raw rows
                cp_async_wait_all();
                __syncwarp();
            }
            for (int c = 0; c < s.pout / 16; ++c) {
                // The next chunk's target pairs, in flight during this chunk (kDyInPlace kernels).
                float2 tnext[MT][2][2];
                const bool pipe = kDyInPlace && target_pre && 16 * c + 16 < s.pout;
                if (pipe)
#pragma unroll
                    for (int m = 0; m < MT; ++m)
                        load_target_pairs<MT, kWg64>(args, false, dyt, p.dy_stride, c + 1, m, valid, row0, lane, tnext[m]);
                float acc[MT][2][4];
                output_chunk<T>(acc, c, h, w, lane);
                if (RELU && args.fused_loss) {
                    // The fused training step (compiled into the ReLU / linear-output kernels only; the
                    // launcher refuses it for the others): f_out is the identity.
                    auto tile = [&](auto mm) {
                        constexpr int M = decltype(mm)::value;
                        float y[2][4], d[2][4];
#pragma unroll
                        for (int j = 0; j < 2; ++j)
#pragma unroll
                            for (int i = 0; i < 4; ++i) {
                                y[j][i] = round_output<T>(args.out_f32, acc[M][j][i]);
                                d[j][i] = act_deriv<Activation::None>(acc[M][j][i]);
                            }
                        // The target: prefetched (chunk 0, or every chunk in the kDyInPlace kernels), else
                        // staged or global.
                        float2 t[2][2];
                        if (target_pre && (c == 0 || kDyInPlace)) {
#pragma unroll
                            for (int j = 0; j < 2; ++j)
#pragma unroll
                                for (int hh = 0; hh < 2; ++hh) t[j][hh] = tpre[M][j][hh];
                        } else {
                            load_target_pairs<MT, kWg64>(args, target_staged, target_rows, target_pitch, c, M, valid, row0,
                                                  lane, t);
                        }
                        output_loss_dz_tile<T, MT, M, SW, kWg64>(args, y, d, t, dz_top + wrow * (SW > 1 ? DS : p.dz_stride), p.dz_stride, c,
                                                          valid, row0, lane);
                    };
                    tile(std::integral_constant<int, 0>{});
                    if constexpr (MT > 1) tile(std::integral_constant<int, 1>{});
                    if (pipe)
#pragma unroll
                        for (int m = 0; m < MT; ++m)
#pragma unroll
                            for (int j = 0; j < 2; ++j)
#pragma unroll
                                for (int hh = 0; hh < 2; ++hh) tpre[m][j][hh] = tnext[m][j][hh];
                } else {
                    with_output_activation<RELU>(args.out_act, [&](auto A) {
                        auto deriv = [](float z) { return act_deriv<decltype(A)::value>(z); };
                        if (!kDyInPlace || p.dy_in_smem) {
                            output_dz_chunk<T, MT, SW>(acc, args.dy_f32, dyt, p.dy_stride, true, dz_top + wrow * (SW > 1 ? DS : p.dz_stride),
                                                       p.dz_stride, c, s.n_out, valid, lane, deriv);
                        } else {  // this warp's rows of dL/doutput in place (dy_global plans)
                            output_dz_chunk<T, MT, SW>(acc, args.dy_f32, dy_base + (valid > 0 ? row0 * dy_pitch : 0),
                                                       static_cast<int>(dy_pitch), args.dy_vec2,
                                                       dz_top + wrow * (SW > 1 ? DS : p.dz_stride), p.dz_stride, c, s.n_out, valid, lane,
                                                       deriv);
                        }
                    });
                }
            }
        }
        __syncwarp();  // the dy tile (or the target in the raw rows) is consumed: prefetch the next one
        if (has_next && stage_dy) issue_dy(tile + gridDim.x);
        if (has_next && target_raw) issue_input(tile + gridDim.x);
        cp_async_commit();

        // ---- Backward through the layers.
        uint32_t dzr[MT][NC][4];  // dz of the current hidden layer as A fragments (K = W)
        for (int l = L; l >= 0; --l) {
            const int out = s.layer_out(l), in = s.layer_in(l);
            const T* dz_cur = DZ + (l & 1) * dz_elems;
            const T* act_src = X;
            if (l > 0) {
                if (WG || p.stash_in_smem) {  // (the wgmma kernel's plans keep the stash on chip)
                    act_src = stash_smem_tile + (int64_t(l - 1) * p.n_stashes) * tile_elems;
                } else {  // copy this warp's rows of a_{l-1} from the global stash into shared memory
                    T* aw = awork + (l & 1) * tile_elems;
                    const T* src = stash_global + (int64_t(l - 1) * p.n_stashes) * tile_elems;
                    const int q = W / 8;
                    for (int i = lane; i < RW * q; i += 32) {
                        const int r = i / q, c = (i - r * q) * 8;
                        *reinterpret_cast<uint4*>(aw + (wrow + r) * AS + c) =
                            *reinterpret_cast<const uint4*>(src + (wrow + r) * AS + c);
                    }
                    act_src = aw;
                }
            }
            if constexpr (WG) {
                // The layer's dW over all the block's rows, added to the block's slot in column blocks of
                // kWgN, each by one warpgroup: the jobs of the layers in turn over the warpgroups (the
                // others go on with the chain meanwhile). After the fence that makes this thread's tile
                // stores visible to the wgmmas.
                fence_proxy_async_smem();
                __syncthreads();
                if (want_dw) {
                    if constexpr (W == 64) {
                        for (int h = 0; h < 64 / kWgN && kWgN * h < in; ++h)
                            if (warp / 4 == ((64 / kWgN) * (L - l) + h) % kWgGroups)
                                dw_cols_wgmma<T, kWgRows, SW>(dz_cur, act_src, out, in, 0, h, dw + s.weight_offset(l),
                                                              lane, warp % 4);
                    } else {
                        // Two warpgroups: the layer's jobs (64-row halves mh x column blocks h, h fastest)
                        // alternate between them, the first to warpgroup (L - l) % 2, and each warpgroup
                        // walks its own (always the same jobs of a layer, so each slot element has one
                        // writer thread: deterministic).
                        // (mh, h) stepped rather than divided out of j (an integer division per job).
                        const int n_h = (in + kWgN - 1) / kWgN, n_mh = (out + 63) / 64;
                        for (int h = ((warp >> 2) + L - l) & 1, mh = 0;; h += 2) {  // job j = n_h mh + h
                            while (h >= n_h) h -= n_h, ++mh;
                            if (mh >= n_mh) break;
                            dw_cols_wgmma<T, kWgRows, SW>(dz_cur, act_src, out, in, mh, h, dw + s.weight_offset(l),
                                                          lane, warp % 4);
                        }
                    }
                }
            } else {
                __syncthreads();
                if (want_dw) {
                    // One call per kind of layer, so that the hidden layers' pitches and sizes are constants.
                    const DwTarget dwl = dw_target.offset(s.weight_offset(l));
                    float* dbl = s.bias ? dw + s.bias_offset(l) : nullptr;
                    if (l == L) dw_layer<T, RELU>(dz_cur, p.dz_stride, act_src, AS, out, W, R, dwl, dbl, lane, warp, nw);
                    else if (l > 0) dw_layer<T, RELU>(dz_cur, DS, act_src, AS, W, W, R, dwl, dbl, lane, warp, nw);
                    else dw_layer<T, RELU>(dz_cur, DS, X, p.x_stride, W, in, R, dwl, dbl, lane, warp, nw);
                }
            }
            if (l == 0 && !want_dx) break;

            // dL/da_{l-1} = dz_l W_l (B = W_l^T: ldmatrix.trans of the [out][in] slot).
            const char* slot = (l == L) ? (p.weights_resident ? wsm + s.slot_offset(l) : wsm) : ensure_layer(l);
            const int ws = mma::padded_row(in) * 2;
            const uint32_t b_base = smem_addr(slot) + x4_offset(lane, X4Pattern::kRowsFirst, ws);
            const int b_kstep = 16 * ws;
            // Chunk c of dL/da_{l-1} from the dz rows held as A fragments in registers (l < L).
            auto chain_chunk = [&](int c, float (&acc)[MT][2][4]) {
#pragma unroll
                for (int m = 0; m < MT; ++m)
#pragma unroll
                    for (int j = 0; j < 2; ++j)
#pragma unroll
                        for (int i = 0; i < 4; ++i) acc[m][j][i] = 0.0f;
                mma_chunk_regs<T, MT, NC, true>(acc, dzr, NC, b_base + c * 32, b_kstep);
            };
            if (l > 0) {
                // dz_{l-1} = round_T(dL/da_{l-1} * f'(z_{l-1})): f' from the stash.
                T* dz_next = DZ + ((l - 1) & 1) * dz_elems;
                const T* d_prev = stash_d(l - 1);
                uint32_t dzn[MT][NC][4];
                // a_{l-1} from shared memory in both stash modes (act_src: the stash or this layer's copy).
                const T* at = act_src + wrow * AS;
                const T* dt = p.n_stashes > 1 ? d_prev + wrow * AS : nullptr;
                T* zt = dz_next + wrow * DS;
                auto to_dz = [&](int c, const float (&acc)[MT][2][4]) {
                    using A = Activation;
                    if constexpr (RELU) {
                        chain_chunk_to_dz<T, A::ReLU, MT, NC, SW>(acc, dzn, c, lane, at, dt, AS, zt, DS);
                    } else {
                        switch (args.act) {  // f' from the stored a for these three, from the stored f'(z) otherwise
                            case A::None: chain_chunk_to_dz<T, A::None>(acc, dzn, c, lane, at, dt, AS, zt, DS); break;
                            case A::ReLU: chain_chunk_to_dz<T, A::ReLU>(acc, dzn, c, lane, at, dt, AS, zt, DS); break;
                            case A::LeakyReLU:
                                chain_chunk_to_dz<T, A::LeakyReLU>(acc, dzn, c, lane, at, dt, AS, zt, DS);
                                break;
                            default: chain_chunk_to_dz<T, A::Sine>(acc, dzn, c, lane, at, dt, AS, zt, DS); break;
                        }
                    }
                };
                const uint32_t dz_addr = lane_x4_addr<SW>(dz_cur + wrow * (SW > 1 ? DS : p.dz_stride), p.dz_stride, X4Pattern::kRowsFirst, lane);
                if (RELU && l == L) {
                    // The top dz is in shared memory (K = pout): all chunks at once, k outermost.
                    float acc[NC][MT][2][4] = {};
                    mma_chunks_smem_a<T, MT, NC, true, SW>(acc, dz_addr, 16 * p.dz_stride * 2, s.pout / 16, b_base, 32,
                                                           b_kstep);
#pragma unroll
                    for (int c = 0; c < NC; ++c) to_dz(c, acc[c]);
                } else if (l == L) {
#pragma unroll
                    for (int c = 0; c < NC; ++c) {
                        float acc[MT][2][4] = {};
                        mma_chunk_smem<T, MT, true>(acc, dz_addr, 16 * p.dz_stride * 2, s.pout / 16, b_base + c * 32, b_kstep);
                        to_dz(c, acc);
                    }
                } else if constexpr (SW > 1) {
                    // Width 128, hidden layer: dL/da_{l-1} = dz_l W_l by wgmma from the dz rows in
                    // registers (N-major B: the swizzled slot, input columns 64 nh .. in atom nh), two
                    // halves of 64 columns, each 8 k-steps of 16 output rows (2048 bytes).
                    const uint32_t wb = wgmma_desc_lo(smem_addr(slot));
#pragma unroll
                    for (int nh = 0; nh < 2; ++nh) {
                        float d[32];
#pragma unroll
                        for (int i = 0; i < 32; ++i) d[i] = 0.0f;
                        wgmma_fence_operand(d);
                        wgmma_fence();
#pragma unroll
                        for (int k = 0; k < NC; ++k)
                            wgmma_m64n64k16_rs<T, 1>(d, dzr[0][k],
                                                     kWgmmaDescHi | (wb + ((nh * (W * 128) + 2048 * k) >> 4)));
                        wgmma_commit();
                        wgmma_wait<0>();
                        wgmma_fence_operand(d);
#pragma unroll
                        for (int c4 = 0; c4 < 4; ++c4) {
                            float acc[MT][2][4];
#pragma unroll
                            for (int j = 0; j < 2; ++j)
#pragma unroll
                                for (int i = 0; i < 4; ++i) acc[0][j][i] = d[4 * (2 * c4 + j) + i];
                            to_dz(4 * nh + c4, acc);
                        }
                    }
                } else {
#pragma unroll
                    for (int c = 0; c < NC; ++c) {
                        float acc[MT][2][4];
                        chain_chunk(c, acc);
                        to_dz(c, acc);
                    }
                }
#pragma unroll
                for (int m = 0; m < MT; ++m)
#pragma unroll
                    for (int k = 0; k < NC; ++k)
#pragma unroll
                        for (int r = 0; r < 4; ++r) dzr[m][k][r] = dzn[m][k][r];
                __syncwarp();
            } else {
                // dL/dx = dz_0 W_0, first n_in columns, in the input dtype.
                for (int c = 0; c < s.pin / 16; ++c) {
                    float acc[MT][2][4];
                    chain_chunk(c, acc);
                    store_dx_chunk<T, MT>(args, acc, c, row0, valid, s.n_in, lane);
                }
            }
        }
        cp_async_wait_all();
        __syncthreads();
    }

    if (want_dw && args.grads) {
        // A single block: its accumulators are the whole sum; write dL/dparams in parameter order and
        // the network dtype directly (the same arithmetic as fully_fused_mlp_reduce_kernel for one
        // block, without its launch).
        __syncthreads();
        T* g = static_cast<T*>(args.grads);
        for (int64_t i = threadIdx.x; i < s.n_params(); i += blockDim.x) {
            float v = dw[s.fragment_index(i)];
            if (args.accumulate) v += gpu::to_acc(g[i]);
            g[i] = gpu::from_acc<T>(v);
        }
    } else if (want_dw && p.dw_in_smem) {  // the block's accumulators -> its global slot (same order)
        __syncthreads();
        float4* dst = reinterpret_cast<float4*>(args.dw_partials + blockIdx.x * s.n_params());
        const float4* src = reinterpret_cast<const float4*>(dw);
        for (int64_t i = threadIdx.x; i < s.n_params() / 4; i += blockDim.x) dst[i] = src[i];
    }
}

// ============================================================================================
// Host side of one instantiation.
// ============================================================================================

template <typename H> using device_of = gpu::device_t<H>;

template <typename K> KernelInfo kernel_info(K* k, int max_smem) {
    TNN_GPU_CHECK(gpu_func_set_attribute(k, gpu_func_attribute_max_dynamic_shared_memory_size, max_smem));
    gpu_func_attributes_t a;
    TNN_GPU_CHECK(gpu_func_get_attributes(&a, k));
    return KernelInfo{a.numRegs, int(a.localSizeBytes), a.maxThreadsPerBlock / 32};
}

template <typename H, int W> KernelInfo Kernels<H, W>::forward_info(int max_smem, bool relu) {
    return relu ? kernel_info(fully_fused_mlp_forward_kernel<device_of<H>, W, true>, max_smem)
                : kernel_info(fully_fused_mlp_forward_kernel<device_of<H>, W, false>, max_smem);
}

// Calls f(std::integral_constant<int, MT>) for the backward kernels' m16 tiles per warp.
template <int W, class F> void with_backward_m_tiles(int m_tiles, F&& f) {
    if (m_tiles == 2) {
        if constexpr (has_backward_m_tiles(W, 2)) return f(std::integral_constant<int, 2>{});
    } else if (m_tiles == 1) {
        return f(std::integral_constant<int, 1>{});
    }
    throw UnsupportedError(msg("FullyFusedMLP: no backward kernel with ", m_tiles, " m16 tiles per warp at width ", W));
}

template <typename H, int W> KernelInfo Kernels<H, W>::backward_info(int max_smem, bool relu, int m_tiles) {
    KernelInfo info;
    with_backward_m_tiles<W>(m_tiles, [&](auto mt) {
        constexpr int MT = decltype(mt)::value;
        info = relu ? kernel_info(fully_fused_mlp_backward_kernel<device_of<H>, W, true, MT>, max_smem)
                    : kernel_info(fully_fused_mlp_backward_kernel<device_of<H>, W, false, MT>, max_smem);
#if defined(TNN_CUDA_WGMMA)
        if constexpr ((W == 64 || W == 128) && MT == 1) {
            if (relu) {
                // The wgmma flavour: its own attributes (the same launch bounds; no spills expected).
                const KernelInfo wg = kernel_info(fully_fused_mlp_backward_kernel<device_of<H>, W, true, MT, true>, max_smem);
                info.wgmma = wg.max_warps == wgmma_backward_warps(W) && wg.local_bytes == 0;
            }
        }
#endif  // TNN_CUDA_WGMMA
    });
    return info;
}

template <typename H, int W> void Kernels<H, W>::forward(const KernelArgs& args, int grid, void* stream) {
    const auto s = static_cast<gpu_stream_t>(stream);
    if (args.relu)
        fully_fused_mlp_forward_kernel<device_of<H>, W, true><<<grid, args.fwd.n_warps * 32, args.fwd.smem_bytes, s>>>(args);
    else
        fully_fused_mlp_forward_kernel<device_of<H>, W, false><<<grid, args.fwd.n_warps * 32, args.fwd.smem_bytes, s>>>(args);
    TNN_GPU_CHECK_LAUNCH("fully_fused_mlp_forward_kernel");
}

template <typename H, int W> void Kernels<H, W>::backward(const KernelArgs& args, int grid, void* stream) {
    const auto s = static_cast<gpu_stream_t>(stream);
    // A plan laid out for other rows per warp must not run (with_backward_m_tiles refuses 0 and > 2).
    with_backward_m_tiles<W>(args.bwd.rows_per_warp % 16 ? 0 : args.bwd.rows_per_warp / 16, [&](auto mt) {
        constexpr int MT = decltype(mt)::value;
        // A plan without dy rows must reach a kernel that reads dy in place (the planner ensures it).
        if (!args.bwd.dy_in_smem && !backward_reads_dy_in_place(W, args.relu, MT))
            throw Error(msg("FullyFusedMLP: a backward plan that reads dL/doutput in place reached a kernel that "
                            "stages it (width ", W, ", ", MT, " m16 tiles per warp)"));
        const dim3 block(args.bwd.n_warps * 32);
        if (args.bwd.wgmma) {
            // The planner's conditions, checked again: the kernel's layout and warpgroups assume them.
            const Shape& sh = args.shape;
            if constexpr ((W == 64 || W == 128) && MT == 1) {
                if (!args.relu || args.bwd.n_warps != wgmma_backward_warps(W) || !args.bwd.weights_resident ||
                    !args.bwd.stash_in_smem || args.bwd.dw_in_smem || args.grads || !wgmma_tile_layout(args.bwd, sh) ||
                    !wgmma_backward_shape(sh.width, sh.pin, sh.pout, sh.bias))
                    throw Error(msg("FullyFusedMLP: a wgmma backward plan for a shape or block it does not cover (",
                                    args.bwd.n_warps, " warps, ", sh.pin, " -> ", sh.width, " -> ", sh.pout, ")"));
                fully_fused_mlp_backward_kernel<device_of<H>, W, true, MT, true><<<grid, block, args.bwd.smem_bytes, s>>>(args);
            } else {
                throw Error(msg("FullyFusedMLP: a wgmma backward plan reached the width-", W, " kernels (", MT,
                                " m16 tiles per warp); only widths 64 and 128 with one tile have one"));
            }
        } else if (args.relu) {
            fully_fused_mlp_backward_kernel<device_of<H>, W, true, MT><<<grid, block, args.bwd.smem_bytes, s>>>(args);
        } else {
            fully_fused_mlp_backward_kernel<device_of<H>, W, false, MT><<<grid, block, args.bwd.smem_bytes, s>>>(args);
        }
    });
    TNN_GPU_CHECK_LAUNCH("fully_fused_mlp_backward_kernel");
}

}  // namespace tnn::ffm
