// Shared harness of the GPU tests: the backends every case runs on (CPU always, GPU 0 when present),
// clean skips without a GPU, device streams, and comparison with the CPU fp64 reference using
// tolerances derived from the precision. Encodings, losses, optimizers and the other MLPs reuse it.
#pragma once

#include "test_util.h"

#include <tnn/tnn.h>

#ifdef TNN_WITH_GPU
#include "gpu/gpu.h"
#endif  // TNN_WITH_GPU

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

namespace tnn {
// gtest prints parameters into test names (and ctest lists them): "gpu:0", not the bytes of a Device.
inline void PrintTo(const Device& d, std::ostream* os) { *os << d.str(); }
}  // namespace tnn

namespace tnn::test {

// The backends a case list runs on. Fixed (not probed) so that test discovery lists the same tests on
// every machine; a GPU case on a machine without one skips with the reason.
inline std::vector<Device> test_backends() { return {Device::cpu(), Device::gpu(0)}; }
inline std::string backend_label(Device d) { return d.is_cpu() ? "cpu" : "gpu" + std::to_string(d.index); }

// Empty when `d` can run work here, otherwise why not.
inline std::string unusable_reason(Device d) {
    if (d.is_cpu()) return "";
    if (!has_gpu_backend()) return "this build has no GPU backend (configure with TNN_CUDA=ON or TNN_HIP=ON)";
    if (gpu_device_count() <= d.index)
        return msg("no GPU with index ", d.index, " on this machine (", gpu_device_count(), " present)");
    return "";
}

#define TNN_SKIP_UNLESS_USABLE(device)                                           \
    do {                                                                         \
        const std::string tnn_skip_reason_ = ::tnn::test::unusable_reason(device); \
        if (!tnn_skip_reason_.empty()) GTEST_SKIP() << tnn_skip_reason_;         \
    } while (0)
#define TNN_SKIP_WITHOUT_GPU() TNN_SKIP_UNLESS_USABLE(::tnn::Device::gpu(0))

// A stream a test owns: a fresh non-blocking stream on a GPU (so nothing relies on the legacy default
// stream's implicit synchronisation), the empty stream on the CPU.
class TestStream {
public:
    explicit TestStream(Device d) : m_device(d) {
#ifdef TNN_WITH_GPU
        if (d.is_gpu()) {
            gpu::DeviceGuard guard(d.index);
            gpu_stream_t s = nullptr;
            TNN_GPU_CHECK(gpu_stream_create_with_flags(&s, gpu_stream_non_blocking));
            m_native = s;
        }
#endif  // TNN_WITH_GPU
    }
    ~TestStream() {
#ifdef TNN_WITH_GPU
        if (m_native) (void)gpu_stream_destroy(static_cast<gpu_stream_t>(m_native));
#endif  // TNN_WITH_GPU
    }
    TestStream(const TestStream&) = delete;
    TestStream& operator=(const TestStream&) = delete;
    Stream stream() const { return m_device.is_cpu() ? Stream::cpu() : Stream::gpu(m_native, m_device.index); }
    operator Stream() const { return stream(); }

private:
    Device m_device;
    void* m_native = nullptr;  // the vendor stream handle
};

#ifdef TNN_WITH_GPU
// A graph captured on a test's stream: the constructor begins the capture, end() ends it and
// instantiates the graph, launch() replays it. A runtime error in any of them is a test failure that
// names the step. A capture still open at destruction (an assertion returned early, the work threw) is
// ended and dropped, so that the stream is usable again.
class TestGraph {
public:
    explicit TestGraph(const Stream& stream, decltype(gpu_stream_capture_mode_global) mode = gpu_stream_capture_mode_global)
        : m_stream(gpu::native_stream(stream)) {
        m_open = ok(gpu_stream_begin_capture(m_stream, mode), "beginning the capture");
    }
    ~TestGraph() {
        if (m_open) {
            gpu_graph_t dropped = nullptr;
            (void)gpu_stream_end_capture(m_stream, &dropped);
            if (dropped) (void)gpu_graph_destroy(dropped);
        }
        if (m_exec) (void)gpu_graph_exec_destroy(m_exec);
        if (m_graph) (void)gpu_graph_destroy(m_graph);
    }
    TestGraph(const TestGraph&) = delete;
    TestGraph& operator=(const TestGraph&) = delete;
    // Ends the capture and instantiates the graph; false after a failure (already reported).
    bool end() {
        if (!m_open) return false;
        m_open = false;
        return ok(gpu_stream_end_capture(m_stream, &m_graph), "ending the capture") &&
               ok(gpu_graph_instantiate(&m_exec, m_graph), "instantiating the graph");
    }
    // One replay on the capturing stream; false after a failure (already reported).
    bool launch() const { return m_exec && ok(gpu_graph_launch(m_exec, m_stream), "launching the graph"); }

private:
    static bool ok(gpu_error_t err, const char* what) {
        if (err == gpu_success) return true;
        ADD_FAILURE() << what << ": " << gpu_get_error_string(err);
        return false;
    }
    gpu_stream_t m_stream;
    gpu_graph_t m_graph = nullptr;
    gpu_graph_exec_t m_exec = nullptr;
    bool m_open = false;
};
#endif  // TNN_WITH_GPU

// Host data <-> a device (a plain copy for the CPU). Synchronous.
inline Tensor to_device(const Tensor& host, Device d) { return host.to(d); }
inline Tensor from_floats(const std::vector<float>& v, int64_t rows, int64_t cols, Device d) {
    Tensor host(rows, cols, DType::f32);
    if (!v.empty()) std::memcpy(host.data(), v.data(), v.size() * sizeof(float));
    return to_device(host, d);
}
inline std::vector<float> to_floats(const Tensor& t) { return t.to_float_vector(); }
inline std::vector<double> widen(const std::vector<float>& v) { return std::vector<double>(v.begin(), v.end()); }

// Bitwise equality of two float vectors (NaN payloads included), reporting the first difference.
inline void expect_same_bits(const std::vector<float>& a, const std::vector<float>& b, const std::string& what) {
    ASSERT_EQ(a.size(), b.size()) << what;
    for (size_t i = 0; i < a.size(); ++i) {
        uint32_t x, y;
        std::memcpy(&x, &a[i], 4);
        std::memcpy(&y, &b[i], 4);
        if (x != y) {
            ADD_FAILURE() << what << ": first difference at [" << i << "]: " << a[i] << " vs " << b[i];
            return;
        }
    }
}

inline double max_abs(const std::vector<double>& v) {
    double m = 0;
    for (double x : v) m = std::max(m, std::fabs(x));
    return m;
}

inline double l2_distance(const std::vector<double>& a, const std::vector<double>& b) {
    double s = 0;
    for (size_t i = 0; i < a.size(); ++i) s += (a[i] - b[i]) * (a[i] - b[i]);
    return std::sqrt(s);
}

// The error model of a result computed by accumulating products in a precision with epsilon `eps`,
// n_terms being the number of terms added along the longest chain that produces one element (for an
// MLP: the fan-ins of every layer it passes through, plus the batch for a weight gradient).
struct AccumulationError {
    double eps = 0;
    double n_terms = 1;
};

// Compares a backend's result with the fp64 reference `ref`, given `naive`: the same computation by
// the CPU reference in the backend's precision (sequential sums, no tricks).
// 1. Elementwise |got - ref| <= n * eps * (max|ref| + |ref|). n * eps is the classical worst-case bound
//    (gamma_n, with a factor 2 for the activation's own few-ulp error) on an n-term accumulation
//    relative to the magnitude of its terms; the terms are of the size of the tensor's largest values,
//    so a result that cancels to near zero may carry that much absolute error.
// 2. Whole tensor ||got - ref|| <= 4 ||naive - ref|| + sqrt(n) * eps * ||ref||: a kernel may sum in
//    another order, but must not be much less accurate than the naive loop (factor 4 leaves room for a
//    different association); sqrt(n) * eps is the expected random-walk error of an n-term sum, the
//    floor when the naive error happens to be tiny. A wrong kernel is off by O(||ref||) and fails both.
inline void expect_matches_reference(const std::vector<float>& got_f, const std::vector<double>& ref,
                                     const std::vector<float>& naive_f, AccumulationError err, const std::string& what) {
    const std::vector<double> got = widen(got_f), naive = widen(naive_f);
    ASSERT_EQ(got.size(), ref.size()) << what;
    ASSERT_EQ(naive.size(), ref.size()) << what;
    const double bound = err.n_terms * err.eps;
    expect_close(got, ref, bound * max_abs(ref), bound, what + " (elementwise vs fp64 reference)");
    const double ref_norm = l2_distance(ref, std::vector<double>(ref.size(), 0.0));
    const double allowed = 4 * l2_distance(naive, ref) + std::sqrt(err.n_terms) * err.eps * ref_norm;
    EXPECT_LE(l2_distance(got, ref), allowed)
        << what << ": whole-tensor error " << l2_distance(got, ref) << " vs naive " << l2_distance(naive, ref)
        << " (norm of the reference " << ref_norm << ")";
}

}  // namespace tnn::test
