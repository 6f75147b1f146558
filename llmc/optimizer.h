/*
 * AdamW settings shared by the CPU and GPU optimizers (doc/design.md, "Optimizer conventions", as llm.c and nanoGPT
 * train GPT-2): beta1 0.9, beta2 0.95, eps 1e-8, global-norm clipping at 1.0; weight decay comes from -c and
 * applies only where parameter_decays().
 */
#pragma once

namespace llmc {

struct AdamWConfig {
    float beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f, weight_decay = 0.0f;
    float grad_clip = 1.0f; // global-norm clip; <= 0 disables
};

} // namespace llmc
