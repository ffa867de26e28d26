// Checkpoint files: magic, format version, JSON header (config, sizes, dtype, step, seed, state
// directory), raw blobs, and a 64-bit checksum of everything before it. Written to a temporary file
// in the same folder and renamed, so a crash never leaves a half-written checkpoint; a corrupt,
// truncated, foreign or newer file is refused with a CheckpointError and left untouched. The reader
// validates the header before it reads (or allocates for) the payload: every size is checked against
// the file's length, and nothing else than a regular file is read.
#pragma once

#include <tnn/config.h>
#include <tnn/optimizer.h>

#include <string>
#include <vector>

namespace tnn {

constexpr uint32_t kCheckpointVersion = 1;

// One optimizer state blob as the header lists it: name (unique, printable), dtype (float32 arrays
// or one float64 scalar) and size in bytes.
struct CheckpointBlobInfo {
    std::string name;
    DType dtype = DType::f32;
    uint64_t bytes = 0;
};

// A checkpoint's header, validated: what read_checkpoint_header returns without reading the payload.
struct CheckpointHeader {
    json config;  // the trainer's config (model, loss, optimizer): an object
    uint32_t n_input_dims = 0, n_output_dims = 0;
    DType param_dtype = DType::f32;
    uint64_t seed = 0;
    uint32_t step = 0;
    uint64_t n_params = 0;  // at most 2^32 - 1 (what an optimizer indexes)
    std::vector<CheckpointBlobInfo> optimizer_state;
    uint64_t file_bytes = 0;  // the file's length, which the header's sizes add up to
};

struct CheckpointData {
    json config;            // the trainer's config (model, loss, optimizer)
    uint32_t n_input_dims = 0, n_output_dims = 0;
    DType param_dtype = DType::f32;
    uint64_t seed = 0;
    uint32_t step = 0;
    std::vector<float> params_fp32;
    std::vector<StateBlob> optimizer_state;
};

// Refuses (CheckpointError) data that read_checkpoint would refuse: a config that is not an object or
// is nested too deep, more than 2^32 - 1 parameters, a state blob with a bad or repeated name or a
// size its dtype does not allow; an existing path that is not a regular file or a link.
void write_checkpoint(const std::string& path, const CheckpointData& data);
CheckpointData read_checkpoint(const std::string& path);
// Magic, version and header only: lets a caller compare sizes with its model before the payload is read.
CheckpointHeader read_checkpoint_header(const std::string& path);
// A checkpoint held in memory, with the same checks as read_checkpoint (`what` names it in messages).
CheckpointData parse_checkpoint(const void* bytes, size_t size, const std::string& what);

uint64_t checksum64(const void* data, size_t bytes, uint64_t seed = 0);  // FNV-1a 64

}  // namespace tnn
