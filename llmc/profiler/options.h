/*
 * profile_gpt2cu's command line (its flags: doc/flags.md), one flag table (llmc/util/flags.h) as the trainers'
 * (llmc/train/options.h) and the inference programs' (llmc/infer/options.h); and the replay-sized run its flags
 * default to under ncu. A bad flag or value throws UsageError naming the flag; the program prints it on one line and
 * exits 2.
 */
#pragma once
#include <set>
#include <string>

#include "llmc/util/flags.h"

namespace llmc {

struct ProfileOptions {
    std::string model = "d12";
    int layers = 0; // 0: the model's own
    int B = 8, T = 1024;
    std::string data; // "" = random token ids
    int warmup = 3, steps = 5;
    std::string output = "profile";
    bool calibrate = true;
    bool counters = false;
    bool cuda_graph = false; // --cuda-graph: each micro-step and update one CUDA graph launch
    bool energy = false;     // --energy: joules per sub-block after the profile
    float energy_seconds = 60; // --energy-seconds
    int top = 15;
    bool help = false, version = false;
    std::set<std::string> given; // the flags on the command line (long names): they win over the ncu defaults
    bool has(const char* flag) const { return given.count(flag) > 0; }
};

// Throws UsageError on anything it does not understand.
ProfileOptions parse_profile_options(int argc, char** argv);
// --help, with the defaults.
std::string profile_usage();

/*
 * ncu replays every kernel some 40 times (--set full): the default run (12 layers, 3 warmup + 5 steps, about
 * 3,000 kernels) would take hours. Under ncu, the flags not given on the command line shrink to a replay-sized run:
 * one layer, no warmup, one step, the datasheet ceilings, and (unless set) cuBLASLt's first heuristic algorithms,
 * untimed (LLMC_GEMM_AUTOTUNE=0 in the environment). Returns the one line that says so.
 */
std::string shrink_for_ncu(ProfileOptions& o);

} // namespace llmc
