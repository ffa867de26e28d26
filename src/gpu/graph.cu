// CUDA / HIP graphs for the CPU library (gpu_bridge.h): capture what one thread queues on a stream,
// instantiate it, launch it, destroy it. The Trainer replays its steps with these; handles stay opaque.
#include "core/gpu_bridge.h"
#include "gpu/gpu.h"

namespace tnn::gpu_bridge {

using namespace tnn::gpu;

void begin_capture(const Stream& stream) {
    DeviceGuard guard(stream.device().index);
    TNN_GPU_CHECK(gpu_stream_begin_capture(native_stream(stream), gpu_stream_capture_mode_thread_local));
}

bool is_capturing(const Stream& stream) {
    DeviceGuard guard(stream.device().index);
    return stream_is_capturing(stream);
}

void* end_capture(const Stream& stream) {
    DeviceGuard guard(stream.device().index);
    gpu_graph_t graph = nullptr;
    TNN_GPU_CHECK(gpu_stream_end_capture(native_stream(stream), &graph));
    if (!graph) throw DeviceError("graph capture: the capture produced no graph");
    gpu_graph_exec_t exec = nullptr;
    // Auto-free-on-launch: a graph temporary that outlived the capture is freed by the next launch
    // instead of making it fail (src/gpu/allocator.h).
    const gpu_error_t err =
        gpu_graph_instantiate_with_flags(&exec, graph, gpu_graph_instantiate_flag_auto_free_on_launch);
    (void)gpu_graph_destroy(graph);  // the executable graph keeps what it needs
    if (err != gpu_success) throw_error(err, "gpu_graph_instantiate_with_flags", __FILE__, __LINE__);
    return exec;
}

void abort_capture(const Stream& stream) noexcept {
    int previous = -1;
    const int device = stream.device().index;
    const bool switched =
        gpu_get_device(&previous) == gpu_success && previous != device && gpu_set_device(device) == gpu_success;
    const auto status = capture_status(native_stream(stream));
    if (status && *status != gpu_stream_capture_status_none) {  // active, or invalidated by an error
        gpu_graph_t graph = nullptr;
        (void)gpu_stream_end_capture(native_stream(stream), &graph);
        if (graph) (void)gpu_graph_destroy(graph);
    }
    if (switched) (void)gpu_set_device(previous);
    (void)gpu_get_last_error();
}

void launch_graph(const Stream& stream, void* graph) {
    DeviceGuard guard(stream.device().index);
    TNN_GPU_CHECK(gpu_graph_launch(static_cast<gpu_graph_exec_t>(graph), native_stream(stream)));
}

void destroy_graph(int device, void* graph) noexcept {
    if (!graph) return;
    int previous = -1;
    const bool switched =
        gpu_get_device(&previous) == gpu_success && previous != device && gpu_set_device(device) == gpu_success;
    // The driver releases the graph once launches already queued have finished.
    (void)gpu_graph_exec_destroy(static_cast<gpu_graph_exec_t>(graph));
    if (switched) (void)gpu_set_device(previous);
    (void)gpu_get_last_error();
}

}  // namespace tnn::gpu_bridge
