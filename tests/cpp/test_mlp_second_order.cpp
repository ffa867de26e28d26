// Second derivatives of the MLPs on the CPU (backward_backward_input, maths in
// src/networks/portable_mlp.cpp): fp64 finite differences of the first-order backward for every
// activation as hidden and output activation, depths 0 to 3, with and without biases, all three outputs
// and both gradient modes; optional outputs; the CPU backends of BlasLtMLP and FullyFusedMLP in their
// precisions against the fp64 reference; HashGrid + PortableMLP chained through NetworkWithInputEncoding.
#include "mlp_second_order.h"
#include "networks/portable_mlp.h"

#include <cmath>
#include <tuple>

using namespace tnn;
using namespace tnn::test;

namespace {

const std::vector<std::string>& all_activations() {
    static const std::vector<std::string> a = {"None", "ReLU",     "LeakyReLU", "Exponential", "Sine",
                                               "Sigmoid", "Squareplus", "Softplus", "Tanh",    "SiLU"};
    return a;
}

json f64_network(const std::string& act, const std::string& out_act, uint32_t width, uint32_t hidden, bool bias) {
    json j = {{"otype", "PortableMLP"},  {"dtype", "float64"},        {"n_neurons", width},
              {"n_hidden_layers", hidden}, {"activation", act}, {"output_activation", out_act}};
    if (bias) j["bias"] = true;
    return j;
}

// Parameters of O(1) functions: Xavier weights at half scale (width 8 with tcnn's 13 padded input lanes
// of 1.0 keeps |z| around 1 even after Exponential layers), biases in [-0.5, 0.5).
std::vector<double> moderate_params(const Network& net, uint64_t seed) {
    std::vector<double> p = init_params_f64(net, seed);
    for (size_t i = 0; i < net.n_matrix_params(); ++i) p[i] *= 0.5;
    const auto b = random_vector(net.n_params() - net.n_matrix_params(), -0.5, 0.5, seed + 1);
    std::copy(b.begin(), b.end(), p.begin() + static_cast<std::ptrdiff_t>(net.n_matrix_params()));
    return p;
}

struct FdCase {
    std::string act, out_act;
    uint32_t hidden;
    bool bias;
};

std::ostream& operator<<(std::ostream& os, const FdCase& c) {
    return os << c.act << "_" << c.out_act << "_d" << c.hidden << (c.bias ? "_bias" : "");
}

// Every activation as the hidden activation at depths 1 to 3, with and without biases; the output
// activation runs through the list too (shifted per depth and bias, so that each activation is an
// output activation at several depths); plus single linear layers (depth 0) with each output activation.
std::vector<FdCase> fd_cases() {
    const auto& a = all_activations();
    const size_t n = a.size();
    std::vector<FdCase> v;
    for (size_t i = 0; i < n; ++i)
        for (uint32_t depth = 1; depth <= 3; ++depth)
            for (bool bias : {false, true}) v.push_back({a[i], a[(i + 2 * depth + (bias ? 1 : 0)) % n], depth, bias});
    for (size_t i = 0; i < n; ++i) v.push_back({"ReLU", a[i], 0, i % 2 == 1});
    return v;
}

class MlpSecondOrderFd : public ::testing::TestWithParam<FdCase> {};

// check_second_derivatives (test_util.h): L' = <v, dL/dx(x, p, u)> with random u, v; dL'/du, dL'/dparams
// and dL'/dx against central differences of the fp64 backward (h = 1e-6, rtol 1e-6: its reasoning).
// Inputs in [-1, 1): with these parameters no pre-activation lies within 1e-6 of ReLU's kink (the
// check would fail visibly if one did).
TEST_P(MlpSecondOrderFd, MatchesFiniteDifferencesOfTheBackward) {
    const FdCase& c = GetParam();
    const auto net = create_network(3, 2, f64_network(c.act, c.out_act, 8, c.hidden, c.bias));
    ASSERT_TRUE(net->supports_backward_backward());
    check_second_derivatives(*net, random_tensor(4, 3, DType::f64, -1, 1, 11), moderate_params(*net, 5), 23);
}

INSTANTIATE_TEST_SUITE_P(EveryActivation, MlpSecondOrderFd, ::testing::ValuesIn(fd_cases()),
                         [](const ::testing::TestParamInfo<FdCase>& info) {
                             std::ostringstream os;
                             os << info.param;
                             return os.str();
                         });

// Several 64-row blocks and a tail, outputs wider than one lane: the per-block passes and the ordered
// reduction over blocks.
TEST(MlpSecondOrder, SeveralBlocksMatchFiniteDifferences) {
    const auto net = create_network(5, 17, f64_network("SiLU", "Tanh", 8, 1, true));
    check_second_derivatives(*net, random_tensor(70, 5, DType::f64, -1, 1, 3), moderate_params(*net, 9), 4);
}

// With piecewise-linear activations the second-order terms vanish: dL'/dx = 0 and dL'/db = 0 exactly,
// while dL'/dW = sum d adot^T does not.
TEST(MlpSecondOrder, PiecewiseLinearNetworksHaveNoInputSecondDerivative) {
    for (const std::string act : {"None", "ReLU", "LeakyReLU"}) {
        SCOPED_TRACE(act);
        const auto net = create_network(3, 2, f64_network(act, "None", 8, 2, true));
        const MlpCase c{"pl", 3, 2, 8, 2, act, "None", true, 9, false, true};
        MlpData d = make_data(c, *net, 3);
        const auto p = moderate_params(*net, 2);
        std::copy(p.begin(), p.end(), d.params.ptr<double>());
        const MlpSecondOrderResult r = run_second_order(*net, d, make_probe(c, d, 4), Stream::cpu());
        for (double x : r.dL_dinput.to_double_vector()) EXPECT_EQ(x, 0.0);
        const auto dp = r.dL_dparams.to_double_vector();
        for (size_t i = net->n_matrix_params(); i < dp.size(); ++i) EXPECT_EQ(dp[i], 0.0) << "bias " << i;
        double s = 0;
        for (size_t i = 0; i < net->n_matrix_params(); ++i) s += std::fabs(dp[i]);
        EXPECT_GT(s, 0.0);
    }
}

// Accumulate adds the overwrite result to the old values, with one rounding of the sum to the param
// dtype: exactly old + overwritten in float64 and float32 (the overwritten value is the acc_t<T> sum
// itself there).
TEST(MlpSecondOrder, AccumulateAddsToTheOldGradient) {
    const MlpCase c{"acc", 4, 3, 16, 2, "Softplus", "Sigmoid", true, 70, false, true};
    for (const std::string dtype : {"float64", "float32"}) {
        SCOPED_TRACE(dtype);
        json cfg = config_for({"PortableMLP", {{"otype", "PortableMLP"}, {"dtype", dtype}}}, c);
        const auto net = create_network(c.n_in, c.n_out, cfg);
        const MlpData d = make_data(c, *net, 8);
        const Tensor v = make_probe(c, d, 9);
        const MlpSecondOrderResult over = run_second_order(*net, d, v, Stream::cpu());
        const MlpSecondOrderResult acc = run_second_order(*net, d, v, Stream::cpu(), GradMode::accumulate, 0.5);
        const auto o = over.dL_dparams.to_double_vector(), a = acc.dL_dparams.to_double_vector();
        for (size_t i = 0; i < o.size(); ++i) {
            const double want = dtype == "float64" ? 0.5 + o[i] : double(float(0.5f + float(o[i])));
            ASSERT_EQ(a[i], want) << i;
        }
        // The other outputs do not depend on the mode.
        EXPECT_TRUE(same_bits(over.dL_dinput, acc.dL_dinput));
        EXPECT_TRUE(same_bits(over.dL_ddLdoutput, acc.dL_ddLdoutput));
    }
}

// Each output is optional; the ones requested do not change with the others.
TEST(MlpSecondOrder, OptionalOutputs) {
    const MlpCase c{"opt", 3, 2, 16, 2, "Tanh", "Softplus", true, 20, false, true};
    const auto net = create_network(c.n_in, c.n_out, f64_network(c.act, c.out_act, c.width, c.hidden, c.bias));
    const MlpData d = make_data(c, *net, 1);
    const Tensor v = make_probe(c, d, 2);
    const MlpSecondOrderResult all = run_second_order(*net, d, v, Stream::cpu());
    const Stream cpu = Stream::cpu();
    Tensor y(c.batch, c.n_out, DType::f64);
    auto ctx = net->forward(cpu, d.x.view(), y.view(), d.params.data(), true);
    for (int mask = 0; mask < 8; ++mask) {
        SCOPED_TRACE(mask);
        Tensor du(c.batch, c.n_out, DType::f64), dx(c.batch, c.n_in, DType::f64);
        Tensor dp(1, static_cast<int64_t>(net->n_params()), DType::f64);
        View du_v = du.view(), dx_v = dx.view();
        net->backward_backward_input(cpu, *ctx, d.x.view(), v.view(), d.dL_dy.view(), mask & 1 ? &du_v : nullptr,
                                     mask & 2 ? &dx_v : nullptr, mask & 4 ? dp.data() : nullptr, d.params.data(),
                                     GradMode::overwrite);
        if (mask & 1) EXPECT_TRUE(same_bits(du, all.dL_ddLdoutput));
        if (mask & 2) EXPECT_TRUE(same_bits(dx, all.dL_dinput));
        if (mask & 4) EXPECT_TRUE(same_bits(dp, all.dL_dparams));
    }
}

// Contexts from another module, or of another batch size, are refused; every network otype supports
// second derivatives on the CPU.
TEST(MlpSecondOrder, ContextErrorsAndSupport) {
    const MlpCase c{"c", 3, 2, 16, 1, "Tanh", "None", false, 8};
    std::vector<MlpBackend> backends = mlp_backends();
    backends.push_back({"PortableMLP_float32", {{"otype", "PortableMLP"}, {"dtype", "float32"}}});
    for (const MlpBackend& b : backends) {
        SCOPED_TRACE(b.label);
        const auto net = create_network(c.n_in, c.n_out, config_for(b, c));
        EXPECT_TRUE(net->supports_backward_backward());
        const MlpData d = make_data(c, *net, 1);
        const Tensor v = make_probe(c, d, 2);
        const Stream cpu = Stream::cpu();
        Tensor y(8, 2, net->output_dtype());
        EmptyContext foreign;
        EXPECT_THROW(net->backward_backward_input(cpu, foreign, d.x.view(), v.view(), d.dL_dy.view(), nullptr, nullptr,
                                                  nullptr, d.params.data(), GradMode::overwrite),
                     Error);
        auto ctx = net->forward(cpu, d.x.view().rows_slice(0, 4), y.view().rows_slice(0, 4), d.params.data(), true);
        EXPECT_THROW(net->backward_backward_input(cpu, *ctx, d.x.view(), v.view(), d.dL_dy.view(), nullptr, nullptr,
                                                  nullptr, d.params.data(), GradMode::overwrite),
                     ShapeError);
    }
}

// ---- The CPU backends in their precisions against the fp64 reference (the shared case list).

using Param = std::tuple<MlpBackend, MlpCase>;
class CpuNetworkBackendSecondOrder : public ::testing::TestWithParam<Param> {};

TEST_P(CpuNetworkBackendSecondOrder, MatchesFp64Reference) {
    const auto& [b, c] = GetParam();
    std::string why;
    const auto net = case_network(b, c, why);
    if (!net) GTEST_SKIP() << why;
    const MlpData d = make_data(c, *net, 1234);
    const Tensor v = make_probe(c, d, 77);
    const MlpSecondOrderResult got = run_second_order(*net, d, v, Stream::cpu());
    if (c.batch == 0) {
        for (double x : got.dL_dparams.to_double_vector()) ASSERT_EQ(x, 0.0) << "an empty batch gives a zero gradient";
        return;
    }
    const MlpSecondOrderResult ref = run_second_order_fp64(*net, d, v);
    const MlpSecondOrderTerms n = mlp_second_order_terms(net->layout(), c.batch);
    const double eps = dtype_epsilon(net->param_dtype());
    expect_within_precision(got.dL_ddLdoutput, ref.dL_ddLdoutput, eps, n.doutput, c.name + " dL'/d(dL/doutput)");
    expect_within_precision(got.dL_dinput, ref.dL_dinput, eps, n.input, c.name + " dL'/dinput");
    expect_within_precision(got.dL_dparams, ref.dL_dparams, eps, n.params, c.name + " dL'/dparams");
}

INSTANTIATE_TEST_SUITE_P(Cases, CpuNetworkBackendSecondOrder,
                         ::testing::Combine(::testing::ValuesIn(mlp_backends()), ::testing::ValuesIn(mlp_cases())),
                         [](const ::testing::TestParamInfo<Param>& info) {
                             return std::get<0>(info.param).label + "_" + std::get<1>(info.param).name;
                         });

// ---- NetworkWithInputEncoding chains the grid's and the network's second derivatives.

// Inputs at least 1e-3 (in cell units) away from every level's cell borders, where the grid's input
// gradient jumps (h = 1e-6 of the finite differences stays inside a cell).
Tensor inside_cells(uint32_t dims, uint32_t n_levels, uint32_t base, double scale_per_level, int64_t rows,
                    uint64_t seed) {
    Tensor out(rows, dims, DType::f64);
    const auto cand = random_vector(static_cast<size_t>(dims) * 4000, 0.05, 0.95, seed);
    int64_t found = 0;
    for (size_t i = 0; i + dims <= cand.size() && found < rows; i += dims) {
        bool ok = true;
        for (uint32_t l = 0; l < n_levels && ok; ++l) {
            const double s = std::exp2(l * std::log2(scale_per_level)) * base - 1;
            for (uint32_t k = 0; k < dims; ++k) {
                const double pos = s * cand[i + k] + 0.5, frac = pos - std::floor(pos);
                if (frac < 1e-3 || frac > 1 - 1e-3) ok = false;
            }
        }
        if (!ok) continue;
        for (uint32_t k = 0; k < dims; ++k) out.ptr<double>()[found * dims + k] = cand[i + k];
        ++found;
    }
    EXPECT_EQ(found, rows);
    return out;
}

TEST(MlpSecondOrder, HashGridWithPortableMlpMatchesFiniteDifferences) {
    const auto names = encoding_names();
    if (!std::count(names.begin(), names.end(), "HashGrid")) GTEST_SKIP() << "no HashGrid";
    // Two levels, a hash table small enough that the finer level hashes; Smoothstep gives the grid its
    // own second derivative along each axis, so both parts contribute to every output.
    const json grid = {{"otype", "HashGrid"}, {"n_levels", 2}, {"n_features_per_level", 2}, {"log2_hashmap_size", 5},
                       {"base_resolution", 3}, {"per_level_scale", 2.0}, {"interpolation", "Smoothstep"}};
    for (const std::string act : {"Softplus", "ReLU"}) {
        SCOPED_TRACE(act);
        auto m = create_network_with_input_encoding(3, 1, grid, f64_network(act, "None", 8, 2, true));
        ASSERT_TRUE(m->supports_backward_backward());
        // The grid's parameters start at +-1e-4; larger random values make every term visible.
        check_second_derivatives(*m, inside_cells(3, 2, 3, 2.0, 3, 5), random_vector(m->n_params(), -0.5, 0.5, 2), 7);
    }
}

}  // namespace

// Where second derivatives run is known before any work: FullyFusedMLP has them on the CPU only, and a
// model that holds it says so for the GPU (the public method refuses there before the encoding's pass).
TEST(MlpSecondOrder, RefusalIsPerDeviceAndComposed) {
    const json ffm = {{"otype", "FullyFusedMLP"}, {"n_neurons", 16}, {"n_hidden_layers", 1}};
    const auto net = create_network(16, 4, ffm);
    EXPECT_TRUE(net->supports_backward_backward_on(Device::cpu()));
    EXPECT_FALSE(net->supports_backward_backward_on(Device::gpu(0)));
    EXPECT_NE(net->backward_backward_refusal(Device::gpu(0)).find("BlasLtMLP"), std::string::npos);
    const json grid = {{"otype", "HashGrid"}, {"n_levels", 2}, {"log2_hashmap_size", 8}};
    const auto model = create_network_with_input_encoding(3, 4, grid, ffm);
    EXPECT_TRUE(model->supports_backward_backward_on(Device::cpu()));
    EXPECT_EQ(model->backward_backward_refusal(Device::gpu(0)), net->backward_backward_refusal(Device::gpu(0)));
    const auto portable = create_network_with_input_encoding(
        3, 4, grid, {{"otype", "PortableMLP"}, {"n_neurons", 16}, {"n_hidden_layers", 1}});
    EXPECT_TRUE(portable->supports_backward_backward_on(Device::gpu(0)));
}
