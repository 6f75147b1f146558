// trace.json in Holistic Trace Analysis (HTA): test/hta_check.py loads the trace, runs HTA's profiler-step,
// kernel, temporal, idle-time and launch analyses and compares each with the profile's CSVs, on the committed
// sample GPU profile (test/data/sample_profile) and on a CPU profile written here; and a data-parallel
// profile's rank traces as one set (ranks from distributedInfo, HTA's communication/computation overlap), on
// GPU records made here and on two CPU ranks under mpirun (test_train_cpu.cpp writes those). They need python3 with
// HTA; .ci/run installs it, and without it they skip.
#include <gtest/gtest.h>
#include <string>

#include "llmc/profiler/report.h"
#include "llmc/profiler/writers.h"
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

namespace {

/*
 * rank<r>/ of a data-parallel GPU profile from records: one step of two compute kernels on stream 7,
 * [100, 600] and [700, 1200] us, and one NCCL all-reduce on stream 13 over [nccl_start, nccl_start + 400] us,
 * each launched by its own cudaLaunchKernel; written by the profile's writers as train_gpt2cu's would be.
 */
void write_gpu_rank(const std::string& dir, int rank, int world, uint64_t nccl_start_us) {
    using namespace llmc;
    using namespace llmc::prof;
    constexpr uint64_t US = 1000;
    ProfileContext ctx;
    ctx.program = "train_gpt2cu";
    ctx.device = "synthetic GPU";
    ctx.model = gpt2_config_for_depth(2);
    ctx.B = 1, ctx.T = 64;
    ctx.ceilings = {720, 48, 3000, "synthetic"};
    ctx.rank = rank, ctx.world_size = world;
    ProfileRecords rec;
    uint32_t corr = 1;
    auto kernel = [&](const char* name, uint64_t start_us, uint64_t end_us, uint32_t stream, SubBlock s, Phase p) {
        rec.api.push_back({"cudaLaunchKernel", (start_us - 50) * US, (start_us - 45) * US, 1, corr});
        KernelRecord k;
        k.name = name;
        k.start_ns = start_us * US, k.end_ns = end_us * US;
        k.stream = stream, k.correlation = corr++;
        k.grid[0] = 132, k.block[0] = 256;
        k.where = {(int)s, (int)p, 0, 1};
        rec.kernels.push_back(k);
    };
    kernel("void llmc::layernorm_backward_kernel(__nv_bfloat16*)", 100, 600, 7, SubBlock::ln1, Phase::bwd);
    kernel("nvjet_hsh_128x256_64x4_2x1_v_bz_coopA_NTT", 700, 1200, 7, SubBlock::qkv, Phase::bwd);
    kernel("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)", nccl_start_us,
           nccl_start_us + 400, 13, SubBlock::comm, Phase::bwd);
    rec.ranges.push_back({"step", 0, 2000 * US, 1, 0, {-1, -1, -1, 1}});
    rec.steps.push_back({1, 0, 2000 * US, 64});
    const Report report = build_report(rec, ctx);
    write_profile_dir(dir + "/rank" + std::to_string(rank), report, rec);
}

} // namespace

// Two GPU ranks whose all-reduce overlaps computation by 300 of 400 us (rank 0) and 200 of 400 us (rank 1):
// HTA reads each rank from its trace and its overlap analysis gives those shares.
TEST_F(Hta, GpuRanksAsOneSetWithTheirCommunicationOverlap) {
    TempDir d;
    write_gpu_rank(d.path, 0, 2, 300);  // [300, 700]: 300 us under the first kernel
    write_gpu_rank(d.path, 1, 2, 1000); // [1000, 1400]: 200 us under the second
    auto r = run(CHECK + d.path);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_TRUE(has(r.output, "ranks: 2 traces, each with its directory's rank in distributedInfo")) << r.output;
    EXPECT_TRUE(has(r.output, "communication overlap: rank 0: 75.00% of 400.000 us of NCCL kernels")) << r.output;
    EXPECT_TRUE(has(r.output, "communication overlap: rank 1: 50.00% of 400.000 us of NCCL kernels")) << r.output;

    // A trace whose distributedInfo names another rank than its directory is refused.
    auto sed = run("sed -i 's/\"rank\": 1,/\"rank\": 0,/' " + (d / "rank1/trace.json"));
    ASSERT_EQ(sed.exit_code, 0);
    auto bad = run(CHECK + d.path);
    EXPECT_EQ(bad.exit_code, 1) << bad.output;
    EXPECT_TRUE(has(bad.output, "ranks: HTA reads")) << bad.output;
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
