// The Permuto encoding's GPU kernels for 9 to 32 input dimensions (the dimension read at run time; 1 to
// 8 have a unit each), every storage type (one translation unit per input dimension keeps rebuilds and
// parallel builds short).
#include "encodings/permuto_kernels_gpu.h"

namespace tnn::permuto_gpu {

template <> const Launchers& launchers<0>() {
    static const Launchers table = make_launchers<0>();
    return table;
}

}  // namespace tnn::permuto_gpu
