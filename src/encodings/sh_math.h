// Real spherical harmonics up to degree 8 (l = 0..7, 64 functions) as polynomials in (x, y, z),
// with their gradients and Hessians: tcnn's SphericalHarmonics basis (Sloan's "Stupid SH tricks"
// convention: index l*l + l + m for m = -l..l, Condon-Shortley phase, orthonormal on the sphere).
// Host+device, templated on the arithmetic type.
//
//   Y_l^m(x, y, z) = K_l^m * Q_l^|m|(z) * A_m(x, y),   A_m = Re (x + iy)^m (m > 0), 1 (m = 0), Im (x + iy)^|m| (m < 0)
//
// with Q_l^m = d^m P_l / dz^m (P_l the Legendre polynomial) and
// K_l^m = (-1)^m sqrt(2 - [m = 0]) sqrt((2l+1)/(4 pi) (l-|m|)!/(l+|m|)!). On the unit sphere this is
// sqrt(2) (-1)^m N P_l^|m|(cos t) {cos, sin}(|m| phi); tcnn (and this code) evaluates the same
// polynomials off the sphere too, without normalising the direction.
#pragma once

#include <tnn/dtype.h>

#include <stdint.h>

namespace tnn {

constexpr uint32_t kShMaxDegree = 8;  // tcnn's limit: degree d gives d*d outputs (l < d)

// K_l^m at index l*l + l + m. tests/cpp/test_encodings.cpp checks every entry against the closed
// form above computed with factorials.
TNN_HD inline double sh_normalisation(uint32_t index) {
    constexpr double k[kShMaxDegree * kShMaxDegree] = {
        0.28209479177387814,    -0.48860251190291998,    0.48860251190291992,    -0.48860251190291998,
        0.18209140509867988,    -0.36418281019735976,    0.63078313050504009,    -0.36418281019735976,
        0.18209140509867988,    -0.039336239328442907,   0.096353714754685155,   -0.3046971996429772,
        0.7463526651802308,     -0.3046971996429772,     0.096353714754685155,   -0.039336239328442907,
        0.0059603403376112026,  -0.016858388283618388,   0.063078313050504001,   -0.26761861742291571,
        0.84628437532163447,    -0.26761861742291571,    0.063078313050504001,   -0.016858388283618388,
        0.0059603403376112026,  -0.00069458418713245519, 0.0021964680580751762,  -0.0093188247511476283,
        0.045652731285460234,   -0.24157154730437169,    0.9356025796273888,     -0.24157154730437169,
        0.045652731285460234,   -0.0093188247511476283,  0.0021964680580751762,  -0.00069458418713245519,
        6.5722376641838803e-05, -0.00022766899107568562, 0.0010678622237644956,  -0.0058489222826344353,
        0.03509353369580661,    -0.22195099524523101,    1.0171072362820548,     -0.22195099524523101,
        0.03509353369580661,    -0.0058489222826344353,  0.0010678622237644956,  -0.00022766899107568562,
        6.5722376641838803e-05, -5.233009453691466e-06,  1.9580128477462541e-05, -9.9839457185235285e-05,
        0.00059903674311141165, -0.0039735602250741348,  0.028097313806030647,   -0.20647224590289676,
        1.0925484305920792,     -0.20647224590289676,    0.028097313806030647,   -0.0039735602250741348,
        0.00059903674311141165, -9.9839457185235285e-05, 1.9580128477462541e-05, -5.233009453691466e-06,
    };
    return k[index];
}

// Evaluates the degree*degree basis functions at (x, y, z) into out[]. Optional outputs, each
// function-index fastest: grad[3][n] (d/dx, d/dy, d/dz) and hess[6][n] (xx, yy, zz, xy, xz, yz).
template <typename F>
TNN_HD inline void sh_basis(uint32_t degree, F x, F y, F z, F* out, F* grad = nullptr, F* hess = nullptr) {
    constexpr uint32_t L = kShMaxDegree;
    const uint32_t n = degree * degree;
    // C[m] + i S[m] = (x + iy)^m.
    F C[L], S[L];
    C[0] = F(1);
    S[0] = F(0);
    for (uint32_t m = 1; m < degree; ++m) {
        C[m] = x * C[m - 1] - y * S[m - 1];
        S[m] = x * S[m - 1] + y * C[m - 1];
    }
    // Q[l][m] = d^m P_l / dz^m; zero for m > l, which is what the derivatives (m + 1, m + 2) need.
    // Q_m^m = (2m-1)!!, Q_{m+1}^m = (2m+1) z Q_m^m, (l-m) Q_l^m = (2l-1) z Q_{l-1}^m - (l+m-1) Q_{l-2}^m
    // (the associated Legendre recurrence with the common (1-z^2)^(m/2) factor divided out).
    F Q[L][L + 2];
    for (uint32_t l = 0; l < L; ++l)
        for (uint32_t m = 0; m < L + 2; ++m) Q[l][m] = F(0);
    F double_factorial = F(1);
    for (uint32_t m = 0; m < degree; ++m) {
        Q[m][m] = double_factorial;
        double_factorial *= static_cast<F>(2 * m + 1);
        if (m + 1 < degree) Q[m + 1][m] = static_cast<F>(2 * m + 1) * z * Q[m][m];
        for (uint32_t l = m + 2; l < degree; ++l)
            Q[l][m] = (static_cast<F>(2 * l - 1) * z * Q[l - 1][m] - static_cast<F>(l + m - 1) * Q[l - 2][m]) /
                      static_cast<F>(l - m);
    }
    for (uint32_t l = 0; l < degree; ++l) {
        for (int m = -static_cast<int>(l); m <= static_cast<int>(l); ++m) {
            const uint32_t i = l * l + l + m, a = static_cast<uint32_t>(m < 0 ? -m : m);
            const F K = static_cast<F>(sh_normalisation(i));
            const F A = m > 0 ? C[a] : (m < 0 ? S[a] : F(1));
            out[i] = K * Q[l][a] * A;
            if (!grad && !hess) continue;
            // d(x+iy)^a/dx = a (x+iy)^(a-1), d/dy = i a (x+iy)^(a-1).
            const F fa = static_cast<F>(a);
            const F Ax = m > 0 ? fa * C[a - 1] : (m < 0 ? fa * S[a - 1] : F(0));
            const F Ay = m > 0 ? -fa * S[a - 1] : (m < 0 ? fa * C[a - 1] : F(0));
            if (grad) {
                grad[i] = K * Q[l][a] * Ax;
                grad[n + i] = K * Q[l][a] * Ay;
                grad[2 * n + i] = K * Q[l][a + 1] * A;
            }
            if (hess) {
                const F c2 = static_cast<F>(a * (a > 0 ? a - 1 : 0));
                const F Cm2 = a >= 2 ? C[a - 2] : F(0), Sm2 = a >= 2 ? S[a - 2] : F(0);
                const F Axx = m > 0 ? c2 * Cm2 : (m < 0 ? c2 * Sm2 : F(0));
                const F Axy = m > 0 ? -c2 * Sm2 : (m < 0 ? c2 * Cm2 : F(0));
                hess[i] = K * Q[l][a] * Axx;
                hess[n + i] = -K * Q[l][a] * Axx;  // A_m is harmonic in (x, y): A_yy = -A_xx
                hess[2 * n + i] = K * Q[l][a + 2] * A;
                hess[3 * n + i] = K * Q[l][a] * Axy;
                hess[4 * n + i] = K * Q[l][a + 1] * Ax;
                hess[5 * n + i] = K * Q[l][a + 1] * Ay;
            }
        }
    }
}

}  // namespace tnn
