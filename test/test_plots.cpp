// scripts/plot_profile.py and scripts/compare_profiles.py on the committed sample profile
// (test/data/sample_profile, from dev/sample_profile.cpp) and on a CPU profile written here. They need
// python3 with matplotlib; LLMC_SKIP_PLOT_TESTS=1 skips them where neither can be installed.
#include <cstdlib>
#include <gtest/gtest.h>
#include <string>
#include <unistd.h>

#include "test/cpu_profile_fixture.h"

using testutil::is_png;
using testutil::run;
using testutil::TempDir;

namespace {

const char* SAMPLE = "test/data/sample_profile";

// `rel` (from the repository root, the tests' working directory) as an absolute path.
std::string abs_path(const std::string& rel) {
    char buf[4096];
    return std::string(getcwd(buf, sizeof(buf)) ? buf : ".") + "/" + rel;
}

} // namespace

TEST(PlotProfile, SampleProfileGivesFourPngs) {
    REQUIRE_MATPLOTLIB();
    TempDir out;
    auto r = run(std::string("python3 scripts/plot_profile.py ") + SAMPLE + " -o " + out.path);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    for (const char* name : {"roofline.png", "subblocks.png", "kernels.png", "power.png"})
        EXPECT_TRUE(is_png(out / name)) << name;
}

TEST(PlotProfile, CpuProfileWithoutPowerGivesAPlaceholder) {
    REQUIRE_MATPLOTLIB();
    testutil::CpuProfileRun cpu;
    testutil::run_cpu_profile(cpu, 3, 1, 2);
    ASSERT_EQ(cpu.result.exit_code, 0) << cpu.result.output;
    auto r = run("python3 scripts/plot_profile.py " + cpu.profile_dir()); // into the profile directory
    ASSERT_EQ(r.exit_code, 0) << r.output;
    for (const char* name : {"roofline.png", "subblocks.png", "kernels.png", "power.png"})
        EXPECT_TRUE(is_png(cpu.profile_dir() + "/" + name)) << name;
}

TEST(PlotProfile, ClearErrors) {
    REQUIRE_MATPLOTLIB();
    auto missing = run("python3 scripts/plot_profile.py /nonexistent/profile");
    EXPECT_EQ(missing.exit_code, 2);
    EXPECT_NE(missing.output.find("no profile directory '/nonexistent/profile'"), std::string::npos) << missing.output;
    TempDir empty;
    auto incomplete = run("python3 scripts/plot_profile.py " + empty.path);
    EXPECT_EQ(incomplete.exit_code, 1);
    EXPECT_NE(incomplete.output.find("missing profile.json"), std::string::npos) << incomplete.output;
    auto cmp = run("python3 scripts/compare_profiles.py /nonexistent/a " + std::string(SAMPLE));
    EXPECT_EQ(cmp.exit_code, 2);
    EXPECT_NE(cmp.output.find("no profile directory '/nonexistent/a'"), std::string::npos) << cmp.output;
}

TEST(PlotProfile, CompareCpuWithSample) {
    REQUIRE_MATPLOTLIB();
    testutil::CpuProfileRun cpu;
    testutil::run_cpu_profile(cpu, 3, 1, 2);
    ASSERT_EQ(cpu.result.exit_code, 0) << cpu.result.output;
    TempDir out;
    auto r = run("python3 scripts/compare_profiles.py " + cpu.profile_dir() + " " + SAMPLE + " -o " + (out / "c.png"));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("A ms"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("A/B"), std::string::npos);
    EXPECT_NE(r.output.find("train_gpt2 ("), std::string::npos);
    EXPECT_NE(r.output.find("H100"), std::string::npos);
    for (const char* row : {"\nqkv          fwd", "\nqkv          bwd", "\noptimizer    opt", "\nfwd ", "\nbwd ",
                            "\ntotal "})
        EXPECT_NE(r.output.find(row), std::string::npos) << row;
    EXPECT_TRUE(is_png(out / "c.png"));
}

TEST(PlotProfile, CompareSampleWithItselfGivesOnes) {
    REQUIRE_MATPLOTLIB();
    TempDir out;
    auto r = run(std::string("cd ") + out.path + " && python3 " + abs_path("scripts/compare_profiles.py") +
                 " " + abs_path(SAMPLE) + " " + abs_path(SAMPLE));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("1.000\n"), std::string::npos) << r.output;
    EXPECT_TRUE(is_png(out / "compare.png")); // the default: compare.png in the current directory
}
