// The `tnn` command-line program: fit-image (the demo), info (devices, backends, versions) and
// make-image (regenerates the bundled default image).
#include "fit_image.h"
#include "image.h"

#include <tnn/tnn.h>

#include <CLI/CLI.hpp>

#include <cstdio>
#include <iostream>

namespace {

void print_info() {
    std::printf("tiny-rdna4-nn %s\n", tnn::version());
    std::printf("GPU backend: %s\n", tnn::gpu_backend_name());
    const int n = tnn::gpu_device_count();
    std::printf("GPU devices: %d\n", n);
    for (int i = 0; i < n; ++i) std::printf("  gpu:%d  %s\n", i, tnn::gpu_device_description(i).c_str());
    std::printf("CPU threads: %d\n", tnn::num_threads());
    std::printf("precisions: float32, float16, bfloat16 (all devices; fp16/bf16 emulated on the CPU), float64 (CPU)\n");
    std::printf("encodings: %s\n", tnn::join(tnn::encoding_names()).c_str());
    std::printf("networks: %s\n", tnn::join(tnn::network_names()).c_str());
    std::printf("losses: %s\n", tnn::join(tnn::loss_names()).c_str());
    std::printf("optimizers: %s\n", tnn::join(tnn::optimizer_names()).c_str());
}

}  // namespace

int main(int argc, char** argv) {
    CLI::App app{"tiny-rdna4-nn: small fast neural networks (tcnn-compatible) on CPU, NVIDIA and AMD GPUs"};
    app.require_subcommand(1);

    tnn::app::FitImageOptions fit;
    auto* fit_cmd = app.add_subcommand("fit-image", "train a hash-grid MLP to reproduce an image");
    fit_cmd->add_option("image", fit.image, "image file (PNG, JPEG, ...); default: the bundled image");
    fit_cmd->add_option("--config", fit.config, "model config JSON (encoding, network, loss, optimizer)");
    fit_cmd->add_option("--steps", fit.steps, "training steps")->check(CLI::PositiveNumber);
    fit_cmd->add_option("--batch", fit.batch, "samples per step")->check(CLI::PositiveNumber);
    fit_cmd->add_option("--device", fit.device, "auto, cpu, gpu or gpu:N");
    fit_cmd->add_option("--seed", fit.seed, "seed for parameters and samples");
    fit_cmd->add_option("--out", fit.out, "output PNG of the reconstruction");
    fit_cmd->add_option("--json", fit.json, "write metrics as JSON");
    fit_cmd->add_option("--save", fit.save, "write a checkpoint at the end");
    fit_cmd->add_option("--resume", fit.resume, "continue from a checkpoint");
    fit_cmd->add_option("--eval-interval", fit.eval_interval, "steps between PSNR evaluations")->check(CLI::PositiveNumber);
    fit_cmd->add_option("--threads", fit.threads, "CPU threads (0: all)");

    app.add_subcommand("info", "devices, compiled backends, precisions, modules, version");

    std::string image_out = "data/default.png";
    int image_size = 512;
    auto* img_cmd = app.add_subcommand("make-image", "write the procedural default image");
    img_cmd->add_option("path", image_out, "output PNG");
    img_cmd->add_option("--size", image_size, "width and height")->check(CLI::Range(16, 8192));

    CLI11_PARSE(app, argc, argv);
    try {
        if (app.got_subcommand("info")) print_info();
        if (app.got_subcommand("make-image")) tnn::app::save_png(image_out, tnn::app::procedural_image(image_size, image_size));
        if (app.got_subcommand("fit-image")) return tnn::app::fit_image(fit);
    } catch (const tnn::Error& e) {
        std::fprintf(stderr, "tnn: error: %s\n", e.what());
        return 1;
    }
    return 0;
}
