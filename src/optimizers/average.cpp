// Average: the mean of the last n_samples weights (for inference) around a nested optimizer, kept as
// a ring of samples and a running sum updated by (new − replaced) / n_samples. As in tcnn, slots not
// yet filled count as zeros (the first n_samples−1 averages are biased towards 0) and the average is
// rounded to the parameter dtype each step. Memory: (n_samples + 1) · n_params fp32 values.
#include "optimizers/optimizer_impl.h"
#include "optimizers/optimizer_math.h"

namespace tnn {

namespace {

class Average final : public SingleNestedOptimizer {
public:
    Average(ConfigReader& r, const std::string& path) : SingleNestedOptimizer(create_nested_optimizer(r, path)) {
        m_n_samples = r.get_uint("n_samples", 128, 1);
    }

    std::string name() const override { return "Average"; }
    json hyperparams() const override {
        return {{"otype", name()}, {"nested", m_nested->hyperparams()}, {"n_samples", m_n_samples}};
    }
    const float* inference_weights_fp32() const override { return m_step == 0 ? nullptr : m_average.data(); }

private:
    void allocate_impl() override {
        allocate_nested();
        m_samples.allocate(m_device, m_n_params * m_n_samples);
        m_average.allocate(m_device, m_n_params);
        m_scalars.allocate(m_device);
    }

    // After the nested step: the ring slot the new sample replaces (tcnn picks it after the nested
    // step: the first sample goes to slot 1 % n_samples).
    size_t slot() const { return m_nested->step_count() % m_n_samples; }

    void step_impl(const Stream& stream, float loss_scale, float* weights_fp32, void* weights, DType weights_dtype,
                   const void* gradients, DType grad_dtype) override {
        m_nested->step(stream, loss_scale, weights_fp32, weights, weights_dtype, gradients, grad_dtype);
        float* sample = m_samples.data() + slot() * m_n_params;
        float* average = m_average.data();
        const uint32_t n_samples = m_n_samples;
        dispatch_dtype(weights_dtype, [&](auto w) {
            using W = decltype(w);
            const W* current = static_cast<const W*>(weights);
            for_each_param(m_n_params, [&](int64_t b, int64_t e) {
                for (int64_t i = b; i < e; ++i) {
                    const float wi = to_float(current[i]);
                    average[i] = round_through<W>(average_update(average[i], wi, sample[i], n_samples));
                    sample[i] = wi;
                }
            });
        });
    }

    void gpu_prepare(const Stream& stream, const GpuStepArgs& args, bool active) override {
        nested_gpu().gpu_prepare(stream, args, active);
        optimizer_gpu::AverageScalars s{};
        if (active) {
            s = {static_cast<uint32_t>(slot()), m_n_samples, 1};
            ++m_step;
        }
        m_scalars.upload(stream, s);
    }
    void gpu_record(const Stream& stream, const GpuStepArgs& args) override {
        nested_gpu().gpu_record(stream, args);
        optimizer_gpu::average_step(stream, m_scalars.get(), m_n_params, args.weights, args.weights_dtype,
                                    m_samples.data(), m_average.data());
    }
    const float* gpu_inference_buffer() const override { return m_average.data(); }

    std::vector<StateBlob> state_impl(const Stream& stream) const override {
        std::vector<StateBlob> out = {m_samples.to_blob(stream, "weights_samples"),
                                      m_average.to_blob(stream, "weights_average")};
        nested_state(stream, out);
        return out;
    }
    void load_state_impl(const Stream& stream, const std::vector<StateBlob>& blobs) override {
        m_samples.from_blob(stream, find_blob(blobs, "weights_samples"));
        m_average.from_blob(stream, find_blob(blobs, "weights_average"));
        load_nested_state(stream, blobs);
    }

    uint32_t m_n_samples;
    StateArray<float> m_samples, m_average;
    DeviceScalars<optimizer_gpu::AverageScalars> m_scalars;
};

}  // namespace

void register_average(Registry<OptimizerFactory>& registry) {
    registry.add("Average",
                 [](ConfigReader& r, const std::string& path) { return std::unique_ptr<Optimizer>(new Average(r, path)); });
}

}  // namespace tnn
