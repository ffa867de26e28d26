// Every optimizer on the GPU against the CPU reference: one list of configs (each optimizer, the
// wrappers around each other, Composite slices) x gradient/weight dtypes, seven steps with fresh
// gradients, weights (fp32 master and the rounded copy), inference weights and state compared after
// every step -- bit for bit where docs/gpu.md promises it, otherwise within a bound derived from the
// one operation that differs. Then state() / load_state() round trips (GPU to GPU, CPU to GPU), the
// two halves of a GPU step replayed from a graph, and bad calls.
#include "gpu_test_util.h"

#include "core/gpu_bridge.h"
#include "optimizers/optimizer_impl.h"

#include <cstring>
#include <limits>
#include <tuple>

using namespace tnn;
using namespace tnn::test;

namespace {

constexpr size_t kParams = 20000, kMatrixParams = 12000;  // Novograd: several norm blocks per group
constexpr int kSteps = 7;

struct OptimizerCase {
    std::string name;
    json config;
    // 0: the GPU must match the CPU bit for bit. Otherwise each weight may differ by this much times the
    // sum of its CPU updates' magnitudes (plus the rounding of the weight itself), see kPowfBound and
    // kNormBound.
    double update_rtol = 0;
    bool zero_gradients = false;  // non-matrix gradients are exactly 0 on some steps (Adam skips those)
};

// Adam's bias correction sqrt(1 - b2^k) / (1 - b1^k) for a parameter whose own step count k lags the
// optimizer's is computed on the device with the device powf (the CPU's uses the host's; the common
// case, k = the optimizer's step, is computed on the host for both). CUDA documents powf within a few
// ulp; allowing 8 ulp in b^k, the relative error of 1 - b^k is 8 u b^k / (1 - b^k) <= 8 u * 999 for
// b2 = 0.999 at k = 1 (u = 2^-24), halved by the square root, plus 8 u * 9 from b1 = 0.9: about
// 4100 u = 2.5e-4 of the update. 5e-4 leaves room for the roundings around it.
constexpr double kPowfBound = 5e-4;
// Novograd's group norm is an fp64 sum in another order on the GPU: the two sums differ by far less
// than an fp32 ulp, so the fp32 second moment differs by at most 1 ulp, and every quantity derived
// from it (sqrt, the normalised gradient, the moment, the update) by a few ulp: 8 eps32 of the update.
constexpr double kNormBound = 8 * 0x1p-23;

const std::vector<OptimizerCase>& optimizer_cases() {
    const json adam = {{"otype", "Adam"}, {"learning_rate", 1e-2}};
    const json sgd = {{"otype", "SGD"}, {"learning_rate", 0.05}, {"l2_reg", 1e-3}};
    static const std::vector<OptimizerCase> cases = {
        {"Adam", adam},
        {"AdamEveryOption",
         {{"otype", "Adam"}, {"learning_rate", 1e-2}, {"adabound", true}, {"relative_decay", 0.01},
          {"absolute_decay", 1e-4}, {"clipping_magnitude", 0.3}, {"non_matrix_learning_rate_factor", 0.5},
          {"l2_reg", 1e-3}}},
        {"AdamFrozenMatrices", {{"otype", "Adam"}, {"optimize_matrix_params", false}}},
        {"AdamZeroGradientSkips", adam, kPowfBound, true},
        {"SGD", sgd},
        {"Novograd",
         {{"otype", "Novograd"}, {"learning_rate", 1e-2}, {"relative_decay", 0.01}, {"absolute_decay", 1e-4}},
         kNormBound},
        {"ExponentialDecay",
         {{"otype", "ExponentialDecay"},
          {"decay_start", 1},
          {"decay_interval", 2},
          {"decay_base", 0.5},
          {"nested", adam}}},
        {"EMA", {{"otype", "EMA"}, {"decay", 0.9}, {"nested", adam}}},
        {"EMAFullPrecision", {{"otype", "EMA"}, {"decay", 0.8}, {"full_precision", true}, {"nested", sgd}}},
        {"EMAOfLookahead",
         {{"otype", "EMA"}, {"decay", 0.9}, {"nested", {{"otype", "Lookahead"}, {"n_steps", 3}, {"nested", sgd}}}}},
        {"Average", {{"otype", "Average"}, {"n_samples", 3}, {"nested", sgd}}},
        {"Lookahead", {{"otype", "Lookahead"}, {"n_steps", 2}, {"alpha", 0.5}, {"nested", adam}}},
        {"Batched", {{"otype", "Batched"}, {"batch_size_multiplier", 3}, {"nested", adam}}},
        {"BatchedEMA",
         {{"otype", "Batched"}, {"batch_size_multiplier", 2}, {"nested", {{"otype", "EMA"}, {"nested", sgd}}}}},
        {"Composite",
         {{"otype", "Composite"},
          {"nested", json::array({json{{"otype", "Adam"}, {"learning_rate", 1e-2}, {"n_params_to_optimize", 12000}},
                                  sgd})}}},
        // Adam's four-parameter kernel needs every array at a 4-parameter boundary: a first slice of
        // 4998 parameters (that kernel, with a tail of 2) and a second one starting at parameter 4998
        // (the one-parameter kernel).
        {"CompositeAdamSlices",
         {{"otype", "Composite"},
          {"nested", json::array({json{{"otype", "Adam"}, {"learning_rate", 1e-2}, {"n_params_to_optimize", 4998}},
                                  json{{"otype", "Adam"}, {"learning_rate", 2e-2}, {"beta1", 0.8}}})}}},
        {"CompositeWithEMA",
         {{"otype", "Composite"},
          {"nested", json::array({json{{"otype", "EMA"}, {"nested", adam}, {"n_params_to_optimize", 5000}}, sgd})}}},
        // A slice whose inference weights appear only at its second call (Batched before its first
        // update), next to Novograd.
        {"CompositeBatchedLookaheadNovograd",
         {{"otype", "Composite"},
          {"nested", json::array({json{{"otype", "Batched"},
                                       {"batch_size_multiplier", 2},
                                       {"nested", {{"otype", "Lookahead"}, {"n_steps", 2}, {"nested", sgd}}},
                                       {"n_params_to_optimize", 9000}},
                                  json{{"otype", "Novograd"}, {"learning_rate", 1e-2}}})}},
         kNormBound},
    };
    return cases;
}

struct Dtypes {
    DType grad, weights;
    bool alias;  // the weights copy is the fp32 master array itself
};
const std::vector<Dtypes> kDtypes = {{DType::f32, DType::f32, true},  {DType::f32, DType::f32, false},
                                     {DType::f16, DType::f16, false}, {DType::bf16, DType::bf16, false},
                                     {DType::f64, DType::f64, false}, {DType::bf16, DType::f32, false}};
std::string dtypes_name(const Dtypes& d) {
    return msg(dtype_name(d.grad), "_", dtype_name(d.weights), d.alias ? "_aliased" : "");
}
// tcnn's 128 for half types; the others get inexact scales so that the division is exercised.
float loss_scale_for(DType grad) {
    return grad == DType::f16 || grad == DType::bf16 ? 128.0f : grad == DType::f64 ? 4.0f : 3.0f;
}

// The gradients of step k, scaled by the loss scale and stored in the gradient dtype (host).
Tensor make_gradients(const OptimizerCase& c, const Dtypes& d, int k) {
    std::vector<double> g = random_vector(kParams, -0.05, 0.05, 1000 + k);
    if (c.zero_gradients)
        for (size_t i = kMatrixParams; i < kParams; ++i)
            if ((i + k) % 3 == 0) g[i] = 0.0;
    Tensor f64(1, kParams, DType::f64);
    for (size_t i = 0; i < kParams; ++i) f64.ptr<double>()[i] = g[i] * loss_scale_for(d.grad);
    Tensor out(1, kParams, d.grad);
    convert(Stream::cpu(), f64.view(), out.view());
    return out;
}

std::vector<float> initial_weights() {
    const auto v = random_vector(kParams, -0.5, 0.5, 7);
    return std::vector<float>(v.begin(), v.end());
}

// What an optimizer holds after a step, on the host.
struct Snapshot {
    std::vector<float> w32;
    Tensor weights;                // the copy in the weights dtype
    std::vector<float> inference;  // empty: inference_weights_fp32() is nullptr
};

// An optimizer with its weights and a gradient buffer on one device.
class Rig {
public:
    Rig(const OptimizerCase& c, const Dtypes& d, Device device)
        : m_case(c), m_dtypes(d), m_device(device), m_stream(device), m_opt(create_optimizer(c.config)) {
        const std::vector<float> init = initial_weights();
        m_w32 = from_floats(init, 1, kParams, device);
        if (!d.alias) {
            Tensor host(1, kParams, d.weights);
            convert(Stream::cpu(), ConstView(init.data(), DType::f32, Device::cpu(), 1, kParams), host.view());
            m_weights = host.to(device);
        }
        m_grads = Tensor(1, kParams, d.grad, device);
        m_opt->allocate(device, kParams, kMatrixParams);
    }
    Stream stream() const { return m_stream.stream(); }
    Optimizer& optimizer() { return *m_opt; }
    GpuStepArgs args() {
        return {loss_scale_for(m_dtypes.grad), m_w32.ptr<float>(), weights(), m_dtypes.weights, m_grads.data(),
                m_dtypes.grad};
    }
    // Queues the copy of step k's gradients into the (fixed) gradient buffer.
    void upload_gradients(int k) {
        m_host_grads = make_gradients(m_case, m_dtypes, k);
        copy_bytes(stream(), m_grads.data(), m_device, m_host_grads.data(), Device::cpu(), m_host_grads.bytes());
    }
    void step(int k) {
        upload_gradients(k);
        const GpuStepArgs a = args();
        m_opt->step(stream(), a.loss_scale, a.weights_fp32, a.weights, a.weights_dtype, a.gradients, a.grad_dtype);
    }
    // Copies weights from another rig (for continuing from loaded state).
    void set_weights(const Snapshot& s) {
        copy_bytes(stream(), m_w32.data(), m_device, s.w32.data(), Device::cpu(), kParams * sizeof(float));
        if (!m_dtypes.alias)
            copy_bytes(stream(), m_weights.data(), m_device, s.weights.data(), Device::cpu(), s.weights.bytes());
        stream().synchronize();
    }
    Snapshot snapshot() {
        stream().synchronize();
        Snapshot s;
        s.w32 = to_floats(m_w32);
        s.weights = m_dtypes.alias ? m_w32.to(Device::cpu()) : m_weights.to(Device::cpu());
        if (const float* inf = m_opt->inference_weights_fp32()) {
            s.inference.resize(kParams);
            copy_bytes(stream(), s.inference.data(), Device::cpu(), inf, m_device, kParams * sizeof(float));
            stream().synchronize();
        }
        return s;
    }

private:
    void* weights() { return m_dtypes.alias ? m_w32.data() : m_weights.data(); }

    OptimizerCase m_case;
    Dtypes m_dtypes;
    Device m_device;
    TestStream m_stream;
    std::unique_ptr<Optimizer> m_opt;
    Tensor m_w32, m_weights, m_grads, m_host_grads;
};

std::vector<Snapshot> run_steps(Rig& rig, int first, int last) {
    std::vector<Snapshot> out;
    for (int k = first; k < last; ++k) {
        rig.step(k);
        out.push_back(rig.snapshot());
    }
    return out;
}

void expect_same_snapshot(const Snapshot& got, const Snapshot& want, const std::string& what) {
    expect_same_bits(got.w32, want.w32, what + ": fp32 weights");
    ASSERT_EQ(got.weights.bytes(), want.weights.bytes()) << what;
    if (std::memcmp(got.weights.data(), want.weights.data(), got.weights.bytes()) != 0)
        expect_same_bits(got.weights.to_float_vector(), want.weights.to_float_vector(), what + ": weights copy");
    ASSERT_EQ(got.inference.empty(), want.inference.empty()) << what << ": inference weights present on one side only";
    expect_same_bits(got.inference, want.inference, what + ": inference weights");
}

// |got - want| <= rtol * (sum of the magnitudes of the CPU's updates so far) + one rounding of the value
// in `dtype` per step so far (when the inputs of a rounding differ slightly, it may fall on the other
// side, and the difference is carried into the next step).
void expect_within_update_bound(const std::vector<double>& got, const std::vector<double>& want,
                                const std::vector<double>& update_sum, double rtol, DType dtype, int steps,
                                const std::string& what) {
    ASSERT_EQ(got.size(), want.size()) << what;
    int failures = 0;
    for (size_t i = 0; i < got.size(); ++i) {
        const double allowed = rtol * update_sum[i] + steps * dtype_epsilon(dtype) * std::fabs(want[i]);
        if (!(std::fabs(got[i] - want[i]) <= allowed) && ++failures <= 5)
            ADD_FAILURE() << what << "[" << i << "]: got " << got[i] << ", want " << want[i] << ", allowed " << allowed;
    }
    EXPECT_EQ(failures, 0) << what;
}

void expect_same_state(const std::vector<StateBlob>& got, const std::vector<StateBlob>& want, bool bits,
                       const std::string& what) {
    ASSERT_EQ(got.size(), want.size()) << what;
    for (size_t i = 0; i < got.size(); ++i) {
        EXPECT_EQ(got[i].name, want[i].name) << what;
        EXPECT_EQ(got[i].dtype, want[i].dtype) << what << " " << want[i].name;
        ASSERT_EQ(got[i].bytes.size(), want[i].bytes.size()) << what << " " << want[i].name;
        if (bits) EXPECT_TRUE(got[i].bytes == want[i].bytes) << what << ": state '" << want[i].name << "' differs";
    }
}

// Compares GPU snapshots with the CPU's, step by step, as the case allows.
void compare_trajectories(const OptimizerCase& c, const Dtypes& d, const std::vector<Snapshot>& gpu,
                          const std::vector<Snapshot>& cpu, const std::vector<float>& start, const std::string& what) {
    ASSERT_EQ(gpu.size(), cpu.size());
    std::vector<double> update_sum(kParams, 0.0), previous(start.begin(), start.end());
    for (size_t k = 0; k < cpu.size(); ++k) {
        const std::string where = msg(what, " step ", k + 1);
        if (c.update_rtol == 0) {
            expect_same_snapshot(gpu[k], cpu[k], where);
            continue;
        }
        const std::vector<double> w = widen(cpu[k].w32);
        for (size_t i = 0; i < kParams; ++i) update_sum[i] += std::fabs(w[i] - previous[i]);
        previous = w;
        const int steps = static_cast<int>(k) + 1;
        expect_within_update_bound(widen(gpu[k].w32), w, update_sum, c.update_rtol, DType::f32, steps,
                                   where + ": fp32 weights");
        expect_within_update_bound(gpu[k].weights.to_double_vector(), cpu[k].weights.to_double_vector(), update_sum,
                                   c.update_rtol, d.weights, steps, where + ": weights copy");
        ASSERT_EQ(gpu[k].inference.empty(), cpu[k].inference.empty()) << where;
        // Inference weights average earlier weights, each within the bound; EMA and Average round them
        // to the weights dtype.
        if (!cpu[k].inference.empty())
            expect_within_update_bound(widen(gpu[k].inference), widen(cpu[k].inference), update_sum, c.update_rtol,
                                       d.weights, steps, where + ": inference weights");
    }
}

using OptCaseParam = std::tuple<OptimizerCase, Dtypes>;

class GpuOptimizers : public ::testing::TestWithParam<OptCaseParam> {};

TEST_P(GpuOptimizers, StepsMatchTheCpu) {
    const auto& [c, d] = GetParam();
    TNN_SKIP_WITHOUT_GPU();
    Rig cpu(c, d, Device::cpu()), gpu(c, d, Device::gpu(0));
    const std::vector<Snapshot> want = run_steps(cpu, 0, kSteps), got = run_steps(gpu, 0, kSteps);
    compare_trajectories(c, d, got, want, initial_weights(), c.name);
    EXPECT_EQ(gpu.optimizer().step_count(), cpu.optimizer().step_count());
    expect_same_state(gpu.optimizer().state(gpu.stream()), cpu.optimizer().state(cpu.stream()), c.update_rtol == 0,
                      c.name + " state");
}

TEST_P(GpuOptimizers, StateRoundTripsThroughHostBlobs) {
    const auto& [c, d] = GetParam();
    TNN_SKIP_WITHOUT_GPU();
    constexpr int kFirst = 3;
    // GPU -> blobs -> a fresh GPU optimizer: it continues exactly like the original (both on the GPU, so
    // bit for bit in every case).
    Rig original(c, d, Device::gpu(0)), resumed(c, d, Device::gpu(0));
    run_steps(original, 0, kFirst);
    resumed.optimizer().load_state(resumed.stream(), original.optimizer().state(original.stream()));
    resumed.set_weights(original.snapshot());
    EXPECT_EQ(resumed.optimizer().step_count(), static_cast<uint32_t>(kFirst));
    const auto a = run_steps(original, kFirst, kSteps), b = run_steps(resumed, kFirst, kSteps);
    for (size_t k = 0; k < a.size(); ++k)
        expect_same_snapshot(b[k], a[k], msg(c.name, " resumed on the GPU, step ", kFirst + k + 1));
    expect_same_state(resumed.optimizer().state(resumed.stream()), original.optimizer().state(original.stream()), true,
                      c.name + " state after resuming");

    // CPU -> blobs -> GPU: the blobs mean the same on both devices.
    Rig cpu(c, d, Device::cpu()), gpu(c, d, Device::gpu(0));
    const auto cpu_first = run_steps(cpu, 0, kFirst);
    gpu.optimizer().load_state(gpu.stream(), cpu.optimizer().state(cpu.stream()));
    gpu.set_weights(cpu_first.back());
    const auto want = run_steps(cpu, kFirst, kSteps), got = run_steps(gpu, kFirst, kSteps);
    compare_trajectories(c, d, got, want, cpu_first.back().w32, c.name + " resumed from CPU state");
}

#ifdef TNN_WITH_GPU
TEST_P(GpuOptimizers, DeviceHalfReplaysFromAGraph) {
    const auto& [c, d] = GetParam();
    TNN_SKIP_WITHOUT_GPU();
    // Eager steps against: two eager steps, then the device half captured once at step 3 and replayed
    // after each later host half. Same kernels, same bits -- the scalars that change between steps
    // (step counts, decayed rates, ring slots, wrapper phases) must reach the replays through memory.
    Rig eager(c, d, Device::gpu(0)), graphed(c, d, Device::gpu(0));
    const auto want = run_steps(eager, 0, kSteps);
    std::vector<Snapshot> got = run_steps(graphed, 0, 2);
    GpuSplitStep* split = gpu_split(graphed.optimizer());
    ASSERT_NE(split, nullptr) << c.name << " has no GPU halves";
    void* graph = nullptr;
    for (int k = 2; k < kSteps; ++k) {
        graphed.upload_gradients(k);
        split->gpu_prepare(graphed.stream(), graphed.args(), true);
        if (!graph) {
            gpu_bridge::begin_capture(graphed.stream());
            try {
                split->gpu_record(graphed.stream(), graphed.args());
            } catch (...) {
                gpu_bridge::abort_capture(graphed.stream());
                throw;
            }
            graph = gpu_bridge::end_capture(graphed.stream());
        }
        gpu_bridge::launch_graph(graphed.stream(), graph);
        got.push_back(graphed.snapshot());
    }
    gpu_bridge::destroy_graph(0, graph);
    for (size_t k = 0; k < want.size(); ++k) expect_same_snapshot(got[k], want[k], msg(c.name, " graph step ", k + 1));
    EXPECT_EQ(graphed.optimizer().step_count(), eager.optimizer().step_count());
    expect_same_state(graphed.optimizer().state(graphed.stream()), eager.optimizer().state(eager.stream()), true,
                      c.name + " state after graph replays");
}
#endif  // TNN_WITH_GPU

std::string opt_case_name(const ::testing::TestParamInfo<OptCaseParam>& info) {
    return std::get<0>(info.param).name + "_" + dtypes_name(std::get<1>(info.param));
}

INSTANTIATE_TEST_SUITE_P(Cases, GpuOptimizers,
                         ::testing::Combine(::testing::ValuesIn(optimizer_cases()), ::testing::ValuesIn(kDtypes)),
                         opt_case_name);

// ---- Edge cases and bad calls.

TEST(GpuOptimizerEdges, NoParametersIsANoOp) {
    TNN_SKIP_WITHOUT_GPU();
    for (const char* otype : {"Adam", "SGD", "Novograd", "EMA", "Average", "Lookahead", "Batched"}) {
        auto opt = create_optimizer({{"otype", otype}});
        opt->allocate(Device::gpu(0), 0, 0);
        TestStream stream(Device::gpu(0));
        opt->step(stream, 1.0f, nullptr, nullptr, DType::f32, nullptr, DType::f32);
        opt->step(stream, 1.0f, nullptr, nullptr, DType::f32, nullptr, DType::f32);
        stream.stream().synchronize();
        EXPECT_EQ(opt->step_count(), 2u) << otype;
    }
}

// Adam's four-parameter kernel against its one-parameter kernel, which the same arrays shifted by one
// element take (misaligned for 16-byte units): the same bits after three steps for gradients that are
// zero (skipped), NaN, or nonzero but zero once divided by the loss scale, with the matrix / non-matrix
// boundary inside a quad, below one quad and with a tail.
TEST(GpuOptimizerEdges, AdamQuadsMatchOneParameterPerThread) {
    TNN_SKIP_WITHOUT_GPU();
    const Device gpu = Device::gpu(0);
    constexpr float kLossScale = 4.0f;
    for (size_t n : {size_t(3), size_t(4), size_t(1001)}) {
        SCOPED_TRACE(msg("n = ", n));
        const size_t n_matrix = n / 2 + 1;  // 2, 3, 501: inside the first quad for the small sizes
        const std::vector<double> w0 = random_vector(n, -0.5, 0.5, 11), g0 = random_vector(n, -0.05, 0.05, 12);
        std::vector<float> w(w0.begin(), w0.end()), g(g0.begin(), g0.end());
        for (size_t i = n_matrix; i < n; i += 3) g[i] = 0.0f;
        if (n > 4) {
            g[n_matrix + 1] = std::numeric_limits<float>::denorm_min();  // 0 once divided by the loss scale
            g[n - 2] = std::numeric_limits<float>::quiet_NaN();
        }
        struct Result {
            std::vector<float> w32;
            std::vector<double> weights;
            std::vector<StateBlob> state;
        };
        auto run = [&](size_t offset) {
            TestStream stream(gpu);
            std::vector<float> padded_w(offset, 0.0f), padded_g(offset, 0.0f);
            padded_w.insert(padded_w.end(), w.begin(), w.end());
            padded_g.insert(padded_g.end(), g.begin(), g.end());
            const auto cols = static_cast<int64_t>(n + offset);
            Tensor w32 = from_floats(padded_w, 1, cols, gpu), grads = from_floats(padded_g, 1, cols, gpu);
            Tensor half(1, cols, DType::f16);
            convert(Stream::cpu(), ConstView(padded_w.data(), DType::f32, Device::cpu(), 1, cols), half.view());
            Tensor weights = half.to(gpu);
            auto opt = create_optimizer({{"otype", "Adam"}, {"learning_rate", 1e-2}});
            opt->allocate(gpu, n, n_matrix);
            for (int step = 0; step < 3; ++step)
                opt->step(stream, kLossScale, w32.ptr<float>() + offset,
                          static_cast<char*>(weights.data()) + offset * dtype_size(DType::f16), DType::f16,
                          grads.ptr<float>() + offset, DType::f32);
            stream.stream().synchronize();
            Result r;
            const std::vector<float> all_w = to_floats(w32);
            const std::vector<double> all_h = weights.to(Device::cpu()).to_double_vector();
            r.w32.assign(all_w.begin() + static_cast<std::ptrdiff_t>(offset), all_w.end());
            r.weights.assign(all_h.begin() + static_cast<std::ptrdiff_t>(offset), all_h.end());
            r.state = opt->state(stream);
            return r;
        };
        const Result quads = run(0), singles = run(1);
        expect_same_bits(quads.w32, singles.w32, "fp32 weights");
        expect_same_bits(std::vector<float>(quads.weights.begin(), quads.weights.end()),
                         std::vector<float>(singles.weights.begin(), singles.weights.end()), "fp16 weights");
        expect_same_state(quads.state, singles.state, true, "Adam state");
    }
}

TEST(GpuOptimizerErrors, BadCallsAreRefused) {
    TNN_SKIP_WITHOUT_GPU();
    const Device gpu = Device::gpu(0);
    auto opt = create_optimizer({{"otype", "Adam"}});
    Tensor w(1, 100, DType::f32, gpu), g(1, 100, DType::f32, gpu);
    fill(Stream::gpu(nullptr, 0), w.view(), 0.5);
    fill(Stream::gpu(nullptr, 0), g.view(), 0.1);
    TestStream stream(gpu);
    EXPECT_THROW(opt->step(stream, 1.0f, w.ptr<float>(), w.data(), DType::f32, g.data(), DType::f32), Error)
        << "a step before allocate() must be refused";
    opt->allocate(gpu, 100, 50);
    std::vector<float> host(100, 0.5f);
    EXPECT_THROW(opt->step(stream, 1.0f, host.data(), host.data(), DType::f32, g.data(), DType::f32), DeviceError);
    EXPECT_THROW(opt->step(stream, 1.0f, w.ptr<float>(), w.data(), DType::f32, host.data(), DType::f32), DeviceError);
    EXPECT_THROW(opt->step(Stream::cpu(), 1.0f, w.ptr<float>(), w.data(), DType::f32, g.data(), DType::f32),
                 DeviceError);
    EXPECT_THROW(opt->step(stream, 0.0f, w.ptr<float>(), w.data(), DType::f32, g.data(), DType::f32), InputError);
    EXPECT_THROW(opt->step(stream, 1.0f, w.ptr<float>(), w.data(), DType::f16, g.data(), DType::f32), DTypeError)
        << "weights aliasing the fp32 master copy must be fp32";
    EXPECT_EQ(opt->step_count(), 0u) << "refused steps must not count";
    std::vector<StateBlob> blobs = opt->state(stream);
    for (auto& b : blobs)
        if (b.name == "first_moments") b.bytes.resize(b.bytes.size() - 4);
    EXPECT_THROW(opt->load_state(stream, blobs), CheckpointError);
    EXPECT_THROW(opt->allocate(Device::gpu(gpu_device_count()), 100, 50), DeviceError);
#ifdef TNN_WITH_GPU
    // Inside a graph a step would be replayed with its own step count and learning rate: refused.
    gpu_bridge::begin_capture(stream);
    EXPECT_THROW(opt->step(stream, 1.0f, w.ptr<float>(), w.data(), DType::f32, g.data(), DType::f32),
                 UnsupportedError);
    gpu_bridge::abort_capture(stream);
    EXPECT_FALSE(gpu_bridge::is_capturing(stream));
    EXPECT_EQ(opt->step_count(), 0u);
#endif  // TNN_WITH_GPU
}

}  // namespace
