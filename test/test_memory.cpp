// The memory analysis (llmc/profiler/memory.h), its files, and --memory-plan as a user runs it.
#include <gtest/gtest.h>
#include <map>
#include <regex>
#include <string>
#include <vector>

#include <fstream>
#include <nlohmann/json.hpp>

#include "llmc/io/checkpoint.h"
#include "llmc/cpu/gpt2.h"
#include "llmc/profiler/memory.h"
#include "llmc/profiler/writers.h"
#include "test/cpu_profile_fixture.h"
#include "test/test_util.h"

using namespace llmc;
using namespace llmc::prof;
using testutil::has;

namespace {

constexpr size_t MiB = 1 << 20;

// Allocations of `sizes` in order, then nothing freed: events 0..n-1.
CachingAllocatorResult alloc_all(const std::vector<size_t>& sizes, std::vector<int> events = {}) {
    if (events.empty())
        for (int i = 0; i < (int)sizes.size(); i++) events.push_back(i);
    std::vector<int> ops(events.size(), 0);
    return simulate_caching_allocator(sizes, events, ops);
}

// A plan of three tensors in one allocation with the given liveness over a four-op step, and one whole-run tensor.
MemoryPlan toy_plan() {
    MemoryPlan p;
    p.program = "toy";
    p.ops = {"a", "b", "c", "d"};
    p.allocations = {{"buf", 4096, false}};
    auto t = [&](const char* name, size_t off, size_t bytes, int first, int last, MemoryKind k) {
        PlannedTensor x;
        x.name = name, x.kind = k, x.dtype = "fp32", x.shape = {bytes / 4}, x.offset = off, x.bytes = bytes;
        x.first_use = first, x.last_use = last;
        p.tensors.push_back(x);
    };
    t("w", 0, 1000, -1, -1, MemoryKind::parameters);
    t("x", 1024, 800, 0, 1, MemoryKind::activations);
    t("y", 2048, 600, 1, 3, MemoryKind::activations);
    t("z", 3072, 900, 2, 3, MemoryKind::activations);
    return p;
}

} // namespace

// The rules of c10/cuda/CUDACachingAllocator.cpp, each worked out by hand.
TEST(CachingAllocator, RoundsSmallRequestsIntoTwoMiBSegments) {
    CachingAllocatorResult r = alloc_all({100, 700});
    EXPECT_EQ(r.reserved_peak, 2 * MiB);          // both in one small segment
    EXPECT_EQ(r.allocated_peak, 512u + 1024u);    // 100 -> 512, 700 -> 1024
    EXPECT_EQ(r.requested_peak, 800u);
    EXPECT_EQ(r.small_reserved, 2 * MiB);
}

TEST(CachingAllocator, MidSizedRequestsShareATwentyMiBSegment) {
    // 5 MiB leaves 15 MiB (> 1 MiB): split; the second 5 MiB fits the rest; 12 MiB gets its own segment.
    CachingAllocatorResult r = alloc_all({5 * MiB, 5 * MiB, 12 * MiB + 1});
    EXPECT_EQ(r.reserved_peak, 20 * MiB + 14 * MiB); // 12 MiB + 1 B rounds to 12 MiB + 512, segment to 14 MiB
    EXPECT_EQ(r.large_reserved, r.reserved_peak);
    // the 14 MiB segment's rest, 2 MiB - 512, is more than 1 MiB: split, so its block is 12 MiB + 512
    EXPECT_EQ(r.allocated_peak, 22 * MiB + 512);
}

TEST(CachingAllocator, FreedBlocksAreReusedBestFitAndNeverReleased) {
    // a: 30 MiB and b: 12 MiB get segments of their own; both freed, nothing is released. c: 10 MiB takes b's
    // 12 MiB block (best fit), so d: 30 MiB finds a's block free and no segment is added: 42 MiB reserved. Had c
    // taken a's block, d would have needed a third segment.
    std::vector<size_t> sizes = {30 * MiB, 12 * MiB, 10 * MiB, 30 * MiB};
    CachingAllocatorResult r = alloc_all(sizes, {0, 1, ~0, ~1, 2, 3});
    EXPECT_EQ(r.reserved_peak, 42 * MiB);
    EXPECT_EQ(r.allocated_peak, 42 * MiB); // a and b together; at the end c and d hold 10 + 30
    EXPECT_EQ(r.requested_peak, 42 * MiB);
    EXPECT_EQ(r.segments.size(), 2u);
}

TEST(CachingAllocator, UnsplitLargeBlockCountsWhole) {
    // 10.5 MiB gets a 12 MiB segment (split: the 1.5 MiB rest is more than 1 MiB); freed, the block merges back,
    // and an 11.5 MiB request takes it whole (its 0.5 MiB rest is not more than 1 MiB): allocated counts 12 MiB.
    std::vector<size_t> sizes = {10 * MiB + MiB / 2, 11 * MiB + MiB / 2};
    CachingAllocatorResult r = simulate_caching_allocator(sizes, {0, ~0, 1}, {0, 0, 0});
    EXPECT_EQ(r.reserved_peak, 12 * MiB);
    EXPECT_EQ(r.allocated_peak, 12 * MiB);
}

TEST(MemoryAnalysis, LivePeakAndEagerSequence) {
    const MemoryPlan p = toy_plan();
    const MemoryReport r = analyze_memory(p);
    // op 0: w + x = 1800; op 1: w + x + y = 2400; op 2 and 3: w + y + z = 2500
    EXPECT_EQ(r.live_peak, 2500u);
    EXPECT_EQ(p.ops[r.live_peak_op], "c");
    EXPECT_EQ(r.live_at_peak.size(), 3u);
    // w first, then x (op a), y (op b) and x's free after b, z (op c), then y's and z's frees after d
    const std::vector<int> want = {0, 1, 2, ~1, 3, ~2, ~3};
    EXPECT_EQ(r.eager_events, want);
    EXPECT_EQ(r.caching.requested_peak, r.live_peak); // the eager sequence's live bytes are the plan's liveness
    EXPECT_EQ(r.planned_bytes, 4096u);
}

TEST(MemoryAnalysis, CsvHasARowPerTensor) {
    const MemoryPlan p = toy_plan();
    testutil::TempDir d;
    {
        std::ofstream f(d / "memory.csv");
        f << memory_csv(p);
    }
    auto rows = testutil::read_csv(d / "memory.csv");
    ASSERT_EQ(rows.size(), p.tensors.size());
    EXPECT_EQ(rows[1]["name"], "x");
    EXPECT_EQ(rows[1]["first_op"], "a");
    EXPECT_EQ(rows[1]["last_op"], "b");
    EXPECT_EQ(rows[2]["bytes"], "600");
    EXPECT_EQ(rows[0]["first_use"], ""); // whole run
}

// The snapshot reads back through Python's pickle: segments tiled by blocks, the trace's allocations and frees
// balanced, and the totals the plan's.
TEST(MemorySnapshot, ReadsBackWithThePlansTotals) {
    ASSERT_EQ(testutil::run("python3 --version").exit_code, 0) << "python3 not found";
    const MemoryPlan p = toy_plan();
    const MemoryReport r = analyze_memory(p);
    testutil::TempDir d;
    {
        std::ofstream f(d / "s.pickle", std::ios::binary);
        f << memory_snapshot_pickle(p, r);
    }
    auto out = testutil::run("python3 test/memviz_check.py " + (d / "s.pickle"));
    ASSERT_EQ(out.exit_code, 0) << out.output;
    EXPECT_TRUE(has(out.output, "reserved 4096\n")) << out.output;
    EXPECT_TRUE(has(out.output, "active 1000\n")) << out.output; // w stays; x, y and z are freed by the end
    // w, x, y (2400), x freed (1600), z (2500): the trace's peak is the plan's live peak
    EXPECT_TRUE(has(out.output, "trace_peak " + std::to_string(r.live_peak) + "\n")) << out.output;
    EXPECT_TRUE(has(out.output, "allocs 4\nfrees 3\n")) << out.output;
}

// A CPU trainer's profile snapshot through PyTorch's own memory viewer functions, where torch is installed: their
// totals are the whole-run tensors memory.csv lists.
TEST(MemorySnapshot, PyTorchsViewerReadsIt) {
    if (testutil::run("python3 -c 'import torch.cuda._memory_viz'").exit_code != 0)
        GTEST_SKIP() << "torch not importable by python3";
    if (testutil::run("python3 -c 'import torch.cuda._memory_viz as v; v.segsum'").exit_code != 0)
        GTEST_SKIP() << "this PyTorch's memory viewer has no segsum (PyTorch 2.1 and newer have it): "
                     << testutil::run("python3 -c 'import torch; print(torch.__version__)'").output;
    testutil::CpuProfileRun run;
    testutil::run_cpu_profile(run, 3, 2, 1);
    ASSERT_EQ(run.result.exit_code, 0) << run.result.output;
    auto out = testutil::run("python3 test/memviz_check.py --torch " + (run.dir / "prof/memory_snapshot.pickle"));
    ASSERT_EQ(out.exit_code, 0) << out.output;
    auto rows = testutil::read_csv(run.dir / "prof/memory.csv");
    size_t whole = 0;
    for (auto& row : rows)
        if (row["first_use"].empty()) whole += std::stoull(row["bytes"]);
    EXPECT_TRUE(has(out.output, "active " + std::to_string(whole) + "\n")) << out.output;
}

// The CPU trainer's gradients of the residual stream, which its separate residual ops write and accumulate into,
// live from the op that first writes them to the last that reads them (llmc/cpu/gpt2.h's backward), in the step's
// ops where the fused residual ops sit: layer l's residual2 backward at the next layer's ln1 (or lnf), its
// residual1 backward at its ln2.
TEST(MemoryAnalysis, CpuResidualGradientsLiveWhereTheBackwardUsesThem) {
    GPT2Config c;
    c.max_seq_len = 16, c.vocab_size = 60, c.padded_vocab_size = 64, c.num_layers = 3, c.num_heads = 2, c.channels = 16;
    const MemoryPlan plan = GPT2CPU<float>(c).memory_plan(2, 8);
    auto uses = [&](const char* name, int layer) {
        const PlannedTensor& t = plan.tensor(name, layer);
        return plan.ops.at(t.first_use) + " .. " + plan.ops.at(t.last_use);
    };
    EXPECT_EQ(uses("grad_residual2", 2), "bwd lnf .. bwd lnf");
    EXPECT_EQ(uses("grad_residual2", 1), "bwd ln2 layer 2 .. bwd ln1 layer 2");
    EXPECT_EQ(uses("grad_residual2", 0), "bwd ln2 layer 1 .. bwd ln1 layer 1");
    EXPECT_EQ(uses("grad_residual1", 2), "bwd lnf .. bwd ln2 layer 2");
    EXPECT_EQ(uses("grad_residual1", 1), "bwd ln1 layer 2 .. bwd ln2 layer 1");
    EXPECT_EQ(uses("grad_residual1", 0), "bwd ln1 layer 1 .. bwd ln2 layer 0");
    EXPECT_EQ(uses("grad_encoded", -1), "bwd ln2 layer 0 .. bwd encoder");
    // The other gradients keep the mirrored rule: written by the consumer's backward, read by the writer's.
    EXPECT_EQ(uses("grad_attproj", 1), "bwd ln2 layer 1 .. bwd attn_proj layer 1");
    EXPECT_EQ(uses("grad_fcproj", 0), "bwd ln1 layer 1 .. bwd fc_proj layer 0");
    EXPECT_EQ(uses("grad_ln1", 1), "bwd qkv layer 1 .. bwd ln1 layer 1");
}

// The CPU trainer's profile directory reports its own buffers: memory.csv (parameters of 4 bytes each, the
// activation tensors inside their allocation), summary.txt's memory section and profile.json's.
TEST(MemoryProfile, CpuTrainerProfileHasTheMemoryFiles) {
    testutil::CpuProfileRun run;
    testutil::run_cpu_profile(run, 3, 2, 1);
    ASSERT_EQ(run.result.exit_code, 0) << run.result.output;
    auto rows = testutil::read_csv(run.dir / "prof/memory.csv");
    ASSERT_FALSE(rows.empty());
    // the fixture's model: V=60 (Vp=64), maxT=32, L=2, NH=2, C=32
    const size_t C = 32, L = 2, V = 64, maxT = 32;
    const size_t params = V * C + maxT * C + L * (12 * C * C + 13 * C) + 2 * C;
    size_t param_bytes = 0, acts = 0;
    for (auto& row : rows) {
        if (row["kind"] == "parameters") param_bytes += std::stoull(row["bytes"]);
        if (row["kind"] == "activations") acts++;
    }
    EXPECT_EQ(param_bytes, 4 * params);
    EXPECT_EQ(acts, 6 + 15 * L); // encoded, lnf and its statistics, probs, losses; 15 per layer
    const std::string summary = testutil::slurp(run.dir / "prof/summary.txt");
    EXPECT_TRUE(has(summary, "memory (CPU training, B=4 T=16)")) << summary;
    EXPECT_TRUE(has(summary, "caching allocator (model)")) << summary;
    auto j = nlohmann::json::parse(testutil::slurp(run.dir / "prof/profile.json"));
    ASSERT_TRUE(j["memory"].is_object());
    EXPECT_EQ(j["memory"]["tensors"].size(), rows.size());
    // One column table: each tensor's CSV columns are its JSON keys (shape: "AxB" against [A, B]); an empty cell
    // (a whole-run tensor's uses and ops, a tensor of no layer) is null.
    for (size_t i = 0; i < rows.size(); i++) {
        const nlohmann::json& t = j["memory"]["tensors"][i];
        for (auto& [name, cell] : rows[i]) {
            ASSERT_TRUE(t.contains(name)) << name;
            if (name == "shape") continue;
            if (cell.empty()) EXPECT_TRUE(t[name].is_null()) << name << " of " << rows[i]["name"];
            else EXPECT_EQ(t[name].is_string() ? t[name].get<std::string>() : t[name].dump(), cell) << name;
        }
        std::string shape;
        for (auto& n : t["shape"]) shape += (shape.empty() ? "" : "x") + n.dump();
        EXPECT_EQ(shape, rows[i]["shape"]);
    }
    size_t total = 0;
    for (auto& a : j["memory"]["allocations"]) total += a["bytes"].get<size_t>();
    EXPECT_EQ(j["memory"]["planned_bytes"].get<size_t>(), total);
}

// --memory-plan without a GPU: the largest micro-batch for d12 at T=1024 in 80 GiB is the last whose printed plan
// fits the printed budget (the plan at -b N fits, at -b N+1 it does not), and the parameters are 2 bytes each.
TEST(MemoryPlanFlag, LargestBatchForD12On80GiBIsTheLastThatFits) {
    if (!llmc::file_exists("./train_gpt2cu")) GTEST_SKIP() << "./train_gpt2cu not built (needs nvcc)";
    auto plan = [](int B) {
        return testutil::run("./train_gpt2cu -e d12 -t 1024 -b " + std::to_string(B) +
                             " --memory-plan --device-memory 80GiB");
    };
    auto number = [](const std::string& out, const std::string& key) {
        size_t at = out.find(key);
        EXPECT_NE(at, std::string::npos) << key << " in\n" << out;
        return at == std::string::npos ? 0ull : std::stoull(out.substr(at + key.size()));
    };
    auto first = plan(4);
    ASSERT_EQ(first.exit_code, 0) << first.output;
    const int n = (int)number(first.output, "largest micro-batch at T=1024 that fits (-b): ");
    ASSERT_GT(n, 1);
    const size_t budget = number(first.output, "usable: ");
    EXPECT_EQ(budget, (size_t)((80ull << 30) * 0.95));
    auto at_n = plan(n), past_n = plan(n + 1);
    EXPECT_LE(number(at_n.output, "planned bytes: "), budget);
    EXPECT_TRUE(has(at_n.output, "fits: yes")) << at_n.output;
    EXPECT_GT(number(past_n.output, "planned bytes: "), budget);
    EXPECT_TRUE(has(past_n.output, "fits: no")) << past_n.output;
    // GPT-2 124M: 124,475,904 parameters with the padded vocabulary, bf16
    const size_t C = 768, L = 12, Vp = 50304, maxT = 1024;
    const size_t params = Vp * C + maxT * C + L * (12 * C * C + 13 * C) + 2 * C;
    EXPECT_EQ(number(first.output, "  parameters "), 2 * params);
}

TEST(MemoryPlanFlag, BadValuesAreRefused) {
    if (!llmc::file_exists("./train_gpt2cu")) GTEST_SKIP() << "./train_gpt2cu not built (needs nvcc)";
    auto bad = testutil::run("./train_gpt2cu --memory-plan --device-memory 80XB");
    EXPECT_EQ(bad.exit_code, 2);
    EXPECT_TRUE(has(bad.output, "--device-memory: expected a size")) << bad.output;
    auto alone = testutil::run("./train_gpt2cu --device-memory 80GiB");
    EXPECT_EQ(alone.exit_code, 2);
    EXPECT_TRUE(has(alone.output, "--device-memory: only with --memory-plan")) << alone.output;
    auto cpu = testutil::run("./train_gpt2 --memory-plan");
    EXPECT_EQ(cpu.exit_code, 2);
    EXPECT_TRUE(has(cpu.output, "--memory-plan: train_gpt2 has no GPU memory")) << cpu.output;
}

namespace {
// An allocation's bytes in --memory-plan's table ("  optimizer    1493710848    1.39 GiB"); 0 when it is not there.
size_t allocation(const std::string& out, const std::string& name) {
    std::smatch m;
    return std::regex_search(out, m, std::regex("\n  " + name + " +([0-9]+) ")) ? std::stoull(m[1]) : 0;
}
} // namespace

// --memory-plan plans the model the run would train: with -y 1 the checkpoint's (and an -e that contradicts it is
// refused, as training refuses it), with -z 1 under two ranks the optimizer state in two shards; without a GPU and
// without --device-memory it says what to pass.
TEST(MemoryPlanFlag, PlansTheModelTheRunWouldTrain) {
    if (!llmc::file_exists("./train_gpt2cu")) GTEST_SKIP() << "./train_gpt2cu not built (needs nvcc)";
    testutil::TempDir dir;
    std::vector<uint16_t> tokens(4000);
    for (size_t i = 0; i < tokens.size(); i++) tokens[i] = (uint16_t)(i * 7 % 60);
    write_shard(dir / "toy_train.bin", tokens);
    GPT2Config c;
    c.max_seq_len = 32, c.vocab_size = 60, c.padded_vocab_size = 64, c.num_layers = 2, c.num_heads = 2, c.channels = 128;
    GPT2CPU<float> m(c);
    m.init_random(3);
    save_model(dir / "toy.bin", c, m.params_memory.data());
    const std::string out = dir / "r";
    auto trained = testutil::run("./train_gpt2 -i " + dir.path + " -e " + (dir / "toy.bin") + " -b 2 -t 16 -x 2 -v 0 "
                                 "-s 0 -n 2 -o " + out);
    ASSERT_EQ(trained.exit_code, 0) << trained.output;
    const std::string plan = "./train_gpt2cu --memory-plan -b 2 -t 16 --device-memory 1GiB -y 1 -o " + out;
    auto resumed = testutil::run(plan);
    ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
    EXPECT_EQ(resumed.output.rfind("memory plan: train_gpt2cu -e " + checkpoint_model_path(out, 2) + " -b 2 -t 16 ", 0),
              0u)
        << resumed.output;
    EXPECT_EQ(allocation(resumed.output, "parameters"), 2 * num_parameters(c)) << resumed.output;
    auto other = testutil::run(plan + " -e d12");
    EXPECT_EQ(other.exit_code, 2) << other.output;
    EXPECT_EQ(other.output.rfind("error: -e d12: the checkpoint in " + out + " (step 2) holds another model", 0), 0u)
        << other.output;
    auto one = testutil::run("./train_gpt2cu --memory-plan -e d12 -z 1 --device-memory 80GiB");
    ASSERT_EQ(one.exit_code, 0) << one.output;
    EXPECT_EQ(one.output.rfind("-z 1 in one process shards nothing: under mpirun -n N the optimizer state is split N "
                               "ways\n",
                               0),
              0u)
        << one.output;
    auto unknown = testutil::run("./train_gpt2cu --memory-plan -e d12");
    if (!has(unknown.output, "free on this GPU")) { // no GPU here
        ASSERT_EQ(unknown.exit_code, 0) << unknown.output;
        EXPECT_TRUE(has(unknown.output, "device memory: unknown: no GPU here; for whether it fits and the largest -b, "
                                        "pass --device-memory SIZE"))
            << unknown.output;
    }
    const std::string mpirun = "OMP_NUM_THREADS=1 mpirun --oversubscribe --allow-run-as-root -q -np 2 ";
    if (testutil::run(mpirun + "./train_gpt2cu --help").exit_code != 0) GTEST_SKIP() << "no mpirun, or no MPI build";
    auto two = testutil::run(mpirun + "./train_gpt2cu --memory-plan -e d12 -z 1 --device-memory 80GiB");
    ASSERT_EQ(two.exit_code, 0) << two.output;
    EXPECT_TRUE(has(two.output, "optimizer state in 2 shards")) << two.output;
    EXPECT_EQ(two.output.find("memory plan:"), two.output.rfind("memory plan:")) << "rank 0 alone prints\n" << two.output;
    // fp32 master weights, m and v: each rank keeps its half.
    EXPECT_GT(allocation(one.output, "optimizer"), 0u) << one.output;
    EXPECT_NEAR((double)allocation(two.output, "optimizer"), allocation(one.output, "optimizer") / 2.0, 64.0)
        << two.output;
}

TEST(MemoryPlanFlag, InferencePlanCountsTheKvCache) {
    if (!llmc::file_exists("./infer_gpt2cu")) GTEST_SKIP() << "./infer_gpt2cu not built (needs nvcc)";
    auto out = testutil::run("./infer_gpt2cu -e d12 -b 8 --prompt-len 100 -n 28 --memory-plan --device-memory 16GiB");
    ASSERT_EQ(out.exit_code, 0) << out.output;
    // the cache: 12 layers of K and V, 8 sequences of 128 positions of 768 bf16 values
    const size_t cache = 12ull * 2 * 8 * 128 * 768 * 2;
    EXPECT_TRUE(has(out.output, "kv_cache")) << out.output;
    EXPECT_TRUE(has(out.output, format_bytes(cache))) << out.output;
    EXPECT_TRUE(has(out.output, "largest number of sequences at 128 tokens each that fits (-b): ")) << out.output;
}
