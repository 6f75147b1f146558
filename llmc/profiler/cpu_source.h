/*
 * train_gpt2 --profile DIR: the CPU trainer's event source, so its profile directory is in the GPU
 * profiler's format and the two line up row by row (scripts/compare_profiles.py). Every timed sub-block
 * execution (llmc/profiler/cpu_timers.h) becomes an activity record on a "CPU" device track, named after its
 * op ("cpu:matmul qkv") and attributed to its sub-block, phase, layer and step; each profiled step becomes a
 * StepRecord and each run of one phase inside a step a range. The GPU-only parts (CUDA API,
 * synchronisation, power, device memory) stay empty. Ceilings are a quick calibration: the reference
 * matmul's fp32 FLOP/s and memcpy's bytes/s.
 */
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "llmc/profiler/cpu_timers.h"
#include "llmc/profiler/records.h"
#include "llmc/profiler/session.h"

namespace llmc::prof {

// The op a CPU sub-block runs, as its activity name: "cpu:matmul qkv".
std::string cpu_op_name(SubBlock s);

// "model name" from /proc/cpuinfo; "unknown CPU" where there is none (not Linux x86, say).
std::string cpu_model_name();

/*
 * Sub-block executions and steps to profiler records. A step's `step` is its index in the window; an
 * execution belongs to the step whose interval holds its start (none are outside one: both are timed by
 * the same clock around the same code).
 */
ProfileRecords cpu_profile_records(const std::vector<SubBlockEvent>& events, const std::vector<StepRecord>& steps);

/*
 * Compute and bandwidth ceilings of this CPU, measured: the best of a few runs of the reference fp32
 * matmul (the op that dominates a CPU step) and of a 64 MiB memcpy (bytes read + written). About 0.2 s.
 * Both compute ceilings are the fp32 matmul rate: the CPU trainer runs everything in fp32.
 */
Ceilings measure_cpu_ceilings();

// Records the sub-block executions of the steps the session brackets into `timings`' event list.
class CpuEventSource : public EventSource {
public:
    explicit CpuEventSource(SubBlockTimes* timings) : timings_(timings) {}
    bool start() override { return true; }
    bool slow_start() const override { return false; }
    void begin_step(int index) override;
    void end_step(long tokens) override;
    void stop() override { timings_->events = nullptr; }
    ProfileRecords take() override { return cpu_profile_records(events_, steps_); }
    void complete_context(ProfileContext&) override {}

private:
    SubBlockTimes* timings_;
    std::vector<SubBlockEvent> events_;
    std::vector<StepRecord> steps_;
    int index_ = 0;
    int64_t step_start_ = 0;
};

// train_gpt2's session: the CPU source over `timings`, the measured ceilings, and the CPU's context, for
// data-parallel rank `rank` of `world_size`.
std::unique_ptr<ProfileSession> make_cpu_profile_session(const SessionOptions& opt, const GPT2Config& c, int B, int T,
                                                         int grad_accum, SubBlockTimes* timings, int rank = 0,
                                                         int world_size = 1);

} // namespace llmc::prof
