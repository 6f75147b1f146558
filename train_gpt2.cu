/*
 * train_gpt2cu: the GPU trainer. bf16 parameters, activations and gradients; fp32 master weights, AdamW
 * moments, layernorm statistics and losses; cuBLASLt matmuls with fused epilogues; our own fused kernels for
 * the rest (one header per op in llmc/). The loop, flags and files are the CPU reference's (llmc/train/loop.h), so every
 * result can be checked against ./train_gpt2 and checkpoints move freely between the two.
 *
 *   make train_gpt2cu && ./train_gpt2cu -i data/tinyshakespeare
 *
 * A step queues all its kernels without waiting; the one synchronisation is reading the step's loss and
 * grad norm at its end. With --profile DIR a window of steps is traced in-process with CUPTI (the same
 * collector and report as profile_gpt2cu) and DIR is written when the window closes. The backend and the
 * memory plan are llmc/train/gpu_backend.{h,cu}, compiled once.
 */
#include "llmc/cuda_common.cuh"
#include "llmc/train/gpu_backend.h"
#include "llmc/train/loop.h"

using namespace llmc;

int main(int argc, char** argv) {
    return main_guard([&] {
        TrainOptions defaults; // GPT-2 124M, B=4, T=1024 (llm.c's defaults)
        // The flags first: a bad one is named, with or without a GPU; --memory-plan needs none.
        const TrainOptions opt = parse_train_options(argc, argv, defaults);
        if (opt.memory_plan && !opt.help) return print_memory_plan(opt);
        if (!opt.help) require_gpu("train_gpt2cu", "./train_gpt2 is the CPU trainer with the same flags");
        return run_training("train_gpt2cu", argc, argv, defaults, make_gpu_backend);
    });
}
