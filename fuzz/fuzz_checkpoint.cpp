// Fuzz target: the checkpoint reader. The input is a checkpoint file; its last 8 bytes are first
// replaced by the right checksum (as someone editing a file would), so that mutations reach the
// header, size and state checks rather than stopping at the checksum. The input is read from memory
// (parse_checkpoint) and, when its config builds a small model, loaded by a Trainer through a file
// (read_checkpoint, Trainer::load, Optimizer::load_state). A tnn::Error is a correct refusal; any
// other exception, a crash, a leak or a hang is a finding.
#include <tnn/tnn.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include <sys/mman.h>
#include <unistd.h>

namespace {

constexpr size_t kMaxLoadedParams = size_t{1} << 16;  // larger models are only parsed
int g_file = -1;                                       // a memory file: Trainer::load reads a path
std::string g_path;

bool write_input(const std::vector<uint8_t>& bytes) {
    if (::ftruncate(g_file, 0) != 0) return false;
    return ::pwrite(g_file, bytes.data(), bytes.size(), 0) == static_cast<ssize_t>(bytes.size());
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
    tnn::set_log_callback([](tnn::LogLevel, const std::string&) {});
    tnn::set_num_threads(1);
    g_file = ::memfd_create("fuzz_checkpoint", MFD_CLOEXEC);
    if (g_file < 0) {
        std::perror("memfd_create");
        return 1;
    }
    g_path = "/proc/self/fd/" + std::to_string(g_file);
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    std::vector<uint8_t> file(data, data + size);
    if (file.size() >= 8 + 4 + 8 + 8) {
        const uint64_t sum = tnn::checksum64(file.data(), file.size() - 8);
        std::memcpy(file.data() + file.size() - 8, &sum, 8);
    }
    tnn::CheckpointData d;
    try {
        d = tnn::parse_checkpoint(file.data(), file.size(), "input");
    } catch (const tnn::Error&) {
        return 0;
    }
    if (d.params_fp32.size() > kMaxLoadedParams || d.n_input_dims > 16 || d.n_output_dims > 64) return 0;
    try {
        tnn::Trainer trainer(d.n_input_dims, d.n_output_dims, d.config, tnn::Device::cpu(), d.seed);
        if (trainer.model().n_params() > kMaxLoadedParams || !write_input(file)) return 0;
        trainer.load(tnn::Stream::cpu(), g_path);
    } catch (const tnn::Error&) {
    }
    return 0;
}
