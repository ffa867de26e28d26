// Adam with tcnn's extensions (per-parameter step counters, zero-gradient skipping for non-matrix
// parameters, L2 on matrix parameters only, AdaBound, relative/absolute weight decay, clipping):
// config, state, the CPU loop over adam_update (optimizer_math.h) and the GPU halves of a step.
#include "optimizers/optimizer_impl.h"
#include "optimizers/optimizer_math.h"

namespace tnn {

namespace {

class Adam final : public Optimizer, public GpuSplitStep {
public:
    explicit Adam(ConfigReader& r) {
        m_learning_rate = r.get_float("learning_rate", 1e-3, 0.0);
        m_beta1 = get_float_below(r, "beta1", 0.9, 0.0, 1.0);
        m_beta2 = get_float_below(r, "beta2", 0.999, 0.0, 1.0);
        m_epsilon = r.get_float_exclusive_min("epsilon", 1e-8, 0.0);
        m_l2_reg = r.get_float("l2_reg", 1e-8, 0.0);
        m_adabound = r.get_bool("adabound", false);
        m_relative_decay = r.get_float("relative_decay", 0.0, 0.0);
        m_absolute_decay = r.get_float("absolute_decay", 0.0, 0.0);
        m_clipping_magnitude = r.get_float("clipping_magnitude", 0.0, 0.0);
        m_non_matrix_learning_rate_factor = r.get_float("non_matrix_learning_rate_factor", 1.0, 0.0);
        m_optimize_matrix_params = r.get_bool("optimize_matrix_params", true);
        m_optimize_non_matrix_params = r.get_bool("optimize_non_matrix_params", true);
    }

    std::string name() const override { return "Adam"; }
    json hyperparams() const override {
        return {{"otype", name()},
                {"learning_rate", m_learning_rate},
                {"beta1", m_beta1},
                {"beta2", m_beta2},
                {"epsilon", m_epsilon},
                {"l2_reg", m_l2_reg},
                {"adabound", m_adabound},
                {"relative_decay", m_relative_decay},
                {"absolute_decay", m_absolute_decay},
                {"clipping_magnitude", m_clipping_magnitude},
                {"non_matrix_learning_rate_factor", m_non_matrix_learning_rate_factor},
                {"optimize_matrix_params", m_optimize_matrix_params},
                {"optimize_non_matrix_params", m_optimize_non_matrix_params}};
    }
    float learning_rate() const override { return static_cast<float>(m_learning_rate); }
    // Keeps the configured (double) value when the float is unchanged, so hyperparams() still round-trips
    // after a wrapper sets the same rate again.
    void set_learning_rate(float lr) override {
        if (static_cast<float>(m_learning_rate) != lr) m_learning_rate = lr;
    }

private:
    void allocate_impl() override {
        m_first_moments.allocate(m_device, m_n_params);
        m_second_moments.allocate(m_device, m_n_params);
        m_param_steps.allocate(m_device, m_n_params);
        m_scalars.allocate(m_device);
    }

    // The hyperparameters of the coming step (m_step + 1) in fp32, shared by the CPU and GPU paths.
    AdamStepParams step_params() const {
        AdamStepParams h;
        h.learning_rate = static_cast<float>(m_learning_rate);
        h.non_matrix_learning_rate_factor = static_cast<float>(m_non_matrix_learning_rate_factor);
        h.beta1 = static_cast<float>(m_beta1);
        h.beta2 = static_cast<float>(m_beta2);
        h.epsilon = static_cast<float>(m_epsilon);
        h.l2_reg = static_cast<float>(m_l2_reg);
        h.relative_decay = static_cast<float>(m_relative_decay);
        h.absolute_decay = static_cast<float>(m_absolute_decay);
        h.clipping_magnitude = static_cast<float>(m_clipping_magnitude);
        h.optimize_matrix_params = m_optimize_matrix_params;
        h.optimize_non_matrix_params = m_optimize_non_matrix_params;
        adam_lr_bounds(m_adabound, h.beta2, m_step + 1, h.lower_lr_bound, h.upper_lr_bound);
        h.cached_step = m_step + 1;
        h.cached_bias_correction = adam_bias_correction(h.beta1, h.beta2, h.cached_step);
        return h;
    }

    void step_impl(const Stream&, float loss_scale, float* weights_fp32, void* weights, DType weights_dtype,
                   const void* gradients, DType grad_dtype) override {
        const AdamStepParams h = step_params();
        float* m = m_first_moments.data();
        float* v = m_second_moments.data();
        uint32_t* steps = m_param_steps.data();
        const int64_t n_matrix = static_cast<int64_t>(m_n_matrix_params);
        dispatch_grad_weight(grad_dtype, weights_dtype, [&](auto g, auto w) {
            using G = decltype(g);
            using W = decltype(w);
            const G* grad = static_cast<const G*>(gradients);
            W* out = static_cast<W*>(weights);
            for_each_param(m_n_params, [&](int64_t b, int64_t e) {
                for (int64_t i = b; i < e; ++i) {
                    adam_update(h, i < n_matrix, to_float(grad[i]) / loss_scale, weights_fp32[i], m[i], v[i], steps[i]);
                    out[i] = from_float<W>(weights_fp32[i]);
                }
            });
        });
    }

    void gpu_prepare(const Stream& stream, const GpuStepArgs&, bool active) override {
        optimizer_gpu::AdamScalars s{};
        s.active = active;
        if (active) {
            s.h = step_params();
            ++m_step;
        }
        m_scalars.upload(stream, s);
    }
    void gpu_record(const Stream& stream, const GpuStepArgs& a) override {
        optimizer_gpu::adam_step(stream, m_scalars.get(), a.loss_scale, m_n_params, m_n_matrix_params, a.gradients,
                                 a.grad_dtype, a.weights_fp32, a.weights, a.weights_dtype, m_first_moments.data(),
                                 m_second_moments.data(), m_param_steps.data());
    }

    std::vector<StateBlob> state_impl(const Stream& stream) const override {
        return {scalar_blob("learning_rate", m_learning_rate), m_first_moments.to_blob(stream, "first_moments"),
                m_second_moments.to_blob(stream, "second_moments"), m_param_steps.to_blob(stream, "param_steps_u32")};
    }
    void load_state_impl(const Stream& stream, const std::vector<StateBlob>& blobs) override {
        m_learning_rate = blob_scalar(blobs, "learning_rate");
        m_first_moments.from_blob(stream, find_blob(blobs, "first_moments"));
        m_second_moments.from_blob(stream, find_blob(blobs, "second_moments"));
        m_param_steps.from_blob(stream, find_blob(blobs, "param_steps_u32"));
    }

    double m_learning_rate, m_beta1, m_beta2, m_epsilon, m_l2_reg;
    double m_relative_decay, m_absolute_decay, m_clipping_magnitude, m_non_matrix_learning_rate_factor;
    bool m_adabound, m_optimize_matrix_params, m_optimize_non_matrix_params;
    StateArray<float> m_first_moments, m_second_moments;
    StateArray<uint32_t> m_param_steps;
    DeviceScalars<optimizer_gpu::AdamScalars> m_scalars;
};

}  // namespace

void register_adam(Registry<OptimizerFactory>& registry) {
    registry.add("Adam", [](ConfigReader& r, const std::string&) { return std::unique_ptr<Optimizer>(new Adam(r)); });
}

}  // namespace tnn
