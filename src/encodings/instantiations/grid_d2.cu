// The grid encodings' GPU kernels for 2-dimensional inputs, every storage type and feature count
// (one translation unit per input dimension keeps rebuilds and parallel builds short).
#include "encodings/grid_kernels_gpu.h"

namespace tnn::grid_gpu {

template <> const Launchers& launchers<2>() {
    static const Launchers table = make_launchers<2>();
    return table;
}

}  // namespace tnn::grid_gpu
