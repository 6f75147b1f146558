/*
 * Token + position embedding on the GPU.
 *
 *   forward:  out (B, T, C) = wte[inp[b, t]] (Vp, C) + wpe[t] (maxT, C)
 *   backward: dwte[token] += sum of dout rows at the positions holding that token; dwpe[t] += sum over b.
 *
 * The backward is deterministic without atomics. A token can occur at many positions, so its dwte row has
 * many contributors. We sort the (token, position) pairs by token with a stable radix sort (positions of one
 * token stay in ascending order), run-length encode the sorted tokens into (unique token, count), scan the
 * counts into run offsets, and give each unique token one block that adds its positions' dout rows in sorted
 * order, in fp32, and then adds the sum to the bf16 gradient once. The number of unique tokens stays on the
 * device: B*T blocks are launched and those past the run count exit, so there is no host synchronisation.
 * dwpe needs no sort: thread (t, 8-channel chunk) adds the B rows in b order.
 *
 * All C must be multiples of 8 (16-byte x128 rows); launchers throw otherwise.
 */
#pragma once
#include <algorithm>
#include <cub/cub.cuh>
#include <numeric>
#include <vector>

#include "llmc/cuda_common.cuh"

namespace llmc {

inline void encoder_check_channels(int C) {
    if (C <= 0 || C % x128::size != 0) throw Error(strprintf("encoder: C=%d must be a positive multiple of 8", C));
}

// out (BT, C) = wte[inp] + wpe[t]; thread = (row, 8-channel chunk).
static __global__ void encoder_forward_kernel(floatX* out, const int* inp, const floatX* wte, const floatX* wpe, int BT,
                                              int T, int C) {
    const int chunks = C / x128::size;
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)BT * chunks) return;
    const int bt = (int)(idx / chunks), c = (int)(idx % chunks) * x128::size;
    const int t = bt % T;
    x128 e = load128(wte + (size_t)inp[bt] * C + c); // wte/wpe rows are reused across the batch: keep cached
    x128 p = load128(wpe + (size_t)t * C + c);
    x128 o;
#pragma unroll
    for (int k = 0; k < x128::size; k++) o[k] = __float2bfloat16(__bfloat162float(e[k]) + __bfloat162float(p[k]));
    store128(out + (size_t)bt * C + c, o);
}

inline void encoder_forward(floatX* out, const int* inp, const floatX* wte, const floatX* wpe, int B, int T, int C,
                            cudaStream_t stream) {
    encoder_check_channels(C);
    const size_t threads = (size_t)B * T * (C / x128::size);
    if (threads == 0) return;
    constexpr int block = 256;
    encoder_forward_kernel<<<(unsigned)ceil_div(threads, (size_t)block), block, 0, stream>>>(out, inp, wte, wpe, B * T,
                                                                                             T, C);
    CUDA_LAUNCH_CHECK();
}

/*
 * Device scratch for encoder_backward, sized for up to B*T positions, in one allocation:
 *   positions   (BT) 0..BT-1, filled once here: the values sorted along with the tokens
 *   sorted_tok  (BT) tokens in ascending order;  sorted_pos (BT) their positions (ascending within a token)
 *   unique_tok  (BT) one entry per run;  run_count (BT) its length;  run_offset (BT) its start in sorted_*
 *   num_runs    (1)
 *   temp        CUB temporary storage, the largest of the sort, the run-length encode and the scan.
 * `vocab` (optional, > 0) bounds the token ids so the radix sort only looks at the bits that can be set;
 * 0 sorts all 32 bits. One scratch must not be used by two streams at once.
 */
struct EncoderBackwardScratch {
    int capacity = 0; // max B*T
    int key_bits = 32;
    void* base = nullptr;
    int* positions = nullptr;
    int* sorted_tok = nullptr;
    int* sorted_pos = nullptr;
    int* unique_tok = nullptr;
    int* run_count = nullptr;
    int* run_offset = nullptr;
    int* num_runs = nullptr;
    void* temp = nullptr;
    size_t temp_bytes = 0;

    EncoderBackwardScratch(int B, int T, int vocab = 0) : capacity(B * T), key_bits(sort_key_bits(vocab)) {
        if (B <= 0 || T <= 0) throw Error(strprintf("EncoderBackwardScratch: bad shape B=%d T=%d", B, T));
        const size_t total = bytes(capacity, key_bits, &temp_bytes);
        CUDA_CHECK(cudaMalloc(&base, total));
        // Every array at a 256-byte boundary, as bytes() counts them.
        const size_t arr = round_up_256((size_t)capacity * sizeof(int));
        char* p = static_cast<char*>(base);
        positions = reinterpret_cast<int*>(p), p += arr;
        sorted_tok = reinterpret_cast<int*>(p), p += arr;
        sorted_pos = reinterpret_cast<int*>(p), p += arr;
        unique_tok = reinterpret_cast<int*>(p), p += arr;
        run_count = reinterpret_cast<int*>(p), p += arr;
        run_offset = reinterpret_cast<int*>(p), p += arr;
        num_runs = reinterpret_cast<int*>(p), p += round_up_256(sizeof(int));
        temp = p;

        std::vector<int> iota(capacity);
        std::iota(iota.begin(), iota.end(), 0);
        CUDA_CHECK(cudaMemcpy(positions, iota.data(), (size_t)capacity * sizeof(int), cudaMemcpyHostToDevice));
        // A copy from pageable memory may return before it lands, and the legacy stream it ran on does not
        // order the callers' non-blocking streams: wait for it here.
        CUDA_CHECK(cudaDeviceSynchronize());
    }
    ~EncoderBackwardScratch() { cudaFree(base); }

    // Bits of the sort key: enough for ids below vocab, all 32 when vocab is 0.
    static int sort_key_bits(int vocab) {
        if (vocab <= 0) return 32;
        int bits = 1;
        while (bits < 31 && (1u << bits) < (unsigned)vocab) bits++;
        return bits;
    }
    // Device bytes a scratch of this capacity takes (the memory plan counts them before allocating);
    // *temp (if given): the CUB temporary storage among them, the largest of the sort, the run-length encode
    // and the scan. Without a device CUB cannot be asked (a memory plan on a machine without a GPU): *temp is
    // then an upper bound, the sort's alternate keys and values twice over plus 4 MiB, and *estimated is set.
    static size_t bytes(int capacity, int key_bits, size_t* temp = nullptr, bool* estimated = nullptr) {
        size_t sort_bytes = 0, rle_bytes = 0, scan_bytes = 0; // queries: no work is done with a null temp pointer
        cudaError_t e = cub::DeviceRadixSort::SortPairs(nullptr, sort_bytes, (const int*)nullptr, (int*)nullptr,
                                                        (const int*)nullptr, (int*)nullptr, capacity, 0, key_bits);
        if (e == cudaSuccess)
            e = cub::DeviceRunLengthEncode::Encode(nullptr, rle_bytes, (const int*)nullptr, (int*)nullptr,
                                                   (int*)nullptr, (int*)nullptr, capacity);
        if (e == cudaSuccess)
            e = cub::DeviceScan::ExclusiveSum(nullptr, scan_bytes, (const int*)nullptr, (int*)nullptr, capacity);
        if (e != cudaSuccess && cuda_device_count() == 0) {
            cudaGetLastError();
            sort_bytes = 4 * (size_t)capacity * 2 * sizeof(int) + ((size_t)4 << 20);
            if (estimated) *estimated = true;
        } else {
            CUDA_CHECK(e);
        }
        const size_t temp_bytes = std::max(sort_bytes, std::max(rle_bytes, scan_bytes));
        if (temp) *temp = temp_bytes;
        return 6 * round_up_256((size_t)capacity * sizeof(int)) + round_up_256(sizeof(int)) + round_up_256(temp_bytes);
    }

    EncoderBackwardScratch(const EncoderBackwardScratch&) = delete;
    EncoderBackwardScratch& operator=(const EncoderBackwardScratch&) = delete;
};

// acc[k] += g[k], in fp32.
static __device__ __forceinline__ void accumulate_chunk(float* acc, const x128& g) {
#pragma unroll
    for (int k = 0; k < x128::size; k++) acc[k] += __bfloat162float(g[k]);
}

// d[0..8) += acc: the fp32 sum is added to the bf16 gradient once, so it is rounded once.
static __device__ __forceinline__ void add_chunk_to_grad(floatX* d, const float* acc) {
    x128 w = load128(d);
#pragma unroll
    for (int k = 0; k < x128::size; k++) w[k] = __float2bfloat16(__bfloat162float(w[k]) + acc[k]);
    store128(d, w);
}

/*
 * dwte[unique_tok[r]] += sum of dout rows at sorted_pos[run_offset[r] .. + run_count[r]), in that order.
 * Grid: BT blocks (the most runs there can be); blocks r >= *num_runs exit. Each thread owns 8-channel
 * chunks and keeps its fp32 sums in registers, so no cross-thread reduction is needed.
 */
static __global__ void encoder_backward_wte_kernel(floatX* dwte, const floatX* dout, const int* sorted_pos,
                                                   const int* unique_tok, const int* run_count,
                                                   const int* run_offset, const int* num_runs, int C) {
    const int r = blockIdx.x;
    if (r >= *num_runs) return;
    const int token = unique_tok[r], start = run_offset[r], count = run_count[r];
    for (int c = threadIdx.x * x128::size; c < C; c += blockDim.x * x128::size) {
        float acc[x128::size] = {};
        // Unrolled so that several rows' loads are in flight at once; the adds stay in position order.
#pragma unroll 8
        for (int j = 0; j < count; j++) {
            const int pos = sorted_pos[start + j]; // same address for the whole block: a broadcast
            accumulate_chunk(acc, load128(dout + (size_t)pos * C + c));
        }
        add_chunk_to_grad(dwte + (size_t)token * C + c, acc);
    }
}

// dwpe[t] (maxT, C) += sum over b of dout[b, t]; thread = (t, 8-channel chunk), b in order.
static __global__ void encoder_backward_wpe_kernel(floatX* dwpe, const floatX* dout, int B, int T, int C) {
    const int chunks = C / x128::size;
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)T * chunks) return;
    const int t = (int)(idx / chunks), c = (int)(idx % chunks) * x128::size;
    float acc[x128::size] = {};
#pragma unroll 4
    for (int b = 0; b < B; b++) accumulate_chunk(acc, load128(dout + ((size_t)b * T + t) * C + c));
    add_chunk_to_grad(dwpe + (size_t)t * C + c, acc);
}

// Accumulates dwte (Vp, C) and dwpe (maxT, C) from dout (B, T, C); inp (B, T) token ids in [0, Vp).
inline void encoder_backward(floatX* dwte, floatX* dwpe, EncoderBackwardScratch& s, const floatX* dout, const int* inp,
                             int B, int T, int C, cudaStream_t stream) {
    encoder_check_channels(C);
    const int BT = B * T;
    if (BT <= 0) return;
    if (BT > s.capacity)
        throw Error(strprintf("encoder_backward: B*T=%d exceeds the scratch capacity %d", BT, s.capacity));

    // Stable sort: positions of equal tokens keep their ascending order, fixing each token's summation order.
    size_t bytes = s.temp_bytes;
    CUDA_CHECK(cub::DeviceRadixSort::SortPairs(s.temp, bytes, inp, s.sorted_tok, s.positions, s.sorted_pos, BT, 0,
                                               s.key_bits, stream));
    launch_check("cub::DeviceRadixSort::SortPairs", __FILE__, __LINE__);
    // Counts past the run count are never written by the encode; zero them first so the scan below reads
    // defined values. (Their offsets are unused either way: an exclusive scan's entry r depends only on < r.)
    CUDA_CHECK(cudaMemsetAsync(s.run_count, 0, (size_t)BT * sizeof(int), stream));
    bytes = s.temp_bytes;
    CUDA_CHECK(cub::DeviceRunLengthEncode::Encode(s.temp, bytes, s.sorted_tok, s.unique_tok, s.run_count, s.num_runs,
                                                  BT, stream));
    launch_check("cub::DeviceRunLengthEncode::Encode", __FILE__, __LINE__);
    bytes = s.temp_bytes;
    CUDA_CHECK(cub::DeviceScan::ExclusiveSum(s.temp, bytes, s.run_count, s.run_offset, BT, stream));
    launch_check("cub::DeviceScan::ExclusiveSum", __FILE__, __LINE__);

    const int wte_block = std::min(512, ceil_div(C / x128::size, 32) * 32);
    encoder_backward_wte_kernel<<<BT, wte_block, 0, stream>>>(dwte, dout, s.sorted_pos, s.unique_tok, s.run_count,
                                                              s.run_offset, s.num_runs, C);
    CUDA_LAUNCH_CHECK();

    constexpr int block = 256;
    const size_t threads = (size_t)T * (C / x128::size);
    encoder_backward_wpe_kernel<<<(unsigned)ceil_div(threads, (size_t)block), block, 0, stream>>>(dwpe, dout, B, T, C);
    CUDA_LAUNCH_CHECK();
}

} // namespace llmc
