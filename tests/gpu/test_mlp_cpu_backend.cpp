// FullyFusedMLP and BlasLtMLP on the GPU against their own CPU backend (the same module called with CPU
// tensors): the shared case list (tests/mlp_backend_cases.h) in every precision, so that a tcnn config
// computes the same function on both devices within the documented bound (docs/fully_fused_mlp.md,
// docs/blaslt_mlp.md). Each side is also held to its own error against the fp64 reference.
#include "mlp_backend_cases.h"
#include "mlp_gpu_bounds.h"
#include "networks/blaslt_mlp.h"

#include <tuple>

using namespace tnn;
using namespace tnn::test;

namespace {

using Param = std::tuple<MlpBackend, MlpCase>;
class MlpGpuVsCpuBackend : public ::testing::TestWithParam<Param> {};

TEST_P(MlpGpuVsCpuBackend, AgreeWithinTheDocumentedBound) {
    const auto& [b, c] = GetParam();
    TNN_SKIP_WITHOUT_GPU();
    if (b.config["otype"] == "BlasLtMLP" && !blaslt_mlp::available())
        GTEST_SKIP() << blaslt_mlp::kUnavailableMessage;
    std::string why;
    const auto net = case_network(b, c, why);
    if (!net) GTEST_SKIP() << why;
    const MlpData d = make_data(c, *net, 4321);
    TestStream stream(Device::gpu(0));
    const MlpResult got = run_module(*net, d, stream);
    const MlpResult cpu = run_module(*net, d, Stream::cpu());
    EXPECT_TRUE(same_bits(got.y, got.y_inference)) << "GPU forward and inference must give the same bits";
    if (c.batch == 0) {
        for (double v : got.dL_dparams.to_double_vector()) ASSERT_EQ(v, 0.0) << "an empty batch gives a zero gradient";
        return;
    }
    const MlpResult ref = run_fp64(*net, d);
    const MlpTermCounts n = mlp_term_counts(net->layout(), c.batch);
    // TF32 keeps 10 mantissa bits of the GEMM operands, as fp16 does, while the CPU computes in fp32:
    // the GPU's own error is fp16-sized, the CPU's fp32-sized.
    const double eps = b.tf32() ? dtype_epsilon(DType::f16) : dtype_epsilon(net->param_dtype());
    if (b.tf32()) {
        expect_within_precision(got.y, ref.y, eps, n.forward, c.name + " tf32 output");
        expect_within_precision(got.dL_dinput, ref.dL_dinput, eps, n.input_grad, c.name + " tf32 dL/dinput");
        expect_within_precision(got.dL_dparams, ref.dL_dparams, eps, n.param_grad, c.name + " tf32 dL/dparams");
        return;
    }
    expect_gpu_no_worse_than_cpu(got.y, cpu.y, ref.y, eps, n.forward, whole(ref.y), c.name + " output");
    expect_gpu_no_worse_than_cpu(got.dL_dinput, cpu.dL_dinput, ref.dL_dinput, eps, n.input_grad,
                                 whole(ref.dL_dinput), c.name + " dL/dinput");
    expect_gpu_no_worse_than_cpu(got.dL_dparams, cpu.dL_dparams, ref.dL_dparams, eps, n.param_grad,
                                 mlp_parameter_blocks(net->layout()), c.name + " dL/dparams");
}

std::string param_name(const ::testing::TestParamInfo<Param>& info) {
    return std::get<0>(info.param).label + "_" + std::get<1>(info.param).name;
}

INSTANTIATE_TEST_SUITE_P(Cases, MlpGpuVsCpuBackend,
                         ::testing::Combine(::testing::ValuesIn(mlp_backends()), ::testing::ValuesIn(mlp_cases())),
                         param_name);

// Accumulation on both devices: dL/dparams = round_T(old + sum), the same rule. Against the fp64 sum
// plus the old value (0.5, exact): the bound above, whose 2 eps |ref| covers the one more rounding.
TEST(MlpGpuVsCpuBackendAccumulate, AddsTheSameWay) {
    TNN_SKIP_WITHOUT_GPU();
    const MlpCase& c = mlp_cases().front();
    for (const MlpBackend& b : mlp_backends()) {
        SCOPED_TRACE(b.label);
        if (b.config["otype"] == "BlasLtMLP" && !blaslt_mlp::available()) continue;
        const auto net = create_network(c.n_in, c.n_out, config_for(b, c));
        const MlpData d = make_data(c, *net, 99);
        TestStream stream(Device::gpu(0));
        const MlpResult got = run_module(*net, d, stream, GradMode::accumulate, 0.5);
        const MlpResult cpu = run_module(*net, d, Stream::cpu(), GradMode::accumulate, 0.5);
        const MlpResult ref = run_fp64(*net, d);
        std::vector<double> r = ref.dL_dparams.to_double_vector();
        for (double& v : r) v += 0.5;
        const Tensor ref_acc = host_tensor(r, 1, static_cast<int64_t>(r.size()), DType::f64);
        const MlpTermCounts n = mlp_term_counts(net->layout(), c.batch);
        if (b.tf32()) {
            expect_within_precision(got.dL_dparams, ref_acc, dtype_epsilon(DType::f16), n.param_grad,
                                    "tf32 accumulate");
            continue;
        }
        expect_gpu_no_worse_than_cpu(got.dL_dparams, cpu.dL_dparams, ref_acc, dtype_epsilon(net->param_dtype()),
                                     n.param_grad, mlp_parameter_blocks(net->layout()), "accumulated dL/dparams");
    }
}

}  // namespace
