// The Trainer on the GPU: full training steps against the CPU trainer (fp64 reference, fp32 CPU as the
// naive result), graph-replayed steps against eager ones bit for bit for every network backend and
// optimizer wrapper, graphs rebuilt when the views change, the opt-out, checkpoint resume, and bad
// input. Models whose modules have no GPU kernels in this build are skipped with the reason.
#include "gpu_test_util.h"

#include <cstdio>
#include <cstring>
#include <map>
#include <tuple>

using namespace tnn;
using namespace tnn::test;

namespace {

constexpr uint32_t kInputDims = 3, kOutputDims = 2;

// A model config as the cases name it: a bare network, or an encoding followed by a network.
struct ModelCase {
    std::string name;
    json network;
    json encoding;  // null: the bare network
};

std::ostream& operator<<(std::ostream& os, const ModelCase& m) { return os << m.name; }

json mlp(const std::string& otype, const std::string& dtype, uint32_t width = 32) {
    return {{"otype", otype}, {"n_neurons", width}, {"n_hidden_layers", 2}, {"activation", "Tanh"},
            {"dtype", dtype}};
}

std::shared_ptr<Module> build_model(const ModelCase& m, const std::string& dtype_override = "") {
    json net = m.network;
    if (!dtype_override.empty()) {
        net["dtype"] = dtype_override;
        net["otype"] = "PortableMLP";  // the CPU reference of every MLP backend (same parameter layout)
    }
    if (m.encoding.is_null()) return std::shared_ptr<Module>(create_network(kInputDims, kOutputDims, net));
    return std::shared_ptr<Module>(create_network_with_input_encoding(kInputDims, kOutputDims, m.encoding, net));
}

// The model on the GPU, or a skip reason (not registered, or no GPU kernels in this build).
std::string gpu_unsupported(const ModelCase& m) {
    try {
        if (!build_model(m)->supports_device(Device::gpu(0)))
            return m.name + ": not supported on the GPU in this build";
    } catch (const Error& e) {
        return m.name + ": not supported: " + e.what();
    }
    return "";
}

#define SKIP_UNLESS_GPU_MODEL(m)                                  \
    do {                                                          \
        TNN_SKIP_WITHOUT_GPU();                                   \
        const std::string tnn_reason_ = gpu_unsupported(m);       \
        if (!tnn_reason_.empty()) GTEST_SKIP() << tnn_reason_;    \
    } while (0)

// Batch k: inputs in [0, 1)^3, targets a smooth function of them (host, fp32).
void make_batch(int k, int64_t rows, std::vector<float>& x, std::vector<float>& y) {
    const auto u = random_vector(static_cast<size_t>(rows) * kInputDims, 0.0, 1.0, 500 + k);
    x.assign(u.begin(), u.end());
    y.resize(static_cast<size_t>(rows) * kOutputDims);
    for (int64_t r = 0; r < rows; ++r) {
        const float* p = &x[r * kInputDims];
        y[r * kOutputDims] = std::sin(3 * p[0]) * p[1];
        y[r * kOutputDims + 1] = p[2] - p[0] * p[0];
    }
}

std::unique_ptr<Trainer> make_trainer(std::shared_ptr<Module> model, const json& optimizer, Device device,
                                      const json& loss = {{"otype", "L2"}}) {
    return std::make_unique<Trainer>(std::move(model), std::shared_ptr<Loss>(create_loss(loss)),
                                     std::shared_ptr<Optimizer>(create_optimizer(optimizer)), device, 42);
}

// Input and target buffers at fixed addresses on a device; each step copies new data into them (what a
// training loop over a dataset does, and what lets a graph replay).
struct Batch {
    Tensor x, y;
    Batch(int64_t rows, DType dtype, Device device)
        : x(rows, kInputDims, dtype, device), y(rows, kOutputDims, dtype, device) {}
    void load(const Stream& stream, int k) {
        std::vector<float> hx, hy;
        make_batch(k, x.rows(), hx, hy);
        if (x.dtype() == DType::f32) {
            copy_bytes(stream, x.data(), x.device(), hx.data(), Device::cpu(), hx.size() * sizeof(float));
            copy_bytes(stream, y.data(), y.device(), hy.data(), Device::cpu(), hy.size() * sizeof(float));
            stream.synchronize();  // the host vectors die here
            return;
        }
        Tensor wx(x.rows(), kInputDims, x.dtype()), wy(y.rows(), kOutputDims, y.dtype());
        convert(Stream::cpu(), ConstView(hx.data(), DType::f32, Device::cpu(), x.rows(), kInputDims), wx.view());
        convert(Stream::cpu(), ConstView(hy.data(), DType::f32, Device::cpu(), y.rows(), kOutputDims), wy.view());
        copy_bytes(stream, x.data(), x.device(), wx.data(), Device::cpu(), wx.bytes());
        copy_bytes(stream, y.data(), y.device(), wy.data(), Device::cpu(), wy.bytes());
        stream.synchronize();
    }
};

bool loss_bits_equal(double a, double b) { return std::memcmp(&a, &b, sizeof(double)) == 0; }

// ---- GPU training matches the CPU trainer.

const std::vector<ModelCase>& reference_models() {
    static const std::vector<ModelCase> models = {
        {"PortableMLP", mlp("PortableMLP", "float32"), nullptr},
        {"Identity+PortableMLP", mlp("PortableMLP", "float32"), {{"otype", "Identity"}, {"scale", 0.5}}},
        {"Frequency+PortableMLP", mlp("PortableMLP", "float32"), {{"otype", "Frequency"}, {"n_frequencies", 3}}},
    };
    return models;
}

class GpuTrainerVsCpu : public ::testing::TestWithParam<ModelCase> {};

TEST_P(GpuTrainerVsCpu, StepsMatchTheCpuTrainer) {
    const ModelCase& m = GetParam();
    SKIP_UNLESS_GPU_MODEL(m);
    // SGD keeps the comparison linear in the gradients: after k steps the weights moved by -lr times
    // the sum of k gradients (plus the L2 term), so their error is the gradients' accumulation error.
    // The reference runs the model in fp64 (the master weights stay fp32 on every trainer, so all three
    // round the weights alike after each step).
    const json sgd = {{"otype", "SGD"}, {"learning_rate", 0.05}, {"l2_reg", 1e-4}};
    constexpr int kStepsToCompare = 4;
    constexpr int64_t kRows = 1000;
    auto gpu = make_trainer(build_model(m), sgd, Device::gpu(0));
    auto cpu = make_trainer(build_model(m), sgd, Device::cpu());
    auto ref = make_trainer(build_model(m, "float64"), sgd, Device::cpu());
    TestStream stream(Device::gpu(0));
    ASSERT_EQ(gpu->params_host(stream), cpu->params_host(Stream::cpu())) << "same seed, same initial weights";
    const std::vector<float> start = cpu->params_host(Stream::cpu());

    Batch gpu_batch(kRows, DType::f32, Device::gpu(0)), cpu_batch(kRows, DType::f32, Device::cpu()),
        ref_batch(kRows, DType::f64, Device::cpu());
    std::vector<double> gpu_losses, cpu_losses, ref_losses;
    for (int k = 0; k < kStepsToCompare; ++k) {
        gpu_batch.load(stream, k);
        cpu_batch.load(Stream::cpu(), k);
        ref_batch.load(Stream::cpu(), k);
        gpu->step(stream, gpu_batch.x.view(), gpu_batch.y.view());
        cpu->step(Stream::cpu(), cpu_batch.x.view(), cpu_batch.y.view());
        ref->step(Stream::cpu(), ref_batch.x.view(), ref_batch.y.view());
        gpu_losses.push_back(gpu->loss(stream));
        cpu_losses.push_back(cpu->loss(Stream::cpu()));
        ref_losses.push_back(ref->loss(Stream::cpu()));
    }
    // The chain behind one weight's update: the forward fan-ins (padded input <= 32, two hidden layers
    // of 32), the backward fan-outs (32, 32, 2 outputs) and the batch (the weight gradient's reduction),
    // once per step. expect_matches_reference derives its bounds from that length (elementwise n*eps of
    // the magnitude, and no worse than 4x the CPU fp32 trainer in whole-tensor L2).
    const Module& model = gpu->model();
    const double fan_ins = (32 + 32 + 32) + (32 + 32 + 2);
    const double n_terms = kStepsToCompare * (fan_ins + kRows);
    auto updates = [&](const std::vector<float>& w) {
        std::vector<double> u(w.size());
        for (size_t i = 0; i < w.size(); ++i) u[i] = static_cast<double>(w[i]) - static_cast<double>(start[i]);
        return u;
    };
    const std::vector<float> got = gpu->params_host(stream), naive = cpu->params_host(Stream::cpu());
    const std::vector<float> ref_w = ref->params_host(Stream::cpu());
    std::vector<float> got_u(got.size()), naive_u(got.size());
    const std::vector<double> gu = updates(got), nu = updates(naive), ru = updates(ref_w);
    for (size_t i = 0; i < got.size(); ++i) {
        got_u[i] = static_cast<float>(gu[i]);
        naive_u[i] = static_cast<float>(nu[i]);
    }
    ASSERT_EQ(got.size(), model.n_params());
    expect_matches_reference(got_u, ru, naive_u, {dtype_epsilon(DType::f32), n_terms}, m.name + " weight updates");
    // The loss is a mean over the batch of per-element terms: its relative error is the network chain's
    // (fan-ins) plus the sum over rows*cols terms.
    const double loss_terms = fan_ins + kRows * kOutputDims;
    for (int k = 0; k < kStepsToCompare; ++k)
        EXPECT_NEAR(gpu_losses[k], ref_losses[k], loss_terms * dtype_epsilon(DType::f32) * ref_losses[k])
            << m.name << " loss of step " << k + 1 << " (CPU fp32: " << cpu_losses[k] << ")";
}

INSTANTIATE_TEST_SUITE_P(Models, GpuTrainerVsCpu, ::testing::ValuesIn(reference_models()),
                         [](const auto& info) {
                             std::string n = info.param.name;
                             for (char& c : n)
                                 if (c == '+') c = '_';
                             return n;
                         });

// ---- Graph-replayed steps equal eager steps, bit for bit.

const std::vector<ModelCase>& graph_models() {
    static const std::vector<ModelCase> models = {
        {"PortableMLP_f32", mlp("PortableMLP", "float32"), nullptr},
        {"BlasLtMLP_f32", mlp("BlasLtMLP", "float32"), nullptr},
        {"BlasLtMLP_f16", mlp("BlasLtMLP", "float16"), nullptr},
        {"FullyFusedMLP_f16", mlp("FullyFusedMLP", "float16", 64), nullptr},
        {"Frequency_PortableMLP_f32", mlp("PortableMLP", "float32"), {{"otype", "Frequency"}, {"n_frequencies", 2}}},
        {"HashGrid_FullyFusedMLP_f16", mlp("FullyFusedMLP", "float16", 64),
         // Two trainers agree bitwise only with the grid's ordered gradient reduction: the fast path's
         // float atomics add in a different order on every run.
         {{"otype", "HashGrid"}, {"n_levels", 4}, {"log2_hashmap_size", 12}, {"base_resolution", 4}, {"deterministic", true}}},
    };
    return models;
}

struct OptimizerConfig {
    std::string name;
    json config;  // "@half" in n_params_to_optimize: half of the model's parameters
};

const std::vector<OptimizerConfig>& graph_optimizers() {
    const json adam = {{"otype", "Adam"}, {"learning_rate", 1e-2}};
    static const std::vector<OptimizerConfig> opts = {
        {"Adam", adam},
        {"EMA", {{"otype", "EMA"}, {"decay", 0.9}, {"nested", adam}}},
        {"Batched", {{"otype", "Batched"}, {"batch_size_multiplier", 3}, {"nested", adam}}},
        {"Lookahead", {{"otype", "Lookahead"}, {"n_steps", 2}, {"nested", adam}}},
        {"ExponentialDecay",
         {{"otype", "ExponentialDecay"},
          {"decay_start", 1},
          {"decay_interval", 2},
          {"decay_base", 0.5},
          {"nested", adam}}},
        {"Average", {{"otype", "Average"}, {"n_samples", 3}, {"nested", {{"otype", "SGD"}, {"learning_rate", 0.05}}}}},
        {"Novograd", {{"otype", "Novograd"}, {"learning_rate", 1e-2}}},
        {"Composite",
         {{"otype", "Composite"},
          {"nested", json::array({json{{"otype", "EMA"}, {"nested", adam}, {"n_params_to_optimize", "@half"}},
                                  json{{"otype", "Novograd"}, {"learning_rate", 1e-2}}})}}},
    };
    return opts;
}

json resolve(json config, size_t n_params) {
    if (config.is_object()) {
        for (auto& [key, value] : config.items()) {
            if (value == "@half") value = n_params / 2;
            else value = resolve(value, n_params);
        }
    } else if (config.is_array()) {
        for (auto& v : config) v = resolve(v, n_params);
    }
    return config;
}

// Runs `steps` training steps of two trainers with the same seed, one replaying graphs and one not,
// each with its own stream and batch buffers, comparing the loss after every step and the weights and
// inference at the end.
void expect_graphs_change_nothing(const ModelCase& m, const json& optimizer, int steps, int64_t rows) {
    const size_t n_params = build_model(m)->n_params();
    const json opt = resolve(optimizer, n_params);
    auto graphed = make_trainer(build_model(m), opt, Device::gpu(0));
    auto eager = make_trainer(build_model(m), opt, Device::gpu(0));
    eager->set_use_graphs(false);
    ASSERT_TRUE(graphed->use_graphs()) << "graphs are on by default";
    TestStream s1(Device::gpu(0)), s2(Device::gpu(0));
    Batch b1(rows, DType::f32, Device::gpu(0)), b2(rows, DType::f32, Device::gpu(0));
    for (int k = 0; k < steps; ++k) {
        b1.load(s1, k);
        b2.load(s2, k);
        graphed->step(s1, b1.x.view(), b1.y.view());
        eager->step(s2, b2.x.view(), b2.y.view());
        const double a = graphed->loss(s1), b = eager->loss(s2);
        EXPECT_TRUE(loss_bits_equal(a, b)) << m.name << ": loss of step " << k + 1 << ": " << a << " vs " << b;
    }
    expect_same_bits(graphed->params_host(s1), eager->params_host(s2), m.name + " weights");
    EXPECT_EQ(graphed->step_count(), eager->step_count());
    EXPECT_EQ(graphed->graph_captures(), 1u) << m.name << ": the step is captured once, at the third step";
    EXPECT_EQ(graphed->graph_steps(), static_cast<uint64_t>(steps - 2));
    EXPECT_EQ(eager->graph_captures(), 0u);
    // Inference (through the optimizer's inference weights where it has them).
    Tensor y1(rows, kOutputDims, graphed->model().output_dtype(), Device::gpu(0));
    Tensor y2(rows, kOutputDims, eager->model().output_dtype(), Device::gpu(0));
    graphed->inference(s1, b1.x.view(), y1.view());
    eager->inference(s2, b1.x.view(), y2.view());
    s1.stream().synchronize();
    s2.stream().synchronize();
    expect_same_bits(to_floats(y1), to_floats(y2), m.name + " inference");
    const auto state_a = graphed->optimizer().state(s1), state_b = eager->optimizer().state(s2);
    ASSERT_EQ(state_a.size(), state_b.size());
    for (size_t i = 0; i < state_a.size(); ++i)
        EXPECT_TRUE(state_a[i].bytes == state_b[i].bytes) << m.name << ": optimizer state '" << state_a[i].name << "'";
}

using GraphCase = std::tuple<ModelCase, OptimizerConfig>;
class GpuTrainerGraphs : public ::testing::TestWithParam<GraphCase> {};

TEST_P(GpuTrainerGraphs, ReplaysEqualEagerSteps) {
    const auto& [m, opt] = GetParam();
    SKIP_UNLESS_GPU_MODEL(m);
    expect_graphs_change_nothing(m, opt.config, 9, 777);
}

INSTANTIATE_TEST_SUITE_P(Cases, GpuTrainerGraphs,
                         ::testing::Combine(::testing::ValuesIn(graph_models()),
                                            ::testing::ValuesIn(graph_optimizers())),
                         [](const auto& info) {
                             return std::get<0>(info.param).name + "_" + std::get<1>(info.param).name;
                         });

const ModelCase& portable() { return graph_models()[0]; }

TEST(GpuTrainerGraphRules, RebuiltWhenViewsChange) {
    SKIP_UNLESS_GPU_MODEL(portable());
    const json adam = {{"otype", "Adam"}, {"learning_rate", 1e-2}};
    auto graphed = make_trainer(build_model(portable()), adam, Device::gpu(0));
    auto eager = make_trainer(build_model(portable()), adam, Device::gpu(0));
    eager->set_use_graphs(false);
    TestStream s1(Device::gpu(0)), s2(Device::gpu(0));
    const Device gpu = Device::gpu(0);
    Batch x1(512, DType::f32, gpu), y1(512, DType::f32, gpu), small1(300, DType::f32, gpu);
    Batch x2(512, DType::f32, gpu), y2(512, DType::f32, gpu), small2(300, DType::f32, gpu);
    Tensor pdf1(512, 1, DType::f32, Device::gpu(0)), pdf2(512, 1, DType::f32, Device::gpu(0));
    fill(s1, pdf1.view(), 0.75);
    fill(s2, pdf2.view(), 0.75);
    const ConstView pdf_view1 = pdf1.view(), pdf_view2 = pdf2.view();
    int k = 0;
    auto run = [&](Batch& a, Batch& b, int n, bool with_pdf) {
        for (int i = 0; i < n; ++i, ++k) {
            a.load(s1, k);
            b.load(s2, k);
            graphed->step(s1, a.x.view(), a.y.view(), with_pdf ? &pdf_view1 : nullptr);
            eager->step(s2, b.x.view(), b.y.view(), with_pdf ? &pdf_view2 : nullptr);
            const double la = graphed->loss(s1), lb = eager->loss(s2);
            EXPECT_TRUE(loss_bits_equal(la, lb)) << "step " << k + 1 << ": " << la << " vs " << lb;
        }
    };
    run(x1, x2, 4, false);  // captured at the 3rd step, replayed at the 4th
    EXPECT_EQ(graphed->graph_captures(), 1u);
    run(y1, y2, 4, false);  // other pointers: eager twice, captured again
    EXPECT_EQ(graphed->graph_captures(), 2u);
    run(y1, y2, 3, true);  // a pdf is another view
    EXPECT_EQ(graphed->graph_captures(), 3u);
    run(small1, small2, 3, false);  // another batch size (new per-step buffers too)
    EXPECT_EQ(graphed->graph_captures(), 4u);
    run(x1, x2, 2, false);  // back to the first views: the old graph was dropped, two eager steps
    EXPECT_EQ(graphed->graph_captures(), 4u);
    EXPECT_EQ(graphed->graph_steps(), 2u + 2u + 1u + 1u);
    // A reset optimizer (new state arrays) is noticed: the next steps run eagerly, then capture anew.
    graphed->optimizer().allocate(Device::gpu(0), graphed->model().n_params(), graphed->model().n_matrix_params());
    eager->optimizer().allocate(Device::gpu(0), eager->model().n_params(), eager->model().n_matrix_params());
    run(x1, x2, 3, false);
    EXPECT_EQ(graphed->graph_captures(), 5u);
    expect_same_bits(graphed->params_host(s1), eager->params_host(s2), "weights");
}

TEST(GpuTrainerGraphRules, OptOutAndTheLegacyDefaultStream) {
    SKIP_UNLESS_GPU_MODEL(portable());
    const json adam = {{"otype", "Adam"}, {"learning_rate", 1e-2}};
    auto off = make_trainer(build_model(portable()), adam, Device::gpu(0));
    off->set_use_graphs(false);
    auto legacy = make_trainer(build_model(portable()), adam, Device::gpu(0));
    TestStream stream(Device::gpu(0));
    const Stream default_stream = Stream::gpu(nullptr, 0);
    Batch b1(256, DType::f32, Device::gpu(0)), b2(256, DType::f32, Device::gpu(0));
    for (int k = 0; k < 5; ++k) {
        b1.load(stream, k);
        b2.load(default_stream, k);
        off->step(stream, b1.x.view(), b1.y.view());
        // The legacy stream cannot capture: its graph runs on the trainer's own stream, between the
        // batch written on the legacy stream before and the weights read on it after.
        legacy->step(default_stream, b2.x.view(), b2.y.view());
    }
    EXPECT_EQ(off->graph_captures(), 0u);
    EXPECT_EQ(legacy->graph_captures(), 1u);
    EXPECT_EQ(legacy->graph_steps(), 3u);
    expect_same_bits(off->params_host(stream), legacy->params_host(default_stream), "weights");
    // Turning graphs on again: captured at the third step with the same views.
    off->set_use_graphs(true);
    for (int k = 5; k < 8; ++k) {
        b1.load(stream, k);
        off->step(stream, b1.x.view(), b1.y.view());
    }
    EXPECT_EQ(off->graph_captures(), 1u);
}

// Trainer::bind_params: master weights in caller memory give the same steps as the trainer's own, bit
// for bit (eager and graph-replayed, fp16 model: the model-dtype copy rounded from them every step),
// and values the caller writes between steps are what the next step reads.
TEST(GpuTrainerBindParams, ExternalMasterWeightsEqualOwnedOnes) {
    const ModelCase& m = graph_models()[5];  // HashGrid_FullyFusedMLP_f16, deterministic grid
    SKIP_UNLESS_GPU_MODEL(m);
    const Device gpu = Device::gpu(0);
    const json adam = {{"otype", "Adam"}, {"learning_rate", 1e-2}};
    auto own = make_trainer(build_model(m), adam, gpu);
    auto ext = make_trainer(build_model(m), adam, gpu);
    TestStream s1(gpu), s2(gpu);
    const size_t n = own->model().n_params();
    std::vector<float> init = own->params_host(s1);
    for (float& v : init) v *= 1.5f;  // other values than the trainer's initialisation
    Buffer external(gpu, n * sizeof(float));
    copy_bytes(s2, external.data(), gpu, init.data(), Device::cpu(), n * sizeof(float));
    own->set_params(s1, init.data());
    ext->bind_params(s2, external.ptr<float>());
    EXPECT_EQ(ext->params_fp32(), external.ptr<float>());
    Batch b1(777, DType::f32, gpu), b2(777, DType::f32, gpu);
    for (int k = 0; k < 6; ++k) {
        b1.load(s1, k);
        b2.load(s2, k);
        own->step(s1, b1.x.view(), b1.y.view());
        ext->step(s2, b2.x.view(), b2.y.view());
        const double a = own->loss(s1), b = ext->loss(s2);
        EXPECT_TRUE(loss_bits_equal(a, b)) << "step " << k + 1 << ": " << a << " vs " << b;
    }
    EXPECT_EQ(ext->graph_steps(), 4u);
    std::vector<float> host(n);
    copy_bytes(s2, host.data(), Device::cpu(), external.data(), gpu, n * sizeof(float));
    s2.stream().synchronize();
    expect_same_bits(own->params_host(s1), host, "weights");
    // Values written into the caller's memory between (graph-replayed) steps: the next step's loss is
    // that of those weights, as a trainer set to them computes it.
    copy_bytes(s2, external.data(), gpu, init.data(), Device::cpu(), n * sizeof(float));
    auto fresh = make_trainer(build_model(m), adam, gpu);
    fresh->set_params(s1, init.data());
    b1.load(s1, 100);
    b2.load(s2, 100);
    ext->step(s2, b2.x.view(), b2.y.view());
    fresh->step(s1, b1.x.view(), b1.y.view());
    EXPECT_TRUE(loss_bits_equal(ext->loss(s2), fresh->loss(s1)));
    EXPECT_THROW(ext->bind_params(s2, nullptr), ConfigError);
}

TEST(GpuTrainerCheckpoint, ResumeIsBitExactOnTheGpu) {
    SKIP_UNLESS_GPU_MODEL(portable());
    const json opt = {{"otype", "EMA"}, {"nested", {{"otype", "Adam"}, {"learning_rate", 1e-2}}}};
    TestStream stream(Device::gpu(0));
    Batch b(400, DType::f32, Device::gpu(0));
    auto straight = make_trainer(build_model(portable()), opt, Device::gpu(0));
    for (int k = 0; k < 10; ++k) {
        b.load(stream, k);
        straight->step(stream, b.x.view(), b.y.view());
    }
    auto first = make_trainer(build_model(portable()), opt, Device::gpu(0));
    for (int k = 0; k < 5; ++k) {
        b.load(stream, k);
        first->step(stream, b.x.view(), b.y.view());
    }
    const std::string path = ::testing::TempDir() + "tnn_gpu_trainer_resume.tnn";
    first->save(stream, path);
    auto resumed = make_trainer(build_model(portable()), opt, Device::gpu(0));
    resumed->load(stream, path);
    EXPECT_EQ(resumed->step_count(), 5u);
    for (int k = 5; k < 10; ++k) {
        b.load(stream, k);
        resumed->step(stream, b.x.view(), b.y.view());
    }
    expect_same_bits(resumed->params_host(stream), straight->params_host(stream), "resumed weights");
    EXPECT_TRUE(loss_bits_equal(resumed->loss(stream), straight->loss(stream)));
    std::remove(path.c_str());
}

// ---- The fused step (forward, loss and backward of a FullyFusedMLP in one kernel) equals the unfused one.

json relu_fused_mlp() {
    json j = mlp("FullyFusedMLP", "float16", 64);
    j["activation"] = "ReLU";
    return j;
}

// Two GPU trainers of model m with the same seed, Adam and loss: the first takes the fused step where
// it can (the default), the second never does.
std::pair<std::unique_ptr<Trainer>, std::unique_ptr<Trainer>> fused_and_plain(const ModelCase& m, const json& loss) {
    const json adam = {{"otype", "Adam"}, {"learning_rate", 1e-2}};
    auto fused = make_trainer(build_model(m), adam, Device::gpu(0), loss);
    auto plain = make_trainer(build_model(m), adam, Device::gpu(0), loss);
    plain->set_fused_loss(false);
    return {std::move(fused), std::move(plain)};
}

TEST(GpuTrainerFusedLoss, EqualsTheUnfusedStepBitForBit) {
    // Two trainers with the same seed, one fused (the default) and one not, graphs on in both (the
    // step is captured at the third step): the same loss after every step, the same weights.
    json bf16 = relu_fused_mlp(), f32_out = relu_fused_mlp();
    bf16["dtype"] = "bfloat16";
    f32_out["output_dtype"] = "float32";
    struct Case {
        ModelCase model;
        std::vector<const char*> losses;
    };
    const std::vector<Case> cases = {
        {{"FullyFusedMLP", relu_fused_mlp(), nullptr}, {"L2", "RelativeL2", "L1", "MAPE"}},
        {{"Identity_FullyFusedMLP", relu_fused_mlp(), {{"otype", "Identity"}, {"scale", 0.5}}}, {"L2", "RelativeL2"}},
        {{"HashGrid_FullyFusedMLP", relu_fused_mlp(),
          {{"otype", "HashGrid"}, {"n_levels", 4}, {"log2_hashmap_size", 12}, {"base_resolution", 4}, {"deterministic", true}}},
         {"L2", "RelativeL2"}},
        {{"FullyFusedMLP_bf16", bf16, nullptr}, {"L2", "SMAPE"}},
        {{"FullyFusedMLP_f32out", f32_out, nullptr}, {"RelativeL1", "L2"}},
    };
    for (const Case& c : cases) {
        const ModelCase& m = c.model;
        SKIP_UNLESS_GPU_MODEL(m);
        for (const char* loss : c.losses) {
            const std::string what = m.name + " " + loss;
            auto [fused, plain] = fused_and_plain(m, {{"otype", loss}});
#if defined(TNN_WITH_CUDA)
            EXPECT_TRUE(fused->fused_loss()) << what;
#endif  // TNN_WITH_CUDA
            EXPECT_FALSE(plain->fused_loss()) << what;
            TestStream s1(Device::gpu(0)), s2(Device::gpu(0));
            Batch b1(777, DType::f32, Device::gpu(0)), b2(777, DType::f32, Device::gpu(0));
            for (int k = 0; k < 6; ++k) {
                b1.load(s1, k);
                b2.load(s2, k);
                fused->step(s1, b1.x.view(), b1.y.view());
                plain->step(s2, b2.x.view(), b2.y.view());
                const double a = fused->loss(s1), b = plain->loss(s2);
                EXPECT_TRUE(loss_bits_equal(a, b)) << what << ": loss of step " << k + 1 << ": " << a << " vs " << b;
            }
            expect_same_bits(fused->params_host(s1), plain->params_host(s2), what + " weights");
            EXPECT_EQ(fused->graph_captures(), 1u) << what;
        }
    }
}

TEST(GpuTrainerFusedLoss, BatchSizeChangesGiveTheSameBits) {
    // Batch sizes that change from step to step (per-step buffers reallocated, graphs dropped and
    // recaptured; the fused trainer never allocates the unfused step's output and gradient buffers),
    // and a step with a pdf in between (the unfused step on the fused trainer): still the bits of a
    // trainer that never fuses.
    const ModelCase m{"HashGrid_FullyFusedMLP", relu_fused_mlp(),
                      {{"otype", "HashGrid"}, {"n_levels", 4}, {"log2_hashmap_size", 12}, {"base_resolution", 4},
                       {"deterministic", true}}};
    SKIP_UNLESS_GPU_MODEL(m);
    auto [fused, plain] = fused_and_plain(m, {{"otype", "L2"}});
    TestStream s1(Device::gpu(0)), s2(Device::gpu(0));
    const std::vector<int64_t> sizes = {777, 777, 777, 777, 300, 300, 1024, 777, 777, 777, 777};
    // One batch per size and trainer, reloaded each step: the views repeat, so graphs are captured.
    std::map<int64_t, std::pair<Batch, Batch>> batches;
    for (int64_t n : sizes)
        if (!batches.count(n))
            batches.emplace(n, std::make_pair(Batch(n, DType::f32, Device::gpu(0)), Batch(n, DType::f32, Device::gpu(0))));
    for (size_t k = 0; k < sizes.size(); ++k) {
        Batch& b1 = batches.at(sizes[k]).first;
        Batch& b2 = batches.at(sizes[k]).second;
        b1.load(s1, int(k));
        b2.load(s2, int(k));
        Tensor pdf1(sizes[k], 1, DType::f32, Device::gpu(0)), pdf2(sizes[k], 1, DType::f32, Device::gpu(0));
        if (k == 5) {  // a pdf: both take the unfused step
            fill(s1, pdf1.view(), 0.5);
            fill(s2, pdf2.view(), 0.5);
            const ConstView v1 = pdf1.view(), v2 = pdf2.view();
            fused->step(s1, b1.x.view(), b1.y.view(), &v1);
            plain->step(s2, b2.x.view(), b2.y.view(), &v2);
        } else {
            fused->step(s1, b1.x.view(), b1.y.view());
            plain->step(s2, b2.x.view(), b2.y.view());
        }
        const double a = fused->loss(s1), b = plain->loss(s2);
        EXPECT_TRUE(loss_bits_equal(a, b)) << "step " << k + 1 << " (batch " << sizes[k] << "): " << a << " vs " << b;
        s1.stream().synchronize();  // the pdf tensors die here
        s2.stream().synchronize();
    }
    expect_same_bits(fused->params_host(s1), plain->params_host(s2), "weights");
    // Captured at steps 3 and 10 (three steps with the same views each time), replayed at 4 and 11.
    EXPECT_EQ(fused->graph_captures(), 2u);
    EXPECT_EQ(plain->graph_captures(), 2u);
}

TEST(GpuTrainerFusedLoss, SwitchingMidRunGivesTheSameBits) {
    // set_fused_loss(false) after a fused graph was captured (the unfused buffers are allocated late,
    // the graph is recaptured), then true again: the bits of a trainer that never fuses.
    const ModelCase m{"FullyFusedMLP", relu_fused_mlp(), nullptr};
    SKIP_UNLESS_GPU_MODEL(m);
    auto [switching, plain] = fused_and_plain(m, {{"otype", "RelativeL2"}});
    TestStream s1(Device::gpu(0)), s2(Device::gpu(0));
    Batch b1(777, DType::f32, Device::gpu(0)), b2(777, DType::f32, Device::gpu(0));
    for (int k = 0; k < 15; ++k) {
        if (k == 5) switching->set_fused_loss(false);
        if (k == 10) switching->set_fused_loss(true);
        b1.load(s1, k);
        b2.load(s2, k);
        switching->step(s1, b1.x.view(), b1.y.view());
        plain->step(s2, b2.x.view(), b2.y.view());
        const double a = switching->loss(s1), b = plain->loss(s2);
        EXPECT_TRUE(loss_bits_equal(a, b)) << "step " << k + 1 << ": " << a << " vs " << b;
    }
    expect_same_bits(switching->params_host(s1), plain->params_host(s2), "weights");
    EXPECT_EQ(switching->graph_captures(), 3u);  // one per stretch of five steps
}

TEST(GpuTrainerFusedLoss, OnlyWhereTheKernelsCarryIt) {
    // Other activations, losses with a row term or none of the elementwise ones, other networks and a
    // step with a pdf take the unfused step; the switch turns it off and on.
    TNN_SKIP_WITHOUT_GPU();
    const json adam = {{"otype", "Adam"}};
    const ModelCase relu{"FullyFusedMLP", relu_fused_mlp(), nullptr};
    const ModelCase tanh{"FullyFusedMLP_tanh", mlp("FullyFusedMLP", "float16", 64), nullptr};
    const ModelCase portable{"PortableMLP", mlp("PortableMLP", "float32"), nullptr};
    SKIP_UNLESS_GPU_MODEL(relu);
    EXPECT_FALSE(make_trainer(build_model(tanh), adam, Device::gpu(0))->fused_loss());
    EXPECT_FALSE(make_trainer(build_model(portable), adam, Device::gpu(0))->fused_loss());
    EXPECT_FALSE(make_trainer(build_model(relu), adam, Device::gpu(0), {{"otype", "CrossEntropy"}})->fused_loss());
    auto t = make_trainer(build_model(relu), adam, Device::gpu(0));
#if defined(TNN_WITH_CUDA)
    EXPECT_TRUE(t->fused_loss());
#endif  // TNN_WITH_CUDA
    t->set_fused_loss(false);
    EXPECT_FALSE(t->fused_loss());
    t->set_fused_loss(true);
    // A pdf: the unfused step, which must equal a trainer that never fuses.
    auto plain = make_trainer(build_model(relu), adam, Device::gpu(0));
    plain->set_fused_loss(false);
    TestStream stream(Device::gpu(0));
    Batch b(100, DType::f32, Device::gpu(0));
    b.load(stream, 0);
    Tensor pdf(100, 1, DType::f32, Device::gpu(0));
    fill(stream, pdf.view(), 0.5);
    const ConstView pdf_view = pdf.view();
    t->step(stream, b.x.view(), b.y.view(), &pdf_view);
    plain->step(stream, b.x.view(), b.y.view(), &pdf_view);
    EXPECT_TRUE(loss_bits_equal(t->loss(stream), plain->loss(stream)));
    expect_same_bits(t->params_host(stream), plain->params_host(stream), "a step with a pdf");
}

TEST(GpuTrainerErrors, BadInputIsRefusedBeforeAndAfterCapture) {
    SKIP_UNLESS_GPU_MODEL(portable());
    auto t = make_trainer(build_model(portable()), {{"otype", "Adam"}}, Device::gpu(0));
    TestStream stream(Device::gpu(0));
    Batch b(64, DType::f32, Device::gpu(0));
    Tensor host_x(64, kInputDims, DType::f32), wide_y(64, kOutputDims + 1, DType::f32, Device::gpu(0));
    Tensor y64(64, kOutputDims, DType::f64, Device::gpu(0)), short_y(63, kOutputDims, DType::f32, Device::gpu(0));
    auto expect_refused = [&] {
        EXPECT_THROW(t->step(stream, host_x.view(), b.y.view()), DeviceError);
        EXPECT_THROW(t->step(Stream::cpu(), b.x.view(), b.y.view()), DeviceError);
        EXPECT_THROW(t->step(stream, b.x.view(), wide_y.view()), ShapeError);
        EXPECT_THROW(t->step(stream, b.x.view(), short_y.view()), ShapeError);
        EXPECT_THROW(t->step(stream, b.x.view(), y64.view()), DTypeError);
        View lie = host_x.view();
        lie.device = Device::gpu(0);
        EXPECT_THROW(t->step(stream, lie, b.y.view()), DeviceError);
    };
    EXPECT_THROW(t->loss(stream), Error) << "no step yet";
    expect_refused();
    for (int k = 0; k < 4; ++k) {
        b.load(stream, k);
        t->step(stream, b.x.view(), b.y.view());
    }
    EXPECT_EQ(t->graph_captures(), 1u);
    expect_refused();  // validation runs before any replay
    EXPECT_EQ(t->step_count(), 4u) << "refused steps must not count";
    b.load(stream, 4);
    t->step(stream, b.x.view(), b.y.view());
    EXPECT_EQ(t->graph_steps(), 3u) << "the graph survives refused calls";
    EXPECT_TRUE(std::isfinite(t->loss(stream)));
}

}  // namespace
