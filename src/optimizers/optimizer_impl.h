// What the optimizer implementations share: the registry behind create_optimizer (each file adds
// its otypes), nested-optimizer creation with a config path for messages, state arrays on the
// optimizer's device with their checkpoint blobs, the two halves of a GPU step, and the CPU loop helpers.
#pragma once

#include <tnn/optimizer.h>

#include "core/parallel.h"
#include "optimizers/optimizer_gpu.h"

#include <cstring>
#include <functional>
#include <string>
#include <vector>

namespace tnn {

// Builds one optimizer from its config; `path` names where the config sits ("optimizer",
// "optimizer.nested", "optimizer.nested[1]") and the reader's messages already carry it.
using OptimizerFactory = std::function<std::unique_ptr<Optimizer>(ConfigReader& reader, const std::string& path)>;

void register_adam(Registry<OptimizerFactory>& registry);
void register_sgd(Registry<OptimizerFactory>& registry);
void register_novograd(Registry<OptimizerFactory>& registry);
void register_exponential_decay(Registry<OptimizerFactory>& registry);
void register_ema(Registry<OptimizerFactory>& registry);
void register_average(Registry<OptimizerFactory>& registry);
void register_lookahead(Registry<OptimizerFactory>& registry);
void register_batched(Registry<OptimizerFactory>& registry);
void register_composite(Registry<OptimizerFactory>& registry);

// create_optimizer for a config found at `path`; a missing otype means Adam (tcnn's default).
// extra_key: a key of the config that its parent reads (Composite's n_params_to_optimize), so the
// nested config is read in place rather than copied without it.
std::unique_ptr<Optimizer> create_optimizer_at(const json& config, const std::string& path,
                                               const char* extra_key = nullptr);
// The wrappers' "nested" key: absent means {"otype": "Adam"} with its defaults.
std::unique_ptr<Optimizer> create_nested_optimizer(ConfigReader& reader, const std::string& path);

// Reads a float in [min, max) (betas, decays): ConfigReader's ranges are inclusive.
double get_float_below(ConfigReader& reader, const char* key, double def, double min, double max_exclusive);

// n values of E (float or uint32_t) on a device, zeroed by allocate().
template <typename E> class StateArray {
public:
    void allocate(Device device, size_t n);
    E* data() const { return m_buffer.ptr<E>(); }
    size_t size() const { return m_size; }
    Device device() const { return m_buffer.device(); }
    // The array as a host blob. uint32 arrays carry their raw bits in a blob tagged f32 (4-byte
    // elements): StateBlob has no integer dtype.
    StateBlob to_blob(const Stream& stream, const std::string& name) const;
    void from_blob(const Stream& stream, const StateBlob& blob);  // sizes are checked by Optimizer::load_state

private:
    Buffer m_buffer;
    size_t m_size = 0;
};

// ---- GPU steps in two halves, so that a graph can hold the device half (the Trainer's CUDA graphs).
// On a GPU, Optimizer::step is gpu_prepare then gpu_record; step_impl is the CPU path only.

// What a step gets, as Optimizer::step takes it.
struct GpuStepArgs {
    float loss_scale;
    float* weights_fp32;
    void* weights;
    DType weights_dtype;
    const void* gradients;
    DType grad_dtype;
    // The same arrays from parameter `offset` on (Composite's slices).
    GpuStepArgs slice(size_t offset) const {
        return {loss_scale, weights_fp32 + offset, static_cast<char*>(weights) + offset * dtype_size(weights_dtype),
                weights_dtype, static_cast<const char*>(gradients) + offset * dtype_size(grad_dtype), grad_dtype};
    }
};

class GpuSplitStep {
public:
    // Host half, never inside a capture: advances the counters (step_count() included) and uploads this
    // step's scalars into device memory with one small launch; (re)sizes scratch buffers. active =
    // false: a wrapper skips this optimizer this step (Batched between updates): nothing advances and
    // the device half does nothing.
    virtual void gpu_prepare(const Stream& stream, const GpuStepArgs& args, bool active) = 0;
    // Device half: kernels only, reading this step's scalars from device memory. The launches and their
    // arguments are the same on every step with the same args, so one captured copy replays any later
    // step after its gpu_prepare.
    virtual void gpu_record(const Stream& stream, const GpuStepArgs& args) = 0;
    // The array that holds this optimizer's inference weights whenever inference_weights_fp32() is not
    // nullptr (it is that array then), or nullptr if it never has any.
    virtual const float* gpu_inference_buffer() const { return nullptr; }

protected:
    ~GpuSplitStep() = default;
};

// The optimizer's GPU halves; nullptr for an optimizer defined outside the library (its step_impl then
// runs on the GPU too, and the Trainer does not capture it).
GpuSplitStep* gpu_split(Optimizer& opt);
// The same, for nested optimizers, which are always the library's: throws if one is not.
GpuSplitStep& nested_gpu_split(Optimizer& opt);

// One optimizer's per-step scalars in device memory (allocated for GPU optimizers only).
template <typename T> class DeviceScalars {
public:
    static_assert(sizeof(T) % 4 == 0, "scalars upload as 32-bit words");
    void allocate(Device device) { m_buffer = device.is_gpu() ? Buffer(device, sizeof(T)) : Buffer(); }
    void upload(const Stream& stream, const T& value) { optimizer_gpu::upload(stream, m_buffer.data(), &value, sizeof(T)); }
    const T* get() const { return m_buffer.ptr<T>(); }

private:
    Buffer m_buffer;
};

// Scalars (step counters, learning rates) travel as one f64 each: exact for uint32 and float.
StateBlob scalar_blob(const std::string& name, double value);
const StateBlob& find_blob(const std::vector<StateBlob>& blobs, const std::string& name);
double blob_scalar(const std::vector<StateBlob>& blobs, const std::string& name);
// Wrappers namespace a nested optimizer's blobs: "nested." + name.
void append_prefixed(std::vector<StateBlob>& out, const std::vector<StateBlob>& nested, const std::string& prefix);
std::vector<StateBlob> strip_prefix(const std::vector<StateBlob>& blobs, const std::string& prefix);

// Base of the wrappers around one nested optimizer: the learning rate and the inference weights pass
// through unless a wrapper overrides them; the nested state is namespaced "nested.".
class SingleNestedOptimizer : public Optimizer, public GpuSplitStep {
public:
    float learning_rate() const override { return m_nested->learning_rate(); }
    void set_learning_rate(float lr) override { m_nested->set_learning_rate(lr); }
    const float* inference_weights_fp32() const override { return m_nested->inference_weights_fp32(); }
    const float* gpu_inference_buffer() const override { return nested_gpu().gpu_inference_buffer(); }

protected:
    explicit SingleNestedOptimizer(std::unique_ptr<Optimizer> nested) : m_nested(std::move(nested)) {}
    void allocate_nested() { m_nested->allocate(m_device, m_n_params, m_n_matrix_params); }
    void nested_state(const Stream& stream, std::vector<StateBlob>& out) const {
        append_prefixed(out, m_nested->state(stream), "nested.");
    }
    void load_nested_state(const Stream& stream, const std::vector<StateBlob>& blobs) {
        m_nested->load_state(stream, strip_prefix(blobs, "nested."));
    }
    GpuSplitStep& nested_gpu() const { return nested_gpu_split(*m_nested); }

    std::unique_ptr<Optimizer> m_nested;
};

// Element loops over the flat parameter array: fixed chunks, so results never depend on the thread count.
constexpr int64_t kOptimizerGrain = 1 << 14;
inline void for_each_param(size_t n, const std::function<void(int64_t, int64_t)>& f) {
    parallel_for(static_cast<int64_t>(n), kOptimizerGrain, f);
}

// Calls f(G{}, W{}) with the host storage types of the gradient and weight dtypes.
template <typename F> void dispatch_grad_weight(DType grad_dtype, DType weight_dtype, F&& f) {
    dispatch_dtype(grad_dtype, [&](auto g) { dispatch_dtype(weight_dtype, [&](auto w) { f(g, w); }); });
}

template <typename T> inline float to_float(T x) { return static_cast<float>(x); }
// The fp32 value a weight has after rounding to storage type T.
template <typename T> inline T from_float(float x) { return T(x); }
template <typename T> inline float round_through(float x) { return to_float(from_float<T>(x)); }

// Reads the n weights in weights_dtype at `weights` as fp32 into out (the "rounded copy" some wrappers average).
void weights_as_float(const void* weights, DType weights_dtype, size_t n, float* out);
// Writes fp32 values rounded into n weights of weights_dtype (skipped when it is the same fp32 array).
void store_rounded(const float* values, void* weights, DType weights_dtype, size_t n);

}  // namespace tnn
