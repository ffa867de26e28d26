// What every MLP backend shares: activation names, tcnn's padding rule and parameter layout, Xavier
// initialisation, hyperparams(), and the otype registry behind create_network.
#include <tnn/network.h>

#include "networks/fused_loss.h"
#include "networks/network_registry.h"

#include <algorithm>
#include <cmath>

namespace tnn {

namespace {
const std::vector<std::string>& activation_names() {
    static const std::vector<std::string> names = {"None", "ReLU", "LeakyReLU", "Exponential", "Sine",
                                                   "Sigmoid", "Squareplus", "Softplus", "Tanh", "SiLU"};
    return names;
}
uint32_t next_multiple(uint32_t v, uint32_t m) { return (v + m - 1) / m * m; }
}  // namespace

Activation parse_activation(const std::string& name) {
    const auto& names = activation_names();
    for (size_t i = 0; i < names.size(); ++i)
        if (iequals(names[i], name)) return static_cast<Activation>(i);
    throw ConfigError(msg("unknown activation '", name, "'; valid choices: ", join(names)));
}

const char* activation_name(Activation a) { return activation_names()[static_cast<size_t>(a)].c_str(); }

size_t MlpLayout::weight_offset(uint32_t l) const {
    size_t off = 0;
    for (uint32_t i = 0; i < l; ++i) off += static_cast<size_t>(layer_out(i)) * layer_in(i);
    return off;
}

size_t MlpLayout::n_matrix_params() const { return weight_offset(n_layers()); }

size_t MlpLayout::bias_offset(uint32_t l) const {
    size_t off = n_matrix_params();
    for (uint32_t i = 0; i < l; ++i) off += layer_out(i);
    return off;
}

size_t MlpLayout::n_params() const { return bias ? bias_offset(n_layers()) : n_matrix_params(); }

Network::Network(const MlpLayout& layout, DType dtype, DType output_dtype)
    : Module(layout.n_input_dims, layout.n_output_dims, layout.n_params(), dtype, output_dtype,
             layout.n_matrix_params()),
      m_layout(layout) {}

json Network::hyperparams() const {
    json j = {{"otype", name()},
              {"n_neurons", m_layout.width},
              {"n_hidden_layers", m_layout.n_hidden_layers},
              {"activation", activation_name(m_layout.activation)},
              {"output_activation", activation_name(m_layout.output_activation)},
              {"dtype", dtype_name(param_dtype())}};
    if (m_layout.bias) j["bias"] = true;
    if (output_dtype() != param_dtype()) j["output_dtype"] = dtype_name(output_dtype());
    return j;
}

void Network::init_params(Pcg32& rng, float* params) const {
    for (uint32_t l = 0; l < m_layout.n_layers(); ++l) {
        const uint32_t fan_in = m_layout.layer_in(l), fan_out = m_layout.layer_out(l);
        const float scale = std::sqrt(6.0f / static_cast<float>(fan_in + fan_out));
        float* w = params + m_layout.weight_offset(l);
        for (size_t i = 0; i < static_cast<size_t>(fan_in) * fan_out; ++i) w[i] = rng.next_float() * 2.0f * scale - scale;
    }
    if (m_layout.bias)
        for (size_t i = m_layout.n_matrix_params(); i < m_layout.n_params(); ++i) params[i] = 0.0f;
}

namespace {

// tcnn's otype when a network config has none.
constexpr const char* kTcnnDefaultOtype = "MLP";

// Registers tcnn's name for one of our backends: the backend's factory, with tcnn's default precision.
void add_tcnn_name(Registry<NetworkFactory>& r, const std::string& name, const std::string& backend, DType dtype) {
    NetworkFactory f = r.get(backend);
    f.backend = backend;
    f.default_dtype = dtype;
    r.add(name, std::move(f));
}

// The otype of a network config: its "otype" key, or tcnn's default when there is none.
std::string network_otype(const json& config) {
    if (config.is_object() && !config.contains("otype")) return kTcnnDefaultOtype;
    return require_otype(config, "network");
}

}  // namespace

const Registry<NetworkFactory>& network_registry() {
    static const Registry<NetworkFactory> registry = [] {
        Registry<NetworkFactory> r("network");  // in the order error messages name them
        register_portable_mlp(r);
        register_blaslt_mlp(r);
        register_fully_fused_mlp(r);
        // tcnn's names (TCNN_COMPAT.md): CutlassMLP is its GEMM MLP of any width, which BlasLtMLP is;
        // MLP is its name for CutlassMLP and the otype of a config without one; MegakernelMLP is its
        // name for FullyFusedMLP. They take tcnn's network precision, float16 (its default on every GPU
        // with tensor cores), where the config names none. The module is the backend: hyperparams()
        // give the backend's otype and the dtype, so they round-trip without the alias.
        add_tcnn_name(r, "CutlassMLP", "BlasLtMLP", DType::f16);
        add_tcnn_name(r, kTcnnDefaultOtype, "BlasLtMLP", DType::f16);
        add_tcnn_name(r, "MegakernelMLP", "FullyFusedMLP", DType::f16);
        return r;
    }();
    return registry;
}

std::vector<std::string> network_names() { return network_registry().names(); }

DType network_dtype(const json& config) {
    const NetworkFactory& factory = network_registry().get(network_otype(config));
    auto it = config.find("dtype");
    if (it == config.end()) return factory.default_dtype;
    if (!it->is_string()) throw ConfigError(msg("network: key 'dtype' must be a string, got ", it->dump()));
    return parse_dtype(it->get<std::string>());
}

std::unique_ptr<Network> create_network(uint32_t n_input_dims, uint32_t n_output_dims, const json& config,
                                        float input_pad_value) {
    const std::string otype = network_otype(config);
    const NetworkFactory& factory = network_registry().get(otype);
    const std::string name = network_registry().canonical_name(otype);
    // Errors name what the config asked for and, for tcnn's names, the backend that runs it.
    const std::string who = factory.backend.empty() ? name
                            : config.contains("otype")
                                ? msg(name, " (tcnn's name for ", factory.backend, ")")
                                : msg("network without 'otype' (tcnn's default, ", name, ": ", factory.backend, ")");
    ConfigReader r(config, factory.backend.empty() ? name + " network" : who);
    if (n_input_dims == 0) throw ConfigError(msg(who, ": n_input_dims must be at least 1"));
    if (n_output_dims == 0) throw ConfigError(msg(who, ": n_output_dims must be at least 1"));

    MlpLayout layout;
    layout.n_input_dims = n_input_dims;
    layout.n_output_dims = n_output_dims;
    layout.padded_input_dims = next_multiple(n_input_dims, 16);
    layout.padded_output_dims = next_multiple(n_output_dims, 16);
    layout.width = r.get_uint("n_neurons", 128, 1, 4096);
    layout.n_hidden_layers = r.get_uint("n_hidden_layers", 5, 0, 64);
    layout.bias = r.get_bool("bias", false);
    layout.input_pad_value = input_pad_value;
    layout.activation = parse_activation(r.get_string("activation", "ReLU"));
    layout.output_activation = parse_activation(r.get_string("output_activation", "None"));

    const DType dtype = r.has("dtype") ? parse_dtype(r.get_string("dtype", "")) : factory.default_dtype;
    const DType output_dtype = r.has("output_dtype") ? parse_dtype(r.get_string("output_dtype", "")) : dtype;
    if (std::find(factory.dtypes.begin(), factory.dtypes.end(), dtype) == factory.dtypes.end()) {
        std::vector<std::string> valid;
        for (DType t : factory.dtypes) valid.push_back(dtype_name(t));
        throw DTypeError(msg(who, ": dtype ", dtype_name(dtype), " is not supported; valid choices: ", join(valid)));
    }
    if (output_dtype != dtype && output_dtype != DType::f32)
        throw DTypeError(msg(who, ": output_dtype must be the network dtype (", dtype_name(dtype), ") or float32, got ",
                             dtype_name(output_dtype)));
    auto net = factory.create(layout, dtype, output_dtype, r, who);
    r.finish();
    return net;
}

void fused_loss_backward(const Module& model, const Stream& stream, ConstView input, ConstView target, LossKind kind,
                         float loss_scale, View values, View* dL_dinput, void* dL_dparams, const void* params) {
    const FusedLossStep* step = fused_loss_step(model, input.device, kind);
    if (!step)
        throw UnsupportedError(msg(model.describe(), ": the fused training step needs a FullyFusedMLP with ReLU hidden "
                                   "layers and a linear output on an NVIDIA GPU, and one of the losses L2, L1, "
                                   "RelativeL2, RelativeL1, MAPE, SMAPE"));
    step->fused_loss_backward(stream, input, target, kind, loss_scale, values, dL_dinput, dL_dparams, params);
}

}  // namespace tnn
