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
 * collector and report as profile_gpt2cu) and DIR is written when the window closes. The backend, its
 * --memory-plan and the model are llmc/gpu/gpt2.cu, compiled once.
 */
#include "llmc/gpu/programs.h"

int main(int argc, char** argv) {
    return llmc::main_guard([&] { return llmc::run_training(llmc::gpu_train_program(), argc, argv); });
}
