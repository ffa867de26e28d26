// One list of network cases shared by the CPU and GPU test programs: every network backend and
// precision (FullyFusedMLP, BlasLtMLP) on every case, the data of a case, one run of a module on a
// device, the fp64 reference (the same function in float64), and the error bound of a computation in
// a given precision against it. tests/cpp/test_mlp_backends.cpp runs the list on the CPU against the
// fp64 reference; tests/gpu/mlp_gpu_cases.h extends it into the list every GPU backend runs.
#pragma once

#include "mlp_accuracy.h"
#include "test_util.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <ostream>
#include <string>
#include <vector>

namespace tnn::test {

// A backend as a config: its otype and precision. tf32 is a GPU tensor-core mode; the CPU computes
// such networks in float32 (tests/cpp checks it bit for bit), with float32's epsilon.
struct MlpBackend {
    std::string label;
    json config;
    bool tf32() const { return config.value("tf32", false); }
};

inline const std::vector<MlpBackend>& mlp_backends() {
    static const std::vector<MlpBackend> b = {
        {"FullyFusedMLP_float16", {{"otype", "FullyFusedMLP"}, {"dtype", "float16"}}},
        {"FullyFusedMLP_bfloat16", {{"otype", "FullyFusedMLP"}, {"dtype", "bfloat16"}}},
        {"BlasLtMLP_float32", {{"otype", "BlasLtMLP"}, {"dtype", "float32"}}},
        {"BlasLtMLP_tf32", {{"otype", "BlasLtMLP"}, {"dtype", "float32"}, {"tf32", true}}},
        {"BlasLtMLP_float16", {{"otype", "BlasLtMLP"}, {"dtype", "float16"}}},
        {"BlasLtMLP_bfloat16", {{"otype", "BlasLtMLP"}, {"dtype", "bfloat16"}}},
    };
    return b;
}

struct MlpCase {
    std::string name;
    uint32_t n_in, n_out, width, hidden;
    std::string act, out_act;
    bool bias;
    int64_t batch;
    // For ReLU-like kinks: inputs and output gradients on the grid of multiples of 1/8, weights
    // multiples of 1/8 in [-1/4, 1/4], and the biases of layer l odd multiples of u_l = 2^-(7 + 4l).
    // Then every pre-activation of layer l is exact in fp32 (|z| << 2^24 u_l) and, with a bias, an odd
    // multiple of u_l: never 0, so the ReLU derivative (whose value at exactly 0 differs between
    // conventions) and its sign agree between the fp64 reference, the naive reference and the GPU
    // whatever the summation order. (Layer l's inputs are multiples of 2 u_l, their products with
    // weights multiples of 2 u_{l+1}, and rounding activations to fp16 / bf16 only coarsens their grid,
    // so the argument holds in every dtype.) Otherwise: uniform inputs and output gradients in [-1, 1],
    // Xavier weights, biases in [-0.5, 0.5].
    bool exact_kinks = false;
    bool input_in_network_dtype = false;  // else fp32
    bool output_f32 = false;              // "output_dtype": "float32" (else the network dtype)
    bool strided = false;                 // GPU runs: views as column slices of wider tensors
};

inline std::ostream& operator<<(std::ostream& os, const MlpCase& c) { return os << c.name; }
inline void PrintTo(const MlpBackend& b, std::ostream* os) { *os << b.label; }

// Small batches keep the CPU tests fast; 70 rows cover a tail block of the reference's 64-row blocks,
// 1100 rows several blocks of the GPU kernels (FullyFusedMLP: up to 256 rows a block; BlasLtMLP: weight
// gradients in slabs of 384 rows and a tail). Width 48 is BlasLtMLP's only (FullyFusedMLP refuses it).
inline const std::vector<MlpCase>& mlp_cases() {
    static const std::vector<MlpCase> c = {
        {"relu_w32_d2_bias_b70", 3, 2, 32, 2, "ReLU", "None", true, 70, true},
        {"relu_w64_d2_b1100", 32, 16, 64, 2, "ReLU", "None", false, 1100, true},
        {"relu_w16_d1_b1", 3, 1, 16, 1, "ReLU", "ReLU", true, 1, true, true},
        {"leaky_exponential_w32_d1_f32out", 6, 2, 32, 1, "LeakyReLU", "Exponential", true, 20, true, false, true},
        {"tanh_sigmoid_w16_d1_bias_f32out", 5, 3, 16, 1, "Tanh", "Sigmoid", true, 9, false, false, true},
        {"silu_silu_w64_d2_b3", 4, 4, 64, 2, "SiLU", "SiLU", false, 3, false, true},
        {"sine_w16_d3_pads17", 17, 17, 16, 3, "Sine", "None", false, 33},
        {"softplus_squareplus_w16_d2_bias", 3, 3, 16, 2, "Softplus", "Squareplus", true, 20},
        {"none_tanh_w32_d1", 6, 3, 32, 1, "None", "Tanh", false, 20, false, true, true},
        {"sigmoid_none_w128_d1_b5", 2, 2, 128, 1, "Sigmoid", "None", true, 5},
        {"tanh_w48_d2_b40", 7, 5, 48, 2, "Tanh", "None", true, 40},
        {"batch0", 3, 4, 32, 2, "ReLU", "None", false, 0},
    };
    return c;
}

inline json config_for(const MlpBackend& b, const MlpCase& c) {
    json j = b.config;
    j["n_neurons"] = c.width;
    j["n_hidden_layers"] = c.hidden;
    j["activation"] = c.act;
    j["output_activation"] = c.out_act;
    if (c.bias) j["bias"] = true;
    if (c.output_f32 && j["dtype"] != "float32") j["output_dtype"] = "float32";
    return j;
}

// The case's network on a backend, or nullptr with the reason in `why` where the backend does not
// support the case (FullyFusedMLP's widths): such a case is skipped as "not supported".
inline std::unique_ptr<Network> case_network(const MlpBackend& b, const MlpCase& c, std::string& why) {
    try {
        return create_network(c.n_in, c.n_out, config_for(b, c));
    } catch (const ConfigError& e) {
        why = std::string("not supported: ") + e.what();
        return nullptr;
    }
}

inline Tensor host_tensor(const std::vector<double>& v, int64_t rows, int64_t cols, DType t) {
    Tensor f(rows, cols, DType::f64);
    if (!v.empty()) std::memcpy(f.data(), v.data(), v.size() * sizeof(double));
    if (t == DType::f64) return f;
    Tensor out(rows, cols, t);
    convert(Stream::cpu(), f.view(), out.view());
    return out;
}

// A host tensor's values in float64.
inline Tensor widen(const Tensor& t) {
    Tensor out(t.rows(), t.cols(), DType::f64);
    convert(Stream::cpu(), t.view(), out.view());
    return out;
}

inline std::vector<double> on_grid(size_t n, double max, double step, uint64_t seed) {
    std::vector<double> v = random_vector(n, -max, max, seed);
    for (auto& x : v) x = std::round(x / step) * step;
    return v;
}

// A case's input (input dtype), parameters (network dtype) and dL/doutput (output dtype), on the host.
struct MlpData {
    Tensor x, params, dL_dy;
};

inline MlpData make_data(const MlpCase& c, const Network& net, uint64_t seed) {
    const MlpLayout& l = net.layout();
    const size_t nx = static_cast<size_t>(c.batch) * c.n_in, ng = static_cast<size_t>(c.batch) * c.n_out;
    std::vector<double> x, g, p(net.n_params(), 0.0);
    if (c.exact_kinks) {
        x = on_grid(nx, 1.0, 0.125, seed);
        g = on_grid(ng, 1.0, 0.125, seed + 1);
        const auto w = on_grid(net.n_matrix_params(), 0.25, 0.125, seed + 2);
        std::copy(w.begin(), w.end(), p.begin());
        Pcg32 rng(seed + 3);
        for (uint32_t layer = 0; l.bias && layer < l.n_layers(); ++layer)
            for (uint32_t o = 0; o < l.layer_out(layer); ++o)  // odd multiples of 2^-(7 + 4 layer)
                p[l.bias_offset(layer) + o] =
                    (2.0 * (rng.next_uint() % 16) - 15) * std::ldexp(1.0, -7 - 4 * static_cast<int>(layer));
    } else {
        x = random_vector(nx, -1, 1, seed);
        g = random_vector(ng, -1, 1, seed + 1);
        std::vector<float> init(net.n_params());
        net.init_params(seed + 2, init.data());
        std::copy(init.begin(), init.end(), p.begin());
        const auto b = random_vector(net.n_params() - net.n_matrix_params(), -0.5, 0.5, seed + 3);
        std::copy(b.begin(), b.end(), p.begin() + static_cast<std::ptrdiff_t>(net.n_matrix_params()));
    }
    const DType t = net.param_dtype();
    return {host_tensor(x, c.batch, c.n_in, c.input_in_network_dtype ? t : DType::f32),
            host_tensor(p, 1, static_cast<int64_t>(p.size()), t), host_tensor(g, c.batch, c.n_out, net.output_dtype())};
}

// Host copies of one run's results, in the module's dtypes.
struct MlpResult {
    Tensor y, y_inference, dL_dinput, dL_dparams;
};

// forward (keeping the context), inference, and backward with dL/dinput and dL/dparams (in `mode`,
// into buffers holding 7 and grad_init first) on the stream's device; results copied to the host.
inline MlpResult run_module(const Module& m, const MlpData& d, const Stream& stream,
                            GradMode mode = GradMode::overwrite, double grad_init = 7.0) {
    const Device dev = stream.device();
    const int64_t rows = d.x.rows();
    const Tensor x = d.x.to(dev, stream), p = d.params.to(dev, stream), g = d.dL_dy.to(dev, stream);
    Tensor y(rows, m.n_output_dims(), m.output_dtype(), dev), yi(rows, m.n_output_dims(), m.output_dtype(), dev);
    Tensor dx(rows, m.n_input_dims(), d.x.dtype(), dev);
    Tensor dp(1, static_cast<int64_t>(m.n_params()), m.param_dtype(), dev);
    fill(stream, dx.view(), 7.0);
    fill(stream, dp.view(), grad_init);
    auto ctx = m.forward(stream, x.view(), y.view(), p.data(), true);
    m.inference(stream, x.view(), yi.view(), p.data());
    View dx_view = dx.view();
    m.backward(stream, *ctx, x.view(), y.view(), g.view(), &dx_view, dp.data(), p.data(), mode);
    stream.synchronize();
    const Device cpu = Device::cpu();
    return {y.to(cpu, stream), yi.to(cpu, stream), dx.to(cpu, stream), dp.to(cpu, stream)};
}

// The same function in float64 (PortableMLP on the CPU, the oracle) of the same values.
inline std::unique_ptr<Network> fp64_network(const Network& net) {
    json cfg = net.hyperparams();
    cfg["otype"] = "PortableMLP";
    cfg["dtype"] = "float64";
    cfg.erase("output_dtype");
    cfg.erase("tf32");
    return create_network(net.n_input_dims(), net.n_output_dims(), cfg, net.layout().input_pad_value);
}

inline MlpResult run_fp64(const Network& net, const MlpData& d) {
    return run_module(*fp64_network(net), MlpData{widen(d.x), widen(d.params), widen(d.dL_dy)}, Stream::cpu());
}

inline bool same_bits(const Tensor& a, const Tensor& b) {
    return a.dtype() == b.dtype() && a.numel() == b.numel() &&
           (a.numel() == 0 ||
            std::memcmp(a.data(), b.data(), static_cast<size_t>(a.numel()) * dtype_size(a.dtype())) == 0);
}

}  // namespace tnn::test
