// Per-lane maths of the parameter-free encodings whose outputs for one input dimension depend on
// that dimension alone (Frequency, TriangleWave, OneBlob): value, first and second derivative with
// respect to the input, exactly as tcnn orders and evaluates them. Host+device, templated on the
// arithmetic type (float everywhere except the fp64 CPU reference).
#pragma once

#include "encodings/hd_math.h"

namespace tnn {

// Frequency lane j of one input dimension (j = 2k + s, k = 0..n-1, s = 0 sin / 1 cos):
// y = sin(2^k pi x + s pi/2); dy/dx = 2^k pi cos(.); d2y/dx2 = -(2^k pi)^2 sin(.).
template <typename F> TNN_HD inline void frequency_lane(F x, uint32_t j, F* y, F* dy, F* d2y) {
    const int k = static_cast<int>(j / 2);
    const F pi = hd::constants<F>::pi;
    // tcnn's x * PI + phase, which nvcc contracts into one fma.
    const F arg = hd::fma(hd::scalbn(x, k), pi, static_cast<F>(j % 2) * (pi / F(2)));
    const F s = hd::sin(arg);
    const F w = hd::scalbn(pi, k);
    if (y) *y = s;
    if (dy) *dy = w * hd::cos(arg);
    if (d2y) *d2y = -w * w * s;
}

// TriangleWave lane k of one input dimension: a triangle wave of period 2^(1-k) in [-1, 1] with a
// phase shift of k/4 periods (tcnn: disambiguates locations); piecewise linear, so d2y/dx2 = 0 away
// from the kinks. Parity of floor(2 val) is taken with floor arithmetic (tcnn casts to int).
template <typename F> TNN_HD inline void triangle_wave_lane(F x, uint32_t k, F* y, F* dy, F* d2y) {
    const F val = hd::scalbn(x, static_cast<int>(k) - 1) + static_cast<F>(k) * F(0.25);
    if (y) *y = hd::fabs(val - hd::floor(val) - F(0.5)) * F(4) - F(1);
    if (dy) {
        const F t = hd::floor(val * F(2));
        const bool even = t - F(2) * hd::floor(t * F(0.5)) == F(0);
        *dy = hd::scalbn(even ? F(-1) : F(1), static_cast<int>(k) + 1);
    }
    if (d2y) *d2y = F(0);
}

// OneBlob: the quartic kernel 15/16 (1 - u^2)^2 on |u| < 1 (u = t * n_bins, so the blob is one bin
// wide on each side), its CDF, and the CDF's first and second derivatives with respect to t.
template <typename F> TNN_HD inline F quartic_cdf(F t, F inv_radius) {
    const F u = t * inv_radius, u2 = u * u, u4 = u2 * u2;
    return hd::fmax(F(0),
                    hd::fmin(F(1), (F(15) / F(16)) * u * (F(1) - (F(2) / F(3)) * u2 + (F(1) / F(5)) * u4) + F(0.5)));
}
template <typename F> TNN_HD inline F quartic_cdf_deriv(F t, F inv_radius) {
    const F u = t * inv_radius;
    const F a = hd::fmax(F(1) - u * u, F(0));
    return (F(15) / F(16)) * a * a * inv_radius;
}
template <typename F> TNN_HD inline F quartic_cdf_deriv2(F t, F inv_radius) {
    const F u = t * inv_radius;
    const F a = F(1) - u * u;
    return a > F(0) ? -(F(15) / F(4)) * u * a * inv_radius * inv_radius : F(0);
}

// The blob wraps around [0, 1]: every CDF is summed over the shifts -1, 0, +1.
template <typename F> TNN_HD inline F wrapped_cdf(F t, F n) {
    return quartic_cdf(t, n) + quartic_cdf(t - F(1), n) + quartic_cdf(t + F(1), n);
}
template <typename F> TNN_HD inline F wrapped_cdf_deriv(F t, F n) {
    return quartic_cdf_deriv(t, n) + quartic_cdf_deriv(t - F(1), n) + quartic_cdf_deriv(t + F(1), n);
}
template <typename F> TNN_HD inline F wrapped_cdf_deriv2(F t, F n) {
    return quartic_cdf_deriv2(t, n) + quartic_cdf_deriv2(t - F(1), n) + quartic_cdf_deriv2(t + F(1), n);
}

// OneBlob bin k of n_bins = 2^log2_bins: y = C(b_{k+1} - x) - C(b_k - x) with bin boundaries
// b_k = k / n_bins, the mass of a unit blob centred at x that falls into the bin.
template <typename F> TNN_HD inline void oneblob_bin(F x, uint32_t k, uint32_t log2_bins, F* y, F* dy, F* d2y) {
    const F n = static_cast<F>(1u << log2_bins);
    const F left = hd::scalbn(static_cast<F>(k), -static_cast<int>(log2_bins)) - x;
    const F right = hd::scalbn(static_cast<F>(k + 1), -static_cast<int>(log2_bins)) - x;
    if (y) *y = wrapped_cdf(right, n) - wrapped_cdf(left, n);
    if (dy) *dy = wrapped_cdf_deriv(left, n) - wrapped_cdf_deriv(right, n);
    if (d2y) *d2y = wrapped_cdf_deriv2(right, n) - wrapped_cdf_deriv2(left, n);
}

}  // namespace tnn
