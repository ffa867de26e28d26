// BlasLtMLP on the GPU, what only it has: the case list of every backend (test_gpu_networks.cpp) again
// with the library's fused epilogues switched off, two host threads sharing one module's plan cache,
// which epilogues ran, TF32 against fp32; and the errors of the host side, which need no GPU. The
// properties every backend has (accuracy with the epilogues on, reproducibility, accumulation,
// streams, graph capture, bad calls) are test_gpu_networks.cpp's.
#include "mlp_gpu_cases.h"

#include <cmath>
#include <cstdio>
#include <memory>
#include <thread>
#include <tuple>

using namespace tnn;
using namespace tnn::test;

namespace {

// Sets the epilogue policy for a scope.
class EpiloguePolicy {
public:
    explicit EpiloguePolicy(bool fused) : m_previous(blaslt_mlp::fused_epilogues()) {
        blaslt_mlp::set_fused_epilogues(fused);
    }
    ~EpiloguePolicy() { blaslt_mlp::set_fused_epilogues(m_previous); }

private:
    bool m_previous;
};

#define TNN_SKIP_WITHOUT_BLASLT_GPU()                                                                   \
    do {                                                                                               \
        TNN_SKIP_WITHOUT_GPU();                                                                        \
        if (!blaslt_mlp::available()) GTEST_SKIP() << blaslt_mlp::kUnavailableMessage;                  \
    } while (0)

const DType kDtypes[] = {DType::f32, DType::f16, DType::bf16};

// BlasLtMLP in a dtype (float32 without TF32).
const MlpBackend& blaslt_backend(DType t) { return network_backend_named(std::string("BlasLtMLP_") + dtype_name(t)); }

// ---- The case list on every BlasLtMLP backend, without the fused epilogues (with them:
// test_gpu_networks.cpp).

using Param = std::tuple<MlpBackend, MlpCase>;
class BlasLtMlpUnfused : public ::testing::TestWithParam<Param> {};

TEST_P(BlasLtMlpUnfused, MatchesFp64Reference) {
    const auto& [b, c] = GetParam();
    TNN_SKIP_UNLESS_NETWORK_USABLE(b);
    EpiloguePolicy policy(false);
    expect_case_matches_fp64(b, c);
}

std::vector<MlpBackend> blaslt_backends() {
    std::vector<MlpBackend> v;
    for (const MlpBackend& b : gpu_network_backends())
        if (b.config["otype"] == "BlasLtMLP") v.push_back(b);
    return v;
}

INSTANTIATE_TEST_SUITE_P(Cases, BlasLtMlpUnfused,
                         ::testing::Combine(::testing::ValuesIn(blaslt_backends()),
                                            ::testing::ValuesIn(gpu_network_cases())),
                         [](const ::testing::TestParamInfo<Param>& info) {
                             return std::get<0>(info.param).label + "_" + std::get<1>(info.param).name;
                         });

// ---- GPU properties of BlasLtMLP alone.

class BlasLtMlpDtypes : public ::testing::TestWithParam<DType> {};

std::string dtype_param_name(const ::testing::TestParamInfo<DType>& info) { return dtype_name(info.param); }

TEST_P(BlasLtMlpDtypes, ThreadsShareOneModule) {
    TNN_SKIP_WITHOUT_BLASLT_GPU();
    // Two host threads, each with its own stream, drive the same (const) module at once: the shared
    // plan cache must give each the same results as a lone caller.
    const MlpCase& c = gpu_case_named("relu_odd_w100_d2_b1000");
    const auto net = create_network(c.n_in, c.n_out, config_for(blaslt_backend(GetParam()), c));
    const MlpData d1 = make_data(c, *net, 11), d2 = make_data(c, *net, 22);
    MlpResult want1, want2;
    {
        TestStream s(Device::gpu(0));
        want1 = run_placed(*net, d1, s, false);
        want2 = run_placed(*net, d2, s, false);
    }
    free_temporary_memory();
    MlpResult got1, got2;
    std::string error1, error2;
    auto worker = [&](const MlpData& d, MlpResult& out, std::string& error) {
        try {
            TestStream s(Device::gpu(0));
            for (int i = 0; i < 3; ++i) out = run_placed(*net, d, s, false);
        } catch (const std::exception& e) {
            error = e.what();
        }
    };
    std::thread t1(worker, std::cref(d1), std::ref(got1), std::ref(error1));
    std::thread t2(worker, std::cref(d2), std::ref(got2), std::ref(error2));
    t1.join();
    t2.join();
    ASSERT_EQ(error1, "");
    ASSERT_EQ(error2, "");
    expect_same_bits(got1.y, want1.y, "thread 1 output");
    expect_same_bits(got2.y, want2.y, "thread 2 output");
    expect_same_bits(got1.dL_dparams, want1.dL_dparams, "thread 1 dL/dparams");
    expect_same_bits(got2.dL_dparams, want2.dL_dparams, "thread 2 dL/dparams");
    expect_same_bits(got1.dL_dinput, want1.dL_dinput, "thread 1 dL/dinput");
    expect_same_bits(got2.dL_dinput, want2.dL_dinput, "thread 2 dL/dinput");
}

TEST_P(BlasLtMlpDtypes, TheLibraryEpiloguesRunWhenOffered) {
    TNN_SKIP_WITHOUT_BLASLT_GPU();
    const DType dtype = GetParam();
    // Width 64, aligned biases: ReLU + bias fuse into every forward GEMM (RELU_AUX_BIAS for hidden
    // layers, BIAS for the output), and the backward's ReLU derivative into DRELU.
    const MlpCase& c = gpu_case_named("relu_w64_d2_b1000");
    const auto net = create_network(c.n_in, c.n_out, config_for(blaslt_backend(dtype), c));
    const MlpData d = make_data(c, *net, 4);
    TestStream stream(Device::gpu(0));
    blaslt_mlp::Counters before = blaslt_mlp::counters();
    {
        EpiloguePolicy policy(true);
        (void)run_placed(*net, d, stream, false);
    }
    blaslt_mlp::Counters after = blaslt_mlp::counters();
    const uint64_t fwd = after.forward_epilogues - before.forward_epilogues;
    const uint64_t fwd_fb = after.forward_fallbacks - before.forward_fallbacks;
    const uint64_t bwd = after.backward_epilogues - before.backward_epilogues;
    const uint64_t bwd_fb = after.backward_fallbacks - before.backward_fallbacks;
    RecordProperty("forward_epilogues", std::to_string(fwd));
    RecordProperty("forward_fallbacks", std::to_string(fwd_fb));
    RecordProperty("backward_epilogues", std::to_string(bwd));
    RecordProperty("backward_fallbacks", std::to_string(bwd_fb));
    std::printf("[ %s ] epilogue GEMMs: forward %llu (fallbacks %llu), backward %llu (fallbacks %llu)\n",
                dtype_name(dtype), (unsigned long long)fwd, (unsigned long long)fwd_fb, (unsigned long long)bwd,
                (unsigned long long)bwd_fb);
#if defined(TNN_WITH_HIP)
    // hipBLASLt has no ReLU-mask epilogues (gpu/blaslt.h): the hidden layers never ask for one; the
    // output layer's bias asks in both passes (forward + inference) and fuses where hipBLASLt offers
    // the BIAS epilogue for this dtype (the counts above say which).
    EXPECT_EQ(fwd + fwd_fb, 2u);
    EXPECT_EQ(bwd, 0u);
    EXPECT_EQ(bwd_fb, 0u);
#else
    if (dtype != DType::f32) {
        // cuBLASLt documents ReLU-mask and bias epilogues for 16-bit tensor-core GEMMs; both passes
        // (forward + inference) fuse all 3 layers, and the backward fuses the 2 ReLU derivatives.
        EXPECT_EQ(fwd_fb, 0u);
        EXPECT_EQ(fwd, 6u);
        EXPECT_EQ(bwd_fb, 0u);
        EXPECT_EQ(bwd, 2u);
    }
#endif  // TNN_WITH_HIP
    // With the policy off nothing is fused.
    before = blaslt_mlp::counters();
    {
        EpiloguePolicy policy(false);
        (void)run_placed(*net, d, stream, false);
    }
    after = blaslt_mlp::counters();
    EXPECT_EQ(after.forward_epilogues, before.forward_epilogues);
    EXPECT_EQ(after.backward_epilogues, before.backward_epilogues);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, BlasLtMlpDtypes, ::testing::ValuesIn(kDtypes), dtype_param_name);

TEST(BlasLtMlpGpu, Tf32IsUsedOnlyWhenAskedFor) {
    TNN_SKIP_WITHOUT_BLASLT_GPU();
    const MlpCase& c = gpu_case_named("tanh_w16_d4_b257");
    const auto net32 = create_network(c.n_in, c.n_out, config_for(blaslt_backend(DType::f32), c));
    const auto net_tf32 = create_network(c.n_in, c.n_out, config_for(network_backend_named("BlasLtMLP_tf32"), c));
    EXPECT_EQ(net_tf32->hyperparams().value("tf32", false), true);
    EXPECT_FALSE(net32->hyperparams().contains("tf32"));
    const MlpData d = make_data(c, *net32, 17);
    TestStream stream(Device::gpu(0));
    const MlpResult got32 = run_placed(*net32, d, stream, false), got_tf32 = run_placed(*net_tf32, d, stream, false);
    const MlpResult ref = run_fp64(*net32, d);
    // TF32 keeps 10 mantissa bits of each product's inputs, as fp16 does: its error is bounded like the
    // naive fp16 computation's (which also rounds the stored activations, so it is the larger one).
    // (The same seed draws the same values for the fp16 network, rounded to fp16.)
    const auto net16 = create_network(c.n_in, c.n_out, config_for(blaslt_backend(DType::f16), c));
    const MlpResult naive16 = run_naive(*net16, make_data(c, *net16, 17));
    const MlpTermCounts n = mlp_term_counts(net32->layout(), c.batch);
    const double eps = dtype_epsilon(DType::f16);
    auto expect_matches = [&](const Tensor& got, const Tensor& want, const Tensor& naive, double terms,
                              const std::string& what) {
        expect_matches_reference(got.to_float_vector(), want.to_double_vector(), naive.to_float_vector(), {eps, terms},
                                 "tf32 " + what);
    };
    expect_matches(got_tf32.y, ref.y, naive16.y, n.forward, "forward output");
    expect_matches(got_tf32.y_inference, ref.y, naive16.y, n.forward, "inference output");
    expect_matches(got_tf32.dL_dinput, ref.dL_dinput, naive16.dL_dinput, n.input_grad, "dL/dinput");
    expect_matches(got_tf32.dL_dparams, ref.dL_dparams, naive16.dL_dparams, n.param_grad, "dL/dparams");
    // And TF32 really ran: its error is orders of magnitude above fp32's (2^-11 vs 2^-24 per rounding;
    // a factor 16 leaves room for lucky cancellations).
    const std::vector<double> want = ref.y.to_double_vector();
    const double err32 = l2_distance(got32.y.to_double_vector(), want);
    const double err_tf32 = l2_distance(got_tf32.y.to_double_vector(), want);
    EXPECT_GT(err_tf32, 16 * err32) << "tf32 output error " << err_tf32 << " vs fp32 " << err32;
}

// ---- Host-side behaviour: no GPU needed.

TEST(BlasLtMlpConfig, DtypesDefaultsAndErrors) {
    EXPECT_EQ(network_dtype({{"otype", "BlasLtMLP"}}), DType::f32);
    try {
        create_network(3, 2, {{"otype", "BlasLtMLP"}, {"dtype", "float64"}});
        ADD_FAILURE() << "float64 must be refused";
    } catch (const DTypeError& e) {
        EXPECT_NE(std::string(e.what()).find("PortableMLP"), std::string::npos) << e.what();
    }
    // Every build creates BlasLtMLP (the CPU backend always runs; tests/cpp/test_mlp_backends.cpp).
    for (DType t : kDtypes) {
        json cfg = {{"otype", "blasltmlp"}, {"n_neurons", 48}, {"n_hidden_layers", 3}, {"activation", "SiLU"},
                    {"dtype", dtype_name(t)}, {"bias", true}, {"tf32", true}};
        const auto net = create_network(7, 5, cfg);
        EXPECT_EQ(net->name(), "BlasLtMLP");
        EXPECT_EQ(net->param_dtype(), t);
        EXPECT_EQ(net->output_dtype(), t);
        // hyperparams() round-trips through the factory.
        const auto again = create_network(7, 5, net->hyperparams());
        EXPECT_EQ(again->hyperparams(), net->hyperparams());
        EXPECT_EQ(again->n_params(), net->n_params());
    }
    const auto f32_out = create_network(3, 2, {{"otype", "BlasLtMLP"}, {"dtype", "float16"}, {"output_dtype", "float32"}});
    EXPECT_EQ(f32_out->output_dtype(), DType::f32);
    EXPECT_TRUE(f32_out->accepts_input_dtype(DType::f32));
    EXPECT_TRUE(f32_out->accepts_input_dtype(DType::f16));
    EXPECT_FALSE(f32_out->accepts_input_dtype(DType::bf16));
}

// A GPU build without a BLAS-Lt library (HIP without hipBLASLt) creates BlasLtMLP and runs it on the
// CPU; its GPU calls fail with the message that names the alternatives.
TEST(BlasLtMlpConfig, GpuCallsWithoutTheLibraryNameTheAlternatives) {
    if (blaslt_mlp::available()) GTEST_SKIP() << "this build has a BLAS-Lt library";
    TNN_SKIP_WITHOUT_GPU();
    const Device gpu = Device::gpu(0);
    const Stream stream = Stream::gpu(nullptr, 0);
    const auto net = create_network(3, 2, {{"otype", "BlasLtMLP"}, {"n_neurons", 16}, {"n_hidden_layers", 1}});
    Tensor x(4, 3, DType::f32, gpu), y(4, 2, DType::f32, gpu), p(1, static_cast<int64_t>(net->n_params()), DType::f32, gpu);
    fill(stream, x.view(), 0.5);
    fill(stream, p.view(), 0.1);
    try {
        net->inference(stream, x.view(), y.view(), p.data());
        ADD_FAILURE() << "a GPU call must be refused without a BLAS-Lt library";
    } catch (const UnsupportedError& e) {
        EXPECT_EQ(std::string(e.what()), blaslt_mlp::kUnavailableMessage);
    }
    EXPECT_THROW(net->forward(stream, x.view(), y.view(), p.data(), false), UnsupportedError);
    stream.synchronize();
}

}  // namespace
