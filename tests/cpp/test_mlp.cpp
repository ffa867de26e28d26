// PortableMLP (the CPU reference network): tcnn layout and padding, hand-computed outputs, fp64
// finite-difference gradients for every activation, thread-count independence, bad configs/calls.
#include "core/parallel.h"
#include "networks/portable_mlp.h"
#include "test_util.h"

#include <cstring>

using namespace tnn;
using test::check_gradients;
using test::random_tensor;
using test::random_vector;

namespace {

json mlp_config(uint32_t width, uint32_t hidden, const std::string& act = "ReLU", const std::string& out_act = "None",
                const std::string& dtype = "float64", bool bias = false) {
    json j = {{"otype", "PortableMLP"}, {"n_neurons", width}, {"n_hidden_layers", hidden}, {"activation", act},
              {"output_activation", out_act}, {"dtype", dtype}};
    if (bias) j["bias"] = true;
    return j;
}

const std::vector<std::string> kActivations = {"None", "ReLU", "LeakyReLU", "Exponential", "Sine",
                                               "Sigmoid", "Squareplus", "Softplus", "Tanh", "SiLU"};

}  // namespace

TEST(PortableMLP, TcnnParameterLayoutAndCounts) {
    // 3 inputs pad to 16, 1 output pads to 16: W_in 64x16, W_hidden 64x64, W_out 16x64.
    auto net = create_network(3, 1, mlp_config(64, 2, "ReLU", "None", "float32"));
    EXPECT_EQ(net->n_params(), 64u * 16 + 64 * 64 + 16 * 64);
    EXPECT_EQ(net->n_matrix_params(), net->n_params());
    const MlpLayout& l = net->layout();
    EXPECT_EQ(l.padded_input_dims, 16u);
    EXPECT_EQ(l.padded_output_dims, 16u);
    EXPECT_EQ(l.weight_offset(1), 64u * 16);
    EXPECT_EQ(l.weight_offset(2), 64u * 16 + 64 * 64);
    // 32 inputs need no padding; 0 hidden layers is one 16x32 matrix.
    EXPECT_EQ(create_network(32, 16, mlp_config(64, 0, "ReLU", "None", "float32"))->n_params(), 16u * 32);
    // Biases come after all matrices: one per layer output (64, 64, 16).
    auto b = create_network(3, 1, mlp_config(64, 2, "ReLU", "None", "float32", true));
    EXPECT_EQ(b->n_params(), 64u * 16 + 64 * 64 + 16 * 64 + 64 + 64 + 16);
    EXPECT_EQ(b->n_matrix_params(), 64u * 16 + 64 * 64 + 16 * 64);
}

TEST(PortableMLP, XavierInitRangesPerMatrix) {
    auto net = create_network(3, 4, mlp_config(32, 2, "ReLU", "None", "float32"));
    std::vector<float> p(net->n_params());
    net->init_params(1337, p.data());
    const MlpLayout& l = net->layout();
    for (uint32_t layer = 0; layer < l.n_layers(); ++layer) {
        const float bound = std::sqrt(6.0f / (l.layer_in(layer) + l.layer_out(layer)));
        float max_abs = 0;
        for (size_t i = l.weight_offset(layer); i < l.weight_offset(layer + 1); ++i) max_abs = std::max(max_abs, std::fabs(p[i]));
        EXPECT_LE(max_abs, bound);
        EXPECT_GT(max_abs, 0.9f * bound);  // 512+ uniform draws reach the top 10% of the range
    }
    std::vector<float> again(net->n_params());
    net->init_params(1337, again.data());
    EXPECT_EQ(p, again);
}

TEST(PortableMLP, HandComputedOutputWithOnePadding) {
    // 2 inputs -> width 2 (ReLU) -> 1 output; lanes 2..15 of the input hold 1.0 (tcnn's padding).
    auto net = create_network(2, 1, mlp_config(2, 1, "ReLU", "None", "float64"));
    ASSERT_EQ(net->n_params(), 2u * 16 + 16 * 2);
    std::vector<double> p(net->n_params(), 0.0);
    double* w_in = p.data();        // [2 x 16]
    double* w_out = p.data() + 32;  // [16 x 2]
    w_in[0] = 1, w_in[1] = 2, w_in[2] = 0.5;            // z0 = x0 + 2 x1 + 0.5
    w_in[16] = -1, w_in[17] = 1, w_in[31] = -0.25;      // z1 = -x0 + x1 - 0.25
    w_out[0] = 3, w_out[1] = -2;                         // y = 3 relu(z0) - 2 relu(z1)
    Tensor x(2, 2, DType::f64), y(2, 1, DType::f64);
    const double xs[] = {0.5, 0.25, -1, 1};
    std::copy(xs, xs + 4, x.ptr<double>());
    net->inference(Stream::cpu(), x.view(), y.view(), p.data());
    EXPECT_DOUBLE_EQ(y.ptr<double>()[0], 4.5);  // z = (1.5, -0.5)
    EXPECT_DOUBLE_EQ(y.ptr<double>()[1], 1.0);  // z = (1.5, 1.75)
}

class PortableMlpActivation : public ::testing::TestWithParam<std::string> {};

TEST_P(PortableMlpActivation, GradientsHidden) {
    auto net = create_network(3, 2, mlp_config(8, 2, GetParam(), "None"));
    check_gradients(*net, random_tensor(5, 3, DType::f64, -1, 1, 11), test::init_params_f64(*net, 5), 17);
}

TEST_P(PortableMlpActivation, GradientsOutput) {
    auto net = create_network(3, 2, mlp_config(8, 1, "Tanh", GetParam()));
    check_gradients(*net, random_tensor(5, 3, DType::f64, -1, 1, 12), test::init_params_f64(*net, 6), 18);
}

INSTANTIATE_TEST_SUITE_P(All, PortableMlpActivation, ::testing::ValuesIn(kActivations),
                         [](const auto& info) { return info.param; });

struct MlpShape {
    uint32_t n_in, n_out, width, hidden;
    bool bias;
};

class PortableMlpShape : public ::testing::TestWithParam<MlpShape> {};

TEST_P(PortableMlpShape, Gradients) {
    const MlpShape s = GetParam();
    auto net = create_network(s.n_in, s.n_out, mlp_config(s.width, s.hidden, "SiLU", "Sigmoid", "float64", s.bias));
    // Random biases (init would zero them) so that the bias gradients are exercised too.
    check_gradients(*net, random_tensor(4, s.n_in, DType::f64, -1, 1, 21), random_vector(net->n_params(), -0.4, 0.4, 9), 23);
}

INSTANTIATE_TEST_SUITE_P(Shapes, PortableMlpShape,
                         ::testing::Values(MlpShape{1, 1, 4, 0, false}, MlpShape{3, 2, 5, 1, true},
                                           MlpShape{17, 3, 8, 3, false}, MlpShape{2, 17, 6, 2, true},
                                           MlpShape{16, 16, 16, 1, false}));

TEST(PortableMLP, ResultsIndependentOfThreadCount) {
    auto net = create_network(5, 3, mlp_config(32, 2, "ReLU", "None", "float32", true));
    const int64_t rows = 5000;  // several reduction groups and a tail block
    Tensor x = random_tensor(rows, 5, DType::f32, 0, 1, 1), dy = random_tensor(rows, 3, DType::f32, -1, 1, 2);
    std::vector<float> p(net->n_params());
    net->init_params(3, p.data());
    auto run = [&] {
        Tensor y(rows, 3, DType::f32), dx(rows, 5, DType::f32);
        std::vector<float> g(net->n_params());
        auto ctx = net->forward(Stream::cpu(), x.view(), y.view(), p.data(), true);
        View dxv = dx.view();
        net->backward(Stream::cpu(), *ctx, x.view(), y.view(), dy.view(), &dxv, g.data(), p.data(), GradMode::overwrite);
        std::vector<float> all = y.to_float_vector();
        const auto dxs = dx.to_float_vector();
        all.insert(all.end(), dxs.begin(), dxs.end());
        all.insert(all.end(), g.begin(), g.end());
        return all;
    };
    const int threads = num_threads();
    set_num_threads(1);
    const auto one = run();
    set_num_threads(2);
    const auto two = run();
    set_num_threads(threads);
    ASSERT_EQ(one.size(), two.size());
    EXPECT_EQ(std::memcmp(one.data(), two.data(), one.size() * sizeof(float)), 0);
}

TEST(PortableMLP, AccumulateModeAddsToExistingGradients) {
    auto net = create_network(3, 2, mlp_config(8, 1));
    const auto p = test::init_params_f64(*net, 4);
    Tensor x = random_tensor(6, 3, DType::f64, -1, 1, 1), y(6, 2, DType::f64), dy = random_tensor(6, 2, DType::f64, -1, 1, 2);
    auto ctx = net->forward(Stream::cpu(), x.view(), y.view(), p.data(), false);
    std::vector<double> g1(net->n_params(), 0.0), g2(net->n_params(), 0.5);
    net->backward(Stream::cpu(), *ctx, x.view(), y.view(), dy.view(), nullptr, g1.data(), p.data(), GradMode::overwrite);
    net->backward(Stream::cpu(), *ctx, x.view(), y.view(), dy.view(), nullptr, g2.data(), p.data(), GradMode::accumulate);
    for (size_t i = 0; i < g1.size(); ++i) EXPECT_DOUBLE_EQ(g2[i], g1[i] + 0.5);
}

TEST(PortableMLP, ZeroAndOneRowBatches) {
    auto net = create_network(3, 2, mlp_config(8, 1, "ReLU", "None", "float32"));
    std::vector<float> p(net->n_params());
    net->init_params(1, p.data());
    Tensor x0(0, 3, DType::f32), y0(0, 2, DType::f32), dy0(0, 2, DType::f32);
    auto ctx = net->forward(Stream::cpu(), x0.view(), y0.view(), p.data(), true);
    std::vector<float> g(net->n_params(), 7.0f);
    net->backward(Stream::cpu(), *ctx, x0.view(), y0.view(), dy0.view(), nullptr, g.data(), p.data(), GradMode::overwrite);
    EXPECT_TRUE(std::all_of(g.begin(), g.end(), [](float v) { return v == 0.0f; }));  // overwrite with an empty sum
    Tensor x1 = random_tensor(1, 3, DType::f32, 0, 1, 3), y1(1, 2, DType::f32);
    net->inference(Stream::cpu(), x1.view(), y1.view(), p.data());
    EXPECT_TRUE(std::isfinite(y1.ptr<float>()[0]));
}

TEST(PortableMLP, HyperparamsRoundTrip) {
    auto net = create_network(7, 3, mlp_config(24, 3, "Squareplus", "Sine", "float64", true));
    auto again = create_network(7, 3, net->hyperparams());
    EXPECT_EQ(again->hyperparams(), net->hyperparams());
    const auto p = test::init_params_f64(*net, 2);
    Tensor x = random_tensor(9, 7, DType::f64, -1, 1, 5), y1(9, 3, DType::f64), y2(9, 3, DType::f64);
    net->inference(Stream::cpu(), x.view(), y1.view(), p.data());
    again->inference(Stream::cpu(), x.view(), y2.view(), p.data());
    EXPECT_EQ(y1.to_double_vector(), y2.to_double_vector());
}

TEST(PortableMLP, ReferenceInHalfRoundsActivationsLikeANaiveKernel) {
    // MlpReference<half> is the "naive fp16" model the fused kernels are compared with: every stored
    // activation is a half. With identity activations it must equal the fp64 network applied with
    // rounding after each layer; its error against fp64 is of the order of fp16 epsilon.
    MlpLayout l;
    l.n_input_dims = 4, l.n_output_dims = 2, l.padded_input_dims = 16, l.padded_output_dims = 16;
    l.width = 16, l.n_hidden_layers = 2, l.activation = Activation::Tanh, l.output_activation = Activation::None;
    std::vector<half> ph(l.n_params());
    std::vector<double> pd(l.n_params());
    Pcg32 rng(5);
    for (size_t i = 0; i < ph.size(); ++i) {
        ph[i] = half(rng.next_float() - 0.5f);
        pd[i] = static_cast<float>(ph[i]);
    }
    Tensor x = random_tensor(33, 4, DType::f32, -1, 1, 8), xd(33, 4, DType::f64), yh(33, 2, DType::f16), yd(33, 2, DType::f64);
    convert(Stream::cpu(), x.view(), xd.view());
    MlpReference<half>(l).forward(x.view(), yh.view(), ph.data(), false);
    MlpReference<double>(l).forward(xd.view(), yd.view(), pd.data(), false);
    const auto a = yh.to_double_vector(), b = yd.to_double_vector();
    // Worst-case forward error bound: inputs (|x| <= 1) are rounded (eps/2), every layer sums 16
    // terms with |w| <= 0.5 and |tanh'| <= 1, then rounds its output (|tanh| <= 1: eps/2):
    // e_0 = eps/2, e_{l+1} = 16 * 0.5 * e_l + eps/2, and the output layer (no rounding inside the
    // reference's fp32 accumulation beyond the final store) adds eps/2 * |y|.
    const double eps = dtype_epsilon(DType::f16);
    double e = eps / 2;
    for (int layer = 0; layer < 2; ++layer) e = 16 * 0.5 * e + eps / 2;
    e = 16 * 0.5 * e;
    test::expect_close(a, b, e, eps / 2, "half vs fp64 MLP");
    EXPECT_GT(test::rel_l2(a, b), 0.0);  // it really did round
}

TEST(PortableMLP, BadConfigsRaiseTypedErrors) {
    auto expect_config_error = [](const json& cfg, const std::string& needle, uint32_t n_out = 1) {
        try {
            create_network(3, n_out, cfg);
            ADD_FAILURE() << "no error for " << cfg.dump();
        } catch (const ConfigError& e) {
            EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
        }
    };
    expect_config_error({{"otype", "FooMLP"}}, "PortableMLP");
    expect_config_error({{"otype", "PortableMLP"}, {"n_neurons", 0}}, "n_neurons");
    expect_config_error({{"otype", "PortableMLP"}, {"n_neurons", "64"}}, "n_neurons");
    expect_config_error({{"otype", "PortableMLP"}, {"n_neurons", 1 << 20}}, "n_neurons");
    expect_config_error({{"otype", "PortableMLP"}, {"n_hidden_layers", -1}}, "n_hidden_layers");
    expect_config_error({{"otype", "PortableMLP"}, {"activation", "Gelu"}}, "ReLU");
    expect_config_error({{"otype", "PortableMLP"}, {"bias", 1}}, "bias");
    expect_config_error({{"otype", 5}}, "otype");
    expect_config_error(json::array(), "object");
    expect_config_error({{"otype", "PortableMLP"}}, "n_output_dims", 0);
    EXPECT_THROW(create_network(3, 1, {{"otype", "PortableMLP"}, {"dtype", "int8"}}), DTypeError);
    EXPECT_THROW(create_network(3, 1, {{"otype", "PortableMLP"}, {"dtype", "float16"}}), DTypeError);
    EXPECT_THROW(create_network(3, 1, {{"otype", "PortableMLP"}, {"output_dtype", "bfloat16"}}), DTypeError);
}

TEST(PortableMLP, BadCallsRaiseTypedErrors) {
    auto net = create_network(3, 2, mlp_config(8, 1, "ReLU", "None", "float32"));
    std::vector<float> p(net->n_params());
    net->init_params(1, p.data());
    const Stream cpu;
    Tensor x(4, 3, DType::f32), y(4, 2, DType::f32);
    fill(cpu, x.view(), 0.5);
    EXPECT_THROW(net->inference(cpu, Tensor(4, 4, DType::f32).view(), y.view(), p.data()), ShapeError);
    EXPECT_THROW(net->inference(cpu, Tensor(4, 3, DType::f16).view(), y.view(), p.data()), DTypeError);
    EXPECT_THROW(net->inference(cpu, x.view(), Tensor(5, 2, DType::f32).view(), p.data()), ShapeError);
    EXPECT_THROW(net->inference(cpu, x.view(), Tensor(4, 2, DType::f64).view(), p.data()), DTypeError);
    EXPECT_THROW(net->inference(cpu, x.view(), y.view(), nullptr), ShapeError);
    View strided = x.view();
    strided.cols = 3, strided.stride = 2;
    EXPECT_THROW(net->inference(cpu, strided, y.view(), p.data()), ShapeError);
    View on_gpu = x.view();
    on_gpu.device = Device::gpu(0);
    EXPECT_THROW(net->inference(cpu, on_gpu, y.view(), p.data()), Error);  // stream/device mismatch or no backend
    EXPECT_THROW(net->inference(Stream::gpu(nullptr, 0), on_gpu, y.view(), p.data()), Error);

    auto ctx = net->forward(cpu, x.view(), y.view(), p.data(), true);
    Tensor dx_wrong(4, 3, DType::f64);
    View dxw = dx_wrong.view();
    EXPECT_THROW(net->backward(cpu, *ctx, x.view(), y.view(), y.view(), &dxw, nullptr, p.data(), GradMode::overwrite), DTypeError);
    EmptyContext foreign;
    EXPECT_THROW(net->backward(cpu, foreign, x.view(), y.view(), y.view(), nullptr, nullptr, p.data(), GradMode::overwrite), Error);
    Tensor v(4, 4, DType::f32);  // the probe dL'/d(dL/dinput) has the input's shape
    EXPECT_THROW(net->backward_backward_input(cpu, *ctx, x.view(), v.view(), y.view(), nullptr, nullptr, nullptr, p.data(),
                                              GradMode::overwrite),
                 ShapeError);
}
