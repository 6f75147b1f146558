/*
 * The names every profile uses for the parts of a training step (brief: "Sub-block names").
 * The CPU trainer times these; the GPU trainer wraps each in an NVTX range and the profiler attributes
 * kernels to them, so CPU and GPU profiles line up row by row.
 */
#pragma once
#include <array>
#include <chrono>
#include <cstdint>
#include <vector>

namespace llmc {

enum class SubBlock {
    encoder, ln1, qkv, attention, attn_proj, residual1, ln2, fc, gelu, fc_proj, residual2, lnf, classifier,
    optimizer, grad_norm, COUNT
};
enum class Phase { fwd, bwd, opt, COUNT };

constexpr int NUM_SUBBLOCKS = (int)SubBlock::COUNT;
constexpr int NUM_PHASES = (int)Phase::COUNT;

inline const char* subblock_name(SubBlock s) {
    static const char* names[] = {"encoder", "ln1", "qkv", "attention", "attn_proj", "residual1", "ln2", "fc",
                                  "gelu", "fc_proj", "residual2", "lnf", "classifier", "optimizer", "grad_norm"};
    return names[(int)s];
}
inline const char* phase_name(Phase p) {
    static const char* names[] = {"fwd", "bwd", "opt"};
    return names[(int)p];
}

// One timed execution: steady_clock nanoseconds, so profiles (train_gpt2 --profile) can place it in time.
struct SubBlockEvent {
    SubBlock subblock;
    Phase phase;
    int layer; // -1 outside the layers
    int64_t start_ns, end_ns;
};

inline int64_t steady_ns() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
}

// Wall-clock seconds and call counts per (sub-block, phase), accumulated over a run.
struct SubBlockTimes {
    std::array<std::array<double, NUM_PHASES>, NUM_SUBBLOCKS> seconds{};
    std::array<std::array<long, NUM_PHASES>, NUM_SUBBLOCKS> calls{};
    std::vector<SubBlockEvent>* events = nullptr; // when set, every execution is also appended here
    void add(SubBlock s, Phase p, double sec) {
        seconds[(int)s][(int)p] += sec;
        calls[(int)s][(int)p] += 1;
    }
    void reset() { *this = SubBlockTimes{}; }
};

// RAII timer: adds the scope's wall time to one (sub-block, phase) cell; a null table disables it.
class ScopedSubBlockTimer {
public:
    ScopedSubBlockTimer(SubBlockTimes* t, SubBlock s, Phase p, int layer = -1)
        : t_(t), s_(s), p_(p), layer_(layer), start_(t ? steady_ns() : 0) {}
    ~ScopedSubBlockTimer() {
        if (!t_) return;
        int64_t end = steady_ns();
        t_->add(s_, p_, (end - start_) * 1e-9);
        if (t_->events) t_->events->push_back({s_, p_, layer_, start_, end});
    }

private:
    SubBlockTimes* t_;
    SubBlock s_;
    Phase p_;
    int layer_;
    int64_t start_;
};

} // namespace llmc
