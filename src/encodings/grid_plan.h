// Host-side planning of the GPU grid's parameter gradient: which levels are reduced in shared memory
// (as items of a level's features) and which through global atomics, with how many rows per block.
// Pure host code on grid_gpu.h's GridDesc, so that the plan's invariants are tested on the CPU
// (tests/gpu/test_gpu_encodings_host.cpp) as well as by the GPU tests through the kernels. GPU builds
// only, as GridDesc.
#pragma once

#include "encodings/grid_gpu.h"

#include <stddef.h>
#include <stdint.h>

#include <algorithm>

#ifdef TNN_WITH_GPU
#include "gpu/gpu.h"

namespace tnn::grid_gpu {

// Levels one parameter-gradient launch covers, in launch order (blocks [i * blocks_per_level,
// (i + 1) * blocks_per_level) take level ids[i]).
struct LevelList {
    uint8_t ids[grid::kMaxLevels];
    uint32_t count;
};

// Feature groups of small levels reduced in shared memory: item i is level `level`, features
// [f0, f0 + fs); each item gets blocks_per_item blocks of rows_per_block rows. Capped so that the
// kernel arguments stay within 4 KiB; further small levels take the global path.
constexpr uint32_t kMaxSharedItems = 64;
struct SharedItems {
    struct Item {
        uint8_t level, f0, fs;
    } items[kMaxSharedItems];
    uint32_t count;
};

constexpr uint32_t kThreads = 256;  // threads per block of every kernel but the forward's (see Variant)

// What one launch can address: 2^31 - 1 blocks on NVIDIA GPUs (gridDim.x); on AMD GPUs HIP counts a grid
// dimension's work-items (blocks x threads) in 32 bits, so fewer than 2^32 of them.
constexpr uint64_t max_launch_blocks(bool amd, uint32_t threads) {
    return amd ? uint64_t(0xFFFFFFFFu) / threads : uint64_t(0x7FFFFFFFu);
}
#if defined(TNN_WITH_HIP)
constexpr bool kAmdLaunches = true;
#else
constexpr bool kAmdLaunches = false;
#endif  // TNN_WITH_HIP

// The blocks of a one-dimensional launch over `rows` rows, rows_per_block of them per block, repeated for
// `copies` (>= 1) levels or shared-memory items (a run of blocks each): `per_copy` blocks per run, `total`
// in all. A batch past what one launch can address is refused with an error naming the kernel and the
// largest batch it takes, instead of a block count that wraps (and silently skips levels) or a launch
// that fails with the runtime's bare message.
struct RowBlocks {
    uint32_t per_copy, total;
};
inline RowBlocks row_blocks(const char* kernel, int64_t rows, int64_t rows_per_block, uint32_t copies,
                            uint32_t threads, bool amd = kAmdLaunches) {
    const uint64_t per_copy = static_cast<uint64_t>(gpu::ceil_div<int64_t>(rows, rows_per_block));
    const uint64_t limit = max_launch_blocks(amd, threads);
    if (per_copy > limit / copies)
        throw UnsupportedError(msg("grid encoding (GPU): a batch of ", rows, " rows needs more blocks of ", threads,
                                   " threads for ", kernel, " than one launch on this GPU takes (", limit,
                                   "); it takes at most ", limit / copies * static_cast<uint64_t>(rows_per_block),
                                   " rows: split the batch"));
    return {static_cast<uint32_t>(per_copy), static_cast<uint32_t>(per_copy * copies)};
}

// The most contributions one shared-memory slot of the deterministic gradient's 32-bit words
// (WordsSink in grid_kernels_gpu.h) may take per block: their two low sums stay exact below 2^32.
constexpr int64_t kWordsMaxAdds = int64_t(1) << 16;
static_assert(kWordsMaxAdds >= (int64_t(kThreads) << grid::kMaxDims),
              "a block of kThreads rows with 2^D corners each must fit kWordsMaxAdds (plan_reduction's cap)");

// Which levels a parameter-gradient pass reduces where. Small levels (all features, or a power-of-two
// group of them, fit the shared-memory budget) whose rows touch each accumulator several times over
// go through shared memory; the rest through global atomics, level after level. The coarse levels
// are where thousands of rows hit each entry: in L2 those atomics would queue on the same addresses.
struct ReductionPlan {
    LevelList global{};
    LevelList all{};  // every contributing level (the fixed-point bound pass)
    SharedItems shared{};
    uint32_t blocks_per_item = 0;
    int64_t rows_per_block = 0;
    size_t shared_bytes = 0;
};

// Whether a first-order row feeds one corner per level (Nearest, stochastic interpolation) rather
// than all 2^D of them.
inline bool one_corner_per_level(const GridDesc& g) {
    return g.interpolation == grid::Interpolation::Nearest || g.stochastic_interpolation;
}

// acc_bytes: bytes per shared slot (one value); budget: shared memory per block. max_adds (0: no
// limit): at most that many contributions per shared slot and block (WordsSink's slots), by capping
// the rows per block.
inline ReductionPlan plan_reduction(const GridDesc& g, int64_t rows, uint32_t n_contributing, bool second,
                                    size_t acc_bytes, size_t budget, int64_t max_adds = 0) {
    ReductionPlan p;
    const uint32_t F = g.n_features;
    // Accumulator slots one row touches per level (shared-memory items are first-order only).
    const int64_t touches = one_corner_per_level(g) ? 1 : (int64_t(1) << g.n_dims);
    uint64_t max_slots = 0;
    for (uint32_t l = 0; l < n_contributing; ++l) {
        p.all.ids[p.all.count++] = static_cast<uint8_t>(l);
        const uint64_t size = g.levels[l].size;
        uint32_t fs = F;
        while (fs > 0 && size * fs * acc_bytes > budget) fs /= 2;
        // Worth it when the rows add at least 4 contributions per shared slot (the flush costs one
        // coalesced atomic per slot and block).
        const bool small = !second && fs > 0 &&
                           static_cast<uint64_t>(rows) * touches >= 4 * size * fs &&
                           p.shared.count + F / fs <= kMaxSharedItems;
        if (!small) {
            p.global.ids[p.global.count++] = static_cast<uint8_t>(l);
            continue;
        }
        for (uint32_t f0 = 0; f0 < F; f0 += fs)
            p.shared.items[p.shared.count++] = {static_cast<uint8_t>(l), static_cast<uint8_t>(f0),
                                                static_cast<uint8_t>(fs)};
        max_slots = std::max<uint64_t>(max_slots, size * fs);
    }
    if (p.shared.count > 0) {
        // Rows per block: enough that the block adds about 4 contributions per slot before its flush.
        const int64_t want =
            std::max<int64_t>(1024, gpu::ceil_div<int64_t>(4 * static_cast<int64_t>(max_slots), touches));
        p.rows_per_block = gpu::round_up<int64_t>(std::min(want, rows), kThreads);
        if (max_adds > 0)  // whole blocks of threads: kThreads rows of 2^7 corners stay within 2^16
            p.rows_per_block = std::min(p.rows_per_block, max_adds / touches / kThreads * kThreads);
        p.blocks_per_item = static_cast<uint32_t>(gpu::ceil_div<int64_t>(rows, p.rows_per_block));
        p.shared_bytes = max_slots * acc_bytes;
    }
    return p;
}

}  // namespace tnn::grid_gpu
#endif  // TNN_WITH_GPU
