// Losses: argument validation, the otype registry behind create_loss, the CPU evaluation of every
// loss in loss_math.h (rows in parallel; elementwise, so the bits never depend on the thread count),
// and sum(). GPU views go to the kernel in losses.cu.
#include <tnn/loss.h>
#include <tnn/module.h>

#include "core/gpu_bridge.h"
#include "core/view_check.h"
#include "core/parallel.h"
#include "losses/loss_gpu.h"
#include "core/loss_math.h"

#include <algorithm>
#include <cmath>
#include <functional>

namespace tnn {

namespace {

bool is_float_or_double(DType t) { return t == DType::f32 || t == DType::f64; }

// Reads element (r, c) of an fp32 or fp64 view (target, pdf) in the compute type.
template <typename A> A load_f(ConstView v, int64_t r, int64_t c) {
    return v.dtype == DType::f64 ? static_cast<A>(v.at<double>(r, c)) : static_cast<A>(v.at<float>(r, c));
}

template <typename A> void store_f(View v, int64_t r, int64_t c, A x) {
    if (v.dtype == DType::f64) v.at<double>(r, c) = static_cast<double>(x);
    else v.at<float>(r, c) = static_cast<float>(x);
}

template <typename T> acc_t<T> to_acc(T x) { return static_cast<acc_t<T>>(x); }
template <typename T> T from_acc(acc_t<T> x) { return T(x); }

// The CPU reference: every element of row r needs only that row (the luminance reads the row's
// first channels), so rows are split into fixed chunks and processed independently.
template <LossKind K, typename T>
void evaluate_cpu(float loss_scale, ConstView prediction, ConstView target, const ConstView* data_pdf, View values,
                  View gradients) {
    using A = acc_t<T>;
    const int64_t rows = prediction.rows, cols = prediction.cols;
    const A n = static_cast<A>(rows * cols);
    const A ls = static_cast<A>(loss_scale);
    const bool pdf_per_element = data_pdf && data_pdf->cols == cols;
    const int64_t grain = std::max<int64_t>(1, 8192 / cols);
    parallel_for(rows, grain, [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) {
            const T* p_row = &prediction.at<T>(r, 0);
            A lum = A(0);
            if constexpr (K == LossKind::relative_l2_luminance) {
                A red = to_acc(p_row[0]), green = to_acc(p_row[1]), blue = to_acc(p_row[2]);
                if (cols >= 6) {
                    red += to_acc(p_row[3]);
                    green += to_acc(p_row[4]);
                    blue += to_acc(p_row[5]);
                }
                lum = loss_luminance(red, green, blue);
            }
            for (int64_t c = 0; c < cols; ++c) {
                const A pdf = data_pdf ? load_f<A>(*data_pdf, r, pdf_per_element ? c : 0) : A(1);
                const LossTerm<A> term = loss_element<K, A>(to_acc(p_row[c]), load_f<A>(target, r, c), pdf, lum, n, ls);
                store_f(values, r, c, term.value);
                gradients.at<T>(r, c) = from_acc<T>(term.gradient);
            }
        }
    });
}

class ElementwiseLoss final : public Loss {
public:
    ElementwiseLoss(LossKind kind, std::string name, int64_t min_cols)
        : m_kind(kind), m_name(std::move(name)), m_min_cols(min_cols) {}
    std::string name() const override { return m_name; }
    LossKind kind() const { return m_kind; }

private:
    void evaluate_impl(const Stream& stream, float loss_scale, ConstView prediction, ConstView target,
                       const ConstView* data_pdf, View values, View gradients) const override {
        if (prediction.cols < m_min_cols)
            throw ShapeError(msg(m_name, " loss: the prediction needs at least ", m_min_cols,
                                 " columns (R, G, B), got ", describe(prediction)));
#ifdef TNN_WITH_GPU
        if (prediction.device.is_gpu()) {
            loss_gpu::evaluate(m_kind, stream, loss_scale, prediction, target, data_pdf, values, gradients);
            return;
        }
#endif  // TNN_WITH_GPU
        dispatch_loss_kind(m_kind, [&](auto kind) {
            dispatch_dtype(prediction.dtype, [&](auto t) {
                using T = decltype(t);
                evaluate_cpu<decltype(kind)::value, T>(loss_scale, prediction, target, data_pdf, values, gradients);
            });
        });
    }

    LossKind m_kind;
    std::string m_name;
    int64_t m_min_cols;
};

}  // namespace

bool loss_kind_of(const Loss& loss, LossKind* kind) {
    const auto* e = dynamic_cast<const ElementwiseLoss*>(&loss);
    if (e && kind) *kind = e->kind();
    return e != nullptr;
}

namespace {

using LossFactory = std::function<std::unique_ptr<Loss>()>;

const Registry<LossFactory>& loss_registry() {
    static const Registry<LossFactory> registry = [] {
        Registry<LossFactory> r("loss");
        auto add = [&](const char* name, LossKind kind, int64_t min_cols = 1) {
            r.add(name, [=] { return std::unique_ptr<Loss>(new ElementwiseLoss(kind, name, min_cols)); });
        };
        add("L2", LossKind::l2);
        add("L1", LossKind::l1);
        add("RelativeL2", LossKind::relative_l2);
        add("RelativeL1", LossKind::relative_l1);
        add("RelativeL2Luminance", LossKind::relative_l2_luminance, 3);
        add("MAPE", LossKind::mape);
        add("SMAPE", LossKind::smape);
        add("CrossEntropy", LossKind::cross_entropy);
        add("Variance", LossKind::variance);
        return r;
    }();
    return registry;
}

}  // namespace

void Loss::evaluate(const Stream& stream, float loss_scale, ConstView prediction, ConstView target,
                    const ConstView* data_pdf, View values, View gradients) const {
    const std::string who = msg(name(), " loss evaluate");
    const Device dev = prediction.device;
    if (stream.device() != dev)
        throw DeviceError(msg(who, ": the stream is for ", stream.device().str(), " but the prediction is on ", dev.str()));
    if (!std::isfinite(loss_scale) || loss_scale <= 0.0f)
        throw InputError(msg(who, ": loss_scale must be a positive finite number, got ", loss_scale));
    const int64_t rows = prediction.rows, cols = prediction.cols;
    if (rows < 0 || cols < 0) throw ShapeError(msg(who, ": prediction has a negative shape: ", describe(prediction)));
    check_view(who, "prediction", prediction, rows, cols, dev, "the prediction");
    check_view(who, "target", target, rows, cols, dev, "the prediction");
    check_view(who, "values", values, rows, cols, dev, "the prediction");
    check_view(who, "gradients", gradients, rows, cols, dev, "the prediction");
    if (!is_float_or_double(target.dtype))
        throw DTypeError(msg(who, ": target must be float32 or float64, got ", dtype_name(target.dtype)));
    if (!is_float_or_double(values.dtype))
        throw DTypeError(msg(who, ": values must be float32 or float64, got ", dtype_name(values.dtype)));
    if (gradients.dtype != prediction.dtype)
        throw DTypeError(msg(who, ": gradients must have the prediction's dtype ", dtype_name(prediction.dtype),
                             ", got ", dtype_name(gradients.dtype)));
    if (data_pdf) {
        if (data_pdf->rows != rows || (data_pdf->cols != 1 && data_pdf->cols != cols))
            throw ShapeError(msg(who, ": data_pdf must be [", rows, ", 1] (per sample) or [", rows, ", ", cols,
                                 "] (per element), got ", describe(*data_pdf)));
        check_view(who, "data_pdf", *data_pdf, rows, data_pdf->cols, dev, "the prediction");
        if (!is_float_or_double(data_pdf->dtype))
            throw DTypeError(msg(who, ": data_pdf must be float32 or float64, got ", dtype_name(data_pdf->dtype)));
    }
    if (dev.is_gpu()) {
#ifdef TNN_WITH_GPU
        if (dev.index < 0 || dev.index >= gpu_bridge::device_count())
            throw DeviceError(msg(who, ": no GPU with index ", dev.index, " (", gpu_bridge::device_count(), " present)"));
#else
        throw_no_gpu_backend(who);
#endif  // TNN_WITH_GPU
    }
    if (rows == 0 || cols == 0) return;
    evaluate_impl(stream, loss_scale, prediction, target, data_pdf, values, gradients);
}

std::unique_ptr<Loss> create_loss(const json& config) {
    if (!config.is_object()) throw ConfigError(msg("loss config must be a JSON object, got ", config.type_name()));
    // tcnn's default when the key is absent.
    std::string otype = "RelativeL2";
    if (config.contains("otype")) otype = require_otype(config, "loss");
    const LossFactory& factory = loss_registry().get(otype);
    ConfigReader r(config, loss_registry().canonical_name(otype) + " loss");
    r.finish();  // no loss has keys besides otype: anything else is a typo worth a warning
    return factory();
}

std::vector<std::string> loss_names() { return loss_registry().names(); }

double sum(const Stream& stream, ConstView values) {
    if (!is_float_or_double(values.dtype))
        throw DTypeError(msg("sum: values must be float32 or float64, got ", dtype_name(values.dtype)));
    if (stream.device() != values.device)
        throw DeviceError(msg("sum: the stream is for ", stream.device().str(), " but the values are on ",
                              values.device.str()));
    if (values.rows < 0 || values.cols < 0 || values.stride < values.cols)
        throw ShapeError(msg("sum: invalid view ", describe(values)));
    if (values.numel() == 0) return 0.0;
    if (!values.data) throw ShapeError("sum: values is a null pointer");
    if (values.device.is_gpu()) {
#ifdef TNN_WITH_GPU
        return gpu_bridge::sum(stream, values);
#else
        throw_no_gpu_backend("sum");
#endif  // TNN_WITH_GPU
    }
    // Chunks of whole rows whose size depends only on the shape: partial sums are added in chunk
    // order, so the result is the same for every thread count.
    const int64_t grain = std::max<int64_t>(1, 16384 / values.cols);
    double total = 0.0;
    parallel_reduce<double>(values.rows, grain, 1, &total, [&](int64_t r0, int64_t r1, double* partial) {
        double s = 0.0;
        for (int64_t r = r0; r < r1; ++r)
            for (int64_t c = 0; c < values.cols; ++c) s += load_f<double>(values, r, c);
        partial[0] += s;
    });
    return total;
}

}  // namespace tnn
