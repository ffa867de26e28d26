// Activation functions and their first and second derivatives, written once for the CPU reference
// and the GPU kernels (host+device). Formulas follow tcnn (TCNN_COMPAT.md): LeakyReLU slope 0.01,
// Squareplus and Softplus on X = 10x scaled back by 1/10.
#pragma once

#include <tnn/dtype.h>
#include <tnn/network.h>

#include <cmath>
#include <type_traits>

namespace tnn {

template <typename T> TNN_HD inline T act_sigmoid(T z) { return T(1) / (T(1) + exp(-z)); }

// f(z)
template <typename T> TNN_HD inline T activation_forward(Activation a, T z) {
    switch (a) {
        case Activation::None: return z;
        case Activation::ReLU: return z > T(0) ? z : T(0);
        case Activation::LeakyReLU: return z > T(0) ? z : T(0.01) * z;
        case Activation::Exponential: return exp(z);
        case Activation::Sine: return sin(z);
        case Activation::Sigmoid: return act_sigmoid(z);
        case Activation::Squareplus: {
            const T x = T(10) * z;
            return T(0.5) * (x + sqrt(x * x + T(4))) / T(10);
        }
        case Activation::Softplus: {
            const T x = T(10) * z;  // log(1 + e^x), written to not overflow for large x
            return (x > T(0) ? x + log1p(exp(-x)) : log1p(exp(x))) / T(10);
        }
        case Activation::Tanh: return tanh(z);
        case Activation::SiLU: return z * act_sigmoid(z);
    }
    return z;
}

// f'(z). ReLU and LeakyReLU take the right-hand derivative at 0 as 0 / 0.01, as tcnn (which tests
// the output > 0) does.
template <typename T> TNN_HD inline T activation_derivative(Activation a, T z) {
    switch (a) {
        case Activation::None: return T(1);
        case Activation::ReLU: return z > T(0) ? T(1) : T(0);
        case Activation::LeakyReLU: return z > T(0) ? T(1) : T(0.01);
        case Activation::Exponential: return exp(z);
        case Activation::Sine: return cos(z);
        case Activation::Sigmoid: {
            const T s = act_sigmoid(z);
            return s * (T(1) - s);
        }
        case Activation::Squareplus: {
            const T x = T(10) * z;
            return T(0.5) * (T(1) + x / sqrt(x * x + T(4)));
        }
        case Activation::Softplus: return act_sigmoid(T(10) * z);
        case Activation::Tanh: {
            const T t = tanh(z);
            return T(1) - t * t;
        }
        case Activation::SiLU: {
            const T s = act_sigmoid(z);
            return s * (T(1) + z * (T(1) - s));
        }
    }
    return T(1);
}

// f''(z) (0 for the piecewise-linear activations).
template <typename T> TNN_HD inline T activation_second_derivative(Activation a, T z) {
    switch (a) {
        case Activation::None:
        case Activation::ReLU:
        case Activation::LeakyReLU: return T(0);
        case Activation::Exponential: return exp(z);
        case Activation::Sine: return -sin(z);
        case Activation::Sigmoid: {
            const T s = act_sigmoid(z);
            return s * (T(1) - s) * (T(1) - T(2) * s);
        }
        case Activation::Squareplus: {
            const T x = T(10) * z;
            const T r = x * x + T(4);
            return T(20) / (r * sqrt(r));  // d/dz of 0.5 (1 + x / sqrt(x^2+4)) = 0.5 * 10 * 4 / r^1.5
        }
        case Activation::Softplus: {
            const T s = act_sigmoid(T(10) * z);
            return T(10) * s * (T(1) - s);
        }
        case Activation::Tanh: {
            const T t = tanh(z);
            return T(-2) * t * (T(1) - t * t);
        }
        case Activation::SiLU: {
            const T s = act_sigmoid(z);
            const T ds = s * (T(1) - s);
            return ds * (T(2) + z * (T(1) - T(2) * s));
        }
    }
    return T(0);
}

// Activations whose derivative the backward passes read off the stored activation a (a > 0 exactly
// when z > 0, unless a tiny z rounds to 0 in a 16-bit dtype): no pre-activation needs keeping.
TNN_HD constexpr bool derivative_from_output(Activation a) {
    return a == Activation::None || a == Activation::ReLU || a == Activation::LeakyReLU;
}

// Calls f(std::integral_constant<Activation, A>{}) for the runtime activation a: the one place where
// an activation becomes a template parameter (GPU kernels specialise their epilogues on it).
template <typename F> decltype(auto) dispatch_activation(Activation a, F&& f) {
    using A = Activation;
    switch (a) {
        case A::None: return f(std::integral_constant<A, A::None>{});
        case A::ReLU: return f(std::integral_constant<A, A::ReLU>{});
        case A::LeakyReLU: return f(std::integral_constant<A, A::LeakyReLU>{});
        case A::Exponential: return f(std::integral_constant<A, A::Exponential>{});
        case A::Sine: return f(std::integral_constant<A, A::Sine>{});
        case A::Sigmoid: return f(std::integral_constant<A, A::Sigmoid>{});
        case A::Squareplus: return f(std::integral_constant<A, A::Squareplus>{});
        case A::Softplus: return f(std::integral_constant<A, A::Softplus>{});
        case A::Tanh: return f(std::integral_constant<A, A::Tanh>{});
        case A::SiLU: return f(std::integral_constant<A, A::SiLU>{});
    }
    return f(std::integral_constant<A, A::None>{});
}

}  // namespace tnn
