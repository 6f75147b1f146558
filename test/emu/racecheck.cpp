// Racecheck of the emulated runtime (racecheck.h): per-byte shadow of the running block's shared memory, the
// hazard rules, and the ThreadSanitizer instrumentation callbacks that feed it.
#include "racecheck.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dlfcn.h>
#include <unistd.h>
#include <memory>
#include <vector>

#include "counters.h"
#include "emu.h"

namespace emu::race {
namespace {

// What made an access, besides plain loads and stores (Access::what).
const char* const kWhat[] = {"", "cp.async issued", "cp.async landed by its wait_group", "ldmatrix.x4",
                             "ldmatrix.x4.trans"};
uint8_t what_index(const char* what) {
    for (uint8_t i = 0; i < sizeof kWhat / sizeof kWhat[0]; i++)
        if (std::strcmp(kWhat[i], what) == 0) return i;
    return 0;
}

// One access as the shadow keeps it, in 16 bytes. bar: the block's barrier epoch + 1 (0: no access); wep: the
// warp's epoch; pc: the return address, as an offset from the program's text; what: an index into kWhat.
struct Access {
    uint32_t bar = 0, wep = 0, pc = 0;
    uint16_t thread = 0;
    uint8_t warp = 0, what = 0;
};
static_assert(sizeof(Access) == 16, "a shadow byte is three accesses");
struct Shadow {
    Access w, r1, r2; // the last write; the first read of the epoch and the latest read by another thread
};
struct Region {
    const char* lo;
    size_t bytes;
    std::string what;
    std::unique_ptr<Shadow[]> shadow; // made on the region's first checked access
};

bool g_enabled = [] {
    const char* e = std::getenv("LLMC_EMU_RACECHECK");
    return !(e && std::strcmp(e, "0") == 0);
}();
uint32_t g_barrier = 0;            // __syncthreads released in this block
std::vector<uint32_t> g_warp_epoch; // warp collectives released, per warp
std::vector<Region> g_regions;
const char *g_region_lo = nullptr, *g_region_hi = nullptr; // the regions' envelope

// What the instrumentation's callbacks test first: the running thread and the envelope (empty while disabled).
void update_window() {
    detail::lo = g_enabled ? g_region_lo : nullptr;
    detail::hi = g_enabled ? g_region_hi : nullptr;
}

uintptr_t text_base() {
    static const uintptr_t base = [] {
        Dl_info info{};
        dladdr(reinterpret_cast<void*>(&text_base), &info);
        return reinterpret_cast<uintptr_t>(info.dli_fbase);
    }();
    return base;
}
uint32_t pc_offset(const void* pc) { return (uint32_t)(reinterpret_cast<uintptr_t>(pc) - text_base()); }

bool ordered(const Access& a, const Lane& l) {
    return a.bar != g_barrier + 1 || (a.warp == l.warp && a.wep != g_warp_epoch[l.warp]);
}

[[noreturn]] void hazard(const char* kind, const Region& r, size_t offset, const Access& earlier, bool earlier_write,
                         const Lane& l, bool write, const void* pc, const char* what, bool in_collective) {
    const auto describe = [](bool w, const char* instr) {
        std::string s = w ? "wrote it" : "read it";
        if (instr && *instr) s += std::string(" (") + instr + ")";
        return s;
    };
    // The earlier thread is named by its index: the scheduler knows the rest of it (block and thread indices).
    char buf[1024];
    snprintf(buf, sizeof buf,
             "racecheck: %s hazard on %s byte %zu (address %p): thread %d (warp %d) %s at %s, then %s %s at %s "
             "with no barrier%s between",
             kind, r.what.c_str(), offset, static_cast<const void*>(r.lo + offset), (int)earlier.thread,
             (int)earlier.warp, describe(earlier_write, kWhat[earlier.what]).c_str(),
             source_line(reinterpret_cast<const void*>(text_base() + earlier.pc)).c_str(),
             l.name ? l.name(l.self).c_str() : "a thread", describe(write, what).c_str(), source_line(pc).c_str(),
             earlier.warp == l.warp ? " or warp synchronisation" : "");
    if (in_collective) collective_fault(buf);
    device_fault(buf);
}

Region* region_of(const char* p) {
    for (Region& r : g_regions)
        if (p >= r.lo && p < r.lo + r.bytes) return &r;
    return nullptr;
}

} // namespace

bool enabled() { return g_enabled; }
void set_enabled(bool on) {
    g_enabled = on;
    update_window();
}

void begin_block(const char*, int warps) {
    g_barrier = 0;
    g_warp_epoch.assign(warps, 0);
    g_regions.clear();
    g_region_lo = g_region_hi = nullptr;
    update_window();
}
void add_shared(const void* p, size_t bytes, const std::string& what) {
    if (!bytes) return;
    const char* lo = static_cast<const char*>(p);
    g_regions.push_back({lo, bytes, what, nullptr});
    if (!g_region_lo || lo < g_region_lo) g_region_lo = lo;
    if (!g_region_hi || lo + bytes > g_region_hi) g_region_hi = lo + bytes;
    update_window();
}
void end_block() {
    g_regions.clear();
    g_region_lo = g_region_hi = nullptr;
    update_window();
    detail::current = nullptr;
}
void barrier() { g_barrier++; }
void warp_sync(int warp) {
    if (warp >= 0 && warp < (int)g_warp_epoch.size()) g_warp_epoch[warp]++;
}
uint64_t sync_stamp(int warp) {
    return (uint64_t)g_barrier << 32 | (warp >= 0 && warp < (int)g_warp_epoch.size() ? g_warp_epoch[warp] : 0);
}
void set_current(const Lane* lane) { detail::current = lane; }
const Lane* current() { return detail::current; }

void access(const void* p, size_t n, bool write, const void* pc, const char* what, const Lane& l,
            bool in_collective) {
    const char* c = static_cast<const char*>(p);
    if (c >= detail::hi || c + n <= detail::lo) return;
    Region* r = region_of(c);
    if (!r) return;
    if (!r->shadow) r->shadow.reset(new Shadow[r->bytes]());
    const Access now{g_barrier + 1, g_warp_epoch[l.warp], pc_offset(pc), (uint16_t)l.linear, (uint8_t)l.warp,
                     what_index(what)};
    const size_t first = c - r->lo, last = std::min(first + n, r->bytes);
    for (size_t i = first; i < last; i++) {
        Shadow& s = r->shadow[i];
        const auto conflicts = [&](const Access& a) { return a.bar && a.thread != l.linear && !ordered(a, l); };
        if (write) {
            if (conflicts(s.w)) hazard("write-after-write", *r, i, s.w, true, l, true, pc, what, in_collective);
            if (conflicts(s.r1)) hazard("write-after-read", *r, i, s.r1, false, l, true, pc, what, in_collective);
            if (conflicts(s.r2)) hazard("write-after-read", *r, i, s.r2, false, l, true, pc, what, in_collective);
            s.w = now;
        } else {
            if (conflicts(s.w)) hazard("read-after-write", *r, i, s.w, true, l, false, pc, what, in_collective);
            if (!s.r1.bar || ordered(s.r1, l) || s.r1.thread == l.linear) s.r1 = now, s.r2 = Access{};
            else s.r2 = now;
        }
    }
}

std::string source_line(const void* pc) {
    Dl_info info{};
    char hex[32];
    snprintf(hex, sizeof hex, "%p", pc);
    if (!dladdr(pc, &info) || !info.dli_fname) return hex;
    // The call's own instruction (pc - 1), relative to the program's load address (a position-independent
    // executable); -i lists the inlined frames, innermost first.
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "addr2line -i -e '%s' %#" PRIxPTR " 2>/dev/null", info.dli_fname,
             reinterpret_cast<uintptr_t>(pc) - 1 - reinterpret_cast<uintptr_t>(info.dli_fbase));
    FILE* f = popen(cmd, "r");
    if (!f) return hex;
    std::vector<std::string> frames;
    char line[4096];
    const std::string root = getcwd(line, sizeof line) ? std::string(line) + "/" : std::string("/");
    while (fgets(line, sizeof line, f)) {
        std::string s(line);
        while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
        const size_t cut = s.find(" (discriminator");
        if (cut != std::string::npos) s.erase(cut);
        // Paths from the project's root: the emulated build compiles rewritten copies (build/emu/src/...) whose
        // lines are the originals'.
        const size_t src = s.find("/emu/src/");
        if (src != std::string::npos) s.erase(0, src + 9);
        if (s.compare(0, root.size(), root) == 0) s.erase(0, root.size());
        frames.push_back(s);
    }
    pclose(f);
    if (frames.empty() || frames[0].rfind("??", 0) == 0) return hex;
    std::string out = frames[0];
    if (frames.size() > 1) out += " (inlined into " + frames.back() + ")";
    return out;
}

} // namespace emu::race

// ------------------------------------------------------------------------------------------- instrumentation
// GCC's -fsanitize=thread calls these before each load and store of the instrumented code (the plain emulated
// build's kernels and tests); without the ThreadSanitizer runtime they are ours. Host code (no running lane)
// returns at once.
namespace {
inline void observe(const void* p, size_t n, bool write, const void* pc) {
    namespace d = emu::race::detail;
    const emu::race::Lane* l = d::current;
    if (!l) return;
    const char* c = static_cast<const char*>(p);
    if (c < d::hi && c + n > d::lo) emu::race::access(p, n, write, pc, "", *l, false);
    if (emu::count::detail::on)
        emu::count::access(p, n, write, pc, l->linear, l->warp, emu::race::sync_stamp(l->warp), emu::count::Kind::plain);
}
} // namespace

namespace emu {
// emu.h: not inlined, so that the return address is the kernel's line; the copy itself is not instrumented.
__attribute__((noinline)) void load_bytes(void* dst, const void* src, size_t n) {
    observe(src, n, false, __builtin_return_address(0));
    std::memcpy(dst, src, n);
}
__attribute__((noinline)) void store_bytes(void* dst, const void* src, size_t n) {
    observe(dst, n, true, __builtin_return_address(0));
    std::memcpy(dst, src, n);
}
} // namespace emu

#define LLMC_EMU_TSAN_SIZED(n)                                                                                         \
    void __tsan_read##n(void* p) { observe(p, n, false, __builtin_return_address(0)); }                                \
    void __tsan_write##n(void* p) { observe(p, n, true, __builtin_return_address(0)); }                                \
    void __tsan_unaligned_read##n(void* p) { observe(p, n, false, __builtin_return_address(0)); }                      \
    void __tsan_unaligned_write##n(void* p) { observe(p, n, true, __builtin_return_address(0)); }                      \
    void __tsan_volatile_read##n(void* p) { observe(p, n, false, __builtin_return_address(0)); }                       \
    void __tsan_volatile_write##n(void* p) { observe(p, n, true, __builtin_return_address(0)); }

extern "C" {
LLMC_EMU_TSAN_SIZED(1)
LLMC_EMU_TSAN_SIZED(2)
LLMC_EMU_TSAN_SIZED(4)
LLMC_EMU_TSAN_SIZED(8)
LLMC_EMU_TSAN_SIZED(16)
void __tsan_read_range(void* p, unsigned long n) { observe(p, n, false, __builtin_return_address(0)); }
void __tsan_write_range(void* p, unsigned long n) { observe(p, n, true, __builtin_return_address(0)); }
void __tsan_init() {}
void __tsan_func_entry(void*) {}
void __tsan_func_exit() {}
void __tsan_vptr_update(void**, void*) {}
void __tsan_vptr_read(void**) {}
}

// Atomic operations of the instrumented code (std::atomic, shared_ptr's counts) become these calls: performed here,
// sequentially consistent, and not observed (atomics are not hazards).
#define LLMC_EMU_TSAN_ATOMIC(bits, T)                                                                                  \
    T __tsan_atomic##bits##_load(const volatile T* a, int) { return __atomic_load_n(a, __ATOMIC_SEQ_CST); }           \
    void __tsan_atomic##bits##_store(volatile T* a, T v, int) { __atomic_store_n(a, v, __ATOMIC_SEQ_CST); }            \
    T __tsan_atomic##bits##_exchange(volatile T* a, T v, int) { return __atomic_exchange_n(a, v, __ATOMIC_SEQ_CST); } \
    T __tsan_atomic##bits##_fetch_add(volatile T* a, T v, int) { return __atomic_fetch_add(a, v, __ATOMIC_SEQ_CST); } \
    T __tsan_atomic##bits##_fetch_sub(volatile T* a, T v, int) { return __atomic_fetch_sub(a, v, __ATOMIC_SEQ_CST); } \
    T __tsan_atomic##bits##_fetch_and(volatile T* a, T v, int) { return __atomic_fetch_and(a, v, __ATOMIC_SEQ_CST); } \
    T __tsan_atomic##bits##_fetch_or(volatile T* a, T v, int) { return __atomic_fetch_or(a, v, __ATOMIC_SEQ_CST); }   \
    T __tsan_atomic##bits##_fetch_xor(volatile T* a, T v, int) { return __atomic_fetch_xor(a, v, __ATOMIC_SEQ_CST); } \
    T __tsan_atomic##bits##_fetch_nand(volatile T* a, T v, int) {                                                     \
        return __atomic_fetch_nand(a, v, __ATOMIC_SEQ_CST);                                                            \
    }                                                                                                                  \
    int __tsan_atomic##bits##_compare_exchange_strong(volatile T* a, T* c, T v, int, int) {                          \
        return __atomic_compare_exchange_n(a, c, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);                        \
    }                                                                                                                  \
    int __tsan_atomic##bits##_compare_exchange_weak(volatile T* a, T* c, T v, int, int) {                            \
        return __atomic_compare_exchange_n(a, c, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);                        \
    }                                                                                                                  \
    T __tsan_atomic##bits##_compare_exchange_val(volatile T* a, T c, T v, int, int) {                                 \
        __atomic_compare_exchange_n(a, &c, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);                              \
        return c;                                                                                                      \
    }

extern "C" {
LLMC_EMU_TSAN_ATOMIC(8, char)
LLMC_EMU_TSAN_ATOMIC(16, short)
LLMC_EMU_TSAN_ATOMIC(32, int)
LLMC_EMU_TSAN_ATOMIC(64, long)
void __tsan_atomic_thread_fence(int) { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
void __tsan_atomic_signal_fence(int) { __atomic_signal_fence(__ATOMIC_SEQ_CST); }
}
