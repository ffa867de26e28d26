// Probe for issue #9's deterministic gradient: can sm_90's bulk reductions from shared memory
// (cp.reduce.async.bulk ... .add.u64, issued by one thread for 16 or 32 contiguous bytes) carry the
// 64-bit fixed-point contributions of an x-pair with fewer L2 operations than today's per-lane
// red.global.add.u64? A standalone program (no library code): the figures decide whether a kernel is
// worth writing (bench/notes_grid.md, "Design": the deterministic x-pairs).
//
// Today's deterministic corner kernel (a thread per (row, feature)) sends an entry's two u64 words
// from two lanes of one instruction; the L2 takes such a merged request at about 1.4 single
// reductions' worth (bench/notes_grid.md, "Rates"), and integer reductions have no vector form. A bulk reduction moves
// up to a whole x-pair (two 16-byte entries when they are contiguous) in one operation, but it is
// issued by the TMA unit, whose rate for small operations is unknown: that is what this measures.
//
// Every pattern adds into one level of 2^19 entries of F = 2 u64 words (8 MiB, L2-resident), rows at
// random entries (m = x ^ (x + 1) for the x-neighbour, as the CoherentPrime hash gives), and checks
// that the sum of all words equals the number of values added (each value is 1).
// Build: nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a bench/bulk_reduce_probe.cu -o bulk_reduce_probe
// Run:   ./bulk_reduce_probe [out.json]   (prints a table; exit 1 if a sum is wrong)
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <initializer_list>
#include <string>
#include <vector>

#include "probe_check.h"

constexpr uint32_t kEntries = 1u << 19;  // one level of the main row
constexpr int kThreads = 256;
constexpr int kRing = 4;  // staged bulk operations in flight per thread

__device__ __forceinline__ uint32_t mix(uint32_t x) {  // a cheap integer hash: random addresses
    x ^= x >> 16;
    x *= 0x7feb352dU;
    x ^= x >> 15;
    x *= 0x846ca68bU;
    x ^= x >> 16;
    return x;
}

// The x-pair of item k of pair q: entry e0 and its neighbour e1 = e0 ^ m.
__device__ __forceinline__ void xpair(uint32_t q, int k, uint32_t& e0, uint32_t& e1) {
    const uint32_t r = mix(q * 64u + uint32_t(k));
    const uint32_t x = mix(r ^ 0x9e3779b9u);
    e0 = r & (kEntries - 1);
    e1 = e0 ^ ((x ^ (x + 1)) & (kEntries - 1));
}

__device__ __forceinline__ void red_u64(unsigned long long* p, unsigned long long v) {
    asm volatile("red.global.add.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

__device__ __forceinline__ uint32_t smem_addr(const void* p) { return static_cast<uint32_t>(__cvta_generic_to_shared(p)); }

// Stages n (an even number of) words of 1 at shared address s and reduces them into global p (bytes = 8 n).
__device__ __forceinline__ void bulk_add(unsigned long long* p, uint32_t s, uint32_t n) {
    const unsigned long long one = 1;
    for (uint32_t w = 0; w < n; w += 2)
        asm volatile("st.shared.v2.u64 [%0], {%1, %2};" ::"r"(s + 8 * w), "l"(one), "l"(one) : "memory");
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.u64 [%0], [%1], %2;" ::"l"(p), "r"(s),
                 "r"(8 * n)
                 : "memory");
}
__device__ __forceinline__ void bulk_commit() { asm volatile("cp.async.bulk.commit_group;" ::: "memory"); }
template <int N> __device__ __forceinline__ void bulk_wait_read() {
    asm volatile("cp.async.bulk.wait_group.read %0;" ::"n"(N) : "memory");
}
__device__ __forceinline__ void bulk_wait_all() { asm volatile("cp.async.bulk.wait_group 0;" ::: "memory"); }

// Pattern 0, today's deterministic kernel: a thread per (pair, feature); each lane adds its feature's
// word of e0 and of e1 (the two lanes of a pair are merged into one request per entry).
__global__ void lanes_kernel(unsigned long long* acc, int per_thread) {
    const uint32_t t = blockIdx.x * blockDim.x + threadIdx.x, q = t >> 1, f = t & 1;
    for (int k = 0; k < per_thread; ++k) {
        uint32_t e0, e1;
        xpair(q, k, e0, e1);
        red_u64(acc + 2 * size_t(e0) + f, 1);
        red_u64(acc + 2 * size_t(e1) + f, 1);
    }
}

// Pattern 1: a thread per pair, its four words as four single reductions.
__global__ void one_lane_kernel(unsigned long long* acc, int per_thread) {
    const uint32_t q = blockIdx.x * blockDim.x + threadIdx.x;
    for (int k = 0; k < per_thread; ++k) {
        uint32_t e0, e1;
        xpair(q, k, e0, e1);
        red_u64(acc + 2 * size_t(e0), 1);
        red_u64(acc + 2 * size_t(e0) + 1, 1);
        red_u64(acc + 2 * size_t(e1), 1);
        red_u64(acc + 2 * size_t(e1) + 1, 1);
    }
}

// Pattern 2 (MERGE): a thread per pair, bulk reductions: one of 32 bytes when e0 and e1 are adjacent
// entries, else two of 16. Pattern 3 (!MERGE): always two of 16 bytes.
template <bool MERGE> __global__ void bulk_kernel(unsigned long long* acc, int per_thread) {
    __shared__ __align__(16) unsigned long long stage[kThreads * kRing * 4];
    const uint32_t q = blockIdx.x * blockDim.x + threadIdx.x;
    unsigned long long* mine = stage + threadIdx.x * kRing * 4;
    for (int k = 0; k < per_thread; ++k) {
        uint32_t e0, e1;
        xpair(q, k, e0, e1);
        bulk_wait_read<kRing - 1>();  // the slot of k - kRing has been read
        const uint32_t s = smem_addr(mine + (k % kRing) * 4);
        const uint32_t lo = min(e0, e1);
        if (MERGE && (e0 ^ e1) == 1u) {
            bulk_add(acc + 2 * size_t(lo), s, 4);
        } else {
            bulk_add(acc + 2 * size_t(e0), s, 2);
            bulk_add(acc + 2 * size_t(e1), s + 16, 2);
        }
        bulk_commit();
    }
    bulk_wait_all();
}

// Pattern 7 (mixed): a thread per (pair, feature) as today, but a pair of adjacent entries leaves as
// one bulk reduction of 32 bytes from the lane of feature 0 (the other lane idles), other pairs as
// today's red.u64 per lane. Shows whether the bulk path (the TMA) and the lanes' reductions add up
// or overlap.
__global__ void mixed_kernel(unsigned long long* acc, int per_thread) {
    __shared__ __align__(16) unsigned long long stage[kThreads * kRing * 4];
    const uint32_t t = blockIdx.x * blockDim.x + threadIdx.x, q = t >> 1, f = t & 1;
    unsigned long long* mine = stage + threadIdx.x * kRing * 4;
    for (int k = 0; k < per_thread; ++k) {
        uint32_t e0, e1;
        xpair(q, k, e0, e1);
        if ((e0 ^ e1) == 1u) {
            if (f == 0) {
                bulk_wait_read<kRing - 1>();
                bulk_add(acc + 2 * size_t(min(e0, e1)), smem_addr(mine + (k % kRing) * 4), 4);
                bulk_commit();
            }
        } else {
            red_u64(acc + 2 * size_t(e0) + f, 1);
            red_u64(acc + 2 * size_t(e1) + f, 1);
        }
    }
    bulk_wait_all();
}

// Pattern 8 (concurrent): even warps issue bulk reductions of 16 bytes, odd warps red.u64, at random
// entries, per_thread each: against the two alone (patterns 4 and 6 at half the threads), tells
// whether the TMA's rate or the L2 bounds the bulk path.
__global__ void concurrent_kernel(unsigned long long* acc, int per_thread) {
    __shared__ __align__(16) unsigned long long stage[kThreads * kRing * 4];
    const uint32_t q = blockIdx.x * blockDim.x + threadIdx.x;
    unsigned long long* mine = stage + threadIdx.x * kRing * 4;
    if ((threadIdx.x >> 5) & 1u) {
        for (int k = 0; k < per_thread; ++k) red_u64(acc + (mix(q * 64u + uint32_t(k)) & (2 * kEntries - 1)), 1);
        return;
    }
    for (int k = 0; k < per_thread; ++k) {
        const uint32_t e = mix(q * 64u + uint32_t(k)) & (kEntries - 1);
        bulk_wait_read<kRing - 1>();
        bulk_add(acc + 2 * size_t(e), smem_addr(mine + (k % kRing) * 4), 2);
        bulk_commit();
    }
    bulk_wait_all();
}

// Pattern 4: single bulk reductions of 16 bytes at random entries (the rate of the primitive).
// Pattern 5: of 32 bytes at random aligned entry pairs.
template <uint32_t N> __global__ void bulk_random_kernel(unsigned long long* acc, int per_thread) {
    __shared__ __align__(16) unsigned long long stage[kThreads * kRing * 4];
    const uint32_t q = blockIdx.x * blockDim.x + threadIdx.x;
    unsigned long long* mine = stage + threadIdx.x * kRing * 4;
    for (int k = 0; k < per_thread; ++k) {
        const uint32_t e = mix(q * 64u + uint32_t(k)) & (kEntries - 1) & (N == 4 ? ~1u : ~0u);
        bulk_wait_read<kRing - 1>();
        bulk_add(acc + 2 * size_t(e), smem_addr(mine + (k % kRing) * 4), N);
        bulk_commit();
    }
    bulk_wait_all();
}

// Pattern 9: bulk reductions of N words at random N-word-aligned places (dynamic shared memory: kRing
// slots of 8 N bytes per thread), the rate against the size.
template <uint32_t N> __global__ void bulk_sized_kernel(unsigned long long* acc, int per_thread) {
    extern __shared__ __align__(16) unsigned long long dyn[];
    const uint32_t q = blockIdx.x * blockDim.x + threadIdx.x;
    unsigned long long* mine = dyn + threadIdx.x * kRing * N;
    for (int k = 0; k < per_thread; ++k) {
        const uint32_t e = mix(q * 64u + uint32_t(k)) & (kEntries - 1) & ~(N / 2 - 1);
        bulk_wait_read<kRing - 1>();
        bulk_add(acc + 2 * size_t(e), smem_addr(mine + (k % kRing) * N), N);
        bulk_commit();
    }
    bulk_wait_all();
}

// Pattern 10 (mixed4): as pattern 7, and pairs with m = 3 (entries e and e ^ 3, both in one aligned block
// of 4 entries) as one bulk reduction of the whole 64-byte block, zeros for the two other entries
// (integer sums do not change). A ring of 64-byte slots per pair (static: 128 pairs per block).
__global__ void mixed4_kernel(unsigned long long* acc, int per_thread) {
    __shared__ __align__(16) unsigned long long stage[kThreads / 2 * kRing * 8];
    const uint32_t t = blockIdx.x * blockDim.x + threadIdx.x, q = t >> 1, f = t & 1;
    const uint32_t slots = smem_addr(stage + (threadIdx.x >> 1) * kRing * 8);
    int issued = 0;
    for (int k = 0; k < per_thread; ++k) {
        uint32_t e0, e1;
        xpair(q, k, e0, e1);
        const uint32_t m = e0 ^ e1;
        if (m == 1u || m == 3u) {
            if (f == 0) {
                if (issued >= kRing) bulk_wait_read<kRing - 1>();
                const uint32_t s = slots + (issued % kRing) * 64;
                const uint32_t n = m == 1u ? 4 : 8, base = e0 & ~(m);
                // the block's words: 1 for e0 and e1, 0 for the others (m = 3)
                for (uint32_t w = 0; w < n; w += 2) {
                    const uint32_t entry = base + w / 2;
                    const unsigned long long v = (entry == e0 || entry == e1) ? 1ull : 0ull;
                    asm volatile("st.shared.v2.u64 [%0], {%1, %2};" ::"r"(s + 8 * w), "l"(v), "l"(v) : "memory");
                }
                asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
                asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.u64 [%0], [%1], %2;" ::"l"(
                                 acc + 2 * size_t(base)),
                             "r"(s), "r"(8 * n)
                             : "memory");
                bulk_commit();
                ++issued;
            }
        } else {
            red_u64(acc + 2 * size_t(e0) + f, 1);
            red_u64(acc + 2 * size_t(e1) + f, 1);
        }
    }
    bulk_wait_all();
}

// Pattern 11 (arrays): as pattern 7, and pairs with m = 3 (ARRAYS >= 2) and m = 7 (ARRAYS >= 3) as one
// bulk reduction of 32 bytes too, into a second / third level-sized array laid out so that e and e ^ m
// share a 32-byte block (position (e & ~m) | 2 min(v, v ^ m) | (v > v ^ m), v = e & m); the conversion
// would add the arrays. Other pairs as today's lanes.
__device__ __forceinline__ uint32_t xpair_position(uint32_t e, uint32_t m) {
    const uint32_t v = e & m, w = v ^ m;
    return (e & ~m) | (2u * min(v, w)) | (v > w ? 1u : 0u);
}
template <int ARRAYS> __global__ void arrays_kernel(unsigned long long* acc, unsigned long long* b3,
                                                    unsigned long long* b7, int per_thread) {
    __shared__ __align__(16) unsigned long long stage[kThreads / 2 * kRing * 4];
    const uint32_t t = blockIdx.x * blockDim.x + threadIdx.x, q = t >> 1, f = t & 1;
    const uint32_t slots = smem_addr(stage + (threadIdx.x >> 1) * kRing * 4);
    int issued = 0;
    for (int k = 0; k < per_thread; ++k) {
        uint32_t e0, e1;
        xpair(q, k, e0, e1);
        const uint32_t m = e0 ^ e1;
        unsigned long long* base = nullptr;
        if (m == 1u) base = acc;
        if (ARRAYS >= 2 && m == 3u) base = b3;
        if (ARRAYS >= 3 && m == 7u) base = b7;
        if (base) {
            if (f == 0) {
                if (issued >= kRing) bulk_wait_read<kRing - 1>();
                const uint32_t pos = xpair_position(e0, m) & ~1u;
                bulk_add(base + 2 * size_t(pos), slots + (issued % kRing) * 32, 4);
                bulk_commit();
                ++issued;
            }
        } else {
            red_u64(acc + 2 * size_t(e0) + f, 1);
            red_u64(acc + 2 * size_t(e1) + f, 1);
        }
    }
    bulk_wait_all();
}

// Pattern 6: single red.global.add.u64 at random words (reference for one lane reduction).
__global__ void red_random_kernel(unsigned long long* acc, int per_thread) {
    const uint32_t q = blockIdx.x * blockDim.x + threadIdx.x;
    for (int k = 0; k < per_thread; ++k) red_u64(acc + (mix(q * 64u + uint32_t(k)) & (2 * kEntries - 1)), 1);
}

__global__ void sum_kernel(const unsigned long long* acc, size_t n, unsigned long long* out) {
    unsigned long long s = 0;
    for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
        s += acc[i];
    atomicAdd(out, s);
}

struct Result {
    std::string name, unit;
    double ms, per_s;
    bool sum_ok;
};

int main(int argc, char** argv) {
    cudaDeviceProp prop{};
    CHECK(cudaGetDeviceProperties(&prop, 0));
    if (prop.major < 9) {
        std::fprintf(stderr, "bulk_reduce_probe: needs sm_90 (found sm_%d%d)\n", prop.major, prop.minor);
        return 2;
    }
    unsigned long long *acc = nullptr, *sum = nullptr;
    const size_t words = 2 * size_t(kEntries);
    CHECK(cudaMalloc(&acc, words * 8));
    CHECK(cudaMalloc(&sum, 8));
    cudaEvent_t t0, t1;
    CHECK(cudaEventCreate(&t0));
    CHECK(cudaEventCreate(&t1));
    const int per_thread = 8, blocks = (1 << 22) / kThreads;
    const double threads = double(blocks) * kThreads;
    std::vector<Result> results;
    // Times `launch` (fastest of 7 after a warm-up) and checks the sum of the words of `arrays` (each a
    // level of `words` u64, zeroed first) against `values` (one launch's worth).
    auto run_arrays = [&](const char* name, const char* unit, double items, double values,
                          std::initializer_list<unsigned long long*> arrays, auto launch) {
        for (unsigned long long* p : arrays) CHECK(cudaMemset(p, 0, words * 8));
        launch();
        CHECK(cudaGetLastError());
        CHECK(cudaMemset(sum, 0, 8));
        for (unsigned long long* p : arrays) sum_kernel<<<264, 256>>>(p, words, sum);
        unsigned long long got = 0;
        CHECK(cudaMemcpy(&got, sum, 8, cudaMemcpyDeviceToHost));
        float best = 1e30f;
        for (int i = 0; i < 7; ++i) {
            CHECK(cudaEventRecord(t0));
            launch();
            CHECK(cudaEventRecord(t1));
            CHECK(cudaEventSynchronize(t1));
            float ms = 0;
            CHECK(cudaEventElapsedTime(&ms, t0, t1));
            best = std::min(best, ms);
        }
        results.push_back({name, unit, best, items / (best * 1e-3), got == static_cast<unsigned long long>(values)});
    };
    // The same for the patterns that add into `acc` only.
    auto run = [&](const char* name, const char* unit, double items, double values, auto launch) {
        run_arrays(name, unit, items, values, {acc}, launch);
    };
    const double pairs_lanes = threads / 2 * per_thread, pairs = threads * per_thread;
    run("lanes_u64 (today: a lane per feature, 2 x red.u64)", "x-pairs", pairs_lanes, pairs_lanes * 4,
        [&] { lanes_kernel<<<blocks, kThreads>>>(acc, per_thread); });
    run("one_lane_u64 (a lane per pair, 4 x red.u64)", "x-pairs", pairs, pairs * 4,
        [&] { one_lane_kernel<<<blocks, kThreads>>>(acc, per_thread); });
    run("bulk_merged (32 B when adjacent, else 2 x 16 B)", "x-pairs", pairs, pairs * 4,
        [&] { bulk_kernel<true><<<blocks, kThreads>>>(acc, per_thread); });
    run("bulk_entries (2 x 16 B)", "x-pairs", pairs, pairs * 4,
        [&] { bulk_kernel<false><<<blocks, kThreads>>>(acc, per_thread); });
    run("bulk16_random", "ops", pairs, pairs * 2, [&] { bulk_random_kernel<2><<<blocks, kThreads>>>(acc, per_thread); });
    run("bulk32_random", "ops", pairs, pairs * 4, [&] { bulk_random_kernel<4><<<blocks, kThreads>>>(acc, per_thread); });
    run("red_u64_random", "ops", pairs, pairs, [&] { red_random_kernel<<<blocks, kThreads>>>(acc, per_thread); });
    // The mixed pattern adds 4 values per pair either way.
    run("mixed (32 B bulk when adjacent, else today's lanes)", "x-pairs", pairs_lanes, pairs_lanes * 4,
        [&] { mixed_kernel<<<blocks, kThreads>>>(acc, per_thread); });
    run("bulk16_random, half the threads", "ops", pairs / 2, pairs, [&] {
        bulk_random_kernel<2><<<blocks / 2, kThreads>>>(acc, per_thread);
    });
    run("red_u64_random, half the threads", "ops", pairs / 2, pairs / 2,
        [&] { red_random_kernel<<<blocks / 2, kThreads>>>(acc, per_thread); });
    run("concurrent: half bulk16, half red_u64 (both counted)", "ops", pairs, pairs / 2 * 3,
        [&] { concurrent_kernel<<<blocks, kThreads>>>(acc, per_thread); });
    run("mixed4 (32 B bulk for m = 1, 64 B for m = 3, else lanes)", "x-pairs", pairs_lanes, pairs_lanes * 4,
        [&] { mixed4_kernel<<<blocks, kThreads>>>(acc, per_thread); });
    {  // the extra arrays: the sum over all three is checked
        unsigned long long *b3 = nullptr, *b7 = nullptr;
        CHECK(cudaMalloc(&b3, words * 8));
        CHECK(cudaMalloc(&b7, words * 8));
        run_arrays("arrays: m = 1 in acc, m = 3 in a second array (32 B bulk), else lanes", "x-pairs", pairs_lanes,
                   pairs_lanes * 4, {acc, b3, b7},
                   [&] { arrays_kernel<2><<<blocks, kThreads>>>(acc, b3, b7, per_thread); });
        run_arrays("arrays: m = 1, 3, 7 in three arrays (32 B bulk), else lanes", "x-pairs", pairs_lanes,
                   pairs_lanes * 4, {acc, b3, b7},
                   [&] { arrays_kernel<3><<<blocks, kThreads>>>(acc, b3, b7, per_thread); });
        CHECK(cudaFree(b3));
        CHECK(cudaFree(b7));
    }
    auto sized = [&](auto kernel, uint32_t n, const char* name) {
        const int bytes = kThreads * kRing * int(n) * 8;
        CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
        run(name, "ops", pairs, pairs * n, [&] { kernel<<<blocks, kThreads, bytes>>>(acc, per_thread); });
    };
    sized(bulk_sized_kernel<4>, 4, "bulk 32 B, dynamic shared memory");
    sized(bulk_sized_kernel<8>, 8, "bulk 64 B");
    sized(bulk_sized_kernel<16>, 16, "bulk 128 B");

    bool ok = true;
    std::printf("| pattern | unit | ms | G per s | sum |\n|---|---|---|---|---|\n");
    for (const Result& r : results) {
        std::printf("| %s | %s | %.3f | %.1f | %s |\n", r.name.c_str(), r.unit.c_str(), r.ms, r.per_s * 1e-9,
                    r.sum_ok ? "ok" : "WRONG");
        ok = ok && r.sum_ok;
    }
    if (argc > 1) {
        FILE* f = std::fopen(argv[1], "w");
        if (!f) {
            std::fprintf(stderr, "cannot write %s\n", argv[1]);
            return 2;
        }
        std::fprintf(f, "{\"device\": \"%s\", \"results\": [", prop.name);
        for (size_t i = 0; i < results.size(); ++i)
            std::fprintf(f, "%s{\"pattern\": \"%s\", \"unit\": \"%s\", \"ms\": %.6f, \"per_s\": %.6e, \"sum_ok\": %s}",
                         i ? ", " : "", results[i].name.c_str(), results[i].unit.c_str(), results[i].ms,
                         results[i].per_s, results[i].sum_ok ? "true" : "false");
        std::fprintf(f, "]}\n");
        std::fclose(f);
    }
    return ok ? 0 : 1;
}
