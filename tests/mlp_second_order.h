// Second derivatives of the MLPs (backward_backward_input), shared by the CPU and GPU test programs:
// a case's probe dL'/d(dL/dinput), one second-order run of a module on a device, the fp64 reference,
// and the error model. tests/cpp/test_mlp_second_order.cpp checks the CPU backends against fp64 finite
// differences and the fp64 reference; tests/gpu/test_mlp_second_order_gpu.cpp the GPU against the CPU.
#pragma once

#include "mlp_backend_cases.h"

namespace tnn::test {

// The probe v = dL'/d(dL/dinput) of a case, in the input's dtype (on dyadic grids where the case keeps
// its values exact).
inline Tensor make_probe(const MlpCase& c, const MlpData& d, uint64_t seed) {
    const size_t n = static_cast<size_t>(c.batch) * c.n_in;
    const std::vector<double> v = c.exact_kinks ? on_grid(n, 1.0, 0.125, seed) : random_vector(n, -1, 1, seed);
    return host_tensor(v, c.batch, c.n_in, d.x.dtype());
}

// Host copies of one second-order run: dL'/d(dL/doutput) (output dtype), dL'/dinput (input dtype),
// dL'/dparams (param dtype).
struct MlpSecondOrderResult {
    Tensor dL_ddLdoutput, dL_dinput, dL_dparams;
};

// forward (keeping the context), then backward_backward_input with probe v and dL/doutput = d.dL_dy,
// every output requested (dL'/dparams in `mode`, into a buffer holding grad_init first), on the
// stream's device; results copied to the host.
inline MlpSecondOrderResult run_second_order(const Module& m, const MlpData& d, const Tensor& v, const Stream& stream,
                                             GradMode mode = GradMode::overwrite, double grad_init = 7.0) {
    const Device dev = stream.device();
    const int64_t rows = d.x.rows();
    const Tensor x = d.x.to(dev, stream), p = d.params.to(dev, stream), g = d.dL_dy.to(dev, stream),
                 vv = v.to(dev, stream);
    Tensor y(rows, m.n_output_dims(), m.output_dtype(), dev);
    Tensor du(rows, m.n_output_dims(), m.output_dtype(), dev), dx(rows, m.n_input_dims(), d.x.dtype(), dev);
    Tensor dp(1, static_cast<int64_t>(m.n_params()), m.param_dtype(), dev);
    fill(stream, du.view(), 7.0);
    fill(stream, dx.view(), 7.0);
    fill(stream, dp.view(), grad_init);
    auto ctx = m.forward(stream, x.view(), y.view(), p.data(), true);
    View du_view = du.view(), dx_view = dx.view();
    m.backward_backward_input(stream, *ctx, x.view(), vv.view(), g.view(), &du_view, &dx_view, dp.data(), p.data(),
                              mode);
    stream.synchronize();
    const Device cpu = Device::cpu();
    return {du.to(cpu, stream), dx.to(cpu, stream), dp.to(cpu, stream)};
}

// The same second-order pass of the same values in float64 (PortableMLP on the CPU, the oracle).
inline MlpSecondOrderResult run_second_order_fp64(const Network& net, const MlpData& d, const Tensor& v) {
    return run_second_order(*fp64_network(net), MlpData{widen(d.x), widen(d.params), widen(d.dL_dy)}, widen(v),
                            Stream::cpu());
}

// The error model (mlp_accuracy.h) of the second-order results. dL'/d(dL/doutput) is the forward
// tangent of the output: the forward pass's chain (MlpTermCounts::forward). dL'/dinput is W_0^T e_0,
// where e collects the tangent forward chain (to the top) and the first-order backward chain (down
// again): the longest chain is the first-order input gradient's (input_grad). dL'/dparams sums those
// terms over the batch: param_grad.
struct MlpSecondOrderTerms {
    double doutput = 0, input = 0, params = 0;
};
inline MlpSecondOrderTerms mlp_second_order_terms(const MlpLayout& l, int64_t batch) {
    const MlpTermCounts n = mlp_term_counts(l, batch);
    return {n.forward, n.input_grad, n.param_grad};
}

}  // namespace tnn::test
