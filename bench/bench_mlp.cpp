// FullyFusedMLP device benchmark (bench/run_mlp_bench.sh builds and runs it): GPU time per call of
// inference and of a training step for the shapes, from CUDA graphs of back-to-back calls
// timed with events (median of rounds), plus the small-batch latency of 64->64->64 and a sweep of
// warps per block. Writes one JSON; bench_mlp_report.py adds the floors and the baselines.
//
//   bench_mlp --out FILE.json [--rounds 5] [--round_ms 20] [--batch_log2 21] [--quick] [--only LABEL]
//             [--pass PASS]
//
// --only LABEL runs just the rows whose label contains LABEL (e.g. "32->64->16"), and --pass PASS just
// the rows of that pass (inference, train, train_fused, fused_loss_bwd, fwd_bwd, forward_ctx), for
// profilers.
//
// A training step is forward (with context) + L2 loss + backward (dL/dparams) + Adam when the
// library has GPU kernels for the loss and the optimizer; without them it is forward + backward
// with a fixed dL/doutput, and the JSON says which ("train_parts"). It is timed from eager calls
// (events around back-to-back steps, batches >= 2^16 only): GPU optimizer steps refuse graph capture.
#include <tnn/tnn.h>

#include "bench_timing.h"
#include "gpu/gpu.h"
#include "losses/loss_gpu.h"
#include "networks/fully_fused_mlp.h"
#include "networks/fused_loss.h"

#include <algorithm>
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

struct Options {
    std::string out = "bench_mlp.json";
    int rounds = 5;
    double round_ms = 20.0;
    int batch_log2 = 21;
    bool quick = false;
    std::string only;  // run only the shapes whose label contains this
    std::string pass;  // run only the rows of this pass (e.g. fused_loss_bwd)
};

Options parse(int argc, char** argv) {
    Options o;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        auto next = [&]() -> std::string {
            if (i + 1 >= argc) {
                std::cerr << "bench_mlp: " << a << " needs a value\n";
                std::exit(2);
            }
            return argv[++i];
        };
        if (a == "--out") o.out = next();
        else if (a == "--rounds") o.rounds = std::stoi(next());
        else if (a == "--round_ms") o.round_ms = std::stod(next());
        else if (a == "--batch_log2") o.batch_log2 = std::stoi(next());
        else if (a == "--quick") o.quick = true;
        else if (a == "--only") o.only = next();
        else if (a == "--pass") o.pass = next();
        else {
            std::cerr << "usage: bench_mlp --out FILE.json [--rounds 5] [--round_ms 20] [--batch_log2 21] [--quick]"
                         " [--only LABEL] [--pass PASS]\n";
            std::exit(2);
        }
    }
    return o;
}

using bench::median;

// Median-of-rounds timings with this run's options (bench_timing.h).
template <typename F> std::vector<double> time_calls(const Stream& s, const Options& o, F&& body) {
    return bench::time_calls(s, o.rounds, o.round_ms, 1000, body);
}
template <typename F> std::vector<double> time_eager(const Stream& s, const Options& o, F&& body) {
    return bench::time_eager(s, o.rounds, o.round_ms, body);
}

std::vector<float> uniform(size_t n, float lo, float hi, uint64_t seed) {
    Pcg32 rng(seed);
    std::vector<float> v(n);
    for (auto& x : v) x = lo + (hi - lo) * rng.next_float();
    return v;
}

Tensor upload(const std::vector<float>& v, int64_t rows, int64_t cols, DType dtype, Device dev) {
    Tensor host(rows, cols, DType::f32);
    std::memcpy(host.data(), v.data(), v.size() * sizeof(float));
    if (dtype != DType::f32) {
        Tensor t(rows, cols, dtype);
        convert(Stream::cpu(), host.view(), t.view());
        return t.to(dev);
    }
    return host.to(dev);
}

struct Shape {
    uint32_t n_in, width, n_out, hidden;
};

json net_config(const Shape& sh) {
    return {{"otype", "FullyFusedMLP"}, {"n_neurons", sh.width},   {"n_hidden_layers", sh.hidden},
            {"activation", "ReLU"},     {"output_activation", "None"}, {"dtype", "float16"}};
}

// One shape at one batch size: its network, tensors, and timed passes appended to `results`. An override
// that caps the values per dL/dinput store (dx_values) changes one pass alone, the one that writes
// dL/dinput: fused_loss_bwd_dx is all that is timed for it.
void bench_shape(const Shape& sh, int64_t batch, const std::string& label, const Options& o, const Stream& s,
                 json& results, const std::vector<ffm::PlanOverride>& overrides, bool train = true) {
    if (!o.only.empty() && label.find(o.only) == std::string::npos) return;
    const Device dev = s.device();
    auto net = create_network(sh.n_in, sh.n_out, net_config(sh));
    std::vector<float> p32(net->n_params());
    net->init_params(1337, p32.data());
    Tensor params = upload(p32, 1, static_cast<int64_t>(p32.size()), DType::f16, dev);
    Tensor params_fp32 = upload(p32, 1, static_cast<int64_t>(p32.size()), DType::f32, dev);
    Tensor x = upload(uniform(size_t(batch) * sh.n_in, 0.0f, 1.0f, 1), batch, sh.n_in, DType::f32, dev);
    Tensor target = upload(uniform(size_t(batch) * sh.n_out, 0.0f, 1.0f, 2), batch, sh.n_out, DType::f32, dev);
    Tensor dy = upload(uniform(size_t(batch) * sh.n_out, -1.0f, 1.0f, 3), batch, sh.n_out, DType::f16, dev);
    Tensor y(batch, sh.n_out, DType::f16, dev), grads(1, static_cast<int64_t>(net->n_params()), DType::f16, dev);
    Tensor values(batch, sh.n_out, DType::f32, dev), dloss(batch, sh.n_out, DType::f16, dev);
    // A 16-bit input and its gradient: an encoding's output and dL/dencoding (the grid + MLP step).
    Tensor x16 = upload(uniform(size_t(batch) * sh.n_in, 0.0f, 1.0f, 1), batch, sh.n_in, DType::f16, dev);
    Tensor dx16(batch, sh.n_in, DType::f16, dev);
    fill(s, grads.view(), 0.0);  // the Adam probe below steps with it

    // Whether this build has GPU kernels for the L2 loss and Adam (probed once, outside any capture).
    auto loss = create_loss({{"otype", "L2"}});
    auto adam = create_optimizer({{"otype", "Adam"}, {"learning_rate", 1e-3}});
    bool have_loss = true, have_adam = true;
    try {
        loss->evaluate(s, 128.0f, y.view(), target.view(), nullptr, values.view(), dloss.view());
        s.synchronize();
    } catch (const Error&) {
        have_loss = false;
    }
    try {
        adam->allocate(dev, net->n_params(), net->n_matrix_params());
        adam->step(s, 128.0f, params_fp32.ptr<float>(), params.data(), DType::f16, grads.data(), DType::f16);
        s.synchronize();
    } catch (const Error&) {
        have_adam = false;
    }
    const std::string parts =
        std::string("forward+") + (have_loss ? "L2+" : "") + "backward" + (have_adam ? "+Adam" : "");
    // The rows that step Adam start from the initial weights and a fresh optimizer state, so that
    // every variant times the same data, and report whether the weights stayed finite. (Run 11 of
    // 2026-11-30: the fused rows of the variants, timed after earlier variants' Adam steps, after an
    // Adam probe with an unwritten gradient buffer, were 15-40% slower than the default rows of the
    // same plan, the unfused rows not; the cause was not established.)
    auto reset_weights = [&] {
        params = upload(p32, 1, static_cast<int64_t>(p32.size()), DType::f16, dev);
        params_fp32 = upload(p32, 1, static_cast<int64_t>(p32.size()), DType::f32, dev);
        if (have_adam) adam->allocate(dev, net->n_params(), net->n_matrix_params());
    };
    auto weights_finite = [&] {
        const std::vector<float> w = params_fp32.to(Device::cpu(), s).to_float_vector();
        return std::all_of(w.begin(), w.end(), [](float v) { return std::isfinite(v); });
    };

    for (const ffm::PlanOverride& ov : overrides) {
        const ffm::PlanOverrideScope scope(ov);
        json variant = {{"forward_warps", ov.forward_warps}, {"backward_warps", ov.backward_warps},
                        {"generic", ov.generic_kernels}, {"backward_m_tiles", ov.backward_m_tiles},
                        {"dy_global", ov.dy_global},            {"fused_target_global", ov.fused_target_global},
                        {"no_wgmma", ov.no_wgmma},              {"dx_values", ov.dx_values}};
        auto record = [&](const char* pass, const std::vector<double>& ms, const std::string& what) {
            results.push_back({{"label", label},       {"pass", pass},         {"n_in", sh.n_in},
                               {"width", sh.width},    {"n_out", sh.n_out},    {"hidden", sh.hidden},
                               {"batch", batch},       {"ms", median(ms)},     {"ms_rounds", ms},
                               {"variant", variant},   {"what", what}});
            std::printf("%-28s %-10s b=%-8lld fw=%d bw=%d%s%s%s%s%s%s  %9.4f ms  (%s)\n", label.c_str(), pass,
                        static_cast<long long>(batch), ov.forward_warps, ov.backward_warps,
                        ov.generic_kernels ? " generic" : "", ov.backward_m_tiles ? (ov.backward_m_tiles == 2 ? " bwd-mt2" : " bwd-mt1") : "",
                        ov.dy_global ? " dy-global" : "", ov.fused_target_global ? " target-global" : "",
                        ov.no_wgmma ? " mma-sync" : "", ov.dx_values == 1 ? " dx-one-value" : ov.dx_values == 2 ? " dx-pairs" : "", median(ms), what.c_str());
            std::fflush(stdout);
        };
        // After a row that stepped Adam: whether the weights stayed finite, in the row and on screen.
        auto note_weights = [&] {
            const bool finite = weights_finite();
            results.back()["weights_finite"] = finite;
            if (!finite) std::printf("%-28s WARNING: the weights are not finite after this row\n", label.c_str());
        };
        const std::string only_pass = ov.dx_values ? "fused_loss_bwd_dx" : "";
        auto want = [&](const char* pass) {
            return (o.pass.empty() || o.pass == pass) && (only_pass.empty() || only_pass == pass);
        };
        try {
            reset_weights();
            if (want("inference"))
                record("inference", time_calls(s, o, [&] { net->inference(s, x.view(), y.view(), params.data()); }),
                       "inference");
            if (!train) continue;
            // Eager calls (Adam refuses graph capture); only at batches whose step outlasts its launches.
            if (batch >= (int64_t(1) << 16) && want("train")) {
                record("train", time_eager(s, o, [&] {
                       auto ctx = net->forward(s, x.view(), y.view(), params.data(), false);
                       if (have_loss) loss->evaluate(s, 128.0f, y.view(), target.view(), nullptr, values.view(), dloss.view());
                       net->backward(s, *ctx, x.view(), y.view(), have_loss ? dloss.view() : dy.view(), nullptr,
                                     grads.data(), params.data(), GradMode::overwrite);
                       if (have_adam)
                           adam->step(s, 128.0f, params_fp32.ptr<float>(), params.data(), DType::f16, grads.data(),
                                      DType::f16);
                   }),
                       parts + " (eager launches)");
                note_weights();
            }
            // The Trainer's step for these networks: forward, loss and backward in the backward kernel.
            LossKind kind;
            if (have_loss && loss_kind_of(*loss, &kind) && can_fuse_loss(*net, dev, kind)) {
                reset_weights();
                if (batch >= (int64_t(1) << 16) && want("train_fused")) {
                    record("train_fused", time_eager(s, o, [&] {
                               fused_loss_backward(*net, s, x.view(), target.view(), kind, 128.0f, values.view(),
                                                        nullptr, grads.data(), params.data());
                               if (have_adam)
                                   adam->step(s, 128.0f, params_fp32.ptr<float>(), params.data(), DType::f16,
                                              grads.data(), DType::f16);
                           }),
                           std::string("fused forward+L2+backward") + (have_adam ? "+Adam" : "") + " (eager launches)");
                    note_weights();
                    reset_weights();
                }
                if (want("fused_loss_bwd"))
                    record("fused_loss_bwd", time_calls(s, o, [&] {
                               fused_loss_backward(*net, s, x.view(), target.view(), kind, 128.0f, values.view(),
                                                        nullptr, grads.data(), params.data());
                           }),
                           "fused forward+L2+backward kernel (compare fwd_bwd)");
                if (want("fused_loss_bwd_dx"))
                    record("fused_loss_bwd_dx", time_calls(s, o, [&] {
                               View gx = dx16.view();
                               fused_loss_backward(*net, s, x16.view(), target.view(), kind, 128.0f, values.view(),
                                                        &gx, grads.data(), params.data());
                           }),
                           "fused_loss_bwd with a 16-bit input and dL/dinput (an encoding's output and gradient)");
            }
            if (want("fwd_bwd"))
                record("fwd_bwd", time_calls(s, o, [&] {
                           auto ctx = net->forward(s, x.view(), y.view(), params.data(), false);
                           net->backward(s, *ctx, x.view(), y.view(), dy.view(), nullptr, grads.data(), params.data(),
                                         GradMode::overwrite);
                       }),
                       "forward+backward");
            if (want("forward_ctx"))
                record("forward_ctx", time_calls(s, o, [&] {
                           auto ctx = net->forward(s, x.view(), y.view(), params.data(), false);
                           (void)ctx;
                       }),
                       "forward with context (backward = fwd_bwd - this)");
        } catch (const std::exception& e) {
            results.push_back({{"label", label}, {"variant", variant}, {"error", e.what()}});
            std::printf("%-28s ERROR %s\n", label.c_str(), e.what());
        }
    }
}

}  // namespace

int main(int argc, char** argv) {
    const Options o = parse(argc, argv);
    if (!gpu_available()) {
        std::cerr << "bench_mlp: no GPU\n";
        return 1;
    }
    gpu_stream_t native = nullptr;
    TNN_GPU_CHECK(gpu_stream_create_with_flags(&native, gpu_stream_non_blocking));
    const Stream s = Stream::gpu(native, 0);
    json results = json::array();
    const int64_t big = int64_t(1) << o.batch_log2;
    const std::vector<ffm::PlanOverride> automatic = {ffm::PlanOverride{}};

    // The shapes: 2 hidden layers, ReLU, no bias, fp32 input, fp16 output.
    const std::vector<Shape> shapes = {{32, 64, 16, 2}, {32, 128, 16, 2}, {64, 64, 64, 2}, {32, 16, 16, 2}};
    for (const Shape& sh : shapes)
        bench_shape(sh, big, msg(sh.n_in, "->", sh.width, "->", sh.n_out), o, s, results, automatic);
    // Small-batch latency (GPU-busy time per call, back-to-back in a graph).
    for (int64_t b : {int64_t(1), int64_t(128), int64_t(1024)})
        bench_shape({64, 64, 64, 2}, b, msg("latency 64->64->64"), o, s, results, automatic);
    // 64->64->64: the plan before 12-warp blocks (8 warps, dL/doutput staged, dW on chip) next to the
    // planner's 12-warp block, in quick runs too (run 20 of 2026-11-30 chose between them); and the
    // 12-warp block with the fused step's target read from global memory one chunk ahead instead of
    // through the raw input rows (KernelArgs::target_in_raw, run 27); and the 12-warp block on the
    // mma.sync backward kernel instead of the wgmma one (BackwardPlan::wgmma, where the device has it).
    {
        ffm::PlanOverride eight, target_global, mma_sync;
        eight.backward_warps = 8, eight.backward_m_tiles = 1;
        target_global.fused_target_global = true;
        mma_sync.no_wgmma = true;
        bench_shape({64, 64, 64, 2}, big, "variant 64->64->64", o, s, results, {eight, target_global, mma_sync});
    }
    // 32->64->16 (the grid + MLP model's network): the planner's wgmma block (12 warps, one tile, dW in
    // the block's global slot; its default since the eighteenth session) next to the plan before it
    // (8 warps of two m16 tiles on the mma.sync kernel) and the 12-warp mma.sync block with dW on chip.
    {
        ffm::PlanOverride two_tiles, twelve_mma_sync;
        two_tiles.backward_m_tiles = 2;
        twelve_mma_sync.backward_m_tiles = 1, twelve_mma_sync.no_wgmma = true;
        // And dL/dinput (fused_loss_bwd_dx: 16-bit, 4 values per store by default since the nineteenth
        // session) stored one value per store, as before, or two: the only pass they change.
        ffm::PlanOverride dx_one, dx_pairs;
        dx_one.dx_values = 1, dx_pairs.dx_values = 2;
        bench_shape({32, 64, 16, 2}, big, "plans 32->64->16", o, s, results,
                    {two_tiles, twelve_mma_sync, dx_one, dx_pairs});
        // One hidden layer (e.g. a NeRF density network after a grid): the planner's choice is the
        // same wgmma block, measured above with two hidden layers only (not yet at one).
        bench_shape({32, 64, 16, 1}, big, "plans 32->64->16 h1", o, s, results,
                    {ffm::PlanOverride{}, two_tiles, twelve_mma_sync});
    }
    // Variants (the planner's choice is the "auto" row above): warps per block, and the kernels that
    // switch the activation at run time instead of the ones compiled for ReLU / None.
    if (!o.quick) {
        std::vector<ffm::PlanOverride> warps;
        for (int fw : {4, 8}) {
            ffm::PlanOverride v;
            v.forward_warps = fw;
            v.backward_warps = fw;
            warps.push_back(v);
        }
        ffm::PlanOverride generic;
        generic.generic_kernels = true;
        // One and two m16 tiles per warp in the backward (the planner picks the warps; by default it
        // picks the tiles too).
        ffm::PlanOverride mt1, mt2;
        mt1.backward_m_tiles = 1;
        mt2.backward_m_tiles = 2;
        for (const Shape& sh : {Shape{32, 64, 16, 2}, Shape{64, 64, 64, 2}, Shape{32, 128, 16, 2}, Shape{32, 16, 16, 2}}) {
            std::vector<ffm::PlanOverride> variants = sh.width == 16 ? std::vector<ffm::PlanOverride>{} : warps;
            if (sh.width == 64) variants.push_back(generic);
            if (ffm::has_backward_m_tiles(sh.width, 2)) variants.insert(variants.end(), {mt1, mt2});
            bench_shape(sh, big, msg("variant ", sh.n_in, "->", sh.width, "->", sh.n_out), o, s, results, variants);
        }
    }

    json doc = {{"device", gpu_device_description(0)}, {"version", version()}, {"batch_log2", o.batch_log2},
                {"results", results}};
    std::ofstream(o.out) << doc.dump(1) << "\n";
    (void)gpu_stream_destroy(native);
    std::printf("bench_mlp: wrote %s\n", o.out.c_str());
    return 0;
}
