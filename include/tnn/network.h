// MLP networks: PortableMLP (readable, any width), BlasLtMLP (vendor BLAS-Lt GEMMs) and
// FullyFusedMLP (tensor cores). All share tcnn's padding rule and parameter layout (network.cpp),
// so one parameter vector means the same function on every backend.
#pragma once

#include <tnn/module.h>

#include <vector>

namespace tnn {

class FusedLossStep;  // src/networks/fused_loss.h

enum class Activation : uint8_t { None, ReLU, LeakyReLU, Exponential, Sine, Sigmoid, Squareplus, Softplus, Tanh, SiLU };
Activation parse_activation(const std::string& name);  // case-insensitive; throws naming the choices
const char* activation_name(Activation a);

// The shape every MLP backend agrees on. Lanes past n_input_dims up to padded_input_dims hold
// input_pad_value; outputs past n_output_dims up to padded_output_dims are computed and dropped.
struct MlpLayout {
    uint32_t n_input_dims = 0, n_output_dims = 0;
    uint32_t padded_input_dims = 0, padded_output_dims = 0;
    uint32_t width = 0, n_hidden_layers = 0;
    bool bias = false;
    float input_pad_value = 1.0f;
    Activation activation = Activation::ReLU, output_activation = Activation::None;

    uint32_t n_layers() const { return n_hidden_layers + 1; }  // weight matrices
    uint32_t layer_in(uint32_t l) const { return l == 0 ? padded_input_dims : width; }
    uint32_t layer_out(uint32_t l) const { return l == n_hidden_layers ? padded_output_dims : width; }
    // Row-major [layer_out x layer_in] matrices back to back, then (with bias) one vector per layer.
    size_t weight_offset(uint32_t l) const;
    size_t bias_offset(uint32_t l) const;
    size_t n_matrix_params() const;
    size_t n_params() const;
};

class Network : public Module {
public:
    const MlpLayout& layout() const { return m_layout; }
    uint32_t width() const { return m_layout.width; }
    uint32_t n_hidden_layers() const { return m_layout.n_hidden_layers; }
    bool accepts_input_dtype(DType t) const override { return t == param_dtype() || t == input_dtype(); }
    json hyperparams() const override;
    using Module::init_params;
    void init_params(Pcg32& rng, float* params_fp32) const override;  // Xavier-uniform per matrix, zero bias
    // The fused training step (forward, loss and backward in one pass) where this backend has one.
    virtual const FusedLossStep* fused_loss_step() const { return nullptr; }

protected:
    Network(const MlpLayout& layout, DType dtype, DType output_dtype);
    MlpLayout m_layout;
};

// Builds a network from {"otype", "n_neurons", "n_hidden_layers", "activation", "output_activation",
// "bias", "dtype", "output_dtype"}. input_pad_value: what the padded input lanes hold (tcnn: 1 unless
// the input comes from a grid encoding).
std::unique_ptr<Network> create_network(uint32_t n_input_dims, uint32_t n_output_dims, const json& config,
                                        float input_pad_value = 1.0f);
std::vector<std::string> network_names();
// The dtype a network config asks for: its "dtype" key, or its otype's default.
DType network_dtype(const json& config);

}  // namespace tnn
