// The bound within which an MLP on the GPU agrees with its own CPU backend (the same module called
// with CPU tensors), shared by the first-order (mlp_gpu_cases.h, test_gpu_networks.cpp) and second-order
// (test_mlp_second_order_gpu.cpp) tests; docs/fully_fused_mlp.md and docs/blaslt_mlp.md state it.
#pragma once

#include "gpu_test_util.h"
#include "mlp_accuracy.h"

#include <string>
#include <utility>
#include <vector>

namespace tnn::test {

// The GPU (got) against the CPU backend (cpu), with ref the fp64 result: both round the same values
// to the same dtypes at the same points (the CPU backend follows the kernels' rounding rules), so they
// differ only by their fp32 summation orders (tensor cores, per-block partials), the GPU's
// special-function-unit activations (~2^-21) and, where a value lands on the other side of a rounding
// boundary of the network dtype, by that value's rounding (one unit), carried on through the later
// layers. Each of these is a part of the error the naive computation in that precision makes against
// fp64, so the GPU must be no worse than its CPU backend by the rules of the other GPU tests
// (expect_no_worse_than_naive, per block: |got - ref| <= |cpu - ref| + 6 rms_block(cpu - ref) + 2 eps
// |ref|; expect_matches_reference: n eps (max|ref| + |ref|) elementwise, ||got - ref|| <= 4 ||cpu - ref||
// + sqrt(n) eps ||ref||). By the triangle inequality the two devices are then within
// |got - cpu| <= 2 |cpu - ref| + 6 rms_block(cpu - ref) + 2 eps |ref| and ||got - cpu|| <= 5 ||cpu - ref||
// + sqrt(n) eps ||ref|| of each other: the bound docs/fully_fused_mlp.md and docs/blaslt_mlp.md state.
inline void expect_gpu_no_worse_than_cpu(const Tensor& got, const Tensor& cpu, const Tensor& ref, double eps, double n,
                                         const std::vector<std::pair<size_t, size_t>>& blocks, const std::string& what) {
    const std::vector<float> got_f = got.to_float_vector(), cpu_f = cpu.to_float_vector();
    const std::vector<double> ref_d = ref.to_double_vector();
    expect_matches_reference(got_f, ref_d, cpu_f, {eps, n}, what);
    expect_no_worse_than_naive(widen(got_f), ref_d, widen(cpu_f), eps, blocks, what);
}

inline std::vector<std::pair<size_t, size_t>> whole(const Tensor& t) { return {{0, static_cast<size_t>(t.numel())}}; }

}  // namespace tnn::test
