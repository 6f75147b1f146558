/*
 * Emulated CUB: the block and warp reductions and the device-wide algorithms the project uses, each with its
 * documented contract and nothing more.
 *
 * BlockReduce / WarpReduce: every thread of the block (lane of the warp) must call; the result is defined in
 * thread 0 (lane 0) only, and the other threads get NaN-patterned bytes. They work through their TempStorage
 * (each thread writes its value, a barrier, thread 0 folds), so reusing the storage without the barrier CUB
 * asks for races, and shows up as a difference between schedules. The block's thread count must equal the
 * template's BLOCK_DIM_X * BLOCK_DIM_Y * BLOCK_DIM_Z.
 *
 * Device algorithms: a call with a null temp pointer only sets temp_storage_bytes; a real call checks the
 * size it is given, queues the work on the stream, and overwrites the temporary storage with garbage (so a
 * caller that keeps data in it finds out). DeviceRadixSort sorts stably on bits [begin_bit, end_bit).
 */
#pragma once
#include <algorithm>
#include <cstring>
#include <numeric>
#include <vector>

#include "cuda_runtime.h"

namespace cub {

struct Sum {
    template <typename T> T operator()(const T& a, const T& b) const { return a + b; }
};
struct Max {
    template <typename T> T operator()(const T& a, const T& b) const { return a < b ? b : a; }
};
struct Min {
    template <typename T> T operator()(const T& a, const T& b) const { return b < a ? b : a; }
};

namespace detail {
template <typename T> T poisoned() {
    T v;
    std::memset(static_cast<void*>(&v), 0xFF, sizeof(T));
    return v;
}
inline int linear_thread() {
    const auto& b = emu::builtins();
    return (int)(b.thread.x + b.thread.y * b.block_dim.x + b.thread.z * b.block_dim.x * b.block_dim.y);
}
inline int block_threads() {
    const auto& b = emu::builtins();
    return (int)(b.block_dim.x * b.block_dim.y * b.block_dim.z);
}
// Adds a[0..n) pairwise (a fixed tree), as a reduction network does.
template <typename T, typename Op> T tree_fold(const T* a, int n, Op op) {
    if (n == 1) return a[0];
    const int h = n / 2;
    return op(tree_fold(a, h, op), tree_fold(a + h, n - h, op));
}
} // namespace detail

enum BlockReduceAlgorithm { BLOCK_REDUCE_RAKING, BLOCK_REDUCE_RAKING_COMMUTATIVE_ONLY, BLOCK_REDUCE_WARP_REDUCTIONS };

template <typename T, int BLOCK_DIM_X, BlockReduceAlgorithm ALGORITHM = BLOCK_REDUCE_WARP_REDUCTIONS,
          int BLOCK_DIM_Y = 1, int BLOCK_DIM_Z = 1>
class BlockReduce {
    static constexpr int THREADS = BLOCK_DIM_X * BLOCK_DIM_Y * BLOCK_DIM_Z;

public:
    struct TempStorage {
        T slot[THREADS];
    };
    explicit BlockReduce(TempStorage& s) : s_(s) {}
    T Sum(T v) { return Reduce(v, cub::Sum()); }
    T Sum(T v, int num_valid) { return Reduce(v, cub::Sum(), num_valid); }
    template <typename Op> T Reduce(T v, Op op) { return Reduce(v, op, THREADS); }
    template <typename Op> T Reduce(T v, Op op, int num_valid) {
        if (detail::block_threads() != THREADS)
            emu::device_fault("cub::BlockReduce for " + std::to_string(THREADS) + " threads called by a block of " +
                              std::to_string(detail::block_threads()));
        const int tid = detail::linear_thread();
        s_.slot[tid] = v;
        __syncthreads();
        if (tid != 0) return detail::poisoned<T>();
        return detail::tree_fold(s_.slot, std::max(1, std::min(num_valid, THREADS)), op);
    }

private:
    TempStorage& s_;
};

template <typename T, int LOGICAL_WARP_THREADS = 32> class WarpReduce {
    static_assert(LOGICAL_WARP_THREADS == 32, "the emulation implements full-warp reductions only");

public:
    struct TempStorage {
        T slot[32];
    };
    explicit WarpReduce(TempStorage& s) : s_(s) {}
    T Sum(T v) { return Reduce(v, cub::Sum()); }
    template <typename Op> T Reduce(T v, Op op) {
        const int lane = emu::lane_id();
        s_.slot[lane] = v;
        __syncwarp();
        if (lane != 0) return detail::poisoned<T>();
        return detail::tree_fold(s_.slot, 32, op);
    }

private:
    TempStorage& s_;
};

namespace detail {
// Device algorithms' temporary storage: what they report, checked, then scribbled over.
inline size_t temp_bytes_for(int num_items) { return 4096 + (size_t)(num_items > 0 ? num_items : 0) * 16; }
inline cudaError_t check_temp(void* temp, size_t bytes, int num_items) {
    const bool ok = bytes >= temp_bytes_for(num_items) && emu::is_device_range(temp, bytes);
    return ok ? cudaSuccess : cudaErrorInvalidValue;
}
inline void scribble(void* temp, size_t bytes) { std::memset(temp, 0xA5, bytes); }
template <typename K> unsigned radix_bits(K k, int begin_bit, int end_bit) {
    using U = std::make_unsigned_t<K>;
    U u = static_cast<U>(k);
    if (std::is_signed<K>::value) u ^= U(1) << (sizeof(K) * 8 - 1); // CUB's order for signed keys
    const int width = end_bit - begin_bit;
    const U mask = width >= (int)(sizeof(U) * 8) ? ~U(0) : ((U(1) << width) - 1);
    return (unsigned)((u >> begin_bit) & mask);
}
} // namespace detail

struct DeviceRadixSort {
    template <typename K, typename V>
    static cudaError_t SortPairs(void* temp, size_t& temp_bytes, const K* keys_in, K* keys_out, const V* values_in,
                                 V* values_out, int num_items, int begin_bit = 0, int end_bit = sizeof(K) * 8,
                                 cudaStream_t stream = nullptr) {
        if (temp == nullptr) {
            temp_bytes = detail::temp_bytes_for(num_items);
            return cudaSuccess;
        }
        if (begin_bit < 0 || end_bit > (int)sizeof(K) * 8 || begin_bit >= end_bit) return cudaErrorInvalidValue;
        if (cudaError_t e = detail::check_temp(temp, temp_bytes, num_items)) return e;
        emu::enqueue_host_op(stream, "cub::DeviceRadixSort::SortPairs", [=] {
            std::vector<int> order(num_items);
            std::iota(order.begin(), order.end(), 0);
            std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
                return detail::radix_bits(keys_in[a], begin_bit, end_bit) <
                       detail::radix_bits(keys_in[b], begin_bit, end_bit);
            });
            std::vector<K> k(num_items);
            std::vector<V> v(num_items);
            for (int i = 0; i < num_items; i++) k[i] = keys_in[order[i]], v[i] = values_in[order[i]];
            detail::scribble(temp, temp_bytes);
            std::copy(k.begin(), k.end(), keys_out);
            std::copy(v.begin(), v.end(), values_out);
        });
        return cudaSuccess;
    }
};

struct DeviceRunLengthEncode {
    template <typename K, typename C, typename N>
    static cudaError_t Encode(void* temp, size_t& temp_bytes, const K* in, K* unique_out, C* counts_out,
                              N* num_runs_out, int num_items, cudaStream_t stream = nullptr) {
        if (temp == nullptr) {
            temp_bytes = detail::temp_bytes_for(num_items);
            return cudaSuccess;
        }
        if (cudaError_t e = detail::check_temp(temp, temp_bytes, num_items)) return e;
        emu::enqueue_host_op(stream, "cub::DeviceRunLengthEncode::Encode", [=] {
            detail::scribble(temp, temp_bytes);
            N runs = 0;
            for (int i = 0; i < num_items;) {
                int j = i + 1;
                while (j < num_items && in[j] == in[i]) j++;
                unique_out[runs] = in[i];
                counts_out[runs] = (C)(j - i);
                runs++;
                i = j;
            }
            *num_runs_out = runs; // entries past the run count are left as they were
        });
        return cudaSuccess;
    }
};

struct DeviceScan {
    template <typename T> static cudaError_t ExclusiveSum(void* temp, size_t& temp_bytes, const T* in, T* out,
                                                          int num_items, cudaStream_t stream = nullptr) {
        if (temp == nullptr) {
            temp_bytes = detail::temp_bytes_for(num_items);
            return cudaSuccess;
        }
        if (cudaError_t e = detail::check_temp(temp, temp_bytes, num_items)) return e;
        emu::enqueue_host_op(stream, "cub::DeviceScan::ExclusiveSum", [=] {
            detail::scribble(temp, temp_bytes);
            std::vector<T> r(num_items);
            T acc = T(0);
            for (int i = 0; i < num_items; i++) r[i] = acc, acc = acc + in[i];
            std::copy(r.begin(), r.end(), out);
        });
        return cudaSuccess;
    }
};

} // namespace cub
