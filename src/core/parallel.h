// CPU parallelism with results that never depend on the thread count: work is cut into fixed
// chunks of `grain` items (a function of n and grain only), and reductions sum per-chunk partials
// in chunk order.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

namespace tnn {

inline int64_t chunk_count(int64_t n, int64_t grain) { return n <= 0 ? 0 : (n + grain - 1) / grain; }

// Runs f(begin, end) for every chunk [c*grain, min(n, (c+1)*grain)) on the pool; returns when all
// are done. Called from inside a pool task it runs serially on the calling thread.
void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& f);

// Sums per-chunk contributions into out[0..n_out): f(begin, end, partial) adds the chunk's
// contribution into a zeroed `partial` of n_out values; partials are added to `out` in chunk order.
template <typename Acc>
void parallel_reduce(int64_t n, int64_t grain, size_t n_out, Acc* out,
                     const std::function<void(int64_t, int64_t, Acc*)>& f) {
    const int64_t chunks = chunk_count(n, grain);
    if (chunks == 0) return;
    std::vector<Acc> partials(static_cast<size_t>(chunks) * n_out, Acc(0));
    parallel_for(chunks, 1, [&](int64_t c0, int64_t c1) {
        for (int64_t c = c0; c < c1; ++c)
            f(c * grain, std::min(n, (c + 1) * grain), partials.data() + static_cast<size_t>(c) * n_out);
    });
    for (int64_t c = 0; c < chunks; ++c) {
        const Acc* p = partials.data() + static_cast<size_t>(c) * n_out;
        for (size_t i = 0; i < n_out; ++i) out[i] += p[i];
    }
}

}  // namespace tnn
