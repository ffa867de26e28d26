// The grid encodings' GPU kernels for 7-dimensional inputs, every storage type and feature count
// (one translation unit per input dimension keeps rebuilds and parallel builds short).
#include "encodings/grid_kernels_gpu.h"

namespace tnn::grid_gpu {

template <> const Launchers& launchers<7>() {
    static const Launchers table = make_launchers<7>();
    return table;
}

}  // namespace tnn::grid_gpu
