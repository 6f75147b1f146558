// The findings rules (llmc/profiler/findings.h), one function each.
#include "llmc/profiler/findings.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "llmc/util/utils.h"

namespace llmc::prof {

namespace {

bool contains(const std::string& s, const char* key) { return s.find(key) != std::string::npos; }
bool is_launch(const std::string& api) {
    return contains(api, "LaunchKernel") || contains(api, "cuLaunch") || contains(api, "LaunchCooperative");
}
bool is_sync(const std::string& api) { return contains(api, "Synchronize"); }
bool is_copy(const std::string& api) { return contains(api, "Memcpy"); }
bool is_host_copy(CopyKind k) { return k == CopyKind::HtoD || k == CopyKind::DtoH; }

// Thresholds: a finding needs this much at stake to be worth reading.
constexpr double MIN_SHARE = 0.02;        // of the step wall time
constexpr double MAX_PCT_OF_ROOF = 50;    // sub-blocks achieving less of their ceiling
constexpr double MIN_SMALL_GAPS = 20;     // gaps < 100 us per step for launch-bound
constexpr double MAX_OCCUPANCY = 0.5;
constexpr double MIN_KERNEL_SHARE = 0.05; // of GPU time, for occupancy
constexpr double MIN_THROTTLED = 0.10;    // of samples
constexpr double MIN_CLOCK_RATIO = 0.90;  // average over maximum SM clock

// Time of [a, b) covered by the sorted disjoint intervals `iv`.
uint64_t overlap_ns(const std::vector<Interval>& iv, uint64_t a, uint64_t b) {
    uint64_t overlap = 0;
    for (const Interval& x : iv) {
        uint64_t s = std::max(x.first, a), e = std::min(x.second, b);
        if (e > s) overlap += e - s;
    }
    return overlap;
}

const char* roofline_advice(bool cpu, bool compute) {
    // The CPU trainer's sub-blocks are plain loops, not kernels and GEMM libraries: its advice differs.
    // A profile runs one thread count, so it cannot say whether more threads would help (on a shared machine
    // fewer often run faster): the advice is what the data supports, the loop's own code.
    if (cpu)
        return compute ? "compute-bound on the CPU: block the loops for cache and let the compiler vectorise the "
                         "inner loop (SIMD); compare OMP_NUM_THREADS settings with a profile each before changing it"
                       : "memory-bound on the CPU: fuse it with its neighbours so data is read once, block it so rows "
                         "stay in cache";
    return compute ? "compute-bound: check the GEMM shapes and cuBLASLt algorithm (tile fit, bf16 tensor cores), fuse "
                     "bias/GELU into the GEMM epilogue"
                   : "memory-bound: fuse it with its neighbours to cut DRAM passes, use 128-bit vector loads, keep "
                     "activations in bf16";
}

} // namespace

Occupancy theoretical_occupancy(int regs_per_thread, int threads_per_block, int smem_per_block, const SmLimits& sm) {
    Occupancy o;
    if (threads_per_block <= 0 || !sm.known()) return o;
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

const std::vector<ThrottleBit>& throttle_bits() {
    static const std::vector<ThrottleBit> bits = {{0x4, "SW power cap"},
                                                  {0x8, "HW slowdown"},
                                                  {0x20, "SW thermal"},
                                                  {0x40, "HW thermal"},
                                                  {0x80, "HW power brake"}};
    return bits;
}

std::string throttle_names(uint64_t reasons) {
    std::string s;
    for (const ThrottleBit& b : throttle_bits())
        if (reasons & b.mask) s += (s.empty() ? "" : ", ") + std::string(b.name);
    return s;
}

FindingInput::FindingInput(const Report& report, const ProfileRecords& records)
    : r(report), rec(records), window(records.steps), steps(report.cost_steps()),
      step_ms(report.wall_s * 1e3 / steps), min_ms(MIN_SHARE * step_ms) {}

double FindingInput::idle_in(bool (*pred)(const std::string&), long* gaps) const {
    double us = 0;
    for (const NamedTime& c : r.idle_by_cpu)
        if (pred(c.name)) us += c.total_us, *gaps += c.calls;
    return us / 1e3 / steps;
}

// Sub-blocks far below their roofline ceiling, by time lost against the floor (the three worst).
std::vector<Finding> roofline_rule(const FindingInput& in) {
    std::vector<const SubBlockRow*> lossy;
    for (const SubBlockRow& s : in.r.subblocks)
        if (s.subblock >= 0 && std::isfinite(s.roof.floor_s) && std::isfinite(s.roof.time_s) &&
            s.roof.pct_of_roofline < MAX_PCT_OF_ROOF && (s.roof.time_s - s.roof.floor_s) * 1e3 >= in.min_ms)
            lossy.push_back(&s);
    std::sort(lossy.begin(), lossy.end(),
              [](auto* a, auto* b) { return a->roof.time_s - a->roof.floor_s > b->roof.time_s - b->roof.floor_s; });
    const bool cpu = in.r.context.device_kind == DeviceKind::CPU;
    std::vector<Finding> out;
    for (size_t i = 0; i < std::min<size_t>(3, lossy.size()); i++) {
        const SubBlockRow& s = *lossy[i];
        out.push_back({"roofline",
                       strprintf("%s %s runs at %.0f%% of its %s roofline", subblock_label(s.subblock).c_str(),
                                 phase_label(s.phase).c_str(), s.roof.pct_of_roofline, s.roof.bound),
                       strprintf("%.3f ms per step against a floor of %.3f ms (%.1f TFLOP/s, %.0f GB/s, %.1f FLOP/B)",
                                 s.roof.time_s * 1e3, s.roof.floor_s * 1e3, s.roof.tflops, s.roof.gbps,
                                 s.roof.intensity),
                       roofline_advice(cpu, std::string(s.roof.bound) == "compute"),
                       (s.roof.time_s - s.roof.floor_s) * 1e3});
    }
    return out;
}

// Many small gaps with the CPU inside launch calls: the GPU waits for work.
std::vector<Finding> launch_bound_rule(const FindingInput& in) {
    const Report& r = in.r;
    long launch_gaps = 0;
    const double launch_ms = in.idle_in(is_launch, &launch_gaps);
    const double small_gaps =
        r.gap_sizes.size() >= 2 ? (r.gap_sizes[0].calls + r.gap_sizes[1].calls) / in.steps : 0;
    if (launch_ms < in.min_ms || small_gaps < MIN_SMALL_GAPS) return {};
    long kernels = 0;
    double kernel_us = 0;
    for (const KernelRow& k : r.kernels)
        if (k.category != Category::memcpy && k.category != Category::memset) kernels += k.calls, kernel_us += k.total_us;
    return {{"launch_bound", "launch-bound: the GPU waits for the CPU to launch kernels",
             strprintf("%.0f gaps < 100 us per step; %.3f ms per step idle with the CPU in kernel launch calls (%ld "
                       "gaps); %.0f kernels per step averaging %.1f us",
                       small_gaps, launch_ms, launch_gaps, kernels / in.steps, kernels ? kernel_us / kernels : 0.0),
             "capture the step in a CUDA graph, fuse small kernels (elementwise into GEMM epilogues), or raise B so "
             "each kernel runs longer than its launch",
             launch_ms}};
}

// The GPU idle while the CPU is blocked in a synchronisation call. Gaps under 10 us are launch latency
// between queued kernels (the CPU often waits through them): only longer ones count.
std::vector<Finding> sync_stall_rule(const FindingInput& in) {
    std::vector<Interval> sync_calls;
    for (const ApiRecord& a : in.rec.api)
        if (is_sync(a.name)) sync_calls.push_back({a.start_ns, a.end_ns});
    sync_calls = interval_union(std::move(sync_calls));
    long sync_gaps = 0;
    double sync_ms = 0;
    const StepWindow all(in.rec.steps);
    for (const StepGap& g : idle_gaps(all, busy_by_step(all, gpu_activities(in.rec)), 10000)) {
        uint64_t overlap = overlap_ns(sync_calls, g.start, g.end);
        if (overlap) sync_gaps++, sync_ms += overlap / 1e6 / in.steps;
    }
    if (sync_ms < in.min_ms) return {};
    std::string calls;
    for (const NamedTime& c : in.r.idle_by_cpu)
        if (is_sync(c.name)) calls += (calls.empty() ? "" : ", ") + c.name;
    return {{"sync_stall", "sync stalls: the GPU idles while the CPU waits on it",
             strprintf("%.3f ms per step idle with the CPU in %s (%ld gaps); the CPU is blocked in synchronisation "
                       "%.1f%% of the window",
                       sync_ms, calls.c_str(), sync_gaps, in.r.sync_pct),
             "queue the next step's work before waiting: read the loss one step late from pinned memory with an "
             "event, remove implicit syncs (pageable cudaMemcpy, cudaMalloc/cudaFree in the step)",
             sync_ms}};
}

// HtoD/DtoH time with nothing else on the GPU, plus GPU idle time with the CPU inside a copy call (a
// synchronous copy holds the CPU back from launching).
std::vector<Finding> memcpy_rule(const FindingInput& in) {
    const ProfileRecords& rec = in.rec;
    std::vector<Interval> busy; // everything else on the GPU
    for (const KernelRecord& k : rec.kernels)
        if (in.window.contains(k.start_ns)) busy.push_back({k.start_ns, k.end_ns});
    for (const MemcpyRecord& m : rec.memcpys)
        if (in.window.contains(m.start_ns) && !is_host_copy(m.kind)) busy.push_back({m.start_ns, m.end_ns});
    busy = interval_union(std::move(busy));
    double exposed_us = 0, copy_us = 0;
    long copies = 0;
    uint64_t copy_bytes = 0;
    for (const MemcpyRecord& m : rec.memcpys) {
        if (!in.window.contains(m.start_ns) || !is_host_copy(m.kind) || m.end_ns <= m.start_ns) continue;
        copies++, copy_bytes += m.bytes;
        copy_us += (m.end_ns - m.start_ns) / 1e3;
        exposed_us += (m.end_ns - m.start_ns - overlap_ns(busy, m.start_ns, m.end_ns)) / 1e3;
    }
    long api_gaps = 0;
    const double api_ms = in.idle_in(is_copy, &api_gaps);
    const double exposed_ms = exposed_us / 1e3 / in.steps;
    if (exposed_ms + api_ms < in.min_ms) return {};
    return {{"memcpy", "host<->device copies on the critical path",
             strprintf("%ld HtoD/DtoH copies per step (%.1f KB, %.3f ms), %.3f ms of it alone on the GPU; %.3f ms per "
                       "step idle with the CPU in a copy call",
                       (long)(copies / in.steps), copy_bytes / in.steps / 1e3, copy_us / 1e3 / in.steps, exposed_ms,
                       api_ms),
             "copy from pinned host memory with cudaMemcpyAsync on a side stream, prefetch the next batch during the "
             "current step, and read results back one step late",
             exposed_ms + api_ms}};
}

// Occupancy capped by registers, for kernels this project writes (library GEMMs trade occupancy for
// registers on purpose), against the device's own per-SM limits. The time at stake assumes time shrinks
// with occupancy up to the uncapped one, halved: latency hiding rarely scales linearly.
std::vector<Finding> occupancy_rule(const FindingInput& in) {
    const SmLimits& sm = in.r.context.sm;
    if (!sm.known()) return {};
    struct KernelUse {
        double us = 0;
        long calls = 0;
        Occupancy occ;
        int regs = 0, threads = 0, smem = 0;
    };
    std::map<std::string, KernelUse> by_name;
    for (const KernelRecord& k : in.rec.kernels) {
        if (!in.window.contains(k.start_ns)) continue;
        if (k.registers_per_thread <= 0 || kernel_category(k.name) == Category::gemm) continue;
        KernelUse& u = by_name[k.name];
        u.us += k.end_ns > k.start_ns ? (k.end_ns - k.start_ns) / 1e3 : 0;
        u.calls++;
        u.regs = k.registers_per_thread, u.threads = k.block[0] * k.block[1] * k.block[2];
        u.smem = k.static_smem + k.dynamic_smem;
        u.occ = theoretical_occupancy(u.regs, u.threads, u.smem, sm);
    }
    std::vector<Finding> out;
    const double gpu_us = in.r.gpu_time_us;
    for (const auto& [name, u] : by_name) {
        const double ms = u.us / 1e3 / in.steps;
        if (std::string(u.occ.limit) != "registers" || u.occ.occupancy > MAX_OCCUPANCY ||
            u.us < MIN_KERNEL_SHARE * gpu_us)
            continue;
        out.push_back({"occupancy",
                       strprintf("%s: occupancy %.0f%% limited by registers", short_kernel_name(name).c_str(),
                                 100 * u.occ.occupancy),
                       strprintf("%d registers/thread x %d threads/block -> %d blocks/SM (%.0f%% without the register "
                                 "limit); %.3f ms per step, %.0f%% of GPU time",
                                 u.regs, u.threads, u.occ.blocks, 100 * u.occ.without_registers, ms,
                                 gpu_us > 0 ? 100 * u.us / gpu_us : 0.0),
                       "cap registers with __launch_bounds__(threads, minBlocksPerSM) or -maxrregcount, or shrink "
                       "per-thread state (fewer live accumulators, smaller unrolls)",
                       ms * (1 - u.occ.occupancy / u.occ.without_registers) / 2});
    }
    return out;
}

// Samples with power or thermal throttle reasons, or SM clocks well below the maximum.
std::vector<Finding> throttle_rule(const FindingInput& in) {
    const ProfileRecords& rec = in.rec;
    size_t n = 0, throttled = 0;
    uint64_t reasons = 0, mask = 0;
    double clock_sum = 0;
    for (const ThrottleBit& b : throttle_bits()) mask |= b.mask;
    int max_clock = rec.max_sm_clock_mhz; // unknown: the highest clock seen stands in
    for (const PowerSample& p : rec.power) {
        if (rec.max_sm_clock_mhz <= 0) max_clock = std::max(max_clock, p.sm_clock_mhz);
        if (!in.window.contains(p.t_ns)) continue;
        n++, clock_sum += p.sm_clock_mhz;
        if (p.throttle_reasons & mask) throttled++, reasons |= p.throttle_reasons & mask;
    }
    const double avg_clock = n ? clock_sum / n : 0;
    const double ratio = max_clock > 0 && avg_clock > 0 ? avg_clock / max_clock : 1;
    if (n == 0 || ((double)throttled / n < MIN_THROTTLED && ratio >= MIN_CLOCK_RATIO)) return {};
    double busy_ms = 0;
    for (const StepRow& s : in.r.steps) busy_ms += s.gpu_busy_ms;
    return {{"throttle",
             throttled ? "the GPU throttles (" + throttle_names(reasons) + ")"
                       : std::string("SM clocks well below the maximum"),
             strprintf("%zu of %zu samples throttled; SM clock %.0f MHz on average%s; peak %.0f W, max %d C", throttled,
                       n, avg_clock,
                       max_clock > 0 ? strprintf(" of %d MHz (%.0f%%)", max_clock, 100 * ratio).c_str() : "",
                       in.r.power.peak_w, in.r.power.max_temperature_c),
             "check the power limit and cooling (nvidia-smi -q -d PERFORMANCE,POWER,TEMPERATURE); compare runs at the "
             "same clocks, and judge kernels by FLOPs per joule when power-capped",
             busy_ms / in.steps * (1 - ratio)}};
}

// Dropped CUPTI records: every total is low.
std::vector<Finding> records_rule(const FindingInput& in) {
    if (in.r.dropped_records == 0) return {};
    return {{"records", "activity records were dropped",
             strprintf("%llu CUPTI records lost to full buffers: every total is low",
                       (unsigned long long)in.r.dropped_records),
             "profile fewer steps (--steps) or a smaller model (--layers)", 0}};
}

// --energy's closure: the sub-blocks' joules summed should be the whole step's; more than 10% apart, the split is
// in doubt (work outside every sub-block, replays that do not behave as in the step, a counter too coarse).
std::vector<Finding> energy_closure_rule(const FindingInput& in) {
    const EnergySummary& e = in.r.energy;
    if (!e.measured || !std::isfinite(e.diff_pct) || std::fabs(e.diff_pct) <= 10) return {};
    return {{"energy_closure",
             strprintf("the sub-blocks' energies sum to %+.0f%% of the whole step's", e.diff_pct),
             strprintf("%.4f J per step summed over the sub-blocks against %.4f J for the step replayed whole (%s, %d "
                       "repetitions)",
                       e.sum_j, e.step_j, e.source.c_str(), e.repeats),
             "read the per-sub-block joules as shares, not absolutes; a longer --energy-seconds narrows the intervals",
             0}};
}

namespace {
const PhaseRow* decode_row(const Report& r) {
    for (const PhaseRow& p : r.phases)
        if (p.phase == (int)Phase::decode && p.steps > 0) return &p;
    return nullptr;
}
} // namespace

// Decode memory-bound with the weights most of its bytes: every step rereads them for only B tokens.
std::vector<Finding> decode_weight_rule(const FindingInput& in) {
    const PhaseRow* d = decode_row(in.r);
    const InferenceShape& s = in.r.context.inference;
    if (!d || std::string(d->roof.bound) != "memory" || s.decode_steps <= 0) return {};
    const GPT2Config& c = in.r.context.model;
    // Every weight but the position embedding (one row per token) is read once per step.
    const double weights = (double)num_parameters(c) - (double)c.max_seq_len * c.channels;
    const double weight_bytes = s.elem_bytes * weights * s.decode_steps, share = weight_bytes / (d->cost.bytes * in.steps);
    const double kv_bytes = s.elem_bytes * 2.0 * c.num_layers * c.channels * s.decode_context;
    // Doubling B halves the weight bytes per token: half the weight share of the decode time is at stake.
    const double at_stake = d->roof.time_s * 1e3 * share / 2;
    if (share < 0.5 || at_stake < in.min_ms) return {};
    return {{"decode_weight_bound",
             strprintf("decode is memory-bound at B=%ld: %.0f%% of its bytes are the weights, reread every step",
                       s.sequences, 100 * share),
             strprintf("%.2f FLOP/B against a ridge of %.1f FLOP/B; %.1f MB of weights and %.1f MB of KV cache read "
                       "per decode step; %.0f%% of the roofline",
                       d->roof.intensity, in.r.context.ceilings.bf16_tflops * 1e3 / in.r.context.ceilings.dram_gbps,
                       weight_bytes / s.decode_steps / 1e6, kv_bytes / s.decode_steps / 1e6, d->roof.pct_of_roofline),
             "batch more sequences (-b): one step reads the weights once for all of them, so FLOPs per byte grow "
             "with B until decode turns compute-bound",
             at_stake}};
}

// Decode steps whose wall time is mostly outside the model's work: per-step overhead, not the model, sets the pace.
std::vector<Finding> decode_launch_rule(const FindingInput& in) {
    const PhaseRow* d = decode_row(in.r);
    if (!d || d->wall_ms <= 0) return {};
    double idle_ms = 0;
    for (const StepRow& s : in.r.steps)
        if (s.step > 0) idle_ms += s.idle_ms;
    const double share = idle_ms / d->wall_ms, at_stake = idle_ms / in.steps;
    if (share < 0.3 || at_stake < in.min_ms) return {};
    const bool cpu = in.r.context.device_kind == DeviceKind::CPU;
    return {{"decode_launch_bound",
             strprintf("decode steps spend %.0f%% of their wall time outside the model's %s", 100 * share,
                       cpu ? "sub-blocks" : "kernels"),
             strprintf("%.3f ms idle of %.3f ms per decode step over %ld steps", idle_ms / d->steps, d->wall_ms / d->steps,
                       d->steps),
             cpu ? "move per-step host work (sampling over the vocabulary, bookkeeping) out of the loop or batch more "
                   "sequences per step"
                 : "fewer, larger launches: fuse the decode step's kernels or capture it in a CUDA graph, and batch "
                   "more sequences per launch",
             at_stake}};
}

const std::vector<Rule>& ranked_rules() {
    static const std::vector<Rule> rules = {roofline_rule,  launch_bound_rule, sync_stall_rule,
                                            memcpy_rule,    occupancy_rule,    throttle_rule,
                                            decode_weight_rule, decode_launch_rule};
    return rules;
}

std::vector<Finding> find_limits(const Report& r, const ProfileRecords& rec) {
    const FindingInput in(r, rec);
    std::vector<Finding> out;
    for (Rule rule : ranked_rules())
        for (Finding& f : rule(in)) out.push_back(std::move(f));
    std::stable_sort(out.begin(), out.end(),
                     [](const Finding& a, const Finding& b) { return a.ms_per_step > b.ms_per_step; });
    std::vector<Finding> first = records_rule(in);
    for (Finding& f : energy_closure_rule(in)) first.push_back(std::move(f));
    out.insert(out.begin(), first.begin(), first.end());
    return out;
}

} // namespace llmc::prof
