// PortableMLP on every backend against the CPU fp64 reference: one list of cases (shapes, activations,
// bias, batch sizes 0 / 1 / 7 / 1000 / 4097), then GPU-only properties: bitwise reproducibility,
// gradient accumulation, two streams, graph capture, and bad calls that must raise, not crash.
#include "gpu_test_util.h"
#include "mlp_accuracy.h"

#include "networks/portable_mlp.h"

#include <cmath>
#include <memory>
#include <tuple>

using namespace tnn;
using namespace tnn::test;

namespace {

struct MlpCase {
    std::string name;
    uint32_t n_in, n_out, width, hidden;
    std::string act, out_act;
    bool bias;
    int64_t batch;
    // Draw inputs, parameters and output gradients from coarse dyadic grids so every hidden
    // pre-activation is exact in fp32 (at most 15 significant bits for <= 2 hidden layers of width
    // <= 64). Used for ReLU-like activations: otherwise a z within rounding error of 0 could take the
    // other branch in fp32 than in fp64 and change a gradient by O(1).
    bool exact_kinks = false;
};

std::ostream& operator<<(std::ostream& os, const MlpCase& c) { return os << c.name; }

const std::vector<MlpCase>& mlp_cases() {
    static const std::vector<MlpCase> cases = {
        {"relu_small_batch7", 3, 1, 16, 1, "ReLU", "None", false, 7, true},
        {"relu_w64_batch1000", 3, 3, 64, 2, "ReLU", "None", false, 1000, true},
        {"relu_relu_out_bias_batch4097", 5, 2, 32, 2, "ReLU", "ReLU", true, 4097, true},
        {"leaky_batch1000", 6, 2, 24, 1, "LeakyReLU", "None", true, 1000, true},
        {"empty_batch0", 3, 4, 32, 2, "ReLU", "None", false, 0, true},
        {"tanh_sigmoid_bias_batch1", 5, 2, 32, 2, "Tanh", "Sigmoid", true, 1, false},
        {"no_hidden_sine_out_batch4097", 7, 5, 32, 0, "None", "Sine", true, 4097, false},
        {"sine_w48_batch1000", 2, 3, 48, 3, "Sine", "None", false, 1000, false},
        {"silu_odd_width33_bias", 4, 4, 33, 2, "SiLU", "SiLU", true, 1000, false},
        {"exponential_out_batch4097", 3, 2, 24, 1, "Tanh", "Exponential", false, 4097, false},
        {"softplus_squareplus_bias", 3, 3, 40, 2, "Softplus", "Squareplus", true, 333, false},
        {"sigmoid_tanh_unpadded16", 16, 16, 64, 1, "Sigmoid", "Tanh", false, 7, false},
        {"odd_pads_17_in_17_out", 17, 17, 80, 1, "Tanh", "None", true, 1000, false},
        {"deep6_width16", 3, 1, 16, 6, "Tanh", "None", false, 257, false},
        {"width1", 1, 1, 1, 2, "Tanh", "None", true, 7, false},
        {"wide128_batch4097", 32, 8, 128, 2, "SiLU", "None", true, 4097, false},
    };
    return cases;
}

json config_for(const MlpCase& c, DType dtype) {
    json j = {{"otype", "PortableMLP"}, {"n_neurons", c.width},  {"n_hidden_layers", c.hidden},
              {"activation", c.act},    {"output_activation", c.out_act}, {"dtype", dtype_name(dtype)}};
    if (c.bias) j["bias"] = true;
    return j;
}

// Values in [-max, max]: uniform, or on the grid of multiples of 1/8 when `exact`.
std::vector<float> draw(size_t n, double max, bool exact, uint64_t seed) {
    std::vector<double> v = random_vector(n, -max, max, seed);
    std::vector<float> out(n);
    for (size_t i = 0; i < n; ++i) out[i] = static_cast<float>(exact ? std::round(v[i] * 8) / 8 : v[i]);
    return out;
}

struct MlpData {
    std::vector<float> x, params, dL_dy;
};

MlpData make_data(const MlpCase& c, const Network& net, uint64_t seed) {
    MlpData d;
    d.x = draw(static_cast<size_t>(c.batch) * c.n_in, 1.0, c.exact_kinks, seed);
    d.dL_dy = draw(static_cast<size_t>(c.batch) * c.n_out, 1.0, c.exact_kinks, seed + 1);
    if (c.exact_kinks) {
        d.params = draw(net.n_params(), 0.25, true, seed + 2);
    } else {
        d.params.resize(net.n_params());
        net.init_params(seed + 2, d.params.data());
        const auto b = random_vector(net.n_params() - net.n_matrix_params(), -0.5, 0.5, seed + 3);
        for (size_t i = net.n_matrix_params(); i < net.n_params(); ++i)
            d.params[i] = static_cast<float>(b[i - net.n_matrix_params()]);
    }
    return d;
}

// One forward + inference + backward (overwrite) of `net` on `device`, results back on the host.
struct MlpResult {
    Tensor y, y_inference, dL_dparams, dL_dinput;
};

MlpResult run_mlp(const Network& net, const Stream& stream, const MlpData& d, int64_t batch) {
    const Device dev = stream.device();
    const DType t = net.param_dtype();
    auto upload = [&](const std::vector<float>& v, int64_t rows, int64_t cols) {
        Tensor host = from_floats(v, rows, cols, Device::cpu());
        if (t == DType::f32) return to_device(host, dev);
        Tensor wide(rows, cols, t);
        convert(Stream::cpu(), host.view(), wide.view());
        return to_device(wide, dev);
    };
    const Tensor x = upload(d.x, batch, net.n_input_dims());
    const Tensor p = upload(d.params, 1, static_cast<int64_t>(net.n_params()));
    const Tensor g = upload(d.dL_dy, batch, net.n_output_dims());
    Tensor y(batch, net.n_output_dims(), t, dev), yi(batch, net.n_output_dims(), t, dev);
    Tensor dx(batch, net.n_input_dims(), t, dev), dp(1, static_cast<int64_t>(net.n_params()), t, dev);
    // Garbage first: overwrite mode must replace every value.
    fill(stream, dx.view(), 7.0);
    fill(stream, dp.view(), 7.0);
    auto ctx = net.forward(stream, x.view(), y.view(), p.data(), true);
    net.inference(stream, x.view(), yi.view(), p.data());
    View dx_view = dx.view();
    net.backward(stream, *ctx, x.view(), y.view(), g.view(), &dx_view, dp.data(), p.data(), GradMode::overwrite);
    stream.synchronize();
    return {y.to(Device::cpu()), yi.to(Device::cpu()), dp.to(Device::cpu()), dx.to(Device::cpu())};
}

class PortableMlpBackends : public ::testing::TestWithParam<std::tuple<MlpCase, Device>> {};

TEST_P(PortableMlpBackends, MatchesFp64Reference) {
    const auto& [c, device] = GetParam();
    TNN_SKIP_UNLESS_USABLE(device);
    const auto net32 = create_network(c.n_in, c.n_out, config_for(c, DType::f32));
    const auto net64 = create_network(c.n_in, c.n_out, config_for(c, DType::f64));
    const MlpData data = make_data(c, *net32, 1234);

    const MlpResult ref = run_mlp(*net64, Stream::cpu(), data, c.batch);
    const MlpResult naive = run_mlp(*net32, Stream::cpu(), data, c.batch);
    TestStream stream(device);
    const MlpResult got = run_mlp(*net32, stream, data, c.batch);

    const MlpTermCounts n = mlp_term_counts(net32->layout(), c.batch);
    const double eps = dtype_epsilon(DType::f32);
    expect_matches_reference(to_floats(got.y), ref.y.to_double_vector(), to_floats(naive.y), {eps, n.forward},
                             "forward output");
    expect_matches_reference(to_floats(got.y_inference), ref.y.to_double_vector(), to_floats(naive.y), {eps, n.forward},
                             "inference output");
    expect_matches_reference(to_floats(got.dL_dinput), ref.dL_dinput.to_double_vector(), to_floats(naive.dL_dinput),
                             {eps, n.input_grad}, "dL/dinput");
    expect_matches_reference(to_floats(got.dL_dparams), ref.dL_dparams.to_double_vector(),
                             to_floats(naive.dL_dparams), {eps, n.param_grad}, "dL/dparams");
    // Inference and forward run the same arithmetic: same bits.
    expect_same_bits(to_floats(got.y), to_floats(got.y_inference), "forward vs inference");
    if (c.batch == 0) {
        for (float v : to_floats(got.dL_dparams)) ASSERT_EQ(v, 0.0f) << "an empty batch must give a zero gradient";
    }
}

std::string case_name(const ::testing::TestParamInfo<std::tuple<MlpCase, Device>>& info) {
    return std::get<0>(info.param).name + "_" + backend_label(std::get<1>(info.param));
}

INSTANTIATE_TEST_SUITE_P(Cases, PortableMlpBackends,
                         ::testing::Combine(::testing::ValuesIn(mlp_cases()), ::testing::ValuesIn(test_backends())),
                         case_name);

// ---- GPU-only properties.

const MlpCase& case_named(const std::string& name) {
    for (const auto& c : mlp_cases())
        if (c.name == name) return c;
    throw Error("no MLP test case named " + name);
}

TEST(PortableMlpGpu, TrainingIsBitwiseReproducible) {
    TNN_SKIP_WITHOUT_GPU();
    for (const char* name : {"silu_odd_width33_bias", "relu_relu_out_bias_batch4097", "wide128_batch4097"}) {
        const MlpCase& c = case_named(name);
        const auto net = create_network(c.n_in, c.n_out, config_for(c, DType::f32));
        const MlpData data = make_data(c, *net, 99);
        TestStream stream(Device::gpu(0));
        const MlpResult a = run_mlp(*net, stream, data, c.batch);
        free_temporary_memory();  // the second run gets other memory: the bits must not depend on it
        const MlpResult b = run_mlp(*net, stream, data, c.batch);
        expect_same_bits(to_floats(a.y), to_floats(b.y), c.name + " output");
        expect_same_bits(to_floats(a.y_inference), to_floats(b.y_inference), c.name + " inference output");
        expect_same_bits(to_floats(a.dL_dparams), to_floats(b.dL_dparams), c.name + " dL/dparams");
        expect_same_bits(to_floats(a.dL_dinput), to_floats(b.dL_dinput), c.name + " dL/dinput");
    }
}

TEST(PortableMlpGpu, AccumulateAddsToTheGradient) {
    TNN_SKIP_WITHOUT_GPU();
    // Batch 7 reduces in one slab (the GEMM writes the final value); batch 1000 in four (partials, then a sum).
    for (const char* name : {"relu_small_batch7", "silu_odd_width33_bias"}) {
        const MlpCase& c = case_named(name);
        const auto net = create_network(c.n_in, c.n_out, config_for(c, DType::f32));
        const MlpData data = make_data(c, *net, 5);
        TestStream stream(Device::gpu(0));
        const MlpResult once = run_mlp(*net, stream, data, c.batch);
        const Device gpu = Device::gpu(0);
        const Tensor x = from_floats(data.x, c.batch, c.n_in, gpu), g = from_floats(data.dL_dy, c.batch, c.n_out, gpu);
        const Tensor p = from_floats(data.params, 1, static_cast<int64_t>(net->n_params()), gpu);
        Tensor y(c.batch, c.n_out, DType::f32, gpu), dp(1, static_cast<int64_t>(net->n_params()), DType::f32, gpu);
        fill(stream, dp.view(), 0.5);
        auto ctx = net->forward(stream, x.view(), y.view(), p.data(), false);
        net->backward(stream, *ctx, x.view(), y.view(), g.view(), nullptr, dp.data(), p.data(), GradMode::accumulate);
        const std::vector<float> acc = to_floats(dp.to(Device::cpu(), stream)), grad = to_floats(once.dL_dparams);
        std::vector<float> want(grad.size());
        for (size_t i = 0; i < grad.size(); ++i) want[i] = 0.5f + grad[i];  // one fp32 add, as the kernel does
        expect_same_bits(acc, want, c.name + " accumulated gradient");
    }
}

TEST(PortableMlpGpu, TwoStreamsGiveTheSameBitsAsOne) {
    TNN_SKIP_WITHOUT_GPU();
    const MlpCase& c = case_named("relu_w64_batch1000");
    const auto net = create_network(c.n_in, c.n_out, config_for(c, DType::f32));
    const MlpData d1 = make_data(c, *net, 11), d2 = make_data(c, *net, 22);
    TestStream single(Device::gpu(0));
    const MlpResult want1 = run_mlp(*net, single, d1, c.batch), want2 = run_mlp(*net, single, d2, c.batch);

    // Interleave two training steps on two streams without synchronising in between.
    const Device gpu = Device::gpu(0);
    TestStream s1(gpu), s2(gpu);
    struct Step {
        Tensor x, p, g, y, dp, dx;
        std::unique_ptr<Context> ctx;
    };
    auto prepare = [&](const MlpData& d) {
        Step s;
        s.x = from_floats(d.x, c.batch, c.n_in, gpu);
        s.p = from_floats(d.params, 1, static_cast<int64_t>(net->n_params()), gpu);
        s.g = from_floats(d.dL_dy, c.batch, c.n_out, gpu);
        s.y = Tensor(c.batch, c.n_out, DType::f32, gpu);
        s.dp = Tensor(1, static_cast<int64_t>(net->n_params()), DType::f32, gpu);
        s.dx = Tensor(c.batch, c.n_in, DType::f32, gpu);
        return s;
    };
    Step a = prepare(d1), b = prepare(d2);
    a.ctx = net->forward(s1, a.x.view(), a.y.view(), a.p.data(), true);
    b.ctx = net->forward(s2, b.x.view(), b.y.view(), b.p.data(), true);
    View adx = a.dx.view(), bdx = b.dx.view();
    net->backward(s1, *a.ctx, a.x.view(), a.y.view(), a.g.view(), &adx, a.dp.data(), a.p.data(), GradMode::overwrite);
    net->backward(s2, *b.ctx, b.x.view(), b.y.view(), b.g.view(), &bdx, b.dp.data(), b.p.data(), GradMode::overwrite);
    a.ctx.reset();
    b.ctx.reset();
    s1.stream().synchronize();
    s2.stream().synchronize();
    expect_same_bits(to_floats(a.y), to_floats(want1.y), "stream 1 output");
    expect_same_bits(to_floats(b.y), to_floats(want2.y), "stream 2 output");
    expect_same_bits(to_floats(a.dp), to_floats(want1.dL_dparams), "stream 1 dL/dparams");
    expect_same_bits(to_floats(b.dp), to_floats(want2.dL_dparams), "stream 2 dL/dparams");
    expect_same_bits(to_floats(a.dx), to_floats(want1.dL_dinput), "stream 1 dL/dinput");
    expect_same_bits(to_floats(b.dx), to_floats(want2.dL_dinput), "stream 2 dL/dinput");
}

TEST(PortableMlpGpu, BackwardOnAnotherStreamThanForward) {
    TNN_SKIP_WITHOUT_GPU();
    const MlpCase& c = case_named("sine_w48_batch1000");
    const auto net = create_network(c.n_in, c.n_out, config_for(c, DType::f32));
    const MlpData d = make_data(c, *net, 3);
    TestStream s1(Device::gpu(0)), s2(Device::gpu(0));
    const MlpResult want = run_mlp(*net, s1, d, c.batch);
    const Device gpu = Device::gpu(0);
    const Tensor x = from_floats(d.x, c.batch, c.n_in, gpu), g = from_floats(d.dL_dy, c.batch, c.n_out, gpu);
    const Tensor p = from_floats(d.params, 1, static_cast<int64_t>(net->n_params()), gpu);
    Tensor y(c.batch, c.n_out, DType::f32, gpu), dp(1, static_cast<int64_t>(net->n_params()), DType::f32, gpu);
    // No synchronisation: the backward on s2 must itself wait for the forward's work on s1.
    auto ctx = net->forward(s1, x.view(), y.view(), p.data(), false);
    net->backward(s2, *ctx, x.view(), y.view(), g.view(), nullptr, dp.data(), p.data(), GradMode::overwrite);
    ctx.reset();
    // New work on s1 may reuse the context's memory: it must wait for the backward on s2.
    Tensor scratch = Tensor::temporary(s1, c.batch * int64_t(net->n_hidden_layers()), c.width, DType::f32);
    fill(s1, scratch.view(), -1.0);
    s2.stream().synchronize();
    s1.stream().synchronize();
    expect_same_bits(to_floats(dp), to_floats(want.dL_dparams), "dL/dparams with backward on another stream");
}

#ifdef TNN_WITH_GPU
TEST(PortableMlpGpu, TrainingStepReplaysFromACapturedGraph) {
    TNN_SKIP_WITHOUT_GPU();
    const MlpCase& c = case_named("silu_odd_width33_bias");
    const auto net = create_network(c.n_in, c.n_out, config_for(c, DType::f32));
    const MlpData d = make_data(c, *net, 8);
    TestStream stream(Device::gpu(0));
    const MlpResult want = run_mlp(*net, stream, d, c.batch);  // also the warm-up of the allocator

    const Device gpu = Device::gpu(0);
    const Tensor x = from_floats(d.x, c.batch, c.n_in, gpu), g = from_floats(d.dL_dy, c.batch, c.n_out, gpu);
    const Tensor p = from_floats(d.params, 1, static_cast<int64_t>(net->n_params()), gpu);
    Tensor y(c.batch, c.n_out, DType::f32, gpu), dp(1, static_cast<int64_t>(net->n_params()), DType::f32, gpu);
    Tensor dx(c.batch, c.n_in, DType::f32, gpu);
    TestGraph graph(stream);
    try {
        auto ctx = net->forward(stream, x.view(), y.view(), p.data(), true);
        View dx_view = dx.view();
        net->backward(stream, *ctx, x.view(), y.view(), g.view(), &dx_view, dp.data(), p.data(), GradMode::overwrite);
    } catch (const std::exception& e) {
        FAIL() << "a warmed-up training step must be capturable: " << e.what();
    }
    ASSERT_TRUE(graph.end());
    for (int replay = 0; replay < 2; ++replay) {
        fill(stream, y.view(), 0.0);
        fill(stream, dp.view(), 0.0);
        ASSERT_TRUE(graph.launch());
        stream.stream().synchronize();
        expect_same_bits(to_floats(y), to_floats(want.y), "graph replay output");
        expect_same_bits(to_floats(dp), to_floats(want.dL_dparams), "graph replay dL/dparams");
        expect_same_bits(to_floats(dx), to_floats(want.dL_dinput), "graph replay dL/dinput");
    }
}
#endif  // TNN_WITH_GPU

// ---- Bad calls raise typed errors.

class PortableMlpGpuErrors : public ::testing::Test {
protected:
    void SetUp() override {
        TNN_SKIP_WITHOUT_GPU();
        net = create_network(3, 2, {{"otype", "PortableMLP"}, {"n_neurons", 16}, {"n_hidden_layers", 1}});
        params = Tensor(1, static_cast<int64_t>(net->n_params()), DType::f32, gpu);
        fill(Stream::gpu(nullptr, 0), params.view(), 0.1);
        x = Tensor(10, 3, DType::f32, gpu);
        y = Tensor(10, 2, DType::f32, gpu);
        fill(Stream::gpu(nullptr, 0), x.view(), 0.5);
    }
    const Device gpu = Device::gpu(0);
    const Stream stream = Stream::gpu(nullptr, 0);
    std::unique_ptr<Network> net;
    Tensor params, x, y;
};

TEST_F(PortableMlpGpuErrors, HostParamsAreRefused) {
    std::vector<float> host_params(net->n_params(), 0.1f);
    EXPECT_THROW(net->inference(stream, x.view(), y.view(), host_params.data()), DeviceError);
}

// A host gradient buffer would fault inside the kernels (ending every model of the process): refused up
// front by every backward, with rows or without (the empty batch zeroes dL/dparams), and by a grid's.
TEST_F(PortableMlpGpuErrors, HostParamGradientIsRefused) {
    std::vector<float> host_grad(net->n_params(), 7.0f);
    auto ctx = net->forward(stream, x.view(), y.view(), params.data(), false);
    for (int64_t rows : {int64_t(10), int64_t(0)}) {
        SCOPED_TRACE(rows);
        const ConstView xs = x.view().rows_slice(0, rows), ys = y.view().rows_slice(0, rows);
        try {
            net->backward(stream, *ctx, xs, ys, ys, nullptr, host_grad.data(), params.data(), GradMode::overwrite);
            ADD_FAILURE() << "no DeviceError";
        } catch (const DeviceError& e) {
            EXPECT_NE(std::string(e.what()).find("dL_dparams is not memory of"), std::string::npos) << e.what();
        }
    }
    EXPECT_EQ(host_grad, std::vector<float>(net->n_params(), 7.0f)) << "nothing written";
    const auto grid = create_encoding(3, {{"otype", "HashGrid"}, {"n_levels", 2}, {"log2_hashmap_size", 8}}, DType::f32);
    Tensor gp(1, static_cast<int64_t>(grid->n_params()), DType::f32, gpu), gy(10, grid->n_output_dims(), DType::f32, gpu);
    fill(stream, gp.view(), 0.01);
    auto gctx = grid->forward(stream, x.view(), gy.view(), gp.data(), false);
    std::vector<float> grid_grad(grid->n_params(), 7.0f);
    EXPECT_THROW(grid->backward(stream, *gctx, x.view(), gy.view(), gy.view(), nullptr, grid_grad.data(), gp.data(),
                                GradMode::overwrite),
                 DeviceError);
    stream.synchronize();
}

TEST_F(PortableMlpGpuErrors, HostMemoryLabelledGpuIsRefused) {
    Tensor host(10, 3, DType::f32);
    View lie = host.view();
    lie.device = gpu;
    EXPECT_THROW(net->inference(stream, lie, y.view(), params.data()), DeviceError);
}

TEST_F(PortableMlpGpuErrors, MismatchedShapesAreRefused) {
    Tensor wide_x(10, 4, DType::f32, gpu), short_y(9, 2, DType::f32, gpu);
    EXPECT_THROW(net->inference(stream, wide_x.view(), y.view(), params.data()), ShapeError);
    EXPECT_THROW(net->inference(stream, x.view(), short_y.view(), params.data()), ShapeError);
    auto ctx = net->forward(stream, x.view(), y.view(), params.data(), false);
    Tensor dp(1, static_cast<int64_t>(net->n_params()), DType::f32, gpu);
    // A backward with fewer rows than its forward.
    EXPECT_THROW(net->backward(stream, *ctx, x.view().rows_slice(0, 5), y.view().rows_slice(0, 5),
                               y.view().rows_slice(0, 5), nullptr, dp.data(), params.data(), GradMode::overwrite),
                 ShapeError);
}

TEST_F(PortableMlpGpuErrors, WrongDeviceIndexIsRefused) {
    const int missing = gpu_device_count();
    View x_elsewhere = x.view(), y_elsewhere = y.view();
    x_elsewhere.device = y_elsewhere.device = Device::gpu(missing);
    EXPECT_THROW(net->inference(Stream::gpu(nullptr, missing), x_elsewhere, y_elsewhere, params.data()), DeviceError);
    EXPECT_THROW(Tensor(4, 4, DType::f32, Device::gpu(missing)), DeviceError);
}

TEST_F(PortableMlpGpuErrors, WrongDtypeOrContextIsRefused) {
    Tensor x16(10, 3, DType::f16, gpu);
    EXPECT_THROW(net->inference(stream, x16.view(), y.view(), params.data()), DTypeError);
    const auto net64 = create_network(3, 2, {{"otype", "PortableMLP"}, {"n_neurons", 16}, {"dtype", "float64"}});
    Tensor x64(10, 3, DType::f64, gpu), y64(10, 2, DType::f64, gpu);
    EXPECT_THROW(net64->inference(stream, x64.view(), y64.view(), params.data()), UnsupportedError);
    // A context from a CPU forward cannot drive a GPU backward.
    Tensor xc(10, 3, DType::f32), yc(10, 2, DType::f32);
    std::vector<float> pc(net->n_params(), 0.1f);
    fill(Stream::cpu(), xc.view(), 0.5);
    auto cpu_ctx = net->forward(Stream::cpu(), xc.view(), yc.view(), pc.data(), false);
    Tensor dp(1, static_cast<int64_t>(net->n_params()), DType::f32, gpu);
    EXPECT_THROW(net->backward(stream, *cpu_ctx, x.view(), y.view(), y.view(), nullptr, dp.data(), params.data(),
                               GradMode::overwrite),
                 Error);
}

}  // namespace
