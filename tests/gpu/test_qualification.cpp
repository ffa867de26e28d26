// The qualification gates of the RDNA4 port this project succeeds (issue 49), on the GPU for every
// network backend and precision and for grid models: 64 launches of one call give the same bits;
// the first k rows of a batch of n equal a batch of those k rows (prefix invariance); parameters
// swapped A -> B -> A give A's results again, by pointer and in place; two models on two streams
// at once give what they give one after the other. Results are compared bit for bit: each gate is a
// property of one device's kernels, not an accuracy question (those tests compare with the CPU).
#include "gpu_test_util.h"

#include <memory>

using namespace tnn;
using namespace tnn::test;

namespace {

constexpr uint32_t kInputDims = 3, kOutputDims = 4;

struct QualCase {
    std::string name;
    json network;
    json encoding;  // null: the bare network
};

std::ostream& operator<<(std::ostream& os, const QualCase& c) { return os << c.name; }

json mlp(const std::string& otype, const std::string& dtype, uint32_t width, const std::string& act = "ReLU") {
    return {{"otype", otype}, {"n_neurons", width}, {"n_hidden_layers", 2}, {"activation", act}, {"dtype", dtype}};
}

json hash_grid() {
    return {{"otype", "HashGrid"}, {"n_levels", 8}, {"n_features_per_level", 2}, {"log2_hashmap_size", 14},
            {"base_resolution", 8}, {"per_level_scale", 1.5}};
}

const std::vector<QualCase>& qual_cases() {
    static const std::vector<QualCase> cases = {
        {"PortableMLP_f32", mlp("PortableMLP", "float32", 32, "Tanh"), nullptr},
        {"BlasLtMLP_f32", mlp("BlasLtMLP", "float32", 48, "SiLU"), nullptr},
        {"BlasLtMLP_f16", mlp("BlasLtMLP", "float16", 64), nullptr},
        {"BlasLtMLP_bf16", mlp("BlasLtMLP", "bfloat16", 64), nullptr},
        {"FullyFusedMLP_f16_w64", mlp("FullyFusedMLP", "float16", 64), nullptr},
        {"FullyFusedMLP_bf16_w64", mlp("FullyFusedMLP", "bfloat16", 64), nullptr},
        {"FullyFusedMLP_f16_w128", mlp("FullyFusedMLP", "float16", 128, "Sigmoid"), nullptr},
        {"HashGrid_FullyFusedMLP_f16", mlp("FullyFusedMLP", "float16", 64), hash_grid()},
        {"HashGrid_PortableMLP_f32", mlp("PortableMLP", "float32", 32), hash_grid()},
        {"DenseGrid_BlasLtMLP_f16", mlp("BlasLtMLP", "float16", 64),
         {{"otype", "DenseGrid"}, {"n_levels", 3}, {"base_resolution", 4}, {"per_level_scale", 2.0}}},
    };
    return cases;
}

std::shared_ptr<Module> build(const QualCase& c) {
    if (c.encoding.is_null()) return std::shared_ptr<Module>(create_network(kInputDims, kOutputDims, c.network));
    return std::shared_ptr<Module>(create_network_with_input_encoding(kInputDims, kOutputDims, c.encoding, c.network));
}

// Empty when the case runs on GPU 0 in this build, else why not.
std::string unsupported(const QualCase& c) {
    try {
        if (!build(c)->supports_device(Device::gpu(0))) return c.name + ": not supported on the GPU in this build";
    } catch (const Error& e) {
        return c.name + ": not supported: " + e.what();
    }
    return "";
}

#define SKIP_UNLESS_QUALIFIABLE(c)                              \
    do {                                                        \
        TNN_SKIP_WITHOUT_GPU();                                 \
        const std::string tnn_reason_ = unsupported(c);         \
        if (!tnn_reason_.empty()) GTEST_SKIP() << tnn_reason_;  \
    } while (0)

// Parameters from the module's own initialisation for `seed`, in its dtype, on the GPU.
Tensor device_params(const Module& m, uint64_t seed, const Stream& stream) {
    const int64_t n = static_cast<int64_t>(m.n_params());
    Tensor host(1, n, DType::f32);
    m.init_params(seed, host.ptr<float>());
    if (m.param_dtype() != DType::f32) {
        Tensor typed(1, n, m.param_dtype());
        convert(Stream::cpu(), host.view(), typed.view());
        host = std::move(typed);
    }
    return host.to(Device::gpu(0), stream);
}

// Inputs in [0, 1)^3 (the grids' domain), on the GPU in the module's input dtype.
Tensor device_inputs(const Module& m, int64_t rows, uint64_t seed, const Stream& stream) {
    const auto v = random_vector(static_cast<size_t>(rows) * kInputDims, 0.0, 1.0, seed);
    Tensor host(rows, kInputDims, DType::f32);
    for (size_t i = 0; i < v.size(); ++i) host.ptr<float>()[i] = static_cast<float>(v[i]);
    if (m.input_dtype() != DType::f32) {
        Tensor typed(rows, kInputDims, m.input_dtype());
        convert(Stream::cpu(), host.view(), typed.view());
        host = std::move(typed);
    }
    return host.to(Device::gpu(0), stream);
}

// An output buffer filled with a value no model produces here, so a row left unwritten shows.
Tensor garbage_output(const Module& m, int64_t rows, const Stream& stream) {
    Tensor y(rows, m.n_output_dims(), m.output_dtype(), Device::gpu(0));
    fill(stream, y.view(), -12345.0);
    return y;
}

// Output rows [0, k) as host floats (synchronises the stream).
std::vector<float> host_rows(const Tensor& y, int64_t k, const Stream& stream) {
    stream.synchronize();
    std::vector<float> all = y.to(Device::cpu(), stream).to_float_vector();
    all.resize(static_cast<size_t>(k) * static_cast<size_t>(y.cols()));
    return all;
}

enum class Pass { inference, forward };

// One call of `pass` into a fresh output; the output stays on the device (async on `stream`).
Tensor run(const Module& m, Pass pass, const Stream& stream, const Tensor& x, const void* params) {
    Tensor y = garbage_output(m, x.rows(), stream);
    if (pass == Pass::inference) {
        m.inference(stream, x.view(), y.view(), params);
    } else {
        auto ctx = m.forward(stream, x.view(), y.view(), params, false);
        stream.synchronize();  // the context may hold temporaries of this stream
    }
    return y;
}

class Qualification : public ::testing::TestWithParam<QualCase> {};

}  // namespace

// Gate 1: 64 launches of the same call on the same data give the same bits (inference and the
// training forward pass), batch sizes with and without a tail.
TEST_P(Qualification, SixtyFourLaunchesAreBitwiseIdentical) {
    SKIP_UNLESS_QUALIFIABLE(GetParam());
    const auto m = build(GetParam());
    TestStream ts(Device::gpu(0));
    const Stream s = ts;
    const Tensor p = device_params(*m, 1, s);
    for (int64_t rows : {int64_t{4096}, int64_t{1000}}) {
        const Tensor x = device_inputs(*m, rows, 2, s);
        for (Pass pass : {Pass::inference, Pass::forward}) {
            const std::string what = msg(GetParam().name, pass == Pass::inference ? " inference" : " forward", ", ", rows, " rows");
            const std::vector<float> first = host_rows(run(*m, pass, s, x, p.data()), rows, s);
            for (int launch = 1; launch < 64; ++launch) {
                expect_same_bits(host_rows(run(*m, pass, s, x, p.data()), rows, s), first, msg(what, ", launch ", launch));
                if (HasFailure()) return;
            }
        }
    }
}

// Gate 2: the first k rows of a batch of n equal a batch of k rows: no kernel choice, split or
// reduction may depend on the batch size in a way that changes a row's bits.
TEST_P(Qualification, PrefixInvariance) {
    SKIP_UNLESS_QUALIFIABLE(GetParam());
    const auto m = build(GetParam());
    TestStream ts(Device::gpu(0));
    const Stream s = ts;
    const Tensor p = device_params(*m, 3, s);
    const int64_t n = 8192 + 77;
    const Tensor x = device_inputs(*m, n, 4, s);
    const std::vector<float> whole = host_rows(run(*m, Pass::inference, s, x, p.data()), n, s);
    const std::vector<float> whole_host = x.to(Device::cpu(), s).to_float_vector();
    for (int64_t k : {int64_t{1}, int64_t{7}, int64_t{128}, int64_t{255}, int64_t{1000}, int64_t{4096}, n - 1}) {
        // The prefix as a batch of its own, in a buffer of its own (not a view into x).
        Tensor prefix(k, kInputDims, DType::f32);
        std::memcpy(prefix.data(), whole_host.data(), static_cast<size_t>(k) * kInputDims * sizeof(float));
        if (m->input_dtype() != DType::f32) {
            Tensor typed(k, kInputDims, m->input_dtype());
            convert(Stream::cpu(), prefix.view(), typed.view());
            prefix = std::move(typed);
        }
        const Tensor xk = prefix.to(Device::gpu(0), s);
        std::vector<float> head = whole;
        head.resize(static_cast<size_t>(k) * kOutputDims);
        expect_same_bits(host_rows(run(*m, Pass::inference, s, xk, p.data()), k, s), head,
                         msg(GetParam().name, ": the first ", k, " rows of ", n));
        if (HasFailure()) return;
    }
}

// Gate 3: parameters A, then B, then A again give A's bits again, whether the swap passes another
// pointer or overwrites the same buffer (nothing may be cached from the previous parameters).
TEST_P(Qualification, ParameterHotSwapAtoBtoA) {
    SKIP_UNLESS_QUALIFIABLE(GetParam());
    const auto m = build(GetParam());
    TestStream ts(Device::gpu(0));
    const Stream s = ts;
    const int64_t rows = 3000;
    const Tensor x = device_inputs(*m, rows, 5, s);
    const Tensor a = device_params(*m, 11, s), b = device_params(*m, 12, s);
    for (Pass pass : {Pass::inference, Pass::forward}) {
        const std::string what = msg(GetParam().name, pass == Pass::inference ? " inference" : " forward");
        const std::vector<float> ya = host_rows(run(*m, pass, s, x, a.data()), rows, s);
        const std::vector<float> yb = host_rows(run(*m, pass, s, x, b.data()), rows, s);
        EXPECT_NE(ya, yb) << what << ": parameters A and B give the same output; the gate would prove nothing";
        expect_same_bits(host_rows(run(*m, pass, s, x, a.data()), rows, s), ya, what + ": A after B (by pointer)");

        // In place: one buffer holds A, then B, then A.
        Tensor swap(1, static_cast<int64_t>(m->n_params()), m->param_dtype(), Device::gpu(0));
        copy_bytes(s, swap.data(), swap.device(), a.data(), a.device(), a.bytes());
        expect_same_bits(host_rows(run(*m, pass, s, x, swap.data()), rows, s), ya, what + ": A in the swap buffer");
        copy_bytes(s, swap.data(), swap.device(), b.data(), b.device(), b.bytes());
        expect_same_bits(host_rows(run(*m, pass, s, x, swap.data()), rows, s), yb, what + ": B in the swap buffer");
        copy_bytes(s, swap.data(), swap.device(), a.data(), a.device(), a.bytes());
        expect_same_bits(host_rows(run(*m, pass, s, x, swap.data()), rows, s), ya, what + ": A again in the swap buffer");
        if (HasFailure()) return;
    }
}

// Gate 4: two models (this case with two parameter sets and inputs) launched on two streams at once,
// interleaved without synchronisation, give the bits they give one after the other on one stream.
TEST_P(Qualification, TwoModelsOnTwoStreamsEqualSequentialRuns) {
    SKIP_UNLESS_QUALIFIABLE(GetParam());
    const auto m1 = build(GetParam()), m2 = build(GetParam());
    TestStream ts1(Device::gpu(0)), ts2(Device::gpu(0));
    const Stream s1 = ts1, s2 = ts2;
    const int64_t rows1 = 4096 + 3, rows2 = 2048 + 5;
    const Tensor p1 = device_params(*m1, 21, s1), p2 = device_params(*m2, 22, s2);
    const Tensor x1 = device_inputs(*m1, rows1, 23, s1), x2 = device_inputs(*m2, rows2, 24, s2);
    s1.synchronize();
    s2.synchronize();

    // One after the other on one stream.
    const std::vector<float> y1 = host_rows(run(*m1, Pass::inference, s1, x1, p1.data()), rows1, s1);
    const std::vector<float> y2 = host_rows(run(*m2, Pass::inference, s1, x2, p2.data()), rows2, s1);

    // At once: 16 rounds, each launching on both streams before anything waits.
    constexpr int kRounds = 16;
    std::vector<Tensor> out1, out2;
    for (int r = 0; r < kRounds; ++r) {
        out1.push_back(garbage_output(*m1, rows1, s1));
        out2.push_back(garbage_output(*m2, rows2, s2));
        m1->inference(s1, x1.view(), out1.back().view(), p1.data());
        m2->inference(s2, x2.view(), out2.back().view(), p2.data());
    }
    for (int r = 0; r < kRounds; ++r) {
        expect_same_bits(host_rows(out1[r], rows1, s1), y1, msg(GetParam().name, ": model 1, round ", r));
        expect_same_bits(host_rows(out2[r], rows2, s2), y2, msg(GetParam().name, ": model 2, round ", r));
        if (HasFailure()) return;
    }
}

// The same gate for training: two Trainers on two streams at once equal the same two trainers run
// one after the other (deterministic configs: the grid's ordered gradient reduction).
TEST_P(Qualification, TwoTrainersOnTwoStreamsEqualSequentialRuns) {
    SKIP_UNLESS_QUALIFIABLE(GetParam());
    QualCase c = GetParam();
    if (!c.encoding.is_null() && c.encoding["otype"] != "Identity") c.encoding["deterministic"] = true;
    const json optimizer = {{"otype", "Adam"}, {"learning_rate", 1e-2}};
    auto trainer = [&](uint64_t seed) {
        return std::make_unique<Trainer>(build(c), std::shared_ptr<Loss>(create_loss({{"otype", "L2"}})),
                                         std::shared_ptr<Optimizer>(create_optimizer(optimizer)), Device::gpu(0), seed);
    };
    TestStream ts1(Device::gpu(0)), ts2(Device::gpu(0));
    const Stream s1 = ts1, s2 = ts2;
    const int64_t rows = 2048;
    const auto m = build(c);
    const Tensor x = device_inputs(*m, rows, 31, s1);
    Tensor y(rows, kOutputDims, m->input_dtype(), Device::gpu(0));
    fill(s1, y.view(), 0.25);
    s1.synchronize();
    constexpr int kSteps = 8;

    auto seq1 = trainer(41), seq2 = trainer(42);
    for (int i = 0; i < kSteps; ++i) seq1->step(s1, x.view(), y.view());
    for (int i = 0; i < kSteps; ++i) seq2->step(s1, x.view(), y.view());
    const auto want1 = seq1->params_host(s1), want2 = seq2->params_host(s1);

    auto par1 = trainer(41), par2 = trainer(42);
    for (int i = 0; i < kSteps; ++i) {
        par1->step(s1, x.view(), y.view());
        par2->step(s2, x.view(), y.view());
    }
    expect_same_bits(par1->params_host(s1), want1, c.name + ": trainer 1");
    expect_same_bits(par2->params_host(s2), want2, c.name + ": trainer 2");
}

INSTANTIATE_TEST_SUITE_P(Gates, Qualification, ::testing::ValuesIn(qual_cases()),
                         [](const ::testing::TestParamInfo<QualCase>& info) { return info.param.name; });
