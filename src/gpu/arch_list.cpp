// Architecture lists and NVIDIA's / AMD's rules for which code a device runs (arch_list.h). Compiled
// by the C++ compiler into every build, GPU or not.
#include "gpu/arch_list.h"

#include <tnn/error.h>

#include <algorithm>
#include <cctype>
#include <sstream>

namespace tnn::gpu {

namespace {

std::vector<std::string> split_list(const std::string& list) {
    std::vector<std::string> out;
    std::string cur;
    for (char c : list) {
        if (c == ';' || c == ',' || std::isspace(static_cast<unsigned char>(c))) {
            if (!cur.empty()) out.push_back(cur);
            cur.clear();
        } else {
            cur += c;
        }
    }
    if (!cur.empty()) out.push_back(cur);
    return out;
}

std::string join(const std::vector<std::string>& parts, const char* sep) {
    std::string out;
    for (size_t i = 0; i < parts.size(); ++i) out += (i ? sep : "") + parts[i];
    return out;
}

// "8.9" for 89, "12.0" for 120.
std::string cc_text(int cc) { return msg(cc / 10, ".", cc % 10); }

// The list entry that gives a device of capability cc machine code (and PTX for the ones after it):
// Hopper's "90a" (the wgmma kernels), otherwise the plain number.
std::string entry_for(int cc) { return cc == 90 ? "90a" : std::to_string(cc); }

std::string rebuild_hint(const std::string& variable, const std::string& value, bool pip_env) {
    const std::string pip = pip_env ? msg(variable, "=", value, " python3 -m pip install --no-build-isolation python/")
                                    : msg("TNN_HIP=1 CMAKE_ARGS='-D", variable, "=", value,
                                          "' python3 -m pip install --no-build-isolation python/");
    return msg("(CMake: -D", variable, "=", value, "; pip: ", pip, ")");
}

}  // namespace

std::vector<CudaArch> parse_cuda_architectures(const std::string& list) {
    std::vector<CudaArch> out;
    for (const std::string& e : split_list(list)) {
        size_t i = 0;
        while (i < e.size() && std::isdigit(static_cast<unsigned char>(e[i]))) ++i;
        CudaArch a;
        bool ok = i > 0 && i <= 4;
        if (ok) a.number = std::stoi(e.substr(0, i));
        if (ok && i < e.size() && (e[i] == 'a' || e[i] == 'f')) a.suffix = e[i++];
        const std::string form = e.substr(i);
        if (form.empty()) a.sass = a.ptx = true;
        else if (form == "-real") a.sass = true;
        else if (form == "-virtual") a.ptx = true;
        else ok = false;
        if (!ok || a.number < 10)
            throw ConfigError(msg("CUDA architecture list '", list, "': '", e,
                                  "' is not an architecture in CMake's spelling (a number such as 80 or 90a, "
                                  "optionally followed by -real or -virtual)"));
        out.push_back(a);
    }
    return out;
}

bool cuda_sass_runs_on(const CudaArch& a, int cc) {
    if (!a.sass) return false;
    if (a.suffix == 'a') return cc == a.number;
    return cc / 10 == a.number / 10 && cc % 10 >= a.number % 10;
}

bool cuda_ptx_runs_on(const CudaArch& a, int cc) {
    if (!a.ptx) return false;
    if (a.suffix == 'a') return cc == a.number;
    if (a.suffix == 'f') return cc / 10 == a.number / 10 && cc % 10 >= a.number % 10;
    return cc >= a.number;
}

CudaCode cuda_code_for(const std::vector<CudaArch>& list, int cc) {
    CudaCode best;
    // Machine code first (the driver prefers it to PTX); among several, the newest; at the same number
    // the architecture-specific one, which holds the most of the device's instructions.
    for (const CudaArch& a : list) {
        if (!cuda_sass_runs_on(a, cc)) continue;
        if (!best.found || a.number > best.arch.number || (a.number == best.arch.number && a.suffix == 'a'))
            best = CudaCode{true, false, a};
    }
    if (best.found) return best;
    for (const CudaArch& a : list) {
        if (!cuda_ptx_runs_on(a, cc)) continue;
        if (!best.found || a.number > best.arch.number || (a.number == best.arch.number && a.suffix == 'a'))
            best = CudaCode{true, true, a};
    }
    return best;
}

std::string cuda_arch_name(const CudaArch& a, bool ptx) {
    std::string s = msg(ptx ? "compute_" : "sm_", a.number);
    if (a.suffix) s += a.suffix;
    return s;
}

std::string describe_cuda_architectures(const std::vector<CudaArch>& list) {
    std::vector<std::string> sass, ptx;
    for (const CudaArch& a : list) {
        if (a.sass) sass.push_back(cuda_arch_name(a, false));
        if (a.ptx) ptx.push_back(cuda_arch_name(a, true));
    }
    std::vector<std::string> parts;
    if (!sass.empty()) parts.push_back("machine code " + join(sass, " "));
    if (!ptx.empty()) parts.push_back("PTX " + join(ptx, " "));
    return parts.empty() ? "nothing" : join(parts, ", ");
}

std::string describe_cuda_code(const CudaCode& code) {
    if (!code.found) return "no code";
    return code.ptx ? cuda_arch_name(code.arch, true) + " PTX (compiled by the driver)"
                    : cuda_arch_name(code.arch, false) + " machine code";
}

bool hip_target_runs_on(const std::string& target, const std::string& arch) {
    const std::string t = target.substr(0, target.find(':')), d = arch.substr(0, arch.find(':'));
    if (t == d) return true;
    // gfx<major>-generic: gfx11-generic for gfx11xx, gfx12-generic for gfx12xx (four-digit names only).
    const std::string generic = "-generic";
    if (t.size() > generic.size() && t.compare(t.size() - generic.size(), generic.size(), generic) == 0) {
        const std::string major = t.substr(0, t.size() - generic.size());  // "gfx12"
        return d.size() == major.size() + 2 && d.compare(0, major.size(), major) == 0;
    }
    return false;
}

DeviceCode cuda_device_code(const std::string& built, const std::string& device, int cc,
                            const std::string& driver_error) {
    const std::vector<CudaArch> list = parse_cuda_architectures(built);
    const std::string label = msg(device, " (compute capability ", cc_text(cc), ")");
    const std::string refused = driver_error.empty() ? "" : msg(" (", driver_error, ")");
    if (cc < kCudaMinArchitecture)
        return DeviceCode{false, "",
                          msg(label, " cannot run tiny-rdna4-nn's CUDA kernels: they need compute capability ",
                              cc_text(kCudaMinArchitecture), " (Ampere) or newer; use the CPU device", refused)};
    const CudaCode code = cuda_code_for(list, cc);
    std::vector<std::string> entries = split_list(built);
    entries.push_back(entry_for(cc));
    const std::string value = "\"" + join(entries, ";") + "\"";
    const std::string rebuild = msg("TNN_CUDA_ARCHITECTURES=", value, " ", rebuild_hint("TNN_CUDA_ARCHITECTURES", value, true));
    if (code.found && driver_error.empty()) return DeviceCode{true, describe_cuda_code(code), ""};
    if (code.found && code.ptx)
        return DeviceCode{false, "",
                          msg(label, ": the driver did not load this build's ", cuda_arch_name(code.arch, true),
                              " PTX", refused, ". A driver older than the CUDA toolkit that built the library cannot compile its PTX: "
                              "update the driver, or rebuild with machine code for this GPU: ", rebuild)};
    if (code.found)
        return DeviceCode{false, "", msg(label, ": the driver did not load this build's ", describe_cuda_code(code), refused)};
    return DeviceCode{
        false, "",
        msg(label, " cannot run this build of tiny-rdna4-nn: its CUDA code (", describe_cuda_architectures(list),
            ") has neither machine code nor PTX for compute capability ", cc_text(cc), refused,
            ". Rebuild with TNN_CUDA_ARCHITECTURES=native on a machine with this GPU, or add ", entry_for(cc),
            " to the list: ", rebuild)};
}

DeviceCode hip_device_code(const std::string& built, const std::string& device, const std::string& arch,
                           const std::string& driver_error) {
    const std::vector<std::string> targets = split_list(built);
    const std::string label = msg(device, " (", arch, ")");
    const std::string refused = driver_error.empty() ? "" : msg(" (", driver_error, ")");
    std::string found;
    for (const std::string& t : targets)
        if (found.empty() && hip_target_runs_on(t, arch)) found = t + " code object";
    if (!found.empty() && driver_error.empty()) return DeviceCode{true, found, ""};
    std::vector<std::string> entries = targets;
    entries.push_back(arch.substr(0, arch.find(':')));
    const std::string value = "\"" + join(entries, ";") + "\"";
    const std::string rebuild = msg("TNN_HIP_ARCHITECTURES=", value, " ", rebuild_hint("TNN_HIP_ARCHITECTURES", value, false));
    if (!found.empty())
        return DeviceCode{false, "", msg(label, ": the runtime did not load this build's ", found, refused, ". Rebuild: ", rebuild)};
    return DeviceCode{false, "",
                      msg(label, " cannot run this build of tiny-rdna4-nn: its HIP code objects are for ",
                          targets.empty() ? std::string("no target") : join(targets, " "), refused,
                          ". Rebuild with ", rebuild)};
}

}  // namespace tnn::gpu
