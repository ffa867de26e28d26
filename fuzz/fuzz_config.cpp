// Fuzz target: the JSON config path. The input is parsed by the bounded parser (as `tnn` reads a
// config file); every module family it names is built from it: "encoding", "network", "loss",
// "optimizer", and the model and Trainer from the whole object. Each module must build again from
// its own hyperparams() with the same shape; a small model runs a training step and inference on
// the CPU. Optional integer keys "n_input_dims" (1-16) and "n_output_dims" (1-64) set the shapes.
// A tnn::Error is a correct refusal; any other exception, a crash, a leak or a hang is a finding.
#include <tnn/tnn.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

namespace {

using tnn::json;

// Models up to this many parameters also train one step: enough for small grids and MLPs, small
// enough to keep an execution in the millisecond range.
constexpr size_t kMaxTrainedParams = size_t{1} << 16;

uint32_t small_uint(const json& cfg, const char* key, uint32_t def, uint32_t max) {
    const auto it = cfg.find(key);
    if (it == cfg.end() || !it->is_number_unsigned()) return def;
    return static_cast<uint32_t>(std::clamp<uint64_t>(it->get<uint64_t>(), 1, max));
}

template <typename F> void refused_or_done(F&& f) {
    try {
        f();
    } catch (const tnn::Error&) {
    }
}

[[noreturn]] void finding(const char* what, const std::string& detail) {
    std::fprintf(stderr, "fuzz_config: %s: %s\n", what, detail.c_str());
    std::abort();
}

// Rebuilding from hyperparams() is how a checkpoint's config comes back: it must not be refused.
template <typename Build> void check_round_trip(const char* family, const json& hyperparams, Build&& build) {
    try {
        build(hyperparams);
    } catch (const tnn::Error& e) {
        finding(family, std::string("its own hyperparams() are refused: ") + e.what() + "; " + hyperparams.dump());
    }
}

void train_small(uint32_t n_in, uint32_t n_out, const json& cfg) {
    std::shared_ptr<tnn::Module> model = tnn::create_model(n_in, n_out, cfg);
    if (model->n_params() > kMaxTrainedParams) return;
    std::shared_ptr<tnn::Loss> loss = tnn::create_loss(cfg.contains("loss") ? cfg["loss"] : json{{"otype", "L2"}});
    std::shared_ptr<tnn::Optimizer> opt =
        tnn::create_optimizer(cfg.contains("optimizer") ? cfg["optimizer"] : json{{"otype", "Adam"}});
    tnn::Trainer trainer(model, loss, opt, tnn::Device::cpu(), 7);
    const tnn::DType t = model->input_dtype();
    constexpr int64_t rows = 5;
    tnn::Tensor x(rows, n_in, t), y(rows, n_out, t), out(rows, n_out, model->output_dtype());
    tnn::fill(tnn::Stream::cpu(), x.view(), 0.375);
    tnn::fill(tnn::Stream::cpu(), y.view(), 0.5);
    trainer.step(tnn::Stream::cpu(), x.view(), y.view());
    trainer.loss(tnn::Stream::cpu());
    trainer.inference(tnn::Stream::cpu(), x.view(), out.view());
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
    tnn::set_log_callback([](tnn::LogLevel, const std::string&) {});  // unknown-key warnings: expected here
    tnn::set_num_threads(1);
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    json cfg;
    try {
        cfg = tnn::parse_json(reinterpret_cast<const char*>(data), size, "input");
    } catch (const tnn::ConfigError&) {
        return 0;
    }
    if (!cfg.is_object()) return 0;
    const uint32_t n_in = small_uint(cfg, "n_input_dims", 3, 16), n_out = small_uint(cfg, "n_output_dims", 4, 64);

    if (const auto it = cfg.find("encoding"); it != cfg.end())
        refused_or_done([&] {
            const auto enc = tnn::create_encoding(n_in, *it);
            check_round_trip("encoding", enc->hyperparams(), [&](const json& h) { tnn::create_encoding(n_in, h); });
        });
    if (const auto it = cfg.find("network"); it != cfg.end())
        refused_or_done([&] {
            const auto net = tnn::create_network(n_in, n_out, *it);
            check_round_trip("network", net->hyperparams(), [&](const json& h) { tnn::create_network(n_in, n_out, h); });
        });
    if (const auto it = cfg.find("loss"); it != cfg.end())
        refused_or_done([&] {
            const auto loss = tnn::create_loss(*it);
            check_round_trip("loss", loss->hyperparams(), [&](const json& h) { tnn::create_loss(h); });
        });
    if (const auto it = cfg.find("optimizer"); it != cfg.end())
        refused_or_done([&] {
            const auto opt = tnn::create_optimizer(*it);
            check_round_trip("optimizer", opt->hyperparams(), [&](const json& h) { tnn::create_optimizer(h); });
            // The state round trip on a small array: what state() writes, load_state() accepts.
            opt->allocate(tnn::Device::cpu(), 96, 64);
            const auto state = opt->state(tnn::Stream::cpu());
            try {
                opt->load_state(tnn::Stream::cpu(), state);
            } catch (const tnn::Error& e) {
                finding("optimizer", std::string("its own state is refused: ") + e.what());
            }
        });
    if (cfg.contains("network")) refused_or_done([&] { train_small(n_in, n_out, cfg); });
    return 0;
}
