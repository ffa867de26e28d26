// Losses (tcnn semantics, TCNN_COMPAT.md): per-element values divided by the number of real
// outputs N = rows * cols, and gradients with respect to the prediction, scaled by loss_scale.
#pragma once

#include <tnn/config.h>
#include <tnn/tensor.h>

#include <memory>

namespace tnn {

class Loss {
public:
    virtual ~Loss() = default;
    virtual std::string name() const = 0;
    virtual json hyperparams() const { return {{"otype", name()}}; }

    // prediction [rows, cols] (any float dtype); target [rows, cols] fp32 (fp64 with an fp64 prediction);
    // data_pdf optional [rows, 1] (per sample) or [rows, cols] (per element, tcnn's layout) fp32/fp64:
    // value and gradient are divided by it.
    // values [rows, cols] fp32 (fp64 with an fp64 prediction): the per-element loss / N.
    // gradients [rows, cols] in the prediction's dtype: loss_scale * d(loss)/d(prediction).
    void evaluate(const Stream& stream, float loss_scale, ConstView prediction, ConstView target,
                  const ConstView* data_pdf, View values, View gradients) const;

protected:
    virtual void evaluate_impl(const Stream& stream, float loss_scale, ConstView prediction, ConstView target,
                               const ConstView* data_pdf, View values, View gradients) const = 0;
};

std::unique_ptr<Loss> create_loss(const json& config);
std::vector<std::string> loss_names();

// Sum of all elements of a fp32/fp64 view, accumulated in fp64 in a fixed order (deterministic).
// Synchronises the stream (it returns a host value).
double sum(const Stream& stream, ConstView values);

}  // namespace tnn
