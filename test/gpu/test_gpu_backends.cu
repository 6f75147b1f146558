// The GPU programs' backends in-process under their drivers, as train_gpt2cu and infer_gpt2cu run them, on a tiny
// model file and toy shards. Training (llmc/gpu/gpt2.cu through run_training): the losses and val losses in main.log
// against the CPU trainer's within the bf16 tolerance of the model tests, a run resumed from its checkpoint ending
// bit for bit where the uninterrupted run ended, and the samples the GPU decoder's. Inference (llmc/gpu/gpt2_decoder.cu
// through run_inference): the ids of each sequence are those of the GPU decoder driven by hand with the driver's
// contract (one coin per running sequence, in sequence order, from --seed). profile_gpt2cu's run: the backend under
// the driver's step loop with the program's own session. Part of the emulated tier, where --profile is refused (no
// CUPTI).
#include <algorithm>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "llmc/io/checkpoint.h"
#include "llmc/io/formats.h"
#include "llmc/gpu/gpt2_decoder.cuh"
#include "llmc/model/gpt2_init.h"
#include "llmc/cpu/programs.h"
#include "llmc/infer/driver.h"
#include "llmc/gpu/programs.h"
#include "llmc/profiler/attribution.h"
#include "llmc/profiler/report.h"
#include "llmc/profiler/session.h"
#include "llmc/util/rand.h"
#include "llmc/train/dist.h"
#include "llmc/train/loop.h"
#include "llmc/train/plan.h"
#include "test/gpu/gpu_test_util.cuh"
#include "test/scripted_source.h"
#include "test/test_util.h"

using namespace llmc;
using testutil::TempDir;

namespace {

// A tiny model file (head size 64, as the GPU attention needs), weights drawn as a dN's are, and train and val
// shards of random ids below its vocabulary.
struct ToyRun {
    ToyRun() {
        cfg = gputest::tiny_gpt2_config();
        std::vector<float> w(num_parameters(cfg));
        init_gpt2_parameters(w.data(), cfg, 11);
        save_model(model(), cfg, w.data());
        Rng rng(5);
        for (auto [name, n] : {std::make_pair("toy_train.bin", 4096), std::make_pair("toy_val.bin", 1024)}) {
            std::vector<uint16_t> ids(n);
            for (uint16_t& id : ids) id = (uint16_t)(rng.next_u32() % cfg.vocab_size);
            write_shard(dir / name, ids);
        }
    }
    std::string model() const { return dir / "tiny.bin"; }
    TempDir dir;
    GPT2Config cfg;
};

// run_training of a trainer's program (cpu_train_program, gpu_train_program) over one process with `args` after the
// program's name.
int train(const TrainProgram& program, std::vector<std::string> args) {
    args.insert(args.begin(), program.name);
    testutil::CommandLine cl(std::move(args));
    const std::unique_ptr<Communicator> comm = single_process_communicator();
    return run_training(*comm, program, cl.argc(), cl.argv());
}

// main.log's losses by kind ("trl" or "tel") in step order.
std::vector<double> logged(const std::string& dir, const char* kind) {
    std::vector<double> v;
    std::istringstream in(testutil::slurp(dir + "/main.log"));
    for (std::string line; std::getline(in, line);) {
        const size_t at = line.find(std::string(" ") + kind + ":");
        if (at != std::string::npos) v.push_back(std::stod(line.substr(at + 5)));
    }
    return v;
}

} // namespace

GPU_TEST(GpuBackends, TrainingThroughTheDriverTracksTheCpuAndResumesBitExact) {
    REQUIRE_GPU();
    ToyRun toy;
    const std::string cpu = toy.dir / "cpu", gpu = toy.dir / "gpu";
    auto args = [&](const std::string& out) {
        return std::vector<std::string>{"-i", toy.dir.path, "-e", toy.model(), "-b", "2", "-t", "32", "-x", "3",
                                        "-l", "1e-3", "-v", "3", "--val-batches", "2", "-s", "0", "-n", "2",
                                        "-o", out};
    };
    ASSERT_EQ(train(cpu_train_program(), args(cpu)), 0);
    ASSERT_EQ(train(gpu_train_program(), args(gpu)), 0);
    const std::vector<double> cl = logged(cpu, "trl"), gl = logged(gpu, "trl");
    ASSERT_EQ(cl.size(), 3u);
    ASSERT_EQ(gl.size(), 3u);
    for (size_t i = 0; i < cl.size(); i++) EXPECT_NEAR(gl[i], cl[i], 2e-2 * cl[i]) << "step " << i + 1;
    const std::vector<double> cv = logged(cpu, "tel"), gv = logged(gpu, "tel");
    ASSERT_EQ(cv.size(), 2u); // before the first step and after the last
    ASSERT_EQ(gv.size(), 2u);
    for (size_t i = 0; i < cv.size(); i++) EXPECT_NEAR(gv[i], cv[i], 2e-2 * cv[i]) << "val loss " << i;

    // Resumed from the step-2 checkpoint (moments, master weights, data position, cuBLASLt algorithms): step 3's
    // model is the uninterrupted run's, bit for bit.
    const std::string last = checkpoint_model_path(gpu, 3);
    const std::string uninterrupted = testutil::slurp(last);
    ASSERT_FALSE(uninterrupted.empty());
    ASSERT_EQ(remove(last.c_str()), 0);
    ASSERT_EQ(remove(checkpoint_state_path(gpu, 3).c_str()), 0);
    std::vector<std::string> resume = args(gpu);
    resume.insert(resume.end(), {"-y", "1"});
    ASSERT_EQ(train(gpu_train_program(), resume), 0);
    EXPECT_TRUE(testutil::slurp(last) == uninterrupted) << "the resumed run's step-3 model differs";
    EXPECT_EQ(logged(gpu, "trl"), gl);
}

// train_gpt2cu's samples are the GPU decoder's output (the inference backend, made from the trained master weights):
// the same ids as GPT2DecoderGPU driven by hand from the checkpoint's master weights with the driver's coins, from the
// seed the samples' stream draws first.
GPU_TEST(GpuBackends, TrainerSamplesAreTheDecodersOutput) {
    REQUIRE_GPU();
    ToyRun toy;
    const int n = 6;
    const std::string out = toy.dir / "s";
    testing::internal::CaptureStdout();
    const int rc = train(gpu_train_program(), {"-i", toy.dir.path, "-e", toy.model(), "-b", "2", "-t", "32", "-x", "2",
                                               "-v", "0", "-s", "2", "-g", std::to_string(n), "--top-k", "5",
                                               "--temperature", "0.8", "-n", "2", "-o", out});
    fflush(stdout);
    const std::string printed = testing::internal::GetCapturedStdout();
    ASSERT_EQ(rc, 0) << printed;
    const size_t at = printed.find("---- sample ----\n");
    ASSERT_NE(at, std::string::npos) << printed;
    std::istringstream sample(printed.substr(at + 17, printed.find('\n', at + 17) - at - 17));
    std::vector<int> got;
    for (int id; sample >> id;) got.push_back(id);

    const TrainState st = load_state(checkpoint_state_path(out, 2), num_parameters(toy.cfg), 2);
    ASSERT_EQ(st.master.size(), num_parameters(toy.cfg));
    GPT2DecoderGPU dec(toy.cfg, st.master.data(), 1, 1, 1 + n);
    Rng seeds(1337); // --seed's default
    Rng coins(seeds.next_u32() & 0x7fffffff);
    std::vector<int> want;
    dec.prefill({{toy.cfg.vocab_size - 1}});
    for (int t = 0; t < n; t++) {
        if (t > 0) dec.decode({true});
        want.push_back(dec.sample(0.8f, 5, {coins.next_f32()})[0]);
    }
    EXPECT_EQ(got, want) << printed;
}

GPU_TEST(GpuBackends, InferenceThroughTheDriverIsTheDecodersOutput) {
    REQUIRE_GPU();
    ToyRun toy;
    const int n = 5;
    testutil::CommandLine cl({"infer_gpt2cu", "-e", toy.model(), "--prompt-ids", "3,1,4,1,5", "-b", "2", "-n",
                              std::to_string(n), "--temperature", "0.9", "--top-k", "40", "--seed", "7", "--json"});
    const InferProgram program = gpu_infer_program();
    testing::internal::CaptureStdout();
    const int rc = run_inference(program, cl.argc(), cl.argv());
    fflush(stdout);
    const std::string out = testing::internal::GetCapturedStdout();
    ASSERT_EQ(rc, 0) << out;
    std::vector<std::vector<int>> got;
    std::istringstream lines(out);
    for (std::string line; std::getline(lines, line);) {
        const nlohmann::json j = nlohmann::json::parse(line);
        if (j.contains("ids")) got.push_back(j["ids"].get<std::vector<int>>());
    }

    // The same generation by hand: prefill, then a decode step of every sequence, coins in sequence order.
    std::vector<float> w(num_parameters(toy.cfg));
    init_gpt2_parameters(w.data(), toy.cfg, 11);
    const std::vector<std::vector<int>> prompts(2, std::vector<int>{3, 1, 4, 1, 5});
    GPT2DecoderGPU dec(toy.cfg, w.data(), 2, 5, 5 + n);
    Rng rng(7);
    std::vector<std::vector<int>> want(2);
    std::vector<float> coins(2);
    dec.prefill(prompts);
    for (int t = 0; t < n; t++) {
        if (t > 0) dec.decode({true, true});
        for (float& c : coins) c = rng.next_f32();
        const int* ids = dec.sample(0.9f, 40, coins);
        for (int b = 0; b < 2; b++) want[b].push_back(ids[b]);
    }
    EXPECT_EQ(got, want) << out;
}

/*
 * --cuda-graph 1 through the drivers: a training run with gradient accumulation, a warmup and decay of the learning
 * rate, val losses, samples (whose decode steps replay graphs too) and checkpoints prints and logs the same losses,
 * samples the same ids and checkpoints the same bytes as --cuda-graph 0; an inference run, sampled, generates the same
 * ids, and its summary counts the decode steps that were graph launches (all but the first).
 */
GPU_TEST(GpuBackends, CudaGraphRunsAreTheEagerRunsBitForBit) {
    REQUIRE_GPU();
    ToyRun toy;
    auto run_training = [&](const char* graphs) {
        const std::string out = toy.dir / (std::string("g") + graphs);
        testing::internal::CaptureStdout();
        const int rc = train(gpu_train_program(),
                             {"-i", toy.dir.path, "-e", toy.model(), "-b", "2", "-t", "32", "-d", "128", "-x", "4", "-l",
                              "1e-3", "-u", "2", "-q", "0.1", "-v", "2", "--val-batches", "2", "-s", "4", "-g", "5",
                              "-n", "2", "-o", out, "--cuda-graph", graphs});
        fflush(stdout);
        const std::string printed = testing::internal::GetCapturedStdout();
        EXPECT_EQ(rc, 0) << printed;
        EXPECT_EQ(printed.find("could not be captured"), std::string::npos) << printed;
        const size_t at = printed.find("---- sample ----"), end = printed.find("\n-----", at + 1);
        return std::make_tuple(out, at == std::string::npos ? "(no sample)" : printed.substr(at, end - at));
    };
    const auto [eager, eager_sample] = run_training("0");
    const auto [graphs, graphs_sample] = run_training("1");
    EXPECT_EQ(logged(graphs, "trl"), logged(eager, "trl"));
    EXPECT_EQ(logged(graphs, "tel"), logged(eager, "tel"));
    EXPECT_EQ(logged(eager, "trl").size(), 4u);
    EXPECT_EQ(graphs_sample, eager_sample);
    for (int step : {2, 4}) {
        EXPECT_TRUE(testutil::slurp(checkpoint_model_path(graphs, step)) ==
                    testutil::slurp(checkpoint_model_path(eager, step)))
            << "step " << step << "'s model differs";
        EXPECT_TRUE(testutil::slurp(checkpoint_state_path(graphs, step)) ==
                    testutil::slurp(checkpoint_state_path(eager, step)))
            << "step " << step << "'s optimizer state differs";
    }

    auto run_inference = [&](const char* graphs) {
        testutil::CommandLine cl({"infer_gpt2cu", "-e", toy.model(), "--prompt-ids", "3,1,4", "-b", "2", "-n", "6",
                                  "--temperature", "0.9", "--seed", "7", "--json", "--cuda-graph", graphs});
        testing::internal::CaptureStdout();
        const int rc = llmc::run_inference(gpu_infer_program(), cl.argc(), cl.argv());
        fflush(stdout);
        const std::string out = testing::internal::GetCapturedStdout();
        EXPECT_EQ(rc, 0) << out;
        std::vector<std::vector<int>> ids;
        long graph_steps = -1;
        std::istringstream lines(out);
        for (std::string line; std::getline(lines, line);) {
            const nlohmann::json j = nlohmann::json::parse(line);
            if (j.contains("ids")) ids.push_back(j["ids"].get<std::vector<int>>());
            if (j.contains("summary")) graph_steps = j["summary"]["graph_steps"].get<long>();
        }
        return std::make_pair(ids, graph_steps);
    };
    const auto eager_ids = run_inference("0"), graph_ids = run_inference("1");
    EXPECT_EQ(graph_ids.first, eager_ids.first);
    EXPECT_EQ(eager_ids.second, 0);
    EXPECT_EQ(graph_ids.second, 5 - 1) << "5 decode steps: the first eager, the second captured and launched";
}

/*
 * Attribution under CUDA graphs (llmc/profiler/attribution.h), on synthetic CUPTI records: an eager step launches
 * ln1's kernel, a copy and fc's kernel under their Ranges; a graph-replayed step launches the same work from one
 * cudaGraphLaunch under the step's Range, each record carrying its node (the nodes mapped to the Ranges of their
 * capture, in another step). Joined, every replayed activity has its node's sub-block, phase and layer in its
 * launch's step; the report puts both steps' work in the same sub-block rows, the kernels table counts each kernel
 * twice in its sub-block, and the step table counts the replayed step's work as graph work. A node the collector
 * never saw created keeps its launch's Range; a launch without an external id, nothing.
 */
GPU_TEST(GraphAttribution, ReplayedWorkTakesTheRangeOfItsCapture) {
    using namespace prof;
    const Attribution ln1{(int)SubBlock::ln1, (int)Phase::fwd, 0, -1}, fc{(int)SubBlock::fc, (int)Phase::fwd, 0, -1};
    auto in_step = [](Attribution a, int step) { return a.step = step, a; };
    const Attribution step2{-1, -1, -1, 2};
    const std::unordered_map<uint32_t, uint64_t> external = {
        {1, pack_range_id(in_step(ln1, 1))}, {2, pack_range_id(in_step(ln1, 1))},
        {3, pack_range_id(in_step(fc, 1))},  {9, pack_range_id(step2)}};
    const std::unordered_map<uint64_t, uint64_t> nodes = {// captured in step 5 of another run: the step is the launch's
                                                          {71, pack_range_id(in_step(ln1, 5))},
                                                          {72, pack_range_id(in_step(ln1, 5))},
                                                          {73, pack_range_id(in_step(fc, 5))}};
    ProfileRecords rec;
    rec.steps = {{1, 0, 1000, 64}, {2, 1000, 2000, 64}};
    auto kernel = [](const char* name, uint64_t t, uint32_t correlation, uint64_t node) {
        KernelRecord k;
        k.name = name, k.start_ns = t, k.end_ns = t + 100, k.correlation = correlation, k.graph_node = node;
        return k;
    };
    rec.kernels = {kernel("layernorm_forward_kernel", 100, 1, 0), kernel("fc_gemm", 500, 3, 0),
                   kernel("layernorm_forward_kernel", 1100, 9, 71), kernel("fc_gemm", 1500, 9, 73),
                   kernel("stray", 1800, 9, 99), kernel("unknown_launch", 1900, 42, 0)};
    for (auto [t, correlation, node] : {std::make_tuple(300, 2u, 0ull), std::make_tuple(1300, 9u, 72ull)}) {
        MemcpyRecord m;
        m.kind = CopyKind::HtoD, m.bytes = 4096, m.start_ns = t, m.end_ns = t + 50, m.correlation = correlation;
        m.graph_node = node;
        rec.memcpys.push_back(m);
    }
    attribute_activities(rec, external, nodes);
    auto same = [](const Attribution& a, const Attribution& b) {
        return a.subblock == b.subblock && a.phase == b.phase && a.layer == b.layer && a.step == b.step;
    };
    EXPECT_TRUE(same(rec.kernels[0].where, in_step(ln1, 1)));
    EXPECT_TRUE(same(rec.kernels[1].where, in_step(fc, 1)));
    EXPECT_TRUE(same(rec.kernels[2].where, in_step(ln1, 2))) << "a replayed kernel: its node's Range, its launch's step";
    EXPECT_TRUE(same(rec.kernels[3].where, in_step(fc, 2)));
    EXPECT_TRUE(same(rec.kernels[4].where, step2)) << "a node never seen created: the launch's Range";
    EXPECT_TRUE(same(rec.kernels[5].where, Attribution{})) << "no external id: unattributed";
    EXPECT_TRUE(same(rec.memcpys[0].where, in_step(ln1, 1)));
    EXPECT_TRUE(same(rec.memcpys[1].where, in_step(ln1, 2))) << "a replayed copy";

    rec.kernels.resize(4); // the stray and the unknown launch aside: both steps hold the same work
    const Report r = build_report(rec, ProfileContext{});
    ASSERT_EQ(r.steps.size(), 2u);
    EXPECT_EQ(r.steps[0].graph_replayed, 0);
    EXPECT_EQ(r.steps[1].graph_replayed, 3);
    EXPECT_EQ(r.steps[1].activities, 3);
    for (const SubBlockRow& row : r.subblocks) {
        if (row.subblock >= 0) {
            EXPECT_EQ(row.calls, row.subblock == (int)SubBlock::ln1 ? 4 : 2) << row.subblock;
        }
    }
    for (const KernelRow& k : r.kernels) {
        EXPECT_EQ(k.calls, 2) << k.name;
        EXPECT_EQ(k.subblock, k.name == "fc_gemm" ? (int)SubBlock::fc : (int)SubBlock::ln1) << k.name;
    }
}

// profile_gpt2cu's run: the GPU backend built from the program, its weights loaded, and the driver's step loop
// (run_steps) bracketing each step with the program's own session, here over a scripted source (no CUPTI): the
// last two steps traced and written, the counted step of before_report trained through the backend's interface.
GPU_TEST(GpuBackends, ProfileRunIsTheDriversStepsUnderTheProgramsSession) {
    REQUIRE_GPU();
    ToyRun toy;
    RunPlan plan = fixed_steps_plan(toy.model(), toy.cfg, 2, 32, 3, 1e-3f);
    const std::unique_ptr<Communicator> comm = single_process_communicator();
    std::unique_ptr<TrainBackend> be = gpu_train_program().make_backend(toy.cfg, train_shape(plan.opt), *comm);
    std::vector<float> w(num_parameters(toy.cfg));
    init_gpt2_parameters(w.data(), toy.cfg, 11);
    be->load_weights(w);
    prof::ProfileContext ctx = prof::profile_context("profile_gpt2cu", toy.cfg, 2, 32);
    ctx.memory = plan_gpu_training(toy.cfg, 2, 32);
    // The last two steps traced, as profile_gpt2cu traces the steps after its warmup.
    std::string source_log; // what the session asked of its source (no CUPTI here)
    prof::ProfileSession session(prof::SessionOptions{toy.dir / "p", 1, 2, 15, false, "-o"}, std::move(ctx),
                                 std::make_unique<testutil::ScriptedSource>(&source_log, false));
    RandomBatches batches(2, 32, toy.cfg.vocab_size, 3);
    int counted = 0;
    session.before_report([&](const prof::ProfileRecords& records, prof::ProfileContext&) {
        EXPECT_EQ(records.steps.size(), 2u);
        be->train_step(batches, 1, 1e-3f, 4); // --counters' step, after the run's
        counted++;
        return prof::CounterReport{};
    });
    run_steps("profile_gpt2cu", plan, *be, *comm, batches, &session);
    EXPECT_EQ(counted, 1);
    ASSERT_TRUE(session.written());
    const std::vector<std::string>& files = session.written_files();
    EXPECT_NE(std::find(files.begin(), files.end(), "profile.json"), files.end());
    EXPECT_NE(testutil::slurp(toy.dir / "p/steps.csv").find("\n3,"), std::string::npos) // steps 2 and 3
        << testutil::slurp(toy.dir / "p/steps.csv");
}

// Under the emulator --profile is refused with one line naming the flag (there is no CUPTI to trace with), before
// the model is allocated; on a GPU the same run profiles (test_profiler_gpu.cu).
GPU_TEST(GpuBackends, ProfileIsRefusedUnderTheEmulator) {
    if (!gputest::kEmulated) GTEST_SKIP() << "on a GPU --profile traces with CUPTI";
    ToyRun toy;
    try {
        train(gpu_train_program(),
              {"-i", toy.dir.path, "-e", toy.model(), "-b", "2", "-t", "32", "-x", "2", "--profile", toy.dir / "p",
               "--profile-start", "1", "--profile-steps", "1"});
        ADD_FAILURE() << "--profile was taken";
    } catch (const UsageError& e) {
        EXPECT_EQ(std::string(e.what()), "--profile: the emulated CUDA runtime has no CUPTI to trace with");
    }
}
