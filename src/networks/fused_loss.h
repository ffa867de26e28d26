// The fused training step as a capability of a network (Network::fused_loss_step): forward, the loss
// and backward in one pass that never writes the output. The Trainer, the tests and the benchmarks
// reach it through this header only; which backend provides it is the network's business.
#pragma once

#include <tnn/network.h>

#include "core/loss_math.h"

namespace tnn {

class FusedLossStep {
public:
    // Whether the step runs for this loss on `device` (the network's activations and this build's
    // kernels permitting).
    virtual bool fuses_loss(Device device, LossKind kind) const = 0;
    // What forward + Loss::evaluate (no pdf) + backward give, bit for bit: values [rows, n_out] fp32,
    // dL/dparams overwritten, dL/dinput where given. Validates its arguments; throws where fuses_loss
    // is false.
    virtual void fused_loss_backward(const Stream& stream, ConstView input, ConstView target, LossKind kind,
                                     float loss_scale, View values, View* dL_dinput, void* dL_dparams,
                                     const void* params) const = 0;

protected:
    ~FusedLossStep() = default;
};

// The step of `model` when it is a network that fuses `kind` on `device`, else null.
inline const FusedLossStep* fused_loss_step(const Module& model, Device device, LossKind kind) {
    const auto* net = dynamic_cast<const Network*>(&model);
    const FusedLossStep* step = net ? net->fused_loss_step() : nullptr;
    return step && step->fuses_loss(device, kind) ? step : nullptr;
}

inline bool can_fuse_loss(const Module& model, Device device, LossKind kind) {
    return fused_loss_step(model, device, kind) != nullptr;
}

// The fused step of `model`; an error naming what the step needs where it has none.
void fused_loss_backward(const Module& model, const Stream& stream, ConstView input, ConstView target, LossKind kind,
                         float loss_scale, View values, View* dL_dinput, void* dL_dparams, const void* params);

}  // namespace tnn
