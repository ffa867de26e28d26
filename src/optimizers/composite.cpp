// Composite: different optimizers on consecutive slices of the parameter array. Each entry of
// "nested" is an optimizer config plus n_params_to_optimize; one entry may omit it and takes the
// rest. The sizes must add up to the model's n_params (checked at allocate). learning_rate() is a
// factor applied to every nested optimizer's own rate (tcnn's semantics).
#include "optimizers/optimizer_impl.h"

#include <algorithm>

namespace tnn {

namespace {

constexpr size_t kRest = SIZE_MAX;  // the entry without n_params_to_optimize

class Composite final : public Optimizer, public GpuSplitStep {
public:
    Composite(ConfigReader& r, const std::string& path) {
        const json& nested = r.get_json("nested");
        if (!nested.is_array() || nested.empty())
            r.fail("nested", msg("must be a non-empty array of optimizer configs, each with n_params_to_optimize; got ",
                                 nested.dump()));
        for (size_t i = 0; i < nested.size(); ++i) {
            const std::string entry_path = msg(path, ".nested[", i, "]");
            const json& cfg = nested[i];
            if (!cfg.is_object())
                throw ConfigError(msg(entry_path, ": optimizer config must be a JSON object, got ", cfg.type_name()));
            size_t size = kRest;
            if (cfg.contains("n_params_to_optimize")) {
                const json& v = cfg["n_params_to_optimize"];
                if (!v.is_number_integer() || v.get<int64_t>() < 0)
                    throw ConfigError(msg(entry_path, ": key 'n_params_to_optimize' must be a non-negative integer, got ",
                                          v.dump()));
                size = v.get<size_t>();
            } else if (std::find(m_sizes.begin(), m_sizes.end(), kRest) != m_sizes.end()) {
                throw ConfigError(msg(entry_path, ": key 'n_params_to_optimize' is missing; only one nested optimizer "
                                                  "may omit it (it takes the remaining parameters)"));
            }
            m_sizes.push_back(size);
            m_nested.push_back(create_optimizer_at(cfg, entry_path, "n_params_to_optimize"));
            m_base_learning_rates.push_back(m_nested.back()->learning_rate());
        }
    }

    std::string name() const override { return "Composite"; }
    json hyperparams() const override {
        json nested = json::array();
        for (size_t i = 0; i < m_nested.size(); ++i) {
            json j = m_nested[i]->hyperparams();
            if (m_sizes[i] != kRest) j["n_params_to_optimize"] = m_sizes[i];
            nested.push_back(std::move(j));
        }
        return {{"otype", name()}, {"nested", nested}};
    }
    float learning_rate() const override { return m_learning_rate_factor; }
    void set_learning_rate(float factor) override {
        m_learning_rate_factor = factor;
        for (size_t i = 0; i < m_nested.size(); ++i) m_nested[i]->set_learning_rate(m_base_learning_rates[i] * factor);
    }
    // A full array when any nested optimizer has inference weights (the others contribute their weights).
    const float* inference_weights_fp32() const override { return m_has_inference ? m_inference.data() : nullptr; }

private:
    void allocate_impl() override {
        size_t explicit_sum = 0;
        for (size_t s : m_sizes)
            if (s != kRest) explicit_sum += s;
        const bool has_rest = std::find(m_sizes.begin(), m_sizes.end(), kRest) != m_sizes.end();
        if (explicit_sum > m_n_params || (!has_rest && explicit_sum != m_n_params))
            throw ConfigError(msg("Composite optimizer: the nested optimizers' 'n_params_to_optimize' add up to ",
                                  explicit_sum, " but the model has ", m_n_params, " parameters",
                                  has_rest ? "" : " (one entry may omit the key to take the rest)"));
        m_offsets.assign(1, 0);
        for (size_t i = 0; i < m_nested.size(); ++i) {
            const size_t size = m_sizes[i] == kRest ? m_n_params - explicit_sum : m_sizes[i];
            const size_t offset = m_offsets.back();
            // The matrix parameters lead the array: a slice holds the part of them that falls inside it.
            const size_t n_matrix = std::min(size, m_n_matrix_params > offset ? m_n_matrix_params - offset : 0);
            m_nested[i]->allocate(m_device, size, n_matrix);
            m_offsets.push_back(offset + size);
        }
        m_inference.allocate(m_device, m_n_params);
        m_has_inference = false;
        if (m_device.is_gpu()) m_gpu_flags = Buffer(m_device, (m_nested.size() + 1) * sizeof(uint32_t));
    }

    void step_impl(const Stream& stream, float loss_scale, float* weights_fp32, void* weights, DType weights_dtype,
                   const void* gradients, DType grad_dtype) override {
        const size_t wsize = dtype_size(weights_dtype), gsize = dtype_size(grad_dtype);
        bool any_inference = false;
        for (size_t i = 0; i < m_nested.size(); ++i) {
            const size_t off = m_offsets[i];
            m_nested[i]->step(stream, loss_scale, weights_fp32 + off, static_cast<char*>(weights) + off * wsize,
                              weights_dtype, static_cast<const char*>(gradients) + off * gsize, grad_dtype);
            any_inference |= m_nested[i]->inference_weights_fp32() != nullptr;
        }
        if (!any_inference) return;
        for (size_t i = 0; i < m_nested.size(); ++i) {
            const size_t off = m_offsets[i], n = m_offsets[i + 1] - off;
            const float* src = m_nested[i]->inference_weights_fp32();
            copy_bytes(stream, m_inference.data() + off, m_device, src ? src : weights_fp32 + off, m_device,
                       n * sizeof(float));
        }
        m_has_inference = true;
    }

    // GPU: the nested halves on their slices, then each slice of the inference weights from its nested
    // optimizer or the trained weights, as device flags (the words of optimizer_gpu.h) say.
    void gpu_prepare(const Stream& stream, const GpuStepArgs& args, bool active) override {
        std::vector<uint32_t> flags(m_nested.size() + 1, 0);
        bool any_inference = false;
        for (size_t i = 0; i < m_nested.size(); ++i) {
            nested_gpu_split(*m_nested[i]).gpu_prepare(stream, args.slice(m_offsets[i]), active);
            flags[1 + i] = m_nested[i]->inference_weights_fp32() != nullptr;
            any_inference |= flags[1 + i] != 0;
        }
        flags[0] = active && any_inference;
        optimizer_gpu::upload(stream, m_gpu_flags.data(), flags.data(), flags.size() * sizeof(uint32_t));
        if (!active) return;
        m_has_inference |= any_inference;
        ++m_step;
    }
    void gpu_record(const Stream& stream, const GpuStepArgs& args) override {
        bool may_have_inference = false;
        for (size_t i = 0; i < m_nested.size(); ++i) {
            GpuSplitStep& nested = nested_gpu_split(*m_nested[i]);
            nested.gpu_record(stream, args.slice(m_offsets[i]));
            may_have_inference |= nested.gpu_inference_buffer() != nullptr;
        }
        if (!may_have_inference) return;  // the flags never ask for a gather
        for (size_t i = 0; i < m_nested.size(); ++i) {
            const size_t off = m_offsets[i];
            optimizer_gpu::composite_gather(stream, m_gpu_flags.ptr<uint32_t>(), i, m_offsets[i + 1] - off,
                                            nested_gpu_split(*m_nested[i]).gpu_inference_buffer(),
                                            args.weights_fp32 + off, m_inference.data() + off);
        }
    }
    const float* gpu_inference_buffer() const override { return m_inference.data(); }

    std::vector<StateBlob> state_impl(const Stream& stream) const override {
        std::vector<StateBlob> out = {scalar_blob("learning_rate_factor", m_learning_rate_factor),
                                      scalar_blob("has_inference_weights", m_has_inference ? 1.0 : 0.0),
                                      m_inference.to_blob(stream, "inference_weights")};
        for (size_t i = 0; i < m_nested.size(); ++i) {
            out.push_back(scalar_blob(msg("base_learning_rate[", i, "]"), m_base_learning_rates[i]));
            append_prefixed(out, m_nested[i]->state(stream), msg("nested[", i, "]."));
        }
        return out;
    }
    void load_state_impl(const Stream& stream, const std::vector<StateBlob>& blobs) override {
        for (size_t i = 0; i < m_nested.size(); ++i) {
            m_base_learning_rates[i] = static_cast<float>(blob_scalar(blobs, msg("base_learning_rate[", i, "]")));
            m_nested[i]->load_state(stream, strip_prefix(blobs, msg("nested[", i, "].")));
        }
        m_learning_rate_factor = static_cast<float>(blob_scalar(blobs, "learning_rate_factor"));
        m_has_inference = blob_scalar(blobs, "has_inference_weights") != 0.0;
        m_inference.from_blob(stream, find_blob(blobs, "inference_weights"));
    }

    std::vector<std::unique_ptr<Optimizer>> m_nested;
    std::vector<size_t> m_sizes;  // as configured; kRest for the entry that takes the rest
    std::vector<size_t> m_offsets;
    std::vector<float> m_base_learning_rates;
    float m_learning_rate_factor = 1.0f;
    StateArray<float> m_inference;  // n_params values: the one array inference_weights_fp32() points at
    bool m_has_inference = false;
    Buffer m_gpu_flags;  // GPU: this step's gather flags
};

}  // namespace

void register_composite(Registry<OptimizerFactory>& registry) {
    registry.add("Composite",
                 [](ConfigReader& r, const std::string& path) { return std::unique_ptr<Optimizer>(new Composite(r, path)); });
}

}  // namespace tnn
