// Bad input is refused with a typed error and nothing crashes (issue 49): one test per reproducer
// of the issue, against the library (bounded JSON, the checkpoint reader and writer, optimizer state)
// and against the `tnn` program (exit status 1 and a message, never a signal).
#include "test_util.h"

#include <tnn/checkpoint.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

using namespace tnn;

namespace {

std::string read_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}
void write_file(const std::string& path, const std::string& data) { std::ofstream(path, std::ios::binary) << data; }

std::string temp_path(const std::string& name) {
    return std::string(TNN_BINARY_DIR) + "/test_tmp_" + ::testing::UnitTest::GetInstance()->current_test_info()->name() +
           "_" + name;
}

json small_config(const json& optimizer = {{"otype", "Adam"}, {"learning_rate", 1e-2}}) {
    return {{"encoding", {{"otype", "Identity"}}},
            {"network", {{"otype", "PortableMLP"}, {"n_neurons", 16}, {"n_hidden_layers", 1}, {"activation", "ReLU"}}},
            {"loss", {{"otype", "L2"}}},
            {"optimizer", optimizer}};
}

void train(Trainer& t, uint32_t steps) {
    Tensor x(32, 2, DType::f32), y(32, 3, DType::f32);
    for (int64_t i = 0; i < 64; ++i) x.ptr<float>()[i] = static_cast<float>(i % 7) / 7.0f;
    for (int64_t i = 0; i < 96; ++i) y.ptr<float>()[i] = static_cast<float>(i % 5) / 5.0f;
    for (uint32_t i = 0; i < steps; ++i) t.step(Stream::cpu(), x.view(), y.view());
}

// `levels` arrays inside each other around a number, as text.
std::string nested_arrays(size_t levels) { return std::string(levels, '[') + "1" + std::string(levels, ']'); }

// A Composite encoding with `levels` Composites inside each other, built in place (no deep copies).
json deep_composite(size_t levels) {
    json c = {{"otype", "Identity"}};
    for (size_t i = 0; i < levels; ++i) c = json{{"otype", "Composite"}, {"nested", json::array({std::move(c)})}};
    return c;
}

json deep_optimizer(size_t levels) {
    json o = {{"otype", "Adam"}};
    for (size_t i = 0; i < levels; ++i) o = json{{"otype", "EMA"}, {"nested", std::move(o)}};
    return o;
}

// ---- checkpoint surgery: the header and payload of a file, and the file again with a good checksum ----

struct Parts {
    json header;
    std::string payload;
};

Parts split(const std::string& file) {
    uint64_t header_len = 0;
    std::memcpy(&header_len, file.data() + 12, 8);
    return {json::parse(file.substr(20, header_len)), file.substr(20 + header_len, file.size() - 28 - header_len)};
}

std::string join(const Parts& p, const std::string& header_text = "") {
    const std::string text = header_text.empty() ? p.header.dump() : header_text;
    std::string out = "TNN-CKPT";
    const uint32_t version = kCheckpointVersion;
    const uint64_t len = text.size();
    out.append(reinterpret_cast<const char*>(&version), 4);
    out.append(reinterpret_cast<const char*>(&len), 8);
    out += text;
    out += p.payload;
    const uint64_t sum = checksum64(out.data(), out.size());
    out.append(reinterpret_cast<const char*>(&sum), 8);
    return out;
}

// The offset in the payload of state blob `name`.
size_t blob_offset(const Parts& p, const std::string& name) {
    size_t off = p.header["n_params"].get<size_t>() * 4;
    for (const auto& b : p.header["optimizer_state"]) {
        if (b["name"] == name) return off;
        off += b["bytes"].get<size_t>();
    }
    ADD_FAILURE() << "no state " << name;
    return 0;
}

std::string good_checkpoint(const std::string& path, const json& config = small_config(), uint32_t steps = 3) {
    Trainer t(2, 3, config, Device::cpu(), 5);
    train(t, steps);
    t.save(Stream::cpu(), path);
    return read_file(path);
}

// Refused by read_checkpoint (and so by Trainer::load) with a message containing `needle`.
void expect_read_refused(const std::string& path, const std::string& data, const std::string& needle) {
    write_file(path, data);
    try {
        read_checkpoint(path);
        ADD_FAILURE() << "accepted a checkpoint that should say: " << needle;
    } catch (const CheckpointError& e) {
        EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
}

// Refused when a trainer loads it.
void expect_load_refused(const std::string& path, const std::string& data, const std::string& needle,
                         const json& config = small_config()) {
    write_file(path, data);
    Trainer t(2, 3, config, Device::cpu(), 9);
    try {
        t.load(Stream::cpu(), path);
        ADD_FAILURE() << "loaded a checkpoint that should say: " << needle;
    } catch (const CheckpointError& e) {
        EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
}

// ---- the program ----

struct Outcome {
    int status = -1;  // exit status; -1: killed by a signal
    std::string err;
};

Outcome run_tnn(const std::string& args) {
    const std::string err_path = temp_path("stderr.txt");
    const std::string cmd = std::string(TNN_BINARY_DIR) + "/tnn " + args + " > /dev/null 2> " + err_path;
    const int raw = std::system(cmd.c_str());
    Outcome r;
    r.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
    r.err = read_file(err_path);
    std::remove(err_path.c_str());
    return r;
}

// A 16x16 image and a one-hidden-layer model: each run takes milliseconds.
class Program : public ::testing::Test {
protected:
    void SetUp() override {
        image = temp_path("img.png");
        config = temp_path("cfg.json");
        ASSERT_EQ(run_tnn("make-image " + image + " --size 16").status, 0);
        write_file(config, small_config().dump());
    }
    void TearDown() override {
        for (const auto& p : {image, config, temp_path("out.png")}) std::remove(p.c_str());
    }
    // fit-image on the small image and config, one step unless `extra` says more.
    Outcome fit(const std::string& extra, const std::string& cfg = "") {
        const std::string steps = extra.find("--steps") == std::string::npos ? " --steps 1" : "";
        const std::string out = extra.find("--out") == std::string::npos ? " --out " + temp_path("out.png") : "";
        return run_tnn("fit-image " + image + " --config " + (cfg.empty() ? config : cfg) +
                       " --device cpu --batch 16 --eval-interval 1" + out + steps + " " + extra);
    }
    void expect_error(const Outcome& r, const std::string& needle) {
        EXPECT_EQ(r.status, 1) << r.err;
        EXPECT_NE(r.err.find(needle), std::string::npos) << r.err;
    }
    std::string image, config;
};

}  // namespace

// ---- bounded JSON ----

TEST(Hardening, JsonDepthIsBoundedWhileParsing) {
    const std::string ok = nested_arrays(kMaxJsonDepth);
    EXPECT_EQ(json_depth(parse_json(ok.data(), ok.size(), "t")), kMaxJsonDepth);
    const std::string deeper = nested_arrays(kMaxJsonDepth + 1);
    EXPECT_THROW(parse_json(deeper.data(), deeper.size(), "t"), ConfigError);
    const std::string value = "{\"network\": " + nested_arrays(100000) + "}";  // issue: 100,000 deep
    try {
        parse_json(value.data(), value.size(), "config");
        ADD_FAILURE() << "accepted 100,000 levels";
    } catch (const ConfigError& e) {
        EXPECT_NE(std::string(e.what()).find("nested deeper than 64"), std::string::npos) << e.what();
    }
    EXPECT_THROW(parse_json("{\"a\": 1", 7, "t"), ConfigError);
    EXPECT_THROW(parse_json("1e999", 5, "t"), ConfigError);
    const std::string big(kMaxJsonBytes + 1, ' ');
    EXPECT_THROW(parse_json(big.data(), big.size(), "t"), ConfigError);
}

TEST(Hardening, JsonFilesAreRegularFilesOnly) {
    EXPECT_THROW(read_json_file("/dev/zero", "config"), ConfigError);
    EXPECT_THROW(read_json_file("/", "config"), ConfigError);
    EXPECT_THROW(read_json_file(temp_path("missing.json"), "config"), ConfigError);
    const std::string path = temp_path("c.json");
    write_file(path, "{\"a\": [1, 2]}");
    EXPECT_EQ(read_json_file(path, "config")["a"][1], 2);
    std::remove(path.c_str());
}

TEST(Hardening, DeepModuleConfigsAreRefusedBeforeRecursing) {
    // Built in code (not parsed): the factories' own depth check stops them. Issue: a Composite
    // 5,000 deep took 41 s and 3.3 GB, then overflowed the stack; an optimizer chain 10,000 deep too.
    const auto t0 = std::chrono::steady_clock::now();
    EXPECT_THROW(create_encoding(3, deep_composite(5000)), ConfigError);
    EXPECT_THROW(create_optimizer(deep_optimizer(10000)), ConfigError);
    json value = 1;
    for (int i = 0; i < 100000; ++i) value = json::array({std::move(value)});
    EXPECT_THROW(create_loss(json{{"otype", "L2"}, {"x", std::move(value)}}), ConfigError);
    EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 10.0);
    // Within the bound they still build: 30 Composites (60 levels) and a chain of 60 wrappers.
    EXPECT_EQ(create_encoding(3, deep_composite(30))->n_output_dims(), 3u);
    EXPECT_EQ(create_optimizer(deep_optimizer(60))->name(), "EMA");
}

TEST(Hardening, WrongJsonTypesAreConfigErrors) {
    EXPECT_THROW(create_model(2, 3, json::array({1, 2})), ConfigError);
    EXPECT_THROW(create_optimizer(json::array()), ConfigError);
    EXPECT_THROW(create_loss(5), ConfigError);
    json c = small_config();
    c["network"]["n_neurons"] = "wide";
    EXPECT_THROW(Trainer(2, 3, c, Device::cpu()), ConfigError);
    c = small_config();
    c["encoding"] = {{"otype", "Composite"}, {"nested", {{{"otype", "Identity"}, {"n_dims_to_encode", "two"}}}}};
    EXPECT_THROW(Trainer(2, 3, c, Device::cpu()), ConfigError);
    c = small_config({{"otype", "Composite"}, {"nested", {{{"otype", "SGD"}, {"n_params_to_optimize", -3}}}}});
    EXPECT_THROW(Trainer(2, 3, c, Device::cpu()), ConfigError);
}

// ---- the checkpoint reader ----

TEST(Hardening, CheckpointReaderRefusesNonFilesEarly) {
    EXPECT_THROW(read_checkpoint("/dev/zero"), CheckpointError);
    EXPECT_THROW(read_checkpoint("/"), CheckpointError);
    EXPECT_THROW(read_checkpoint_header("/dev/zero"), CheckpointError);
    // A 1 TiB sparse file whose header claims 2^40 header bytes: refused from its first 20 bytes.
    const std::string path = temp_path("huge.tnn");
    {
        std::string prefix = "TNN-CKPT";
        const uint32_t version = kCheckpointVersion;
        const uint64_t len = uint64_t{1} << 40;
        prefix.append(reinterpret_cast<const char*>(&version), 4);
        prefix.append(reinterpret_cast<const char*>(&len), 8);
        write_file(path, prefix);
        if (::truncate(path.c_str(), static_cast<off_t>(uint64_t{1} << 40)) != 0) GTEST_SKIP() << "no sparse files here";
    }
    const auto t0 = std::chrono::steady_clock::now();
    EXPECT_THROW(read_checkpoint(path), CheckpointError);
    EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 5.0);
    std::remove(path.c_str());
}

TEST(Hardening, CheckpointSizesAreCheckedWithoutWrapping) {
    const std::string path = temp_path("c.tnn");
    const std::string good = good_checkpoint(path);
    Parts p = split(good);
    EXPECT_NO_THROW(read_checkpoint(path));

    Parts q = p;  // issue: n_params + 2^62 (the byte count wraps to the same value)
    q.header["n_params"] = q.header["n_params"].get<uint64_t>() + (uint64_t{1} << 62);
    expect_read_refused(path, join(q), "n_params");
    q = p;  // issue: two blob sizes + 2^63 (their sum wraps to the same total)
    for (int i : {3, 4}) q.header["optimizer_state"][i]["bytes"] = q.header["optimizer_state"][i]["bytes"].get<uint64_t>() + (uint64_t{1} << 63);
    expect_read_refused(path, join(q), "does not fit");
    q = p;
    q.header["optimizer_state"][3]["bytes"] = q.header["optimizer_state"][3]["bytes"].get<uint64_t>() + 4;
    expect_read_refused(path, join(q), "truncated");
    q = p;
    q.payload += "xxxx";
    expect_read_refused(path, join(q), "corrupt");
    std::remove(path.c_str());
}

TEST(Hardening, CheckpointHeaderFieldsAreValidated) {
    const std::string path = temp_path("c.tnn");
    const Parts p = split(good_checkpoint(path));
    auto edited = [&](auto&& edit) {
        Parts q = p;
        edit(q.header);
        return join(q);
    };
    expect_read_refused(path, edited([](json& h) { h["optimizer_state"][2].erase("name"); }), "optimizer_state[2]");
    expect_read_refused(path, edited([](json& h) { h["optimizer_state"][2].erase("dtype"); }), "optimizer_state[2]");
    expect_read_refused(path, edited([](json& h) { h["optimizer_state"][2]["dtype"] = "float8"; }), "dtype");
    expect_read_refused(path, edited([](json& h) { h["optimizer_state"][2]["name"] = ""; }), "printable");
    expect_read_refused(path, edited([](json& h) { h["optimizer_state"][3]["name"] = h["optimizer_state"][2]["name"]; }),
                        "twice");
    expect_read_refused(path, edited([](json& h) { h["config"] = 5; }), "'config' must be an object");
    expect_read_refused(path, edited([](json& h) { h["format"] = "something else"; }), "'format'");
    expect_read_refused(path, edited([](json& h) { h["step"] = 7; }), "step");          // differs from the state's
    expect_read_refused(path, edited([](json& h) { h["step"] = -1; }), "'step'");
    expect_read_refused(path, edited([](json& h) { h["step"] = 4294967296ull; }), "'step'");
    expect_read_refused(path, edited([](json& h) { h["step"] = 3.5; }), "'step'");
    expect_read_refused(path, edited([](json& h) { h["seed"] = -1; }), "'seed'");
    expect_read_refused(path, edited([](json& h) { h["param_dtype"] = "int8"; }), "param_dtype");
    expect_read_refused(path, edited([](json& h) { h["extra"] = 1; }), "unknown key");
    expect_read_refused(path, edited([](json& h) { h.erase("seed"); }), "no 'seed'");
    expect_read_refused(path, join(p, "[1, 2]"), "not an object");
    expect_read_refused(path, join(p, "{\"config\": " + nested_arrays(100000) + "}"), "nested deeper");
    std::remove(path.c_str());
}

TEST(Hardening, CheckpointStateValuesAreValidated) {
    const std::string path = temp_path("c.tnn");
    const Parts p = split(good_checkpoint(path));
    // The learning rate of Adam's state: NaN, inf and -1e30 are refused like in a config, by the
    // reader (before a trainer is touched) and by Optimizer::load_state (for blobs from elsewhere).
    for (double lr : {std::nan(""), HUGE_VAL, -1e30}) {
        Parts q = p;
        std::memcpy(&q.payload[blob_offset(q, "learning_rate")], &lr, 8);
        expect_read_refused(path, join(q), "learning_rate");
        auto adam = create_optimizer({{"otype", "Adam"}});
        adam->allocate(Device::cpu(), 10, 0);
        auto state = adam->state(Stream::cpu());
        ASSERT_EQ(state[2].name, "learning_rate");
        std::memcpy(state[2].bytes.data(), &lr, 8);
        EXPECT_THROW(adam->load_state(Stream::cpu(), state), CheckpointError);
    }
    {  // Reordered blobs: the moments would load into each other's arrays.
        Parts q = p;
        auto& blobs = q.header["optimizer_state"];
        ASSERT_EQ(blobs[3]["name"], "first_moments");
        ASSERT_EQ(blobs[4]["name"], "second_moments");
        std::swap(blobs[3], blobs[4]);
        expect_load_refused(path, join(q), "out of order");
    }
    std::remove(path.c_str());
}

TEST(Hardening, CheckpointWritesAreExclusiveAndLeaveNothingBehind) {
    const std::string folder = temp_path("dir");
    ::mkdir(folder.c_str(), 0755);
    const std::string path = folder + "/c.tnn";
    auto entries = [&] {
        std::vector<std::string> names;
        std::string cmd = "ls -A " + folder;
        FILE* ls = ::popen(cmd.c_str(), "r");
        char line[512];
        while (ls && std::fgets(line, sizeof(line), ls)) names.emplace_back(line);
        if (ls) ::pclose(ls);
        return names;
    };
    // The former temporary name was predictable (path.tmp.<pid>) and followed links: a planted link
    // made the writer overwrite its target.
    const std::string victim = folder + "/victim";
    write_file(victim, "precious");
    ASSERT_EQ(::symlink(victim.c_str(), (path + ".tmp." + std::to_string(::getpid())).c_str()), 0);
    good_checkpoint(path);
    EXPECT_EQ(read_file(victim), "precious");
    EXPECT_EQ(entries().size(), 3u);  // c.tnn, victim, the planted link: no temporary left
    EXPECT_NO_THROW(read_checkpoint(path));

    CheckpointData d;
    d.config = json::object();
    d.params_fp32 = {1, 2};
    const std::string sub = folder + "/sub";
    ::mkdir(sub.c_str(), 0755);
    EXPECT_THROW(write_checkpoint(sub, d), CheckpointError);           // a folder is not replaced
    EXPECT_THROW(write_checkpoint("/dev/full", d), CheckpointError);   // nor a device
    EXPECT_THROW(write_checkpoint(folder + "/missing/c.tnn", d), CheckpointError);
    d.optimizer_state.push_back({"", DType::f32, {}});
    EXPECT_THROW(write_checkpoint(path, d), CheckpointError);          // what the reader would refuse
    EXPECT_EQ(entries().size(), 4u);  // the same three and sub/
    EXPECT_NO_THROW(read_checkpoint(path));
    std::system(("rm -rf " + folder).c_str());
}

// ---- the program ----

TEST_F(Program, EveryFailureIsExitStatusOneWithAMessage) {
    EXPECT_EQ(fit("--steps 2").status, 0);
    const std::string cfg = temp_path("bad.json");
    write_file(cfg, "[1, 2]");  // issue: a top-level array made the JSON library's exception escape
    expect_error(fit("", cfg), "must be a JSON object");
    write_file(cfg, "{\"network\": {\"otype\": \"PortableMLP\", \"n_neurons\": [16]}}");
    expect_error(fit("", cfg), "n_neurons");
    write_file(cfg, "{\"network\": " + nested_arrays(100000) + "}");
    expect_error(fit("", cfg), "nested deeper");
    json opt = {{"otype", "Adam"}};
    std::string chain = opt.dump();
    for (int i = 0; i < 10000; ++i) chain = "{\"otype\": \"EMA\", \"nested\": " + chain + "}";
    write_file(cfg, "{\"network\": {\"otype\": \"PortableMLP\"}, \"optimizer\": " + chain + "}");
    expect_error(fit("", cfg), "nested deeper");
    std::string composite = "{\"otype\": \"Identity\"}";
    for (int i = 0; i < 5000; ++i) composite = "{\"otype\": \"Composite\", \"nested\": [" + composite + "]}";
    write_file(cfg, "{\"network\": {\"otype\": \"PortableMLP\"}, \"encoding\": " + composite + "}");
    expect_error(fit("", cfg), "nested deeper");
    expect_error(fit("", "/dev/zero"), "not a regular file");
    std::remove(cfg.c_str());
    expect_error(run_tnn("fit-image --no-such-option"), "no-such-option");
}

TEST_F(Program, ResumeRefusesWhatIsNotItsCheckpoint) {
    expect_error(fit("--resume /"), "folder");
    expect_error(fit("--resume /dev/zero"), "not a regular file");
    const std::string ckpt = temp_path("a.tnn");
    ASSERT_EQ(fit("--steps 4 --save " + ckpt).status, 0);
    expect_error(fit("--steps 3 --resume " + ckpt), "past --steps");  // issue: "294967300000000000.0 steps/s"
    EXPECT_EQ(fit("--steps 5 --resume " + ckpt).status, 0);
    // A sparse file with a valid header for 2^32 - 1 parameters: refused from the header, unread.
    const std::string huge = temp_path("huge.tnn");
    {
        const Parts p = split(read_file(ckpt));
        Parts q;
        q.header = p.header;
        q.header["n_params"] = 4294967295ull;
        q.header["optimizer_state"] = json::array();
        const std::string head = join(q);
        write_file(huge, head.substr(0, head.size() - 8));
        if (::truncate(huge.c_str(), static_cast<off_t>(head.size() - 8 + 4294967295ull * 4 + 8)) != 0)
            GTEST_SKIP() << "no sparse files here";
    }
    const auto t0 = std::chrono::steady_clock::now();
    expect_error(fit("--steps 5 --resume " + huge), "does not fit");
    EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 10.0);
    for (const auto& p : {ckpt, huge}) std::remove(p.c_str());
}

TEST_F(Program, FailedWritesAreErrors) {
    expect_error(fit("--out /dev/full"), "No space left");
    expect_error(fit("--json " + temp_path("missing") + "/m.json"), "does not exist");
    expect_error(fit("--save " + temp_path("missing") + "/c.tnn"), "does not exist");
    expect_error(fit("--json /"), "folder");
    const int raw = std::system((std::string(TNN_BINARY_DIR) + "/tnn info > /dev/full 2> /dev/null").c_str());
    EXPECT_TRUE(WIFEXITED(raw) && WEXITSTATUS(raw) == 1);
    if (::geteuid() != 0) {  // root writes anywhere
        const std::string ro = temp_path("ro");
        ::mkdir(ro.c_str(), 0555);
        expect_error(fit("--json " + ro + "/m.json"), "not writable");
        ::rmdir(ro.c_str());
    }
}

TEST_F(Program, ArgumentsOutOfRangeAreRefused) {
    for (const char* seed : {"-1", "18446744073709551616", "010", "0x10", "1e3", ""})
        EXPECT_EQ(fit(std::string("--seed '") + seed + "'").status, 1) << seed;
    EXPECT_EQ(fit("--seed 18446744073709551615").status, 0);
    EXPECT_EQ(fit("--batch 0").status, 1);
    EXPECT_EQ(fit("--batch 16777217").status, 1);
    EXPECT_EQ(fit("--threads -1").status, 1);
    const Outcome many = fit("--threads 5000");  // issue: aborted under a memory cap
    EXPECT_EQ(many.status, 0) << many.err;
    EXPECT_NE(many.err.find("CPUs this process may use"), std::string::npos) << many.err;
}

TEST_F(Program, ImagesAreOnlyPngAndJpegWithinLimits) {
    const std::string corpus = std::string(TNN_SOURCE_DIR) + "/fuzz/corpus/image/";
    for (const char* ok : {"rgb.png", "rgba.png", "grey.png", "grey1.png", "palette.png", "rgb16.png", "interlaced.png",
                           "rgb_444.jpg", "rgb_420_progressive.jpg", "grey.jpg"}) {
        const Outcome r = run_tnn("fit-image " + corpus + ok + " --config " + config + " --device cpu --steps 1 --batch 16 --out " +
                              temp_path("out.png"));
        EXPECT_EQ(r.status, 0) << ok << ": " << r.err;
    }
    // The files: a truncated HDR (stb looped forever), a 2048x2048 16-bit PGM (crashed stb),
    // a 19-byte PPM header claiming 16000x16000, truncated TGA and BMP headers (2-3 GB each).
    for (const char* bad : {"hdr_truncated.hdr", "pgm16_truncated.pgm", "ppm_huge_header.ppm", "tga_truncated.tga",
                            "bmp_truncated.bmp"}) {
        const Outcome r = run_tnn("fit-image " + corpus + bad + " --config " + config + " --device cpu --steps 1");
        EXPECT_EQ(r.status, 1) << bad;
        EXPECT_NE(r.err.find("not a PNG or JPEG"), std::string::npos) << bad << ": " << r.err;
    }
    const std::string path = temp_path("bad_image");
    auto expect_image_error = [&](const std::string& bytes, const std::string& needle) {
        write_file(path, bytes);
        const Outcome r = run_tnn("fit-image " + path + " --config " + config + " --device cpu --steps 1");
        EXPECT_EQ(r.status, 1) << needle;
        EXPECT_NE(r.err.find(needle), std::string::npos) << r.err;
    };
    const std::string png = read_file(corpus + "rgb.png"), jpeg = read_file(corpus + "rgb_444.jpg");
    expect_image_error(png.substr(0, png.size() / 2), "PNG");
    expect_image_error(png.substr(0, 30), "PNG");
    expect_image_error(jpeg.substr(0, jpeg.size() / 2), "JPEG");
    expect_image_error(jpeg.substr(0, 5), "JPEG");
    {  // A PNG header claiming 100000 x 100000 pixels (valid CRC): refused before any decoding.
        std::string big = png.substr(0, 33);
        const unsigned char dims[8] = {0, 1, 0x86, 0xa0, 0, 1, 0x86, 0xa0};
        std::memcpy(&big[16], dims, 8);
        uint32_t crc = 0xffffffffu;  // CRC-32 of the IHDR type and data, as PNG stores it
        for (size_t i = 12; i < 29; ++i) {
            crc ^= static_cast<unsigned char>(big[i]);
            for (int k = 0; k < 8; ++k) crc = (crc >> 1) ^ (0xedb88320u & (0u - (crc & 1u)));
        }
        crc = ~crc;
        const unsigned char crc_be[4] = {static_cast<unsigned char>(crc >> 24), static_cast<unsigned char>(crc >> 16),
                                         static_cast<unsigned char>(crc >> 8), static_cast<unsigned char>(crc)};
        std::memcpy(&big[29], crc_be, 4);
        expect_image_error(big + png.substr(33), "more than the 16777216 allowed");
    }
    expect_image_error("", "not a PNG or JPEG");
    expect_error(run_tnn("fit-image / --config " + config + " --device cpu"), "not a regular file");
    expect_error(run_tnn("fit-image /dev/zero --config " + config + " --device cpu"), "not a regular file");
    std::remove(path.c_str());
}
