// The GPU side of src/core/gpu_bridge.h (devices, memory, copies, convert / fill / add / sum) and
// the device helpers declared in gpu.h. Kernels first, then the launchers and bridge entry points.
#include "core/gpu_bridge.h"
#include "gpu/allocator.h"
#include "gpu/arch_list.h"
#include "gpu/gpu.h"

#include <tnn/runtime.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>
#include <mutex>
#include <vector>

namespace tnn::gpu {

namespace {

// Element i of a [rows, cols] view with a row stride, for the 2-D elementwise kernels.
struct Strided2d {
    int64_t cols, stride;
    __device__ __forceinline__ int64_t offset(int64_t i) const { return (i / cols) * stride + i % cols; }
};

template <typename S, typename D>
__global__ void tensor_convert_kernel(const S* __restrict__ src, Strided2d s, D* __restrict__ dst, Strided2d d,
                                      int64_t n) {
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
        dst[d.offset(i)] = from_acc<D>(to_acc(src[s.offset(i)]));
}

template <typename D>
__global__ void tensor_add_kernel(const D* __restrict__ src, Strided2d s, D* __restrict__ dst, Strided2d d, int64_t n) {
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
        const int64_t o = d.offset(i);
        dst[o] = from_acc<D>(to_acc(dst[o]) + to_acc(src[s.offset(i)]));
    }
}

// Writes a bit pattern (the value already converted to the dtype on the host) into every element.
template <typename BITS>
__global__ void tensor_fill_kernel(BITS* __restrict__ dst, Strided2d d, int64_t n, BITS value) {
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
        dst[d.offset(i)] = value;
}

// Deterministic sum: block b adds elements [b * kSumChunk, (b + 1) * kSumChunk) in fp64, each thread
// a fixed strided subset in order, then a fixed shared-memory tree. The order depends on n only.
constexpr int kSumThreads = 256;
constexpr int64_t kSumChunk = kSumThreads * 16;

template <typename S>
__global__ void tensor_sum_kernel(const S* __restrict__ src, Strided2d s, int64_t n, double* __restrict__ partials) {
    __shared__ double shared[kSumThreads];
    const int64_t begin = blockIdx.x * kSumChunk, end = begin + kSumChunk < n ? begin + kSumChunk : n;
    double acc = 0;
    for (int64_t i = begin + threadIdx.x; i < end; i += kSumThreads) acc += static_cast<double>(to_acc(src[s.offset(i)]));
    shared[threadIdx.x] = acc;
    __syncthreads();
    for (int width = kSumThreads / 2; width > 0; width /= 2) {
        if (static_cast<int>(threadIdx.x) < width) shared[threadIdx.x] += shared[threadIdx.x + width];
        __syncthreads();
    }
    if (threadIdx.x == 0) partials[blockIdx.x] = shared[0];
}

Strided2d strided(const ConstView& v) { return Strided2d{v.cols, v.stride}; }

void check_on_gpu(const char* what, const ConstView& v) {
    if (!v.device.is_gpu()) throw DeviceError(msg(what, ": ", describe(v), " is not on a GPU"));
    if (v.stride < v.cols) throw ShapeError(msg(what, ": ", describe(v), " has stride < cols"));
}

// Compiled for the build's architecture list like every other kernel: whether the runtime finds code
// for a device in this module is whether it finds code in every one (device_code).
__global__ void arch_probe_kernel() {}

std::string arch_name(const gpu_device_prop_t& p) {
#if defined(TNN_WITH_HIP)
    const std::string full = p.gcnArchName;
    return full.substr(0, full.find(':'));
#else
    return msg("sm_", p.major, p.minor);
#endif  // TNN_WITH_HIP
}

}  // namespace

int amd_capability_from_arch_name(const std::string& arch_name) {
    if (arch_name.rfind("gfx", 0) != 0) return 0;
    int value = 0;
    for (size_t i = 3; i < arch_name.size() && arch_name[i] != ':'; ++i) {
        const char c = arch_name[i];
        int digit;
        if (c >= '0' && c <= '9') digit = c - '0';
        else if (c >= 'a' && c <= 'f') digit = c - 'a' + 10;
        else return 0;
        value = value * 16 + digit;
    }
    return value > 0 ? amd_capability(value) : 0;
}

int device_count() {
    // The count cannot change within a process (visible devices are fixed when the driver starts).
    static const int count = [] {
        int n = 0;
        const gpu_error_t err = gpu_get_device_count(&n);
        if (err != gpu_success) {
            // No driver, no device, or a driver too old for this runtime: a CPU-only machine.
            (void)gpu_get_last_error();
            return 0;
        }
        return n;
    }();
    return count;
}

const DeviceProperties& device_properties(int device) {
    static std::mutex mutex;
    static std::vector<std::unique_ptr<DeviceProperties>> cache;
    const int n = device_count();
    if (device < 0 || device >= n) throw DeviceError(msg("no GPU with index ", device, " (", n, " present)"));
    std::lock_guard<std::mutex> lock(mutex);
    if (cache.empty()) cache.resize(static_cast<size_t>(n));
    auto& slot = cache[static_cast<size_t>(device)];
    if (!slot) {
        gpu_device_prop_t p;
        TNN_GPU_CHECK(gpu_get_device_properties(&p, device));
        auto d = std::make_unique<DeviceProperties>();
        d->name = p.name;
        d->arch = arch_name(p);
#if defined(TNN_WITH_HIP)
        d->capability = amd_capability_from_arch_name(d->arch);
#else
        d->capability = p.major * 10 + p.minor;
#endif  // TNN_WITH_HIP
        d->sm_count = p.multiProcessorCount;
        d->warp_size = p.warpSize;
        d->max_threads_per_block = p.maxThreadsPerBlock;
        d->l2_bytes = static_cast<size_t>(p.l2CacheSize);
        d->smem_per_block = p.sharedMemPerBlock;
#if defined(TNN_WITH_HIP) && HIP_VERSION_MAJOR < 6
        d->smem_per_block_optin = p.sharedMemPerBlock;  // ROCm 5 has no opt-in field; AMD has no opt-in LDS
#else
        d->smem_per_block_optin = p.sharedMemPerBlockOptin;
#endif  // TNN_WITH_HIP && HIP_VERSION_MAJOR < 6
        d->total_memory = p.totalGlobalMem;
        slot = std::move(d);
    }
    return *slot;
}

namespace {

struct CodeCheck {
    bool runs = false;
    std::string text;  // the code when it runs, else the error message
};

CodeCheck check_device_code(int device) {
    const DeviceProperties& p = device_properties(device);  // throws for a bad index
    int previous = -1;
    TNN_GPU_CHECK(gpu_get_device(&previous));
    if (previous != device) TNN_GPU_CHECK(gpu_set_device(device));
    // The attributes of a kernel load its module for the current device: this fails exactly when the
    // build has no code that device can run (or the driver cannot compile the PTX it has).
    gpu_func_attributes_t attributes;
    const gpu_error_t err = gpu_func_get_attributes(&attributes, arch_probe_kernel);
    (void)gpu_get_last_error();
    if (previous != device) (void)gpu_set_device(previous);
    const std::string error = err == gpu_success ? "" : msg(gpu_get_error_name(err), ": ", gpu_get_error_string(err));
    const std::string label = msg("gpu:", device, " ", p.name);
#if defined(TNN_WITH_HIP)
    DeviceCode code = hip_device_code(tnn::gpu_architectures(), label, p.arch, error);
#else
    DeviceCode code = cuda_device_code(tnn::gpu_architectures(), label, p.capability, error);
#endif  // TNN_WITH_HIP
    // The runtime is the authority: code it loaded that the list did not predict is still code it runs.
    if (err == gpu_success && !code.runs) return CodeCheck{true, msg("code of binary version ", attributes.binaryVersion)};
    return CodeCheck{code.runs, code.runs ? code.code : code.message};
}

const CodeCheck& cached_device_code(int device) {
    static std::mutex mutex;
    static std::vector<std::unique_ptr<CodeCheck>> cache;
    const int n = device_count();
    if (device < 0 || device >= n) throw DeviceError(msg("no GPU with index ", device, " (", n, " present)"));
    std::lock_guard<std::mutex> lock(mutex);
    if (cache.empty()) cache.resize(static_cast<size_t>(n));
    auto& slot = cache[static_cast<size_t>(device)];
    if (!slot) slot = std::make_unique<CodeCheck>(check_device_code(device));
    return *slot;
}

}  // namespace

std::string device_code(int device) {
    const CodeCheck& c = cached_device_code(device);
    if (!c.runs) throw DeviceError(c.text);
    return c.text;
}

void require_device_code(int device) {
    // Devices whose code was found, as bits (a lock-free test on every DeviceGuard); beyond 64 devices
    // the cached check under its lock.
    static std::atomic<uint64_t> found{0};
    const bool bit = device >= 0 && device < 64;
    if (bit && (found.load(std::memory_order_acquire) >> device & 1u)) return;
    (void)device_code(device);
    if (bit) found.fetch_or(uint64_t{1} << device, std::memory_order_acq_rel);
}

std::string no_kernel_image_hint() {
    return msg("; this build's GPU code is \"", tnn::gpu_architectures(),
               "\" (`tnn info` shows which GPUs it covers; docs/gpu.md, GPU architectures)");
}

DeviceGuard::DeviceGuard(int device) {
    require_device_code(device);
    TNN_GPU_CHECK(gpu_get_device(&m_previous));
    if (m_previous != device) TNN_GPU_CHECK(gpu_set_device(device));
}

DeviceGuard::~DeviceGuard() {
    int current = -1;
    if (gpu_get_device(&current) == gpu_success && current != m_previous && m_previous >= 0)
        (void)gpu_set_device(m_previous);
    (void)gpu_get_last_error();
}

bool stream_is_capturing(const Stream& stream) {
    gpu_stream_capture_status_t status = gpu_stream_capture_status_none;
    TNN_GPU_CHECK(gpu_stream_is_capturing(native_stream(stream), &status));
    return status != gpu_stream_capture_status_none;
}

std::optional<gpu_stream_capture_status_t> capture_status(gpu_stream_t stream) noexcept {
    gpu_stream_capture_status_t status = gpu_stream_capture_status_none;
    if (gpu_stream_is_capturing(stream, &status) == gpu_success) return status;
    (void)gpu_get_last_error();
    return std::nullopt;
}

void stream_wait(const Stream& waiter, const Stream& producer) {
    if (waiter.native() == producer.native() && waiter.device() == producer.device()) return;
    DeviceGuard guard(producer.device().index);
    gpu_event_t event;
    TNN_GPU_CHECK(gpu_event_create_with_flags(&event, gpu_event_disable_timing));
    // The event may be destroyed right after the wait is queued: the wait keeps what it needs.
    const gpu_error_t record = gpu_event_record(event, native_stream(producer));
    const gpu_error_t wait = record == gpu_success ? gpu_stream_wait_event(native_stream(waiter), event, 0) : record;
    (void)gpu_event_destroy(event);
    TNN_GPU_CHECK(wait);
}

}  // namespace tnn::gpu

namespace tnn::gpu_bridge {

using namespace tnn::gpu;

int device_count() { return gpu::device_count(); }

std::string device_description(int device) {
    const DeviceProperties& p = device_properties(device);
    return msg(p.name, " (", p.arch, ", ", p.sm_count, " SMs, ", p.total_memory >> 30, " GiB)");
}

std::string device_code(int device) { return gpu::device_code(device); }

void* malloc(int device, size_t bytes) {
    if (bytes == 0) return nullptr;
    if (device < 0 || device >= gpu::device_count())
        throw DeviceError(msg("GPU memory allocation: no GPU with index ", device, " (", gpu::device_count(),
                              " present)"));
    DeviceGuard guard(device);
    void* ptr = nullptr;
    const gpu_error_t err = gpu_malloc(&ptr, bytes);
    if (err != gpu_success) {
        (void)gpu_get_last_error();
        throw DeviceError(msg("GPU memory allocation of ", bytes, " bytes on gpu:", device, " failed: ",
                              gpu_get_error_string(err)));
    }
    return ptr;
}

void free(int device, void* ptr) noexcept {
    if (!ptr) return;
    int previous = -1;
    const bool switched = gpu_get_device(&previous) == gpu_success && previous != device &&
                          gpu_set_device(device) == gpu_success;
    (void)gpu_free(ptr);
    if (switched) (void)gpu_set_device(previous);
    (void)gpu_get_last_error();
}

bool is_device_pointer(const void* ptr, int device) {
    if (!ptr) return false;
    // Graph memory of a capture in progress is not mapped yet, so the driver may not know it.
    if (is_graph_temporary(device, ptr)) return true;
    gpu_pointer_attributes_t attr;
    std::memset(&attr, 0, sizeof(attr));
    if (gpu_pointer_get_attributes(&attr, ptr) != gpu_success) {
        // Older runtimes report plain host memory as an error instead of "unregistered".
        (void)gpu_get_last_error();
        return false;
    }
#if defined(TNN_WITH_HIP) && HIP_VERSION_MAJOR < 6
    if (attr.isManaged) return true;
    return attr.memoryType == hipMemoryTypeDevice && attr.device == device;
#elif defined(TNN_WITH_HIP)
    if (attr.type == hipMemoryTypeManaged) return true;
    return attr.type == hipMemoryTypeDevice && attr.device == device;
#else
    if (attr.type == cudaMemoryTypeManaged) return true;
    return attr.type == cudaMemoryTypeDevice && attr.device == device;
#endif  // TNN_WITH_HIP / HIP_VERSION_MAJOR
}

void memcpy(const Stream& stream, void* dst, const void* src, size_t bytes) {
    if (bytes == 0) return;
    DeviceGuard guard(stream.device().index);
    TNN_GPU_CHECK(gpu_memcpy_async(dst, src, bytes, gpu_memcpy_default, native_stream(stream)));
}

void memcpy_2d(const Stream& stream, void* dst, size_t dst_pitch, const void* src, size_t src_pitch,
               size_t width_bytes, size_t rows) {
    if (width_bytes == 0 || rows == 0) return;
    if (dst_pitch < width_bytes || src_pitch < width_bytes)
        throw ShapeError(msg("memcpy_2d: pitches (", dst_pitch, ", ", src_pitch, ") must be >= the row width ",
                             width_bytes));
    DeviceGuard guard(stream.device().index);
    if (rows == 1 || (dst_pitch == width_bytes && src_pitch == width_bytes)) {
        TNN_GPU_CHECK(gpu_memcpy_async(dst, src, width_bytes * rows, gpu_memcpy_default, native_stream(stream)));
        return;
    }
    TNN_GPU_CHECK(gpu_memcpy_2d_async(dst, dst_pitch, src, src_pitch, width_bytes, rows, gpu_memcpy_default,
                                      native_stream(stream)));
}

void synchronize(const Stream& stream) {
    DeviceGuard guard(stream.device().index);
    TNN_GPU_CHECK(gpu_stream_synchronize(native_stream(stream)));
}

void convert(const Stream& stream, ConstView src, View dst) {
    check_on_gpu("convert", src);
    check_on_gpu("convert", dst);
    const int64_t n = src.rows * src.cols;
    if (n == 0) return;
    DeviceGuard guard(stream.device().index);
    dispatch_device_dtype(src.dtype, [&](auto s) {
        using S = decltype(s);
        dispatch_device_dtype(dst.dtype, [&](auto d) {
            using D = decltype(d);
            tensor_convert_kernel<S, D><<<elementwise_grid(n), kElementwiseThreads, 0, native_stream(stream)>>>(
                src.ptr<S>(), strided(src), dst.ptr<D>(), strided(dst), n);
            TNN_GPU_CHECK_LAUNCH("tensor_convert_kernel");
        });
    });
}

void add(const Stream& stream, ConstView src, View dst) {
    check_on_gpu("add", src);
    check_on_gpu("add", dst);
    if (src.dtype != dst.dtype) throw DTypeError(msg("add: dtypes differ (", dtype_name(src.dtype), " vs ",
                                                     dtype_name(dst.dtype), ")"));
    const int64_t n = src.rows * src.cols;
    if (n == 0) return;
    DeviceGuard guard(stream.device().index);
    dispatch_device_dtype(dst.dtype, [&](auto d) {
        using D = decltype(d);
        tensor_add_kernel<D><<<elementwise_grid(n), kElementwiseThreads, 0, native_stream(stream)>>>(
            src.ptr<D>(), strided(src), dst.ptr<D>(), strided(dst), n);
        TNN_GPU_CHECK_LAUNCH("tensor_add_kernel");
    });
}

void fill(const Stream& stream, View dst, double value) {
    check_on_gpu("fill", dst);
    const int64_t n = dst.rows * dst.cols;
    if (n == 0) return;
    DeviceGuard guard(stream.device().index);
    // The value is converted on the host with the host types, so the bits equal the CPU fill's.
    auto launch = [&](auto bits) {
        using B = decltype(bits);
        tensor_fill_kernel<B><<<elementwise_grid(n), kElementwiseThreads, 0, native_stream(stream)>>>(
            dst.ptr<B>(), strided(dst), n, bits);
        TNN_GPU_CHECK_LAUNCH("tensor_fill_kernel");
    };
    switch (dst.dtype) {
        case DType::f32: {
            const float f = static_cast<float>(value);
            uint32_t b;
            std::memcpy(&b, &f, 4);
            launch(b);
            break;
        }
        case DType::f64: {
            uint64_t b;
            std::memcpy(&b, &value, 8);
            launch(b);
            break;
        }
        case DType::f16: launch(static_cast<uint16_t>(half(value).bits)); break;
        case DType::bf16: launch(static_cast<uint16_t>(bfloat16(value).bits)); break;
    }
}

double sum(const Stream& stream, ConstView values) {
    check_on_gpu("sum", values);
    const int64_t n = values.rows * values.cols;
    if (n == 0) return 0.0;
    DeviceGuard guard(stream.device().index);
    const gpu_stream_t s = native_stream(stream);
    int64_t blocks = ceil_div(n, kSumChunk);
    Buffer partials = Buffer::temporary(stream, static_cast<size_t>(blocks) * sizeof(double));
    dispatch_device_dtype(values.dtype, [&](auto t) {
        using S = decltype(t);
        tensor_sum_kernel<S><<<static_cast<unsigned>(blocks), kSumThreads, 0, s>>>(values.ptr<S>(), strided(values), n,
                                                                                    partials.ptr<double>());
        TNN_GPU_CHECK_LAUNCH("tensor_sum_kernel");
    });
    // Reduce the partials with the same kernel until one value is left (the order depends on n only).
    while (blocks > 1) {
        const int64_t m = blocks;
        blocks = ceil_div(m, kSumChunk);
        Buffer next = Buffer::temporary(stream, static_cast<size_t>(blocks) * sizeof(double));
        tensor_sum_kernel<double><<<static_cast<unsigned>(blocks), kSumThreads, 0, s>>>(
            partials.ptr<double>(), Strided2d{m, m}, m, next.ptr<double>());
        TNN_GPU_CHECK_LAUNCH("tensor_sum_kernel");
        partials = std::move(next);
    }
    double result = 0;
    TNN_GPU_CHECK(gpu_memcpy_async(&result, partials.data(), sizeof(double), gpu_memcpy_default, s));
    TNN_GPU_CHECK(gpu_stream_synchronize(s));
    return result;
}

void* alloc_temporary(const Stream& stream, size_t bytes) { return temporary_alloc(stream, bytes); }

void free_temporary(const Stream& stream, void* ptr, size_t) noexcept { temporary_free(stream.device().index, ptr); }

void free_temporary_memory() { release_cached(); }

GpuMemoryStats memory_stats(int device) {
    const AllocatorStats a = allocator_stats(device);
    GpuMemoryStats s;
    s.temporary_reserved_bytes = a.reserved_bytes;
    s.temporary_in_use_bytes = a.in_use_bytes;
    s.driver_allocations = a.driver_allocations;
    s.driver_frees = a.driver_frees;
    return s;
}

void* create_stream(int device) {
    DeviceGuard guard(device);
    gpu_stream_t s = nullptr;
    TNN_GPU_CHECK(gpu_stream_create_with_flags(&s, gpu_stream_non_blocking));
    return s;
}

void destroy_stream(int device, void* stream) noexcept {
    if (!stream) return;
    DeviceGuard guard(device);
    (void)gpu_stream_destroy(static_cast<gpu_stream_t>(stream));
    (void)gpu_get_last_error();
}

void stream_wait(const Stream& waiter, const Stream& producer) { gpu::stream_wait(waiter, producer); }

}  // namespace tnn::gpu_bridge
