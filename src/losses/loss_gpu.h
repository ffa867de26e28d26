// The GPU entry point of the losses (losses.cu), called by the loss module once Loss::evaluate has
// validated the views. Declared in every build; defined only in builds with a GPU backend.
#pragma once

#include <tnn/tensor.h>

#include "losses/loss_math.h"

namespace tnn::loss_gpu {

// One launch: every element of `prediction` through loss_element<kind>, as the CPU loop computes it.
void evaluate(LossKind kind, const Stream& stream, float loss_scale, ConstView prediction, ConstView target,
              const ConstView* data_pdf, View values, View gradients);

}  // namespace tnn::loss_gpu
