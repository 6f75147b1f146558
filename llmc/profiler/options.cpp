// profile_gpt2cu's flag table (llmc/profiler/options.h).
#include "llmc/profiler/options.h"

#include <cstdlib>

#include "llmc/model/gpt2_config.h"
#include "llmc/util/utils.h"

namespace llmc {

namespace {

// The flag table, bound to `o`.
FlagTable profile_flags(ProfileOptions& o) {
    FlagTable t("usage: profile_gpt2cu [options]\n"
                "Runs GPT-2 training steps on the GPU traced with CUPTI and writes a profile directory.",
                "Under ncu, flags not given default to a replay-sized run (--layers 1 --warmup 0 --steps 1 --no-calibrate,\n"
                "LLMC_GEMM_AUTOTUNE=0 unless set):\n"
                "  ncu --set full ./profile_gpt2cu;  one sub-block: ncu --nvtx --nvtx-include \"llmc@fc/\" ./profile_gpt2cu\n");
    t.add({"-e", "--model", "dN|FILE", "dN (d12 = GPT-2 124M; other dN: L=N C=64N NH=N) or an llm.c model file",
           flag::text(o.model)});
    t.add({"", "--layers", "N", "override L of a dN model (a smaller model for ncu)", flag::integer(o.layers, 1, 1000),
           "the model's"});
    t.add({"-b", "--batch", "N", "micro-batch size", flag::integer(o.B, 1, IMAX)});
    t.add({"-t", "--seq-len", "N", "sequence length", flag::integer(o.T, 1, IMAX)});
    t.add({"-i", "--input", "DATA", "train shards (DIR|GLOB|FILE)", flag::text(o.data), "random token ids"});
    t.add({"", "--warmup", "N", "untraced steps before the profile", flag::integer(o.warmup, 0, IMAX)});
    t.add({"", "--steps", "N", "profiled steps", flag::integer(o.steps, 1, IMAX)});
    t.add({"-o", "--output", "DIR", "profile directory", flag::text(o.output)});
    t.add({"", "--no-calibrate", "", "roofline against the datasheet ceilings instead of measured ones",
           flag::off(o.calibrate)});
    t.add({"", "--counters", "", "one more step under CUPTI's range profiler: per-kernel FLOPs and DRAM bytes",
           flag::on(o.counters)});
    t.add({"", "--energy", "",
           "joules per sub-block: each replayed after the profile long enough for\n"
           "NVML's energy counter, with 95% intervals (energy.csv)",
           flag::on(o.energy)});
    t.add(energy_seconds_flag(o.energy_seconds));
    t.add({"", "--top", "N", "kernels listed in the summary", flag::integer(o.top, 1, IMAX)});
    t.add({"", "--cuda-graph", "0|1",
           "each step's forward and backward, and its update, as one CUDA graph\n"
           "launch each (their kernels attributed to sub-blocks as eager ones)",
           flag::zero_or_one(o.cuda_graph)});
    t.add({"", "--version", "",
           "the toolchain and library versions (nvcc, CUDA runtime, driver, cuBLASLt, CUPTI), then exit",
           flag::on(o.version)});
    t.add(help_flag(o.help));
    return t;
}

} // namespace

ProfileOptions parse_profile_options(int argc, char** argv) {
    ProfileOptions o;
    FlagTable t = profile_flags(o);
    t.parse(argc, argv);
    o.given = t.given_names();
    if (o.has("--energy-seconds") && !o.energy) throw UsageError("--energy-seconds: only with --energy");
    if (o.counters && o.cuda_graph)
        throw UsageError("--counters: the counted step would replay a CUDA graph, whose kernels CUPTI's kernel replay "
                         "is not relied on to count; profile the counters without --cuda-graph 1");
    return o;
}

std::string profile_usage() {
    ProfileOptions d;
    return profile_flags(d).help();
}

std::string shrink_for_ncu(ProfileOptions& o) {
    std::string what;
    auto note = [&](const std::string& s) { what += (what.empty() ? "" : ", ") + s; };
    int depth = 0;
    if (!o.has("--layers") && parse_depth_descriptor(o.model, &depth)) o.layers = 1, note("--layers 1");
    if (!o.has("--warmup")) o.warmup = 0, note("--warmup 0");
    if (!o.has("--steps")) o.steps = 1, note("--steps 1");
    if (!o.has("--no-calibrate")) o.calibrate = false, note("--no-calibrate");
    // The one step would also run every matmul shape's autotune candidates, each of them replayed.
    if (!getenv("LLMC_GEMM_AUTOTUNE")) setenv("LLMC_GEMM_AUTOTUNE", "0", 1), note("LLMC_GEMM_AUTOTUNE=0");
    return "profile_gpt2cu: under ncu: a replay-sized run (" + (what.empty() ? std::string("flags as given") : what) +
           "); in-process CUPTI off";
}


} // namespace llmc
