// How network backends plug into create_network: each backend provides a factory with its default
// dtype, its supported dtypes, and a create function that validates backend-specific limits.
#pragma once

#include <tnn/network.h>

#include <functional>
#include <string>
#include <vector>

namespace tnn {

struct NetworkFactory {
    DType default_dtype = DType::f32;
    std::vector<DType> dtypes;
    // Reads backend-specific keys from the reader (common keys are read already) and builds it. `who`
    // names the request in errors: the backend, or tcnn's name and the backend it means.
    std::function<std::unique_ptr<Network>(const MlpLayout&, DType dtype, DType output_dtype, ConfigReader&,
                                           const std::string& who)>
        create;
    // For other projects' names of a backend (tcnn's CutlassMLP, MLP, MegakernelMLP; the RDNA4 port's
    // HipBLASLtMLP, HipBLASLtMLPFP16, RocWMMAWidth64MLP): the backend's own name, and whose name it is
    // ("tcnn", "the RDNA4 port"); empty for the backend's own entry. The module reports the backend's
    // name (hyperparams round-trip).
    std::string backend;
    std::string name_origin;
    // n_neurons when the config names none: tcnn's default, or the width a name fixes.
    uint32_t default_width = 128;
    // For a name this build may lack the backend for (the RDNA4 port's): throws UnsupportedError
    // naming what to write instead. Runs before anything else of the config is read.
    std::function<void()> check_build;
};

// One registration function per backend file; network.cpp lists them.
void register_portable_mlp(Registry<NetworkFactory>& registry);
void register_blaslt_mlp(Registry<NetworkFactory>& registry);
void register_fully_fused_mlp(Registry<NetworkFactory>& registry);

const Registry<NetworkFactory>& network_registry();

}  // namespace tnn
