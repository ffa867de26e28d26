// Novograd (Ginsburg et al. 2019): Adam-like, with one second moment per parameter group taken from
// the group's gradient norm. Config, state, the CPU loops over optimizer_math.h and the GPU halves.
#include "optimizers/optimizer_impl.h"
#include "optimizers/optimizer_math.h"

namespace tnn {

namespace {

// tcnn normalises per weight matrix and leaves every other parameter untouched. Optimizers here only
// know the matrix/non-matrix split (Module::n_matrix_params), so the groups are: all matrix
// parameters, and all other parameters (which therefore train too).
class Novograd final : public Optimizer, public GpuSplitStep {
public:
    explicit Novograd(ConfigReader& r) {
        m_learning_rate = r.get_float("learning_rate", 1e-3, 0.0);
        m_beta1 = get_float_below(r, "beta1", 0.9, 0.0, 1.0);
        m_beta2 = get_float_below(r, "beta2", 0.999, 0.0, 1.0);
        m_epsilon = r.get_float_exclusive_min("epsilon", 1e-8, 0.0);
        m_relative_decay = r.get_float("relative_decay", 0.0, 0.0);
        m_absolute_decay = r.get_float("absolute_decay", 0.0, 0.0);
    }

    std::string name() const override { return "Novograd"; }
    json hyperparams() const override {
        return {{"otype", name()},           {"learning_rate", m_learning_rate},   {"beta1", m_beta1},
                {"beta2", m_beta2},          {"epsilon", m_epsilon},               {"relative_decay", m_relative_decay},
                {"absolute_decay", m_absolute_decay}};
    }
    float learning_rate() const override { return static_cast<float>(m_learning_rate); }
    void set_learning_rate(float lr) override {
        if (static_cast<float>(m_learning_rate) != lr) m_learning_rate = lr;  // keep the configured double (round trips)
    }

private:
    void allocate_impl() override {
        m_first_moments.allocate(m_device, m_n_params);
        m_group_second_moments.allocate(m_device, 2);
        m_scalars.allocate(m_device);
        if (m_device.is_gpu()) {
            const size_t partials = optimizer_gpu::novograd_partials(m_n_params, m_n_matrix_params);
            m_partials = Buffer(m_device, partials * sizeof(double));
        }
    }

    // The coming step's hyperparameters in fp32 (CPU and GPU paths); exact moments on the first step: beta = 0.
    optimizer_gpu::NovogradScalars step_scalars() const {
        const bool first = m_step == 0;
        optimizer_gpu::NovogradScalars s{};
        s.learning_rate = static_cast<float>(m_learning_rate);
        s.beta1 = first ? 0.0f : static_cast<float>(m_beta1);
        s.beta2 = first ? 0.0f : static_cast<float>(m_beta2);
        s.epsilon = static_cast<float>(m_epsilon);
        s.relative_decay = static_cast<float>(m_relative_decay);
        s.absolute_decay = static_cast<float>(m_absolute_decay);
        s.active = 1;
        return s;
    }

    void step_impl(const Stream&, float loss_scale, float* weights_fp32, void* weights, DType weights_dtype,
                   const void* gradients, DType grad_dtype) override {
        const optimizer_gpu::NovogradScalars h = step_scalars();
        const float lr = h.learning_rate, beta1 = h.beta1, beta2 = h.beta2, epsilon = h.epsilon;
        const float rel = h.relative_decay, abs = h.absolute_decay;
        float* m = m_first_moments.data();
        float* v = m_group_second_moments.data();
        const size_t bounds[3] = {0, m_n_matrix_params, m_n_params};
        dispatch_grad_weight(grad_dtype, weights_dtype, [&](auto g, auto w) {
            using G = decltype(g);
            using W = decltype(w);
            const G* grad = static_cast<const G*>(gradients);
            W* out = static_cast<W*>(weights);
            for (int group = 0; group < 2; ++group) {
                const int64_t begin = static_cast<int64_t>(bounds[group]), end = static_cast<int64_t>(bounds[group + 1]);
                if (begin == end) continue;
                // Squared norm of the scaled gradients, summed in fp64 over fixed chunks (deterministic).
                double sq_sum = 0.0;
                parallel_reduce<double>(end - begin, kOptimizerGrain, 1, &sq_sum, [&](int64_t b, int64_t e, double* partial) {
                    double s = 0.0;
                    for (int64_t i = begin + b; i < begin + e; ++i) {
                        const float gi = to_float(grad[i]);
                        s += static_cast<double>(gi * gi);
                    }
                    partial[0] += s;
                });
                v[group] = novograd_second_moment(beta2, v[group], static_cast<float>(sq_sum), loss_scale);
                const float second_moment = v[group];
                parallel_for(end - begin, kOptimizerGrain, [&](int64_t b, int64_t e) {
                    for (int64_t i = begin + b; i < begin + e; ++i) {
                        novograd_update(lr, beta1, epsilon, rel, abs, second_moment, to_float(grad[i]) / loss_scale,
                                        weights_fp32[i], m[i]);
                        out[i] = from_float<W>(weights_fp32[i]);
                    }
                });
            }
        });
    }

    void gpu_prepare(const Stream& stream, const GpuStepArgs&, bool active) override {
        optimizer_gpu::NovogradScalars s{};
        if (active) {
            s = step_scalars();
            ++m_step;
        }
        m_scalars.upload(stream, s);
    }
    void gpu_record(const Stream& stream, const GpuStepArgs& a) override {
        optimizer_gpu::novograd_step(stream, m_scalars.get(), a.loss_scale, m_n_params, m_n_matrix_params, a.gradients,
                                     a.grad_dtype, a.weights_fp32, a.weights, a.weights_dtype, m_first_moments.data(),
                                     m_group_second_moments.data(), m_partials.ptr<double>());
    }

    std::vector<StateBlob> state_impl(const Stream& stream) const override {
        return {scalar_blob("learning_rate", m_learning_rate), m_first_moments.to_blob(stream, "first_moments"),
                m_group_second_moments.to_blob(stream, "group_second_moments")};
    }
    void load_state_impl(const Stream& stream, const std::vector<StateBlob>& blobs) override {
        m_learning_rate = blob_scalar(blobs, "learning_rate");
        m_first_moments.from_blob(stream, find_blob(blobs, "first_moments"));
        m_group_second_moments.from_blob(stream, find_blob(blobs, "group_second_moments"));
    }

    double m_learning_rate, m_beta1, m_beta2, m_epsilon, m_relative_decay, m_absolute_decay;
    StateArray<float> m_first_moments;
    StateArray<float> m_group_second_moments;  // [matrix group, other group]
    DeviceScalars<optimizer_gpu::NovogradScalars> m_scalars;
    Buffer m_partials;  // GPU: the group norms' partial sums
};

}  // namespace

void register_novograd(Registry<OptimizerFactory>& registry) {
    registry.add("Novograd", [](ConfigReader& r, const std::string&) { return std::unique_ptr<Optimizer>(new Novograd(r)); });
}

}  // namespace tnn
