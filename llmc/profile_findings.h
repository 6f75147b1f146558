/*
 * The findings engine: what limits this run, ranked by the time at stake per step, each finding with its
 * evidence (numbers from the report) and a concrete next step. build_report (llmc/profile_report.h) calls
 * find_limits last, so every table of the report is filled. Rules:
 *   roofline      a sub-block far below its roofline ceiling (time lost against its floor)
 *   launch_bound  many small GPU gaps while the CPU is inside kernel launch calls
 *   sync_stall    the GPU idle while the CPU waits in a synchronisation call
 *   memcpy        host<->device copies on the critical path (alone on the GPU, or the CPU in a copy call
 *                 while the GPU idles)
 *   occupancy     non-library kernels whose registers per thread cap their theoretical occupancy
 *   throttle      power or thermal throttling (NVML clocks event reasons) or SM clocks well below the maximum
 *   records       dropped CUPTI records (always first: every other number is low)
 * The time at stake is an estimate of what fixing the cause could save; thresholds keep noise out.
 */
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "llmc/profile_report.h"
#include "llmc/utils.h"

namespace llmc::prof {

// sm_90 per-SM limits for theoretical occupancy (CUDA occupancy calculator, compute capability 9.0).
struct SmLimits {
    int regs = 65536, threads = 2048, blocks = 32;
    int smem = 228 * 1024;            // shared memory per SM
    int smem_reserved_per_block = 1024; // the runtime reserves 1 KB per block
    int reg_alloc_unit = 256;          // registers are allocated per warp in units of 256
};

struct Occupancy {
    double occupancy = 0;  // active warps / max warps per SM
    int blocks = 0;        // resident blocks per SM
    const char* limit = ""; // "registers", "threads", "shared memory", "blocks"
    double without_registers = 0; // occupancy if registers did not limit it
};

// Theoretical occupancy of a kernel launch from its resources (as the occupancy calculator computes it).
inline Occupancy theoretical_occupancy(int regs_per_thread, int threads_per_block, int smem_per_block,
                                       const SmLimits& sm = {}) {
    Occupancy o;
    if (threads_per_block <= 0) return o;
    const int max_warps = sm.threads / 32, warps = (threads_per_block + 31) / 32;
    const int by_threads = max_warps / warps;
    const int regs_per_warp = (regs_per_thread * 32 + sm.reg_alloc_unit - 1) / sm.reg_alloc_unit * sm.reg_alloc_unit;
    const int by_regs = regs_per_warp > 0 ? sm.regs / regs_per_warp / warps : sm.blocks;
    const int by_smem = smem_per_block > 0 ? sm.smem / (smem_per_block + sm.smem_reserved_per_block) : sm.blocks;
    const int others = std::min({sm.blocks, by_threads, by_smem});
    o.blocks = std::min(others, by_regs);
    o.limit = o.blocks == by_regs && by_regs < others ? "registers"
              : o.blocks == by_smem && by_smem < sm.blocks ? "shared memory"
              : o.blocks == by_threads && by_threads < sm.blocks ? "threads"
                                                                 : "blocks";
    o.occupancy = (double)o.blocks * warps / max_warps;
    o.without_registers = (double)others * warps / max_warps;
    return o;
}

// NVML clocks event reasons that mean throttling (the idle, application-clock and display bits do not).
struct ThrottleBit {
    uint64_t mask;
    const char* name;
};
inline const std::vector<ThrottleBit>& throttle_bits() {
    static const std::vector<ThrottleBit> bits = {{0x4, "SW power cap"},    {0x8, "HW slowdown"},
                                                  {0x20, "SW thermal"},     {0x40, "HW thermal"},
                                                  {0x80, "HW power brake"}};
    return bits;
}
inline std::string throttle_names(uint64_t reasons) {
    std::string s;
    for (const ThrottleBit& b : throttle_bits())
        if (reasons & b.mask) s += (s.empty() ? "" : ", ") + std::string(b.name);
    return s;
}

namespace findings_detail {

inline bool contains(const std::string& s, const char* key) { return s.find(key) != std::string::npos; }
inline bool is_launch(const std::string& api) {
    return contains(api, "LaunchKernel") || contains(api, "cuLaunch") || contains(api, "LaunchCooperative");
}
inline bool is_sync(const std::string& api) { return contains(api, "Synchronize"); }
inline bool is_copy(const std::string& api) { return contains(api, "Memcpy"); }

// Thresholds: a finding needs this much at stake to be worth reading.
constexpr double MIN_SHARE = 0.02;       // of the step wall time
constexpr double MAX_PCT_OF_ROOF = 50;   // sub-blocks achieving less of their ceiling
constexpr double MIN_SMALL_GAPS = 20;    // gaps < 100 us per step for launch-bound
constexpr double MAX_OCCUPANCY = 0.5;
constexpr double MIN_KERNEL_SHARE = 0.05; // of GPU time, for occupancy
constexpr double MIN_THROTTLED = 0.10;    // of samples
constexpr double MIN_CLOCK_RATIO = 0.90;  // average over maximum SM clock

} // namespace findings_detail

// The gaps of at least min_ns in the union of GPU activity inside each step (step edges included).
inline std::vector<std::pair<uint64_t, uint64_t>> gpu_gaps(const ProfileRecords& rec, uint64_t min_ns) {
    std::vector<std::pair<uint64_t, uint64_t>> gaps;
    for (const StepRecord& s : rec.steps) {
        std::vector<std::pair<uint64_t, uint64_t>> busy;
        auto add = [&](uint64_t a, uint64_t b) {
            if (a >= s.start_ns && a < s.end_ns) busy.push_back({a, std::min(b, s.end_ns)});
        };
        for (const KernelRecord& k : rec.kernels) add(k.start_ns, k.end_ns);
        for (const MemcpyRecord& m : rec.memcpys) add(m.start_ns, m.end_ns);
        for (const MemsetRecord& m : rec.memsets) add(m.start_ns, m.end_ns);
        uint64_t cursor = s.start_ns;
        for (const auto& iv : interval_union(std::move(busy))) {
            if (iv.first >= cursor + min_ns) gaps.push_back({cursor, iv.first});
            cursor = std::max(cursor, iv.second);
        }
        if (s.end_ns >= cursor + min_ns) gaps.push_back({cursor, s.end_ns});
    }
    return gaps;
}

inline std::vector<Finding> find_limits(const Report& r, const ProfileRecords& rec) {
    using namespace findings_detail;
    std::vector<Finding> out;
    const double steps = std::max(1, r.num_steps);
    const double step_ms = r.wall_s * 1e3 / steps;
    const double min_ms = MIN_SHARE * step_ms;
    auto idle_in = [&](bool (*pred)(const std::string&), long* gaps) {
        double us = 0;
        for (const NamedTime& c : r.idle_by_cpu)
            if (pred(c.name)) us += c.total_us, *gaps += c.calls;
        return us / 1e3 / steps;
    };

    // (a) sub-blocks far below their roofline ceiling, by time lost against the floor.
    std::vector<const SubBlockRow*> lossy;
    for (const SubBlockRow& s : r.subblocks)
        if (s.subblock >= 0 && std::isfinite(s.roof.floor_s) && std::isfinite(s.roof.time_s) &&
            s.roof.pct_of_roofline < MAX_PCT_OF_ROOF && (s.roof.time_s - s.roof.floor_s) * 1e3 >= min_ms)
            lossy.push_back(&s);
    std::sort(lossy.begin(), lossy.end(),
              [](auto* a, auto* b) { return a->roof.time_s - a->roof.floor_s > b->roof.time_s - b->roof.floor_s; });
    // The CPU trainer's sub-blocks are plain loops, not kernels and GEMM libraries: its advice differs.
    const bool cpu = r.context.device_kind == "CPU";
    for (size_t i = 0; i < std::min<size_t>(3, lossy.size()); i++) {
        const SubBlockRow& s = *lossy[i];
        const bool compute = std::string(s.roof.bound) == "compute";
        const char* next = cpu ? (compute ? "compute-bound on the CPU: block the loops for cache, let the compiler "
                                            "vectorise the inner loop (SIMD), run more OpenMP threads"
                                          : "memory-bound on the CPU: fuse it with its neighbours so data is read "
                                            "once, block it so rows stay in cache")
                         : compute ? "compute-bound: check the GEMM shapes and cuBLASLt algorithm (tile fit, bf16 "
                                     "tensor cores), fuse bias/GELU into the GEMM epilogue"
                                   : "memory-bound: fuse it with its neighbours to cut DRAM passes, use 128-bit "
                                     "vector loads, keep activations in bf16";
        Finding f{"roofline",
                  strprintf("%s %s runs at %.0f%% of its %s roofline", subblock_label(s.subblock).c_str(),
                            phase_label(s.phase).c_str(), s.roof.pct_of_roofline, s.roof.bound),
                  strprintf("%.3f ms per step against a floor of %.3f ms (%.1f TFLOP/s, %.0f GB/s, %.1f FLOP/B)",
                            s.roof.time_s * 1e3, s.roof.floor_s * 1e3, s.roof.tflops, s.roof.gbps,
                            s.roof.intensity),
                  next, (s.roof.time_s - s.roof.floor_s) * 1e3};
        out.push_back(f);
    }

    // (b) launch-bound: many small gaps with the CPU inside launch calls: the GPU waits for work.
    long launch_gaps = 0;
    const double launch_ms = idle_in(is_launch, &launch_gaps);
    const double small_gaps = r.gap_sizes.size() >= 2 ? (r.gap_sizes[0].calls + r.gap_sizes[1].calls) / steps : 0;
    if (launch_ms >= min_ms && small_gaps >= MIN_SMALL_GAPS) {
        long kernels = 0;
        double kernel_us = 0;
        for (const KernelRow& k : r.kernels)
            if (k.category != "memcpy" && k.category != "memset") kernels += k.calls, kernel_us += k.total_us;
        out.push_back({"launch_bound", "launch-bound: the GPU waits for the CPU to launch kernels",
                       strprintf("%.0f gaps < 100 us per step; %.3f ms per step idle with the CPU in kernel launch "
                                 "calls (%ld gaps); %.0f kernels per step averaging %.1f us",
                                 small_gaps, launch_ms, launch_gaps, kernels / steps,
                                 kernels ? kernel_us / kernels : 0.0),
                       "capture the step in a CUDA graph, fuse small kernels (elementwise into GEMM epilogues), "
                       "or raise B so each kernel runs longer than its launch",
                       launch_ms});
    }

    // (c) sync stalls: the GPU idle while the CPU is blocked in a synchronisation call. Gaps under 10 us are
    // launch latency between queued kernels (the CPU often waits through them): only longer ones count.
    long sync_gaps = 0;
    double sync_ms = 0;
    {
        std::vector<std::pair<uint64_t, uint64_t>> sync_calls;
        for (const ApiRecord& a : rec.api)
            if (is_sync(a.name)) sync_calls.push_back({a.start_ns, a.end_ns});
        sync_calls = interval_union(std::move(sync_calls));
        for (const auto& g : gpu_gaps(rec, 10000)) {
            uint64_t overlap = 0;
            for (const auto& c : sync_calls) {
                uint64_t s0 = std::max(c.first, g.first), e0 = std::min(c.second, g.second);
                if (e0 > s0) overlap += e0 - s0;
            }
            if (overlap) sync_gaps++, sync_ms += overlap / 1e6 / steps;
        }
    }
    if (sync_ms >= min_ms) {
        std::string calls;
        for (const NamedTime& c : r.idle_by_cpu)
            if (is_sync(c.name)) calls += (calls.empty() ? "" : ", ") + c.name;
        out.push_back({"sync_stall", "sync stalls: the GPU idles while the CPU waits on it",
                       strprintf("%.3f ms per step idle with the CPU in %s (%ld gaps); the CPU is blocked in "
                                 "synchronisation %.1f%% of the window",
                                 sync_ms, calls.c_str(), sync_gaps, r.sync_pct),
                       "queue the next step's work before waiting: read the loss one step late from pinned "
                       "memory with an event, remove implicit syncs (pageable cudaMemcpy, cudaMalloc/cudaFree "
                       "in the step)",
                       sync_ms});
    }

    // (d) memcpy on the critical path: HtoD/DtoH time with nothing else on the GPU, plus GPU idle time with
    // the CPU inside a copy call (a synchronous copy holds the CPU back from launching).
    {
        std::vector<StepRecord> st = rec.steps;
        std::sort(st.begin(), st.end(), [](const StepRecord& a, const StepRecord& b) { return a.start_ns < b.start_ns; });
        auto in_window = [&](uint64_t t) { return st.empty() || report_detail::step_of(st, t) >= 0; };
        std::vector<std::pair<uint64_t, uint64_t>> busy; // everything else on the GPU
        for (const KernelRecord& k : rec.kernels)
            if (in_window(k.start_ns)) busy.push_back({k.start_ns, k.end_ns});
        for (const MemcpyRecord& m : rec.memcpys)
            if (in_window(m.start_ns) && m.kind != CopyKind::HtoD && m.kind != CopyKind::DtoH)
                busy.push_back({m.start_ns, m.end_ns});
        busy = interval_union(std::move(busy));
        double exposed_us = 0, copy_us = 0;
        long copies = 0;
        uint64_t copy_bytes = 0;
        for (const MemcpyRecord& m : rec.memcpys) {
            if (!in_window(m.start_ns) || (m.kind != CopyKind::HtoD && m.kind != CopyKind::DtoH) || m.end_ns <= m.start_ns)
                continue;
            uint64_t overlap = 0;
            for (const auto& b : busy) {
                uint64_t s = std::max(b.first, m.start_ns), e = std::min(b.second, m.end_ns);
                if (e > s) overlap += e - s;
            }
            copies++, copy_bytes += m.bytes;
            copy_us += (m.end_ns - m.start_ns) / 1e3;
            exposed_us += (m.end_ns - m.start_ns - overlap) / 1e3;
        }
        long api_gaps = 0;
        const double api_ms = idle_in(is_copy, &api_gaps);
        const double exposed_ms = exposed_us / 1e3 / steps;
        if (exposed_ms + api_ms >= min_ms)
            out.push_back({"memcpy", "host<->device copies on the critical path",
                           strprintf("%ld HtoD/DtoH copies per step (%.1f KB, %.3f ms), %.3f ms of it alone on the "
                                     "GPU; %.3f ms per step idle with the CPU in a copy call",
                                     (long)(copies / steps), copy_bytes / steps / 1e3, copy_us / 1e3 / steps,
                                     exposed_ms, api_ms),
                           "copy from pinned host memory with cudaMemcpyAsync on a side stream, prefetch the next "
                           "batch during the current step, and read results back one step late",
                           exposed_ms + api_ms});
    }

    // (e) occupancy capped by registers, for kernels this project writes (library GEMMs trade occupancy for
    // registers on purpose). The time at stake assumes time shrinks with occupancy up to the uncapped one,
    // halved: latency hiding rarely scales linearly.
    {
        struct KernelUse {
            double us = 0;
            long calls = 0;
            Occupancy occ;
            int regs = 0, threads = 0, smem = 0;
        };
        std::map<std::string, KernelUse> by_name;
        std::vector<StepRecord> st = rec.steps;
        std::sort(st.begin(), st.end(), [](const StepRecord& a, const StepRecord& b) { return a.start_ns < b.start_ns; });
        for (const KernelRecord& k : rec.kernels) {
            if (!st.empty() && report_detail::step_of(st, k.start_ns) < 0) continue;
            if (k.registers_per_thread <= 0 || kernel_category(k.name) == "gemm") continue;
            KernelUse& u = by_name[k.name];
            u.us += k.end_ns > k.start_ns ? (k.end_ns - k.start_ns) / 1e3 : 0;
            u.calls++;
            u.regs = k.registers_per_thread, u.threads = k.block[0] * k.block[1] * k.block[2];
            u.smem = k.static_smem + k.dynamic_smem;
            u.occ = theoretical_occupancy(u.regs, u.threads, u.smem);
        }
        for (const auto& [name, u] : by_name) {
            const double ms = u.us / 1e3 / steps;
            if (std::string(u.occ.limit) != "registers" || u.occ.occupancy > MAX_OCCUPANCY ||
                u.us < MIN_KERNEL_SHARE * r.gpu_time_us)
                continue;
            const double stake = ms * (1 - u.occ.occupancy / u.occ.without_registers) / 2;
            out.push_back({"occupancy",
                           strprintf("%s: occupancy %.0f%% limited by registers", short_kernel_name(name).c_str(),
                                     100 * u.occ.occupancy),
                           strprintf("%d registers/thread x %d threads/block -> %d blocks/SM (%.0f%% without the "
                                     "register limit); %.3f ms per step, %.0f%% of GPU time",
                                     u.regs, u.threads, u.occ.blocks, 100 * u.occ.without_registers, ms,
                                     r.gpu_time_us > 0 ? 100 * u.us / r.gpu_time_us : 0.0),
                           "cap registers with __launch_bounds__(threads, minBlocksPerSM) or -maxrregcount, or "
                           "shrink per-thread state (fewer live accumulators, smaller unrolls)",
                           stake});
        }
    }

    // (f) throttling: samples with power or thermal throttle reasons, or SM clocks well below the maximum.
    {
        size_t n = 0, throttled = 0;
        uint64_t reasons = 0;
        double clock_sum = 0;
        std::vector<StepRecord> st = rec.steps;
        std::sort(st.begin(), st.end(), [](const StepRecord& a, const StepRecord& b) { return a.start_ns < b.start_ns; });
        uint64_t mask = 0;
        for (const ThrottleBit& b : throttle_bits()) mask |= b.mask;
        for (const PowerSample& p : rec.power) {
            if (!st.empty() && report_detail::step_of(st, p.t_ns) < 0) continue;
            n++, clock_sum += p.sm_clock_mhz;
            if (p.throttle_reasons & mask) throttled++, reasons |= p.throttle_reasons & mask;
        }
        int max_clock = rec.max_sm_clock_mhz; // unknown: the highest clock seen stands in
        for (const PowerSample& p : rec.power) max_clock = rec.max_sm_clock_mhz > 0 ? max_clock : std::max(max_clock, p.sm_clock_mhz);
        const double avg_clock = n ? clock_sum / n : 0;
        const double ratio = max_clock > 0 && avg_clock > 0 ? avg_clock / max_clock : 1;
        if (n > 0 && ((double)throttled / n >= MIN_THROTTLED || ratio < MIN_CLOCK_RATIO)) {
            double busy_ms = 0;
            for (const StepRow& s : r.steps) busy_ms += s.gpu_busy_ms;
            out.push_back(
                {"throttle",
                 throttled ? "the GPU throttles (" + throttle_names(reasons) + ")"
                           : std::string("SM clocks well below the maximum"),
                 strprintf("%zu of %zu samples throttled; SM clock %.0f MHz on average%s; peak %.0f W, max %d C",
                           throttled, n, avg_clock,
                           max_clock > 0 ? strprintf(" of %d MHz (%.0f%%)", max_clock, 100 * ratio).c_str() : "",
                           r.power.peak_w, r.power.max_temperature_c),
                 "check the power limit and cooling (nvidia-smi -q -d PERFORMANCE,POWER,TEMPERATURE); compare "
                 "runs at the same clocks, and judge kernels by FLOPs per joule when power-capped",
                 busy_ms / steps * (1 - ratio)});
        }
    }

    std::stable_sort(out.begin(), out.end(), [](const Finding& a, const Finding& b) { return a.ms_per_step > b.ms_per_step; });
    if (r.dropped_records > 0)
        out.insert(out.begin(), {"records", "activity records were dropped",
                                 strprintf("%llu CUPTI records lost to full buffers: every total is low",
                                           (unsigned long long)r.dropped_records),
                                 "profile fewer steps (--steps) or a smaller model (--layers)", 0});
    return out;
}

} // namespace llmc::prof
