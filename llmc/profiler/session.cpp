// The profile session (llmc/profiler/session.h).
#include "llmc/profiler/session.h"

#include <chrono>
#include <cstdio>

#include "llmc/profiler/nvml_sampler.h"
#include "llmc/profiler/report.h"
#include "llmc/profiler/report_page.h"
#include "llmc/profiler/writers.h"

namespace llmc::prof {

namespace {
int64_t now_ns() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
}
} // namespace

void check_profile_dir(const std::string& dir, const std::string& flag) {
    try {
        check_output_dir(dir);
        for (const std::string& name : kProfileFiles) check_output_file(dir + "/" + name);
    } catch (const Error& e) {
        throw Error(strprintf("%s: %s", flag.c_str(), e.what()));
    }
}

ProfileSession::ProfileSession(SessionOptions opt, ProfileContext ctx, std::unique_ptr<EventSource> source,
                               std::unique_ptr<EnergyCounter> energy)
    : opt_(std::move(opt)), schedule_(opt_.first_step, opt_.steps), ctx_(std::move(ctx)), source_(std::move(source)),
      energy_counter_(std::move(energy)) {
    check_profile_dir(opt_.dir, opt_.flag);
    if (opt_.energy && !energy_counter_) throw Error("--energy: no energy counter was opened for the profile");
    make_dirs(opt_.dir);
    if (!source_->slow_start() || schedule_.arm_at_start()) arm();
}

void ProfileSession::throw_if_not_written() const {
    if (!write_error_.empty())
        throw Error(strprintf("%s: %s (the run's results above are complete)", opt_.flag.c_str(), write_error_.c_str()));
}

ProfileSession::~ProfileSession() = default; // the source and the sampler stop themselves

void ProfileSession::arm() {
    bool started = false;
    try {
        started = source_->start(); // false: another tool holds the collector
    } catch (const Error& e) {
        printf("%s; the run goes on untraced\n", e.what());
    }
    if (!started) {
        schedule_.abandon();
        return;
    }
    source_running_ = true;
    if (auto clock = source_->power_clock()) {
        // Power in the records' timebase, sampled for as long as the source runs.
        power_ = std::make_unique<PowerSampler>(clock, 100, source_->pci_bus_id());
        if (!power_->start()) printf("power: %s\n", power_->status().c_str());
    }
}

void ProfileSession::stop() {
    if (!source_running_) return;
    source_->stop();
    if (power_) power_->stop();
    source_running_ = false;
}

void ProfileSession::begin_step(int step) {
    step_ = step;
    in_window_ = armed() && schedule_.in_window(step);
    if (!in_window_) return;
    if (power_) power_->mark();
    source_->begin_step(step + 1);
}

void ProfileSession::end_step(long tokens) {
    if (!in_window_) return;
    source_->end_step(tokens);
    if (power_) power_->mark();
    schedule_.recorded(step_);
    in_window_ = false;
}

void ProfileSession::boundary_work(const char* kind, double seconds) {
    if (armed() && schedule_.num_recorded() > 0) outside_steps_.push_back({kind, step_ + 1, seconds * 1e3});
}

bool ProfileSession::step_done(bool last_step) {
    if (armed()) {
        // Off the step's clock but not free: the run's throughput pays it, so it is reported at the end.
        int64_t t0 = now_ns();
        if (source_->flush()) flush_ns_ += now_ns() - t0;
    }
    switch (schedule_.after_step(step_, last_step, armed())) {
    case ProfileSchedule::Next::arm: arm(); return false;
    case ProfileSchedule::Next::write: write(); return true;
    case ProfileSchedule::Next::give_up:
        stop();
        printf("%s\n", schedule_.nothing_recorded(step_, opt_.dir).c_str());
        return false;
    case ProfileSchedule::Next::keep_going: return false;
    }
    return false;
}

void ProfileSession::print_outcome() const {
    if (opt_.print_summary) return;
    printf("%s", outcome_.c_str());
    fflush(stdout);
}

void ProfileSession::write() {
    stop();
    ProfileRecords records = source_->take();
    if (power_) power_->take_into(records);
    records.outside_steps = std::move(outside_steps_);
    power_.reset();
    source_->complete_context(ctx_);
    CounterReport counters;
    if (before_report_) counters = before_report_(records, ctx_);
    if (opt_.energy) records.energy_replays = measure_energy_now();
    Report report = build_report(records, ctx_);
    report.counters = std::move(counters);
    if (opt_.print_summary) printf("%s", format_summary(report, opt_.summary_top).c_str());
    try {
        written_files_ = write_profile_dir(opt_.dir, report, records, opt_.summary_top);
    } catch (const std::exception& e) {
        // The run's own results (checkpoints, tokens) come first: it goes on, and ends with this error.
        write_error_ = e.what();
        fprintf(stderr, "profile: not written: %s; the run goes on\n", e.what());
        return;
    }
    // The page is drawn from the files just written; without it the profile is still complete.
    const ReportPage page = write_report_page(opt_.dir);
    if (page.written) written_files_.push_back("report.html");
    outcome_ = format_outcome(report, opt_.dir, 3, page.written);
    written_.avg_w = report.power.avg_w, written_.joules_per_token = report.power.joules_per_token;
    written_.ceilings = report.context.ceilings;
    for (const PhaseRow& p : report.phases) // per step of the window, multiplied out as phases.csv prints them
        if (p.phase == (int)Phase::decode) written_.decode_bytes = p.cost.bytes * report.cost_steps();
    std::string dropped = records.dropped_records ? strprintf(" (%llu CUPTI records dropped: incomplete)",
                                                             (unsigned long long)records.dropped_records)
                                                  : "";
    printf("profile: %s written to %s/%s%s\n", schedule_.recorded_steps().c_str(), opt_.dir.c_str(),
           page.written ? (" (the page: " + opt_.dir + "/report.html)").c_str() : "", dropped.c_str());
    if (!page.written) printf("%s\n", report_not_written_line(page).c_str());
    if (flush_ns_ > 0)
        printf("profile: %.3f ms per traced step flushing CUPTI buffers between steps (not in the step times)\n",
               flush_ns_ / 1e6 / schedule_.num_recorded());
}

std::unique_ptr<EnergyCounter> energy_counter_for(const EventSource& source) {
    std::unique_ptr<EnergyCounter> counter = source.energy_counter();
    if (!counter) throw Error("--energy: this program's profile has no energy counter");
    if (!counter->status().empty()) throw Error("--energy: " + counter->status());
    return counter;
}

EnergyRecords ProfileSession::measure_energy_now() {
    EnergyRecords rec;
    rec.requested = true;
    rec.source = energy_counter_->name();
    if (!energy_work_) {
        rec.status = "this program has no replays for --energy";
        printf("energy: not measured: %s\n", rec.status.c_str());
        return rec;
    }
    EnergyWork work;
    EnergyOptions eo;
    eo.budget_s = opt_.energy_seconds;
    eo.progress = [](const std::string& line) {
        printf("%s\n", line.c_str());
        fflush(stdout);
    };
    try {
        work = energy_work_();
        // The idle baseline first in each round, the whole step last (the backend lists it last).
        work.targets.insert(work.targets.begin(), ReplayTarget{"idle", "-", "-", EnergyKind::idle, nullptr});
        printf("energy: %zu targets replayed for the %s, about %.0f s (--energy-seconds)\n", work.targets.size(),
               rec.source.c_str(), opt_.energy_seconds);
        fflush(stdout);
        rec = measure_energy(work.targets, *energy_counter_, work.clock, eo);
    } catch (const Error& e) {
        rec.status = e.what();
        printf("energy: not measured: %s; the rest of the profile is written\n", e.what());
    }
    if (work.restore) work.restore();
    return rec;
}

ProfileContext profile_context(const char* program, const GPT2Config& c, int B, int T, int grad_accum) {
    ProfileContext ctx;
    ctx.program = program;
    ctx.model = c;
    ctx.num_parameters = num_parameters(c);
    ctx.B = B, ctx.T = T, ctx.grad_accum = grad_accum;
    return ctx;
}

} // namespace llmc::prof
