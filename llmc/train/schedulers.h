/*
 * Learning-rate schedules (-k): linear warmup over -u steps, then cosine or linear decay from the base LR
 * to final_frac * base LR (-q) at the last step, or constant. `step` counts from 0.
 */
#pragma once
#include <string>

#include "llmc/util/utils.h"

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

    float lr(int step) const; // llmc/train/schedulers.cpp
};

} // namespace llmc
