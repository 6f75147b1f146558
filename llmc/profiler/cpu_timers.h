/*
 * The CPU trainer's collection layer: wall-clock timers around each sub-block execution (llmc/model/subblocks.h).
 * Accumulated per (sub-block, phase) for the table train_gpt2 prints at the end of a run and, while a profile
 * window records (llmc/profiler/cpu_source.h), appended one event per execution.
 */
#pragma once
#include <array>
#include <chrono>
#include <cstdint>
#include <vector>

#include "llmc/model/subblocks.h"

namespace llmc {

// Which op of a sub-block ran: the one it is named after (for the classifier, its matmul), or the
// classifier's softmax and cross-entropy, timed apart so the profile shows its GEMM apart from the rest.
enum class SubBlockPart : uint8_t { main, softmax_loss };

// One timed execution: steady_clock nanoseconds, so profiles (train_gpt2 --profile) can place it in time.
struct SubBlockEvent {
    SubBlock subblock;
    Phase phase;
    int layer; // -1 outside the layers
    int64_t start_ns, end_ns;
    SubBlockPart part = SubBlockPart::main;
    // 0: an op of the training thread (the profile's op, in its tables). Else work of another thread beside it
    // (the gradient buckets' all-reduces), drawn on that thread's track of the trace and counted in no table:
    // the training thread's wait for it is the comm op.
    uint32_t thread = 0;
};

inline int64_t steady_ns() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
}

// Wall-clock seconds and call counts per (sub-block, phase), accumulated over a run; a call is one
// execution of the sub-block, whatever parts it was timed in.
struct SubBlockTimes {
    std::array<std::array<double, NUM_PHASES>, NUM_SUBBLOCKS> seconds{};
    std::array<std::array<long, NUM_PHASES>, NUM_SUBBLOCKS> calls{};
    std::vector<SubBlockEvent>* events = nullptr; // when set, every execution is also appended here
    void add(SubBlock s, Phase p, double sec, SubBlockPart part = SubBlockPart::main) {
        seconds[(int)s][(int)p] += sec;
        calls[(int)s][(int)p] += part == SubBlockPart::main;
    }
    void reset() { *this = SubBlockTimes{}; }
};

// RAII timer: adds the scope's wall time to one (sub-block, phase) cell; a null table disables it.
class ScopedSubBlockTimer {
public:
    ScopedSubBlockTimer(SubBlockTimes* t, SubBlock s, Phase p, int layer = -1, SubBlockPart part = SubBlockPart::main)
        : t_(t), s_(s), p_(p), part_(part), layer_(layer), start_(t ? steady_ns() : 0) {}
    ~ScopedSubBlockTimer() {
        if (!t_) return;
        int64_t end = steady_ns();
        t_->add(s_, p_, (end - start_) * 1e-9, part_);
        if (t_->events) t_->events->push_back({s_, p_, layer_, start_, end, part_});
    }
    ScopedSubBlockTimer(const ScopedSubBlockTimer&) = delete;
    ScopedSubBlockTimer& operator=(const ScopedSubBlockTimer&) = delete;

private:
    SubBlockTimes* t_;
    SubBlock s_;
    Phase p_;
    SubBlockPart part_;
    int layer_;
    int64_t start_;
};

} // namespace llmc
