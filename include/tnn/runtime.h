// Process-wide runtime facts and switches: version, compiled backends, GPU devices, CPU threads,
// temporary memory, determinism.
#pragma once

#include <tnn/dtype.h>

#include <string>
#include <vector>

namespace tnn {

const char* version();
bool has_gpu_backend();             // compiled with CUDA or HIP
const char* gpu_backend_name();     // "CUDA", "HIP" or "none"
int gpu_device_count();             // 0 without a backend or a device
std::string gpu_device_description(int index);  // "NVIDIA H200 (sm_90, 132 SMs, 139 GiB)"
bool gpu_available();               // a backend and at least one device

// CPU threads used by the CPU backend (default: hardware concurrency). Results never depend on it.
void set_num_threads(int n);
int num_threads();

// Returns cached temporary GPU memory to the driver (tcnn's free_temporary_memory).
void free_temporary_memory();

// Global determinism switch: kernels that reduce with atomics use their ordered variant.
void set_deterministic(bool on);
bool deterministic();

}  // namespace tnn
