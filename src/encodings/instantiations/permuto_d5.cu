// The Permuto encoding's GPU kernels for 5-dimensional inputs, every storage type (one translation unit
// per input dimension keeps rebuilds and parallel builds short).
#include "encodings/permuto_kernels_gpu.h"

namespace tnn::permuto_gpu {

template <> const Launchers& launchers<5>() {
    static const Launchers table = make_launchers<5>();
    return table;
}

}  // namespace tnn::permuto_gpu
