// Every loss on the GPU against the CPU reference: one list of cases (loss x prediction dtype x pdf
// layout x float32/float64 target and values), each over several shapes (empty, one row, odd sizes,
// strided views, six-channel luminance). Values and gradients must equal the CPU's bit for bit (the
// kernel runs the same per-element maths without FMA contraction); CrossEntropy's value uses the
// device log and may differ by a few ulp. Then sum() on the GPU and the errors of bad calls.
#include "gpu_test_util.h"

#include <cstring>
#include <tuple>

using namespace tnn;
using namespace tnn::test;

namespace {

const std::vector<std::string> kLosses = {"L2",   "L1",    "RelativeL2",   "RelativeL1", "RelativeL2Luminance",
                                          "MAPE", "SMAPE", "CrossEntropy", "Variance"};
const std::vector<DType> kPredictionDtypes = {DType::f32, DType::f16, DType::bf16, DType::f64};

enum class Pdf { none, per_sample, per_element };
const char* pdf_name(Pdf p) {
    return p == Pdf::none ? "nopdf" : p == Pdf::per_sample ? "pdf_per_sample" : "pdf_per_element";
}

// Shapes each case runs: rows, cols, and the padding after each row of every view (0: contiguous).
struct Shape {
    int64_t rows, cols, pad;
};
const std::vector<Shape> kShapes = {{0, 3, 0}, {1, 3, 0}, {7, 3, 2}, {1000, 6, 0}, {4097, 7, 3}};

// Data the losses are smooth on: CrossEntropy takes the log of the prediction and Variance divides by
// it, so it stays positive there; elsewhere predictions and targets are signed.
struct Ranges {
    double p_lo, p_hi, t_lo, t_hi;
};
Ranges ranges_for(const std::string& loss) {
    if (loss == "CrossEntropy") return {0.05, 1.0, 0.0, 1.0};
    if (loss == "Variance") return {0.5, 1.5, -1.0, 1.0};
    return {-1.0, 1.0, -1.0, 1.0};
}

// A host tensor [rows, cols + pad]: the first cols columns are the view, the rest padding that a
// correct kernel never reads or writes (random too, so reading it would change the result).
struct Padded {
    Tensor host;
    int64_t cols = 0;
    ConstView view_of(const Tensor& t) const { return t.view().cols_slice(0, cols); }
};

Padded padded_random(int64_t rows, int64_t cols, int64_t pad, DType dtype, double lo, double hi, uint64_t seed) {
    return {random_tensor(rows, cols + pad, dtype, lo, hi, seed), cols};
}

struct LossOutputs {
    Tensor values, gradients;  // whole padded buffers, on the host
};

// One evaluate on `device`: inputs uploaded from the host tensors, outputs pre-filled with a sentinel
// (padding included), everything downloaded again.
LossOutputs evaluate_on(Device device, const Loss& loss, float loss_scale, const Padded& p, const Padded& t,
                        const Padded* pdf, DType values_dtype, int64_t pad) {
    TestStream stream(device);
    const int64_t rows = p.host.rows(), cols = p.cols;
    const Tensor pred = p.host.to(device), target = t.host.to(device);
    Tensor pdf_dev;
    ConstView pdf_view;
    if (pdf) {
        pdf_dev = pdf->host.to(device);
        pdf_view = pdf->view_of(pdf_dev);
    }
    Tensor values(rows, cols + pad, values_dtype, device), gradients(rows, cols + pad, p.host.dtype(), device);
    fill(stream, values.view(), 7.0);
    fill(stream, gradients.view(), 7.0);
    loss.evaluate(stream, loss_scale, p.view_of(pred), t.view_of(target), pdf ? &pdf_view : nullptr,
                  values.view().cols_slice(0, cols), gradients.view().cols_slice(0, cols));
    stream.stream().synchronize();
    return {values.to(Device::cpu()), gradients.to(Device::cpu())};
}

// Bitwise equality of two host tensors of one dtype, reporting the first differing element.
void expect_same_tensor_bits(const Tensor& got, const Tensor& want, const std::string& what) {
    ASSERT_EQ(got.dtype(), want.dtype()) << what;
    ASSERT_EQ(got.numel(), want.numel()) << what;
    const size_t es = dtype_size(got.dtype());
    const std::vector<double> g = got.to_double_vector(), w = want.to_double_vector();
    for (int64_t i = 0; i < got.numel(); ++i) {
        if (std::memcmp(static_cast<const char*>(got.data()) + i * es, static_cast<const char*>(want.data()) + i * es,
                        es) != 0) {
            ADD_FAILURE() << what << ": first difference at [" << i / got.cols() << ", " << i % got.cols() << "]: got "
                          << g[i] << ", want " << w[i];
            return;
        }
    }
}

using LossCase = std::tuple<std::string, DType, Pdf, DType>;

class GpuLosses : public ::testing::TestWithParam<LossCase> {};

TEST_P(GpuLosses, MatchCpuBitForBit) {
    // wide: the dtype of target, pdf and values (evaluate takes float32 or float64 with any prediction).
    const auto& [name, pred_dtype, pdf_kind, wide] = GetParam();
    TNN_SKIP_WITHOUT_GPU();
    const auto loss = create_loss({{"otype", name}});
    // tcnn's scale for half types, and an inexact one for the others so that the scaling is exercised.
    const float loss_scale = pred_dtype == DType::f16 || pred_dtype == DType::bf16 ? 128.0f : 3.0f;
    const Ranges rg = ranges_for(name);
    uint64_t seed = 100;
    for (const Shape& s : kShapes) {
        const std::string where = msg(name, " ", dtype_name(pred_dtype), " ", pdf_name(pdf_kind), " ",
                                      dtype_name(wide), " [", s.rows, ", ", s.cols, "] pad ", s.pad);
        const Padded p = padded_random(s.rows, s.cols, s.pad, pred_dtype, rg.p_lo, rg.p_hi, seed++);
        const Padded t = padded_random(s.rows, s.cols, s.pad, wide, rg.t_lo, rg.t_hi, seed++);
        Padded pdf;
        if (pdf_kind != Pdf::none)
            pdf = padded_random(s.rows, pdf_kind == Pdf::per_sample ? 1 : s.cols, s.pad, wide, 0.5, 2.0, seed++);
        const Padded* pdf_ptr = pdf_kind == Pdf::none ? nullptr : &pdf;
        const LossOutputs cpu = evaluate_on(Device::cpu(), *loss, loss_scale, p, t, pdf_ptr, wide, s.pad);
        const LossOutputs gpu = evaluate_on(Device::gpu(0), *loss, loss_scale, p, t, pdf_ptr, wide, s.pad);
        expect_same_tensor_bits(gpu.gradients, cpu.gradients, where + ": gradients (padding included)");
        if (name != "CrossEntropy") {
            expect_same_tensor_bits(gpu.values, cpu.values, where + ": values (padding included)");
            continue;
        }
        // -t/pdf/N * log(p) in the compute type (fp32, fp64 for fp64 predictions): the device log and
        // the host's are each within 1 ulp of the exact value (CUDA math documentation; glibc), so they
        // differ by up to 2 ulp, and the product's rounding adds half an ulp on either side: 4 eps of
        // the compute type bounds it with room to spare; storing into a narrower values dtype may then
        // round the two to neighbours (one eps of that dtype). The padding (sentinel 7) matches exactly.
        const double rtol = 4 * dtype_epsilon(pred_dtype == DType::f64 ? DType::f64 : DType::f32) + dtype_epsilon(wide);
        expect_close(gpu.values.to_double_vector(), cpu.values.to_double_vector(), 0.0, rtol, where + ": values");
    }
}

std::string loss_case_name(const ::testing::TestParamInfo<LossCase>& info) {
    const auto& [name, dtype, pdf, wide] = info.param;
    return msg(name, "_", dtype_name(dtype), "_", pdf_name(pdf), "_", dtype_name(wide));
}

INSTANTIATE_TEST_SUITE_P(Cases, GpuLosses,
                         ::testing::Combine(::testing::ValuesIn(kLosses), ::testing::ValuesIn(kPredictionDtypes),
                                            ::testing::Values(Pdf::none, Pdf::per_sample, Pdf::per_element),
                                            ::testing::Values(DType::f32, DType::f64)),
                         loss_case_name);

TEST(GpuLossSum, MatchesTheCpuSumWithinFp64Rounding) {
    TNN_SKIP_WITHOUT_GPU();
    for (const int64_t rows : {int64_t(1), int64_t(333), int64_t(70000)}) {
        const Tensor host = random_tensor(rows, 3, DType::f32, 0.0, 1.0, 5 + rows);
        TestStream stream(Device::gpu(0));
        const double gpu = sum(stream, host.to(Device::gpu(0)).view());
        const double cpu = sum(Stream::cpu(), host.view());
        // Both add n non-negative fp32 values in fp64, in different orders: each is within
        // n * 2^-53 * sum of the exact sum (the classical bound for recursive summation).
        const double n = static_cast<double>(host.numel());
        EXPECT_NEAR(gpu, cpu, 2 * n * 0x1p-53 * cpu) << rows << " rows";
    }
}

// ---- Bad calls raise typed errors (validation runs before any kernel).

class GpuLossErrors : public ::testing::Test {
protected:
    void SetUp() override {
        TNN_SKIP_WITHOUT_GPU();
        pred = Tensor(8, 3, DType::f32, gpu);
        target = Tensor(8, 3, DType::f32, gpu);
        values = Tensor(8, 3, DType::f32, gpu);
        grads = Tensor(8, 3, DType::f32, gpu);
        fill(stream, pred.view(), 0.5);
        fill(stream, target.view(), 0.25);
    }
    const Device gpu = Device::gpu(0);
    const Stream stream = Stream::gpu(nullptr, 0);
    std::unique_ptr<Loss> loss = create_loss({{"otype", "L2"}});
    Tensor pred, target, values, grads;
};

TEST_F(GpuLossErrors, MixedDevicesAreRefused) {
    Tensor host_target(8, 3, DType::f32);
    EXPECT_THROW(loss->evaluate(stream, 1.0f, pred.view(), host_target.view(), nullptr, values.view(), grads.view()),
                 DeviceError);
    EXPECT_THROW(loss->evaluate(Stream::cpu(), 1.0f, pred.view(), target.view(), nullptr, values.view(), grads.view()),
                 DeviceError);
    // Host memory that claims to be on the GPU.
    View lie = host_target.view();
    lie.device = gpu;
    EXPECT_THROW(loss->evaluate(stream, 1.0f, pred.view(), lie, nullptr, values.view(), grads.view()), DeviceError);
    const int missing = gpu_device_count();
    View p = pred.view(), t = target.view(), v = values.view(), g = grads.view();
    p.device = t.device = v.device = g.device = Device::gpu(missing);
    EXPECT_THROW(loss->evaluate(Stream::gpu(nullptr, missing), 1.0f, p, t, nullptr, v, g), DeviceError);
}

TEST_F(GpuLossErrors, BadShapesAndDtypesAreRefused) {
    Tensor short_target(7, 3, DType::f32, gpu), half_grads(8, 3, DType::f16, gpu), bad_pdf(8, 2, DType::f32, gpu);
    EXPECT_THROW(loss->evaluate(stream, 1.0f, pred.view(), short_target.view(), nullptr, values.view(), grads.view()),
                 ShapeError);
    EXPECT_THROW(loss->evaluate(stream, 1.0f, pred.view(), target.view(), nullptr, values.view(), half_grads.view()),
                 DTypeError);
    const ConstView pdf = bad_pdf.view();
    EXPECT_THROW(loss->evaluate(stream, 1.0f, pred.view(), target.view(), &pdf, values.view(), grads.view()),
                 ShapeError);
    EXPECT_THROW(loss->evaluate(stream, 0.0f, pred.view(), target.view(), nullptr, values.view(), grads.view()),
                 InputError);
    const auto luminance = create_loss({{"otype", "RelativeL2Luminance"}});
    Tensor two(8, 2, DType::f32, gpu), two_t(8, 2, DType::f32, gpu), two_v(8, 2, DType::f32, gpu),
        two_g(8, 2, DType::f32, gpu);
    EXPECT_THROW(luminance->evaluate(stream, 1.0f, two.view(), two_t.view(), nullptr, two_v.view(), two_g.view()),
                 ShapeError);
}

}  // namespace
