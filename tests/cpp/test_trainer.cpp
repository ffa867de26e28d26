// Trainer and checkpoints: training reduces the loss, EMA weights drive inference, save/load
// resumes bit for bit (in this process and in new `tnn` processes), and damaged or mismatched
// checkpoints are refused with a CheckpointError while the file and the trainer stay untouched; the
// fused loss step stays off on the CPU.
#include "test_util.h"

#include "losses/loss_gpu.h"

#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>

using namespace tnn;

namespace {

json small_config(const json& optimizer = {{"otype", "Adam"}, {"learning_rate", 1e-2}}) {
    return {{"encoding", {{"otype", "Identity"}}},
            {"network", {{"otype", "PortableMLP"}, {"n_neurons", 16}, {"n_hidden_layers", 2}, {"activation", "Tanh"}}},
            {"loss", {{"otype", "L2"}}},
            {"optimizer", optimizer}};
}

// y = (sin 3x0, x0 * x1) on [-1,1]^2, a fixed batch per step index.
void make_batch(uint32_t step, int64_t rows, Tensor& x, Tensor& y) {
    Pcg32 rng(99, step);
    for (int64_t r = 0; r < rows; ++r) {
        const float a = rng.next_float() * 2 - 1, b = rng.next_float() * 2 - 1;
        x.ptr<float>()[r * 2] = a;
        x.ptr<float>()[r * 2 + 1] = b;
        y.ptr<float>()[r * 2] = std::sin(3 * a);
        y.ptr<float>()[r * 2 + 1] = a * b;
    }
}

void train(Trainer& t, uint32_t steps, int64_t rows = 64) {
    Tensor x(rows, 2, DType::f32), y(rows, 2, DType::f32);
    for (uint32_t i = 0; i < steps; ++i) {
        make_batch(t.step_count(), rows, x, y);
        t.step(Stream::cpu(), x.view(), y.view());
    }
}

std::string read_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}
void write_file(const std::string& path, const std::string& data) { std::ofstream(path, std::ios::binary) << data; }

std::string temp_path(const std::string& name) {
    return std::string(TNN_BINARY_DIR) + "/test_tmp_" + ::testing::UnitTest::GetInstance()->current_test_info()->name() +
           "_" + name;
}

}  // namespace

TEST(Trainer, ReducesLoss) {
    Trainer t(2, 2, small_config(), Device::cpu(), 1);
    train(t, 1);
    const double first = t.loss(Stream::cpu());
    train(t, 300);
    const double last = t.loss(Stream::cpu());
    EXPECT_LT(last, first / 10) << first << " -> " << last;
    EXPECT_EQ(t.step_count(), 301u);
    EXPECT_EQ(t.loss_scale(), 1.0f);
}

TEST(Trainer, EmaWeightsDriveInference) {
    Trainer t(2, 2, small_config({{"otype", "EMA"}, {"decay", 0.9}, {"nested", {{"otype", "Adam"}, {"learning_rate", 1e-2}}}}),
              Device::cpu(), 1);
    train(t, 20);
    const float* ema = t.optimizer().inference_weights_fp32();
    ASSERT_NE(ema, nullptr);
    Tensor x = test::random_tensor(8, 2, DType::f32, -1, 1, 5), a(8, 2, DType::f32), b(8, 2, DType::f32), c(8, 2, DType::f32);
    t.inference(Stream::cpu(), x.view(), a.view());
    t.model().inference(Stream::cpu(), x.view(), b.view(), ema);
    t.model().inference(Stream::cpu(), x.view(), c.view(), t.params());
    EXPECT_EQ(a.to_float_vector(), b.to_float_vector());
    EXPECT_NE(a.to_float_vector(), c.to_float_vector());
}

TEST(Trainer, ResumeIsBitExact) {
    Trainer straight(2, 2, small_config(), Device::cpu(), 7);
    train(straight, 30);
    Trainer first(2, 2, small_config(), Device::cpu(), 7);
    train(first, 12);
    const std::string path = temp_path("resume.tnn");
    first.save(Stream::cpu(), path);
    Trainer resumed(2, 2, small_config(), Device::cpu(), 7);
    resumed.load(Stream::cpu(), path);
    EXPECT_EQ(resumed.step_count(), 12u);
    train(resumed, 18);
    EXPECT_EQ(resumed.params_host(Stream::cpu()), straight.params_host(Stream::cpu()));
    EXPECT_EQ(resumed.loss(Stream::cpu()), straight.loss(Stream::cpu()));
    std::remove(path.c_str());
}

TEST(Trainer, ResumeInNewProcessesIsBitExact) {
    const std::string tnn = std::string(TNN_BINARY_DIR) + "/tnn";
    const std::string cfg = temp_path("cfg.json"), a = temp_path("a.tnn"), b = temp_path("b.tnn"), c = temp_path("c.tnn");
    json config = small_config();
    config["encoding"] = {{"otype", "Identity"}};
    write_file(cfg, config.dump());
    const std::string common = " --config " + cfg + " --batch 256 --eval-interval 5 --out " + temp_path("o.png") + " > /dev/null";
    ASSERT_EQ(std::system((tnn + " fit-image --device cpu --steps 6 --save " + a + common).c_str()), 0);
    ASSERT_EQ(std::system((tnn + " fit-image --device cpu --steps 15 --resume " + a + " --save " + b + common).c_str()), 0);
    ASSERT_EQ(std::system((tnn + " fit-image --device cpu --steps 15 --save " + c + common).c_str()), 0);
    const CheckpointData rb = read_checkpoint(b), rc = read_checkpoint(c);
    EXPECT_EQ(rb.step, 15u);
    EXPECT_EQ(rb.params_fp32, rc.params_fp32);
    ASSERT_EQ(rb.optimizer_state.size(), rc.optimizer_state.size());
    for (size_t i = 0; i < rb.optimizer_state.size(); ++i) EXPECT_EQ(rb.optimizer_state[i].bytes, rc.optimizer_state[i].bytes);
    for (const auto& p : {cfg, a, b, c, temp_path("o.png")}) std::remove(p.c_str());
}

TEST(Checkpoint, DamagedOrForeignFilesAreRefusedAndNothingIsLost) {
    Trainer t(2, 2, small_config(), Device::cpu(), 3);
    train(t, 5);
    const std::string good = temp_path("good.tnn");
    t.save(Stream::cpu(), good);
    const std::string bytes = read_file(good);
    ASSERT_GT(bytes.size(), 200u);

    Trainer victim(2, 2, small_config(), Device::cpu(), 11);
    const auto victim_params = victim.params_host(Stream::cpu());
    auto expect_refused = [&](const std::string& data, const std::string& needle) {
        const std::string path = temp_path("bad.tnn");
        write_file(path, data);
        try {
            victim.load(Stream::cpu(), path);
            ADD_FAILURE() << "accepted a checkpoint that should say: " << needle;
        } catch (const CheckpointError& e) {
            EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
        }
        EXPECT_EQ(read_file(path), data);                                 // the file on disk is untouched
        EXPECT_EQ(victim.params_host(Stream::cpu()), victim_params);      // the trainer is untouched
        std::remove(path.c_str());
    };
    std::string flipped = bytes;
    flipped[bytes.size() - 40] ^= 0x10;  // inside the optimizer state
    expect_refused(flipped, "checksum");
    std::string flipped_header = bytes;
    flipped_header[30] ^= 0x01;  // inside the JSON header
    expect_refused(flipped_header, "corrupt");
    expect_refused(bytes.substr(0, bytes.size() / 2), "truncated");
    expect_refused(bytes.substr(0, bytes.size() - 1), "truncated");
    expect_refused(bytes.substr(0, 5), "magic");
    std::string magic = bytes;
    magic[0] = 'X';
    expect_refused(magic, "magic");
    std::string newer = bytes.substr(0, bytes.size() - 8);
    const uint32_t v2 = kCheckpointVersion + 1;
    std::memcpy(&newer[8], &v2, 4);
    const uint64_t sum = checksum64(newer.data(), newer.size());
    newer.append(reinterpret_cast<const char*>(&sum), 8);
    expect_refused(newer, "newer");

    Trainer wider(2, 2, [] {
        json c = small_config();
        c["network"]["n_neurons"] = 32;
        return c;
    }(), Device::cpu(), 3);
    EXPECT_THROW(wider.load(Stream::cpu(), good), CheckpointError);
    Trainer other_dims(3, 2, small_config(), Device::cpu(), 3);
    EXPECT_THROW(other_dims.load(Stream::cpu(), good), CheckpointError);
    EXPECT_THROW(victim.load(Stream::cpu(), temp_path("missing.tnn")), CheckpointError);
    EXPECT_EQ(read_file(good), bytes);
    std::remove(good.c_str());
}

TEST(Checkpoint, WriteIsAtomic) {
    // A failed write (unwritable folder) leaves the previous file intact and no temporary behind.
    CheckpointData d;
    d.config = {{"x", 1}};
    d.params_fp32 = {1, 2, 3};
    const std::string path = temp_path("atomic.tnn");
    write_checkpoint(path, d);
    const std::string before = read_file(path);
    EXPECT_THROW(write_checkpoint("/nonexistent-dir/x.tnn", d), CheckpointError);
    d.params_fp32 = {4, 5, 6};
    write_checkpoint(path, d);
    EXPECT_NE(read_file(path), before);
    EXPECT_EQ(read_checkpoint(path).params_fp32, (std::vector<float>{4, 5, 6}));
    std::remove(path.c_str());
}

// Trainer::bind_params on the CPU: the same steps as with the trainer's own weights, bit for bit; the
// trainer updates the caller's memory; values written there between steps are what the next step reads.
TEST(Trainer, BoundParamsEqualOwnedOnes) {
    Trainer own(2, 2, small_config(), Device::cpu(), 5), ext(2, 2, small_config(), Device::cpu(), 5);
    std::vector<float> external = own.params_host(Stream::cpu());
    for (float& v : external) v *= 0.5f;
    own.set_params(Stream::cpu(), external.data());
    ext.bind_params(Stream::cpu(), external.data());
    EXPECT_EQ(ext.params_fp32(), external.data());
    train(own, 5);
    train(ext, 5);
    EXPECT_EQ(own.loss(Stream::cpu()), ext.loss(Stream::cpu()));
    EXPECT_EQ(own.params_host(Stream::cpu()), external);
    std::vector<float> zero(external.size(), 0.0f);
    external = zero;
    Trainer fresh(2, 2, small_config(), Device::cpu(), 5);
    fresh.set_params(Stream::cpu(), zero.data());
    train(fresh, 1);
    Tensor x(64, 2, DType::f32), y(64, 2, DType::f32);
    make_batch(fresh.step_count() - 1, 64, x, y);
    ext.step(Stream::cpu(), x.view(), y.view());
    EXPECT_EQ(ext.loss(Stream::cpu()), fresh.loss(Stream::cpu()));
    EXPECT_THROW(ext.bind_params(Stream::cpu(), nullptr), ConfigError);
}

TEST(Trainer, BadCalls) {
    Trainer t(2, 2, small_config(), Device::cpu(), 1);
    Tensor x(4, 2, DType::f32), y(4, 2, DType::f32);
    EXPECT_THROW(t.step(Stream::cpu(), x.view(), Tensor(5, 2, DType::f32).view()), ShapeError);
    EXPECT_THROW(t.step(Stream::cpu(), x.view(), Tensor(4, 3, DType::f32).view()), ShapeError);
    EXPECT_THROW(t.step(Stream::cpu(), x.view(), Tensor(4, 2, DType::f64).view()), DTypeError);
    View elsewhere = y.view();  // the target is checked by the trainer itself (the fused step has no loss call)
    elsewhere.device = Device::gpu(0);
    EXPECT_THROW(t.step(Stream::cpu(), x.view(), elsewhere), DeviceError);
    View narrow = y.view();
    narrow.stride = 1;
    EXPECT_THROW(t.step(Stream::cpu(), x.view(), narrow), ShapeError);
    EXPECT_THROW(t.loss(Stream::cpu()), Error);  // no step yet
    EXPECT_THROW(Trainer(2, 2, {{"network", {{"otype", "PortableMLP"}}}, {"loss", {{"otype", "Nope"}}}}, Device::cpu()),
                 ConfigError);
    EXPECT_THROW(Trainer(2, 2, {{"network", {{"otype", "PortableMLP"}}}, {"optimizer", {{"otype", "Adam"}, {"learning_rate", "x"}}}},
                         Device::cpu()),
                 ConfigError);
}

TEST(Trainer, ConfigThatIsNotAnObjectIsAConfigError) {
    EXPECT_THROW(Trainer(2, 2, json::array({1, 2}), Device::cpu()), ConfigError);
    EXPECT_THROW(Trainer(2, 2, json(5), Device::cpu()), ConfigError);
}

// A checkpoint that passes the reader but whose optimizer state the optimizer refuses (blobs out of
// order) leaves the trainer's weights, state and step as they were.
TEST(Trainer, RefusedOptimizerStateChangesNothing) {
    Trainer t(2, 2, small_config(), Device::cpu(), 3);
    train(t, 4);
    const std::string path = temp_path("a.tnn"), bad = temp_path("reordered.tnn");
    t.save(Stream::cpu(), path);
    CheckpointData d = read_checkpoint(path);
    ASSERT_GE(d.optimizer_state.size(), 2u);
    std::swap(d.optimizer_state.front(), d.optimizer_state.back());
    for (float& v : d.params_fp32) v += 1.0f;  // other weights: they must not arrive
    write_checkpoint(bad, d);
    train(t, 2);
    const std::vector<float> before = t.params_host(Stream::cpu());
    const auto state_before = t.optimizer().state(Stream::cpu());
    EXPECT_THROW(t.load(Stream::cpu(), bad), Error);
    EXPECT_EQ(t.params_host(Stream::cpu()), before);
    EXPECT_EQ(t.step_count(), 6u);
    const auto state_after = t.optimizer().state(Stream::cpu());
    ASSERT_EQ(state_after.size(), state_before.size());
    for (size_t i = 0; i < state_after.size(); ++i) EXPECT_EQ(state_after[i].bytes, state_before[i].bytes) << i;
    std::remove(path.c_str());
    std::remove(bad.c_str());
}

TEST(Trainer, FusedLossStepOnlyOnTheGpu) {
    // The fused step needs FullyFusedMLP kernels (trainer.h): a CPU trainer never takes it, whatever
    // its switch says, and the loss kinds it would use are known.
    Trainer t(2, 2, small_config(), Device::cpu(), 1);
    EXPECT_FALSE(t.fused_loss());
    t.set_fused_loss(true);
    EXPECT_FALSE(t.fused_loss());
    train(t, 3);
    EXPECT_TRUE(std::isfinite(t.loss(Stream::cpu())));
    LossKind kind;
    EXPECT_TRUE(loss_kind_of(*create_loss({{"otype", "SMAPE"}}), &kind));
    EXPECT_EQ(kind, LossKind::smape);
    EXPECT_TRUE(is_fused_loss_kind(LossKind::relative_l2));
    EXPECT_FALSE(is_fused_loss_kind(LossKind::relative_l2_luminance));
    EXPECT_FALSE(is_fused_loss_kind(LossKind::cross_entropy));
}
