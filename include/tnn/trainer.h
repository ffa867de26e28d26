// Trainer: owns the parameters of a model (fp32 master weights plus a copy in the model's dtype),
// its gradients, a loss and an optimizer, on one device. step() = forward + loss + backward +
// optimizer, asynchronous on the stream (on a GPU replayed from a CUDA/HIP graph once the step's
// views repeat, and with forward, loss and backward fused where set_fused_loss says); loss() fetches
// the last loss value.
#pragma once

#include <tnn/loss.h>
#include <tnn/model.h>
#include <tnn/optimizer.h>

#include <memory>
#include <string>

namespace tnn {

class Trainer {
public:
    Trainer(std::shared_ptr<Module> model, std::shared_ptr<Loss> loss, std::shared_ptr<Optimizer> optimizer,
            Device device, uint64_t seed = 1337);
    // From a full config {"encoding", "network", "loss", "optimizer"} (missing loss: L2, optimizer: Adam).
    Trainer(uint32_t n_input_dims, uint32_t n_output_dims, const json& config, Device device, uint64_t seed = 1337);
    ~Trainer();
    Trainer(const Trainer&) = delete;
    Trainer& operator=(const Trainer&) = delete;

    // input [rows, n_in] fp32 (fp64 for fp64 models), target [rows, n_out] fp32/fp64, pdf optional [rows, 1].
    void step(const Stream& stream, ConstView input, ConstView target, const ConstView* data_pdf = nullptr);
    double loss(const Stream& stream) const;  // loss of the last step; synchronises

    // GPU graphs (docs/gpu.md): when the third step in a row gets the same stream and input, target
    // and pdf views (pointers, shapes, strides, dtypes), the step is captured into a graph, and later
    // steps with those views replay it; other views rebuild it after three steps. Results equal
    // uncaptured steps bit for bit. On by default; a capture that fails logs a warning and turns it off.
    // Steps on the legacy default stream (a null native handle), which cannot capture, run their graph
    // on a stream of the trainer's own, ordered after the caller's earlier work and before its later work.
    // A graph keeps the host-side module settings it was captured with (a grid's set_max_level): after
    // changing one, set_use_graphs(false) then (true) drops the graph.
    void set_use_graphs(bool on);
    bool use_graphs() const;
    uint64_t graph_captures() const;  // graphs captured so far
    uint64_t graph_steps() const;     // steps run from a graph (each capturing step included)
    // The fused step: a FullyFusedMLP model (alone or behind an input encoding) with ReLU hidden layers
    // and a linear output, on an NVIDIA GPU, with the loss L2, L1, RelativeL2, RelativeL1, MAPE or
    // SMAPE and no pdf, runs forward, loss and backward of its network as one kernel: the backward
    // kernel, which recomputes the forward pass anyway, takes the loss gradient of the recomputed
    // output itself. Parameters, gradients and loss() equal the unfused step bit for bit; only the
    // forward pass and the loss kernel are saved. On by default; fused_loss() says whether steps
    // without a pdf take it.
    void set_fused_loss(bool on);
    bool fused_loss() const;
    // Uses the optimizer's inference weights (EMA, Average) when it has them.
    void inference(const Stream& stream, ConstView input, View output) const;

    const Module& model() const { return *m_model; }
    Module& model() { return *m_model; }
    const Loss& loss_fn() const { return *m_loss; }
    Optimizer& optimizer() { return *m_optimizer; }
    const Optimizer& optimizer() const { return *m_optimizer; }
    Device device() const { return m_device; }
    uint64_t seed() const { return m_seed; }
    uint32_t step_count() const;
    // tcnn's static loss scale: 128 for fp16 / bf16 parameters, 1 otherwise.
    float loss_scale() const { return m_loss_scale; }
    json config() const;  // {"encoding"?, "network"?, "model", "loss", "optimizer"}

    // Parameters: fp32 master copy and the model-dtype copy, both on device().
    const float* params_fp32() const;
    const void* params() const;
    std::vector<float> params_host(const Stream& stream) const;
    void set_params(const Stream& stream, const float* host_params_fp32);  // also resets the optimizer state
    // Master weights in caller memory (e.g. a PyTorch tensor shared with a module): from now on the
    // trainer reads and updates the n_params() fp32 values at `params_fp32` (memory of device(), kept
    // alive by the caller) instead of its own copy, whose values are dropped. Every step starts by
    // rounding them into the model-dtype copy, so values the caller writes between steps take effect
    // (the optimizer state is kept, as a PyTorch optimizer keeps its state when weights are loaded).
    void bind_params(const Stream& stream, float* params_fp32);

    // Checkpoints (see checkpoint.h): model config, parameters, optimizer state, step, seed.
    void save(const Stream& stream, const std::string& path) const;
    void load(const Stream& stream, const std::string& path);  // config must match this trainer's

private:
    void refresh_param_copy(const Stream& stream);  // the model-dtype copy from the master weights

    struct Impl;
    std::unique_ptr<Impl> m_impl;
    std::shared_ptr<Module> m_model;
    std::shared_ptr<Loss> m_loss;
    std::shared_ptr<Optimizer> m_optimizer;
    Device m_device;
    uint64_t m_seed;
    float m_loss_scale = 1.0f;
};

}  // namespace tnn
