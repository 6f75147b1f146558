// train_gpt2 --profile DIR: the CPU trainer writes the profile directory of doc/profiling.md, with a row per
// sub-block and phase, sub-block times inside the step wall times, and one row per profiled step.
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <gtest/gtest.h>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "llmc/profiler/cpu_source.h"
#include "llmc/profiler/report.h"
#include "test/cpu_profile_fixture.h"

using namespace llmc;
using testutil::CpuProfileRun;
using testutil::read_csv;
using testutil::slurp;

TEST(CpuProfile, WritesTheProfileDirectory) {
    CpuProfileRun r;
    testutil::run_cpu_profile(r, 5, 2, 3);
    ASSERT_EQ(r.result.exit_code, 0) << r.result.output;
    const std::string& out = r.result.output;
    EXPECT_NE(out.find("profile: steps 2-4 written to"), std::string::npos) << out;
    const std::string d = r.profile_dir();
    // The training log keeps to training: the summary's tables stay in summary.txt, and the run ends with its
    // path and the findings, after the last step line.
    EXPECT_EQ(out.find("== Sub-blocks"), std::string::npos) << out;
    size_t outcome = out.find("profile: " + d + "/summary.txt"); // and report.html, where it was written (test_report.cpp)
    ASSERT_NE(outcome, std::string::npos) << out;
    EXPECT_GT(outcome, out.find("step    5/5 |")) << out;
    EXPECT_TRUE(out.find("profile: top ", outcome) != std::string::npos ||
                out.find("profile: no finding", outcome) != std::string::npos)
        << out;
    for (const char* f : {"summary.txt", "kernels.csv", "subblocks.csv", "steps.csv", "api.csv", "roofline.csv",
                          "trace.json", "profile.json"})
        EXPECT_TRUE(file_exists(d + "/" + f)) << f;
    // The summary says whose byte model its roofline uses.
    EXPECT_NE(slurp(d + "/summary.txt").find("roofline  the CPU step's analytic model"), std::string::npos);

    // Every CPU sub-block forward and backward, and the optimizer phase; 2 layers x 2 micro-batches x 3 steps.
    std::map<std::pair<std::string, std::string>, std::map<std::string, std::string>> cells;
    double subblock_us = 0;
    for (auto& row : read_csv(d + "/subblocks.csv")) {
        cells[{row["subblock"], row["phase"]}] = row;
        subblock_us += std::stod(row["time_us"]);
    }
    for (int s = 0; s <= (int)SubBlock::classifier; s++)
        for (const char* p : {"fwd", "bwd"}) {
            auto it = cells.find({subblock_name((SubBlock)s), p});
            ASSERT_NE(it, cells.end()) << subblock_name((SubBlock)s) << " " << p;
            bool per_layer = s >= (int)SubBlock::ln1 && s <= (int)SubBlock::residual2;
            // The classifier runs as two ops, its matmul and its softmax/loss.
            int ops = s == (int)SubBlock::classifier ? 2 : 1;
            EXPECT_EQ(std::stol(it->second["calls"]), ops * (per_layer ? 2 : 1) * 2 * 3) << it->first.first;
            EXPECT_GT(std::stod(it->second["time_us"]), 0);
            // Every sub-block with time is on the roofline (the residual adds and GELU too), at most 100%.
            EXPECT_GT(std::stod(it->second["bytes"]), 0) << it->first.first;
            ASSERT_NE(it->second["pct_of_roofline"], "") << it->first.first;
            EXPECT_LE(std::stod(it->second["pct_of_roofline"]), 100) << it->first.first;
        }
    for (const char* s : {"optimizer", "grad_norm"}) {
        ASSERT_TRUE(cells.count({s, "opt"})) << s;
        EXPECT_EQ((cells[{s, "opt"}]["calls"]), "3");
    }
    EXPECT_FALSE(cells.count({"(none)", "(none)"})); // every execution is attributed

    // One row per profiled step; the sub-blocks run inside the steps.
    auto steps = read_csv(d + "/steps.csv");
    ASSERT_EQ(steps.size(), 3u);
    EXPECT_TRUE(steps[0].count("busy_ms")); // neutral names: nothing here ran on a GPU
    EXPECT_FALSE(steps[0].count("gpu_busy_ms"));
    double wall_us = 0;
    for (size_t i = 0; i < steps.size(); i++) {
        EXPECT_EQ(steps[i]["step"], std::to_string(2 + i)); // numbered as the step lines and --profile-start
        EXPECT_EQ(steps[i]["tokens"], "128");
        EXPECT_EQ(steps[i]["energy_j"], ""); // the fixture's powercap tree is missing: no RAPL
        wall_us += std::stod(steps[i]["wall_ms"]) * 1e3;
    }
    EXPECT_GT(subblock_us, 0);
    EXPECT_LE(subblock_us, wall_us);
    // Each row's spread over the 3 steps brackets its mean (1 us of rounding in the CSV).
    for (auto& [cell, row] : cells) {
        double lo = std::stod(row["step_min_us"]), med = std::stod(row["step_median_us"]);
        double hi = std::stod(row["step_max_us"]), mean = std::stod(row["time_per_step_us"]);
        EXPECT_LE(lo, med) << cell.first;
        EXPECT_LE(med, hi) << cell.first;
        EXPECT_GE(mean, lo - 1e-3) << cell.first;
        EXPECT_LE(mean, hi + 1e-3) << cell.first;
        EXPECT_NEAR(mean, std::stod(row["time_us"]) / 3, 1e-3) << cell.first;
    }

    auto j = nlohmann::json::parse(slurp(d + "/profile.json"));
    EXPECT_EQ(j["context"]["program"], "train_gpt2");
    EXPECT_EQ(j["context"]["device_kind"], "CPU");
    EXPECT_NE(j["context"]["device"].get<std::string>().find("threads)"), std::string::npos);
    EXPECT_GT(j["context"]["ceilings"]["fp32_tflops"].get<double>(), 0);
    EXPECT_GT(j["context"]["ceilings"]["dram_gbps"].get<double>(), 0);
    EXPECT_EQ(j["api"].size(), 0u); // no CUDA
    EXPECT_TRUE(j["steps"][0].contains("busy_ms"));
    EXPECT_LE(j["throughput"]["mfu_pct"].get<double>(), 100);
    // The classifier's GEMM and its softmax/loss are separate ops, in their own categories.
    std::map<std::string, std::string> category;
    for (auto& row : read_csv(d + "/kernels.csv")) category[row["kernel"]] = row["category"];
    EXPECT_EQ(category["cpu:matmul classifier"], "gemm");
    EXPECT_EQ(category["cpu:softmax_loss classifier"], "reduction");
    // The calibration ran (the fixture's cache is empty) and said so as it went.
    EXPECT_NE(r.result.output.find("profile: calibrating the CPU ceilings: matmul 1/"), std::string::npos)
        << r.result.output;
    // The summary speaks of CPU time and leaves out the GPU-only sections.
    std::string summary = slurp(d + "/summary.txt");
    EXPECT_NE(summary.find("n/a (RAPL not readable: no powercap interface ("), std::string::npos) << summary;
    EXPECT_NE(summary.find("% of fp32 matmul "), std::string::npos) << summary; // MFU against the CPU's ceiling
    EXPECT_NE(summary.find("== Steps (CPU time by phase) =="), std::string::npos) << summary;
    EXPECT_NE(summary.find("% of CPU time) =="), std::string::npos) << summary;
    for (const char* gpu_only : {"GPU time", "GPU idle", "peak GPU memory", "== CUDA API", "%gpu"})
        EXPECT_EQ(summary.find(gpu_only), std::string::npos) << gpu_only;
    std::string trace = slurp(d + "/trace.json");
    EXPECT_NE(trace.find("\"cpu:matmul qkv\""), std::string::npos);
    EXPECT_NE(trace.find("\"CPU 0: "), std::string::npos);
    ASSERT_TRUE(nlohmann::json::accept(trace));
    // No CUDA track on the CPU. Each op (a "kernel" slice, as trace analysers expect device work) carries the
    // correlation id of the phase range that ran it, and lies inside that range.
    EXPECT_EQ(trace.find("CUDA API"), std::string::npos);
    const nlohmann::json tj = nlohmann::json::parse(trace);
    struct Span {
        std::string name;
        double ts, end;
    };
    std::map<int, Span> range_of; // correlation -> phase range
    for (const auto& e : tj["traceEvents"])
        if (e["ph"] == "X" && e["cat"] == "user_annotation" && e["args"].contains("correlation"))
            range_of[e["args"]["correlation"].get<int>()] = {e["name"], e["ts"],
                                                             e["ts"].get<double>() + e["dur"].get<double>()};
    const std::map<std::string, std::string> range_name = {
        {"fwd", "forward"}, {"bwd", "backward"}, {"opt", "optimizer"}};
    size_t ops = 0;
    for (const auto& e : tj["traceEvents"]) {
        if (e["ph"] != "X" || e["cat"] != "kernel") continue;
        ops++;
        const auto& a = e["args"];
        ASSERT_TRUE(range_of.count(a["correlation"].get<int>())) << e.dump();
        const Span& r = range_of[a["correlation"].get<int>()];
        EXPECT_EQ(r.name, range_name.at(a["phase"].get<std::string>())) << e.dump();
        EXPECT_GE(e["ts"].get<double>(), r.ts) << e.dump();
        EXPECT_LE(e["ts"].get<double>() + e["dur"].get<double>(), r.end + 1e-3) << e.dump();
        EXPECT_EQ(a["stream"], e["tid"]);
    }
    size_t calls = 0;
    for (const auto& row : read_csv(d + "/kernels.csv")) calls += std::stoul(row.at("calls"));
    EXPECT_EQ(ops, calls) << "one slice per op execution";
}

// A window that starts after the last step is a usage error found before the first step, not a note at the end.
TEST(CpuProfile, WindowPastTheRunIsRefusedAtStartUp) {
    CpuProfileRun r;
    testutil::run_cpu_profile(r, 2, 3, 2);
    EXPECT_EQ(r.result.exit_code, 2) << r.result.output;
    EXPECT_EQ(r.result.output, "error: --profile-start: step 3 is past the run's last step 2 (-x)\n");
    EXPECT_FALSE(file_exists(r.profile_dir()));
    CpuProfileRun last; // the last step itself is a window of one step
    testutil::run_cpu_profile(last, 2, 2, 4);
    ASSERT_EQ(last.result.exit_code, 0) << last.result.output;
    EXPECT_NE(last.result.output.find("profile: step 2 written to"), std::string::npos) << last.result.output;
}

TEST(CpuProfile, RunEndingInsideTheWindowWritesWhatRan) {
    CpuProfileRun r;
    testutil::run_cpu_profile(r, 3, 2, 5);
    ASSERT_EQ(r.result.exit_code, 0) << r.result.output;
    EXPECT_NE(r.result.output.find("profile: steps 2-3 written to"), std::string::npos) << r.result.output;
    EXPECT_EQ(read_csv(r.profile_dir() + "/steps.csv").size(), 2u);
}

// A CPU's rates are thousandths of a TFLOP/s or less: subblocks.csv and roofline.csv keep them (and every other
// rate and ratio) to six significant digits of profile.json's values, where four decimals rounded them, many to 0.
TEST(CpuProfile, CsvRatesKeepSixSignificantDigits) {
    CpuProfileRun r;
    testutil::run_cpu_profile(r, 3, 1, 2);
    ASSERT_EQ(r.result.exit_code, 0) << r.result.output;
    const std::string d = r.profile_dir();
    const auto j = nlohmann::json::parse(slurp(d + "/profile.json"));
    auto expect_same = [](const std::string& cell, const nlohmann::json& want, const std::string& what) {
        if (want.is_null()) {
            EXPECT_EQ(cell, "") << what;
            return;
        }
        const double w = want.get<double>();
        ASSERT_NE(cell, "") << what;
        EXPECT_NEAR(std::stod(cell), w, 5e-6 * std::fabs(w)) << what << ": " << cell << " for " << w;
    };
    const auto rows = read_csv(d + "/subblocks.csv");
    ASSERT_EQ(rows.size(), j["subblocks"].size());
    for (size_t i = 0; i < rows.size(); i++) {
        const auto& row = rows[i];
        const auto& roof = j["subblocks"][i]["roofline"];
        const std::string what = row.at("subblock") + " " + row.at("phase");
        ASSERT_EQ(row.at("subblock"), j["subblocks"][i]["subblock"]) << what;
        for (const char* k : {"tflops", "gbps", "intensity", "pct_of_roofline"}) expect_same(row.at(k), roof[k], what + " " + k);
        expect_same(row.at("pct"), j["subblocks"][i]["pct"], what + " pct");
    }
    for (const auto& row : read_csv(d + "/roofline.csv"))
        if (row.at("scope") == "total") {
            expect_same(row.at("tflops"), j["total"]["roofline"]["tflops"], "total tflops");
            expect_same(row.at("fp32_tflops"), j["context"]["ceilings"]["fp32_tflops"], "fp32 ceiling");
        }
}

TEST(CpuProfile, OpNamesAndRecords) {
    EXPECT_EQ(prof::cpu_op_name(SubBlock::qkv), "cpu:matmul qkv");
    EXPECT_EQ(prof::cpu_op_name(SubBlock::classifier), "cpu:matmul classifier");
    EXPECT_EQ(prof::cpu_op_name(SubBlock::classifier, SubBlockPart::softmax_loss), "cpu:softmax_loss classifier");
    EXPECT_EQ(prof::cpu_op_name(SubBlock::attention), "cpu:attention");
    EXPECT_STREQ(prof::category_name(prof::kernel_category(prof::cpu_op_name(SubBlock::fc))), "gemm");
    std::vector<SubBlockEvent> ev = {{SubBlock::ln1, Phase::fwd, 0, 110, 120},
                                     {SubBlock::qkv, Phase::fwd, 0, 120, 150},
                                     {SubBlock::qkv, Phase::bwd, 0, 150, 190},
                                     {SubBlock::optimizer, Phase::opt, -1, 190, 199}};
    prof::ProfileRecords rec = prof::cpu_profile_records(ev, {{3, 100, 200, 64}});
    ASSERT_EQ(rec.kernels.size(), 4u);
    EXPECT_EQ(rec.kernels[1].name, "cpu:matmul qkv");
    EXPECT_EQ(rec.kernels[1].where.step, 3);
    EXPECT_EQ(rec.kernels[1].where.layer, 0);
    // The step, then one range per run of a phase.
    ASSERT_EQ(rec.ranges.size(), 4u);
    EXPECT_EQ(rec.ranges[1].name, "forward");
    EXPECT_EQ(rec.ranges[1].start_ns, 110u);
    EXPECT_EQ(rec.ranges[1].end_ns, 150u);
    EXPECT_EQ(rec.ranges[2].name, "backward");
    EXPECT_EQ(rec.ranges[3].name, "optimizer");
}

// The window bookkeeping both trainers share: drive it as the training loop does and log what it asks for.
namespace {
std::string drive_schedule(int first, int count, int start_step, int max_steps, bool needs_arming) {
    prof::ProfileSchedule s(first, count);
    bool armed = !needs_arming || s.arm_at_start();
    std::string log = armed && needs_arming ? "arm@start " : "";
    for (int step = start_step; step < max_steps; step++) {
        if (armed && s.in_window(step)) s.recorded(step), log += "rec" + std::to_string(step) + " ";
        switch (s.after_step(step, step + 1 == max_steps, armed)) {
        case prof::ProfileSchedule::Next::arm: armed = true, log += "arm@" + std::to_string(step) + " "; break;
        case prof::ProfileSchedule::Next::write: log += "write:" + s.recorded_steps(); break;
        case prof::ProfileSchedule::Next::give_up: log += s.nothing_recorded(step, "D"); break;
        case prof::ProfileSchedule::Next::keep_going: break;
        }
    }
    return log;
}
} // namespace

TEST(ProfileSchedule, RecordsTheWindowAndArmsOneStepAhead) {
    EXPECT_EQ(drive_schedule(2, 3, 0, 8, true), "arm@1 rec2 rec3 rec4 write:steps 3-5");
    EXPECT_EQ(drive_schedule(2, 3, 0, 8, false), "rec2 rec3 rec4 write:steps 3-5");
    EXPECT_EQ(drive_schedule(0, 2, 0, 8, true), "arm@start rec0 rec1 write:steps 1-2");
    EXPECT_EQ(drive_schedule(0, 1, 0, 8, true), "arm@start rec0 write:step 1");
}

TEST(ProfileSchedule, RunEndingInsideOrBeforeTheWindow) {
    EXPECT_EQ(drive_schedule(1, 5, 0, 3, true), "arm@0 rec1 rec2 write:steps 2-3");
    EXPECT_EQ(drive_schedule(5, 1, 0, 2, true), "profile: the run ended before step 6; nothing written to D");
    // Ending right before the window: arming would be wasted, and nothing is written.
    EXPECT_EQ(drive_schedule(3, 2, 0, 3, true), "profile: the run ended before step 4; nothing written to D");
}

TEST(ProfileSchedule, ResumedRunsKeepTheirStepNumbers) {
    // Resumed inside the window: what is left of it (the GPU arms after the first resumed step).
    EXPECT_EQ(drive_schedule(5, 5, 7, 20, true), "arm@7 rec8 rec9 write:steps 9-10");
    EXPECT_EQ(drive_schedule(5, 5, 7, 20, false), "rec7 rec8 rec9 write:steps 8-10");
    // Resumed past the window: said once, at the first step.
    EXPECT_EQ(drive_schedule(5, 5, 12, 20, true),
              "profile: the run started after steps 6-10; nothing written to D");
}

// The CPU step's cost model (prof::cpu_analytic_costs) by hand for a small model: L=2, C=64, NH=2, Vp=128,
// V=100 at B=2, T=8 (BT = 16), two micro-batches per step. fp32 everywhere (4 bytes per element).
TEST(CpuProfile, CostModelByHand) {
    GPT2Config c;
    c.max_seq_len = 8, c.vocab_size = 100, c.padded_vocab_size = 128, c.num_layers = 2, c.num_heads = 2;
    c.channels = 64;
    const prof::CostTable m = prof::cpu_analytic_costs(c, 2, 8, 2);
    auto cell = [&](SubBlock s, Phase p) { return m[(int)s][(int)p]; };
    const double BTC = 16 * 64, L = 2, accum = 2;
    // residual: out = a + b, one add and three fp32 streams per element; backward two adds and five streams.
    EXPECT_DOUBLE_EQ(cell(SubBlock::residual1, Phase::fwd).other_flops, BTC * L * accum);
    EXPECT_DOUBLE_EQ(cell(SubBlock::residual1, Phase::fwd).bytes, 4 * 3 * BTC * L * accum);
    EXPECT_DOUBLE_EQ(cell(SubBlock::residual2, Phase::bwd).bytes, 4 * 5 * BTC * L * accum);
    // GELU over (BT, 4C): 9 FLOPs per element, read and write; backward 18, four streams.
    EXPECT_DOUBLE_EQ(cell(SubBlock::gelu, Phase::fwd).other_flops, 9 * 4 * BTC * L * accum);
    EXPECT_DOUBLE_EQ(cell(SubBlock::gelu, Phase::fwd).bytes, 4 * 2 * 4 * BTC * L * accum);
    EXPECT_DOUBLE_EQ(cell(SubBlock::gelu, Phase::bwd).bytes, 4 * 4 * 4 * BTC * L * accum);
    // qkv forward: 2·BT·3C·C FLOPs; reads inp, weight and bias, writes out, all fp32.
    EXPECT_DOUBLE_EQ(cell(SubBlock::qkv, Phase::fwd).gemm_flops, 2.0 * 16 * 192 * 64 * L * accum);
    EXPECT_DOUBLE_EQ(cell(SubBlock::qkv, Phase::fwd).bytes, 4.0 * (16 * 64 + 192 * 64 + 192 + 16 * 192) * L * accum);
    // Classifier forward: the logits GEMM, then the softmax over V real logits (5 FLOPs each) in place.
    EXPECT_DOUBLE_EQ(cell(SubBlock::classifier, Phase::fwd).gemm_flops, 2.0 * 16 * 128 * 64 * accum);
    EXPECT_DOUBLE_EQ(cell(SubBlock::classifier, Phase::fwd).other_flops, 5.0 * 16 * 100 * accum);
    // AdamW once per step: grad, parameter, m, v read and parameter, m, v written.
    const double N = (double)num_parameters(c);
    EXPECT_DOUBLE_EQ(cell(SubBlock::optimizer, Phase::opt).bytes, 4 * 7 * N);
    // Every sub-block the CPU trainer times has a cost in both phases (the GPU model has none for the fused
    // residual adds and GELU).
    const prof::CostTable gpu = prof::analytic_costs(c, 2, 8, 2);
    for (int s = 0; s <= (int)SubBlock::classifier; s++)
        for (Phase p : {Phase::fwd, Phase::bwd}) EXPECT_GT(m[s][(int)p].bytes, 0) << subblock_name((SubBlock)s);
    EXPECT_EQ(gpu[(int)SubBlock::gelu][(int)Phase::fwd].bytes, 0);
}

// The calibration's shapes are the model's distinct matmuls, and its result is cached per CPU, thread count,
// ISA and shapes.
TEST(CpuProfile, CalibrationShapesAndCache) {
    GPT2Config c;
    c.max_seq_len = 16, c.vocab_size = 60, c.padded_vocab_size = 64, c.num_layers = 2, c.num_heads = 2;
    c.channels = 16;
    std::vector<prof::MatmulShape> shapes = prof::cpu_matmul_shapes(c, 2, 16);
    // qkv 16 -> 48, attn_proj 16 -> 16, fc 16 -> 64 (the classifier's 16 -> 64 too), fc_proj 64 -> 16.
    std::vector<prof::MatmulShape> want = {{32, 16, 48}, {32, 16, 16}, {32, 16, 64}, {32, 64, 16}};
    EXPECT_TRUE(shapes == want);

    testutil::TempDir cache;
    const char* old = getenv("XDG_CACHE_HOME");
    const std::string saved = old ? old : "";
    setenv("XDG_CACHE_HOME", cache.path.c_str(), 1);
    prof::Ceilings first = prof::measure_cpu_ceilings(c, 2, 16);
    prof::Ceilings again = prof::measure_cpu_ceilings(c, 2, 16);
    prof::Ceilings other = prof::measure_cpu_ceilings(c, 4, 16, true); // other shapes: measured anew
    prof::Ceilings fresh = prof::measure_cpu_ceilings(c, 2, 16, false);
    if (old) setenv("XDG_CACHE_HOME", saved.c_str(), 1);
    else unsetenv("XDG_CACHE_HOME");

    EXPECT_GT(first.fp32_tflops, 0);
    EXPECT_EQ(first.bf16_tflops, first.fp32_tflops); // the CPU runs everything in fp32
    EXPECT_GT(first.dram_gbps, 0);
    EXPECT_EQ(first.source.rfind("calibrated: fp32 matmul at the model's 4 shapes", 0), 0u) << first.source;
    EXPECT_EQ(again.source.rfind("calibrated (cached " + cache.path + "/llmc/cpu-ceilings-", 0), 0u) << again.source;
    EXPECT_NEAR(again.fp32_tflops, first.fp32_tflops, 1e-5 * first.fp32_tflops); // cached with 6 digits
    EXPECT_NEAR(again.dram_gbps, first.dram_gbps, 1e-5 * first.dram_gbps);
    EXPECT_EQ(other.source.rfind("calibrated: ", 0), 0u) << other.source;
    EXPECT_EQ(fresh.source.rfind("calibrated: ", 0), 0u) << fresh.source;
}

// A cached value that is not a finite positive number (a damaged or hand-edited cache) means "measure again": it
// gave an MFU of 0.0% and null ceilings, which the plot scripts could not draw.
TEST(CpuProfile, DamagedCacheIsMeasuredAgain) {
    GPT2Config c;
    c.max_seq_len = 16, c.vocab_size = 60, c.padded_vocab_size = 64, c.num_layers = 1, c.num_heads = 2;
    c.channels = 16;
    testutil::TempDir cache;
    const char* old = getenv("XDG_CACHE_HOME");
    const std::string saved = old ? old : "";
    setenv("XDG_CACHE_HOME", cache.path.c_str(), 1);
    const prof::Ceilings first = prof::measure_cpu_ceilings(c, 2, 16);
    const std::string path = prof::measure_cpu_ceilings(c, 2, 16).source.substr(strlen("calibrated (cached "));
    const std::string file = path.substr(0, path.size() - 1), good = testutil::slurp(file);
    ASSERT_NE(good.find("\nmatmul_tflops "), std::string::npos) << good;
    const std::vector<std::pair<const char*, const char*>> damaged = {
        {"matmul_tflops", "inf"}, {"matmul_tflops", "1e309"}, {"matmul_tflops", "-2"}, {"matmul_tflops", "3abc"},
        {"dram_gbps", "nan"},     {"dram_gbps", "0"},         {"dram_gbps", ""}};
    for (const auto& [key, bad] : damaged) {
        std::string text = good;
        const size_t at = text.find(std::string("\n") + key + " ") + strlen(key) + 2;
        text.replace(at, text.find('\n', at) - at, bad);
        std::ofstream(file) << text;
        const prof::Ceilings again = prof::measure_cpu_ceilings(c, 2, 16);
        EXPECT_EQ(again.source.rfind("calibrated: ", 0), 0u) << key << " " << bad << ": " << again.source;
        EXPECT_TRUE(std::isfinite(again.fp32_tflops) && again.fp32_tflops > 0) << key << " " << bad;
        EXPECT_TRUE(std::isfinite(again.dram_gbps) && again.dram_gbps > 0) << key << " " << bad;
    }
    if (old) setenv("XDG_CACHE_HOME", saved.c_str(), 1);
    else unsetenv("XDG_CACHE_HOME");
    EXPECT_GT(first.fp32_tflops, 0);
}

// Validation, a sample and a checkpoint after step 2, between the profiled steps 2-4: each a row of its own with its
// time, outside every step (steps.csv keeps its three steps), and the summary's share of the window's wall time.
TEST(CpuProfile, WorkBetweenTheStepsIsShownOnItsOwn) {
    CpuProfileRun r;
    testutil::run_cpu_profile(r, 5, 1, 3, "-v 2 -s 2 -n 2 --val-batches 4 -o " + (r.dir / "out"));
    ASSERT_EQ(r.result.exit_code, 0) << r.result.output;
    const std::string d = r.profile_dir();
    EXPECT_EQ(read_csv(d + "/steps.csv").size(), 3u);
    auto rows = read_csv(d + "/outside_steps.csv");
    ASSERT_EQ(rows.size(), 3u) << slurp(d + "/outside_steps.csv");
    const char* kinds[] = {"val", "sample", "checkpoint"};
    double total_ms = 0;
    for (int i = 0; i < 3; i++) {
        EXPECT_EQ(rows[i]["kind"], kinds[i]);
        EXPECT_EQ(rows[i]["after_step"], "2"); // step 4's val, sample and checkpoint come after the window
        EXPECT_GT(std::stod(rows[i]["wall_ms"]), 0) << kinds[i];
        total_ms += std::stod(rows[i]["wall_ms"]);
    }
    nlohmann::json o = nlohmann::json::parse(slurp(d + "/profile.json"))["outside_steps"];
    EXPECT_NEAR(o["total_ms"].get<double>(), total_ms, 0.002); // the CSV's cells are rounded to 3 decimals
    ASSERT_EQ(o["by_kind"].size(), 3u);
    EXPECT_EQ(o["by_kind"][0]["kind"], "val");
    EXPECT_EQ(o["by_kind"][0]["count"], 1);
    // The window runs from step 2's start to step 4's end: the three steps and the work between them.
    double steps_ms = 0;
    for (auto& s : read_csv(d + "/steps.csv")) steps_ms += std::stod(s["wall_ms"]);
    EXPECT_GT(o["window_ms"].get<double>(), steps_ms + total_ms * 0.99);
    EXPECT_NEAR(o["pct_of_window"].get<double>(), 100 * o["total_ms"].get<double>() / o["window_ms"].get<double>(),
                1e-9);
    const std::string summary = slurp(d + "/summary.txt");
    EXPECT_NE(summary.find(strprintf("  time outside the training steps: %.3f ms, ", o["total_ms"].get<double>())),
              std::string::npos)
        << summary;
    EXPECT_NE(summary.find("  checkpoint      1"), std::string::npos) << summary;
}
