// Runtime facts (version, backends, devices) and process-wide switches.
#include <tnn/error.h>
#include <tnn/runtime.h>

#include "core/gpu_bridge.h"

#include <atomic>

namespace tnn {

const char* version() { return TNN_VERSION; }

bool has_gpu_backend() {
#ifdef TNN_WITH_GPU
    return true;
#else
    return false;
#endif  // TNN_WITH_GPU
}

const char* gpu_backend_name() {
#if defined(TNN_WITH_CUDA)
    return "CUDA";
#elif defined(TNN_WITH_HIP)
    return "HIP";
#else
    return "none";
#endif  // TNN_WITH_CUDA / TNN_WITH_HIP
}

int gpu_device_count() {
#ifdef TNN_WITH_GPU
    return gpu_bridge::device_count();
#else
    return 0;
#endif  // TNN_WITH_GPU
}

std::string gpu_device_description(int index) {
#ifdef TNN_WITH_GPU
    return gpu_bridge::device_description(index);
#else
    return "no GPU backend";
#endif  // TNN_WITH_GPU
}

bool gpu_available() { return gpu_device_count() > 0; }

std::string gpu_architectures() {
#if defined(TNN_WITH_GPU) && defined(TNN_GPU_ARCHITECTURES)
    return TNN_GPU_ARCHITECTURES;  // set by CMakeLists.txt for this file only
#else
    return "";
#endif  // TNN_WITH_GPU && TNN_GPU_ARCHITECTURES
}

std::string gpu_device_code(int index) {
#ifdef TNN_WITH_GPU
    return gpu_bridge::device_code(index);
#else
    throw DeviceError(msg("gpu:", index, ": this build has no GPU backend"));
#endif  // TNN_WITH_GPU
}

void free_temporary_memory() {
#ifdef TNN_WITH_GPU
    if (gpu_device_count() > 0) gpu_bridge::free_temporary_memory();
#endif  // TNN_WITH_GPU
}

GpuMemoryStats gpu_memory_stats(int device) {
#ifdef TNN_WITH_GPU
    if (device >= 0 && device < gpu_device_count()) return gpu_bridge::memory_stats(device);
#endif  // TNN_WITH_GPU
    (void)device;
    return {};
}

namespace {
std::atomic<bool> g_deterministic{false};
}

void set_deterministic(bool on) { g_deterministic = on; }
bool deterministic() { return g_deterministic; }

}  // namespace tnn
