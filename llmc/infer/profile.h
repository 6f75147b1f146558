/*
 * --profile, as both inference programs run it (llmc/infer/driver.h): the window is the whole run; the session's
 * step 0 is the prefill, step k the k-th decode step (numbered from 1 in the profile: prefill is its step 1).
 * `shape` is counted as the run goes: a decode step counts the running sequences' rows, each attending its
 * cached positions and the new one (both decoders compute those rows and no others). The session gets the final
 * counts when it writes. With --json the profiler's lines go to stderr, so that stdout carries only JSON.
 */
#pragma once
#include <cmath>
#include <functional>
#include <memory>
#include <vector>

#include "llmc/infer/options.h"
#include "llmc/profiler/records.h"
#include "llmc/profiler/session.h"

namespace llmc {

class InferProfile {
public:
    using MakeSession = std::function<std::unique_ptr<prof::ProfileSession>(const prof::SessionOptions&)>;

    prof::InferenceShape shape;

    // elem_bytes: the decoder's bytes per weight, activation and cache element.
    InferProfile(const InferOptions& opt, const std::vector<std::vector<int>>& prompts, int elem_bytes);
    bool on() const { return session_ != nullptr; }

    // With --profile: make() builds the session (the ceilings it measures print quietly under --json), after
    // the directory is checked; without, nothing.
    void start(const MakeSession& make);
    void begin_step();
    // A decode step's rows: the running sequences; length(b) is sequence b's cached tokens before the step.
    long count_decode_step(const std::vector<bool>& running, const std::function<int(int)>& length);
    void end_step(long tokens, bool last);
    // The profile's average power and joules per token over the run (NaN without --profile or a reading):
    // the summary's avg_power_w and j_per_token.
    double avg_power_w() const { return session_ ? session_->written_figures().avg_w : NAN; }
    double joules_per_token() const { return session_ ? session_->written_figures().joules_per_token : NAN; }
    // The decode steps' DRAM floor over their time: the written profile's decode bytes (phases.csv: each weight
    // once per step, the KV cache each row attends) at its bandwidth (measured, or raised to what the profile
    // reached, as its tables use), divided by decode_ms, the steps' total time. NaN without --profile, a written
    // profile or a decode step.
    double decode_floor_share(double decode_ms) const;
    // The bandwidth that floor is at, GB/s (NaN without a written profile).
    double dram_gbps() const;
    // After the results are printed: an Error when the profile could not be written.
    void throw_if_not_written() const {
        if (session_) session_->throw_if_not_written();
    }

private:
    const InferOptions& opt_;
    std::unique_ptr<prof::ProfileSession> session_;
    int step_ = 0;
};

} // namespace llmc
