// Process-wide runtime facts and switches: version, compiled backends, GPU devices, CPU threads,
// temporary memory, determinism.
#pragma once

#include <tnn/dtype.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace tnn {

const char* version();
bool has_gpu_backend();             // compiled with CUDA or HIP
const char* gpu_backend_name();     // "CUDA", "HIP" or "none"
int gpu_device_count();             // 0 without a backend or a device
std::string gpu_device_description(int index);  // "NVIDIA H200 (sm_90, 132 SMs, 139 GiB)"
bool gpu_available();               // a backend and at least one device
// The GPU code compiled into this build, as the build named it: CUDA "80 86-real 89-real 90a-real
// 100-real 120" (CMake's CUDA_ARCHITECTURES: machine code and PTX), HIP "gfx1201 gfx1100"; "" without
// a GPU backend.
std::string gpu_architectures();
// Which of that code GPU `index` runs ("sm_90a machine code", "compute_120 PTX (compiled by the
// driver)"). Throws DeviceError naming the GPU, its architecture, the code built and the variable to
// rebuild with (TNN_CUDA_ARCHITECTURES / TNN_HIP_ARCHITECTURES) when it runs none: every GPU entry
// point makes this check before its first use of a device.
std::string gpu_device_code(int index);

// CPU threads used by the CPU backend (default: hardware concurrency). Results never depend on it.
void set_num_threads(int n);
int num_threads();

// Returns cached temporary GPU memory to the driver (tcnn's free_temporary_memory).
void free_temporary_memory();

// The library's GPU memory on one device: its caching allocator of temporaries (module scratch and
// contexts) and the buffers it holds for tensors, parameters and optimizer state. All zero without a
// GPU backend.
struct GpuMemoryStats {
    size_t temporary_reserved_bytes = 0;  // held from the driver for temporaries: in use + cached
    size_t temporary_in_use_bytes = 0;    // temporaries handed out and not yet freed
    uint64_t driver_allocations = 0;      // allocations of temporaries from the driver since the start
    uint64_t driver_frees = 0;
};
GpuMemoryStats gpu_memory_stats(int device);

// Global determinism switch: kernels that reduce with atomics use their ordered variant.
void set_deterministic(bool on);
bool deterministic();

}  // namespace tnn
