/*
 * train_gpt2 --profile DIR: the CPU trainer's event source, so its profile directory is in the GPU
 * profiler's format and the two line up row by row (scripts/compare_profiles.py). Every timed sub-block
 * execution (llmc/profiler/cpu_timers.h) becomes an activity record on a "CPU" device track, named after its
 * op ("cpu:matmul qkv"; the classifier as two, "cpu:matmul classifier" and "cpu:softmax_loss classifier")
 * and attributed to its sub-block, phase, layer and step; each profiled step becomes a StepRecord and each run
 * of one phase inside a step a range, whose correlation id its executions carry. Energy comes from RAPL
 * (llmc/profiler/rapl.h), read at each step's edges. The GPU-only parts (CUDA API, synchronisation, power
 * samples, device memory) stay empty. Ceilings are measured on this CPU with the trainer's own code at the
 * model's shapes, and cached.
 */
#pragma once
#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "llmc/profiler/cpu_timers.h"
#include "llmc/profiler/rapl.h"
#include "llmc/profiler/records.h"
#include "llmc/profiler/session.h"

namespace llmc::prof {

// The op a CPU sub-block runs, as its activity name: "cpu:matmul qkv", "cpu:softmax_loss classifier".
std::string cpu_op_name(SubBlock s, SubBlockPart part = SubBlockPart::main);

// "model name" from /proc/cpuinfo; "unknown CPU" where there is none (not Linux x86, say).
std::string cpu_model_name();

/*
 * Sub-block executions and steps to profiler records. A step's `step` is its index in the window; an
 * execution belongs to the step whose interval holds its start (none are outside one: both are timed by
 * the same clock around the same code). The training thread's executions are the ops (kernel records, in
 * phase ranges); another thread's (SubBlockEvent::thread, the gradient buckets' all-reduces) are ranges on
 * that thread's track, named by op and layer, in no table.
 */
ProfileRecords cpu_profile_records(const std::vector<SubBlockEvent>& events, const std::vector<StepRecord>& steps);

// One matmul shape of the model: out (BT, OC) = inp (BT, C) · weightᵀ.
struct MatmulShape {
    int BT, C, OC;
    bool operator==(const MatmulShape& o) const { return BT == o.BT && C == o.C && OC == o.OC; }
};
// The distinct matmul shapes of a forward of GPT-2 `c` at (B, T): qkv, attn_proj, fc, fc_proj, the classifier.
std::vector<MatmulShape> cpu_matmul_shapes(const GPT2Config& c, int B, int T);

/*
 * Best rate of fn over `rounds` rounds: each round runs fn back to back for at least min_s (and at least
 * once), long enough for the threads and clocks to settle, and gives work · runs / time; the best round is
 * the one other processes disturbed least. fn's work is `work` (FLOPs or bytes).
 */
template <typename Fn> double best_rate(Fn&& fn, double work, int rounds, double min_s) {
    double best = 0;
    for (int r = 0; r < rounds; r++) {
        const int64_t t0 = steady_ns();
        long runs = 0;
        double s = 0;
        do {
            fn();
            runs++;
            s = (steady_ns() - t0) * 1e-9;
        } while (s < min_s);
        best = std::max(best, work * runs / s);
    }
    return best;
}

/*
 * Compute and bandwidth ceilings of this CPU with the trainer's threads, measured with its own code: the
 * fp32 FLOP/s of the reference matmul (llmc/cpu/matmul.h) at each of the model's shapes, the fastest shape
 * kept, and the bytes/s of a STREAM-style triad over arrays far larger than the caches; each the best of a
 * few rounds of a few tenths of a second. Both compute ceilings are the matmul rate: the CPU trainer runs
 * everything in fp32. Cached (llmc/profiler/ceiling_cache.h) per CPU model, thread count, vector ISA and
 * shapes; a line per measurement shows progress. use_cache false: always measure (and rewrite the cache).
 */
Ceilings measure_cpu_ceilings(const GPT2Config& c, int B, int T, bool use_cache = true);

// Records the sub-block executions of the steps the session brackets into `timings`' event list.
class CpuEventSource : public EventSource {
public:
    // powercap_root: where RAPL's powercap tree is (tests point it at a fake one).
    CpuEventSource(SubBlockTimes* timings, const std::string& powercap_root)
        : timings_(timings), powercap_root_(powercap_root), rapl_(powercap_root) {}
    bool start() override { return true; }
    bool slow_start() const override { return false; }
    void begin_step(int step) override;
    void end_step(long tokens) override;
    void stop() override { timings_->events = nullptr; }
    ProfileRecords take() override;
    void complete_context(ProfileContext&) override {}
    std::unique_ptr<EnergyCounter> energy_counter() const override { return rapl_energy_counter(powercap_root_); }

private:
    SubBlockTimes* timings_;
    std::string powercap_root_;
    RaplReader rapl_;
    std::vector<SubBlockEvent> events_;
    std::vector<StepRecord> steps_;
    std::vector<EnergyReading> energy_; // RAPL at each step's start and end
    int step_ = 0;
    int64_t step_start_ = 0;
};

// train_gpt2's session: the CPU source over `timings`, the measured ceilings and the CPU added to `ctx` (the
// driver's: program, model, batch, ranks; the backend's memory plan). RAPL is read under $LLMC_POWERCAP_ROOT when
// set, else /sys/class/powercap.
std::unique_ptr<ProfileSession> make_cpu_profile_session(const SessionOptions& opt, ProfileContext ctx,
                                                         SubBlockTimes* timings);

/*
 * infer_gpt2's session: the same source and ceilings; step 1 is the prefill, each later step one decode step
 * (phases Phase::prefill and Phase::decode). `shape` must hold at least the sequences and the prompt tokens
 * (InferenceShape::active); the run completes the decode counts through before_report. prompt_len: the
 * longest prompt (the context's T).
 */
std::unique_ptr<ProfileSession> make_cpu_inference_session(const SessionOptions& opt, const GPT2Config& c,
                                                           const InferenceShape& shape, int prompt_len,
                                                           SubBlockTimes* timings);

} // namespace llmc::prof
