// The error model of an MLP computed in a precision against the fp64 reference, shared by the CPU and
// GPU test programs: how many terms feed one element of each result, the bound of the naive
// computation in that precision, and the rule that a kernel is no worse than the naive computation.
#pragma once

#include "test_util.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

namespace tnn::test {

// The longest accumulation chains (terms summed) behind one element of each result.
struct MlpTermCounts {
    double forward = 0, input_grad = 0, param_grad = 0;
};
inline MlpTermCounts mlp_term_counts(const MlpLayout& l, int64_t batch) {
    MlpTermCounts t;
    for (uint32_t i = 0; i < l.n_layers(); ++i) {
        t.forward += l.layer_in(i);
        t.input_grad += i == l.n_hidden_layers ? l.n_output_dims : l.layer_out(i);
    }
    t.input_grad += t.forward;
    t.param_grad = t.input_grad + static_cast<double>(batch);
    return t;
}

// A computation in a precision with epsilon eps (the naive one: every stored value rounded, every sum
// accumulated) against fp64: elementwise n eps (max|ref| + |ref|), the classical gamma_n bound of an
// n-term accumulation relative to the size of its terms with a factor 2 for the activations' own
// error (the terms are of the size of the tensor's largest values, so a result that cancels to near
// zero carries that much absolute error); whole tensor ||got - ref|| <= sqrt(n) eps ||ref||, each
// term's rounding (eps / 2 relative) adding up as a random walk over n terms, with a factor 2. A
// wrong index or a lost term is off by O(|ref|).
inline void expect_within_precision(const Tensor& got_t, const Tensor& ref_t, double eps, double n,
                                    const std::string& what) {
    const std::vector<double> got = got_t.to_double_vector(), ref = ref_t.to_double_vector();
    ASSERT_EQ(got.size(), ref.size()) << what;
    double max_ref = 0, ss_ref = 0, ss_err = 0;
    for (size_t i = 0; i < ref.size(); ++i) {
        max_ref = std::max(max_ref, std::fabs(ref[i]));
        ss_ref += ref[i] * ref[i];
        ss_err += (got[i] - ref[i]) * (got[i] - ref[i]);
    }
    expect_close(got, ref, n * eps * max_ref, n * eps, what + " (elementwise)");
    EXPECT_LE(std::sqrt(ss_err), std::sqrt(n) * eps * std::sqrt(ss_ref)) << what << " (whole tensor)";
}

// Elementwise "no worse than the naive loop": in each block [begin, end) (a weight matrix, a bias
// vector, a whole output tensor)
//   |got_i - ref_i| <= |naive_i - ref_i| + 6 rms_block(naive - ref) + 2 eps |ref_i|.
// Why this holds for a correct kernel: the kernel and the naive loop round the same forward values
// to the network dtype, so most of their error is shared; what differs is the fp32 summation order
// (tensor cores, per-block partials: ~2^-24), the SFU's exp/sin/log (2^-21) and, against a naive loop
// that keeps f'(z) in fp32, FullyFusedMLP's extra rounding of f'(z) for activations other than
// (Leaky)ReLU (dz: two roundings instead of one, so that part of the error grows by sqrt(2)). Their
// sum per element is a fraction of the naive error's scale; 6 rms keeps a Gaussian tail out even over
// 10^6 elements (P ~ 2e-9 each); 2 eps |ref| allows both results to round to neighbouring values of
// the network dtype. A wrong index or a lost term is off by O(|ref|), far above: a 5% error in one row
// of a weight gradient fails (checked on the CPU when the test was written, by feeding the naive
// result, plain and perturbed, through this function).
inline void expect_no_worse_than_naive(const std::vector<double>& got, const std::vector<double>& ref,
                                const std::vector<double>& naive, double eps,
                                const std::vector<std::pair<size_t, size_t>>& blocks, const std::string& what) {
    ASSERT_EQ(got.size(), ref.size()) << what;
    ASSERT_EQ(naive.size(), ref.size()) << what;
    int failures = 0;
    for (auto [begin, end] : blocks) {
        double ss = 0;
        for (size_t i = begin; i < end; ++i) ss += (naive[i] - ref[i]) * (naive[i] - ref[i]);
        const double rms = end > begin ? std::sqrt(ss / double(end - begin)) : 0.0;
        for (size_t i = begin; i < end; ++i) {
            const double allowed = std::fabs(naive[i] - ref[i]) + 6 * rms + 2 * eps * std::fabs(ref[i]);
            if (!(std::fabs(got[i] - ref[i]) <= allowed) && ++failures <= 5)
                ADD_FAILURE() << what << "[" << i << "]: got " << got[i] << ", fp64 " << ref[i] << ", naive "
                              << naive[i]
                              << " (allowed error " << allowed << ", block rms of the naive error " << rms << ")";
        }
    }
    EXPECT_EQ(failures, 0) << what << ": " << failures << " of " << got.size() << " elements worse than the naive loop";
}

// Blocks of the parameter vector: each layer's matrix, then each layer's bias vector.
inline std::vector<std::pair<size_t, size_t>> mlp_parameter_blocks(const MlpLayout& l) {
    std::vector<std::pair<size_t, size_t>> b;
    for (uint32_t i = 0; i < l.n_layers(); ++i) b.push_back({l.weight_offset(i), l.weight_offset(i + 1)});
    if (l.bias)
        for (uint32_t i = 0; i < l.n_layers(); ++i) b.push_back({l.bias_offset(i), l.bias_offset(i) + l.layer_out(i)});
    return b;
}

}  // namespace tnn::test
