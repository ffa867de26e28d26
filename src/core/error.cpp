// The log sink behind warnings (unknown config keys and the like).
#include <tnn/error.h>

#include <iostream>
#include <mutex>

namespace tnn {
namespace {
std::mutex g_log_mutex;
LogCallback g_log_callback;
}  // namespace

void set_log_callback(LogCallback cb) {
    std::lock_guard<std::mutex> lock(g_log_mutex);
    g_log_callback = std::move(cb);
}

void log(LogLevel level, const std::string& message) {
    std::lock_guard<std::mutex> lock(g_log_mutex);
    if (g_log_callback) {
        g_log_callback(level, message);
        return;
    }
    std::cerr << "tnn " << (level == LogLevel::warning ? "warning" : "info") << ": " << message << std::endl;
}

}  // namespace tnn
