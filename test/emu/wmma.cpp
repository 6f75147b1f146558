// The WMMA collectives of test/emu/include/mma.h: load, store, fill and mma over the whole warp's fragments.
#include <algorithm>
#include <numeric>
#include <random>

#include "mma.h"

namespace nvcuda {
namespace wmma {
namespace detail {
namespace {

// (lane, element) -> position row*16 + col in the tile, per use: a permutation drawn from the schedule, so no
// element layout can be relied on. The same schedule always gives the same layout.
struct Layouts {
    int schedule = -1;
    int pos[3][32][8];
};
const Layouts& layouts() {
    static Layouts l;
    if (l.schedule != emu::schedule()) {
        l.schedule = emu::schedule();
        for (int u = 0; u < 3; u++) {
            std::vector<int> p(256);
            std::iota(p.begin(), p.end(), 0);
            std::shuffle(p.begin(), p.end(), std::mt19937(1000 + 31 * u + 7 * l.schedule));
            for (int lane = 0; lane < 32; lane++)
                for (int i = 0; i < 8; i++) l.pos[u][lane][i] = p[lane * 8 + i];
        }
    }
    return l;
}

float get(const FragOp& f, int i) {
    return f.is_float ? static_cast<const float*>(f.elems)[i]
                      : __bfloat162float(static_cast<const __nv_bfloat16*>(f.elems)[i]);
}
void set(const FragOp& f, int i, float v) {
    if (f.is_float)
        static_cast<float*>(f.elems)[i] = v;
    else
        static_cast<__nv_bfloat16*>(f.elems)[i] = __float2bfloat16(v);
}

// Every lane must pass the same pointer and ldm; the pointer 32-byte aligned; ldm a multiple of 16 bytes.
void check_memory_op(void* const* args, const char* what) {
    const FragOp& f0 = *static_cast<const FragOp*>(args[0]);
    for (int l = 1; l < 32; l++) {
        const FragOp& f = *static_cast<const FragOp*>(args[l]);
        if (f.ptr != f0.ptr || f.ldm != f0.ldm || f.col_major != f0.col_major)
            emu::collective_fault(std::string(what) + ": lanes 0 and " + std::to_string(l) +
                                  " pass different pointers, ldm or layouts (they must be warp-uniform)");
    }
    if (reinterpret_cast<uintptr_t>(f0.ptr) % 32 != 0)
        emu::collective_fault(std::string(what) + ": pointer not 256-bit aligned");
    const unsigned multiple = f0.is_float ? 4 : 8;
    if (f0.ldm % multiple != 0 || f0.ldm < 16)
        emu::collective_fault(std::string(what) + ": ldm " + std::to_string(f0.ldm) + " is not a multiple of " +
                              std::to_string(multiple) + " elements of at least 16");
}

// Memory offset of tile position (r, c).
size_t offset(const FragOp& f, int r, int c) { return f.col_major ? (size_t)c * f.ldm + r : (size_t)r * f.ldm + c; }

} // namespace

void load_collective(void* const* args, unsigned) {
    check_memory_op(args, "wmma::load_matrix_sync");
    const Layouts& L = layouts();
    for (int lane = 0; lane < 32; lane++) {
        const FragOp& f = *static_cast<const FragOp*>(args[lane]);
        for (int i = 0; i < 8; i++) {
            const int p = L.pos[f.use][lane][i];
            const size_t o = offset(f, p / 16, p % 16);
            set(f, i,
                f.is_float ? static_cast<const float*>(f.ptr)[o]
                           : __bfloat162float(static_cast<const __nv_bfloat16*>(f.ptr)[o]));
        }
    }
}

void store_collective(void* const* args, unsigned) {
    check_memory_op(args, "wmma::store_matrix_sync");
    const Layouts& L = layouts();
    for (int lane = 0; lane < 32; lane++) {
        const FragOp& f = *static_cast<const FragOp*>(args[lane]);
        for (int i = 0; i < 8; i++) {
            const int p = L.pos[f.use][lane][i];
            static_cast<float*>(const_cast<void*>(f.ptr))[offset(f, p / 16, p % 16)] = get(f, i);
        }
    }
}

void fill_collective(void* const* args, unsigned) {
    for (int lane = 0; lane < 32; lane++) {
        const FragOp& f = *static_cast<const FragOp*>(args[lane]);
        for (int i = 0; i < 8; i++) set(f, i, f.value);
    }
}

// d = a b + c over the warp: gather the tiles from every lane's elements, multiply in fp32, scatter d.
void mma_collective(void* const* args, unsigned) {
    const Layouts& L = layouts();
    float a[256], b[256], c[256];
    for (int lane = 0; lane < 32; lane++) {
        const FragOp& f = *static_cast<const FragOp*>(args[lane]);
        for (int i = 0; i < 8; i++) {
            a[L.pos[UseA][lane][i]] = __bfloat162float(static_cast<const __nv_bfloat16*>(f.a)[i]);
            b[L.pos[UseB][lane][i]] = __bfloat162float(static_cast<const __nv_bfloat16*>(f.b)[i]);
            c[L.pos[UseAcc][lane][i]] = static_cast<const float*>(f.c)[i];
        }
    }
    float d[256];
    for (int r = 0; r < 16; r++)
        for (int n = 0; n < 16; n++) {
            float acc = c[r * 16 + n];
            for (int k = 0; k < 16; k++) acc = std::fma(a[r * 16 + k], b[k * 16 + n], acc);
            d[r * 16 + n] = acc;
        }
    for (int lane = 0; lane < 32; lane++) {
        const FragOp& f = *static_cast<const FragOp*>(args[lane]);
        for (int i = 0; i < 8; i++) static_cast<float*>(f.elems)[i] = d[L.pos[UseAcc][lane][i]];
    }
}

} // namespace detail
} // namespace wmma
} // namespace nvcuda
