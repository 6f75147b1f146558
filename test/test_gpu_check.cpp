// scripts/gpu_check.sh and its parsers (scripts/gpu_report.py), without a GPU: the parsers on recorded samples
// of every tool's output (test/data/gpu_check/report is a whole report directory: stages.tsv, logs/, the
// one-layer kernels.csv), the report made from them, the dry run, and the one-line refusal without a GPU.
// Needs python3 (standard library only).
#include <cstdio>
#include <cstring>
#include <map>
#include <fstream>
#include <gtest/gtest.h>
#include <regex>
#include <sstream>
#include <string>
#include <unistd.h>
#include <vector>

#include "test/one_line.h"
#include "test/test_util.h"

using testutil::expect_one_line;
using testutil::has;
using testutil::run;
using testutil::RunResult;
using testutil::TempDir;

namespace {

const std::string SAMPLES = "test/data/gpu_check/report";
const std::string LOGS = SAMPLES + "/logs/";

// Asked once per process (python3 can be slow to start behind version-manager shims).
bool have_python3() {
    static const bool have = run("python3 --version").exit_code == 0;
    return have;
}
#define REQUIRE_PYTHON3() ASSERT_TRUE(have_python3()) << "python3 not found: scripts/gpu_report.py needs it"

// `gpu_report.py parse KIND LOG [extra]`: its JSON, the exit status asserted 0.
std::string parse(const std::string& kind, const std::string& log, const std::string& extra = "") {
    RunResult r = run("python3 scripts/gpu_report.py parse " + kind + " " + log + (extra.empty() ? "" : " " + extra));
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return r.output;
}


size_t count(const std::string& text, const std::string& what) {
    size_t n = 0;
    for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + what.size())) n++;
    return n;
}

// The non-empty lines of a text.
std::vector<std::string> lines(const std::string& text) {
    std::vector<std::string> v;
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);)
        if (!line.empty()) v.push_back(line);
    return v;
}

bool exists(const std::string& path) { return access(path.c_str(), F_OK) == 0; }

void write(const std::string& path, const std::string& text) {
    std::ofstream f(path, std::ios::binary);
    f << text;
}

} // namespace

TEST(GpuCheckParsers, GtestSummaryAndFailedTests) {
    REQUIRE_PYTHON3();
    std::string j = parse("gtest", LOGS + "gpu_tests.log");
    EXPECT_TRUE(has(j, "\"tests\": 37")) << j;
    EXPECT_TRUE(has(j, "\"passed\": 35")) << j;
    EXPECT_TRUE(has(j, "\"skipped\": 1")) << j;
    EXPECT_TRUE(has(j, "\"failed\": 1")) << j;
    EXPECT_TRUE(has(j, "\"failed_tests\": [\"TrainGpu.OutOfMemoryBatchGetsAMessage\"]")) << j;
    EXPECT_TRUE(has(j, "\"crashed_in\": null")) << j;
    EXPECT_TRUE(has(j, "\"skip_reasons\": {\"NVML not available (libnvidia-ml.so.1: cannot open shared object file)\": 1}"))
        << j;
}

TEST(GpuCheckParsers, GpuSuitesThatSawNoDeviceFail) {
    REQUIRE_PYTHON3();
    // The GPU suites run on a machine without a GPU: a few device-free tests pass, the rest skip.
    TempDir dir;
    ASSERT_EQ(run("mkdir -p " + (dir / "logs")).exit_code, 0);
    ASSERT_EQ(run("cp test/data/gpu_check/gpu_tests_no_device.log " + (dir / "logs/gpu_tests.log")).exit_code, 0);
    write(dir / "stages.tsv", "gpu_tests\t0\t1\t180\t\n");
    std::string j = parse("gtest", dir / "logs/gpu_tests.log");
    EXPECT_TRUE(has(j, "\"failed\": 0")) << j;
    EXPECT_TRUE(has(j, "\"skip_reasons\": {\"no CUDA device\": ")) << j;
    RunResult r = run("python3 scripts/gpu_report.py judge gpu_tests " + dir.path);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    EXPECT_TRUE(has(r.output, "gpu_tests fail: ")) << r.output;
    EXPECT_TRUE(has(r.output, " no CUDA device)")) << r.output;
}

TEST(GpuCheckParsers, SanitizerSummaries) {
    REQUIRE_PYTHON3();
    std::string mem = parse("sanitizer", LOGS + "memcheck.log");
    EXPECT_TRUE(has(mem, "\"errors\": 0")) << mem;
    EXPECT_TRUE(has(mem, "\"passed\": 25")) << mem;
    EXPECT_TRUE(has(mem, "\"hazards\": null")) << mem;
    std::string race = parse("sanitizer", LOGS + "racecheck.log");
    EXPECT_TRUE(has(race, "\"hazards\": 1")) << race;
    EXPECT_TRUE(has(race, "\"errors\": 1")) << race;
    EXPECT_TRUE(has(race, "\"warnings\": 0")) << race;
    EXPECT_TRUE(has(race, "\"first_error\": \"Error: Race reported between Write access at void "
                          "llmc::attention_detail::attention_backward_dq_kernel<64, 64>"))
        << race;
    // Killed by its time limit inside a test: no summaries, and the test it stopped in.
    std::string init = parse("sanitizer", LOGS + "initcheck.log");
    EXPECT_TRUE(has(init, "\"errors\": null")) << init;
    EXPECT_TRUE(has(init, "\"summary\": false")) << init;
    EXPECT_TRUE(has(init, "\"crashed_in\": \"GPT2GPU.TenAdamWStepsTrackTheCPU\"")) << init;
}

TEST(GpuCheckParsers, KernelLadder) {
    REQUIRE_PYTHON3();
    std::string j = parse("ladder", LOGS + "kernel_ladder.log");
    EXPECT_EQ(count(j, "\"program\": "), 6u) << j;
    EXPECT_TRUE(has(j, "\"speedups\": {\"unfused/fused\": 2.72}")) << j;
    EXPECT_TRUE(has(j, "\"speedups\": {\"naive/mma forward speedup\": 7.74, \"wmma/mma backward speedup\": 2.0, "
                       "\"wmma/mma forward speedup\": 2.0}"))
        << j;
    EXPECT_TRUE(has(j, "\"gbps\": 3056.5, \"ms\": 1.1403, \"name\": \"adamw_update (fused)\", \"pct_bf16\": null, "
                       "\"pct_dram\": 91.2"))
        << j;
    EXPECT_TRUE(has(j, "\"ms\": 0.5123, \"name\": \"wmma forward\", \"pct_bf16\": 5.1")) << j;
    EXPECT_TRUE(has(j, "\"ms\": 0.3, \"name\": \"torch sdpa forward\", \"pct_bf16\": null, \"pct_dram\": null, "
                       "\"tflops\": 85.9")) << j;
    EXPECT_TRUE(has(j, "\"checks_failed\": [\"gelu_backward_inplace\"], \"checks_ok\": 1, \"device\": \"NVIDIA H100 "
                       "80GB HBM3\", \"exit\": 1, \"program\": \"gelu\""))
        << j;
    // The command lines gpu_check.sh heads the log with ("=== $b missing" among them) are not program output.
    EXPECT_FALSE(has(j, "\"missing\"")) << j;
}

TEST(GpuCheckParsers, TrainStepAndValLines) {
    REQUIRE_PYTHON3();
    std::string j = parse("train", LOGS + "train.log");
    EXPECT_TRUE(has(j, "\"steps\": 60")) << j;
    EXPECT_TRUE(has(j, "\"parameters\": 124475904")) << j;
    EXPECT_TRUE(has(j, "\"val_losses\": [10.998871, 7.912342, 6.774519, 6.317722]")) << j;
    EXPECT_TRUE(has(j, "\"train_falls\": true")) << j;
    EXPECT_TRUE(has(j, "\"val_falls\": true")) << j;
    EXPECT_TRUE(has(j, "\"mem_gib\": 7.12")) << j;
    EXPECT_TRUE(has(j, "\"sample\": \"ROMEO:")) << j;

    // Lines as llmc/train/loop.cpp prints them, with a val loss that rises: the stage fails on it.
    TempDir dir;
    write(dir / "train.log", "step    0/2 | val loss 10.900000\n"
                             "step    1/2 | loss 10.950000 | norm 5.1000 | lr 3.00e-04 | 40.10 ms | 102145 tok/s | "
                             "0.1 s elapsed, ETA 0.1 s\n"
                             "step    2/2 | loss 10.100000 | norm 4.2000 | lr 3.00e-04 | 39.90 ms | 102657 tok/s | "
                             "0.2 s elapsed, ETA 0.0 s\n"
                             "step    2/2 | val loss 11.200000\n");
    std::string rise = parse("train", dir / "train.log");
    EXPECT_TRUE(has(rise, "\"steps\": 2")) << rise;
    EXPECT_TRUE(has(rise, "\"train_falls\": true")) << rise;
    EXPECT_TRUE(has(rise, "\"val_falls\": false")) << rise;
    EXPECT_TRUE(has(rise, "\"val_losses\": [10.9, 11.2]")) << rise;
    EXPECT_TRUE(has(rise, "\"mfu\": null")) << rise; // no MFU without a datasheet entry
    EXPECT_TRUE(has(rise, "\"sample\": null")) << rise;
}

TEST(GpuCheckParsers, BenchmarkRows) {
    REQUIRE_PYTHON3();
    std::string j = parse("benchmark", LOGS + "benchmark.log");
    EXPECT_TRUE(has(j, "\"profiled\": true")) << j;
    EXPECT_TRUE(has(j, "{\"B\": 16, \"T\": 1024, \"error\": null, \"mem_gib\": 19.84, \"mfu\": 33.8, \"model\": \"d12\", "
                       "\"ms\": 42.1, \"overhead_pct\": 1.94, \"tok_s\": 389169, \"tok_s_profiled\": 381619}"))
        << j;
    EXPECT_TRUE(has(j, "\"overhead_pct\": 2.73")) << j;
    EXPECT_TRUE(has(j, "{\"B\": 64, \"T\": 1024, \"error\": \"error: out of memory")) << j;
}

// benchmark_gpu.sh -I's rows: each B eager and as graphs, a failed run as its reason. A graph row that replayed no
// graph fails the stage, as a failed run does.
TEST(GpuCheckParsers, DecodeRowsAndVerdict) {
    REQUIRE_PYTHON3();
    std::string j = parse("decode", LOGS + "decode.log");
    EXPECT_TRUE(has(j, "{\"B\": 1, \"error\": null, \"floor_us\": 76.5, \"graph_steps\": 254, \"graphs\": 1, \"model\": "
                       "\"d12\", \"speedup\": 2.07, \"steps\": 255, \"tok_s\": 8197.0, \"us\": 122.0, \"x_floor\": 1.6}"))
        << j;
    EXPECT_EQ(count(j, "\"model\": \"d12\""), 6u) << j;
    auto verdict = [](const std::string& log, const char* rc) {
        TempDir dir;
        EXPECT_EQ(run("mkdir -p " + (dir / "logs")).exit_code, 0);
        write(dir / "logs/decode.log", log);
        write(dir / "stages.tsv", std::string("decode\t") + rc + "\t18\t60\t\n");
        return run("python3 scripts/gpu_report.py judge decode " + dir.path).output;
    };
    std::string log = testutil::slurp(LOGS + "decode.log");
    EXPECT_TRUE(has(verdict(log, "0"), "decode pass: ")) << verdict(log, "0");
    const std::string none = log.replace(log.find("254/255     2.07x"), 17, "  0/255     1.00x");
    EXPECT_TRUE(has(verdict(none, "0"), "decode fail: B=1 eager 252.0 us/step (3.29x floor 76.5 us); B=1 graph 122.0 "
                                        "us/step (1.60x floor 76.5 us), 0/255 steps replayed"))
        << verdict(none, "0");
    const std::string failed = "model  B     graphs decode tok/s\nd12    64    1      failed: error: -b 64: needs 90 MiB\n";
    EXPECT_TRUE(has(verdict(failed, "0"), "decode fail: B=64 graph failed: error: -b 64: needs 90 MiB")) << verdict(failed, "0");
}

// benchmark_gpu.sh -I over a stand-in infer_gpt2cu that prints --json summaries (2x faster with --cuda-graph 1):
// the floor is the bytes a d12 decode step must move over -H GB/s (B=1: 2 x 124475904 bytes of weights, the K and V of
// 192 positions of 12 layers, the logits; 76.5 us at 3350 GB/s), the graph rows show their replayed steps and their
// speed-up over the eager row. A model that is not dN, or a bad -H, is one line and exit 2.
TEST(GpuCheckBenchmark, DecodeModeAgainstTheHbmFloor) {
    REQUIRE_PYTHON3();
    TempDir dir;
    write(dir / "infer_gpt2cu", R"(#!/bin/bash
b=1 g=1
while [ $# -gt 0 ]; do case $1 in -b) b=$2 ;; --cuda-graph) g=$2 ;; esac; shift; done
p=$(awk -v g=$g 'BEGIN { printf "%.4f", g ? 0.125 : 0.25 }')
echo "{\"summary\":{\"decode_tok_s\":$((b * 4000)),\"latency_p50_ms\":$p,\"params\":124475904,\"graph_steps\":$((g ? 254 : 0))}}"
)");
    ASSERT_EQ(run("chmod +x " + (dir / "infer_gpt2cu")).exit_code, 0);
    RunResult r = run("scripts/benchmark_gpu.sh -C " + dir.path + " -I -B '1 8' -H 3350");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_TRUE(has(r.output, "d12    1     0              4000      250.0       76.5     3.27          0/255         -"))
        << r.output;
    EXPECT_TRUE(has(r.output, "d12    1     1              4000      125.0       76.5     1.63        254/255     2.00x"))
        << r.output;
    EXPECT_TRUE(has(r.output, "d12    8     1             32000      125.0       91.7     1.36        254/255     2.00x"))
        << r.output;
    for (const char* bad : {"-I -e model.bin -H 3350", "-I -H fast"}) {
        RunResult b = run("scripts/benchmark_gpu.sh -C " + dir.path + " " + bad);
        EXPECT_EQ(b.exit_code, 2) << bad << "\n" << b.output;
        EXPECT_EQ(count(b.output, "\n"), 1u) << bad << "\n" << b.output;
    }
}

TEST(GpuCheckParsers, ProfileSummaryAndCounters) {
    REQUIRE_PYTHON3();
    std::string j = parse("profile", LOGS + "profile.log");
    EXPECT_TRUE(has(j, "\"tok_s\": 305939.0")) << j;
    EXPECT_TRUE(has(j, "\"ms_per_step\": 13.388")) << j;
    EXPECT_TRUE(has(j, "\"gpu_ms_per_step\": 13.037")) << j;
    EXPECT_TRUE(has(j, "\"mfu\": 36.5")) << j;
    EXPECT_TRUE(has(j, "\"kernels\": 572")) << j;
    EXPECT_TRUE(has(j, "\"dropped\": 0")) << j;
    EXPECT_TRUE(has(j, "\"top_kernel\": \"adamw_kernel\"")) << j;
    EXPECT_TRUE(has(j, "\"findings\": [\"roofline\"]")) << j;
    EXPECT_TRUE(has(j, "\"counters\": null")) << j;
    EXPECT_TRUE(has(j, "\"written_to\": \"/home/user/llmc/gpu_report/profile_default\"")) << j;

    std::string c = parse("profile", LOGS + "profile_counters.log");
    EXPECT_TRUE(has(c, "\"counters\": 572")) << c;
    // The "Measured vs analytic" rows are profile.json's (counters "subblocks"), not the log's table. The total row
    // (no phase) of the sample profile: 3372.004 counted tensor GFLOP against 3385.042 analytic.
    EXPECT_TRUE(has(c, "\"gemm_flops_analytic\": 3385042403328.0, \"intensity\"")) << c;
    EXPECT_TRUE(has(c, "\"subblock\": \"total\", \"tensor_flops_counted\": 3372004140908.55")) << c;
    EXPECT_TRUE(has(c, "\"gemm_hw_over_analytic\": 0.9961,")) << c;
    EXPECT_TRUE(has(c, "\"worst_gemm_row\": {\"ratio\": 0.98, \"row\": \"attention fwd\"}")) << c;
    EXPECT_EQ(count(c, "\"subblock\": "), 23u) << c; // 22 sub-block rows and the total
    // The step lines are the training driver's, the warmup steps first.
    EXPECT_TRUE(has(c, "{\"loss\": 10.953107, \"ms\": 13.37, \"step\": 5, \"tok_s\": 306357}]")) << c;

    // Counters refused (profile_gpt2cu's line when the range profiler cannot start).
    TempDir dir;
    write(dir / "p.log", "counters: no permission to read GPU performance counters (run as root or set "
                         "NVreg_RestrictProfilingToAdminUsers=0); the rest of the profile is written\n");
    std::string refused = parse("profile", dir / "p.log");
    EXPECT_TRUE(has(refused, "\"counters\": null")) << refused;
    EXPECT_TRUE(has(refused, "\"counters_note\": \"no permission to read GPU performance counters")) << refused;
}

// The profile's numbers come from the profile.json of the directory the log names, under the report directory: a
// summary printed in the log is not read, and without that profile.json the stage fails.
TEST(GpuCheckParsers, ProfileNumbersComeFromProfileJson) {
    REQUIRE_PYTHON3();
    TempDir dir;
    ASSERT_EQ(run("mkdir -p " + dir / "logs" + " " + dir / "p").exit_code, 0);
    write(dir / "logs/profile.log", "  999 tokens/s over 2 steps (1.000 ms per step); GPU time 1.000 ms per step\n"
                                    "profile written to /elsewhere/p/ (summary.txt, profile.json)\n");
    std::string none = parse("profile", dir / "logs/profile.log");
    EXPECT_TRUE(has(none, "\"tok_s\": null")) << none;
    EXPECT_TRUE(has(none, "\"profile_json\": null")) << none;
    write(dir / "stages.tsv", "profile\t0\t30\t120\t\n");
    RunResult j = run("python3 scripts/gpu_report.py judge profile " + dir.path);
    EXPECT_TRUE(has(j.output, "no profile.json of p in the report directory")) << j.output;

    std::string json = testutil::slurp("test/data/sample_profile/profile.json");
    const std::string from = "\"tokens_per_s\": 305938.74458006286";
    ASSERT_NE(json.find(from), std::string::npos);
    write(dir / "p/profile.json", json.replace(json.find(from), from.size(), "\"tokens_per_s\": 1234.4"));
    std::string p = parse("profile", dir / "logs/profile.log");
    EXPECT_TRUE(has(p, "\"tok_s\": 1234.0")) << p;
    EXPECT_TRUE(has(p, "\"top_kernel\": \"adamw_kernel\"")) << p;
    EXPECT_TRUE(has(p, "\"kernels\": 572")) << p;
}

// The ncu stage's counters run (after "# ncu counters") against the emulated counters of the same kernels
// (make emu_counters): per kernel, each metric of scripts/ncu_metrics.txt per launch, equal within 1%, DRAM bytes
// within the emulated bounds; a kernel on one side only is named, a differing metric fails the comparison.
TEST(GpuCheckParsers, NcuCountersAgainstTheEmulatedOnes) {
    REQUIRE_PYTHON3();
    TempDir dir;
    const std::string head = "\"ID\",\"Process ID\",\"Process Name\",\"Host Name\",\"Kernel Name\",\"Context\",\"Stream\","
                             "\"Metric Name\",\"Metric Unit\",\"Metric Value\"\n";
    auto row = [](int id, const std::string& kernel, const std::string& metric, const std::string& value) {
        return "\"" + std::to_string(id) + "\",\"7\",\"p\",\"h\",\"" + kernel + "\",\"1\",\"7\",\"" + metric + "\",\"\",\"" +
               value + "\"\n";
    };
    const std::string adamw = "void llmc::adamw_kernel(__nv_bfloat16 *, float *)";
    const std::string ln = "void llmc::layernorm_forward_kernel<true>(__nv_bfloat16 *, float *)";
    std::string log = "# ncu\n==PROF== Connected to process 7 (./profile_gpt2cu)\n# ncu counters\n" + head;
    for (int id : {0, 1}) { // two launches of AdamW, each 352 load requests and 3680 sectors, 50000 DRAM bytes read
        log += row(id, adamw, "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum", "352");
        log += row(id, adamw, "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum", "3,680");
        log += row(id, adamw, "dram__bytes_read.sum", "50000");
    }
    log += row(2, ln, "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum", "100");
    log += row(2, ln, "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum", "30");
    log += row(3, "void llmc::encoder_forward_kernel(int)", "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum", "5");
    write(dir / "ncu.log", log);
    // Emulated: AdamW in 2 rows of the optimizer (2 launches in all), LayerNorm's in a forward row, a decode row
    // (not compared: the ncu stage runs training steps), a kernel ncu did not see, and a library row.
    write(dir / "emu.csv",
          "kernel,subblock,phase,layer,launches,counted,l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum,"
          "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum,"
          "dram_read_bytes_min,dram_read_bytes_max\n"
          "adamw_kernel,optimizer,opt,,1,yes,352,3680,0,49000,60000\n"
          "adamw_kernel,optimizer,opt,0,1,yes,352,3680,0,49000,60000\n"
          "layernorm_forward_kernel<RESIDUAL>,ln2,fwd,0,1,yes,100,400,20,0,0\n"
          "layernorm_forward_kernel<RESIDUAL>,lnf,decode,,1,yes,999,999,999,0,0\n"
          "global_norm_final_kernel,grad_norm,opt,,1,yes,4,4,0,0,0\n"
          "cublasLtMatmul,qkv,fwd,0,1,not counted,,,,,\n");
    std::string j = parse("ncu", dir / "ncu.log", "--emulated " + dir / "emu.csv");
    EXPECT_TRUE(has(j, "\"status\": \"compared\"")) << j;
    EXPECT_TRUE(has(j, "{\"agrees\": true, \"emulated_per_launch\": 352.0, \"kernel\": \"adamw_kernel\", \"metric\": "
                       "\"l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum\", \"ncu_per_launch\": 352.0, \"ratio\": 1.0}"))
        << j;
    EXPECT_TRUE(has(j, "\"emulated_per_launch\": \"49000..60000\", \"kernel\": \"adamw_kernel\", \"metric\": "
                       "\"dram__bytes_read.sum\", \"ncu_per_launch\": 50000.0"))
        << j;
    // LayerNorm: 30 conflicts measured against 20 emulated (the decode row left out) differ.
    EXPECT_TRUE(has(j, "\"differ\": [\"layernorm_forward_kernel l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum\"]"))
        << j;
    EXPECT_TRUE(has(j, "\"compared\": 5, ")) << j;
    EXPECT_TRUE(has(j, "\"equal\": 4, ")) << j;
    EXPECT_TRUE(has(j, "\"ncu_only\": [\"encoder_forward_kernel\"]")) << j;
    EXPECT_TRUE(has(j, "\"emulated_only\": [\"global_norm_final_kernel\"]")) << j;
    // Without the emulated counters the comparison says so; without a counters run, that.
    std::string alone = parse("ncu", dir / "ncu.log");
    EXPECT_TRUE(has(alone, "\"status\": \"emulated; not yet compared with ncu (no emulated counters)\"")) << alone;
    write(dir / "none.log", "# ncu\n");
    std::string none = parse("ncu", dir / "none.log", "--emulated " + dir / "emu.csv");
    EXPECT_TRUE(has(none, "\"status\": \"no ncu counters in the log\"")) << none;
}

TEST(GpuCheckParsers, NcuJoinedWithTheProfilersKernelsCsv) {
    REQUIRE_PYTHON3();
    std::string j = parse("ncu", LOGS + "ncu.log", "--kernels " + SAMPLES + "/profile_1layer/kernels.csv");
    EXPECT_TRUE(has(j, "\"launches\": 25")) << j;
    EXPECT_TRUE(has(j, "\"joined\": 10")) << j;
    EXPECT_TRUE(has(j, "\"error\": null")) << j;
    // cxxabi's "f(__nv_bfloat16*, ...)" and ncu's "void f(__nv_bfloat16 *, ...)" are one kernel; the GEMM that
    // runs in three places is averaged over all its launches on both sides.
    EXPECT_TRUE(has(j, "{\"kernel\": \"llmc::adamw_kernel\", \"ncu_avg_us\": 450.372, \"ncu_launches\": 2, "
                       "\"profiler_avg_us\": 421.7, \"profiler_calls\": 1, \"ratio\": 1.068}"))
        << j;
    EXPECT_TRUE(has(j, "{\"kernel\": \"nvjet_hsh_128x256_64x4_2x1_v_bz_coopA_NTT\", \"ncu_avg_us\": 77.418, "
                       "\"ncu_launches\": 6, \"profiler_avg_us\": 75.627, \"profiler_calls\": 3, \"ratio\": 1.0237}"))
        << j;
    EXPECT_TRUE(has(j, "\"kernel\": \"llmc::attention_detail::attention_forward_kernel<64,64>\"")) << j;
    EXPECT_TRUE(has(j, "\"ncu_only\": [\"void llmc::copy_float_to_bf16_kernel(__nv_bfloat16 *, const float *, "
                       "unsigned long)\"]"))
        << j;
    EXPECT_TRUE(has(j, "\"profiler_only\": []")) << j;
    EXPECT_TRUE(has(j, "\"ratio_min\": 1.0093")) << j;

    // The other layout (--page raw: one row per launch, a units row), in microseconds, and a permission error.
    TempDir dir;
    write(dir / "raw.log", "==PROF== Connected to process 7 (./profile_gpt2cu)\n"
                           "\"ID\",\"Process ID\",\"Process Name\",\"Host Name\",\"Kernel Name\",\"Context\",\"Stream\","
                           "\"gpu__time_duration.sum\"\n"
                           "\"\",\"\",\"\",\"\",\"\",\"\",\"\",\"usecond\"\n"
                           "\"0\",\"7\",\"p\",\"h\",\"void llmc::adamw_kernel(__nv_bfloat16 *, float *)\",\"1\",\"7\","
                           "\"1,200.50\"\n");
    write(dir / "kernels.csv", "kernel,subblock,phase,category,calls,total_us,avg_us,pct\n"
                               "\"void llmc::adamw_kernel(__nv_bfloat16*, float*)\",optimizer,opt,optimizer,2,2000.0,"
                               "1000.0,100\n");
    std::string raw = parse("ncu", dir / "raw.log", "--kernels " + dir / "kernels.csv");
    EXPECT_TRUE(has(raw, "\"ncu_avg_us\": 1200.5")) << raw;
    EXPECT_TRUE(has(raw, "\"ratio\": 1.2005")) << raw;
    write(dir / "perm.log", "==PROF== Connected to process 7 (./profile_gpt2cu)\n"
                            "==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU "
                            "Performance Counters on the target device 0.\n");
    std::string perm = parse("ncu", dir / "perm.log");
    EXPECT_TRUE(has(perm, "\"error\": \"no permission to read GPU performance counters (ERR_NVGPUCTRPERM)\"")) << perm;
    EXPECT_TRUE(has(perm, "\"launches\": 0")) << perm;
}

TEST(GpuCheckParsers, InventoryBuildDataNsys) {
    REQUIRE_PYTHON3();
    std::string inv = parse("inventory", LOGS + "inventory.log");
    EXPECT_TRUE(has(inv, "\"gpu\": \"NVIDIA H100 80GB HBM3\"")) << inv;
    EXPECT_TRUE(has(inv, "\"driver\": \"550.54.15\"")) << inv;
    EXPECT_TRUE(has(inv, "\"driver_cuda\": \"12.4\"")) << inv;
    EXPECT_TRUE(has(inv, "\"nvcc\": \"12.4.131\"")) << inv;
    EXPECT_TRUE(has(inv, "\"cublaslt\": \"12.4.5\"")) << inv;
    EXPECT_TRUE(has(inv, "\"cupti\": \"api-20\"")) << inv;
    EXPECT_TRUE(has(inv, "\"nsys\": null")) << inv;
    EXPECT_TRUE(has(inv, "\"ncu\": \"/usr/local/cuda/bin/ncu (")) << inv;
    std::string build = parse("build", LOGS + "build.log");
    EXPECT_TRUE(has(build, "\"compiled\": 2")) << build;
    std::string data = parse("data", LOGS + "data.log");
    EXPECT_TRUE(has(data, "\"train_tokens\": 305257")) << data;
    EXPECT_TRUE(has(data, "\"val_tokens\": 32768")) << data;
    EXPECT_TRUE(has(data, "\"already_prepared\": false")) << data;
    std::string nsys = parse("nsys", "test/data/gpu_check/nsys.log");
    EXPECT_TRUE(has(nsys, "\"report_bytes\": 18734112")) << nsys;
    EXPECT_TRUE(has(nsys, "\"steps\": 5")) << nsys; // the 5 profiled steps, not the 3 warmup ones before them
    EXPECT_TRUE(has(nsys, "\"tok_s\": 295167.2")) << nsys;
    EXPECT_TRUE(has(nsys, "\"nvtx_llmc\": true")) << nsys;
}

TEST(GpuCheckReport, SampleRunGivesOneTableAndASummary) {
    REQUIRE_PYTHON3();
    TempDir dir;
    RunResult r = run("python3 scripts/gpu_report.py report " + SAMPLES + " -o " + (dir / "report.md"));
    EXPECT_EQ(r.exit_code, 1) << r.output; // stages failed
    EXPECT_TRUE(has(r.output, "GPU check: 10 passed, 5 failed, 1 skipped")) << r.output;
    EXPECT_EQ(count(r.output, "\n"), 17u) << r.output; // one screen: the count line and a line per stage
    std::string md = testutil::slurp(dir / "report.md");
    EXPECT_EQ(count(md, "| stage | result | seconds | key numbers |"), 1u) << md;
    EXPECT_EQ(count(md, "\n| "), 17u) << md; // header and 16 stages
    for (const char* row :
         {"| inventory (", "| build (", "| memcheck (", "| synccheck (", "| data (", "| train (", "| decode (",
          "| profile (", "| profile_counters (", "| ncu ("})
    {
        size_t at = md.find(row);
        ASSERT_NE(at, std::string::npos) << row;
        EXPECT_TRUE(has(md.substr(at, md.find('\n', at) - at), ") | pass | ")) << row;
    }
    EXPECT_TRUE(has(md, "| gpu_tests (GPU suites of make test) | fail | 61 | 35 passed, 1 skipped, 1 failed "
                        "(failed: TrainGpu.OutOfMemoryBatchGetsAMessage) (skipped: 1 NVML not available"))
        << md;
    EXPECT_TRUE(has(md, "| initcheck (compute-sanitizer initcheck, kernel and model tests) | fail | 150 | timed out "
                        "after 150 s"))
        << md;
    EXPECT_TRUE(has(md, "| nsys (nsys profile of profile_gpt2cu) | skipped | 0 | nsys not found |")) << md;
    EXPECT_TRUE(has(md, "overhead target <= 2%: missed")) << md;
    EXPECT_TRUE(has(md, "B=1 graph 122.0 us/step (1.60x floor 76.5 us), 254/255 steps replayed, 2.07x eager")) << md;
    EXPECT_TRUE(has(md, "goal B=1 <= 1.5x floor: missed")) << md;
    EXPECT_TRUE(has(md, "tensor/analytic GEMM FLOPs 0.9961")) << md;
    EXPECT_TRUE(has(md, "median 1.060")) << md;
    // With -o the sample directory is left as it is.
    EXPECT_FALSE(exists(SAMPLES + "/ncu_vs_profiler.csv"));
    EXPECT_FALSE(exists(SAMPLES + "/report.md"));
}

// A stages.tsv the report cannot stand on: empty (no stage ran, which is no success) or with an exit status that is
// not a number. One line naming the file and exit 1, from the report and from a stage's verdict, and no report.
TEST(GpuCheckReport, EmptyOrDamagedStagesTsvGetsOneLine) {
    REQUIRE_PYTHON3();
    TempDir dir;
    const std::string report = "python3 scripts/gpu_report.py report " + dir.path;
    write(dir / "stages.tsv", "");
    expect_one_line(run(report), 1, "gpu_report.py: ", dir / "stages.tsv: no stage rows");
    write(dir / "stages.tsv", "inventory\t0\t3\t10\t\nbuild\tx\t3\t10\t\n");
    const std::string why = dir / "stages.tsv: line 2: exit status 'x' of stage build is neither a number nor skip";
    expect_one_line(run(report), 1, "gpu_report.py: ", why);
    expect_one_line(run("python3 scripts/gpu_report.py judge build " + dir.path), 1, "gpu_report.py: ", why);
    EXPECT_FALSE(exists(dir / "report.md"));
    EXPECT_FALSE(exists(dir / "summary.txt"));
}

TEST(GpuCheckScript, DryRunListsEveryStageAndItsCommand) {
    TempDir dir;
    RunResult r = run("scripts/gpu_check.sh --dry-run --out " + (dir / "report"));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    int i = 0;
    for (const char* stage : {"inventory", "build", "gpu_tests", "memcheck", "racecheck", "synccheck", "initcheck",
                              "kernel_ladder", "data", "train", "benchmark", "decode", "profile", "profile_counters",
                              "energy", "ncu", "nsys"})
        EXPECT_TRUE(has(r.output, "\nstage " + std::to_string(++i) + "/17: " + stage + " (limit ")) << stage;
    for (const char* cmd :
         {"nvidia-smi --query-gpu=name,driver_version", "python3 scripts/gpu_report.py versions", "make -j",
          "./build/run_tests --gtest_filter='GPT2GPU.*:",
          "--tool memcheck --error-exitcode 1 ./build/run_tests --gtest_filter='Kernels*:GpuPtx.*:GpuAttention.*:GPT2GPU.*"
          "-GpuAttention.Gpt2Shape:GpuAttention.FullContextT1024:GpuAttention.EveryLengthFrom1To130'",
          "--tool racecheck", "--tool synccheck", "--tool initcheck", "build/dev/cuda/$(basename \"$src\" .cu)",
          "dev/data/tinyshakespeare.sh", "./train_gpt2cu -i data/tinyshakespeare -e d12 -b 4 -t 1024 -x 60 -v 20 -s 60",
          "scripts/benchmark_gpu.sh -e d12 -t 1024 -B '16 32 64' -p",
          "scripts/benchmark_gpu.sh -I -e d12 -B '1 8 64' -P 64 -n 256", "./profile_gpt2cu -o ",
          "./profile_gpt2cu --counters -o ", "./profile_gpt2cu --energy --energy-seconds 45 --steps 2 -o ",
          "--metrics gpu__time_duration.sum",
          "--cache-control all --clock-control none --metrics l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum,"
          "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum,",
          "./profile_gpt2cu -e d12 --layers 1 -b 1 -t 256 --warmup 0 --steps 1 --no-calibrate -o ",
          "cp build/emu/emu_counters.csv ",
          "./profile_gpt2cu --layers 1 --warmup 1 --steps 1 -o ", "profile --trace=cuda,nvtx",
          "then: python3 scripts/gpu_report.py report "})
        EXPECT_TRUE(has(r.output, cmd)) << cmd << "\n" << r.output;
    // The GPU stage's filter is every suite of test/gpu, so a new GPU suite cannot be left out of it.
    size_t at = r.output.find("./build/run_tests --gtest_filter='GPT2GPU.*:");
    ASSERT_NE(at, std::string::npos) << r.output;
    std::string gpu_tests = r.output.substr(at, r.output.find('\n', at) - at);
    for (const char* suite : {"GpuAttention.*", "GpuAttentionDecode.*", "GpuGPT2Decoder.*", "GpuPrograms.*",
                              "GpuSampleTokens.*", "InferGpuProgram.*", "KernelsMatmul.*", "ProfilerGpu.*",
                              "TrainGpu.*", "TrainGpuProfile.*"})
        EXPECT_TRUE(has(gpu_tests, std::string(":") + suite)) << suite << "\n" << gpu_tests;
    EXPECT_FALSE(has(r.output, "Emu")) << "the emulated tier is not a GPU stage";
    EXPECT_FALSE(exists(dir / "report")) << "a dry run writes nothing";

    RunResult some = run("scripts/gpu_check.sh --dry-run --only sanitizer,ncu --out " + (dir / "report"));
    ASSERT_EQ(some.exit_code, 0) << some.output;
    EXPECT_TRUE(has(some.output, "stage 1/6: build (limit")) << some.output; // it makes what they need
    EXPECT_TRUE(has(some.output, "make -j")) << some.output;
    EXPECT_TRUE(has(some.output, " build/run_tests profile_gpt2cu\n")) << some.output;
    EXPECT_TRUE(has(some.output, "stage 6/6: ncu (limit")) << some.output;
    EXPECT_FALSE(has(some.output, ": train (")) << some.output;
}

TEST(GpuCheckScript, WithoutAGpuOneLineAndNonZero) {
    TempDir dir;
    RunResult none = run("NVIDIA_SMI=/nonexistent/nvidia-smi scripts/gpu_check.sh --out " + (dir / "report"));
    EXPECT_EQ(none.exit_code, 1) << none.output;
    EXPECT_EQ(count(none.output, "\n"), 1u) << none.output;
    EXPECT_TRUE(has(none.output, "gpu_check: no NVIDIA GPU here (/nonexistent/nvidia-smi not found)")) << none.output;
    // nvidia-smi present but no device (its message and exit status when the driver finds none).
    write(dir / "nvidia-smi", "#!/bin/sh\necho 'No devices were found'\nexit 6\n");
    ASSERT_EQ(run("chmod +x " + (dir / "nvidia-smi")).exit_code, 0);
    RunResult nodev = run("NVIDIA_SMI=" + (dir / "nvidia-smi") + " scripts/gpu_check.sh --out " + (dir / "report"));
    EXPECT_EQ(nodev.exit_code, 1) << nodev.output;
    EXPECT_EQ(count(nodev.output, "\n"), 1u) << nodev.output;
    EXPECT_TRUE(has(nodev.output, "lists no device")) << nodev.output;
    EXPECT_FALSE(exists(dir / "report"));
}

TEST(GpuCheckScript, BadFlagsGetOneLineAndExitTwo) {
    for (const char* args : {"--bogus", "--only nope", "--budget 0", "--out", "--only memcheck,frobnicate", "--only memcheck,,ncu"}) {
        RunResult r = run(std::string("scripts/gpu_check.sh ") + args);
        EXPECT_EQ(r.exit_code, 2) << args << ": " << r.output;
        EXPECT_EQ(count(r.output, "\n"), 1u) << args << ": " << r.output;
        EXPECT_TRUE(has(r.output, "gpu_check: ")) << args << ": " << r.output;
    }
    RunResult help = run("scripts/gpu_check.sh --help");
    EXPECT_EQ(help.exit_code, 0);
    EXPECT_TRUE(has(help.output, "--dry-run")) << help.output;
    RunResult py = run("python3 scripts/gpu_report.py parse nosuchkind x");
    EXPECT_EQ(py.exit_code, 2) << py.output;
}

// ---- --lease (doc/gpu_check.md): test/data/gpu_check/lease holds a synthetic lease run in the programs' formats
// (train_gpt2cu with the CPU reference's lines appended, benchmark_gpu.sh -C, dev/torch_gpt2_baseline.py) and a
// stages.tsv of a run that stopped early, for --rest.

namespace {
const std::string LEASE = "test/data/gpu_check/lease";

// "stage I/N: NAME (limit L s)" lines of a dry run: (name, limit) in order.
std::vector<std::pair<std::string, int>> dry_run_stages(const std::string& output) {
    std::vector<std::pair<std::string, int>> v;
    std::istringstream in(output);
    for (std::string line; std::getline(in, line);) {
        char name[64];
        int i, n, limit;
        if (sscanf(line.c_str(), "stage %d/%d: %63s (limit %d s)", &i, &n, name, &limit) == 4) v.emplace_back(name, limit);
    }
    return v;
}

// A copy of the lease samples' logs with this stages.tsv.
void lease_report_dir(const TempDir& dir, const std::string& tsv) {
    ASSERT_EQ(run("cp -r " + LEASE + "/logs " + dir.path + "/").exit_code, 0);
    write(dir / "stages.tsv", tsv);
}
} // namespace

TEST(GpuCheckLease, DryRunListsTheStagesInOrderWithinNineMinutes) {
    TempDir dir;
    RunResult r = run("scripts/gpu_check.sh --lease --dry-run --out " + (dir / "out"));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    std::vector<std::pair<std::string, int>> stages = dry_run_stages(r.output);
    std::vector<std::string> names;
    int total = 0;
    for (auto& [name, limit] : stages) {
        names.push_back(name);
        total += limit;
        EXPECT_GT(limit, 0) << name;
    }
    EXPECT_EQ(names, (std::vector<std::string>{"inventory", "gpu_tests", "train", "benchmark", "decode",
                                               "torch_baseline", "profile", "energy", "ncu", "memcheck",
                                               "racecheck", "kernel_ladder"}))
        << r.output;
    EXPECT_LE(total, 540) << r.output;
    EXPECT_TRUE(has(r.output, "limits: " + std::to_string(total) + " s in all, for a budget of 540 s")) << r.output;
    for (const auto& [name, limit] : stages) {
        if (name == "ncu") {
            EXPECT_LE(limit, 120);
        }
        if (name == "memcheck" || name == "racecheck") { // both within 90 s
            EXPECT_LE(limit, 45) << name;
        }
    }
    // Everything from the bundle, nothing built: the stages run in gpu_bundle/ and name its programs.
    for (const char* cmd :
         {"stages run in ", "/gpu_bundle; logs and profiles go to ", "--query-gpu=clocks.sm,clocks.mem",
          "python3 ../scripts/gpu_report.py versions --binary ./train_gpt2cu", "\n    ./profile_gpt2cu --version\n",
          "echo \"lib libnccl: ",
          "echo \"lib libmpi: ", "tool compute-sanitizer", "\n    ldd ./train_gpt2cu || ", "./gpu_tests --gtest_filter='GPT2GPU.*:",
          "./train_gpt2cu -i data/tinyshakespeare -e d12 -b 4 -t 1024 -x 30 ", "sed 's/^/ref: /' ref/train_gpt2.log",
          "../scripts/benchmark_gpu.sh -C . -e d12 -t 1024 -B '16 64'",
          "../scripts/benchmark_gpu.sh -C . -I -e d12 -B '1 8 64' -P 64 -n 256",
          "python3 ../dev/torch_gpt2_baseline.py -e d12 -t 1024 -B '16 64' -x 40 -w 10 -i data/tinyshakespeare/",
          "./profile_gpt2cu -o ", "./profile_gpt2cu --energy --energy-seconds 45 --steps 2 -o ",
          "--metrics gpu__time_duration.sum",
          "--cache-control all --clock-control none --metrics l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum,"
          "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum,",
          "./profile_gpt2cu -e d12 --layers 1 -b 1 -t 256 --warmup 0 --steps 1 --no-calibrate -o ",
          "cp emu_counters.csv ",
          "--tool memcheck --error-exitcode 1 ./gpu_tests --gtest_filter='Kernels*:GpuPtx.*:GpuAttention.*-GpuAttention.Gpt2Shape:"
          "GpuAttention.FullContextT1024:GpuAttention.EveryLengthFrom1To130'",
          "--tool racecheck --error-exitcode 1 ./gpu_tests", "b=dev/cuda/$(basename \"$src\" .cu)"})
        EXPECT_TRUE(has(r.output, cmd)) << cmd << "\n" << r.output;
    EXPECT_FALSE(has(r.output, "make -j")) << r.output;
    EXPECT_FALSE(has(r.output, "build/run_tests")) << r.output;
    EXPECT_FALSE(exists(dir / "out")) << "a dry run writes nothing";
}

TEST(GpuCheckLease, RestRunsOnlyTheStagesThatDidNotFinish) {
    // The fixture: inventory and benchmark passed, gpu_tests failed, torch_baseline and memcheck were skipped for a
    // missing tool, train timed out, profile was skipped as out of time, and the run stopped before the rest.
    RunResult r = run("scripts/gpu_check.sh --lease --rest " + LEASE + "/stages.tsv --dry-run");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    std::vector<std::pair<std::string, int>> want = {
        {"train", 70}, {"decode", 30}, {"profile", 40}, {"energy", 75}, {"ncu", 65}, {"racecheck", 40},
        {"kernel_ladder", 20}};
    EXPECT_EQ(dry_run_stages(r.output), want) << r.output; // a timed-out stage gets twice its limit
    EXPECT_TRUE(has(r.output, "(budget 240 s)")) << r.output;

    RunResult no_lease = run("scripts/gpu_check.sh --rest " + LEASE + "/stages.tsv --dry-run");
    EXPECT_EQ(no_lease.exit_code, 2) << no_lease.output;
    EXPECT_TRUE(has(no_lease.output, "gpu_check: --rest needs --lease")) << no_lease.output;
    RunResult missing = run("scripts/gpu_check.sh --lease --rest /nonexistent/stages.tsv --dry-run");
    EXPECT_EQ(missing.exit_code, 1) << missing.output;
    EXPECT_EQ(count(missing.output, "\n"), 1u) << missing.output;
    EXPECT_TRUE(has(missing.output, "--rest /nonexistent/stages.tsv: no such file")) << missing.output;
    RunResult both = run("scripts/gpu_check.sh --lease --rest " + LEASE + "/stages.tsv --only train --dry-run");
    EXPECT_EQ(both.exit_code, 2) << both.output;
}

TEST(GpuCheckLease, WithoutTheBundleOneLine) {
    // A GPU is there (a stand-in nvidia-smi) but the bundle is not: nothing runs.
    TempDir dir;
    write(dir / "nvidia-smi", "#!/bin/sh\necho 'GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-0)'\n");
    ASSERT_EQ(run("chmod +x " + (dir / "nvidia-smi")).exit_code, 0);
    RunResult r = run("GPU_BUNDLE=" + (dir / "no_bundle") + " NVIDIA_SMI=" + (dir / "nvidia-smi") +
                      " scripts/gpu_check.sh --lease --out " + (dir / "out"));
    EXPECT_EQ(r.exit_code, 1) << r.output;
    EXPECT_EQ(count(r.output, "\n"), 1u) << r.output;
    EXPECT_TRUE(has(r.output, "gpu_check: --lease: no " + (dir / "no_bundle/gpu_tests") + " (make gpu_bundle"))
        << r.output;
    EXPECT_FALSE(exists(dir / "out"));
}

TEST(GpuCheckLease, ARunLeavesAtMostEightFilesInOut) {
    REQUIRE_PYTHON3();
    // The whole run on stand-ins: an nvidia-smi that names a GPU and a bundle of shell scripts in the programs'
    // output formats (no ncu, compute-sanitizer or PyTorch here: those stages are skipped and say why).
    TempDir dir;
    const std::string b = dir / "bundle";
    ASSERT_EQ(run("mkdir -p " + b + "/ref " + b + "/data/tinyshakespeare " + b + "/dev/cuda && touch " + b +
                  "/data/tinyshakespeare/tiny_shakespeare_train.bin").exit_code, 0);
    write(dir / "nvidia-smi", "#!/bin/sh\necho 'GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-0)'\n");
    write(b + "/gpu_tests", "#!/bin/sh\necho '[==========] 1 test from 1 test suite ran. (5 ms total)'\n"
                            "echo '[  PASSED  ] 1 test.'\n");
    write(b + "/train_gpt2cu", "#!/bin/bash\nx=1; while [ $# -gt 0 ]; do [ \"$1\" = -x ] && x=$2; shift; done\n"
                               "for i in $(seq 1 $x); do printf 'step %4d/%d | loss %.6f | norm 1.0000 | lr 3.00e-04 | "
                               "40.00 ms | 102400 tok/s | MFU 10.0%% | mem 7.00 GiB | 0.1 s elapsed, ETA 0.1 s\\n' "
                               "$i $x $((12 - i / 4)); done\n");
    write(b + "/profile_gpt2cu", "#!/bin/bash\nwhile [ $# -gt 0 ]; do [ \"$1\" = -o ] && o=$2; shift; done\n"
                                 "mkdir -p $o && echo summary > $o/summary.txt && echo '[]' > $o/trace.json\n"
                                 "echo \"profile written to $o (summary.txt)\"\n");
    write(b + "/ref/train_gpt2.log", "step    1/3 | loss 13.000000 | norm 1.0000 | lr 3.00e-04 | 52000.00 ms | 78 "
                                     "tok/s | 52.0 s elapsed, ETA 104.0 s\n");
    ASSERT_EQ(run("chmod +x " + (dir / "nvidia-smi") + " " + b + "/gpu_tests " + b + "/train_gpt2cu " + b +
                  "/profile_gpt2cu").exit_code, 0);
    RunResult r = run("PATH=/usr/bin:/bin TMPDIR=" + dir.path + " GPU_BUNDLE=" + b + " NVIDIA_SMI=" +
                      (dir / "nvidia-smi") + " scripts/gpu_check.sh --lease --out " + (dir / "out"));
    EXPECT_EQ(r.exit_code, 1) << r.output; // the stand-ins fail some stages
    std::vector<std::string> files = lines(run("cd " + (dir / "out") + " && find . -mindepth 1 | sort").output);
    EXPECT_EQ(files, (std::vector<std::string>{"./logs.tar.gz", "./profiles.tar.gz", "./report.md", "./stages.tsv",
                                               "./summary.txt"}))
        << r.output;
    std::string tsv = testutil::slurp(dir / "out/stages.tsv");
    EXPECT_EQ(count(tsv, "\n"), 12u) << tsv;
    // decode: the stand-in bundle has no infer_gpt2cu, and benchmark_gpu.sh -I says so.
    for (const char* row : {"inventory\t0\t", "gpu_tests\t0\t", "train\t0\t", "benchmark\t0\t", "decode\t1\t",
                            "profile\t0\t",
                            "ncu\tskip\t0\t0\tncu not found", "memcheck\tskip\t0\t0\tcompute-sanitizer not found",
                            "kernel_ladder\t1\t"})
        EXPECT_TRUE(has(tsv, row)) << row << "\n" << tsv;
    std::string md = testutil::slurp(dir / "out/report.md");
    EXPECT_EQ(count(md, "\n| "), 13u) << md; // header and 12 stages
    EXPECT_TRUE(has(md, "vs CPU reference (tolerance 2%): step 1 12.0000/13.0000 (-7.69%)")) << md;
    // In the order they ran.
    EXPECT_LT(md.find("| gpu_tests ("), md.find("| train (")) << md;
    EXPECT_LT(md.find("| torch_baseline ("), md.find("| memcheck (")) << md;
    EXPECT_TRUE(has(md, "losses off the CPU reference at step 1")) << md;
    std::string logs = run("tar -tzf " + (dir / "out/logs.tar.gz")).output;
    for (const char* log : {"logs/inventory.log", "logs/train.log", "logs/benchmark.log", "logs/kernel_ladder.log"})
        EXPECT_TRUE(has(logs, log)) << log << "\n" << logs;
    std::string profiles = run("tar -tzf " + (dir / "out/profiles.tar.gz")).output;
    EXPECT_TRUE(has(profiles, "profile_default/summary.txt")) << profiles;
    EXPECT_TRUE(has(profiles, "profile_default/trace.json")) << profiles;
    EXPECT_EQ(run("find " + dir.path + " -maxdepth 1 -name 'gpu_check.*'").output, "") << "work directory left";
}

TEST(GpuCheckParsers, TrainLossesAgainstTheCpuReference) {
    REQUIRE_PYTHON3();
    std::string j = parse("train", LEASE + "/logs/train.log");
    EXPECT_TRUE(has(j, "\"max_steps\": 30")) << j;
    EXPECT_TRUE(has(j, "{\"cpu\": 11.009836, \"gpu\": 11.011372, \"rel\": 0.00014, \"same_lr\": true, \"step\": 1}")) << j;
    EXPECT_EQ(count(j, "\"same_lr\": true"), 3u) << j;
    TempDir dir;
    lease_report_dir(dir, "train\t0\t12\t40\t\n");
    RunResult ok = run("python3 scripts/gpu_report.py judge train " + dir.path);
    EXPECT_EQ(ok.exit_code, 0) << ok.output;
    EXPECT_TRUE(has(ok.output, "train pass: 30 steps")) << ok.output;
    EXPECT_TRUE(has(ok.output, "vs CPU reference (tolerance 2%): step 1 11.0114/11.0098 (+0.01%), step 2 "
                               "10.2145/10.2100 (+0.04%), step 3 9.7078/9.7023 (+0.06%)"))
        << ok.output;
    // The GPU's second loss 3% above the CPU's: the stage fails and names the step.
    ASSERT_EQ(run("sed -i 's/^step    2\\/30 | loss 10.214530/step    2\\/30 | loss 10.516276/' " +
                  (dir / "logs/train.log")).exit_code, 0);
    RunResult off = run("python3 scripts/gpu_report.py judge train " + dir.path);
    EXPECT_TRUE(has(off.output, "train fail: losses off the CPU reference at step 2;")) << off.output;
    // A run stopped before its last step fails too.
    ASSERT_EQ(run("sed -i '/^step   30\\/30 | loss/d' " + (dir / "logs/train.log")).exit_code, 0);
    RunResult cut = run("python3 scripts/gpu_report.py judge train " + dir.path);
    EXPECT_TRUE(has(cut.output, "only 29 steps of 30")) << cut.output;
}

TEST(GpuCheckParsers, TorchBaselineRatioFromTheSameRun) {
    REQUIRE_PYTHON3();
    std::string j = parse("torch", LEASE + "/logs/torch_baseline.log");
    EXPECT_TRUE(has(j, "{\"B\": 16, \"T\": 1024, \"error\": null, \"mem_gib\": 18.02, \"model\": \"d12\", \"ms\": 44.85, "
                       "\"tok_s\": 365310}"))
        << j;
    EXPECT_TRUE(has(j, "{\"B\": 64, \"T\": 1024, \"error\": \"out of memory\", \"model\": \"d12\"}")) << j;
    EXPECT_TRUE(has(j, "\"setup\": \"torch 2.11.0+cu130 on NVIDIA H100 80GB HBM3, torch.compile,")) << j;
    TempDir dir;
    lease_report_dir(dir, "benchmark\t0\t31\t45\t\ntorch_baseline\t1\t80\t95\t\n");
    RunResult r = run("python3 scripts/gpu_report.py judge torch_baseline " + dir.path);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    // 389169 / 365310 = 1.0653; B=64 ran out of memory under PyTorch: no ratio, and the stage fails.
    EXPECT_TRUE(has(r.output, "torch_baseline fail: B=16 365310 tok/s 44.9 ms 18.0 GiB, ours/torch 1.065 "
                              "(389169 tok/s); B=64 failed: out of memory"))
        << r.output;
    // Without our benchmark's log the ratio is missing, and the report says so.
    ASSERT_EQ(run("rm " + (dir / "logs/benchmark.log")).exit_code, 0);
    RunResult alone = run("python3 scripts/gpu_report.py judge torch_baseline " + dir.path);
    EXPECT_TRUE(has(alone.output, "B=16 365310 tok/s 44.9 ms 18.0 GiB, no benchmark row to compare")) << alone.output;
}

TEST(GpuCheckTorchBaseline, BadFlagsGetOneLineAndExitTwo) {
    REQUIRE_PYTHON3();
    // The flags are read before torch is imported: these need no torch.
    for (const char* args : {"-B 0", "-B ''", "-e 12", "-e d0", "-t 2048", "-x 5 -w 5", "-x -1", "--device tpu", "--bogus"}) {
        RunResult r = run(std::string("python3 dev/torch_gpt2_baseline.py ") + args);
        EXPECT_EQ(r.exit_code, 2) << args << ": " << r.output;
        EXPECT_EQ(count(r.output, "\n"), 1u) << args << ": " << r.output;
        EXPECT_TRUE(has(r.output, "torch_gpt2_baseline.py: ")) << args << ": " << r.output;
    }
    TempDir dir;
    write(dir / "bad.bin", std::string(1024, '\0'));
    RunResult shard = run("python3 dev/torch_gpt2_baseline.py -i " + (dir / "bad.bin"));
    EXPECT_EQ(shard.exit_code, 1) << shard.output;
    EXPECT_TRUE(has(shard.output, "-i " + (dir / "bad.bin") + ": not an llm.c token shard")) << shard.output;
}

TEST(GpuCheckTorchBaseline, TinyModelOnTheCpu) {
    REQUIRE_PYTHON3();
    if (run("python3 -c 'import torch'").exit_code != 0) GTEST_SKIP() << "no PyTorch for python3 (pip install torch)";
    TempDir dir;
    RunResult r = run("python3 dev/torch_gpt2_baseline.py --device cpu --no-compile -e d1 -t 16 -B '1 2' -x 3 -w 1 > " +
                      (dir / "torch.log"));
    ASSERT_EQ(r.exit_code, 0) << r.output << testutil::slurp(dir / "torch.log");
    std::string j = parse("torch", dir / "torch.log");
    EXPECT_EQ(count(j, "\"error\": null"), 3u) << j; // the file's and both rows'
    EXPECT_TRUE(has(j, "\"B\": 1, \"T\": 16,")) << j;
    EXPECT_TRUE(has(j, "\"B\": 2, \"T\": 16,")) << j;
    EXPECT_TRUE(has(j, "\"setup\": \"torch ")) << j;
    EXPECT_TRUE(has(j, " on cpu, eager, random tokens, 3 steps, averages after 1\"")) << j;
}

// ---- gpu_bundle/ (make gpu_bundle): what a GPU machine gets. Its programs may load glibc's, the C++ runtime's,
// OpenMP's and the CUDA toolkit's libraries only (the machine may have no MPI, NCCL or pcre2), and the whole
// bundle is at most 48 MiB. Skipped where the bundle is not built (.ci/run builds it before make test).

namespace {
// The sonames in `ldd` output that a bundle program may not need ("=> not found" ones included).
std::vector<std::string> disallowed_libraries(const std::string& ldd) {
    static const std::regex allowed(R"((linux-vdso|ld-linux-x86-64|libc|libm|libdl|libpthread|librt|libstdc\+\+|)"
                                    R"(libutil|libgcc_s|libgomp|libcudart|libcublasLt|libcublas|libcupti)\.so(\.[0-9]+)*)");
    std::vector<std::string> bad;
    std::istringstream in(ldd);
    for (std::string line; std::getline(in, line);) {
        std::istringstream words(line);
        std::string lib;
        if (!(words >> lib) || lib.find(".so") == std::string::npos) continue; // "statically linked" and the like
        lib = lib.substr(lib.rfind('/') + 1);
        if (!std::regex_match(lib, allowed)) bad.push_back(lib);
    }
    return bad;
}

// The entries of every fatbin in a program (the CUDA fatbin layout cuobjdump reads): (kind, architecture) ->
// how many; kind 1 is PTX, 2 machine code, and 90 is sm_90 / compute_90.
std::map<std::pair<int, int>, int> fatbin_entries(const std::string& path) {
    std::map<std::pair<int, int>, int> kinds;
    const std::string b = testutil::slurp(path), magic = "\x50\xed\x55\xba";
    auto u16 = [&](size_t at) { uint16_t v; memcpy(&v, b.data() + at, 2); return (size_t)v; };
    auto u32 = [&](size_t at) { uint32_t v; memcpy(&v, b.data() + at, 4); return (size_t)v; };
    auto u64 = [&](size_t at) { uint64_t v; memcpy(&v, b.data() + at, 8); return (size_t)v; };
    for (size_t at = b.find(magic); at != std::string::npos && at + 16 <= b.size();) {
        size_t entry = at + u16(at + 6), end = std::min(entry + u64(at + 8), b.size());
        while (entry + 32 <= end) { // kind, version, header size, payload size, ..., architecture at 28
            kinds[{(int)u16(entry), (int)u32(entry + 28)}]++;
            if (u32(entry + 4) == 0) break;
            entry += u32(entry + 4) + u64(entry + 8);
        }
        at = b.find(magic, std::max(end, at + 4));
    }
    return kinds;
}

bool is_elf(const std::string& path) { return testutil::slurp(path).compare(0, 4, "\x7f" "ELF") == 0; }

const std::string BUNDLE = "gpu_bundle";
#define REQUIRE_BUNDLE()                                                                                          \
    do {                                                                                                          \
        if (!exists(BUNDLE)) GTEST_SKIP() << "gpu_bundle/ not built (make gpu_bundle; .ci/run builds it before the tests)"; \
    } while (0)
} // namespace

TEST(GpuBundle, LibraryCheckNamesWhatAGpuMachineMayLack) {
    // ldd of a program built with MPI, NCCL and a shared pcre2, as the normal build links them.
    std::string ldd = "\tlinux-vdso.so.1 (0x00007ffd)\n"
                      "\tlibcublasLt.so.13 => /usr/local/cuda/lib64/libcublasLt.so.13 (0x00007f08)\n"
                      "\tlibcupti.so.13 => not found\n"
                      "\tlibpcre2-8.so.0 => /lib/x86_64-linux-gnu/libpcre2-8.so.0 (0x00007f3f)\n"
                      "\tlibmpi.so.40 => /lib/x86_64-linux-gnu/libmpi.so.40 (0x00007f09)\n"
                      "\tlibnccl.so.2 => not found\n"
                      "\tlibgomp.so.1 => /lib/x86_64-linux-gnu/libgomp.so.1 (0x00007f09)\n"
                      "\tlibstdc++.so.6 => /lib/x86_64-linux-gnu/libstdc++.so.6 (0x00007f08)\n"
                      "\tlibm.so.6 => /lib/x86_64-linux-gnu/libm.so.6 (0x00007f08)\n"
                      "\tlibgcc_s.so.1 => /lib/x86_64-linux-gnu/libgcc_s.so.1 (0x00007f09)\n"
                      "\tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f08)\n"
                      "\t/lib64/ld-linux-x86-64.so.2 (0x00007f09)\n"
                      "\tlibhwloc.so.15 => /lib/x86_64-linux-gnu/libhwloc.so.15 (0x00007f09)\n";
    EXPECT_EQ(disallowed_libraries(ldd),
              (std::vector<std::string>{"libpcre2-8.so.0", "libmpi.so.40", "libnccl.so.2", "libhwloc.so.15"}));
    EXPECT_TRUE(disallowed_libraries("\tstatically linked\n").empty());
}

TEST(GpuBundle, EveryProgramLoadsOnlyAllowedLibrariesWithin48MiB) {
    REQUIRE_BUNDLE();
    std::vector<std::string> expected = {"train_gpt2cu", "infer_gpt2cu", "profile_gpt2cu", "train_gpt2", "infer_gpt2",
                                         "gpu_tests"};
    for (const std::string& src : lines(run("ls dev/cuda/*.cu").output))
        expected.push_back("dev/cuda/" + src.substr(9, src.size() - 9 - 3));
    for (const std::string& prog : expected)
        EXPECT_TRUE(is_elf(BUNDLE + "/" + prog)) << BUNDLE << "/" << prog << " missing or not a program";
    size_t programs = 0;
    for (const std::string& f : lines(run("find " + BUNDLE + " -type f | sort").output)) {
        if (!is_elf(f)) continue;
        programs++;
        RunResult ldd = run("ldd " + f);
        EXPECT_EQ(ldd.exit_code, 0) << f << ": " << ldd.output;
        std::vector<std::string> bad = disallowed_libraries(ldd.output);
        EXPECT_TRUE(bad.empty()) << f << " needs " << bad.front() << "\n" << ldd.output;
    }
    EXPECT_EQ(programs, expected.size());
    long bytes = std::stol("0" + run("du -sb " + BUNDLE + " | cut -f1").output);
    EXPECT_GT(bytes, 0);
    EXPECT_LE(bytes, 48L << 20) << "gpu_bundle/ is " << bytes << " bytes; the limit is 48 MiB";
}

TEST(GpuBundle, Sm90CodeAndPtxDataAndTheCpuReference) {
    REQUIRE_BUNDLE();
    // The whole text, enough for B=64 at T=1024 (the benchmark's largest batch): header count, file size agree.
    std::string train = testutil::slurp(BUNDLE + "/data/tinyshakespeare/tiny_shakespeare_train.bin");
    ASSERT_GE(train.size(), 1024u);
    int32_t header[3];
    memcpy(header, train.data(), sizeof header);
    EXPECT_EQ(header[0], 20240520);
    EXPECT_EQ((size_t)header[2] * 2 + 1024, train.size());
    EXPECT_GT(header[2], 64 * 1024) << "fewer tokens than one B=64, T=1024 batch";
    EXPECT_TRUE(exists(BUNDLE + "/data/tinyshakespeare/tiny_shakespeare_val.bin"));
    // The CPU reference's first steps of the lease's training run (gpu_check.sh, stage train).
    std::string ref = testutil::slurp(BUNDLE + "/ref/train_gpt2.log");
    EXPECT_TRUE(std::regex_search(ref, std::regex(R"(\nstep +1/\d+ \| loss \d+\.\d+ \| norm [^|]+\| lr 3\.00e-04 \|)")))
        << ref;
    EXPECT_TRUE(has(ref, "d12")) << ref;
    // sm_90 machine code and compute_90 PTX in every GPU program.
    for (const char* prog : {"train_gpt2cu", "infer_gpt2cu", "profile_gpt2cu", "gpu_tests", "dev/cuda/attention"}) {
        std::map<std::pair<int, int>, int> kinds = fatbin_entries(BUNDLE + "/" + prog);
        EXPECT_GT(kinds[std::make_pair(2, 90)], 0) << prog << ": no sm_90 code";
        EXPECT_GT(kinds[std::make_pair(1, 90)], 0) << prog << ": no compute_90 PTX";
        EXPECT_EQ(kinds.size(), 2u) << prog << ": code for another architecture too";
    }
}

// scripts/check_sass.py (make sass_check) on SASS and ptxas reports written here: it passes kernels built on
// ldmatrix, cp.async and mma.sync without spills, and names each thing it refuses.
namespace {
struct SassCase {
    std::string sass, ptxas;
};
std::string sass_function(const std::string& name, const std::string& body) {
    return "\t\tFunction : _ZN4llmc16attention_detail" + name + "ILi64EEEvv\n" + body;
}
std::string ptxas_entry(const std::string& name, int spill_stores) {
    return "ptxas info    : Compiling entry function '_ZN4llmc16attention_detail" + name + "ILi64EEEvv' for 'sm_90'\n"
           "ptxas info    : Function properties for _ZN4llmc16attention_detail" + name + "ILi64EEEvv\n"
           "    0 bytes stack frame, " + std::to_string(spill_stores) + " bytes spill stores, 0 bytes spill loads\n"
           "ptxas info    : Used 128 registers, used 1 barriers\n";
}
const char* kGoodBody = "        /*0100*/                   LDGSTS.E.BYPASS.128 [R5], desc[UR8][R2.64] ;\n"
                        "        /*0110*/                   LDSM.16.M88.4 R12, [R7] ;\n"
                        "        /*0118*/                   LDSM.16.MT88.4 R20, [R9] ;\n"
                        "        /*0120*/                   HMMA.16816.F32.BF16 R16, R12, R8, R16 ;\n"
                        "        /*0130*/                   LDG.E.CONSTANT R3, desc[UR8][R2.64] ;\n";
RunResult check_sass(const SassCase& c) {
    TempDir dir;
    std::ofstream(dir / "k.sass") << c.sass;
    std::ofstream(dir / "k.ptxas") << c.ptxas;
    return run("python3 scripts/check_sass.py --sass " + (dir / "k.sass") + " " + (dir / "k.ptxas"));
}
SassCase kernels(const std::string& forward_body, int forward_spills) {
    SassCase c;
    const std::pair<const char*, std::string> ks[] = {{"24attention_forward_kernel", forward_body},
                                                      {"30attention_backward_dkdv_kernel", kGoodBody},
                                                      {"28attention_backward_dq_kernel", kGoodBody}};
    for (const auto& k : ks) {
        c.sass += sass_function(k.first, k.second);
        c.ptxas += ptxas_entry(k.first, k.first == ks[0].first ? forward_spills : 0);
    }
    return c;
}
} // namespace

TEST(SassCheck, PassesMmaKernelsAndNamesEachProblem) {
    REQUIRE_PYTHON3();
    RunResult ok = check_sass(kernels(kGoodBody, 0));
    EXPECT_EQ(ok.exit_code, 0) << ok.output;
    EXPECT_TRUE(has(ok.output, "forward  128 registers")) << ok.output;

    const std::string generic = std::string(kGoodBody) + "        /*0140*/                   LD.E.64 R4, [R2.64] ;\n";
    RunResult bad = check_sass(kernels(generic, 0));
    EXPECT_EQ(bad.exit_code, 1) << bad.output;
    EXPECT_TRUE(has(bad.output, "1 x generic load LD.E in its SASS")) << bad.output;

    const std::string no_cp_async = "        /*0110*/                   LDSM.16.M88.4 R12, [R7] ;\n"
                                    "        /*0120*/                   HMMA.16816.F32.BF16 R16, R12, R8, R16 ;\n";
    bad = check_sass(kernels(no_cp_async, 0));
    EXPECT_EQ(bad.exit_code, 1) << bad.output;
    EXPECT_TRUE(has(bad.output, "no LDGSTS in its SASS")) << bad.output;

    const std::string local = std::string(kGoodBody) + "        /*0140*/                   STL.64 [R1+0x8], R4 ;\n";
    bad = check_sass(kernels(local, 8));
    EXPECT_EQ(bad.exit_code, 1) << bad.output;
    EXPECT_TRUE(has(bad.output, "local store STL")) << bad.output;
    EXPECT_TRUE(has(bad.output, "8 bytes spill stores")) << bad.output;

    // Every attention kernel's source uses ldmatrix_x4_trans (llmc/attention.cuh): its SASS must have the
    // transposed form.
    std::string no_trans = kGoodBody;
    no_trans.erase(no_trans.find("        /*0118*/"), no_trans.find("        /*0120*/") - no_trans.find("        /*0118*/"));
    bad = check_sass(kernels(no_trans, 0));
    EXPECT_EQ(bad.exit_code, 1) << bad.output;
    EXPECT_TRUE(has(bad.output, "its source uses ldmatrix_x4_trans, its SASS has no LDSM.16.MT88")) << bad.output;

    SassCase missing = kernels(kGoodBody, 0);
    missing.sass = sass_function("24attention_forward_kernel", kGoodBody);
    bad = check_sass(missing);
    EXPECT_EQ(bad.exit_code, 1) << bad.output;
    EXPECT_TRUE(has(bad.output, "dK/dV: no kernel named attention_backward_dkdv_kernel in the SASS")) << bad.output;
}
