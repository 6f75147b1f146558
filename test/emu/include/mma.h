/*
 * Emulated nvcuda::wmma for m16n16k16 with bf16 inputs and fp32 accumulators.
 *
 * A fragment holds num_elements values per lane, as on the device; which (row, column) of the 16x16 tile a
 * lane's element i is stays unspecified there, and here it is a permutation drawn from the schedule's seed
 * (different for matrix_a, matrix_b and accumulator), so code that depends on an element layout gives
 * different results under different schedules. Every operation is a warp collective: all 32 lanes must call
 * it with the same pointer and ldm. Documented requirements are checked: the pointer 256-bit aligned, ldm a
 * multiple of 8 elements for bf16 and of 4 for float.
 */
#pragma once
#include <cstdint>

#include "cuda_bf16.h"

namespace nvcuda {
namespace wmma {

struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

namespace detail {
enum Use { UseA = 0, UseB = 1, UseAcc = 2 };
template <typename U> constexpr Use use_of();
template <> constexpr Use use_of<matrix_a>() { return UseA; }
template <> constexpr Use use_of<matrix_b>() { return UseB; }
template <> constexpr Use use_of<accumulator>() { return UseAcc; }
template <typename L> constexpr int layout_of() { return std::is_same<L, col_major>::value ? 1 : 0; }

// What a lane hands to the collective: its fragment storage and the memory operand.
struct FragOp {
    void* elems;     // the lane's num_elements values (bf16 or float)
    int use;         // Use
    bool is_float;   // element type float (accumulator) or bf16
    const void* ptr; // memory (load/store), or null
    unsigned ldm;
    int col_major; // memory layout
    float value;   // fill
    const void* a; // mma: the lane's a, b, c fragments
    const void* b;
    const void* c;
};
void load_collective(void* const* args, unsigned mask);
void store_collective(void* const* args, unsigned mask);
void fill_collective(void* const* args, unsigned mask);
void mma_collective(void* const* args, unsigned mask);
} // namespace detail

template <typename Use, int M, int N, int K, typename T, typename Layout = void> class fragment {
    static_assert(M == 16 && N == 16 && K == 16, "the emulation implements m16n16k16 only");
    static_assert(std::is_same<T, __nv_bfloat16>::value || std::is_same<T, float>::value,
                  "the emulation implements bf16 inputs and float accumulators only");

public:
    static constexpr int num_elements = 8; // 256 values over 32 lanes
    using element_type = T;
    using storage_element_type = T;
    static constexpr detail::Use use = detail::use_of<Use>();
    static constexpr int layout = detail::layout_of<Layout>();
    T x[num_elements];
};

template <typename Use, typename T, typename L>
void load_matrix_sync(fragment<Use, 16, 16, 16, T, L>& f, const T* p, unsigned ldm) {
    static_assert(!std::is_same<Use, accumulator>::value, "an accumulator load needs a layout_t");
    detail::FragOp op{f.x,
                      (int)detail::use_of<Use>(),
                      std::is_same<T, float>::value,
                      p,
                      ldm,
                      detail::layout_of<L>(),
                      0.0f,
                      nullptr,
                      nullptr,
                      nullptr};
    emu::warp_collective(0xffffffffu, detail::load_collective, &op, "wmma::load_matrix_sync");
}
inline void load_matrix_sync(fragment<accumulator, 16, 16, 16, float>& f, const float* p, unsigned ldm, layout_t l) {
    detail::FragOp op{f.x, detail::UseAcc, true, p, ldm, l == mem_col_major, 0.0f, nullptr, nullptr, nullptr};
    emu::warp_collective(0xffffffffu, detail::load_collective, &op, "wmma::load_matrix_sync");
}
inline void store_matrix_sync(float* p, const fragment<accumulator, 16, 16, 16, float>& f, unsigned ldm, layout_t l) {
    detail::FragOp op{const_cast<float*>(f.x), detail::UseAcc, true,    p,       ldm,
                      l == mem_col_major,      0.0f,           nullptr, nullptr, nullptr};
    emu::warp_collective(0xffffffffu, detail::store_collective, &op, "wmma::store_matrix_sync");
}
template <typename Use, typename T, typename L, typename V>
void fill_fragment(fragment<Use, 16, 16, 16, T, L>& f, V v) {
    detail::FragOp op{
        f.x,    (int)detail::use_of<Use>(), std::is_same<T, float>::value, nullptr, 0, 0, (float)v, nullptr, nullptr,
        nullptr};
    emu::warp_collective(0xffffffffu, detail::fill_collective, &op, "wmma::fill_fragment");
}
template <typename LA, typename LB> void mma_sync(fragment<accumulator, 16, 16, 16, float>& d,
                                                  const fragment<matrix_a, 16, 16, 16, __nv_bfloat16, LA>& a,
                                                  const fragment<matrix_b, 16, 16, 16, __nv_bfloat16, LB>& b,
                                                  const fragment<accumulator, 16, 16, 16, float>& c) {
    detail::FragOp op{d.x, detail::UseAcc, true, nullptr, 0, 0, 0.0f, a.x, b.x, c.x};
    emu::warp_collective(0xffffffffu, detail::mma_collective, &op, "wmma::mma_sync");
}

} // namespace wmma
} // namespace nvcuda
