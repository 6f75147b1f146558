/*
 * The writers: a Report (llmc/profiler/report.h) into the profile directory (doc/profiling.md, "Profile
 * directory"): summary.txt (the human report, format_summary), kernels.csv, subblocks.csv, steps.csv,
 * api.csv, roofline.csv, for training profiles outside_steps.csv, for inference profiles phases.csv and
 * decode_buckets.csv, trace.json (Chrome trace event format, for Perfetto and chrome://tracing) and profile.json
 * (the whole report, machine-readable). Each table is described once, as a column table
 * (llmc/profiler/columns.h), from which its CSV file, its rows in profile.json and its table in summary.txt are
 * all written. Every file is written atomically. CSV headers begin with the minimum columns doc/profiling.md
 * lists, in its order; extra columns follow. Empty CSV cells and JSON nulls mean "unknown" (no ceiling, no power
 * samples, no steps). Compiled once (writers.cpp): the JSON library stays out of every program's main
 * translation unit.
 */
#pragma once
#include <string>
#include <vector>

#include "llmc/profiler/report.h"

namespace llmc::prof {

// The human report: header, throughput, top kernels, sub-blocks with roofline, steps, GPU idle, API/sync,
// power, findings.
std::string format_summary(const Report& r, int top_n = 15);

// summary.txt's "Measured vs analytic" table (llmc/profiler/counter_records.h MeasuredRow), or the note saying why
// counters are missing; "" without --counters.
std::string measured_vs_analytic(const CounterReport& r, const CostTable& costs, bool has_model);

// What a run prints at its end about the profile written to `dir`: where its summary is (and its report.html, when
// `page` was written), the throughput, and the first `max_findings` findings, one line each (the summary has them
// with their evidence).
std::string format_outcome(const Report& r, const std::string& dir, int max_findings = 3, bool page = false);

// profile.json's "profile_version": raised when its layout changes in a way its readers must know
// (scripts/report_html.py refuses a profile.json of another version).
constexpr int kProfileVersion = 1;

// One file of the profile directory each.
std::string kernels_csv(const Report& r);
std::string subblocks_csv(const Report& r);
std::string steps_csv(const Report& r);
std::string outside_steps_csv(const Report& r); // training profiles only
std::string api_csv(const Report& r);
std::string roofline_csv(const Report& r);
std::string phases_csv(const Report& r);         // inference profiles only
std::string decode_buckets_csv(const Report& r); // inference profiles only
std::string counters_csv(const Report& r);       // profiles with counters (--counters) only
std::string energy_csv(const Report& r);         // profiles with --energy measured only
std::string trace_json(const Report& r, const ProfileRecords& rec);
std::string profile_json(const Report& r);

// memory.csv: one row per tensor of the plan (columns in doc/profiling.md).
std::string memory_csv(const MemoryPlan& plan);

// memory.csv and memory_snapshot.pickle (llmc/profiler/memory.h) from the report's plan; without a plan, removes
// files of those names.
// Returns the names of the files written.
std::vector<std::string> write_memory_files(const std::string& dir, const Report& r);

// Every name a profile directory's files may have (write_profile_dir writes some of them, and removes the others';
// report.html is the session's, drawn from the others by scripts/report_html.py).
extern const std::vector<std::string> kProfileFiles;

// Writes every file of the profile directory `dir` (created if missing) and removes an earlier profile's
// report.html; top_n: kernels listed in summary.txt. Returns the names of the files written, in the order written.
std::vector<std::string> write_profile_dir(const std::string& dir, const Report& r, const ProfileRecords& rec,
                                           int top_n = 15);

} // namespace llmc::prof
