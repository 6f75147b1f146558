/*
 * Deterministic random numbers: xorshift64* (the generator llm.c uses for sampling) plus Box-Muller
 * normals. The whole state is one uint64, so training state files save and restore it exactly.
 */
#pragma once
#include <cmath>
#include <cstdint>

namespace llmc {

struct Rng {
    uint64_t state;
    explicit Rng(uint64_t seed = 1337) : state(seed ? seed : 0x9E3779B97F4A7C15ull) {}
    uint32_t next_u32() {
        state ^= state >> 12;
        state ^= state << 25;
        state ^= state >> 27;
        return (uint32_t)((state * 0x2545F4914F6CDD1Dull) >> 32);
    }
    // Uniform in [0, 1) with 24 random bits, exactly representable in float.
    float next_f32() { return (next_u32() >> 8) / 16777216.0f; }
    // Standard normal; uses two uniforms per draw (the second Box-Muller output is dropped, which keeps the
    // stream position a plain function of the number of draws).
    double next_normal() {
        double u1 = ((next_u32() >> 8) + 1.0) / 16777217.0; // (0, 1]: log is finite
        double u2 = (next_u32() >> 8) / 16777216.0;
        return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
    }
};

} // namespace llmc
