/*
 * Learning-rate schedules (-k): linear warmup over -u steps, then cosine or linear decay from the base LR
 * to final_frac * base LR (-q) at the last step, or constant. `step` counts from 0.
 */
#pragma once
#include <cmath>
#include <string>

#include "llmc/utils.h"

namespace llmc {

enum class Schedule { cosine, linear, constant };

inline Schedule parse_schedule(const std::string& s) {
    if (s == "cosine") return Schedule::cosine;
    if (s == "linear") return Schedule::linear;
    if (s == "constant") return Schedule::constant;
    throw UsageError(strprintf("-k: unknown scheduler '%s' (expected cosine, linear or constant)", s.c_str()));
}
inline const char* schedule_name(Schedule s) {
    return s == Schedule::cosine ? "cosine" : s == Schedule::linear ? "linear" : "constant";
}

struct LRScheduler {
    Schedule type = Schedule::cosine;
    float base_lr = 3e-4f;
    int warmup_steps = 0;
    float final_frac = 1.0f;
    int max_steps = 1;

    float lr(int step) const {
        // Warmup reaches base_lr at the end of step warmup_steps-1, as llm.c and nanoGPT do (step+1, not step).
        if (step < warmup_steps) return base_lr * (float)(step + 1) / (float)warmup_steps;
        if (type == Schedule::constant) return base_lr;
        int decay_steps = max_steps - warmup_steps;
        float ratio = decay_steps > 0 ? (float)(step - warmup_steps) / (float)decay_steps : 1.0f;
        if (ratio > 1.0f) ratio = 1.0f;
        float min_lr = base_lr * final_frac;
        float coeff = type == Schedule::cosine ? 0.5f * (1.0f + std::cos((float)M_PI * ratio)) : 1.0f - ratio;
        return min_lr + coeff * (base_lr - min_lr);
    }
};

} // namespace llmc
