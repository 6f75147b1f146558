/*
 * The findings engine: what limits this run, ranked by the time at stake per step, each finding with its
 * evidence (numbers from the report) and a concrete next step. build_report (llmc/profiler/report.h) runs
 * it last, so every table of the report is filled. Each rule is a function of its own, testable alone:
 *   roofline      a sub-block far below its roofline ceiling (time lost against its floor)
 *   launch_bound  many small GPU gaps while the CPU is inside kernel launch calls
 *   sync_stall    the GPU idle while the CPU waits in a synchronisation call
 *   memcpy        host<->device copies on the critical path (alone on the GPU, or the CPU in a copy call
 *                 while the GPU idles)
 *   occupancy     non-library kernels whose registers per thread cap their theoretical occupancy
 *   throttle      power or thermal throttling (NVML clocks event reasons) or SM clocks well below the maximum
 *   records       dropped CUPTI records (always first: every other number is low)
 *   decode_weight_bound  inference: decode memory-bound with the weights most of its bytes (batch more)
 *   decode_launch_bound  inference: decode steps mostly idle between the model's work (fewer, larger launches)
 * The time at stake is an estimate of what fixing the cause could save; thresholds keep noise out. The
 * thresholds and estimates are documented in doc/profiling.md ("Findings").
 */
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "llmc/profiler/report.h"

namespace llmc::prof {

struct Occupancy {
    double occupancy = 0;         // active warps / max warps per SM
    int blocks = 0;               // resident blocks per SM
    const char* limit = "";       // "registers", "threads", "shared memory", "blocks"
    double without_registers = 0; // occupancy if registers did not limit it
};

// Theoretical occupancy of a kernel launch from its resources (as the occupancy calculator computes it).
Occupancy theoretical_occupancy(int regs_per_thread, int threads_per_block, int smem_per_block, const SmLimits& sm);

// NVML clocks event reasons that mean throttling (the idle, application-clock and display bits do not).
struct ThrottleBit {
    uint64_t mask;
    const char* name;
};
const std::vector<ThrottleBit>& throttle_bits();
std::string throttle_names(uint64_t reasons); // "SW power cap, HW thermal"

// What every rule reads: the report, its records, and the per-step scale.
struct FindingInput {
    FindingInput(const Report& report, const ProfileRecords& records);
    const Report& r;
    const ProfileRecords& rec;
    StepWindow window;
    double steps;   // profiled steps (at least 1)
    double step_ms; // wall time per step
    double min_ms;  // the least time at stake a finding needs
    // Idle time per step with the CPU in a CUDA call matching pred; *gaps: the gaps it spans.
    double idle_in(bool (*pred)(const std::string&), long* gaps) const;
};

using Rule = std::vector<Finding> (*)(const FindingInput&);
std::vector<Finding> roofline_rule(const FindingInput& in);
std::vector<Finding> launch_bound_rule(const FindingInput& in);
std::vector<Finding> sync_stall_rule(const FindingInput& in);
std::vector<Finding> memcpy_rule(const FindingInput& in);
std::vector<Finding> occupancy_rule(const FindingInput& in);
std::vector<Finding> throttle_rule(const FindingInput& in);
std::vector<Finding> records_rule(const FindingInput& in);
std::vector<Finding> energy_closure_rule(const FindingInput& in);
// Inference profiles only (the report's decode phase row):
std::vector<Finding> decode_weight_rule(const FindingInput& in);  // decode memory-bound on weight reads
std::vector<Finding> decode_launch_rule(const FindingInput& in);  // decode steps mostly outside the model's work
// The rules ranked by time at stake (records_rule apart: it goes first).
const std::vector<Rule>& ranked_rules();

// Every rule's findings, most time at stake first, dropped records before all.
std::vector<Finding> find_limits(const Report& r, const ProfileRecords& rec);

} // namespace llmc::prof
