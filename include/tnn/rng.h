// PCG32 (O'Neill's pcg32_random_r: 64-bit LCG state, XSH-RR output), host and device. Used for
// parameter initialisation and for the training-sample streams of the example programs.
#pragma once

#include <cstdint>
#include <cstring>

#include <tnn/dtype.h>


namespace tnn {

class Pcg32 {
public:
    static constexpr uint64_t kMultiplier = 0x5851f42d4c957f2dULL;
    TNN_HD explicit Pcg32(uint64_t seed = 0x853c49e6748fea9bULL, uint64_t sequence = 1) { this->seed(seed, sequence); }

    TNN_HD void seed(uint64_t initstate, uint64_t sequence = 1) {
        m_state = 0;
        m_inc = (sequence << 1u) | 1u;
        next_uint();
        m_state += initstate;
        next_uint();
    }

    TNN_HD uint32_t next_uint() {
        const uint64_t old = m_state;
        m_state = old * kMultiplier + m_inc;
        const uint32_t xorshifted = static_cast<uint32_t>(((old >> 18u) ^ old) >> 27u);
        const uint32_t rot = static_cast<uint32_t>(old >> 59u);
        return (xorshifted >> rot) | (xorshifted << ((~rot + 1u) & 31u));
    }

    // Uniform in [0, 1) with 23 random mantissa bits.
    TNN_HD float next_float() {
        const uint32_t bits = (next_uint() >> 9) | 0x3f800000u;
        float f;
        memcpy(&f, &bits, 4);
        return f - 1.0f;
    }

    // Jumps the stream ahead by `delta` steps in O(log delta) (Brown's LCG skip-ahead).
    TNN_HD void advance(uint64_t delta) {
        uint64_t cur_mult = kMultiplier, cur_plus = m_inc, acc_mult = 1, acc_plus = 0;
        while (delta > 0) {
            if (delta & 1) {
                acc_mult *= cur_mult;
                acc_plus = acc_plus * cur_mult + cur_plus;
            }
            cur_plus = (cur_mult + 1) * cur_plus;
            cur_mult *= cur_mult;
            delta /= 2;
        }
        m_state = acc_mult * m_state + acc_plus;
    }

private:
    uint64_t m_state = 0, m_inc = 0;
};

}  // namespace tnn
