// The one place where the encodings' GPU code turns a runtime storage dtype into the device type its
// kernels are templated on: f(float{}), f(gpu_half{}) or f(gpu_bf16{}). fp64 has no GPU kernels (it
// is the CPU oracle's precision); modules refuse it before they get here.
#pragma once

#include "gpu/gpu.h"

#include <type_traits>

namespace tnn {

// f(std::true_type{}) or f(std::false_type{}): a runtime flag as a compile-time one, for kernel
// template arguments (decltype(flag)::value).
template <typename FN> void dispatch_bool(bool b, FN&& f) {
    if (b) f(std::true_type{});
    else f(std::false_type{});
}

template <typename FN> void dispatch_gpu_storage(DType dtype, const char* who, FN&& f) {
    switch (dtype) {
        case DType::f32: f(float{}); return;
        case DType::f16: f(gpu_half{}); return;
        case DType::bf16: f(gpu_bf16{}); return;
        default: throw UnsupportedError(msg(who, ": no GPU kernels for ", dtype_name(dtype)));
    }
}

}  // namespace tnn
