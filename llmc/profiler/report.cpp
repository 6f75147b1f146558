// The report's tables from profiler records: one function per table (llmc/profiler/report.h).
#include "llmc/profiler/report.h"

#include <algorithm>
#include <cctype>
#include <initializer_list>
#include <map>
#include <tuple>

#include "llmc/profiler/device_specs.h"
#include "llmc/profiler/findings.h"

namespace llmc::prof {

const char* category_name(Category c) {
    static constexpr const char* names[] = {"gemm",      "attention",   "norm",   "optimizer", "reduction",
                                            "elementwise", "memcpy",    "memset", "other"};
    return enum_table<Category>(names)[(int)c];
}

Category kernel_category(const std::string& name) {
    std::string n = name;
    std::transform(n.begin(), n.end(), n.begin(), [](unsigned char ch) { return (char)std::tolower(ch); });
    auto has = [&](std::initializer_list<const char*> keys) {
        for (const char* k : keys)
            if (n.find(k) != std::string::npos) return true;
        return false;
    };
    if (has({"gemm", "cublas", "cutlass", "nvjet", "xmma", "matmul"})) return Category::gemm;
    if (has({"attention", "flash", "fmha"})) return Category::attention;
    if (has({"layernorm"})) return Category::norm;
    if (has({"adamw"})) return Category::optimizer;
    // CUB's sort, run-length encode (a reduce-by-key) and scan serve the encoder backward.
    if (has({"global_norm", "bias_backward", "accumulate_loss", "encoder_backward", "classifier",
             "cub::", "deviceradixsort", "devicerunlengthencode", "devicereduce", "devicescan", "reduce"}))
        return Category::reduction;
    if (has({"gelu", "encoder_forward", "copy", "cast", "float_to_bf16", "elementwise"})) return Category::elementwise;
    return Category::other;
}

std::string short_kernel_name(const std::string& name) {
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

std::string subblock_label(int s) { return s >= 0 && s < NUM_SUBBLOCKS ? subblock_name((SubBlock)s) : "(none)"; }
std::string phase_label(int p) { return p >= 0 && p < NUM_PHASES ? phase_name((Phase)p) : "(none)"; }

const char* energy_source_name(EnergySource e) {
    static constexpr const char* names[] = {"", "counter", "integrated"};
    return enum_table<EnergySource>(names)[(int)e];
}

double energy_joules(const std::vector<PowerSample>& s, uint64_t t0, uint64_t t1) {
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

namespace {
// The reading nearest t, if it is within `tolerance` ns of it.
const EnergyReading* reading_near(const std::vector<EnergyReading>& readings, uint64_t t, uint64_t tolerance) {
    auto hi = std::lower_bound(readings.begin(), readings.end(), t,
                               [](const EnergyReading& e, uint64_t v) { return e.t_ns < v; });
    const EnergyReading* best = nullptr;
    auto dist = [&](const EnergyReading& e) { return e.t_ns > t ? e.t_ns - t : t - e.t_ns; };
    if (hi != readings.end()) best = &*hi;
    if (hi != readings.begin() && (!best || dist(*(hi - 1)) <= dist(*best))) best = &*(hi - 1);
    return best && dist(*best) <= tolerance ? best : nullptr;
}
// The readings standing for the edges t0 and t1 (within 10% of the span, at least 2 ms), where the counter
// advanced between them; null otherwise.
std::pair<const EnergyReading*, const EnergyReading*> counter_edges(const std::vector<EnergyReading>& readings,
                                                                    uint64_t t0, uint64_t t1) {
    const uint64_t tolerance = std::max<uint64_t>(2000000, (t1 - t0) / 10);
    const EnergyReading *a = reading_near(readings, t0, tolerance), *b = reading_near(readings, t1, tolerance);
    if (a && b && b->t_ns > a->t_ns && b->joules > a->joules) return {a, b};
    return {nullptr, nullptr};
}
} // namespace

double step_energy(const std::vector<EnergyReading>& readings, const std::vector<PowerSample>& samples, uint64_t t0,
                   uint64_t t1, EnergySource* source) {
    if (!samples.empty()) {
        *source = EnergySource::integrated;
        return energy_joules(samples, t0, t1);
    }
    auto [a, b] = counter_edges(readings, t0, t1);
    *source = a ? EnergySource::counter : EnergySource::none;
    return a ? b->joules - a->joules : NAN;
}

double counter_power(const std::vector<EnergyReading>& readings, uint64_t t0, uint64_t t1) {
    auto [a, b] = counter_edges(readings, t0, t1);
    return a ? (b->joules - a->joules) / ((double)(b->t_ns - a->t_ns) * 1e-9) : NAN;
}

double counter_still_ns(const std::vector<EnergyReading>& readings) {
    if (readings.size() < 2) return NAN;
    double longest = 0;
    for (size_t i = 0, j; i < readings.size(); i = j) {
        for (j = i + 1; j < readings.size() && readings[j].joules == readings[i].joules; j++) {}
        longest = std::max(longest, (double)(readings[j - 1].t_ns - readings[i].t_ns));
    }
    return longest;
}

std::vector<Interval> interval_union(std::vector<Interval> v) {
    std::sort(v.begin(), v.end());
    std::vector<Interval> out;
    for (const auto& iv : v) {
        if (iv.second <= iv.first) continue;
        if (!out.empty() && iv.first <= out.back().second)
            out.back().second = std::max(out.back().second, iv.second);
        else
            out.push_back(iv);
    }
    return out;
}

std::vector<Activity> gpu_activities(const ProfileRecords& rec) {
    std::vector<Activity> acts;
    acts.reserve(rec.kernels.size() + rec.memcpys.size() + rec.memsets.size());
    for (const KernelRecord& k : rec.kernels)
        acts.push_back({&k, nullptr, nullptr, kernel_category(k.name), k.start_ns, k.end_ns, k.device, k.stream,
                        k.correlation, k.graph_node, k.where, k.name});
    for (const MemcpyRecord& m : rec.memcpys)
        acts.push_back({nullptr, &m, nullptr, Category::memcpy, m.start_ns, m.end_ns, m.device, m.stream, m.correlation,
                        m.graph_node, m.where, std::string("[memcpy ") + copy_kind_name(m.kind) + "]"});
    for (const MemsetRecord& m : rec.memsets)
        acts.push_back({nullptr, nullptr, &m, Category::memset, m.start_ns, m.end_ns, m.device, m.stream, m.correlation,
                        m.graph_node, m.where, "[memset]"});
    return acts;
}

StepWindow::StepWindow(std::vector<StepRecord> steps) : steps_(std::move(steps)) {
    std::sort(steps_.begin(), steps_.end(),
              [](const StepRecord& a, const StepRecord& b) { return a.start_ns < b.start_ns; });
}

int StepWindow::step_of(uint64_t t) const {
    auto it = std::upper_bound(steps_.begin(), steps_.end(), t,
                               [](uint64_t v, const StepRecord& s) { return v < s.start_ns; });
    if (it == steps_.begin()) return -1;
    --it;
    return t < it->end_ns ? (int)(it - steps_.begin()) : -1;
}

std::vector<std::vector<Interval>> busy_by_step(const StepWindow& w, const std::vector<Activity>& acts) {
    std::vector<std::vector<Interval>> busy(w.steps().size());
    for (const Activity& a : acts) {
        int si = w.step_of(a.start);
        if (si >= 0) busy[si].push_back({a.start, std::min(a.end, w.steps()[si].end_ns)});
    }
    for (auto& b : busy) b = interval_union(std::move(b));
    return busy;
}

std::vector<StepGap> idle_gaps(const StepWindow& w, const std::vector<std::vector<Interval>>& busy, uint64_t min_ns) {
    std::vector<StepGap> gaps;
    for (size_t i = 0; i < w.steps().size(); i++) {
        const StepRecord& s = w.steps()[i];
        uint64_t cursor = s.start_ns;
        for (const Interval& iv : busy[i]) {
            if (iv.first >= cursor + min_ns) gaps.push_back({(int)i, cursor, iv.first});
            cursor = std::max(cursor, iv.second);
        }
        if (s.end_ns >= cursor + min_ns) gaps.push_back({(int)i, cursor, s.end_ns});
    }
    return gaps;
}

namespace {

double dur_us(uint64_t s, uint64_t e) { return e > s ? (e - s) / 1e3 : 0.0; }

void finish_shares(std::vector<NamedTime>& rows, double window_us) {
    for (NamedTime& r : rows) {
        r.avg_us = r.calls ? r.total_us / r.calls : 0;
        r.pct = window_us > 0 ? 100 * r.total_us / window_us : 0;
    }
    std::sort(rows.begin(), rows.end(), [](const NamedTime& a, const NamedTime& b) { return a.total_us > b.total_us; });
}

// Sub-block rows: measured cells and modelled ones, by phase then sub-block, "(none)" last; the roofline of
// each against its time per step.
void fill_subblock_rows(Report& r, std::map<std::pair<int, int>, SubBlockRow> by_cell) {
    if (r.has_model)
        for (int s = 0; s < NUM_SUBBLOCKS; s++)
            for (int p = 0; p < NUM_PHASES; p++)
                if (r.costs[s][p].flops() > 0 || r.costs[s][p].bytes > 0) by_cell[{s, p}];
    auto row_order = [](const std::pair<int, int>& c) {
        return std::make_pair(c.second < 0 ? NUM_PHASES : c.second, c.first < 0 ? NUM_SUBBLOCKS : c.first);
    };
    std::vector<std::pair<int, int>> cells;
    for (auto& [key, row] : by_cell) cells.push_back(key);
    std::sort(cells.begin(), cells.end(), [&](auto& a, auto& b) { return row_order(a) < row_order(b); });
    const double steps_div = r.num_steps > 0 ? r.num_steps : NAN; // no steps: no time per step
    const Ceilings& ceilings = r.context.ceilings;
    r.total.subblock = r.total.phase = -1;
    for (const auto& key : cells) {
        SubBlockRow row = by_cell[key];
        row.subblock = key.first, row.phase = key.second;
        row.pct = r.gpu_time_us > 0 ? 100 * row.time_us / r.gpu_time_us : 0;
        if (r.has_model && row.subblock >= 0 && row.phase >= 0) row.cost = r.costs[row.subblock][row.phase];
        row.roof = roofline_point(row.cost, row.time_us * 1e-6 / steps_div, ceilings);
        // The total compares the work that was timed with its time: a modelled cell without records (a
        // partial profile) would put a floor under time that was never measured.
        r.total.calls += row.calls, r.total.time_us += row.time_us;
        if (row.time_us > 0) r.total.cost += row.cost;
        r.subblocks.push_back(row);
    }
    r.total.pct = r.gpu_time_us > 0 ? 100.0 : 0;
    r.total.roof = roofline_point(r.total.cost, r.total.time_us * 1e-6 / steps_div, ceilings);
}

/*
 * The CUDA API calls sorted by start (outermost first on ties), with a running maximum of their ends that
 * bounds a backward scan. attribute() shares [a, b) out by call: each instant goes to the outermost call
 * covering it, so a runtime call and the driver calls it makes (both recorded) are not counted twice.
 */
class ApiTimeline {
public:
    explicit ApiTimeline(std::vector<ApiRecord> api) : api_(std::move(api)) {
        std::sort(api_.begin(), api_.end(), [](const ApiRecord& a, const ApiRecord& b) {
            return a.start_ns < b.start_ns || (a.start_ns == b.start_ns && a.end_ns > b.end_ns);
        });
        max_end_.resize(api_.size());
        for (size_t i = 0; i < api_.size(); i++) max_end_[i] = std::max(api_[i].end_ns, i ? max_end_[i - 1] : 0);
    }
    // fn(call, ns) for every call with a share of [a, b); returns the ns covered by some call.
    template <typename Fn> uint64_t attribute(uint64_t a, uint64_t b, Fn&& fn) const {
        size_t hi = std::lower_bound(api_.begin(), api_.end(), b,
                                     [](const ApiRecord& x, uint64_t v) { return x.start_ns < v; }) -
                    api_.begin();
        size_t lo = hi;
        while (lo > 0 && max_end_[lo - 1] > a) lo--;
        uint64_t cursor = a, covered = 0;
        for (size_t i = lo; i < hi; i++) {
            uint64_t s = std::max(api_[i].start_ns, cursor), e = std::min(api_[i].end_ns, b);
            if (e <= s) continue;
            fn(api_[i], e - s);
            covered += e - s;
            cursor = e;
        }
        return covered;
    }

private:
    std::vector<ApiRecord> api_;
    std::vector<uint64_t> max_end_;
};

// The innermost CPU range around t, "" for none.
std::string innermost_range(const std::vector<RangeRecord>& ranges, uint64_t t) {
    std::string name;
    int depth = -1;
    for (const RangeRecord& rr : ranges)
        if (rr.start_ns <= t && t < rr.end_ns && rr.depth > depth) name = rr.name, depth = rr.depth;
    return name;
}

// The largest gaps, each with the CUDA call that overlaps it most and the CPU range around its middle.
void fill_largest_gaps(Report& r, const ProfileRecords& rec, const StepWindow& w, const ApiTimeline& api,
                       std::vector<StepGap> gaps) {
    constexpr size_t LARGEST_GAPS = 8;
    std::sort(gaps.begin(), gaps.end(),
              [](const StepGap& a, const StepGap& b) { return a.end - a.start > b.end - b.start; });
    gaps.resize(std::min(gaps.size(), LARGEST_GAPS));
    for (const StepGap& g : gaps) {
        IdleGap ig;
        ig.step = w.steps()[g.step].step;
        ig.offset_us = dur_us(w.steps()[g.step].start_ns, g.start);
        ig.dur_us = dur_us(g.start, g.end);
        std::map<std::string, double> share;
        double covered =
            api.attribute(g.start, g.end, [&](const ApiRecord& a, uint64_t ns) { share[a.name] += ns / 1e3; }) / 1e3;
        for (auto& [name, us] : share)
            if (us > ig.api_us) ig.api = name, ig.api_us = us;
        ig.outside_api_us = std::max(0.0, ig.dur_us - covered);
        ig.range = innermost_range(rec.ranges, g.start + (g.end - g.start) / 2);
        r.largest_gaps.push_back(ig);
    }
}

} // namespace

void fill_activity_tables(Report& r, const std::vector<Activity>& acts) {
    std::map<std::tuple<std::string, int, int>, KernelRow> by_kernel;
    std::map<std::pair<int, int>, SubBlockRow> by_cell;
    for (const Activity& a : acts) {
        double us = dur_us(a.start, a.end);
        r.gpu_time_us += us;
        if (a.category != Category::memcpy && a.category != Category::memset) r.kernel_time_us += us;
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
    fill_subblock_rows(r, std::move(by_cell));
}

StepSpread step_spread(std::vector<double> v) {
    if (v.empty()) return {};
    std::sort(v.begin(), v.end());
    const size_t n = v.size();
    return {n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]), v.front(), v.back()};
}

void fill_subblock_spread(Report& r, const StepWindow& w, const std::vector<Activity>& acts) {
    const size_t steps = w.steps().size();
    std::map<std::pair<int, int>, std::vector<double>> ms; // (sub-block, phase) -> ms in each step
    std::vector<double> total(steps, 0.0);
    for (const Activity& a : acts) {
        int si = w.step_of(a.start);
        if (si < 0) continue;
        std::vector<double>& cell = ms[{a.where.subblock, a.where.phase}];
        cell.resize(steps, 0.0);
        cell[si] += dur_us(a.start, a.end) / 1e3;
        total[si] += dur_us(a.start, a.end) / 1e3;
    }
    for (SubBlockRow& row : r.subblocks) {
        std::vector<double>& cell = ms[{row.subblock, row.phase}];
        cell.resize(steps, 0.0); // a modelled row with no activity: 0 in every step
        row.per_step = step_spread(cell);
    }
    r.total.per_step = step_spread(total);
}

void fill_step_table(Report& r, const ProfileRecords& rec, const StepWindow& w, const std::vector<Activity>& acts,
                     const std::vector<std::vector<Interval>>& busy, const std::vector<StepGap>& gaps) {
    std::vector<PowerSample> power = rec.power;
    std::sort(power.begin(), power.end(), [](const PowerSample& a, const PowerSample& b) { return a.t_ns < b.t_ns; });
    std::vector<EnergyReading> energy = rec.energy;
    std::sort(energy.begin(), energy.end(),
              [](const EnergyReading& a, const EnergyReading& b) { return a.t_ns < b.t_ns; });
    const std::vector<StepRecord>& steps = w.steps();
    std::vector<StepRow> rows(steps.size());
    for (const Activity& a : acts) {
        int si = w.step_of(a.start);
        if (si < 0) continue;
        StepRow& sr = rows[si];
        static_assert(NUM_PHASES == 5, "one StepRow column per phase");
        double* by_phase[NUM_PHASES] = {&sr.fwd_ms, &sr.bwd_ms, &sr.opt_ms, &sr.prefill_ms, &sr.decode_ms};
        const int p = a.where.phase;
        *(p >= 0 && p < NUM_PHASES ? by_phase[p] : &sr.other_ms) += dur_us(a.start, a.end) / 1e3;
        sr.activities++;
        sr.graph_replayed += a.graph_node != 0;
    }
    for (size_t i = 0; i < steps.size(); i++) {
        const StepRecord& s = steps[i];
        StepRow& sr = rows[i];
        sr.step = s.step, sr.tokens = s.tokens;
        sr.wall_ms = dur_us(s.start_ns, s.end_ns) / 1e3;
        for (const Interval& iv : busy[i]) sr.gpu_busy_ms += dur_us(iv.first, iv.second) / 1e3;
        sr.idle_ms = sr.wall_ms - sr.gpu_busy_ms;
        sr.tok_s = sr.wall_ms > 0 ? s.tokens / (sr.wall_ms / 1e3) : 0;
        sr.energy_j = step_energy(energy, power, s.start_ns, s.end_ns, &sr.energy_source);
        sr.avg_power_w = sr.wall_ms > 0 ? sr.energy_j / (sr.wall_ms / 1e3) : NAN;
        r.tokens += s.tokens;
        r.wall_s += sr.wall_ms / 1e3;
        r.idle_us += sr.idle_ms * 1e3;
    }
    for (const StepGap& g : gaps) rows[g.step].gaps++;
    r.steps = rows;
    r.idle_gaps = (long)gaps.size();
}

void fill_idle_tables(Report& r, const ProfileRecords& rec, const StepWindow& w, std::vector<StepGap> gaps) {
    const ApiTimeline api(rec.api);
    r.gap_sizes = {{"< 10 us"}, {"10-100 us"}, {">= 100 us"}};
    std::map<std::string, NamedTime> idle_cause;
    for (const StepGap& g : gaps) {
        double us = dur_us(g.start, g.end);
        NamedTime& size = r.gap_sizes[us < 10 ? 0 : us < 100 ? 1 : 2];
        size.calls++, size.total_us += us;
        double covered = api.attribute(g.start, g.end,
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
    fill_largest_gaps(r, rec, w, api, std::move(gaps));
}

void fill_api_tables(Report& r, const ProfileRecords& rec, const StepWindow& w) {
    // Per name, every call counts; the overall shares count time under nested or overlapping calls once.
    double cpu_window_us = r.wall_s * 1e6;
    if (w.steps().empty() && !rec.api.empty()) {
        uint64_t first = UINT64_MAX, last = 0;
        for (const ApiRecord& a : rec.api) first = std::min(first, a.start_ns), last = std::max(last, a.end_ns);
        cpu_window_us = dur_us(first, last);
    }
    std::map<std::string, NamedTime> by_api, by_sync;
    std::vector<Interval> api_iv, sync_iv;
    auto add = [&](std::map<std::string, NamedTime>& by, std::vector<Interval>& iv, const std::string& name,
                   uint64_t start, uint64_t end) {
        if (!w.contains(start)) return;
        NamedTime& n = by[name];
        n.name = name, n.calls++, n.total_us += dur_us(start, end);
        iv.push_back({start, end});
    };
    for (const ApiRecord& a : rec.api) add(by_api, api_iv, a.name, a.start_ns, a.end_ns);
    for (const SyncRecord& s : rec.syncs) add(by_sync, sync_iv, s.type, s.start_ns, s.end_ns);
    for (auto& [name, n] : by_api) r.api.push_back(n);
    for (auto& [name, n] : by_sync) r.syncs.push_back(n);
    finish_shares(r.api, cpu_window_us);
    finish_shares(r.syncs, cpu_window_us);
    auto union_pct = [&](std::vector<Interval> iv) {
        double us = 0;
        for (const Interval& x : interval_union(std::move(iv))) us += dur_us(x.first, x.second);
        return cpu_window_us > 0 ? 100 * us / cpu_window_us : 0;
    };
    r.api_pct = union_pct(std::move(api_iv));
    r.sync_pct = union_pct(std::move(sync_iv));
}

void fill_throughput(Report& r) {
    const ProfileContext& ctx = r.context;
    if (r.wall_s > 0) r.tokens_per_s = r.tokens / r.wall_s;
    if (!r.has_model) return;
    size_t n = ctx.num_parameters ? ctx.num_parameters : num_parameters(ctx.model);
    // Inference: the forward alone, as the analytic costs count it (about 2N + attention per token).
    r.flops_per_token = ctx.inference.active() ? r.total.cost.flops() * r.num_steps / std::max(1L, r.tokens)
                                               : gpt2_flops_per_token(n, ctx.model.num_layers, ctx.model.channels, ctx.T);
    r.model_tflops = r.tokens_per_s * r.flops_per_token / 1e12;
    if (ctx.ceilings.bf16_tflops > 0) r.mfu = 100 * r.model_tflops / ctx.ceilings.bf16_tflops;
}

void fill_outside_steps(Report& r, const ProfileRecords& rec, const StepWindow& w) {
    OutsideSteps& o = r.outside_steps;
    o.rows = rec.outside_steps;
    if (!w.steps().empty()) o.window_ms = (w.steps().back().end_ns - w.steps().front().start_ns) / 1e6;
    for (const OutsideStepRecord& x : o.rows) {
        auto it = std::find_if(o.by_kind.begin(), o.by_kind.end(), [&](const NamedTime& n) { return n.name == x.kind; });
        NamedTime& k = it != o.by_kind.end() ? *it : o.by_kind.emplace_back(NamedTime{x.kind});
        k.calls++, k.total_us += x.wall_ms * 1e3;
        o.total_ms += x.wall_ms;
    }
    for (NamedTime& k : o.by_kind) {
        k.avg_us = k.total_us / k.calls;
        k.pct = o.window_ms > 0 ? 100 * k.total_us / 1e3 / o.window_ms : NAN;
    }
    o.pct = o.window_ms > 0 ? 100 * o.total_ms / o.window_ms : NAN;
}

void raise_ceilings_to_measured(Report& r) {
    // A factor a hair above the ratio, so that rounding leaves every row at or below 100%.
    constexpr double MARGIN = 1 + 1e-9;
    CeilingRaise up;
    up.before = r.context.ceilings;
    auto consider = [&](const RooflinePoint& p, const std::string& what) {
        if (!(p.time_s > 0)) return;
        if (p.compute_floor_s / p.time_s > up.compute) up.compute = p.compute_floor_s / p.time_s, up.compute_by = what;
        if (p.memory_floor_s / p.time_s > up.memory) up.memory = p.memory_floor_s / p.time_s, up.memory_by = what;
    };
    // The total row follows from the rows (its floor is at most the sum of theirs) wherever every modelled
    // cell was measured, so it is not a witness of its own.
    for (const SubBlockRow& b : r.subblocks) consider(b.roof, subblock_label(b.subblock) + " " + phase_label(b.phase));
    if (r.mfu / 100 > up.compute) up.compute = r.mfu / 100, up.compute_by = "MFU";
    if (!up.raised()) return;
    for (double* k : {&up.compute, &up.memory})
        if (*k > 1) *k *= MARGIN;
    Ceilings& c = r.context.ceilings;
    c.bf16_tflops *= up.compute, c.fp32_tflops *= up.compute, c.dram_gbps *= up.memory;
    c.source += "; raised to what this profile measured";
    for (SubBlockRow& b : r.subblocks) b.roof = roofline_point(b.cost, b.roof.time_s, c);
    r.total.roof = roofline_point(r.total.cost, r.total.roof.time_s, c);
    if (c.bf16_tflops > 0) r.mfu = 100 * r.model_tflops / c.bf16_tflops;
    r.ceiling_raise = up;
}

void fill_power(Report& r, const ProfileRecords& rec, const StepWindow& w) {
    PowerSummary& p = r.power;
    p.status = rec.power_status.empty() && rec.power.empty() && rec.energy.empty() ? "no power samples"
                                                                                  : rec.power_status;
    p.max_sm_clock_limit_mhz = rec.max_sm_clock_mhz;
    p.reading = rec.power_reading;
    p.counter = rec.energy_counter;
    // Energy needs power samples or counter readings (the CPU's RAPL counter comes without samples).
    if ((rec.power.empty() && rec.energy.empty()) || w.steps().empty()) return;
    std::vector<EnergyReading> energy = rec.energy;
    std::sort(energy.begin(), energy.end(),
              [](const EnergyReading& a, const EnergyReading& b) { return a.t_ns < b.t_ns; });
    p.counter_still_ms = counter_still_ns(energy) / 1e6;
    p.energy_j = 0;
    for (StepRow& s : r.steps) {
        p.energy_j += s.energy_j;
        (s.energy_source == EnergySource::counter ? p.counter_steps : p.integrated_steps)++;
        s.below_counter_period = s.wall_ms <= p.counter_still_ms; // false while unknown (NaN)
        p.below_counter_period_steps += s.below_counter_period;
        if (s.tokens > 0) s.j_per_token = s.energy_j / s.tokens;
        if (s.energy_j > 0) s.tokens_per_j = s.tokens / s.energy_j;
        if (s.energy_j > 0 && r.flops_per_token > 0) s.flops_per_w = s.tokens * r.flops_per_token / s.energy_j;
    }
    p.window_source = std::isfinite(p.energy_j) ? EnergySource::integrated : EnergySource::none;
    // The counter over the whole window where it advanced: its average power, over the steps' wall time (what
    // lies between steps, such as CUPTI's buffer flushes, is in no step).
    const double window_w = counter_power(energy, w.steps().front().start_ns, w.steps().back().end_ns);
    if (std::isfinite(window_w)) p.energy_j = window_w * r.wall_s, p.window_source = EnergySource::counter;
    // Counter readings alone (the CPU's RAPL): a step where the counter stood still has no energy.
    if (!std::isfinite(p.energy_j) && p.status.empty()) p.status = rec.energy_counter + " did not advance in every step";
    p.avg_w = r.wall_s > 0 ? p.energy_j / r.wall_s : NAN;
    if (r.tokens > 0) p.joules_per_token = p.energy_j / r.tokens;
    if (p.energy_j > 0) p.tokens_per_j = r.tokens / p.energy_j;
    if (p.energy_j > 0 && r.flops_per_token > 0) p.flops_per_w = r.tokens * r.flops_per_token / p.energy_j;
    std::vector<PowerSample> power = rec.power;
    std::sort(power.begin(), power.end(), [](const PowerSample& a, const PowerSample& b) { return a.t_ns < b.t_ns; });
    for (const PowerSample& s : power) {
        if (!w.contains(s.t_ns)) continue;
        if (p.samples++ == 0) p.peak_w = s.power_w, p.min_sm_clock_mhz = p.max_sm_clock_mhz = s.sm_clock_mhz;
        p.peak_w = std::max(p.peak_w, s.power_w);
        p.max_temperature_c = std::max(p.max_temperature_c, s.temperature_c);
        p.min_sm_clock_mhz = std::min(p.min_sm_clock_mhz, s.sm_clock_mhz);
        p.max_sm_clock_mhz = std::max(p.max_sm_clock_mhz, s.sm_clock_mhz);
        p.throttle_reasons |= s.throttle_reasons;
    }
}

void fill_phase_table(Report& r) {
    const double steps_div = r.num_steps > 0 ? r.num_steps : NAN;
    for (int p : {(int)Phase::prefill, (int)Phase::decode}) {
        PhaseRow row;
        row.phase = p;
        for (const SubBlockRow& b : r.subblocks)
            if (b.phase == p) row.time_us += b.time_us, row.cost += b.cost;
        for (const StepRow& s : r.steps)
            if ((p == (int)Phase::prefill) == (s.step == PREFILL_STEP)) row.steps++, row.tokens += s.tokens, row.wall_ms += s.wall_ms;
        row.roof = roofline_point(row.cost, row.time_us * 1e-6 / steps_div, r.context.ceilings);
        r.phases.push_back(row);
    }
}

void fill_decode_buckets(Report& r, int buckets) {
    std::vector<const StepRow*> decode;
    for (const StepRow& s : r.steps)
        if (s.step > PREFILL_STEP) decode.push_back(&s);
    if (decode.empty() || buckets < 1) return;
    const size_t n = decode.size(), per = (n + buckets - 1) / buckets;
    // Decode step k (from 1) appends the token after the longest prompt's T + k - 1 positions: it attends T + k.
    auto context = [&](const StepRow* s) { return r.context.T + s->step - PREFILL_STEP; };
    for (size_t i = 0; i < n; i += per) {
        DecodeBucket b;
        b.first_pos = context(decode[i]);
        for (size_t j = i; j < std::min(n, i + per); j++) {
            b.last_pos = context(decode[j]);
            b.steps++, b.tokens += decode[j]->tokens;
            b.wall_ms += decode[j]->wall_ms, b.time_ms += decode[j]->decode_ms;
        }
        r.decode_buckets.push_back(b);
    }
}

double student_t975(int dof) {
    static const double t[] = {NAN,   12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
                               2.201, 2.179,  2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
                               2.080, 2.074,  2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042};
    if (dof < 1) return NAN;
    return dof <= 30 ? t[dof] : dof <= 60 ? 2.000 : 1.960;
}

namespace {

// Mean and the 95% interval's half-width of the values.
std::pair<double, double> mean_ci95(const std::vector<double>& v) {
    const size_t n = v.size();
    if (n == 0) return {NAN, NAN};
    double mean = 0, ss = 0;
    for (double x : v) mean += x / n;
    for (double x : v) ss += (x - mean) * (x - mean);
    if (n < 2) return {mean, NAN};
    return {mean, student_t975((int)n - 1) * std::sqrt(ss / (n - 1) / n)};
}

// The analytic FLOPs per step of (sub-block, phase) by name; NaN when the names are not a cell of the table.
double cell_flops(const Report& r, const std::string& subblock, const std::string& phase) {
    if (!r.has_model) return NAN;
    for (int s = 0; s < NUM_SUBBLOCKS; s++)
        for (int p = 0; p < NUM_PHASES; p++)
            if (subblock == subblock_name((SubBlock)s) && phase == phase_name((Phase)p)) return r.costs[s][p].flops();
    return NAN;
}

double step_flops(const Report& r) {
    if (!r.has_model) return NAN;
    double f = 0;
    for (const auto& row : r.costs)
        for (const OpCost& c : row) f += c.flops();
    return f;
}

} // namespace

void fill_energy(Report& r, const EnergyRecords& e) {
    EnergySummary& out = r.energy;
    out.requested = e.requested, out.synthetic = e.synthetic, out.source = e.source, out.status = e.status;
    if (!e.requested || e.targets.empty()) return;
    out.measured = true;
    out.counter_period_ms = e.counter_period_s * 1e3, out.window_s = e.window_s, out.budget_s = e.budget_s;
    std::vector<double> idle_w;
    double step_s = NAN;
    for (const EnergyTargetRecord& t : e.targets)
        for (const EnergyRun& run : t.runs)
            if (t.kind == EnergyKind::idle && run.seconds > 0) idle_w.push_back(run.joules / run.seconds);
    out.idle_w = mean_ci95(idle_w).first;
    for (const EnergyTargetRecord& t : e.targets) {
        EnergyRow row{t.subblock, t.phase, t.layers, t.kind};
        std::vector<double> j, above, w, s;
        for (const EnergyRun& run : t.runs) {
            if (run.replays <= 0 || run.seconds <= 0) continue;
            j.push_back(run.joules / run.replays);
            s.push_back(run.seconds / run.replays);
            w.push_back(run.joules / run.seconds);
            above.push_back(j.back() - out.idle_w * s.back());
            row.sm_clock_mhz = run.sm_clock_mhz, row.temperature_c = run.temperature_c;
        }
        row.repeats = (int)t.runs.size(), row.seconds = t.seconds_spent;
        row.watts = mean_ci95(w).first;
        if (t.kind != EnergyKind::idle) {
            const auto [mean, half] = mean_ci95(j);
            row.j_per_step = mean, row.ci95_low = mean - half, row.ci95_high = mean + half;
            row.j_above_idle = mean_ci95(above).first;
            row.s_per_step = mean_ci95(s).first;
            const double flops = t.kind == EnergyKind::step ? step_flops(r) : cell_flops(r, t.subblock, t.phase);
            row.flop_per_j = flops > 0 ? flops / mean : NAN;
            if (t.kind == EnergyKind::step) step_s = row.s_per_step;
        }
        out.rows.push_back(row);
        out.repeats = std::max(out.repeats, row.repeats);
    }
    // Idle over the step's replayed time; the rows in the profile's order: parts, the step, idle.
    for (EnergyRow& row : out.rows)
        if (row.kind == EnergyKind::idle) {
            const auto [mean, half] = mean_ci95(idle_w);
            row.j_per_step = mean * step_s, row.ci95_low = (mean - half) * step_s, row.ci95_high = (mean + half) * step_s;
            row.j_above_idle = 0, row.s_per_step = step_s;
        }
    std::stable_sort(out.rows.begin(), out.rows.end(),
                     [](const EnergyRow& a, const EnergyRow& b) { return (int)a.kind < (int)b.kind; });
    double sum = 0;
    for (const EnergyRow& row : out.rows) {
        if (row.kind == EnergyKind::part) sum += row.j_per_step;
        if (row.kind == EnergyKind::step) out.step_j = row.j_per_step;
    }
    out.sum_j = sum;
    out.diff_pct = 100 * (sum - out.step_j) / out.step_j;
}

Report build_report(const ProfileRecords& rec, const ProfileContext& ctx) {
    Report r;
    r.context = ctx;
    r.records = {rec.kernels.size(), rec.memcpys.size(), rec.memsets.size(), rec.api.size(),
                 rec.syncs.size(),   rec.ranges.size(),  rec.power.size()};
    r.dropped_records = rec.dropped_records;
    r.cupti_overhead_ms = rec.cupti_overhead_ns / 1e6;
    r.memory = analyze_memory(ctx.memory);
    const GPT2Config& m = ctx.model;
    r.has_model = m.num_layers > 0 && m.channels > 0 && m.num_heads > 0 && ctx.B > 0 && ctx.T > 0;
    const StepWindow w(rec.steps);
    r.num_steps = (int)w.steps().size();
    if (r.has_model && ctx.inference.active()) {
        // The run's totals spread over its steps: the sub-block rows compare costs and times per step.
        r.costs = inference_costs(m, ctx.inference, ctx.device_kind == DeviceKind::GPU); // the GPU decoder fuses
        for (auto& row : r.costs)
            for (OpCost& cell : row) cell = cell * (1.0 / r.cost_steps());
    } else if (r.has_model) {
        r.costs = (ctx.device_kind == DeviceKind::CPU ? cpu_analytic_costs : analytic_costs)(m, ctx.B, ctx.T,
                                                                                             std::max(1, ctx.grad_accum));
    }
    std::vector<Activity> acts;
    for (Activity& a : gpu_activities(rec))
        if (w.contains(a.start)) acts.push_back(std::move(a));
    const std::vector<std::vector<Interval>> busy = busy_by_step(w, acts);
    const std::vector<StepGap> gaps = idle_gaps(w, busy);

    fill_activity_tables(r, acts);
    fill_subblock_spread(r, w, acts);
    fill_step_table(r, rec, w, acts, busy, gaps);
    fill_idle_tables(r, rec, w, gaps);
    fill_api_tables(r, rec, w);
    fill_outside_steps(r, rec, w);
    fill_throughput(r);
    raise_ceilings_to_measured(r);
    fill_power(r, rec, w);
    if (ctx.inference.active()) {
        fill_phase_table(r);
        fill_decode_buckets(r);
    }
    fill_energy(r, rec.energy_replays);
    r.findings = find_limits(r, rec);
    return r;
}

} // namespace llmc::prof
