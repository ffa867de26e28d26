// The stream-ordered caching allocator (rules in allocator.h): per-(device, stream) pools of free
// blocks, best fit by size, driver allocations only on a miss; while the stream captures, graph memory
// (stream-ordered allocations recorded as graph nodes) instead of pool blocks.
#include "gpu/allocator.h"

#include "gpu/gpu.h"

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace tnn::gpu {

namespace {

// Sizes are rounded so that nearby requests share blocks: multiples of 512 bytes below 1 MiB, above
// that steps of 1/8 of the power of two below (at most 12.5% waste).
size_t round_size(size_t bytes) {
    constexpr size_t kSmall = size_t(1) << 20, kGranule = 512;
    if (bytes <= kSmall) return round_up(std::max<size_t>(bytes, 1), kGranule);
    size_t pow2 = kSmall;
    while (pow2 * 2 <= bytes) pow2 *= 2;
    return round_up(bytes, pow2 / 8);
}

// A cached block may serve a request up to half its size; a smaller request allocates its own, so a
// huge block is not pinned down by small scratch.
constexpr size_t kMaxWasteFactor = 2;

struct Block {
    size_t size = 0;
    void* stream = nullptr;
};

// Graph memory is over-allocated by this much and handed out aligned like a driver allocation: the
// stream-ordered allocator does not document its alignment, and kernels (and BLAS-Lt workspaces)
// rely on 256 bytes.
constexpr size_t kGraphAlignment = 256;

// A graph temporary: `base` is what the stream-ordered allocator returned, `stream` the capturing
// stream it was allocated on.
struct GraphBlock {
    void* base = nullptr;
    size_t size = 0;
    void* stream = nullptr;
};

struct DeviceState {
    std::mutex mutex;
    std::map<void*, std::multimap<size_t, void*>> free_by_stream;  // stream -> size -> block
    std::unordered_map<void*, Block> blocks;                         // every block held from the driver
    std::unordered_set<void*> in_use;
    // By the pointer handed out; ordered, so that is_graph_temporary finds the block holding an address.
    std::map<const void*, GraphBlock, std::less<>> graph_blocks;
    AllocatorStats stats;
};

// Never destroyed: buffers released during static destruction must still find their pool, and the
// driver may be gone by then, so nothing is returned to it at exit (the process exit frees it).
DeviceState& device_state(int device) {
    static auto* mutex = new std::mutex();
    static auto* states = new std::vector<std::unique_ptr<DeviceState>>();
    std::lock_guard<std::mutex> lock(*mutex);
    if (device < 0) throw DeviceError(msg("temporary memory: invalid GPU index ", device));
    if (states->size() <= static_cast<size_t>(device)) states->resize(static_cast<size_t>(device) + 1);
    auto& s = (*states)[static_cast<size_t>(device)];
    if (!s) s = std::make_unique<DeviceState>();
    return *s;
}

// Frees the cached blocks of one device. The caller holds the state's mutex and has waited for the
// device, so no queued work still reads them.
void free_cached_locked(int device, DeviceState& s) {
    for (auto& [stream, pool] : s.free_by_stream) {
        for (auto& [size, ptr] : pool) {
            (void)gpu_free(ptr);
            s.blocks.erase(ptr);
            s.stats.reserved_bytes -= size;
            ++s.stats.driver_frees;
        }
        pool.clear();
    }
    (void)gpu_get_last_error();
}

// Graph memory for a request on a capturing stream: an allocation node of that capture, never a pool
// block, so the graph owns it (allocator.h).
void* graph_alloc(const Stream& stream, int device, size_t size, DeviceState& s) {
    DeviceGuard guard(device);
    void* base = nullptr;
    const gpu_error_t err = gpu_malloc_async(&base, size + kGraphAlignment, native_stream(stream));
    if (err != gpu_success) {
        (void)gpu_get_last_error();
        throw DeviceError(msg("temporary memory: allocating ", size, " bytes of graph memory on gpu:", device,
                              " for a capturing stream failed (", gpu_get_error_string(err), ")"));
    }
    void* ptr = reinterpret_cast<void*>(round_up(reinterpret_cast<uintptr_t>(base), uintptr_t(kGraphAlignment)));
    std::lock_guard<std::mutex> lock(s.mutex);
    s.graph_blocks[ptr] = GraphBlock{base, size, stream.native()};
    ++s.stats.graph_allocations;
    return ptr;
}

// A graph temporary freed while its stream still captures becomes a free node of that capture (also
// when it is a later capture than the allocating one: the driver allows a graph to free another's
// memory). Freed after the capture, it stays with the graph (allocator.h): nothing to queue.
void free_graph_block(int device, const GraphBlock& b, DeviceState& s) noexcept {
    const gpu_stream_t stream = static_cast<gpu_stream_t>(b.stream);
    if (capture_status(stream) == gpu_stream_capture_status_active) {  // a failed query: not capturing
        int previous = -1;
        const bool switched = gpu_get_device(&previous) == gpu_success && previous != device &&
                              gpu_set_device(device) == gpu_success;
        if (gpu_free_async(b.base, stream) == gpu_success) ++s.stats.graph_frees;
        if (switched) (void)gpu_set_device(previous);
    }
    (void)gpu_get_last_error();
}

}  // namespace

void* temporary_alloc(const Stream& stream, size_t bytes) {
    if (bytes == 0) return nullptr;
    const int device = stream.device().index;
    if (device < 0 || device >= device_count())
        throw DeviceError(msg("temporary memory: no GPU with index ", device, " (", device_count(), " present)"));
    const size_t size = round_size(bytes);
    DeviceState& s = device_state(device);
    if (stream_is_capturing(stream)) return graph_alloc(stream, device, size, s);
    std::lock_guard<std::mutex> lock(s.mutex);

    auto& pool = s.free_by_stream[stream.native()];
    auto it = pool.lower_bound(size);
    if (it != pool.end() && it->first <= size * kMaxWasteFactor) {
        void* ptr = it->second;
        s.in_use.insert(ptr);
        s.stats.in_use_bytes += it->first;
        pool.erase(it);
        return ptr;
    }

    DeviceGuard guard(device);
    void* ptr = nullptr;
    gpu_error_t err = gpu_malloc(&ptr, size);
    if (err == gpu_error_memory_allocation) {
        // Out of memory: give the cached blocks of this device back and try once more.
        (void)gpu_get_last_error();
        TNN_GPU_CHECK(gpu_device_synchronize());
        free_cached_locked(device, s);
        err = gpu_malloc(&ptr, size);
    }
    if (err != gpu_success) {
        (void)gpu_get_last_error();
        throw DeviceError(msg("temporary memory: allocating ", size, " bytes on gpu:", device, " failed (",
                              gpu_get_error_string(err), "); ", s.stats.in_use_bytes, " bytes are in use"));
    }
    s.blocks[ptr] = Block{size, stream.native()};
    s.in_use.insert(ptr);
    s.stats.reserved_bytes += size;
    s.stats.in_use_bytes += size;
    ++s.stats.driver_allocations;
    return ptr;
}

void temporary_free(int device, void* ptr) noexcept {
    if (!ptr || device < 0) return;
    DeviceState& s = device_state(device);
    std::lock_guard<std::mutex> lock(s.mutex);
    const auto graph = s.graph_blocks.find(ptr);
    if (graph != s.graph_blocks.end()) {
        free_graph_block(device, graph->second, s);
        s.graph_blocks.erase(graph);
        return;
    }
    if (s.in_use.erase(ptr) == 0) return;
    const Block& b = s.blocks.at(ptr);
    s.stats.in_use_bytes -= b.size;
    s.free_by_stream[b.stream].emplace(b.size, ptr);
}

void release_cached() {
    const int n = device_count();
    for (int device = 0; device < n; ++device) {
        DeviceState& s = device_state(device);
        std::lock_guard<std::mutex> lock(s.mutex);
        const bool cached = s.blocks.size() != s.in_use.size();
        if (!cached && s.stats.graph_allocations == 0) continue;
        DeviceGuard guard(device);
        if (cached) {
            TNN_GPU_CHECK(gpu_device_synchronize());
            free_cached_locked(device, s);
        }
        // Graph memory no executing or queued graph holds goes back to the driver too.
        if (s.stats.graph_allocations > 0) TNN_GPU_CHECK(gpu_device_graph_mem_trim(device));
    }
}

bool is_graph_temporary(int device, const void* ptr) {
    if (!ptr || device < 0 || device >= device_count()) return false;
    DeviceState& s = device_state(device);
    std::lock_guard<std::mutex> lock(s.mutex);
    auto it = s.graph_blocks.upper_bound(ptr);
    if (it == s.graph_blocks.begin()) return false;
    --it;
    return static_cast<const char*>(ptr) < static_cast<const char*>(it->first) + it->second.size;
}

AllocatorStats allocator_stats(int device) {
    DeviceState& s = device_state(device);
    std::lock_guard<std::mutex> lock(s.mutex);
    return s.stats;
}

}  // namespace tnn::gpu
