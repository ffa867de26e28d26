// DType names and sizes, bit-exact fp16 / bf16 conversions (round to nearest even), devices.
#include <tnn/config.h>
#include <tnn/dtype.h>
#include <tnn/error.h>

#include <cstring>

namespace tnn {

size_t dtype_size(DType t) {
    switch (t) {
        case DType::f32: return 4;
        case DType::f64: return 8;
        case DType::f16: return 2;
        case DType::bf16: return 2;
    }
    return 0;
}

const char* dtype_name(DType t) {
    switch (t) {
        case DType::f32: return "float32";
        case DType::f64: return "float64";
        case DType::f16: return "float16";
        case DType::bf16: return "bfloat16";
    }
    return "?";
}

double dtype_epsilon(DType t) {
    switch (t) {
        case DType::f32: return 0x1p-23;
        case DType::f64: return 0x1p-52;
        case DType::f16: return 0x1p-10;
        case DType::bf16: return 0x1p-7;
    }
    return 0;
}

DType parse_dtype(const std::string& name) {
    const std::string n = to_lower(name);
    if (n == "float32" || n == "fp32" || n == "f32" || n == "float") return DType::f32;
    if (n == "float16" || n == "fp16" || n == "f16" || n == "half") return DType::f16;
    if (n == "bfloat16" || n == "bf16") return DType::bf16;
    if (n == "float64" || n == "fp64" || n == "f64" || n == "double") return DType::f64;
    throw DTypeError(msg("unknown dtype '", name, "'; valid choices: float32, float16, bfloat16, float64"));
}

float half_to_float(uint16_t h) {
    const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t mant = h & 0x3ffu;
    uint32_t bits;
    if (exp == 0) {
        if (mant == 0) {
            bits = sign;
        } else {  // subnormal: value = mant * 2^-24; renormalise
            int e = -14;
            while (!(mant & 0x400u)) {
                mant <<= 1;
                --e;
            }
            bits = sign | static_cast<uint32_t>(e + 127) << 23 | (mant & 0x3ffu) << 13;
        }
    } else if (exp == 31) {
        bits = sign | 0x7f800000u | mant << 13;
    } else {
        bits = sign | (exp - 15 + 127) << 23 | mant << 13;
    }
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
}

uint16_t float_to_half(float f) {
    uint32_t x;
    std::memcpy(&x, &f, 4);
    const uint32_t sign = (x >> 16) & 0x8000u;
    const uint32_t exp = (x >> 23) & 0xffu;
    uint32_t mant = x & 0x7fffffu;
    if (exp == 0xff) return static_cast<uint16_t>(sign | 0x7c00u | (mant ? 0x200u | (mant >> 13) : 0u));
    const int e = static_cast<int>(exp) - 127 + 15;
    if (e >= 31) return static_cast<uint16_t>(sign | 0x7c00u);
    if (e <= 0) {  // subnormal half (or zero)
        if (e < -10) return static_cast<uint16_t>(sign);
        mant |= 0x800000u;
        const int shift = 14 - e;
        uint32_t h = mant >> shift;
        const uint32_t rem = mant & ((1u << shift) - 1);
        const uint32_t halfway = 1u << (shift - 1);
        if (rem > halfway || (rem == halfway && (h & 1u))) ++h;  // a carry into the exponent is correct
        return static_cast<uint16_t>(sign | h);
    }
    uint32_t h = sign | static_cast<uint32_t>(e) << 10 | mant >> 13;
    const uint32_t rem = mant & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;  // a carry to 0x7c00 rounds to inf, as it must
    return static_cast<uint16_t>(h);
}

uint16_t float_to_bfloat16(float f) {
    uint32_t x;
    std::memcpy(&x, &f, 4);
    if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);
    x += 0x7fffu + ((x >> 16) & 1u);
    return static_cast<uint16_t>(x >> 16);
}

std::string Device::str() const { return is_cpu() ? std::string("cpu") : "gpu:" + std::to_string(index); }

Device Device::parse(const std::string& s) {
    const std::string n = to_lower(s);
    if (n == "cpu") return cpu();
    for (const char* prefix : {"gpu", "cuda", "hip"}) {
        const std::string p(prefix);
        if (n == p) return gpu(0);
        if (n.rfind(p + ":", 0) == 0) {
            const std::string idx = n.substr(p.size() + 1);
            if (!idx.empty() && idx.find_first_not_of("0123456789") == std::string::npos) return gpu(std::stoi(idx));
        }
    }
    throw ConfigError(msg("unknown device '", s, "'; valid choices: cpu, gpu, gpu:N (cuda and hip are aliases of gpu)"));
}

}  // namespace tnn
