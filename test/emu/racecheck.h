/*
 * Racecheck of the emulated runtime: compute-sanitizer racecheck's shared-memory hazards, found from the order the
 * program imposes, not from the order the emulator happened to run threads in (doc/testing.md, "Racecheck").
 *
 * Every byte of a block's shared memory keeps its last write and its last two reads from different threads, each
 * with the thread, its warp, the block's barrier epoch (the __syncthreads released so far) and the warp's epoch
 * (the warp collectives released so far: __syncwarp, shuffles, votes, ldmatrix, mma). Two accesses by different
 * threads are ordered when a barrier lies between them, or, in one warp, a warp collective; a write unordered with
 * another thread's write or read, or a read unordered with another thread's write, is a hazard (WAW, WAR, RAW):
 * a fault naming the kernel, both threads, both source lines and the address.
 *
 * What feeds it:
 *  - the emulated kernels' own loads and stores: the plain emulated build compiles the kernels and tests with
 *    GCC's ThreadSanitizer instrumentation (-fsanitize=thread, without its runtime), whose __tsan_readN/writeN
 *    callbacks land here (racecheck.cpp defines them); the AddressSanitizer build has no such callbacks (GCC
 *    cannot combine the two), so racecheck runs in the plain build only;
 *  - cp.async (runtime.cpp): its destination is written by the issuing thread when the copy is issued (a DMA may
 *    write it any time until the wait) and again when its wait_group lands it;
 *  - ldmatrix (ptx.cpp): each lane reads the 16-byte row whose address it gave.
 * Atomics (emu.h's atomicAdd and friends) are not instrumented: they are not hazards.
 *
 * Limits: a collective whose mask names only some lanes still advances the whole warp's epoch (none of the
 * project's kernels use partial masks); a byte read by three or more threads in one epoch keeps two of them, so a
 * later write is checked against those two (a hazard can be missed, never invented); global memory is not checked
 * (neither does compute-sanitizer's racecheck).
 */
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace emu::race {

// The thread an access belongs to: its index in the block, its warp and how to name it in a report.
struct Lane {
    int linear = 0, warp = 0;
    std::string (*name)(const void* self) = nullptr; // "block (x,y,z) thread (x,y,z)"
    const void* self = nullptr;
};

// Whether hazards are checked (LLMC_EMU_RACECHECK=0 turns racecheck off; a test may switch it; the emulated
// tests check under their first schedule only, racecheck's findings not depending on the schedule).
bool enabled();
void set_enabled(bool on);

// The block the scheduler runs now: its kernel's name and its warps. Shared memory is registered as it is made.
void begin_block(const char* kernel, int warps);
void add_shared(const void* p, size_t bytes, const std::string& what);
void end_block();
// A __syncthreads released (every thread's later accesses are ordered after every earlier one), and a warp
// collective of `warp` released.
void barrier();
void warp_sync(int warp);
// The synchronisation point a thread of `warp` is at: the barrier epoch and the warp's epoch (the counters'
// warp-level instructions are keyed by it).
uint64_t sync_stamp(int warp);

// The thread running now (null while the scheduler runs).
void set_current(const Lane* lane);
const Lane* current();
namespace detail {
// The running thread, and the running block's shared memory as one address range (empty while racecheck is off):
// the instrumentation callbacks' first test.
inline const Lane* current = nullptr;
inline const char *lo = nullptr, *hi = nullptr;
} // namespace detail

// An access of [p, p + n) by `lane` at `pc` (a return address in the code that made it); what: "" for a plain load
// or store, else the instruction ("cp.async", "ldmatrix"). Addresses outside the block's shared memory are ignored.
// A hazard throws the emulator's fault for the thread (from its fiber) or the collective (from the scheduler).
void access(const void* p, size_t n, bool write, const void* pc, const char* what, const Lane& lane,
            bool in_collective);

// "file:line" of a return address in this program (addr2line), or the address in hex when it has no line table.
std::string source_line(const void* pc);

} // namespace emu::race
