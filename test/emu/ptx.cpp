// The warp collectives behind llmc/ptx.cuh's mma.sync and ldmatrix, with the PTX ISA's fragment layouts exactly
// (llmc/ptx.cuh states them; g = lane / 4, t = lane % 4).
#include <string>

#include "cuda_bf16.h"
#include "counters.h"
#include "emu.h"
#include "racecheck.h"

namespace emu {
namespace {

float bf16_lo(uint32_t v) { return emu_bf16_bits_to_float((uint16_t)(v & 0xffffu)); }
float bf16_hi(uint32_t v) { return emu_bf16_bits_to_float((uint16_t)(v >> 16)); }

struct MmaArg {
    float* d;
    const uint32_t* a;
    const uint32_t* b;
};

// D = A B + C over the warp: gather A (16x16), B (16x8) and C (16x8) from the lanes' fragments, multiply with
// fp32 fused multiply-adds in k order, scatter D.
void mma_collective(void* const* args, unsigned) {
    count::mma();
    float A[16][16], B[16][8], D[16][8];
    for (int lane = 0; lane < 32; lane++) {
        const MmaArg& m = *static_cast<const MmaArg*>(args[lane]);
        const int g = lane / 4, t = lane % 4;
        A[g][2 * t] = bf16_lo(m.a[0]), A[g][2 * t + 1] = bf16_hi(m.a[0]);
        A[g + 8][2 * t] = bf16_lo(m.a[1]), A[g + 8][2 * t + 1] = bf16_hi(m.a[1]);
        A[g][2 * t + 8] = bf16_lo(m.a[2]), A[g][2 * t + 9] = bf16_hi(m.a[2]);
        A[g + 8][2 * t + 8] = bf16_lo(m.a[3]), A[g + 8][2 * t + 9] = bf16_hi(m.a[3]);
        B[2 * t][g] = bf16_lo(m.b[0]), B[2 * t + 1][g] = bf16_hi(m.b[0]);
        B[2 * t + 8][g] = bf16_lo(m.b[1]), B[2 * t + 9][g] = bf16_hi(m.b[1]);
        D[g][2 * t] = m.d[0], D[g][2 * t + 1] = m.d[1], D[g + 8][2 * t] = m.d[2], D[g + 8][2 * t + 1] = m.d[3];
    }
    for (int r = 0; r < 16; r++)
        for (int n = 0; n < 8; n++) {
            float acc = D[r][n];
            for (int k = 0; k < 16; k++) acc = std::fma(A[r][k], B[k][n], acc);
            D[r][n] = acc;
        }
    for (int lane = 0; lane < 32; lane++) {
        const MmaArg& m = *static_cast<const MmaArg*>(args[lane]);
        const int g = lane / 4, t = lane % 4;
        m.d[0] = D[g][2 * t], m.d[1] = D[g][2 * t + 1], m.d[2] = D[g + 8][2 * t], m.d[3] = D[g + 8][2 * t + 1];
    }
}

struct LdmatrixArg {
    uint32_t* r;
    const void* row;
    bool trans;
    const race::Lane* lane; // racecheck: each lane reads the row it gave
    const void* pc;
};

void ldmatrix_collective(void* const* args, unsigned) {
    const LdmatrixArg& a0 = *static_cast<const LdmatrixArg*>(args[0]);
    const char* what = a0.trans ? "ldmatrix.x4.trans" : "ldmatrix.x4";
    const uint16_t* rows[32];
    for (int lane = 0; lane < 32; lane++) {
        const LdmatrixArg& a = *static_cast<const LdmatrixArg*>(args[lane]);
        if (a.trans != a0.trans) collective_fault(std::string(what) + ": lanes disagree on .trans");
        if (reinterpret_cast<uintptr_t>(a.row) % 16)
            collective_fault(std::string(what) + ": lane " + std::to_string(lane) + "'s row address is not 16-byte aligned");
        if (!is_shared_range(a.row, 16))
            collective_fault(std::string(what) + ": lane " + std::to_string(lane) +
                             "'s row is not inside the block's shared memory");
        rows[lane] = static_cast<const uint16_t*>(a.row);
        if (a.lane) race::access(a.row, 16, false, a.pc, what, *a.lane, true);
    }
    count::ldmatrix(reinterpret_cast<const void* const*>(rows));
    for (int lane = 0; lane < 32; lane++) {
        const LdmatrixArg& a = *static_cast<const LdmatrixArg*>(args[lane]);
        const int g = lane / 4, t = lane % 4;
        for (int j = 0; j < 4; j++) {
            const uint16_t* const* m = rows + 8 * j; // matrix j's eight rows
            uint16_t lo, hi;
            if (a.trans) lo = m[2 * t][g], hi = m[2 * t + 1][g];
            else lo = m[g][2 * t], hi = m[g][2 * t + 1];
            a.r[j] = (uint32_t)lo | ((uint32_t)hi << 16);
        }
    }
}

} // namespace

void ptx_mma_bf16_16816(float* d, const uint32_t* a, const uint32_t* b) {
    MmaArg m{d, a, b};
    warp_collective(0xffffffffu, mma_collective, &m, "mma.sync.m16n8k16");
}

void ptx_ldmatrix_x4(uint32_t* r, const void* row, bool trans) {
    LdmatrixArg a{r, row, trans, race::current(), __builtin_return_address(0)};
    warp_collective(0xffffffffu, ldmatrix_collective, &a, trans ? "ldmatrix.x4.trans" : "ldmatrix.x4");
}

} // namespace emu
