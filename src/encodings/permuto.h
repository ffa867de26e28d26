// The Permuto encoding's lattice as a function of its configuration: per level and input dimension the
// fp32 scale (base_scale * per_level_scale^l / sqrt((i+1)(i+2))) and shift (from `seed`). The module
// (permuto.cpp) builds it once; tests use it to keep their points away from simplex faces.
#pragma once

#include <stddef.h>
#include <stdint.h>

#include <vector>

namespace tnn {

struct PermutoLevels {
    uint32_t n_dims = 0, n_levels = 0;
    std::vector<float> level_scale;  // [n_levels]: permuto::level_scale
    std::vector<float> scale;        // [n_levels * n_dims]: level_scale * permuto::dim_factor(i)
    std::vector<float> shift;        // [n_levels * n_dims]: permuto::level_shifts
    const float* scale_of(uint32_t level) const { return scale.data() + static_cast<size_t>(level) * n_dims; }
    const float* shift_of(uint32_t level) const { return shift.data() + static_cast<size_t>(level) * n_dims; }
};

PermutoLevels permuto_levels(uint32_t n_dims, uint32_t n_levels, float base_scale, float per_level_scale,
                             uint32_t seed);

}  // namespace tnn
