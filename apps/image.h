// Images for the example programs: RGB float images in [0,1], PNG and JPEG I/O through Debian's
// libpng and libjpeg-turbo (docs/reliability.md says why not stb_image), the procedural default
// image, and bilinear lookup with pixel centres at (i + 0.5) / size.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace tnn::app {

// Limits checked before anything is decoded: the file's length, and the pixel count its header
// declares (4096 x 4096: fit-image holds the image as floats and reconstructs every pixel per report).
constexpr uint64_t kMaxImageFileBytes = uint64_t{256} << 20;
constexpr uint64_t kMaxImagePixels = uint64_t{1} << 24;

struct Image {
    int width = 0, height = 0;
    std::vector<float> rgb;  // row-major [height][width][3]

    float at(int x, int y, int c) const { return rgb[(static_cast<size_t>(y) * width + x) * 3 + c]; }
    // Bilinear lookup at (u, v) in [0,1]^2; pixel (i, j) is centred at ((i+0.5)/W, (j+0.5)/H); clamps at the border.
    void sample(float u, float v, float out[3]) const;
};

// Reads a PNG or JPEG file (recognised by its first bytes, not its name); an alpha channel is
// dropped, grey is expanded to RGB. Throws tnn::InputError with the reason for anything else.
Image load_image(const std::string& path);
// The same for a file's bytes in memory; `what` names it in messages.
Image decode_image(const void* data, size_t size, const std::string& what, uint64_t max_pixels = kMaxImagePixels);
// Writes an 8-bit RGB PNG; a failed write (full disk, missing folder) throws tnn::InputError.
void save_png(const std::string& path, const Image& image);
// The project's default image: a deterministic procedural picture with sharp edges, fine detail
// and smooth gradients (so both a grid and the MLP have something to learn).
Image procedural_image(int width, int height);

// PSNR in dB of `a` against `b` (values clamped to [0,1], mean over all pixels and channels).
double psnr(const Image& a, const Image& b);

// Writes `bytes` to `path` (created or truncated); every failure, a short write included, throws
// tnn::InputError naming `what`.
void write_file(const std::string& path, const void* bytes, size_t size, const std::string& what);

}  // namespace tnn::app
