// `tnn fit-image`: trains a NetworkWithInputEncoding to reproduce an image (tcnn's image sample):
// random pixel coordinates per step, bilinear targets at pixel centres, the config's loss and
// optimizer; reports loss, PSNR, steps/s; writes the reconstruction and optional JSON metrics.
#pragma once

#include <cstdint>
#include <string>

namespace tnn::app {

// The largest --batch: as many samples as the largest image has pixels.
constexpr uint32_t kMaxBatch = 1u << 24;

struct FitImageOptions {
    std::string image;        // empty: the bundled default image
    std::string config;       // empty: the bundled default config for the device
    std::string device = "auto";
    std::string out = "fit.png";
    std::string json;         // metrics file, optional
    std::string save, resume; // checkpoint paths, optional
    uint32_t steps = 2000;
    uint32_t batch = 1u << 12;
    uint64_t seed = 1337;
    uint32_t eval_interval = 250;
    int threads = 0;          // 0: every CPU this process may use; more is capped to that
};

int fit_image(const FitImageOptions& options);

// Where the bundled data lives: $TNN_DATA_DIR, else ./data, else the source tree's data/.
std::string data_path(const std::string& file);

}  // namespace tnn::app
