// The stream-ordered caching allocator behind Buffer::temporary / Tensor::temporary on a GPU: per-call
// scratch and Context storage of modules. Vendor-free, so host code and tests can include it.
//
// Rules (docs/gpu.md has the reasoning):
// - Every block belongs to the (device, stream) it was first allocated on. A freed block goes back to
//   that stream's pool and is handed out again only to later allocations on the same stream, whose
//   work the stream orders after every earlier use: two streams never share a block, so no event or
//   synchronisation is needed on the fast path.
// - In steady state (same sizes as an earlier call) nothing is allocated from the driver. While the
//   stream is capturing a graph, a request the pool cannot serve throws DeviceError instead of calling
//   the driver: warm up (run the same calls once) before capturing. A graph captured on a stream uses
//   that stream's blocks, so launch it on the same stream (or one ordered with it).
// - release_cached() (tnn::free_temporary_memory) waits for the device, then returns every free block
//   to the driver; blocks in use stay valid. Graphs captured earlier must be re-captured after it.
#pragma once

#include <tnn/tensor.h>

#include <cstddef>
#include <cstdint>

namespace tnn::gpu {

// Returns memory of at least `bytes` bytes (256-byte aligned) for work queued on `stream`. Throws
// DeviceError when the device is out of memory or when a capturing stream would need new memory.
void* temporary_alloc(const Stream& stream, size_t bytes);
// Returns a block from temporary_alloc on `device` to the pool of the stream it was allocated for.
// Unknown pointers are ignored.
void temporary_free(int device, void* ptr) noexcept;
// Frees every cached (not in use) block on every device; throws DeviceError if the device wait fails
// (for example while a stream is capturing).
void release_cached();

struct AllocatorStats {
    size_t reserved_bytes = 0;  // held from the driver: in use + cached
    size_t in_use_bytes = 0;    // handed out and not yet freed (rounded block sizes)
    uint64_t driver_allocations = 0;  // malloc calls made to the driver since the process started
    uint64_t driver_frees = 0;
};
AllocatorStats allocator_stats(int device);

}  // namespace tnn::gpu
