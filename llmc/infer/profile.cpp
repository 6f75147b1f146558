// The inference programs' --profile (llmc/infer/profile.h).
#include "llmc/infer/profile.h"

#include <cmath>
#include <cstdio>
#include <unistd.h>

namespace llmc {

namespace {

// With --json, stdout carries only the JSON lines: the profiler's messages and summary go to stderr meanwhile.
class StdoutToStderr {
public:
    explicit StdoutToStderr(bool on) : saved_(on ? (fflush(stdout), dup(1)) : -1) {
        if (saved_ >= 0) dup2(2, 1);
    }
    ~StdoutToStderr() {
        if (saved_ < 0) return;
        fflush(stdout);
        dup2(saved_, 1);
        close(saved_);
    }
    StdoutToStderr(const StdoutToStderr&) = delete;
    StdoutToStderr& operator=(const StdoutToStderr&) = delete;

private:
    int saved_;
};

} // namespace

InferProfile::InferProfile(const InferOptions& opt, const std::vector<std::vector<int>>& prompts, int elem_bytes)
    : opt_(opt) {
    shape.sequences = (long)prompts.size();
    for (auto& p : prompts) shape.prompt_tokens += (long)p.size(), shape.prompt_pairs += 0.5 * p.size() * (p.size() + 1.0);
    shape.elem_bytes = elem_bytes;
}

void InferProfile::start(const MakeSession& make) {
    if (opt_.profile_dir.empty()) return;
    prof::check_profile_dir(opt_.profile_dir, "--profile"); // before the ceilings are measured
    StdoutToStderr quiet(opt_.json);
    session_ = make({opt_.profile_dir, 0, opt_.new_tokens});
    session_->before_report([this](const prof::ProfileRecords&, prof::ProfileContext& ctx) {
        ctx.inference = shape; // the decode counts, known now
        return prof::CounterReport{};
    });
}

double InferProfile::dram_gbps() const {
    const double gbps = session_ ? session_->written_figures().ceilings.dram_gbps : 0;
    return gbps > 0 ? gbps : NAN;
}

double InferProfile::decode_floor_share(double decode_ms) const {
    const double gbps = dram_gbps(), bytes = session_ ? session_->written_figures().decode_bytes : NAN;
    if (decode_ms <= 0 || std::isnan(gbps) || !(bytes > 0)) return NAN; // bytes: 0 without a decode step
    return bytes / (gbps * 1e9) / (decode_ms / 1e3);
}

void InferProfile::begin_step() {
    if (session_) session_->begin_step(step_);
}

long InferProfile::count_decode_step(const std::vector<bool>& running, const std::function<int(int)>& length) {
    long rows = 0;
    for (size_t b = 0; b < running.size(); b++)
        if (running[b]) rows++, shape.decode_context += length((int)b) + 1;
    shape.decode_steps++, shape.decode_tokens += rows;
    return rows;
}

void InferProfile::end_step(long tokens, bool last) {
    if (!session_) return;
    session_->end_step(tokens);
    StdoutToStderr quiet(opt_.json);
    session_->step_done(last);
    step_++;
}

} // namespace llmc
