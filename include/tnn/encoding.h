// Input encodings (Identity, Frequency, grids, ...): modules from [rows, n_dims] fp32 positions to
// [rows, n_output_dims] features in the encoding's dtype. Built from JSON by create_encoding.
#pragma once

#include <tnn/module.h>

namespace tnn {

class Encoding : public Module {
public:
    // The value a following network puts in its padded input lanes (tcnn: 0 after grids, 1 after
    // every other encoding, where the 1 acts as a bias of the first layer).
    virtual float padding_value() const { return 1.0f; }
    // Coarse-to-fine training for grids (tcnn's set_max_level): levels above `max_level` (a fraction
    // of n_levels in [0,1]) output zero. A no-op for encodings without levels. Thread-safe setting.
    virtual void set_max_level(float max_level) {}

protected:
    using Module::Module;
};

// dtype: the parameter and output precision (float32, float64 on the CPU, float16, bfloat16).
std::unique_ptr<Encoding> create_encoding(uint32_t n_dims, const json& config, DType dtype = DType::f32);
std::vector<std::string> encoding_names();

}  // namespace tnn
