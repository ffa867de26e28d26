// EMA: a debiased exponential moving average of the weights (for inference) around a nested optimizer.
// After nested step k the average is (ema·decay·(1−decay^(k−1)) + w·(1−decay)) / (1−decay^k), where w
// is the weight in the parameter dtype (or the nested optimizer's inference weights). As in tcnn the
// average itself is rounded to the parameter dtype each step unless full_precision is set.
#include "optimizers/optimizer_impl.h"
#include "optimizers/optimizer_math.h"

#include <cmath>

namespace tnn {

namespace {

class Ema final : public SingleNestedOptimizer {
public:
    Ema(ConfigReader& r, const std::string& path) : SingleNestedOptimizer(create_nested_optimizer(r, path)) {
        m_decay = get_float_below(r, "decay", 0.99, 0.0, 1.0);
        m_full_precision = r.get_bool("full_precision", false);
    }

    std::string name() const override { return "EMA"; }
    json hyperparams() const override {
        return {{"otype", name()},
                {"nested", m_nested->hyperparams()},
                {"decay", m_decay},
                {"full_precision", m_full_precision}};
    }
    // Before the first step the average is empty: infer with the trained weights.
    const float* inference_weights_fp32() const override { return m_step == 0 ? nullptr : m_ema.data(); }

private:
    void allocate_impl() override {
        allocate_nested();
        m_ema.allocate(m_device, m_n_params);
        m_scalars.allocate(m_device);
    }

    // The factors after nested step k = the nested step count (CPU and GPU paths).
    optimizer_gpu::EmaScalars step_scalars() const {
        const uint32_t k = m_nested->step_count();
        const float decay = static_cast<float>(m_decay);
        optimizer_gpu::EmaScalars s{};
        s.decay = decay;
        // tcnn evaluates the powers in double (std::pow of a float and an integer).
        s.debias_old = 1.0f - static_cast<float>(std::pow(static_cast<double>(decay), static_cast<double>(k) - 1.0));
        s.debias_new =
            1.0f / (1.0f - static_cast<float>(std::pow(static_cast<double>(decay), static_cast<double>(k))));
        s.full_precision = m_full_precision;
        s.use_nested = m_nested->inference_weights_fp32() != nullptr;
        s.active = 1;
        return s;
    }

    void step_impl(const Stream& stream, float loss_scale, float* weights_fp32, void* weights, DType weights_dtype,
                   const void* gradients, DType grad_dtype) override {
        m_nested->step(stream, loss_scale, weights_fp32, weights, weights_dtype, gradients, grad_dtype);
        const optimizer_gpu::EmaScalars h = step_scalars();
        const float decay = h.decay, debias_old = h.debias_old, debias_new = h.debias_new;
        float* ema = m_ema.data();
        const float* nested_weights = m_nested->inference_weights_fp32();
        dispatch_dtype(weights_dtype, [&](auto w) {
            using W = decltype(w);
            const W* current = static_cast<const W*>(weights);
            for_each_param(m_n_params, [&](int64_t b, int64_t e) {
                for (int64_t i = b; i < e; ++i) {
                    const float wi = nested_weights ? nested_weights[i] : to_float(current[i]);
                    const float filtered = ema_update(decay, debias_old, debias_new, ema[i], wi);
                    ema[i] = m_full_precision ? filtered : round_through<W>(filtered);
                }
            });
        });
    }

    void gpu_prepare(const Stream& stream, const GpuStepArgs& args, bool active) override {
        nested_gpu().gpu_prepare(stream, args, active);
        optimizer_gpu::EmaScalars s{};
        if (active) {
            s = step_scalars();
            ++m_step;
        }
        m_scalars.upload(stream, s);
    }
    void gpu_record(const Stream& stream, const GpuStepArgs& args) override {
        nested_gpu().gpu_record(stream, args);
        optimizer_gpu::ema_step(stream, m_scalars.get(), m_n_params, args.weights, args.weights_dtype,
                                nested_gpu().gpu_inference_buffer(), m_ema.data());
    }
    const float* gpu_inference_buffer() const override { return m_ema.data(); }

    std::vector<StateBlob> state_impl(const Stream& stream) const override {
        std::vector<StateBlob> out = {m_ema.to_blob(stream, "weights_ema")};
        nested_state(stream, out);
        return out;
    }
    void load_state_impl(const Stream& stream, const std::vector<StateBlob>& blobs) override {
        m_ema.from_blob(stream, find_blob(blobs, "weights_ema"));
        load_nested_state(stream, blobs);
    }

    double m_decay;
    bool m_full_precision;
    StateArray<float> m_ema;
    DeviceScalars<optimizer_gpu::EmaScalars> m_scalars;
};

}  // namespace

void register_ema(Registry<OptimizerFactory>& registry) {
    registry.add("EMA", [](ConfigReader& r, const std::string& path) { return std::unique_ptr<Optimizer>(new Ema(r, path)); });
}

}  // namespace tnn
