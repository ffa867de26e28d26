// The view checks of the library's public entry points (modules, losses, the trainer), written once:
// rows x cols, stride, the device the call runs on, a data pointer, and on a GPU memory of that GPU.
#pragma once

#include <tnn/error.h>
#include <tnn/tensor.h>

#include "core/gpu_bridge.h"

namespace tnn {

// Throws ShapeError / DeviceError naming `who` and `arg`. `ref` names what the device comes from in
// the message ("the input", "the prediction"). Who is anything msg() prints; it is formatted only when
// a check fails, since every call validates and most calls pass.
template <typename Who>
void check_view(const Who& who, const char* arg, ConstView v, int64_t rows, int64_t cols, Device device,
                const char* ref) {
    if (v.rows != rows || v.cols != cols)
        throw ShapeError(msg(who, ": ", arg, " must be [", rows, ", ", cols, "], got ", describe(v)));
    if (v.stride < v.cols) throw ShapeError(msg(who, ": ", arg, " has stride ", v.stride, " < cols ", v.cols));
    if (v.device != device)
        throw DeviceError(msg(who, ": ", arg, " is on ", v.device.str(), " but ", ref, " is on ", device.str()));
    if (rows > 0 && cols > 0 && !v.data) throw ShapeError(msg(who, ": ", arg, " is a null pointer"));
#ifdef TNN_WITH_GPU
    if (device.is_gpu() && rows > 0 && cols > 0 && !gpu_bridge::is_device_pointer(v.data, device.index))
        throw DeviceError(msg(who, ": ", arg, " is not memory of ", device.str()));
#endif  // TNN_WITH_GPU
}

}  // namespace tnn
