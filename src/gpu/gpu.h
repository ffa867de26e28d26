// The only header that names a GPU vendor: our gpu_* names mapped to CUDA (TNN_WITH_CUDA) or HIP
// (TNN_WITH_HIP), device half/bf16 types that share bits with tnn::half / tnn::bfloat16, error checks
// that report file and line, ceil_div, warp_size(), capabilities in one integer space, device properties.
#pragma once

#include <tnn/dtype.h>
#include <tnn/error.h>
#include <tnn/tensor.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#if defined(TNN_WITH_HIP)
#include <hip/hip_runtime.h>
#include <hip/hip_fp16.h>
#if __has_include(<hip/hip_bf16.h>)
#include <hip/hip_bf16.h>
#define TNN_HIP_HAS_BF16_H 1
#else
#include <hip/hip_bfloat16.h>  // ROCm 5.x: only the C++ class hip_bfloat16
#endif  // __has_include(<hip/hip_bf16.h>)
#else
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#endif  // TNN_WITH_HIP

// True while compiling device code or a translation unit that may contain kernels.
#if defined(__CUDACC__) || defined(__HIPCC__)
#define TNN_GPU_COMPILER 1
#endif  // defined(__CUDACC__) || defined(__HIPCC__)

// ---- Vendor mapping. Types are aliases, constants constexpr, functions macros (they keep the
// vendor's overloads, e.g. cudaMalloc's template form). Keep the two lists in the same order.
#if defined(TNN_WITH_HIP)
using gpu_error_t = hipError_t;
using gpu_stream_t = hipStream_t;
using gpu_event_t = hipEvent_t;
using gpu_graph_t = hipGraph_t;
using gpu_graph_exec_t = hipGraphExec_t;
using gpu_device_prop_t = hipDeviceProp_t;
using gpu_pointer_attributes_t = hipPointerAttribute_t;
using gpu_stream_capture_status_t = hipStreamCaptureStatus;
using gpu_half = __half;
#if defined(TNN_HIP_HAS_BF16_H)
using gpu_bf16 = __hip_bfloat16;
#else
using gpu_bf16 = hip_bfloat16;
#endif  // TNN_HIP_HAS_BF16_H
constexpr gpu_error_t gpu_success = hipSuccess;
constexpr gpu_error_t gpu_error_no_device = hipErrorNoDevice;
constexpr gpu_error_t gpu_error_insufficient_driver = hipErrorInsufficientDriver;
constexpr gpu_error_t gpu_error_memory_allocation = hipErrorOutOfMemory;
constexpr gpu_error_t gpu_error_no_kernel_image = hipErrorNoBinaryForGpu;
constexpr auto gpu_memcpy_default = hipMemcpyDefault;
constexpr auto gpu_event_disable_timing = hipEventDisableTiming;
constexpr auto gpu_stream_non_blocking = hipStreamNonBlocking;
constexpr auto gpu_stream_capture_status_none = hipStreamCaptureStatusNone;
constexpr auto gpu_stream_capture_mode_global = hipStreamCaptureModeGlobal;
constexpr auto gpu_stream_capture_mode_thread_local = hipStreamCaptureModeThreadLocal;
constexpr auto gpu_stream_capture_mode_relaxed = hipStreamCaptureModeRelaxed;
constexpr auto gpu_stream_capture_status_active = hipStreamCaptureStatusActive;
constexpr auto gpu_graph_instantiate_flag_auto_free_on_launch = hipGraphInstantiateFlagAutoFreeOnLaunch;
#define gpu_get_error_string hipGetErrorString
#define gpu_get_error_name hipGetErrorName
#define gpu_get_last_error hipGetLastError
#define gpu_get_device_count hipGetDeviceCount
#define gpu_get_device hipGetDevice
#define gpu_set_device hipSetDevice
#define gpu_get_device_properties hipGetDeviceProperties
#define gpu_device_synchronize hipDeviceSynchronize
#define gpu_malloc hipMalloc
#define gpu_free hipFree
#define gpu_mem_get_info hipMemGetInfo
#define gpu_memcpy_async hipMemcpyAsync
#define gpu_memcpy_2d_async hipMemcpy2DAsync
#define gpu_memset_async hipMemsetAsync
#define gpu_pointer_get_attributes hipPointerGetAttributes
// Kernel attributes: HIP takes the kernel as const void* (its host stub), CUDA has a template overload.
using gpu_func_attributes_t = hipFuncAttributes;
constexpr auto gpu_func_attribute_max_dynamic_shared_memory_size = hipFuncAttributeMaxDynamicSharedMemorySize;
#define gpu_func_set_attribute(func, attr, value) hipFuncSetAttribute(reinterpret_cast<const void*>(func), attr, value)
#define gpu_func_get_attributes(attrs, func) hipFuncGetAttributes(attrs, reinterpret_cast<const void*>(func))
#define gpu_stream_create_with_flags hipStreamCreateWithFlags
#define gpu_stream_destroy hipStreamDestroy
#define gpu_stream_synchronize hipStreamSynchronize
#define gpu_stream_wait_event hipStreamWaitEvent
#define gpu_stream_is_capturing hipStreamIsCapturing
#define gpu_stream_begin_capture hipStreamBeginCapture
#define gpu_stream_end_capture hipStreamEndCapture
#define gpu_event_create_with_flags hipEventCreateWithFlags
#define gpu_event_record hipEventRecord
#define gpu_event_destroy hipEventDestroy
#define gpu_graph_instantiate(exec, graph) hipGraphInstantiate(exec, graph, nullptr, nullptr, 0)
#define gpu_graph_launch hipGraphLaunch
#define gpu_graph_destroy hipGraphDestroy
#define gpu_graph_exec_destroy hipGraphExecDestroy
#define gpu_graph_instantiate_with_flags hipGraphInstantiateWithFlags
#define gpu_malloc_async hipMallocAsync
#define gpu_free_async hipFreeAsync
#define gpu_device_graph_mem_trim hipDeviceGraphMemTrim
#else
using gpu_error_t = cudaError_t;
using gpu_stream_t = cudaStream_t;
using gpu_event_t = cudaEvent_t;
using gpu_graph_t = cudaGraph_t;
using gpu_graph_exec_t = cudaGraphExec_t;
using gpu_device_prop_t = cudaDeviceProp;
using gpu_pointer_attributes_t = cudaPointerAttributes;
using gpu_stream_capture_status_t = cudaStreamCaptureStatus;
using gpu_half = __half;
using gpu_bf16 = __nv_bfloat16;
constexpr gpu_error_t gpu_success = cudaSuccess;
constexpr gpu_error_t gpu_error_no_device = cudaErrorNoDevice;
constexpr gpu_error_t gpu_error_insufficient_driver = cudaErrorInsufficientDriver;
constexpr gpu_error_t gpu_error_memory_allocation = cudaErrorMemoryAllocation;
constexpr gpu_error_t gpu_error_no_kernel_image = cudaErrorNoKernelImageForDevice;
constexpr auto gpu_memcpy_default = cudaMemcpyDefault;
constexpr auto gpu_event_disable_timing = cudaEventDisableTiming;
constexpr auto gpu_stream_non_blocking = cudaStreamNonBlocking;
constexpr auto gpu_stream_capture_status_none = cudaStreamCaptureStatusNone;
constexpr auto gpu_stream_capture_mode_global = cudaStreamCaptureModeGlobal;
constexpr auto gpu_stream_capture_mode_thread_local = cudaStreamCaptureModeThreadLocal;
constexpr auto gpu_stream_capture_mode_relaxed = cudaStreamCaptureModeRelaxed;
constexpr auto gpu_stream_capture_status_active = cudaStreamCaptureStatusActive;
constexpr auto gpu_graph_instantiate_flag_auto_free_on_launch = cudaGraphInstantiateFlagAutoFreeOnLaunch;
#define gpu_get_error_string cudaGetErrorString
#define gpu_get_error_name cudaGetErrorName
#define gpu_get_last_error cudaGetLastError
#define gpu_get_device_count cudaGetDeviceCount
#define gpu_get_device cudaGetDevice
#define gpu_set_device cudaSetDevice
#define gpu_get_device_properties cudaGetDeviceProperties
#define gpu_device_synchronize cudaDeviceSynchronize
#define gpu_malloc cudaMalloc
#define gpu_free cudaFree
#define gpu_mem_get_info cudaMemGetInfo
#define gpu_memcpy_async cudaMemcpyAsync
#define gpu_memcpy_2d_async cudaMemcpy2DAsync
#define gpu_memset_async cudaMemsetAsync
#define gpu_pointer_get_attributes cudaPointerGetAttributes
// Kernel attributes: HIP takes the kernel as const void* (its host stub), CUDA has a template overload.
using gpu_func_attributes_t = cudaFuncAttributes;
constexpr auto gpu_func_attribute_max_dynamic_shared_memory_size = cudaFuncAttributeMaxDynamicSharedMemorySize;
#define gpu_func_set_attribute cudaFuncSetAttribute
#define gpu_func_get_attributes cudaFuncGetAttributes
#define gpu_stream_create_with_flags cudaStreamCreateWithFlags
#define gpu_stream_destroy cudaStreamDestroy
#define gpu_stream_synchronize cudaStreamSynchronize
#define gpu_stream_wait_event cudaStreamWaitEvent
#define gpu_stream_is_capturing cudaStreamIsCapturing
#define gpu_stream_begin_capture cudaStreamBeginCapture
#define gpu_stream_end_capture cudaStreamEndCapture
#define gpu_event_create_with_flags cudaEventCreateWithFlags
#define gpu_event_record cudaEventRecord
#define gpu_event_destroy cudaEventDestroy
#define gpu_graph_instantiate(exec, graph) cudaGraphInstantiate(exec, graph, 0)
#define gpu_graph_launch cudaGraphLaunch
#define gpu_graph_destroy cudaGraphDestroy
#define gpu_graph_exec_destroy cudaGraphExecDestroy
#define gpu_graph_instantiate_with_flags cudaGraphInstantiateWithFlags
#define gpu_malloc_async cudaMallocAsync
#define gpu_free_async cudaFreeAsync
#define gpu_device_graph_mem_trim cudaDeviceGraphMemTrim
#endif  // TNN_WITH_HIP

#if defined(TNN_WITH_HIP)
// HIP has no __grid_constant__: kernel arguments live in the read-only kernarg segment anyway.
#ifndef __grid_constant__
#define __grid_constant__
#endif  // __grid_constant__
// HIP before 6.0 has no graph memory pools, hence nothing to trim.
#if HIP_VERSION_MAJOR < 6
#undef gpu_device_graph_mem_trim
#define gpu_device_graph_mem_trim(device) (static_cast<void>(device), hipSuccess)
#endif  // HIP_VERSION_MAJOR < 6
// Kernels are written for 32-lane wavefronts (RDNA's wave32, the default of clang for gfx10+): lane
// masks, "% 32" and "tile of 32 lanes" reasoning hold only there. A wave64 device pass is refused.
#if defined(__HIP_DEVICE_COMPILE__) && defined(__AMDGCN_WAVEFRONT_SIZE) && __AMDGCN_WAVEFRONT_SIZE != 32
#error "tiny-rdna4-nn kernels need wave32: build for RDNA (gfx11xx, gfx12xx) without -mwavefrontsize64"
#endif  // __HIP_DEVICE_COMPILE__ && __AMDGCN_WAVEFRONT_SIZE != 32
#endif  // TNN_WITH_HIP

static_assert(sizeof(gpu_half) == sizeof(tnn::half), "gpu_half must share bits with tnn::half");
static_assert(sizeof(gpu_bf16) == sizeof(tnn::bfloat16), "gpu_bf16 must share bits with tnn::bfloat16");

namespace tnn::gpu {

// ---- Errors. Every runtime call goes through TNN_GPU_CHECK; every kernel launch is followed by
// TNN_GPU_CHECK_LAUNCH("kernel_name"). Both throw DeviceError naming the call, the file and the line.
// ("; this build's GPU code: <list> ..." after a missing kernel image: how to rebuild, see tnn info.)
std::string no_kernel_image_hint();
[[noreturn]] inline void throw_error(gpu_error_t err, const char* what, const char* file, int line) {
    // Reading the last error clears a non-sticky error, so that a later check does not report it again.
    (void)gpu_get_last_error();
    throw DeviceError(msg(what, " failed at ", file, ":", line, ": ", gpu_get_error_name(err), " (",
                          gpu_get_error_string(err), ")",
                          err == gpu_error_no_kernel_image ? no_kernel_image_hint() : std::string()));
}

#define TNN_GPU_CHECK(expr)                                                                \
    do {                                                                                   \
        const gpu_error_t tnn_gpu_err_ = (expr);                                           \
        if (tnn_gpu_err_ != gpu_success) ::tnn::gpu::throw_error(tnn_gpu_err_, #expr, __FILE__, __LINE__); \
    } while (0)

#define TNN_GPU_CHECK_LAUNCH(kernel_name)                                                  \
    do {                                                                                   \
        const gpu_error_t tnn_gpu_err_ = gpu_get_last_error();                             \
        if (tnn_gpu_err_ != gpu_success)                                                   \
            ::tnn::gpu::throw_error(tnn_gpu_err_, "launch of " kernel_name, __FILE__, __LINE__); \
    } while (0)

// ---- Launch arithmetic.
template <typename T> TNN_HD constexpr T ceil_div(T a, T b) { return (a + b - 1) / b; }
template <typename T> TNN_HD constexpr T round_up(T a, T b) { return ceil_div(a, b) * b; }

// ---- Vector memory accesses.
// N values of T as one unit aligned to its size, at most 16 bytes: loading or storing one is a single
// vector instruction (two for 32 bytes). A pointer may be read as Packed<T, N> only where
// aligned(p, alignof(Packed<T, N>)).
template <typename T, uint32_t N> struct alignas(sizeof(T) * N < 16 ? sizeof(T) * N : 16) Packed {
    static_assert(N > 0 && (sizeof(T) * N & (sizeof(T) * N - 1)) == 0, "gpu::Packed: a power-of-two number of bytes");
    T v[N];
};
inline bool aligned(const void* p, size_t alignment) { return reinterpret_cast<uintptr_t>(p) % alignment == 0; }

// Grid-stride elementwise kernels: kElementwiseThreads per block and at most kMaxElementwiseBlocks
// blocks, plenty to fill any device and within every vendor's grid limit.
constexpr int kElementwiseThreads = 256;
constexpr int64_t kMaxElementwiseBlocks = 65536;
inline dim3 elementwise_grid(int64_t n) {
    const int64_t blocks = ceil_div<int64_t>(n, kElementwiseThreads);
    return dim3(static_cast<unsigned>(blocks < kMaxElementwiseBlocks ? blocks : kMaxElementwiseBlocks));
}

// Threads per warp (NVIDIA) / wavefront (AMD) that kernels are compiled for. NVIDIA: always 32.
// HIP: we build for RDNA (gfx11/gfx12) in wave32 mode; the device pass checks the compiler agrees,
// and device_properties() records what the device reports so a wave64 device is refused clearly.
TNN_HD constexpr int warp_size() {
#if defined(TNN_WITH_HIP) && defined(__HIP_DEVICE_COMPILE__) && defined(__AMDGCN_WAVEFRONT_SIZE)
    return __AMDGCN_WAVEFRONT_SIZE;
#else
    return 32;
#endif  // TNN_WITH_HIP && __HIP_DEVICE_COMPILE__ && __AMDGCN_WAVEFRONT_SIZE
}

// ---- Capabilities in one integer space. NVIDIA: major * 10 + minor (sm_90 -> 90). AMD:
// kAmdCapabilityOffset + the gfx number read as hexadecimal (gfx1201 -> offset + 0x1201,
// gfx90a -> offset + 0x90a), so "cc >= kCcRdna4" style comparisons work within one vendor.
constexpr int kAmdCapabilityOffset = 0x1000000;
constexpr int amd_capability(int gfx_hex) { return kAmdCapabilityOffset + gfx_hex; }
constexpr bool is_amd(int capability) { return capability >= kAmdCapabilityOffset; }
constexpr bool is_nvidia(int capability) { return capability > 0 && capability < kAmdCapabilityOffset; }
constexpr int kCcVolta = 70, kCcAmpere = 80, kCcAda = 89, kCcHopper = 90;
// An NVIDIA GPU of sm_90 or later (bulk reductions, L2 discard): never an AMD one, whose integers are larger.
constexpr bool is_nvidia_sm90_or_later(int capability) { return is_nvidia(capability) && capability >= kCcHopper; }
constexpr int kCcRdna3 = amd_capability(0x1100), kCcRdna4 = amd_capability(0x1200);
// "gfx1201:sramecc-:xnack-" -> amd_capability(0x1201); 0 when the name is not a gfx target.
int amd_capability_from_arch_name(const std::string& arch_name);

// ---- Devices. Properties are read once per device and cached (thread-safe).
struct DeviceProperties {
    std::string name;          // "NVIDIA H200"
    std::string arch;          // "sm_90", "gfx1201"
    int capability = 0;        // in the integer space above
    int sm_count = 0;          // streaming multiprocessors / compute units
    int warp_size = 0;         // as the device reports it
    int max_threads_per_block = 0;
    size_t l2_bytes = 0;
    size_t smem_per_block = 0;        // without opt-in
    size_t smem_per_block_optin = 0;  // the most a kernel may opt in to
    size_t total_memory = 0;
};
int device_count();  // 0 when there is no driver or no device; never throws
const DeviceProperties& device_properties(int device);  // throws DeviceError for a bad index

// Whether the build holds code `device` can run (src/gpu/arch_list.h), asked of the runtime once per
// device through a probe kernel compiled like every other: "sm_90a machine code" when it does; else
// throws DeviceError naming the GPU, its architecture, the code built and the variable to rebuild
// with. DeviceGuard makes the check, so every GPU entry point fails with that message before its
// first launch instead of with the runtime's "no kernel image" at it.
std::string device_code(int device);
void require_device_code(int device);

// Makes `device` current for the scope (kernels launch and memory is allocated on the current device),
// after require_device_code(device).
class DeviceGuard {
public:
    explicit DeviceGuard(int device);
    ~DeviceGuard();
    DeviceGuard(const DeviceGuard&) = delete;
    DeviceGuard& operator=(const DeviceGuard&) = delete;

private:
    int m_previous = -1;
};

inline gpu_stream_t native_stream(const Stream& stream) { return static_cast<gpu_stream_t>(stream.native()); }

// True while the stream records a graph (no allocation, synchronisation or host read may happen then).
// Throws DeviceError when the query fails.
bool stream_is_capturing(const Stream& stream);

// The capture status of `stream` for code that must not throw (destructors, clean-up, a cache's
// bookkeeping): nullopt when the query failed, its error cleared so that the next launch check does
// not report it. The caller decides what a failed query means for it.
std::optional<gpu_stream_capture_status_t> capture_status(gpu_stream_t stream) noexcept;

// Makes later work queued on `waiter` wait for the work queued on `producer` so far (an event, no
// host synchronisation). No-op when both are the same stream.
void stream_wait(const Stream& waiter, const Stream& producer);

}  // namespace tnn::gpu

// ---- Device-side helpers: conversions between the storage types and the accumulation types.
#if defined(TNN_GPU_COMPILER)
namespace tnn::gpu {

// The storage type a kernel uses for a tnn host type (same bits).
template <typename T> struct device_type { using type = T; };
template <> struct device_type<half> { using type = gpu_half; };
template <> struct device_type<bfloat16> { using type = gpu_bf16; };
template <typename T> using device_t = typename device_type<T>::type;

// Widening loads: fp16 / bf16 / fp32 -> float, fp64 -> double (as acc_t on the host).
__device__ __forceinline__ float to_acc(float v) { return v; }
__device__ __forceinline__ double to_acc(double v) { return v; }
__device__ __forceinline__ float to_acc(gpu_half v) { return __half2float(v); }
#if defined(TNN_WITH_HIP) && !defined(TNN_HIP_HAS_BF16_H)
__device__ __forceinline__ float to_acc(gpu_bf16 v) { return static_cast<float>(v); }
#else
__device__ __forceinline__ float to_acc(gpu_bf16 v) { return __bfloat162float(v); }
#endif  // TNN_WITH_HIP && !TNN_HIP_HAS_BF16_H

// Orders the shared-memory accesses of the lanes of one warp / wavefront before and after it, like
// CUDA's __syncwarp(). AMD: the lanes of a wavefront issue each instruction together and LDS
// serves one wavefront's instructions in order, so only the compiler must not move memory accesses
// across it (wave_barrier) and the wavefront-scope fences make the ordering visible to it.
__device__ __forceinline__ void sync_warp() {
#if defined(TNN_WITH_HIP)
    __builtin_amdgcn_fence(__ATOMIC_RELEASE, "wavefront");
    __builtin_amdgcn_wave_barrier();
    __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "wavefront");
#else
    __syncwarp();
#endif  // TNN_WITH_HIP
}

// Narrowing stores with round-to-nearest-even. fp64 goes to fp16 / bf16 through fp32, exactly as
// the host types do (tnn::half(double) == tnn::half(float(double))), so GPU and CPU agree bitwise.
template <typename D> __device__ __forceinline__ D from_acc(float v);
template <> __device__ __forceinline__ float from_acc<float>(float v) { return v; }
template <> __device__ __forceinline__ double from_acc<double>(float v) { return static_cast<double>(v); }
template <> __device__ __forceinline__ gpu_half from_acc<gpu_half>(float v) { return __float2half_rn(v); }
#if defined(TNN_WITH_HIP) && !defined(TNN_HIP_HAS_BF16_H)
// hip_bfloat16(float)'s rounding, bit for bit (nearest even; a NaN whose payload is only in the
// low 16 bits keeps a payload bit), written out: that constructor has several basic blocks and no
// inline hint, so AMDGPU leaves it out of line in kernels over amdgpu-inline-max-bb blocks and it
// returns every value through scratch memory (the gfx12 FullyFusedMLP kernels, bf16 W >= 32).
template <> __device__ __forceinline__ gpu_bf16 from_acc<gpu_bf16>(float v) {
    uint32_t u = __builtin_bit_cast(uint32_t, v);
    if (~u & 0x7f800000u) u += 0x7fffu + ((u >> 16) & 1u);  // finite: round to nearest even
    else if (u & 0xffffu) u |= 0x10000u;                     // NaN: keep it a NaN
    return __builtin_bit_cast(gpu_bf16, static_cast<uint16_t>(u >> 16));
}
#else
template <> __device__ __forceinline__ gpu_bf16 from_acc<gpu_bf16>(float v) { return __float2bfloat16(v); }
#endif  // TNN_WITH_HIP && !TNN_HIP_HAS_BF16_H
template <typename D> __device__ __forceinline__ D from_acc(double v) { return from_acc<D>(static_cast<float>(v)); }
template <> __device__ __forceinline__ double from_acc<double>(double v) { return v; }

// Calls f(S{}) with S the device storage type of dtype t: the one runtime-dtype switch of the launchers.
template <typename F> void dispatch_device_dtype(DType t, F&& f) {
    switch (t) {
        case DType::f32: f(float{}); return;
        case DType::f64: f(double{}); return;
        case DType::f16: f(gpu_half{}); return;
        case DType::bf16: f(gpu_bf16{}); return;
    }
}

}  // namespace tnn::gpu
#endif  // TNN_GPU_COMPILER
