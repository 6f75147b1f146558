/*
 * The session of a program that profiles itself on the GPU (train_gpt2cu --profile, infer_gpt2cu --profile):
 * CUPTI over the schedule's window (llmc/profiler/cupti_source.cuh), with the ceilings measured (or read from their
 * cache) now, or the datasheet's (SessionOptions::measure_ceilings). Compiled once by nvcc (gpu_session.cu), so that the GPU backends do not compile CUPTI; the emulated
 * tier, which has no CUPTI, links its own (test/emu/gpu_session.cpp).
 */
#pragma once
#include <memory>

#include "llmc/profiler/session.h"

namespace llmc::prof {

// Call it before the model takes the device memory: the calibration needs some.
std::unique_ptr<ProfileSession> make_gpu_profile_session(const SessionOptions& so, ProfileContext ctx);

} // namespace llmc::prof
