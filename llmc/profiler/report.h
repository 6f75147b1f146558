/*
 * The analysis layer: profiler records (llmc/profiler/records.h) into the report's tables, one function per
 * table (kernels, sub-blocks with their roofline, steps, GPU idle, CUDA API and synchronisation, throughput,
 * power), then the findings (llmc/profiler/findings.h). Plain C++, compiled once (report.cpp): testable from
 * synthetic records. llmc/profiler/writers.h turns a Report into text, CSV and JSON.
 *
 * The window is the profiled steps: a GPU activity or API call belongs to the step whose wall interval
 * contains its start; anything outside every step (set-up, teardown) is left out. Without step records the
 * window is everything recorded. Counters are summed and rates derived from the sums; percentages are
 * never added or averaged. doc/profiling.md states these rules with the files' columns.
 */
#pragma once
#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "llmc/profiler/counter_records.h"
#include "llmc/profiler/memory.h"
#include "llmc/profiler/records.h"
#include "llmc/profiler/roofline.h"

namespace llmc::prof {

// What a GPU activity does, from its kernel's demangled name (memcpy/memset rows get theirs from the record).
enum class Category { gemm, attention, norm, optimizer, reduction, elementwise, memcpy, memset, other, COUNT };
const char* category_name(Category c);
Category kernel_category(const std::string& name);

// "void llmc::detail::k<true>(float*, int)" -> "k<true>": the name without return type, parameter list and
// namespaces (kernel names in tables and trace slices; the full name stays in kernels.csv and the trace args).
std::string short_kernel_name(const std::string& name);

std::string subblock_label(int s); // "(none)" outside every sub-block
std::string phase_label(int p);

// Where a step's energy came from: NVML's energy counter, integrated power samples, or nowhere (NaN).
enum class EnergySource { none, counter, integrated, COUNT };
const char* energy_source_name(EnergySource e); // "", "counter", "integrated"

/*
 * Energy in joules over [t0, t1] from power samples sorted by time: power is linear between samples and
 * held constant before the first and after the last, and the trapezoid rule over the samples inside the
 * interval plus interpolated values at its edges integrates that exactly. NaN without samples.
 */
double energy_joules(const std::vector<PowerSample>& s, uint64_t t0, uint64_t t1);

/*
 * A step's energy: the power samples (sorted by time) integrated over it where there are samples (NVML's
 * counter updates coarsely: on an H100 it did not advance over a 43 ms window, so its advance over one step
 * says little); without samples (the CPU's RAPL counter, read at step edges) the counter's advance
 * between the readings nearest the step's edges, NaN where it stood still. A reading counts for an edge
 * within 10% of the step's wall time of it (at least 2 ms).
 */
double step_energy(const std::vector<EnergyReading>& readings, const std::vector<PowerSample>& samples, uint64_t t0,
                   uint64_t t1, EnergySource* source);

/*
 * The average power (W) the energy counter gives over [t0, t1]: its advance between the readings nearest the
 * two edges (within 10% of the span, at least 2 ms) over the time between them. NaN where it has no reading
 * near an edge or did not advance.
 */
double counter_power(const std::vector<EnergyReading>& readings, uint64_t t0, uint64_t t1);

/*
 * The longest time, in ns, over which the counter's readings (sorted by time) stood still: its update period
 * is at least that (0 when it advanced between every two readings; NaN with fewer than two readings).
 */
double counter_still_ns(const std::vector<EnergyReading>& readings);

using Interval = std::pair<uint64_t, uint64_t>; // [start, end) in ns
// Merges [start, end) intervals (in any order) into sorted disjoint ones.
std::vector<Interval> interval_union(std::vector<Interval> v);

/*
 * One view of every GPU activity record (kernel, memcpy, memset), so the analysis and the writers loop once:
 * its interval, attribution and the name and category the tables show ("[memcpy HtoD]", "[memset]").
 */
struct Activity {
    // The record it views: exactly one is set.
    const KernelRecord* kernel = nullptr;
    const MemcpyRecord* copy = nullptr;
    const MemsetRecord* set = nullptr;
    Category category = Category::other;
    uint64_t start = 0, end = 0;
    uint32_t device = 0, stream = 0, correlation = 0;
    uint64_t graph_node = 0; // replayed from this CUDA graph node; 0: launched directly
    Attribution where;
    std::string name;
};
std::vector<Activity> gpu_activities(const ProfileRecords& rec);

// The profiled steps sorted by start, and which holds a time.
class StepWindow {
public:
    explicit StepWindow(std::vector<StepRecord> steps);
    // Index of the step (into steps()) whose [start, end) holds t; -1 outside every step.
    int step_of(uint64_t t) const;
    // Inside some step, or anywhere when there are no steps.
    bool contains(uint64_t t) const { return steps_.empty() || step_of(t) >= 0; }
    const std::vector<StepRecord>& steps() const { return steps_; }

private:
    std::vector<StepRecord> steps_;
};

struct KernelRow {
    std::string name; // demangled kernel name, or "[memcpy HtoD]", "[memset]"
    Category category = Category::other;
    int subblock = -1, phase = -1;
    long calls = 0;
    double total_us = 0, avg_us = 0, pct = 0; // pct of all GPU activity time in the window
};

// The spread of a time across the profiled steps: a mean hides a slow first step or a noisy neighbour.
struct StepSpread {
    double median_ms = NAN, min_ms = NAN, max_ms = NAN; // NaN without steps
};
// Median, minimum and maximum of per-step values (any order; the median of an even count is the mean of the
// middle two).
StepSpread step_spread(std::vector<double> per_step_ms);

struct SubBlockRow {
    int subblock = -1, phase = -1;
    long calls = 0;
    double time_us = 0, pct = 0; // over the window
    OpCost cost;                 // analytic, per step (zero for "(none)")
    RooflinePoint roof;          // cost against the time per step (the mean)
    StepSpread per_step;         // its time in each profiled step, a step without it counting 0
};

struct StepRow {
    int step = 0;
    long tokens = 0;
    double wall_ms = 0, gpu_busy_ms = 0, idle_ms = 0;
    double fwd_ms = 0, bwd_ms = 0, opt_ms = 0, other_ms = 0; // GPU time by phase; other: outside the phases
    double prefill_ms = 0, decode_ms = 0;                    // the same for inference's phases
    double tok_s = 0, energy_j = NAN, avg_power_w = NAN;
    double j_per_token = NAN, tokens_per_j = NAN, flops_per_w = NAN; // flops_per_w: model FLOP/s per W
    EnergySource energy_source = EnergySource::none;
    // Shorter than the energy counter was seen to stand still: the counter cannot measure this step, and its
    // energy (from the power samples) is an estimate (PowerSummary::counter_still_ms).
    bool below_counter_period = false;
    long gaps = 0;
    long activities = 0, graph_replayed = 0; // its kernels, copies and memsets; those replayed from CUDA graphs
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
    // The window's energy: the counter's average power over the whole window times the steps' wall time where
    // the counter advanced over it, else the steps' energies summed.
    EnergySource window_source = EnergySource::none;
    double counter_still_ms = NAN; // the longest the counter stood still between readings (counter_still_ns)
    int below_counter_period_steps = 0;
    int max_sm_clock_limit_mhz = 0;               // the GPU's maximum SM clock, 0 = unknown
    std::string reading;                          // "instantaneous" or "1 s average" power samples
    std::string status;                           // why there is no power data ("NVML not available (...)")
    std::string counter;                          // the energy counter: NVML's, or RAPL's on the CPU
};

// A limit of the run with its evidence and what to try next (llmc/profiler/findings.h), ranked by time at stake.
// --energy: one target's measurements (llmc/profiler/energy.h) as the profile gives them. Per step: a part's or the
// step's replay is one step's worth; idle's J per step is the idle power over the step's replayed time.
struct EnergyRow {
    std::string subblock, phase, layers;
    EnergyKind kind = EnergyKind::part;
    double j_per_step = NAN, ci95_low = NAN, ci95_high = NAN; // the mean over the repetitions and its 95% interval
    double watts = NAN;        // average power while it replayed
    double j_above_idle = NAN; // j_per_step less the idle power over its time per step
    double flop_per_j = NAN;   // analytic FLOPs per step over j_per_step (NaN without a model)
    double s_per_step = NAN;   // its replayed time per step
    int repeats = 0;
    double seconds = 0;        // spent measuring it
    int sm_clock_mhz = 0, temperature_c = 0; // the last repetition's (0: unknown)
};
struct EnergySummary {
    bool requested = false, measured = false, synthetic = false;
    std::string source, status;
    double counter_period_ms = NAN, window_s = NAN, budget_s = NAN, idle_w = NAN;
    int repeats = 0;
    std::vector<EnergyRow> rows; // the parts in step order, then the step, then idle
    // The closure: the parts' sum against the whole step replayed, (sum - step) / step in percent.
    double sum_j = NAN, step_j = NAN, diff_pct = NAN;
};

// The 97.5% quantile of Student's t with `dof` degrees of freedom (the 95% interval's half-width in standard errors).
double student_t975(int dof);

struct Finding {
    std::string rule;       // "roofline", "launch_bound", "sync_stall", "memcpy", "occupancy", "throttle", "records"
    std::string what, evidence, next_step;
    double ms_per_step = 0; // estimated GPU or wall time at stake per step
};

// An inference profile's steps are numbered as a run's are, from 1: step 1 is the prefill, step 1 + k the k-th
// decode step.
constexpr int PREFILL_STEP = 1;

// One phase of the window (inference: prefill, decode): its sub-block rows summed, and their roofline.
struct PhaseRow {
    int phase = -1;
    long steps = 0, tokens = 0; // steps whose work is in this phase, and the tokens they processed
    double time_us = 0;         // device time over the window
    double wall_ms = 0;         // wall time of those steps
    OpCost cost;                // analytic, per step of the window (as the sub-block rows)
    RooflinePoint roof;
};

// Decode steps grouped by the context they attend to, so the cost growth with the KV cache shows.
struct DecodeBucket {
    int first_pos = 0, last_pos = 0; // context length (cached positions + 1) of the bucket's first and last step
    long steps = 0, tokens = 0;
    double wall_ms = 0, time_ms = 0; // wall time, and device time in the decode phase, of the bucket's steps
    double ms_per_step() const { return steps ? wall_ms / steps : NAN; }
    double tok_s() const { return wall_ms > 0 ? tokens / (wall_ms / 1e3) : NAN; }
};

/*
 * Ceilings raised to what the profile itself measured. A calibration on a busy machine under-measures (and a
 * spec table can be low), and then a sub-block beats its ceiling: rather than print more than 100% of a
 * ceiling, the report raises the ceiling to the measured rate and says so. Factor 1: left as measured.
 */
struct CeilingRaise {
    double compute = 1, memory = 1;    // factors on the compute ceilings (bf16 and fp32) and on the bandwidth
    std::string compute_by, memory_by; // what beat them: "qkv fwd", "MFU"
    Ceilings before;                   // the ceilings as calibrated (or from the spec table)
    bool raised() const { return compute > 1 || memory > 1; }
};

// A training window's work between its steps that is not a step (validation, samples, checkpoint writes): the
// steps' throughput leaves it out, the run's wall time does not.
struct OutsideSteps {
    std::vector<OutsideStepRecord> rows; // in the order they ran
    std::vector<NamedTime> by_kind;      // name: the kind; calls: how many; pct: share of window_ms
    double total_ms = 0;
    double window_ms = NAN; // wall time from the first step's start to the last step's end
    double pct = NAN;       // total_ms over window_ms
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
    // The steps the per-step costs are spread over (at least 1): multiplied back, they give the window's totals.
    int cost_steps() const { return num_steps > 0 ? num_steps : 1; }
    long tokens = 0;
    double wall_s = 0;                          // sum of step wall times (or the recorded span without steps)
    double gpu_time_us = 0, kernel_time_us = 0; // activity time summed (kernels + memcpy + memset), kernels only
    std::vector<KernelRow> kernels;             // by total time, descending
    std::vector<SubBlockRow> subblocks;         // by phase, then sub-block order; "(none)" last
    SubBlockRow total;                          // every row summed; roofline of the whole step
    std::vector<StepRow> steps;
    OutsideSteps outside_steps;
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
    CeilingRaise ceiling_raise; // context.ceilings are the raised ones when raised()
    PowerSummary power;
    uint64_t dropped_records = 0;
    double cupti_overhead_ms = 0;
    std::vector<PhaseRow> phases;             // inference: prefill and decode (empty for training)
    std::vector<DecodeBucket> decode_buckets; // inference: decode steps by context length
    std::vector<Finding> findings; // most time at stake first
    CounterReport counters;        // hardware counters of one extra step (profile_gpt2cu --counters)
    MemoryReport memory;           // the analysis of context.memory (llmc/profiler/memory.h)
    EnergySummary energy;          // --energy
};


// A stretch of a step with no GPU activity; step: index into the StepWindow.
struct StepGap {
    int step;
    uint64_t start, end;
};
// Per step of the window, the union of the GPU activity that starts in it (clipped to the step's end).
std::vector<std::vector<Interval>> busy_by_step(const StepWindow& w, const std::vector<Activity>& acts);
// The gaps of at least min_ns between a step's busy intervals, its edges included, in step order.
std::vector<StepGap> idle_gaps(const StepWindow& w, const std::vector<std::vector<Interval>>& busy,
                               uint64_t min_ns = 1);

// The report's tables, each from the records (and the tables before it where it says so). build_report runs
// them in this order; each is usable alone in tests.
void fill_activity_tables(Report& r, const std::vector<Activity>& acts); // kernels, sub-blocks, GPU time
void fill_subblock_spread(Report& r, const StepWindow& w, const std::vector<Activity>& acts); // after activity
void fill_step_table(Report& r, const ProfileRecords& rec, const StepWindow& w, const std::vector<Activity>& acts,
                     const std::vector<std::vector<Interval>>& busy, const std::vector<StepGap>& gaps);
void fill_idle_tables(Report& r, const ProfileRecords& rec, const StepWindow& w, std::vector<StepGap> gaps);
void fill_api_tables(Report& r, const ProfileRecords& rec, const StepWindow& w);  // after the step table
void fill_throughput(Report& r);                                                 // after the step table
void fill_outside_steps(Report& r, const ProfileRecords& rec, const StepWindow& w);
// Raises the ceilings so that no sub-block, the total and MFU exceed 100% of them, and recomputes those.
void raise_ceilings_to_measured(Report& r);                                      // after throughput
void fill_power(Report& r, const ProfileRecords& rec, const StepWindow& w);      // after throughput
// Inference only (context.inference active): the prefill and decode rows (after the sub-block and step tables)
// and the decode steps in at most `buckets` groups of consecutive steps by context length.
void fill_phase_table(Report& r);
void fill_decode_buckets(Report& r, int buckets = 8);
// --energy's rows from its measurements (after the costs: FLOP/J).
void fill_energy(Report& r, const EnergyRecords& e);

Report build_report(const ProfileRecords& rec, const ProfileContext& ctx);

} // namespace llmc::prof
