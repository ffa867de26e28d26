// Typed errors. Every user-facing failure is one of these, with a message that names the module,
// the key or argument, and what is allowed. The Python package maps them to ValueError (config,
// shape, unsupported, input), TypeError (dtype) and RuntimeError (device, checkpoint).
#pragma once

#include <functional>
#include <sstream>
#include <stdexcept>
#include <string>

namespace tnn {

class Error : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};
class ConfigError : public Error { public: using Error::Error; };       // bad JSON config value or key
class ShapeError : public Error { public: using Error::Error; };        // mismatched sizes / strides
class DTypeError : public Error { public: using Error::Error; };        // wrong or unsupported element type
class UnsupportedError : public Error { public: using Error::Error; };  // valid request this build/backend cannot do
class DeviceError : public Error { public: using Error::Error; };       // GPU runtime failures, wrong device
class CheckpointError : public Error { public: using Error::Error; };   // corrupt, truncated, incompatible file
class InputError : public Error { public: using Error::Error; };        // bad data (NaN where not allowed, ...)

// Builds a message from stream-able parts: throw ConfigError(msg("HashGrid: key 'n_levels' ...", n)).
template <typename... Args> std::string msg(const Args&... args) {
    std::ostringstream os;
    (os << ... << args);
    return os.str();
}

// Log sink for warnings (unknown config keys, ...). The default prints to stderr; applications
// and the Python package may install their own. Passing nullptr restores the default.
enum class LogLevel { info, warning };
using LogCallback = std::function<void(LogLevel, const std::string&)>;
void set_log_callback(LogCallback cb);
void log(LogLevel level, const std::string& message);

}  // namespace tnn
