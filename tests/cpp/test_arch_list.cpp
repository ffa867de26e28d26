// GPU architecture lists (src/gpu/arch_list.h): parsing CMake's spelling, NVIDIA's rules for which code
// a compute capability runs (machine code within a major version, PTX forward, "a" code on its own
// capability only), the portable default list of cmake/cuda_architectures.cmake against every GPU from
// Ampere to Blackwell, and the error a GPU without code gets. No GPU needed.
#include "gpu/arch_list.h"
#include "test_util.h"

#include <fstream>
#include <regex>
#include <sstream>

using namespace tnn;
using namespace tnn::gpu;

namespace {

// The compute capabilities of NVIDIA's GPUs from Ampere to Blackwell: A100 (8.0), RTX 30xx / A10 / A40
// (8.6), Jetson Orin (8.7), 8.8, Ada (8.9), Hopper (9.0), B200 (10.0), B300 (10.3), Jetson Thor (11.0),
// RTX 50xx / RTX PRO (12.0), DGX Spark (12.1).
const int kAmpereToBlackwell[] = {80, 86, 87, 88, 89, 90, 100, 103, 110, 120, 121};

std::string code(const std::string& list, int cc) { return describe_cuda_code(cuda_code_for(parse_cuda_architectures(list), cc)); }

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// TNN_CUDA_PORTABLE_ARCHITECTURES as cmake/cuda_architectures.cmake sets it.
std::string portable_list() {
    std::ifstream f(std::string(TNN_SOURCE_DIR) + "/cmake/cuda_architectures.cmake");
    std::stringstream text;
    text << f.rdbuf();
    std::smatch m;
    const std::string s = text.str();
    if (!std::regex_search(s, m, std::regex("set\\(TNN_CUDA_PORTABLE_ARCHITECTURES \"([^\"]*)\"\\)"))) return "";
    return m[1];
}

}  // namespace

TEST(ArchList, ParsesCMakeSpelling) {
    const auto l = parse_cuda_architectures("80;86-real, 90a-real 120-virtual;100f");
    ASSERT_EQ(l.size(), 5u);
    EXPECT_TRUE(l[0].number == 80 && l[0].suffix == 0 && l[0].sass && l[0].ptx);
    EXPECT_TRUE(l[1].number == 86 && l[1].sass && !l[1].ptx);
    EXPECT_TRUE(l[2].number == 90 && l[2].suffix == 'a' && l[2].sass && !l[2].ptx);
    EXPECT_TRUE(l[3].number == 120 && !l[3].sass && l[3].ptx);
    EXPECT_TRUE(l[4].number == 100 && l[4].suffix == 'f' && l[4].sass && l[4].ptx);
    EXPECT_TRUE(parse_cuda_architectures("").empty());
    EXPECT_TRUE(parse_cuda_architectures(" ; ").empty());
    // CMake's keywords are resolved by the build; anything else is not a list entry.
    for (const char* bad : {"native", "all", "sm_80", "90b", "80-foo", "-real", "8", "90a-virtual-real"})
        EXPECT_THROW(parse_cuda_architectures(bad), ConfigError) << bad;
    try {
        parse_cuda_architectures("80;sm_89");
        FAIL();
    } catch (const ConfigError& e) {
        EXPECT_TRUE(contains(e.what(), "'sm_89'")) << e.what();
    }
    EXPECT_EQ(describe_cuda_architectures(parse_cuda_architectures("80;89-real;90a-real;120-virtual")),
              "machine code sm_80 sm_89 sm_90a, PTX compute_80 compute_120");
    EXPECT_EQ(describe_cuda_architectures({}), "nothing");
}

TEST(ArchList, MachineCodeRunsWithinItsMajorVersion) {
    const CudaArch sm80{80, 0, true, false}, sm86{86, 0, true, false}, sm90a{90, 'a', true, false},
        sm100{100, 0, true, false}, sm120{120, 0, true, false};
    for (int cc : {80, 86, 87, 88, 89}) EXPECT_TRUE(cuda_sass_runs_on(sm80, cc)) << cc;
    EXPECT_FALSE(cuda_sass_runs_on(sm80, 90));
    EXPECT_FALSE(cuda_sass_runs_on(sm86, 80));  // not backwards within the major version
    EXPECT_TRUE(cuda_sass_runs_on(sm86, 89));
    EXPECT_TRUE(cuda_sass_runs_on(sm90a, 90));
    EXPECT_FALSE(cuda_sass_runs_on(sm90a, 100));
    EXPECT_TRUE(cuda_sass_runs_on(sm100, 103));
    EXPECT_FALSE(cuda_sass_runs_on(sm100, 110));  // Thor is major version 11 (was sm_101 before CUDA 13)
    EXPECT_FALSE(cuda_sass_runs_on(sm100, 120));
    EXPECT_TRUE(cuda_sass_runs_on(sm120, 121));
    const CudaArch ptx_only{80, 0, false, true};
    EXPECT_FALSE(cuda_sass_runs_on(ptx_only, 80));
}

TEST(ArchList, PtxRunsForwardExceptArchSpecific) {
    const CudaArch c80{80, 0, false, true}, c90a{90, 'a', false, true}, c100f{100, 'f', false, true},
        c120{120, 0, false, true};
    for (int cc : kAmpereToBlackwell) EXPECT_TRUE(cuda_ptx_runs_on(c80, cc)) << cc;
    EXPECT_FALSE(cuda_ptx_runs_on(c80, 75));
    EXPECT_TRUE(cuda_ptx_runs_on(c90a, 90));
    EXPECT_FALSE(cuda_ptx_runs_on(c90a, 100));  // wgmma PTX is not forward compatible
    EXPECT_TRUE(cuda_ptx_runs_on(c100f, 103));
    EXPECT_FALSE(cuda_ptx_runs_on(c100f, 110));
    EXPECT_FALSE(cuda_ptx_runs_on(c120, 110));  // PTX never runs backwards
    EXPECT_TRUE(cuda_ptx_runs_on(c120, 130));
}

TEST(ArchList, DriverPrefersMachineCodeThenTheNewestPtx) {
    EXPECT_EQ(code("86-real;89-virtual", 89), "sm_86 machine code");  // machine code over newer PTX
    EXPECT_EQ(code("80-real;120-virtual", 120), "compute_120 PTX (compiled by the driver)");
    EXPECT_EQ(code("80;90-virtual", 100), "compute_90 PTX (compiled by the driver)");
    EXPECT_EQ(code("80-real;86-real", 89), "sm_86 machine code");
    EXPECT_EQ(code("90-real;90a-real", 90), "sm_90a machine code");
    // The old default (90a only) covers Hopper and nothing else; with 80 (machine code and PTX) every GPU.
    EXPECT_EQ(code("90a", 90), "sm_90a machine code");
    for (int cc : {80, 86, 89, 100, 120}) EXPECT_EQ(code("90a", cc), "no code") << cc;
    EXPECT_EQ(code("80;90a", 90), "sm_90a machine code");
    EXPECT_EQ(code("80;90a", 89), "sm_80 machine code");
    EXPECT_EQ(code("80;90a", 120), "compute_80 PTX (compiled by the driver)");
    // A build for 90 without 90a (the mma.sync kernels only) on a Hopper GPU.
    EXPECT_EQ(code("90", 90), "sm_90 machine code");
    // `native` on an H100: cmake/cuda_architectures.cmake makes it 90a machine code plus compute_90 PTX.
    EXPECT_EQ(code("90a-real;90-virtual", 90), "sm_90a machine code");
    EXPECT_EQ(code("90a-real;90-virtual", 120), "compute_90 PTX (compiled by the driver)");
    EXPECT_EQ(code("90a-real;90-virtual", 89), "no code");
}

TEST(ArchList, PortableDefaultCoversAmpereToBlackwell) {
    const std::string list = portable_list();
    ASSERT_FALSE(list.empty()) << "TNN_CUDA_PORTABLE_ARCHITECTURES not found in cmake/cuda_architectures.cmake";
    const auto l = parse_cuda_architectures(list);
    for (const CudaArch& a : l) EXPECT_GE(a.number, kCudaMinArchitecture) << list;
    for (int cc : kAmpereToBlackwell) EXPECT_TRUE(cuda_code_for(l, cc).found) << "compute capability " << cc << ": " << list;
    // Machine code, not the driver's compilation, for the GPUs the list names.
    for (int cc : {80, 86, 89, 90, 100, 120}) EXPECT_FALSE(cuda_code_for(l, cc).ptx) << cc;
    // Hopper gets the wgmma kernels (90a machine code and no plain sm_90 machine code), and PTX of the
    // newest architecture serves GPUs after it.
    EXPECT_EQ(code(list, 90), "sm_90a machine code");
    for (const CudaArch& a : l) EXPECT_FALSE(a.number == 90 && a.suffix == 0 && a.sass) << list;
    const CudaCode future = cuda_code_for(l, 130);
    EXPECT_TRUE(future.found && future.ptx && future.arch.number == 120) << describe_cuda_code(future);
}

TEST(ArchList, ErrorForAGpuWithoutCodeNamesEverythingNeededToRebuild) {
    const DeviceCode d = cuda_device_code("90a-real", "gpu:0 NVIDIA GeForce RTX 4090", 89);
    EXPECT_FALSE(d.runs);
    for (const char* part : {"gpu:0 NVIDIA GeForce RTX 4090", "compute capability 8.9", "sm_90a",
                             "TNN_CUDA_ARCHITECTURES=native", "TNN_CUDA_ARCHITECTURES=\"90a-real;89\"",
                             "-DTNN_CUDA_ARCHITECTURES=", "pip install"})
        EXPECT_TRUE(contains(d.message, part)) << "missing '" << part << "' in: " << d.message;
    // Hopper is told to add 90a (the wgmma kernels), not plain 90.
    const DeviceCode h = cuda_device_code("80-real", "gpu:1 NVIDIA H100", 90);
    EXPECT_TRUE(!h.runs && contains(h.message, "\"80-real;90a\"")) << h.message;
    // The runtime's error is part of the message.
    const DeviceCode r = cuda_device_code("86-real", "gpu:0 NVIDIA A100", 80, "cudaErrorNoKernelImageForDevice: no kernel image");
    EXPECT_TRUE(!r.runs && contains(r.message, "cudaErrorNoKernelImageForDevice")) << r.message;
}

TEST(ArchList, DeviceCodeWhenItRunsOrTheDriverRefusesIt) {
    const DeviceCode ok = cuda_device_code("80;86-real;89-real;90a-real;100-real;120", "gpu:0 NVIDIA H200", 90);
    EXPECT_TRUE(ok.runs);
    EXPECT_EQ(ok.code, "sm_90a machine code");
    EXPECT_TRUE(ok.message.empty());
    // PTX the list offers but the driver could not compile: the driver is named as the likely cause.
    const DeviceCode old_driver = cuda_device_code("80", "gpu:0 NVIDIA RTX PRO 6000", 120,
                                                   "cudaErrorUnsupportedPtxVersion: the provided PTX was compiled "
                                                   "with an unsupported toolchain");
    EXPECT_FALSE(old_driver.runs);
    for (const char* part : {"compute_80 PTX", "cudaErrorUnsupportedPtxVersion", "update the driver", "\"80;120\""})
        EXPECT_TRUE(contains(old_driver.message, part)) << "missing '" << part << "' in: " << old_driver.message;
    // Older than the kernels allow: no rebuild helps, the CPU does.
    const DeviceCode volta = cuda_device_code("80", "gpu:0 Tesla V100-SXM2-16GB", 70);
    EXPECT_FALSE(volta.runs);
    EXPECT_TRUE(contains(volta.message, "compute capability 7.0") && contains(volta.message, "8.0") &&
                contains(volta.message, "CPU"))
        << volta.message;
    EXPECT_FALSE(contains(volta.message, "TNN_CUDA_ARCHITECTURES=")) << volta.message;
}

TEST(ArchList, HipTargets) {
    EXPECT_TRUE(hip_target_runs_on("gfx1201", "gfx1201:sramecc-:xnack-"));
    EXPECT_FALSE(hip_target_runs_on("gfx1100", "gfx1201"));
    EXPECT_TRUE(hip_target_runs_on("gfx12-generic", "gfx1201"));
    EXPECT_FALSE(hip_target_runs_on("gfx12-generic", "gfx1100"));
    EXPECT_TRUE(hip_target_runs_on("gfx11-generic", "gfx1151"));
    EXPECT_FALSE(hip_target_runs_on("gfx11-generic", "gfx90a"));
    const DeviceCode ok = hip_device_code("gfx1201 gfx1100", "gpu:0 AMD Radeon RX 9070 XT", "gfx1201");
    EXPECT_TRUE(ok.runs);
    EXPECT_EQ(ok.code, "gfx1201 code object");
    const DeviceCode d = hip_device_code("gfx1201 gfx1100", "gpu:0 AMD Radeon RX 7600", "gfx1102");
    EXPECT_FALSE(d.runs);
    for (const char* part : {"gpu:0 AMD Radeon RX 7600", "gfx1102", "gfx1201 gfx1100",
                             "TNN_HIP_ARCHITECTURES=\"gfx1201;gfx1100;gfx1102\"", "CMAKE_ARGS"})
        EXPECT_TRUE(contains(d.message, part)) << "missing '" << part << "' in: " << d.message;
}
