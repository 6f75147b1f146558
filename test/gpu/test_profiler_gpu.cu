// The in-process profiler on a real GPU: CUPTI records of a tiny model's training steps joined to their
// Ranges (llmc/profiler/cupti_collector.cuh), measured and cached ceilings (llmc/profiler/calibrate.cuh), and the profile
// directories written by profile_gpt2cu and train_gpt2cu --profile. Skipped without a GPU.
#include <cstdlib>
#include <gtest/gtest.h>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "llmc/profiler/calibrate.cuh"
#include "llmc/io/checkpoint.h"
#include "llmc/profiler/cupti_collector.cuh"
#include "llmc/io/formats.h"
#include "llmc/gpu/gpt2.cuh"
#include "llmc/model/gpt2_init.h"
#include "llmc/model/optimizer.h"
#include "test/gpu/gpu_test_util.cuh"
#include "test/test_util.h"

using namespace llmc;
using namespace llmc::prof;

namespace {

// A train_gpt2cu step (GPUBackend::train_step) on a fixed batch.
float train_step(GPT2GPU& m, const std::vector<int>& in, const std::vector<int>& tg, int B, int T, int t) {
    AdamWConfig adam;
    Range step("step");
    m.zero_grad();
    m.zero_loss();
    m.forward(in.data(), tg.data(), B, T, 1.0f / (B * T), 1.0f / (B * T));
    m.backward();
    {
        Range opt("optimizer", -1, Phase::opt);
        m.update(1e-3f, adam.beta1, adam.beta2, adam.eps, adam.weight_decay, adam.grad_clip, t);
    }
    m.fetch_scalars();
    return m.read_scalars().first;
}

const char* PROFILE_FILES[] = {"summary.txt", "kernels.csv", "subblocks.csv", "steps.csv",
                               "api.csv",     "roofline.csv", "trace.json",   "profile.json"};

// Every file of the profile directory (doc/profiling.md) exists and is not empty; kernels.csv names a sub-block for
// every kernel (only memsets and copies, issued between the sub-blocks, may have none).
void expect_profile_dir(const std::string& dir, size_t steps) {
    for (const char* f : PROFILE_FILES) EXPECT_FALSE(testutil::slurp(dir + "/" + f).empty()) << f;
    auto kernels = testutil::read_csv_rows(dir + "/kernels.csv");
    ASSERT_GT(kernels.size(), 1u);
    ASSERT_EQ(kernels[0][0], "kernel");
    ASSERT_EQ(kernels[0][1], "subblock");
    ASSERT_EQ(kernels[0][3], "category");
    for (size_t i = 1; i < kernels.size(); i++) {
        ASSERT_GE(kernels[i].size(), 4u);
        if (kernels[i][3] != "memset" && kernels[i][3] != "memcpy")
            EXPECT_NE(kernels[i][1], "(none)") << kernels[i][0];
    }
    EXPECT_EQ(testutil::read_csv_rows(dir + "/steps.csv").size(), steps + 1);
}

} // namespace

TEST(ProfilerGpu, EveryKernelOfAStepIsJoinedToItsSubBlock) {
    REQUIRE_GPU();
    const int B = 4, T = 64, steps = 3;
    GPT2Config cfg = gputest::tiny_gpt2_config();
    GPT2GPU m(cfg, B, T);
    std::vector<float> w(num_parameters(cfg));
    init_gpt2_parameters(w.data(), cfg, 7);
    m.set_parameters(w.data());
    auto in = gputest::random_tokens(B * T, cfg.vocab_size), tg = gputest::random_tokens(B * T, cfg.vocab_size);
    int t = 0;
    for (int i = 0; i < 2; i++) train_step(m, in, tg, B, T, ++t); // cuBLASLt heuristics, lazy loading

    CuptiCollector c;
    ASSERT_TRUE(c.start()) << "CUPTI is held by another tool";
    for (int s = 0; s < steps; s++) {
        c.begin_step(s);
        train_step(m, in, tg, B, T, ++t);
        c.end_step((long)B * T);
        c.flush();
    }
    c.stop();
    ProfileRecords r = c.take();

    EXPECT_EQ(r.dropped_records, 0u);
    ASSERT_EQ(r.steps.size(), (size_t)steps);
    std::set<uint32_t> api_correlations;
    for (const ApiRecord& a : r.api) api_correlations.insert(a.correlation);
    std::vector<int> per_step(steps, 0);
    std::vector<double> busy_ns(steps, 0);
    std::set<std::pair<int, int>> cells;
    for (const KernelRecord& k : r.kernels) {
        int s = -1;
        for (int i = 0; i < steps; i++)
            if (k.start_ns >= r.steps[i].start_ns && k.start_ns < r.steps[i].end_ns) s = i;
        if (s < 0) continue; // the synchronisation in stop() comes after the last step
        EXPECT_EQ(k.where.step, s) << k.name;
        EXPECT_GE(k.where.subblock, 0) << k.name << " (step " << s << ") has no sub-block";
        EXPECT_LT(k.where.subblock, NUM_SUBBLOCKS) << k.name;
        EXPECT_GE(k.where.phase, 0) << k.name;
        // Kernels launched through the driver API (cuBLASLt's) need DRIVER records for this link.
        EXPECT_TRUE(api_correlations.count(k.correlation)) << k.name << ": no API record for its launch";
        per_step[s]++;
        busy_ns[s] += (double)(k.end_ns - k.start_ns);
        cells.insert({k.where.subblock, k.where.phase});
    }
    for (int s = 0; s < steps; s++) {
        EXPECT_GT(per_step[s], 0);
        EXPECT_EQ(per_step[s], per_step[0]) << "kernels in step " << s;
        // One stream: kernels do not overlap, so their times add up to at most the step's wall time.
        EXPECT_LE(busy_ns[s], (double)(r.steps[s].end_ns - r.steps[s].start_ns)) << "step " << s;
        EXPECT_EQ(r.steps[s].tokens, (long)B * T);
    }
    // Every sub-block with kernels of its own on the GPU (residual1/2 and gelu are fused into others).
    for (SubBlock sb : {SubBlock::encoder, SubBlock::ln1, SubBlock::qkv, SubBlock::attention, SubBlock::attn_proj,
                        SubBlock::ln2, SubBlock::fc, SubBlock::fc_proj, SubBlock::lnf, SubBlock::classifier})
        for (Phase p : {Phase::fwd, Phase::bwd})
            EXPECT_TRUE(cells.count({(int)sb, (int)p})) << subblock_name(sb) << " " << phase_name(p);
    EXPECT_TRUE(cells.count({(int)SubBlock::optimizer, (int)Phase::opt}));
    EXPECT_TRUE(cells.count({(int)SubBlock::grad_norm, (int)Phase::opt}));

    // Copies and memsets of the steps belong to their step; the loss read is an event synchronisation.
    for (const MemsetRecord& ms : r.memsets)
        if (ms.start_ns >= r.steps[0].start_ns && ms.start_ns < r.steps[steps - 1].end_ns) EXPECT_GE(ms.where.step, 0);
    EXPECT_GE(r.memcpys.size(), (size_t)steps * 3); // inputs, targets up; loss and norm down
    int event_syncs = 0;
    for (const SyncRecord& sy : r.syncs) event_syncs += sy.type == "event";
    EXPECT_GE(event_syncs, steps);

    // Ranges: one outermost "step" per step, closed, nesting forward/backward/optimizer and the sub-blocks.
    int step_ranges = 0;
    for (const RangeRecord& rr : r.ranges) {
        EXPECT_GE(rr.end_ns, rr.start_ns) << rr.name << " was never closed";
        if (rr.name == "step") {
            EXPECT_EQ(rr.depth, 0);
            step_ranges++;
        }
    }
    EXPECT_EQ(step_ranges, steps);
}

TEST(ProfilerGpu, CeilingsAreMeasuredThenCached) {
    REQUIRE_GPU();
    testutil::TempDir dir;
    const char* old = getenv("XDG_CACHE_HOME");
    std::string saved = old ? old : "";
    setenv("XDG_CACHE_HOME", dir.path.c_str(), 1);
    Ceilings a = measure_ceilings(true), b = measure_ceilings(true);
    if (old) setenv("XDG_CACHE_HOME", saved.c_str(), 1);
    else unsetenv("XDG_CACHE_HOME");
    ASSERT_EQ(a.source, "calibrated");
    // Loose floors any sm_80+ GPU clears: an A10 does ~100 TFLOP/s bf16 and ~500 GB/s.
    EXPECT_GT(a.bf16_tflops, 30.0);
    EXPECT_GT(a.dram_gbps, 200.0);
    EXPECT_EQ(b.source.rfind("calibrated (cached " + dir.path + "/llmc/ceilings-GPU-", 0), 0u) << b.source;
    EXPECT_NEAR(b.bf16_tflops, a.bf16_tflops, 0.1);
    EXPECT_NEAR(b.dram_gbps, a.dram_gbps, 0.1);
}

TEST(ProfilerGpu, ProfileGpt2cuWritesTheProfileDirectory) {
    REQUIRE_GPU_FOR_CHILD_PROCESS();
    testutil::TempDir dir;
    auto r = testutil::run("./profile_gpt2cu -e d2 -b 4 -t 64 --warmup 2 --steps 3 --no-calibrate -o " + (dir / "p"));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("profile written to " + (dir / "p")), std::string::npos) << r.output;
    EXPECT_EQ(r.output.find("CUPTI records dropped"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("; 0 dropped;"), std::string::npos) << r.output;
    expect_profile_dir(dir / "p", 3);
}

namespace {
class TrainGpuProfile : public testing::Test {
protected:
    void SetUp() override {
        REQUIRE_GPU_FOR_CHILD_PROCESS();
        std::mt19937 g(3);
        std::vector<uint16_t> tokens(20000);
        for (uint16_t& x : tokens) x = (uint16_t)(g() % 500);
        write_shard(dir / "toy_train.bin", tokens);
        GPT2Config c = gputest::tiny_gpt2_config();
        std::vector<float> w(num_parameters(c));
        init_gpt2_parameters(w.data(), c, 5);
        save_model(dir / "toy_model.bin", c, w.data());
    }
    // The ceilings cache goes to the temp dir, not the user's home.
    testutil::RunResult train(const std::string& more) const {
        return testutil::run("XDG_CACHE_HOME=" + (dir / "cache") + " ./train_gpt2cu -i " + dir.path + " -e " +
                             (dir / "toy_model.bin") + " -b 4 -t 64 -s 0 -v 0 " + more);
    }
    testutil::TempDir dir;
};
} // namespace

TEST_F(TrainGpuProfile, WritesTheWindowOfARealRun) {
    auto r = train("-x 7 --profile " + (dir / "p") + " --profile-start 3 --profile-steps 3");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("profile: steps 3-5 written to " + (dir / "p")), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("step    7/7"), std::string::npos) << r.output; // training went on after the window
    EXPECT_NE(r.output.find("ms per traced step flushing CUPTI buffers"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("profile: " + (dir / "p") + "/summary.txt"), std::string::npos) << r.output;
    EXPECT_EQ(r.output.find("== Sub-blocks"), std::string::npos) << r.output; // the tables stay in summary.txt
    expect_profile_dir(dir / "p", 3);
}

TEST_F(TrainGpuProfile, RunEndingInsideTheWindowWritesWhatItTraced) {
    auto r = train("-x 3 --profile " + (dir / "p") + " --profile-start 2 --profile-steps 5");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("profile: steps 2-3 written to"), std::string::npos) << r.output;
    expect_profile_dir(dir / "p", 2);
    // A window after the last step is refused before anything runs.
    auto early = train("-x 2 --profile " + (dir / "q") + " --profile-start 5");
    EXPECT_EQ(early.exit_code, 2) << early.output;
    EXPECT_NE(early.output.find("error: --profile-start: step 5 is past the run's last step 2 (-x)"), std::string::npos)
        << early.output;
}
