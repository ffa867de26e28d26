// Core: fp16/bf16 conversions, devices, config reader, otype registry, thread pool, pcg32, views.
#include "core/parallel.h"
#include "test_util.h"

#include <cmath>
#include <cstring>
#include <numeric>

using namespace tnn;

TEST(Half, EveryHalfRoundTripsThroughFloat) {
    for (uint32_t b = 0; b < 65536; ++b) {
        const float f = half_to_float(static_cast<uint16_t>(b));
        if (std::isnan(f)) continue;  // NaN payloads are kept quiet, not bit-exact
        ASSERT_EQ(float_to_half(f), b) << "bits " << b;
    }
}

TEST(Half, RoundsToNearestEven) {
    // 1 + 2^-11 is exactly halfway between 1 and 1 + 2^-10: ties go to the even mantissa (1.0).
    EXPECT_EQ(float_to_half(1.0f + 0x1p-11f), 0x3c00);
    // 1 + 3 * 2^-11 is halfway between 1 + 2^-10 (odd) and 1 + 2^-9 (even): rounds up.
    EXPECT_EQ(float_to_half(1.0f + 3 * 0x1p-11f), 0x3c02);
    EXPECT_EQ(float_to_half(65504.0f), 0x7bff);             // largest finite half
    EXPECT_EQ(float_to_half(65520.0f), 0x7c00);             // halfway to 2^16 rounds to inf
    EXPECT_EQ(float_to_half(0x1p-24f), 0x0001);             // smallest subnormal
    EXPECT_EQ(float_to_half(0x1p-25f), 0x0000);             // tie with zero: even
    EXPECT_EQ(float_to_half(0x1.8p-25f), 0x0001);           // above the tie
    EXPECT_EQ(float_to_half(-0.0f), 0x8000);
    EXPECT_EQ(float_to_half(INFINITY), 0x7c00);
    EXPECT_TRUE(std::isnan(half_to_float(float_to_half(NAN))));
    EXPECT_EQ(half_to_float(0x3555), 0.333251953125f);
}

TEST(BFloat16, RoundsToNearestEvenAndKeepsNaN) {
    EXPECT_EQ(float_to_bfloat16(1.0f), 0x3f80);
    EXPECT_EQ(float_to_bfloat16(1.0f + 0x1p-8f), 0x3f80);      // tie -> even
    EXPECT_EQ(float_to_bfloat16(1.0f + 3 * 0x1p-8f), 0x3f82);  // tie -> even (up)
    EXPECT_TRUE(std::isnan(static_cast<float>(bfloat16::from_bits(float_to_bfloat16(NAN)))));
    for (uint32_t b = 0; b < 65536; b += 7) {
        const float f = static_cast<float>(bfloat16::from_bits(static_cast<uint16_t>(b)));
        if (!std::isnan(f)) ASSERT_EQ(float_to_bfloat16(f), b);
    }
}

TEST(DType, NamesParseAndEpsilons) {
    for (DType t : {DType::f32, DType::f16, DType::bf16, DType::f64}) EXPECT_EQ(parse_dtype(dtype_name(t)), t);
    EXPECT_EQ(parse_dtype("HALF"), DType::f16);
    EXPECT_EQ(parse_dtype("bf16"), DType::bf16);
    EXPECT_THROW(parse_dtype("int8"), DTypeError);
    EXPECT_EQ(dtype_epsilon(DType::f16), 1.0 / 1024);
}

TEST(Device, Parse) {
    EXPECT_EQ(Device::parse("cpu"), Device::cpu());
    EXPECT_EQ(Device::parse("CUDA:1"), Device::gpu(1));
    EXPECT_EQ(Device::parse("gpu"), Device::gpu(0));
    EXPECT_THROW(Device::parse("tpu"), ConfigError);
    EXPECT_THROW(Device::parse("gpu:x"), ConfigError);
}

TEST(ConfigReader, DefaultsTypesRangesAndUnknownKeys) {
    std::vector<std::string> warnings;
    set_log_callback([&](LogLevel, const std::string& m) { warnings.push_back(m); });
    const json cfg = {{"otype", "X"}, {"a", 3}, {"b", 2.5}, {"c", "relu"}, {"typo", 1}};
    ConfigReader r(cfg, "X thing");
    EXPECT_EQ(r.get_uint("a", 7, 1, 10), 3u);
    EXPECT_EQ(r.get_uint("missing", 7, 1, 10), 7u);
    EXPECT_DOUBLE_EQ(r.get_float("b", 0), 2.5);
    EXPECT_EQ(r.get_choice("c", "None", {"None", "ReLU"}), "ReLU");
    r.finish();
    set_log_callback(nullptr);
    ASSERT_EQ(warnings.size(), 1u);
    EXPECT_NE(warnings[0].find("'typo'"), std::string::npos);

    ConfigReader bad(cfg, "X thing");
    try {
        bad.get_uint("b", 1, 0, 10);  // 2.5 is not an integer
        FAIL();
    } catch (const ConfigError& e) {
        EXPECT_NE(std::string(e.what()).find("'b'"), std::string::npos);
    }
    EXPECT_THROW(bad.get_uint("a", 1, 5, 10), ConfigError);    // out of range
    EXPECT_THROW(bad.get_float("c", 1), ConfigError);          // string where a number is expected
    EXPECT_THROW(bad.get_choice("c", "x", {"a", "b"}), ConfigError);
    EXPECT_THROW(bad.get_bool("a", false), ConfigError);
    EXPECT_THROW(ConfigReader(json::array(), "X"), ConfigError);
}

TEST(Registry, CaseInsensitiveWithValidChoicesInErrors) {
    Registry<int> r("widget");
    r.add("HashGrid", 1);
    r.add("Frequency", 2);
    r.reject("Old", "gone");
    EXPECT_EQ(r.get("hashgrid"), 1);
    EXPECT_EQ(r.canonical_name("FREQUENCY"), "Frequency");
    try {
        r.get("Nope");
        FAIL();
    } catch (const ConfigError& e) {
        const std::string m = e.what();
        EXPECT_NE(m.find("HashGrid, Frequency"), std::string::npos) << m;
    }
    try {
        r.get("old");
        FAIL();
    } catch (const ConfigError& e) {
        EXPECT_NE(std::string(e.what()).find("gone"), std::string::npos);
    }
}

TEST(Parallel, ChunksCoverRangeOnceAndReductionIsThreadCountIndependent) {
    std::vector<int> hits(10007, 0);
    parallel_for(10007, 64, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) hits[i]++;
    });
    EXPECT_TRUE(std::all_of(hits.begin(), hits.end(), [](int h) { return h == 1; }));

    auto reduce = [] {
        float out[3] = {0, 0, 0};
        parallel_reduce<float>(100000, 1000, 3, out, [](int64_t b, int64_t e, float* p) {
            for (int64_t i = b; i < e; ++i) {
                p[0] += 1.0f / (1 + i);
                p[1] += std::sin(static_cast<float>(i));
                p[2] += 1e-3f * i;
            }
        });
        return std::vector<float>(out, out + 3);
    };
    const int threads = num_threads();
    set_num_threads(1);
    const auto one = reduce();
    set_num_threads(3);
    const auto three = reduce();
    set_num_threads(threads);
    EXPECT_EQ(std::memcmp(one.data(), three.data(), sizeof(float) * 3), 0);
}

TEST(Parallel, ExceptionsPropagate) {
    EXPECT_THROW(parallel_for(1000, 10, [](int64_t b, int64_t) {
                     if (b == 500) throw ShapeError("boom");
                 }),
                 ShapeError);
}

TEST(Pcg32, MatchesReferenceSequence) {
    // The reference demo of the PCG family (pcg32_srandom_r(&rng, 42, 54)) prints these six values.
    Pcg32 rng(42, 54);
    const uint32_t expected[] = {0xa15c02b7, 0x7b47f409, 0xba1d3330, 0x83d2f293, 0xbfa4784b, 0xcbed606e};
    for (uint32_t e : expected) EXPECT_EQ(rng.next_uint(), e);
}

TEST(Pcg32, AdvanceEqualsStepping) {
    Pcg32 a(7, 3), b(7, 3);
    for (int i = 0; i < 1000; ++i) a.next_uint();
    b.advance(1000);
    EXPECT_EQ(a.next_uint(), b.next_uint());
    for (int i = 0; i < 100; ++i) {
        const float f = a.next_float();
        EXPECT_GE(f, 0.0f);
        EXPECT_LT(f, 1.0f);
    }
}

TEST(Tensor, ViewsSlicesConvertAndAdd) {
    Tensor t = test::random_tensor(5, 4, DType::f32, -1, 1, 3);
    View v = t.view();
    View s = v.rows_slice(1, 3).cols_slice(1, 2);
    EXPECT_EQ(s.rows, 3);
    EXPECT_EQ(s.stride, 4);
    EXPECT_EQ(s.at<float>(0, 0), t.ptr<float>()[5]);
    EXPECT_THROW(v.rows_slice(4, 2), ShapeError);

    Tensor h(5, 4, DType::f16), back(5, 4, DType::f32);
    convert(Stream::cpu(), t.view(), h.view());
    convert(Stream::cpu(), h.view(), back.view());
    for (int i = 0; i < 20; ++i) EXPECT_NEAR(back.ptr<float>()[i], t.ptr<float>()[i], 1e-3);

    Tensor sum(5, 4, DType::f32);
    copy(Stream::cpu(), t.view(), sum.view());
    add(Stream::cpu(), t.view(), sum.view());
    for (int i = 0; i < 20; ++i) EXPECT_EQ(sum.ptr<float>()[i], 2 * t.ptr<float>()[i]);
    EXPECT_THROW(add(Stream::cpu(), h.view(), sum.view()), DTypeError);
    EXPECT_THROW(copy(Stream::cpu(), t.view(), Tensor(4, 5, DType::f32).view()), ShapeError);
    EXPECT_THROW(Tensor(-1, 3, DType::f32), ShapeError);
}

TEST(Runtime, CpuOnlyFacts) {
    EXPECT_STREQ(version(), TNN_VERSION);
    if (!has_gpu_backend()) {
        EXPECT_EQ(gpu_device_count(), 0);
        EXPECT_THROW(Buffer(Device::gpu(0), 16), UnsupportedError);
    }
}
