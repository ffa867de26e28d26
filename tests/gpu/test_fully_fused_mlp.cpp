// FullyFusedMLP on the GPU against the CPU reference: one list of cases (widths 16..128, depths,
// every activation, bias, batch 0 / 1 / 7 / 1000 / 65537, fp32 or 16-bit input, 16-bit or fp32
// output, strided views) x {float16, bfloat16}, each compared with MlpReference<double> under the
// "no worse than 4x the naive 16-bit loop (MlpReference<half> / <bfloat16>)" rule plus an
// elementwise bound; then the fallback plans, bitwise reproducibility, accumulation, graph capture,
// and the fused training step against the unfused calls.
#include "gpu_test_util.h"

#include "losses/loss_gpu.h"
#include "mlp_accuracy.h"
#include "networks/fully_fused_mlp.h"
#include "networks/portable_mlp.h"

#include <cmath>
#include <tuple>

using namespace tnn;
using namespace tnn::test;

namespace {

struct FusedCase {
    std::string name;
    uint32_t n_in, n_out, width, hidden;
    std::string act, out_act;
    bool bias;
    int64_t batch;
    bool input_in_network_dtype = false;  // else fp32 input
    bool output_f32 = false;              // else the network dtype
    bool strided = false;                 // input / output / gradients as column slices of wider tensors
    // Inputs, parameters and output gradients on coarse dyadic grids (exact in fp16 and bf16), so
    // that ReLU kinks fall on the same side in every precision (see test_gpu_mlp.cpp).
    bool exact_kinks = false;
};

std::ostream& operator<<(std::ostream& os, const FusedCase& c) { return os << c.name; }

const std::vector<FusedCase>& fused_cases() {
    static const std::vector<FusedCase> cases = {
        // The benchmark shapes (2 hidden layers, ReLU, fp32 in, 16-bit out).
        {"w64_32to16_batch65537", 32, 16, 64, 2, "ReLU", "None", false, 65537, false, false, false, true},
        {"w128_32to16_batch1000", 32, 16, 128, 2, "ReLU", "None", false, 1000, false, false, false, true},
        {"w64_64to64_batch4099", 64, 64, 64, 2, "ReLU", "None", false, 4099, false, false, false, true},
        {"w16_32to16_batch1000", 32, 16, 16, 2, "ReLU", "None", false, 1000, false, false, false, true},
        // Batch sizes and tails.
        {"w32_batch0", 3, 4, 32, 2, "ReLU", "None", false, 0, false, false, false, true},
        {"w32_batch1", 3, 4, 32, 2, "ReLU", "None", true, 1, false, false, false, true},
        {"w16_batch7_one_output", 3, 1, 16, 1, "ReLU", "ReLU", false, 7, false, false, false, true},
        {"w128_batch7_bias", 5, 2, 128, 1, "ReLU", "None", true, 7, true, true, false, true},
        // 4116 = 128 * 32 + 20: with 32 rows per warp (two m16 tiles) the last warp's second tile is
        // partly valid.
        {"w64_tail20_batch4116", 32, 16, 64, 2, "ReLU", "None", false, 4116, false, false, false, true},
        // Activations (hidden and output), with their gradients.
        {"sine_sine_w64_bias_f32out", 3, 3, 64, 3, "Sine", "Sine", true, 1000, false, true, false, false},
        {"silu_silu_w32_16bit_io", 5, 4, 32, 2, "SiLU", "SiLU", true, 1000, true, false, false, false},
        {"tanh_sigmoid_w128_pads17", 17, 17, 128, 1, "Tanh", "Sigmoid", true, 333, false, true, false, false},
        {"leaky_exponential_w16_deep5", 4, 2, 16, 5, "LeakyReLU", "Exponential", false, 1000, false, false, false, true},
        {"softplus_squareplus_w64", 7, 5, 64, 2, "Softplus", "Squareplus", true, 1000, false, false, false, false},
        {"none_tanh_w32", 6, 3, 32, 2, "None", "Tanh", false, 1000, false, false, false, false},
        {"sigmoid_none_w16_bias", 2, 2, 16, 3, "Sigmoid", "None", true, 1000, true, true, false, false},
        {"squareplus_softplus_w128", 8, 8, 128, 2, "Squareplus", "Softplus", false, 257, false, false, false, false},
        {"exponential_leaky_w32", 3, 3, 32, 1, "Exponential", "LeakyReLU", true, 1000, false, false, false, true},
        // Wide inputs / outputs (several k-steps in layer 0, several chunks in the output layer),
        // odd widths (2-byte copies), strided views.
        {"wide_io_100to70_w64", 100, 70, 64, 2, "Tanh", "None", true, 1000, false, false, false, false},
        {"odd_16bit_input_3to5_w32", 3, 5, 32, 2, "ReLU", "None", false, 1000, true, false, false, true},
        {"strided_views_w64", 13, 7, 64, 2, "SiLU", "None", true, 1000, false, true, true, false},
        {"strided_16bit_w16", 9, 3, 16, 2, "ReLU", "Sigmoid", false, 777, true, false, true, true},
        // Depth: many hidden layers (weights may be streamed per layer at width 128).
        {"deep12_w128", 16, 4, 128, 12, "Tanh", "None", false, 300, false, false, false, false},
        {"deep8_w64_bias", 32, 16, 64, 8, "Tanh", "None", true, 1000, false, false, false, false},
    };
    return cases;
}

json config_for(const FusedCase& c, DType dtype) {
    json j = {{"otype", "FullyFusedMLP"}, {"n_neurons", c.width},          {"n_hidden_layers", c.hidden},
              {"activation", c.act},      {"output_activation", c.out_act}, {"dtype", dtype_name(dtype)}};
    if (c.bias) j["bias"] = true;
    if (c.output_f32) j["output_dtype"] = "float32";
    return j;
}

std::vector<float> draw(size_t n, double max, bool exact, uint64_t seed) {
    std::vector<double> v = random_vector(n, -max, max, seed);
    std::vector<float> out(n);
    for (size_t i = 0; i < n; ++i) out[i] = static_cast<float>(exact ? std::round(v[i] * 8) / 8 : v[i]);
    return out;
}

// Host tensors of the case's data, already in the dtypes the network takes (so the fp64 reference,
// the naive reference and the GPU all see the same values).
struct FusedData {
    Tensor x, params, dL_dy;     // x: input dtype; params: network dtype; dL_dy: output dtype
    std::vector<double> params64;
};

Tensor host_tensor(const std::vector<float>& v, int64_t rows, int64_t cols, DType dtype) {
    Tensor f = from_floats(v, rows, cols, Device::cpu());
    if (dtype == DType::f32) return f;
    Tensor t(rows, cols, dtype);
    convert(Stream::cpu(), f.view(), t.view());
    return t;
}

FusedData make_data(const FusedCase& c, const Network& net, uint64_t seed) {
    const DType t = net.param_dtype();
    FusedData d;
    std::vector<float> p;
    if (c.exact_kinks) {
        p = draw(net.n_params(), 0.25, true, seed + 2);
        for (auto& v : p) v = std::round(v * 16) / 16;
    } else {
        p.resize(net.n_params());
        net.init_params(seed + 2, p.data());
        const auto b = random_vector(net.n_params() - net.n_matrix_params(), -0.5, 0.5, seed + 3);
        for (size_t i = net.n_matrix_params(); i < net.n_params(); ++i) p[i] = static_cast<float>(b[i - net.n_matrix_params()]);
    }
    d.params = host_tensor(p, 1, static_cast<int64_t>(p.size()), t);
    d.params64 = d.params.to_double_vector();
    d.x = host_tensor(draw(static_cast<size_t>(c.batch) * c.n_in, 1.0, c.exact_kinks, seed), c.batch, c.n_in,
                      c.input_in_network_dtype ? t : DType::f32);
    d.dL_dy = host_tensor(draw(static_cast<size_t>(c.batch) * c.n_out, 1.0, c.exact_kinks, seed + 1), c.batch, c.n_out,
                          net.output_dtype());
    return d;
}

struct FusedResult {
    Tensor y, dL_dinput, dL_dparams;  // host copies in the network's dtypes
};

// The CPU reference with storage type T: double (the oracle, results in fp64) or the network's
// half / bfloat16 (the naive loop, results in the dtypes the GPU writes: output, input, parameters).
template <typename T> FusedResult run_reference(const Network& net, const FusedData& d) {
    const MlpLayout& l = net.layout();
    const bool oracle = std::is_same_v<T, double>;
    std::vector<T> p(net.n_params());
    for (size_t i = 0; i < p.size(); ++i) p[i] = T(d.params64[i]);
    FusedResult r{Tensor(d.x.rows(), l.n_output_dims, oracle ? DType::f64 : net.output_dtype()),
                  Tensor(d.x.rows(), l.n_input_dims, oracle ? DType::f64 : d.x.dtype()),
                  Tensor(1, static_cast<int64_t>(net.n_params()), oracle ? DType::f64 : net.param_dtype())};
    MlpReference<T> ref(l);
    auto ctx = ref.forward(d.x.view(), r.y.view(), p.data(), true);
    View dx = r.dL_dinput.view();
    ref.backward(*ctx, d.dL_dy.view(), &dx, r.dL_dparams.ptr<T>(), p.data(), GradMode::overwrite);
    return r;
}

FusedResult run_naive(const Network& net, const FusedData& d) {
    return net.param_dtype() == DType::f16 ? run_reference<tnn::half>(net, d) : run_reference<tnn::bfloat16>(net, d);
}

// A device tensor holding `host` inside a wider one (extra columns and rows filled with a sentinel)
// when `strided`, plus the view the module is given.
constexpr double kSentinel = -1536.0;  // exact in fp16, bf16 and fp32
struct Placed {
    Tensor storage;
    View view;
};
Placed place(const Tensor& host, Device dev, const Stream& stream, bool strided) {
    const int64_t extra_cols = strided ? 3 : 0, extra_rows = 5;
    Placed p;
    p.storage = Tensor(host.rows() + extra_rows, host.cols() + extra_cols, host.dtype(), dev);
    fill(stream, p.storage.view(), kSentinel);
    p.view = p.storage.view().rows_slice(0, host.rows()).cols_slice(0, host.cols());
    if (host.numel() > 0) copy(stream, host.view(), p.view);
    return p;
}
Placed empty_like(int64_t rows, int64_t cols, DType t, Device dev, const Stream& stream, bool strided) {
    return place(Tensor(rows, cols, t), dev, stream, strided);
}
// The values of the view (and a check that nothing outside it was written).
Tensor take(const Placed& p, const Stream& stream, const std::string& what) {
    Tensor whole = p.storage.to(Device::cpu(), stream);
    const std::vector<double> all = whole.to_double_vector();
    Tensor out(p.view.rows, p.view.cols, p.view.dtype);
    for (int64_t r = 0; r < whole.rows(); ++r)
        for (int64_t c = 0; c < whole.cols(); ++c) {
            const double v = all[static_cast<size_t>(r * whole.cols() + c)];
            if (r >= p.view.rows || c >= p.view.cols) {
                if (v != kSentinel) {
                    ADD_FAILURE() << what << ": wrote outside the view at (" << r << ", " << c << ")";
                    return out;
                }
            }
        }
    if (out.numel() > 0) copy(Stream::cpu(), whole.view().rows_slice(0, out.rows()).cols_slice(0, out.cols()), out.view());
    return out;
}

FusedResult run_gpu(const Network& net, const Stream& stream, const FusedData& d, bool strided, Tensor* y_inference) {
    const Device dev = stream.device();
    const Placed x = place(d.x, dev, stream, strided), g = place(d.dL_dy, dev, stream, strided);
    const Tensor p = to_device(d.params, dev);
    Placed y = empty_like(d.x.rows(), net.n_output_dims(), net.output_dtype(), dev, stream, strided);
    Placed yi = empty_like(d.x.rows(), net.n_output_dims(), net.output_dtype(), dev, stream, strided);
    Placed dx = empty_like(d.x.rows(), net.n_input_dims(), d.x.dtype(), dev, stream, strided);
    Tensor dp(1, static_cast<int64_t>(net.n_params()), net.param_dtype(), dev);
    fill(stream, dx.view, 7.0);  // overwrite mode must replace every value
    fill(stream, dp.view(), 7.0);
    auto ctx = net.forward(stream, x.view, y.view, p.data(), true);
    net.inference(stream, x.view, yi.view, p.data());
    net.backward(stream, *ctx, x.view, y.view, g.view, &dx.view, dp.data(), p.data(), GradMode::overwrite);
    stream.synchronize();
    if (y_inference) *y_inference = take(yi, stream, "inference output");
    return {take(y, stream, "output"), take(dx, stream, "dL/dinput"), dp.to(Device::cpu(), stream)};
}

// Compares a GPU result with the fp64 reference: the elementwise rule above, and the shared
// expect_matches_reference (elementwise n eps (max|ref| + |ref|) with n the longest accumulation
// chain; whole tensor ||got - ref|| <= 4 ||naive - ref|| + sqrt(n) eps ||ref||), eps being the
// network dtype's epsilon.
void expect_close_to_reference(const Network& net, const FusedResult& got, const FusedResult& ref,
                               const FusedResult& naive, int64_t batch, const std::string& what) {
    const MlpTermCounts n = mlp_term_counts(net.layout(), batch);
    const double eps = dtype_epsilon(net.param_dtype());
    const std::vector<float> y = to_floats(got.y), dx = to_floats(got.dL_dinput), dp = to_floats(got.dL_dparams);
    expect_matches_reference(y, ref.y.to_double_vector(), to_floats(naive.y), {eps, n.forward}, what + " output");
    expect_matches_reference(dx, ref.dL_dinput.to_double_vector(), to_floats(naive.dL_dinput), {eps, n.input_grad},
                             what + " dL/dinput");
    expect_matches_reference(dp, ref.dL_dparams.to_double_vector(), to_floats(naive.dL_dparams), {eps, n.param_grad},
                             what + " dL/dparams");
    auto whole = [](const Tensor& t) { return std::vector<std::pair<size_t, size_t>>{{0, size_t(t.numel())}}; };
    expect_no_worse_than_naive(widen(y), ref.y.to_double_vector(), naive.y.to_double_vector(), eps, whole(ref.y),
                               what + " output");
    expect_no_worse_than_naive(widen(dx), ref.dL_dinput.to_double_vector(), naive.dL_dinput.to_double_vector(), eps,
                               whole(ref.dL_dinput), what + " dL/dinput");
    expect_no_worse_than_naive(widen(dp), ref.dL_dparams.to_double_vector(), naive.dL_dparams.to_double_vector(), eps,
                               mlp_parameter_blocks(net.layout()), what + " dL/dparams");
}

class FullyFusedMlpGpu : public ::testing::TestWithParam<std::tuple<FusedCase, DType>> {};

TEST_P(FullyFusedMlpGpu, MatchesFp64Reference) {
    const auto& [c, dtype] = GetParam();
    TNN_SKIP_WITHOUT_GPU();
    const auto net = create_network(c.n_in, c.n_out, config_for(c, dtype));
    const FusedData data = make_data(c, *net, 1234);
    const FusedResult ref = run_reference<double>(*net, data);
    const FusedResult naive = run_naive(*net, data);
    TestStream stream(Device::gpu(0));
    Tensor y_inference;
    const FusedResult got = run_gpu(*net, stream, data, c.strided, &y_inference);
    expect_close_to_reference(*net, got, ref, naive, c.batch, c.name);
    // Inference and forward run the same arithmetic: same bits.
    expect_same_bits(to_floats(got.y), to_floats(y_inference), "forward vs inference");
    if (c.batch == 0)
        for (float v : to_floats(got.dL_dparams)) ASSERT_EQ(v, 0.0f) << "an empty batch must give a zero gradient";
}

std::string case_name(const ::testing::TestParamInfo<std::tuple<FusedCase, DType>>& info) {
    return std::get<0>(info.param).name + "_" + dtype_name(std::get<1>(info.param));
}

INSTANTIATE_TEST_SUITE_P(Cases, FullyFusedMlpGpu,
                         ::testing::Combine(::testing::ValuesIn(fused_cases()), ::testing::Values(DType::f16, DType::bf16)),
                         case_name);

const FusedCase& case_named(const std::string& name) {
    for (const auto& c : fused_cases())
        if (c.name == name) return c;
    throw Error("no FullyFusedMLP test case named " + name);
}

// Whether this build has the backward kernel an override asks for (tiles per warp, warps per block,
// dL/doutput in place) for a case.
bool override_has_kernel(const FusedCase& c, const ffm::PlanOverride& o) {
    if (o.backward_m_tiles && !ffm::has_backward_m_tiles(c.width, o.backward_m_tiles)) return false;
    const bool relu = c.act == "ReLU" && c.out_act == "None" && !o.generic_kernels;
    const int tiles = o.backward_m_tiles ? o.backward_m_tiles : 1;
    if (o.dy_global && !ffm::backward_reads_dy_in_place(c.width, relu, tiles)) return false;
    return o.backward_warps <= ffm::backward_max_warps(c.width, relu, tiles);
}

TEST(FullyFusedMlpGpuPlans, FallbackPathsMatchTheReference) {
    // Small configs forced onto the paths deep or wide networks take: weights reloaded per layer,
    // activation stash in global memory, weight-gradient accumulators in global memory, few warps.
    TNN_SKIP_WITHOUT_GPU();
    // The generic kernels run on ReLU / None networks too (override 5), and a one-block batch writes
    // dL/dparams from the kernel itself, also from accumulators in global memory (w128_batch7_bias,
    // w32_batch1).
    std::vector<ffm::PlanOverride> overrides(13);
    overrides[0].stream_weights = true;
    overrides[1].stash_in_global = true;
    overrides[2].dw_in_global = true;
    overrides[3].stream_weights = overrides[3].stash_in_global = overrides[3].dw_in_global = true;
    overrides[3].forward_warps = 2, overrides[3].backward_warps = 2;
    overrides[4].forward_warps = 1, overrides[4].backward_warps = 1;
    overrides[5].generic_kernels = true;
    // Two m16 tiles per warp in the backward (widths <= 64 on NVIDIA): alone, with few warps, and
    // with the global-memory fallbacks ...
    overrides[6].backward_m_tiles = 2;
    overrides[7].backward_m_tiles = 2, overrides[7].backward_warps = 2;
    overrides[8] = overrides[3];
    overrides[8].backward_m_tiles = 2;
    // ... and one m16 tile where the planner would take two (the default of 32->64->16 and below
    // without the wgmma kernel).
    overrides[9].backward_m_tiles = 1;
    // dL/doutput read in place (no dy rows in shared memory) with 8 and with 12 warps of one tile (the
    // ReLU / linear-output kernels up to width 64 only: backward_max_warps; 12 is their default where
    // it fits with the weights and the stash on chip, e.g. w64_64to64).
    overrides[10].dy_global = true, overrides[10].backward_warps = 8;
    overrides[11].dy_global = true, overrides[11].backward_warps = 12, overrides[11].backward_m_tiles = 1;
    // 12 warps with dL/doutput staged where that fits (else the planner's next tier).
    overrides[12].backward_warps = 12, overrides[12].backward_m_tiles = 1;
    // One-tile plans on the mma.sync kernel: where the device has the wgmma kernel the planner would
    // take it for these (FullyFusedMlpGpuPlans.WgmmaBackward... covers that one).
    overrides[9].no_wgmma = overrides[11].no_wgmma = overrides[12].no_wgmma = true;
    for (const char* name :
         {"sine_sine_w64_bias_f32out", "w64_64to64_batch4099", "leaky_exponential_w16_deep5", "w128_batch7_bias",
          "w64_tail20_batch4116", "w32_batch1"})
        for (size_t i = 0; i < overrides.size(); ++i) {
            const FusedCase& c = case_named(name);
            if (!override_has_kernel(c, overrides[i])) continue;
            const auto net = create_network(c.n_in, c.n_out, config_for(c, DType::f16));
            const FusedData data = make_data(c, *net, 77);
            const FusedResult ref = run_reference<double>(*net, data), naive = run_naive(*net, data);
            ffm::PlanOverrideScope scope(overrides[i]);
            TestStream stream(Device::gpu(0));
            const FusedResult got = run_gpu(*net, stream, data, c.strided, nullptr);
            expect_close_to_reference(*net, got, ref, naive, c.batch, msg(c.name, " with override ", i));
        }
}

#ifdef TNN_WITH_CUDA
void check_wgmma_case(const FusedCase& c, DType dtype, const std::string& what, const Device& dev);
// check_wgmma_case for each case in both dtypes.
void expect_wgmma_cases(const std::vector<FusedCase>& cases) {
    const Device dev = Device::gpu(0);
    for (const FusedCase& c : cases)
        for (DType dtype : {DType::f16, DType::bf16}) {
            const std::string what = msg(c.name, " ", dtype_name(dtype));
            // An error (a CUDA fault, a plan that does not fit) names its case.
            try {
                check_wgmma_case(c, dtype, what, dev);
            } catch (const std::exception& e) {
                FAIL() << what << ": " << e.what();
            }
        }
}

// The wgmma backward kernels (BackwardPlan::wgmma: swizzled tiles, dW by wgmma) where the build
// and the device have them (an sm_90a build on an sm_90 GPU must): dL/dparams against the
// fp64 reference like every plan; dL/dinput and the fused step's loss values and dL/dinput bit for
// bit against the mma.sync kernel on the same block otherwise (at width 64 the chain and the forward
// pass are the same instructions, only dW is grouped otherwise; at width 128 the hidden layers' go
// through wgmma, whose bits bench/wgmma_probe.cu found equal to mma.sync's on the same operands). Both dtypes, inputs narrower than 64
// (the tiles' unused columns), 1 to 64 outputs, 1 to 3 hidden layers (at width 128 at most 2: a third
// does not fit on chip), 16-bit input and fp32 output, tails, and one block (its slot reduced, not
// written directly: red.global.add). The fused step equals the unfused one bit for bit under the
// width-64 kernel in FullyFusedMlpGpuFusedLoss (its default plan at 64->64->64 and the 12-warp
// overrides), under the width-128 one there only through the default plan of its width-128 case.
void check_wgmma_case(const FusedCase& c, DType dtype, const std::string& what, const Device& dev) {
    ffm::PlanOverride wg;  // the wgmma kernel's block: 12 warps at width 64, 8 at 128
    wg.backward_warps = ffm::wgmma_backward_warps(int(c.width)), wg.backward_m_tiles = 1, wg.dw_in_global = true;
    ffm::PlanOverride plain = wg;
    plain.no_wgmma = true;
    const auto net = create_network(c.n_in, c.n_out, config_for(c, dtype));
    const FusedData d = make_data(c, *net, 41);
    const FusedResult ref = run_reference<double>(*net, d), naive = run_naive(*net, d);
    FusedResult r[2];
    for (int i = 0; i < 2; ++i) {
        ffm::PlanOverrideScope scope(i == 0 ? wg : plain);
        TestStream stream(dev);
        r[i] = run_gpu(*net, stream, d, false, nullptr);
        // The plan the backward launched: the wgmma kernel, or not with the override.
        ASSERT_EQ(ffm::last_backward().plan.wgmma, i == 0) << what;
    }
    expect_close_to_reference(*net, r[0], ref, naive, c.batch, what + " wgmma");
    expect_same_bits(to_floats(r[0].dL_dinput), to_floats(r[1].dL_dinput), what + " dL/dinput");
    // The fused training step (L2), with and without dL/dinput.
    const Tensor target_host =
        host_tensor(draw(size_t(c.batch) * c.n_out, 1.0, false, 43), c.batch, c.n_out, DType::f32);
    std::vector<float> grads_with_dx;  // the wgmma kernel's dL/dparams of the fused step
    for (const bool with_dx : {true, false}) {
        std::vector<float> values[2], dx[2], grads[2];
        for (int i = 0; i < 2; ++i) {
            ffm::PlanOverrideScope scope(i == 0 ? wg : plain);
            TestStream stream(dev);
            const Tensor x = to_device(d.x, dev), p = to_device(d.params, dev), t = to_device(target_host, dev);
            Tensor v(c.batch, c.n_out, DType::f32, dev), g(c.batch, c.n_in, d.x.dtype(), dev);
            Tensor gp(1, int64_t(net->n_params()), dtype, dev);
            fill(stream, v.view(), 7.0);
            fill(stream, g.view(), 7.0);
            View gv = g.view();
            ffm::fused_loss_backward(*net, stream, x.view(), t.view(), LossKind::l2, 128.0f, v.view(),
                                     with_dx ? &gv : nullptr, gp.data(), p.data());
            ASSERT_EQ(ffm::last_backward().plan.wgmma, i == 0) << what;
            stream.stream().synchronize();
            values[i] = to_floats(v.to(Device::cpu(), stream));
            dx[i] = to_floats(g.to(Device::cpu(), stream));
            grads[i] = to_floats(gp.to(Device::cpu(), stream));
        }
        const std::string how = what + (with_dx ? " fused step" : " fused step without dL/dinput");
        expect_same_bits(values[0], values[1], how + " loss values");
        expect_same_bits(dx[0], dx[1], how + " dL/dinput");
        // dL/dparams: the same bits without dL/dinput (the kernel stops after layer 0's dW).
        if (with_dx) grads_with_dx = grads[0];
        else expect_same_bits(grads[0], grads_with_dx, how + " dL/dparams vs with dL/dinput");
    }
}

// Whether the wgmma backward kernel of `width` runs here, in both dtypes. The choice is the device's
// compute capability and the build's code together: an sm_90a build on an sm_90 GPU must have it (a
// failure, not a skip); any other GPU, or a build without sm_90a (TNN_CUDA_ARCHITECTURES=90 or 80),
// must not, and runs the mma.sync kernel instead.
bool wgmma_here(int width) {
    const bool available = ffm::wgmma_backward_available(0, DType::f16, width);
#if defined(TNN_TEST_EXPECT_WGMMA)
    const bool hopper = gpu::device_properties(0).capability == gpu::kCcHopper;
    if (TNN_TEST_EXPECT_WGMMA && hopper)
        EXPECT_TRUE(available) << "an sm_90a build on an sm_90 GPU must have the width-" << width
                               << " wgmma backward kernel";
    if (!TNN_TEST_EXPECT_WGMMA || !hopper)
        EXPECT_FALSE(available) << "the width-" << width << " wgmma backward kernel on "
                                << gpu::device_properties(0).arch << " with a build of \"" << gpu_architectures() << "\"";
#endif  // TNN_TEST_EXPECT_WGMMA
    if (available) EXPECT_TRUE(ffm::wgmma_backward_available(0, DType::bf16, width)) << width;
    return available;
}

TEST(FullyFusedMlpGpuPlans, WgmmaBackwardMatchesTheReferenceAndTheMmaSyncKernel) {
    TNN_SKIP_WITHOUT_GPU();
    if (!wgmma_here(64)) GTEST_SKIP() << "no width-64 wgmma backward kernel on this device / build";
    const std::vector<FusedCase> cases = {
        case_named("w64_64to64_batch4099"),
        case_named("w64_32to16_batch65537"),
        {"w64_3to1_batch777", 3, 1, 64, 2, "ReLU", "None", false, 777, false, false, false, true},
        {"w64_64to16_h3_16bit_in_batch5000", 64, 16, 64, 3, "ReLU", "None", false, 5000, true, false, false, true},
        {"w64_17to33_f32out_batch100", 17, 33, 64, 1, "ReLU", "None", false, 100, false, true, false, true},
        {"w64_32to2_batch1", 32, 2, 64, 2, "ReLU", "None", false, 1, false, false, false, true},
        // Several tiles per block (132 blocks of 192 rows on an H200) with one and three hidden layers
        // (the top dz in either buffer, the column blocks dealt to other warpgroups), 40 inputs padded to 48
        // (the second column block of layer 0 half used) and 48 outputs.
        {"w64_40to64_h1_batch60001", 40, 64, 64, 1, "ReLU", "None", false, 60001, false, false, false, true},
        {"w64_32to48_h3_batch70001", 32, 48, 64, 3, "ReLU", "None", false, 70001, false, false, false, true},
    };
    expect_wgmma_cases(cases);
}

TEST(FullyFusedMlpGpuPlans, WgmmaBackwardAtWidth128MatchesTheReferenceAndTheMmaSyncKernel) {
    TNN_SKIP_WITHOUT_GPU();
    if (!wgmma_here(128)) GTEST_SKIP() << "no width-128 wgmma backward kernel on this device / build";
    const std::vector<FusedCase> cases = {
        // Width 128 (8 warps, two warpgroups; tiles of two swizzled atoms, dW in blocks of 64 rows and
        // 32 columns): the shape over several tiles per block, one hidden layer with 16-bit
        // input, 33 outputs with fp32 output, 2 outputs in one block, 3 -> 1 (FusedPlan.WgmmaKernelFor
        // EightWarpPlansAtWidth128 plans the same on the CPU).
        {"w128_32to16_batch65537", 32, 16, 128, 2, "ReLU", "None", false, 65537, false, false, false, true},
        {"w128_64to16_h1_16bit_in_batch5000", 64, 16, 128, 1, "ReLU", "None", false, 5000, true, false, false, true},
        {"w128_17to33_h1_f32out_batch1000", 17, 33, 128, 1, "ReLU", "None", false, 1000, false, true, false, true},
        {"w128_32to2_batch1", 32, 2, 128, 2, "ReLU", "None", false, 1, false, false, false, true},
        {"w128_3to1_h1_batch777", 3, 1, 128, 1, "ReLU", "None", false, 777, false, false, false, true},
        // 64 outputs (every warp's rows of the top layer's dW job stored), 40 inputs padded to 48 (layer
        // 0's second column block half used), one hidden layer over several tiles per block.
        {"w128_40to64_h1_batch70001", 40, 64, 128, 1, "ReLU", "None", false, 70001, false, false, false, true},
    };
    expect_wgmma_cases(cases);
    // Without an override the planner takes it for the shape on this device.
    const FusedCase& c = case_named("w128_32to16_batch1000");
    const auto net = create_network(c.n_in, c.n_out, config_for(c, DType::f16));
    const FusedData d = make_data(c, *net, 3);
    TestStream stream(Device::gpu(0));
    run_gpu(*net, stream, d, false, nullptr);
    const ffm::BackwardPlan plan = ffm::last_backward().plan;
    EXPECT_TRUE(plan.wgmma && plan.n_warps == 8);
}
#endif  // TNN_WITH_CUDA

// dL/dinput leaves the backward kernels in stores of 4 values (16-bit input: a quad's shuffled pairs),
// 2 (a lane's adjacent columns) or 1, the widest its rows are aligned for (KernelArgs::dx_vec;
// PlanOverride::dx_values caps it): the same values bit for bit with every cap, and nothing written
// outside the view (run_gpu's sentinels). fp32 and 16-bit inputs, even and odd input widths, contiguous
// rows of odd pitch (one value per store), strided rows whose last store has columns past the view,
// tails, one and two m16 tiles per warp, the 12-warp mma.sync block and (where the device has it) the
// wgmma kernel; the fused training step too, with dL/dinput rows padded to a multiple of 4 plus 4 (so
// that 16-bit rows take 4-value stores, a last group of 1, 2 or 3 columns at input widths 5, 6, 3 and
// 7, and the padding must keep its sentinels), where the launcher's choice is checked too
// (last_backward().dx_vec).
#ifdef TNN_WITH_GPU  // ffm::last_backward exists in GPU builds only
TEST(FullyFusedMlpGpuPlans, InputGradientStoreWidthsGiveTheSameBits) {
    TNN_SKIP_WITHOUT_GPU();
    const Device dev = Device::gpu(0);
    std::vector<ffm::PlanOverride> plans(3);
    plans[1].backward_m_tiles = 2;
    plans[2].backward_warps = 12, plans[2].backward_m_tiles = 1, plans[2].no_wgmma = true;
    constexpr int kCaps[] = {0, 2, 1};  // dx_values: the widest the rows allow, pairs, one value
    std::vector<FusedCase> cases;
    for (const char* name : {"w64_32to16_batch65537", "w64_tail20_batch4116", "w128_32to16_batch1000",
                             "w64_64to64_batch4099", "strided_views_w64", "strided_16bit_w16",
                             "odd_16bit_input_3to5_w32", "w16_32to16_batch1000"})
        cases.push_back(case_named(name));
    for (const uint32_t n_in : {5u, 6u, 7u}) {  // 3 -> 5 with other input widths (ReLU / None: fused step)
        FusedCase c = case_named("odd_16bit_input_3to5_w32");
        c.n_in = n_in;
        c.name = msg("16bit_input_", n_in, "to5_w32");
        cases.push_back(c);
    }
    for (const FusedCase& base : cases)
        for (const bool input16 : {false, true})
            for (const DType dtype : {DType::f16, DType::bf16})
                for (size_t k = 0; k < plans.size(); ++k) {
                    FusedCase c = base;
                    if (c.input_in_network_dtype && !input16) continue;  // the same runs as with input16
                    c.input_in_network_dtype = c.input_in_network_dtype || input16;
                    if (!override_has_kernel(c, plans[k])) continue;
                    const std::string what = msg(c.name, input16 ? " 16-bit input " : " ", dtype_name(dtype), " plan ", k);
                    const auto net = create_network(c.n_in, c.n_out, config_for(c, dtype));
                    const FusedData d = make_data(c, *net, 91);
                    FusedResult r[3];
                    for (int i = 0; i < 3; ++i) {
                        ffm::PlanOverride o = plans[k];
                        o.dx_values = kCaps[i];
                        ffm::PlanOverrideScope scope(o);
                        TestStream stream(dev);
                        r[i] = run_gpu(*net, stream, d, c.strided, nullptr);
                    }
                    for (int i = 1; i < 3; ++i) {
                        const std::string how = msg(what, " at most ", kCaps[i], " per store");
                        expect_same_bits(to_floats(r[0].dL_dinput), to_floats(r[i].dL_dinput), how + " dL/dinput");
                        expect_same_bits(to_floats(r[0].dL_dparams), to_floats(r[i].dL_dparams), how + " dL/dparams");
                    }
                    if (!ffm::can_fuse_loss(*net, dev, LossKind::l2)) continue;
                    // The fused step with dL/dinput in rows padded to a multiple of 4 columns plus 4, every cap.
                    const Tensor target_host =
                        host_tensor(draw(size_t(c.batch) * c.n_out, 1.0, false, 92), c.batch, c.n_out, DType::f32);
                    const int64_t pitch = (c.n_in + 3) / 4 * 4 + 4;
                    std::vector<float> dx[3], grads[3];
                    for (int i = 0; i < 3; ++i) {
                        ffm::PlanOverride o = plans[k];
                        o.dx_values = kCaps[i];
                        ffm::PlanOverrideScope scope(o);
                        TestStream stream(dev);
                        const Tensor x = to_device(d.x, dev), p = to_device(d.params, dev), t = to_device(target_host, dev);
                        Tensor v(c.batch, c.n_out, DType::f32, dev), g(c.batch, pitch, d.x.dtype(), dev);
                        Tensor gp(1, int64_t(net->n_params()), dtype, dev);
                        fill(stream, g.view(), kSentinel);
                        View gv = g.view().cols_slice(0, c.n_in);
                        // Rows of a multiple of 4 columns (the pitch) from an 8-byte aligned start: by default
                        // 4 values per store for a 16-bit dL/dinput, 2 for fp32 (8 bytes either way); a cap
                        // of 2 or 1 is taken as is.
                        ASSERT_EQ(reinterpret_cast<uintptr_t>(gv.data) % 8, 0u) << what;
                        ffm::fused_loss_backward(*net, stream, x.view(), t.view(), LossKind::l2, 128.0f, v.view(), &gv,
                                                 gp.data(), p.data());
                        EXPECT_EQ(ffm::last_backward().dx_vec, kCaps[i] ? kCaps[i] : c.input_in_network_dtype ? 4 : 2)
                            << what << " fused step, cap " << kCaps[i];
                        stream.stream().synchronize();
                        dx[i] = to_floats(g.to(Device::cpu(), stream));
                        grads[i] = to_floats(gp.to(Device::cpu(), stream));
                    }
                    for (size_t e = 0; e < dx[0].size(); ++e)
                        if (int64_t(e % pitch) >= c.n_in && dx[0][e] != kSentinel) {
                            ADD_FAILURE() << what << " fused step: dL/dinput written past the view at row " << e / pitch
                                          << ", column " << e % pitch;
                            break;
                        }
                    for (int i = 1; i < 3; ++i) {
                        const std::string how = msg(what, " fused step at most ", kCaps[i], " per store");
                        expect_same_bits(dx[0], dx[i], how + " dL/dinput");
                        expect_same_bits(grads[0], grads[i], how + " dL/dparams");
                    }
                }
}
#endif  // TNN_WITH_GPU

TEST(FullyFusedMlpGpuProps, TrainingIsBitwiseReproducible) {
    TNN_SKIP_WITHOUT_GPU();
    // w64_64to64_batch4099: the wgmma kernel (the block's slot updated with red.global.add); with
    // batch 65537 several tiles per block add to each slot element.
    // w128_32to16_batch65537: the width-128 wgmma kernel, several tiles per block.
    const FusedCase many_tiles = {"w64_64to64_batch65537", 64, 64, 64, 2, "ReLU", "None", false, 65537,
                                  false, false, false, true};
    const FusedCase many_tiles_128 = {"w128_32to16_batch65537", 32, 16, 128, 2, "ReLU", "None", false, 65537,
                                      false, false, false, true};
    for (const FusedCase& c : {case_named("w64_32to16_batch65537"), case_named("silu_silu_w32_16bit_io"),
                               case_named("tanh_sigmoid_w128_pads17"), case_named("w64_64to64_batch4099"),
                               many_tiles, many_tiles_128}) {
        const auto net = create_network(c.n_in, c.n_out, config_for(c, DType::f16));
        const FusedData data = make_data(c, *net, 99);
        TestStream stream(Device::gpu(0));
        const FusedResult a = run_gpu(*net, stream, data, false, nullptr);
        free_temporary_memory();  // the second run gets other memory: the bits must not depend on it
        const FusedResult b = run_gpu(*net, stream, data, false, nullptr);
        expect_same_bits(to_floats(a.y), to_floats(b.y), c.name + " output");
        expect_same_bits(to_floats(a.dL_dparams), to_floats(b.dL_dparams), c.name + " dL/dparams");
        expect_same_bits(to_floats(a.dL_dinput), to_floats(b.dL_dinput), c.name + " dL/dinput");
    }
}

TEST(FullyFusedMlpGpuProps, AccumulateAddsToTheGradient) {
    TNN_SKIP_WITHOUT_GPU();
    // batch 1000: the per-block partials and the reduction kernel; batch 1: one block writes dL/dparams;
    // w64_64to64_batch4099, w128_32to16_batch1000: the wgmma kernels (red.global.add into the block's slot).
    for (const char* name : {"softplus_squareplus_w64", "w32_batch1", "w64_64to64_batch4099", "w128_32to16_batch1000"}) {
        for (DType dtype : {DType::f16, DType::bf16}) {
            const FusedCase& c = case_named(name);
            const auto net = create_network(c.n_in, c.n_out, config_for(c, dtype));
            const FusedData d = make_data(c, *net, 5);
            TestStream stream(Device::gpu(0));
            const FusedResult once = run_gpu(*net, stream, d, false, nullptr);
            const Device gpu = Device::gpu(0);
            const Tensor x = to_device(d.x, gpu), g = to_device(d.dL_dy, gpu), p = to_device(d.params, gpu);
            Tensor y(c.batch, c.n_out, net->output_dtype(), gpu), dp(1, static_cast<int64_t>(net->n_params()), dtype, gpu);
            fill(stream, dp.view(), 0.5);
            auto ctx = net->forward(stream, x.view(), y.view(), p.data(), false);
            net->backward(stream, *ctx, x.view(), y.view(), g.view(), nullptr, dp.data(), p.data(), GradMode::accumulate);
            const std::vector<float> acc = to_floats(dp.to(Device::cpu(), stream)), grad = to_floats(once.dL_dparams);
            // The kernel rounds 0.5 + (fp32 gradient) once; `grad` is that gradient already rounded: the
            // two may differ by the two roundings, each half an ulp of the network dtype.
            const double eps = dtype_epsilon(dtype);
            for (size_t i = 0; i < grad.size(); ++i)
                ASSERT_NEAR(acc[i], 0.5 + grad[i], eps * (std::fabs(0.5 + grad[i]) + std::fabs(grad[i])) + 1e-30)
                    << "param " << i;
        }
    }
}

#ifdef TNN_WITH_GPU
TEST(FullyFusedMlpGpuProps, TrainingStepReplaysFromACapturedGraph) {
    TNN_SKIP_WITHOUT_GPU();
    const FusedCase& c = case_named("w64_64to64_batch4099");
    const auto net = create_network(c.n_in, c.n_out, config_for(c, DType::f16));
    const FusedData d = make_data(c, *net, 8);
    TestStream stream(Device::gpu(0));
    const FusedResult want = run_gpu(*net, stream, d, false, nullptr);  // also the warm-up of the allocator

    const Device gpu = Device::gpu(0);
    const Tensor x = to_device(d.x, gpu), g = to_device(d.dL_dy, gpu), p = to_device(d.params, gpu);
    Tensor y(c.batch, c.n_out, net->output_dtype(), gpu), dp(1, static_cast<int64_t>(net->n_params()), DType::f16, gpu);
    Tensor dx(c.batch, c.n_in, d.x.dtype(), gpu);
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

TEST(FullyFusedMlpGpuFusedLoss, EqualsForwardLossBackwardBitForBit) {
    // The fused training step (ffm::fused_loss_backward: the loss gradient taken inside the backward
    // kernel from the recomputed output) against the three calls it replaces, forward +
    // Loss::evaluate + backward: the same loss values, dL/dinput and dL/dparams, bit for bit. Every
    // ReLU / linear-output case (fp32 and 16-bit input and output, bias, batches 0, 1, 7 and tails),
    // both dtypes, every fused loss with the planner's choice, and L2 / RelativeL2 under the fallbacks.
    TNN_SKIP_WITHOUT_GPU();
    // The target is staged like dL/doutput where that keeps the unfused plan's tiles, else read from
    // global memory (the default of w64_32to16 with two m16 tiles, i.e. without the wgmma kernel; override
    // 2 forces two tiles); overrides 3 and 4 force the latter.
    std::vector<ffm::PlanOverride> overrides(11);
    overrides[1].backward_m_tiles = 1;
    overrides[1].no_wgmma = true;  // the mma.sync kernel's one-tile plans (the default covers wgmma's)
    overrides[2].backward_m_tiles = 2;
    overrides[3].stream_weights = overrides[3].stash_in_global = overrides[3].dw_in_global = true;
    overrides[3].backward_warps = 2;
    overrides[3].fused_target_global = overrides[4].fused_target_global = true;
    // Two tiles with the target from global memory: the chunk-0 prefetch next to chunks loaded in
    // place (64 outputs: chunks 1-3).
    overrides[5].backward_m_tiles = 2;
    overrides[5].fused_target_global = true;
    // dL/doutput (unfused) and the target (fused) read in place, at 8 warps and at 12 (the planner's
    // choice for the width-64 cases whose 12-warp plan keeps the weights and the stash on chip).
    overrides[6].dy_global = true, overrides[6].backward_warps = 8;
    overrides[7].dy_global = true, overrides[7].backward_warps = 12, overrides[7].backward_m_tiles = 1;
    overrides[7].no_wgmma = true;  // the mma.sync kernel (override 10 is the wgmma one)
    // With 12 warps the target goes through the raw input rows where a target row fits one
    // (KernelArgs::target_in_raw: override 7 for most cases; odd_16bit_input_3to5_w32 does not fit);
    // forced to global memory, it is loaded one output chunk ahead in registers (override 8).
    overrides[8] = overrides[7];
    overrides[8].fused_target_global = true;
    // The raw-row target on a plan of few warps with the weights streamed per layer (whose cp.async
    // waits also drain the target copy), the stash and dW in global memory.
    overrides[9] = overrides[3];
    overrides[9].fused_target_global = false;
    overrides[9].dy_global = true;
    // Override 7 with dW in global memory: the wgmma kernel (where the build and device have it) for every
    // width-64 case without bias and with <= 64 padded inputs and outputs, not only 64 inputs.
    overrides[10] = overrides[7];
    overrides[10].dw_in_global = true;
    overrides[10].no_wgmma = false;
    // The same at width 128 (8 warps): the width-128 wgmma kernel for its cases without bias.
    overrides.emplace_back();
    overrides[11].backward_warps = 8, overrides[11].backward_m_tiles = 1, overrides[11].dw_in_global = true;
    // Override 10 with the target loaded one output chunk ahead (what override 8 asked of the wgmma
    // kernel before override 7 was pinned to mma.sync).
    overrides.push_back(overrides[10]);
    overrides[12].fused_target_global = true;
    const Device dev = Device::gpu(0);
    // Plus batches whose N = rows * outputs is a power of two: there the epilogue multiplies by 1 / N
    // (KernelArgs::loss_inv_n) where the loss kernel divides by N; elsewhere it divides too.
    std::vector<FusedCase> cases = fused_cases();
    cases.push_back({"w64_32to16_batch8192_pow2", 32, 16, 64, 2, "ReLU", "None", false, 8192, false, false, false, true});
    cases.push_back({"w64_64to64_batch4096_pow2_bias_f32out", 64, 64, 64, 2, "ReLU", "None", true, 4096, false, true,
                     false, true});
    // A 12-warp plan that stages 16-bit dL/doutput but would read the 4-byte target in place: the
    // fused step must then read the target from global memory, not from rows it never staged.
    cases.push_back({"w64_64to16_h3_16bit_in_batch5000", 64, 16, 64, 3, "ReLU", "None", false, 5000, true, false, false,
                     true});
    // Two outputs: 8-byte target rows, copied into the raw rows 8 bytes at a time (overrides 7, 9).
    cases.push_back({"w64_32to2_batch3001", 32, 2, 64, 2, "ReLU", "None", false, 3001, false, false, false, true});
    // Up to the seventeenth session the unfused plan here was the 12-warp mma.sync kernel with dW on chip
    // and the fused step's 4-byte plan the wgmma kernel, which ffm::same_dw_order refused; since the
    // planner puts the wgmma kernel first both are the wgmma kernel's (FusedPlan.Wgmma... on the CPU).
    cases.push_back({"w64_32to48_batch3001", 32, 48, 64, 2, "ReLU", "None", false, 3001, false, false, false, true});
    // Width 128 under override 11: one hidden layer, fp32 output, several tiles per block.
    cases.push_back({"w128_40to64_h1_f32out_batch70001", 40, 64, 128, 1, "ReLU", "None", false, 70001, false, true,
                     false, true});
    int ran = 0;
    for (const FusedCase& c : cases) {
        if (c.act != "ReLU" || c.out_act != "None" || c.strided) continue;
        for (DType dtype : {DType::f16, DType::bf16})
            for (size_t oi = 0; oi < overrides.size(); ++oi) {
                if (!override_has_kernel(c, overrides[oi]) || (oi == 11 && c.width != 128)) continue;
                for (const char* loss_name : {"L2", "L1", "RelativeL2", "RelativeL1", "MAPE", "SMAPE"}) {
                    if (oi > 0 && std::string(loss_name) != "L2" && std::string(loss_name) != "RelativeL2") continue;
                    const std::string what = msg(c.name, " ", dtype_name(dtype), " ", loss_name, " override ", oi);
                    const auto net = create_network(c.n_in, c.n_out, config_for(c, dtype));
                    const auto loss = create_loss({{"otype", loss_name}});
                    LossKind kind;
                    ASSERT_TRUE(loss_kind_of(*loss, &kind)) << what;
                    ASSERT_TRUE(ffm::can_fuse_loss(*net, dev, kind)) << what;
                    const FusedData d = make_data(c, *net, 31);
                    const Tensor target_host = host_tensor(draw(size_t(c.batch) * c.n_out, 1.0, false, 37), c.batch,
                                                           c.n_out, DType::f32);
                    ffm::PlanOverrideScope scope(overrides[oi]);
                    TestStream stream(dev);
                    const Tensor x = to_device(d.x, dev), p = to_device(d.params, dev), target = to_device(target_host, dev);
                    auto tensor = [&](int64_t cols, DType t) {
                        Tensor r(c.batch, cols, t, dev);
                        fill(stream, r.view(), 7.0);  // every value must be written
                        return r;
                    };
                    Tensor y = tensor(c.n_out, net->output_dtype()), dy = tensor(c.n_out, net->output_dtype());
                    Tensor values_a = tensor(c.n_out, DType::f32), values_b = tensor(c.n_out, DType::f32);
                    Tensor dx_a = tensor(c.n_in, x.dtype()), dx_b = tensor(c.n_in, x.dtype());
                    Tensor dp_a(1, int64_t(net->n_params()), dtype, dev), dp_b(1, int64_t(net->n_params()), dtype, dev);
                    fill(stream, dp_a.view(), 7.0);
                    fill(stream, dp_b.view(), 7.0);
                    constexpr float kLossScale = 128.0f;
                    auto ctx = net->forward(stream, x.view(), y.view(), p.data(), true);
                    loss->evaluate(stream, kLossScale, y.view(), target.view(), nullptr, values_a.view(), dy.view());
                    View dxa = dx_a.view(), dxb = dx_b.view();
                    net->backward(stream, *ctx, x.view(), y.view(), dy.view(), &dxa, dp_a.data(), p.data(),
                                  GradMode::overwrite);
                    ffm::fused_loss_backward(*net, stream, x.view(), target.view(), kind, kLossScale, values_b.view(), &dxb,
                                             dp_b.data(), p.data());
                    stream.stream().synchronize();
                    expect_same_bits(to_floats(values_b.to(Device::cpu(), stream)),
                                     to_floats(values_a.to(Device::cpu(), stream)), what + " loss values");
                    expect_same_bits(to_floats(dx_b.to(Device::cpu(), stream)), to_floats(dx_a.to(Device::cpu(), stream)),
                                     what + " dL/dinput");
                    expect_same_bits(to_floats(dp_b.to(Device::cpu(), stream)), to_floats(dp_a.to(Device::cpu(), stream)),
                                     what + " dL/dparams");
                    if (oi == 7 || oi == 9) {  // the Trainer's call for a network alone: no dL/dinput
                        Tensor values_c = tensor(c.n_out, DType::f32);
                        Tensor dp_c(1, int64_t(net->n_params()), dtype, dev);
                        fill(stream, dp_c.view(), 7.0);
                        ffm::fused_loss_backward(*net, stream, x.view(), target.view(), kind, kLossScale,
                                                 values_c.view(), nullptr, dp_c.data(), p.data());
                        stream.stream().synchronize();
                        expect_same_bits(to_floats(values_c.to(Device::cpu(), stream)),
                                         to_floats(values_a.to(Device::cpu(), stream)), what + " loss values, no dL/dinput");
                        expect_same_bits(to_floats(dp_c.to(Device::cpu(), stream)),
                                         to_floats(dp_a.to(Device::cpu(), stream)), what + " dL/dparams, no dL/dinput");
                    }
                    ++ran;
                }
            }
    }
    EXPECT_GT(ran, 100);
}

TEST(FullyFusedMlpGpuFusedLoss, StridedViewsAndFp32OutputGiveTheSameBits) {
    // The views a Trainer may pass: input, target and values as column slices of wider tensors, the
    // target and values one column in (bases not 8-byte aligned: scalar loads and stores), odd output
    // counts (17: a full 16-column chunk, whose in-place dy loads are then scalar too), several blocks,
    // fp32 and 16-bit outputs; the target modes (staged, global, in place with dy).
    TNN_SKIP_WITHOUT_GPU();
    const Device dev = Device::gpu(0);
    constexpr int64_t kRows = 4099;
    constexpr uint32_t kIn = 7;
    for (const uint32_t kOut : {3u, 17u})
    for (const bool out_f32 : {true, false})
        for (const int mode : {0, 1, 2}) {  // target staged, target from global memory, dy and target in place
            if (mode == 2 && !ffm::backward_reads_dy_in_place(64, true, 1)) continue;
            const bool global_target = mode == 1;
            const std::string what = msg(kOut, " outputs, ", out_f32 ? "fp32" : "fp16", " output, ",
                                         mode == 0 ? "staged target" : mode == 1 ? "global target" : "dy in place");
            json cfg = {{"otype", "FullyFusedMLP"}, {"n_neurons", 64}, {"n_hidden_layers", 2}, {"activation", "ReLU"},
                        {"output_activation", "None"}, {"bias", true}};
            if (out_f32) cfg["output_dtype"] = "float32";
            const auto net = create_network(kIn, kOut, cfg);
            const auto loss = create_loss({{"otype", "RelativeL2"}});
            std::vector<float> p32(net->n_params());
            net->init_params(5, p32.data());
            ffm::PlanOverride o;
            o.fused_target_global = global_target;
            o.dy_global = mode == 2;
            ffm::PlanOverrideScope scope(o);
            TestStream stream(dev);
            const Tensor p = to_device(host_tensor(p32, 1, int64_t(p32.size()), DType::f16), dev);
            // A [rows, cols] slice starting at column `first` of a wider device tensor.
            auto slice = [&](const std::vector<float>& v, int64_t cols, int64_t first, DType t, Tensor& storage) {
                storage = Tensor(kRows + 2, cols + 3, t, dev);
                fill(stream, storage.view(), 0.0);
                View view = storage.view().rows_slice(0, kRows).cols_slice(first, cols);
                if (!v.empty()) copy(stream, host_tensor(v, kRows, cols, t).view(), view);
                return view;
            };
            Tensor xs, ts, vas, vbs, ys, dys, dxas, dxbs;
            const View x = slice(draw(size_t(kRows) * kIn, 1.0, false, 3), kIn, 2, DType::f32, xs);
            const View target = slice(draw(size_t(kRows) * kOut, 1.0, false, 4), kOut, 1, DType::f32, ts);
            View values_a = slice({}, kOut, 1, DType::f32, vas), values_b = slice({}, kOut, 1, DType::f32, vbs);
            // In place, dL/doutput one column in: rows not aligned for pair loads (scalar reads).
            View y = slice({}, kOut, 0, net->output_dtype(), ys),
                 dy = slice({}, kOut, mode == 2 ? 1 : 0, net->output_dtype(), dys);
            View dx_a = slice({}, kIn, 0, DType::f32, dxas), dx_b = slice({}, kIn, 0, DType::f32, dxbs);
            Tensor dp_a(1, int64_t(net->n_params()), DType::f16, dev), dp_b(1, int64_t(net->n_params()), DType::f16, dev);
            auto ctx = net->forward(stream, x, y, p.data(), true);
            loss->evaluate(stream, 128.0f, y, target, nullptr, values_a, dy);
            net->backward(stream, *ctx, x, y, dy, &dx_a, dp_a.data(), p.data(), GradMode::overwrite);
            ffm::fused_loss_backward(*net, stream, x, target, LossKind::relative_l2, 128.0f, values_b, &dx_b, dp_b.data(),
                                     p.data());
            stream.stream().synchronize();
            auto host = [&](const Tensor& t) { return to_floats(t.to(Device::cpu(), stream)); };
            // Whole storages: the fused step writes the values slice and nothing around it.
            expect_same_bits(host(vbs), host(vas), what + " loss values");
            expect_same_bits(host(dxbs), host(dxas), what + " dL/dinput");
            expect_same_bits(host(dp_b), host(dp_a), what + " dL/dparams");
        }
}

TEST(FullyFusedMlpGpuFusedLoss, RefusedWhereTheKernelsDoNotCarryIt) {
    // Only the ReLU / linear-output kernels carry the fused step, only for the elementwise losses, and
    // never on the CPU: everywhere else can_fuse_loss is false and a direct call is an error.
    const Device gpu = Device::gpu(0);
    const auto relu = create_network(3, 4, {{"otype", "FullyFusedMLP"}, {"n_neurons", 16}, {"activation", "ReLU"}});
    const auto tanh = create_network(3, 4, {{"otype", "FullyFusedMLP"}, {"n_neurons", 16}, {"activation", "Tanh"}});
    const auto sig = create_network(3, 4, {{"otype", "FullyFusedMLP"}, {"n_neurons", 16}, {"output_activation", "Sigmoid"}});
    const auto portable = create_network(3, 4, {{"otype", "PortableMLP"}, {"n_neurons", 16}, {"activation", "ReLU"}});
    EXPECT_FALSE(ffm::can_fuse_loss(*relu, Device::cpu(), LossKind::l2));
    EXPECT_FALSE(ffm::can_fuse_loss(*relu, gpu, LossKind::cross_entropy));
    EXPECT_FALSE(ffm::can_fuse_loss(*relu, gpu, LossKind::relative_l2_luminance));
    EXPECT_FALSE(ffm::can_fuse_loss(*tanh, gpu, LossKind::l2));
    EXPECT_FALSE(ffm::can_fuse_loss(*sig, gpu, LossKind::l2));
    EXPECT_FALSE(ffm::can_fuse_loss(*portable, gpu, LossKind::l2));
#if defined(TNN_WITH_CUDA)
    EXPECT_TRUE(ffm::can_fuse_loss(*relu, gpu, LossKind::smape));
#endif  // TNN_WITH_CUDA
    Tensor x(2, 3, DType::f32), t(2, 4, DType::f32), v(2, 4, DType::f32);
    std::vector<tnn::half> p(relu->n_params(), tnn::half(0.0f)), g(relu->n_params());
    EXPECT_THROW(ffm::fused_loss_backward(*relu, Stream::cpu(), x.view(), t.view(), LossKind::l2, 1.0f, v.view(), nullptr,
                                          g.data(), p.data()),
                 UnsupportedError);
    EXPECT_THROW(ffm::fused_loss_backward(*portable, Stream::cpu(), x.view(), t.view(), LossKind::l2, 1.0f, v.view(),
                                          nullptr, g.data(), p.data()),
                 UnsupportedError);
}

TEST(FullyFusedMlpGpuFusedLoss, BadViewsAreRefused) {
    // The fused step checks its views as the module's own passes do (Module::check_arg): shape, dtype,
    // device, and that a view labelled GPU is memory of that GPU.
    TNN_SKIP_WITHOUT_GPU();
    const Device dev = Device::gpu(0);
    const auto net = create_network(3, 4, {{"otype", "FullyFusedMLP"}, {"n_neurons", 16}, {"activation", "ReLU"}});
    if (!ffm::can_fuse_loss(*net, dev, LossKind::l2)) GTEST_SKIP() << "this build's kernels have no fused step";
    TestStream stream(dev);
    Tensor x(8, 3, DType::f32, dev), t(8, 4, DType::f32, dev), v(8, 4, DType::f32, dev);
    Tensor t_short(7, 4, DType::f32, dev), v16(8, 4, DType::f16, dev), t_host(8, 4, DType::f32);
    Tensor p(1, int64_t(net->n_params()), net->param_dtype(), dev), g(1, int64_t(net->n_params()), net->param_dtype(), dev);
    fill(stream, x.view(), 0.25);
    fill(stream, t.view(), 0.5);
    fill(stream, p.view(), 0.0);
    auto call = [&](ConstView target, View values) {
        ffm::fused_loss_backward(*net, stream, x.view(), target, LossKind::l2, 1.0f, values, nullptr, g.data(), p.data());
    };
    EXPECT_THROW(call(t_short.view(), v.view()), ShapeError);
    EXPECT_THROW(call(t.view(), v16.view()), DTypeError);
    EXPECT_THROW(call(t_host.view(), v.view()), DeviceError);
    View lie = t_host.view();
    lie.device = dev;
    EXPECT_THROW(call(lie, v.view()), DeviceError);
    EXPECT_NO_THROW(call(t.view(), v.view()));
    stream.stream().synchronize();
}

TEST(FullyFusedMlpGpuProps, BadConfigsRaise) {
    // Config errors need no GPU. (CPU calls run the CPU backend: tests/cpp/test_mlp_backends.cpp.)
    EXPECT_THROW(create_network(3, 4, {{"otype", "FullyFusedMLP"}, {"n_neurons", 48}}), ConfigError);
    EXPECT_THROW(create_network(3, 4, {{"otype", "FullyFusedMLP"}, {"n_neurons", 256}}), ConfigError);
    EXPECT_THROW(create_network(3, 4, {{"otype", "FullyFusedMLP"}, {"dtype", "float32"}}), DTypeError);
    EXPECT_THROW(create_network(3, 4, {{"otype", "FullyFusedMLP"}, {"output_dtype", "bfloat16"}}), DTypeError);
}

}  // namespace
