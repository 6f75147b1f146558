// Emulated bf16: the storage format and the conversions the kernels use (round to nearest even, NaN kept).
#pragma once
#include <cstdint>
#include <cstring>

#include "cuda_runtime.h"

inline uint16_t emu_float_to_bf16_bits(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); // NaN stays a (quiet) NaN
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}
inline float emu_bf16_bits_to_float(uint16_t b) {
    uint32_t u = (uint32_t)b << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}

struct __nv_bfloat16 {
    uint16_t __x;
    __nv_bfloat16() = default;
    __nv_bfloat16(float f) : __x(emu_float_to_bf16_bits(f)) {}
    __nv_bfloat16(double f) : __x(emu_float_to_bf16_bits((float)f)) {}
    __nv_bfloat16(int i) : __x(emu_float_to_bf16_bits((float)i)) {}
    operator float() const { return emu_bf16_bits_to_float(__x); }
};
using nv_bfloat16 = __nv_bfloat16;

inline __nv_bfloat16 __float2bfloat16(float f) { return __nv_bfloat16(f); }
inline __nv_bfloat16 __float2bfloat16_rn(float f) { return __nv_bfloat16(f); }
inline float __bfloat162float(__nv_bfloat16 b) { return emu_bf16_bits_to_float(b.__x); }
inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 b) { return b.__x; }
inline __nv_bfloat16 __ushort_as_bfloat16(unsigned short u) {
    __nv_bfloat16 b;
    b.__x = u;
    return b;
}
