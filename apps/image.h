// Images for the example programs: RGB float images in [0,1], PNG/JPEG/... I/O through stb, the
// procedural default image, and bilinear lookup with pixel centres at (i + 0.5) / size.
#pragma once

#include <string>
#include <vector>

namespace tnn::app {

struct Image {
    int width = 0, height = 0;
    std::vector<float> rgb;  // row-major [height][width][3]

    float at(int x, int y, int c) const { return rgb[(static_cast<size_t>(y) * width + x) * 3 + c]; }
    // Bilinear lookup at (u, v) in [0,1]^2; pixel (i, j) is centred at ((i+0.5)/W, (j+0.5)/H); clamps at the border.
    void sample(float u, float v, float out[3]) const;
};

Image load_image(const std::string& path);  // throws tnn::InputError with the reason
void save_png(const std::string& path, const Image& image);
// The project's default image: a deterministic procedural picture with sharp edges, fine detail
// and smooth gradients (so both a grid and the MLP have something to learn).
Image procedural_image(int width, int height);

// PSNR in dB of `a` against `b` (values clamped to [0,1], mean over all pixels and channels).
double psnr(const Image& a, const Image& b);

}  // namespace tnn::app
