// NetworkWithInputEncoding: parameter order [network, encoding], padding value handed to the
// network, gradients through both parts, config errors.
#include "test_util.h"

using namespace tnn;

namespace {
json f64_mlp(uint32_t width = 8, uint32_t hidden = 1) {
    return {{"otype", "PortableMLP"}, {"n_neurons", width}, {"n_hidden_layers", hidden}, {"activation", "Tanh"},
            {"dtype", "float64"}};
}
}  // namespace

TEST(NetworkWithInputEncoding, IdentityComposition) {
    auto m = create_network_with_input_encoding(3, 2, {{"otype", "Identity"}, {"scale", 2.0}, {"offset", 0.5}}, f64_mlp());
    EXPECT_EQ(m->n_params(), m->network().n_params());
    EXPECT_EQ(m->n_matrix_params(), m->network().n_matrix_params());
    EXPECT_EQ(m->network().layout().input_pad_value, 1.0f);
    EXPECT_EQ(m->param_dtype(), DType::f64);
    EXPECT_EQ(m->encoding().param_dtype(), DType::f64);
    // init draws the network first with the same generator: equal to the network alone.
    std::vector<float> a(m->n_params()), b(m->n_params());
    m->init_params(42, a.data());
    m->network().init_params(42, b.data());
    EXPECT_EQ(a, b);

    const auto p = test::init_params_f64(*m, 3);
    Tensor x = test::random_tensor(6, 3, DType::f64, 0, 1, 4), xe(6, 3, DType::f64), y1(6, 2, DType::f64), y2(6, 2, DType::f64);
    for (int64_t i = 0; i < 18; ++i) xe.ptr<double>()[i] = 2.0 * x.ptr<double>()[i] + 0.5;
    m->inference(Stream::cpu(), x.view(), y1.view(), p.data());
    m->network().inference(Stream::cpu(), xe.view(), y2.view(), p.data());
    EXPECT_EQ(y1.to_double_vector(), y2.to_double_vector());
}

TEST(NetworkWithInputEncoding, Gradients) {
    auto m = create_network_with_input_encoding(3, 2, {{"otype", "Identity"}, {"scale", 1.5}}, f64_mlp(6, 2));
    test::check_gradients(*m, test::random_tensor(5, 3, DType::f64, -1, 1, 7), test::init_params_f64(*m, 8), 9);
}

TEST(NetworkWithInputEncoding, GradientsWithParametricEncoding) {
    const auto names = encoding_names();
    if (!std::count(names.begin(), names.end(), "HashGrid")) GTEST_SKIP() << "no HashGrid yet";
    const json grid = {{"otype", "HashGrid"}, {"n_levels", 2}, {"n_features_per_level", 2}, {"log2_hashmap_size", 6},
                       {"base_resolution", 3}, {"per_level_scale", 2.0}};
    auto m = create_network_with_input_encoding(2, 1, grid, f64_mlp(4, 1));
    EXPECT_EQ(m->n_params(), m->network().n_params() + m->encoding().n_params());
    EXPECT_EQ(m->network().layout().input_pad_value, 0.0f);  // grids pad with 0
    // Inputs inside cells (away from borders where the grid's input gradient jumps); the grid's
    // parameters start at +-1e-4, so use larger random parameters for a meaningful check.
    test::check_gradients(*m, test::random_tensor(4, 2, DType::f64, 0.1, 0.3, 1),
                          test::random_vector(m->n_params(), -0.5, 0.5, 2), 3, 1e-6, 1e-8, 1e-7);
}

TEST(NetworkWithInputEncoding, ConfigErrors) {
    EXPECT_THROW(create_model(3, 1, json::object()), ConfigError);                 // no network
    EXPECT_THROW(create_model(3, 1, json::array()), ConfigError);
    EXPECT_THROW(create_model(3, 1, {{"network", {{"otype", "Nope"}}}}), ConfigError);
    EXPECT_THROW(create_model(3, 1, {{"encoding", {{"otype", "Nope"}}}, {"network", f64_mlp()}}), ConfigError);
    EXPECT_THROW(create_model(0, 1, {{"network", f64_mlp()}}), ConfigError);
    auto m = create_model(3, 1, {{"network", f64_mlp()}});  // missing encoding means Identity
    EXPECT_EQ(m->encoding().name(), "Identity");
    EXPECT_EQ(m->hyperparams()["network"]["n_neurons"], 8);
}
