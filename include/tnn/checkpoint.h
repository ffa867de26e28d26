// Checkpoint files: magic, format version, JSON header (config, sizes, dtype, step, seed, state
// directory), raw blobs, and a 64-bit checksum of everything before it. Written to a temporary file
// in the same folder and renamed, so a crash never leaves a half-written checkpoint; a corrupt,
// truncated, foreign or newer file is refused with a CheckpointError and left untouched.
#pragma once

#include <tnn/config.h>
#include <tnn/optimizer.h>

#include <string>
#include <vector>

namespace tnn {

constexpr uint32_t kCheckpointVersion = 1;

struct CheckpointData {
    json config;            // the trainer's config (model, loss, optimizer)
    uint32_t n_input_dims = 0, n_output_dims = 0;
    DType param_dtype = DType::f32;
    uint64_t seed = 0;
    uint32_t step = 0;
    std::vector<float> params_fp32;
    std::vector<StateBlob> optimizer_state;
};

void write_checkpoint(const std::string& path, const CheckpointData& data);
CheckpointData read_checkpoint(const std::string& path);

uint64_t checksum64(const void* data, size_t bytes, uint64_t seed = 0);  // FNV-1a 64

}  // namespace tnn
