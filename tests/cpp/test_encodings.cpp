// Tests of the parameter-free encodings (Identity, Frequency, TriangleWave, OneBlob,
// SphericalHarmonics, Empty), Composite and the NRC preset, and of what every encoding shares:
// hand-computed values, fp64 finite-difference first and second derivatives, hyperparams()
// round trips, config errors and reduced-precision outputs. Grids have their own file (test_grid.cpp).
#include "encodings/encoding_math.h"
#include "encodings/sh_math.h"
#include "test_util.h"

#include <cmath>
#include <string>
#include <vector>

namespace tnn::test {
namespace {

const Stream kCpu;

// A JSON array of the given values (a one-element braced list would otherwise not be an array).
json arr(std::initializer_list<json> items) {
    json a = json::array();
    for (const auto& i : items) a.push_back(i);
    return a;
}

std::vector<double> run(const Module& m, const Tensor& x, const std::vector<double>& params = {}) {
    Tensor y(x.rows(), m.n_output_dims(), m.output_dtype());
    std::vector<uint8_t> p(m.n_params() * dtype_size(m.param_dtype()));
    dispatch_dtype(m.param_dtype(), [&](auto t) {
        using T = decltype(t);
        for (size_t i = 0; i < m.n_params(); ++i) reinterpret_cast<T*>(p.data())[i] = T(params.at(i));
    });
    m.inference(kCpu, x.view(), y.view(), p.data());
    return y.to_double_vector();
}

Tensor from_rows(const std::vector<std::vector<double>>& rows, DType dtype = DType::f32) {
    Tensor t64(static_cast<int64_t>(rows.size()), static_cast<int64_t>(rows[0].size()), DType::f64);
    for (size_t r = 0; r < rows.size(); ++r)
        for (size_t c = 0; c < rows[r].size(); ++c) t64.ptr<double>()[r * rows[0].size() + c] = rows[r][c];
    if (dtype == DType::f64) return t64;
    Tensor t(t64.rows(), t64.cols(), dtype);
    convert(kCpu, t64.view(), t.view());
    return t;
}

// ---- registry -------------------------------------------------------------------------------------

TEST(Encodings, RegistryListsEveryTcnnEncoding) {
    const auto names = encoding_names();
    for (const char* n : {"Identity", "Frequency", "TriangleWave", "OneBlob", "SphericalHarmonics", "Grid", "HashGrid",
                          "DenseGrid", "TiledGrid", "Composite", "NRC", "OneBlobFrequency", "Empty"})
        EXPECT_NE(std::find(names.begin(), names.end(), n), names.end()) << n;
    // otypes are case-insensitive
    EXPECT_EQ(create_encoding(2, {{"otype", "frequency"}})->name(), "Frequency");
}

// ---- hand-computed values -------------------------------------------------------------------------

TEST(Encodings, IdentityValues) {
    auto e = create_encoding(2, {{"otype", "Identity"}, {"scale", 2.0}, {"offset", -0.5}});
    const auto y = run(*e, from_rows({{0.25, 1.0}}, DType::f32));
    EXPECT_EQ(y, (std::vector<double>{0.0, 1.5}));
    EXPECT_EQ(e->padding_value(), 1.0f);
}

// Lane dim*2n + 2k + s holds sin(2^k pi x + s pi/2) (TCNN_COMPAT.md).
TEST(Encodings, FrequencyLayoutAndValues) {
    auto e = create_encoding(2, {{"otype", "Frequency"}, {"n_frequencies", 3}}, DType::f64);
    ASSERT_EQ(e->n_output_dims(), 12u);
    const double x0 = 0.3, x1 = -0.7;
    const auto y = run(*e, from_rows({{x0, x1}}, DType::f64));
    const double pi = 3.14159265358979323846;
    std::vector<double> want;
    for (double x : {x0, x1})
        for (int k = 0; k < 3; ++k) {
            want.push_back(std::sin(std::ldexp(1.0, k) * pi * x));
            want.push_back(std::cos(std::ldexp(1.0, k) * pi * x));
        }
    // fp64 throughout; cos is evaluated as sin(a + pi/2), a few ulps from std::cos.
    expect_close(y, want, 1e-14, 1e-14, "Frequency");
}

// f_k(x) = |v - floor(v) - 1/2| * 4 - 1 with v = 2^(k-1) x + k/4: hand values at x = 0.3.
TEST(Encodings, TriangleWaveValues) {
    auto e = create_encoding(1, {{"otype", "TriangleWave"}, {"n_frequencies", 3}}, DType::f64);
    const auto y = run(*e, from_rows({{0.3}}, DType::f64));
    // k=0: v = 0.15 -> 0.35*4-1 = 0.4; k=1: v = 0.55 -> 0.05*4-1 = -0.8; k=2: v = 1.1 -> 0.4*4-1 = 0.6
    expect_close(y, {0.4, -0.8, 0.6}, 1e-15, 1e-14, "TriangleWave");
}

// A unit blob of radius one bin: the quartic CDF F(u) = 15/16 u (1 - 2/3 u^2 + 1/5 u^4) + 1/2 gives,
// for 4 bins and x at the centre of bin 0, F(1/2) - F(-1/2) = 3045/3840 in bin 0, 1 - F(1/2) =
// 795/7680 in bins 1 and 3 (the blob wraps around), 0 in bin 2.
TEST(Encodings, OneBlobValuesAndMass) {
    auto e = create_encoding(1, {{"otype", "OneBlob"}, {"n_bins", 4}}, DType::f64);
    auto y = run(*e, from_rows({{0.125}}, DType::f64));
    expect_close(y, {3045.0 / 3840.0, 795.0 / 7680.0, 0.0, 795.0 / 7680.0}, 1e-15, 1e-14, "OneBlob");
    // Mass conservation: the bins of any x sum to 1.
    auto e16 = create_encoding(1, {{"otype", "OneBlob"}, {"n_bins", 16}}, DType::f64);
    const Tensor x = random_tensor(64, 1, DType::f64, -0.5, 1.5, 5);
    const auto ys = run(*e16, x);
    for (int r = 0; r < 64; ++r) {
        double s = 0;
        for (int k = 0; k < 16; ++k) s += ys[r * 16 + k];
        EXPECT_NEAR(s, 1.0, 1e-14);
    }
}

TEST(Encodings, EmptyHasNoOutputsAndZeroGradient) {
    auto e = create_encoding(3, {{"otype", "Empty"}}, DType::f64);
    EXPECT_EQ(e->n_output_dims(), 0u);
    const Tensor x = random_tensor(4, 3, DType::f64, 0, 1, 1);
    Tensor y(4, 0, DType::f64), g(4, 0, DType::f64), dx(4, 3, DType::f64);
    fill(kCpu, dx.view(), 7.0);
    auto ctx = e->forward(kCpu, x.view(), y.view(), nullptr, true);
    View dxv = dx.view();
    e->backward(kCpu, *ctx, x.view(), y.view(), g.view(), &dxv, nullptr, nullptr, GradMode::overwrite);
    for (double v : dx.to_double_vector()) EXPECT_EQ(v, 0.0);
}

// ---- spherical harmonics --------------------------------------------------------------------------

double factorial(int n) { return n <= 1 ? 1.0 : n * factorial(n - 1); }

TEST(SphericalHarmonics, NormalisationTableMatchesClosedForm) {
    const double pi = 3.14159265358979323846;
    for (int l = 0; l < 8; ++l)
        for (int m = -l; m <= l; ++m) {
            const int a = std::abs(m);
            double k = std::sqrt((2 * l + 1) / (4 * pi) * factorial(l - a) / factorial(l + a));
            if (m != 0) k *= std::sqrt(2.0);
            if (a % 2) k = -k;  // Condon-Shortley phase
            EXPECT_NEAR(sh_normalisation(l * l + l + m), k, 1e-16 + 1e-15 * std::fabs(k)) << l << " " << m;
        }
}

// On unit vectors the polynomials must equal the textbook real harmonics built from libstdc++'s
// std::sph_legendre (an independent implementation): sqrt(2) Y_l^|m|(theta) {cos, sin}(|m| phi).
TEST(SphericalHarmonics, BasisMatchesSphLegendre) {
    const auto dirs = random_vector(3 * 200, -1, 1, 11);
    for (int s = 0; s < 200; ++s) {
        double x = dirs[3 * s], y = dirs[3 * s + 1], z = dirs[3 * s + 2];
        const double norm = std::sqrt(x * x + y * y + z * z);
        x /= norm, y /= norm, z /= norm;
        const double theta = std::acos(z), phi = std::atan2(y, x);
        double out[64];
        sh_basis<double>(8, x, y, z, out);
        for (int l = 0; l < 8; ++l)
            for (int m = -l; m <= l; ++m) {
                const int a = std::abs(m);
                double want = std::sph_legendre(l, a, theta);
                if (m > 0) want *= std::sqrt(2.0) * std::cos(a * phi);
                if (m < 0) want *= std::sqrt(2.0) * std::sin(a * phi);
                // Both in fp64; the recurrences lose a few ulps per degree on O(1) values.
                EXPECT_NEAR(out[l * l + l + m], want, 1e-12) << "l=" << l << " m=" << m;
            }
    }
}

// Spot checks against tcnn's generated polynomials (their comments give the exact forms).
TEST(SphericalHarmonics, MatchesTcnnPolynomials) {
    const double pi = 3.14159265358979323846, x = 0.3, y = -0.5, z = 0.8;  // deliberately off the sphere
    double out[64];
    sh_basis<double>(8, x, y, z, out);
    const double sp = std::sqrt(pi);
    EXPECT_NEAR(out[1], -std::sqrt(3.0) * y / (2 * sp), 1e-15);
    EXPECT_NEAR(out[3], -std::sqrt(3.0) * x / (2 * sp), 1e-15);
    EXPECT_NEAR(out[6], std::sqrt(5.0) * (3 * z * z - 1) / (4 * sp), 1e-15);
    EXPECT_NEAR(out[20], 3 * (-30 * z * z + 35 * std::pow(z, 4) + 3) / (16 * sp), 1e-14);
    EXPECT_NEAR(out[27], -std::sqrt(770.0) * y * (3 * x * x - y * y) * (9 * z * z - 1) / (32 * sp), 1e-14);
    EXPECT_NEAR(out[63],
                3 * std::sqrt(715.0) * x *
                    (-35 * x * x * std::pow(y, 4) + 21 * std::pow(x, 4) * y * y - std::pow(x, 6) + 7 * std::pow(y, 6)) /
                    (64 * sp),
                1e-14);
}

TEST(SphericalHarmonics, EncodingMapsUnitCubeToDirections) {
    auto e = create_encoding(3, {{"otype", "SphericalHarmonics"}, {"degree", 5}}, DType::f64);
    ASSERT_EQ(e->n_output_dims(), 25u);
    const auto y = run(*e, from_rows({{0.9, 0.2, 0.55}}, DType::f64));
    double want[64];
    sh_basis<double>(5, 0.8, -0.6, 0.1, want);
    expect_close(y, std::vector<double>(want, want + 25), 1e-15, 1e-13, "SH");
}

// ---- composite ------------------------------------------------------------------------------------

TEST(Composite, ConcatenatesNestedOutputsInOrder) {
    const json cfg = {{"otype", "Composite"},
                      {"nested",
                       {{{"otype", "Frequency"}, {"n_frequencies", 2}, {"n_dims_to_encode", 2}},
                        {{"otype", "Identity"}, {"scale", 3.0}}}}};
    auto e = create_encoding(3, cfg, DType::f64);
    ASSERT_EQ(e->n_output_dims(), 2u * 4u + 1u);
    const Tensor x = random_tensor(5, 3, DType::f64, 0, 1, 3);
    const auto y = run(*e, x);
    auto freq = create_encoding(2, {{"otype", "Frequency"}, {"n_frequencies", 2}}, DType::f64);
    Tensor x2(5, 2, DType::f64);
    copy(kCpu, x.view().cols_slice(0, 2), x2.view());
    const auto yf = run(*freq, x2);
    for (int r = 0; r < 5; ++r) {
        for (int k = 0; k < 8; ++k) EXPECT_EQ(y[r * 9 + k], yf[r * 8 + k]);
        EXPECT_EQ(y[r * 9 + 8], 3.0 * x.ptr<double>()[r * 3 + 2]);
    }
}

// dims_to_encode_begin picks any slice, in any order, and slices may overlap.
TEST(Composite, DimsToEncodeBegin) {
    const json cfg = {
        {"otype", "Composite"},
        {"nested",
         {{{"otype", "Identity"}, {"n_dims_to_encode", 1}, {"dims_to_encode_begin", 2}},
          {{"otype", "Identity"}, {"scale", 2.0}, {"n_dims_to_encode", 2}, {"dims_to_encode_begin", 0}},
          {{"otype", "Identity"}, {"scale", -1.0}, {"n_dims_to_encode", 2}, {"dims_to_encode_begin", 1}}}}};
    auto e = create_encoding(3, cfg, DType::f64);
    ASSERT_EQ(e->n_output_dims(), 5u);
    const auto y = run(*e, from_rows({{0.1, 0.2, 0.3}}, DType::f64));
    expect_close(y, {0.3, 0.2, 0.4, -0.2, -0.3}, 0, 1e-15, "dims_to_encode_begin");
}

// tcnn's alignment rule: a nested grid with 4 features per level starts at a multiple of 4; the
// lanes before it hold the previous encoding's padding value (1 for Identity).
TEST(Composite, AlignsNestedGridOutputs) {
    const json cfg = {
        {"otype", "Composite"},
        {"nested",
         {{{"otype", "Identity"}, {"n_dims_to_encode", 1}},
          {{"otype", "DenseGrid"}, {"n_levels", 1}, {"n_features_per_level", 4}, {"base_resolution", 2}}}}};
    auto e = create_encoding(3, cfg, DType::f64);
    ASSERT_EQ(e->n_output_dims(), 4u + 4u);
    EXPECT_EQ(e->padding_value(), 0.0f);  // the network pads after the grid
    std::vector<double> p(e->n_params());
    for (size_t i = 0; i < p.size(); ++i) p[i] = 0.5;  // every interpolated feature is then 0.5
    const auto y = run(*e, from_rows({{0.7, 0.2, 0.3}}, DType::f64), p);
    expect_close(y, {0.7, 1, 1, 1, 0.5, 0.5, 0.5, 0.5}, 0, 1e-15, "aligned composite");
}

// Sum pads every nested output to the lcm of their alignments (tcnn): Identity's 3 lanes become 4,
// the 4th holding its padding value 1, and add up with a 4-feature grid lane by lane.
TEST(Composite, SumPadsNestedOutputsToACommonWidth) {
    const json cfg = {{"otype", "Composite"},
                      {"reduction", "Sum"},
                      {"nested",
                       {{{"otype", "Identity"}, {"n_dims_to_encode", 3}, {"dims_to_encode_begin", 0}},
                        {{"otype", "DenseGrid"},
                         {"n_dims_to_encode", 3},
                         {"dims_to_encode_begin", 0},
                         {"n_levels", 1},
                         {"n_features_per_level", 4},
                         {"base_resolution", 2}}}}};
    auto e = create_encoding(3, cfg, DType::f64);
    ASSERT_EQ(e->n_output_dims(), 4u);
    EXPECT_EQ(e->padding_value(), 1.0f);  // 1 (Identity) + 0 (grid)
    const std::vector<double> p(e->n_params(), 0.5);
    expect_close(run(*e, from_rows({{0.1, 0.2, 0.3}}, DType::f64), p), {0.6, 0.7, 0.8, 1.5}, 0, 1e-15, "padded sum");
}

TEST(Composite, SumAndProduct) {
    auto nested = [](const char* reduction) {
        return json{{"otype", "Composite"},
                    {"reduction", reduction},
                    {"nested",
                     {{{"otype", "Identity"}, {"n_dims_to_encode", 2}, {"scale", 2.0}},
                      {{"otype", "Identity"}, {"n_dims_to_encode", 2}, {"offset", 1.0}}}}};
    };
    auto sum = create_encoding(4, nested("Sum"), DType::f64);
    auto prod = create_encoding(4, nested("product"), DType::f64);
    ASSERT_EQ(sum->n_output_dims(), 2u);
    const auto ys = run(*sum, from_rows({{0.1, 0.2, 0.3, 0.4}}, DType::f64));
    const auto yp = run(*prod, from_rows({{0.1, 0.2, 0.3, 0.4}}, DType::f64));
    expect_close(ys, {0.2 + 1.3, 0.4 + 1.4}, 0, 1e-15, "Sum");
    expect_close(yp, {0.2 * 1.3, 0.4 * 1.4}, 0, 1e-15, "Product");
    EXPECT_EQ(sum->padding_value(), 2.0f);  // both nested identities pad with 1
    EXPECT_EQ(prod->padding_value(), 1.0f);
}

TEST(Composite, NrcPresetIsTcnnsComposite) {
    auto nrc = create_encoding(9, {{"otype", "NRC"}, {"n_frequencies", 4}, {"n_bins", 8}}, DType::f64);
    ASSERT_EQ(nrc->n_output_dims(), 3u * 4u + 5u * 8u + 1u);
    const json manual = {{"otype", "Composite"},
                         {"nested",
                          {{{"otype", "TriangleWave"}, {"n_frequencies", 4}, {"n_dims_to_encode", 3}},
                           {{"otype", "OneBlob"}, {"n_bins", 8}, {"n_dims_to_encode", 5}},
                           {{"otype", "Identity"}}}}};
    auto ref = create_encoding(9, manual, DType::f64);
    const Tensor x = random_tensor(7, 9, DType::f64, 0, 1, 4);
    EXPECT_EQ(run(*nrc, x), run(*ref, x));
    // Exactly 8 dims: the Identity entry gets no dims and is dropped, as in tcnn.
    EXPECT_EQ(create_encoding(8, {{"otype", "OneBlobFrequency"}})->n_output_dims(), 3u * 12u + 5u * 4u);
}

// ---- first and second derivatives (fp64 finite differences) ---------------------------------------

struct DerivativeCase {
    std::string name;
    uint32_t n_dims;
    json config;
    double lo = 0.0, hi = 1.0;  // input range
};

std::vector<DerivativeCase> derivative_cases() {
    return {
        {"identity", 3, {{"otype", "Identity"}, {"scale", 1.5}, {"offset", 0.25}}},
        // 6 frequencies keep the finite-difference truncation error h^2 (2^5 pi)^3 / 6 ~ 1e-7 far below rtol * |f'|.
        {"frequency", 2, {{"otype", "Frequency"}, {"n_frequencies", 6}}},
        {"oneblob", 2, {{"otype", "OneBlob"}, {"n_bins", 8}}, -0.3, 1.3},
        {"sh1", 3, {{"otype", "SphericalHarmonics"}, {"degree", 1}}},
        {"sh4", 3, {{"otype", "SphericalHarmonics"}, {"degree", 4}}},
        {"sh8", 3, {{"otype", "SphericalHarmonics"}, {"degree", 8}}},
        {"empty", 2, {{"otype", "Empty"}}},
        {"composite",
         5,
         {{"otype", "Composite"},
          {"nested",
           {{{"otype", "SphericalHarmonics"}, {"degree", 3}, {"n_dims_to_encode", 3}},
            {{"otype", "Frequency"}, {"n_frequencies", 3}, {"n_dims_to_encode", 2}, {"dims_to_encode_begin", 1}},
            {{"otype", "HashGrid"},
             {"n_dims_to_encode", 2},
             {"dims_to_encode_begin", 3},
             {"n_levels", 2},
             {"base_resolution", 3},
             {"log2_hashmap_size", 4},
             {"interpolation", "Smoothstep"}}}}}},
        {"composite_sum",
         3,
         {{"otype", "Composite"},
          {"reduction", "Sum"},
          {"nested",
           {{{"otype", "Frequency"}, {"n_frequencies", 2}, {"n_dims_to_encode", 1}},
            {{"otype", "OneBlob"}, {"n_bins", 4}, {"n_dims_to_encode", 1}, {"dims_to_encode_begin", 2}},
            {{"otype", "SphericalHarmonics"}, {"degree", 2}, {"n_dims_to_encode", 3}, {"dims_to_encode_begin", 0}}}}}},
        {"composite_product",
         4,
         {{"otype", "Composite"},
          {"reduction", "Product"},
          {"nested",
           {{{"otype", "Frequency"}, {"n_frequencies", 1}, {"n_dims_to_encode", 1}},
            {{"otype", "DenseGrid"}, {"n_dims_to_encode", 2}, {"n_levels", 1}, {"base_resolution", 3}},
            {{"otype", "Identity"}, {"n_dims_to_encode", 2}, {"dims_to_encode_begin", 2}, {"offset", 0.5}}}}}},
        {"nested_composite",
         4,
         {{"otype", "Composite"},
          {"nested",
           {{{"otype", "Composite"},
             {"n_dims_to_encode", 2},
             {"reduction", "Product"},
             {"nested",
              {{{"otype", "Identity"}, {"n_dims_to_encode", 2}, {"dims_to_encode_begin", 0}},
               {{"otype", "Frequency"}, {"n_frequencies", 1}, {"n_dims_to_encode", 1}, {"dims_to_encode_begin", 1}}}}},
            {{"otype", "OneBlob"}, {"n_bins", 4}}}}}},
    };
}

// Random O(1) parameters: large enough that every derivative term matters.
std::vector<double> test_params(const Module& m, uint64_t seed) { return random_vector(m.n_params(), -1, 1, seed); }

TEST(Encodings, FirstDerivativesMatchFiniteDifferences) {
    for (const auto& c : derivative_cases()) {
        SCOPED_TRACE(c.name);
        auto e = create_encoding(c.n_dims, c.config, DType::f64);
        const Tensor x = random_tensor(6, c.n_dims, DType::f64, c.lo, c.hi, 17);
        check_gradients(*e, x, test_params(*e, 3), 23);
    }
}

TEST(Encodings, SecondDerivativesMatchFiniteDifferences) {
    for (const auto& c : derivative_cases()) {
        SCOPED_TRACE(c.name);
        auto e = create_encoding(c.n_dims, c.config, DType::f64);
        const Tensor x = random_tensor(5, c.n_dims, DType::f64, c.lo, c.hi, 29);
        check_second_derivatives(*e, x, test_params(*e, 5), 31);
    }
}

// TriangleWave is piecewise linear: its kinks sit at multiples of 2^(-k-1) - k/2^(k+1); the probe
// points are kept 1e-3 away from every kink so that central differences with h = 1e-6 see one piece.
TEST(Encodings, TriangleWaveDerivatives) {
    auto e = create_encoding(2, {{"otype", "TriangleWave"}, {"n_frequencies", 5}}, DType::f64);
    std::vector<std::vector<double>> rows;
    const auto cand = random_vector(400, 0, 1, 41);
    for (size_t i = 0; i + 1 < cand.size() && rows.size() < 6; i += 2) {
        bool ok = true;
        for (double x : {cand[i], cand[i + 1]})
            for (int k = 0; k < 5; ++k) {
                const double v = 2 * (std::ldexp(x, k - 1) + 0.25 * k);  // kinks where 2v is an integer
                if (std::fabs(v - std::round(v)) < 1e-3 * std::ldexp(1.0, k)) ok = false;
            }
        if (ok) rows.push_back({cand[i], cand[i + 1]});
    }
    ASSERT_EQ(rows.size(), 6u);
    check_gradients(*e, from_rows(rows, DType::f64), {}, 43);
    check_second_derivatives(*e, from_rows(rows, DType::f64), {}, 47);
}

// ---- hyperparams round trip -----------------------------------------------------------------------

std::vector<std::pair<uint32_t, json>> all_encoding_configs() {
    std::vector<std::pair<uint32_t, json>> v;
    for (const auto& c : derivative_cases()) v.emplace_back(c.n_dims, c.config);
    v.emplace_back(2, json{{"otype", "TriangleWave"}, {"n_frequencies", 7}});
    v.emplace_back(10, json{{"otype", "NRC"}});
    v.emplace_back(3, json{{"otype", "HashGrid"},
                           {"n_levels", 4},
                           {"log2_hashmap_size", 10},
                           {"hash", "Rng"},
                           {"stochastic_interpolation", true}});
    v.emplace_back(2, json{{"otype", "DenseGrid"}, {"n_levels", 3}, {"interpolation", "Nearest"}});
    v.emplace_back(4,
                   json{{"otype", "TiledGrid"}, {"n_levels", 2}, {"base_resolution", 4}, {"n_features_per_level", 8}});
    v.emplace_back(1, json{{"otype", "Grid"}, {"type", "Tile"}, {"n_features", 6}, {"n_features_per_level", 1}});
    return v;
}

TEST(Encodings, HyperparamsRoundTrip) {
    for (const auto& [n_dims, cfg] : all_encoding_configs()) {
        SCOPED_TRACE(cfg.dump());
        auto a = create_encoding(n_dims, cfg, DType::f32);
        const json h = a->hyperparams();
        auto b = create_encoding(n_dims, h, DType::f32);
        EXPECT_EQ(b->hyperparams(), h);
        ASSERT_EQ(b->n_output_dims(), a->n_output_dims());
        ASSERT_EQ(b->n_params(), a->n_params());
        EXPECT_EQ(b->padding_value(), a->padding_value());
        const auto p = test_params(*a, 9);
        const Tensor x = random_tensor(16, n_dims, DType::f32, 0, 1, 8);
        EXPECT_EQ(run(*a, x, p), run(*b, x, p));  // bit-identical: same maths, same parameters
    }
}

// ---- config errors ---------------------------------------------------------------------------------

struct BadConfig {
    uint32_t n_dims;
    json config;
    std::vector<std::string> must_mention;  // the key and what is allowed
};

TEST(Encodings, BadConfigsRaiseConfigErrorsThatNameTheProblem) {
    const std::vector<BadConfig> cases = {
        {3, {{"otype", "Hashgridd"}}, {"Hashgridd", "HashGrid", "Frequency"}},
        {3, {{"otype", "SphericalHarmonics"}, {"degree", 9}}, {"degree", "[1, 8]", "9"}},
        {3, {{"otype", "SphericalHarmonics"}, {"degree", 0}}, {"degree", "[1, 8]"}},
        {2, {{"otype", "SphericalHarmonics"}}, {"SphericalHarmonics", "n_dims = 3"}},
        {2, {{"otype", "OneBlob"}, {"n_bins", 12}}, {"n_bins", "power of two", "12"}},
        {2, {{"otype", "OneBlob"}, {"n_bins", 0}}, {"n_bins"}},
        {2, {{"otype", "Frequency"}, {"n_frequencies", "12"}}, {"n_frequencies", "integer"}},
        {2, {{"otype", "Frequency"}, {"n_frequencies", -1}}, {"n_frequencies"}},
        {2, {{"otype", "Identity"}, {"scale", "big"}}, {"scale", "number"}},
        {3, {{"otype", "Composite"}}, {"nested", "required"}},
        {3, {{"otype", "Composite"}, {"nested", json::array()}}, {"nested", "non-empty"}},
        {3,
         {{"otype", "Composite"}, {"nested", arr({{{"otype", "Identity"}, {"n_dims_to_encode", 4}}})}},
         {"4 dims", "3 input dims"}},
        {3,
         {{"otype", "Composite"}, {"nested", arr({{{"otype", "Identity"}}, {{"otype", "Frequency"}}})}},
         {"n_dims_to_encode", "nested[0]", "nested[1]"}},
        {3,
         {{"otype", "Composite"},
          {"nested", arr({{{"otype", "Identity"}, {"n_dims_to_encode", 2}, {"dims_to_encode_begin", 2}}})}},
         {"nested[0]", "[2, 4)", "3 input dims"}},
        {3,
         {{"otype", "Composite"}, {"nested", arr({{{"otype", "Identity"}, {"n_dims_to_encode", -2}}})}},
         {"n_dims_to_encode", "non-negative"}},
        {3,
         {{"otype", "Composite"}, {"reduction", "Max"}, {"nested", arr({{{"otype", "Identity"}}})}},
         {"reduction", "Concatenation", "Sum", "Product"}},
        {4,
         {{"otype", "Composite"},
          {"reduction", "Sum"},
          {"nested",
           arr({{{"otype", "Identity"}, {"n_dims_to_encode", 1}}, {{"otype", "Frequency"}, {"n_dims_to_encode", 3}}})}},
         {"Sum", "one width", "Identity 1", "Frequency 72"}},
        {3, {{"otype", "Composite"}, {"nested", arr({{{"otype", "Nope"}}})}}, {"nested[0]", "Nope", "valid choices"}},
        {3,
         {{"otype", "Composite"}, {"nested", arr({{{"otype", "SphericalHarmonics"}, {"degree", 12}}})}},
         {"nested[0]", "degree"}},
        {5, {{"otype", "NRC"}}, {"NRC", "at least 8"}},
        {9, {{"otype", "NRC"}, {"n_bins", 3}}, {"n_bins", "power of two"}},
    };
    for (const auto& c : cases) {
        SCOPED_TRACE(c.config.dump());
        try {
            create_encoding(c.n_dims, c.config, DType::f32);
            ADD_FAILURE() << "no ConfigError";
        } catch (const ConfigError& e) {
            const std::string what = e.what();
            for (const auto& s : c.must_mention)
                EXPECT_NE(what.find(s), std::string::npos) << what << " lacks '" << s << "'";
        }
    }
}

// ---- reduced precision ----------------------------------------------------------------------------

// An fp16/bf16 encoding computes in fp32 and rounds each output once, so it must agree with the
// fp32 encoding to half an ulp of the dtype: |y - y32| <= eps/2 * |y32| (+ the dtype's smallest
// subnormal spacing for values near zero: 2^-24 for fp16; bf16 keeps fp32's range).
TEST(Encodings, ReducedPrecisionOutputsAreRoundedFp32) {
    for (DType dt : {DType::f16, DType::bf16}) {
        const double rtol = dtype_epsilon(dt) / 2, atol = dt == DType::f16 ? std::ldexp(1.0, -24) : 1e-38;
        for (const auto& [n_dims, cfg] : all_encoding_configs()) {
            // Sum and Product reduce nested outputs that were already rounded (see the next test).
            const std::string dump = cfg.dump();
            if (dump.find("\"Sum\"") != std::string::npos || dump.find("\"Product\"") != std::string::npos) continue;
            SCOPED_TRACE(dump + " " + dtype_name(dt));
            auto e32 = create_encoding(n_dims, cfg, DType::f32);
            auto e16 = create_encoding(n_dims, cfg, dt);
            // Parameters representable in the low-precision type, so both see the same values.
            auto p = test_params(*e32, 2);
            for (auto& v : p) v = dt == DType::f16 ? double(float(half(float(v)))) : double(float(bfloat16(float(v))));
            const Tensor x = random_tensor(32, n_dims, DType::f32, 0, 1, 6);
            expect_close(run(*e16, x, p), run(*e32, x, p), atol, rtol, "output");
        }
    }
}

// Sum and Product reduce the nested outputs as stored, i.e. already rounded to the dtype, in fp32,
// and round the result (tcnn does the same): fp16 Sum/Product of two Identities must equal
// round(round(2x) op round(x + 1)) exactly (two fp16 values add and multiply exactly in fp32 here:
// their 11-bit significands and exponents within 8 of each other fit fp32's 24 bits).
TEST(Composite, ReductionsRoundNestedOutputsFirst) {
    for (const char* reduction : {"Sum", "Product"}) {
        const json cfg = {
            {"otype", "Composite"},
            {"reduction", reduction},
            {"nested",
             {{{"otype", "Identity"}, {"n_dims_to_encode", 1}, {"scale", 2.0}},
              {{"otype", "Identity"}, {"n_dims_to_encode", 1}, {"dims_to_encode_begin", 0}, {"offset", 1.0}}}}};
        auto e = create_encoding(1, cfg, DType::f16);
        const Tensor x = random_tensor(50, 1, DType::f32, 0, 1, 12);
        const auto y = run(*e, x);
        for (int r = 0; r < 50; ++r) {
            const float xv = x.ptr<float>()[r];
            const float a = float(half(2.0f * xv)), b = float(half(xv + 1.0f));
            const float want = float(half(reduction[0] == 'S' ? a + b : a * b));
            EXPECT_EQ(y[r], want) << reduction << " x=" << xv;
        }
    }
}

}  // namespace
}  // namespace tnn::test
