// Learning-rate schedules (llmc/train/schedulers.h).
#include "llmc/train/schedulers.h"

#include <cmath>

namespace llmc {

float LRScheduler::lr(int step) const {
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

} // namespace llmc
