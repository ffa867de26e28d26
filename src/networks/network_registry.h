// How network backends plug into create_network: each backend provides a factory with its default
// dtype, its supported dtypes, and a create function that validates backend-specific limits.
#pragma once

#include <tnn/network.h>

#include <functional>
#include <vector>

namespace tnn {

struct NetworkFactory {
    DType default_dtype = DType::f32;
    std::vector<DType> dtypes;
    // Reads backend-specific keys from the reader (common keys are read already) and builds it.
    std::function<std::unique_ptr<Network>(const MlpLayout&, DType dtype, DType output_dtype, ConfigReader&)> create;
};

// One registration function per backend file; network.cpp lists them.
void register_portable_mlp(Registry<NetworkFactory>& registry);
void register_blaslt_mlp(Registry<NetworkFactory>& registry);
void register_fully_fused_mlp(Registry<NetworkFactory>& registry);

const Registry<NetworkFactory>& network_registry();

}  // namespace tnn
