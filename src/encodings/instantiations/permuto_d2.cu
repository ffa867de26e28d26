// The Permuto encoding's GPU kernels for 2-dimensional inputs, every storage type (one translation unit
// per input dimension keeps rebuilds and parallel builds short).
#include "encodings/permuto_kernels_gpu.h"

namespace tnn::permuto_gpu {

template <> const Launchers& launchers<2>() {
    static const Launchers table = make_launchers<2>();
    return table;
}

}  // namespace tnn::permuto_gpu
