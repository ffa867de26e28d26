// Checkpoint files. Layout: "TNN-CKPT" | u32 version | u64 header bytes | JSON header | payload
// (fp32 params, then each state blob) | u64 FNV-1a checksum of everything before it. Written to a
// temporary file next to the target, flushed to disk and renamed over it.
#include <tnn/checkpoint.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>

#include <fcntl.h>
#include <unistd.h>

namespace tnn {

namespace {

constexpr char kMagic[8] = {'T', 'N', 'N', '-', 'C', 'K', 'P', 'T'};
constexpr size_t kPrefix = 8 + 4 + 8;  // magic, version, header length

template <typename T> void put(std::string& out, T v) { out.append(reinterpret_cast<const char*>(&v), sizeof(T)); }
template <typename T> T get(const std::string& in, size_t off) {
    T v;
    std::memcpy(&v, in.data() + off, sizeof(T));
    return v;
}

}  // namespace

uint64_t checksum64(const void* data, size_t bytes, uint64_t seed) {
    uint64_t h = 0xcbf29ce484222325ULL ^ seed;
    const auto* p = static_cast<const uint8_t*>(data);
    for (size_t i = 0; i < bytes; ++i) {
        h ^= p[i];
        h *= 0x100000001b3ULL;
    }
    return h;
}

void write_checkpoint(const std::string& path, const CheckpointData& data) {
    json header = {{"format", "tiny-rdna4-nn checkpoint"},
                   {"config", data.config},
                   {"n_input_dims", data.n_input_dims},
                   {"n_output_dims", data.n_output_dims},
                   {"param_dtype", dtype_name(data.param_dtype)},
                   {"seed", data.seed},
                   {"step", data.step},
                   {"n_params", data.params_fp32.size()}};
    json blobs = json::array();
    for (const auto& b : data.optimizer_state)
        blobs.push_back({{"name", b.name}, {"dtype", dtype_name(b.dtype)}, {"bytes", b.bytes.size()}});
    header["optimizer_state"] = blobs;
    const std::string header_text = header.dump();

    std::string file(kMagic, 8);
    put<uint32_t>(file, kCheckpointVersion);
    put<uint64_t>(file, header_text.size());
    file += header_text;
    file.append(reinterpret_cast<const char*>(data.params_fp32.data()), data.params_fp32.size() * sizeof(float));
    for (const auto& b : data.optimizer_state) file.append(reinterpret_cast<const char*>(b.bytes.data()), b.bytes.size());
    put<uint64_t>(file, checksum64(file.data(), file.size()));

    const std::string tmp = path + ".tmp." + std::to_string(::getpid());
    const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) throw CheckpointError(msg("cannot write checkpoint '", path, "': cannot create '", tmp, "': ", std::strerror(errno)));
    size_t written = 0;
    while (written < file.size()) {
        const ssize_t n = ::write(fd, file.data() + written, file.size() - written);
        if (n <= 0) {
            const int err = errno;
            ::close(fd);
            std::remove(tmp.c_str());
            throw CheckpointError(msg("cannot write checkpoint '", path, "': ", std::strerror(err)));
        }
        written += static_cast<size_t>(n);
    }
    if (::fsync(fd) != 0 || ::close(fd) != 0) {
        std::remove(tmp.c_str());
        throw CheckpointError(msg("cannot write checkpoint '", path, "': flushing failed: ", std::strerror(errno)));
    }
    if (std::rename(tmp.c_str(), path.c_str()) != 0) {
        const int err = errno;
        std::remove(tmp.c_str());
        throw CheckpointError(msg("cannot write checkpoint '", path, "': rename failed: ", std::strerror(err)));
    }
}

CheckpointData read_checkpoint(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw CheckpointError(msg("cannot open checkpoint '", path, "'"));
    const std::string file((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    auto fail = [&](const std::string& why) -> CheckpointError {
        return CheckpointError(msg("checkpoint '", path, "' is refused: ", why));
    };
    if (file.size() < 8 || std::memcmp(file.data(), kMagic, 8) != 0) throw fail("not a tiny-rdna4-nn checkpoint (bad magic)");
    if (file.size() < kPrefix + 8) throw fail(msg("truncated (", file.size(), " bytes)"));
    // The checksum is always the last 8 bytes: check it first, so that a damaged header is reported
    // as damage; then tell truncation apart from corruption for the message.
    const bool checksum_ok = checksum64(file.data(), file.size() - 8) == get<uint64_t>(file, file.size() - 8);
    const uint32_t version = get<uint32_t>(file, 8);
    const uint64_t header_len = get<uint64_t>(file, 12);
    json header;
    bool header_ok = header_len <= file.size() - kPrefix;
    if (header_ok) {
        try {
            header = json::parse(file.begin() + kPrefix, file.begin() + static_cast<std::ptrdiff_t>(kPrefix + header_len));
        } catch (const std::exception&) {
            header_ok = false;
        }
    }
    CheckpointData d;
    uint64_t payload = 0;
    if (header_ok) {
        try {
            d.config = header.at("config");
            d.n_input_dims = header.at("n_input_dims").get<uint32_t>();
            d.n_output_dims = header.at("n_output_dims").get<uint32_t>();
            d.param_dtype = parse_dtype(header.at("param_dtype").get<std::string>());
            d.seed = header.at("seed").get<uint64_t>();
            d.step = header.at("step").get<uint32_t>();
            payload = header.at("n_params").get<uint64_t>() * sizeof(float);
            for (const auto& b : header.at("optimizer_state")) payload += b.at("bytes").get<uint64_t>();
        } catch (const std::exception&) {
            header_ok = false;
        }
    }
    const uint64_t expected = kPrefix + header_len + payload + 8;
    if (!checksum_ok) {
        if (header_ok && file.size() < expected) throw fail(msg("truncated (", file.size(), " of ", expected, " bytes)"));
        if (!header_ok && header_len > file.size() - kPrefix) throw fail(msg("truncated (", file.size(), " bytes)"));
        throw fail("corrupt (checksum mismatch)");
    }
    if (version > kCheckpointVersion)
        throw fail(msg("written by a newer format version ", version, "; this build reads up to version ", kCheckpointVersion));
    if (version == 0 || !header_ok || file.size() != expected) throw fail("malformed (sizes or header fields are inconsistent)");

    size_t off = kPrefix + header_len;
    d.params_fp32.resize(header["n_params"].get<uint64_t>());
    std::memcpy(d.params_fp32.data(), file.data() + off, d.params_fp32.size() * sizeof(float));
    off += d.params_fp32.size() * sizeof(float);
    for (const auto& b : header["optimizer_state"]) {
        StateBlob blob;
        blob.name = b.at("name").get<std::string>();
        blob.dtype = parse_dtype(b.at("dtype").get<std::string>());
        blob.bytes.assign(file.begin() + off, file.begin() + off + b.at("bytes").get<uint64_t>());
        off += blob.bytes.size();
        d.optimizer_state.push_back(std::move(blob));
    }
    return d;
}

}  // namespace tnn
