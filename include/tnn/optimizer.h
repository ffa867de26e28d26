// Optimizers over one flat parameter array (tcnn semantics, TCNN_COMPAT.md). Weights are kept in
// fp32 master copies; every step writes them, rounded, into the module's parameter dtype.
// Wrappers (ExponentialDecay, EMA, Average, Lookahead, Batched, Composite) own a nested optimizer.
#pragma once

#include <tnn/config.h>
#include <tnn/tensor.h>

#include <memory>
#include <string>
#include <vector>

namespace tnn {

// One named piece of optimizer state, as host bytes, for checkpoints.
struct StateBlob {
    std::string name;
    DType dtype = DType::f32;
    std::vector<uint8_t> bytes;
};

class Optimizer {
public:
    virtual ~Optimizer() = default;
    virtual std::string name() const = 0;
    virtual json hyperparams() const = 0;

    // Sizes the state for n_params parameters on `device`; the first n_matrix_params are MLP weight
    // matrices (see Module::n_matrix_params). Resets the state.
    void allocate(Device device, size_t n_params, size_t n_matrix_params);
    // One step. gradients: n_params values in grad_dtype, scaled by loss_scale. Updates weights_fp32
    // and writes the rounded result into `weights` (weights_dtype; may alias weights_fp32 when fp32).
    void step(const Stream& stream, float loss_scale, float* weights_fp32, void* weights, DType weights_dtype,
              const void* gradients, DType grad_dtype);

    virtual float learning_rate() const = 0;
    virtual void set_learning_rate(float lr) = 0;
    uint32_t step_count() const { return m_step; }
    size_t n_params() const { return m_n_params; }
    Device device() const { return m_device; }

    // Weights to use for inference (EMA / Average); nullptr: the trained weights. fp32, on device().
    virtual const float* inference_weights_fp32() const { return nullptr; }

    // Checkpoint support: every piece of state as host bytes, and back. load_state checks names/sizes.
    virtual std::vector<StateBlob> state(const Stream& stream) const;
    virtual void load_state(const Stream& stream, const std::vector<StateBlob>& blobs);

protected:
    virtual void allocate_impl() = 0;
    virtual void step_impl(const Stream& stream, float loss_scale, float* weights_fp32, void* weights,
                           DType weights_dtype, const void* gradients, DType grad_dtype) = 0;
    // State beyond the step counter (names unique within this optimizer; wrappers prefix nested ones).
    virtual std::vector<StateBlob> state_impl(const Stream& stream) const { return {}; }
    virtual void load_state_impl(const Stream& stream, const std::vector<StateBlob>& blobs) {}

    Device m_device = Device::cpu();
    size_t m_n_params = 0, m_n_matrix_params = 0;
    uint32_t m_step = 0;
    bool m_allocated = false;  // step() and load_state() before allocate() are refused
};

std::unique_ptr<Optimizer> create_optimizer(const json& config);
std::vector<std::string> optimizer_names();

}  // namespace tnn
