// Probe for issue #9's deterministic bound pass (bench/notes_grid.md, "Measured and not kept": the bound pass split in two): what does reading part
// of each 64-byte row of dL/dy from DRAM cost against reading the whole row? The split bound pass of the
// twenty-seventh session read the first 32 bytes of every row in one part and the last 32 in the other,
// and was slower than one pass over whole rows. If the memory system fetches more than a 32-byte sector
// per miss, half a row costs about as much as the whole one, and no split along a 64-byte row can gain.
// A standalone program (no library code).
//
// The rows: 2^22 of 64 bytes (256 MiB, four times the H200's L2, so that every pass streams from DRAM),
// read as 16-byte chunks (uint4 loads, a thread per chunk, four loads in flight per thread, a grid of
// 8 blocks of 256 threads per SM walking the rows). Patterns: which chunks of a row are read (a mask of
// the four) and every row or every second one. Each pattern's median time over 15 passes; the bytes are
// what the loads ask for, the "vs whole" column the time against reading every whole row.
// Build: nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a bench/row_read_probe.cu -o row_read_probe
// Run:   ./row_read_probe [out.json]   (prints a table)
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "probe_check.h"

constexpr int64_t kRows = int64_t(1) << 22;
constexpr int kChunksPerRow = 4;  // 16-byte chunks of a 64-byte row
constexpr int kThreads = 256;
constexpr int kBatch = 4;  // loads in flight per thread

struct Pattern {
    const char* name;
    unsigned mask;  // chunks read, bit c for chunk c
    int row_step;   // 1: every row, 2: every second row
};

// Thread i of the grid takes item i, i + grid, ... where item = (row / row_step) * 2^shift + k reads chunk
// chunks[k] of that row (1, 2 or 4 chunks per row). The maxima of the words keep the loads alive; one word per block goes out.
__global__ void __launch_bounds__(kThreads)
    read_kernel(const uint4* __restrict__ rows, int shift, int4 chunks, int row_step, int64_t items,
                unsigned* __restrict__ sink) {
    const int list[4] = {chunks.x, chunks.y, chunks.z, chunks.w};
    const int64_t stride = int64_t(gridDim.x) * blockDim.x;
    unsigned m = 0;
    for (int64_t i0 = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i0 < items; i0 += kBatch * stride) {
        uint4 v[kBatch];
#pragma unroll
        for (int u = 0; u < kBatch; ++u) {
            const int64_t i = i0 + u * stride;
            v[u] = make_uint4(0u, 0u, 0u, 0u);
            if (i < items) v[u] = rows[(i >> shift) * row_step * kChunksPerRow + list[i & ((1 << shift) - 1)]];
        }
#pragma unroll
        for (int u = 0; u < kBatch; ++u) m = max(m, max(max(v[u].x, v[u].y), max(v[u].z, v[u].w)));
    }
    __shared__ unsigned block_max;
    if (threadIdx.x == 0) block_max = 0;
    __syncthreads();
    atomicMax(&block_max, m);
    __syncthreads();
    if (threadIdx.x == 0) sink[blockIdx.x] = block_max;
}

int main(int argc, char** argv) {
    cudaDeviceProp prop{};
    CHECK(cudaGetDeviceProperties(&prop, 0));
    const size_t bytes = size_t(kRows) * kChunksPerRow * sizeof(uint4);
    uint4* rows = nullptr;
    unsigned* sink = nullptr;
    const int blocks = prop.multiProcessorCount * 8;
    CHECK(cudaMalloc(&rows, bytes));
    CHECK(cudaMalloc(&sink, size_t(blocks) * sizeof(unsigned)));
    CHECK(cudaMemset(rows, 0x11, bytes));
    const std::vector<Pattern> patterns = {
        {"whole rows (chunks 0-3)", 0xFu, 1},
        {"first half (chunks 0-1, sector 0)", 0x3u, 1},
        {"second half (chunks 2-3, sector 1)", 0xCu, 1},
        {"one chunk per sector (chunks 0, 2)", 0x5u, 1},
        {"first chunk (chunk 0)", 0x1u, 1},
        {"every second row, whole", 0xFu, 2},
        {"every second row, first half", 0x3u, 2},
    };
    cudaEvent_t start, stop;
    CHECK(cudaEventCreate(&start));
    CHECK(cudaEventCreate(&stop));
    struct Result {
        std::string name;
        double ms, requested_mb, gbps;
    };
    std::vector<Result> results;
    for (const Pattern& p : patterns) {
        int list[4] = {0, 0, 0, 0}, n = 0;
        for (int c = 0; c < kChunksPerRow; ++c)
            if (p.mask & (1u << c)) list[n++] = c;
        const int64_t items = kRows / p.row_step * n;
        const int4 chunks = make_int4(list[0], list[1], list[2], list[3]);
        std::vector<float> times;
        for (int pass = 0; pass < 17; ++pass) {
            CHECK(cudaEventRecord(start));
            read_kernel<<<blocks, kThreads>>>(rows, n == 4 ? 2 : n == 2 ? 1 : 0, chunks, p.row_step, items, sink);
            CHECK(cudaEventRecord(stop));
            CHECK(cudaEventSynchronize(stop));
            float ms = 0.0f;
            CHECK(cudaEventElapsedTime(&ms, start, stop));
            if (pass >= 2) times.push_back(ms);  // two warm-ups
        }
        CHECK(cudaGetLastError());
        std::sort(times.begin(), times.end());
        const double ms = times[times.size() / 2];
        const double requested = double(items) * sizeof(uint4);
        results.push_back({p.name, ms, requested / 1e6, requested / (ms * 1e-3) / 1e9});
    }
    const double whole = results[0].ms;
    std::printf("Device: %s (%d SMs, L2 %d MiB); %lld rows of 64 bytes (%zu MiB)\n\n", prop.name,
                prop.multiProcessorCount, prop.l2CacheSize >> 20, static_cast<long long>(kRows), bytes >> 20);
    std::printf("| pattern | ms | requested MB | requested GB/s | time vs whole rows |\n|---|---|---|---|---|\n");
    for (const Result& r : results)
        std::printf("| %s | %.4f | %.1f | %.0f | %.2f |\n", r.name.c_str(), r.ms, r.requested_mb, r.gbps, r.ms / whole);
    if (argc > 1) {
        FILE* f = std::fopen(argv[1], "w");
        if (f == nullptr) {
            std::fprintf(stderr, "row_read_probe: cannot write %s\n", argv[1]);
            return 2;
        }
        std::fprintf(f, "{\"device\": \"%s\", \"rows\": %lld, \"row_bytes\": 64, \"results\": [", prop.name,
                     static_cast<long long>(kRows));
        for (size_t i = 0; i < results.size(); ++i)
            std::fprintf(f, "%s{\"pattern\": \"%s\", \"ms\": %.5f, \"requested_mb\": %.2f, \"requested_gbps\": %.1f}",
                         i ? ", " : "", results[i].name.c_str(), results[i].ms, results[i].requested_mb,
                         results[i].gbps);
        std::fprintf(f, "]}\n");
        std::fclose(f);
    }
    CHECK(cudaFree(rows));
    CHECK(cudaFree(sink));
    return 0;
}
