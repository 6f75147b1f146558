/*
 * AdamW settings shared by the CPU and GPU optimizers (doc/design.md, "Optimizer conventions"). The defaults are
 * those llm.c's GPU trainer and nanoGPT train GPT-2 with: beta1 0.9, beta2 0.95, eps 1e-8, global-norm clipping at
 * 1.0. Each has a flag (--beta1, --beta2, --eps, --grad-clip; weight decay -c, applied only where
 * parameter_decays()), so llm.c's CPU trainer's settings (beta2 0.999, no clipping, no weight decay) can be set.
 */
#pragma once

namespace llmc {

struct AdamWConfig {
    float beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f, weight_decay = 0.0f;
    float grad_clip = 1.0f; // global-norm clip; 0 disables
};

} // namespace llmc
