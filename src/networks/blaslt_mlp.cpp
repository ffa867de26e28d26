// BlasLtMLP, host side: config validation and errors, the test hooks, and the module that hands
// validated GPU calls to blaslt_mlp.cu and CPU calls to the CPU backend (MlpReference<T>, which rounds
// where the GPU passes round). Compiled in every build: a build without a BLAS-Lt library (CPU only, or
// HIP without hipBLASLt) creates and runs BlasLtMLP on the CPU; only its GPU calls fail, naming the
// alternatives.
#include "networks/blaslt_mlp.h"

#include "networks/network_registry.h"
#include "networks/portable_mlp.h"

#include <atomic>

namespace tnn {

namespace blaslt_mlp {

const char* const kUnavailableMessage =
    "BlasLtMLP on the GPU needs cuBLASLt/hipBLASLt, not available in this build (it runs on the CPU); use "
    "PortableMLP or FullyFusedMLP on the GPU";

bool available() {
#ifdef TNN_WITH_GPU
    return gpu_library_available();
#else
    return false;
#endif  // TNN_WITH_GPU
}

namespace {
std::atomic<bool> g_fused_epilogues{true};
std::atomic<uint64_t> g_plans{0}, g_forward_epilogues{0}, g_forward_fallbacks{0}, g_backward_epilogues{0},
    g_backward_fallbacks{0};
}  // namespace

void set_fused_epilogues(bool on) { g_fused_epilogues.store(on); }
bool fused_epilogues() { return g_fused_epilogues.load(); }

Counters counters() {
    Counters c;
    c.plans_created = g_plans.load();
    c.forward_epilogues = g_forward_epilogues.load();
    c.forward_fallbacks = g_forward_fallbacks.load();
    c.backward_epilogues = g_backward_epilogues.load();
    c.backward_fallbacks = g_backward_fallbacks.load();
    return c;
}

void count_plan_created() { g_plans.fetch_add(1, std::memory_order_relaxed); }

void count_gemm(bool backward, bool epilogue, bool fallback) {
    if (epilogue) (backward ? g_backward_epilogues : g_forward_epilogues).fetch_add(1, std::memory_order_relaxed);
    if (fallback) (backward ? g_backward_fallbacks : g_forward_fallbacks).fetch_add(1, std::memory_order_relaxed);
}

}  // namespace blaslt_mlp

namespace {

class BlasLtMlp final : public CpuReferenceNetwork {
public:
    BlasLtMlp(const MlpLayout& layout, DType dtype, DType output_dtype, bool tf32)
        : CpuReferenceNetwork(layout, dtype, output_dtype, kCpuRounding), m_tf32(tf32) {
#ifdef TNN_WITH_GPU
        m_plans = blaslt_mlp::make_plan_cache(layout, dtype, tf32);
#endif  // TNN_WITH_GPU
    }
    std::string name() const override { return "BlasLtMLP"; }
    json hyperparams() const override {
        json j = Network::hyperparams();
        if (m_tf32) j["tf32"] = true;
        return j;
    }
    // supports_device stays Module's (true): the CPU backend always runs, and a GPU call in a build
    // without a BLAS-Lt library fails with kUnavailableMessage (blaslt_mlp.cu) or, in a build without
    // a GPU backend, with the module's "no GPU backend" error.
    // Second derivatives for every activation and dtype, on both devices (docs/blaslt_mlp.md).
    bool supports_backward_backward() const override { return true; }

private:
    // The CPU backend: the GPU passes round where MlpReference<T> rounds (docs/blaslt_mlp.md). TF32
    // is a GPU tensor-core mode; the CPU computes those networks in full fp32 (within TF32's bound).
    static constexpr MlpRounding kCpuRounding{};

#ifdef TNN_WITH_GPU
    void inference_gpu(const Stream& stream, ConstView input, View output, const void* params) const override {
        blaslt_mlp::inference(*m_plans, stream, input, output, params);
    }

    std::unique_ptr<Context> forward_gpu(const Stream& stream, ConstView input, View output, const void* params,
                                         bool) const override {
        return blaslt_mlp::forward(*m_plans, stream, input, output, params);
    }

    void backward_gpu(const Stream& stream, const Context& ctx, ConstView input, ConstView, ConstView dL_doutput,
                      View* dL_dinput, void* dL_dparams, const void* params, GradMode mode) const override {
        blaslt_mlp::backward(*m_plans, stream, ctx, input, dL_doutput, dL_dinput, dL_dparams, params, mode);
    }

    void backward_backward_input_gpu(const Stream& stream, const Context& ctx, ConstView input,
                                     ConstView dL_ddLdinput, ConstView dL_doutput, View* dL_ddLdoutput,
                                     View* dL_dinput, void* dL_dparams, const void* params,
                                     GradMode mode) const override {
        blaslt_mlp::backward_backward_input(*m_plans, stream, ctx, input, dL_ddLdinput, dL_doutput, dL_ddLdoutput,
                                            dL_dinput, dL_dparams, params, mode);
    }
#endif  // TNN_WITH_GPU

    bool m_tf32 = false;
    std::shared_ptr<blaslt_mlp::PlanCache> m_plans;  // shared by every thread using this module
};

}  // namespace

void register_blaslt_mlp(Registry<NetworkFactory>& registry) {
    // float64 is listed so that the factory (not the generic check) names the alternative.
    registry.add("BlasLtMLP",
                 NetworkFactory{DType::f32,
                                {DType::f32, DType::f16, DType::bf16, DType::f64},
                                [](const MlpLayout& l, DType t, DType out, ConfigReader& r, const std::string& who) {
                                    // TF32 tensor-core GEMMs for float32 networks (10-bit mantissa products,
                                    // fp32 accumulation); float16 / bfloat16 networks ignore it.
                                    const bool tf32 = r.get_bool("tf32", false);
                                    if (t == DType::f64)
                                        throw DTypeError(msg(who, ": dtype float64 is not supported; valid choices: "
                                                                  "float32, float16, bfloat16 (use PortableMLP for "
                                                                  "float64)"));
                                    return std::unique_ptr<Network>(new BlasLtMlp(l, t, out, tf32));
                                }});
}

}  // namespace tnn
