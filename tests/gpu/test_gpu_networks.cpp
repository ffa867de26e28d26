// Every MLP backend on the GPU (PortableMLP float32, BlasLtMLP float32 / tf32 / float16 / bfloat16,
// FullyFusedMLP float16 / bfloat16) through one case list (mlp_gpu_cases.h) against the fp64 reference
// and the module's own CPU backend; then the properties every backend has, each on every backend:
// bitwise reproducible training, accumulation, two streams, a backward on another stream, graph
// replay, and bad calls that raise typed errors instead of crashing. What only one backend has (kernel
// plans, epilogues, TF32) is in test_fully_fused_mlp.cpp and test_blaslt_mlp.cpp.
#include "mlp_gpu_cases.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <tuple>

using namespace tnn;
using namespace tnn::test;

namespace {

// ---- The case list on every backend.

using NetworkParam = std::tuple<MlpBackend, MlpCase>;
class NetworkBackends : public ::testing::TestWithParam<NetworkParam> {};

TEST_P(NetworkBackends, MatchesFp64Reference) {
    const auto& [b, c] = GetParam();
    TNN_SKIP_UNLESS_NETWORK_USABLE(b);
    expect_case_matches_fp64(b, c);
}

INSTANTIATE_TEST_SUITE_P(Cases, NetworkBackends,
                         ::testing::Combine(::testing::ValuesIn(gpu_network_backends()),
                                            ::testing::ValuesIn(gpu_network_cases())),
                         [](const ::testing::TestParamInfo<NetworkParam>& info) {
                             return std::get<0>(info.param).label + "_" + std::get<1>(info.param).name;
                         });

// ---- GPU properties, on every backend.

class NetworkGpu : public ::testing::TestWithParam<MlpBackend> {};

std::string backend_name(const ::testing::TestParamInfo<MlpBackend>& info) { return info.param.label; }

std::vector<MlpCase> cases_named(std::initializer_list<const char*> names) {
    std::vector<MlpCase> v;
    for (const char* n : names) v.push_back(gpu_case_named(n));
    return v;
}

// A case of the list with another batch size.
MlpCase with_batch(const char* name, int64_t batch) {
    MlpCase c = gpu_case_named(name);
    c.batch = batch;
    c.name += "_batch" + std::to_string(batch);
    return c;
}

// Runs `check` on each case the backend supports (the others are refused by its config: FullyFusedMLP's
// widths); every property must run on every backend at least once.
template <typename F> void for_supported(const MlpBackend& b, const std::vector<MlpCase>& cases, F check) {
    int ran = 0;
    for (const MlpCase& c : cases) {
        std::string why;
        const auto net = case_network(b, c, why);
        if (!net) continue;
        SCOPED_TRACE(c.name);
        ++ran;
        check(c, *net);
    }
    EXPECT_GT(ran, 0) << "no case of this property runs on " << b.label;
}

// A case's data on the GPU, for tests that call forward / backward with buffers of their own.
struct GpuData {
    Tensor x, p, g;
};
GpuData upload(const MlpData& d) {
    const Device gpu = Device::gpu(0);
    return {d.x.to(gpu), d.params.to(gpu), d.dL_dy.to(gpu)};
}

TEST_P(NetworkGpu, TrainingIsBitwiseReproducible) {
    const MlpBackend& b = GetParam();
    TNN_SKIP_UNLESS_NETWORK_USABLE(b);
    // Weight gradients reduced in one slab and split with a tail slab (PortableMLP, BlasLtMLP), fused
    // ReLU and unfused SiLU epilogues, odd widths; FullyFusedMLP's wgmma kernels (the block's slot
    // updated with red.global.add), with several tiles per block adding to each slot element at
    // widths 64 and 128.
    std::vector<MlpCase> cases =
        cases_named({"silu_silu_w33_d2_bias", "relu_reluout_w32_d2_bias_b4097", "silu_w128_d2_bias_b4097",
                     "relu_w64_d2_b1000", "relu_w256_d4_b4097", "silu_w256_d1_b4097", "w64_32to16_batch65537",
                     "silu_silu_w32_16bit_io", "tanh_sigmoid_w128_pads17", "w64_64to64_batch4099"});
    cases.push_back(with_batch("w64_64to64_batch4099", 65537));
    cases.push_back(with_batch("w128_32to16_batch1000", 65537));
    for_supported(b, cases, [](const MlpCase& c, const Network& net) {
        const MlpData d = make_data(c, net, 99);
        TestStream stream(Device::gpu(0));
        const MlpResult r1 = run_placed(net, d, stream, false);
        free_temporary_memory();  // the second run gets other memory: the bits must not depend on it
        const MlpResult r2 = run_placed(net, d, stream, false);
        expect_same_bits(r1.y, r2.y, "output");
        expect_same_bits(r1.y_inference, r2.y_inference, "inference output");
        expect_same_bits(r1.dL_dparams, r2.dL_dparams, "dL/dparams");
        expect_same_bits(r1.dL_dinput, r2.dL_dinput, "dL/dinput");
    });
}

TEST_P(NetworkGpu, AccumulateAddsToTheGradient) {
    const MlpBackend& b = GetParam();
    TNN_SKIP_UNLESS_NETWORK_USABLE(b);
    // Batch 1 / 7: the weight-gradient GEMM writes the final value (BlasLtMLP: beta = 1), one
    // FullyFusedMLP block writes dL/dparams; batch 70 / 1000 / 4097: per-slab or per-block partials,
    // then the ordered sum adds the old value; FullyFusedMLP's wgmma kernels add into the block's slot
    // (w64_64to64_batch4099, w128_32to16_batch1000). Bias gradients and padded output rows throughout.
    const auto cases =
        cases_named({"relu_nobias_w16_d1_b7", "relu_w16_d1_b7", "relu_w32_d2_bias_b70", "silu_silu_w33_d2_bias",
                     "relu_w128_d3_reluout_b4097", "softplus_squareplus_w64", "w32_batch1", "w64_64to64_batch4099",
                     "w128_32to16_batch1000"});
    for_supported(b, cases, [&b](const MlpCase& c, const Network& net) {
        const DType dtype = net.param_dtype();
        const MlpData d = make_data(c, net, 5);
        TestStream stream(Device::gpu(0));
        const std::vector<double> once = run_placed(net, d, stream, false).dL_dparams.to_double_vector();
        const GpuData in = upload(d);
        Tensor y(c.batch, c.n_out, net.output_dtype(), Device::gpu(0));
        Tensor dp(1, static_cast<int64_t>(net.n_params()), dtype, Device::gpu(0));
        fill(stream, dp.view(), 0.5);
        auto ctx = net.forward(stream, in.x.view(), y.view(), in.p.data(), false);
        net.backward(stream, *ctx, in.x.view(), y.view(), in.g.view(), nullptr, dp.data(), in.p.data(),
                     GradMode::accumulate);
        const Tensor acc_t = dp.to(Device::cpu(), stream);
        const std::vector<double> acc = acc_t.to_double_vector();
        const MlpLayout& l = net.layout();
        const uint32_t top = l.n_hidden_layers;
        const size_t out_w = l.weight_offset(top), out_fan_in = l.layer_in(top);
        for (size_t i = 0; i < acc.size(); ++i) {
            // Padded output rows (weights and biases) receive nothing: they keep the old value exactly.
            const bool padded_weight = i >= out_w + size_t(l.n_output_dims) * out_fan_in &&
                                       i < out_w + size_t(l.padded_output_dims) * out_fan_in;
            const bool padded_bias =
                l.bias && i >= l.bias_offset(top) + l.n_output_dims && i < l.bias_offset(top) + l.layer_out(top);
            if (padded_weight || padded_bias) {
                ASSERT_EQ(acc[i], 0.5) << "padded parameter " << i << " changed";
            } else if (dtype == DType::f32) {
                // One fp32 addition of the same fp32 sum, as the kernels do: the same bits.
                ASSERT_EQ(static_cast<float>(acc[i]), 0.5f + static_cast<float>(once[i])) << "[" << i << "]";
            } else {
                // The kernels add the fp32 sum to 0.5 and round once; `once` is that sum already rounded
                // to the dtype: the two differ by at most half an ulp of each (eps (|a| + |b|) / 2), or
                // by the spacing of the dtype's subnormals (2^-24 in fp16, 2^-133 in bf16) where `once`
                // is one and the relative bound does not hold.
                const double want = 0.5 + once[i], eps = dtype_epsilon(dtype);
                const double subnormal = std::ldexp(1.0, dtype == DType::f16 ? -24 : -133);
                ASSERT_LE(std::fabs(acc[i] - want), eps * (std::fabs(want) + std::fabs(once[i])) + subnormal)
                    << "[" << i << "]: " << acc[i] << " vs 0.5 + " << once[i];
            }
        }
        // The same rule on both devices: against the fp64 sum plus the old value (0.5, exact), no worse
        // than the CPU backend accumulating (the bound of mlp_gpu_bounds.h, whose 2 eps |ref| covers the
        // one more rounding); TF32 within the bound of fp16's epsilon.
        std::vector<double> r = run_fp64(net, d).dL_dparams.to_double_vector();
        for (double& v : r) v += 0.5;
        const Tensor ref = host_tensor(r, 1, static_cast<int64_t>(r.size()), DType::f64);
        const double n = mlp_term_counts(l, c.batch).param_grad;
        if (b.tf32()) {
            expect_within_precision(acc_t, ref, dtype_epsilon(DType::f16), n, "tf32 accumulated dL/dparams");
            return;
        }
        const MlpResult cpu = run_module(net, d, Stream::cpu(), GradMode::accumulate, 0.5);
        expect_gpu_no_worse_than_cpu(acc_t, cpu.dL_dparams, ref, dtype_epsilon(dtype), n, mlp_parameter_blocks(l),
                                     "accumulated dL/dparams");
    });
}

TEST_P(NetworkGpu, TwoStreamsGiveTheSameBitsAsOne) {
    const MlpBackend& b = GetParam();
    TNN_SKIP_UNLESS_NETWORK_USABLE(b);
    for_supported(b, cases_named({"relu_w64_d2_b1000"}), [](const MlpCase& c, const Network& net) {
        const MlpData d1 = make_data(c, net, 11), d2 = make_data(c, net, 22);
        const Device gpu = Device::gpu(0);
        MlpResult want1, want2;
        {
            TestStream single(gpu);
            want1 = run_placed(net, d1, single, false);
            want2 = run_placed(net, d2, single, false);
        }
        // Two training steps interleaved on two streams without synchronising in between.
        TestStream s1(gpu), s2(gpu);
        struct Step {
            GpuData in;
            Tensor y, dp, dx;
            std::unique_ptr<Context> ctx;
        };
        auto prepare = [&](const MlpData& d) {
            return Step{upload(d), Tensor(c.batch, c.n_out, net.output_dtype(), gpu),
                        Tensor(1, static_cast<int64_t>(net.n_params()), net.param_dtype(), gpu),
                        Tensor(c.batch, c.n_in, d.x.dtype(), gpu), nullptr};
        };
        Step a = prepare(d1), e = prepare(d2);
        a.ctx = net.forward(s1, a.in.x.view(), a.y.view(), a.in.p.data(), true);
        e.ctx = net.forward(s2, e.in.x.view(), e.y.view(), e.in.p.data(), true);
        View adx = a.dx.view(), edx = e.dx.view();
        net.backward(s1, *a.ctx, a.in.x.view(), a.y.view(), a.in.g.view(), &adx, a.dp.data(), a.in.p.data(),
                     GradMode::overwrite);
        net.backward(s2, *e.ctx, e.in.x.view(), e.y.view(), e.in.g.view(), &edx, e.dp.data(), e.in.p.data(),
                     GradMode::overwrite);
        a.ctx.reset();
        e.ctx.reset();
        s1.stream().synchronize();
        s2.stream().synchronize();
        const Device cpu = Device::cpu();
        expect_same_bits(a.y.to(cpu), want1.y, "stream 1 output");
        expect_same_bits(e.y.to(cpu), want2.y, "stream 2 output");
        expect_same_bits(a.dp.to(cpu), want1.dL_dparams, "stream 1 dL/dparams");
        expect_same_bits(e.dp.to(cpu), want2.dL_dparams, "stream 2 dL/dparams");
        expect_same_bits(a.dx.to(cpu), want1.dL_dinput, "stream 1 dL/dinput");
        expect_same_bits(e.dx.to(cpu), want2.dL_dinput, "stream 2 dL/dinput");
    });
}

TEST_P(NetworkGpu, BackwardOnAnotherStreamThanForward) {
    const MlpBackend& b = GetParam();
    TNN_SKIP_UNLESS_NETWORK_USABLE(b);
    const auto cases = cases_named({"sine_w48_d3_b1000", "sine_w100_d3_b1000", "sine_sine_w64_bias_f32out"});
    for_supported(b, cases, [](const MlpCase& c, const Network& net) {
        const MlpData d = make_data(c, net, 3);
        const Device gpu = Device::gpu(0);
        TestStream s1(gpu), s2(gpu);
        const MlpResult want = run_placed(net, d, s1, false);
        const GpuData in = upload(d);
        Tensor y(c.batch, c.n_out, net.output_dtype(), gpu), dx(c.batch, c.n_in, d.x.dtype(), gpu);
        Tensor dp(1, static_cast<int64_t>(net.n_params()), net.param_dtype(), gpu);
        // No synchronisation: the backward on s2 must itself wait for the forward's work on s1.
        auto ctx = net.forward(s1, in.x.view(), y.view(), in.p.data(), false);
        View dx_view = dx.view();
        net.backward(s2, *ctx, in.x.view(), y.view(), in.g.view(), &dx_view, dp.data(), in.p.data(),
                     GradMode::overwrite);
        ctx.reset();
        // New work on s1 may reuse the context's memory (no larger than this): it must wait for the
        // backward on s2.
        Tensor scratch = Tensor::temporary(s1, c.batch * int64_t(net.n_hidden_layers()),
                                           std::max<int64_t>(c.width, 128), DType::f32);
        fill(s1, scratch.view(), -1.0);
        s2.stream().synchronize();
        s1.stream().synchronize();
        expect_same_bits(dp.to(Device::cpu()), want.dL_dparams, "dL/dparams, backward on another stream");
        expect_same_bits(dx.to(Device::cpu()), want.dL_dinput, "dL/dinput, backward on another stream");
    });
}

#ifdef TNN_WITH_GPU
TEST_P(NetworkGpu, TrainingStepAndInferenceReplayFromCapturedGraphs) {
    const MlpBackend& b = GetParam();
    TNN_SKIP_UNLESS_NETWORK_USABLE(b);
    const auto cases =
        cases_named({"silu_silu_w33_d2_bias", "relu_w64_d2_b1000", "silu_w256_d1_b4097", "w64_64to64_batch4099"});
    for_supported(b, cases, [](const MlpCase& c, const Network& net) {
        const MlpData d = make_data(c, net, 8);
        const Device gpu = Device::gpu(0);
        TestStream stream(gpu);
        const GpuData in = upload(d);
        Tensor y(c.batch, c.n_out, net.output_dtype(), gpu), yi(c.batch, c.n_out, net.output_dtype(), gpu);
        Tensor dp(1, static_cast<int64_t>(net.n_params()), net.param_dtype(), gpu), dx(c.batch, c.n_in, d.x.dtype(), gpu);
        // The step the graph records: a training step, then an inference.
        auto step = [&] {
            auto ctx = net.forward(stream, in.x.view(), y.view(), in.p.data(), true);
            View dx_view = dx.view();
            net.backward(stream, *ctx, in.x.view(), y.view(), in.g.view(), &dx_view, dp.data(), in.p.data(),
                         GradMode::overwrite);
            ctx.reset();
            net.inference(stream, in.x.view(), yi.view(), in.p.data());
        };
        // Run eagerly once: the warm-up of the plans and the allocator, and the results to replay.
        step();
        stream.stream().synchronize();
        const Device cpu = Device::cpu();
        const Tensor want_y = y.to(cpu), want_dp = dp.to(cpu), want_dx = dx.to(cpu);
        expect_same_bits(yi.to(cpu), want_y, "eager inference vs forward");

        TestGraph graph(stream);
        try {
            step();
        } catch (const std::exception& e) {
            FAIL() << "a warmed-up training step must be capturable: " << e.what();
        }
        ASSERT_TRUE(graph.end());
        for (int replay = 0; replay < 2; ++replay) {
            for (Tensor* t : {&y, &yi, &dp, &dx}) fill(stream, t->view(), 0.0);
            ASSERT_TRUE(graph.launch());
            stream.stream().synchronize();
            expect_same_bits(y.to(cpu), want_y, "graph replay output");
            expect_same_bits(yi.to(cpu), want_y, "graph replay inference");
            expect_same_bits(dp.to(cpu), want_dp, "graph replay dL/dparams");
            expect_same_bits(dx.to(cpu), want_dx, "graph replay dL/dinput");
        }
    });
}
#endif  // TNN_WITH_GPU

INSTANTIATE_TEST_SUITE_P(Backends, NetworkGpu, ::testing::ValuesIn(gpu_network_backends()), backend_name);

// ---- Bad calls raise typed errors, on every backend.

class NetworkGpuErrors : public ::testing::TestWithParam<MlpBackend> {
protected:
    void SetUp() override {
        TNN_SKIP_UNLESS_NETWORK_USABLE(GetParam());
        json cfg = GetParam().config;
        cfg["n_neurons"] = 16;
        cfg["n_hidden_layers"] = 1;
        net = create_network(3, 2, cfg);
        params = Tensor(1, static_cast<int64_t>(net->n_params()), net->param_dtype(), gpu);
        fill(stream, params.view(), 0.1);
        x = Tensor(10, 3, DType::f32, gpu);
        y = Tensor(10, 2, net->output_dtype(), gpu);
        fill(stream, x.view(), 0.5);
    }
    const Device gpu = Device::gpu(0);
    const Stream stream = Stream::gpu(nullptr, 0);
    std::unique_ptr<Network> net;
    Tensor params, x, y;
};

TEST_P(NetworkGpuErrors, HostParamsAreRefused) {
    std::vector<double> host_params(net->n_params(), 0.1);  // room for any dtype
    EXPECT_THROW(net->inference(stream, x.view(), y.view(), host_params.data()), DeviceError);
}

// A host gradient buffer would fault inside the kernels (ending every model of the process): refused up
// front by every backward, with rows or without (the empty batch zeroes dL/dparams).
TEST_P(NetworkGpuErrors, HostParamGradientIsRefused) {
    const std::vector<double> untouched(net->n_params(), 7.0);
    std::vector<double> host_grad = untouched;
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
    EXPECT_EQ(host_grad, untouched) << "nothing written";
    stream.synchronize();
}

TEST_P(NetworkGpuErrors, HostMemoryLabelledGpuIsRefused) {
    Tensor host(10, 3, DType::f32);
    View lie = host.view();
    lie.device = gpu;
    EXPECT_THROW(net->inference(stream, lie, y.view(), params.data()), DeviceError);
}

TEST_P(NetworkGpuErrors, MismatchedShapesAreRefused) {
    Tensor wide_x(10, 4, DType::f32, gpu), short_y(9, 2, net->output_dtype(), gpu);
    EXPECT_THROW(net->inference(stream, wide_x.view(), y.view(), params.data()), ShapeError);
    EXPECT_THROW(net->inference(stream, x.view(), short_y.view(), params.data()), ShapeError);
    auto ctx = net->forward(stream, x.view(), y.view(), params.data(), false);
    Tensor dp(1, static_cast<int64_t>(net->n_params()), net->param_dtype(), gpu);
    // A backward with fewer rows than its forward, where the context keeps the forward's activations
    // (FullyFusedMLP's keeps nothing: its backward recomputes the forward from the input it is given).
    if (net->name() != "FullyFusedMLP")
        EXPECT_THROW(net->backward(stream, *ctx, x.view().rows_slice(0, 5), y.view().rows_slice(0, 5),
                                   y.view().rows_slice(0, 5), nullptr, dp.data(), params.data(), GradMode::overwrite),
                     ShapeError);
    stream.synchronize();
}

TEST_P(NetworkGpuErrors, WrongDeviceIndexIsRefused) {
    const int missing = gpu_device_count();
    View x_elsewhere = x.view(), y_elsewhere = y.view();
    x_elsewhere.device = y_elsewhere.device = Device::gpu(missing);
    EXPECT_THROW(net->inference(Stream::gpu(nullptr, missing), x_elsewhere, y_elsewhere, params.data()), DeviceError);
    EXPECT_THROW(Tensor(4, 4, DType::f32, Device::gpu(missing)), DeviceError);
}

TEST_P(NetworkGpuErrors, WrongDtypeOrContextIsRefused) {
    // An input of neither fp32 nor the network dtype, an output of another dtype than output_dtype.
    const DType bad_input = net->param_dtype() == DType::f16 ? DType::bf16 : DType::f16;
    ASSERT_FALSE(net->accepts_input_dtype(bad_input));
    Tensor x_bad(10, 3, bad_input, gpu);
    EXPECT_THROW(net->inference(stream, x_bad.view(), y.view(), params.data()), DTypeError);
    Tensor y_bad(10, 2, net->output_dtype() == DType::f32 ? DType::f16 : DType::f32, gpu);
    EXPECT_THROW(net->inference(stream, x.view(), y_bad.view(), params.data()), DTypeError);
    // A context from a CPU forward cannot drive a GPU backward.
    Tensor xc(10, 3, DType::f32), yc(10, 2, net->output_dtype()), pc(1, static_cast<int64_t>(net->n_params()),
                                                                       net->param_dtype());
    fill(Stream::cpu(), xc.view(), 0.5);
    fill(Stream::cpu(), pc.view(), 0.1);
    auto cpu_ctx = net->forward(Stream::cpu(), xc.view(), yc.view(), pc.data(), false);
    Tensor dp(1, static_cast<int64_t>(net->n_params()), net->param_dtype(), gpu);
    EXPECT_THROW(net->backward(stream, *cpu_ctx, x.view(), y.view(), y.view(), nullptr, dp.data(), params.data(),
                               GradMode::overwrite),
                 Error);
    // Nor can a context from another module's GPU forward.
    const bool portable = net->name() == "PortableMLP";
    const auto other = create_network(3, 2, {{"otype", portable ? "FullyFusedMLP" : "PortableMLP"}, {"n_neurons", 16},
                                             {"n_hidden_layers", 1}});
    Tensor po(1, static_cast<int64_t>(other->n_params()), other->param_dtype(), gpu);
    Tensor yo(10, 2, other->output_dtype(), gpu);
    fill(stream, po.view(), 0.1);
    auto other_ctx = other->forward(stream, x.view(), yo.view(), po.data(), false);
    EXPECT_THROW(net->backward(stream, *other_ctx, x.view(), y.view(), y.view(), nullptr, dp.data(), params.data(),
                               GradMode::overwrite),
                 Error);
    stream.synchronize();
}

INSTANTIATE_TEST_SUITE_P(Backends, NetworkGpuErrors, ::testing::ValuesIn(gpu_network_backends()), backend_name);

// float64 is PortableMLP's CPU-only precision (the fp64 reference): refused on the GPU.
TEST(PortableMlpGpu, Float64IsCpuOnly) {
    TNN_SKIP_WITHOUT_GPU();
    const auto net64 = create_network(3, 2, {{"otype", "PortableMLP"}, {"n_neurons", 16}, {"dtype", "float64"}});
    const Device gpu = Device::gpu(0);
    Tensor x64(10, 3, DType::f64, gpu), y64(10, 2, DType::f64, gpu), p64(1, int64_t(net64->n_params()), DType::f64, gpu);
    EXPECT_THROW(net64->inference(Stream::gpu(nullptr, 0), x64.view(), y64.view(), p64.data()), UnsupportedError);
}

}  // namespace
