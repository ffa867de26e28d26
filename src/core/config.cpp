// ConfigReader: typed, range-checked access to one JSON config object with tcnn's defaults, and
// a warning for every key that no module read.
#include <tnn/config.h>

#include <algorithm>
#include <cctype>
#include <cmath>

namespace tnn {

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
