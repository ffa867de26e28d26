// Image I/O: PNG through libpng's simplified API, JPEG through libjpeg-turbo's TurboJPEG API (both
// Debian packages with security support), the procedural default image, and PSNR. Only these two
// formats are read; the file's length and the declared pixel count are checked before decoding.
#include "image.h"

#include <tnn/error.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <memory>

#include <fcntl.h>
#include <png.h>
#include <sys/stat.h>
#include <turbojpeg.h>
#include <unistd.h>

namespace tnn::app {

namespace {

constexpr unsigned char kPngMagic[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
constexpr unsigned char kJpegMagic[3] = {0xff, 0xd8, 0xff};

bool starts_with(const void* data, size_t size, const unsigned char* magic, size_t n) {
    return size >= n && std::memcmp(data, magic, n) == 0;
}

void check_pixels(const std::string& what, uint64_t width, uint64_t height, uint64_t max_pixels) {
    if (width == 0 || height == 0) throw InputError(msg("cannot read image '", what, "': it has no pixels"));
    if (width * height > max_pixels)  // both < 2^32: the product does not wrap
        throw InputError(msg("cannot read image '", what, "': ", width, "x", height, " pixels, more than the ",
                             max_pixels, " allowed"));
}

Image to_float(int width, int height, const uint8_t* pixels, int channels) {
    Image img;
    img.width = width;
    img.height = height;
    const size_t n = static_cast<size_t>(width) * static_cast<size_t>(height);
    img.rgb.resize(n * 3);
    for (size_t i = 0; i < n; ++i)
        for (int c = 0; c < 3; ++c) img.rgb[i * 3 + c] = pixels[i * channels + c] / 255.0f;
    return img;
}

Image decode_png(const void* data, size_t size, const std::string& what, uint64_t max_pixels) {
    png_image png;
    std::memset(&png, 0, sizeof(png));
    png.version = PNG_IMAGE_VERSION;
    struct Release {
        png_image* p;
        ~Release() { png_image_free(p); }
    } release{&png};
    if (!png_image_begin_read_from_memory(&png, data, size))
        throw InputError(msg("cannot read PNG image '", what, "': ", png.message));
    check_pixels(what, png.width, png.height, max_pixels);
    // RGBA, then the alpha is dropped (8-bit sRGB output is not premultiplied); 16-bit samples are
    // taken as sRGB-encoded like 8-bit ones, not as linear light.
    png.format = PNG_FORMAT_RGBA;
    png.flags |= PNG_IMAGE_FLAG_16BIT_sRGB;
    std::vector<uint8_t> pixels(PNG_IMAGE_SIZE(png));
    if (!png_image_finish_read(&png, nullptr, pixels.data(), 0, nullptr))
        throw InputError(msg("cannot read PNG image '", what, "': ", png.message));
    return to_float(static_cast<int>(png.width), static_cast<int>(png.height), pixels.data(), 4);
}

Image decode_jpeg(const void* data, size_t size, const std::string& what, uint64_t max_pixels) {
    const std::unique_ptr<void, int (*)(tjhandle)> tj(tjInitDecompress(), tjDestroy);
    if (!tj) throw InputError(msg("cannot read JPEG image '", what, "': ", tjGetErrorStr2(nullptr)));
    const auto* bytes = static_cast<const unsigned char*>(data);
    const auto n = static_cast<unsigned long>(size);  // < kMaxImageFileBytes
    int width = 0, height = 0, subsampling = 0, colorspace = 0;
    if (tjDecompressHeader3(tj.get(), bytes, n, &width, &height, &subsampling, &colorspace) != 0)
        throw InputError(msg("cannot read JPEG image '", what, "': ", tjGetErrorStr2(tj.get())));
    if (width <= 0 || height <= 0) throw InputError(msg("cannot read JPEG image '", what, "': it has no pixels"));
    check_pixels(what, static_cast<uint64_t>(width), static_cast<uint64_t>(height), max_pixels);
    std::vector<uint8_t> pixels(static_cast<size_t>(width) * static_cast<size_t>(height) * 3);
    // A warning (truncated data, a corrupt segment) is an error; progressive files may have at most
    // 500 scans (a file of many tiny scans otherwise costs time quadratic in its length).
    if (tjDecompress2(tj.get(), bytes, n, pixels.data(), width, 0, height, TJPF_RGB,
                      TJFLAG_STOPONWARNING | TJFLAG_LIMITSCANS) != 0)
        throw InputError(msg("cannot read JPEG image '", what, "': ", tjGetErrorStr2(tj.get())));
    return to_float(width, height, pixels.data(), 3);
}

}  // namespace

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

Image decode_image(const void* data, size_t size, const std::string& what, uint64_t max_pixels) {
    if (size > kMaxImageFileBytes)
        throw InputError(msg("cannot read image '", what, "': ", size, " bytes, more than the ", kMaxImageFileBytes, " allowed"));
    if (starts_with(data, size, kPngMagic, sizeof(kPngMagic))) return decode_png(data, size, what, max_pixels);
    if (starts_with(data, size, kJpegMagic, sizeof(kJpegMagic))) return decode_jpeg(data, size, what, max_pixels);
    throw InputError(msg("cannot read image '", what, "': not a PNG or JPEG file (the formats tnn reads)"));
}

Image load_image(const std::string& path) {
    // O_NONBLOCK: opening a FIFO must not wait for a writer; it is refused below as not a regular file.
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) throw InputError(msg("cannot open image '", path, "': ", std::strerror(errno)));
    struct Close {
        int fd;
        ~Close() { ::close(fd); }
    } close_fd{fd};
    struct stat st {};
    if (::fstat(fd, &st) != 0) throw InputError(msg("cannot read image '", path, "': ", std::strerror(errno)));
    if (!S_ISREG(st.st_mode)) throw InputError(msg("cannot read image '", path, "': not a regular file"));
    if (static_cast<uint64_t>(st.st_size) > kMaxImageFileBytes)
        throw InputError(msg("cannot read image '", path, "': ", st.st_size, " bytes, more than the ", kMaxImageFileBytes,
                             " allowed"));
    std::vector<uint8_t> bytes(static_cast<size_t>(st.st_size));
    size_t got = 0;
    while (got < bytes.size()) {
        const ssize_t n = ::read(fd, bytes.data() + got, bytes.size() - got);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) throw InputError(msg("cannot read image '", path, "': ", std::strerror(errno)));
        if (n == 0) break;  // the file shrank: decode what is there (a decoder refuses a truncated image)
        got += static_cast<size_t>(n);
    }
    return decode_image(bytes.data(), got, path);
}

void write_file(const std::string& path, const void* bytes, size_t size, const std::string& what) {
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) throw InputError(msg("cannot write ", what, " '", path, "': ", std::strerror(errno)));
    const auto* p = static_cast<const char*>(bytes);
    while (size > 0) {
        const ssize_t n = ::write(fd, p, size);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
            const int err = n < 0 ? errno : EIO;
            ::close(fd);
            throw InputError(msg("cannot write ", what, " '", path, "': ", std::strerror(err)));
        }
        p += n;
        size -= static_cast<size_t>(n);
    }
    if (::close(fd) != 0) throw InputError(msg("cannot write ", what, " '", path, "': ", std::strerror(errno)));
}

void save_png(const std::string& path, const Image& image) {
    std::vector<unsigned char> pixels(image.rgb.size());
    for (size_t i = 0; i < pixels.size(); ++i)
        pixels[i] = static_cast<unsigned char>(std::lround(std::clamp(image.rgb[i], 0.0f, 1.0f) * 255.0f));
    png_image png;
    std::memset(&png, 0, sizeof(png));
    png.version = PNG_IMAGE_VERSION;
    png.width = static_cast<png_uint_32>(image.width);
    png.height = static_cast<png_uint_32>(image.height);
    png.format = PNG_FORMAT_RGB;
    png_alloc_size_t size = 0;
    if (!png_image_write_get_memory_size(png, size, 0, pixels.data(), 0, nullptr))
        throw InputError(msg("cannot encode PNG '", path, "': ", png.message));
    std::vector<unsigned char> file(size);
    if (!png_image_write_to_memory(&png, file.data(), &size, 0, pixels.data(), 0, nullptr))
        throw InputError(msg("cannot encode PNG '", path, "': ", png.message));
    write_file(path, file.data(), size, "PNG");
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
