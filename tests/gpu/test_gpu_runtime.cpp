// The GPU runtime bridge against the CPU: devices and capabilities, pointer checks, copies (flat and
// strided), convert for every dtype pair, fill, add and the deterministic sum, bit for bit where the
// CPU defines the result exactly.
#include "gpu_test_util.h"

#ifdef TNN_WITH_GPU
#include "core/gpu_bridge.h"
#include "gpu/arch_list.h"
#endif  // TNN_WITH_GPU

#include <cmath>
#include <limits>

using namespace tnn;
using namespace tnn::test;

namespace {

#ifdef TNN_WITH_GPU

TEST(GpuCapabilities, OneIntegerSpaceForBothVendors) {
    EXPECT_EQ(gpu::amd_capability_from_arch_name("gfx1201:sramecc-:xnack-"), gpu::amd_capability(0x1201));
    EXPECT_EQ(gpu::amd_capability_from_arch_name("gfx90a"), gpu::amd_capability(0x90a));
    EXPECT_EQ(gpu::amd_capability_from_arch_name("sm_90"), 0);
    EXPECT_EQ(gpu::amd_capability_from_arch_name("gfx"), 0);
    EXPECT_TRUE(gpu::is_amd(gpu::kCcRdna4));
    EXPECT_FALSE(gpu::is_nvidia(gpu::kCcRdna4));
    EXPECT_TRUE(gpu::is_nvidia(gpu::kCcHopper));
    EXPECT_TRUE(gpu::is_nvidia_sm90_or_later(gpu::kCcHopper));
    EXPECT_TRUE(gpu::is_nvidia_sm90_or_later(100));
    EXPECT_FALSE(gpu::is_nvidia_sm90_or_later(gpu::kCcAmpere));
    EXPECT_FALSE(gpu::is_nvidia_sm90_or_later(gpu::kCcRdna4));
    EXPECT_GT(gpu::kCcRdna4, gpu::kCcRdna3);
    EXPECT_GE(gpu::amd_capability(0x1201), gpu::kCcRdna4);
    EXPECT_EQ(gpu::ceil_div(10, 4), 3);
    EXPECT_EQ(gpu::ceil_div(int64_t(8), int64_t(4)), 2);
}

TEST(GpuDevice, PropertiesAndDescription) {
    TNN_SKIP_WITHOUT_GPU();
    EXPECT_EQ(gpu::device_count(), gpu_device_count());
    const gpu::DeviceProperties& p = gpu::device_properties(0);
    EXPECT_EQ(&p, &gpu::device_properties(0)) << "properties are cached";
    EXPECT_FALSE(p.name.empty());
    EXPECT_TRUE(gpu::is_nvidia(p.capability) || gpu::is_amd(p.capability)) << p.capability;
    EXPECT_GT(p.sm_count, 0);
    EXPECT_EQ(p.warp_size, gpu::warp_size()) << "kernels are compiled for this warp size";
    EXPECT_GT(p.l2_bytes, 0u);
    EXPECT_GE(p.smem_per_block_optin, p.smem_per_block);
    EXPECT_GT(p.total_memory, size_t(1) << 30);
    const std::string d = gpu_device_description(0);
    EXPECT_NE(d.find(p.name), std::string::npos) << d;
    EXPECT_NE(d.find(p.arch), std::string::npos) << d;
    std::cout << "device 0: " << d << " capability " << p.capability << ", L2 " << (p.l2_bytes >> 20) << " MiB, smem "
              << p.smem_per_block_optin / 1024 << " KiB opt-in\n";
    EXPECT_THROW(gpu::device_properties(gpu_device_count()), DeviceError);
    EXPECT_THROW(gpu_device_description(-1), DeviceError);
}

// The build's code for the device: the device check finds code, and, for CUDA, the code the rules of
// src/gpu/arch_list.h predict from the list and the capability (an sm_90a build on an H100 / H200:
// "sm_90a machine code"; a build for 90: "sm_90 machine code"; 80 only: "compute_80 PTX").
TEST(GpuDevice, BuildHasCodeForTheDevice) {
    TNN_SKIP_WITHOUT_GPU();
    const std::string built = gpu_architectures();
    ASSERT_FALSE(built.empty());
    const std::string code = gpu_device_code(0);
    std::cout << "build \"" << built << "\", device 0 (" << gpu::device_properties(0).arch << ") runs " << code << "\n";
    EXPECT_EQ(gpu::device_code(0), code);
    EXPECT_NO_THROW(gpu::require_device_code(0));
#if defined(TNN_WITH_CUDA)
    const gpu::CudaCode predicted =
        gpu::cuda_code_for(gpu::parse_cuda_architectures(built), gpu::device_properties(0).capability);
    ASSERT_TRUE(predicted.found);
    EXPECT_EQ(code, gpu::describe_cuda_code(predicted));
#endif  // TNN_WITH_CUDA
    EXPECT_THROW(gpu_device_code(gpu_device_count()), DeviceError);
}

TEST(GpuDevice, DevicePointerCheck) {
    TNN_SKIP_WITHOUT_GPU();
    Tensor d(4, 4, DType::f32, Device::gpu(0));
    std::vector<float> host(16);
    EXPECT_TRUE(gpu_bridge::is_device_pointer(d.data(), 0));
    EXPECT_TRUE(gpu_bridge::is_device_pointer(d.ptr<float>() + 5, 0)) << "pointers inside an allocation count";
    EXPECT_FALSE(gpu_bridge::is_device_pointer(host.data(), 0));
    EXPECT_FALSE(gpu_bridge::is_device_pointer(nullptr, 0));
    EXPECT_FALSE(gpu_bridge::is_device_pointer(d.data(), gpu_device_count())) << "memory of another device";
    // A failed query must not leave an error behind for the next launch check.
    Tensor t(4, 4, DType::f32, Device::gpu(0));
    EXPECT_NO_THROW(fill(Stream::gpu(nullptr, 0), t.view(), 1.0));
}

// A [7, 13] view inside a wider [7, 16] store, starting at column `first`: strided and unaligned.
constexpr int64_t kRows = 7, kCols = 13, kStoreCols = 16;

// Values every dtype must convert like the CPU: signed zeros, infinities, NaN, fp16 overflow and
// subnormals, fp32 overflow and subnormals from fp64, ties, and random values.
std::vector<double> special_values() {
    std::vector<double> v = {0.0,     -0.0,    1.0,      -1.5,     65504.0,   65520.0,   1e-8,      6e-8,
                             3.0e38,  -3.4e38, 1e39,     1e300,    1.0 / 3.0, 2e-40,     -7e-46,    0.1,
                             1.00048828125 /* fp16 tie */, 1.00390625 /* bf16 tie */,
                             std::numeric_limits<double>::infinity(), -std::numeric_limits<double>::infinity(),
                             std::numeric_limits<double>::quiet_NaN()};
    const auto r = random_vector(static_cast<size_t>(kRows * kStoreCols) - v.size(), -100.0, 100.0, 42);
    v.insert(v.end(), r.begin(), r.end());
    return v;
}

Tensor host_store(DType t, const std::vector<double>& values) {
    Tensor f64(kRows, kStoreCols, DType::f64);
    std::copy(values.begin(), values.end(), f64.ptr<double>());
    Tensor out(kRows, kStoreCols, t);
    convert(Stream::cpu(), f64.view(), out.view());
    return out;
}

// Equal element by element: same bytes, or both NaN (payloads may differ between vendors' rounding).
void expect_same_elements(const Tensor& a, const Tensor& b, const std::string& what) {
    ASSERT_EQ(a.dtype(), b.dtype());
    ASSERT_EQ(a.numel(), b.numel());
    const auto av = a.to_double_vector(), bv = b.to_double_vector();
    const size_t es = dtype_size(a.dtype());
    int failures = 0;
    for (int64_t i = 0; i < a.numel(); ++i) {
        const bool both_nan = std::isnan(av[i]) && std::isnan(bv[i]);
        if (!both_nan && std::memcmp(static_cast<const char*>(a.data()) + i * es,
                                     static_cast<const char*>(b.data()) + i * es, es) != 0) {
            if (++failures <= 5) ADD_FAILURE() << what << " [" << i << "]: " << av[i] << " vs " << bv[i];
        }
    }
}

const DType kDtypes[] = {DType::f32, DType::f16, DType::bf16, DType::f64};

TEST(GpuRuntime, ConvertEveryDtypePairLikeTheCpu) {
    TNN_SKIP_WITHOUT_GPU();
    const Device gpu = Device::gpu(0);
    TestStream stream(gpu);
    for (DType s : kDtypes) {
        for (DType d : kDtypes) {
            const std::string what = msg("convert ", dtype_name(s), " -> ", dtype_name(d));
            const Tensor src = host_store(s, special_values());
            const Tensor src_gpu = src.to(gpu);
            Tensor want = host_store(d, std::vector<double>(kRows * kStoreCols, 9.0));  // sentinel in the gaps
            Tensor got_gpu = want.to(gpu);
            convert(Stream::cpu(), src.view().cols_slice(2, kCols), want.view().cols_slice(1, kCols));
            convert(stream, src_gpu.view().cols_slice(2, kCols), got_gpu.view().cols_slice(1, kCols));
            expect_same_elements(got_gpu.to(Device::cpu(), stream), want, what);
        }
    }
}

TEST(GpuRuntime, FillAndAddLikeTheCpu) {
    TNN_SKIP_WITHOUT_GPU();
    const Device gpu = Device::gpu(0);
    TestStream stream(gpu);
    for (DType t : kDtypes) {
        for (double value : {0.0, -0.0, 1.5, 1.0 / 3.0, 70000.0, -1e-30}) {
            Tensor want = host_store(t, special_values());
            Tensor got = want.to(gpu);
            fill(Stream::cpu(), want.view().cols_slice(3, 9), value);
            fill(stream, got.view().cols_slice(3, 9), value);
            expect_same_elements(got.to(Device::cpu(), stream), want, msg("fill ", dtype_name(t), " ", value));
        }
        const Tensor src = host_store(t, random_vector(kRows * kStoreCols, -4, 4, 7));
        Tensor want = host_store(t, random_vector(kRows * kStoreCols, -4, 4, 8));
        Tensor got = want.to(gpu);
        const Tensor src_gpu = src.to(gpu);
        add(Stream::cpu(), src.view().cols_slice(0, kCols), want.view().cols_slice(2, kCols));
        add(stream, src_gpu.view().cols_slice(0, kCols), got.view().cols_slice(2, kCols));
        expect_same_elements(got.to(Device::cpu(), stream), want, msg("add ", dtype_name(t)));
    }
}

TEST(GpuRuntime, SumIsDeterministicFp64) {
    TNN_SKIP_WITHOUT_GPU();
    const Device gpu = Device::gpu(0);
    TestStream stream(gpu);
    const int64_t n = 1000003;
    const auto values = random_vector(static_cast<size_t>(n), -1.0, 1.0, 3);
    std::vector<float> f(values.begin(), values.end());
    double want = 0, magnitude = 0;
    for (float x : f) {
        want += x;
        magnitude += std::fabs(x);
    }
    const Tensor t = from_floats(f, 1, n, gpu);
    const double got = gpu_bridge::sum(stream, t.view());
    // Both sides add the same fp32 values in fp64: the difference is bounded by n * eps64 * sum|x|.
    EXPECT_NEAR(got, want, static_cast<double>(n) * dtype_epsilon(DType::f64) * magnitude);
    EXPECT_EQ(gpu_bridge::sum(stream, t.view()), got) << "the same input must give the same bits";

    // Three reduction passes (n > 4096^2), on values whose every partial sum is exact in fp64.
    const int64_t big = int64_t(4096) * 4096 + 5;
    Tensor b(1, big, DType::f32, gpu);
    fill(stream, b.view(), 0.25);
    EXPECT_EQ(gpu_bridge::sum(stream, b.view()), 0.25 * static_cast<double>(big));

    // A strided fp64 view and an empty one.
    const Tensor src = host_store(DType::f64, random_vector(kRows * kStoreCols, -5, 5, 4));
    double strided_want = 0;
    for (int64_t r = 0; r < kRows; ++r)
        for (int64_t c = 1; c < 1 + kCols; ++c) strided_want += src.ptr<double>()[r * kStoreCols + c];
    const Tensor src_gpu = src.to(gpu);
    EXPECT_NEAR(gpu_bridge::sum(stream, src_gpu.view().cols_slice(1, kCols)), strided_want, 1e-12);
    EXPECT_EQ(gpu_bridge::sum(stream, src_gpu.view().rows_slice(0, 0)), 0.0);
}

TEST(GpuRuntime, CopiesFlatAndStrided) {
    TNN_SKIP_WITHOUT_GPU();
    const Device gpu = Device::gpu(0);
    TestStream stream(gpu);
    const Tensor host = host_store(DType::f32, random_vector(kRows * kStoreCols, -1, 1, 5));
    // Round trip through two device buffers.
    const Tensor d1 = host.to(gpu), d2 = d1.to(gpu);
    expect_same_elements(d2.to(Device::cpu()), host, "host -> gpu -> gpu -> host");
    // Strided: host columns [2, 15) -> device columns [0, 13) of a [7, 14] store -> host columns [1, 14).
    Tensor dev(kRows, 14, DType::f32, gpu);
    fill(stream, dev.view(), -2.0);
    copy(stream, host.view().cols_slice(2, kCols), dev.view().cols_slice(0, kCols));
    Tensor back = host_store(DType::f32, std::vector<double>(kRows * kStoreCols, 5.0));
    copy(stream, dev.view().cols_slice(0, kCols), back.view().cols_slice(1, kCols));
    stream.stream().synchronize();
    for (int64_t r = 0; r < kRows; ++r) {
        for (int64_t c = 0; c < kStoreCols; ++c) {
            const float want = c >= 1 && c < 1 + kCols ? host.ptr<float>()[r * kStoreCols + c + 1] : 5.0f;
            ASSERT_EQ(back.ptr<float>()[r * kStoreCols + c], want) << r << ", " << c;
        }
    }
    const std::vector<float> dev_host = to_floats(dev.to(Device::cpu(), stream));
    for (int64_t r = 0; r < kRows; ++r) ASSERT_EQ(dev_host[r * 14 + 13], -2.0f) << "the gap column stays untouched";
    // Device to device, strided on both sides.
    Tensor dev2(kRows, 15, DType::f32, gpu);
    copy(stream, dev.view().cols_slice(0, kCols), dev2.view().cols_slice(2, kCols));
    const std::vector<float> dev2_host = to_floats(dev2.to(Device::cpu(), stream));
    for (int64_t r = 0; r < kRows; ++r)
        for (int64_t c = 0; c < kCols; ++c) ASSERT_EQ(dev2_host[r * 15 + c + 2], dev_host[r * 14 + c]);
}

#endif  // TNN_WITH_GPU

TEST(GpuRuntime, DeviceCountNeverThrows) {
    // On a machine without a GPU (or without a driver) a GPU build reports 0 devices.
    EXPECT_NO_THROW(gpu_device_count());
    EXPECT_GE(gpu_device_count(), 0);
    EXPECT_EQ(gpu_available(), has_gpu_backend() && gpu_device_count() > 0);
}

}  // namespace
