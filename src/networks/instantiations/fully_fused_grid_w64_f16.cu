// The fused training step's grid-input kernel: FullyFusedMLP's wgmma backward kernel (width 64,
// float16) computing each warp's input tile from a grid encoding's forward pass instead of reading an
// encoded tensor (issue #9: the grid's gathers, bound by the L2, run inside the network's kernel,
// bound by its instruction issue and latency, instead of in a launch before it). The values are the
// grid forward kernel's (grid_level_value, rounded as its store_entry), so the step gives the same bits
// as the encoding's forward pass followed by the fused step on its output.
//
// Its own translation unit: two more instantiations of the largest kernel (2- and 3-dimensional grids,
// 2 features per level), built for CUDA only (the gfx12 kernels have no fused step).
#if defined(TNN_WITH_CUDA)
#include "encodings/grid_kernels_gpu.h"
#include "networks/fully_fused_mlp_kernels.cuh"

namespace tnn::ffm {

namespace {

constexpr uint32_t kGridFeatures = 2;

// The grid as the kernel's input source (fully_fused_mlp_backward_kernel's SRC): FusedInput and the
// tile writer. A kernel parameter (__grid_constant__): the level table is read in place.
template <uint32_t D> struct GridTileSource : grid_gpu::FusedInput {
    // Rows [row0, row0 + 16) of the encoding into this warp's tile (rows of tile_stride elements, layout
    // SW): lane l computes level l % n_levels (n_levels divides 32) of every (32 / n_levels)-th row;
    // rows past `valid` get zeros, columns n_in..pin-1 pad_value (as raw_to_tile).
    //
    // The kernel has one block of 12 warps per SM, in step with each other: the gathers are not hidden
    // by other warps, so each lane keeps the loads of kBatch rows in flight together. The rows'
    // positions are loaded once (lane i holds row i % 16's) and handed out by shuffles; per batch, the
    // corner indices of every row come first, then every corner's 4-byte entry (one load each, no
    // branch between them), then the interpolation in grid_level_value's order (the same bits; the
    // forward kernel's 16-byte chunk loads fetch the same entries).
    template <typename T, int SW>
    __device__ __forceinline__ void encode_tile(T* tile, int tile_stride, int64_t row0, int valid, int n_in, int pin,
                                                float pad_value, int lane) const {
        // Nearest reads one corner (the lower vertex), the others every corner: a uniform branch, so
        // that each batch's loads have none between them.
        if (static_cast<grid::Interpolation>(interpolation) == grid::Interpolation::Nearest)
            encode_rows<T, SW, 1>(tile, tile_stride, row0, valid, lane);
        else
            encode_rows<T, SW, (1u << D)>(tile, tile_stride, row0, valid, lane);
        const int n_pad = pin - n_in;
        if (n_pad > 0) {
            const T pad = gpu::from_acc<T>(pad_value);
            for (int i = lane; i < 16 * n_pad; i += 32) *tile_at<SW>(tile, tile_stride, i / n_pad, n_in + i % n_pad) = pad;
        }
    }

    // encode_tile's rows, NL corners loaded per row (1: Nearest, else all).
    template <typename T, int SW, uint32_t NL>
    __device__ __forceinline__ void encode_rows(T* tile, int tile_stride, int64_t row0, int valid, int lane) const {
        constexpr uint32_t F = kGridFeatures;
        constexpr int kBatch = D == 2 ? 8 : 4;  // 32 entries in flight per lane either way
        const uint32_t level = static_cast<uint32_t>(lane) & (n_levels - 1u);
        const int step = static_cast<int>(32u / n_levels), first = lane / static_cast<int>(n_levels);
        const int iterations = (16 + step - 1) / step;  // the same for every lane: the shuffles converge
        const grid_gpu::LevelInfo L = levels[level];
        const bool on = level < n_active;
        const auto interp = static_cast<grid::Interpolation>(interpolation);
        const uint32_t* __restrict__ V = static_cast<const uint32_t*>(params) + L.offset;  // F = 2 16-bit values
        float mine[D];
        const int own = lane & 15;
        TNN_UNROLL
        for (uint32_t d = 0; d < D; ++d) mine[d] = own < valid ? this->x[(row0 + own) * this->x_stride + d] : 0.0f;
        for (int k0 = 0; k0 < iterations; k0 += kBatch) {
            float w[kBatch][D];
            uint32_t idx[kBatch][NL], e[kBatch][NL];
#pragma unroll
            for (int b = 0; b < kBatch; ++b) {
                const int r = first + (k0 + b) * step;
                float pos[D];
                TNN_UNROLL
                for (uint32_t d = 0; d < D; ++d) pos[d] = __shfl_sync(0xFFFFFFFFu, mine[d], r & 15);
                const grid_gpu::Located<D> p = grid_gpu::locate<D>(pos, L.scale, interp);
                const grid_gpu::CornerTerms<D> t = grid_gpu::corner_terms<D>(L, p.cell, factors);
                TNN_UNROLL
                for (uint32_t d = 0; d < D; ++d) w[b][d] = p.w[d];
                TNN_UNROLL
                for (uint32_t c = 0; c < NL; ++c) idx[b][c] = grid_gpu::corner_entry<D>(*this, L, t, p.cell, c);
            }
#pragma unroll
            for (int b = 0; b < kBatch; ++b)
                TNN_UNROLL
                for (uint32_t c = 0; c < NL; ++c) e[b][c] = V[idx[b][c]];
#pragma unroll
            for (int b = 0; b < kBatch; ++b) {
                const int r = first + (k0 + b) * step;
                float out[F] = {0.0f, 0.0f};
                if constexpr (NL == 1) {
                    grid_gpu::decode_words<T, F>(&e[b][0], out);
                } else {
                    TNN_UNROLL
                    for (uint32_t c = 0; c < NL; ++c) {
                        float v[F];
                        grid_gpu::decode_words<T, F>(&e[b][c], v);
                        const float W = grid_gpu::corner_weight<D>(w[b], c);
                        TNN_UNROLL
                        for (uint32_t f = 0; f < F; ++f) out[f] = fmaf(W, v[f], out[f]);
                    }
                }
                if (!on || r >= valid) out[0] = out[1] = 0.0f;
                uint32_t word[1];
                grid_gpu::encode_words<T, F>(out, word);
                if (r < 16 && k0 + b < iterations)
                    *reinterpret_cast<uint32_t*>(tile_at<SW>(tile, tile_stride, r, static_cast<int>(level * F))) = word[0];
            }
        }
    }
};

using T16 = device_of<half>;
template <uint32_t D> using GridKernel = void(const KernelArgs, const GridTileSource<D>);
template <uint32_t D> constexpr GridKernel<D>* grid_kernel() {
    return fully_fused_mlp_backward_kernel<T16, 64, true, 1, true, GridTileSource<D>>;
}

}  // namespace

KernelInfo backward_grid_input_info(int max_smem, uint32_t n_dims) {
    KernelInfo info;
    if (n_dims == 2) info = kernel_info(grid_kernel<2>(), max_smem);
    else if (n_dims == 3) info = kernel_info(grid_kernel<3>(), max_smem);
    else return info;  // no kernel: max_warps 0 refuses it
#if defined(TNN_CUDA_WGMMA)
    info.wgmma = true;
#endif  // TNN_CUDA_WGMMA
    return info;
}

void launch_backward_grid_input(const KernelArgs& args, const grid_gpu::FusedInput& grid, int blocks, void* stream) {
    const Shape& sh = args.shape;
    // Kernels::backward's conditions for the wgmma kernel, and the grid's for the tile writer.
    if (!args.relu || !args.fused_loss || !args.bwd.wgmma || args.bwd.n_warps != wgmma_backward_warps(64) ||
        !args.bwd.weights_resident || !args.bwd.stash_in_smem || args.bwd.dw_in_smem || args.grads ||
        !wgmma_tile_layout(args.bwd, sh) || !wgmma_backward_shape(sh.width, sh.pin, sh.pout, sh.bias) || sh.width != 64 ||
        args.in_f32 || grid.n_features != kGridFeatures || grid.n_levels == 0 || 32u % grid.n_levels != 0 ||
        int64_t(grid.n_levels) * kGridFeatures != sh.n_in)
        throw Error(msg("FullyFusedMLP: a grid-input backward launch for a plan or grid the kernel does not cover (",
                        args.bwd.n_warps, " warps, ", sh.pin, " -> ", sh.width, " -> ", sh.pout, ", ", grid.n_levels,
                        " levels of ", grid.n_features, " features)"));
    const auto s = static_cast<gpu_stream_t>(stream);
    const dim3 block(args.bwd.n_warps * 32);
    auto launch = [&](auto d) {
        constexpr uint32_t D = decltype(d)::value;
        GridTileSource<D> src;
        static_cast<grid_gpu::FusedInput&>(src) = grid;
        grid_kernel<D>()<<<blocks, block, args.bwd.smem_bytes, s>>>(args, src);
    };
    if (grid.n_dims == 2) launch(std::integral_constant<uint32_t, 2>{});
    else if (grid.n_dims == 3) launch(std::integral_constant<uint32_t, 3>{});
    else throw UnsupportedError(msg("FullyFusedMLP: no grid-input kernel for ", grid.n_dims, " input dimensions (2 or 3)"));
    TNN_GPU_CHECK_LAUNCH("fully_fused_mlp_backward_kernel (grid input)");
}

}  // namespace tnn::ffm
#endif  // TNN_WITH_CUDA
