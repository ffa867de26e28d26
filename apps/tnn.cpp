// The `tnn` command-line program: fit-image (the demo), info (devices, backends, versions) and
// make-image (regenerates the bundled default image).
#include "fit_image.h"
#include "image.h"

#include <tnn/tnn.h>

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <new>
#include <string>

namespace {

void print_info() {
    std::printf("tiny-rdna4-nn %s\n", tnn::version());
    std::printf("GPU backend: %s\n", tnn::gpu_backend_name());
    if (tnn::has_gpu_backend()) {
        // The list as CMake spelled it (a number: machine code and PTX; -real: machine code; -virtual: PTX).
        const char* variable = std::string(tnn::gpu_backend_name()) == "HIP" ? "TNN_HIP_ARCHITECTURES" : "TNN_CUDA_ARCHITECTURES";
        std::printf("GPU code built: %s (%s)\n", tnn::gpu_architectures().c_str(), variable);
    }
    const int n = tnn::gpu_device_count();
    std::printf("GPU devices: %d\n", n);
    for (int i = 0; i < n; ++i) {
        // A device this build has no code for is listed with the reason, not an error of the command.
        std::string code;
        try {
            code = "runs " + tnn::gpu_device_code(i);
        } catch (const tnn::DeviceError& e) {
            code = std::string("NOT SUPPORTED by this build: ") + e.what();
        }
        std::printf("  gpu:%d  %s: %s\n", i, tnn::gpu_device_description(i).c_str(), code.c_str());
    }
    std::printf("CPU threads: %d\n", tnn::num_threads());
    std::printf("precisions: float32, float16, bfloat16 (all devices; fp16/bf16 emulated on the CPU), float64 (CPU)\n");
    std::printf("encodings: %s\n", tnn::join(tnn::encoding_names()).c_str());
    std::printf("networks: %s\n", tnn::join(tnn::network_names()).c_str());
    std::printf("losses: %s\n", tnn::join(tnn::loss_names()).c_str());
    std::printf("optimizers: %s\n", tnn::join(tnn::optimizer_names()).c_str());
}

// --seed: a decimal integer in [0, 2^64 - 1]. CLI11 would read "-1" and "2^64" as 2^64 - 1 and
// "010" as octal, so the text is checked before it is converted.
std::string check_seed(const std::string& s) {
    const std::string max = "18446744073709551615";
    const bool digits = !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
    if (!digits || (s.size() > 1 && s[0] == '0') || s.size() > max.size() || (s.size() == max.size() && s > max))
        return "must be a decimal integer from 0 to " + max + ", got '" + s + "'";
    return "";
}

int run(int argc, char** argv) {
    CLI::App app{"tiny-rdna4-nn: small fast neural networks (tcnn-compatible) on CPU, NVIDIA and AMD GPUs"};
    app.require_subcommand(1);

    tnn::app::FitImageOptions fit;
    auto* fit_cmd = app.add_subcommand("fit-image", "train a hash-grid MLP to reproduce an image");
    fit_cmd->add_option("image", fit.image, "PNG or JPEG file, at most 4096x4096 pixels; default: the bundled image");
    fit_cmd->add_option("--config", fit.config, "model config JSON (encoding, network, loss, optimizer)");
    fit_cmd->add_option("--steps", fit.steps, "training steps")->check(CLI::PositiveNumber);
    fit_cmd->add_option("--batch", fit.batch, "samples per step")->check(CLI::Range(1u, tnn::app::kMaxBatch));
    fit_cmd->add_option("--device", fit.device, "auto, cpu, gpu or gpu:N");
    fit_cmd->add_option("--seed", fit.seed, "seed for parameters and samples")
        ->check(CLI::Validator(check_seed, "UINT64", "seed"));
    fit_cmd->add_option("--out", fit.out, "output PNG of the reconstruction");
    fit_cmd->add_option("--json", fit.json, "write metrics as JSON");
    fit_cmd->add_option("--save", fit.save, "write a checkpoint at the end");
    fit_cmd->add_option("--resume", fit.resume, "continue from a checkpoint");
    fit_cmd->add_option("--eval-interval", fit.eval_interval, "steps between PSNR evaluations")->check(CLI::PositiveNumber);
    fit_cmd->add_option("--threads", fit.threads, "CPU threads (0: all this process may use; more is capped to that)")
        ->check(CLI::NonNegativeNumber);

    app.add_subcommand("info", "devices, compiled backends, precisions, modules, version");

    std::string image_out = "data/default.png";
    int image_size = 512;
    auto* img_cmd = app.add_subcommand("make-image", "write the procedural default image");
    img_cmd->add_option("path", image_out, "output PNG");
    img_cmd->add_option("--size", image_size, "width and height")->check(CLI::Range(16, 4096));

    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        return app.exit(e) == 0 ? 0 : 1;  // --help is a "parse error" with status 0
    }
    if (app.got_subcommand("info")) print_info();
    if (app.got_subcommand("make-image")) tnn::app::save_png(image_out, tnn::app::procedural_image(image_size, image_size));
    if (app.got_subcommand("fit-image")) return tnn::app::fit_image(fit);
    return 0;
}

}  // namespace

// Every failure ends here as one line on stderr and exit status 1: the library's typed errors, the
// JSON library's, allocation failures, thread creation failures, anything else.
int main(int argc, char** argv) {
    int status = 1;
    try {
        status = run(argc, argv);
    } catch (const tnn::Error& e) {
        std::fprintf(stderr, "tnn: error: %s\n", e.what());
    } catch (const std::bad_alloc&) {
        std::fprintf(stderr, "tnn: error: out of memory\n");
    } catch (const std::exception& e) {
        std::fprintf(stderr, "tnn: error: %s\n", e.what());
    } catch (...) {
        std::fprintf(stderr, "tnn: error: unknown failure\n");
    }
    // What was printed must have arrived (tnn info > /dev/full is an error too).
    if (std::fflush(stdout) != 0 || std::ferror(stdout)) {
        std::fprintf(stderr, "tnn: error: writing to standard output failed\n");
        return 1;
    }
    return status;
}
