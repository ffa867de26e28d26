// Helpers shared by the standalone wgmma probes (bench/wgmma_probe.cu, bench/wgmma_probe128.cu):
// CUDA error checks, shared-memory addresses and descriptors, wgmma's ordering instructions, mma.sync
// A fragments read from global memory, random fp16 data. Header-only and without library code, so
// that each probe still builds with a plain nvcc line (see each probe's header).
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#define CK(x)                                                                                      \
    do {                                                                                           \
        cudaError_t e_ = (x);                                                                      \
        if (e_ != cudaSuccess) {                                                                   \
            std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
            std::exit(2);                                                                          \
        }                                                                                          \
    } while (0)

__device__ __forceinline__ uint32_t smem_u32(const void* p) { return static_cast<uint32_t>(__cvta_generic_to_shared(p)); }

// The dynamic shared array rounded up to 1024 bytes (the swizzle pattern repeats every 8 rows of 128
// bytes; the descriptors assume tiles on that boundary). Launches ask for 1024 bytes more.
__device__ __forceinline__ char* aligned1024(char* p) { return p + ((1024u - (smem_u32(p) & 1023u)) & 1023u); }

// A shared-memory matrix descriptor with the 128-byte swizzle: address, leading and stride byte
// offsets in 16-byte units.
__device__ __forceinline__ uint64_t make_desc(uint32_t addr, uint32_t lbo, uint32_t sbo) {
    return uint64_t((addr & 0x3FFFF) >> 4) | (uint64_t((lbo >> 4) & 0x3FFF) << 16) |
           (uint64_t((sbo >> 4) & 0x3FFF) << 32) | (uint64_t(1) << 62);
}

__device__ __forceinline__ void wg_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wg_wait0() { asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory"); }

// Two halves of a row-major matrix (leading dimension ld) packed as one 32-bit register.
__device__ __forceinline__ uint32_t h2_at(const __half* m, int ld, int r0, int c0, int r1, int c1) {
    __half2 h = __halves2half2(m[r0 * ld + c0], m[r1 * ld + c1]);
    uint32_t u;
    memcpy(&u, &h, 4);
    return u;
}

// The mma.sync A fragments of KS k-steps of this lane's rows r0 and r0 + 8 (t = lane % 4) of a
// row-major matrix X with leading dimension ld (wgmma's A-from-registers layout per warp is the same).
template <int KS>
__device__ __forceinline__ void load_a_frags(uint32_t (&a)[KS][4], const __half* X, int ld, int r0, int t) {
    for (int kk = 0; kk < KS; ++kk) {
        const int c = 16 * kk + 2 * t;
        a[kk][0] = h2_at(X, ld, r0, c, r0, c + 1);
        a[kk][1] = h2_at(X, ld, r0 + 8, c, r0 + 8, c + 1);
        a[kk][2] = h2_at(X, ld, r0, c + 8, r0, c + 9);
        a[kk][3] = h2_at(X, ld, r0 + 8, c + 8, r0 + 8, c + 9);
    }
}

static std::vector<__half> random_half(size_t n, std::mt19937& g, float lo, float hi) {
    std::uniform_real_distribution<float> u(lo, hi);
    std::vector<__half> v(n);
    for (auto& x : v) x = __float2half(u(g));
    return v;
}
static double h2d(__half h) { return double(__half2float(h)); }
