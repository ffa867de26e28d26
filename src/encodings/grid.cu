// Grid encodings on the GPU: the entry points grid.cpp calls. Builds the kernel arguments from the
// module's level table, plans the parameter-gradient reduction (which levels go through shared memory,
// fp32 atomics or the deterministic fixed-point path), takes scratch from the stream's temporary
// memory and launches the kernels of grid_kernels_gpu.h (compiled per input dimension in
// instantiations/grid_d*.cu). No host synchronisation and no driver allocation: capturable in a graph.
#include "encodings/grid_kernels_gpu.h"

#include <tnn/runtime.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <vector>

namespace tnn::grid_gpu {

namespace {

// exponents[l] = fixed_point_exponent(bound of level l).
__global__ void grid_fixed_point_exponent_kernel(const unsigned int* __restrict__ bound_bits, uint32_t n_levels,
                                                 int64_t rows, int* __restrict__ exponents) {
    const uint32_t l = blockIdx.x * blockDim.x + threadIdx.x;
    if (l < n_levels) exponents[l] = fixed_point_exponent(__uint_as_float(bound_bits[l]), rows);
}

std::mutex g_variant_mutex;
Variant g_variant;

const Launchers& launchers_for(uint32_t n_dims) {
    switch (n_dims) {
        case 1: return launchers<1>();
        case 2: return launchers<2>();
        case 3: return launchers<3>();
        case 4: return launchers<4>();
        case 5: return launchers<5>();
        case 6: return launchers<6>();
        case 7: return launchers<7>();
    }
    throw UnsupportedError(msg("grid encoding (GPU): ", n_dims, " input dimensions (1 to 7)"));
}

KernelArgs make_args(const GridDesc& g, uint32_t n_active) {
    KernelArgs a;
    for (uint32_t l = 0; l < grid::kMaxLevels; ++l) a.levels[l] = g.levels[l];
    a.generic_hash = hash_factors(g.hash, a.factors) ? 0u : 1u;
    a.n_levels = g.n_levels;
    a.n_active = std::min(n_active, g.n_levels);
    a.hash = static_cast<uint32_t>(g.hash);
    a.interpolation = static_cast<uint32_t>(g.interpolation);
    a.stochastic = g.stochastic_interpolation ? 1u : 0u;
    return a;
}

using gpu::aligned;

// The forward's 16-byte chunk loads need every level to start on and span whole 16-byte chunks.
bool chunk_layout(const GridDesc& g) {
    const size_t entry = g.n_features * dtype_size(g.dtype);
    for (uint32_t l = 0; l < g.n_levels; ++l)
        if ((g.levels[l].offset * entry) % 16 != 0 || (g.levels[l].size * entry) % 16 != 0) return false;
    return true;
}

void zero(const Stream& stream, void* p, size_t bytes) {
    if (bytes > 0) TNN_GPU_CHECK(gpu_memset_async(p, 0, bytes, gpu::native_stream(stream)));
}

// Shared memory per block for small levels: kSharedBytes (48 KiB) unless a variant asks for more (up
// to the device's opt-in maximum, 227 KiB on sm_90) or for none (0). Opting in was measured slower on
// the H200 (main row at 2^20: backward 1.76 ms with 227 KiB, 1.24 ms with 48 KiB): fewer blocks per SM
// hide less of the global atomics' latency, and the levels it adds have few rows per entry.
size_t shared_budget(const Stream& stream, const Variant& v) {
    if (v.shared_kib == 0) return 0;
    if (v.shared_kib < 0) return kSharedBytes;
    const size_t optin = gpu::device_properties(stream.device().index).smem_per_block_optin;
    return std::min(std::max(optin, kSharedBytes), static_cast<size_t>(v.shared_kib) * 1024);
}

// How the fast gradient's shared-memory levels accumulate: fp32 slots, whose atomics are compare-and-swap
// loops on NVIDIA GPUs, or split fixed point (two native 32-bit integer atomics per value, 8 bytes per
// slot; Variant::shared_fixed). Split by default for Tiled grids on CUDA devices (AMD GPUs add floats in
// LDS natively), with room for both features of a 16^3 level (64 KiB of slots): the Tiled row's forward
// + backward 1.536 ms against 1.871 with 48 KiB and 4.030 with fp32 slots (run 79). The split kernel's
// bound word comes out of the budget.
struct SharedSlots {
    bool split;
    size_t slot_bytes, budget;
};
SharedSlots fast_shared_slots(const GridDesc& desc, const Stream& stream, const Variant& v) {
#if defined(TNN_WITH_HIP)
    constexpr bool kSplitTiled = false;
#else
    constexpr bool kSplitTiled = true;
#endif  // TNN_WITH_HIP
    const bool tiled = desc.type == grid::GridType::Tiled;
    const bool split = v.shared_fixed > 0 || (v.shared_fixed < 0 && tiled && kSplitTiled);
    if (!split) return {false, sizeof(float), shared_budget(stream, v)};
    Variant budget = v;
    if (tiled && v.shared_fixed < 0 && v.shared_kib < 0) budget.shared_kib = 96;
    const size_t bytes = shared_budget(stream, budget);
    return {true, 2 * sizeof(uint32_t), bytes > kSplitSharedExtra ? bytes - kSplitSharedExtra : 0};
}

// A Variant switch whose kernels are built for NVIDIA GPUs only: `setting` (-1 automatic, 0 off, 1 on) on
// CUDA builds; off on AMD GPUs, where asking for it is an UnsupportedError naming it (`what`).
bool nvidia_only_switch(int setting, const char* what) {
#if defined(TNN_WITH_HIP)
    if (setting > 0)
        throw UnsupportedError(msg("grid encoding (GPU): Variant::", what, " is built for NVIDIA GPUs only"));
    return false;
#else
    (void)what;
    return setting != 0;
#endif  // TNN_WITH_HIP
}

// How the deterministic gradient's shared-memory levels accumulate: three native 32-bit integer words per
// value (Variant::det_shared_words) or one 64-bit slot, whose shared atomics are compare-and-swap loops on
// NVIDIA GPUs. Words by default on CUDA devices; run 91 (H200, 2^20 rows, fp16) with words against 64-bit
// slots: Tiled forward + backward 1.840 / 6.406 ms, Dense 0.592 / 0.614, 2D 1.152 / 1.224, main row
// backward 1.952 / 1.972 (its level 0: 16^3 entries, one feature per 48 KiB block either way). AMD
// GPUs add 64-bit integers in LDS natively.
bool det_shared_words(const Variant& v) {
    return nvidia_only_switch(v.det_shared_words, "det_shared_words (three 32-bit words per shared-memory slot)");
}

// Whether the deterministic gradient sends x-pairs of adjacent entries as bulk reductions
// (Variant::det_bulk; FixedBulkPairSink). Run 106 of 2026-12-02 (H200, main row, deterministic backward):
// 1.529 ms with them against 1.951 without at 2^20 (2.902 ms at 2^21), the deterministic training step
// 2.587 against 3.008 ms. By default only where the bulk operation exists (NVIDIA sm_90 and later): an
// older NVIDIA GPU running the bulk kernel would issue its four values as separate atomics, the same bits
// but slower than the lanes.
std::atomic<uint64_t> g_bulk_pair_launches{0};
std::atomic<uint64_t> g_staged_scratch_groups{0};  // groups converted right after their kernel (test hook)
std::atomic<uint64_t> g_fused_zeroings{0};  // next groups' parts zeroed by a conversion (test hook)
std::atomic<uint64_t> g_staged_scratch_passes{0};  // gradient passes with a staged scratch (test hook)
std::atomic<uint64_t> g_staged_bound_launches{0};  // the bound pass on the caller's rows (test hook)
std::atomic<uint64_t> g_chunk_bound_launches{0};   // ... as running maxima over their chunks (test hook)
bool det_bulk(const Variant& v, int capability) {
    if (v.det_bulk < 0 && !gpu::is_nvidia_sm90_or_later(capability)) return false;
    return nvidia_only_switch(v.det_bulk, "det_bulk (bulk reductions from shared memory)");
}

// Whether `s` is outside any capture. A failed query counts as "inside": the caller then keeps the stream.
bool outside_capture(gpu_stream_t s) { return gpu::capture_status(s) == gpu_stream_capture_status_none; }

// A second stream for work beside `caller` on `device`, one per (thread, device, caller's stream),
// created on first use. Keyed by the caller's stream because a fork puts the side stream into the
// caller's capture until that capture ends: one side stream shared by two streams of a thread would make
// a second capture (or an eager backward on another stream) wait on an event from outside its own
// capture, which CUDA refuses. A thread keeps kSideStreams of them; past that, a call from a stream
// that is not capturing destroys the least recently used ones that are outside any capture (a
// capturing caller only adds one, so that no stream is destroyed during its capture). Destroying a
// stream with queued work is allowed: the work completes first. At thread exit, side streams still
// inside a capture are left to the capture's owner (destroying one would cut its branch out of the
// graph). A destroyed caller's handle may be reused by a new stream: its side stream then serves the
// new one, which is correct, since the old stream can no longer be capturing.
constexpr size_t kSideStreams = 8;
gpu_stream_t side_stream(int device, gpu_stream_t caller) {
    struct Side {
        int device;
        gpu_stream_t caller, side;
    };
    struct Streams {
        std::vector<Side> recent;  // least recently used first
        ~Streams() {
            for (const Side& s : recent)
                if (outside_capture(s.side)) (void)gpu_stream_destroy(s.side);
        }
    };
    thread_local Streams streams;
    std::vector<Side>& recent = streams.recent;
    for (size_t i = 0; i < recent.size(); ++i)
        if (recent[i].device == device && recent[i].caller == caller) {
            const Side found = recent[i];
            recent.erase(recent.begin() + static_cast<std::ptrdiff_t>(i));
            recent.push_back(found);
            return found.side;
        }
    if (recent.size() >= kSideStreams && outside_capture(caller))
        for (size_t i = 0; i < recent.size() && recent.size() >= kSideStreams;) {
            if (!outside_capture(recent[i].side)) {
                ++i;
                continue;
            }
            if (gpu_stream_destroy(recent[i].side) != gpu_success) (void)gpu_get_last_error();
            recent.erase(recent.begin() + static_cast<std::ptrdiff_t>(i));
        }
    Side added{device, caller, nullptr};
    TNN_GPU_CHECK(gpu_stream_create_with_flags(&added.side, gpu_stream_non_blocking));
    recent.push_back(added);
    return added.side;
}

// Work queued through call() runs beside the caller's stream until join() (or the destructor, so that
// an exception never leaves a capture forked): the shared-memory levels' reduction, latency-bound on
// few blocks (0.11 ms for the main row at 2^20, run 60), beside the global levels', bound by L2. Both
// wait for what the caller's stream queued before (the zeroed levels the side stream adds into, the
// exponents); the caller's stream waits for both at join(). Graph capture follows the fork and the join.
class Beside {
  public:
    Beside(const Stream& stream, const Call& c, bool on) : m_stream(stream), m_call(c) {
        if (!on) return;
        const int device = stream.device().index;
        m_side = Stream::gpu(side_stream(device, gpu::native_stream(stream)), device);
        gpu::stream_wait(m_side, m_stream);
        m_call.stream = gpu::native_stream(m_side);
        m_forked = true;
    }
    Beside(const Beside&) = delete;
    Beside& operator=(const Beside&) = delete;
    ~Beside() {
        try {
            join();
        } catch (...) {  // already failing: the first error is the one reported
        }
    }
    const Call& call() const { return m_call; }
    void join() {
        if (!m_forked) return;
        m_forked = false;
        gpu::stream_wait(m_stream, m_side);
    }

  private:
    Stream m_stream, m_side;
    Call m_call;
    bool m_forked = false;
};

// Consecutive levels of `list` in groups whose accumulators (value_bytes per value) add up to at most
// the limit (Variant::level_group_kib), a level larger than that on its own: a group's reductions stay
// in L2 together (the H200's 50 MB) next to x and dL/dy. By default 32 MiB of fp32 accumulators, 36 MiB
// of 64-bit fixed point. The main row (dense levels 0-3 in 1.8 / 3.6 MB, 12 hashed levels of 4 / 8 MiB):
// fp32 in two groups (up to 10, 11-15); fixed point in three (up to 7, 8-11, 12-15), where 32 MiB made four,
// the last one level alone. Measured on the H200 (main row, 2^20): fp32 32 MiB faster than 16 in every
// run that compared them (run 63 1.056 against 1.066 ms, run 73 0.952 against 0.977), than 36 (run 126
// 0.902 against 0.904), 8 / 48 / 64 slower; fixed point 36 MiB faster than 32 (run 126 1.448 against
// 1.459 ms, 2.783 against 2.809 at 2^21), than 44 (three groups, the last of two levels: 1.505 / 2.895)
// and 16 (1.503).
constexpr size_t kFloatLevelGroupBytes = size_t(32) << 20, kFixedLevelGroupBytes = size_t(36) << 20;
std::vector<LevelList> level_groups(const GridDesc& desc, const LevelList& list, size_t value_bytes,
                                    const Variant& v) {
    size_t limit = value_bytes == sizeof(unsigned long long) ? kFixedLevelGroupBytes : kFloatLevelGroupBytes;
    if (v.level_group_kib > 0) limit = static_cast<size_t>(v.level_group_kib) << 10;
    const size_t entry_bytes = desc.n_features * value_bytes;
    std::vector<LevelList> groups;
    size_t bytes = 0;
    for (uint32_t i = 0; i < list.count; ++i) {
        const size_t level_bytes = size_t(desc.levels[list.ids[i]].size) * entry_bytes;
        if (groups.empty() || bytes + level_bytes > limit) {
            groups.push_back(LevelList{});
            bytes = 0;
        }
        groups.back().ids[groups.back().count++] = list.ids[i];
        bytes += level_bytes;
    }
    return groups;
}

// Whether a gradient conversion drops its accumulator's lines from L2 once read (Variant::discard_scratch):
// NVIDIA sm_90 and later (the kernels discard in sm_90 builds only, TNN_GRID_L2_HINTS; elsewhere their
// warp barrier would be all they got), the 128-byte lines wholly inside each converted range of a 16-byte
// aligned accumulator (convert_values). A line is read by 8 lanes of one warp: the conversions run blocks
// of whole warps.
static_assert(gpu::kElementwiseThreads % 32 == 0, "grid conversion: blocks of whole warps");
bool drop_lines(const Variant& v, int capability, const void* acc) {
    return v.discard_scratch != 0 && gpu::is_nvidia_sm90_or_later(capability) && aligned(acc, 16);
}

// Where the gradient's scratch goes in parts (Variant::staged_scratch), a group's part zeroed and converted
// around its kernel.
bool staged_scratch(const Variant& v) { return v.staged_scratch != 0; }

// Test hook (Variant::poison_scratch): the scratch filled with `byte` before its parts are zeroed, so that a
// part left unzeroed shows: 0xFF in fp32 (NaN), 0x7F in 64-bit fixed point (about 2^63, beyond the bound
// of any sum: a value far larger than the level's gradient).
void poison(const Stream& stream, const Variant& v, void* acc, size_t bytes, int byte) {
    if (v.poison_scratch != 0 && bytes > 0)
        TNN_GPU_CHECK(gpu_memset_async(acc, byte, bytes, gpu::native_stream(stream)));
}

// The levels of [0, below) (all of them by default) in none of the groups [first, last).
LevelList levels_outside(const GridDesc& desc, const LevelList* first, const LevelList* last,
                         uint32_t below = grid::kMaxLevels) {
    bool in[grid::kMaxLevels] = {};
    for (const LevelList* g = first; g != last; ++g)
        for (uint32_t i = 0; i < g->count; ++i) in[g->ids[i]] = true;
    LevelList out{};
    for (uint32_t l = 0; l < std::min(desc.n_levels, below); ++l)
        if (!in[l]) out.ids[out.count++] = static_cast<uint8_t>(l);
    return out;
}

// The values of the levels of `list` (ascending) as ranges [first, second) of the parameter vector, levels
// that follow each other in it merged (make_levels puts them one after the other).
std::vector<std::pair<size_t, size_t>> value_ranges(const GridDesc& desc, const LevelList& list) {
    std::vector<std::pair<size_t, size_t>> ranges;
    for (uint32_t i = 0; i < list.count; ++i) {
        const LevelInfo& L = desc.levels[list.ids[i]];
        const size_t begin = size_t(L.offset) * desc.n_features, end = begin + size_t(L.size) * desc.n_features;
        if (!ranges.empty() && ranges.back().second == begin)
            ranges.back().second = end;
        else if (end > begin)
            ranges.emplace_back(begin, end);
    }
    return ranges;
}

void zero_levels(const Stream& stream, const GridDesc& desc, const LevelList& list, void* acc, size_t value_bytes) {
    for (const auto& r : value_ranges(desc, list))
        zero(stream, static_cast<char*>(acc) + r.first * value_bytes, (r.second - r.first) * value_bytes);
}

// A gradient accumulator over the parameter vector (value_bytes per value) and the order in which its parts
// are zeroed and converted into the caller's gradient (`convert`). Whole: zeroed at begin(), converted at
// finish(). Staged (Variant::staged_scratch, and groups to stage): the levels in no group (shared-memory
// levels, levels that get nothing) zeroed at begin() and converted at finish(), each group's part zeroed
// just before its kernel and converted just after it (each_group()), while its lines are still in L2. With
// Variant::fused_zeroing, fewer launches, the same order of what each part receives: the first group's
// part is zeroed at begin() with the rest (one memset where their ranges meet), and a group's conversion
// may zero the next group's part in its own launch. `scratch` = false: the accumulator is the caller's
// fp32 gradient itself, zeroed unless `keep` (accumulate mode), never converted nor staged. Levels from
// `convert_below` on are never converted: in accumulate mode the levels that get nothing (switched off by
// set_max_level, or every level of a second-order Nearest pass) keep the caller's values bit for bit, as
// on the CPU, rather than going through `dst + 0` (-0 would become +0, a NaN's payload be lost).
// Convert: bool(const LevelList& list, const LevelList* next) converts the levels of `list` and, when it
// returns true, has zeroed the levels of `next` as well (else the next group's part is zeroed on its own).
// The caller's lambda is held by value: no std::function and its allocation per call.
template <class Convert>
class ScratchParts {
  public:
    ScratchParts(const Stream& stream, const GridDesc& desc, const Variant& v, void* acc, size_t value_bytes,
                 std::vector<LevelList> groups, bool scratch, bool keep, uint32_t convert_below, Convert convert)
        : m_stream(stream), m_desc(desc), m_acc(acc), m_value_bytes(value_bytes), m_groups(std::move(groups)),
          m_scratch(scratch), m_keep(keep), m_staged(scratch && !m_groups.empty() && staged_scratch(v)),
          m_fused(m_staged && v.fused_zeroing != 0),
          m_rest(levels_outside(desc, m_groups.data(), m_groups.data() + (m_staged ? m_groups.size() : 0),
                                convert_below)),
          m_convert(std::move(convert)) {
        // Test hook (Variant::poison_scratch): 0xFF makes fp32 NaN, 0x7F makes 64-bit words of about 2^63.
        if (m_scratch) poison(stream, v, acc, bytes(), value_bytes == sizeof(float) ? 0xFF : 0x7F);
    }
    // Before the shared-memory levels' pass forks: that pass adds into levels of the rest (not the groups').
    void begin() {
        if (m_staged) g_staged_scratch_passes.fetch_add(1, std::memory_order_relaxed);
        if (m_fused) {
            // The rest and the first group: the levels outside the later groups.
            const LevelList* later = m_groups.data() + 1;
            zero_levels(m_stream, m_desc, levels_outside(m_desc, later, later + m_groups.size() - 1), m_acc,
                        m_value_bytes);
        } else if (m_staged) {
            zero_levels(m_stream, m_desc, m_rest, m_acc, m_value_bytes);
        } else if (m_scratch || !m_keep) {
            zero(m_stream, m_acc, bytes());
        }
    }
    // Each group's kernel (`run(list)`) in order, its part zeroed before (unless begin() or the previous
    // group's conversion did) and converted after when staged.
    template <class Run>
    void each_group(Run&& run) {
        bool zeroed = m_fused;  // the first group's part, by begin()
        for (size_t i = 0; i < m_groups.size(); ++i) {
            const LevelList& list = m_groups[i];
            if (m_staged && !zeroed) zero_levels(m_stream, m_desc, list, m_acc, m_value_bytes);
            run(list);
            if (!m_staged) continue;
            const LevelList* next = m_fused && i + 1 < m_groups.size() ? &m_groups[i + 1] : nullptr;
            zeroed = m_convert(list, next) && next != nullptr;
            if (zeroed) g_fused_zeroings.fetch_add(1, std::memory_order_relaxed);
            g_staged_scratch_groups.fetch_add(1, std::memory_order_relaxed);
        }
    }
    // After the join.
    void finish() {
        if (m_scratch) (void)m_convert(m_rest, nullptr);
    }

  private:
    size_t bytes() const { return m_desc.n_params * m_value_bytes; }
    Stream m_stream;
    const GridDesc& m_desc;
    void* m_acc;
    size_t m_value_bytes;
    std::vector<LevelList> m_groups;
    bool m_scratch, m_keep, m_staged, m_fused;
    LevelList m_rest;
    Convert m_convert;
};

bool overlap_shared(const ReductionPlan& plan, const Variant& v) {
    return plan.shared.count > 0 && plan.global.count > 0 && v.overlap_shared != 0;
}

// Where the parameter-gradient passes read dL/dy: the caller's rows, or (Variant::level_major_grads =
// 1) a level-major copy in temporary memory (`copy`, kept alive by the caller), so that a level's pass
// reads its values contiguously instead of one 32-byte sector of every row. Measured on the H200 (main
// row at 2^20, runs 60 and 61): the copy costs 0.06 ms and the passes gain less than that (fast
// backward 1.164 ms with it, 1.144 without; deterministic 2.042 with, 2.012 without), so it is off.
GradLayout rows_or_level_major(const GridDesc& desc, const Call& c, const Stream& stream, ConstView g,
                               uint32_t n_contributing, const Variant& v, Tensor& copy, const void*& data) {
    const uint32_t F = desc.n_features;
    data = g.data;
    if (v.level_major_grads <= 0 || n_contributing == 0 || c.rows == 0) return GradLayout{g.stride, F};
    copy = Tensor::temporary(stream, c.rows, static_cast<int64_t>(n_contributing) * F, desc.dtype);
    // Words: the widest of 16, 8, 4 and 2 bytes that divides an entry, the rows' start and their stride.
    const size_t entry = F * dtype_size(desc.dtype), stride_bytes = static_cast<size_t>(g.stride) * dtype_size(desc.dtype);
    size_t word = 16;
    while (word > dtype_size(desc.dtype) && (entry % word != 0 || stride_bytes % word != 0 || !aligned(g.data, word)))
        word /= 2;
    const auto k = static_cast<uint32_t>(entry / word);
    // Levels per launch: as many as kLevelMajorRows staged rows of them fit the default shared memory.
    const auto group = static_cast<uint32_t>((kSharedBytes / (kLevelMajorRows * word) - 1) / k);
    const uint32_t blocks = row_blocks("grid_level_major_kernel", c.rows, kLevelMajorRows, 1, kThreads).total;
    auto launch = [&](auto w) {
        using W = decltype(w);
        for (uint32_t level0 = 0; level0 < n_contributing; level0 += group) {
            const uint32_t n = std::min(group, n_contributing - level0);
            grid_level_major_kernel<W><<<blocks, kThreads, size_t(kLevelMajorRows) * (n * k + 1) * sizeof(W), c.stream>>>(
                c.rows, level0, n, k, static_cast<const W*>(g.data), static_cast<int64_t>(stride_bytes / word),
                static_cast<W*>(copy.data()));
            TNN_GPU_CHECK_LAUNCH("grid_level_major_kernel");
        }
    };
    switch (word) {
        case 16: launch(uint4{}); break;
        case 8: launch(uint2{}); break;
        case 4: launch(uint32_t{}); break;
        default: launch(uint16_t{}); break;
    }
    data = copy.data();
    return GradLayout{F, c.rows * F};
}

// The layout, with GradLayout::vec set where every (row, level)'s F values start aligned to their
// gpu::Packed unit (Variant::vector_grad_loads; F > 1).
GradLayout gradient_layout(const GridDesc& desc, const Call& c, const Stream& stream, ConstView g,
                           uint32_t n_contributing, const Variant& v, Tensor& copy, const void*& data) {
    GradLayout layout = rows_or_level_major(desc, c, stream, g, n_contributing, v, copy, data);
    const size_t size = dtype_size(desc.dtype), unit = std::min<size_t>(16, desc.n_features * size);
    layout.vec = v.vector_grad_loads != 0 && desc.n_features > 1 && aligned(data, unit) &&
                 (static_cast<size_t>(layout.row_stride) * size) % unit == 0 &&
                 (static_cast<size_t>(layout.level_stride) * size) % unit == 0;
    return layout;
}

// dL/dparams of a first-order (v == nullptr) or second-order pass, weights from dL/dy = g.
void param_gradient(const GridDesc& desc, const Call& c, const Stream& stream, const float* v, int64_t v_stride,
                    ConstView g, void* dL_dparams, GradMode mode) {
    const Launchers& L = launchers_for(desc.n_dims);
    const KernelArgs& args = *c.args;
    const bool second = v != nullptr;
    const uint32_t n_contributing = second && desc.interpolation == grid::Interpolation::Nearest ? 0 : args.n_active;
    const bool accumulate = mode == GradMode::accumulate;
    const size_t n = desc.n_params;
    const uint32_t F = desc.n_features;
    const gpu_stream_t s = c.stream;
    // Accumulate mode converts only the levels that get something (ScratchParts).
    const uint32_t convert_below = accumulate ? n_contributing : desc.n_levels;

    // First-order Nearest and stochastic rows feed one corner per level: per-corner threads would idle.
    const bool one_corner = !second && one_corner_per_level(desc);
    const bool deterministic = desc.deterministic || tnn::deterministic();
    Tensor g_copy;
    const void* g_data = nullptr;
    const Variant var = variant();  // once per call: each read takes a lock
    const GradLayout gl = gradient_layout(desc, c, stream, g, n_contributing, var, g_copy, g_data);
    if (!deterministic) {
        // fp32 atomics: straight into an fp32 gradient, else into fp32 scratch converted at the end.
        const bool direct = desc.dtype == DType::f32;
        Tensor scratch;
        float* acc = static_cast<float*>(dL_dparams);
        if (!direct) {
            scratch = Tensor::temporary(stream, 1, static_cast<int64_t>(n), DType::f32);
            acc = scratch.ptr<float>();
        }
        const SharedSlots slots = fast_shared_slots(desc, stream, var);
        const ReductionPlan plan =
            plan_reduction(desc, c.rows, n_contributing, second, slots.slot_bytes, slots.budget);
        // Automatic: a thread per (row, corner) over groups of levels, or per (row, level) when one
        // corner receives all.
        const int mapping = var.fast_mapping >= 0 ? var.fast_mapping : one_corner ? 0 : 2;
        // L2 hints of the threads over groups of levels: evict-last reductions only into our scratch,
        // whose lines the conversion drops from L2; the caller's fp32 gradient (direct) gets the loads'
        // hints alone.
        const int l2_hints = mapping != 2 ? 0 : var.l2_hints >= 0 ? var.l2_hints : direct ? 2 : 1;
        // The scratch's evict-last lines dropped once converted (drop_lines).
        const int cc = gpu::device_properties(stream.device().index).capability;
        const bool discard = !direct && l2_hints == 1 && drop_lines(var, cc, acc);
        // Levels from the scratch into the caller's gradient.
        const auto convert = [&](const LevelList& list, const LevelList*) {  // zeroes nothing else
            dispatch_gpu_storage(desc.dtype, "grid encoding", [&](auto t) {
                using T = decltype(t);
                for (const auto& r : value_ranges(desc, list)) {
                    float* from = acc + r.first;
                    T* dst = static_cast<T*>(dL_dparams) + r.first;
                    const auto count = static_cast<int64_t>(r.second - r.first);
                    // Four values per thread when both sides allow it (not timed apart: notes_grid.md section 8),
                    // a range that starts between 16-byte boundaries with a head of one value per thread.
                    if (aligned(acc, 16) && aligned(dL_dparams, 4 * sizeof(T))) {
                        grid_gradient_from_float_quads_kernel<T>
                            <<<gpu::elementwise_grid(count / 4 + 6), gpu::kElementwiseThreads, 0, s>>>(
                                from, dst, count, accumulate, discard);
                        TNN_GPU_CHECK_LAUNCH("grid_gradient_from_float_quads_kernel");
                    } else {
                        grid_gradient_from_float_kernel<T><<<gpu::elementwise_grid(count), gpu::kElementwiseThreads, 0, s>>>(
                            from, dst, count, accumulate);
                        TNN_GPU_CHECK_LAUNCH("grid_gradient_from_float_kernel");
                    }
                }
            });
            return false;
        };
        ScratchParts parts(stream, desc, var, acc, sizeof(float),
                           mapping >= 2 ? level_groups(desc, plan.global, sizeof(float), var)
                                        : std::vector<LevelList>{},
                           !direct, accumulate, convert_below, convert);
        parts.begin();
        Beside beside(stream, c, overlap_shared(plan, var));
        L.param_grad_shared_float(beside.call(), desc.dtype, F, plan.shared, plan.blocks_per_item,
                                  plan.rows_per_block, plan.shared_bytes, g_data, gl, acc, slots.split);
        // Slot pairs add +0 beside lone contributions: not into the caller's values (accumulate, fp32).
        const FloatSink sink{acc, var.vector_atomics != 0, var.slot_pairs != 0 && !(direct && accumulate),
                             static_cast<uint8_t>(l2_hints)};
        if (mapping == 0) {
            L.param_grad_float(c, desc.dtype, F, second, plan.global, v, v_stride, g_data, gl, sink);
        } else if (mapping == 1) {
            L.param_grad_float_corners(c, desc.dtype, F, second, plan.global, v, v_stride, g_data, gl, sink);
        } else {
            parts.each_group([&](const LevelList& list) {
                L.param_grad_float_corner_levels(c, desc.dtype, F, second, list, v, v_stride, g_data, gl, sink);
            });
        }
        beside.join();
        parts.finish();
        return;
    }

    // Deterministic: per-level bound -> fixed-point exponent -> 64-bit integer atomics -> conversion.
    Buffer acc_buffer = Buffer::temporary(stream, n * sizeof(unsigned long long));
    // Per level the bound's bits and the exponent, then the bound pass's counter of finished blocks.
    Buffer level_buffer = Buffer::temporary(stream, (2 * grid::kMaxLevels + 4) * sizeof(int));
    auto* acc = static_cast<unsigned long long*>(acc_buffer.data());
    auto* bound_bits = static_cast<unsigned int*>(level_buffer.data());
    int* exponents = reinterpret_cast<int*>(bound_bits + grid::kMaxLevels);
    zero(stream, level_buffer.data(), level_buffer.bytes());
    const bool words = det_shared_words(var);
    const ReductionPlan plan =
        plan_reduction(desc, c.rows, n_contributing, second, words ? 3 * sizeof(uint32_t) : sizeof(unsigned long long),
                       shared_budget(stream, var), words ? kWordsMaxAdds : 0);
    // The chunks pass (Variant::bound_chunks) computes the exponents in its last block; the other passes
    // leave them to grid_fixed_point_exponent_kernel. Its grid: at most as many 256-thread blocks as the
    // SMs' 2048 threads would hold (two waves at the kernel's registers on sm_90: BoundOut).
    BoundOut bound_out;
    bound_out.bound_bits = bound_bits;
    bound_out.exponents = exponents;
    bound_out.blocks_done = bound_bits + 2 * grid::kMaxLevels;
    bound_out.n_levels = desc.n_levels;
    bound_out.max_blocks = static_cast<uint32_t>(gpu::device_properties(stream.device().index).sm_count) *
                           (2048 / kThreads);
    const BoundPass bound_pass =
        L.param_bound(c, desc.dtype, F, second, plan.all, v, v_stride, g_data, gl, bound_out, var.bound_chunks != 0);
    if (bound_pass == BoundPass::staged_rows || bound_pass == BoundPass::chunks)
        g_staged_bound_launches.fetch_add(1, std::memory_order_relaxed);
    if (bound_pass == BoundPass::chunks) {
        g_chunk_bound_launches.fetch_add(1, std::memory_order_relaxed);
    } else {
        grid_fixed_point_exponent_kernel<<<1, grid::kMaxLevels, 0, s>>>(bound_bits, desc.n_levels, c.rows, exponents);
        TNN_GPU_CHECK_LAUNCH("grid_fixed_point_exponent_kernel");
    }
    // Integer reductions have no vector form: threads per feature (and corner) put an entry's words on
    // consecutive lanes, which leave as one request per 32-byte sector. Automatic: a thread per
    // (row, feature) over groups of levels when F > 1, per (row, level, corner, feature) when F = 1, per
    // (row, level) when one corner receives all. Run 62 (H200, main row at 2^20): a thread per (row,
    // level, feature) 2.010 ms, per (row, level, corner, feature) 2.221 ms, per (row, level) 2.896 ms.
    int mapping = var.det_mapping;
    if (mapping < 0) mapping = F > 1 ? 3 : one_corner ? 0 : 2;
    const int cc = gpu::device_properties(stream.device().index).capability;
    // Two values per thread where aligned; the accumulator's lines dropped once read, as the fast path's
    // scratch (drop_lines): they are dead, and written back to DRAM otherwise.
    const bool discard = drop_lines(var, cc, acc);
    // The levels of `list` into the caller's gradient; with `next` (Variant::fused_zeroing) whose values are
    // one range, that range of the accumulator zeroed by one more row of blocks of the same launch.
    const auto convert = [&](const LevelList& list, const LevelList* next) {
        if (list.count == 0) return false;
        std::vector<std::pair<size_t, size_t>> zero_range;
        if (next != nullptr) zero_range = value_ranges(desc, *next);
        const bool fused = zero_range.size() == 1;
        unsigned long long* zero_from = fused ? acc + zero_range[0].first : nullptr;
        const int64_t zero_count = fused ? static_cast<int64_t>(zero_range[0].second - zero_range[0].first) : 0;
        dispatch_gpu_storage(desc.dtype, "grid encoding", [&](auto t) {
            using T = decltype(t);
            size_t largest = 0;
            for (uint32_t i = 0; i < list.count; ++i) largest = std::max<size_t>(largest, desc.levels[list.ids[i]].size);
            const bool pairs = aligned(acc, 16) && aligned(dL_dparams, 2 * sizeof(T));
            const int64_t items = static_cast<int64_t>(largest * F);
            const dim3 grid(gpu::elementwise_grid(pairs ? items / 2 + items % 2 : items).x, list.count + (fused ? 1 : 0));
            grid_gradient_from_fixed_kernel<T><<<grid, gpu::kElementwiseThreads, 0, s>>>(
                args, list, F, acc, exponents, static_cast<T*>(dL_dparams), accumulate, pairs, discard, zero_from,
                zero_count);
            TNN_GPU_CHECK_LAUNCH("grid_gradient_from_fixed_kernel");
        });
        return fused;
    };
    ScratchParts parts(stream, desc, var, acc, sizeof(unsigned long long),
                       mapping == 3 && F > 1 ? level_groups(desc, plan.global, sizeof(unsigned long long), var)
                                             : std::vector<LevelList>{},
                       true, false, convert_below, convert);
    parts.begin();
    Beside beside(stream, c, overlap_shared(plan, var));
    L.param_grad_shared_fixed(beside.call(), desc.dtype, F, plan.shared, plan.blocks_per_item, plan.rows_per_block,
                              plan.shared_bytes, g_data, gl, acc, exponents, words);
    if (mapping == 3 && F > 1) {
        // Bulk pairs: F = 2, first order, 16-byte aligned entries (16 bytes each; temporary buffers are).
        const bool bulk = F == 2 && !second && det_bulk(var, cc) && aligned(acc, 16);
        parts.each_group([&](const LevelList& list) {
            if (L.param_grad_fixed_lane_levels(c, desc.dtype, F, second, list, v, v_stride, g_data, gl, acc, exponents,
                                               bulk))
                g_bulk_pair_launches.fetch_add(1, std::memory_order_relaxed);
        });
    } else if (mapping == 2) {
        if (!L.param_grad_fixed_corners(c, desc.dtype, F, second, plan.global, v, v_stride, g_data, gl, acc,
                                        exponents))  // 2^D * F > kThreads: one thread per feature
            L.param_grad_fixed_lanes(c, desc.dtype, F, second, plan.global, v, v_stride, g_data, gl, acc,
                                     exponents);
    } else if (mapping == 1 && F > 1) {
        L.param_grad_fixed_lanes(c, desc.dtype, F, second, plan.global, v, v_stride, g_data, gl, acc, exponents);
    } else {
        L.param_grad_fixed(c, desc.dtype, F, second, plan.global, v, v_stride, g_data, gl,
                           FixedSink{acc, exponents});
    }
    beside.join();
    parts.finish();
}

}  // namespace

void set_variant(const Variant& v) {
    std::lock_guard<std::mutex> lock(g_variant_mutex);
    g_variant = v;
}

Variant variant() {
    std::lock_guard<std::mutex> lock(g_variant_mutex);
    return g_variant;
}

uint64_t bulk_pair_launches() { return g_bulk_pair_launches.load(std::memory_order_relaxed); }
uint64_t staged_scratch_groups() { return g_staged_scratch_groups.load(std::memory_order_relaxed); }
uint64_t fused_zeroings() { return g_fused_zeroings.load(std::memory_order_relaxed); }
uint64_t staged_scratch_passes() { return g_staged_scratch_passes.load(std::memory_order_relaxed); }
uint64_t staged_bound_launches() { return g_staged_bound_launches.load(std::memory_order_relaxed); }
uint64_t chunk_bound_launches() { return g_chunk_bound_launches.load(std::memory_order_relaxed); }

void forward(const GridDesc& g, const Stream& stream, ConstView input, View output, const void* params,
             uint32_t n_active) {
    gpu::DeviceGuard guard(stream.device().index);
    const KernelArgs args = make_args(g, n_active);
    const Call c{&args, gpu::native_stream(stream), input.rows, input.ptr<float>(), input.stride};
    const size_t elem = dtype_size(g.dtype), vec_align = std::min<size_t>(g.n_features * elem, 16);
    const bool vec_store = g.n_features * elem >= 4 && aligned(output.data, vec_align) &&
                           (static_cast<size_t>(output.stride) * elem) % vec_align == 0;
    const Variant v = variant();
    const bool chunked = v.chunked_loads != 0 && chunk_layout(g) && aligned(params, 16);
    const uint32_t threads = v.forward_threads > 0 ? static_cast<uint32_t>(v.forward_threads) : 256u;
    launchers_for(g.n_dims).forward(c, g.dtype, g.n_features, params, output.data, output.stride, vec_store, chunked,
                                    threads);
}

void backward(const GridDesc& g, const Stream& stream, ConstView input, ConstView dL_doutput, View* dL_dinput,
              void* dL_dparams, const void* params, GradMode mode, uint32_t n_active) {
    gpu::DeviceGuard guard(stream.device().index);
    const KernelArgs args = make_args(g, n_active);
    const Call c{&args, gpu::native_stream(stream), input.rows, input.ptr<float>(), input.stride};
    if (dL_dparams) param_gradient(g, c, stream, nullptr, 0, dL_doutput, dL_dparams, mode);
    if (dL_dinput)
        launchers_for(g.n_dims).input_grad(c, g.dtype, g.n_features, dL_doutput.data, dL_doutput.stride, params,
                                           dL_dinput->ptr<float>(), dL_dinput->stride);
}

void backward_backward_input(const GridDesc& g, const Stream& stream, ConstView input, ConstView dL_ddLdinput,
                             ConstView dL_doutput, View* dL_ddLdoutput, View* dL_dinput, void* dL_dparams,
                             const void* params, GradMode mode, uint32_t n_active) {
    gpu::DeviceGuard guard(stream.device().index);
    const KernelArgs args = make_args(g, n_active);
    const Call c{&args, gpu::native_stream(stream), input.rows, input.ptr<float>(), input.stride};
    if (dL_dparams)
        param_gradient(g, c, stream, dL_ddLdinput.ptr<float>(), dL_ddLdinput.stride, dL_doutput, dL_dparams, mode);
    if (dL_ddLdoutput || dL_dinput)
        launchers_for(g.n_dims).second_order_rows(
            c, g.dtype, g.n_features, dL_ddLdinput.ptr<float>(), dL_ddLdinput.stride, dL_doutput.data,
            dL_doutput.stride, params, dL_ddLdoutput ? dL_ddLdoutput->data : nullptr,
            dL_ddLdoutput ? dL_ddLdoutput->stride : 0, dL_dinput ? dL_dinput->ptr<float>() : nullptr,
            dL_dinput ? dL_dinput->stride : 0);
}

}  // namespace tnn::grid_gpu
