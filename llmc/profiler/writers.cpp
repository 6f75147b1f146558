// The profile directory's files from a Report (llmc/profiler/writers.h).
#include "llmc/profiler/writers.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <tuple>
#include <unistd.h>
#include <vector>

#include "llmc/profiler/columns.h"
#include "llmc/profiler/findings.h"
#include "llmc/util/utils.h"

namespace llmc::prof {

namespace {

using columns::TextTable;

// printf-style number; NaN becomes `none` ("-" in text, "" in CSV).
std::string num(double v, const char* fmt, const char* none = "-") { return columns::number(v, fmt, none); }

std::string truncate(const std::string& s, size_t n) { return s.size() <= n ? s : s.substr(0, n - 3) + "..."; }

void write_file(const std::string& path, const std::string& text) {
    AtomicFile f(path);
    f.write(text.data(), text.size());
    f.commit();
}

// ns since t0 as microseconds with 3 decimals: exact, since the records are whole nanoseconds.
std::string trace_us(uint64_t ns) {
    return strprintf("%llu.%03llu", (unsigned long long)(ns / 1000), (unsigned long long)(ns % 1000));
}

// TFLOP/s in text (columns.h, TFLOPS).
std::string tflops_text(double v) { return columns::cell(v, {"", TFLOPS}, "-"); }

long long count(long n) { return n; }
// A ceiling in a table: unknown where not positive.
double known(double ceiling) { return ceiling > 0 ? ceiling : NAN; }

// What a summary section needs besides the report: the CPU trainer's profile has no GPU, no CUDA calls and
// no device memory; its "kernels" are sub-block executions on the CPU, so the report speaks of CPU time and
// leaves the GPU-only sections out.
struct SummaryStyle {
    explicit SummaryStyle(const Report& r)
        : on_gpu(r.context.device_kind != DeviceKind::CPU), dev(on_gpu ? "GPU" : "CPU"),
          pct_col(on_gpu ? "%gpu" : "%cpu"), matmul(on_gpu ? "bf16" : "fp32 matmul") {}
    bool on_gpu;
    const char* dev;
    const char* pct_col;
    const char* matmul; // the compute ceiling MFU and GEMMs are measured against
};

// The busy-time column: the union of GPU activity, or on the CPU of sub-block executions.
const char* busy_column(const Report& r) {
    return r.context.device_kind == DeviceKind::CPU ? "busy_ms" : "gpu_busy_ms";
}

// ---------------------------------------------------------------------------------------------------------------
// The column tables (llmc/profiler/columns.h): each table's columns in CSV order, with their CSV header, JSON key
// and summary.txt heading (doc/profiling.md lists them).

// kernels.csv, profile.json "kernels", summary.txt's top kernels.
Columns<KernelRow> kernel_columns(const SummaryStyle& st) {
    using K = KernelRow;
    return {
        {[](const K& k) -> Value { return truncate(short_kernel_name(k.name), 60); }, {}, {}, {st.on_gpu ? "kernel" : "op"}},
        {[](const K& k) -> Value { return k.name; }, {"kernel"}, {"kernel"}, {}},
        {[](const K& k) -> Value { return subblock_label(k.subblock); }, {"subblock"}, {"subblock"}, {"subblock"}},
        {[](const K& k) -> Value { return phase_label(k.phase); }, {"phase"}, {"phase"}, {"phase"}},
        {[](const K& k) -> Value { return std::string(category_name(k.category)); }, {"category"}, {"category"},
         {"category"}},
        {[](const K& k) -> Value { return count(k.calls); }, {"calls"}, {"calls"}, {"calls"}},
        {[](const K& k) -> Value { return k.total_us; }, {"total_us"}, {"total_us"}, {"total_ms", "%.3f", 1, 1e3}},
        {[](const K& k) -> Value { return k.avg_us; }, {"avg_us"}, {"avg_us"}, {"avg_us", "%.1f"}},
        {[](const K& k) -> Value { return k.pct; }, {"pct", RATE}, {"pct"}, {st.pct_col, "%.1f"}},
    };
}

// One row of roofline.csv, and the "roofline" object of profile.json's sub-blocks, phases and total: the
// analytic cost of a step against its measured time, or (scope kernel_replay) one kernel's replayed counters.
struct RooflineLine {
    std::string scope, subblock, phase, kernel;
    double gemm_flops = NAN, other_flops = NAN, flops = NAN, bytes = NAN;
    double intensity = NAN, time_s = NAN, floor_s = NAN, compute_floor_s = NAN, memory_floor_s = NAN;
    double bf16_tflops = NAN, fp32_tflops = NAN, dram_gbps = NAN; // the ceilings
    double tflops = NAN, gbps = NAN, pct_of_roofline = NAN;
    std::string bound;
    double replay_flops = NAN, replay_bytes = NAN; // hardware counters (kernel replay)
};

RooflineLine roofline_line(const OpCost& c, const RooflinePoint& p, const Ceilings& ce) {
    RooflineLine l;
    l.gemm_flops = c.gemm_flops, l.other_flops = c.other_flops, l.flops = c.flops(), l.bytes = c.bytes;
    l.intensity = p.intensity, l.time_s = p.time_s, l.floor_s = p.floor_s;
    l.compute_floor_s = p.compute_floor_s, l.memory_floor_s = p.memory_floor_s;
    l.bf16_tflops = known(ce.bf16_tflops), l.fp32_tflops = known(ce.fp32_tflops), l.dram_gbps = known(ce.dram_gbps);
    l.tflops = p.tflops, l.gbps = p.gbps, l.pct_of_roofline = p.pct_of_roofline, l.bound = p.bound;
    return l;
}

RooflineLine replay_line(const CounterRow& k) {
    RooflineLine l;
    l.scope = "kernel_replay", l.subblock = subblock_label(k.subblock), l.phase = phase_label(k.phase);
    l.kernel = k.kernel, l.intensity = k.intensity(), l.time_s = k.time_ns / 1e9, l.floor_s = k.floor_s();
    l.compute_floor_s = k.compute_floor_s(), l.memory_floor_s = k.memory_floor_s;
    l.bf16_tflops = k.tensor_ceiling_tflops(), l.fp32_tflops = k.fp32_ceiling_tflops();
    l.dram_gbps = k.dram_ceiling_gbps(), l.tflops = k.tflops(), l.gbps = k.gbps();
    l.pct_of_roofline = k.pct_of_roofline(), l.bound = k.bound(), l.replay_flops = k.flops();
    l.replay_bytes = k.dram_bytes;
    return l;
}

Columns<RooflineLine> roofline_columns() {
    using L = RooflineLine;
    auto text = [](std::string L::*f) { return [f](const L& l) -> Value { return l.*f; }; };
    auto number = [](double L::*f) { return [f](const L& l) -> Value { return l.*f; }; };
    const char* FLOPS = "%.0f";
    return {
        {text(&L::scope), {"scope"}, {}, {}},
        {text(&L::subblock), {"subblock"}, {}, {}},
        {text(&L::phase), {"phase"}, {}, {}},
        {text(&L::kernel), {"kernel"}, {}, {}},
        {number(&L::gemm_flops), {"gemm_flops", FLOPS}, {"gemm_flops"}, {}},
        {number(&L::other_flops), {"other_flops", FLOPS}, {"other_flops"}, {}},
        {number(&L::flops), {"flops", FLOPS}, {"flops"}, {}},
        {number(&L::bytes), {"bytes", FLOPS}, {"bytes"}, {}},
        {number(&L::intensity), {"intensity", RATE}, {"intensity"}, {}},
        {number(&L::time_s), {"time_us", "%.3f", 1e6}, {"time_per_step_s"}, {}},
        {number(&L::floor_s), {"floor_us", "%.3f", 1e6}, {"floor_s"}, {}},
        {number(&L::compute_floor_s), {"compute_floor_us", "%.3f", 1e6}, {"compute_floor_s"}, {}},
        {number(&L::memory_floor_s), {"memory_floor_us", "%.3f", 1e6}, {"memory_floor_s"}, {}},
        {number(&L::bf16_tflops), {"bf16_tflops", RATE}, {}, {}},
        {number(&L::fp32_tflops), {"fp32_tflops", RATE}, {}, {}},
        {number(&L::dram_gbps), {"dram_gbps", RATE}, {}, {}},
        {number(&L::tflops), {"tflops", RATE}, {"tflops"}, {}},
        {number(&L::gbps), {"gbps", RATE}, {"gbps"}, {}},
        {number(&L::pct_of_roofline), {"pct_of_roofline", RATE}, {"pct_of_roofline"}, {}},
        {text(&L::bound), {"bound"}, {"bound"}, {}},
        {number(&L::replay_flops), {"replay_flops", FLOPS}, {}, {}},
        {number(&L::replay_bytes), {"replay_bytes", FLOPS}, {}, {}},
    };
}

nlohmann::json roofline_json(const OpCost& c, const RooflinePoint& p, const Ceilings& ce) {
    return json_object(roofline_columns(), roofline_line(c, p, ce));
}

// A sub-block row as the tables show it: the report's rows, and the total ("total", no phase) in summary.txt.
struct SubBlockLine {
    const SubBlockRow* b;
    std::string subblock, phase;
    const Ceilings* ceilings;
    bool modelled() const { return b->cost.flops() > 0 || b->cost.bytes > 0; }
};

std::string spread_text(const StepSpread& sp) {
    return std::isfinite(sp.median_ms) ? strprintf("%.3f [%.3f, %.3f]", sp.median_ms, sp.min_ms, sp.max_ms) : "-";
}

// subblocks.csv, profile.json "subblocks" (and "total"), summary.txt's sub-blocks and roofline. The time per
// step, the floors and the rates are in profile.json's "roofline" object (roofline_columns).
Columns<SubBlockLine> subblock_columns(const SummaryStyle& st) {
    using S = SubBlockLine;
    auto roof = [](double RooflinePoint::*f) { return [f](const S& s) -> Value { return s.b->roof.*f; }; };
    auto spread = [](double StepSpread::*f) { return [f](const S& s) -> Value { return s.b->per_step.*f; }; };
    return {
        {[](const S& s) -> Value { return s.subblock; }, {"subblock"}, {"subblock"}, {"subblock"}},
        {[](const S& s) -> Value { return s.phase; }, {"phase"}, {"phase"}, {"phase", "", 1, 1, 'l'}},
        {[](const S& s) -> Value { return count(s.b->calls); }, {"calls"}, {"calls"}, {"calls"}},
        {[](const S& s) -> Value { return s.b->time_us; }, {"time_us"}, {"time_us"}, {}},
        {[](const S& s) -> Value { return s.b->pct; }, {"pct", RATE}, {"pct"}, {st.pct_col, "%.1f"}, 5},
        {[](const S& s) -> Value { return s.modelled() ? s.b->cost.flops() : NAN; }, {"flops", "%.0f"}, {},
         {"GFLOP", "%.1f", 1, 1e9}, 6},
        {[](const S& s) -> Value { return s.modelled() ? s.b->cost.bytes : NAN; }, {"bytes", "%.0f"}, {},
         {"MB", "%.1f", 1, 1e6}, 7},
        {roof(&RooflinePoint::tflops), {"tflops", RATE}, {}, {"TFLOP/s", TFLOPS}, 10},
        {roof(&RooflinePoint::gbps), {"gbps", RATE}, {}, {"GB/s", "%.0f"}, 11},
        {roof(&RooflinePoint::intensity), {"intensity", RATE}, {}, {"FLOP/B", "%.1f"}, 8},
        {[](const S& s) -> Value { return std::string(s.b->roof.bound); }, {"bound"}, {}, {"bound"}, 13},
        {roof(&RooflinePoint::time_s), {"time_per_step_us", "%.3f", 1e6}, {}, {"ms/step", "%.3f", 1e3}, 3},
        {roof(&RooflinePoint::floor_s), {"floor_us", "%.3f", 1e6}, {}, {"floor_ms", "%.3f", 1e3}, 9},
        {roof(&RooflinePoint::pct_of_roofline), {"pct_of_roofline", RATE}, {}, {"%roof", "%.0f"}, 12},
        {spread(&StepSpread::median_ms), {"step_median_us", "%.3f", 1e3}, {"per_step_ms/median"}, {}},
        {spread(&StepSpread::min_ms), {"step_min_us", "%.3f", 1e3}, {"per_step_ms/min"}, {}},
        {spread(&StepSpread::max_ms), {"step_max_us", "%.3f", 1e3}, {"per_step_ms/max"}, {}},
        {[](const S& s) -> Value { return spread_text(s.b->per_step); }, {}, {},
         {"median [min, max]", "", 1, 1, 'r'}, 4},
        {[](const S& s) -> Value { return roofline_json(s.b->cost, s.b->roof, *s.ceilings); }, {}, {"roofline"}, {}},
    };
}

std::vector<SubBlockLine> subblock_lines(const Report& r) {
    std::vector<SubBlockLine> v;
    for (const SubBlockRow& b : r.subblocks)
        v.push_back({&b, subblock_label(b.subblock), phase_label(b.phase), &r.context.ceilings});
    return v;
}

// steps.csv, profile.json "steps", summary.txt's steps (a training profile's by phase, an inference profile's
// with their phase and tokens; with CUDA graphs, the work of each step that graphs replayed).
Columns<StepRow> step_columns(const Report& r) {
    using S = StepRow;
    const bool infer = r.context.inference.active();
    const bool graphs = std::any_of(r.steps.begin(), r.steps.end(), [](const S& s) { return s.graph_replayed > 0; });
    auto ms = [](double S::*f) { return [f](const S& x) -> Value { return x.*f; }; };
    auto phase_ms = [&](const char* name, double S::*f, int at) -> Column<S> {
        return {ms(f), {name, "%.6f"}, {name}, {infer ? "" : name, "%.3f"}, at};
    };
    Columns<S> c = {
        {[](const S& x) -> Value { return (long long)x.step; }, {"step"}, {"step"}, {"step"}, 0},
        {[](const S& x) -> Value { return std::string(x.step == PREFILL_STEP ? "prefill" : "decode"); }, {}, {},
         {infer ? "phase" : ""}, 1},
        {ms(&S::wall_ms), {"wall_ms", "%.6f"}, {"wall_ms"}, {"wall_ms", "%.3f"}, 2},
        {ms(&S::gpu_busy_ms), {busy_column(r), "%.6f"}, {busy_column(r)}, {"busy_ms", "%.3f"}, 3},
        phase_ms("fwd_ms", &S::fwd_ms, 5), phase_ms("bwd_ms", &S::bwd_ms, 6), phase_ms("opt_ms", &S::opt_ms, 7),
        phase_ms("other_ms", &S::other_ms, 8),
        {ms(&S::tok_s), {"tok_s", "%.1f"}, {"tok_s"}, {"tok/s", "%.0f"}, 9},
        {ms(&S::energy_j), {"energy_j", "%.6f"}, {"energy_j"}, {"energy_J", "%.2f"}, 10},
        {ms(&S::avg_power_w), {"avg_power_w", "%.3f"}, {"avg_power_w"}, {"power_W", "%.0f"}, 11},
        {ms(&S::idle_ms), {"idle_ms", "%.6f"}, {"idle_ms"}, {"idle_ms", "%.3f"}, 4},
        {[](const S& x) -> Value { return count(x.gaps); }, {"idle_gaps"}, {"idle_gaps"}, {}},
        {[](const S& x) -> Value { return count(x.tokens); }, {"tokens"}, {"tokens"}, {infer ? "tokens" : ""}, 8},
        {ms(&S::j_per_token), {"j_per_token", "%.9f"}, {"j_per_token"}, {}},
        {ms(&S::tokens_per_j), {"tokens_per_j", "%.3f"}, {"tokens_per_j"}, {}},
        {ms(&S::flops_per_w), {"flops_per_w", "%.6g"}, {"flops_per_w"}, {}},
        {[](const S& x) -> Value { return std::string(energy_source_name(x.energy_source)); }, {"energy_source"},
         {"energy_source"}, {}},
        {[](const S& x) -> Value { return x.below_counter_period; }, {"below_counter_period"},
         {"below_counter_period"}, {}},
        {[](const S& x) -> Value { return count(x.activities); }, {"gpu_activities"}, {"gpu_activities"}, {}},
        {[](const S& x) -> Value { return count(x.graph_replayed); }, {"graph_replayed"}, {"graph_replayed"},
         {graphs ? "graph" : ""}, 12},
    };
    if (!r.phases.empty()) // inference: the time in each of its phases
        for (auto [name, f] : {std::make_pair("prefill_ms", &S::prefill_ms), std::make_pair("decode_ms", &S::decode_ms)})
            c.push_back({ms(f), {}, {name}, {}});
    return c;
}

// A CUDA call or a synchronisation type, with its share of the CPU window (api.csv, profile.json "api" and
// "syncs", summary.txt's CUDA API and synchronisation tables).
struct CallLine {
    const NamedTime* t;
    std::string kind; // "api" or "sync"
};

Columns<CallLine> call_columns(const char* heading) {
    using C = CallLine;
    return {
        {[](const C& c) -> Value { return c.t->name; }, {"api"}, {"api"}, {heading}},
        {[](const C& c) -> Value { return count(c.t->calls); }, {"calls"}, {"calls"}, {"calls"}},
        {[](const C& c) -> Value { return c.t->total_us; }, {"total_us"}, {"total_us"}, {"total_ms", "%.3f", 1, 1e3}},
        {[](const C& c) -> Value { return c.t->avg_us; }, {"avg_us"}, {"avg_us"}, {"avg_us", "%.2f"}},
        {[](const C& c) -> Value { return c.t->pct; }, {"pct_of_cpu_time", RATE}, {"pct_of_cpu_time"}, {"%cpu", "%.1f"}},
        {[](const C& c) -> Value { return c.kind; }, {"kind"}, {"kind"}, {}},
    };
}

std::vector<CallLine> call_lines(const std::vector<NamedTime>& rows, const char* kind) {
    std::vector<CallLine> v;
    for (const NamedTime& t : rows) v.push_back({&t, kind});
    return v;
}

// GPU idle time by gap size or by what the CPU was doing (profile.json "gpu_idle", summary.txt).
Columns<NamedTime> idle_columns(const char* heading, const char* time_heading) {
    using N = NamedTime;
    return {
        {[](const N& n) -> Value { return n.name; }, {}, {"name"}, {heading}},
        {[](const N& n) -> Value { return count(n.calls); }, {}, {"gaps"}, {"gaps"}},
        {[](const N& n) -> Value { return n.total_us; }, {}, {"total_us"}, {time_heading, "%.3f", 1, 1e3}},
        {[](const N& n) -> Value { return n.avg_us; }, {}, {"avg_us"}, {}},
        {[](const N& n) -> Value { return n.pct; }, {}, {"pct"}, {"%idle", "%.1f"}},
    };
}

// The largest GPU idle gaps (profile.json "gpu_idle" "largest", summary.txt).
Columns<IdleGap> gap_columns() {
    using G = IdleGap;
    return {
        {[](const G& g) -> Value { return (long long)g.step; }, {}, {"step"}, {"step"}},
        {[](const G& g) -> Value { return g.offset_us; }, {}, {"offset_us"}, {"at_ms", "%.3f", 1, 1e3}},
        {[](const G& g) -> Value { return g.dur_us; }, {}, {"dur_us"}, {"gap_us", "%.1f"}},
        {[](const G& g) -> Value { return g.api; }, {}, {"api"}, {"main CUDA call in the gap", "", 1, 1, 'l', "(none)"}},
        {[](const G& g) -> Value { return g.api_us; }, {}, {"api_overlap_us"}, {"its_us", "%.1f"}},
        {[](const G& g) -> Value { return g.outside_api_us; }, {}, {"outside_api_us"}, {"no_call_us", "%.1f"}},
        {[](const G& g) -> Value { return g.range; }, {}, {"range"}, {"CPU range", "", 1, 1, 'l', "-"}},
    };
}

// phases.csv, profile.json "inference" "phases", summary.txt's prefill and decode: costs over the whole window.
Columns<PhaseRow> phase_columns(const Report& r, const SummaryStyle& st) {
    using P = PhaseRow;
    const double steps = r.cost_steps(); // the costs are per step of the window
    const Ceilings* ce = &r.context.ceilings;
    return {
        {[](const P& p) -> Value { return phase_label(p.phase); }, {"phase"}, {"phase"}, {"phase"}},
        {[](const P& p) -> Value { return count(p.steps); }, {"steps"}, {"steps"}, {"steps"}},
        {[](const P& p) -> Value { return count(p.tokens); }, {"tokens"}, {"tokens"}, {"tokens"}},
        {[](const P& p) -> Value { return p.wall_ms; }, {"wall_ms", "%.6f"}, {"wall_ms"}, {"wall_ms", "%.3f"}},
        {[](const P& p) -> Value { return p.wall_ms > 0 ? p.tokens / (p.wall_ms / 1e3) : NAN; }, {}, {},
         {"tok/s", "%.1f"}},
        {[](const P& p) -> Value { return p.time_us; }, {"time_us"}, {"time_us"},
         {std::string(st.dev) + "_ms", "%.3f", 1, 1e3}},
        {[steps](const P& p) -> Value { return p.cost.flops() * steps; }, {"flops", "%.0f"}, {}, {"GFLOP", "%.2f", 1, 1e9}},
        {[steps](const P& p) -> Value { return p.cost.bytes * steps; }, {"bytes", "%.0f"}, {}, {"MB", "%.1f", 1, 1e6}},
        {[](const P& p) -> Value { return p.roof.intensity; }, {"intensity", RATE}, {}, {"FLOP/B", "%.2f"}},
        {[](const P& p) -> Value { return std::string(p.roof.bound); }, {"bound"}, {}, {"bound"}, 1},
        {[](const P& p) -> Value { return p.roof.pct_of_roofline; }, {"pct_of_roofline", RATE}, {}, {"%roof", "%.0f"}},
        {[ce](const P& p) -> Value { return roofline_json(p.cost, p.roof, *ce); }, {}, {"roofline"}, {}},
    };
}

// decode_buckets.csv, profile.json "inference" "decode_buckets", summary.txt's decode by context length.
Columns<DecodeBucket> decode_bucket_columns() {
    using B = DecodeBucket;
    return {
        {[](const B& b) -> Value { return strprintf("%d-%d", b.first_pos, b.last_pos); }, {}, {}, {"context"}},
        {[](const B& b) -> Value { return (long long)b.first_pos; }, {"first_pos"}, {"first_pos"}, {}},
        {[](const B& b) -> Value { return (long long)b.last_pos; }, {"last_pos"}, {"last_pos"}, {}},
        {[](const B& b) -> Value { return count(b.steps); }, {"steps"}, {"steps"}, {"steps"}},
        {[](const B& b) -> Value { return count(b.tokens); }, {"tokens"}, {"tokens"}, {"tokens"}},
        {[](const B& b) -> Value { return b.wall_ms; }, {"wall_ms", "%.6f"}, {"wall_ms"}, {}},
        {[](const B& b) -> Value { return b.time_ms; }, {"time_ms", "%.6f"}, {"time_ms"}, {}},
        {[](const B& b) -> Value { return b.ms_per_step(); }, {"ms_per_step", "%.6f"}, {"ms_per_step"},
         {"ms/step", "%.3f"}},
        {[](const B& b) -> Value { return b.tok_s(); }, {"tok_s", "%.3f"}, {"tok_s"}, {"tok/s", "%.1f"}},
    };
}

// outside_steps.csv and profile.json "outside_steps" "rows": each validation, sample or checkpoint write between
// the profiled steps.
Columns<OutsideStepRecord> outside_step_columns() {
    using O = OutsideStepRecord;
    return {
        {[](const O& o) -> Value { return o.kind; }, {"kind"}, {"kind"}, {}},
        {[](const O& o) -> Value { return (long long)o.after_step; }, {"after_step"}, {"after_step"}, {}},
        {[](const O& o) -> Value { return o.wall_ms; }, {"wall_ms"}, {"wall_ms"}, {}},
    };
}

// counters.csv, profile.json "counters" "subblocks" and summary.txt's "Measured vs analytic" (--counters): per
// step, the counted figures of each sub-block next to the analytic model's, in GFLOP and MB in the summary.
Columns<MeasuredRow> measured_columns() {
    using M = MeasuredRow;
    auto hw = [](double CounterRow::*f) { return [f](const M& m) -> Value { return m.hw.*f; }; };
    auto an = [](double OpCost::*f) { return [f](const M& m) -> Value { return m.has_analytic ? m.analytic.*f : NAN; }; };
    auto rate = [](double (CounterRow::*f)() const) { return [f](const M& m) -> Value { return (m.hw.*f)(); }; };
    auto flops = [](const char* name, const char* heading) -> std::tuple<Shown, Shown, Shown> {
        return {{name, "%.0f"}, {name}, {heading, "%.3f", 1, 1e9}};
    };
    auto bytes = [](const char* name, const char* heading, const char* fmt) -> std::tuple<Shown, Shown, Shown> {
        return {{name, "%.0f"}, {name}, {heading, fmt, 1, 1e6}};
    };
    auto col = [](std::function<Value(const M&)> get, std::tuple<Shown, Shown, Shown> shown) -> Column<M> {
        return {std::move(get), std::get<0>(shown), std::get<1>(shown), std::get<2>(shown)};
    };
    return {
        {[](const M& m) -> Value { return m.subblock; }, {"subblock"}, {"subblock"}, {"subblock"}},
        {[](const M& m) -> Value { return m.phase; }, {"phase"}, {"phase"}, {"phase", "", 1, 1, 'l'}},
        {[](const M& m) -> Value { return (long long)m.hw.kernels; }, {"kernels"}, {"kernels"}, {"kern"}},
        {hw(&CounterRow::time_ns), {"time_us", "%.3f", 1, 1e3}, {"time_us", "", 1, 1e3}, {"ms", "%.3f", 1, 1e6}},
        col(an(&OpCost::gemm_flops), flops("gemm_flops_analytic", "gemm_an")),
        col(hw(&CounterRow::tensor_flops), flops("tensor_flops_counted", "tensor_hw")),
        col(an(&OpCost::other_flops), flops("elementwise_flops_analytic", "elem_an")),
        col(hw(&CounterRow::fp32_flops), flops("fp32_flops_counted", "fp32_hw")),
        col(an(&OpCost::bytes), bytes("dram_bytes_analytic", "MB_an", "%.3f")),
        col(hw(&CounterRow::dram_bytes), bytes("dram_bytes_counted", "MB_dram", "%.1f")),
        col(hw(&CounterRow::l2_bytes), bytes("l2_bytes_counted", "MB_L2", "%.1f")),
        {rate(&CounterRow::tflops), {"tflops", RATE}, {"tflops"}, {"TFLOP/s", "%.3f"}},
        {rate(&CounterRow::intensity), {"intensity", RATE}, {"intensity"}, {"FLOP/B", "%.3f"}},
        {rate(&CounterRow::pct_of_roofline), {"pct_of_roofline", RATE}, {"pct_of_roofline"}, {"%roof", "%.0f"}},
        {[](const M& m) -> Value { return std::string(m.hw.bound()); }, {"bound"}, {"bound"}, {"bound", "", 1, 1, 'l'}},
    };
}

// energy.csv, profile.json "energy" "rows" and summary.txt's "Energy per sub-block" (--energy): J per step in mJ in
// the summary, with the 95% interval.
Columns<EnergyRow> energy_columns() {
    using E = EnergyRow;
    auto num_col = [](double E::*f, const char* name, const char* heading, const char* fmt, double mul) -> Column<E> {
        return {[f](const E& e) -> Value { return e.*f; }, {name, "%.6g"}, {name}, {heading, fmt, mul}};
    };
    auto int_col = [](int E::*f, const char* name, const char* heading) -> Column<E> {
        return {[f](const E& e) -> Value { return e.*f ? (double)(e.*f) : NAN; }, {name, "%.0f"}, {name},
                {heading, "%.0f"}};
    };
    return {
        {[](const E& e) -> Value { return e.subblock; }, {"sub_block"}, {"sub_block"}, {"sub-block"}},
        {[](const E& e) -> Value { return e.phase; }, {"phase"}, {"phase"}, {"phase", "", 1, 1, 'l'}},
        {[](const E& e) -> Value { return e.layers; }, {"layers"}, {"layers"}, {"layers", "", 1, 1, 'l'}},
        num_col(&E::j_per_step, "j_per_step", "mJ/step", "%.3f", 1e3),
        num_col(&E::ci95_low, "ci95_low", "ci95_lo", "%.3f", 1e3),
        num_col(&E::ci95_high, "ci95_high", "ci95_hi", "%.3f", 1e3),
        num_col(&E::watts, "watts", "W", "%.1f", 1),
        num_col(&E::j_above_idle, "j_above_idle", "mJ>idle", "%.3f", 1e3),
        num_col(&E::flop_per_j, "flop_per_j", "GFLOP/J", "%.1f", 1e-9),
        {[](const E& e) -> Value { return (long long)e.repeats; }, {"repeats"}, {"repeats"}, {"reps"}},
        num_col(&E::seconds, "seconds", "s", "%.1f", 1),
        int_col(&E::sm_clock_mhz, "sm_clock_mhz", "MHz"),
        int_col(&E::temperature_c, "temp_c", "C"),
    };
}

// Their time by kind: profile.json "outside_steps" "by_kind" and summary.txt.
Columns<NamedTime> outside_kind_columns() {
    using N = NamedTime;
    return {
        {[](const N& n) -> Value { return n.name; }, {}, {"kind"}, {"kind"}},
        {[](const N& n) -> Value { return count(n.calls); }, {}, {"count"}, {"count"}},
        {[](const N& n) -> Value { return n.total_us; }, {}, {"total_ms", "", 1, 1e3}, {"total_ms", "%.3f", 1, 1e3}},
        {[](const N& n) -> Value { return n.avg_us; }, {}, {"avg_ms", "", 1, 1e3}, {"avg_ms", "%.3f", 1, 1e3}},
        {[](const N& n) -> Value { return n.pct; }, {}, {"pct_of_window"}, {"%window", "%.1f"}},
    };
}

std::string shape_text(const std::vector<size_t>& shape) {
    std::string s;
    for (size_t i = 0; i < shape.size(); i++) s += strprintf("%s%zu", i ? "x" : "", shape[i]);
    return s;
}

// memory.csv and profile.json "memory" "tensors": the plan's tensors (llmc/model/memory_plan.h).
struct TensorLine {
    const PlannedTensor* t;
    const MemoryPlan* plan;
};

// An index that may be "none" (negative): null, so an empty CSV cell and a JSON null.
Value index_or_none(int i) { return i >= 0 ? Value((long long)i) : Value(nlohmann::json()); }

Columns<TensorLine> tensor_columns() {
    using T = TensorLine;
    auto op = [](bool first) {
        return [first](const T& x) -> Value {
            const int i = first ? x.t->first_use : x.t->last_use;
            return i >= 0 && i < (int)x.plan->ops.size() ? Value(x.plan->ops[i]) : Value(nlohmann::json());
        };
    };
    return {
        {[](const T& x) -> Value { return x.t->name; }, {"name"}, {"name"}, {}},
        {[](const T& x) -> Value { return index_or_none(x.t->layer); }, {"layer"}, {"layer"}, {}},
        {[](const T& x) -> Value {
             return x.t->subblock >= 0 ? Value(std::string(subblock_name((SubBlock)x.t->subblock))) : Value(nlohmann::json());
         },
         {"subblock"}, {"subblock"}, {}},
        {[](const T& x) -> Value { return std::string(memory_kind_name(x.t->kind)); }, {"kind"}, {"kind"}, {}},
        {[](const T& x) -> Value { return x.t->dtype; }, {"dtype"}, {"dtype"}, {}},
        {[](const T& x) -> Value { return shape_text(x.t->shape); }, {"shape"}, {}, {}},
        {[](const T& x) -> Value { return nlohmann::json(x.t->shape); }, {}, {"shape"}, {}},
        {[](const T& x) -> Value { return x.plan->allocations[x.t->allocation].name; }, {"allocation"}, {"allocation"}, {}},
        {[](const T& x) -> Value { return (long long)x.t->offset; }, {"offset"}, {"offset"}, {}},
        {[](const T& x) -> Value { return (long long)x.t->bytes; }, {"bytes"}, {"bytes"}, {}},
        {[](const T& x) -> Value { return index_or_none(x.t->first_use); }, {"first_use"}, {"first_use"}, {}},
        {[](const T& x) -> Value { return index_or_none(x.t->last_use); }, {"last_use"}, {"last_use"}, {}},
        {op(true), {"first_op"}, {"first_op"}, {}},
        {op(false), {"last_op"}, {"last_op"}, {}},
    };
}

std::vector<TensorLine> tensor_lines(const MemoryPlan& plan) {
    std::vector<TensorLine> v;
    for (const PlannedTensor& t : plan.tensors) v.push_back({&t, &plan});
    return v;
}


std::string summary_header(const Report& r, const SummaryStyle& style) {
    const ProfileContext& c = r.context;
    const GPT2Config& m = c.model;
    std::string s;
    s += strprintf("llmc profile: %s\n", c.program.empty() ? "(unnamed)" : c.program.c_str());
    s += "  device    " + c.device + "\n";
    if (!c.build.empty()) s += "  build     " + c.build + "\n";
    if (r.has_model)
        s += strprintf("  model     GPT-2 L=%d NH=%d C=%d maxT=%d V=%d Vp=%d, %.2fM parameters\n", m.num_layers,
                       m.num_heads, m.channels, m.max_seq_len, m.vocab_size, m.padded_vocab_size,
                       (c.num_parameters ? c.num_parameters : num_parameters(m)) / 1e6);
    if (c.inference.active()) // no T, no gradient accumulation: sequences, their prompts, what they generated
        s += strprintf("  batch     %ld sequences, %ld prompt tokens, %ld generated tokens, %d profiled steps (a "
                       "prefill, then decode steps)\n",
                       c.inference.sequences, c.inference.prompt_tokens,
                       c.inference.sequences + c.inference.decode_tokens, r.num_steps);
    else
        s += strprintf("  batch     B=%d T=%d grad_accum=%d (%ld tokens per step), %d profiled steps\n", c.B, c.T,
                       c.grad_accum, (long)c.B * c.T * c.grad_accum, r.num_steps);
    const Ceilings& ce = c.ceilings;
    s += strprintf("  ceilings  %s %s TFLOP/s, fp32 %s TFLOP/s, DRAM %s GB/s, ridge %s FLOP/B (%s)\n", style.matmul,
                   tflops_text(ce.bf16_tflops > 0 ? ce.bf16_tflops : NAN).c_str(),
                   tflops_text(ce.fp32_tflops > 0 ? ce.fp32_tflops : NAN).c_str(),
                   num(ce.dram_gbps > 0 ? ce.dram_gbps : NAN, "%.0f").c_str(),
                   num(ce.dram_gbps > 0 ? ce.bf16_tflops * 1e3 / ce.dram_gbps : NAN, "%.0f").c_str(),
                   ce.source.empty() ? "none" : ce.source.c_str());
    const CeilingRaise& up = r.ceiling_raise;
    if (up.raised()) {
        auto factor = [](double k, const std::string& by) {
            return k > 1 ? strprintf("x%.3f (%s beat it)", k, by.c_str()) : std::string("x1 (not beaten)");
        };
        s += strprintf("  raised    this profile beat the measured ceilings, so they were raised to what it measured: "
                       "compute %s, bandwidth %s; measured: %s %s, fp32 %s TFLOP/s, DRAM %s GB/s\n",
                       factor(up.compute, up.compute_by).c_str(), factor(up.memory, up.memory_by).c_str(), style.matmul,
                       num(up.before.bf16_tflops, "%.3g").c_str(), num(up.before.fp32_tflops, "%.3g").c_str(),
                       num(up.before.dram_gbps, "%.0f").c_str());
    }
    if (c.inference.active())
        s += strprintf("  roofline  the KV-cache decoder's analytic model, %d-byte elements; decode reads every weight "
                       "per step\n", c.inference.elem_bytes);
    else if (!style.on_gpu)
        s += "  roofline  the CPU step's analytic model: fp32 tensors, no fusions (residual adds and GELU on their "
             "own); every FLOP against the matmul ceiling\n";
    if (style.on_gpu)
        s += strprintf("  records   %zu kernels, %zu memcpys, %zu memsets, %zu API calls, %zu syncs, %zu ranges, %zu "
                       "power samples; %llu dropped; CUPTI overhead %.3f ms\n",
                       r.records.kernels, r.records.memcpys, r.records.memsets, r.records.api, r.records.syncs,
                       r.records.ranges, r.records.power, (unsigned long long)r.dropped_records, r.cupti_overhead_ms);
    else // timed on the CPU: no CUDA calls, no copies, no CUPTI
        s += strprintf("  records   %zu op executions, %zu ranges, %zu power samples\n", r.records.kernels,
                       r.records.ranges, r.records.power);
    return s;
}

std::string summary_throughput(const Report& r, const SummaryStyle& style) {
    const ProfileContext& c = r.context;
    const Ceilings& ce = c.ceilings;
    std::string s;
    s += "\n== Throughput ==\n";
    const double per_step = r.num_steps ? 1.0 / r.num_steps : NAN;
    s += strprintf("  %s tokens/s over %d steps (%s ms per step); %s time %s ms per step\n",
                   num(r.tokens_per_s, "%.0f").c_str(), r.num_steps, num(r.wall_s * 1e3 * per_step, "%.3f").c_str(),
                   style.dev, num(r.gpu_time_us / 1e3 * per_step, "%.3f").c_str());
    if (r.has_model)
        s += strprintf("  model FLOPs %.4g per token (%s) -> %s TFLOP/s, MFU %s%% of %s %s TFLOP/s\n",
                       r.flops_per_token, c.inference.active() ? "forward, analytic" : "6N + 12LCT",
                       tflops_text(r.model_tflops).c_str(), num(r.mfu, "%.1f").c_str(), style.matmul,
                       tflops_text(ce.bf16_tflops > 0 ? ce.bf16_tflops : NAN).c_str());
    if (style.on_gpu) s += strprintf("  peak GPU memory %.2f GiB\n", c.peak_memory_bytes / 1073741824.0);
    return s;
}


std::string summary_top_kernels(const Report& r, const SummaryStyle& style, int top_n) {
    std::string s = strprintf("\n== Top %d %s (of %zu rows; %% of %s time) ==\n", top_n, style.on_gpu ? "kernels" : "ops",
                              r.kernels.size(), style.dev);
    return s + text_table(kernel_columns(style), r.kernels, std::max(0, top_n));
}

std::string summary_subblocks(const Report& r, const SummaryStyle& style) {
    std::string s;
    s += "\n== Sub-blocks and roofline (analytic FLOPs and bytes, time per step) ==\n";
    std::vector<SubBlockLine> lines = subblock_lines(r);
    lines.push_back({&r.total, "total", "", &r.context.ceilings});
    s += text_table(subblock_columns(style), lines);
    s += "  ms/step: the mean over the profiled steps; median [min, max]: the sub-block's time in each step.\n"
         "  %roof = floor / time: achieved over the ceiling that bounds the sub-block. ";
    s += style.on_gpu ? "GEMM FLOPs against bf16,\n  elementwise FLOPs against fp32 (bf16 when unknown); "
                      : "Every FLOP against the fp32\n  matmul ceiling; ";
    s += "bytes: minimum DRAM traffic (doc/profiling.md).\n";
    s += measured_vs_analytic(r.counters, r.costs, r.has_model);
    return s;
}


// Inference: prefill against decode with their rooflines, the KV cache, and decode's cost by context length.
std::string summary_inference(const Report& r, const SummaryStyle& style) {
    const InferenceShape& in = r.context.inference;
    std::string s = "\n== Inference: prefill and decode ==\n";
    s += strprintf("  %ld sequences, %ld prompt tokens, %ld decode steps (%ld tokens); KV cache %.2f MiB\n", in.sequences,
                   in.prompt_tokens, in.decode_steps, in.decode_tokens, in.kv_cache_bytes / 1048576.0);
    s += text_table(phase_columns(r, style), r.phases);
    s += "  decode bytes per step: every weight plus the KV cache positions attended (doc/profiling.md, \"Inference\")\n";
    if (!r.decode_buckets.empty())
        s += "  decode by context length:\n" + text_table(decode_bucket_columns(), r.decode_buckets);
    return s;
}

// Validation, samples and checkpoint writes between the profiled steps: in the run's wall time, not in the steps'.
std::string summary_outside_steps(const Report& r) {
    const OutsideSteps& o = r.outside_steps;
    if (o.rows.empty())
        return "  time outside the training steps: none (no validation, sample or checkpoint between the profiled "
               "steps)\n";
    std::string s = strprintf("  time outside the training steps: %.3f ms, %s%% of the window's wall time (%s ms, "
                              "first step's start to last step's end)\n",
                              o.total_ms, num(o.pct, "%.1f").c_str(), num(o.window_ms, "%.3f").c_str());
    return s + text_table(outside_kind_columns(), o.by_kind);
}

std::string summary_steps(const Report& r, const SummaryStyle& style) {
    const bool infer = r.context.inference.active(); // each step a prefill or a decode: no fwd/bwd/opt split
    std::string s = strprintf("\n== Steps (%s time%s) ==\n", style.dev, infer ? "" : " by phase");
    s += text_table(step_columns(r), r.steps);
    if (std::any_of(r.steps.begin(), r.steps.end(), [](const StepRow& x) { return x.graph_replayed > 0; }))
        s += "  graph: the step's kernels, copies and memsets replayed from CUDA graphs (each attributed to the "
             "sub-block it was captured in)\n";
    return infer ? s : s + summary_outside_steps(r);
}

std::string summary_gpu_idle_and_api(const Report& r) {
    std::string s = "\n== GPU idle ==\n";
    s += strprintf("  %.3f ms idle in %ld gaps over %d steps (%s%% of wall time)\n", r.idle_us / 1e3, r.idle_gaps,
                   r.num_steps, num(r.wall_s > 0 ? 100 * r.idle_us / (r.wall_s * 1e6) : NAN, "%.1f").c_str());
    s += text_table(idle_columns("gap size", "total_ms"), r.gap_sizes);
    s += "  idle time by what the CPU thread was doing:\n";
    s += text_table(idle_columns("CPU in", "idle_ms"), r.idle_by_cpu);
    s += "  largest gaps:\n";
    s += text_table(gap_columns(), r.largest_gaps);
    s += strprintf("\n== CUDA API (CPU thread; %.1f%% of the window in CUDA calls) ==\n", r.api_pct);
    s += text_table(call_columns("api"), call_lines(r.api, "api"));
    s += strprintf("\n== Synchronisation (CPU blocked; %.1f%% of the window) ==\n", r.sync_pct);
    s += text_table(call_columns("type"), call_lines(r.syncs, "sync"));
    return s;
}

std::string summary_power(const Report& r) {
    std::string s;
    s += "\n== Power ==\n";
    const PowerSummary& p = r.power;
    if (!std::isfinite(p.energy_j)) {
        s += "  energy, J/token, tokens/J, FLOP/s per W: n/a (" + (p.status.empty() ? "no NVML" : p.status) + ")\n";
        return s;
    }
    if (p.samples > 0)
        s += strprintf("  %zu samples%s: energy %.2f J, average %.0f W, peak %.0f W\n", p.samples,
                       p.reading.empty() ? "" : (" (" + p.reading + " power)").c_str(), p.energy_j, p.avg_w, p.peak_w);
    else
        s += strprintf("  energy %.2f J, average %.1f W\n", p.energy_j, p.avg_w);
    s += strprintf("  %s J/token, %s tokens/J, %s GFLOP/s per W\n", num(p.joules_per_token, "%.5f").c_str(),
                   num(p.tokens_per_j, "%.1f").c_str(), num(p.flops_per_w / 1e9, "%.1f").c_str());
    const std::string why = std::isfinite(p.counter_still_ms) ? "the " + p.counter + " did not advance over the window"
                                                               : "no readings of the " + p.counter;
    const std::string window = p.window_source == EnergySource::counter ? p.counter + " over the whole window"
                                                                        : "steps' energies summed (" + why + ")";
    const std::string steps = p.counter_steps && p.integrated_steps ? "the counter or integrated power samples"
                              : p.counter_steps                     ? "the counter"
                                                                    : "integrated power samples";
    s += strprintf("  energy from the %s; each step's from %s (%d steps counter, %d integrated)\n", window.c_str(),
                   steps.c_str(), p.counter_steps, p.integrated_steps);
    if (p.below_counter_period_steps > 0)
        s += strprintf("  %d of %zu steps no longer than the %.1f ms the energy counter stood still: the counter cannot "
                       "measure them, their energy is an estimate (steps.csv below_counter_period)\n",
                       p.below_counter_period_steps, r.steps.size(), p.counter_still_ms);
    if (p.samples > 0) {
        std::string throttled = throttle_names(p.throttle_reasons);
        s += strprintf("  SM clock %d-%d MHz (max %s), max temperature %d C, throttle reasons 0x%llx (%s)\n",
                       p.min_sm_clock_mhz, p.max_sm_clock_mhz,
                       p.max_sm_clock_limit_mhz ? std::to_string(p.max_sm_clock_limit_mhz).c_str() : "unknown",
                       p.max_temperature_c, (unsigned long long)p.throttle_reasons,
                       throttled.empty() ? "no throttling" : throttled.c_str());
    }
    return s;
}

std::string summary_energy(const Report& r) {
    const EnergySummary& e = r.energy;
    if (!e.requested) return "";
    std::string s = "\n== Energy per sub-block (--energy: each replayed for the energy counter) ==\n";
    if (!e.measured) return s + "  not measured: " + e.status + "\n";
    s += strprintf("  %s%s, updated every %.1f ms; %d repetitions of %.2f s per target, interleaved; idle %.1f W\n",
                   e.source.c_str(), e.synthetic ? ", not a device" : "", e.counter_period_ms, e.repeats,
                   e.window_s, e.idle_w);
    s += text_table(energy_columns(), e.rows);
    s += strprintf("  closure: the sub-blocks sum to %.3f mJ per step, the step replayed whole %.3f mJ (%+.1f%%)\n",
                   e.sum_j * 1e3, e.step_j * 1e3, e.diff_pct);
    return s;
}

std::string summary_findings(const Report& r) {
    std::string s;
    s += "\n== Findings ==\n";
    if (r.findings.empty()) s += "  nothing stands out: no rule found time at stake\n";
    for (size_t i = 0; i < r.findings.size(); i++) {
        const Finding& f = r.findings[i];
        s += strprintf("  %zu. [%s] %s (~%.3f ms per step at stake)\n", i + 1, f.rule.c_str(), f.what.c_str(),
                       f.ms_per_step);
        s += "     evidence: " + f.evidence + "\n";
        s += "     next: " + f.next_step + "\n";
    }
    return s;
}

} // namespace

std::string measured_vs_analytic(const CounterReport& r, const CostTable& costs, bool has_model) {
    if (!r.collected) return r.note.empty() ? "" : "\n== Measured vs analytic ==\n  counters: " + r.note + "\n";
    std::string s = "\n== Measured vs analytic (hardware counters of one extra step under kernel replay; GFLOP, MB) ==\n";
    s += text_table(measured_columns(), measured_rows(r, costs, has_model));
    s += "  _an: analytic model; _hw: counters (tensor = sm__ops_path_tensor_src_bf16_dst_fp32, fp32 = fadd + fmul +\n"
         "  2·ffma, MB_dram = read + write). Rates from summed counts; %roof = summed per-kernel floors / time.\n"
         "  " + std::string(REPLAY_NOTE) + "\n";
    if (!r.note.empty()) s += "  note: " + r.note + "\n";
    return s;
}

std::string energy_csv(const Report& r) { return csv_table(energy_columns(), r.energy.rows); }

std::string counters_csv(const Report& r) {
    return csv_table(measured_columns(), measured_rows(r.counters, r.costs, r.has_model));
}

std::string format_summary(const Report& r, int top_n) {
    const SummaryStyle st(r);
    std::string s = summary_header(r, st) + summary_throughput(r, st) + summary_top_kernels(r, st, top_n) +
                    summary_subblocks(r, st) + (r.phases.empty() ? "" : summary_inference(r, st)) +
                    summary_steps(r, st);
    if (st.on_gpu) s += summary_gpu_idle_and_api(r);
    s += summary_power(r) + summary_energy(r) + summary_findings(r);
    if (r.memory.present) s += "\n" + format_memory_report(r.context.memory, r.memory);
    return s;
}

std::string format_outcome(const Report& r, const std::string& dir, int max_findings, bool page) {
    std::string s = strprintf("profile: %s/summary.txt%s: %s tokens/s over %d step%s", dir.c_str(),
                              page ? (" and " + dir + "/report.html").c_str() : "", num(r.tokens_per_s, "%.0f").c_str(),
                              r.num_steps, r.num_steps == 1 ? "" : "s");
    if (std::isfinite(r.mfu)) s += strprintf(", MFU %.1f%%", r.mfu);
    s += "\n";
    if (r.findings.empty()) return s + "profile: no finding: no rule found time at stake\n";
    const int shown = std::min<int>(max_findings, (int)r.findings.size());
    s += strprintf("profile: top %d of %zu findings (evidence and next steps in the summary):\n", shown,
                   r.findings.size());
    for (int i = 0; i < shown; i++) {
        const Finding& f = r.findings[i];
        s += strprintf("  %d. [%s] %s (~%.3f ms per step at stake)\n", i + 1, f.rule.c_str(), f.what.c_str(),
                       f.ms_per_step);
    }
    return s;
}

std::string kernels_csv(const Report& r) { return csv_table(kernel_columns(SummaryStyle(r)), r.kernels); }

// time_us and pct over the window; flops, bytes, rates and the floor per step (the mean); the median, minimum
// and maximum of the sub-block's time in each profiled step.
std::string subblocks_csv(const Report& r) { return csv_table(subblock_columns(SummaryStyle(r)), subblock_lines(r)); }

std::string steps_csv(const Report& r) { return csv_table(step_columns(r), r.steps); }

std::string outside_steps_csv(const Report& r) { return csv_table(outside_step_columns(), r.outside_steps.rows); }

// Inference only: one row per phase, costs over the whole window.
std::string phases_csv(const Report& r) { return csv_table(phase_columns(r, SummaryStyle(r)), r.phases); }

std::string decode_buckets_csv(const Report& r) { return csv_table(decode_bucket_columns(), r.decode_buckets); }

// CUDA API rows (kind "api"), then the synchronisation types (kind "sync"), shares of the CPU window.
std::string api_csv(const Report& r) {
    std::vector<CallLine> rows = call_lines(r.api, "api");
    for (CallLine& c : call_lines(r.syncs, "sync")) rows.push_back(c);
    return csv_table(call_columns("api"), rows);
}

std::string memory_csv(const MemoryPlan& plan) { return csv_table(tensor_columns(), tensor_lines(plan)); }

/*
 * One row per (sub-block, phase) (scope "subblock") and the whole step (scope "total"), per step:
 * analytic FLOPs (tensor-core GEMM and CUDA-core parts) and bytes, measured time, the floors, the ceilings
 * and the achieved rates. With hardware counters (--counters) replay_flops (tensor + FP32) and replay_bytes
 * (DRAM read + write) are filled, and one row per kernel (scope "kernel_replay", summed over its launches in the
 * sub-block) follows, with the counted time and the ceilings it ran at: all figures of kernel replay (REPLAY_NOTE).
 */
std::string roofline_csv(const Report& r) {
    const CounterReport& hw = r.counters;
    std::vector<RooflineLine> lines;
    auto add = [&](const char* scope, const std::string& sub, const std::string& phase, const SubBlockRow& b,
                   const CounterRow* m) {
        RooflineLine l = roofline_line(b.cost, b.roof, r.context.ceilings);
        l.scope = scope, l.subblock = sub, l.phase = phase;
        if (m) l.replay_flops = m->flops(), l.replay_bytes = m->dram_bytes;
        lines.push_back(l);
    };
    for (const SubBlockRow& b : r.subblocks)
        if (b.cost.flops() > 0 || b.cost.bytes > 0)
            add("subblock", subblock_label(b.subblock), phase_label(b.phase), b,
                hw.collected ? find_counter_row(hw, b.subblock, b.phase) : nullptr);
    add("total", "", "", r.total, hw.collected ? &hw.total : nullptr);
    for (const CounterRow& k : hw.per_kernel) lines.push_back(replay_line(k));
    return csv_table(roofline_columns(), lines);
}

namespace {

// A trace slice on one track (pid, tid); flow: the correlation id of the launch arrow it starts (a CUDA call)
// or ends (the GPU work it launched), 0 for none.
struct Slice {
    int pid;
    uint64_t tid, start, end;
    uint32_t flow;
    bool gpu;
    std::string name, cat;
    nlohmann::json args;
};

int gpu_pid(uint32_t device) { return 1 + (int)device; }

nlohmann::json where_args(const Attribution& w) {
    return nlohmann::json{{"subblock", subblock_label(w.subblock)}, {"phase", phase_label(w.phase)},
                          {"layer", w.layer}, {"step", w.step}};
}

// The tracks: steps (tid 0), then per CPU thread (in order of id) a track of its Ranges and, where it made
// CUDA calls, one of those, then one per (device, stream). t0: the earliest timestamp.
struct TraceTracks {
    std::vector<Slice> slices;
    std::map<uint32_t, uint64_t> range_tid;          // CPU thread -> its Ranges' tid; its CUDA calls' is +1
    std::set<uint32_t> api_threads;                  // CPU threads with CUDA calls
    std::set<std::pair<uint32_t, uint32_t>> streams; // (device, stream)
    uint64_t t0 = UINT64_MAX;
    void seen(uint64_t t) { t0 = std::min(t0, t); }
};

/*
 * Device work in the form PyTorch's profiler (Kineto) writes it, which trace analysers such as Holistic Trace
 * Analysis read: cat "kernel", "gpu_memcpy" or "gpu_memset"; the kernel's full name, copies named "Memcpy
 * <kind>" and sets "Memset" (HTA tells memory work from compute by those prefixes); args "device", "stream"
 * and "correlation" (the CUDA call that launched it, or the CPU trainer's phase range), and "graph_node" for work
 * replayed from a CUDA graph (its correlation is then the cudaGraphLaunch's).
 */
Slice activity_slice(const Activity& a) {
    nlohmann::json args = where_args(a.where);
    std::string name, cat;
    if (const KernelRecord* k = a.kernel) {
        name = k->name, cat = "kernel";
        args["grid"] = {k->grid[0], k->grid[1], k->grid[2]};
        args["block"] = {k->block[0], k->block[1], k->block[2]};
        args["registers"] = k->registers_per_thread;
        args["static_smem"] = k->static_smem;
        args["dynamic_smem"] = k->dynamic_smem;
    } else if (const MemcpyRecord* m = a.copy) {
        name = std::string("Memcpy ") + copy_kind_name(m->kind), cat = "gpu_memcpy";
        args["bytes"] = m->bytes;
        if (a.end > a.start) args["GB/s"] = (double)m->bytes / (a.end - a.start);
    } else {
        name = "Memset", cat = "gpu_memset";
        args["bytes"] = a.set->bytes;
    }
    args["device"] = a.device;
    args["stream"] = a.stream;
    args["correlation"] = a.correlation;
    if (a.graph_node) args["graph_node"] = a.graph_node; // replayed from a CUDA graph; correlation: its launch
    return {gpu_pid(a.device), a.stream, a.start, a.end, a.correlation, true, name, cat, args};
}

/*
 * Steps are "ProfilerStep#N" and Ranges "user_annotation" slices, CUDA calls "cuda_runtime", as Kineto names
 * them: HTA numbers iterations by the ProfilerStep slices. Launch arrows go from CUDA calls to GPU work; the
 * CPU trainer's ops have no launching call, so no arrow: their correlation is their phase range's. Device
 * work is the tables' (the window's, report.h), so a trace analyser's totals match kernels.csv; CPU ranges
 * and calls outside it stay, to show the set-up around the steps.
 */
TraceTracks trace_tracks(const ProfileRecords& rec) {
    TraceTracks t;
    std::set<uint32_t> threads;
    for (const RangeRecord& x : rec.ranges) threads.insert(x.thread);
    for (const ApiRecord& x : rec.api) threads.insert(x.thread), t.api_threads.insert(x.thread);
    uint64_t next_tid = 1;
    for (uint32_t th : threads) t.range_tid[th] = next_tid, next_tid += 2;
    for (const StepRecord& x : rec.steps) {
        t.seen(x.start_ns);
        t.slices.push_back({0, 0, x.start_ns, x.end_ns, 0, false, strprintf("ProfilerStep#%d", x.step),
                            "user_annotation", {{"step", x.step}, {"tokens", x.tokens}}});
    }
    for (const RangeRecord& x : rec.ranges) {
        t.seen(x.start_ns);
        nlohmann::json args = where_args(x.where);
        if (x.correlation) args["correlation"] = x.correlation;
        t.slices.push_back(
            {0, t.range_tid[x.thread], x.start_ns, x.end_ns, 0, false, x.name, "user_annotation", args});
    }
    for (const ApiRecord& x : rec.api) {
        t.seen(x.start_ns);
        t.slices.push_back({0, t.range_tid[x.thread] + 1, x.start_ns, x.end_ns, x.correlation, false, x.name,
                            "cuda_runtime", {{"correlation", x.correlation}}});
    }
    const StepWindow window(rec.steps);
    for (const Activity& a : gpu_activities(rec)) {
        if (!window.contains(a.start)) continue; // set-up work: not in the tables, so not in the trace either
        t.seen(a.start);
        t.streams.insert({a.device, a.stream});
        t.slices.push_back(activity_slice(a));
    }
    for (const PowerSample& p : rec.power) t.seen(p.t_ns);
    if (t.t0 == UINT64_MAX) t.t0 = 0;
    return t;
}

// Nests every track: sorted by (start, longest first), a slice is clipped to the end of the one enclosing it.
void nest_slices(std::vector<Slice>& slices) {
    for (Slice& x : slices) x.end = std::max(x.end, x.start);
    std::vector<size_t> order(slices.size());
    for (size_t i = 0; i < order.size(); i++) order[i] = i;
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
        const Slice &x = slices[a], &y = slices[b];
        return std::tie(x.pid, x.tid, x.start, y.end) < std::tie(y.pid, y.tid, y.start, x.end);
    });
    std::vector<uint64_t> open_ends;
    for (size_t i = 0; i < order.size(); i++) {
        Slice& x = slices[order[i]];
        if (i == 0 || slices[order[i - 1]].pid != x.pid || slices[order[i - 1]].tid != x.tid) open_ends.clear();
        while (!open_ends.empty() && open_ends.back() <= x.start) open_ends.pop_back();
        if (!open_ends.empty()) x.end = std::min(x.end, open_ends.back());
        open_ends.push_back(x.end);
    }
}

// Event lines: each event's fields, then ts (and dur) as microseconds with 3 decimals since t0.
class TraceEvents {
public:
    explicit TraceEvents(uint64_t t0) : t0_(t0) {}
    void event(const nlohmann::json& e, uint64_t ts_ns, const uint64_t* dur_ns = nullptr) {
        std::string line = e.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
        line.pop_back();
        line += ",\"ts\":" + trace_us(ts_ns - t0_);
        if (dur_ns) line += ",\"dur\":" + trace_us(*dur_ns);
        lines_.push_back(line + "}");
    }
    void meta(const char* what, int pid, uint64_t tid, const std::string& value, int sort_index) {
        event({{"name", what}, {"ph", "M"}, {"pid", pid}, {"tid", tid}, {"args", {{"name", value}}}}, t0_);
        event({{"name", std::string(what) + "_sort_index"}, {"ph", "M"}, {"pid", pid}, {"tid", tid},
               {"args", {{"sort_index", sort_index}}}},
              t0_);
    }
    // `header`: the top-level fields before traceEvents, one per line.
    std::string str(const std::vector<std::string>& header) const {
        std::string out = "{";
        for (const std::string& h : header) out += h + ",\n";
        out += "\"traceEvents\":[\n";
        for (size_t i = 0; i < lines_.size(); i++) out += lines_[i] + (i + 1 < lines_.size() ? ",\n" : "\n");
        return out + "]}\n";
    }

private:
    uint64_t t0_;
    std::vector<std::string> lines_;
};

// Process and thread names; returns the devices with a process (the power counters go to the first).
std::set<uint32_t> name_tracks(TraceEvents& ev, const TraceTracks& t, const ProfileContext& c, bool has_power) {
    ev.meta("process_name", 0, 0, "CPU: " + (c.program.empty() ? std::string("llmc") : c.program), 0);
    ev.meta("thread_name", 0, 0, "steps", 0);
    const bool cpu = c.device_kind == DeviceKind::CPU; // the CPU trainer: one track of sub-block executions
    for (auto& [thread, tid] : t.range_tid) {
        ev.meta("thread_name", 0, tid, strprintf("thread %u: ranges", thread), (int)tid);
        if (t.api_threads.count(thread))
            ev.meta("thread_name", 0, tid + 1, strprintf("thread %u: CUDA API", thread), (int)tid + 1);
    }
    std::set<uint32_t> devices;
    for (const auto& [device, stream] : t.streams) devices.insert(device);
    if (has_power) devices.insert(devices.empty() ? 0 : *devices.begin());
    for (uint32_t d : devices)
        ev.meta("process_name", gpu_pid(d), 0, strprintf("%s %u: ", device_kind_name(c.device_kind), d) + c.device,
                gpu_pid(d));
    for (const auto& [device, stream] : t.streams)
        ev.meta("thread_name", gpu_pid(device), stream, cpu ? "sub-blocks" : strprintf("stream %u", stream),
                (int)stream);
    return devices;
}

// The slices, then a flow from each launch to its GPU activity, at the middle of both slices (unambiguous
// even where slices touch). Flows are "ac2g", Kineto's category for them.
void slice_events(TraceEvents& ev, const std::vector<Slice>& slices) {
    std::map<uint32_t, const Slice*> launch, target; // correlation -> API slice, GPU slice
    for (const Slice& x : slices) {
        if (x.flow) (x.gpu ? target : launch)[x.flow] = &x;
        const uint64_t dur = x.end - x.start;
        ev.event({{"name", x.name}, {"cat", x.cat}, {"ph", "X"}, {"pid", x.pid}, {"tid", x.tid}, {"args", x.args}},
                 x.start, &dur);
    }
    for (const auto& [corr, api] : launch) {
        auto it = target.find(corr);
        if (it == target.end()) continue;
        const Slice* k = it->second;
        ev.event({{"name", "launch"}, {"cat", "ac2g"}, {"ph", "s"}, {"id", corr}, {"pid", 0}, {"tid", api->tid}},
                 api->start + (api->end - api->start) / 2);
        ev.event({{"name", "launch"}, {"cat", "ac2g"}, {"ph", "f"}, {"bp", "e"}, {"id", corr}, {"pid", k->pid},
                  {"tid", k->tid}},
                 k->start + (k->end - k->start) / 2);
    }
}

void power_events(TraceEvents& ev, const std::vector<PowerSample>& power, int pid) {
    for (const PowerSample& p : power) {
        auto counter = [&](const char* name, nlohmann::json args) {
            ev.event({{"name", name}, {"ph", "C"}, {"pid", pid}, {"tid", 0}, {"args", args}}, p.t_ns);
        };
        counter("power", {{"W", p.power_w}});
        counter("clocks", {{"sm_MHz", p.sm_clock_mhz}, {"mem_MHz", p.mem_clock_mhz}});
        counter("temperature", {{"C", p.temperature_c}});
    }
}

/*
 * The top-level fields Kineto writes before its events. HTA maps trace files to ranks by matching
 * `"rank": N` with a space after the colon, so distributedInfo is written by hand in that form: the process's
 * rank in a data-parallel run (HTA's analyses then run over the set of traces), or rank 0 of 1 with no
 * collective backend. deviceProperties: each GPU's id, name and, where known, per-SM limits.
 */
std::vector<std::string> trace_header(const ProfileContext& c, const std::set<uint32_t>& devices) {
    const char* backend = c.world_size <= 1 ? "none" : c.device_kind == DeviceKind::GPU ? "nccl" : "mpi";
    std::vector<std::string> h = {"\"schemaVersion\":1", "\"displayTimeUnit\":\"ns\"",
                                  strprintf("\"distributedInfo\": {\"backend\": \"%s\", \"rank\": %d, \"world_size\": %d}",
                                            backend, c.rank, c.world_size)};
    if (c.device_kind == DeviceKind::GPU) {
        nlohmann::json props = nlohmann::json::array();
        for (uint32_t d : devices) {
            nlohmann::json p = {{"id", d}, {"name", c.device}};
            if (c.sm.known())
                p.update({{"regsPerMultiprocessor", c.sm.regs}, {"maxThreadsPerMultiProcessor", c.sm.threads},
                          {"sharedMemPerMultiprocessor", c.sm.smem}});
            props.push_back(p);
        }
        h.push_back("\"deviceProperties\":" + props.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
    }
    return h;
}

} // namespace

/*
 * Chrome trace event format, in the dialect PyTorch's profiler writes (doc/profiling.md, "trace.json"), so
 * Perfetto and Holistic Trace Analysis both read it. Processes: pid 0 is the CPU (a "steps" track, then per
 * CPU thread a track of its Ranges and, where it made CUDA calls, a track of those), pid 1 + d is GPU d (one
 * track per stream, and counter tracks for power, clocks and temperature) or, for the CPU trainer, the CPU
 * running the ops. A flow (ph s on the API call, ph f with bp e on the GPU activity, id = correlation id)
 * links each launch to its kernel, memcpy or memset. Within a track, a slice that would overlap the end of
 * the one enclosing it (timer jitter) is clipped, so slices always nest.
 */
std::string trace_json(const Report& r, const ProfileRecords& rec) {
    TraceTracks tracks = trace_tracks(rec);
    nest_slices(tracks.slices);
    TraceEvents ev(tracks.t0);
    std::set<uint32_t> devices = name_tracks(ev, tracks, r.context, !rec.power.empty());
    slice_events(ev, tracks.slices);
    power_events(ev, rec.power, devices.empty() ? 1 : gpu_pid(*devices.begin()));
    return ev.str(trace_header(r.context, devices));
}


namespace {

using nlohmann::json;

// profile.json's memory section: the plan's allocations, totals by kind, peaks and every tensor.
json memory_json(const Report& r) {
    const MemoryPlan& plan = r.context.memory;
    const MemoryReport& m = r.memory;
    if (!m.present) return nullptr;
    json j = {{"program", plan.program}, {"B", plan.B}, {"T", plan.T}, {"shards", plan.shards},
              {"planned_bytes", m.planned_bytes}, {"notes", plan.notes}};
    json& aj = j["allocations"] = json::array();
    for (const PlannedAllocation& a : plan.allocations)
        aj.push_back({{"name", a.name}, {"bytes", a.bytes}, {"per_process", a.per_process}, {"transient", a.transient}});
    json& kj = j["kinds"] = json::array();
    for (const KindTotal& k : m.kinds) kj.push_back({{"kind", memory_kind_name(k.kind)}, {"bytes", k.bytes}, {"tensors", k.tensors}});
    j["live_peak"] = {{"bytes", m.live_peak},
                      {"op", m.live_peak_op >= 0 ? json(plan.ops[m.live_peak_op]) : json(nullptr)},
                      {"tensors", m.live_at_peak.size()}};
    j["caching_allocator"] = {{"reserved_bytes", m.caching.reserved_peak}, {"allocated_peak_bytes", m.caching.allocated_peak},
                              {"requested_peak_bytes", m.caching.requested_peak}, {"segments", m.caching.segments.size()},
                              {"small_pool_reserved_bytes", m.caching.small_reserved},
                              {"large_pool_reserved_bytes", m.caching.large_reserved}};
    j["top_tensors"] = m.top_tensors;
    j["tensors"] = json_array(tensor_columns(), tensor_lines(plan));
    return j;
}

// null when the ceilings stand as measured; else the factors, what beat the ceilings, and the measured ones.
json raised_json(const CeilingRaise& up) {
    if (!up.raised()) return nullptr;
    return {{"compute_factor", up.compute}, {"memory_factor", up.memory}, {"compute_by", up.compute_by},
            {"memory_by", up.memory_by},
            {"measured", {{"bf16_tflops", up.before.bf16_tflops}, {"fp32_tflops", up.before.fp32_tflops},
                          {"dram_gbps", up.before.dram_gbps}, {"source", up.before.source}}}};
}

json context_json(const Report& r) {
    const ProfileContext& c = r.context;
    const GPT2Config& m = c.model;
    return {{"program", c.program}, {"device", c.device}, {"device_kind", device_kind_name(c.device_kind)},
            {"build", c.build},
            {"model", {{"num_layers", m.num_layers}, {"num_heads", m.num_heads}, {"channels", m.channels},
                       {"max_seq_len", m.max_seq_len}, {"vocab_size", m.vocab_size},
                       {"padded_vocab_size", m.padded_vocab_size}, {"num_parameters", c.num_parameters}}},
            {"batch", {{"B", c.B}, {"T", c.T}, {"grad_accum", c.grad_accum}}},
            {"ceilings", {{"bf16_tflops", c.ceilings.bf16_tflops}, {"fp32_tflops", c.ceilings.fp32_tflops},
                          {"dram_gbps", c.ceilings.dram_gbps}, {"source", c.ceilings.source},
                          {"raised", raised_json(r.ceiling_raise)}}},
            {"peak_memory_bytes", c.peak_memory_bytes}, {"rank", c.rank}, {"world_size", c.world_size}};
}

// The record counts and the throughput.
void add_totals_json(json& j, const Report& r) {
    j["records"] = {{"kernels", r.records.kernels}, {"memcpys", r.records.memcpys}, {"memsets", r.records.memsets},
                    {"api", r.records.api}, {"syncs", r.records.syncs}, {"ranges", r.records.ranges},
                    {"power", r.records.power}, {"dropped", r.dropped_records},
                    {"cupti_overhead_ms", r.cupti_overhead_ms}};
    j["throughput"] = {{"steps", r.num_steps}, {"tokens", r.tokens}, {"wall_s", r.wall_s},
                       {"tokens_per_s", r.tokens_per_s}, {"flops_per_token", r.flops_per_token},
                       {"model_tflops", r.model_tflops}, {"mfu_pct", r.mfu},
                       {"gpu_time_us", r.gpu_time_us}, {"kernel_time_us", r.kernel_time_us}};
}

// The tables of the column descriptions: kernels, sub-blocks and their total, steps and what ran between them,
// GPU idle, CUDA calls and synchronisation.
void add_tables_json(json& j, const Report& r) {
    const SummaryStyle st(r);
    j["kernels"] = json_array(kernel_columns(st), r.kernels);
    const Columns<SubBlockLine> sub = subblock_columns(st);
    j["subblocks"] = json_array(sub, subblock_lines(r));
    j["total"] = json_object(sub, SubBlockLine{&r.total, "", "", &r.context.ceilings});
    for (const char* key : {"subblock", "phase", "pct"}) j["total"].erase(key); // the total has none of these
    j["steps"] = json_array(step_columns(r), r.steps);
    const OutsideSteps& o = r.outside_steps;
    j["outside_steps"] = {{"total_ms", o.total_ms}, {"window_ms", o.window_ms}, {"pct_of_window", o.pct},
                          {"by_kind", json_array(outside_kind_columns(), o.by_kind)},
                          {"rows", json_array(outside_step_columns(), o.rows)}};
    j["gpu_idle"] = {{"idle_us", r.idle_us}, {"gaps", r.idle_gaps},
                     {"by_size", json_array(idle_columns("", ""), r.gap_sizes)},
                     {"by_cpu_activity", json_array(idle_columns("", ""), r.idle_by_cpu)},
                     {"largest", json_array(gap_columns(), r.largest_gaps)}};
    j["api"] = json_array(call_columns(""), call_lines(r.api, "api"));
    j["syncs"] = json_array(call_columns(""), call_lines(r.syncs, "sync"));
    j["api_pct_of_cpu_time"] = r.api_pct;
    j["sync_pct_of_cpu_time"] = r.sync_pct;
}

json counters_json(const Report& r) {
    const CounterReport& hw = r.counters;
    return {{"collected", hw.collected}, {"method", REPLAY_NOTE}, {"note", hw.note},
            {"tensor_flops_per_op", hw.tensor_flops_per_op}, {"kernels", hw.kernels.size()},
            {"replay_time_us", hw.total.time_ns / 1e3}, {"replay_flops", hw.total.flops()},
            {"replay_dram_bytes", hw.total.dram_bytes},
            {"subblocks", hw.collected ? json_array(measured_columns(), measured_rows(hw, r.costs, r.has_model))
                                       : json::array()}};
}

json power_json(const PowerSummary& p) {
    return {{"samples", p.samples}, {"energy_j", p.energy_j}, {"avg_w", p.avg_w}, {"peak_w", p.peak_w},
            {"joules_per_token", p.joules_per_token}, {"max_temperature_c", p.max_temperature_c},
            {"min_sm_clock_mhz", p.min_sm_clock_mhz}, {"max_sm_clock_mhz", p.max_sm_clock_mhz},
            {"throttle_reasons", p.throttle_reasons}, {"tokens_per_j", p.tokens_per_j}, {"flops_per_w", p.flops_per_w},
            {"counter_steps", p.counter_steps}, {"integrated_steps", p.integrated_steps},
            {"window_energy_source", energy_source_name(p.window_source)}, {"counter_still_ms", p.counter_still_ms},
            {"below_counter_period_steps", p.below_counter_period_steps},
            {"max_sm_clock_limit_mhz", p.max_sm_clock_limit_mhz}, {"reading", p.reading}, {"status", p.status}};
}

json energy_json(const EnergySummary& e) {
    return {{"source", e.source},
            {"synthetic", e.synthetic},
            {"status", e.status},
            {"counter_period_ms", e.counter_period_ms},
            {"window_s", e.window_s},
            {"budget_s", e.budget_s},
            {"repeats", e.repeats},
            {"idle_w", e.idle_w},
            {"rows", json_array(energy_columns(), e.rows)},
            {"closure", {{"sum_j", e.sum_j}, {"step_j", e.step_j}, {"diff_pct", e.diff_pct}}}};
}

json inference_json(const Report& r) {
    const InferenceShape& in = r.context.inference;
    return {{"sequences", in.sequences}, {"prompt_tokens", in.prompt_tokens}, {"decode_steps", in.decode_steps},
            {"decode_tokens", in.decode_tokens}, {"decode_context", in.decode_context},
            {"kv_cache_bytes", in.kv_cache_bytes}, {"elem_bytes", in.elem_bytes},
            {"phases", json_array(phase_columns(r, SummaryStyle(r)), r.phases)},
            {"decode_buckets", json_array(decode_bucket_columns(), r.decode_buckets)}};
}

json gemm_algorithms_json(const std::vector<GemmTuning>& algorithms) {
    json gj = json::array();
    for (const GemmTuning& g : algorithms) {
        json cands = json::array();
        for (const GemmCandidate& x : g.candidates)
            cands.push_back({{"index", x.index}, {"algo_id", x.algo_id}, {"tile_id", x.tile_id}, {"splitk", x.splitk},
                             {"stages_id", x.stages_id}, {"us", x.us >= 0 ? json(x.us) : json(nullptr)}});
        gj.push_back({{"m", g.m}, {"n", g.n}, {"k", g.k}, {"trans_a", g.trans_a}, {"trans_b", g.trans_b},
                      {"epilogue", g.epilogue}, {"gelu_kernel", g.gelu_kernel}, {"accumulate", g.accumulate},
                      {"alignment_bytes", {{"a", g.align[0]}, {"b", g.align[1]}, {"d", g.align[2]},
                                           {"bias", g.align[3]}, {"aux", g.align[4]}}},
                      {"autotuned", g.autotuned}, {"restored", g.restored}, {"chosen", g.chosen}, {"candidates", cands}});
    }
    return gj;
}

json findings_json(const std::vector<Finding>& findings) {
    json fj = json::array();
    for (const Finding& f : findings)
        fj.push_back({{"rule", f.rule}, {"what", f.what}, {"evidence", f.evidence}, {"next_step", f.next_step},
                      {"ms_per_step", f.ms_per_step}});
    return fj;
}

// Removes the file at `path` left by an earlier profile; none there is fine.
void remove_stale(const std::string& path) {
    if (unlink(path.c_str()) != 0 && errno != ENOENT)
        throw Error(strprintf("%s: cannot remove the previous profile's file (%s)", path.c_str(), strerror(errno)));
}

} // namespace

std::string profile_json(const Report& r) {
    json j;
    j["profile_version"] = kProfileVersion;
    j["context"] = context_json(r);
    add_totals_json(j, r);
    add_tables_json(j, r);
    const CounterReport& hw = r.counters;
    if (hw.collected || !hw.note.empty()) j["counters"] = counters_json(r);
    j["power"] = power_json(r.power);
    if (r.energy.requested) j["energy"] = energy_json(r.energy);
    if (!r.phases.empty()) j["inference"] = inference_json(r);
    j["gemm_algorithms"] = gemm_algorithms_json(r.context.gemm_algorithms);
    j["findings"] = findings_json(r.findings);
    j["memory"] = memory_json(r);
    return j.dump(1) + "\n";
}

const std::vector<std::string> kProfileFiles = {
    "summary.txt", "kernels.csv",        "subblocks.csv",     "steps.csv",    "api.csv",    "roofline.csv",
    "phases.csv",  "decode_buckets.csv", "outside_steps.csv", "counters.csv", "trace.json", "profile.json",
    "memory.csv",  "memory_snapshot.pickle", "energy.csv", "report.html"};

std::vector<std::string> write_profile_dir(const std::string& dir, const Report& r, const ProfileRecords& rec,
                                           int top_n) {
    make_dirs(dir);
    std::vector<std::string> written;
    auto write = [&](const char* name, const std::string& text) {
        write_file(dir + "/" + name, text);
        written.push_back(name);
    };
    write("summary.txt", format_summary(r, top_n));
    write("kernels.csv", kernels_csv(r));
    write("subblocks.csv", subblocks_csv(r));
    write("steps.csv", steps_csv(r));
    write("api.csv", api_csv(r));
    write("roofline.csv", roofline_csv(r));
    // The tables of one kind of profile (and counters.csv, of a profile with --counters); the other kind removes
    // files of their names, so that a directory that held another profile keeps none of its files (every other file
    // is rewritten; files of other names stay).
    const bool infer = !r.phases.empty();
    for (const auto& [name, table, mine] : {std::make_tuple("phases.csv", &phases_csv, infer),
                                            std::make_tuple("decode_buckets.csv", &decode_buckets_csv, infer),
                                            std::make_tuple("outside_steps.csv", &outside_steps_csv, !infer),
                                            std::make_tuple("counters.csv", &counters_csv, r.counters.collected),
                                            std::make_tuple("energy.csv", &energy_csv, r.energy.measured)}) {
        if (mine) write(name, table(r));
        else remove_stale(dir + "/" + name);
    }
    write("trace.json", trace_json(r, rec));
    write("profile.json", profile_json(r));
    for (std::string& name : write_memory_files(dir, r)) written.push_back(std::move(name));
    // An earlier profile's page shows that profile: the session draws this one's (llmc/profiler/report_page.h).
    remove_stale(dir + "/report.html");
    return written;
}

std::vector<std::string> write_memory_files(const std::string& dir, const Report& r) {
    const std::string csv = dir + "/memory.csv", pickle = dir + "/memory_snapshot.pickle";
    if (!r.memory.present) {
        remove_stale(csv);
        remove_stale(pickle);
        return {};
    }
    write_file(csv, memory_csv(r.context.memory));
    write_file(pickle, memory_snapshot_pickle(r.context.memory, r.memory));
    return {"memory.csv", "memory_snapshot.pickle"};
}

} // namespace llmc::prof
