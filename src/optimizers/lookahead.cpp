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
        m_scalars.allocate(m_device);
    }

    // Before nested step k = the nested step count: copy the weights first (k = 0), pull every n_steps.
    optimizer_gpu::LookaheadScalars step_scalars() const {
        const uint32_t k = m_nested->step_count();
        return {static_cast<float>(m_alpha), k == 0, k % m_n_steps == 0, 1};
    }

    void step_impl(const Stream& stream, float loss_scale, float* weights_fp32, void* weights, DType weights_dtype,
                   const void* gradients, DType grad_dtype) override {
        const optimizer_gpu::LookaheadScalars h = step_scalars();
        float* slow = m_slow.data();
        if (h.copy_first) weights_as_float(weights, weights_dtype, m_n_params, slow);
        if (h.pull) {
            const float alpha = h.alpha;
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

    void gpu_prepare(const Stream& stream, const GpuStepArgs& args, bool active) override {
        optimizer_gpu::LookaheadScalars s{};
        if (active) s = step_scalars();
        m_scalars.upload(stream, s);
        nested_gpu().gpu_prepare(stream, args, active);
        if (active) ++m_step;
    }
    void gpu_record(const Stream& stream, const GpuStepArgs& args) override {
        optimizer_gpu::lookahead_step(stream, m_scalars.get(), m_n_params, args.weights_fp32, args.weights,
                                      args.weights_dtype, m_slow.data());
        nested_gpu().gpu_record(stream, args);
    }
    const float* gpu_inference_buffer() const override { return m_slow.data(); }

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
    DeviceScalars<optimizer_gpu::LookaheadScalars> m_scalars;
};

}  // namespace

void register_lookahead(Registry<OptimizerFactory>& registry) {
    registry.add("Lookahead",
                 [](ConfigReader& r, const std::string& path) { return std::unique_ptr<Optimizer>(new Lookahead(r, path)); });
}

}  // namespace tnn
