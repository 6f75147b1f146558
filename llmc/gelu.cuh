/*
 * GELU on the GPU, the tanh form GPT-2 uses:
 *   gelu(x) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
 * elementwise over N values (the MLP's (B, T, 4C) activation). bf16 storage, fp32 math. Each thread moves 8
 * values with one 16-byte load and store; a last partial group of 8 (N not a multiple of 8) is done value by
 * value, so any N works as long as the pointers are 16-byte aligned (cudaMalloc and the activation layout).
 *
 * Computed as gelu(x) = x s with s = 0.5 (1 + tanh u) = 1 / (1 + e^-2u), and 1 - s = 1 / (1 + e^2u), both from
 * t = e^-2|u| <= 1. The textbook form loses the negative tail: 1 + tanh u in fp32 cancels to 0 once tanh u
 * rounds to -1 (u below about -9, x below about -4.3) while gelu(x) is still far above bf16's smallest value,
 * and e^-2u itself overflows below x = -10.1. This way every output of a finite input is within 1 bf16 ulp of
 * the bf16 rounding of the exact function of its bf16 input (test/gpu/test_elementwise.cu).
 *
 * The forward is usually fused into the matmul epilogue; these kernels serve the unfused path, the tests and
 * the benchmark. The backward is in place: the matmul's dinp buffer becomes d(pre-activation).
 */
#pragma once
#include <cstdint>

#include "llmc/cuda_common.cuh"

namespace llmc {

constexpr float GELU_SCALE = 0.7978845608028654f; // sqrt(2/pi)
constexpr float GELU_CUBE = 0.044715f;

// s = 0.5 (1 + tanh u) and s_minus = 1 - s of u = sqrt(2/pi) (x + 0.044715 x^3), without cancellation or overflow.
__device__ inline void gelu_halves(float x, float& s, float& s_minus) {
    const float u = GELU_SCALE * (x + GELU_CUBE * x * x * x);
    const float t = expf(-2.0f * fabsf(u)), r = 1.0f / (1.0f + t);
    s = u >= 0.0f ? r : t * r;
    s_minus = u >= 0.0f ? t * r : r;
}

__device__ inline float gelu_value(float x) {
    float s, s_minus;
    gelu_halves(x, s, s_minus);
    return x * s;
}

// d gelu / dx = s + 2 x s (1 - s) du/dx. Where s (1 - s) is 0 the second term is too (x du/dx may overflow).
__device__ inline float gelu_derivative(float x) {
    float s, s_minus;
    gelu_halves(x, s, s_minus);
    const float tail = 2.0f * s * s_minus, du = GELU_SCALE * (1.0f + 3.0f * GELU_CUBE * x * x);
    return tail == 0.0f ? s : s + tail * x * du;
}

// out (N) = gelu(inp (N)). Thread i owns values [8i, 8i + 8).
static __global__ void gelu_forward_kernel(floatX* out, const floatX* inp, size_t N) {
    size_t i = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * x128::size;
    if (i >= N) return;
    if (i + x128::size <= N) {
        x128 x = load128cs(inp + i); // read once: keep it out of the caches
        x128 o;
        for (int k = 0; k < x128::size; k++) o[k] = __float2bfloat16(gelu_value(__bfloat162float(x[k])));
        store128(out + i, o);
    } else {
        for (size_t j = i; j < N; j++) out[j] = __float2bfloat16(gelu_value(__bfloat162float(inp[j])));
    }
}

// d (N) *= gelu'(inp (N)), in place.
static __global__ void gelu_backward_inplace_kernel(floatX* d, const floatX* inp, size_t N) {
    size_t i = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * x128::size;
    if (i >= N) return;
    if (i + x128::size <= N) {
        x128 x = load128cs(inp + i);
        x128 g = load128cs(d + i);
        x128 o;
        for (int k = 0; k < x128::size; k++)
            o[k] = __float2bfloat16(__bfloat162float(g[k]) * gelu_derivative(__bfloat162float(x[k])));
        store128(d + i, o);
    } else {
        for (size_t j = i; j < N; j++)
            d[j] = __float2bfloat16(__bfloat162float(d[j]) * gelu_derivative(__bfloat162float(inp[j])));
    }
}

inline void gelu_check_aligned(const void* p, const char* what) {
    if (reinterpret_cast<uintptr_t>(p) % 16 != 0)
        throw Error(strprintf("gelu: %s is not 16-byte aligned (x128 access)", what));
}

inline void gelu_forward(floatX* out, const floatX* inp, size_t N, cudaStream_t stream) {
    if (N == 0) return;
    gelu_check_aligned(out, "out");
    gelu_check_aligned(inp, "inp");
    constexpr int block = 256;
    size_t grid = ceil_div(ceil_div(N, (size_t)x128::size), (size_t)block);
    gelu_forward_kernel<<<(unsigned)grid, block, 0, stream>>>(out, inp, N);
    CUDA_LAUNCH_CHECK();
}

inline void gelu_backward_inplace(floatX* d_in_out, const floatX* inp, size_t N, cudaStream_t stream) {
    if (N == 0) return;
    gelu_check_aligned(d_in_out, "d_in_out");
    gelu_check_aligned(inp, "inp");
    constexpr int block = 256;
    size_t grid = ceil_div(ceil_div(N, (size_t)x128::size), (size_t)block);
    gelu_backward_inplace_kernel<<<(unsigned)grid, block, 0, stream>>>(d_in_out, inp, N);
    CUDA_LAUNCH_CHECK();
}

} // namespace llmc
