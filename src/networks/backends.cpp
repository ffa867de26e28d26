// The list of network backends create_network knows, in the order error messages name them.
#include "networks/network_registry.h"

namespace tnn {

void register_networks(Registry<NetworkFactory>& registry) {
    register_portable_mlp(registry);
    register_blaslt_mlp(registry);
    register_fully_fused_mlp(registry);
}

}  // namespace tnn
