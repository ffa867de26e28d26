// Every network otype on the CPU. tcnn's names of our backends (CutlassMLP, MLP, no otype,
// MegakernelMLP): the backend they mean, canonical hyperparams, errors naming what was written and what
// to use. The RDNA4 port's names (HipBLASLtMLP, HipBLASLtMLPFP16, RocWMMAWidth64MLP): refused with
// what to write instead on a build without their AMD backend, the backend they mean on one with it. The CPU backends of FullyFusedMLP and BlasLtMLP: one case list against the fp64 reference
// (bounds from the precision), gradients against fp64 finite differences, and the GPU kernels'
// rounding rules checked bit for bit. tcnn's stock configs train a step on the CPU.
#include "mlp_backend_cases.h"
#include "networks/portable_mlp.h"

#include <tnn/runtime.h>

#include <cctype>
#include <cmath>
#include <cstring>
#include <tuple>

using namespace tnn;
using namespace tnn::test;

namespace {

// ---- tcnn's names.

json small(json cfg) {
    cfg["n_neurons"] = 16;
    cfg["n_hidden_layers"] = 1;
    return cfg;
}

TEST(TcnnNetworkNames, MeanOurBackendAndReportItsName) {
    struct Name {
        json config;
        std::string backend;
    };
    const std::vector<Name> names = {
        {{{"otype", "CutlassMLP"}}, "BlasLtMLP"},   {{{"otype", "MLP"}}, "BlasLtMLP"},
        {{{"otype", "mlp"}}, "BlasLtMLP"},          {json::object(), "BlasLtMLP"},
        {{{"otype", "MegakernelMLP"}}, "FullyFusedMLP"}, {{{"otype", "megakernelmlp"}}, "FullyFusedMLP"},
    };
    for (const auto& n : names) {
        const json cfg = small(n.config);
        const auto net = create_network(3, 2, cfg);
        EXPECT_EQ(net->name(), n.backend) << cfg.dump();
        // tcnn's network precision (float16) where the config names none.
        EXPECT_EQ(net->param_dtype(), DType::f16) << cfg.dump();
        EXPECT_EQ(network_dtype(cfg), DType::f16) << cfg.dump();
        const json h = net->hyperparams();
        EXPECT_EQ(h["otype"], n.backend);
        EXPECT_EQ(h["dtype"], "float16");
        // The hyperparams name the backend and the dtype: they build the same module without the alias.
        const auto again = create_network(3, 2, h);
        EXPECT_EQ(again->hyperparams(), h);
        EXPECT_EQ(again->n_params(), net->n_params());
    }
    // The backends' own names keep their defaults; an explicit dtype wins over tcnn's.
    EXPECT_EQ(network_dtype({{"otype", "BlasLtMLP"}}), DType::f32);
    EXPECT_EQ(network_dtype({{"otype", "FullyFusedMLP"}}), DType::f16);
    EXPECT_EQ(create_network(3, 2, small({{"otype", "CutlassMLP"}, {"dtype", "float32"}}))->param_dtype(), DType::f32);
    EXPECT_EQ(create_network(3, 2, small({{"dtype", "bfloat16"}}))->param_dtype(), DType::bf16);
    // tcnn's defaults for the other keys: 128 neurons, 5 hidden layers.
    const auto dflt = create_network(3, 2, json::object());
    EXPECT_EQ(dflt->width(), 128u);
    EXPECT_EQ(dflt->n_hidden_layers(), 5u);
}

TEST(TcnnNetworkNames, AreInTheOtypeList) {
    const std::vector<std::string> expected = {"PortableMLP",  "BlasLtMLP",        "FullyFusedMLP",
                                               "CutlassMLP",   "MLP",              "MegakernelMLP",
                                               "HipBLASLtMLP", "HipBLASLtMLPFP16", "RocWMMAWidth64MLP"};
    EXPECT_EQ(network_names(), expected);
    try {
        create_network(3, 1, {{"otype", "FooMLP"}});
        ADD_FAILURE() << "an unknown otype must be refused";
    } catch (const ConfigError& e) {
        for (const auto& n : expected) EXPECT_NE(std::string(e.what()).find(n), std::string::npos) << e.what();
    }
}

// Errors of a tcnn name say what the config wrote, the backend it means, and what to use instead.
TEST(TcnnNetworkNames, ErrorsNameTheRequestAndTheAlternatives) {
    auto expect_error = [](const json& cfg, const std::vector<std::string>& needles) {
        try {
            create_network(3, 2, cfg);
            ADD_FAILURE() << "no error for " << cfg.dump();
        } catch (const Error& e) {
            for (const auto& n : needles)
                EXPECT_NE(std::string(e.what()).find(n), std::string::npos) << "'" << n << "' not in: " << e.what();
        }
    };
    expect_error({{"otype", "MegakernelMLP"}, {"n_neurons", 256}},
                 {"MegakernelMLP (tcnn's name for FullyFusedMLP)", "16, 32, 64, 128", "BlasLtMLP", "CutlassMLP"});
    expect_error({{"otype", "MegakernelMLP"}, {"dtype", "float32"}}, {"MegakernelMLP", "FullyFusedMLP", "BlasLtMLP"});
    expect_error({{"otype", "MegakernelMLP"}, {"n_hidden_layers", 0}}, {"MegakernelMLP", "BlasLtMLP"});
    expect_error({{"otype", "CutlassMLP"}, {"dtype", "float64"}},
                 {"CutlassMLP (tcnn's name for BlasLtMLP)", "float64", "PortableMLP"});
    expect_error({{"dtype", "float64"}}, {"without 'otype'", "MLP", "BlasLtMLP", "PortableMLP"});
    expect_error({{"otype", "MLP"}, {"n_neurons", 0}}, {"MLP (tcnn's name for BlasLtMLP)", "n_neurons"});
    expect_error({{"otype", "MLP"}, {"output_dtype", "bfloat16"}}, {"MLP (tcnn's name for BlasLtMLP)", "output_dtype"});
    expect_error({{"otype", 5}}, {"otype"});
    EXPECT_THROW(create_network(3, 2, json::array()), ConfigError);
}

// ---- The RDNA4 port's names.

struct PortName {
    std::string name, backend;
    DType dtype;
    uint32_t width;  // the width the name fixes; 0: none
    std::string on_cuda;  // what the CUDA build's refusal tells to write
};

const std::vector<PortName>& port_names() {
    static const std::vector<PortName> names = {
        {"HipBLASLtMLP", "BlasLtMLP", DType::f32, 0, "\"otype\": \"BlasLtMLP\""},
        {"HipBLASLtMLPFP16", "BlasLtMLP", DType::f16, 0, "\"otype\": \"BlasLtMLP\", \"dtype\": \"float16\""},
        {"RocWMMAWidth64MLP", "FullyFusedMLP", DType::f16, 64,
         "\"otype\": \"FullyFusedMLP\", \"n_neurons\": 64, \"dtype\": \"float16\""},
    };
    return names;
}

// The refusal of a port name, or "" when this build creates it.
std::string port_refusal(const json& cfg) {
    try {
        (void)create_network(3, 2, cfg);
    } catch (const UnsupportedError& e) {
        return e.what();
    }
    return "";
}

TEST(PortNetworkNames, RefusedWithWhatToWriteWhereTheBuildLacksTheirBackend) {
    const std::string build = gpu_backend_name();
    for (const auto& p : port_names()) {
        std::string lower = p.name;
        for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
        for (const std::string& written : {p.name, lower}) {  // case-insensitive like every otype
            const std::string why = port_refusal({{"otype", written}, {"n_hidden_layers", 1}});
            if (build == "HIP") {
                // A HIP build refuses only what it lacks: hipBLASLt, or gfx12 code.
                if (!why.empty()) EXPECT_NE(why.find("this HIP build has no"), std::string::npos) << why;
                continue;
            }
            ASSERT_FALSE(why.empty()) << p.name << " must be refused on a " << build << " build";
            EXPECT_NE(why.find(p.name + " is the AMD RDNA4 port's name for " + p.backend), std::string::npos) << why;
            if (build == "CUDA") {
                EXPECT_NE(why.find("this build is CUDA: write " + p.on_cuda), std::string::npos) << why;
            } else {
                EXPECT_NE(why.find("this build has no GPU backend"), std::string::npos) << why;
                EXPECT_NE(why.find("runs on the CPU"), std::string::npos) << why;
            }
        }
        // The name is checked first: no config value of the request changes the refusal.
        if (build != "HIP") {
            EXPECT_THROW(create_network(3, 2, {{"otype", p.name}, {"dtype", "float64"}, {"n_neurons", 7}}),
                         UnsupportedError);
            EXPECT_THROW(create_model(3, 2, {{"encoding", {{"otype", "HashGrid"}}}, {"network", {{"otype", p.name}}}}),
                         UnsupportedError);
        }
    }
}

TEST(PortNetworkNames, MeanTheirBackendInTheirPrecisionOnABuildWithIt) {
    for (const auto& p : port_names()) {
        const json cfg = {{"otype", p.name}, {"n_hidden_layers", 2}};
        if (!port_refusal(cfg).empty()) continue;  // covered above: this build lacks the backend
        const auto net = create_network(64, 64, cfg);
        EXPECT_EQ(net->name(), p.backend);
        EXPECT_EQ(net->param_dtype(), p.dtype);
        EXPECT_EQ(network_dtype(cfg), p.dtype);
        if (p.width) EXPECT_EQ(net->width(), p.width);
        // The hyperparams name the backend: they build the same module on any build.
        const json h = net->hyperparams();
        EXPECT_EQ(h["otype"], p.backend);
        EXPECT_EQ(create_network(64, 64, h)->hyperparams(), h);
        // The name fixes the precision (and RocWMMAWidth64MLP the width); errors say where the others are.
        const std::string other = p.dtype == DType::f32 ? "float16" : "bfloat16";
        try {
            create_network(3, 2, {{"otype", p.name}, {"dtype", other}});
            ADD_FAILURE() << p.name << " with dtype " << other;
        } catch (const DTypeError& e) {
            EXPECT_NE(std::string(e.what()).find("the name fixes dtype " + std::string(dtype_name(p.dtype))),
                      std::string::npos)
                << e.what();
        }
        if (p.width) {
            try {
                create_network(3, 2, {{"otype", p.name}, {"n_neurons", 128}});
                ADD_FAILURE() << p.name << " with n_neurons 128";
            } catch (const ConfigError& e) {
                EXPECT_NE(std::string(e.what()).find("FullyFusedMLP"), std::string::npos) << e.what();
            }
        }
    }
}

TEST(TcnnNetworkNames, ModelWithoutNetworkOtype) {
    // A model config whose network has no otype: the encoding takes tcnn's network precision too.
    const json cfg = {{"encoding", {{"otype", "Frequency"}, {"n_frequencies", 2}}},
                      {"network", {{"n_neurons", 16}, {"n_hidden_layers", 1}}}};
    const auto model = create_model(3, 2, cfg);
    EXPECT_EQ(model->network().name(), "BlasLtMLP");
    EXPECT_EQ(model->param_dtype(), DType::f16);
    EXPECT_EQ(model->encoding().param_dtype(), DType::f16);
    const Stream cpu;
    std::vector<half> p(model->n_params());
    std::vector<float> p32(model->n_params());
    model->init_params(7, p32.data());
    for (size_t i = 0; i < p.size(); ++i) p[i] = half(p32[i]);
    Tensor x = random_tensor(9, 3, DType::f32, 0, 1, 1), y(9, 2, DType::f16);
    auto ctx = model->forward(cpu, x.view(), y.view(), p.data(), true);
    std::vector<half> g(model->n_params());
    model->backward(cpu, *ctx, x.view(), y.view(), y.view(), nullptr, g.data(), p.data(), GradMode::overwrite);
    for (double v : y.to_double_vector()) EXPECT_TRUE(std::isfinite(v));
}

// ---- The CPU backends against the fp64 reference (the shared case list, tests/mlp_backend_cases.h).

MlpResult run_cpu(const Module& m, const MlpData& d, GradMode mode = GradMode::overwrite, double grad_init = 7.0) {
    return run_module(m, d, Stream::cpu(), mode, grad_init);
}

using Param = std::tuple<MlpBackend, MlpCase>;
class CpuNetworkBackend : public ::testing::TestWithParam<Param> {};

TEST_P(CpuNetworkBackend, MatchesFp64Reference) {
    const auto& [b, c] = GetParam();
    std::string why;
    const auto net = case_network(b, c, why);
    if (!net) GTEST_SKIP() << why;
    ASSERT_TRUE(net->supports_device(Device::cpu()));
    const MlpData d = make_data(c, *net, 1234);
    const MlpResult got = run_cpu(*net, d);
    EXPECT_TRUE(same_bits(got.y, got.y_inference)) << "forward and inference must give the same bits";
    if (c.batch == 0) {
        for (double v : got.dL_dparams.to_double_vector()) ASSERT_EQ(v, 0.0) << "an empty batch gives a zero gradient";
        return;
    }
    const MlpResult ref = run_fp64(*net, d);
    const MlpTermCounts n = mlp_term_counts(net->layout(), c.batch);
    const double eps = dtype_epsilon(net->param_dtype());
    expect_within_precision(got.y, ref.y, eps, n.forward, c.name + " output");
    expect_within_precision(got.dL_dinput, ref.dL_dinput, eps, n.input_grad, c.name + " dL/dinput");
    expect_within_precision(got.dL_dparams, ref.dL_dparams, eps, n.param_grad, c.name + " dL/dparams");
}

std::string param_name(const ::testing::TestParamInfo<Param>& info) {
    return std::get<0>(info.param).label + "_" + std::get<1>(info.param).name;
}

INSTANTIATE_TEST_SUITE_P(Cases, CpuNetworkBackend,
                         ::testing::Combine(::testing::ValuesIn(mlp_backends()), ::testing::ValuesIn(mlp_cases())),
                         param_name);

// ---- Gradients against fp64 finite differences of the network's function.

// L(x, p) = sum w * y(x, p) of the fp64 network (the same function in float64), central differences
// with h = 1e-6 (error ~1e-8 relative, test_util.h's check_gradients), against the backend's
// backward with dL/dy = w in its output dtype. The backend's gradients carry its precision's error:
// the bound is expect_within_precision's.
TEST(CpuNetworkBackendGradients, MatchFp64FiniteDifferences) {
    const MlpCase c{"tanh_sigmoid", 3, 2, 16, 1, "Tanh", "Sigmoid", true, 6};
    for (const MlpBackend& b : mlp_backends()) {
        SCOPED_TRACE(b.label);
        const auto net = create_network(c.n_in, c.n_out, config_for(b, c));
        const MlpData d = make_data(c, *net, 99);
        const MlpResult got = run_cpu(*net, d);
        const auto ref = fp64_network(*net);
        const Tensor x = widen(d.x), w = widen(d.dL_dy);
        const std::vector<double> p = widen(d.params).to_double_vector(), wv = w.to_double_vector();
        auto loss = [&](const Tensor& xi, const std::vector<double>& pi) {
            Tensor y(c.batch, c.n_out, DType::f64);
            ref->inference(Stream::cpu(), xi.view(), y.view(), pi.data());
            double s = 0;
            const auto yv = y.to_double_vector();
            for (size_t i = 0; i < yv.size(); ++i) s += wv[i] * yv[i];
            return s;
        };
        const double h = 1e-6;
        std::vector<double> fd_p(p.size()), fd_x(static_cast<size_t>(x.numel()));
        for (size_t i = 0; i < p.size(); ++i) {
            auto q = p;
            q[i] = p[i] + h;
            const double lp = loss(x, q);
            q[i] = p[i] - h;
            fd_p[i] = (lp - loss(x, q)) / (2 * h);
        }
        for (size_t i = 0; i < fd_x.size(); ++i) {
            Tensor xi = x.to(Device::cpu());
            xi.ptr<double>()[i] += h;
            const double lp = loss(xi, p);
            xi.ptr<double>()[i] -= 2 * h;
            fd_x[i] = (lp - loss(xi, p)) / (2 * h);
        }
        const MlpTermCounts n = mlp_term_counts(net->layout(), c.batch);
        const double eps = dtype_epsilon(net->param_dtype());
        expect_within_precision(got.dL_dparams, host_tensor(fd_p, 1, int64_t(p.size()), DType::f64), eps, n.param_grad,
                                b.label + " dL/dparams vs finite differences");
        expect_within_precision(got.dL_dinput, host_tensor(fd_x, c.batch, c.n_in, DType::f64), eps, n.input_grad,
                                b.label + " dL/dinput vs finite differences");
    }
}

// ---- The GPU kernels' rounding rules, bit for bit.

// The reference with a storage type and rounding rules, on the data of a module of that dtype.
template <typename T> MlpResult run_reference(const Network& net, const MlpData& d, MlpRounding rounding) {
    const MlpReference<T> ref(net.layout(), rounding);
    const int64_t rows = d.x.rows();
    MlpResult r{Tensor(rows, net.n_output_dims(), net.output_dtype()), Tensor(),
                Tensor(rows, net.n_input_dims(), d.x.dtype()),
                Tensor(1, static_cast<int64_t>(net.n_params()), net.param_dtype())};
    auto ctx = ref.forward(d.x.view(), r.y.view(), d.params.ptr<T>(), true);
    View dx = r.dL_dinput.view();
    ref.backward(*ctx, d.dL_dy.view(), &dx, r.dL_dparams.ptr<T>(), d.params.ptr<T>(), GradMode::overwrite);
    return r;
}

void expect_same_results(const MlpResult& a, const MlpResult& b, const std::string& what) {
    EXPECT_TRUE(same_bits(a.y, b.y)) << what << ": output";
    EXPECT_TRUE(same_bits(a.dL_dinput, b.dL_dinput)) << what << ": dL/dinput";
    EXPECT_TRUE(same_bits(a.dL_dparams, b.dL_dparams)) << what << ": dL/dparams";
}

json with_dtype(json cfg, const std::string& otype, const std::string& dtype) {
    cfg["otype"] = otype;
    cfg["dtype"] = dtype;
    return cfg;
}

// FullyFusedMLP rounds f'(z) to the network dtype where its kernels stash it (activations other than
// None / ReLU / LeakyReLU); BlasLtMLP keeps it in fp32. Everything else rounds alike.
TEST(CpuNetworkBackendRounding, FollowsEachBackendsKernels) {
    const MlpCase c{"tanh", 5, 3, 32, 2, "Tanh", "Sigmoid", true, 40};
    const json base = config_for(mlp_backends()[0], c);
    for (const std::string dtype : {"float16", "bfloat16"}) {
        SCOPED_TRACE(dtype);
        const auto ffm = create_network(c.n_in, c.n_out, with_dtype(base, "FullyFusedMLP", dtype));
        const auto blas = create_network(c.n_in, c.n_out, with_dtype(base, "BlasLtMLP", dtype));
        const MlpData d = make_data(c, *ffm, 5);
        const MlpResult got_ffm = run_cpu(*ffm, d), got_blas = run_cpu(*blas, d);
        const bool f16 = dtype == "float16";
        const MlpResult ref_stash =
            f16 ? run_reference<half>(*ffm, d, {true}) : run_reference<bfloat16>(*ffm, d, {true});
        const MlpResult ref_plain = f16 ? run_reference<half>(*ffm, d, {}) : run_reference<bfloat16>(*ffm, d, {});
        expect_same_results(got_ffm, ref_stash, "FullyFusedMLP vs MlpReference with the stashed f'(z) rounded");
        expect_same_results(got_blas, ref_plain, "BlasLtMLP vs MlpReference");
        // The rule makes a difference here (the backward chain differs, the forward does not).
        EXPECT_TRUE(same_bits(got_ffm.y, got_blas.y));
        EXPECT_FALSE(same_bits(got_ffm.dL_dparams, got_blas.dL_dparams));
    }
    // With ReLU hidden layers the derivative is read off the stored activation by both: the same bits.
    const MlpCase r{"relu", 5, 3, 32, 2, "ReLU", "None", true, 40, true};
    const json rb = config_for(mlp_backends()[0], r);
    const auto ffm = create_network(r.n_in, r.n_out, with_dtype(rb, "FullyFusedMLP", "float16"));
    const auto blas = create_network(r.n_in, r.n_out, with_dtype(rb, "BlasLtMLP", "float16"));
    const MlpData d = make_data(r, *ffm, 6);
    expect_same_results(run_cpu(*ffm, d), run_cpu(*blas, d), "ReLU: FullyFusedMLP vs BlasLtMLP");
}

// The input is converted to the network dtype first; the output and dL/dinput are rounded once, from
// fp32, to their dtype.
TEST(CpuNetworkBackendRounding, InputAndOutputDtypes) {
    const MlpCase c{"silu", 6, 3, 16, 2, "SiLU", "Tanh", true, 30};
    for (const MlpBackend& b : mlp_backends()) {
        if (b.config["dtype"] == "float32") continue;
        SCOPED_TRACE(b.label);
        json cfg = config_for(b, c);
        const auto net = create_network(c.n_in, c.n_out, cfg);
        cfg["output_dtype"] = "float32";
        const auto net_f32out = create_network(c.n_in, c.n_out, cfg);
        const DType t = net->param_dtype();
        const MlpData d32 = make_data(c, *net, 8);  // fp32 input
        Tensor x16(d32.x.rows(), d32.x.cols(), t);
        convert(Stream::cpu(), d32.x.view(), x16.view());
        const MlpResult r32 = run_cpu(*net, d32);
        const MlpResult r16 =
            run_cpu(*net, MlpData{std::move(x16), d32.params.to(Device::cpu()), d32.dL_dy.to(Device::cpu())});
        EXPECT_TRUE(same_bits(r32.y, r16.y));
        EXPECT_TRUE(same_bits(r32.dL_dparams, r16.dL_dparams));
        Tensor dx_rounded(r32.dL_dinput.rows(), r32.dL_dinput.cols(), t);
        convert(Stream::cpu(), r32.dL_dinput.view(), dx_rounded.view());
        EXPECT_TRUE(same_bits(dx_rounded, r16.dL_dinput));
        // fp32 output: the same values before their last rounding; dL/dy holds the same (16-bit) values.
        Tensor dy32(d32.dL_dy.rows(), d32.dL_dy.cols(), DType::f32);
        convert(Stream::cpu(), d32.dL_dy.view(), dy32.view());
        const MlpResult rw =
            run_cpu(*net_f32out, MlpData{d32.x.to(Device::cpu()), d32.params.to(Device::cpu()), std::move(dy32)});
        Tensor y_rounded(rw.y.rows(), rw.y.cols(), t);
        convert(Stream::cpu(), rw.y.view(), y_rounded.view());
        EXPECT_TRUE(same_bits(y_rounded, r32.y));
        EXPECT_TRUE(same_bits(rw.dL_dparams, r32.dL_dparams));
        EXPECT_TRUE(same_bits(rw.dL_dinput, r32.dL_dinput));
    }
}

TEST(CpuNetworkBackendRounding, Tf32IsFloat32OnTheCpu) {
    const MlpCase c{"tanh", 4, 2, 32, 2, "Tanh", "None", true, 20};
    const auto net32 = create_network(c.n_in, c.n_out, config_for(mlp_backends()[2], c));
    const auto net_tf32 = create_network(c.n_in, c.n_out, config_for(mlp_backends()[3], c));
    ASSERT_EQ(net_tf32->hyperparams().value("tf32", false), true);
    const MlpData d = make_data(c, *net32, 3);
    expect_same_results(run_cpu(*net_tf32, d), run_cpu(*net32, d), "tf32 vs float32");
}

// dL/dparams = round_T(old + sum) when accumulating: onto zeros it equals overwrite.
TEST(CpuNetworkBackendRounding, AccumulateAddsBeforeRounding) {
    const MlpCase c{"relu", 3, 2, 16, 1, "ReLU", "None", false, 20, true};
    for (const MlpBackend& b : mlp_backends()) {
        SCOPED_TRACE(b.label);
        const auto net = create_network(c.n_in, c.n_out, config_for(b, c));
        const MlpData d = make_data(c, *net, 4);
        const MlpResult over = run_cpu(*net, d), acc0 = run_cpu(*net, d, GradMode::accumulate, 0.0),
                     acc1 = run_cpu(*net, d, GradMode::accumulate, 1.0);
        EXPECT_TRUE(same_bits(over.dL_dparams, acc0.dL_dparams));
        const auto g = over.dL_dparams.to_double_vector(), g1 = acc1.dL_dparams.to_double_vector();
        // One rounding of (old + sum) in the network dtype, the sum itself being one rounding off g.
        const double eps = dtype_epsilon(net->param_dtype());
        for (size_t i = 0; i < g.size(); ++i) EXPECT_NEAR(g1[i], g[i] + 1.0, eps * (std::fabs(g[i]) + 2.0)) << i;
    }
}

// ---- Calls.

TEST(CpuNetworkBackendCalls, ContextsAndDevices) {
    const Stream cpu;
    for (const MlpBackend& b : mlp_backends()) {
        SCOPED_TRACE(b.label);
        const MlpCase c{"c", 3, 2, 16, 1, "ReLU", "None", false, 8};
        const auto net = create_network(c.n_in, c.n_out, config_for(b, c));
        const MlpData d = make_data(c, *net, 1);
        Tensor y(8, 2, net->output_dtype());
        std::vector<double> g(net->n_params());  // large enough for any dtype
        // A context from another module, or of another batch size, is refused.
        EmptyContext foreign;
        EXPECT_THROW(net->backward(cpu, foreign, d.x.view(), y.view(), d.dL_dy.view(), nullptr, g.data(),
                                   d.params.data(), GradMode::overwrite),
                     Error);
        auto ctx = net->forward(cpu, d.x.view().rows_slice(0, 4), y.view().rows_slice(0, 4), d.params.data(), true);
        EXPECT_THROW(net->backward(cpu, *ctx, d.x.view(), y.view(), d.dL_dy.view(), nullptr, g.data(), d.params.data(),
                                   GradMode::overwrite),
                     ShapeError);
        // Second derivatives on the CPU backend (tests/cpp/test_mlp_second_order.cpp).
        EXPECT_TRUE(net->supports_backward_backward());
        if (!has_gpu_backend()) {
            ConstView on_gpu = d.x.view();
            on_gpu.device = Device::gpu(0);
            try {
                net->inference(Stream::gpu(nullptr, 0), on_gpu, y.view(), d.params.data());
                ADD_FAILURE() << "a GPU call must be refused by a build without a GPU backend";
            } catch (const UnsupportedError& e) {
                EXPECT_NE(std::string(e.what()).find("no GPU backend"), std::string::npos) << e.what();
            }
        }
    }
}

// ---- tcnn's stock configs (its data/config*.json, retyped; the hash grid kept at tcnn's sizes) train
// on the CPU: a few steps of forward + loss + backward + Adam reduce nothing to NaN.
TEST(CpuNetworkBackendStockConfigs, TrainOnTheCpu) {
    const json oneblob = json::parse(R"({
        "loss": {"otype": "RelativeL2"},
        "optimizer": {"otype": "Adam", "learning_rate": 1e-2, "beta1": 0.9, "beta2": 0.99, "epsilon": 1e-8,
                      "l2_reg": 1e-8},
        "encoding": {"otype": "OneBlob", "n_bins": 64},
        "network": {"otype": "FullyFusedMLP", "activation": "ReLU", "output_activation": "None",
                    "n_neurons": 128, "n_hidden_layers": 5}})");
    const json hash = json::parse(R"({
        "loss": {"otype": "RelativeL2"},
        "optimizer": {"otype": "Adam", "learning_rate": 1e-2, "beta1": 0.9, "beta2": 0.99, "epsilon": 1e-15,
                      "l2_reg": 1e-6},
        "encoding": {"otype": "HashGrid", "n_levels": 16, "n_features_per_level": 2, "log2_hashmap_size": 15,
                     "base_resolution": 16, "per_level_scale": 1.5, "fixed_point_pos": false},
        "network": {"otype": "FullyFusedMLP", "activation": "ReLU", "output_activation": "None",
                    "n_neurons": 64, "n_hidden_layers": 2}})");
    json cutlass = hash;
    cutlass["network"] = {{"otype", "CutlassMLP"}, {"n_neurons", 48}, {"n_hidden_layers", 2}};
    json no_otype = hash;
    no_otype["network"] = {{"n_neurons", 24}, {"n_hidden_layers", 1}};
    for (const json& cfg : {oneblob, hash, cutlass, no_otype}) {
        SCOPED_TRACE(cfg["network"].dump());
        Trainer trainer(2, 3, cfg, Device::cpu());
        const Tensor x = random_tensor(64, 2, DType::f32, 0, 1, 3), target = random_tensor(64, 3, DType::f32, 0, 1, 4);
        for (int s = 0; s < 3; ++s) trainer.step(Stream::cpu(), x.view(), target.view());
        EXPECT_TRUE(std::isfinite(trainer.loss(Stream::cpu())));
        EXPECT_EQ(trainer.step_count(), 3u);
    }
}

}  // namespace
