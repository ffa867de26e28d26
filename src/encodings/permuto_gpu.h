// GPU entry points of the Permuto encoding (permuto.cu), called by permuto.cpp with validated arguments
// and rows > 0, and the description of an encoding that they take: the level table as the kernels read
// it (permuto_kernels_gpu.h).
#pragma once

#include <tnn/module.h>

#include "encodings/permuto_math.h"

#include <stdint.h>

#ifdef TNN_WITH_GPU
namespace tnn::permuto_gpu {

struct PermutoDesc {
    uint32_t n_dims = 0, n_levels = 0, n_features = 0;  // n_features: per level
    uint32_t log2_table = 0;                             // entries per level: 2^log2_table
    uint32_t seed = 0;                                   // of the levels' shifts (permuto::level_shifts)
    uint32_t n_grad_dims = 0;                            // max_input_grad_dims
    DType dtype = DType::f32;
    bool deterministic = false;  // the config key; tnn::deterministic() is read per call as well
    size_t n_params = 0;
    float scales[permuto::kMaxLevels] = {};     // permuto::level_scale of each level
    float dim_factors[permuto::kMaxDims] = {};  // permuto::dim_factor of each dimension
};

// n_active: the levels [0, n_active) that are on (set_max_level, as recorded by the forward pass).
void forward(const PermutoDesc& d, const Stream& stream, ConstView input, View output, const void* params,
             uint32_t n_active);
void backward(const PermutoDesc& d, const Stream& stream, ConstView input, ConstView dL_doutput, View* dL_dinput,
              void* dL_dparams, const void* params, GradMode mode, uint32_t n_active);
void backward_backward_input(const PermutoDesc& d, const Stream& stream, ConstView input, ConstView dL_ddLdinput,
                             ConstView dL_doutput, View* dL_ddLdoutput, View* dL_dinput, void* dL_dparams,
                             const void* params, GradMode mode, uint32_t n_active);

}  // namespace tnn::permuto_gpu
#endif  // TNN_WITH_GPU
