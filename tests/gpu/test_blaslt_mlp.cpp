// BlasLtMLP against the CPU references: one list of cases (activations hidden and output, bias on and
// off, widths 16..256 and odd, depths 0..4, batches 0 / 1 / 7 / 1000 / 4097, input and output dtype
// variants) run in float32, float16 and bfloat16, each with and without the library's fused
// epilogues; then GPU-only properties (bitwise reproducibility, accumulation, streams, threads, graph
// capture, TF32, which epilogues ran) and the errors of the host side, which need no GPU.
#include "gpu_test_util.h"
#include "mlp_accuracy.h"

#include "networks/blaslt_mlp.h"
#include "networks/portable_mlp.h"

#include <cmath>
#include <cstdio>
#include <memory>
#include <thread>
#include <tuple>

using namespace tnn;
using namespace tnn::test;

namespace {

// How a case draws its data.
enum class Data {
    // Uniform inputs and output gradients in [-1, 1], Xavier weights, biases in [-0.5, 0.5].
    smooth,
    // For ReLU-like kinks (bias on): inputs and output gradients on the grid of multiples of 1/8,
    // weights multiples of 1/8 in [-1/4, 1/4], and the biases of layer l odd multiples of
    // u_l = 2^-(7 + 4l). Then every pre-activation of layer l is exact in fp32 (|z| << 2^24 u_l) and
    // an odd multiple of u_l: never 0, so the ReLU derivative (whose value at exactly 0 differs
    // between conventions) and its sign agree between the fp64 reference, the naive reference and
    // the GPU whatever the summation order. (Layer l's inputs are multiples of 2 u_l, products with
    // weights of 1/8 multiples of 2 u_{l+1}... and rounding activations to fp16 / bf16 only
    // coarsens their grid, so the argument holds in every dtype.)
    exact_kinks,
};

struct MlpCase {
    std::string name;
    uint32_t n_in, n_out, width, hidden;
    std::string act, out_act;
    bool bias;
    int64_t batch;
    Data data;
    bool input_f32 = false;   // fp32 input to a 16-bit network (else the input has the network dtype)
    bool output_f32 = false;  // "output_dtype": "float32" for a 16-bit network
};

std::ostream& operator<<(std::ostream& os, const MlpCase& c) { return os << c.name; }

const std::vector<MlpCase>& mlp_cases() {
    using D = Data;
    static const std::vector<MlpCase> cases = {
        {"relu_w16_d1_b7", 3, 1, 16, 1, "ReLU", "None", true, 7, D::exact_kinks, true},
        {"relu_w64_d2_b1000", 3, 3, 64, 2, "ReLU", "None", true, 1000, D::exact_kinks},
        {"relu_w128_d3_reluout_b4097", 5, 2, 128, 3, "ReLU", "ReLU", true, 4097, D::exact_kinks, true, true},
        {"relu_w256_d4_b4097", 16, 4, 256, 4, "ReLU", "None", true, 4097, D::exact_kinks},
        {"relu_nobias_w32_d2_b1", 4, 3, 32, 2, "ReLU", "None", false, 1, D::smooth, false, true},
        {"relu_odd_w100_d2_b1000", 6, 5, 100, 2, "ReLU", "None", true, 1000, D::exact_kinks, true},
        {"leaky_w64_d1_b1000", 6, 2, 64, 1, "LeakyReLU", "None", true, 1000, D::exact_kinks},
        {"empty_b0", 3, 4, 32, 2, "ReLU", "None", false, 0, D::smooth},
        {"linear_hidden_w64_d2_bias", 5, 3, 64, 2, "None", "None", true, 1000, D::smooth, true},
        {"tanh_sigmoid_w48_d2_bias_b1", 5, 2, 48, 2, "Tanh", "Sigmoid", true, 1, D::smooth, false, true},
        {"sine_w100_d3_b1000", 2, 3, 100, 3, "Sine", "None", false, 1000, D::smooth, true},
        {"silu_silu_w33_d2_bias", 4, 4, 33, 2, "SiLU", "SiLU", true, 1000, D::smooth, true, true},
        {"depth0_sine_out_bias_b4097", 7, 5, 32, 0, "None", "Sine", true, 4097, D::smooth},
        {"depth0_linear_b7", 3, 2, 16, 0, "ReLU", "None", false, 7, D::smooth, true},
        {"exponential_out_w24_d1", 3, 2, 24, 1, "Tanh", "Exponential", false, 4097, D::smooth, false, true},
        {"softplus_squareplus_w40_d2_b333", 3, 3, 40, 2, "Softplus", "Squareplus", true, 333, D::smooth},
        {"sigmoid_tanh_in16_out16_b7", 16, 16, 64, 1, "Sigmoid", "Tanh", false, 7, D::smooth},
        {"odd_pads_17_in_17_out", 17, 17, 80, 1, "Tanh", "None", true, 1000, D::smooth, true},
        {"tanh_w16_d4_b257", 3, 1, 16, 4, "Tanh", "None", false, 257, D::smooth},
        {"silu_w256_d1_b4097", 32, 8, 256, 1, "SiLU", "None", true, 4097, D::smooth, true},
    };
    return cases;
}

const MlpCase& case_named(const std::string& name) {
    for (const auto& c : mlp_cases())
        if (c.name == name) return c;
    throw Error("no BlasLtMLP test case named " + name);
}

json config_for(const MlpCase& c, DType dtype) {
    json j = {{"otype", "BlasLtMLP"},  {"n_neurons", c.width},           {"n_hidden_layers", c.hidden},
              {"activation", c.act}, {"output_activation", c.out_act}, {"dtype", dtype_name(dtype)}};
    if (c.bias) j["bias"] = true;
    if (c.output_f32 && dtype != DType::f32) j["output_dtype"] = "float32";
    return j;
}

DType input_dtype_of(const MlpCase& c, DType dtype) { return c.input_f32 ? DType::f32 : dtype; }

// Host data of one case, already in the dtypes the GPU receives: input (input dtype), params
// (network dtype), dL/doutput (output dtype).
struct MlpData {
    Tensor x, params, dL_dy;
};

Tensor host_tensor(const std::vector<float>& v, int64_t rows, int64_t cols, DType t) {
    Tensor f(rows, cols, DType::f32);
    if (!v.empty()) std::memcpy(f.data(), v.data(), v.size() * sizeof(float));
    if (t == DType::f32) return f;
    Tensor out(rows, cols, t);
    convert(Stream::cpu(), f.view(), out.view());
    return out;
}

std::vector<float> grid_values(size_t n, double max, double step, uint64_t seed) {
    const std::vector<double> v = random_vector(n, -max, max, seed);
    std::vector<float> out(n);
    for (size_t i = 0; i < n; ++i) out[i] = static_cast<float>(std::round(v[i] / step) * step);
    return out;
}

MlpData make_data(const MlpCase& c, const Network& net, uint64_t seed) {
    const MlpLayout& l = net.layout();
    std::vector<float> x, g, p(net.n_params());
    const size_t nx = static_cast<size_t>(c.batch) * c.n_in, ng = static_cast<size_t>(c.batch) * c.n_out;
    if (c.data == Data::exact_kinks) {
        x = grid_values(nx, 1.0, 0.125, seed);
        g = grid_values(ng, 1.0, 0.125, seed + 1);
        const std::vector<float> w = grid_values(net.n_matrix_params(), 0.25, 0.125, seed + 2);
        std::copy(w.begin(), w.end(), p.begin());
        if (l.bias) {
            Pcg32 rng(seed + 3);
            for (uint32_t layer = 0; layer < l.n_layers(); ++layer) {
                const double unit = std::ldexp(1.0, -static_cast<int>(7 + 4 * layer));
                for (uint32_t o = 0; o < l.layer_out(layer); ++o) {
                    const int odd = 2 * static_cast<int>(rng.next_uint() % 16) - 15;  // -15, -13, ..., 15
                    p[l.bias_offset(layer) + o] = static_cast<float>(odd * unit);
                }
            }
        }
    } else {
        const auto xd = random_vector(nx, -1.0, 1.0, seed), gd = random_vector(ng, -1.0, 1.0, seed + 1);
        x.assign(xd.begin(), xd.end());
        g.assign(gd.begin(), gd.end());
        net.init_params(seed + 2, p.data());
        const auto b = random_vector(net.n_params() - net.n_matrix_params(), -0.5, 0.5, seed + 3);
        for (size_t i = net.n_matrix_params(); i < net.n_params(); ++i)
            p[i] = static_cast<float>(b[i - net.n_matrix_params()]);
    }
    const DType t = net.param_dtype();
    MlpData d;
    d.x = host_tensor(x, c.batch, c.n_in, input_dtype_of(c, t));
    d.params = host_tensor(p, 1, static_cast<int64_t>(net.n_params()), t);
    d.dL_dy = host_tensor(g, c.batch, c.n_out, net.output_dtype());
    return d;
}

Tensor widen_to_f64(const Tensor& t) {
    Tensor out(t.rows(), t.cols(), DType::f64);
    const std::vector<double> v = t.to_double_vector();
    if (!v.empty()) std::memcpy(out.data(), v.data(), v.size() * sizeof(double));
    return out;
}

struct MlpResult {
    std::vector<double> y, y_inference, dL_dinput, dL_dparams;
};

std::vector<float> narrow(const std::vector<double>& v) { return std::vector<float>(v.begin(), v.end()); }

// MlpReference<T> on the CPU. T = double: everything in fp64 from the same (already rounded) data;
// otherwise the naive computation in the network's precision with the GPU's dtypes.
template <typename T> MlpResult run_reference(const Network& net, const MlpData& d) {
    const bool wide = std::is_same_v<T, double>;
    const Tensor x = wide ? widen_to_f64(d.x) : d.x.to(Device::cpu());
    const Tensor g = wide ? widen_to_f64(d.dL_dy) : d.dL_dy.to(Device::cpu());
    std::vector<T> params(net.n_params());
    const std::vector<double> pd = d.params.to_double_vector();
    for (size_t i = 0; i < params.size(); ++i) params[i] = T(pd[i]);
    const int64_t rows = x.rows();
    Tensor y(rows, net.n_output_dims(), wide ? DType::f64 : net.output_dtype());
    Tensor dx(rows, net.n_input_dims(), x.dtype());
    const MlpReference<T> ref(net.layout());
    auto ctx = ref.forward(x.view(), y.view(), params.data(), true);
    std::vector<T> dp(net.n_params());
    View dx_view = dx.view();
    ref.backward(*ctx, g.view(), &dx_view, dp.data(), params.data(), GradMode::overwrite);
    MlpResult r;
    r.y = r.y_inference = y.to_double_vector();
    r.dL_dinput = dx.to_double_vector();
    for (const T& v : dp) r.dL_dparams.push_back(static_cast<double>(static_cast<acc_t<T>>(v)));
    return r;
}

MlpResult run_naive(const Network& net, const MlpData& d) {
    switch (net.param_dtype()) {
        case DType::f16: return run_reference<tnn::half>(net, d);
        case DType::bf16: return run_reference<bfloat16>(net, d);
        default: return run_reference<float>(net, d);
    }
}

struct GpuTensors {
    Tensor x, p, g;
};

GpuTensors upload(const MlpData& d, Device dev) { return {d.x.to(dev), d.params.to(dev), d.dL_dy.to(dev)}; }

// One forward + inference + backward (overwrite, into buffers filled with garbage first) on the GPU.
MlpResult run_gpu(const Network& net, const Stream& stream, const MlpData& d) {
    const Device dev = stream.device();
    const GpuTensors in = upload(d, dev);
    const int64_t rows = d.x.rows(), n_params = static_cast<int64_t>(net.n_params());
    Tensor y(rows, net.n_output_dims(), net.output_dtype(), dev), yi(rows, net.n_output_dims(), net.output_dtype(), dev);
    Tensor dx(rows, net.n_input_dims(), d.x.dtype(), dev), dp(1, n_params, net.param_dtype(), dev);
    fill(stream, dx.view(), 7.0);
    fill(stream, dp.view(), 7.0);
    auto ctx = net.forward(stream, in.x.view(), y.view(), in.p.data(), true);
    net.inference(stream, in.x.view(), yi.view(), in.p.data());
    View dx_view = dx.view();
    net.backward(stream, *ctx, in.x.view(), y.view(), in.g.view(), &dx_view, dp.data(), in.p.data(), GradMode::overwrite);
    stream.synchronize();
    return {y.to(Device::cpu()).to_double_vector(), yi.to(Device::cpu()).to_double_vector(),
            dx.to(Device::cpu()).to_double_vector(), dp.to(Device::cpu()).to_double_vector()};
}

void expect_same_bits(const std::vector<double>& a, const std::vector<double>& b, const std::string& what) {
    tnn::test::expect_same_bits(narrow(a), narrow(b), what);  // values are fp32 / fp16 / bf16: exact in float
}

// Compares every result with the fp64 reference, allowing the error of the naive computation in the
// network's precision (eps: the network dtype's; 16-bit networks round activations and gradients to
// it between layers, which dominates whatever dtype the input or output has).
void expect_matches(const Network& net, int64_t batch, const MlpResult& got, const MlpResult& ref,
                    const MlpResult& naive, double eps, const std::string& label) {
    const MlpTermCounts n = mlp_term_counts(net.layout(), batch);
    expect_matches_reference(narrow(got.y), ref.y, narrow(naive.y), {eps, n.forward}, label + " forward output");
    expect_matches_reference(narrow(got.y_inference), ref.y, narrow(naive.y), {eps, n.forward},
                             label + " inference output");
    expect_matches_reference(narrow(got.dL_dinput), ref.dL_dinput, narrow(naive.dL_dinput), {eps, n.input_grad},
                             label + " dL/dinput");
    expect_matches_reference(narrow(got.dL_dparams), ref.dL_dparams, narrow(naive.dL_dparams), {eps, n.param_grad},
                             label + " dL/dparams");
}

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

// ---- The case list, every dtype, fused and unfused.

using Param = std::tuple<MlpCase, DType, bool>;
class BlasLtMlpCases : public ::testing::TestWithParam<Param> {};

TEST_P(BlasLtMlpCases, MatchesFp64Reference) {
    const auto& [c, dtype, fused] = GetParam();
    TNN_SKIP_WITHOUT_BLASLT_GPU();
    EpiloguePolicy policy(fused);
    const auto net = create_network(c.n_in, c.n_out, config_for(c, dtype));
    const MlpData data = make_data(c, *net, 1234);
    TestStream stream(Device::gpu(0));
    const MlpResult got = run_gpu(*net, stream, data);
    // Forward and inference run the same plans and kernels: same bits.
    expect_same_bits(got.y, got.y_inference, "forward vs inference");
    if (c.batch == 0) {
        for (double v : got.dL_dparams) ASSERT_EQ(v, 0.0) << "an empty batch must give a zero gradient";
        return;
    }
    const MlpResult ref = run_reference<double>(*net, data);
    const MlpResult naive = run_naive(*net, data);
    expect_matches(*net, c.batch, got, ref, naive, dtype_epsilon(dtype), c.name);
}

std::string param_name(const ::testing::TestParamInfo<Param>& info) {
    return std::get<0>(info.param).name + "_" + dtype_name(std::get<1>(info.param)) +
           (std::get<2>(info.param) ? "_fused" : "_unfused");
}

INSTANTIATE_TEST_SUITE_P(Cases, BlasLtMlpCases,
                         ::testing::Combine(::testing::ValuesIn(mlp_cases()), ::testing::ValuesIn(kDtypes),
                                            ::testing::Bool()),
                         param_name);

// ---- GPU-only properties.

class BlasLtMlpDtypes : public ::testing::TestWithParam<DType> {};

std::string dtype_param_name(const ::testing::TestParamInfo<DType>& info) { return dtype_name(info.param); }

TEST_P(BlasLtMlpDtypes, TrainingIsBitwiseReproducible) {
    TNN_SKIP_WITHOUT_BLASLT_GPU();
    // Single-slab and split weight-gradient reductions, fused ReLU and unfused SiLU, a tail slab.
    for (const char* name : {"relu_w64_d2_b1000", "silu_silu_w33_d2_bias", "relu_w256_d4_b4097", "silu_w256_d1_b4097"}) {
        const MlpCase& c = case_named(name);
        const auto net = create_network(c.n_in, c.n_out, config_for(c, GetParam()));
        const MlpData data = make_data(c, *net, 99);
        TestStream stream(Device::gpu(0));
        const MlpResult a = run_gpu(*net, stream, data);
        free_temporary_memory();  // the second run gets other memory: the bits must not depend on it
        const MlpResult b = run_gpu(*net, stream, data);
        expect_same_bits(a.y, b.y, c.name + " output");
        expect_same_bits(a.y_inference, b.y_inference, c.name + " inference output");
        expect_same_bits(a.dL_dparams, b.dL_dparams, c.name + " dL/dparams");
        expect_same_bits(a.dL_dinput, b.dL_dinput, c.name + " dL/dinput");
    }
}

TEST_P(BlasLtMlpDtypes, AccumulateAddsToTheGradient) {
    TNN_SKIP_WITHOUT_BLASLT_GPU();
    const DType dtype = GetParam();
    // Batch 7: the weight-gradient GEMM writes (beta = 1); batch 1000 / 4097: slab partials, then the
    // ordered sum adds the old value. Both have bias gradients and padded output rows.
    for (const char* name : {"relu_w16_d1_b7", "silu_silu_w33_d2_bias", "relu_w128_d3_reluout_b4097"}) {
        const MlpCase& c = case_named(name);
        const auto net = create_network(c.n_in, c.n_out, config_for(c, dtype));
        const MlpData data = make_data(c, *net, 5);
        TestStream stream(Device::gpu(0));
        const std::vector<double> once = run_gpu(*net, stream, data).dL_dparams;
        const Device gpu = Device::gpu(0);
        const GpuTensors in = upload(data, gpu);
        Tensor y(c.batch, c.n_out, net->output_dtype(), gpu);
        Tensor dp(1, static_cast<int64_t>(net->n_params()), dtype, gpu);
        fill(stream, dp.view(), 0.5);
        auto ctx = net->forward(stream, in.x.view(), y.view(), in.p.data(), false);
        net->backward(stream, *ctx, in.x.view(), y.view(), in.g.view(), nullptr, dp.data(), in.p.data(),
                      GradMode::accumulate);
        const std::vector<double> acc = dp.to(Device::cpu(), stream).to_double_vector();
        const MlpLayout& l = net->layout();
        const size_t out_w = l.weight_offset(l.n_hidden_layers);
        for (size_t i = 0; i < acc.size(); ++i) {
            // Padded output rows (weights and biases) receive nothing: they keep the old value exactly.
            const bool padded_weight = i >= out_w + static_cast<size_t>(l.n_output_dims) * l.width &&
                                       i < out_w + static_cast<size_t>(l.padded_output_dims) * l.width;
            const bool padded_bias = l.bias && i >= l.bias_offset(l.n_hidden_layers) + l.n_output_dims;
            if (padded_weight || padded_bias) {
                ASSERT_EQ(acc[i], 0.5) << c.name << ": padded parameter " << i << " changed";
                continue;
            }
            if (dtype == DType::f32) {
                // One fp32 addition of the same fp32 sum, as the kernels do: the same bits.
                ASSERT_EQ(static_cast<float>(acc[i]), 0.5f + static_cast<float>(once[i])) << c.name << " [" << i << "]";
            } else {
                // The kernels add the fp32 sum to 0.5 and round once; `once` is that sum already rounded
                // to the dtype: the two differ by at most half an ulp of each (eps * (|a| + |b|) / 2).
                // (2^-24: the spacing of fp16 subnormals, where the relative bound does not hold.)
                const double want = 0.5 + once[i], eps = dtype_epsilon(dtype);
                ASSERT_LE(std::fabs(acc[i] - want), eps * (std::fabs(want) + std::fabs(once[i])) + std::ldexp(1.0, -24))
                    << c.name << " [" << i << "]: " << acc[i] << " vs 0.5 + " << once[i];
            }
        }
    }
}

TEST_P(BlasLtMlpDtypes, BackwardOnAnotherStreamThanForward) {
    TNN_SKIP_WITHOUT_BLASLT_GPU();
    const MlpCase& c = case_named("sine_w100_d3_b1000");
    const auto net = create_network(c.n_in, c.n_out, config_for(c, GetParam()));
    const MlpData d = make_data(c, *net, 3);
    TestStream s1(Device::gpu(0)), s2(Device::gpu(0));
    const MlpResult want = run_gpu(*net, s1, d);
    const Device gpu = Device::gpu(0);
    const GpuTensors in = upload(d, gpu);
    Tensor y(c.batch, c.n_out, net->output_dtype(), gpu), dp(1, static_cast<int64_t>(net->n_params()), GetParam(), gpu);
    Tensor dx(c.batch, c.n_in, d.x.dtype(), gpu);
    // No synchronisation: the backward on s2 must itself wait for the forward's work on s1.
    auto ctx = net->forward(s1, in.x.view(), y.view(), in.p.data(), false);
    View dx_view = dx.view();
    net->backward(s2, *ctx, in.x.view(), y.view(), in.g.view(), &dx_view, dp.data(), in.p.data(), GradMode::overwrite);
    ctx.reset();
    // New work on s1 may reuse the context's memory: it must wait for the backward on s2.
    Tensor scratch = Tensor::temporary(s1, c.batch * int64_t(net->n_hidden_layers()), 128, DType::f32);
    fill(s1, scratch.view(), -1.0);
    s2.stream().synchronize();
    s1.stream().synchronize();
    expect_same_bits(dp.to(Device::cpu()).to_double_vector(), want.dL_dparams, "dL/dparams, backward on another stream");
    expect_same_bits(dx.to(Device::cpu()).to_double_vector(), want.dL_dinput, "dL/dinput, backward on another stream");
}

TEST_P(BlasLtMlpDtypes, ThreadsShareOneModule) {
    TNN_SKIP_WITHOUT_BLASLT_GPU();
    // Two host threads, each with its own stream, drive the same (const) module at once: the shared
    // plan cache must give each the same results as a lone caller.
    const MlpCase& c = case_named("relu_odd_w100_d2_b1000");
    const auto net = create_network(c.n_in, c.n_out, config_for(c, GetParam()));
    const MlpData d1 = make_data(c, *net, 11), d2 = make_data(c, *net, 22);
    MlpResult want1, want2;
    {
        TestStream s(Device::gpu(0));
        want1 = run_gpu(*net, s, d1);
        want2 = run_gpu(*net, s, d2);
    }
    free_temporary_memory();
    MlpResult got1, got2;
    std::string error1, error2;
    auto worker = [&](const MlpData& d, MlpResult& out, std::string& error) {
        try {
            TestStream s(Device::gpu(0));
            for (int i = 0; i < 3; ++i) out = run_gpu(*net, s, d);
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

#ifdef TNN_WITH_GPU
TEST_P(BlasLtMlpDtypes, TrainingStepAndInferenceReplayFromCapturedGraphs) {
    TNN_SKIP_WITHOUT_BLASLT_GPU();
    for (const char* name : {"relu_w64_d2_b1000", "silu_w256_d1_b4097"}) {
        const MlpCase& c = case_named(name);
        const auto net = create_network(c.n_in, c.n_out, config_for(c, GetParam()));
        const MlpData d = make_data(c, *net, 8);
        TestStream stream(Device::gpu(0));
        const Device gpu = Device::gpu(0);
        const GpuTensors in = upload(d, gpu);
        Tensor y(c.batch, c.n_out, net->output_dtype(), gpu), yi(c.batch, c.n_out, net->output_dtype(), gpu);
        Tensor dp(1, static_cast<int64_t>(net->n_params()), GetParam(), gpu), dx(c.batch, c.n_in, d.x.dtype(), gpu);
        // The step the graph records: a training step, then an inference.
        auto step = [&] {
            auto ctx = net->forward(stream, in.x.view(), y.view(), in.p.data(), true);
            View dx_view = dx.view();
            net->backward(stream, *ctx, in.x.view(), y.view(), in.g.view(), &dx_view, dp.data(), in.p.data(),
                          GradMode::overwrite);
            ctx.reset();
            net->inference(stream, in.x.view(), yi.view(), in.p.data());
        };
        // Run eagerly once: the warm-up of the plans and the allocator, and the results to replay.
        step();
        stream.stream().synchronize();
        const std::vector<double> want_y = y.to(Device::cpu()).to_double_vector();
        const std::vector<double> want_dp = dp.to(Device::cpu()).to_double_vector();
        const std::vector<double> want_dx = dx.to(Device::cpu()).to_double_vector();
        expect_same_bits(yi.to(Device::cpu()).to_double_vector(), want_y, c.name + " eager inference vs forward");

        TestGraph graph(stream);
        try {
            step();
        } catch (const std::exception& e) {
            FAIL() << "a warmed-up training step must be capturable: " << e.what();
        }
        ASSERT_TRUE(graph.end());
        for (int replay = 0; replay < 2; ++replay) {
            fill(stream, y.view(), 0.0);
            fill(stream, yi.view(), 0.0);
            fill(stream, dp.view(), 0.0);
            fill(stream, dx.view(), 0.0);
            ASSERT_TRUE(graph.launch());
            stream.stream().synchronize();
            expect_same_bits(y.to(Device::cpu()).to_double_vector(), want_y, c.name + " graph replay output");
            expect_same_bits(yi.to(Device::cpu()).to_double_vector(), want_y, c.name + " graph replay inference");
            expect_same_bits(dp.to(Device::cpu()).to_double_vector(), want_dp, c.name + " graph replay dL/dparams");
            expect_same_bits(dx.to(Device::cpu()).to_double_vector(), want_dx, c.name + " graph replay dL/dinput");
        }
    }
}
#endif  // TNN_WITH_GPU

TEST_P(BlasLtMlpDtypes, TheLibraryEpiloguesRunWhenOffered) {
    TNN_SKIP_WITHOUT_BLASLT_GPU();
    const DType dtype = GetParam();
    // Width 64, aligned biases: ReLU + bias fuse into every forward GEMM (RELU_AUX_BIAS for hidden
    // layers, BIAS for the output), and the backward's ReLU derivative into DRELU.
    const MlpCase& c = case_named("relu_w64_d2_b1000");
    const auto net = create_network(c.n_in, c.n_out, config_for(c, dtype));
    const MlpData d = make_data(c, *net, 4);
    TestStream stream(Device::gpu(0));
    blaslt_mlp::Counters before = blaslt_mlp::counters();
    {
        EpiloguePolicy policy(true);
        (void)run_gpu(*net, stream, d);
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
        (void)run_gpu(*net, stream, d);
    }
    after = blaslt_mlp::counters();
    EXPECT_EQ(after.forward_epilogues, before.forward_epilogues);
    EXPECT_EQ(after.backward_epilogues, before.backward_epilogues);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, BlasLtMlpDtypes, ::testing::ValuesIn(kDtypes), dtype_param_name);

TEST(BlasLtMlpGpu, Tf32IsUsedOnlyWhenAskedFor) {
    TNN_SKIP_WITHOUT_BLASLT_GPU();
    const MlpCase& c = case_named("tanh_w16_d4_b257");
    json cfg = config_for(c, DType::f32);
    const auto net32 = create_network(c.n_in, c.n_out, cfg);
    cfg["tf32"] = true;
    const auto net_tf32 = create_network(c.n_in, c.n_out, cfg);
    EXPECT_EQ(net_tf32->hyperparams().value("tf32", false), true);
    EXPECT_FALSE(net32->hyperparams().contains("tf32"));
    const MlpData d = make_data(c, *net32, 17);
    TestStream stream(Device::gpu(0));
    const MlpResult got32 = run_gpu(*net32, stream, d), got_tf32 = run_gpu(*net_tf32, stream, d);
    const MlpResult ref = run_reference<double>(*net32, d);
    // TF32 keeps 10 mantissa bits of each product's inputs, as fp16 does: its error is bounded like the
    // naive fp16 computation's (which also rounds the stored activations, so it is the larger one).
    // (The same seed draws the same values for the fp16 network, rounded to fp16.)
    const auto net16 = create_network(c.n_in, c.n_out, config_for(c, DType::f16));
    const MlpResult naive16 = run_reference<tnn::half>(*net16, make_data(c, *net16, 17));
    expect_matches(*net32, c.batch, got_tf32, ref, naive16, dtype_epsilon(DType::f16), "tf32");
    // And TF32 really ran: its error is orders of magnitude above fp32's (2^-11 vs 2^-24 per rounding;
    // a factor 16 leaves room for lucky cancellations).
    const double err32 = l2_distance(got32.y, ref.y), err_tf32 = l2_distance(got_tf32.y, ref.y);
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

TEST(BlasLtMlpGpu, BadCallsRaiseTypedErrors) {
    TNN_SKIP_WITHOUT_BLASLT_GPU();
    const Device gpu = Device::gpu(0);
    const Stream stream = Stream::gpu(nullptr, 0);
    const auto net = create_network(3, 2, {{"otype", "BlasLtMLP"}, {"n_neurons", 16}, {"n_hidden_layers", 1}, {"dtype", "float16"}});
    Tensor params(1, static_cast<int64_t>(net->n_params()), DType::f16, gpu);
    fill(stream, params.view(), 0.1);
    Tensor x(10, 3, DType::f32, gpu), y(10, 2, DType::f16, gpu), y32(10, 2, DType::f32, gpu);
    fill(stream, x.view(), 0.5);
    std::vector<tnn::half> host_params(net->n_params(), tnn::half(0.1f));
    EXPECT_THROW(net->inference(stream, x.view(), y.view(), host_params.data()), DeviceError);
    EXPECT_THROW(net->inference(stream, x.view(), y32.view(), params.data()), DTypeError);  // output_dtype is fp16
    Tensor xb(10, 3, DType::bf16, gpu);
    EXPECT_THROW(net->inference(stream, xb.view(), y.view(), params.data()), DTypeError);
    auto ctx = net->forward(stream, x.view(), y.view(), params.data(), false);
    Tensor dp(1, static_cast<int64_t>(net->n_params()), DType::f16, gpu);
    EXPECT_THROW(net->backward(stream, *ctx, x.view().rows_slice(0, 5), y.view().rows_slice(0, 5),
                               y.view().rows_slice(0, 5), nullptr, dp.data(), params.data(), GradMode::overwrite),
                 ShapeError);
    // A context from another module cannot drive this backward.
    const auto other = create_network(3, 2, {{"otype", "PortableMLP"}, {"n_neurons", 16}, {"n_hidden_layers", 1}});
    Tensor p32(1, static_cast<int64_t>(other->n_params()), DType::f32, gpu), yo(10, 2, DType::f32, gpu);
    fill(stream, p32.view(), 0.1);
    auto other_ctx = other->forward(stream, x.view(), yo.view(), p32.data(), false);
    EXPECT_THROW(net->backward(stream, *other_ctx, x.view(), y.view(), y.view(), nullptr, dp.data(), params.data(),
                               GradMode::overwrite),
                 Error);
    stream.synchronize();
}

}  // namespace
