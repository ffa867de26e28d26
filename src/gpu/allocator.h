// The stream-ordered caching allocator behind Buffer::temporary / Tensor::temporary on a GPU: per-call
// scratch and Context storage of modules. Vendor-free, so host code and tests can include it.
//
// Rules (docs/gpu.md has the reasoning):
// - Every block belongs to the (device, stream) it was first allocated on. A freed block goes back to
//   that stream's pool and is handed out again only to later allocations on the same stream, whose
//   work the stream orders after every earlier use: two streams never share a block, so no event or
//   synchronisation is needed on the fast path.
// - In steady state (same sizes as an earlier call) nothing is allocated from the driver.
// - While the stream is capturing a graph, every request becomes graph memory: a stream-ordered
//   allocation that the capture records as an allocation node, and its free, when it happens while the
//   stream still captures, a free node. No pool block and no blocking driver call is involved, so any
//   stream may capture without a warm-up, and a graph owns its temporaries: it may be replayed on any
//   stream, next to any other work. A graph temporary freed after its capture ended (a Context that
//   outlives the capture, as torch's recipe keeps the captured loss) stays the graph's: a graph
//   instantiated with auto-free-on-launch (torch's and the Trainer's) frees it when it is relaunched.
// - release_cached() (tnn::free_temporary_memory) waits for the device, then returns every free block
//   to the driver and trims the driver's unused graph memory; blocks in use stay valid.
#pragma once

#include <tnn/tensor.h>

#include <cstddef>
#include <cstdint>

namespace tnn::gpu {

// Returns memory of at least `bytes` bytes (256-byte aligned) for work queued on `stream`. Throws
// DeviceError when the device is out of memory.
void* temporary_alloc(const Stream& stream, size_t bytes);
// Returns a block from temporary_alloc on `device` to the pool of the stream it was allocated for (or,
// for graph memory, frees it in the capture). Unknown pointers are ignored.
void temporary_free(int device, void* ptr) noexcept;
// Frees every cached (not in use) block on every device; throws DeviceError if the device wait fails
// (for example while a stream is capturing).
void release_cached();
// True when ptr points into graph memory of `device` handed out and not freed: the pointer checks
// accept it although the driver maps it only when the graph runs.
bool is_graph_temporary(int device, const void* ptr);

struct AllocatorStats {
    size_t reserved_bytes = 0;  // held from the driver: in use + cached
    size_t in_use_bytes = 0;    // handed out and not yet freed (rounded block sizes)
    uint64_t driver_allocations = 0;  // malloc calls made to the driver since the process started
    uint64_t driver_frees = 0;
    uint64_t graph_allocations = 0;  // graph-memory temporaries (allocation nodes) since the process started
    uint64_t graph_frees = 0;        // of them, freed while their stream still captured (free nodes)
};
AllocatorStats allocator_stats(int device);

}  // namespace tnn::gpu
