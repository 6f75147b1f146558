/*
 * Decode attention: one query row per (running sequence, head) against that sequence's cached keys and values,
 * the step of KV-cache generation after the prompt (llmc/cpu/gpt2_decoder.h is the CPU reference and
 * cpu::attention_row its arithmetic; the CPU's cache keeps each head's positions contiguous for one thread's
 * stream, this one whole (maxT, C) rows, so that a warp reads one position of a head in one coalesced load).
 * Split over the cached positions, flash-decoding style:
 *
 *   q        (B, q_stride) bf16: row b's query of head h at q + b*q_stride + h*HS (a qkv row: q_stride = 3C)
 *   seq      (B) int on the device: the cache sequence row b belongs to. The rows are the sequences still
 *            generating, so B may be less than the caches' sequences once some have stopped; distinct rows
 *            may name the same sequence (nothing is written to the cache here)
 *   k, v     (S, maxT, C) bf16 caches, S > every seq[b]: positions 0..len[b]-1 of sequence seq[b] are read,
 *            nothing past them
 *   len      (B) int on the device: positions row b attends (cached tokens, the current one included),
 *            1 <= len[b] <= maxT
 *   out      (B, C) bf16; may not alias q, k or v
 *   partial  fp32 scratch of attention_decode_scratch_floats(B, NH, HS, maxT): per (row, head, split) the
 *            split's running max, its sum of exponentials and its unnormalised output
 *
 * Step 1, grid (splits, NH, B), one warp per block: the split's kDecodeChunk positions one after the other,
 * each lane holding HS/32 channels (lane + 32 i: coalesced loads); the score is a butterfly warp sum of q.k,
 * which leaves the same bits in every lane, then the online-softmax update in fp32. Splits that start past
 * len[b] return at once.
 * Step 2, grid (NH, B), HS threads: combines the used splits in index order,
 *   o = sum_s e^(m_s - M) o_s / sum_s e^(m_s - M) l_s,  M = max_s m_s,
 * so the result depends only on the partials, never on which block ran first (no atomics: deterministic).
 *
 * Why split: at batch 1 there are only NH (sequence, head) pairs, a dozen blocks for a GPU with a hundred
 * SMs, and a long context would run on them alone; splits of kDecodeChunk positions give every position of
 * the cache its own block group. The chunk is one tile of 64 positions: long enough to amortise the
 * partial's write and short enough that 1024 positions make 16 blocks per head.
 */
#pragma once
#include <cmath>

#include "llmc/cuda_common.cuh"
#include "llmc/util/utils.h"

namespace llmc {

constexpr int kDecodeChunk = 64;      // cached positions per split
constexpr int kMaxDecodeRows = 65535; // rows (running sequences) per call: the grid's z dimension

inline int attention_decode_splits(int maxT) { return ceil_div(maxT, kDecodeChunk); }
inline size_t attention_decode_scratch_floats(int B, int NH, int HS, int maxT) {
    return (size_t)B * NH * attention_decode_splits(maxT) * (HS + 2);
}

namespace detail {

template <int HS>
__global__ void __launch_bounds__(32)
    attention_decode_split_kernel(float* __restrict__ partial, const floatX* __restrict__ q, int q_stride,
                                  const floatX* __restrict__ k, const floatX* __restrict__ v,
                                  const int* __restrict__ seq, const int* __restrict__ len, int maxT, int NH,
                                  int splits, float scale) {
    constexpr int PER = HS / 32;
    const int s = blockIdx.x, h = blockIdx.y, b = blockIdx.z, lane = threadIdx.x;
    const int n = len[b], t0 = s * kDecodeChunk;
    if (t0 >= n) return; // the whole warp leaves: no shuffle waits on it, and step 2 never reads this split
    const int t1 = min(n, t0 + kDecodeChunk), C = NH * HS;
    const size_t cache_seq = (size_t)seq[b];
    float qr[PER], acc[PER];
#pragma unroll
    for (int i = 0; i < PER; i++) {
        qr[i] = __bfloat162float(q[(size_t)b * q_stride + h * HS + lane + 32 * i]);
        acc[i] = 0.0f;
    }
    float m = -INFINITY, l = 0.0f;
    for (int t = t0; t < t1; t++) {
        const size_t row = (cache_seq * maxT + t) * C + h * HS;
        float d = 0.0f;
#pragma unroll
        for (int i = 0; i < PER; i++) d += qr[i] * __bfloat162float(k[row + lane + 32 * i]);
        for (int o = 16; o > 0; o >>= 1) d += __shfl_xor_sync(0xffffffffu, d, o);
        const float score = d * scale, m_new = fmaxf(m, score);
        const float corr = expf(m - m_new), p = expf(score - m_new); // corr = 0 at the first position
        l = l * corr + p;
#pragma unroll
        for (int i = 0; i < PER; i++) acc[i] = acc[i] * corr + p * __bfloat162float(v[row + lane + 32 * i]);
        m = m_new;
    }
    float* out = partial + (((size_t)b * NH + h) * splits + s) * (HS + 2);
#pragma unroll
    for (int i = 0; i < PER; i++) out[lane + 32 * i] = acc[i];
    if (lane == 0) out[HS] = m, out[HS + 1] = l;
}

template <int HS>
__global__ void __launch_bounds__(HS)
    attention_decode_combine_kernel(floatX* __restrict__ out, const float* __restrict__ partial,
                                    const int* __restrict__ len, int NH, int splits) {
    const int h = blockIdx.x, b = blockIdx.y, i = threadIdx.x;
    const int used = ceil_div(len[b], kDecodeChunk);
    const float* p = partial + ((size_t)b * NH + h) * splits * (HS + 2);
    float M = -INFINITY;
    for (int s = 0; s < used; s++) M = fmaxf(M, p[s * (HS + 2) + HS]);
    float L = 0.0f, o = 0.0f;
    for (int s = 0; s < used; s++) {
        const float w = expf(p[s * (HS + 2) + HS] - M);
        L += w * p[s * (HS + 2) + HS + 1];
        o += w * p[s * (HS + 2) + i];
    }
    out[((size_t)b * NH + h) * HS + i] = __float2bfloat16(o / L);
}

template <int HS>
void attention_decode_launch(floatX* out, float* partial, const floatX* q, int q_stride, const floatX* k,
                             const floatX* v, const int* seq, const int* len, int B, int maxT, int NH,
                             cudaStream_t stream) {
    const int splits = attention_decode_splits(maxT);
    attention_decode_split_kernel<HS><<<dim3(splits, NH, B), 32, 0, stream>>>(
        partial, q, q_stride, k, v, seq, len, maxT, NH, splits, (float)(1.0 / std::sqrt((double)HS)));
    CUDA_LAUNCH_CHECK();
    attention_decode_combine_kernel<HS><<<dim3(NH, B), HS, 0, stream>>>(out, partial, len, NH, splits);
    CUDA_LAUNCH_CHECK();
}

} // namespace detail

// Head sizes 32, 64 (GPT-2) and 128; anything else throws llmc::Error. B <= kMaxDecodeRows.
inline void attention_decode(floatX* out, float* partial, const floatX* q, int q_stride, const floatX* k,
                             const floatX* v, const int* seq, const int* len, int B, int maxT, int NH, int HS,
                             cudaStream_t stream) {
    if (B < 1 || B > kMaxDecodeRows || maxT < 1 || NH < 1)
        throw Error(strprintf("attention_decode: bad shape B=%d maxT=%d NH=%d", B, maxT, NH));
    switch (HS) {
    case 32: detail::attention_decode_launch<32>(out, partial, q, q_stride, k, v, seq, len, B, maxT, NH, stream); break;
    case 64: detail::attention_decode_launch<64>(out, partial, q, q_stride, k, v, seq, len, B, maxT, NH, stream); break;
    case 128:
        detail::attention_decode_launch<128>(out, partial, q, q_stride, k, v, seq, len, B, maxT, NH, stream);
        break;
    default: throw Error(strprintf("attention_decode: head size %d not supported (32, 64 or 128)", HS));
    }
}

} // namespace llmc
