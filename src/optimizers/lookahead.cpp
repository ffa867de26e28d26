// Lookahead (Zhang et al. 2019) around a nested optimizer: slow weights start as the weights before
// the first step; before every nested step k with k % n_steps == 0 the weights are pulled to
// slow·(1−alpha) + fast·alpha and the slow weights take that value (rounded to the parameter dtype,
// as in tcnn). Inference uses the slow weights.
#include "optimizers/optimizer_impl.h"
#include "optimizers/optimizer_math.h"

namespace tnn {

namespace {

class Lookahead final : public SingleNestedOptimizer {
public:
    Lookahead(ConfigReader& r, const std::string& path) : SingleNestedOptimizer(create_nested_optimizer(r, path)) {
        m_alpha = r.get_float("alpha", 0.5, 0.0, 1.0);
        m_n_steps = r.get_uint("n_steps", 16, 1);
    }

    std::string name() const override { return "Lookahead"; }
    json hyperparams() const override {
        return {{"otype", name()}, {"nested", m_nested->hyperparams()}, {"alpha", m_alpha}, {"n_steps", m_n_steps}};
    }
    const float* inference_weights_fp32() const override { return m_step == 0 ? nullptr : m_slow.data(); }

private:
    void allocate_impl() override {
        allocate_nested();
        m_slow.allocate(m_device, m_n_params);
    }

    void step_impl(const Stream& stream, float loss_scale, float* weights_fp32, void* weights, DType weights_dtype,
                   const void* gradients, DType grad_dtype) override {
        require_cpu_kernels(*this);
        const uint32_t k = m_nested->step_count();
        float* slow = m_slow.data();
        if (k == 0) weights_as_float(weights, weights_dtype, m_n_params, slow);
        if (k % m_n_steps == 0) {
            const float alpha = static_cast<float>(m_alpha);
            dispatch_dtype(weights_dtype, [&](auto w) {
                using W = decltype(w);
                W* out = static_cast<W*>(weights);
                for_each_param(m_n_params, [&](int64_t b, int64_t e) {
                    for (int64_t i = b; i < e; ++i) {
                        const float pulled = lookahead_update(alpha, slow[i], weights_fp32[i]);
                        weights_fp32[i] = pulled;
                        out[i] = from_float<W>(pulled);
                        slow[i] = to_float(out[i]);
                    }
                });
            });
        }
        m_nested->step(stream, loss_scale, weights_fp32, weights, weights_dtype, gradients, grad_dtype);
    }

    std::vector<StateBlob> state_impl(const Stream& stream) const override {
        std::vector<StateBlob> out = {m_slow.to_blob(stream, "weights_lookahead")};
        nested_state(stream, out);
        return out;
    }
    void load_state_impl(const Stream& stream, const std::vector<StateBlob>& blobs) override {
        m_slow.from_blob(stream, find_blob(blobs, "weights_lookahead"));
        load_nested_state(stream, blobs);
    }

    double m_alpha;
    uint32_t m_n_steps;
    StateArray<float> m_slow;
};

}  // namespace

void register_lookahead(Registry<OptimizerFactory>& registry) {
    registry.add("Lookahead",
                 [](ConfigReader& r, const std::string& path) { return std::unique_ptr<Optimizer>(new Lookahead(r, path)); });
}

}  // namespace tnn
