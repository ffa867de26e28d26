// BlasLtMLP internals shared by the host module (blaslt_mlp.cpp) and the GPU implementation
// (blaslt_mlp.cu): the availability of a BLAS-Lt library in this build, the per-module cache of
// GEMM plans (opaque here), the GPU entry points, and hooks that tests and benchmarks use.
#pragma once

#include <tnn/network.h>

#include <cstdint>
#include <memory>

namespace tnn::blaslt_mlp {

// The error every BlasLtMLP request gets in a build without cuBLASLt / hipBLASLt.
extern const char* const kUnavailableMessage;

// True when this build links a BLAS-Lt library (CUDA builds always; HIP builds with hipBLASLt).
bool available();

// Test and benchmark hook, process-wide: with false, no GEMM uses a library epilogue (bias, ReLU
// mask, ReLU derivative); every layer takes the unfused path (plain GEMM, then our elementwise
// kernels). Both paths compute the same function; tests run each case both ways.
void set_fused_epilogues(bool on);
bool fused_epilogues();

// Process-wide counters, so that tests can see which path ran. An "epilogue" GEMM used a library
// epilogue; a "fallback" wanted one (fused policy on) but the library offered no algorithm for it,
// so the unfused path ran instead.
struct Counters {
    uint64_t plans_created = 0;
    uint64_t forward_epilogues = 0, forward_fallbacks = 0;
    uint64_t backward_epilogues = 0, backward_fallbacks = 0;
};
Counters counters();
void count_plan_created();
void count_gemm(bool backward, bool epilogue, bool fallback);

class PlanCache;  // GEMM plans of one module: descriptors, layouts, chosen algorithms (blaslt_mlp.cu)

#ifdef TNN_WITH_GPU
// Implemented in blaslt_mlp.cu; in a GPU build without a BLAS-Lt library they throw UnsupportedError.
bool gpu_library_available();
// Creates no GPU state (the library handle and the plans come with the first call on a device).
std::shared_ptr<PlanCache> make_plan_cache(const MlpLayout& layout, DType dtype, bool tf32);
// Called by the module with validated arguments and rows > 0.
void inference(PlanCache& plans, const Stream& stream, ConstView input, View output, const void* params);
std::unique_ptr<Context> forward(PlanCache& plans, const Stream& stream, ConstView input, View output,
                                 const void* params);
void backward(PlanCache& plans, const Stream& stream, const Context& ctx, ConstView input, ConstView dL_doutput,
              View* dL_dinput, void* dL_dparams, const void* params, GradMode mode);
void backward_backward_input(PlanCache& plans, const Stream& stream, const Context& ctx, ConstView input,
                             ConstView dL_ddLdinput, ConstView dL_doutput, View* dL_ddLdoutput, View* dL_dinput,
                             void* dL_dparams, const void* params, GradMode mode);
#endif  // TNN_WITH_GPU

}  // namespace tnn::blaslt_mlp
