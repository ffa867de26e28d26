// `tnn fit-image`. Samples are drawn on the host from Pcg32(seed, step), so a run resumed from a
// checkpoint at step k sees exactly the batches an uninterrupted run sees.
#include "fit_image.h"

#include "image.h"

#include <tnn/tnn.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

#include <sched.h>
#include <sys/stat.h>
#include <unistd.h>

namespace tnn::app {

namespace {

bool file_exists(const std::string& p) { return ::access(p.c_str(), F_OK) == 0; }

// An output's folder must exist and be writable before training starts, not after it; the write
// itself is checked again when it happens.
void check_output(const std::string& option, const std::string& path) {
    if (path.empty()) return;
    struct stat st {};
    if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode))
        throw InputError(msg(option, " '", path, "' is a folder; give a file name"));
    const size_t slash = path.find_last_of('/');
    const std::string folder = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
    if (::stat(folder.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
        throw InputError(msg(option, " '", path, "': the folder '", folder, "' does not exist"));
    if (::access(folder.c_str(), W_OK | X_OK) != 0)
        throw InputError(msg(option, " '", path, "': the folder '", folder, "' is not writable: ", std::strerror(errno)));
}

// The CPUs this process may run on (its affinity mask, which containers and taskset narrow).
int usable_cpus() {
    cpu_set_t set;
    CPU_ZERO(&set);
    const int affinity = ::sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : 0;
    const int hardware = static_cast<int>(std::thread::hardware_concurrency());
    if (affinity > 0 && hardware > 0) return std::min(affinity, hardware);
    return std::max({affinity, hardware, 1});
}

Device choose_device(const std::string& name) {
    if (name == "auto") return gpu_available() ? Device::gpu(0) : Device::cpu();
    const Device d = Device::parse(name);
    if (d.is_gpu() && !has_gpu_backend())
        throw UnsupportedError("--device gpu: this build has no GPU backend (configure with TNN_CUDA=ON); use --device cpu");
    if (d.is_gpu() && d.index >= gpu_device_count())
        throw DeviceError(msg("--device ", name, ": ", gpu_device_count(), " GPU(s) present"));
    return d;
}

// Reconstructs the whole image by inference at every pixel centre.
Image reconstruct(const Trainer& trainer, const Stream& stream, int width, int height, Device device) {
    const int64_t n = static_cast<int64_t>(width) * height;
    const DType in_t = trainer.model().input_dtype();
    Tensor coords_host(n, 2, DType::f32);
    for (int j = 0; j < height; ++j)
        for (int i = 0; i < width; ++i) {
            coords_host.ptr<float>()[(static_cast<int64_t>(j) * width + i) * 2 + 0] = (i + 0.5f) / width;
            coords_host.ptr<float>()[(static_cast<int64_t>(j) * width + i) * 2 + 1] = (j + 0.5f) / height;
        }
    Tensor coords_typed(n, 2, in_t);
    convert(Stream::cpu(), coords_host.view(), coords_typed.view());
    Tensor coords = coords_typed.to(device, stream);
    Tensor out(n, 3, trainer.model().output_dtype(), device);
    trainer.inference(stream, coords.view(), out.view());
    Image img;
    img.width = width;
    img.height = height;
    const auto values = out.to(Device::cpu(), stream).to_float_vector();
    img.rgb.assign(values.begin(), values.end());
    return img;
}

std::string format_seconds(double s) {
    char buf[32];
    if (s < 60) std::snprintf(buf, sizeof(buf), "%.1fs", s);
    else std::snprintf(buf, sizeof(buf), "%dm%02ds", static_cast<int>(s) / 60, static_cast<int>(s) % 60);
    return buf;
}

}  // namespace

std::string data_path(const std::string& file) {
    if (const char* env = std::getenv("TNN_DATA_DIR")) return std::string(env) + "/" + file;
    if (file_exists("data/" + file)) return "data/" + file;
    return std::string(TNN_DATA_DIR) + "/" + file;
}

int fit_image(const FitImageOptions& o) {
    if (o.batch == 0 || o.batch > kMaxBatch) throw ConfigError(msg("--batch must be in [1, ", kMaxBatch, "], got ", o.batch));
    if (o.steps == 0 || o.eval_interval == 0) throw ConfigError("--steps and --eval-interval must be at least 1");
    if (o.threads < 0) throw ConfigError(msg("--threads must be at least 0, got ", o.threads));
    if (o.threads > 0) {
        const int cpus = usable_cpus();
        if (o.threads > cpus)
            std::fprintf(stderr, "tnn: --threads %d is more than the %d CPUs this process may use: using %d\n", o.threads,
                         cpus, cpus);
        set_num_threads(std::min(o.threads, cpus));
    }
    check_output("--out", o.out);
    check_output("--json", o.json);
    check_output("--save", o.save);
    const Device device = choose_device(o.device);
    const std::string config_path = o.config.empty() ? data_path(device.is_gpu() ? "config_gpu.json" : "config_cpu.json") : o.config;
    const std::string image_path = o.image.empty() ? data_path("default.png") : o.image;
    const json config = read_json_file(config_path, "config");
    if (!config.is_object())
        throw ConfigError(msg("config '", config_path, "' must be a JSON object, got ", config.type_name()));
    const Image image = load_image(image_path);

    const Stream stream = device.is_gpu() ? Stream::gpu(nullptr, device.index) : Stream::cpu();
    Trainer trainer(2, 3, config, device, o.seed);
    if (!o.resume.empty()) {
        // The header first: a checkpoint for another model is refused before its payload is read.
        const CheckpointHeader h = read_checkpoint_header(o.resume);
        if (h.n_params != trainer.model().n_params())
            throw CheckpointError(msg("checkpoint '", o.resume, "' does not fit this trainer: ", h.n_params,
                                      " parameters vs ", trainer.model().n_params()));
        if (h.step > o.steps)
            throw ConfigError(msg("checkpoint '", o.resume, "' is at step ", h.step, ", past --steps ", o.steps,
                                  "; give --steps of at least ", h.step));
        trainer.load(stream, o.resume);
    }
    const uint32_t start_step = trainer.step_count();
    if (start_step > o.steps)
        throw ConfigError(msg("checkpoint '", o.resume, "' is at step ", start_step, ", past --steps ", o.steps));

    std::printf("fit-image: %s (%dx%d) on %s, config %s\n", image_path.c_str(), image.width, image.height,
                device.is_gpu() ? gpu_device_description(device.index).c_str() : "cpu", config_path.c_str());
    std::printf("model: %s, %zu params, batch %u, steps %u (from %u), seed %llu\n", trainer.model().describe().c_str(),
                trainer.model().n_params(), o.batch, o.steps, start_step, static_cast<unsigned long long>(o.seed));

    const DType in_t = trainer.model().input_dtype();
    Tensor x_host(o.batch, 2, DType::f32), y_host(o.batch, 3, DType::f32);
    Tensor x_typed(o.batch, 2, in_t), y_typed(o.batch, 3, in_t);
    Tensor x_dev(o.batch, 2, in_t, device), y_dev(o.batch, 3, in_t, device);
    json curve = json::array();
    double train_seconds = 0, last_loss = NAN, last_psnr = NAN;
    const bool tty = ::isatty(STDOUT_FILENO);

    for (uint32_t step = start_step; step < o.steps; ++step) {
        const auto t0 = std::chrono::steady_clock::now();
        Pcg32 rng(o.seed, step);
        for (uint32_t k = 0; k < o.batch; ++k) {
            const float u = rng.next_float(), v = rng.next_float();
            x_host.ptr<float>()[k * 2] = u;
            x_host.ptr<float>()[k * 2 + 1] = v;
            image.sample(u, v, y_host.ptr<float>() + k * 3);
        }
        const bool host_typed = in_t != DType::f32;
        if (host_typed) {
            convert(Stream::cpu(), x_host.view(), x_typed.view());
            convert(Stream::cpu(), y_host.view(), y_typed.view());
        }
        const Tensor& xs = host_typed ? x_typed : x_host;
        const Tensor& ys = host_typed ? y_typed : y_host;
        copy_bytes(stream, x_dev.data(), device, xs.data(), Device::cpu(), xs.bytes());
        copy_bytes(stream, y_dev.data(), device, ys.data(), Device::cpu(), ys.bytes());
        trainer.step(stream, x_dev.view(), y_dev.view());
        const bool report = (step + 1) % o.eval_interval == 0 || step + 1 == o.steps;
        if (report) last_loss = trainer.loss(stream);  // synchronises
        else if (device.is_gpu() && (step + 1) % 16 == 0) stream.synchronize();  // keep the host-side copies honest
        train_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        if (!report) continue;
        last_psnr = psnr(reconstruct(trainer, stream, image.width, image.height, device), image);
        const double done = step + 1 - start_step, rate = done / train_seconds;
        curve.push_back({{"step", step + 1}, {"loss", last_loss}, {"psnr", last_psnr}, {"seconds", train_seconds}});
        std::printf("%sstep %6u/%u  loss %.5f  PSNR %6.2f dB  %7.1f steps/s  ETA %s%s", tty ? "\r" : "", step + 1,
                    o.steps, last_loss, last_psnr, rate, format_seconds((o.steps - step - 1) / rate).c_str(),
                    tty ? "   " : "\n");
        std::fflush(stdout);
    }
    if (tty) std::printf("\n");

    const Image result = reconstruct(trainer, stream, image.width, image.height, device);
    const double final_psnr = psnr(result, image);
    save_png(o.out, result);
    if (!o.save.empty()) trainer.save(stream, o.save);
    const double rate = (o.steps - start_step) / std::max(train_seconds, 1e-9);
    std::printf("final PSNR %.2f dB after %u steps (%.1f steps/s, %s training); wrote %s\n", final_psnr, o.steps,
                rate, format_seconds(train_seconds).c_str(), o.out.c_str());
    if (!o.json.empty()) {
        json metrics = {{"device", device.str()},
                        {"device_name", device.is_gpu() ? gpu_device_description(device.index) : "cpu"},
                        {"image", image_path},
                        {"config_path", config_path},
                        {"config", trainer.config()},
                        {"steps", o.steps},
                        {"batch", o.batch},
                        {"seed", o.seed},
                        {"final_psnr", final_psnr},
                        {"final_loss", last_loss},
                        {"train_seconds", train_seconds},
                        {"steps_per_second", rate},
                        {"curve", curve},
                        {"version", version()}};
        const std::string text = metrics.dump(2) + "\n";
        write_file(o.json, text.data(), text.size(), "metrics JSON");
    }
    return 0;
}

}  // namespace tnn::app
