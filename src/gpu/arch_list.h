// The GPU code a build holds (the architecture list CMake compiled every GPU source for) and which of
// it a given device can run, with the error a device without any gets. Plain strings and integers, no
// vendor header: compiled into the CPU library so that the CPU tests check the rules
// (tests/cpp/test_arch_list.cpp); src/gpu/runtime.cu applies them to the devices present.
#pragma once

#include <string>
#include <vector>

namespace tnn::gpu {

// The architecture every CUDA kernel of the library can be built for: mma.sync with bf16, cp.async.
constexpr int kCudaMinArchitecture = 80;

// One entry of a CUDA architecture list in CMake's CUDA_ARCHITECTURES spelling: "80" (sm_80 machine
// code and compute_80 PTX), "86-real" (machine code only), "120-virtual" (PTX only). A suffix "a"
// ("90a") is NVIDIA's architecture-specific code (Hopper's wgmma): it runs on that exact compute
// capability only; "f" ("100f") is family-specific code: that major version, minor versions from its own.
struct CudaArch {
    int number = 0;    // major * 10 + minor: 90 for sm_90, 120 for sm_120
    char suffix = 0;   // 0, 'a' or 'f'
    bool sass = false;  // machine code, sm_<number><suffix>
    bool ptx = false;   // PTX, compute_<number><suffix>, compiled by the driver for the device at first load
};

// Parses a list separated by ';', ',' or spaces ("80;86-real;90a-real;120"). Throws ConfigError
// naming the entry for anything else (CMake's "native" / "all" included: the build resolves those).
std::vector<CudaArch> parse_cuda_architectures(const std::string& list);

// NVIDIA's compatibility rules for compute capability `cc` (major * 10 + minor). Machine code of
// sm_XY runs on X.Z for Z >= Y (the same major version only); sm_XYa on X.Y only; sm_XYf like sm_XY.
// PTX of compute_XY runs on every X.Y or newer, across major versions (the driver compiles it);
// compute_XYa on X.Y only; compute_XYf on the same major version from X.Y.
bool cuda_sass_runs_on(const CudaArch& arch, int cc);
bool cuda_ptx_runs_on(const CudaArch& arch, int cc);

// The code the driver loads on a device of capability cc: machine code that runs there when the list
// has any (the newest such), else the newest PTX that runs there, else none (found == false).
struct CudaCode {
    bool found = false;
    bool ptx = false;
    CudaArch arch;
};
CudaCode cuda_code_for(const std::vector<CudaArch>& list, int cc);

// "sm_90a", "compute_120" (the form `ptx` picks).
std::string cuda_arch_name(const CudaArch& arch, bool ptx);
// "machine code sm_80 sm_86 sm_90a, PTX compute_80 compute_120" (each part only when present).
std::string describe_cuda_architectures(const std::vector<CudaArch>& list);
// "sm_90a machine code", "compute_120 PTX (compiled by the driver)".
std::string describe_cuda_code(const CudaCode& code);

// AMD: a code object for `target` ("gfx1201", "gfx12-generic", features after ':' ignored) loads on a
// device of architecture `arch` ("gfx1201") when the names are equal or the target is the generic
// target of the device's major version (gfx12-generic for gfx12xx; gfx11-generic for gfx11xx).
bool hip_target_runs_on(const std::string& target, const std::string& arch);

// What a build gives one device: whether it has code the device can run, which ("sm_90a machine code",
// "gfx1201 code object"), and otherwise the error to report: the device, its architecture, the code
// built, and how to rebuild (the CMake / pip variable, TNN_CUDA_ARCHITECTURES or
// TNN_HIP_ARCHITECTURES, with a value that covers the device). `built`: the build's list as CMake
// spelled it; `device`: "gpu:0 NVIDIA GeForce RTX 4090". `driver_error`: the runtime's error when it
// refused the device's code (empty when it loaded): the message then says what the list offered the
// device, so that a PTX the driver is too old to compile is told apart from a device the list misses.
struct DeviceCode {
    bool runs = false;
    std::string code;     // when runs
    std::string message;  // when not
};
DeviceCode cuda_device_code(const std::string& built, const std::string& device, int cc,
                            const std::string& driver_error = "");
DeviceCode hip_device_code(const std::string& built, const std::string& device, const std::string& arch,
                           const std::string& driver_error = "");

}  // namespace tnn::gpu
