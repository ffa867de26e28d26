// NetworkWithInputEncoding: encoding -> network as one module, parameters [network, encoding].
// Device-agnostic: it only moves views between its two parts (the encoded features live in a
// temporary tensor of the network's dtype, kept in the context for the backward pass).
#include <tnn/model.h>

namespace tnn {

namespace {

struct NwieContext : Context {
    Tensor encoded;
    ConstView output;  // the caller's forward output; like backward, the second-order pass needs it alive
    std::unique_ptr<Context> encoding_ctx, network_ctx;
};

// The module's description is built only for the error (and is not a temporary whose lifetime the
// returned reference could be mistaken to depend on).
const NwieContext& nwie_context(const Context& ctx, const Module& module) {
    const auto* c = dynamic_cast<const NwieContext*>(&ctx);
    if (!c) throw Error(module.describe() + ": backward got a context from another module");
    return *c;
}

}  // namespace

NetworkWithInputEncoding::NetworkWithInputEncoding(std::shared_ptr<Encoding> encoding, std::shared_ptr<Network> network)
    : Module(encoding->n_input_dims(), network->n_output_dims(), network->n_params() + encoding->n_params(),
             network->param_dtype(), network->output_dtype(), network->n_matrix_params()),
      m_encoding(std::move(encoding)), m_network(std::move(network)) {
    if (m_encoding->n_output_dims() != m_network->n_input_dims())
        throw ShapeError(msg("NetworkWithInputEncoding: the encoding outputs ", m_encoding->n_output_dims(),
                             " features but the network takes ", m_network->n_input_dims()));
    if (m_encoding->output_dtype() != m_network->param_dtype())
        throw DTypeError(msg("NetworkWithInputEncoding: the encoding outputs ", dtype_name(m_encoding->output_dtype()),
                             " but the network computes in ", dtype_name(m_network->param_dtype())));
    if (m_encoding->param_dtype() != m_network->param_dtype())
        throw DTypeError(msg("NetworkWithInputEncoding: encoding and network parameters must share one dtype (",
                             dtype_name(m_encoding->param_dtype()), " vs ", dtype_name(m_network->param_dtype()), ")"));
}

json NetworkWithInputEncoding::hyperparams() const {
    return {{"otype", name()}, {"encoding", m_encoding->hyperparams()}, {"network", m_network->hyperparams()}};
}

// tcnn's order: the network draws from the generator first, then the encoding.
void NetworkWithInputEncoding::init_params(Pcg32& rng, float* params) const {
    m_network->init_params(rng, params);
    m_encoding->init_params(rng, params + m_network->n_params());
}

bool NetworkWithInputEncoding::supports_device(Device d) const {
    return m_encoding->supports_device(d) && m_network->supports_device(d);
}

bool NetworkWithInputEncoding::supports_backward_backward() const {
    return m_encoding->supports_backward_backward() && m_network->supports_backward_backward();
}

std::string NetworkWithInputEncoding::backward_backward_refusal(Device d) const {
    std::string why = m_encoding->backward_backward_refusal(d);
    return why.empty() ? m_network->backward_backward_refusal(d) : why;
}

void NetworkWithInputEncoding::inference_impl(const Stream& stream, ConstView input, View output,
                                              const void* params) const {
    Tensor encoded = Tensor::temporary(stream, input.rows, m_encoding->n_output_dims(), m_encoding->output_dtype());
    const char* p = static_cast<const char*>(params);
    m_encoding->inference(stream, input, encoded.view(), p + encoding_params_offset());
    m_network->inference(stream, encoded.view(), output, params);
}

std::unique_ptr<Context> NetworkWithInputEncoding::forward_impl(const Stream& stream, ConstView input, View output,
                                                                const void* params,
                                                                bool prepare_input_gradients) const {
    auto ctx = std::make_unique<NwieContext>();
    ctx->encoded = Tensor::temporary(stream, input.rows, m_encoding->n_output_dims(), m_encoding->output_dtype());
    const char* p = static_cast<const char*>(params);
    ctx->encoding_ctx = m_encoding->forward(stream, input, ctx->encoded.view(), p + encoding_params_offset(),
                                            prepare_input_gradients);
    // The network needs input gradients whenever something upstream does: encoding params or the input.
    const bool net_input_grad = prepare_input_gradients || m_encoding->n_params() > 0;
    ctx->network_ctx = m_network->forward(stream, ctx->encoded.view(), output, params, net_input_grad);
    ctx->output = output;
    return ctx;
}

void NetworkWithInputEncoding::backward_impl(const Stream& stream, const Context& context, ConstView input,
                                             ConstView output, ConstView dL_doutput, View* dL_dinput, void* dL_dparams,
                                             const void* params, GradMode mode) const {
    const NwieContext& ctx = nwie_context(context, *this);
    const size_t off = encoding_params_offset();
    const char* p = static_cast<const char*>(params);
    char* g = static_cast<char*>(dL_dparams);
    const bool need_encoded_grad = dL_dinput || (dL_dparams && m_encoding->n_params() > 0);
    Tensor dL_dencoded;
    View dL_dencoded_view;
    if (need_encoded_grad) {
        dL_dencoded = Tensor::temporary(stream, input.rows, m_encoding->n_output_dims(), m_encoding->output_dtype());
        dL_dencoded_view = dL_dencoded.view();
    }
    m_network->backward(stream, *ctx.network_ctx, ctx.encoded.view(), output, dL_doutput,
                        need_encoded_grad ? &dL_dencoded_view : nullptr, g, params, mode);
    if (!need_encoded_grad) return;
    m_encoding->backward(stream, *ctx.encoding_ctx, input, ctx.encoded.view(), dL_dencoded.view(), dL_dinput,
                         g ? g + off : nullptr, p + off, mode);
}

// With e = enc(x), g_e = net_backward(e, dL_dy), dL_dx = enc_backward(x, g_e) and a scalar L'(dL_dx):
//   enc's second-order pass gives dL'/dg_e, dL'/dparams_enc and the direct part of dL'/dx;
//   net's second-order pass (probe dL'/dg_e) gives dL'/d(dL_dy), dL'/dparams_net and dL'/de;
//   dL'/de flows to x through enc's first-order backward and adds to dL'/dx.
void NetworkWithInputEncoding::backward_backward_input_impl(const Stream& stream, const Context& context,
                                                            ConstView input, ConstView dL_ddLdinput,
                                                            ConstView dL_doutput, View* dL_ddLdoutput,
                                                            View* dL_dinput, void* dL_dparams, const void* params,
                                                            GradMode mode) const {
    const NwieContext& ctx = nwie_context(context, *this);
    const size_t off = encoding_params_offset();
    const DType t = m_encoding->output_dtype();
    const char* p = static_cast<const char*>(params);
    char* g = static_cast<char*>(dL_dparams);
    const char* p_enc = p + off;
    char* g_enc = g ? g + off : nullptr;
    const int64_t rows = input.rows;
    const uint32_t n_enc = m_encoding->n_output_dims();

    // g_e: the network's first-order input gradient, needed by the encoding's second-order pass.
    Tensor g_e = Tensor::temporary(stream, rows, n_enc, t);
    View g_e_view = g_e.view();
    m_network->backward(stream, *ctx.network_ctx, ctx.encoded.view(), ctx.output, dL_doutput, &g_e_view, nullptr,
                        params, GradMode::overwrite);

    Tensor dLp_dge = Tensor::temporary(stream, rows, n_enc, t);
    View dLp_dge_view = dLp_dge.view();
    m_encoding->backward_backward_input(stream, *ctx.encoding_ctx, input, dL_ddLdinput, g_e.view(), &dLp_dge_view,
                                        dL_dinput, g_enc, p_enc, mode);

    Tensor dLp_de = Tensor::temporary(stream, rows, n_enc, t);
    View dLp_de_view = dLp_de.view();
    m_network->backward_backward_input(stream, *ctx.network_ctx, ctx.encoded.view(), dLp_dge.view(), dL_doutput,
                                       dL_ddLdoutput, &dLp_de_view, g, params, mode);

    if (!dL_dinput && !(g_enc && m_encoding->n_params() > 0)) return;
    // dL'/de through the encoding's Jacobian: to x (added to the direct term) and to its params.
    Tensor via_e = Tensor::temporary(stream, rows, n_input_dims(), input.dtype);
    View via_e_view = via_e.view();
    m_encoding->backward(stream, *ctx.encoding_ctx, input, ctx.encoded.view(), dLp_de.view(),
                         dL_dinput ? &via_e_view : nullptr, g_enc, p_enc, GradMode::accumulate);
    if (dL_dinput) add(stream, via_e.view(), *dL_dinput);
}

std::unique_ptr<NetworkWithInputEncoding> create_network_with_input_encoding(uint32_t n_input_dims,
                                                                             uint32_t n_output_dims,
                                                                             const json& encoding_config,
                                                                             const json& network_config) {
    // The encoding takes the network's dtype; the network takes the encoding's padding value.
    std::shared_ptr<Encoding> enc = create_encoding(n_input_dims, encoding_config, network_dtype(network_config));
    std::shared_ptr<Network> net =
        create_network(enc->n_output_dims(), n_output_dims, network_config, enc->padding_value());
    return std::make_unique<NetworkWithInputEncoding>(std::move(enc), std::move(net));
}

std::unique_ptr<NetworkWithInputEncoding> create_model(uint32_t n_input_dims, uint32_t n_output_dims,
                                                       const json& config) {
    if (!config.is_object()) throw ConfigError(msg("model config must be a JSON object, got ", config.type_name()));
    if (!config.contains("network")) throw ConfigError("model config has no 'network' key");
    const json encoding = config.contains("encoding") ? config["encoding"] : json{{"otype", "Identity"}};
    return create_network_with_input_encoding(n_input_dims, n_output_dims, encoding, config["network"]);
}

}  // namespace tnn
