/*
 * GELU on the GPU, the tanh form GPT-2 uses:
 *   gelu(x) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
 * elementwise over N values (the MLP's (B, T, 4C) activation). bf16 storage, fp32 math. Each thread moves 8
 * values with one 16-byte load and store; a last partial group of 8 (N not a multiple of 8) is done value by
 * value, so any N works as long as the pointers are 16-byte aligned (cudaMalloc and the activation layout).
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

__device__ inline float gelu_value(float x) {
    float u = GELU_SCALE * (x + GELU_CUBE * x * x * x);
    return 0.5f * x * (1.0f + tanhf(u));
}

// d gelu / dx. sech^2 written as 1 - tanh^2: 1/cosh^2 would overflow for large |x|.
__device__ inline float gelu_derivative(float x) {
    float th = tanhf(GELU_SCALE * (x + GELU_CUBE * x * x * x));
    return 0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * GELU_SCALE * (1.0f + 3.0f * GELU_CUBE * x * x);
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
