// Element types and devices: the small vocabulary every other header speaks.
// half / bfloat16 here are host storage types (bit-exact IEEE fp16 and bf16 with
// round-to-nearest-even); GPU kernels use the vendor types, which share the bits.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

// Marks functions that compile for both host and device (index maths, activations, RNG).
#if defined(__CUDACC__) || defined(__HIPCC__)
#define TNN_HD __host__ __device__
#else
#define TNN_HD
#endif  // defined(__CUDACC__) || defined(__HIPCC__)

namespace tnn {

enum class DType : uint8_t { f32, f16, bf16, f64 };

size_t dtype_size(DType t);
const char* dtype_name(DType t);             // "float32", "float16", "bfloat16", "float64"
DType parse_dtype(const std::string& name);  // accepts the names above and fp32/fp16/bf16/fp64/half/float/double

struct half {
    uint16_t bits = 0;
    half() = default;
    explicit half(float f);
    explicit half(double d) : half(static_cast<float>(d)) {}
    operator float() const;
    static half from_bits(uint16_t b) { half h; h.bits = b; return h; }
};

struct bfloat16 {
    uint16_t bits = 0;
    bfloat16() = default;
    explicit bfloat16(float f);
    explicit bfloat16(double d) : bfloat16(static_cast<float>(d)) {}
    operator float() const {
        uint32_t u = static_cast<uint32_t>(bits) << 16;
        float f;
        std::memcpy(&f, &u, 4);
        return f;
    }
    static bfloat16 from_bits(uint16_t b) { bfloat16 h; h.bits = b; return h; }
};

float half_to_float(uint16_t bits);
uint16_t float_to_half(float f);      // round to nearest even, overflow to inf, NaN kept
uint16_t float_to_bfloat16(float f);  // round to nearest even, NaN kept quiet

inline half::half(float f) : bits(float_to_half(f)) {}
inline half::operator float() const { return half_to_float(bits); }
inline bfloat16::bfloat16(float f) : bits(float_to_bfloat16(f)) {}

template <typename T> struct dtype_of;
template <> struct dtype_of<float> { static constexpr DType value = DType::f32; };
template <> struct dtype_of<double> { static constexpr DType value = DType::f64; };
template <> struct dtype_of<half> { static constexpr DType value = DType::f16; };
template <> struct dtype_of<bfloat16> { static constexpr DType value = DType::bf16; };

// The type the CPU reference computes in for storage type T: fp64 stays fp64, everything else
// accumulates in fp32 (as the GPU kernels do), and the input type that goes with it.
template <typename T> struct acc_type { using type = float; };
template <> struct acc_type<double> { using type = double; };
template <typename T> using acc_t = typename acc_type<T>::type;

// Machine epsilon (2^-mantissa bits) of each dtype: the unit of every tolerance in the tests.
double dtype_epsilon(DType t);

// Round a value through storage type T and back (identity for float/double).
template <typename T> inline acc_t<T> round_to(acc_t<T> v) { return static_cast<acc_t<T>>(static_cast<float>(T(v))); }
template <> inline float round_to<float>(float v) { return v; }
template <> inline double round_to<double>(double v) { return v; }

// Calls f(T{}) with T the C++ storage type of dtype t. The one place that turns a runtime dtype
// into a template parameter for the CPU code.
template <typename F> decltype(auto) dispatch_dtype(DType t, F&& f) {
    switch (t) {
        case DType::f32: return f(float{});
        case DType::f64: return f(double{});
        case DType::f16: return f(half{});
        case DType::bf16: return f(bfloat16{});
    }
    return f(float{});
}

enum class DeviceType : uint8_t { cpu, gpu };

struct Device {
    DeviceType type = DeviceType::cpu;
    int index = 0;
    static Device cpu() { return {DeviceType::cpu, 0}; }
    static Device gpu(int i = 0) { return {DeviceType::gpu, i}; }
    bool is_cpu() const { return type == DeviceType::cpu; }
    bool is_gpu() const { return type == DeviceType::gpu; }
    bool operator==(const Device& o) const { return type == o.type && (type == DeviceType::cpu || index == o.index); }
    bool operator!=(const Device& o) const { return !(*this == o); }
    std::string str() const;  // "cpu", "gpu:0"
    static Device parse(const std::string& s);  // "cpu", "gpu", "gpu:1", "cuda", "cuda:1"
};

}  // namespace tnn
