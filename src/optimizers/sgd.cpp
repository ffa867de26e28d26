// SGD as tcnn has it (no momentum; L2 regularisation on every parameter): config, state, the CPU
// loop over sgd_update (optimizer_math.h) and the GPU halves of a step.
#include "optimizers/optimizer_impl.h"
#include "optimizers/optimizer_math.h"

namespace tnn {

namespace {

class Sgd final : public Optimizer, public GpuSplitStep {
public:
    explicit Sgd(ConfigReader& r) {
        m_learning_rate = r.get_float("learning_rate", 1e-3, 0.0);
        m_l2_reg = r.get_float("l2_reg", 1e-8, 0.0);
    }

    std::string name() const override { return "SGD"; }
    json hyperparams() const override {
        return {{"otype", name()}, {"learning_rate", m_learning_rate}, {"l2_reg", m_l2_reg}};
    }
    float learning_rate() const override { return static_cast<float>(m_learning_rate); }
    void set_learning_rate(float lr) override {
        if (static_cast<float>(m_learning_rate) != lr) m_learning_rate = lr;  // keep the configured double (round trips)
    }

private:
    void allocate_impl() override { m_scalars.allocate(m_device); }

    void step_impl(const Stream&, float loss_scale, float* weights_fp32, void* weights, DType weights_dtype,
                   const void* gradients, DType grad_dtype) override {
        const float lr = static_cast<float>(m_learning_rate), l2_reg = static_cast<float>(m_l2_reg);
        dispatch_grad_weight(grad_dtype, weights_dtype, [&](auto g, auto w) {
            using G = decltype(g);
            using W = decltype(w);
            const G* grad = static_cast<const G*>(gradients);
            W* out = static_cast<W*>(weights);
            for_each_param(m_n_params, [&](int64_t b, int64_t e) {
                for (int64_t i = b; i < e; ++i) {
                    weights_fp32[i] = sgd_update(lr, l2_reg, to_float(grad[i]) / loss_scale, weights_fp32[i]);
                    out[i] = from_float<W>(weights_fp32[i]);
                }
            });
        });
    }

    void gpu_prepare(const Stream& stream, const GpuStepArgs&, bool active) override {
        optimizer_gpu::SgdScalars s{};
        s.active = active;
        if (active) {
            s.learning_rate = static_cast<float>(m_learning_rate);
            s.l2_reg = static_cast<float>(m_l2_reg);
            ++m_step;
        }
        m_scalars.upload(stream, s);
    }
    void gpu_record(const Stream& stream, const GpuStepArgs& a) override {
        optimizer_gpu::sgd_step(stream, m_scalars.get(), a.loss_scale, m_n_params, a.gradients, a.grad_dtype,
                                a.weights_fp32, a.weights, a.weights_dtype);
    }

    std::vector<StateBlob> state_impl(const Stream&) const override {
        return {scalar_blob("learning_rate", m_learning_rate)};
    }
    void load_state_impl(const Stream&, const std::vector<StateBlob>& blobs) override {
        m_learning_rate = blob_scalar(blobs, "learning_rate");
    }

    double m_learning_rate, m_l2_reg;
    DeviceScalars<optimizer_gpu::SgdScalars> m_scalars;
};

}  // namespace

void register_sgd(Registry<OptimizerFactory>& registry) {
    registry.add("SGD", [](ConfigReader& r, const std::string&) { return std::unique_ptr<Optimizer>(new Sgd(r)); });
}

}  // namespace tnn
