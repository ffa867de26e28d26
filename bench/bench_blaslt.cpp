// One case of the BlasLtMLP report (bench/run_blaslt_report.sh), in its own process: GPU time of
// inference and of a training step (forward + backward) for several (otype, dtype) variants of one
// MLP shape, from CUDA graphs of back-to-back calls timed with events, in paired rounds (every round
// times every variant, alternating the order), plus the device memory each variant holds. One JSON.
//
//   bench_blaslt --label NAME --variants BlasLtMLP:float32,BlasLtMLP:float16 --batch 16384 --width 64
//                --depth 2 [--n_in 32] [--n_out 16] [--grid] [--rounds 5] [--round_ms 10] --out FILE.json
#include <tnn/tnn.h>

#include "bench_timing.h"
#include "gpu/allocator.h"
#include "gpu/gpu.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>
#include <vector>


using namespace tnn;

namespace {

struct Variant {
    std::string otype;
    DType dtype = DType::f32;
    std::string name() const { return otype + ":" + dtype_name(dtype); }
};

struct Options {
    std::string label = "case", out = "bench_blaslt.json", activation = "ReLU";
    std::vector<Variant> variants;
    int64_t batch = 16384;
    uint32_t width = 64, depth = 2, n_in = 32, n_out = 16;
    bool grid = false;
    int rounds = 5;
    double round_ms = 10.0;  // GPU time per measurement at least
};

[[noreturn]] void usage(const std::string& why) {
    std::cerr << "bench_blaslt: " << why << "\n"
              << "usage: bench_blaslt --label NAME --variants OTYPE:DTYPE[,...] --batch N --width W --depth D\n"
                 "                    [--n_in 32] [--n_out 16] [--activation ReLU] [--grid] [--rounds 5]\n"
                 "                    [--round_ms 10] --out FILE.json\n";
    std::exit(2);
}

Options parse(int argc, char** argv) {
    Options o;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        auto value = [&]() -> std::string {
            if (i + 1 >= argc) usage("missing value after " + a);
            return argv[++i];
        };
        if (a == "--label") o.label = value();
        else if (a == "--out") o.out = value();
        else if (a == "--activation") o.activation = value();
        else if (a == "--batch") o.batch = std::stoll(value());
        else if (a == "--width") o.width = static_cast<uint32_t>(std::stoul(value()));
        else if (a == "--depth") o.depth = static_cast<uint32_t>(std::stoul(value()));
        else if (a == "--n_in") o.n_in = static_cast<uint32_t>(std::stoul(value()));
        else if (a == "--n_out") o.n_out = static_cast<uint32_t>(std::stoul(value()));
        else if (a == "--rounds") o.rounds = std::stoi(value());
        else if (a == "--round_ms") o.round_ms = std::stod(value());
        else if (a == "--grid") o.grid = true;
        else if (a == "--variants") {
            std::string list = value();
            size_t start = 0;
            while (start <= list.size()) {
                const size_t end = std::min(list.find(',', start), list.size());
                const std::string item = list.substr(start, end - start);
                const size_t colon = item.find(':');
                if (colon == std::string::npos) usage("variant '" + item + "' is not OTYPE:DTYPE");
                o.variants.push_back(Variant{item.substr(0, colon), parse_dtype(item.substr(colon + 1))});
                start = end + 1;
            }
        } else {
            usage("unknown argument " + a);
        }
    }
    if (o.variants.empty()) usage("no --variants");
    return o;
}

using bench::capture;
using bench::median;
using bench::Timer;

// Host data in fp32 converted to `t` and copied to the GPU.
Tensor device_tensor(const std::vector<float>& host, int64_t rows, int64_t cols, DType t, const Stream& s) {
    Tensor f(rows, cols, DType::f32);
    std::memcpy(f.data(), host.data(), host.size() * sizeof(float));
    Tensor g = f.to(Device::gpu(0), s);
    if (t == DType::f32) return g;
    Tensor out(rows, cols, t, Device::gpu(0));
    convert(s, g.view(), out.view());
    return out;
}

// A graph of `inner` back-to-back calls, launched `launches` times per measurement.
struct Measured {
    gpu_graph_exec_t exec = nullptr;
    int inner = 1, launches = 1;
    std::vector<double> ms_per_call;
};

// One variant: its module, tensors, graphs and results.
struct Workload {
    Variant variant;
    std::string skipped;  // why this variant did not run
    std::unique_ptr<Module> model;
    Tensor params, y, dy, dparams;
    size_t persistent_bytes = 0, pool_bytes = 0;
    Measured inference, train;
};

json grid_config() {
    return {{"otype", "HashGrid"}, {"n_levels", 16}, {"n_features_per_level", 2}, {"log2_hashmap_size", 19},
            {"base_resolution", 16}, {"per_level_scale", 1.5}};
}

std::unique_ptr<Module> build_model(const Options& o, const Variant& v) {
    const json net = {{"otype", v.otype},          {"n_neurons", o.width}, {"n_hidden_layers", o.depth},
                      {"activation", o.activation}, {"output_activation", "None"}, {"dtype", dtype_name(v.dtype)}};
    if (o.grid) return create_network_with_input_encoding(3, o.n_out, grid_config(), net);
    return create_network(o.n_in, o.n_out, net);
}

void run_inference(Workload& w, const Stream& s, const Tensor& x) {
    w.model->inference(s, x.view(), w.y.view(), w.params.data());
}

void run_train(Workload& w, const Stream& s, const Tensor& x) {
    auto ctx = w.model->forward(s, x.view(), w.y.view(), w.params.data(), false);
    w.model->backward(s, *ctx, x.view(), w.y.view(), w.dy.view(), nullptr, w.dparams.data(), w.params.data(),
                      GradMode::overwrite);
}

// Calibrates `inner` (calls per graph: at least ~1 ms of GPU work, so launch gaps do not count) and
// `launches` (graph launches per measurement: at least round_ms), then captures the graph.
template <typename F>
Measured prepare(const Options& o, const Stream& s, Timer& timer, F&& body) {
    Measured m;
    gpu_graph_exec_t one = capture(s, 1, body);
    (void)timer.time_graph(one, gpu::native_stream(s), 1);  // first launch uploads the graph
    const double t1 = std::max(1e-3, timer.time_graph(one, gpu::native_stream(s), 3) / 3);
    TNN_GPU_CHECK(gpu_graph_exec_destroy(one));
    m.inner = static_cast<int>(std::clamp(std::ceil(1.0 / t1), 1.0, 64.0));
    m.exec = capture(s, m.inner, body);
    (void)timer.time_graph(m.exec, gpu::native_stream(s), 1);
    m.launches = static_cast<int>(std::clamp(std::ceil(o.round_ms / (t1 * m.inner)), 2.0, 1000.0));
    return m;
}

}  // namespace

int main(int argc, char** argv) {
    const Options o = parse(argc, argv);
    json result = {{"label", o.label},
                   {"batch", o.batch},
                   {"width", o.width},
                   {"depth", o.depth},
                   {"n_in", o.grid ? 3u : o.n_in},
                   {"n_out", o.n_out},
                   {"activation", o.activation},
                   {"grid", o.grid},
                   {"rounds", o.rounds},
                   {"train_step", "forward + backward (dL/dparams, overwrite); no loss or optimizer"},
                   {"timing", "GPU time from events around CUDA graph launches of back-to-back calls"}};
    try {
        if (gpu_device_count() == 0) throw DeviceError("no GPU");
        result["device"] = gpu_device_description(0);
        gpu_stream_t native = nullptr;
        TNN_GPU_CHECK(gpu_stream_create_with_flags(&native, gpu_stream_non_blocking));
        const Stream s = Stream::gpu(native, 0);
        Timer timer;

        // The same fp32 input and output gradient values for every variant.
        const uint32_t n_in = o.grid ? 3 : o.n_in;
        Pcg32 rng(42);
        std::vector<float> x_host(static_cast<size_t>(o.batch) * n_in), dy_host(static_cast<size_t>(o.batch) * o.n_out);
        for (auto& v : x_host) v = rng.next_float();
        for (auto& v : dy_host) v = (rng.next_float() - 0.5f) * 0.01f;
        const Tensor x = device_tensor(x_host, o.batch, n_in, DType::f32, s);

        std::vector<Workload> work(o.variants.size());
        for (size_t i = 0; i < o.variants.size(); ++i) {
            Workload& w = work[i];
            w.variant = o.variants[i];
            try {
                w.model = build_model(o, w.variant);
                if (!w.model->supports_device(Device::gpu(0))) {
                    w.skipped = w.model->describe() + " has no GPU implementation in this build";
                    w.model.reset();
                    continue;
                }
                std::vector<float> p(w.model->n_params());
                w.model->init_params(1337, p.data());
                const DType t = w.model->param_dtype();
                w.params = device_tensor(p, 1, static_cast<int64_t>(p.size()), t, s);
                w.y = Tensor(o.batch, o.n_out, w.model->output_dtype(), Device::gpu(0));
                w.dy = device_tensor(dy_host, o.batch, o.n_out, w.model->output_dtype(), s);
                w.dparams = Tensor(1, static_cast<int64_t>(p.size()), t, Device::gpu(0));
                w.persistent_bytes = x.bytes() + w.params.bytes() + w.y.bytes() + w.dy.bytes() + w.dparams.bytes();

                // Memory: the temporary pool starts empty; after one inference and one training step it
                // holds the most this variant needs at once (blocks are cached, not returned).
                s.synchronize();
                free_temporary_memory();
                run_inference(w, s, x);
                run_train(w, s, x);
                s.synchronize();
                w.pool_bytes = gpu::allocator_stats(0).reserved_bytes;
                free_temporary_memory();
            } catch (const std::exception& e) {
                w.skipped = e.what();
                w.model.reset();
            }
        }
        // Graphs last: from here on nothing returns pool memory to the driver (captured graphs use it).
        for (Workload& w : work) {
            if (!w.skipped.empty()) continue;
            try {
                for (int warm = 0; warm < 2; ++warm) {  // plans, allocator blocks, lazy library state
                    run_inference(w, s, x);
                    run_train(w, s, x);
                }
                s.synchronize();
                w.inference = prepare(o, s, timer, [&] { run_inference(w, s, x); });
                w.train = prepare(o, s, timer, [&] { run_train(w, s, x); });
            } catch (const std::exception& e) {
                w.skipped = e.what();
                w.model.reset();
            }
        }

        // Paired rounds: every round measures every variant; the order alternates between rounds.
        for (int r = 0; r < o.rounds; ++r) {
            for (size_t k = 0; k < work.size(); ++k) {
                Workload& w = work[r % 2 == 0 ? k : work.size() - 1 - k];
                if (!w.skipped.empty()) continue;
                for (Measured* m : {&w.inference, &w.train}) {
                    const double ms = timer.time_graph(m->exec, native, m->launches);
                    m->ms_per_call.push_back(ms / (m->launches * m->inner));
                }
            }
        }

        json variants = json::object();
        for (Workload& w : work) {
            json v = {{"otype", w.variant.otype}, {"dtype", dtype_name(w.variant.dtype)}};
            if (!w.skipped.empty()) {
                v["skipped"] = w.skipped;
            } else {
                v["inference_ms"] = w.inference.ms_per_call;
                v["train_ms"] = w.train.ms_per_call;
                v["inference_ms_median"] = median(w.inference.ms_per_call);
                v["train_ms_median"] = median(w.train.ms_per_call);
                v["calls_per_graph"] = {w.inference.inner, w.train.inner};
                v["persistent_bytes"] = w.persistent_bytes;
                v["temporary_pool_bytes"] = w.pool_bytes;
                v["peak_bytes"] = w.persistent_bytes + w.pool_bytes;
                (void)gpu_graph_exec_destroy(w.inference.exec);
                (void)gpu_graph_exec_destroy(w.train.exec);
            }
            variants[w.variant.name()] = v;
        }
        result["variants"] = variants;
        work.clear();
        s.synchronize();
        (void)gpu_stream_destroy(native);
    } catch (const std::exception& e) {
        result["error"] = e.what();
    }
    std::ofstream(o.out) << result.dump(2) << "\n";
    // One line for the log.
    std::printf("%-34s", o.label.c_str());
    if (result.contains("error")) std::printf(" ERROR %s", result["error"].get<std::string>().c_str());
    if (result.contains("variants"))
        for (auto& [name, v] : result["variants"].items()) {
            if (v.contains("skipped"))
                std::printf("  %s: skipped", name.c_str());
            else
                std::printf("  %s: inf %.4f ms, train %.4f ms", name.c_str(), v["inference_ms_median"].get<double>(),
                            v["train_ms_median"].get<double>());
        }
    std::printf("\n");
    return result.contains("error") ? 1 : 0;
}
