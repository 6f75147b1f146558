/*
 * Memory counters of the emulated runtime: per kernel launch, what Nsight Compute's memory workload analysis
 * counts, computed from the addresses the emulated threads touch (doc/testing.md, "Counters"). Access counts, not
 * time; labelled as emulated wherever they are shown.
 *
 * A warp-level instruction is the accesses of one warp's lanes at the same site (the return address of the
 * instrumentation callback, or of the emulated cp.async) with the same per-lane occurrence count since the lane's
 * last barrier or warp collective: the emulator does not run lanes in lockstep, so this key stands for "the same
 * dynamic instruction". It mis-groups when a lane skips an occurrence that other lanes execute and then executes a
 * later one between the same two synchronisation points (a divergent loop trip): the later access joins the earlier
 * instruction (EmuRuntime.CountersGroupDivergentLanesByOccurrence shows it).
 *
 * Definitions (ncu's metric each field stands for, in parentheses):
 *  - global loads and stores: one request per warp-level instruction, and the 32-byte sectors its lanes touch
 *    (l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum, l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum, and _op_st);
 *    cp.async's global reads likewise (..._op_ldgsts);
 *  - shared loads and stores (and cp.async's shared writes): wavefronts and bank conflicts. Shared memory has 32
 *    banks of 4 bytes; a request of 4-byte or narrower accesses is one phase, of 8-byte accesses two (half-warps),
 *    of 16-byte accesses four (quarter-warps); a phase takes as many wavefronts as the most distinct 4-byte words
 *    any bank holds among its lanes' accesses (lanes reading the same word share it: the broadcast rule), and the
 *    conflicts are the wavefronts beyond one per phase (l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum,
 *    l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum, and _op_st);
 *  - ldmatrix .x4: one instruction (smsp__sass_inst_executed_op_ldsm.sum) of four phases, one per 8x8 matrix (its
 *    8 rows of 16 bytes), with wavefronts and conflicts as above;
 *  - mma.sync m16n8k16: one instruction, 2 x 16 x 8 x 16 = 4096 tensor operations
 *    (sm__ops_path_tensor_src_bf16_dst_fp32.sum counts these operations);
 *  - DRAM bounds: the distinct 32-byte sectors the launch reads (writes), times 32 bytes, is a lower bound of
 *    dram__bytes_read.sum (_write.sum): an infinite L2; the sum of the requests' sectors, times 32, an upper bound.
 */
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace emu::count {

struct Launch {
    std::string kernel;
    std::string context;   // what set_context's function said when the launch was queued ("" without one)
    bool counted = true;   // false: a library call the emulator runs as host code (cuBLASLt, CUB): nothing counted
    uint64_t blocks = 0, threads = 0;
    uint64_t ld_requests = 0, ld_sectors = 0, st_requests = 0, st_sectors = 0;
    uint64_t ldgsts_requests = 0, ldgsts_sectors = 0;
    uint64_t shared_ld_requests = 0, shared_ld_wavefronts = 0, shared_ld_conflicts = 0;
    uint64_t shared_st_requests = 0, shared_st_wavefronts = 0, shared_st_conflicts = 0;
    uint64_t ldsm = 0, ldsm_wavefronts = 0, ldsm_conflicts = 0;
    uint64_t mma = 0, tensor_ops = 0;
    // Global bytes the lanes asked for, and the sectors a perfectly coalesced request of those bytes would take
    // (each request's distinct bytes / 32, rounded up): the ideal that sectors per request is measured against.
    uint64_t ld_bytes = 0, st_bytes = 0, ldgsts_bytes = 0;
    uint64_t ld_ideal_sectors = 0, st_ideal_sectors = 0, ldgsts_ideal_sectors = 0;
    uint64_t unique_read_sectors = 0, unique_write_sectors = 0; // DRAM lower bounds, in sectors
};

// Counting is off until start(); stop() returns the launches run since, in order, and turns it off.
void start();
std::vector<Launch> stop();
// What each launch is attributed to (a model's sub-block, say), asked when the launch is queued (a graph's
// nodes keep the context of their capture); an empty function: none.
void set_context(std::function<std::string()> f);

namespace detail {
inline bool on = false;
} // namespace detail

// From the runtime and the instruction emulations.
enum class Kind { plain, ldgsts };
std::string context(); // set_context's answer while counting, else ""
void begin_launch(const char* kernel, const std::string& context);
// A library call run as host code (enqueue_host_op), listed as not counted.
void host_call(const char* what, const std::string& context);
void end_launch();
void begin_block(int threads);
void end_block();
// One lane's access at `pc`; stamp: the lane's synchronisation point (barrier and warp epochs).
void access(const void* p, size_t n, bool write, const void* pc, int lane, int warp, uint64_t stamp, Kind kind);
// A warp's ldmatrix.x4 (its 32 row addresses) and mma.sync.
void ldmatrix(const void* const rows[32]);
void mma();

// The wavefronts of one phase of shared accesses: the most distinct 4-byte words in one bank.
int wavefronts(const std::vector<std::pair<uintptr_t, size_t>>& phase);

} // namespace emu::count

// Racecheck and the counters see plain loads and stores through the plain emulated build's instrumentation
// (-fsanitize=thread's callbacks); the AddressSanitizer build has none. A test that needs them starts with this.
#ifdef __SANITIZE_THREAD__
#define REQUIRE_INSTRUMENTATION()
#else
#define REQUIRE_INSTRUMENTATION() GTEST_SKIP() << "needs the plain emulated build's instrumentation"
#endif
