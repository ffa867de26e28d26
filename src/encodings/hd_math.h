// Float/double overloads of the C maths functions the encoding headers use, callable from host and
// device code. CUDA and HIP provide the C names (sinf, floorf, fma, ...) in device code but not every
// std:: overload, so the encoding maths (templated on float or double) calls these instead.
#pragma once

#include <tnn/dtype.h>

#include <math.h>
#include <stdint.h>

namespace tnn::hd {

TNN_HD inline float sin(float x) { return ::sinf(x); }
TNN_HD inline double sin(double x) { return ::sin(x); }
TNN_HD inline float cos(float x) { return ::cosf(x); }
TNN_HD inline double cos(double x) { return ::cos(x); }
TNN_HD inline float floor(float x) { return ::floorf(x); }
TNN_HD inline double floor(double x) { return ::floor(x); }
TNN_HD inline float fabs(float x) { return ::fabsf(x); }
TNN_HD inline double fabs(double x) { return ::fabs(x); }
TNN_HD inline float fma(float a, float b, float c) { return ::fmaf(a, b, c); }
TNN_HD inline double fma(double a, double b, double c) { return ::fma(a, b, c); }
TNN_HD inline float fmin(float a, float b) { return ::fminf(a, b); }
TNN_HD inline double fmin(double a, double b) { return ::fmin(a, b); }
TNN_HD inline float fmax(float a, float b) { return ::fmaxf(a, b); }
TNN_HD inline double fmax(double a, double b) { return ::fmax(a, b); }
// x * 2^e, exact (tcnn's scalbnf).
TNN_HD inline float scalbn(float x, int e) { return ::scalbnf(x, e); }
TNN_HD inline double scalbn(double x, int e) { return ::scalbn(x, e); }

template <typename F> struct constants;
template <> struct constants<float> { static constexpr float pi = 3.14159265358979323846f; };
template <> struct constants<double> { static constexpr double pi = 3.14159265358979323846; };

}  // namespace tnn::hd
