// ConfigReader: typed, range-checked access to one JSON config object with tcnn's defaults, and
// a warning for every key that no module read; the bounded JSON parser for text from outside.
#include <tnn/config.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <utility>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace tnn {

json parse_json(const char* text, size_t size, const std::string& what, int max_depth, size_t max_bytes) {
    if (size > max_bytes) throw ConfigError(msg(what, ": ", size, " bytes of JSON, more than the ", max_bytes, " allowed"));
    // nlohmann's parser is iterative, but copying, comparing, dumping and destroying a value recurse
    // once per level: the depth is refused while parsing, before a level past the bound exists.
    // The callback's depth is the number of containers already open around the one starting.
    const json::parser_callback_t bound = [&](int depth, json::parse_event_t event, json&) {
        if ((event == json::parse_event_t::object_start || event == json::parse_event_t::array_start) &&
            depth >= max_depth)
            throw ConfigError(msg(what, ": JSON nested deeper than ", max_depth, " levels of objects and arrays"));
        return true;
    };
    try {
        return json::parse(text, text + size, bound);
    } catch (const json::exception& e) {
        throw ConfigError(msg(what, " is not valid JSON: ", e.what()));
    }
}

json read_json_file(const std::string& path, const std::string& what, int max_depth, size_t max_bytes) {
    // O_NONBLOCK: opening a FIFO must not wait for a writer; it is refused below as not a regular file.
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) throw ConfigError(msg("cannot open ", what, " '", path, "': ", std::strerror(errno)));
    std::string text;
    int err = 0;
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
        err = errno;
    } else if (!S_ISREG(st.st_mode)) {
        ::close(fd);
        throw ConfigError(msg(what, " '", path, "' is not a regular file"));
    } else if (static_cast<uint64_t>(st.st_size) > max_bytes) {
        ::close(fd);
        throw ConfigError(msg(what, " '", path, "' has ", st.st_size, " bytes, more than the ", max_bytes, " allowed"));
    } else {
        // Read to the end (the file may have changed since fstat), never past max_bytes + 1.
        text.resize(static_cast<size_t>(st.st_size) + 1);
        size_t got = 0;
        for (;;) {
            if (got == text.size()) {
                if (text.size() > max_bytes) break;
                text.resize(std::min(max_bytes + 1, text.size() * 2));
            }
            const ssize_t n = ::read(fd, &text[got], text.size() - got);
            if (n < 0 && errno == EINTR) continue;
            if (n < 0) {
                err = errno;
                break;
            }
            if (n == 0) break;
            got += static_cast<size_t>(n);
        }
        text.resize(got);
    }
    ::close(fd);
    if (err) throw ConfigError(msg("cannot read ", what, " '", path, "': ", std::strerror(err)));
    return parse_json(text.data(), text.size(), msg(what, " '", path, "'"), max_depth, max_bytes);
}

int json_depth(const json& value, int limit) {
    std::vector<std::pair<const json*, int>> todo = {{&value, 1}};
    int deepest = 0;
    while (!todo.empty()) {
        const auto [v, depth] = todo.back();
        todo.pop_back();
        if (!v->is_structured()) continue;
        deepest = std::max(deepest, depth);
        if (deepest > limit) return limit + 1;
        for (const json& child : *v)
            if (child.is_structured()) todo.emplace_back(&child, depth + 1);
    }
    return deepest;
}

std::string to_lower(std::string s) {
    std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    return s;
}

bool iequals(const std::string& a, const std::string& b) { return to_lower(a) == to_lower(b); }

std::string join(const std::vector<std::string>& items, const char* sep) {
    std::string out;
    for (size_t i = 0; i < items.size(); ++i) {
        if (i) out += sep;
        out += items[i];
    }
    return out;
}

std::string require_otype(const json& cfg, const char* kind) {
    if (!cfg.is_object()) throw ConfigError(msg(kind, " config must be a JSON object, got ", cfg.type_name()));
    auto it = cfg.find("otype");
    if (it == cfg.end()) throw ConfigError(msg(kind, " config has no 'otype' key"));
    if (!it->is_string()) throw ConfigError(msg(kind, " config: 'otype' must be a string, got ", it->type_name()));
    return it->get<std::string>();
}

ConfigReader::ConfigReader(const json& cfg, std::string where) : m_cfg(cfg), m_where(std::move(where)) {
    if (!cfg.is_object()) throw ConfigError(msg(m_where, ": config must be a JSON object, got ", cfg.type_name()));
    if (json_depth(cfg) > kMaxJsonDepth)
        throw ConfigError(msg(m_where, ": config nested deeper than ", kMaxJsonDepth, " levels of objects and arrays"));
    m_known.push_back("otype");
}

void ConfigReader::fail(const char* key, const std::string& what) const {
    throw ConfigError(msg(m_where, ": key '", key, "' ", what));
}

const json* ConfigReader::find(const char* key) {
    m_known.push_back(key);
    const auto it = m_cfg.find(key);
    return it == m_cfg.end() ? nullptr : &*it;
}

int64_t ConfigReader::get_int(const char* key, int64_t def, int64_t min, int64_t max) {
    const json* found = find(key);
    if (!found) return def;
    const json& v = *found;
    int64_t r;
    if (v.is_number_integer()) {
        r = v.get<int64_t>();
    } else if (v.is_number_float() && std::isfinite(v.get<double>()) && v.get<double>() == std::floor(v.get<double>()) &&
               std::fabs(v.get<double>()) < 9.0e15) {
        r = static_cast<int64_t>(v.get<double>());
    } else {
        fail(key, msg("must be an integer, got ", v.dump()));
    }
    if (r < min || r > max) fail(key, msg("must be in [", min, ", ", max, "], got ", r));
    return r;
}

uint32_t ConfigReader::get_uint(const char* key, uint32_t def, uint32_t min, uint32_t max) {
    return static_cast<uint32_t>(get_int(key, def, min, max));
}

double ConfigReader::get_float(const char* key, double def, double min, double max) {
    const json* found = find(key);
    if (!found) return def;
    const json& v = *found;
    if (!v.is_number()) fail(key, msg("must be a number, got ", v.dump()));
    const double r = v.get<double>();
    if (!std::isfinite(r)) fail(key, "must be finite");
    if (r < min || r > max) fail(key, msg("must be in [", min, ", ", max, "], got ", r));
    return r;
}

double ConfigReader::get_float_exclusive_min(const char* key, double def, double min_exclusive, double max) {
    const double r = get_float(key, def, -HUGE_VAL, max);
    if (!(r > min_exclusive)) fail(key, msg("must be greater than ", min_exclusive, ", got ", r));
    return r;
}

bool ConfigReader::get_bool(const char* key, bool def) {
    const json* found = find(key);
    if (!found) return def;
    const json& v = *found;
    if (!v.is_boolean()) fail(key, msg("must be true or false, got ", v.dump()));
    return v.get<bool>();
}

std::string ConfigReader::get_string(const char* key, const std::string& def) {
    const json* found = find(key);
    if (!found) return def;
    const json& v = *found;
    if (!v.is_string()) fail(key, msg("must be a string, got ", v.dump()));
    return v.get<std::string>();
}

std::string ConfigReader::get_choice(const char* key, const std::string& def, const std::vector<std::string>& choices) {
    const std::string s = get_string(key, def);
    for (const auto& c : choices)
        if (iequals(c, s)) return c;
    fail(key, msg("must be one of ", join(choices), "; got '", s, "'"));
}

const json& ConfigReader::get_json(const char* key) {
    const json* found = find(key);
    if (!found) fail(key, "is required");
    return *found;
}

void ConfigReader::finish() const {
    for (auto it = m_cfg.begin(); it != m_cfg.end(); ++it) {
        if (std::find(m_known.begin(), m_known.end(), it.key()) == m_known.end())
            log(LogLevel::warning, msg(m_where, ": unknown key '", it.key(), "' is ignored"));
    }
}

}  // namespace tnn
