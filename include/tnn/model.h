// NetworkWithInputEncoding: an encoding followed by a network, as one module whose parameters are
// [network params, then encoding params] (tcnn's order).
#pragma once

#include <tnn/encoding.h>
#include <tnn/network.h>

namespace tnn {

class NetworkWithInputEncoding : public Module {
public:
    NetworkWithInputEncoding(std::shared_ptr<Encoding> encoding, std::shared_ptr<Network> network);

    const Encoding& encoding() const { return *m_encoding; }
    const Network& network() const { return *m_network; }
    Encoding& encoding() { return *m_encoding; }
    // Where the encoding's parameters (and gradients) start in the model's [network, encoding] array,
    // in bytes.
    size_t encoding_params_offset() const { return m_network->n_params() * dtype_size(param_dtype()); }
    std::string name() const override { return "NetworkWithInputEncoding"; }
    json hyperparams() const override;  // {"otype", "encoding": {...}, "network": {...}}
    using Module::init_params;
    void init_params(Pcg32& rng, float* params_fp32) const override;
    bool supports_device(Device d) const override;
    bool supports_backward_backward() const override;
    std::string backward_backward_refusal(Device d) const override;

private:
    void inference_impl(const Stream& stream, ConstView input, View output, const void* params) const override;
    std::unique_ptr<Context> forward_impl(const Stream& stream, ConstView input, View output, const void* params,
                                          bool prepare_input_gradients) const override;
    void backward_impl(const Stream& stream, const Context& ctx, ConstView input, ConstView output,
                       ConstView dL_doutput, View* dL_dinput, void* dL_dparams, const void* params,
                       GradMode mode) const override;
    void backward_backward_input_impl(const Stream& stream, const Context& ctx, ConstView input,
                                      ConstView dL_ddLdinput, ConstView dL_doutput, View* dL_ddLdoutput,
                                      View* dL_dinput, void* dL_dparams, const void* params,
                                      GradMode mode) const override;

    std::shared_ptr<Encoding> m_encoding;
    std::shared_ptr<Network> m_network;
};

// The network's dtype (its "dtype" key, or its otype's default) is also the encoding's dtype.
std::unique_ptr<NetworkWithInputEncoding> create_network_with_input_encoding(uint32_t n_input_dims,
                                                                             uint32_t n_output_dims,
                                                                             const json& encoding_config,
                                                                             const json& network_config);
// A full model config {"encoding", "network", ...}; a missing encoding means Identity.
std::unique_ptr<NetworkWithInputEncoding> create_model(uint32_t n_input_dims, uint32_t n_output_dims,
                                                       const json& config);

}  // namespace tnn
