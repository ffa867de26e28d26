// The stream-ordered caching allocator behind Buffer::temporary: reuse without driver calls, per-stream
// ownership, graph memory while a stream captures (no warm-up needed), and free_temporary_memory.
#include "gpu_test_util.h"

#ifdef TNN_WITH_GPU
#include "core/gpu_bridge.h"
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

TEST(GpuTemporaryMemory, CaptureAllocatesGraphMemoryWithoutWarmUp) {
    TNN_SKIP_WITHOUT_GPU();
    // A stream that never allocated before (torch.cuda.graph's private capture stream is one).
    TestStream stream(Device::gpu(0));
    const gpu_stream_t native = gpu::native_stream(stream);
    Tensor result(1, 2, DType::f32, Device::gpu(0));
    const gpu::AllocatorStats before = gpu::allocator_stats(0);
    void* small_ptr = nullptr;
    std::string failure;
    ASSERT_EQ(gpu_stream_begin_capture(native, gpu_stream_capture_mode_global), gpu_success);
    try {
        Tensor small = Tensor::temporary(stream, 16, 1024, DType::f32);   // 64 KiB
        Tensor big = Tensor::temporary(stream, 1024, 16384, DType::f32);  // 64 MiB
        small_ptr = small.data();
        // Not mapped until the graph runs, yet the pointer checks of the modules must accept it.
        EXPECT_TRUE(gpu_bridge::is_device_pointer(small.view().rows_slice(3, 1).data, 0));
        EXPECT_EQ(reinterpret_cast<uintptr_t>(big.data()) % 256, 0u) << "aligned like a driver allocation";
        fill(stream, small.view(), 1.5);
        fill(stream, big.view(), 2.5);
        // Kernels move the data (as in the modules); memcpy nodes on graph memory are not what this tests.
        convert(stream, small.view().rows_slice(15, 1).cols_slice(1023, 1), result.view().cols_slice(0, 1));
        convert(stream, big.view().rows_slice(1023, 1).cols_slice(16383, 1), result.view().cols_slice(1, 1));
    } catch (const std::exception& e) {
        failure = e.what();
    }
    gpu_graph_t graph = nullptr;
    ASSERT_EQ(gpu_stream_end_capture(native, &graph), gpu_success);
    ASSERT_TRUE(failure.empty()) << failure;
    const gpu::AllocatorStats after = gpu::allocator_stats(0);
    EXPECT_EQ(after.driver_allocations, before.driver_allocations) << "no blocking driver allocation while capturing";
    EXPECT_EQ(after.graph_allocations, before.graph_allocations + 2);
    EXPECT_EQ(after.graph_frees, before.graph_frees + 2) << "freed inside the capture: free nodes of the graph";
    EXPECT_FALSE(gpu::is_graph_temporary(0, small_ptr));
    gpu_graph_exec_t exec = nullptr;
    ASSERT_EQ(gpu_graph_instantiate(&exec, graph), gpu_success);
    // The graph owns its temporaries: it replays on its stream and on any other.
    TestStream other(Device::gpu(0));
    for (const Stream& s : {stream.stream(), stream.stream(), other.stream()}) {
        fill(s, result.view(), 0.0);
        ASSERT_EQ(gpu_graph_launch(exec, gpu::native_stream(s)), gpu_success);
        const std::vector<float> r = to_floats(result.to(Device::cpu(), s));
        EXPECT_EQ(r[0], 1.5f);
        EXPECT_EQ(r[1], 2.5f);
    }
    (void)gpu_graph_exec_destroy(exec);
    (void)gpu_graph_destroy(graph);
    // Eager requests on the stream that captured come from its pool again.
    { Buffer b = Buffer::temporary(stream, 1000); }
    EXPECT_EQ(gpu::allocator_stats(0).graph_allocations, after.graph_allocations);
}

TEST(GpuTemporaryMemory, TemporaryOutlivingItsCaptureStaysWithTheGraph) {
    TNN_SKIP_WITHOUT_GPU();
    // torch's recipe keeps the captured loss, and with it a module's forward Context, past the capture.
    TestStream stream(Device::gpu(0));
    const gpu_stream_t native = gpu::native_stream(stream);
    Tensor result(1, 1, DType::f32, Device::gpu(0));
    Tensor kept;
    ASSERT_EQ(gpu_stream_begin_capture(native, gpu_stream_capture_mode_global), gpu_success);
    std::string failure;
    try {
        kept = Tensor::temporary(stream, 4, 4, DType::f32);
        fill(stream, kept.view(), 3.0);
        convert(stream, kept.view().rows_slice(3, 1).cols_slice(3, 1), result.view());
    } catch (const std::exception& e) {
        failure = e.what();
    }
    gpu_graph_t graph = nullptr;
    ASSERT_EQ(gpu_stream_end_capture(native, &graph), gpu_success);
    ASSERT_TRUE(failure.empty()) << failure;
    EXPECT_TRUE(gpu::is_graph_temporary(0, kept.data()));
    gpu_graph_exec_t exec = nullptr;
    // As torch instantiates: each launch frees what the previous one left allocated.
    ASSERT_EQ(gpu_graph_instantiate_with_flags(&exec, graph, gpu_graph_instantiate_flag_auto_free_on_launch),
              gpu_success);
    for (int launch = 0; launch < 3; ++launch) {
        if (launch == 2) kept = Tensor();  // freed after the capture: nothing is queued, the graph keeps it
        fill(stream, result.view(), 0.0);
        ASSERT_EQ(gpu_graph_launch(exec, native), gpu_success);
        EXPECT_EQ(to_floats(result.to(Device::cpu(), stream))[0], 3.0f) << "launch " << launch;
    }
    (void)gpu_graph_exec_destroy(exec);
    (void)gpu_graph_destroy(graph);
    stream.stream().synchronize();
}

#endif  // TNN_WITH_GPU

}  // namespace
