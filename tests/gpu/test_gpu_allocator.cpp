// The stream-ordered caching allocator behind Buffer::temporary: reuse without driver calls, per-stream
// ownership, behaviour under graph capture, and free_temporary_memory.
#include "gpu_test_util.h"

#ifdef TNN_WITH_GPU
#include "gpu/allocator.h"
#endif  // TNN_WITH_GPU

using namespace tnn;
using namespace tnn::test;

namespace {

TEST(GpuTemporaryMemory, CpuTemporaryIsPlainHostMemory) {
    // The same call works on every backend; on the CPU it is an ordinary aligned buffer.
    Buffer b = Buffer::temporary(Stream::cpu(), 100);
    ASSERT_NE(b.data(), nullptr);
    EXPECT_TRUE(b.device().is_cpu());
    EXPECT_EQ(b.bytes(), 100u);
}

#ifdef TNN_WITH_GPU

TEST(GpuTemporaryMemory, ReusesFreedBlocksWithoutDriverCalls) {
    TNN_SKIP_WITHOUT_GPU();
    TestStream stream(Device::gpu(0));
    void* first = nullptr;
    {
        Buffer a = Buffer::temporary(stream, 1000);
        first = a.data();
        ASSERT_NE(first, nullptr);
    }
    const gpu::AllocatorStats warm = gpu::allocator_stats(0);
    for (int i = 0; i < 10; ++i) {
        Buffer again = Buffer::temporary(stream, 1000);
        EXPECT_EQ(again.data(), first) << "a freed block must be reused by the same stream";
    }
    EXPECT_EQ(gpu::allocator_stats(0).driver_allocations, warm.driver_allocations)
        << "steady state must not call the driver";
    Buffer a = Buffer::temporary(stream, 1000);
    Buffer b = Buffer::temporary(stream, 700);  // same 1 KiB size class, but the cached block is taken
    EXPECT_NE(a.data(), b.data()) << "two live buffers must not share memory";
    EXPECT_EQ(gpu::allocator_stats(0).driver_allocations, warm.driver_allocations + 1);
}

TEST(GpuTemporaryMemory, StreamsNeverShareBlocks) {
    TNN_SKIP_WITHOUT_GPU();
    TestStream s1(Device::gpu(0)), s2(Device::gpu(0));
    void* freed_on_s1 = nullptr;
    {
        Buffer a = Buffer::temporary(s1, 4096);
        freed_on_s1 = a.data();
    }
    // s1's block may still be in use by queued work on s1: s2 must get other memory.
    Buffer b = Buffer::temporary(s2, 4096);
    EXPECT_NE(b.data(), freed_on_s1);
    Buffer c = Buffer::temporary(s1, 4096);
    EXPECT_EQ(c.data(), freed_on_s1);
}

TEST(GpuTemporaryMemory, TemporariesHoldData) {
    TNN_SKIP_WITHOUT_GPU();
    TestStream stream(Device::gpu(0));
    Tensor t = Tensor::temporary(stream, 3, 5, DType::f32);
    fill(stream, t.view(), 2.5);
    // Cached blocks go back to the driver; blocks in use stay valid.
    free_temporary_memory();
    const std::vector<float> v = to_floats(t.to(Device::cpu(), stream));
    for (float x : v) EXPECT_EQ(x, 2.5f);
    EXPECT_EQ(gpu::allocator_stats(0).reserved_bytes, gpu::allocator_stats(0).in_use_bytes);
}

TEST(GpuTemporaryMemory, FreeTemporaryMemoryReturnsCachedBlocks) {
    TNN_SKIP_WITHOUT_GPU();
    TestStream stream(Device::gpu(0));
    { Buffer a = Buffer::temporary(stream, size_t(3) << 20); }
    const gpu::AllocatorStats before = gpu::allocator_stats(0);
    EXPECT_GE(before.reserved_bytes - before.in_use_bytes, size_t(3) << 20);
    free_temporary_memory();
    const gpu::AllocatorStats after = gpu::allocator_stats(0);
    EXPECT_EQ(after.reserved_bytes, after.in_use_bytes);
    EXPECT_GT(after.driver_frees, before.driver_frees);
}

TEST(GpuTemporaryMemory, CaptureUsesCachedBlocksAndRefusesNewOnes) {
    TNN_SKIP_WITHOUT_GPU();
    TestStream stream(Device::gpu(0));
    const gpu_stream_t native = gpu::native_stream(stream);
    void* warm = nullptr;
    {
        Buffer a = Buffer::temporary(stream, 64 << 10);
        warm = a.data();
    }
    const uint64_t driver_allocations = gpu::allocator_stats(0).driver_allocations;
    ASSERT_EQ(gpu_stream_begin_capture(native, gpu_stream_capture_mode_global), gpu_success);
    void* captured = nullptr;
    bool refused = false;
    std::string message;
    try {
        Buffer same = Buffer::temporary(stream, 64 << 10);  // cached: fine while capturing
        captured = same.data();
        Buffer bigger = Buffer::temporary(stream, 64 << 20);  // needs the driver: refused
    } catch (const DeviceError& e) {
        refused = true;
        message = e.what();
    }
    gpu_graph_t graph = nullptr;
    // The refusal happened before any driver call, so the capture is still valid.
    EXPECT_EQ(gpu_stream_end_capture(native, &graph), gpu_success);
    if (graph) (void)gpu_graph_destroy(graph);
    EXPECT_EQ(captured, warm);
    EXPECT_TRUE(refused);
    EXPECT_NE(message.find("capturing"), std::string::npos) << message;
    EXPECT_EQ(gpu::allocator_stats(0).driver_allocations, driver_allocations);
    // After the capture the same request is served normally.
    Buffer bigger = Buffer::temporary(stream, 64 << 20);
    EXPECT_NE(bigger.data(), nullptr);
}

#endif  // TNN_WITH_GPU

}  // namespace
