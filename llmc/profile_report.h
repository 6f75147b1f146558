/*
 * Aggregation of profiler records into the report's tables: kernels, sub-blocks with their roofline, steps
 * (GPU busy as the union of activity intervals, phases, energy), GPU idle gaps and what the CPU was doing
 * in them, CUDA API and synchronisation shares, throughput and MFU. Plain C++: testable from synthetic
 * records. llmc/profile_writers.h turns a Report into text, CSV and JSON.
 *
 * The window is the profiled steps: a GPU activity or API call belongs to the step whose wall interval
 * contains its start; anything outside every step (set-up, teardown) is left out. Without step records the
 * window is everything recorded. Counters are summed and rates derived from the sums; percentages are
 * never added or averaged.
 */
#pragma once
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "llmc/counter_records.h"
#include "llmc/device_specs.h"
#include "llmc/profile_records.h"
#include "llmc/roofline.h"
#include "llmc/utils.h"

namespace llmc::prof {

// Category of a kernel from its demangled name (memcpy/memset rows get theirs from the record type).
inline std::string kernel_category(const std::string& name) {
    std::string n = name;
    std::transform(n.begin(), n.end(), n.begin(), [](unsigned char ch) { return (char)std::tolower(ch); });
    auto has = [&](std::initializer_list<const char*> keys) {
        for (const char* k : keys)
            if (n.find(k) != std::string::npos) return true;
        return false;
    };
    if (has({"gemm", "cublas", "cutlass", "nvjet", "xmma", "matmul"})) return "gemm";
    if (has({"attention", "flash", "fmha"})) return "attention";
    if (has({"layernorm"})) return "norm";
    if (has({"adamw"})) return "optimizer";
    // CUB's sort, run-length encode (a reduce-by-key) and scan serve the encoder backward.
    if (has({"global_norm", "bias_backward", "accumulate_loss", "encoder_backward", "classifier",
             "cub::", "deviceradixsort", "devicerunlengthencode", "devicereduce", "devicescan", "reduce"}))
        return "reduction";
    if (has({"gelu", "encoder_forward", "copy", "cast", "float_to_bf16", "elementwise"})) return "elementwise";
    return "other";
}

// "void llmc::detail::k<true>(float*, int)" -> "k<true>": the name without return type, parameter list and
// namespaces (kernel names in tables and trace slices; the full name stays in kernels.csv and the trace args).
inline std::string short_kernel_name(const std::string& name) {
    std::string s = name.rfind("void ", 0) == 0 ? name.substr(5) : name;
    if (!s.empty() && s.back() == ')') {
        int depth = 0;
        for (size_t i = s.size(); i-- > 0;) {
            if (s[i] == ')') depth++;
            if (s[i] == '(' && --depth == 0) {
                s.resize(i);
                break;
            }
        }
    }
    int angle = 0; // template depth: "::" inside template arguments is not a namespace of the kernel
    size_t last = std::string::npos;
    for (size_t i = 0; i + 1 < s.size(); i++) {
        if (s[i] == '<') angle++;
        if (s[i] == '>') angle--;
        if (angle == 0 && s[i] == ':' && s[i + 1] == ':') last = i + 1;
    }
    return last == std::string::npos ? s : s.substr(last + 1);
}

inline std::string subblock_label(int s) { return s >= 0 && s < NUM_SUBBLOCKS ? subblock_name((SubBlock)s) : "(none)"; }
inline std::string phase_label(int p) { return p >= 0 && p < NUM_PHASES ? phase_name((Phase)p) : "(none)"; }

/*
 * Energy in joules over [t0, t1] from power samples sorted by time: power is linear between samples and
 * held constant before the first and after the last, and the trapezoid rule over the samples inside the
 * interval plus interpolated values at its edges integrates that exactly. NaN without samples.
 */
inline double energy_joules(const std::vector<PowerSample>& s, uint64_t t0, uint64_t t1) {
    if (s.empty() || t1 <= t0) return s.empty() ? NAN : 0.0;
    auto power_at = [&](uint64_t t) {
        auto hi = std::lower_bound(s.begin(), s.end(), t, [](const PowerSample& p, uint64_t v) { return p.t_ns < v; });
        if (hi == s.begin()) return s.front().power_w;
        if (hi == s.end()) return s.back().power_w;
        auto lo = hi - 1;
        double f = (double)(t - lo->t_ns) / (double)(hi->t_ns - lo->t_ns);
        return lo->power_w + f * (hi->power_w - lo->power_w);
    };
    double e = 0, prev_t = (double)t0, prev_p = power_at(t0);
    for (const PowerSample& p : s) {
        if (p.t_ns <= t0) continue;
        if (p.t_ns >= t1) break;
        e += 0.5 * (prev_p + p.power_w) * ((double)p.t_ns - prev_t);
        prev_t = (double)p.t_ns, prev_p = p.power_w;
    }
    e += 0.5 * (prev_p + power_at(t1)) * ((double)t1 - prev_t);
    return e * 1e-9;
}

/*
 * A step's energy: NVML's cumulative energy counter (`readings`, sorted by time) where it advanced between
 * the step's edges, else the power samples integrated. The counter updates coarsely (on an H100 it did not
 * advance over a 43 ms window), so a step where it stood still falls back to the samples. A reading counts
 * for an edge within 10% of the step's wall time of it (at least 2 ms). *source: "counter", "integrated" or
 * "" (no data: NaN).
 */
inline double step_energy(const std::vector<EnergyReading>& readings, const std::vector<PowerSample>& samples,
                          uint64_t t0, uint64_t t1, const char** source) {
    const uint64_t tolerance = std::max<uint64_t>(2000000, (t1 - t0) / 10);
    auto nearest = [&](uint64_t t) -> const EnergyReading* {
        auto hi = std::lower_bound(readings.begin(), readings.end(), t,
                                   [](const EnergyReading& e, uint64_t v) { return e.t_ns < v; });
        const EnergyReading* best = nullptr;
        auto dist = [&](const EnergyReading& e) { return e.t_ns > t ? e.t_ns - t : t - e.t_ns; };
        if (hi != readings.end()) best = &*hi;
        if (hi != readings.begin() && (!best || dist(*(hi - 1)) <= dist(*best))) best = &*(hi - 1);
        return best && dist(*best) <= tolerance ? best : nullptr;
    };
    const EnergyReading *a = nearest(t0), *b = nearest(t1);
    if (a && b && b->t_ns > a->t_ns && b->joules > a->joules) {
        *source = "counter";
        return b->joules - a->joules;
    }
    double e = energy_joules(samples, t0, t1);
    *source = std::isfinite(e) ? "integrated" : "";
    return e;
}

// Merges [start, end) intervals (in any order) into sorted disjoint ones.
inline std::vector<std::pair<uint64_t, uint64_t>> interval_union(std::vector<std::pair<uint64_t, uint64_t>> v) {
    std::sort(v.begin(), v.end());
    std::vector<std::pair<uint64_t, uint64_t>> out;
    for (const auto& iv : v) {
        if (iv.second <= iv.first) continue;
        if (!out.empty() && iv.first <= out.back().second)
            out.back().second = std::max(out.back().second, iv.second);
        else
            out.push_back(iv);
    }
    return out;
}

struct KernelRow {
    std::string name, category; // name: demangled kernel name, or "[memcpy HtoD]", "[memset]"
    int subblock = -1, phase = -1;
    long calls = 0;
    double total_us = 0, avg_us = 0, pct = 0; // pct of all GPU activity time in the window
};

struct SubBlockRow {
    int subblock = -1, phase = -1;
    long calls = 0;
    double time_us = 0, pct = 0; // over the window
    OpCost cost;                 // analytic, per step (zero for "(none)")
    RooflinePoint roof;          // cost against the time per step
};

struct StepRow {
    int step = 0;
    long tokens = 0;
    double wall_ms = 0, gpu_busy_ms = 0, idle_ms = 0;
    double fwd_ms = 0, bwd_ms = 0, opt_ms = 0, other_ms = 0; // GPU time by phase; other: outside the phases
    double tok_s = 0, energy_j = NAN, avg_power_w = NAN;
    double j_per_token = NAN, tokens_per_j = NAN, flops_per_w = NAN; // flops_per_w: model FLOP/s per W
    const char* energy_source = "";                                   // "counter", "integrated", "" (none)
    long gaps = 0;
};

// A stretch of a step with no GPU activity, and what the CPU thread was doing meanwhile.
struct IdleGap {
    int step = 0;
    double offset_us = 0, dur_us = 0; // from the step's start
    std::string api;                  // the CUDA call overlapping the gap most, "" for none
    double api_us = 0;                // its overlap with the gap
    double outside_api_us = 0;        // time of the gap outside every CUDA call (CPU work)
    std::string range;                // innermost CPU range around the gap's middle
};

struct NamedTime {
    std::string name;
    long calls = 0;
    double total_us = 0, avg_us = 0, pct = 0;
};

struct PowerSummary {
    size_t samples = 0; // inside the window
    double energy_j = NAN, avg_w = NAN, peak_w = NAN, joules_per_token = NAN;
    int max_temperature_c = 0, min_sm_clock_mhz = 0, max_sm_clock_mhz = 0;
    uint64_t throttle_reasons = 0; // OR over the samples
    double tokens_per_j = NAN, flops_per_w = NAN; // flops_per_w: model FLOP/s per W (= FLOP per J)
    int counter_steps = 0, integrated_steps = 0;  // steps whose energy came from the counter / the samples
    int max_sm_clock_limit_mhz = 0;               // the GPU's maximum SM clock, 0 = unknown
    std::string reading;                          // "instantaneous" or "1 s average" power samples
    std::string status;                           // why there is no power data ("NVML not available (...)")
};

// A limit of the run with its evidence and what to try next (llmc/profile_findings.h), ranked by time at stake.
struct Finding {
    std::string rule;       // "roofline", "launch_bound", "sync_stall", "memcpy", "occupancy", "throttle", "records"
    std::string what, evidence, next_step;
    double ms_per_step = 0; // estimated GPU or wall time at stake per step
};

// How many records of each kind were collected (the whole run, not only the window).
struct RecordCounts {
    size_t kernels = 0, memcpys = 0, memsets = 0, api = 0, syncs = 0, ranges = 0, power = 0;
};

struct Report {
    ProfileContext context;
    RecordCounts records;
    bool has_model = false; // the context describes a model, so the analytic costs exist
    CostTable costs{};      // per step
    int num_steps = 0;
    long tokens = 0;
    double wall_s = 0;                          // sum of step wall times (or the recorded span without steps)
    double gpu_time_us = 0, kernel_time_us = 0; // activity time summed (kernels + memcpy + memset), kernels only
    std::vector<KernelRow> kernels;             // by total time, descending
    std::vector<SubBlockRow> subblocks;         // by phase, then sub-block order; "(none)" last
    SubBlockRow total;                          // every row summed; roofline of the whole step
    std::vector<StepRow> steps;
    // GPU idle inside the steps: gaps in the union of activity, step edges included (sum = wall - busy).
    double idle_us = 0;
    long idle_gaps = 0;
    std::vector<NamedTime> gap_sizes;   // count and time of gaps by size class
    std::vector<NamedTime> idle_by_cpu; // idle time by the CUDA call overlapping it ("(no CUDA call)": CPU work)
    std::vector<IdleGap> largest_gaps;
    // CPU side, shares of the window's wall time on the CPU.
    std::vector<NamedTime> api;       // pct = pct_of_cpu_time
    std::vector<NamedTime> syncs;     // by synchronisation type
    double api_pct = 0, sync_pct = 0; // share of the window inside some CUDA call / blocked in some sync
    double tokens_per_s = NAN, flops_per_token = 0, model_tflops = NAN, mfu = NAN;
    PowerSummary power;
    uint64_t dropped_records = 0;
    double cupti_overhead_ms = 0;
    std::vector<Finding> findings; // most time at stake first
    CounterReport counters;        // hardware counters of one extra step (profile_gpt2cu --counters)
};

namespace report_detail {

struct Activity {
    uint64_t start, end;
    Attribution where;
    std::string name, category;
};

// Index of the step (into `steps`, sorted by start) whose [start, end) holds t; -1 outside every step.
inline int step_of(const std::vector<StepRecord>& steps, uint64_t t) {
    auto it =
        std::upper_bound(steps.begin(), steps.end(), t, [](uint64_t v, const StepRecord& s) { return v < s.start_ns; });
    if (it == steps.begin()) return -1;
    --it;
    return t < it->end_ns ? (int)(it - steps.begin()) : -1;
}

inline void finish_shares(std::vector<NamedTime>& rows, double window_us) {
    for (NamedTime& r : rows) {
        r.avg_us = r.calls ? r.total_us / r.calls : 0;
        r.pct = window_us > 0 ? 100 * r.total_us / window_us : 0;
    }
    std::sort(rows.begin(), rows.end(), [](const NamedTime& a, const NamedTime& b) { return a.total_us > b.total_us; });
}

inline const char* copy_kind_name(CopyKind k) {
    static const char* names[] = {"HtoD", "DtoH", "DtoD", "HtoH", "other"};
    return names[(int)k];
}

} // namespace report_detail

inline GPT2Config config_of(const ProfileContext& c) {
    GPT2Config g;
    g.num_layers = c.num_layers, g.num_heads = c.num_heads, g.channels = c.channels;
    g.max_seq_len = c.max_seq_len, g.vocab_size = c.vocab_size, g.padded_vocab_size = c.padded_vocab_size;
    return g;
}

inline std::vector<Finding> find_limits(const Report& r, const ProfileRecords& rec); // llmc/profile_findings.h

inline Report build_report(const ProfileRecords& rec, const ProfileContext& ctx) {
    using namespace report_detail;
    Report r;
    r.context = ctx;
    r.records = {rec.kernels.size(), rec.memcpys.size(), rec.memsets.size(), rec.api.size(),
                 rec.syncs.size(),   rec.ranges.size(),  rec.power.size()};
    r.dropped_records = rec.dropped_records;
    r.cupti_overhead_ms = rec.cupti_overhead_ns / 1e6;
    r.has_model = ctx.num_layers > 0 && ctx.channels > 0 && ctx.num_heads > 0 && ctx.B > 0 && ctx.T > 0;
    if (r.has_model) r.costs = analytic_costs(config_of(ctx), ctx.B, ctx.T, std::max(1, ctx.grad_accum));

    std::vector<StepRecord> steps = rec.steps;
    std::sort(steps.begin(), steps.end(),
              [](const StepRecord& a, const StepRecord& b) { return a.start_ns < b.start_ns; });
    r.num_steps = (int)steps.size();
    const bool windowed = !steps.empty();
    auto in_window = [&](uint64_t t) { return !windowed || step_of(steps, t) >= 0; };

    // ---- GPU activities in the window ----
    std::vector<Activity> acts;
    for (const KernelRecord& k : rec.kernels)
        if (in_window(k.start_ns)) acts.push_back({k.start_ns, k.end_ns, k.where, k.name, kernel_category(k.name)});
    for (const MemcpyRecord& m : rec.memcpys)
        if (in_window(m.start_ns))
            acts.push_back(
                {m.start_ns, m.end_ns, m.where, std::string("[memcpy ") + copy_kind_name(m.kind) + "]", "memcpy"});
    for (const MemsetRecord& m : rec.memsets)
        if (in_window(m.start_ns)) acts.push_back({m.start_ns, m.end_ns, m.where, "[memset]", "memset"});
    auto dur_us = [](uint64_t s, uint64_t e) { return e > s ? (e - s) / 1e3 : 0.0; };

    std::map<std::tuple<std::string, int, int>, KernelRow> by_kernel;
    std::map<std::pair<int, int>, SubBlockRow> by_cell;
    for (const Activity& a : acts) {
        double us = dur_us(a.start, a.end);
        r.gpu_time_us += us;
        if (a.category != "memcpy" && a.category != "memset") r.kernel_time_us += us;
        KernelRow& k = by_kernel[{a.name, a.where.subblock, a.where.phase}];
        k.name = a.name, k.category = a.category, k.subblock = a.where.subblock, k.phase = a.where.phase;
        k.calls++, k.total_us += us;
        SubBlockRow& s = by_cell[{a.where.subblock, a.where.phase}];
        s.calls++, s.time_us += us;
    }
    for (auto& [key, k] : by_kernel) {
        k.avg_us = k.total_us / k.calls;
        k.pct = r.gpu_time_us > 0 ? 100 * k.total_us / r.gpu_time_us : 0;
        r.kernels.push_back(k);
    }
    std::sort(r.kernels.begin(), r.kernels.end(),
              [](const KernelRow& a, const KernelRow& b) { return a.total_us > b.total_us; });

    // ---- sub-blocks: measured cells and modelled cells, roofline against the time per step ----
    if (r.has_model)
        for (int s = 0; s < NUM_SUBBLOCKS; s++)
            for (int p = 0; p < NUM_PHASES; p++)
                if (r.costs[s][p].flops() > 0 || r.costs[s][p].bytes > 0) by_cell[{s, p}];
    auto row_order = [](const std::pair<int, int>& c) { // (none) after the named ones
        return std::make_pair(c.second < 0 ? NUM_PHASES : c.second, c.first < 0 ? NUM_SUBBLOCKS : c.first);
    };
    std::vector<std::pair<int, int>> cells;
    for (auto& [key, row] : by_cell) cells.push_back(key);
    std::sort(cells.begin(), cells.end(), [&](auto& a, auto& b) { return row_order(a) < row_order(b); });
    const double steps_div = r.num_steps > 0 ? r.num_steps : NAN; // no steps: no time per step
    r.total.subblock = r.total.phase = -1;
    for (const auto& key : cells) {
        SubBlockRow row = by_cell[key];
        row.subblock = key.first, row.phase = key.second;
        row.pct = r.gpu_time_us > 0 ? 100 * row.time_us / r.gpu_time_us : 0;
        if (r.has_model && row.subblock >= 0 && row.phase >= 0) row.cost = r.costs[row.subblock][row.phase];
        row.roof = roofline_point(row.cost, row.time_us * 1e-6 / steps_div, ctx.ceilings);
        r.total.calls += row.calls, r.total.time_us += row.time_us, r.total.cost += row.cost;
        r.subblocks.push_back(row);
    }
    r.total.pct = r.gpu_time_us > 0 ? 100.0 : 0;
    r.total.roof = roofline_point(r.total.cost, r.total.time_us * 1e-6 / steps_div, ctx.ceilings);

    // ---- steps: busy = union of activity, phases, idle gaps, energy ----
    std::vector<PowerSample> power = rec.power;
    std::sort(power.begin(), power.end(), [](const PowerSample& a, const PowerSample& b) { return a.t_ns < b.t_ns; });
    std::vector<EnergyReading> energy = rec.energy;
    std::sort(energy.begin(), energy.end(), [](const EnergyReading& a, const EnergyReading& b) { return a.t_ns < b.t_ns; });
    std::vector<std::vector<std::pair<uint64_t, uint64_t>>> step_iv(steps.size());
    std::vector<StepRow> rows(steps.size());
    for (const Activity& a : acts) {
        int si = step_of(steps, a.start);
        if (si < 0) continue;
        step_iv[si].push_back({a.start, std::min(a.end, steps[si].end_ns)});
        double ms = dur_us(a.start, a.end) / 1e3;
        StepRow& sr = rows[si];
        double* by_phase[NUM_PHASES] = {&sr.fwd_ms, &sr.bwd_ms, &sr.opt_ms};
        const int p = a.where.phase;
        *(p >= 0 && p < NUM_PHASES ? by_phase[p] : &sr.other_ms) += ms;
    }
    struct Gap {
        int step;
        uint64_t start, end;
    };
    std::vector<Gap> gaps;
    for (size_t i = 0; i < steps.size(); i++) {
        const StepRecord& s = steps[i];
        StepRow& sr = rows[i];
        sr.step = s.step, sr.tokens = s.tokens;
        sr.wall_ms = dur_us(s.start_ns, s.end_ns) / 1e3;
        uint64_t cursor = s.start_ns;
        for (const auto& iv : interval_union(step_iv[i])) {
            sr.gpu_busy_ms += dur_us(iv.first, iv.second) / 1e3;
            if (iv.first > cursor) gaps.push_back({(int)i, cursor, iv.first});
            cursor = iv.second;
        }
        if (s.end_ns > cursor) gaps.push_back({(int)i, cursor, s.end_ns});
        sr.idle_ms = sr.wall_ms - sr.gpu_busy_ms;
        sr.tok_s = sr.wall_ms > 0 ? s.tokens / (sr.wall_ms / 1e3) : 0;
        sr.energy_j = step_energy(energy, power, s.start_ns, s.end_ns, &sr.energy_source);
        sr.avg_power_w = sr.wall_ms > 0 ? sr.energy_j / (sr.wall_ms / 1e3) : NAN;
        r.tokens += s.tokens;
        r.wall_s += sr.wall_ms / 1e3;
        r.idle_us += sr.idle_ms * 1e3;
    }
    for (const Gap& g : gaps) rows[g.step].gaps++;
    r.steps = rows;
    r.idle_gaps = (long)gaps.size();

    // ---- what the CPU was doing while the GPU waited ----
    std::vector<ApiRecord> api = rec.api;
    std::sort(api.begin(), api.end(), [](const ApiRecord& a, const ApiRecord& b) {
        return a.start_ns < b.start_ns || (a.start_ns == b.start_ns && a.end_ns > b.end_ns);
    });
    std::vector<uint64_t> max_end(api.size()); // running maximum of end times: bounds the backward scan
    for (size_t i = 0; i < api.size(); i++) max_end[i] = std::max(api[i].end_ns, i ? max_end[i - 1] : 0);
    /*
     * Shares of [a, b) by CUDA call: each instant goes to the outermost call covering it, so a runtime call
     * and the driver calls it makes (both recorded) are not counted twice. fn(call, ns) for every call with
     * a share; returns the ns covered by some call.
     */
    auto attribute = [&](uint64_t a, uint64_t b, auto&& fn) {
        size_t hi =
            std::lower_bound(api.begin(), api.end(), b, [](const ApiRecord& x, uint64_t v) { return x.start_ns < v; }) -
            api.begin();
        size_t lo = hi;
        while (lo > 0 && max_end[lo - 1] > a) lo--;
        uint64_t cursor = a, covered = 0;
        for (size_t i = lo; i < hi; i++) {
            uint64_t s = std::max(api[i].start_ns, cursor), e = std::min(api[i].end_ns, b);
            if (e <= s) continue;
            fn(api[i], e - s);
            covered += e - s;
            cursor = e;
        }
        return covered;
    };
    r.gap_sizes = {{"< 10 us"}, {"10-100 us"}, {">= 100 us"}};
    std::map<std::string, NamedTime> idle_cause;
    for (const Gap& g : gaps) {
        double us = dur_us(g.start, g.end);
        NamedTime& size = r.gap_sizes[us < 10 ? 0 : us < 100 ? 1 : 2];
        size.calls++, size.total_us += us;
        double covered = attribute(g.start, g.end,
                                   [&](const ApiRecord& a, uint64_t ns) {
                                       NamedTime& c = idle_cause[a.name];
                                       c.name = a.name, c.calls++, c.total_us += ns / 1e3;
                                   }) /
                         1e3;
        if (us > covered) {
            NamedTime& c = idle_cause["(no CUDA call)"];
            c.name = "(no CUDA call)", c.calls++, c.total_us += us - covered;
        }
    }
    for (auto& [name, c] : idle_cause) r.idle_by_cpu.push_back(c);
    finish_shares(r.idle_by_cpu, r.idle_us);
    for (NamedTime& s : r.gap_sizes)
        s.avg_us = s.calls ? s.total_us / s.calls : 0, s.pct = r.idle_us > 0 ? 100 * s.total_us / r.idle_us : 0;

    constexpr size_t LARGEST_GAPS = 8;
    std::sort(gaps.begin(), gaps.end(), [](const Gap& a, const Gap& b) { return a.end - a.start > b.end - b.start; });
    gaps.resize(std::min(gaps.size(), LARGEST_GAPS));
    for (const Gap& g : gaps) {
        IdleGap ig;
        ig.step = steps[g.step].step;
        ig.offset_us = dur_us(steps[g.step].start_ns, g.start);
        ig.dur_us = dur_us(g.start, g.end);
        std::map<std::string, double> share;
        double covered =
            attribute(g.start, g.end, [&](const ApiRecord& a, uint64_t ns) { share[a.name] += ns / 1e3; }) / 1e3;
        for (auto& [name, us] : share)
            if (us > ig.api_us) ig.api = name, ig.api_us = us;
        ig.outside_api_us = std::max(0.0, ig.dur_us - covered);
        uint64_t mid = g.start + (g.end - g.start) / 2;
        int depth = -1;
        for (const RangeRecord& rr : rec.ranges)
            if (rr.start_ns <= mid && mid < rr.end_ns && rr.depth > depth) ig.range = rr.name, depth = rr.depth;
        r.largest_gaps.push_back(ig);
    }

    // ---- CUDA API and synchronisation: shares of the CPU window ----
    // Per name, every call counts; the overall shares count time under nested or overlapping calls once.
    double cpu_window_us = r.wall_s * 1e6;
    if (!windowed && !api.empty()) cpu_window_us = dur_us(api.front().start_ns, max_end.back());
    std::map<std::string, NamedTime> by_api, by_sync;
    std::vector<std::pair<uint64_t, uint64_t>> api_iv, sync_iv;
    for (const ApiRecord& a : api)
        if (in_window(a.start_ns)) {
            NamedTime& n = by_api[a.name];
            n.name = a.name, n.calls++, n.total_us += dur_us(a.start_ns, a.end_ns);
            api_iv.push_back({a.start_ns, a.end_ns});
        }
    for (const SyncRecord& s : rec.syncs)
        if (in_window(s.start_ns)) {
            NamedTime& n = by_sync[s.type];
            n.name = s.type, n.calls++, n.total_us += dur_us(s.start_ns, s.end_ns);
            sync_iv.push_back({s.start_ns, s.end_ns});
        }
    for (auto& [name, n] : by_api) r.api.push_back(n);
    for (auto& [name, n] : by_sync) r.syncs.push_back(n);
    finish_shares(r.api, cpu_window_us);
    finish_shares(r.syncs, cpu_window_us);
    auto union_pct = [&](std::vector<std::pair<uint64_t, uint64_t>> iv) {
        double us = 0;
        for (const auto& x : interval_union(std::move(iv))) us += dur_us(x.first, x.second);
        return cpu_window_us > 0 ? 100 * us / cpu_window_us : 0;
    };
    r.api_pct = union_pct(std::move(api_iv));
    r.sync_pct = union_pct(std::move(sync_iv));

    // ---- throughput, MFU, power ----
    if (r.wall_s > 0) r.tokens_per_s = r.tokens / r.wall_s;
    if (r.has_model) {
        size_t n = ctx.num_parameters ? ctx.num_parameters : num_parameters(config_of(ctx));
        r.flops_per_token = gpt2_flops_per_token(n, ctx.num_layers, ctx.channels, ctx.T);
        r.model_tflops = r.tokens_per_s * r.flops_per_token / 1e12;
        if (ctx.ceilings.bf16_tflops > 0) r.mfu = 100 * r.model_tflops / ctx.ceilings.bf16_tflops;
    }
    r.power.status = rec.power_status.empty() && power.empty() ? "no power samples" : rec.power_status;
    r.power.max_sm_clock_limit_mhz = rec.max_sm_clock_mhz;
    r.power.reading = rec.power_reading;
    if (!power.empty() && windowed) {
        PowerSummary& p = r.power;
        p.energy_j = 0;
        for (StepRow& s : r.steps) {
            p.energy_j += s.energy_j;
            (std::string(s.energy_source) == "counter" ? p.counter_steps : p.integrated_steps)++;
            if (s.tokens > 0) s.j_per_token = s.energy_j / s.tokens;
            if (s.energy_j > 0) s.tokens_per_j = s.tokens / s.energy_j;
            if (s.energy_j > 0 && r.flops_per_token > 0) s.flops_per_w = s.tokens * r.flops_per_token / s.energy_j;
        }
        p.avg_w = r.wall_s > 0 ? p.energy_j / r.wall_s : NAN;
        if (r.tokens > 0) p.joules_per_token = p.energy_j / r.tokens;
        if (p.energy_j > 0) p.tokens_per_j = r.tokens / p.energy_j;
        if (p.energy_j > 0 && r.flops_per_token > 0) p.flops_per_w = r.tokens * r.flops_per_token / p.energy_j;
        for (const PowerSample& s : power) {
            if (!in_window(s.t_ns)) continue;
            if (p.samples++ == 0) p.peak_w = s.power_w, p.min_sm_clock_mhz = p.max_sm_clock_mhz = s.sm_clock_mhz;
            p.peak_w = std::max(p.peak_w, s.power_w);
            p.max_temperature_c = std::max(p.max_temperature_c, s.temperature_c);
            p.min_sm_clock_mhz = std::min(p.min_sm_clock_mhz, s.sm_clock_mhz);
            p.max_sm_clock_mhz = std::max(p.max_sm_clock_mhz, s.sm_clock_mhz);
            p.throttle_reasons |= s.throttle_reasons;
        }
    }

    r.findings = find_limits(r, rec);
    return r;
}

} // namespace llmc::prof

#include "llmc/profile_findings.h" // find_limits: needs Report, build_report calls it
