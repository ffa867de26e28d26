// The narrow bridge from the CPU library to the GPU backend: plain C++ declarations implemented in
// src/gpu/*.cu (CUDA or HIP). Only compiled-in when TNN_WITH_GPU is defined; callers guard with
// #ifdef TNN_WITH_GPU and otherwise call throw_no_gpu_backend().
#pragma once

#include <tnn/runtime.h>
#include <tnn/tensor.h>

#include <cstddef>
#include <string>

namespace tnn::gpu_bridge {

int device_count();
std::string device_description(int device);
std::string device_code(int device);  // tnn::gpu_device_code
void* malloc(int device, size_t bytes);          // device memory; throws DeviceError on failure
void free(int device, void* ptr) noexcept;
bool is_device_pointer(const void* ptr, int device);  // memory the given device can read
void memcpy(const Stream& stream, void* dst, const void* src, size_t bytes);  // any direction, async
void memcpy_2d(const Stream& stream, void* dst, size_t dst_pitch, const void* src, size_t src_pitch,
               size_t width_bytes, size_t rows);
void synchronize(const Stream& stream);
void convert(const Stream& stream, ConstView src, View dst);  // both on the GPU
void fill(const Stream& stream, View dst, double value);      // on the GPU
void add(const Stream& stream, ConstView src, View dst);        // dst += src, same dtype, on the GPU
double sum(const Stream& stream, ConstView values);             // fp32/fp64 on the GPU; synchronises
void free_temporary_memory();
GpuMemoryStats memory_stats(int device);  // the caching allocator's figures (src/gpu/allocator.h)
// Stream-ordered temporary memory from the caching allocator: a block freed on a stream may be reused
// by later work on that stream only; on a capturing stream, graph memory (src/gpu/allocator.h).
void* alloc_temporary(const Stream& stream, size_t bytes);
void free_temporary(const Stream& stream, void* ptr, size_t bytes) noexcept;
// Graphs of the work this thread queues on one stream (src/gpu/graph.cu; the Trainer's captured steps).
// The capture is thread-local: other threads keep working meanwhile. end_capture returns the
// instantiated graph as an opaque handle, or throws DeviceError when the capture failed.
void begin_capture(const Stream& stream);
bool is_capturing(const Stream& stream);
void* end_capture(const Stream& stream);
void abort_capture(const Stream& stream) noexcept;  // after an exception inside a capture: ends and discards it
void launch_graph(const Stream& stream, void* graph);
// A non-blocking stream of the device's own (the Trainer's graphs for callers on the legacy default stream).
void* create_stream(int device);
void destroy_stream(int device, void* stream) noexcept;
// Later work on `waiter` waits for the work queued on `producer` so far (an event between them).
void stream_wait(const Stream& waiter, const Stream& producer);
void destroy_graph(int device, void* graph) noexcept;  // may be called while launches are in flight

}  // namespace tnn::gpu_bridge
