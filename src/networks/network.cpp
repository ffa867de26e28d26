// What every MLP backend shares: activation names, tcnn's padding rule and parameter layout, Xavier
// initialisation, hyperparams(), and the otype registry behind create_network.
#include <tnn/network.h>

#include "networks/blaslt_mlp.h"
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
    f.name_origin = "tcnn";
    f.default_dtype = dtype;
    r.add(name, std::move(f));
}

// ---- The AMD RDNA4 port's names (DESIGN.md, docs/amd.md). Each is an explicit request for one of
// our backends in one precision on an AMD GPU build that has it: HipBLASLtMLP = BlasLtMLP float32 and
// HipBLASLtMLPFP16 = BlasLtMLP float16 on hipBLASLt, RocWMMAWidth64MLP = FullyFusedMLP at width 64 in
// float16 on gfx12. A build without that backend on the GPU refuses the name at creation, whatever
// the device of later calls, and says what to write instead: never another backend behind the name.

// The build's GPU backend in the words of the refusals.
enum class GpuBuild { none, cuda, hip };
constexpr GpuBuild kGpuBuild =
#if defined(TNN_WITH_CUDA)
    GpuBuild::cuda;
#elif defined(TNN_WITH_HIP)
    GpuBuild::hip;
#else
    GpuBuild::none;
#endif  // TNN_WITH_CUDA / TNN_WITH_HIP

// True when the HIP build compiled device code for a gfx12 target (cmake/hip.cmake).
constexpr bool kHipGfx12 =
#if defined(TNN_HIP_GFX12)
    true;
#else
    false;
#endif  // TNN_HIP_GFX12

struct PortName {
    const char* name;
    const char* backend;
    DType dtype;
    uint32_t width;       // the width the name fixes; 0: any (the backend's rules)
    const char* meaning;  // "BlasLtMLP in float32 on hipBLASLt"
    // What to write instead on a CUDA build, on a build without a GPU backend, and on a HIP build
    // without the library or target the name needs (that last reason included).
    const char* on_cuda;
    const char* on_cpu;
    const char* on_hip;
    bool (*hip_has_it)();
    const char* other_dtypes;  // where the other precisions are
};

bool hip_has_hipblaslt() { return blaslt_mlp::available(); }
bool hip_has_gfx12() { return kHipGfx12; }

const PortName kPortNames[] = {
    {"HipBLASLtMLP", "BlasLtMLP", DType::f32, 0, "BlasLtMLP in float32 on hipBLASLt (an AMD GPU)",
     "this build is CUDA: write \"otype\": \"BlasLtMLP\" (cuBLASLt, float32; tcnn's name: \"CutlassMLP\" with "
     "\"dtype\": \"float32\")",
     "this build has no GPU backend: write \"otype\": \"BlasLtMLP\" (float32, runs on the CPU) or \"PortableMLP\"",
     "this HIP build has no hipBLASLt (ROCm's hipblaslt package, found by CMake: docs/amd.md): rebuild with it, or "
     "write \"otype\": \"PortableMLP\" (float32 on the GPU)",
     hip_has_hipblaslt,
     "HipBLASLtMLPFP16 is the float16 name; for bfloat16 write \"otype\": \"BlasLtMLP\", \"dtype\": \"bfloat16\""},
    {"HipBLASLtMLPFP16", "BlasLtMLP", DType::f16, 0, "BlasLtMLP in float16 on hipBLASLt (an AMD GPU)",
     "this build is CUDA: write \"otype\": \"BlasLtMLP\", \"dtype\": \"float16\" (cuBLASLt; tcnn's name: "
     "\"CutlassMLP\")",
     "this build has no GPU backend: write \"otype\": \"BlasLtMLP\", \"dtype\": \"float16\" (runs on the CPU)",
     "this HIP build has no hipBLASLt (ROCm's hipblaslt package, found by CMake: docs/amd.md): rebuild with it, or "
     "write \"otype\": \"FullyFusedMLP\" (float16, widths 16-128, on gfx12) or \"PortableMLP\"",
     hip_has_hipblaslt,
     "HipBLASLtMLP is the float32 name; for bfloat16 write \"otype\": \"BlasLtMLP\", \"dtype\": \"bfloat16\""},
    {"RocWMMAWidth64MLP", "FullyFusedMLP", DType::f16, 64,
     "FullyFusedMLP at width 64 in float16 (WMMA on an AMD gfx12 GPU)",
     "this build is CUDA: write \"otype\": \"FullyFusedMLP\", \"n_neurons\": 64, \"dtype\": \"float16\" (tensor "
     "cores; tcnn's name: \"MegakernelMLP\")",
     "this build has no GPU backend: write \"otype\": \"FullyFusedMLP\", \"n_neurons\": 64 (float16, runs on the "
     "CPU) or \"PortableMLP\"",
     "this HIP build has no gfx12 code (TNN_HIP_ARCHITECTURES): rebuild for gfx1201, or write \"otype\": "
     "\"PortableMLP\"",
     hip_has_gfx12,
     "for bfloat16 write \"otype\": \"FullyFusedMLP\", \"n_neurons\": 64, \"dtype\": \"bfloat16\"; for float32 "
     "\"BlasLtMLP\" or \"PortableMLP\""},
};

void add_port_name(Registry<NetworkFactory>& r, const PortName& p) {
    const NetworkFactory& backend = r.get(p.backend);
    NetworkFactory f;
    f.backend = p.backend;
    f.name_origin = "the RDNA4 port";
    f.default_dtype = p.dtype;
    // Every dtype the backend knows, so that the request (not the generic check) refuses the others.
    f.dtypes = backend.dtypes;
    if (p.width != 0) f.default_width = p.width;
    f.check_build = [p] {
        const char* instead = kGpuBuild == GpuBuild::cuda ? p.on_cuda
                              : kGpuBuild == GpuBuild::none ? p.on_cpu
                              : p.hip_has_it()              ? nullptr
                                                            : p.on_hip;
        if (instead) throw UnsupportedError(msg(p.name, " is the AMD RDNA4 port's name for ", p.meaning, "; ", instead));
    };
    f.create = [p, create = backend.create](const MlpLayout& l, DType t, DType out, ConfigReader& reader,
                                            const std::string& who) {
        if (t != p.dtype)
            throw DTypeError(msg(who, ": the name fixes dtype ", dtype_name(p.dtype), ", got ", dtype_name(t), "; ",
                                 p.other_dtypes));
        if (p.width != 0 && l.width != p.width)
            throw ConfigError(msg(who, ": the name fixes n_neurons ", p.width, ", got ", l.width,
                                  "; write \"otype\": \"", p.backend, "\" for widths 16, 32, 128 (BlasLtMLP for any)"));
        return create(l, t, out, reader, who);
    };
    r.add(p.name, std::move(f));
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
        for (const PortName& p : kPortNames) add_port_name(r, p);
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
                                ? msg(name, " (", factory.name_origin, "'s name for ", factory.backend, ")")
                                : msg("network without 'otype' (tcnn's default, ", name, ": ", factory.backend, ")");
    if (factory.check_build) factory.check_build();
    ConfigReader r(config, factory.backend.empty() ? name + " network" : who);
    if (n_input_dims == 0) throw ConfigError(msg(who, ": n_input_dims must be at least 1"));
    if (n_output_dims == 0) throw ConfigError(msg(who, ": n_output_dims must be at least 1"));

    MlpLayout layout;
    layout.n_input_dims = n_input_dims;
    layout.n_output_dims = n_output_dims;
    layout.padded_input_dims = next_multiple(n_input_dims, 16);
    layout.padded_output_dims = next_multiple(n_output_dims, 16);
    layout.width = r.get_uint("n_neurons", factory.default_width, 1, 4096);
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
