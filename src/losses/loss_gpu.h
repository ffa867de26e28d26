// The GPU entry point of the losses (losses.cu), called by the loss module once Loss::evaluate has
// validated the views. Declared in every build; defined only in builds with a GPU backend. Also the
// loss kind lookup the Trainer's fused step uses.
#pragma once

#include <tnn/tensor.h>

#include "core/loss_math.h"

namespace tnn {

class Loss;
// The kind behind a loss made by create_loss (loss.cpp; every build); false for other Loss classes.
bool loss_kind_of(const Loss& loss, LossKind* kind);

}  // namespace tnn

namespace tnn::loss_gpu {

// One launch: every element of `prediction` through loss_element<kind>, as the CPU loop computes it.
void evaluate(LossKind kind, const Stream& stream, float loss_scale, ConstView prediction, ConstView target,
              const ConstView* data_pdf, View values, View gradients);

}  // namespace tnn::loss_gpu
