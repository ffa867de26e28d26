// FullyFusedMLP on the GPU: the device checks, the launch plan, the one runtime -> compile-time
// dispatch to the (dtype, width) instantiations (instantiations/fully_fused_w*_*.cu: NVIDIA mma.sync
// kernels, or AMD gfx12 WMMA kernels in HIP builds), and the fixed-order reduction of the per-block
// weight-gradient partials.
#if defined(TNN_WITH_GPU)
#include "networks/fully_fused_mlp.h"

#include "gpu/gpu.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <mutex>
#include <tuple>

#ifndef gpu_func_set_attribute
#define gpu_func_set_attribute cudaFuncSetAttribute
#define gpu_func_attribute_max_dynamic_shared_memory_size cudaFuncAttributeMaxDynamicSharedMemorySize
#endif  // gpu_func_set_attribute

namespace tnn::ffm {

namespace {

// ---- Kernel: dL/dparams[i] = T(sum over blocks b = 0, 1, ... of partials[b][i] (+ old value)).
// A block handles 32 parameters with 8 warps; warp q sums blocks q, q + 8, ... in order, then one
// thread adds the 8 warp sums in order: the result depends only on the number of blocks.
constexpr int kReduceSlices = 8;

// Partials are in fragment order (Shape::fragment_index); the result is in parameter order.
template <typename T>
__global__ void fully_fused_mlp_reduce_kernel(const float* __restrict__ partials, int n_blocks, Shape shape,
                                              T* __restrict__ dL_dparams, bool accumulate) {
    __shared__ float sums[kReduceSlices][33];
    const int lane = threadIdx.x % 32, slice = threadIdx.x / 32;
    const int64_t n_params = shape.n_params();
    const int64_t i = int64_t(blockIdx.x) * 32 + lane;
    float s = 0.0f;
    if (i < n_params) {
        const int64_t f = shape.fragment_index(i);
        for (int b = slice; b < n_blocks; b += kReduceSlices) s += partials[int64_t(b) * n_params + f];
    }
    sums[slice][lane] = s;
    __syncthreads();
    if (slice == 0 && i < n_params) {
        float total = 0.0f;
        for (int q = 0; q < kReduceSlices; ++q) total += sums[q][lane];
        if (accumulate) total += gpu::to_acc(dL_dparams[i]);
        dL_dparams[i] = gpu::from_acc<T>(total);
    }
}

// ---- The one place where (dtype, width) become template arguments.
template <typename F> void dispatch(DType dtype, uint32_t width, F&& f) {
    auto by_width = [&](auto h) {
        using H = decltype(h);
        switch (width) {
            case 16: f(Kernels<H, 16>{}); return;
            case 32: f(Kernels<H, 32>{}); return;
            case 64: f(Kernels<H, 64>{}); return;
            case 128: f(Kernels<H, 128>{}); return;
        }
        throw UnsupportedError(msg("FullyFusedMLP: no kernels for width ", width, "; valid choices: 16, 32, 64, 128"));
    };
    switch (dtype) {
        case DType::f16: by_width(half{}); return;
        case DType::bf16: by_width(bfloat16{}); return;
        default: throw DTypeError(msg("FullyFusedMLP: no kernels for ", dtype_name(dtype), "; valid: float16, bfloat16"));
    }
}

// Device limits and kernel register counts, read once per (device, kernel) and cached.
struct KernelKey {
    int device;
    DType dtype;
    uint32_t width;
    bool backward, relu;
    int m_tiles;  // backward only
    bool operator<(const KernelKey& o) const {
        return std::tie(device, dtype, width, backward, relu, m_tiles) <
               std::tie(o.device, o.dtype, o.width, o.backward, o.relu, o.m_tiles);
    }
};

DeviceLimits device_limits(int device, DType dtype, uint32_t width, bool backward, bool relu, int m_tiles = 1) {
    static std::mutex mutex;
    static std::map<KernelKey, DeviceLimits> cache;
    std::lock_guard<std::mutex> lock(mutex);
    const KernelKey key{device, dtype, width, backward, relu, m_tiles};
    auto it = cache.find(key);
    if (it != cache.end()) return it->second;

    const gpu::DeviceProperties& props = gpu::device_properties(device);
#if defined(TNN_WITH_HIP)
    if (props.capability < gpu::kCcRdna4 || props.capability >= gpu::kCcRdna4 + 0x100 || props.warp_size != 32)
        throw UnsupportedError(msg("FullyFusedMLP on AMD needs gfx12 (RDNA4) WMMA in wave32; ", props.name, " is ",
                                   props.arch, "; use PortableMLP"));
#else
    if (!gpu::is_nvidia(props.capability) || props.capability < gpu::kCcAmpere)
        throw UnsupportedError(msg("FullyFusedMLP needs NVIDIA tensor cores with mma.sync bf16/fp16 (sm_80 or newer); ",
                                   props.name, " is ", props.arch, "; use BlasLtMLP or PortableMLP"));
#endif  // TNN_WITH_HIP
    DeviceLimits d;
    d.smem_per_block = static_cast<int64_t>(props.smem_per_block_optin);
    // sm_80/sm_90: the per-SM pool is the block maximum + 1 KB. AMD: one CU's share of LDS, taken the
    // same way (the estimate reserves 1 KB per block).
    d.smem_per_sm = d.smem_per_block + 1024;
    dispatch(dtype, width, [&](auto k) {
        using K = decltype(k);
        const KernelInfo info = backward ? K::backward_info(static_cast<int>(d.smem_per_block), relu, m_tiles)
                                         : K::forward_info(static_cast<int>(d.smem_per_block), relu);
        d.regs_per_thread = info.regs_per_thread;
        d.max_warps_per_block = info.max_warps;
        // sm_90a code runs on compute capability 9.0 only (the module would not load elsewhere).
        d.wgmma = info.wgmma && props.capability == gpu::kCcHopper;
    });
    cache.emplace(key, d);
    return d;
}

}  // namespace

bool wgmma_backward_available(int device, DType dtype, int width) {
    gpu::DeviceGuard guard(device);
    return device_limits(device, dtype, static_cast<uint32_t>(width), true, true, 1).wgmma;
}

static std::mutex g_last_backward_mutex;
static LastBackward g_last_backward;

LastBackward last_backward() {
    std::lock_guard<std::mutex> lock(g_last_backward_mutex);
    return g_last_backward;
}

namespace {

KernelArgs common_args(const MlpLayout& layout, ConstView input, const void* params, const PlanOverride& o) {
    KernelArgs a;
    a.shape = shape_of(layout);
    a.rows = input.rows;
    a.pad_value = layout.input_pad_value;
    a.act = layout.activation;
    a.out_act = layout.output_activation;
    a.relu = a.act == Activation::ReLU && a.out_act == Activation::None && !o.generic_kernels;
    a.params = params;
    a.params_aligned = reinterpret_cast<uintptr_t>(params) % 16 == 0;
    a.in = input.data;
    a.in_stride = input.stride;
    a.in_f32 = input.dtype == DType::f32;
    const int in_bytes = a.in_f32 ? 4 : 2;
    a.in_vec = copy_vector_bytes(input.data, input.stride * in_bytes, int64_t(layout.n_input_dims) * in_bytes);
    return a;
}

int grid_size(int64_t rows, int64_t rows_per_block, int sm_count, int blocks_per_sm) {
    const int64_t tiles = (rows + rows_per_block - 1) / rows_per_block;
    return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(tiles, int64_t(sm_count) * blocks_per_sm)));
}

}  // namespace

void gpu_forward(const MlpLayout& layout, DType dtype, const Stream& stream, ConstView input, View output,
                 const void* params) {
    const int device = stream.device().index;
    gpu::DeviceGuard guard(device);
    const PlanOverride o = plan_override();
    KernelArgs a = common_args(layout, input, params, o);
    const DeviceLimits limits = device_limits(device, dtype, layout.width, false, a.relu);
    a.out = output.data;
    a.out_stride = output.stride;
    a.out_f32 = output.dtype == DType::f32;
    const int out_bytes = a.out_f32 ? 4 : 2;
    a.out_vec = copy_vector_bytes(output.data, output.stride * out_bytes, int64_t(layout.n_output_dims) * out_bytes);
    a.fwd = plan_forward(a.shape, a.in_f32 ? 4 : 2, out_bytes, limits, o);
    const int grid = grid_size(a.rows, int64_t(a.fwd.n_warps) * a.fwd.rows_per_warp,
                               gpu::device_properties(device).sm_count, a.fwd.blocks_per_sm);
    dispatch(dtype, layout.width, [&](auto k) { decltype(k)::forward(a, grid, stream.native()); });
}

void gpu_backward(const MlpLayout& layout, DType dtype, const Stream& stream, ConstView input, ConstView dL_doutput,
                  View* dL_dinput, void* dL_dparams, const void* params, GradMode mode, const FusedLoss* loss) {
    if (!dL_dinput && !dL_dparams) return;
    const int device = stream.device().index;
    gpu::DeviceGuard guard(device);
    const PlanOverride o = plan_override();
    KernelArgs a = common_args(layout, input, params, o);
    // The limits of the kernel the override names, else of both kernels the planner chooses from.
    const int m_tiles = o.backward_m_tiles ? o.backward_m_tiles : 1;
    const DeviceLimits limits = device_limits(device, dtype, layout.width, true, a.relu, m_tiles);
    const bool try_mt2 = !o.backward_m_tiles && has_backward_m_tiles(layout.width, 2);
    const DeviceLimits limits_mt2 = try_mt2 ? device_limits(device, dtype, layout.width, true, a.relu, 2) : DeviceLimits{};
    // dL/doutput in the output dtype; the fused step takes the loss instead (KernelArgs).
    a.out_f32 = loss ? loss->output_f32 : dL_doutput.dtype == DType::f32;
    a.dy_f32 = a.out_f32;
    if (!loss) {
        a.dy = dL_doutput.data;
        a.dy_stride = dL_doutput.stride;
        const int b = a.dy_f32 ? 4 : 2;
        a.dy_vec = copy_vector_bytes(dL_doutput.data, dL_doutput.stride * b, int64_t(layout.n_output_dims) * b);
        a.dy_vec2 = pair_aligned(a.dy, a.dy_stride, b);
    } else {
#if !defined(TNN_WITH_CUDA)
        throw UnsupportedError("FullyFusedMLP: the gfx12 kernels have no fused training step (can_fuse_loss)");
#endif  // !TNN_WITH_CUDA
        if (!a.relu)
            throw UnsupportedError("FullyFusedMLP: the fused training step is compiled into the kernels for ReLU "
                                   "hidden layers and a linear output only (can_fuse_loss)");
        a.fused_loss = true;
        a.target = loss->target.ptr<float>();
        a.target_stride = loss->target.stride;
        a.target_vec2 = pair_aligned(a.target, a.target_stride, 4);
        a.loss_kind = loss->kind;
        a.loss_scale = loss->loss_scale;
        a.loss_n = static_cast<float>(input.rows * int64_t(layout.n_output_dims));  // as losses.cu rounds N
        int n_exp = 0;
        if (std::frexp(a.loss_n, &n_exp) == 0.5f) a.loss_inv_n = std::ldexp(1.0f, 1 - n_exp);  // N = 2^(n_exp-1)
        a.values = loss->values.ptr<float>();
        a.values_stride = loss->values.stride;
        a.values_vec2 = pair_aligned(a.values, a.values_stride, 4);
    }
    if (dL_dinput) {
        a.dx = dL_dinput->data;
        a.dx_stride = dL_dinput->stride;
        a.dx_vec = dx_store_values(a.dx, a.dx_stride, a.in_f32 ? 4 : 2, o.dx_values);
    }
    const int64_t n_params = a.shape.n_params();
    const int sm_count = gpu::device_properties(device).sm_count;
    // Blocks of a plan. Per-block partials (and a global stash) are bounded to 256 MiB each for very
    // deep networks.
    auto grid_of = [&](const BackwardPlan& p) {
        constexpr int64_t kScratchCap = int64_t(256) << 20;
        int g = grid_size(a.rows, int64_t(p.n_warps) * p.rows_per_warp, sm_count, p.blocks_per_sm);
        if (dL_dparams) g = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(g, kScratchCap / (n_params * 4))));
        if (!p.stash_in_smem)
            g = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(g, kScratchCap / p.stash_bytes_per_block)));
        return g;
    };
    auto plan = [&](int dy_bytes, const PlanOverride& ov) {
        return plan_backward(a.shape, a.in_f32 ? 4 : 2, dy_bytes, layout.activation, dL_dparams != nullptr, limits, ov,
                             try_mt2 ? &limits_mt2 : nullptr);
    };
    a.bwd = plan(a.dy_f32 ? 4 : 2, o);
    int grid = grid_of(a.bwd);
    // Staged like dy only where the plan has dy rows in shared memory; plans without them (dy_global)
    // take it through the raw input rows where a row fits (target_in_raw, below), else from global memory.
    if (loss && !a.dy_f32 && !o.fused_target_global && a.bwd.dy_in_smem) {
        // Staging the fp32 target needs more shared memory per row than dL/doutput would: take that
        // plan only when it keeps the unfused plan's kernel kind, rows per block and blocks (so dW sums
        // the same rows in the same order: same_dw_order; e.g. 1->128->52 with two hidden layers would
        // otherwise move from the wgmma kernel to the mma.sync kernel, 8 warps each); otherwise the
        // epilogue reads the target from global memory.
        try {
            const BackwardPlan staged = plan(4, o);
            const int staged_grid = grid_of(staged);
            // ... and stages rows at all: the 4-byte plan may instead read dy in place (a 12-warp kernel
            // with no room for the bigger rows), and then there is no staged target to read.
            if (staged.dy_in_smem && same_dw_order(staged, staged_grid, a.bwd, grid)) {
                a.bwd = staged;
                a.staged_target = true;
            }
        } catch (const UnsupportedError&) {  // the staged plan fits nowhere: keep the global reads
        }
    } else if (loss && !o.fused_target_global && a.bwd.dy_in_smem) {
        a.staged_target = true;  // fp32 output: the target has dL/doutput's size
    }
    // A 12-warp plan with dy rows that the target does not use (16-bit dL/doutput rows fit, fp32 target
    // rows do not: the wgmma kernel's smaller tiles at 64->64->64): the same blocks without dy rows, so
    // that the target goes through the raw input rows below instead of registers (measured faster:
    // run 27 of 2026-11-30, 1.467 vs 1.480 ms).
    if (loss && !o.fused_target_global && a.bwd.dy_in_smem && !a.staged_target && a.bwd.n_warps > kMaxWarps &&
        int64_t(layout.n_output_dims) * 4 <= a.bwd.raw_stride) {
        PlanOverride in_place = o;
        in_place.dy_global = true;
        try {
            const BackwardPlan p = plan(a.dy_f32 ? 4 : 2, in_place);
            if (same_dw_order(p, grid_of(p), a.bwd, grid)) a.bwd = p;
        } catch (const UnsupportedError&) {  // keep the plan with dy rows (target from global memory)
        }
    }
    // A plan without dy rows (dy_global: the 12-warp plans, or <= 8 warps on request): the target
    // through the raw input rows where a target row fits one.
    if (loss && !o.fused_target_global && !a.bwd.dy_in_smem &&
        int64_t(layout.n_output_dims) * 4 <= a.bwd.raw_stride) {
        a.target_in_raw = true;
        a.target_vec = copy_vector_bytes(a.target, a.target_stride * 4, int64_t(layout.n_output_dims) * 4);
    }
    if (a.staged_target) {
        a.dy = a.target;
        a.dy_stride = a.target_stride;
        a.dy_f32 = true;
        a.dy_vec = copy_vector_bytes(a.target, a.target_stride * 4, int64_t(layout.n_output_dims) * 4);
    }

    // One block (small batches): the kernel writes dL/dparams itself; no partials (unless its
    // accumulators live in global memory) and no reduction launch. Not the wgmma kernel: its slot
    // takes red.global.add, which the block would have to fence before reading the slot back.
    const bool direct = dL_dparams && grid == 1 && !a.bwd.wgmma;
    if (direct) {
        a.grads = dL_dparams;
        a.accumulate = mode == GradMode::accumulate;
    }
    Buffer partials, stash;
    if (dL_dparams && (!direct || !a.bwd.dw_in_smem)) {
        partials = Buffer::temporary(stream, static_cast<size_t>(grid) * n_params * sizeof(float));
        a.dw_partials = partials.ptr<float>();
    }
    if (!a.bwd.stash_in_smem) {
        stash = Buffer::temporary(stream, static_cast<size_t>(grid) * a.bwd.stash_bytes_per_block);
        a.stash = stash.data();
    }
    {
        std::lock_guard<std::mutex> lock(g_last_backward_mutex);
        g_last_backward = LastBackward{a.bwd, a.dx ? a.dx_vec : 0};
    }
    dispatch(dtype, layout.width, [&](auto k) { decltype(k)::backward(a, grid, stream.native()); });
    if (dL_dparams && !direct) {
        const auto s = gpu::native_stream(stream);
        const unsigned blocks = static_cast<unsigned>(gpu::ceil_div<int64_t>(n_params, 32));
        const bool accumulate = mode == GradMode::accumulate;
        if (dtype == DType::f16)
            fully_fused_mlp_reduce_kernel<gpu_half><<<blocks, 32 * kReduceSlices, 0, s>>>(
                a.dw_partials, grid, a.shape, static_cast<gpu_half*>(dL_dparams), accumulate);
        else
            fully_fused_mlp_reduce_kernel<gpu_bf16><<<blocks, 32 * kReduceSlices, 0, s>>>(
                a.dw_partials, grid, a.shape, static_cast<gpu_bf16*>(dL_dparams), accumulate);
        TNN_GPU_CHECK_LAUNCH("fully_fused_mlp_reduce_kernel");
    }
}

}  // namespace tnn::ffm
#endif  // TNN_WITH_GPU
