// JSON configs: a reader that applies defaults, checks types and ranges (errors name the key) and
// warns about unknown keys, the one case-insensitive otype registry used by every module kind, and
// the bounded parser for JSON read from files (configs, checkpoint headers).
#pragma once

#include <tnn/error.h>

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <map>
#include <string>
#include <vector>

namespace tnn {

using json = nlohmann::json;

// Bounds on JSON that comes from outside. Depth counts nested objects and arrays: `{}` is 1,
// `{"a": [1]}` is 2. A config's modules nest a few levels deep; a Composite or optimizer wrapper adds
// one or two levels each, so 64 leaves room for any real config while keeping every recursive walk
// of a value (copy, compare, dump, the module factories) far from the stack limit.
constexpr int kMaxJsonDepth = 64;
constexpr size_t kMaxJsonBytes = size_t{16} << 20;  // configs are kilobytes; checkpoint headers too

// Parses JSON text. Refuses, with a ConfigError that names `what`, text longer than max_bytes, text
// nested deeper than max_depth (before any value of the deeper level is built) and invalid JSON.
json parse_json(const char* text, size_t size, const std::string& what, int max_depth = kMaxJsonDepth,
                size_t max_bytes = kMaxJsonBytes);
// Reads and parses a JSON file with the same bounds; only regular files are read.
json read_json_file(const std::string& path, const std::string& what, int max_depth = kMaxJsonDepth,
                    size_t max_bytes = kMaxJsonBytes);
// The nesting depth of a value, walked without recursion; stops counting once past `limit`
// (returns limit + 1 then), so a deep value costs no more than a shallow one of the same size.
int json_depth(const json& value, int limit = kMaxJsonDepth);

std::string to_lower(std::string s);
bool iequals(const std::string& a, const std::string& b);
std::string join(const std::vector<std::string>& items, const char* sep = ", ");

// Reads one config object. Every getter records the key as known; finish() logs a warning that
// names each key nobody read (a typo in a config is then visible, not silently ignored). The
// constructor refuses an object nested deeper than kMaxJsonDepth, so no module factory recurses
// into a value built in code (not parsed by parse_json) deeper than that.
class ConfigReader {
public:
    ConfigReader(const json& cfg, std::string where);  // where: "HashGrid encoding", used in messages

    uint32_t get_uint(const char* key, uint32_t def, uint32_t min = 0, uint32_t max = UINT32_MAX);
    int64_t get_int(const char* key, int64_t def, int64_t min, int64_t max);
    double get_float(const char* key, double def, double min = -HUGE_VAL, double max = HUGE_VAL);
    double get_float_exclusive_min(const char* key, double def, double min_exclusive, double max = HUGE_VAL);
    bool get_bool(const char* key, bool def);
    // Case-insensitive choice; returns the canonical spelling from `choices`.
    std::string get_choice(const char* key, const std::string& def, const std::vector<std::string>& choices);
    std::string get_string(const char* key, const std::string& def);
    bool has(const char* key) const { return m_cfg.contains(key); }
    const json& get_json(const char* key);  // marks known; throws if absent
    void mark_known(const char* key) { m_known.push_back(key); }
    const json& raw() const { return m_cfg; }
    const std::string& where() const { return m_where; }
    void finish() const;

    [[noreturn]] void fail(const char* key, const std::string& what) const;

private:
    const json* find(const char* key);  // records key as known; nullptr when absent
    const json& m_cfg;
    std::string m_where;
    std::vector<std::string> m_known;
};

// Case-insensitive name -> factory table. `reject` registers a name that exists in tcnn but that we
// refuse on purpose, with the message to give.
template <typename Factory> class Registry {
public:
    explicit Registry(std::string kind) : m_kind(std::move(kind)) {}

    void add(const std::string& name, Factory factory) {
        m_entries[to_lower(name)] = Entry{name, std::move(factory), ""};
        m_order.push_back(name);
    }
    void reject(const std::string& name, const std::string& reason) {
        m_entries[to_lower(name)] = Entry{name, Factory{}, reason};
    }
    bool contains(const std::string& name) const {
        auto it = m_entries.find(to_lower(name));
        return it != m_entries.end() && it->second.rejected.empty();
    }
    const Factory& get(const std::string& name) const {
        auto it = m_entries.find(to_lower(name));
        if (it == m_entries.end())
            throw ConfigError(msg("unknown ", m_kind, " otype '", name, "'; valid choices: ", join(m_order)));
        if (!it->second.rejected.empty())
            throw ConfigError(msg(m_kind, " otype '", it->second.name, "' is not supported: ", it->second.rejected,
                                  "; valid choices: ", join(m_order)));
        return it->second.factory;
    }
    std::string canonical_name(const std::string& name) const {
        get(name);
        return m_entries.find(to_lower(name))->second.name;
    }
    const std::vector<std::string>& names() const { return m_order; }
    const std::string& kind() const { return m_kind; }

private:
    struct Entry {
        std::string name;
        Factory factory;
        std::string rejected;
    };
    std::string m_kind;
    std::map<std::string, Entry> m_entries;
    std::vector<std::string> m_order;
};

// The otype of a config object (required key), with a clear error when missing or not a string.
std::string require_otype(const json& cfg, const char* kind);

}  // namespace tnn
