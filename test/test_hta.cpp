// trace.json in Holistic Trace Analysis (HTA): test/hta_check.py loads the trace, runs HTA's profiler-step,
// kernel, temporal, idle-time and launch analyses and compares each with the profile's CSVs, on the committed
// sample GPU profile (test/data/sample_profile) and on a CPU profile written here. They need python3 with
// HTA; .ci/run installs it, and without it they skip.
#include <gtest/gtest.h>
#include <string>

#include "test/cpu_profile_fixture.h"

using testutil::has;
using testutil::run;
using testutil::TempDir;

namespace {

const char* CHECK = "python3 test/hta_check.py ";

// Skips, naming what to install, without python3 and HTA.
class Hta : public ::testing::Test {
protected:
    void SetUp() override {
        static const bool installed = run("python3 -c 'import hta.trace_analysis'").exit_code == 0; // asked once
        if (!installed)
            GTEST_SKIP() << "python3 with Holistic Trace Analysis not found: python3 -m pip install "
                            "HolisticTraceAnalysis==0.5.0 psutil 'pandas<3'";
    }
};

// Every analysis printed its line and the run ended in agreement.
void expect_agreement(const testutil::RunResult& r) {
    ASSERT_EQ(r.exit_code, 0) << r.output;
    for (const char* line : {"profiler steps: ", "kernel breakdown: ", "temporal breakdown: ",
                             "idle time breakdown: ", "kernel launch stats: ", "HTA's analyses agree"})
        EXPECT_TRUE(has(r.output, line)) << line << " missing in\n" << r.output;
}

} // namespace

TEST_F(Hta, SampleGpuProfileAgreesWithItsTables) {
    auto r = run(std::string(CHECK) + "test/data/sample_profile");
    expect_agreement(r);
    // The sample's 2 steps launch 287 kernels and copies each, all from cudaLaunchKernel and cudaMemcpyAsync.
    EXPECT_TRUE(has(r.output, "profiler steps: 2 ProfilerStep annotations")) << r.output;
    EXPECT_TRUE(has(r.output, "kernel launch stats: 574 launches")) << r.output;
}

TEST_F(Hta, CpuProfileAgreesWithItsTables) {
    testutil::CpuProfileRun cpu;
    testutil::run_cpu_profile(cpu, 4, 1, 3);
    ASSERT_EQ(cpu.result.exit_code, 0) << cpu.result.output;
    auto r = run(CHECK + cpu.profile_dir());
    expect_agreement(r);
    EXPECT_TRUE(has(r.output, "profiler steps: 3 ProfilerStep annotations")) << r.output;
    EXPECT_TRUE(has(r.output, "kernel launch stats: 0 launches")) << r.output; // no CUDA calls on the CPU
}

// A kernels.csv that does not match its trace fails, naming the kernel and both totals.
TEST_F(Hta, DisagreementFails) {
    TempDir d;
    ASSERT_EQ(run("cp test/data/sample_profile/* " + d.path).exit_code, 0);
    // adamw's row (2 calls, 5812.874 us) gains 1 us.
    auto sed = run("sed -i 's/,optimizer,opt,optimizer,2,5812.874,/,optimizer,opt,optimizer,2,5813.874,/' " +
                   (d / "kernels.csv"));
    ASSERT_EQ(sed.exit_code, 0);
    ASSERT_TRUE(has(testutil::slurp(d / "kernels.csv"), "5813.874")) << "the sample's adamw row changed";
    auto r = run(CHECK + d.path);
    EXPECT_EQ(r.exit_code, 1) << r.output;
    EXPECT_TRUE(has(r.output, "kernel breakdown: 'void llmc::adamw_kernel(__nv_bfloat16*, float*)' 5812.874 us in "
                              "HTA, 5813.874 us in kernels.csv"))
        << r.output;
    // The sample's activities take 26074.602 us on its one stream; the changed table says 1 us more.
    EXPECT_TRUE(has(r.output, "temporal breakdown: busy 26074.602 us in HTA, kernels.csv total 26075.602 us"))
        << r.output;
}

TEST_F(Hta, BadArguments) {
    auto missing = run(std::string(CHECK) + "/nonexistent/profile");
    EXPECT_EQ(missing.exit_code, 2);
    EXPECT_TRUE(has(missing.output, "hta_check.py: error: no profile directory '/nonexistent/profile'"))
        << missing.output;
    TempDir empty;
    auto incomplete = run(CHECK + empty.path);
    EXPECT_EQ(incomplete.exit_code, 1);
    EXPECT_TRUE(has(incomplete.output, "missing trace.json")) << incomplete.output;
}
