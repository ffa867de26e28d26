// GPU timing shared by the device benchmarks (bench_mlp.cpp, bench_grid.cu, bench_blaslt.cpp): events
// around graph launches or eager calls on one stream, graph capture of back-to-back calls, medians.
// Header-only; each benchmark is its own program.
#pragma once

#include <tnn/tnn.h>

#include "gpu/gpu.h"

#include <algorithm>
#include <cmath>
#include <vector>

// Event timing is only needed here; mapped like gpu.h does, for both vendors.
#ifndef gpu_event_elapsed_time
#if defined(TNN_WITH_HIP)
#define gpu_event_elapsed_time hipEventElapsedTime
#else
#define gpu_event_elapsed_time cudaEventElapsedTime
#endif  // TNN_WITH_HIP
#endif  // gpu_event_elapsed_time

namespace tnn::bench {

class Timer {
public:
    Timer() {
        TNN_GPU_CHECK(gpu_event_create_with_flags(&m_start, 0));
        TNN_GPU_CHECK(gpu_event_create_with_flags(&m_stop, 0));
    }
    ~Timer() {
        (void)gpu_event_destroy(m_start);
        (void)gpu_event_destroy(m_stop);
    }
    Timer(const Timer&) = delete;
    Timer& operator=(const Timer&) = delete;

    // GPU milliseconds of whatever f enqueues on s.
    template <typename F> double time(gpu_stream_t s, F&& f) {
        TNN_GPU_CHECK(gpu_event_record(m_start, s));
        f();
        TNN_GPU_CHECK(gpu_event_record(m_stop, s));
        TNN_GPU_CHECK(gpu_stream_synchronize(s));
        float ms = 0;
        TNN_GPU_CHECK(gpu_event_elapsed_time(&ms, m_start, m_stop));
        return ms;
    }
    // GPU milliseconds of `launches` back-to-back launches of a graph.
    double time_graph(gpu_graph_exec_t exec, gpu_stream_t s, int launches) {
        return time(s, [&] {
            for (int i = 0; i < launches; ++i) TNN_GPU_CHECK(gpu_graph_launch(exec, s));
        });
    }

private:
    gpu_event_t m_start = nullptr, m_stop = nullptr;
};

// A graph of `inner` back-to-back calls of body (which must only enqueue work on s).
template <typename F> gpu_graph_exec_t capture(const Stream& s, int inner, F&& body) {
    const gpu_stream_t native = gpu::native_stream(s);
    gpu_graph_t graph = nullptr;
    TNN_GPU_CHECK(gpu_stream_begin_capture(native, gpu_stream_capture_mode_thread_local));
    try {
        for (int i = 0; i < inner; ++i) body();
    } catch (...) {
        (void)gpu_stream_end_capture(native, &graph);
        if (graph) (void)gpu_graph_destroy(graph);
        throw;
    }
    TNN_GPU_CHECK(gpu_stream_end_capture(native, &graph));
    gpu_graph_exec_t exec = nullptr;
    TNN_GPU_CHECK(gpu_graph_instantiate(&exec, graph));
    TNN_GPU_CHECK(gpu_graph_destroy(graph));
    return exec;
}

// GPU milliseconds per call of body(), one value per round: a graph of `inner` back-to-back calls
// (>= ~2 ms of work so that launch gaps do not count, at most max_inner calls) launched until
// round_ms of GPU time, `rounds` times.
template <typename F>
std::vector<double> time_calls(const Stream& s, int rounds, double round_ms, int max_inner, F&& body) {
    body();  // warm-up: plans, kernel attributes, the temporary allocator's blocks
    s.synchronize();
    Timer timer;
    const gpu_stream_t native = gpu::native_stream(s);
    gpu_graph_exec_t one = capture(s, 1, body);
    double t1 = 1e30;
    for (int i = 0; i < 3; ++i) t1 = std::min(t1, timer.time_graph(one, native, 1));
    (void)gpu_graph_exec_destroy(one);
    const int inner = std::max(1, std::min(max_inner, static_cast<int>(std::ceil(2.0 / std::max(t1, 1e-4)))));
    gpu_graph_exec_t exec = capture(s, inner, body);
    const double per_graph = timer.time_graph(exec, native, 1);
    const int launches = std::max(1, static_cast<int>(std::ceil(round_ms / std::max(per_graph, 1e-3))));
    std::vector<double> ms;
    for (int r = 0; r < rounds; ++r) ms.push_back(timer.time_graph(exec, native, launches) / (double(launches) * inner));
    (void)gpu_graph_exec_destroy(exec);
    return ms;
}

// The same from eager calls (events around back-to-back calls, round_ms per round): for bodies that
// cannot be captured, such as an optimizer step, which refuses a capturing stream (its replays would
// reuse one step's scalars). Only meaningful where a call's GPU time exceeds its host launch time.
template <typename F> std::vector<double> time_eager(const Stream& s, int rounds, double round_ms, F&& body) {
    body();  // warm-up
    s.synchronize();
    Timer timer;
    const gpu_stream_t native = gpu::native_stream(s);
    const double one = timer.time(native, body);
    const int n = std::max(5, std::min(2000, static_cast<int>(std::ceil(round_ms / std::max(one, 1e-3)))));
    std::vector<double> ms;
    for (int r = 0; r < rounds; ++r)
        ms.push_back(timer.time(native, [&] {
            for (int i = 0; i < n; ++i) body();
        }) / n);
    return ms;
}

// Median (mean of the middle two for an even count; NaN for none).
inline double median(std::vector<double> v) {
    if (v.empty()) return NAN;
    std::sort(v.begin(), v.end());
    const size_t n = v.size();
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace tnn::bench
