// BlasLtMLP, host side: config validation and errors, the test hooks, and the module that hands
// validated GPU calls to blaslt_mlp.cu. Compiled in every build so that the otype is always known;
// where the build has no BLAS-Lt library, creating one is an UnsupportedError naming the alternatives.
#include "networks/blaslt_mlp.h"

#include "networks/network_registry.h"

#include <atomic>

namespace tnn {

namespace blaslt_mlp {

const char* const kUnavailableMessage =
    "BlasLtMLP needs cuBLASLt/hipBLASLt, not available in this build; use PortableMLP or FullyFusedMLP";

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

class BlasLtMlp final : public Network {
public:
    BlasLtMlp(const MlpLayout& layout, DType dtype, DType output_dtype, bool tf32)
        : Network(layout, dtype, output_dtype), m_tf32(tf32) {
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
    // supports_device stays Module's (true for the CPU too): such calls reach the module and fail
    // with a message naming PortableMLP.

private:
    void require_gpu(Device d) const {
        if (d.is_cpu())
            throw UnsupportedError(msg(describe(), ": BlasLtMLP runs on the GPU only; use PortableMLP on the CPU"));
    }

    void inference_impl(const Stream& stream, ConstView input, View output, const void* params) const override {
        require_gpu(input.device);
#ifdef TNN_WITH_GPU
        blaslt_mlp::inference(*m_plans, stream, input, output, params);
#endif  // TNN_WITH_GPU
    }

    std::unique_ptr<Context> forward_impl(const Stream& stream, ConstView input, View output, const void* params,
                                          bool) const override {
        require_gpu(input.device);
#ifdef TNN_WITH_GPU
        return blaslt_mlp::forward(*m_plans, stream, input, output, params);
#else
        return nullptr;
#endif  // TNN_WITH_GPU
    }

    void backward_impl(const Stream& stream, const Context& ctx, ConstView input, ConstView, ConstView dL_doutput,
                       View* dL_dinput, void* dL_dparams, const void* params, GradMode mode) const override {
        require_gpu(input.device);
#ifdef TNN_WITH_GPU
        blaslt_mlp::backward(*m_plans, stream, ctx, input, dL_doutput, dL_dinput, dL_dparams, params, mode);
#endif  // TNN_WITH_GPU
    }

    bool m_tf32 = false;
    std::shared_ptr<blaslt_mlp::PlanCache> m_plans;  // shared by every thread using this module
};

}  // namespace

void register_blaslt_mlp(Registry<NetworkFactory>& registry) {
    // float64 is listed so that the factory (not the generic check) names the alternative.
    registry.add("BlasLtMLP",
                 NetworkFactory{DType::f32,
                                {DType::f32, DType::f16, DType::bf16, DType::f64},
                                [](const MlpLayout& l, DType t, DType out, ConfigReader& r) {
                                    // TF32 tensor-core GEMMs for float32 networks (10-bit mantissa products,
                                    // fp32 accumulation); float16 / bfloat16 networks ignore it.
                                    const bool tf32 = r.get_bool("tf32", false);
                                    if (t == DType::f64)
                                        throw DTypeError("BlasLtMLP: dtype float64 is not supported; valid choices: "
                                                         "float32, float16, bfloat16 (use PortableMLP for float64)");
                                    if (!blaslt_mlp::available()) throw UnsupportedError(blaslt_mlp::kUnavailableMessage);
                                    return std::unique_ptr<Network>(new BlasLtMlp(l, t, out, tf32));
                                }});
}

}  // namespace tnn
