// The one case list of the MLP backends on the GPU and its harness: every backend and precision
// (PortableMLP, BlasLtMLP, FullyFusedMLP), the cases (tests/mlp_backend_cases.h's list plus shapes
// sized for the GPU kernels), one run on a device through views placed among sentinels, and the
// comparison with the fp64 reference. test_gpu_networks.cpp runs it on every backend; the backend
// tests (test_blaslt_mlp.cpp, test_fully_fused_mlp.cpp) reuse it for what only one backend has.
#pragma once

#include "gpu_test_util.h"
#include "mlp_backend_cases.h"
#include "mlp_gpu_bounds.h"

#include "networks/blaslt_mlp.h"
#include "networks/portable_mlp.h"

#include <string>
#include <vector>

namespace tnn::test {

// Every network backend and precision that runs on the GPU: PortableMLP (float32) and the list the
// CPU tests share (FullyFusedMLP float16 / bfloat16, BlasLtMLP float32 / tf32 / float16 / bfloat16).
inline const std::vector<MlpBackend>& gpu_network_backends() {
    static const std::vector<MlpBackend> b = [] {
        std::vector<MlpBackend> v = {{"PortableMLP_float32", {{"otype", "PortableMLP"}, {"dtype", "float32"}}}};
        v.insert(v.end(), mlp_backends().begin(), mlp_backends().end());
        return v;
    }();
    return b;
}

inline const MlpBackend& network_backend_named(const std::string& label) {
    for (const auto& b : gpu_network_backends())
        if (b.label == label) return b;
    throw Error("no network backend named " + label);
}

// Empty when backend b runs on GPU 0 here, else why not (no GPU; BlasLtMLP in a build without a
// BLAS-Lt library).
inline std::string gpu_unusable_reason(const MlpBackend& b) {
    const std::string why = unusable_reason(Device::gpu(0));
    if (why.empty() && b.config["otype"] == "BlasLtMLP" && !blaslt_mlp::available())
        return blaslt_mlp::kUnavailableMessage;
    return why;
}

#define TNN_SKIP_UNLESS_NETWORK_USABLE(backend)                                         \
    do {                                                                                \
        const std::string tnn_skip_reason_ = ::tnn::test::gpu_unusable_reason(backend); \
        if (!tnn_skip_reason_.empty()) GTEST_SKIP() << tnn_skip_reason_;                \
    } while (0)

// Shapes for the kernels that take any width (PortableMLP, BlasLtMLP): odd widths 1 to 256, depths 0
// to 6, batches 1 to 4097 (BlasLtMLP's weight gradients in slabs of 384 rows and a tail), fp32 input
// to and fp32 output of 16-bit networks. FullyFusedMLP runs those of its widths.
inline const std::vector<MlpCase>& any_width_cases() {
    static const std::vector<MlpCase> c = {
        {"relu_w16_d1_b7", 3, 1, 16, 1, "ReLU", "None", true, 7, true},
        {"relu_nobias_w16_d1_b7", 3, 1, 16, 1, "ReLU", "None", false, 7, true},
        {"relu_w64_d2_b1000", 3, 3, 64, 2, "ReLU", "None", true, 1000, true, true},
        {"relu_reluout_w32_d2_bias_b4097", 5, 2, 32, 2, "ReLU", "ReLU", true, 4097, true},
        {"relu_w128_d3_reluout_b4097", 5, 2, 128, 3, "ReLU", "ReLU", true, 4097, true, false, true},
        {"relu_w256_d4_b4097", 16, 4, 256, 4, "ReLU", "None", true, 4097, true, true},
        {"relu_nobias_w32_d2_b1", 4, 3, 32, 2, "ReLU", "None", false, 1, false, true, true},
        {"relu_odd_w100_d2_b1000", 6, 5, 100, 2, "ReLU", "None", true, 1000, true},
        {"leaky_w64_d1_b1000", 6, 2, 64, 1, "LeakyReLU", "None", true, 1000, true, true},
        {"leaky_w24_d1_bias_b1000", 6, 2, 24, 1, "LeakyReLU", "None", true, 1000, true},
        {"linear_hidden_w64_d2_bias", 5, 3, 64, 2, "None", "None", true, 1000},
        {"tanh_sigmoid_w48_d2_bias_b1", 5, 2, 48, 2, "Tanh", "Sigmoid", true, 1, false, true, true},
        {"tanh_sigmoid_w32_d2_bias_b1", 5, 2, 32, 2, "Tanh", "Sigmoid", true, 1},
        {"sine_w100_d3_b1000", 2, 3, 100, 3, "Sine", "None", false, 1000},
        {"sine_w48_d3_b1000", 2, 3, 48, 3, "Sine", "None", false, 1000},
        {"silu_silu_w33_d2_bias", 4, 4, 33, 2, "SiLU", "SiLU", true, 1000, false, false, true},
        {"depth0_sine_out_bias_b4097", 7, 5, 32, 0, "None", "Sine", true, 4097, false, true},
        {"depth0_linear_b7", 3, 2, 16, 0, "ReLU", "None", false, 7},
        {"exponential_out_w24_d1", 3, 2, 24, 1, "Tanh", "Exponential", false, 4097, false, true, true},
        {"softplus_squareplus_w40_d2_b333", 3, 3, 40, 2, "Softplus", "Squareplus", true, 333, false, true},
        {"sigmoid_tanh_in16_out16_b7", 16, 16, 64, 1, "Sigmoid", "Tanh", false, 7, false, true},
        {"odd_pads_17_in_17_out", 17, 17, 80, 1, "Tanh", "None", true, 1000},
        {"tanh_w16_d4_b257", 3, 1, 16, 4, "Tanh", "None", false, 257, false, true},
        {"tanh_w16_d6_b257", 3, 1, 16, 6, "Tanh", "None", false, 257},
        {"tanh_w1_d2_bias_b7", 1, 1, 1, 2, "Tanh", "None", true, 7},
        {"silu_w128_d2_bias_b4097", 32, 8, 128, 2, "SiLU", "None", true, 4097},
        {"silu_w256_d1_b4097", 32, 8, 256, 1, "SiLU", "None", true, 4097},
    };
    return c;
}

// Shapes for FullyFusedMLP's tensor-core plans (widths 16 to 128): the benchmark shapes, block tails,
// 65537 rows, every activation hidden and output, wide and odd inputs and outputs, strided views, 12
// hidden layers. test_fully_fused_mlp.cpp runs its kernel plans on these.
inline const std::vector<MlpCase>& tensor_core_cases() {
    static const std::vector<MlpCase> c = {
        // The benchmark shapes (2 hidden layers, ReLU, fp32 in, 16-bit out).
        {"w64_32to16_batch65537", 32, 16, 64, 2, "ReLU", "None", false, 65537, true},
        {"w128_32to16_batch1000", 32, 16, 128, 2, "ReLU", "None", false, 1000, true},
        {"w64_64to64_batch4099", 64, 64, 64, 2, "ReLU", "None", false, 4099, true},
        {"w16_32to16_batch1000", 32, 16, 16, 2, "ReLU", "None", false, 1000, true},
        // Batch sizes and tails.
        {"w32_batch0", 3, 4, 32, 2, "ReLU", "None", false, 0, true},
        {"w32_batch1", 3, 4, 32, 2, "ReLU", "None", true, 1, true},
        {"w16_batch7_one_output", 3, 1, 16, 1, "ReLU", "ReLU", false, 7, true},
        {"w128_batch7_bias", 5, 2, 128, 1, "ReLU", "None", true, 7, true, true, true},
        // 4116 = 128 * 32 + 20: with 32 rows per warp (two m16 tiles) the last warp's second tile is
        // partly valid.
        {"w64_tail20_batch4116", 32, 16, 64, 2, "ReLU", "None", false, 4116, true},
        // Activations (hidden and output), with their gradients.
        {"sine_sine_w64_bias_f32out", 3, 3, 64, 3, "Sine", "Sine", true, 1000, false, false, true},
        {"silu_silu_w32_16bit_io", 5, 4, 32, 2, "SiLU", "SiLU", true, 1000, false, true},
        {"tanh_sigmoid_w128_pads17", 17, 17, 128, 1, "Tanh", "Sigmoid", true, 333, false, false, true},
        {"leaky_exponential_w16_deep5", 4, 2, 16, 5, "LeakyReLU", "Exponential", false, 1000, true},
        {"softplus_squareplus_w64", 7, 5, 64, 2, "Softplus", "Squareplus", true, 1000},
        {"none_tanh_w32", 6, 3, 32, 2, "None", "Tanh", false, 1000},
        {"sigmoid_none_w16_bias", 2, 2, 16, 3, "Sigmoid", "None", true, 1000, false, true, true},
        {"squareplus_softplus_w128", 8, 8, 128, 2, "Squareplus", "Softplus", false, 257},
        {"exponential_leaky_w32", 3, 3, 32, 1, "Exponential", "LeakyReLU", true, 1000, true},
        // Wide inputs / outputs (several k-steps in layer 0, several chunks in the output layer),
        // odd widths (2-byte copies), strided views.
        {"wide_io_100to70_w64", 100, 70, 64, 2, "Tanh", "None", true, 1000},
        {"odd_16bit_input_3to5_w32", 3, 5, 32, 2, "ReLU", "None", false, 1000, true, true},
        {"strided_views_w64", 13, 7, 64, 2, "SiLU", "None", true, 1000, false, false, true, true},
        {"strided_16bit_w16", 9, 3, 16, 2, "ReLU", "Sigmoid", false, 777, true, true, false, true},
        // Depth: many hidden layers (weights may be streamed per layer at width 128).
        {"deep12_w128", 16, 4, 128, 12, "Tanh", "None", false, 300},
        {"deep8_w64_bias", 32, 16, 64, 8, "Tanh", "None", true, 1000},
    };
    return c;
}

// The one list every GPU backend runs: the CPU tests' cases, then both lists above. A backend that
// refuses a case's config (FullyFusedMLP's widths and depth 0) skips it as not supported.
inline const std::vector<MlpCase>& gpu_network_cases() {
    static const std::vector<MlpCase> c = [] {
        std::vector<MlpCase> v = mlp_cases();
        v.insert(v.end(), any_width_cases().begin(), any_width_cases().end());
        v.insert(v.end(), tensor_core_cases().begin(), tensor_core_cases().end());
        return v;
    }();
    return c;
}

inline const MlpCase& gpu_case_named(const std::string& name) {
    for (const auto& c : gpu_network_cases())
        if (c.name == name) return c;
    throw Error("no network test case named " + name);
}

// ---- One run on a device, through views placed among sentinels.

// A device tensor holding a view: inside a wider tensor (3 more columns) when `strided`, always with
// 5 more rows, the rest filled with a sentinel; take() checks that nothing outside the view was written.
constexpr double kSentinel = -1536.0;  // exact in fp16, bf16 and fp32
struct Placed {
    Tensor storage;
    View view;
};
inline Placed place_empty(int64_t rows, int64_t cols, DType t, const Stream& stream, bool strided) {
    Placed p;
    p.storage = Tensor(rows + 5, cols + (strided ? 3 : 0), t, stream.device());
    fill(stream, p.storage.view(), kSentinel);
    p.view = p.storage.view().rows_slice(0, rows).cols_slice(0, cols);
    return p;
}
inline Placed place(const Tensor& host, const Stream& stream, bool strided) {
    Placed p = place_empty(host.rows(), host.cols(), host.dtype(), stream, strided);
    if (host.numel() > 0) copy(stream, host.view(), p.view);
    return p;
}
// The view's values on the host, after checking that nothing outside it was written.
inline Tensor take(const Placed& p, const Stream& stream, const std::string& what) {
    const Tensor whole = p.storage.to(Device::cpu(), stream);
    const std::vector<double> all = whole.to_double_vector();
    bool clean = true;  // reports the first stray write only
    for (int64_t r = 0; r < whole.rows() && clean; ++r)
        for (int64_t c = 0; c < whole.cols() && clean; ++c)
            if ((r >= p.view.rows || c >= p.view.cols) && all[static_cast<size_t>(r * whole.cols() + c)] != kSentinel) {
                ADD_FAILURE() << what << ": wrote outside the view at (" << r << ", " << c << ")";
                clean = false;
            }
    Tensor out(p.view.rows, p.view.cols, p.view.dtype);
    if (out.numel() > 0) copy(Stream::cpu(), whole.view().rows_slice(0, out.rows()).cols_slice(0, out.cols()), out.view());
    return out;
}

// forward (keeping the context), inference, and backward (overwrite, into dL/dinput and dL/dparams
// holding 7 first: every value must be written) on the stream's device, through placed views;
// results copied to the host.
inline MlpResult run_placed(const Network& net, const MlpData& d, const Stream& stream, bool strided) {
    const int64_t rows = d.x.rows();
    const Placed x = place(d.x, stream, strided), g = place(d.dL_dy, stream, strided);
    const Tensor p = d.params.to(stream.device(), stream);
    Placed y = place_empty(rows, net.n_output_dims(), net.output_dtype(), stream, strided);
    Placed yi = place_empty(rows, net.n_output_dims(), net.output_dtype(), stream, strided);
    Placed dx = place_empty(rows, net.n_input_dims(), d.x.dtype(), stream, strided);
    Tensor dp(1, static_cast<int64_t>(net.n_params()), net.param_dtype(), stream.device());
    fill(stream, dx.view, 7.0);
    fill(stream, dp.view(), 7.0);
    auto ctx = net.forward(stream, x.view, y.view, p.data(), true);
    net.inference(stream, x.view, yi.view, p.data());
    net.backward(stream, *ctx, x.view, y.view, g.view, &dx.view, dp.data(), p.data(), GradMode::overwrite);
    stream.synchronize();
    return {take(y, stream, "output"), take(yi, stream, "inference output"), take(dx, stream, "dL/dinput"),
            dp.to(Device::cpu(), stream)};
}

// The naive computation in the network's precision on the CPU: MlpReference<T> with the plain
// rounding (f'(z) kept in fp32), results in the dtypes the GPU writes. It is the CPU backend of
// PortableMLP and BlasLtMLP; FullyFusedMLP's CPU backend also rounds f'(z) as its kernels do.
inline MlpResult run_naive(const Network& net, const MlpData& d) {
    const int64_t rows = d.x.rows();
    MlpResult r{Tensor(rows, net.n_output_dims(), net.output_dtype()), Tensor(),
                Tensor(rows, net.n_input_dims(), d.x.dtype()),
                Tensor(1, static_cast<int64_t>(net.n_params()), net.param_dtype())};
    if (rows > 0) {
        auto ctx = mlp_cpu::forward(net.layout(), net.param_dtype(), MlpRounding{}, d.x.view(), r.y.view(),
                                    d.params.data(), true);
        View dx = r.dL_dinput.view();
        mlp_cpu::backward(net.layout(), net.param_dtype(), MlpRounding{}, "naive", *ctx, d.x.view(), d.dL_dy.view(),
                          &dx, r.dL_dparams.data(), d.params.data(), GradMode::overwrite);
    }
    r.y_inference = r.y.to(Device::cpu());
    return r;
}

// Bitwise equality of two host tensors of one dtype.
inline void expect_same_bits(const Tensor& a, const Tensor& b, const std::string& what) {
    ASSERT_EQ(a.dtype(), b.dtype()) << what;
    expect_same_bits(a.to_float_vector(), b.to_float_vector(), what);  // fp32 / fp16 / bf16: exact in float
}

// Every result of `got` against the fp64 reference `ref` within the error model of `naive` (the same
// computation on the CPU in the network's precision): elementwise n eps (max|ref| + |ref|), whole tensor
// within 4 ||naive - ref|| + sqrt(n) eps ||ref|| (expect_matches_reference); with `per_block`, also
// |got - ref| <= |naive - ref| + 6 rms(naive - ref) + 2 eps |ref| in each block (each weight matrix,
// each bias vector, each whole output: expect_no_worse_than_naive). eps is the network dtype's: 16-bit
// networks round activations and gradients to it between layers, which dominates whatever dtype the
// input or output has. With `per_block` and naive = the module's CPU backend, this is the documented
// bound of mlp_gpu_bounds.h.
inline void expect_no_worse_than(const Network& net, int64_t batch, const MlpResult& got, const MlpResult& ref,
                                 const MlpResult& naive, const std::string& what, bool per_block = true) {
    const MlpTermCounts n = mlp_term_counts(net.layout(), batch);
    const double eps = dtype_epsilon(net.param_dtype());
    auto check = [&](const Tensor& g, const Tensor& r, const Tensor& nv, double terms,
                     const std::vector<std::pair<size_t, size_t>>& blocks, const std::string& label) {
        const std::vector<float> got_f = g.to_float_vector(), naive_f = nv.to_float_vector();
        const std::vector<double> ref_d = r.to_double_vector();
        expect_matches_reference(got_f, ref_d, naive_f, {eps, terms}, what + " " + label);
        if (per_block) expect_no_worse_than_naive(widen(got_f), ref_d, widen(naive_f), eps, blocks, what + " " + label);
    };
    check(got.y, ref.y, naive.y, n.forward, whole(ref.y), "output");
    check(got.y_inference, ref.y, naive.y, n.forward, whole(ref.y), "inference output");
    check(got.dL_dinput, ref.dL_dinput, naive.dL_dinput, n.input_grad, whole(ref.dL_dinput), "dL/dinput");
    check(got.dL_dparams, ref.dL_dparams, naive.dL_dparams, n.param_grad, mlp_parameter_blocks(net.layout()),
          "dL/dparams");
}

// The property every backend has: the case on a device (GPU 0; through placed views) against the fp64 reference
// within the documented bound of the module's own CPU backend (mlp_gpu_bounds.h; docs/fully_fused_mlp.md,
// docs/blaslt_mlp.md), which for PortableMLP and BlasLtMLP is the naive computation in the network's
// precision; forward and inference give the same bits; an empty batch gives a zero gradient.
// FullyFusedMLP's CPU backend also rounds f'(z) as its kernels do: its whole-tensor error is held to
// the plain naive computation too (elementwise, the plain naive loop is no bound for a computation that
// rounds once more: its own CPU backend exceeds it at rare elements). TF32 keeps 10 mantissa bits of
// the GEMM operands, as fp16 does, while the CPU computes in fp32: the GPU's own error is held to the
// bound of a computation with fp16's epsilon.
inline void expect_case_matches_fp64(const MlpBackend& b, const MlpCase& c, Device device = Device::gpu(0)) {
    std::string why;
    const auto net = case_network(b, c, why);
    if (!net) GTEST_SKIP() << why;
    // exact_kinks keeps LeakyReLU's pre-activations exact in the layers after the first only where its
    // activations are rounded to 16 bits (0.01 z is not dyadic): in float32 a pre-activation that is 0
    // in exact arithmetic may take either sign, and the derivative with it.
    if (c.exact_kinks && c.act == "LeakyReLU" && c.hidden >= 2 && net->param_dtype() == DType::f32)
        GTEST_SKIP() << "not supported by this case's data: deep LeakyReLU kinks are exact in 16-bit networks only";
    const MlpData d = make_data(c, *net, 1234);
    TestStream stream(device);
    const MlpResult got = run_placed(*net, d, stream, c.strided);
    expect_same_bits(got.y, got.y_inference, "forward vs inference");
    if (c.batch == 0) {
        for (double v : got.dL_dparams.to_double_vector()) ASSERT_EQ(v, 0.0) << "an empty batch gives a zero gradient";
        return;
    }
    const MlpResult ref = run_fp64(*net, d);
    if (b.tf32()) {
        const MlpTermCounts n = mlp_term_counts(net->layout(), c.batch);
        const double eps = dtype_epsilon(DType::f16);
        expect_within_precision(got.y, ref.y, eps, n.forward, c.name + " tf32 output");
        expect_within_precision(got.y_inference, ref.y, eps, n.forward, c.name + " tf32 inference output");
        expect_within_precision(got.dL_dinput, ref.dL_dinput, eps, n.input_grad, c.name + " tf32 dL/dinput");
        expect_within_precision(got.dL_dparams, ref.dL_dparams, eps, n.param_grad, c.name + " tf32 dL/dparams");
        return;
    }
    expect_no_worse_than(*net, c.batch, got, ref, run_module(*net, d, Stream::cpu()), c.name);
    if (net->name() == "FullyFusedMLP")
        expect_no_worse_than(*net, c.batch, got, ref, run_naive(*net, d), c.name + " vs the plain naive loop", false);
}

}  // namespace tnn::test
