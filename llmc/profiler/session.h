/*
 * A profile session: what every program that profiles itself (train_gpt2, train_gpt2cu, profile_gpt2cu)
 * drives, in Kineto's order: collection (an EventSource: CUPTI on the GPU, the timed sub-block executions
 * on the CPU, and NVML power beside it) -> records -> analysis (build_report) -> writers (the profile
 * directory). The session owns the --profile-start/--profile-steps schedule (llmc/profiler/schedule.h) and
 * the context (the real GPT2Config, the batch, the ceilings); the program brackets each step:
 *
 *   session.begin_step(step);  ...the step's work...  session.end_step(tokens);
 *   ...print the step line...  session.step_done(last_step);   // flush, arm, or write
 *
 * Everything the session adds to the loop happens between steps, after the step line is printed: a source
 * that is slow to start (CUPTI) is armed one step before the window, buffers are flushed after each traced
 * step, and the profile is written when the window closes (or the run ends inside it).
 */
#pragma once
#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "llmc/profiler/counter_records.h"
#include "llmc/profiler/energy.h"
#include "llmc/profiler/records.h"
#include "llmc/profiler/schedule.h"

namespace llmc::prof {

class PowerSampler;

// The collection layer as a session drives it: where a profile's records come from.
class EventSource {
public:
    virtual ~EventSource() = default;
    // Starts collecting; false (the reason printed) when it cannot, and nothing is recorded.
    virtual bool start() = 0;
    // Must start a step ahead of the window: its start-up would land inside the first recorded step.
    virtual bool slow_start() const = 0;
    virtual void begin_step(int step) = 0; // step: the run's step number, from 1 as the step lines print it
    virtual void end_step(long tokens) = 0;
    // Between steps, off the step's clock; true when it did work the run pays for (CUPTI's buffer flush).
    virtual bool flush() { return false; }
    virtual void stop() = 0;
    virtual ProfileRecords take() = 0;
    // What only the source knows about the device and build, filled in when the profile is written.
    virtual void complete_context(ProfileContext& ctx) = 0;
    // The records' timebase for the power sampler and the device's PCI bus id; no clock: no power samples.
    virtual std::function<uint64_t()> power_clock() const { return nullptr; }
    virtual std::string pci_bus_id() const { return ""; }
    // The device's energy counter, for --energy (llmc/profiler/energy.h); null where the source has none.
    virtual std::unique_ptr<EnergyCounter> energy_counter() const { return nullptr; }
};

// --energy: what the backend replays after the window (its sub-blocks and its whole step, on the step's buffers),
// how the device's time is kept, and how the state the replays changed (weights, moments) is put back.
struct EnergyWork {
    std::vector<ReplayTarget> targets;
    EnergyClock clock;
    std::function<void()> restore;
};

struct SessionOptions {
    std::string dir;                 // the profile directory
    int first_step = 0, steps = 1;   // the window: the run's 0-based step indices
    int summary_top = 15;            // kernels listed in summary.txt
    // Print summary.txt when it is written: for profile_gpt2cu, whose output is the profile. A trainer keeps
    // its log to training and prints print_outcome's few lines at its end instead.
    bool print_summary = false;
    std::string flag = "--profile";  // the flag that named dir, for errors (profile_gpt2cu's is -o)
    // The GPU's ceilings measured (or read from their cache) when the session is made; false: the datasheet's
    // (profile_gpt2cu --no-calibrate, or under ncu and nsys). The CPU's are always measured.
    bool measure_ceilings = true;
    // --energy: joules per sub-block measured after the window within about energy_seconds (llmc/profiler/energy.h).
    bool energy = false;
    double energy_seconds = 60;
};

class ProfileSession {
public:
    // Makes the profile directory (and its parents) at once: a path that is a file, lies under a file or cannot be
    // written to is refused here (Error naming opt.flag) rather than after the run. energy: with opt.energy, the
    // counter energy_counter_for(*source) opened (the makers open it first, to refuse before measuring ceilings).
    ProfileSession(SessionOptions opt, ProfileContext ctx, std::unique_ptr<EventSource> source,
                   std::unique_ptr<EnergyCounter> energy = nullptr);
    ~ProfileSession();
    ProfileSession(const ProfileSession&) = delete;
    ProfileSession& operator=(const ProfileSession&) = delete;

    // Brackets a step's work. step: the run's 0-based step index; the step lines, the records and the
    // profile call it step + 1.
    void begin_step(int step);
    void end_step(long tokens);
    // Work between two steps that is not a step ("val", "sample", "checkpoint"), timed by the run: recorded as a
    // row of its own when it falls between the window's first and last step, else ignored.
    void boundary_work(const char* kind, double seconds);
    // After the step has been timed and printed. Returns true when this call wrote the profile.
    bool step_done(bool last_step);
    // At the end of the run: where the summary is and the top findings (format_outcome); nothing when no
    // profile was written, or when the whole summary was printed as it was written (print_summary).
    void print_outcome() const;
    bool written() const { return !written_files_.empty(); } // the profile directory was written
    const std::vector<std::string>& written_files() const { return written_files_; } // their names, once written

    // Runs at write time after the records are taken, before the report is built: may finish the context
    // and returns hardware counters (profile_gpt2cu's --counters step).
    using BeforeReport = std::function<CounterReport(const ProfileRecords&, ProfileContext&)>;
    void before_report(BeforeReport fn) { before_report_ = std::move(fn); }
    // --energy's replays, made at write time (after before_report's); a session with --energy and none measures
    // nothing and says so.
    void energy_work(std::function<EnergyWork()> fn) { energy_work_ = std::move(fn); }
    const ProfileContext& context() const { return ctx_; } // the run's description and the measured ceilings
    // What the written profile says of its window, for a program's own summary line; before it is written,
    // NaN and ceilings of 0 (unknown).
    struct Written {
        double avg_w = NAN, joules_per_token = NAN; // as summary.txt gives them; NaN without a power reading
        Ceilings ceilings;         // the measured ones, raised where the profile beat them (Report's ceiling_raise)
        double decode_bytes = NAN; // inference: the decode phase's analytic bytes over the window (phases.csv)
    };
    const Written& written_figures() const { return written_; }
    // Why writing the profile failed (a full disk, the directory removed meanwhile); "" when it did not. The run
    // goes on (checkpoints, results); the program reports it and exits 1 at its end (throw_if_not_written).
    const std::string& write_error() const { return write_error_; }
    void throw_if_not_written() const;

private:
    bool armed() const { return source_running_; }
    void arm();
    void stop();
    void write();
    EnergyRecords measure_energy_now();

    SessionOptions opt_;
    ProfileSchedule schedule_;
    ProfileContext ctx_;
    std::unique_ptr<EventSource> source_;
    std::unique_ptr<PowerSampler> power_; // while the source runs, when it has a clock
    BeforeReport before_report_;
    std::function<EnergyWork()> energy_work_;
    std::unique_ptr<EnergyCounter> energy_counter_; // --energy: checked when the session is made
    bool source_running_ = false, in_window_ = false;
    int step_ = -1;
    int64_t flush_ns_ = 0; // summed time of the between-step flushes
    std::vector<OutsideStepRecord> outside_steps_; // boundary_work inside the window
    std::string outcome_;  // print_outcome's lines, kept from write()
    Written written_;
    std::string write_error_;
    std::vector<std::string> written_files_;
};

// --energy's counter of the source: Error (one line) when it has none or cannot read it. The session calls it when
// it is made; the programs' session makers call it first, before the ceilings are measured.
std::unique_ptr<EnergyCounter> energy_counter_for(const EventSource& source);

// The program, model and batch of a profile; the event source adds the device and the build when it is written.
ProfileContext profile_context(const char* program, const GPT2Config& c, int B, int T, int grad_accum = 1);

// The profile directory checked before a run's work, nothing created (check_output_dir): Error naming `flag` when
// it is not a directory, lies under a file, or cannot be written to, or when a file of a profile's names inside it
// is not a regular file (a link, a FIFO, a directory: check_output_file). The session makes it when it starts.
void check_profile_dir(const std::string& dir, const std::string& flag);

} // namespace llmc::prof
