// ExponentialDecay: piecewise-constant exponential learning-rate decay around a nested optimizer.
// Before nested step k (0-based), if decay_start <= k <= decay_end and (k - decay_start) is a multiple
// of decay_interval, the factor is multiplied by decay_base; the nested step runs at base * factor.
#include "optimizers/optimizer_impl.h"

namespace tnn {

namespace {

class ExponentialDecay final : public SingleNestedOptimizer {
public:
    ExponentialDecay(ConfigReader& r, const std::string& path) : SingleNestedOptimizer(create_nested_optimizer(r, path)) {
        m_decay_base = r.get_float_exclusive_min("decay_base", 0.1, 0.0);
        m_decay_start = r.get_uint("decay_start", 10000);
        m_decay_interval = r.get_uint("decay_interval", 10000, 1);
        m_decay_end = r.get_uint("decay_end", 10000000);
        m_base_learning_rate = m_nested->learning_rate();
    }

    std::string name() const override { return "ExponentialDecay"; }
    json hyperparams() const override {
        return {{"otype", name()},
                {"nested", m_nested->hyperparams()},
                {"decay_base", m_decay_base},
                {"decay_start", m_decay_start},
                {"decay_interval", m_decay_interval},
                {"decay_end", m_decay_end}};
    }
    float learning_rate() const override { return m_base_learning_rate * m_factor; }
    void set_learning_rate(float lr) override {
        m_base_learning_rate = lr / m_factor;
        m_nested->set_learning_rate(m_base_learning_rate);
    }

private:
    void allocate_impl() override {
        allocate_nested();
        m_factor = 1.0f;
    }

    // Before nested step k: the factor for it, and the nested optimizer set to the decayed rate.
    void advance_factor() {
        const uint32_t k = m_nested->step_count();
        if (k == 0) m_factor = 1.0f;
        if (k >= m_decay_start && (k - m_decay_start) % m_decay_interval == 0 && k <= m_decay_end)
            m_factor *= static_cast<float>(m_decay_base);
        m_nested->set_learning_rate(m_base_learning_rate * m_factor);
    }

    // The nested optimizer keeps the base rate between steps, so its hyperparams() round-trip; it
    // runs each step at the decayed rate.
    void step_impl(const Stream& stream, float loss_scale, float* weights_fp32, void* weights, DType weights_dtype,
                   const void* gradients, DType grad_dtype) override {
        advance_factor();
        m_nested->step(stream, loss_scale, weights_fp32, weights, weights_dtype, gradients, grad_dtype);
        m_nested->set_learning_rate(m_base_learning_rate);
    }

    // On the GPU the decayed rate is one of the scalars the nested host half uploads.
    void gpu_prepare(const Stream& stream, const GpuStepArgs& args, bool active) override {
        if (active) advance_factor();
        nested_gpu().gpu_prepare(stream, args, active);
        if (!active) return;
        m_nested->set_learning_rate(m_base_learning_rate);
        ++m_step;
    }
    void gpu_record(const Stream& stream, const GpuStepArgs& args) override { nested_gpu().gpu_record(stream, args); }

    std::vector<StateBlob> state_impl(const Stream& stream) const override {
        std::vector<StateBlob> out = {scalar_blob("base_learning_rate", m_base_learning_rate),
                                      scalar_blob("learning_rate_factor", m_factor)};
        nested_state(stream, out);
        return out;
    }
    void load_state_impl(const Stream& stream, const std::vector<StateBlob>& blobs) override {
        m_base_learning_rate = static_cast<float>(blob_scalar(blobs, "base_learning_rate"));
        m_factor = static_cast<float>(blob_scalar(blobs, "learning_rate_factor"));
        load_nested_state(stream, blobs);
    }

    double m_decay_base;
    uint32_t m_decay_start, m_decay_interval, m_decay_end;
    float m_base_learning_rate;
    float m_factor = 1.0f;
};

}  // namespace

void register_exponential_decay(Registry<OptimizerFactory>& registry) {
    registry.add("ExponentialDecay", [](ConfigReader& r, const std::string& path) {
        return std::unique_ptr<Optimizer>(new ExponentialDecay(r, path));
    });
}

}  // namespace tnn
