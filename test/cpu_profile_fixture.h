// A CPU profile directory from `./train_gpt2 --profile` on a V=60 model and token shards in a temp dir:
// a real profile in about a second (test_cpu_profile.cpp, test_plots.cpp).
#pragma once
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "llmc/io/checkpoint.h"
#include "llmc/io/formats.h"
#include "llmc/cpu/gpt2.h"
#include "test/test_util.h"

namespace testutil {

struct CpuProfileRun {
    TempDir dir;
    RunResult result;
    std::string profile_dir() const { return dir / "prof"; }
};

// Trains `steps` steps with --profile-start `start` --profile-steps `count` (grad accum 2: two micro-batches);
// `boundary`: the validation, sample and checkpoint flags (a val shard is there; -o is the run's directory).
inline void run_cpu_profile(CpuProfileRun& r, int steps, int start, int count,
                            const std::string& boundary = "-s 0 -v 0") {
    std::mt19937 g(42);
    std::vector<uint16_t> t(20000);
    for (size_t i = 0; i < t.size(); i++) t[i] = (uint16_t)(g() % 60);
    llmc::write_shard(r.dir / "toy_train.bin", t);
    llmc::write_shard(r.dir / "toy_val.bin", std::vector<uint16_t>(t.begin(), t.begin() + 2000));
    llmc::GPT2Config c;
    c.max_seq_len = 32, c.vocab_size = 60, c.padded_vocab_size = 64, c.num_layers = 2, c.num_heads = 2;
    c.channels = 32;
    llmc::GPT2CPU<float> m(c);
    m.init_random(7);
    llmc::save_model(r.dir / "toy_model.bin", c, m.params_memory.data());
    // An empty ceilings cache and no powercap tree, whatever the machine has: the same run everywhere.
    r.result = run("XDG_CACHE_HOME=" + (r.dir / "cache") + " LLMC_POWERCAP_ROOT=" + (r.dir / "no_powercap") +
                   " ./train_gpt2 -i " + r.dir.path + " -e " + (r.dir / "toy_model.bin") +
                   " -b 4 -t 16 -d 128 " + boundary + " -x " + std::to_string(steps) + " --profile " + r.profile_dir() +
                   " --profile-start " + std::to_string(start) + " --profile-steps " + std::to_string(count));
}

} // namespace testutil
