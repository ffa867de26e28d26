// Grid encoding device benchmark (bench/run_grid_bench.sh builds and runs it, issue #9): GPU time per
// call of our grid forward, backward (parameter gradient, fast and deterministic) and forward +
// backward, from CUDA graphs of back-to-back calls timed with events (median of rounds), for tcnn's
// benchmark grid at 2^20 and 2^21 rows, kernel variants, and smaller rows (2D/4D, F = 1/4/8, Dense,
// Tiled, Nearest, Smoothstep, fp32/bf16), and tcnn's encoding + FullyFusedMLP training step and
// inference through the Trainer (2^18, 2^20). Measures the floors too: device copy bandwidth and the
// rate of random 16-byte L2 gathers and of random float / u64 reductions into an L2-resident slice.
// The locality experiment: the main row at 2^20 on the same rows sorted on the host in Morton order
// (variant "morton_sorted_rows"), and what sorting them on the device would cost (Morton codes, a
// 30-bit radix sort of (code, row) pairs, the gather of x, and the scatter of y back to the caller's
// order). Writes one JSON; bench_grid_report.py adds the floors, PyTorch and tcnn.
//
//   bench_grid --out FILE.json [--rounds 5] [--round_ms 20] [--quick]
//   bench_grid --profile forward|backward|backward_det|train_step [--morton]
// --profile runs one pass of the main row at 2^20 (after a warm-up call) between cudaProfilerStart and
// cudaProfilerStop, for Nsight Compute with --profile-from-start off (run_grid_bench.sh NCU_PROFILES);
// --morton on the rows in Morton order.
#include <tnn/tnn.h>

#include "bench_timing.h"
#include "encodings/grid_gpu.h"
#include "gpu/gpu.h"
#include "networks/fully_fused_mlp.h"

#include <cub/device/device_radix_sort.cuh>
#include <cuda_profiler_api.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <iostream>
#include <string>
#include <vector>


using namespace tnn;

namespace {

struct Options {
    std::string out = "bench_grid.json";
    int rounds = 5;
    double round_ms = 20.0;
    bool quick = false;
    std::string profile;  // a pass of the main row to run once for a profiler, instead of the benchmark
    bool morton = false;  // with --profile: the rows in Morton order
};

Options parse(int argc, char** argv) {
    Options o;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        auto next = [&]() -> std::string {
            if (i + 1 >= argc) {
                std::cerr << "bench_grid: " << a << " needs a value\n";
                std::exit(2);
            }
            return argv[++i];
        };
        if (a == "--out") o.out = next();
        else if (a == "--rounds") o.rounds = std::stoi(next());
        else if (a == "--round_ms") o.round_ms = std::stod(next());
        else if (a == "--quick") o.quick = true;
        else if (a == "--profile") o.profile = next();
        else if (a == "--morton") o.morton = true;
        else {
            std::cerr << "usage: bench_grid --out FILE.json [--rounds 5] [--round_ms 20] [--quick]\n"
                         "       bench_grid --profile forward|backward|backward_det|train_step [--morton]\n";
            std::exit(2);
        }
    }
    return o;
}

// ---- timing (bench_timing.h) ---------------------------------------------------------------------

using bench::median;
using bench::Timer;

// Median-of-rounds timings with this run's options: graphs of at most 200 back-to-back calls.
template <typename F> std::vector<double> time_calls(const Stream& s, const Options& o, F&& body) {
    return bench::time_calls(s, o.rounds, o.round_ms, 200, body);
}

// ---- floors: microbenchmarks of what the grid kernels cannot avoid ------------------------------------

__device__ __forceinline__ uint32_t mix(uint32_t x) {  // a cheap integer hash: random addresses
    x ^= x >> 16;
    x *= 0x7feb352dU;
    x ^= x >> 15;
    x *= 0x846ca68bU;
    x ^= x >> 16;
    return x;
}

// Each thread gathers `per_thread` random 16-byte chunks of a table of n_chunks (all independent, as
// the forward's x-pair loads are), and writes one word so that nothing is optimised away.
__global__ void bench_gather16_kernel(const uint4* __restrict__ table, uint32_t n_chunks, int per_thread,
                                      uint32_t* __restrict__ sink) {
    const uint32_t t = blockIdx.x * blockDim.x + threadIdx.x;
    uint32_t acc = 0;
    for (int i = 0; i < per_thread; ++i) {
        const uint4 q = table[mix(t * 64u + i) % n_chunks];
        acc ^= q.x ^ q.w;
    }
    sink[t] = acc;
}

// The same gathers from a persistent grid of one 256-thread block per SM, the shape of the fused MLP
// kernels (bench/notes_grid.md section 7): each thread issues U independent loads, then uses them, for
// `rounds` rounds. Whether a grid forward inside such a kernel could still gather at the floor's rate.
template <int U>
__global__ void bench_gather16_persistent_kernel(const uint4* __restrict__ table, uint32_t n_chunks, int rounds,
                                                 uint32_t* __restrict__ sink) {
    const uint32_t t = blockIdx.x * blockDim.x + threadIdx.x;
    uint32_t acc = 0;
    for (int r = 0; r < rounds; ++r) {
        uint4 q[U];
#pragma unroll
        for (int u = 0; u < U; ++u) q[u] = table[mix(t * 4096u + uint32_t(r * U + u)) % n_chunks];
#pragma unroll
        for (int u = 0; u < U; ++u) acc ^= q[u].x ^ q[u].w;
    }
    sink[t] = acc;
}

// The floors' reductions are sm_90's vector forms, written out as PTX: a build for an older device
// would not measure what the grid kernels do there (one atomic per value), so it is refused.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
#error "bench_grid measures sm_90's vector reductions: build it for sm_90 (bench/run_grid_bench.sh, CUDA_ARCH=90a)"
#endif  // __CUDA_ARCH__ < 900

// Random reductions into a slice of n_slots 16-byte slots: v4 / v2 / scalar fp32, u64 (the
// deterministic path's), half2 (tcnn's).
template <int KIND>
__global__ void bench_red_kernel(float* __restrict__ slots, uint32_t n_slots, int per_thread) {
    const uint32_t t = blockIdx.x * blockDim.x + threadIdx.x;
    for (int i = 0; i < per_thread; ++i) {
        float* p = slots + 4 * size_t(mix(t * 64u + i) % n_slots);
        const float v = 1e-3f * static_cast<float>(i + 1);
        if constexpr (KIND == 0) {
            asm volatile("red.global.add.v4.f32 [%0], {%1, %2, %3, %4};" ::"l"(p), "f"(v), "f"(v), "f"(v), "f"(v)
                         : "memory");
        } else if constexpr (KIND == 1) {
            asm volatile("red.global.add.v2.f32 [%0], {%1, %2};" ::"l"(p), "f"(v), "f"(v) : "memory");
        } else if constexpr (KIND == 2) {
            atomicAdd(p, v);
        } else if constexpr (KIND == 3) {
            atomicAdd(reinterpret_cast<unsigned long long*>(p), static_cast<unsigned long long>(i + 1));
        } else {
            atomicAdd(reinterpret_cast<__half2*>(p), __floats2half2_rn(v, v));
        }
    }
}

// The fast backward's reductions of x-neighbour corners (bench/notes_grid.md section 8): lanes 2q and
// 2q + 1 add 8 bytes (F = 2 fp32) each to entries i and i ^ m of a 2^19-entry level, as the corner
// kernel's lanes of corners x and x + 1 do (CoherentPrime: x ^ h and (x + 1) ^ h differ by
// m = x ^ (x + 1), so m = 1 half of the time, 3 a quarter, 7 an eighth...; dense indexing alike).
// ARRAYS 1: all into A (today's layout). ARRAYS 2 / 3: the pairs with m = 3 (and m = 7) into a second
//   (third) array whose layout puts entries e and e ^ m side by side in one 16-byte slot (xpair_slot),
//   as a gradient accumulated in A + B3 (+ B7) and summed by the conversion would.
// V4: a pair in one 16-byte slot (m = 1 in A, m = 3 / 7 in B3 / B7) leaves as one v4 from the even lane
//   (the odd one idles), as against two v2 that the coalescer merges.
// PROBE 1 / 2 / 3: m fixed at 1 (one 16-byte slot), 3 (two halves of one 32-byte sector), 0x401 (two
//   sectors): what the L2 counts.
__host__ __device__ inline uint32_t xpair_slot(uint32_t e, uint32_t m) {
    const uint32_t top = (m + 1) >> 1, v = e & m, hi = (v & top) ? 1u : 0u;
    return (e & ~m) + 2 * (hi ? (v ^ m) : v) + hi;
}

template <int ARRAYS, bool V4, int PROBE>
__global__ void bench_red_xpairs_kernel(float* __restrict__ a, float* __restrict__ b3, float* __restrict__ b7,
                                        uint32_t n_entries, int per_thread) {
    const uint32_t t = blockIdx.x * blockDim.x + threadIdx.x, q = t >> 1, side = t & 1;
    for (int k = 0; k < per_thread; ++k) {
        const uint32_t r = mix(q * 64u + uint32_t(k)), i = r & (n_entries - 1);
        uint32_t m;
        if constexpr (PROBE == 0) {
            const uint32_t x = mix(r ^ 0x9e3779b9u);
            m = (x ^ (x + 1)) & (n_entries - 1);
        } else {
            m = PROBE == 1 ? 1u : PROBE == 2 ? 3u : 0x401u;
        }
        const float v = 1e-3f * static_cast<float>(k + 1);
        float* base = a;
        uint32_t slot_m = 1;  // the m whose pairs share a 16-byte slot in `base`
        if (ARRAYS >= 2 && m == 3) base = b3, slot_m = 3;
        if (ARRAYS >= 3 && m == 7) base = b7, slot_m = 7;
        if (V4 && m == slot_m) {
            if (side == 0) {
                float* p = base + 2 * size_t(xpair_slot(i, m) & ~1u);
                asm volatile("red.global.add.v4.f32 [%0], {%1, %2, %3, %4};" ::"l"(p), "f"(v), "f"(v), "f"(v), "f"(v)
                             : "memory");
            }
            continue;
        }
        const uint32_t e = side ? i ^ m : i;
        float* p = base + 2 * size_t(base == a ? e : xpair_slot(e, slot_m));
        asm volatile("red.global.add.v2.f32 [%0], {%1, %2};" ::"l"(p), "f"(v), "f"(v) : "memory");
    }
}

// The grid kernels' variant for a scope (a row's passes; the model rows: set before a Trainer captures its
// graph), the one before restored after, also when a row throws.
struct GridVariantScope {
    grid_gpu::Variant saved = grid_gpu::variant();
    explicit GridVariantScope(const grid_gpu::Variant& v) { grid_gpu::set_variant(v); }
    ~GridVariantScope() { grid_gpu::set_variant(saved); }
    GridVariantScope(const GridVariantScope&) = delete;
    GridVariantScope& operator=(const GridVariantScope&) = delete;
};

// The fastest of `tries` timings of what f enqueues (the floors want the hardware's best rate).
template <typename F> double fastest_of(Timer& timer, gpu_stream_t native, int tries, F&& f) {
    double best = 1e30;
    for (int i = 0; i < tries; ++i) best = std::min(best, timer.time(native, f));
    return best;
}

json measure_floors(const Stream& s) {
    const gpu_stream_t native = gpu::native_stream(s);
    Timer timer;
    json f;
    // Device-to-device copy of 1 GiB (read + write counted).
    {
        const size_t bytes = size_t(1) << 30;
        Buffer a(s.device(), bytes), b(s.device(), bytes);
        TNN_GPU_CHECK(gpu_memset_async(a.data(), 0, bytes, native));
        const double best = fastest_of(timer, native, 5, [&] {
            TNN_GPU_CHECK(gpu_memcpy_async(b.data(), a.data(), bytes, gpu_memcpy_default, native));
        });
        f["copy_bytes_per_s"] = 2.0 * bytes / (best * 1e-3);
    }
    // Random 16-byte gathers from a 32 MiB table (the grid's 16 levels x 2^19 x 4 bytes).
    {
        const uint32_t n_chunks = (32u << 20) / 16;
        Buffer table(s.device(), size_t(n_chunks) * 16), sink(s.device(), size_t(1) << 24);
        TNN_GPU_CHECK(gpu_memset_async(table.data(), 1, table.bytes(), native));
        const int per_thread = 16, threads = 256, blocks = (1 << 22) / threads;
        const double best = fastest_of(timer, native, 5, [&] {
            bench_gather16_kernel<<<blocks, threads, 0, native>>>(table.ptr<uint4>(), n_chunks, per_thread,
                                                                  sink.ptr<uint32_t>());
            TNN_GPU_CHECK_LAUNCH("bench_gather16_kernel");
        });
        f["gather16_per_s"] = double(blocks) * threads * per_thread / (best * 1e-3);
        // At the fused MLP kernels' occupancy: one block of 256 threads per SM, U loads in flight each.
        const int sms = gpu::device_properties(s.device().index).sm_count;
        auto persistent = [&](auto u) {
            constexpr int U = decltype(u)::value;
            const int rounds = std::max(1, static_cast<int>((int64_t(1) << 26) / (int64_t(sms) * threads * U)));
            const double fastest = fastest_of(timer, native, 5, [&] {
                bench_gather16_persistent_kernel<U><<<sms, threads, 0, native>>>(table.ptr<uint4>(), n_chunks, rounds,
                                                                                  sink.ptr<uint32_t>());
                TNN_GPU_CHECK_LAUNCH("bench_gather16_persistent_kernel");
            });
            f["gather16_per_s_1x256_per_sm_" + std::to_string(U) + "_in_flight"] =
                double(sms) * threads * rounds * U / (fastest * 1e-3);
        };
        persistent(std::integral_constant<int, 1>{});
        persistent(std::integral_constant<int, 4>{});
        persistent(std::integral_constant<int, 8>{});
        persistent(std::integral_constant<int, 16>{});
    }
    // Random reductions into a 4 MiB slice (one level's fp32 gradient: 2^19 x 2 x 4 bytes) and, for
    // comparison, into 64 MiB (all 16 levels at once: does not stay in L2 next to everything else).
    const char* names[] = {"red_v4_per_s", "red_v2_per_s", "red_f32_per_s", "red_u64_per_s", "red_half2_per_s"};
    for (size_t slice : {size_t(4) << 20, size_t(64) << 20}) {
        Buffer slots(s.device(), slice);
        TNN_GPU_CHECK(gpu_memset_async(slots.data(), 0, slice, native));
        const uint32_t n_slots = static_cast<uint32_t>(slice / 16);
        const int per_thread = 8, threads = 256, blocks = (1 << 22) / threads;
        for (int kind = 0; kind < 5; ++kind) {
            const double best = fastest_of(timer, native, 5, [&] {
                switch (kind) {
                    case 0: bench_red_kernel<0><<<blocks, threads, 0, native>>>(slots.ptr<float>(), n_slots, per_thread); break;
                    case 1: bench_red_kernel<1><<<blocks, threads, 0, native>>>(slots.ptr<float>(), n_slots, per_thread); break;
                    case 2: bench_red_kernel<2><<<blocks, threads, 0, native>>>(slots.ptr<float>(), n_slots, per_thread); break;
                    case 3: bench_red_kernel<3><<<blocks, threads, 0, native>>>(slots.ptr<float>(), n_slots, per_thread); break;
                    default: bench_red_kernel<4><<<blocks, threads, 0, native>>>(slots.ptr<float>(), n_slots, per_thread);
                }
                TNN_GPU_CHECK_LAUNCH("bench_red_kernel");
            });
            f[std::string(names[kind]) + (slice > (size_t(8) << 20) ? "_64MiB" : "")] =
                double(blocks) * threads * per_thread / (best * 1e-3);
        }
    }
    // The x-neighbour pairs of the fast backward (bench_red_xpairs_kernel), in pairs per second.
    {
        const uint32_t n_entries = 1u << 19;
        Buffer a(s.device(), size_t(n_entries) * 8), b3(s.device(), size_t(n_entries) * 8),
            b7(s.device(), size_t(n_entries) * 8);
        for (Buffer* b : {&a, &b3, &b7}) TNN_GPU_CHECK(gpu_memset_async(b->data(), 0, b->bytes(), native));
        const int per_thread = 8, threads = 256, blocks = (1 << 22) / threads;
        float *pa = a.ptr<float>(), *p3 = b3.ptr<float>(), *p7 = b7.ptr<float>();
        auto mode = [&](const char* name, auto kernel) {
            const double best = fastest_of(timer, native, 5, [&] {
                kernel<<<blocks, threads, 0, native>>>(pa, p3, p7, n_entries, per_thread);
                TNN_GPU_CHECK_LAUNCH("bench_red_xpairs_kernel");
            });
            f[std::string("xpairs_") + name + "_pairs_per_s"] = double(blocks) * threads / 2 * per_thread / (best * 1e-3);
        };
        mode("one_array", bench_red_xpairs_kernel<1, false, 0>);
        mode("with_b3", bench_red_xpairs_kernel<2, false, 0>);
        mode("with_b3_b7", bench_red_xpairs_kernel<3, false, 0>);
        mode("probe_same_slot", bench_red_xpairs_kernel<1, false, 1>);
        mode("probe_same_sector", bench_red_xpairs_kernel<1, false, 2>);
        mode("probe_two_sectors", bench_red_xpairs_kernel<1, false, 3>);
        mode("v4_one_array", bench_red_xpairs_kernel<1, true, 0>);
        mode("v4_with_b3", bench_red_xpairs_kernel<2, true, 0>);
        mode("v4_with_b3_b7", bench_red_xpairs_kernel<3, true, 0>);
        mode("v4_probe_same_slot", bench_red_xpairs_kernel<1, true, 1>);
    }
    return f;
}

// ---- the grid rows -----------------------------------------------------------------------------------

std::vector<float> uniform(size_t n, float lo, float hi, uint64_t seed) {
    Pcg32 rng(seed);
    std::vector<float> v(n);
    for (auto& x : v) x = lo + (hi - lo) * rng.next_float();
    return v;
}

Tensor upload(const std::vector<float>& v, int64_t rows, int64_t cols, DType dtype, Device dev) {
    Tensor host(rows, cols, DType::f32);
    std::memcpy(host.data(), v.data(), v.size() * sizeof(float));
    if (dtype == DType::f32) return host.to(dev);
    Tensor t(rows, cols, dtype);
    convert(Stream::cpu(), host.view(), t.view());
    return t.to(dev);
}

// tcnn's benchmark grid: 3D HashGrid, 16 levels, F = 2, 2^19 entries per level, base 16, scale 1.5.
json base_config() {
    return {{"otype", "HashGrid"}, {"n_levels", 16},  {"n_features_per_level", 2}, {"log2_hashmap_size", 19},
            {"base_resolution", 16}, {"per_level_scale", 1.5}, {"interpolation", "Linear"}};
}

struct Row {
    std::string label;
    uint32_t n_dims;
    json config;
    DType dtype;
    int64_t batch;
    std::vector<std::string> passes;  // forward, backward, backward_det, fwd_bwd, fwd_bwd_det
    bool morton_rows = false;         // the rows in Morton order (3D: the locality experiment)
};

// ---- the locality experiment -------------------------------------------------------------------------

// The 30-bit Morton code of a point of [0, 1]^3 (10 bits per coordinate, x in the lowest bit of each
// triple), on the host and on the device alike.
__host__ __device__ inline uint32_t spread_bits10(uint32_t v) {
    v &= 0x3ffu;
    v = (v | (v << 16)) & 0x030000ffu;
    v = (v | (v << 8)) & 0x0300f00fu;
    v = (v | (v << 4)) & 0x030c30c3u;
    v = (v | (v << 2)) & 0x09249249u;
    return v;
}

__host__ __device__ inline uint32_t morton3(float x, float y, float z) {
    auto q = [](float v) {
        const float c = fminf(fmaxf(v, 0.0f), 1.0f) * 1024.0f;
        return static_cast<uint32_t>(fminf(c, 1023.0f));
    };
    return spread_bits10(q(x)) | (spread_bits10(q(y)) << 1) | (spread_bits10(q(z)) << 2);
}

// Rows of 3 coordinates reordered by their Morton codes (stable).
std::vector<float> morton_sorted(const std::vector<float>& x, int64_t rows) {
    std::vector<uint32_t> code(static_cast<size_t>(rows));
    for (int64_t r = 0; r < rows; ++r) code[r] = morton3(x[3 * r], x[3 * r + 1], x[3 * r + 2]);
    std::vector<int64_t> order(static_cast<size_t>(rows));
    std::iota(order.begin(), order.end(), int64_t(0));
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return code[a] < code[b]; });
    std::vector<float> out(x.size());
    for (int64_t r = 0; r < rows; ++r)
        for (int d = 0; d < 3; ++d) out[3 * r + d] = x[3 * order[r] + d];
    return out;
}

__global__ void morton_codes_kernel(const float* __restrict__ x, int64_t rows, uint32_t* __restrict__ code,
                                    uint32_t* __restrict__ row) {
    const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= rows) return;
    code[i] = morton3(x[3 * i], x[3 * i + 1], x[3 * i + 2]);
    row[i] = static_cast<uint32_t>(i);
}

__global__ void gather_rows3_kernel(const float* __restrict__ x, const uint32_t* __restrict__ order, int64_t rows,
                                    float* __restrict__ out) {
    const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= rows) return;
    const int64_t r = order[i];
    out[3 * i] = x[3 * r], out[3 * i + 1] = x[3 * r + 1], out[3 * i + 2] = x[3 * r + 2];
}

// y (rows of `chunks` 16-byte chunks, in sorted order) back to the caller's order: one thread per chunk.
__global__ void scatter_rows_kernel(const uint4* __restrict__ y, const uint32_t* __restrict__ order, int64_t rows,
                                    int chunks, uint4* __restrict__ out) {
    const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= rows * chunks) return;
    const int64_t r = i / chunks;
    out[int64_t(order[r]) * chunks + i % chunks] = y[i];
}

// What sorting the rows on the device costs, next to the passes on sorted rows: "morton_sort" (codes,
// the radix sort of 30-bit keys with the row indices, the gather of x into sorted order) and
// "unsort_output" (the scatter of the encoding's output, 16 levels x F = 2 halves a row, back).
void bench_sort_cost(int64_t rows, const Options& o, const Stream& s, json& results) {
    const Device dev = s.device();
    const gpu_stream_t native = gpu::native_stream(s);
    Tensor x = upload(uniform(size_t(rows) * 3, 0.0f, 1.0f, 1), rows, 3, DType::f32, dev);
    Buffer codes(dev, rows * 4), codes_sorted(dev, rows * 4), order_in(dev, rows * 4), order(dev, rows * 4),
        xs(dev, rows * 12);
    const int chunks = 16 * 2 * 2 / 16;  // the main row's output: 64 bytes a row
    Buffer ys(dev, rows * 64), y(dev, rows * 64);
    TNN_GPU_CHECK(gpu_memset_async(ys.data(), 0, ys.bytes(), native));
    size_t temp_bytes = 0;
    TNN_GPU_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, codes.ptr<uint32_t>(), codes_sorted.ptr<uint32_t>(),
                                                  order_in.ptr<uint32_t>(), order.ptr<uint32_t>(), static_cast<int>(rows),
                                                  0, 30, native));
    Buffer temp(dev, std::max<size_t>(temp_bytes, 16));
    const int threads = 256;
    const unsigned blocks = static_cast<unsigned>((rows + threads - 1) / threads);
    auto record = [&](const std::string& pass, const std::vector<double>& ms) {
        results.push_back({{"pass", pass}, {"batch", rows}, {"ms", median(ms)}, {"ms_rounds", ms}});
        std::printf("%-34s %-13s %-14s b=%-8lld %9.4f ms\n", "locality", pass.c_str(), "device",
                    static_cast<long long>(rows), median(ms));
        std::fflush(stdout);
    };
    try {
        record("morton_sort", time_calls(s, o, [&] {
                   morton_codes_kernel<<<blocks, threads, 0, native>>>(x.view().ptr<float>(), rows, codes.ptr<uint32_t>(),
                                                                       order_in.ptr<uint32_t>());
                   TNN_GPU_CHECK_LAUNCH("morton_codes_kernel");
                   size_t bytes = temp.bytes();
                   TNN_GPU_CHECK(cub::DeviceRadixSort::SortPairs(temp.data(), bytes, codes.ptr<uint32_t>(),
                                                                 codes_sorted.ptr<uint32_t>(), order_in.ptr<uint32_t>(),
                                                                 order.ptr<uint32_t>(), static_cast<int>(rows), 0, 30,
                                                                 native));
                   gather_rows3_kernel<<<blocks, threads, 0, native>>>(x.view().ptr<float>(), order.ptr<uint32_t>(), rows,
                                                                       xs.ptr<float>());
                   TNN_GPU_CHECK_LAUNCH("gather_rows3_kernel");
               }));
        const unsigned scatter_blocks = static_cast<unsigned>((rows * chunks + threads - 1) / threads);
        record("unsort_output", time_calls(s, o, [&] {
                   scatter_rows_kernel<<<scatter_blocks, threads, 0, native>>>(ys.ptr<uint4>(), order.ptr<uint32_t>(),
                                                                               rows, chunks, y.ptr<uint4>());
                   TNN_GPU_CHECK_LAUNCH("scatter_rows_kernel");
               }));
    } catch (const std::exception& ex) {
        results.push_back({{"batch", rows}, {"error", ex.what()}});
        std::printf("%-34s ERROR %s\n", "locality", ex.what());
    }
}

// A row's tensors on the device: its encoding's parameters (seed 1337), the inputs (uniform in [0, 1],
// seed 1; in Morton order where the row asks for it), dL/dy (seed 3), the output and the gradient.
struct RowData {
    Tensor params, x, dy, y, grads;
};

RowData row_data(const Row& row, const Encoding& enc, Device dev) {
    std::vector<float> p32(enc.n_params());
    enc.init_params(1337, p32.data());
    std::vector<float> x_host = uniform(size_t(row.batch) * row.n_dims, 0.0f, 1.0f, 1);
    if (row.morton_rows) {
        if (row.n_dims != 3) throw Error("bench_grid: Morton-sorted rows are for 3D rows only");
        x_host = morton_sorted(x_host, row.batch);
    }
    const int64_t n_out = enc.n_output_dims();
    return {upload(p32, 1, static_cast<int64_t>(p32.size()), row.dtype, dev),
            upload(x_host, row.batch, row.n_dims, DType::f32, dev),
            upload(uniform(size_t(row.batch) * n_out, -1.0f, 1.0f, 3), row.batch, n_out, row.dtype, dev),
            Tensor(row.batch, n_out, row.dtype, dev),
            Tensor(1, static_cast<int64_t>(enc.n_params()), row.dtype, dev)};
}

void bench_row(const Row& row, const Options& o, const Stream& s, json& results, const grid_gpu::Variant& variant,
               const std::string& variant_name) {
    const Device dev = s.device();
    auto enc = create_encoding(row.n_dims, row.config, row.dtype);
    json det_config = row.config;
    det_config["deterministic"] = true;
    auto enc_det = create_encoding(row.n_dims, det_config, row.dtype);
    RowData t = row_data(row, *enc, dev);
    Tensor &params = t.params, &x = t.x, &dy = t.dy, &y = t.y, &grads = t.grads;
    const GridVariantScope scope(variant);
    auto record = [&](const std::string& pass, const std::vector<double>& ms) {
        results.push_back({{"label", row.label},   {"pass", pass},       {"batch", row.batch},
                           {"n_dims", row.n_dims}, {"config", row.config}, {"dtype", dtype_name(row.dtype)},
                           {"n_params", enc->n_params()}, {"ms", median(ms)}, {"ms_rounds", ms},
                           {"variant", variant_name}});
        std::printf("%-34s %-13s %-14s b=%-8lld %9.4f ms\n", row.label.c_str(), pass.c_str(), variant_name.c_str(),
                    static_cast<long long>(row.batch), median(ms));
        std::fflush(stdout);
    };
    try {
        for (const std::string& pass : row.passes) {
            const Encoding& e = pass.find("det") != std::string::npos ? *enc_det : *enc;
            if (pass == "forward") {
                record(pass, time_calls(s, o, [&] { e.inference(s, x.view(), y.view(), params.data()); }));
            } else if (pass == "backward" || pass == "backward_det") {
                // The grid's context holds no device memory: one forward outside the graph serves every backward.
                auto ctx = e.forward(s, x.view(), y.view(), params.data(), false);
                record(pass, time_calls(s, o, [&] {
                           e.backward(s, *ctx, x.view(), y.view(), dy.view(), nullptr, grads.data(), params.data(),
                                      GradMode::overwrite);
                       }));
            } else {
                record(pass, time_calls(s, o, [&] {
                           auto ctx = e.forward(s, x.view(), y.view(), params.data(), false);
                           e.backward(s, *ctx, x.view(), y.view(), dy.view(), nullptr, grads.data(), params.data(),
                                      GradMode::overwrite);
                       }));
            }
        }
    } catch (const std::exception& ex) {
        results.push_back({{"label", row.label}, {"variant", variant_name}, {"error", ex.what()}});
        std::printf("%-34s ERROR %s\n", row.label.c_str(), ex.what());
    }
}

// tcnn's encoding + MLP benchmark: the main grid feeding a FullyFusedMLP (width 64, 2 hidden layers,
// ReLU, 3 -> 16 outputs, fp16), L2 loss and Adam. "train_step" is Trainer::step (forward, loss,
// backward, Adam; the network's part fused, "train_step_unfused" without), which replays its own CUDA
// graph once its views repeat: events around `steps`
// back-to-back steps per round (one graph launch each). "inference" is the model's inference in our
// graphs of back-to-back calls, as the grid rows.
json model_config() {
    return {{"encoding", base_config()},
            {"network", {{"otype", "FullyFusedMLP"}, {"n_neurons", 64}, {"n_hidden_layers", 2},
                         {"activation", "ReLU"}, {"output_activation", "None"}, {"dtype", "float16"}}},
            {"loss", {{"otype", "L2"}}},
            {"optimizer", {{"otype", "Adam"}, {"learning_rate", 1e-2}}}};
}

void bench_model(int64_t batch, const Options& o, const Stream& s, json& results) {
    const Device dev = s.device();
    const json config = model_config();
    const std::string label = "hashgrid_ffmlp64_3to16_fp16";
    auto record = [&](const std::string& pass, const std::vector<double>& ms, const std::string& what) {
        results.push_back({{"label", label}, {"pass", pass}, {"batch", batch}, {"config", config},
                           {"ms", median(ms)}, {"ms_rounds", ms}, {"what", what}});
        std::printf("%-34s %-13s %-14s b=%-8lld %9.4f ms\n", label.c_str(), pass.c_str(), "model",
                    static_cast<long long>(batch), median(ms));
        std::fflush(stdout);
    };
    try {
        // The trainer's default step fuses the network's forward, the loss and its backward (trainer.h);
        // the unfused step is timed too, for the difference.
        // "train_step_mlp_two_tiles": the default step with the network's backward on the plan the
        // planner took before the eighteenth session (8 warps of two m16 tiles, mma.sync kernel) instead
        // of the wgmma block (12 warps of one tile). "train_step_dx_one_value" / "_dx_pairs": the
        // network's dL/dinput (the grid's dL/dy) stored one value per store, as before the nineteenth
        // session, or two, instead of four (KernelArgs::dx_vec).
        ffm::PlanOverride two_tiles, dx_one, dx_pairs;
        two_tiles.backward_m_tiles = 2;
        dx_one.dx_values = 1, dx_pairs.dx_values = 2;
        // "train_step_det_no_bulk": the deterministic step with the grid's x-pairs as 64-bit reductions per
        // lane instead of bulk reductions (grid_gpu::Variant::det_bulk, twenty-first session).
        grid_gpu::Variant no_bulk;
        no_bulk.det_bulk = 0;
        // "train_step_whole_scratch" / "train_step_det_whole_scratch": the grid's gradient scratch zeroed
        // whole first and converted at the end instead of in parts around each group of levels
        // (grid_gpu::Variant::staged_scratch, twenty-third session).
        grid_gpu::Variant whole;
        whole.staged_scratch = 0;
        struct Variant {
            bool det, fused;
            const char* pass;
            ffm::PlanOverride mlp_plan = {};
            grid_gpu::Variant grid = {};
        };
        for (const Variant& v : {Variant{false, true, "train_step"}, Variant{false, false, "train_step_unfused"},
                                 Variant{true, true, "train_step_det"}, Variant{false, true, "train_step_mlp_two_tiles", two_tiles},
                                 Variant{false, true, "train_step_dx_one_value", dx_one},
                                 Variant{false, true, "train_step_dx_pairs", dx_pairs},
                                 Variant{true, true, "train_step_det_no_bulk", {}, no_bulk},
                                 Variant{false, true, "train_step_whole_scratch", {}, whole},
                                 Variant{true, true, "train_step_det_whole_scratch", {}, whole}}) {
            const ffm::PlanOverrideScope scope(v.mlp_plan);
            const GridVariantScope grid_scope(v.grid);  // before the trainer captures its graph
            const bool det = v.det;
            json c = config;
            c["encoding"]["deterministic"] = det;
            Trainer trainer(3, 16, c, dev);
            trainer.set_fused_loss(v.fused);
            Tensor x = upload(uniform(size_t(batch) * 3, 0.0f, 1.0f, 1), batch, 3, DType::f32, dev);
            Tensor target = upload(uniform(size_t(batch) * 16, 0.0f, 1.0f, 2), batch, 16, DType::f32, dev);
            Tensor y(batch, 16, DType::f16, dev);
            for (int i = 0; i < 5; ++i) trainer.step(s, x.view(), target.view());  // captures the graph
            s.synchronize();
            Timer timer;
            const gpu_stream_t native = gpu::native_stream(s);
            const double one = timer.time(native, [&] { trainer.step(s, x.view(), target.view()); });
            const int steps = std::max(5, std::min(500, static_cast<int>(std::ceil(o.round_ms / std::max(one, 1e-3)))));
            std::vector<double> ms;
            for (int r = 0; r < o.rounds; ++r)
                ms.push_back(timer.time(native, [&] {
                                 for (int i = 0; i < steps; ++i) trainer.step(s, x.view(), target.view());
                             }) /
                             steps);
            if (trainer.graph_steps() == 0) throw Error("bench_model: the trainer did not replay a graph");
            record(v.pass, ms,
                   std::string("Trainer::step: forward + L2 + backward + Adam, replayed from the trainer's graph") +
                       (trainer.fused_loss() ? " (network forward, loss and backward fused)" : " (unfused)"));
            if (std::string(v.pass) == "train_step")  // the model as trained by default
                record("inference",
                       time_calls(s, o, [&] { trainer.model().inference(s, x.view(), y.view(), trainer.params()); }),
                       "model inference");
        }
    } catch (const std::exception& ex) {
        results.push_back({{"label", label}, {"batch", batch}, {"error", ex.what()}});
        std::printf("%-34s ERROR %s\n", label.c_str(), ex.what());
    }
}

// The overlap experiment (twelfth session; bench/notes_grid.md section 7): could a training step run
// the grid's passes beside the MLP's instead of one after the other (a step pipelined over chunks of the
// batch)? On independent data, the main row's grid forward and backward (2^20 rows) and a training step
// of the MLP alone (bench_model's FullyFusedMLP, L2 and Adam, on 32 inputs through an Identity
// encoding) are timed alone, then each grid pass on the caller's stream with the MLP step forked onto a
// second stream and joined back. All eager launches timed by bench::time_eager (the
// trainer replays its own graph, which cannot be captured inside another one), so the host must keep
// ahead of the GPU: it does when the alone figures match the graph-timed rows above. A concurrent time
// near the larger of its two parts means the GPU runs them side by side; near their sum, it does not.
void bench_overlap(int64_t rows, const Options& o, const Stream& s, json& results) {
    const Device dev = s.device();
    auto record = [&](const std::string& pass, const std::vector<double>& ms) {
        results.push_back({{"pass", pass}, {"batch", rows}, {"ms", median(ms)}, {"ms_rounds", ms}});
        std::printf("%-34s %-13s %-14s b=%-8lld %9.4f ms\n", "overlap", pass.c_str(), "eager",
                    static_cast<long long>(rows), median(ms));
        std::fflush(stdout);
    };
    gpu_stream_t side = nullptr;
    try {
        const Row row{"hash3d_f2_L16_T19_fp16", 3, base_config(), DType::f16, rows, {}};
        auto enc = create_encoding(row.n_dims, row.config, row.dtype);
        RowData t = row_data(row, *enc, dev);
        json mlp = model_config();
        mlp["encoding"] = {{"otype", "Identity"}};
        Trainer trainer(32, 16, mlp, dev);
        Tensor xm = upload(uniform(size_t(rows) * 32, 0.0f, 1.0f, 5), rows, 32, DType::f32, dev);
        Tensor target = upload(uniform(size_t(rows) * 16, 0.0f, 1.0f, 2), rows, 16, DType::f32, dev);
        TNN_GPU_CHECK(gpu_stream_create_with_flags(&side, gpu_stream_non_blocking));
        const Stream s2 = Stream::gpu(side, dev.index);
        auto ctx = enc->forward(s, t.x.view(), t.y.view(), t.params.data(), false);
        const auto grid_forward = [&] { enc->inference(s, t.x.view(), t.y.view(), t.params.data()); };
        const auto grid_backward = [&] {
            enc->backward(s, *ctx, t.x.view(), t.y.view(), t.dy.view(), nullptr, t.grads.data(), t.params.data(),
                          GradMode::overwrite);
        };
        const auto mlp_step = [&](const Stream& on) { trainer.step(on, xm.view(), target.view()); };
        const auto beside = [&](const std::function<void()>& grid_pass) {
            gpu::stream_wait(s2, s);
            mlp_step(s2);
            grid_pass();
            gpu::stream_wait(s, s2);
        };
        for (int i = 0; i < 5; ++i) mlp_step(s);  // the trainer captures its graph
        s.synchronize();
        if (trainer.graph_steps() == 0) throw Error("bench_overlap: the trainer did not replay a graph");
        auto eager = [&](const std::string& pass, const std::function<void()>& once) {
            record(pass, bench::time_eager(s, o.rounds, o.round_ms, once));
        };
        eager("grid_forward", grid_forward);
        eager("grid_backward", grid_backward);
        eager("mlp_step", [&] { mlp_step(s); });
        eager("forward_beside_mlp", [&] { beside(grid_forward); });
        eager("backward_beside_mlp", [&] { beside(grid_backward); });
        eager("forward_then_mlp", [&] {
            grid_forward();
            mlp_step(s);
        });
    } catch (const std::exception& ex) {
        results.push_back({{"batch", rows}, {"error", ex.what()}});
        std::printf("%-34s ERROR %s\n", "overlap", ex.what());
    }
    if (side) {
        (void)gpu_stream_synchronize(side);
        (void)gpu_stream_destroy(side);
    }
}

// --profile train_step: one Trainer::step of tcnn's benchmark (bench_model's fused step, 2^20 rows) inside
// the profiler's range, after the steps that capture and replay its graph.
int profile_train_step(const Stream& s) {
    const int64_t batch = int64_t(1) << 20;
    const Device dev = s.device();
    Trainer trainer(3, 16, model_config(), dev);
    Tensor x = upload(uniform(size_t(batch) * 3, 0.0f, 1.0f, 1), batch, 3, DType::f32, dev);
    Tensor target = upload(uniform(size_t(batch) * 16, 0.0f, 1.0f, 2), batch, 16, DType::f32, dev);
    for (int i = 0; i < 5; ++i) trainer.step(s, x.view(), target.view());
    s.synchronize();
    TNN_GPU_CHECK(cudaProfilerStart());
    trainer.step(s, x.view(), target.view());
    s.synchronize();
    TNN_GPU_CHECK(cudaProfilerStop());
    std::printf("bench_grid: profiled train_step (%lld graph steps)\n", static_cast<long long>(trainer.graph_steps()));
    return 0;
}

// --profile: one call of the main row's pass at 2^20 inside the profiler's range, after a warm-up call
// (the table in L2 as in the benchmark's back-to-back calls; run ncu with --cache-control none).
int profile_pass(const Options& o, const Stream& s) {
    const std::string& pass = o.profile;
    if (pass == "train_step") return profile_train_step(s);
    if (pass != "forward" && pass != "backward" && pass != "backward_det") {
        std::cerr << "bench_grid: --profile takes forward, backward, backward_det or train_step, not '" << pass
                  << "'\n";
        return 2;
    }
    const Row row{"hash3d_f2_L16_T19_fp16", 3, base_config(), DType::f16, int64_t(1) << 20, {pass}, o.morton};
    json config = row.config;
    config["deterministic"] = pass == "backward_det";
    auto enc = create_encoding(row.n_dims, config, row.dtype);
    RowData t = row_data(row, *enc, s.device());
    Tensor &params = t.params, &x = t.x, &dy = t.dy, &y = t.y, &grads = t.grads;
    auto ctx = enc->forward(s, x.view(), y.view(), params.data(), false);
    auto call = [&] {
        if (pass == "forward")
            enc->inference(s, x.view(), y.view(), params.data());
        else
            enc->backward(s, *ctx, x.view(), y.view(), dy.view(), nullptr, grads.data(), params.data(), GradMode::overwrite);
    };
    call();
    s.synchronize();
    TNN_GPU_CHECK(cudaProfilerStart());
    call();
    s.synchronize();
    TNN_GPU_CHECK(cudaProfilerStop());
    std::printf("bench_grid: profiled %s (%s rows)\n", pass.c_str(), o.morton ? "Morton-ordered" : "random");
    return 0;
}

json with(json base, const json& changes) {
    for (auto it = changes.begin(); it != changes.end(); ++it) base[it.key()] = it.value();
    return base;
}

}  // namespace

int main(int argc, char** argv) {
    const Options o = parse(argc, argv);
    if (!gpu_available()) {
        std::cerr << "bench_grid: no GPU\n";
        return 1;
    }
    gpu_stream_t native = nullptr;
    TNN_GPU_CHECK(gpu_stream_create_with_flags(&native, gpu_stream_non_blocking));
    const Stream s = Stream::gpu(native, 0);
    if (!o.profile.empty()) {
        const int rc = profile_pass(o, s);
        (void)gpu_stream_destroy(native);
        return rc;
    }
    json results = json::array();
    std::printf("== floors\n");
    const json floors = measure_floors(s);
    std::printf("%s\n", floors.dump(1).c_str());

    const std::vector<std::string> all = {"forward", "backward", "backward_det", "fwd_bwd", "fwd_bwd_det"};
    const std::vector<std::string> small = {"forward", "fwd_bwd", "fwd_bwd_det"};
    const json base = base_config();
    // The issue's rows: 2^20 and 2^21.
    for (int log2 : {20, 21})
        bench_row({"hash3d_f2_L16_T19_fp16", 3, base, DType::f16, int64_t(1) << log2, all}, o, s, results, {}, "auto");
    // Kernel variants of the main row at 2^20.
    auto main_row = [&](std::vector<std::string> passes) {
        return Row{"hash3d_f2_L16_T19_fp16", 3, base, DType::f16, int64_t(1) << 20, std::move(passes)};
    };
    const Row fwd = main_row({"forward"}), fast = main_row({"backward"}), det = main_row({"backward_det"}),
              bwd = main_row({"backward", "backward_det"});
    auto variant = [](const std::function<void(grid_gpu::Variant&)>& set) {
        grid_gpu::Variant v;
        set(v);
        return v;
    };
    if (!o.quick) {
        bench_row(fwd, o, s, results, variant([](auto& v) { v.chunked_loads = 0; }), "one_load_per_value");
        bench_row(fwd, o, s, results, variant([](auto& v) { v.forward_threads = 128; }), "forward_128_threads");
        bench_row(fwd, o, s, results, variant([](auto& v) { v.forward_threads = 512; }), "forward_512_threads");
        bench_row(bwd, o, s, results, variant([](auto& v) { v.shared_kib = 0; }), "no_shared_levels");
        bench_row(bwd, o, s, results, variant([](auto& v) { v.shared_kib = 48; }), "shared_48KiB");
        bench_row(fast, o, s, results, variant([](auto& v) { v.fast_mapping = 0; }), "fast_row_level_pairs");
        bench_row(fast, o, s, results, variant([](auto& v) { v.fast_mapping = 0; v.vector_atomics = 0; }),
                  "fast_row_level_scalar");
        bench_row(det, o, s, results, variant([](auto& v) { v.det_mapping = 0; }), "det_row_level");
        bench_row(det, o, s, results, variant([](auto& v) { v.det_mapping = 2; }), "det_corner_feature_lanes");
    }
    // The gradient's switches of the eleventh session (section 6 of bench/notes_grid.md), in QUICK runs
    // too: dL/dy copied to level-major order (off by default), the shared-memory levels beside the
    // global ones on a second stream (on), the mappings that were the defaults before the threads over
    // groups of levels (fast: per (row, level, corner); deterministic: per (row, level, feature)), and
    // the groups' size (32 MiB of accumulators by default since the thirteenth session, 16 before; 36 MiB
    // in fixed point since the twenty-sixth).
    bench_row(bwd, o, s, results, variant([](auto& v) { v.level_major_grads = 1; }), "level_major_grads");
    bench_row(bwd, o, s, results, variant([](auto& v) { v.overlap_shared = 0; }), "no_overlap");
    // Twelfth session: dL/dy of a (row, level) as one load (on) against a load per value.
    bench_row(bwd, o, s, results, variant([](auto& v) { v.vector_grad_loads = 0; }), "per_value_grad_loads");
    bench_row(fast, o, s, results, variant([](auto& v) { v.fast_mapping = 1; }), "fast_corner_lanes");
    // Thirteenth session: x-pairs sharing a 2-entry slot as one reduction from the lane of corner x (on)
    // against a reduction per lane, merged by the coalescer (section 8 of bench/notes_grid.md).
    bench_row(fast, o, s, results, variant([](auto& v) { v.slot_pairs = 0; }), "no_slot_pairs");
    bench_row(fast, o, s, results, variant([](auto& v) { v.fast_mapping = 1; v.slot_pairs = 0; }),
              "fast_corner_lanes_no_slot_pairs");
    bench_row(det, o, s, results, variant([](auto& v) { v.det_mapping = 1; }), "det_feature_lanes");
    // Twenty-first session: the deterministic gradient's x-pairs of adjacent entries as one sm_90 bulk
    // reduction each (on by default on CUDA devices) against 64-bit reductions per lane (section 16 of
    // bench/notes_grid.md), the backward alone and inside forward + backward.
    bench_row(main_row({"backward_det", "fwd_bwd_det"}), o, s, results, variant([](auto& v) { v.det_bulk = 0; }),
              "det_no_bulk");
    // The next lever of section 16: the dense levels 1-3 take ~0.25 ms of the deterministic backward (run 110,
    // same-address atomics in L2); with the opt-in budget level 1 fits a block's shared memory (162 KiB per
    // feature in the deterministic word slots; 221 KiB in the fast path's split fixed point, whose fp32
    // slots would be compare-and-swap loops). Last measured in run 5, before both paths' shared atomics
    // were native.
    // Run 111 (2026-12-02): slower, both (deterministic 1.673 ms against 1.538; fast 0.976 split and 1.275
    // against 0.912).
    bench_row(main_row({"backward_det", "fwd_bwd_det"}), o, s, results,
              variant([](auto& v) { v.shared_kib = 227; }), "det_shared_227KiB");
    bench_row(main_row({"backward", "fwd_bwd"}), o, s, results,
              variant([](auto& v) { v.shared_kib = 227; v.shared_fixed = 1; }), "shared_227KiB_split");
    bench_row(fast, o, s, results, variant([](auto& v) { v.shared_kib = 227; }), "shared_227KiB");
    // Twenty-second session: the deterministic conversion's dropped lines (discard_scratch) against kept
    // ones. (Copies of the coarse levels' accumulators, 2-16 per level, were measured in run 112 and
    // removed: no change, bench/notes_grid.md section 17.)
    bench_row(main_row({"backward_det", "fwd_bwd_det"}), o, s, results, variant([](auto& v) { v.discard_scratch = 0; }),
              "det_keep_scratch_lines");
    // Twenty-third session: the gradient's scratch zeroed and converted in parts, each group of levels' part
    // around its kernel while its lines are in L2 (staged_scratch, on), against the whole scratch zeroed
    // first and converted at the end.
    bench_row(main_row({"backward", "fwd_bwd", "backward_det", "fwd_bwd_det"}), o, s, results,
              variant([](auto& v) { v.staged_scratch = 0; }), "whole_scratch");
    // Twenty-fifth session: the bound pass as running maxima over the rows' chunks, with the exponents in
    // its last block (bound_chunks, on), against the thread per row with a warp maximum per level and the
    // exponent kernel; the scratch's parts zeroed in fewer launches (fused_zeroing, on) against a memset
    // per part; at both sizes of the issue's rows.
    for (int log2 : {20, 21}) {
        const Row det_row{"hash3d_f2_L16_T19_fp16", 3, base, DType::f16, int64_t(1) << log2, {"backward_det"}};
        bench_row(det_row, o, s, results, variant([](auto& v) { v.bound_chunks = 0; }), "det_bound_rows");
        bench_row(det_row, o, s, results, variant([](auto& v) { v.fused_zeroing = 0; }), "det_memset_parts");
    }
    bench_row(main_row({"backward"}), o, s, results, variant([](auto& v) { v.fused_zeroing = 0; }), "memset_parts");
    // (48 and 64 MiB were slower still in run 77: 1.170 and 1.391 ms against 0.986.)
    // Twenty-sixth session: groups a little over 32 MiB (32 / 36 / 44, at 2^21 too). The deterministic main
    // row's 64-bit accumulators take 3.6 MB for the dense levels 0-3 and 8 MiB per hashed level (4-15), so
    // 32 MiB makes four groups (up to level 6, 7-10, 11-14, and 15 alone: 97 us of the 1323 in run 123),
    // 36 MiB three (up to 7, 8-11, 12-15), 44 MiB three (up to 8, 9-13, 14-15). The fast path's fp32
    // groups: two either way. Run 126: 36 MiB faster for the deterministic backward (1.448 against 1.459 ms
    // at 2^20, 2.783 against 2.809 at 2^21), 0.2% slower for the fast one (0.904 against 0.902); 44 MiB
    // slower for both. Since then the default is 36 MiB in fixed point, 32 in fp32: of the 32 and 36 MiB
    // rows, each is the other path's default.
    const Row det_2m{"hash3d_f2_L16_T19_fp16", 3, base, DType::f16, int64_t(1) << 21, {"backward_det"}};
    for (int mib : {8, 16, 32, 36, 44}) {
        const std::string name = "level_groups_" + std::to_string(mib) + "MiB";
        bench_row(bwd, o, s, results, variant([&](auto& v) { v.level_group_kib = mib * 1024; }), name);
        if (mib >= 32)
            bench_row(det_2m, o, s, results, variant([&](auto& v) { v.level_group_kib = mib * 1024; }), name);
    }
    // Fourteenth session: L2 eviction hints in the fast gradient over groups of levels (on by default since
    // run 79): the x and dL/dy loads evict-first, with the reductions evict-last (1) or without (2).
    // Fifteenth: with fwd_bwd too (a forward after the backward: run 81 measured fwd_bwd 50 us above
    // forward + backward with the evict-last lines left in L2), and those lines kept (no discard).
    const Row hints = main_row({"backward", "fwd_bwd"});
    bench_row(hints, o, s, results, variant([](auto& v) { v.l2_hints = 0; }), "no_l2_hints");
    bench_row(hints, o, s, results, variant([](auto& v) { v.l2_hints = 2; }), "l2_hints_loads_only");
    bench_row(hints, o, s, results, variant([](auto& v) { v.discard_scratch = 0; }), "keep_scratch_lines");
    // The locality experiment (section 5 of bench/notes_grid.md): the main row's passes on the same
    // rows in Morton order, and the device sort's cost. In QUICK runs too: it is what is being decided.
    json locality = json::array();
    bench_row({"hash3d_f2_L16_T19_fp16", 3, base, DType::f16, int64_t(1) << 20, {"forward", "backward", "fwd_bwd"}, true},
              o, s, results, {}, "morton_sorted_rows");
    // Smaller rows (2^20): dimensions, features per level, grid types, interpolations, precisions.
    const int64_t b20 = int64_t(1) << 20;
    const std::vector<Row> rows = {
        {"hash2d_f2_L16_T19_fp16", 2, base, DType::f16, b20, small},
        {"hash4d_f2_L16_T19_fp16", 4, base, DType::f16, b20, small},
        {"hash3d_f1_L16_T19_fp16", 3, with(base, {{"n_features_per_level", 1}}), DType::f16, b20, small},
        {"hash3d_f4_L8_T19_fp16", 3, with(base, {{"n_features_per_level", 4}, {"n_levels", 8}}), DType::f16, b20, small},
        {"hash3d_f8_L4_T19_fp16", 3, with(base, {{"n_features_per_level", 8}, {"n_levels", 4}}), DType::f16, b20, small},
        {"dense3d_f2_L4_fp16", 3, with(base, {{"otype", "DenseGrid"}, {"n_levels", 4}, {"per_level_scale", 2.0}}),
         DType::f16, b20, small},
        {"tiled3d_f2_L16_fp16", 3, with(base, {{"otype", "TiledGrid"}}), DType::f16, b20, small},
        {"hash3d_nearest_fp16", 3, with(base, {{"interpolation", "Nearest"}}), DType::f16, b20, small},
        {"hash3d_smoothstep_fp16", 3, with(base, {{"interpolation", "Smoothstep"}}), DType::f16, b20, small},
        {"hash3d_f2_L16_T19_fp32", 3, base, DType::f32, b20, small},
        {"hash3d_f2_L16_T19_bf16", 3, base, DType::bf16, b20, small},
    };
    if (!o.quick)
        for (const Row& r : rows) bench_row(r, o, s, results, {}, "auto");
    // Fourteenth session: the shared-memory levels' slots in split fixed point (two native integer atomics
    // per value) against fp32 slots (compare-and-swap loops), in QUICK runs too, on the rows whose
    // gradient is mostly shared-memory levels, and on the main row (level 0, beside the global levels).
    bench_row(fast, o, s, results, variant([](auto& v) { v.shared_fixed = 1; }), "shared_fixed");
    for (const Row& r : {rows[0], rows[5], rows[6]}) {  // 2D, Dense, Tiled
        Row fb = r;
        fb.passes = {"fwd_bwd"};
        if (o.quick) bench_row(fb, o, s, results, {}, "auto");
        bench_row(fb, o, s, results, variant([](auto& v) { v.shared_fixed = 1; }), "shared_fixed");
    }
    {  // fp32 parameters: the gradient goes straight into the caller's fp32 buffer (no scratch to drop from
       // L2), so since 34966fe only the loads get hints there (l2_hints 2); 1 is the fourteenth session's
       // default, whose evict-last reductions leave the caller's lines marked after the call. Backward and
       // a forward after it, both ways, in QUICK runs too.
        Row fp32 = rows[9];
        fp32.passes = o.quick ? std::vector<std::string>{"backward", "fwd_bwd"}
                              : std::vector<std::string>{"backward"};  // fwd_bwd: with the rows above
        bench_row(fp32, o, s, results, {}, "auto");
        fp32.passes = {"backward", "fwd_bwd"};
        bench_row(fp32, o, s, results, variant([](auto& v) { v.l2_hints = 1; }), "fp32_reductions_evict_last");
    }
    {  // Seventeenth session: the deterministic gradient's shared-memory levels in three native 32-bit words
       // per value (Variant::det_shared_words, the default on CUDA devices since run 91) against 64-bit slots,
       // whose shared atomics are compare-and-swap loops, in QUICK runs too: Tiled (all levels in shared
       // memory), Dense and 2D (some levels), the main row (level 0: 16^3 entries, one feature per 48 KiB
       // block either way). Run 91: 1.840 / 6.406, 0.592 / 0.614, 1.152 / 1.224, 1.952 / 1.972 ms.
        for (size_t i : {6, 5, 0}) {  // Tiled, Dense, 2D
            Row fb = rows[i];
            fb.passes = {"fwd_bwd_det"};
            if (o.quick) bench_row(fb, o, s, results, {}, "auto");
            bench_row(fb, o, s, results, variant([](auto& v) { v.det_shared_words = 0; }), "det_u64_slots");
        }
        bench_row(det, o, s, results, variant([](auto& v) { v.det_shared_words = 0; }), "det_u64_slots");
    }
    {  // Tiled: split fixed point with 96 KiB per block is its default since run 79 (1.536 ms against 1.871
       // with 48 KiB and 4.030 with fp32 slots); the fp32 slots stay measured.
        Row fb = rows[6];
        fb.passes = {"fwd_bwd"};
        bench_row(fb, o, s, results, variant([](auto& v) { v.shared_fixed = 0; }), "fp32_shared_slots");
    }

    // tcnn's encoding + MLP training step and inference (2^18 and 2^20 rows).
    json model = json::array();
    for (int log2 : {18, 20}) bench_model(int64_t(1) << log2, o, s, model);
    json overlap = json::array();
    bench_overlap(int64_t(1) << 20, o, s, overlap);
    auto write = [&] {
        const json doc = {{"device", gpu_device_description(0)}, {"version", version()}, {"floors", floors},
                          {"results", results}, {"model", model}, {"locality", locality}, {"overlap", overlap}};
        std::ofstream(o.out) << doc.dump(1) << "\n";
    };
    // Last, with everything above written first: CUB's sort under graph capture is the one new thing
    // here, and a crash or a timeout in it must not lose the rows above.
    write();
    bench_sort_cost(int64_t(1) << 20, o, s, locality);
    write();
    (void)gpu_stream_destroy(native);
    std::printf("bench_grid: wrote %s\n", o.out.c_str());
    return 0;
}
