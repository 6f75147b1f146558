// profile_gpt2cu as a user starts it under an external tool, without a GPU: under ncu (its environment faked)
// the flags not given shrink to a replay-sized run, said in one line before any CUDA call; explicit flags win.
#include <gtest/gtest.h>
#include <string>
#include <sys/stat.h>

#include "test/test_util.h"

using testutil::has;

namespace {
bool built() {
    struct stat st;
    return stat("./profile_gpt2cu", &st) == 0;
}
} // namespace

TEST(ProfileCli, UnderNcuTheDefaultRunShrinksToReplaySize) {
    if (!built()) GTEST_SKIP() << "profile_gpt2cu is not built (no nvcc)";
    testutil::TempDir dir;
    const std::string under_ncu = "NV_COMPUTE_PROFILER_PERFWORKS_DIR=" + dir.path + " ./profile_gpt2cu -o " + (dir / "p");
    const std::string ncu = "env -u LLMC_GEMM_AUTOTUNE " + under_ncu;
    auto r = testutil::run(ncu);
    EXPECT_TRUE(has(r.output, "under ncu: a replay-sized run (--layers 1, --warmup 0, --steps 1, --no-calibrate, "
                              "LLMC_GEMM_AUTOTUNE=0)"))
        << r.output;
    r = testutil::run(ncu + " --steps 3 --layers 2");
    EXPECT_TRUE(has(r.output, "under ncu: a replay-sized run (--warmup 0, --no-calibrate, LLMC_GEMM_AUTOTUNE=0)"))
        << r.output;
    r = testutil::run("LLMC_GEMM_AUTOTUNE=1 " + under_ncu + " --steps 1 --layers 1 --warmup 0 --no-calibrate");
    EXPECT_TRUE(has(r.output, "under ncu: a replay-sized run (flags as given)")) << r.output;
    // An injection library from Nsight Compute's install tree says ncu as well.
    r = testutil::run("CUDA_INJECTION64_PATH=/opt/nvidia/nsight-compute/target/libTreeLauncherTargetInjection.so "
                      "./profile_gpt2cu -o " + (dir / "q"));
    EXPECT_TRUE(has(r.output, "under ncu: a replay-sized run (--layers 1")) << r.output;
}

TEST(ProfileCli, WithoutAToolNothingShrinks) {
    if (!built()) GTEST_SKIP() << "profile_gpt2cu is not built (no nvcc)";
    testutil::TempDir dir;
    auto r = testutil::run("env -u NV_COMPUTE_PROFILER_PERFWORKS_DIR -u CUDA_INJECTION64_PATH ./profile_gpt2cu -o " +
                           (dir / "p") + " -e d1 -b 1 -t 64 --warmup 1 --steps 1 --no-calibrate");
    EXPECT_FALSE(has(r.output, "under ncu:")) << r.output;
    // No GPU here: one line and exit 1; with one, a profile.
    if (has(r.output, "no CUDA device")) EXPECT_EQ(r.exit_code, 1) << r.output;
    else EXPECT_EQ(r.exit_code, 0) << r.output;
    r = testutil::run("./profile_gpt2cu --help");
    EXPECT_TRUE(has(r.output, "Under ncu, flags not given default to a replay-sized run")) << r.output;
    EXPECT_TRUE(has(r.output, "--nvtx-include \"llmc@fc/\" ./profile_gpt2cu\n")) << "usage cut short: " << r.output;
}
