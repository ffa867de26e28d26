// Second derivatives of the MLPs on the GPU (backward_backward_input of PortableMLP and BlasLtMLP)
// against their own CPU backend, which tests/cpp/test_mlp_second_order.cpp checks against fp64 finite
// differences: the shared case list in every precision within the documented bound (mlp_gpu_bounds.h),
// accumulation, replay from a captured graph, FullyFusedMLP's refusal, and a HashGrid + MLP model.
#include "mlp_gpu_cases.h"
#include "mlp_second_order.h"

#include <tuple>

using namespace tnn;
using namespace tnn::test;

namespace {

// The backends with a GPU second-order pass: every GPU backend but FullyFusedMLP (PortableMLP float32,
// BlasLtMLP in every precision).
const std::vector<MlpBackend>& second_order_backends() {
    static const std::vector<MlpBackend> b = [] {
        std::vector<MlpBackend> v;
        for (const MlpBackend& x : gpu_network_backends())
            if (x.config["otype"] != "FullyFusedMLP") v.push_back(x);
        return v;
    }();
    return b;
}

bool usable_on_gpu(const MlpBackend& b, std::string& why) {
    why = gpu_unusable_reason(b);
    return why.empty();
}

using Param = std::tuple<MlpBackend, MlpCase>;
class MlpSecondOrderGpuVsCpu : public ::testing::TestWithParam<Param> {};

TEST_P(MlpSecondOrderGpuVsCpu, AgreeWithinTheDocumentedBound) {
    const auto& [b, c] = GetParam();
    TNN_SKIP_WITHOUT_GPU();
    std::string why;
    if (!usable_on_gpu(b, why)) GTEST_SKIP() << why;
    const auto net = case_network(b, c, why);
    if (!net) GTEST_SKIP() << why;
    ASSERT_TRUE(net->supports_backward_backward());
    const MlpData d = make_data(c, *net, 4321);
    const Tensor v = make_probe(c, d, 8765);
    TestStream stream(Device::gpu(0));
    const MlpSecondOrderResult got = run_second_order(*net, d, v, stream);
    if (c.batch == 0) {
        for (double x : got.dL_dparams.to_double_vector()) ASSERT_EQ(x, 0.0) << "an empty batch gives a zero gradient";
        return;
    }
    const MlpSecondOrderResult cpu = run_second_order(*net, d, v, Stream::cpu());
    const MlpSecondOrderResult ref = run_second_order_fp64(*net, d, v);
    const MlpSecondOrderTerms n = mlp_second_order_terms(net->layout(), c.batch);
    // TF32: the GPU's own error is fp16-sized (10-bit operands), the CPU's fp32-sized (as first order).
    const double eps = b.tf32() ? dtype_epsilon(DType::f16) : dtype_epsilon(net->param_dtype());
    if (b.tf32()) {
        expect_within_precision(got.dL_ddLdoutput, ref.dL_ddLdoutput, eps, n.doutput, c.name + " tf32 dL'/d(dL/dy)");
        expect_within_precision(got.dL_dinput, ref.dL_dinput, eps, n.input, c.name + " tf32 dL'/dinput");
        expect_within_precision(got.dL_dparams, ref.dL_dparams, eps, n.params, c.name + " tf32 dL'/dparams");
        return;
    }
    expect_gpu_no_worse_than_cpu(got.dL_ddLdoutput, cpu.dL_ddLdoutput, ref.dL_ddLdoutput, eps, n.doutput,
                                 whole(ref.dL_ddLdoutput), c.name + " dL'/d(dL/doutput)");
    expect_gpu_no_worse_than_cpu(got.dL_dinput, cpu.dL_dinput, ref.dL_dinput, eps, n.input, whole(ref.dL_dinput),
                                 c.name + " dL'/dinput");
    expect_gpu_no_worse_than_cpu(got.dL_dparams, cpu.dL_dparams, ref.dL_dparams, eps, n.params,
                                 mlp_parameter_blocks(net->layout()), c.name + " dL'/dparams");
}

INSTANTIATE_TEST_SUITE_P(Cases, MlpSecondOrderGpuVsCpu,
                         ::testing::Combine(::testing::ValuesIn(second_order_backends()),
                                            ::testing::ValuesIn(mlp_cases())),
                         [](const ::testing::TestParamInfo<Param>& info) {
                             return std::get<0>(info.param).label + "_" + std::get<1>(info.param).name;
                         });

// Accumulation: dL'/dparams = round_T(old + sum) on both devices, against the fp64 sum plus the old
// value (0.5, exact) within the bound above.
TEST(MlpSecondOrderGpu, AccumulateAddsToTheOldGradient) {
    TNN_SKIP_WITHOUT_GPU();
    const MlpCase c{"acc", 5, 3, 32, 2, "Tanh", "Sigmoid", true, 1100};
    for (const MlpBackend& b : second_order_backends()) {
        SCOPED_TRACE(b.label);
        std::string why;
        if (!usable_on_gpu(b, why) || b.tf32()) continue;
        const auto net = create_network(c.n_in, c.n_out, config_for(b, c));
        const MlpData d = make_data(c, *net, 99);
        const Tensor v = make_probe(c, d, 98);
        TestStream stream(Device::gpu(0));
        const MlpSecondOrderResult got = run_second_order(*net, d, v, stream, GradMode::accumulate, 0.5);
        const MlpSecondOrderResult cpu = run_second_order(*net, d, v, Stream::cpu(), GradMode::accumulate, 0.5);
        std::vector<double> r = run_second_order_fp64(*net, d, v).dL_dparams.to_double_vector();
        for (double& x : r) x += 0.5;
        const Tensor ref = host_tensor(r, 1, static_cast<int64_t>(r.size()), DType::f64);
        expect_gpu_no_worse_than_cpu(got.dL_dparams, cpu.dL_dparams, ref, dtype_epsilon(net->param_dtype()),
                                     mlp_second_order_terms(net->layout(), c.batch).params,
                                     mlp_parameter_blocks(net->layout()), "accumulated dL'/dparams");
    }
}

#ifdef TNN_WITH_GPU
// No host synchronisation, nothing but stream-ordered work: forward + backward_backward_input replays
// from a graph captured after a warm-up call (plans and pool memory exist) and gives the eager bits.
TEST(MlpSecondOrderGpu, ReplaysFromACapturedGraph) {
    TNN_SKIP_WITHOUT_GPU();
    const MlpCase c{"graph", 4, 2, 32, 2, "SiLU", "Softplus", true, 300};
    for (const MlpBackend& b : second_order_backends()) {
        SCOPED_TRACE(b.label);
        std::string why;
        if (!usable_on_gpu(b, why)) continue;
        const auto net = create_network(c.n_in, c.n_out, config_for(b, c));
        const MlpData d = make_data(c, *net, 8);
        const Tensor v = make_probe(c, d, 9);
        TestStream stream(Device::gpu(0));
        const MlpSecondOrderResult want = run_second_order(*net, d, v, stream);  // also the warm-up

        const Device gpu = Device::gpu(0);
        const Tensor x = d.x.to(gpu), p = d.params.to(gpu), g = d.dL_dy.to(gpu), vv = v.to(gpu);
        Tensor y(c.batch, c.n_out, net->output_dtype(), gpu), du(c.batch, c.n_out, net->output_dtype(), gpu);
        Tensor dx(c.batch, c.n_in, d.x.dtype(), gpu), dp(1, static_cast<int64_t>(net->n_params()), net->param_dtype(), gpu);
        TestGraph graph(stream);
        try {
            auto ctx = net->forward(stream, x.view(), y.view(), p.data(), true);
            View du_view = du.view(), dx_view = dx.view();
            net->backward_backward_input(stream, *ctx, x.view(), vv.view(), g.view(), &du_view, &dx_view, dp.data(),
                                         p.data(), GradMode::overwrite);
        } catch (const std::exception& e) {
            FAIL() << "a warmed-up second-order pass must be capturable: " << e.what();
        }
        ASSERT_TRUE(graph.end());
        for (int replay = 0; replay < 2; ++replay) {
            fill(stream, du.view(), 0.0);
            fill(stream, dx.view(), 0.0);
            fill(stream, dp.view(), 0.0);
            ASSERT_TRUE(graph.launch());
            stream.stream().synchronize();
            EXPECT_TRUE(same_bits(du.to(Device::cpu()), want.dL_ddLdoutput)) << "graph replay dL'/d(dL/dy)";
            EXPECT_TRUE(same_bits(dx.to(Device::cpu()), want.dL_dinput)) << "graph replay dL'/dinput";
            EXPECT_TRUE(same_bits(dp.to(Device::cpu()), want.dL_dparams)) << "graph replay dL'/dparams";
        }
    }
}
#endif  // TNN_WITH_GPU

// FullyFusedMLP has no fused second-order kernel yet: its GPU call is refused, naming the backends that
// have one, and never handed to another backend (its CPU backend has it: tests/cpp).
TEST(MlpSecondOrderGpu, FullyFusedMlpRefusesNamingTheAlternatives) {
    TNN_SKIP_WITHOUT_GPU();
    const MlpCase c{"ffm", 3, 2, 32, 2, "ReLU", "None", false, 64};
    const auto net = create_network(c.n_in, c.n_out, config_for(mlp_backends()[0], c));
    ASSERT_EQ(net->name(), "FullyFusedMLP");
    const MlpData d = make_data(c, *net, 1);
    const Tensor v = make_probe(c, d, 2);
    TestStream stream(Device::gpu(0));
    try {
        run_second_order(*net, d, v, stream);
        ADD_FAILURE() << "FullyFusedMLP's GPU second-order pass must be refused";
    } catch (const UnsupportedError& e) {
        const std::string m = e.what();
        EXPECT_NE(m.find("FullyFusedMLP"), std::string::npos) << m;
        EXPECT_NE(m.find("BlasLtMLP"), std::string::npos) << m;
        EXPECT_NE(m.find("PortableMLP"), std::string::npos) << m;
    }
}

// HashGrid + MLP through NetworkWithInputEncoding on the GPU (grid and network second derivatives
// chained) against the same model on the CPU, both against the fp64 model of the same parameters.
// The error model adds the grid's chain to the network's: per output element, n_levels levels of
// 2^d corner terms with F features each.
TEST(MlpSecondOrderGpu, HashGridModelAgreesWithTheCpu) {
    TNN_SKIP_WITHOUT_GPU();
    const json grid = {{"otype", "HashGrid"}, {"n_levels", 4},       {"n_features_per_level", 2},
                       {"log2_hashmap_size", 12}, {"base_resolution", 4}, {"per_level_scale", 1.5}};
    const int64_t rows = 500;
    for (const MlpBackend& b : second_order_backends()) {
        SCOPED_TRACE(b.label);
        std::string why;
        if (!usable_on_gpu(b, why) || b.tf32()) continue;
        json net_cfg = b.config;
        net_cfg["n_neurons"] = 32;
        net_cfg["n_hidden_layers"] = 2;
        net_cfg["activation"] = "Softplus";
        auto m = create_network_with_input_encoding(3, 1, grid, net_cfg);
        json f64_cfg = net_cfg;
        f64_cfg["otype"] = "PortableMLP";
        f64_cfg["dtype"] = "float64";
        f64_cfg.erase("tf32");
        auto m64 = create_network_with_input_encoding(3, 1, grid, f64_cfg);
        const DType t = m->param_dtype();
        const auto pv = random_vector(m->n_params(), -0.5, 0.5, 3);
        MlpData d{random_tensor(rows, 3, DType::f32, 0.02, 0.98, 4), host_tensor(pv, 1, int64_t(pv.size()), t),
                  random_tensor(rows, 1, m->output_dtype(), -1, 1, 5)};
        const Tensor v = random_tensor(rows, 3, DType::f32, -1, 1, 6);
        TestStream stream(Device::gpu(0));
        const MlpSecondOrderResult got = run_second_order(*m, d, v, stream);
        const MlpSecondOrderResult cpu = run_second_order(*m, d, v, Stream::cpu());
        const MlpSecondOrderResult ref =
            run_second_order(*m64, MlpData{widen(d.x), widen(d.params), widen(d.dL_dy)}, widen(v), Stream::cpu());
        MlpSecondOrderTerms n = mlp_second_order_terms(m->network().layout(), rows);
        const double grid_terms = 4 * 8 * 2;
        n.doutput += grid_terms, n.input += grid_terms, n.params += grid_terms;
        const double eps = dtype_epsilon(t);
        expect_gpu_no_worse_than_cpu(got.dL_ddLdoutput, cpu.dL_ddLdoutput, ref.dL_ddLdoutput, eps, n.doutput,
                                     whole(ref.dL_ddLdoutput), "HashGrid model dL'/d(dL/dy)");
        expect_gpu_no_worse_than_cpu(got.dL_dinput, cpu.dL_dinput, ref.dL_dinput, eps, n.input, whole(ref.dL_dinput),
                                     "HashGrid model dL'/dinput");
        const size_t n_net = m->network().n_params();
        std::vector<std::pair<size_t, size_t>> blocks = mlp_parameter_blocks(m->network().layout());
        blocks.push_back({n_net, m->n_params()});
        expect_gpu_no_worse_than_cpu(got.dL_dparams, cpu.dL_dparams, ref.dL_dparams, eps, n.params, blocks,
                                     "HashGrid model dL'/dparams");
    }
}

}  // namespace
