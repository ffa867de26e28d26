// Checkpoint files. Layout: "TNN-CKPT" | u32 version | u64 header bytes | JSON header | payload
// (fp32 params, then each state blob) | u64 FNV-1a checksum of everything before it.
// Writing: into an anonymous file in the target's folder (O_TMPFILE; else a new file with a random
// name, O_EXCL | O_NOFOLLOW), flushed, given a random temporary name, renamed over the target, and
// the folder synced; a failed write leaves nothing behind and a killed one at most the temporary.
// Reading (docs/reliability.md): magic, version and header first, every size checked against the
// file's length in overflow-free arithmetic, then the payload straight into its arrays, checksummed
// as it streams, then the state's scalars.
#include <tnn/checkpoint.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <set>

#include <fcntl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

namespace tnn {

namespace {

constexpr char kMagic[8] = {'T', 'N', 'N', '-', 'C', 'K', 'P', 'T'};
constexpr size_t kPrefix = 8 + 4 + 8;  // magic, version, header length
constexpr size_t kChecksumBytes = 8;
constexpr const char* kFormat = "tiny-rdna4-nn checkpoint";
constexpr size_t kMaxBlobName = 1024;
constexpr size_t kChunk = size_t{1} << 20;  // streaming unit of reads and checksums

class Fnv1a {
public:
    explicit Fnv1a(uint64_t seed = 0) : m_h(0xcbf29ce484222325ULL ^ seed) {}
    void add(const void* data, size_t bytes) {
        const auto* p = static_cast<const uint8_t*>(data);
        uint64_t h = m_h;
        for (size_t i = 0; i < bytes; ++i) {
            h ^= p[i];
            h *= 0x100000001b3ULL;
        }
        m_h = h;
    }
    uint64_t value() const { return m_h; }

private:
    uint64_t m_h;
};

template <typename T> void put(std::string& out, T v) { out.append(reinterpret_cast<const char*>(&v), sizeof(T)); }

// ---- reading ----------------------------------------------------------------------------------

// The bytes of a checkpoint, read front to back exactly once; every byte read goes into the checksum.
class Source {
public:
    virtual ~Source() = default;
    virtual uint64_t size() const = 0;
    // Reads n bytes at the current position into dst; false when the data ends first.
    virtual bool read(void* dst, size_t n) = 0;
};

class FileSource final : public Source {
public:
    FileSource(int fd, uint64_t size) : m_fd(fd), m_size(size) {}
    ~FileSource() override { ::close(m_fd); }
    uint64_t size() const override { return m_size; }
    bool read(void* dst, size_t n) override {
        auto* p = static_cast<char*>(dst);
        while (n > 0) {
            const ssize_t got = ::read(m_fd, p, std::min(n, kChunk));
            if (got < 0 && errno == EINTR) continue;
            if (got < 0) throw CheckpointError(msg("read error: ", std::strerror(errno)));
            if (got == 0) return false;
            p += got;
            n -= static_cast<size_t>(got);
        }
        return true;
    }

private:
    int m_fd;
    uint64_t m_size;
};

class MemorySource final : public Source {
public:
    MemorySource(const void* data, size_t size) : m_data(static_cast<const char*>(data)), m_size(size) {}
    uint64_t size() const override { return m_size; }
    bool read(void* dst, size_t n) override {
        if (n > m_size - m_pos) return false;
        if (n) std::memcpy(dst, m_data + m_pos, n);
        m_pos += n;
        return true;
    }

private:
    const char* m_data;
    size_t m_size, m_pos = 0;
};

class Reader {
public:
    Reader(Source& src, std::string what) : m_src(src), m_what(std::move(what)) {}

    CheckpointError fail(const std::string& why) const {
        return CheckpointError(msg("checkpoint '", m_what, "' is refused: ", why));
    }
    // Reads n bytes into dst and adds them to the checksum; a short file is truncated.
    void read(void* dst, size_t n) {
        if (!m_src.read(dst, n)) throw fail(msg("truncated (", m_src.size(), " bytes; the file ended early)"));
        m_sum.add(dst, n);
    }
    // The stored checksum (not summed) and whether it matches what was read.
    bool checksum_matches() {
        uint64_t stored = 0;
        if (!m_src.read(&stored, sizeof(stored))) throw fail(msg("truncated (", m_src.size(), " bytes)"));
        return stored == m_sum.value();
    }

private:
    Source& m_src;
    std::string m_what;
    Fnv1a m_sum;
};

uint64_t header_uint(const Reader& r, const json& header, const char* key, uint64_t min, uint64_t max) {
    const json& v = header.at(key);
    // Only JSON integers >= 0: a float, a negative number or a string is refused, not converted.
    if (!v.is_number_unsigned()) throw r.fail(msg("malformed header: '", key, "' must be an unsigned integer, got ", v.dump()));
    const uint64_t x = v.get<uint64_t>();
    if (x < min || x > max) throw r.fail(msg("malformed header: '", key, "' must be in [", min, ", ", max, "], got ", x));
    return x;
}

DType header_dtype(const Reader& r, const json& v, const char* key) {
    if (v.is_string())
        for (DType t : {DType::f32, DType::f16, DType::bf16, DType::f64})
            if (v.get<std::string>() == dtype_name(t)) return t;
    throw r.fail(msg("malformed header: '", key, "' must be one of float32, float16, bfloat16, float64, got ", v.dump()));
}

bool printable(const std::string& s) {
    return std::all_of(s.begin(), s.end(), [](char c) { return c >= 0x20 && c < 0x7f; });
}

// What is wrong with a state blob's directory entry ("" when nothing): the writer refuses what the
// reader would refuse, so every checkpoint written can be read back.
std::string blob_problem(const std::string& name, DType dtype, uint64_t bytes) {
    if (name.empty() || name.size() > kMaxBlobName || !printable(name))
        return msg("a state name must be 1 to ", kMaxBlobName, " printable ASCII characters");
    // State is float32 arrays (4-byte elements) and float64 scalars (Optimizer::state).
    if (dtype == DType::f32 ? bytes % 4 != 0 : dtype != DType::f64 || bytes != 8)
        return msg("state '", name, "' is ", bytes, " bytes of ", dtype_name(dtype),
                   "; state is float32 arrays or one float64 value");
    return "";
}

// Magic, version and header; on return the reader stands at the payload.
CheckpointHeader read_header(Reader& r, uint64_t file_size) {
    if (file_size < 8) throw r.fail(msg("not a tiny-rdna4-nn checkpoint (bad magic; ", file_size, " bytes)"));
    char magic[8];
    r.read(magic, 8);
    if (std::memcmp(magic, kMagic, 8) != 0) throw r.fail("not a tiny-rdna4-nn checkpoint (bad magic)");
    if (file_size < kPrefix + kChecksumBytes) throw r.fail(msg("truncated (", file_size, " bytes)"));
    uint32_t version = 0;
    uint64_t header_len = 0;
    r.read(&version, sizeof(version));
    r.read(&header_len, sizeof(header_len));
    // A layout this build cannot interpret is refused from its prefix (its checksum would mean reading
    // a file of any length first).
    if (version == 0) throw r.fail("corrupt (format version 0)");
    if (version > kCheckpointVersion)
        throw r.fail(msg("written by a newer format version ", version, " (or damaged); this build reads up to version ",
                         kCheckpointVersion));
    if (header_len > kMaxJsonBytes)
        throw r.fail(msg("corrupt header (", header_len, " bytes of header, more than the ", kMaxJsonBytes, " allowed)"));
    if (header_len > file_size - kPrefix - kChecksumBytes)
        throw r.fail(msg("truncated (", file_size, " bytes; the header alone needs ", kPrefix + header_len + kChecksumBytes, ")"));

    std::string text(static_cast<size_t>(header_len), '\0');
    r.read(text.data(), text.size());
    json h;
    try {
        // The trainer's config sits one level inside the header.
        h = parse_json(text.data(), text.size(), "header", kMaxJsonDepth + 1);
    } catch (const ConfigError& e) {
        throw r.fail(msg("corrupt header: ", e.what()));
    }
    if (!h.is_object()) throw r.fail(msg("corrupt header: a JSON ", h.type_name(), ", not an object"));
    static const std::set<std::string> keys = {"format", "config", "n_input_dims", "n_output_dims", "param_dtype",
                                               "seed", "step", "n_params", "optimizer_state"};
    for (const std::string& k : keys)
        if (!h.contains(k)) throw r.fail(msg("malformed header: no '", k, "'"));
    for (auto it = h.begin(); it != h.end(); ++it)
        if (!keys.count(it.key())) throw r.fail(msg("malformed header: unknown key '", it.key(), "'"));
    if (h["format"] != kFormat) throw r.fail(msg("malformed header: 'format' must be \"", kFormat, "\""));

    CheckpointHeader out;
    if (!h["config"].is_object()) throw r.fail(msg("malformed header: 'config' must be an object, got ", h["config"].type_name()));
    out.n_input_dims = static_cast<uint32_t>(header_uint(r, h, "n_input_dims", 0, UINT32_MAX));
    out.n_output_dims = static_cast<uint32_t>(header_uint(r, h, "n_output_dims", 0, UINT32_MAX));
    out.param_dtype = header_dtype(r, h["param_dtype"], "param_dtype");
    out.seed = header_uint(r, h, "seed", 0, UINT64_MAX);
    out.step = static_cast<uint32_t>(header_uint(r, h, "step", 0, UINT32_MAX));
    out.n_params = header_uint(r, h, "n_params", 0, UINT32_MAX);

    // Sizes add up without wrapping: each term is checked against what is left of the file.
    const uint64_t payload_room = file_size - kPrefix - header_len - kChecksumBytes;
    uint64_t payload = out.n_params * sizeof(float);  // < 2^34: no overflow
    if (payload > payload_room) throw r.fail(msg("truncated (", file_size, " bytes; ", out.n_params, " parameters do not fit)"));
    const json& blobs = h["optimizer_state"];
    if (!blobs.is_array()) throw r.fail("malformed header: 'optimizer_state' must be an array");
    std::set<std::string> names;
    for (size_t i = 0; i < blobs.size(); ++i) {
        const json& b = blobs[i];
        const std::string where = msg("optimizer_state[", i, "]");
        if (!b.is_object() || b.size() != 3 || !b.contains("name") || !b.contains("dtype") || !b.contains("bytes"))
            throw r.fail(msg("malformed header: ", where, " must be an object with exactly 'name', 'dtype' and 'bytes'"));
        CheckpointBlobInfo info;
        if (!b["name"].is_string()) throw r.fail(msg("malformed header: ", where, ".name must be a string"));
        info.name = b["name"].get<std::string>();
        info.dtype = header_dtype(r, b["dtype"], "dtype");
        info.bytes = header_uint(r, b, "bytes", 0, UINT64_MAX);
        const std::string problem = blob_problem(info.name, info.dtype, info.bytes);
        if (!problem.empty()) throw r.fail(msg("malformed header: ", where, ": ", problem));
        if (!names.insert(info.name).second) throw r.fail(msg("malformed header: state '", info.name, "' appears twice"));
        if (info.bytes > payload_room - payload)
            throw r.fail(msg("truncated (", file_size, " bytes; state '", info.name, "' does not fit)"));
        payload += info.bytes;
        out.optimizer_state.push_back(std::move(info));
    }
    out.file_bytes = kPrefix + header_len + payload + kChecksumBytes;
    if (out.file_bytes != file_size)
        throw r.fail(msg("corrupt (", file_size, " bytes, but the header describes ", out.file_bytes, ")"));
    out.config = std::move(h["config"]);
    return out;
}

double scalar_of(const StateBlob& b) {
    double v;
    std::memcpy(&v, b.bytes.data(), sizeof(v));
    return v;
}

CheckpointData read_all(Source& src, const std::string& what) {
    Reader r(src, what);
    CheckpointHeader h = read_header(r, src.size());
    CheckpointData d;
    d.n_input_dims = h.n_input_dims;
    d.n_output_dims = h.n_output_dims;
    d.param_dtype = h.param_dtype;
    d.seed = h.seed;
    d.step = h.step;
    // The header's sizes add up to the file's length, so these allocations are what the file holds.
    d.params_fp32.resize(static_cast<size_t>(h.n_params));
    r.read(d.params_fp32.data(), d.params_fp32.size() * sizeof(float));
    for (const CheckpointBlobInfo& info : h.optimizer_state) {
        StateBlob blob;
        blob.name = info.name;
        blob.dtype = info.dtype;
        blob.bytes.resize(static_cast<size_t>(info.bytes));
        r.read(blob.bytes.data(), blob.bytes.size());
        d.optimizer_state.push_back(std::move(blob));
    }
    if (!r.checksum_matches()) throw r.fail("corrupt (checksum mismatch)");
    // Scalars are hyperparameters and counters, checked as a config's values are (Optimizer::load_state
    // checks them again for state from elsewhere); the optimizer's own counters repeat the header's.
    for (const StateBlob& b : d.optimizer_state) {
        if (b.dtype != DType::f64) continue;
        const double v = scalar_of(b);
        if (!std::isfinite(v)) throw r.fail(msg("state '", b.name, "' is ", v, ", must be finite"));
        if (b.name.find("learning_rate") != std::string::npos && v < 0)
            throw r.fail(msg("state '", b.name, "' is ", v, ", must be at least 0"));
        if (b.name == "n_params" && v != static_cast<double>(h.n_params))
            throw r.fail(msg("inconsistent: the optimizer state is for ", v, " parameters, the header says ", h.n_params));
        if (b.name == "step" && v != static_cast<double>(h.step))
            throw r.fail(msg("inconsistent: the optimizer state is at step ", v, ", the header says ", h.step));
    }
    d.config = std::move(h.config);
    return d;
}

// Opens a checkpoint for reading: only a regular file (not a folder, a device or a FIFO).
std::unique_ptr<FileSource> open_checkpoint(const std::string& path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) throw CheckpointError(msg("cannot open checkpoint '", path, "': ", std::strerror(errno)));
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
        const int err = errno;
        ::close(fd);
        throw CheckpointError(msg("cannot open checkpoint '", path, "': ", std::strerror(err)));
    }
    if (!S_ISREG(st.st_mode)) {
        ::close(fd);
        throw CheckpointError(msg("checkpoint '", path, "' is refused: ",
                                  S_ISDIR(st.st_mode) ? "a folder" : "not a regular file", ", not a checkpoint file"));
    }
    return std::make_unique<FileSource>(fd, static_cast<uint64_t>(st.st_size));
}

// ---- writing ----------------------------------------------------------------------------------

void random_bytes(void* out, size_t n) {
    if (::getrandom(out, n, 0) == static_cast<ssize_t>(n)) return;
    std::random_device rd;
    auto* p = static_cast<uint8_t*>(out);
    for (size_t i = 0; i < n; ++i) p[i] = static_cast<uint8_t>(rd());
}

std::string random_suffix() {
    uint8_t bytes[8];
    random_bytes(bytes, sizeof(bytes));
    static const char* hex = "0123456789abcdef";
    std::string s = ".tmp.";
    for (uint8_t b : bytes) {
        s += hex[b >> 4];
        s += hex[b & 15];
    }
    return s;
}

std::string parent_folder(const std::string& path) {
    const size_t slash = path.find_last_of('/');
    if (slash == std::string::npos) return ".";
    if (slash == 0) return "/";
    return path.substr(0, slash);
}

// The file's pieces in order and its checksum, written to fd.
class Writer {
public:
    Writer(int fd, const std::string& path) : m_fd(fd), m_path(path) {}
    void write(const void* data, size_t n) {
        m_sum.add(data, n);
        write_raw(data, n);
    }
    void finish() {
        const uint64_t sum = m_sum.value();
        write_raw(&sum, sizeof(sum));
    }

private:
    void write_raw(const void* data, size_t n) {
        const auto* p = static_cast<const char*>(data);
        while (n > 0) {
            const ssize_t w = ::write(m_fd, p, std::min(n, kChunk));
            if (w < 0 && errno == EINTR) continue;
            if (w <= 0) throw CheckpointError(msg("cannot write checkpoint '", m_path, "': ", std::strerror(w < 0 ? errno : EIO)));
            p += w;
            n -= static_cast<size_t>(w);
        }
    }
    int m_fd;
    const std::string& m_path;
    Fnv1a m_sum;
};

// A temporary file in the target's folder: closed, and removed unless committed, on every way out.
class TempFile {
public:
    explicit TempFile(const std::string& path) : m_path(path), m_folder(parent_folder(path)) {
        // An anonymous file has no name until it is complete: a process killed while writing leaves nothing.
        m_fd = ::open(m_folder.c_str(), O_TMPFILE | O_WRONLY | O_CLOEXEC, 0644);
        if (m_fd >= 0) return;
        if (errno != EOPNOTSUPP && errno != EISDIR && errno != EINVAL)
            throw CheckpointError(msg("cannot write checkpoint '", path, "': folder '", m_folder, "': ", std::strerror(errno)));
        open_named();
    }
    ~TempFile() {
        if (m_fd >= 0) ::close(m_fd);
        if (!m_name.empty()) ::unlink(m_name.c_str());
    }
    TempFile(const TempFile&) = delete;
    TempFile& operator=(const TempFile&) = delete;

    int fd() const { return m_fd; }
    bool anonymous() const { return m_name.empty(); }

    // Flushes the data to disk, gives the file its temporary name (anonymous case) and renames it over
    // the target; then syncs the folder, so the rename itself survives a power loss.
    void commit() {
        if (::fsync(m_fd) != 0) fail("flushing failed");
        if (m_name.empty()) link_anonymous();
        if (::close(m_fd) != 0) {
            m_fd = -1;
            fail("closing failed");
        }
        m_fd = -1;
        if (::rename(m_name.c_str(), m_path.c_str()) != 0) fail("rename failed");
        m_name.clear();  // committed: nothing to remove
        const int dir = ::open(m_folder.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dir < 0) fail(msg("written, but the folder '", m_folder, "' could not be opened to sync it"));
        // EINVAL: the file system has no folder sync (nothing to wait for).
        const bool synced = ::fsync(dir) == 0 || errno == EINVAL;
        const int err = errno;
        ::close(dir);
        errno = err;
        if (!synced) fail(msg("written, but syncing the folder '", m_folder, "' failed"));
    }

private:
    [[noreturn]] void fail(const std::string& what) const {
        throw CheckpointError(msg("cannot write checkpoint '", m_path, "': ", what, ": ", std::strerror(errno)));
    }
    void open_named() {
        for (int attempt = 0; attempt < 16; ++attempt) {
            const std::string name = m_path + random_suffix();
            m_fd = ::open(name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
            if (m_fd >= 0) {
                m_name = name;
                return;
            }
            if (errno != EEXIST) fail("cannot create a temporary file");
        }
        fail("cannot create a temporary file");
    }
    void link_anonymous() {
        const std::string proc = msg("/proc/self/fd/", m_fd);
        for (int attempt = 0; attempt < 16; ++attempt) {
            const std::string name = m_path + random_suffix();
            if (::linkat(AT_FDCWD, proc.c_str(), AT_FDCWD, name.c_str(), AT_SYMLINK_FOLLOW) == 0) {
                m_name = name;
                return;
            }
            if (errno != EEXIST) fail("cannot name the temporary file");
        }
        fail("cannot name the temporary file");
    }

    std::string m_path, m_folder, m_name;
    int m_fd = -1;
};

}  // namespace

uint64_t checksum64(const void* data, size_t bytes, uint64_t seed) {
    Fnv1a h(seed);
    h.add(data, bytes);
    return h.value();
}

void write_checkpoint(const std::string& path, const CheckpointData& data) {
    auto refuse = [&](const std::string& why) {
        return CheckpointError(msg("cannot write checkpoint '", path, "': ", why));
    };
    if (!data.config.is_object()) throw refuse(msg("the config must be a JSON object, got ", data.config.type_name()));
    if (json_depth(data.config) > kMaxJsonDepth)
        throw refuse(msg("the config is nested deeper than ", kMaxJsonDepth, " levels"));
    if (data.params_fp32.size() > UINT32_MAX) throw refuse(msg(data.params_fp32.size(), " parameters, more than 2^32 - 1"));
    std::set<std::string> names;
    for (const auto& b : data.optimizer_state) {
        const std::string problem = blob_problem(b.name, b.dtype, b.bytes.size());
        if (!problem.empty()) throw refuse(problem);
        if (!names.insert(b.name).second) throw refuse(msg("state '", b.name, "' appears twice"));
    }
    json header = {{"format", kFormat},
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
    std::string prefix(kMagic, 8);
    put<uint32_t>(prefix, kCheckpointVersion);
    put<uint64_t>(prefix, header_text.size());

    // A path that exists must be a file (or a link, which the rename replaces): never a device or a folder.
    struct stat st {};
    if (::lstat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode) && !S_ISLNK(st.st_mode))
        throw CheckpointError(msg("cannot write checkpoint '", path, "': it exists and is not a regular file"));

    TempFile tmp(path);
    Writer w(tmp.fd(), path);
    w.write(prefix.data(), prefix.size());
    w.write(header_text.data(), header_text.size());
    w.write(data.params_fp32.data(), data.params_fp32.size() * sizeof(float));
    for (const auto& b : data.optimizer_state) w.write(b.bytes.data(), b.bytes.size());
    w.finish();
    tmp.commit();
}

CheckpointHeader read_checkpoint_header(const std::string& path) {
    auto src = open_checkpoint(path);
    Reader r(*src, path);
    return read_header(r, src->size());
}

CheckpointData read_checkpoint(const std::string& path) {
    auto src = open_checkpoint(path);
    return read_all(*src, path);
}

CheckpointData parse_checkpoint(const void* bytes, size_t size, const std::string& what) {
    MemorySource src(bytes, size);
    return read_all(src, what);
}

}  // namespace tnn
