// The standalone probes' (bench/*_probe.cu) check of a CUDA runtime call: prints the call and the
// error, then exits with status 2. The probes link no library code, so they do not use TNN_GPU_CHECK.
#pragma once
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

#define CHECK(call)                                                                                     \
    do {                                                                                                \
        const cudaError_t e_ = (call);                                                                  \
        if (e_ != cudaSuccess) {                                                                        \
            std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
            std::exit(2);                                                                               \
        }                                                                                               \
    } while (0)
