/*
 * The project's only inline PTX: warp-level tensor-core MMA, ldmatrix and cp.async (sm_80 and later; the same
 * instructions and fragment layouts on sm_90). Each function documents the fragment layout it follows, from the
 * PTX ISA ("Warp-level matrix instructions": mma.m16n8k16 with .bf16, ldmatrix; "Data movement": cp.async).
 *
 * Notation for the layouts: lane = threadIdx.x % 32, g = lane / 4 (the "groupID"), t = lane % 4 (the
 * "threadID_in_group"). A packed bf16x2 register holds its lower-indexed element in bits 0..15.
 *
 * Under the emulated runtime (LLMC_EMU, test/emu/) each function is the emulator's implementation of the same
 * instruction with the same documented layout (warp collectives for mma and ldmatrix; cp.async copies that land
 * only at the wait_group that covers them), so code written against these layouts is checked on the host.
 */
#pragma once
#include <cstdint>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace llmc {
namespace ptx {

// Two floats rounded to bf16 (nearest even) and packed: lo in bits 0..15, hi in bits 16..31.
__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
    const uint32_t l = __bfloat16_as_ushort(__float2bfloat16(lo)), h = __bfloat16_as_ushort(__float2bfloat16(hi));
    return l | (h << 16);
}

/*
 * d += a * b: mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 (PTX ISA 9.7.14.5.8, "Matrix Fragments for
 * mma.m16n8k16 with floating point type"). A is 16x16 (row m, column k), B is 16x8 (row k, column n), D is 16x8
 * fp32; the whole warp executes it, each lane holding its fragments:
 *   a[0] = A[g][2t, 2t+1]      a[1] = A[g+8][2t, 2t+1]    a[2] = A[g][2t+8, 2t+9]    a[3] = A[g+8][2t+8, 2t+9]
 *   b[0] = B[2t, 2t+1][g]      b[1] = B[2t+8, 2t+9][g]
 *   d[0] = D[g][2t]  d[1] = D[g][2t+1]  d[2] = D[g+8][2t]  d[3] = D[g+8][2t+1]
 * So a D fragment pair (n-tiles 2j, 2j+1) re-packed as bf16 is exactly the A fragment of k-slab j:
 *   a = {pack(d2j[0], d2j[1]), pack(d2j[2], d2j[3]), pack(d2j1[0], d2j1[1]), pack(d2j1[2], d2j1[3])}.
 */
__device__ __forceinline__ void mma_bf16_16816(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
#ifdef LLMC_EMU
    ::emu::ptx_mma_bf16_16816(d, a, b);
#else
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
                 "{%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#endif
}

/*
 * ldmatrix.sync.aligned.m8n8.x4.shared.b16 (PTX ISA 9.7.14.5.15): four 8x8 matrices of 16-bit elements from
 * shared memory. Lanes 8j .. 8j+7 give the addresses of rows 0..7 of matrix j (each row 16 contiguous bytes,
 * 16-byte aligned); every lane gets one register per matrix:
 *   r[j] = M_j[g][2t, 2t+1]                 (plain)
 *   r[j] = M_j[2t][g], M_j[2t+1][g]         (.trans: the matrix transposed on the way in)
 * With row addresses chosen as below, one call yields a whole A fragment of mma_bf16_16816 (plain, rows m of a
 * row-major tile), or B fragments of two n-tiles: plain from a tile stored (n, k) row-major, .trans from a tile
 * stored (k, n) row-major.
 */
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* smem_row) {
#ifdef LLMC_EMU
    ::emu::ptx_ldmatrix_x4(r, smem_row, false);
#else
    const unsigned addr = (unsigned)__cvta_generic_to_shared(smem_row);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
#endif
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* smem_row) {
#ifdef LLMC_EMU
    ::emu::ptx_ldmatrix_x4(r, smem_row, true);
#else
    const unsigned addr = (unsigned)__cvta_generic_to_shared(smem_row);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
#endif
}

/*
 * cp.async.cg.shared.global (PTX ISA 9.7.9.25): an asynchronous 16-byte copy global -> shared that bypasses L1.
 * With src_bytes = 0 nothing is read and the 16 bytes are zero-filled (the src-size operand), so a tile row past
 * the end of a tensor costs no branch around the copy (src must still be a valid address; pass the tensor's
 * base). The destination is undefined until a cp_async_wait<N>() that covers the copy's group returns in the
 * issuing thread, and other threads see it only after a barrier that follows that wait.
 */
__device__ __forceinline__ void cp_async_16(void* smem, const void* gmem, bool fill) {
#ifdef LLMC_EMU
    ::emu::ptx_cp_async_16(smem, gmem, fill ? 16 : 0);
#else
    const unsigned addr = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(addr), "l"(gmem), "r"(fill ? 16 : 0));
#endif
}
// cp.async.commit_group: the thread's copies issued since the last commit become one group.
__device__ __forceinline__ void cp_async_commit() {
#ifdef LLMC_EMU
    ::emu::ptx_cp_async_commit();
#else
    asm volatile("cp.async.commit_group;\n" ::);
#endif
}
// cp.async.wait_group N: returns once at most the N most recent committed groups of this thread are pending.
template <int N> __device__ __forceinline__ void cp_async_wait() {
#ifdef LLMC_EMU
    ::emu::ptx_cp_async_wait(N);
#else
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
#endif
}

} // namespace ptx
} // namespace llmc
