// Image I/O with stb_image / stb_image_write (Debian's libstb-dev), the procedural default image,
// and PSNR.
#include "image.h"

#include <tnn/error.h>

#include <algorithm>
#include <cmath>

#define STB_IMAGE_IMPLEMENTATION
#define STB_IMAGE_WRITE_IMPLEMENTATION
#define STBI_FAILURE_USERMSG
#include <stb_image.h>
#include <stb_image_write.h>

namespace tnn::app {

void Image::sample(float u, float v, float out[3]) const {
    const float x = std::clamp(u * width - 0.5f, 0.0f, static_cast<float>(width - 1));
    const float y = std::clamp(v * height - 0.5f, 0.0f, static_cast<float>(height - 1));
    const int x0 = static_cast<int>(x), y0 = static_cast<int>(y);
    const int x1 = std::min(x0 + 1, width - 1), y1 = std::min(y0 + 1, height - 1);
    const float fx = x - x0, fy = y - y0;
    for (int c = 0; c < 3; ++c) {
        const float top = at(x0, y0, c) * (1 - fx) + at(x1, y0, c) * fx;
        const float bottom = at(x0, y1, c) * (1 - fx) + at(x1, y1, c) * fx;
        out[c] = top * (1 - fy) + bottom * fy;
    }
}

Image load_image(const std::string& path) {
    int w = 0, h = 0, n = 0;
    unsigned char* data = stbi_load(path.c_str(), &w, &h, &n, 3);
    if (!data) throw InputError(msg("cannot read image '", path, "': ", stbi_failure_reason()));
    Image img;
    img.width = w;
    img.height = h;
    img.rgb.resize(static_cast<size_t>(w) * h * 3);
    for (size_t i = 0; i < img.rgb.size(); ++i) img.rgb[i] = data[i] / 255.0f;
    stbi_image_free(data);
    return img;
}

void save_png(const std::string& path, const Image& image) {
    std::vector<unsigned char> bytes(image.rgb.size());
    for (size_t i = 0; i < bytes.size(); ++i)
        bytes[i] = static_cast<unsigned char>(std::lround(std::clamp(image.rgb[i], 0.0f, 1.0f) * 255.0f));
    if (!stbi_write_png(path.c_str(), image.width, image.height, 3, bytes.data(), image.width * 3))
        throw InputError(msg("cannot write PNG '", path, "'"));
}

Image procedural_image(int width, int height) {
    Image img;
    img.width = width;
    img.height = height;
    img.rgb.resize(static_cast<size_t>(width) * height * 3);
    const double pi = 3.14159265358979323846;
    for (int j = 0; j < height; ++j)
        for (int i = 0; i < width; ++i) {
            const double u = (i + 0.5) / width, v = (j + 0.5) / height;
            // Sky-like vertical gradient.
            double r = 0.15 + 0.35 * v, g = 0.25 + 0.3 * v, b = 0.55 - 0.25 * v;
            // A Mandelbrot set in the upper right quadrant: unbounded fine detail along its border.
            {
                const double cx = -2.2 + 2.8 * (u - 0.4) / 0.6, cy = -1.2 + 2.4 * v / 0.6;
                if (u > 0.4 && v < 0.6) {
                    double zx = 0, zy = 0;
                    int k = 0;
                    for (; k < 64 && zx * zx + zy * zy < 16; ++k) {
                        const double t = zx * zx - zy * zy + cx;
                        zy = 2 * zx * zy + cy;
                        zx = t;
                    }
                    if (k == 64) {
                        r = g = b = 0.02;
                    } else {
                        const double s = (k - std::log2(std::log2(zx * zx + zy * zy) / 2)) / 64.0;
                        r = 0.5 + 0.5 * std::cos(2 * pi * (s * 3 + 0.0));
                        g = 0.5 + 0.5 * std::cos(2 * pi * (s * 3 + 0.33));
                        b = 0.5 + 0.5 * std::cos(2 * pi * (s * 3 + 0.67));
                    }
                }
            }
            // Concentric rings with rising frequency in the lower left: a test of resolution.
            {
                const double dx = u - 0.25, dy = v - 0.75, d = std::sqrt(dx * dx + dy * dy);
                if (d < 0.22) {
                    const double ring = 0.5 + 0.5 * std::sin(2 * pi * 40 * d * d / 0.22);
                    r = 0.9 * ring + 0.1;
                    g = 0.6 * ring + 0.2 * (1 - ring);
                    b = 0.2 + 0.6 * (1 - ring);
                }
            }
            // A checkerboard strip (sharp axis-aligned edges) along the bottom.
            if (v > 0.92) {
                const bool on = (static_cast<int>(u * 32) + static_cast<int>((v - 0.92) * 32 / 0.08 * 0.25)) % 2 == 0;
                r = g = b = on ? 0.95 : 0.05;
            }
            // A solid triangle with a diagonal edge in the upper left.
            if (u < 0.35 && v < 0.45 && u + v * 0.8 < 0.4 && u > 0.05 && v > 0.05) {
                r = 0.95;
                g = 0.8;
                b = 0.1;
            }
            // Diagonal stripes in the lower right.
            if (u > 0.55 && v > 0.65 && v <= 0.92) {
                const double s = std::sin(2 * pi * 18 * (u + v));
                r = 0.2 + 0.2 * (s > 0);
                g = 0.5 + 0.4 * (s > 0);
                b = 0.3;
            }
            float* px = &img.rgb[(static_cast<size_t>(j) * width + i) * 3];
            px[0] = static_cast<float>(std::clamp(r, 0.0, 1.0));
            px[1] = static_cast<float>(std::clamp(g, 0.0, 1.0));
            px[2] = static_cast<float>(std::clamp(b, 0.0, 1.0));
        }
    return img;
}

double psnr(const Image& a, const Image& b) {
    double se = 0;
    for (size_t i = 0; i < a.rgb.size(); ++i) {
        const double d = std::clamp(a.rgb[i], 0.0f, 1.0f) - std::clamp(b.rgb[i], 0.0f, 1.0f);
        se += d * d;
    }
    const double mse = se / static_cast<double>(a.rgb.size());
    return mse == 0 ? 99.0 : 10.0 * std::log10(1.0 / mse);
}

}  // namespace tnn::app
