// Hardware counters without a GPU: CUPTI's host API on chip "GH100" (llmc/profiler/cupti_counters.cuh; built with the
// CUDA toolkit only) and the join and aggregation of synthetic counter records (llmc/profiler/counter_records.h).
#include <cmath>
#include <iterator>
#include <sstream>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "llmc/profiler/counter_records.h"
#include "llmc/profiler/cupti_version.h"
#include "llmc/profiler/writers.h"
#ifdef LLMC_HAVE_CUPTI
#include "llmc/profiler/cupti_counters.cuh"
#endif

using namespace llmc;
using namespace llmc::prof;

namespace {

#ifdef LLMC_HAVE_CUPTI
// The host half needs nothing from a device: CUPTI carries the chip's metric tables in libnvperf_host.
TEST(ProfilerCounters, HostAcceptsEveryMetricOnGH100) {
    for (const std::string& m : all_counter_metrics()) {
        MetricConfig one("GH100", {m});
        EXPECT_FALSE(one.config_image().empty()) << m;
        EXPECT_EQ(one.num_passes(), 1u) << m;
    }
}

// Observed with CUPTI 2025.3.1: the counter set including its peaks and clocks fits one pass, the FP32
// instruction counters fit one pass on their own, and together they need two (kernel replay runs each
// kernel twice). A change here changes the cost of --counters.
TEST(ProfilerCounters, PassCountsOnGH100) {
    MetricConfig counters("GH100", COUNTER_METRICS);
    EXPECT_FALSE(counters.config_image().empty());
    EXPECT_EQ(counters.num_passes(), 1u);
    MetricConfig fp32("GH100", FP32_METRICS);
    EXPECT_EQ(fp32.num_passes(), 1u);
    MetricConfig all("GH100", all_counter_metrics());
    EXPECT_EQ(all.num_passes(), 2u);
}

TEST(ProfilerCounters, UnknownMetricNamesItself) {
    try {
        MetricConfig bad("GH100", {"dram__bytes_read.sum", "dram__no_such_counter.sum"});
        FAIL() << "an unknown metric was accepted";
    } catch (const CounterError& e) {
        EXPECT_NE(std::string(e.what()).find("'dram__no_such_counter.sum' unknown on GH100"), std::string::npos)
            << e.what();
    }
}

TEST(ProfilerCounters, UnknownChip) { EXPECT_THROW(MetricConfig("NOT_A_CHIP", COUNTER_METRICS), CounterError); }

// Values arrive in all_counter_metrics() order; the ceilings are peak per cycle x cycles per second.
TEST(ProfilerCounters, EvaluatedValuesMapToFields) {
    std::vector<double> v = {1000, 10, 20, 30, 40, 4096, 16896, 1.98e9, 64, 2.6e9, 5, 6, 7};
    ASSERT_EQ(v.size(), all_counter_metrics().size());
    KernelCounters k = kernel_counters_from("gemm", v);
    EXPECT_EQ(k.time_ns, 1000);
    EXPECT_EQ(k.dram_bytes(), 30);
    EXPECT_EQ(k.l2_bytes, 30);
    EXPECT_EQ(k.tensor_ops, 40);
    EXPECT_DOUBLE_EQ(k.peak_tensor_flops, 4096 * 1.98e9);
    EXPECT_DOUBLE_EQ(k.peak_fp32_flops, 2 * 16896 * 1.98e9);
    EXPECT_DOUBLE_EQ(k.peak_dram_bytes, 64 * 2.6e9);
    EXPECT_EQ(k.fp32_flops(), 5 + 6 + 2 * 7);
}
#endif

KernelRecord traced(const std::string& name, uint32_t corr, SubBlock s, Phase p, int layer) {
    KernelRecord k;
    k.name = name, k.correlation = corr, k.where = {(int)s, (int)p, layer, 0};
    return k;
}
KernelCounters counted(const std::string& name, double ns, double rd, double wr, double tensor, double fadd,
                       double fmul, double ffma) {
    KernelCounters k;
    k.name = name, k.time_ns = ns, k.dram_read = rd, k.dram_write = wr, k.l2_bytes = 2 * (rd + wr);
    k.tensor_ops = tensor, k.fadd = fadd, k.fmul = fmul, k.ffma = ffma;
    k.peak_tensor_flops = 1e15, k.peak_fp32_flops = 1e14, k.peak_dram_bytes = 1e12;
    return k;
}

// Traced kernels arrive sorted by start time; the join orders them by launch (correlation id).
std::vector<KernelRecord> traced_step() {
    return {traced("void layernorm_forward_kernel<int>(float*, int)", 11, SubBlock::ln1, Phase::fwd, 0),
            traced("sm90_xmma_gemm_bf16bf16", 12, SubBlock::qkv, Phase::fwd, 0),
            traced("sm90_xmma_gemm_bf16bf16", 15, SubBlock::qkv, Phase::fwd, 1),
            traced("void layernorm_forward_kernel<int>(float*, int)", 14, SubBlock::ln1, Phase::fwd, 1)};
}
std::vector<KernelCounters> counted_step() {
    return {counted("void layernorm_forward_kernel<int>(float*, int)", 2000, 4e6, 2e6, 0, 1e5, 2e5, 3e5),
            counted("sm90_xmma_gemm_bf16bf16", 10000, 1e6, 0.5e6, 2.0 * 512 * 768 * 2304, 0, 0, 1e3),
            counted("void layernorm_forward_kernel<int>(float*, int)", 3000, 4e6, 2e6, 0, 1e5, 2e5, 3e5),
            counted("sm90_xmma_gemm_bf16bf16", 12000, 1e6, 0.5e6, 2.0 * 512 * 768 * 2304, 0, 0, 1e3)};
}

TEST(ProfilerCounters, JoinsByLaunchOrder) {
    std::vector<KernelCounters> k = counted_step();
    ASSERT_EQ(join_by_launch_order(traced_step(), k), "");
    EXPECT_EQ(k[0].where.subblock, (int)SubBlock::ln1);
    EXPECT_EQ(k[1].where.subblock, (int)SubBlock::qkv);
    EXPECT_EQ(k[1].where.layer, 0);
    EXPECT_EQ(k[2].where.subblock, (int)SubBlock::ln1); // correlation 14 launched before 15
    EXPECT_EQ(k[2].where.layer, 1);
    EXPECT_EQ(k[3].where.layer, 1);
}

// Auto range names ranges by index: they take the traced kernels' names along with their attribution.
TEST(ProfilerCounters, JoinNamesRangesNamedByIndex) {
    std::vector<KernelCounters> k = counted_step();
    for (size_t i = 0; i < k.size(); i++) k[i].name = std::to_string(i);
    ASSERT_EQ(join_by_launch_order(traced_step(), k), "");
    EXPECT_EQ(k[0].name, "void layernorm_forward_kernel<int>(float*, int)");
    EXPECT_EQ(k[1].name, "sm90_xmma_gemm_bf16bf16");
    EXPECT_EQ(k[2].where.subblock, (int)SubBlock::ln1);
    EXPECT_EQ(k[2].where.layer, 1);
    EXPECT_TRUE(is_range_index("12"));
    EXPECT_FALSE(is_range_index("f12"));
    EXPECT_FALSE(is_range_index(""));
    k.pop_back();
    EXPECT_NE(join_by_launch_order(traced_step(), k).find("launched 3 kernels"), std::string::npos);
}

TEST(ProfilerCounters, JoinRefusesMismatches) {
    std::vector<KernelCounters> k = counted_step();
    k.pop_back();
    EXPECT_NE(join_by_launch_order(traced_step(), k).find("launched 3 kernels, the traced step 4"),
              std::string::npos);
    EXPECT_EQ(k[0].where.subblock, -1);
    k = counted_step();
    std::swap(k[0], k[1]);
    EXPECT_NE(join_by_launch_order(traced_step(), k).find("kernel 0 is sm90_xmma_gemm_bf16bf16"), std::string::npos);
    EXPECT_EQ(kernel_base_name("void f<int>(float*)"), "f<int>");
    EXPECT_EQ(kernel_base_name("f"), "f");
}

// Sums by hand: counts add, rates come from the sums, floors add as seconds.
// The counter's unit comes from a calibration GEMM: if a counted op were worth 2 FLOPs, every kernel's tensor
// FLOPs and tensor peak (counted in the same unit) double before they are aggregated, so the tensor floor
// stays what the counts gave; a GEMM that counted nothing leaves the report as it was.
TEST(ProfilerCounters, TensorOpsAndTensorPeakAreScaledByTheCalibrationGemm) {
    EXPECT_DOUBLE_EQ(tensor_flops_per_op(2.0 * 1024 * 1024 * 1024, 1024, 1024, 1024), 1.0);
    EXPECT_DOUBLE_EQ(tensor_flops_per_op(1024.0 * 1024 * 1024, 1024, 1024, 1024), 2.0);
    EXPECT_EQ(tensor_flops_per_op(0, 1024, 1024, 1024), 0.0);
    CounterReport r;
    r.kernels = counted_step();
    std::vector<double> ops, peak, floor_s;
    for (const KernelCounters& k : r.kernels)
        ops.push_back(k.tensor_ops), peak.push_back(k.peak_tensor_flops), floor_s.push_back(k.compute_floor_s());
    scale_tensor_ops(r, 0.0);
    EXPECT_EQ(r.tensor_flops_per_op, 0.0);
    for (size_t i = 0; i < r.kernels.size(); i++) EXPECT_EQ(r.kernels[i].tensor_ops, ops[i]);
    scale_tensor_ops(r, 2.0);
    EXPECT_EQ(r.tensor_flops_per_op, 2.0);
    for (size_t i = 0; i < r.kernels.size(); i++) {
        EXPECT_DOUBLE_EQ(r.kernels[i].tensor_ops, 2.0 * ops[i]);
        EXPECT_DOUBLE_EQ(r.kernels[i].peak_tensor_flops, 2.0 * peak[i]);
        EXPECT_DOUBLE_EQ(r.kernels[i].compute_floor_s(), floor_s[i]);
    }
}

TEST(ProfilerCounters, AggregatesSubBlocksFromSums) {
    CounterReport r;
    r.kernels = counted_step();
    ASSERT_EQ(join_by_launch_order(traced_step(), r.kernels), "");
    aggregate_counters(r);
    ASSERT_EQ(r.subblocks.size(), 2u);
    const CounterRow* ln = find_counter_row(r, (int)SubBlock::ln1, (int)Phase::fwd);
    const CounterRow* qkv = find_counter_row(r, (int)SubBlock::qkv, (int)Phase::fwd);
    ASSERT_TRUE(ln && qkv);
    EXPECT_EQ(find_counter_row(r, (int)SubBlock::qkv, (int)Phase::bwd), nullptr);

    EXPECT_EQ(ln->kernels, 2);
    EXPECT_EQ(ln->time_ns, 5000);
    EXPECT_EQ(ln->fp32_flops, 2 * (1e5 + 2e5 + 2 * 3e5)); // fadd + fmul + 2·ffma, two launches
    EXPECT_EQ(ln->tensor_flops, 0);
    EXPECT_EQ(ln->dram_bytes, 12e6);
    EXPECT_EQ(ln->l2_bytes, 24e6);
    EXPECT_DOUBLE_EQ(ln->tflops(), 1.8e6 / 5e-6 / 1e12);
    EXPECT_DOUBLE_EQ(ln->gbps(), 12e6 / 5e-6 / 1e9);
    EXPECT_DOUBLE_EQ(ln->intensity(), 1.8e6 / 12e6);
    EXPECT_DOUBLE_EQ(ln->memory_floor_s, 12e6 / 1e12);
    EXPECT_DOUBLE_EQ(ln->compute_floor_s(), 1.8e6 / 1e14);
    EXPECT_DOUBLE_EQ(ln->fp32_ceiling_tflops(), 100);
    EXPECT_DOUBLE_EQ(ln->dram_ceiling_gbps(), 1000);
    EXPECT_STREQ(ln->bound(), "memory");
    EXPECT_DOUBLE_EQ(ln->pct_of_roofline(), 100 * (12e6 / 1e12) / 5e-6);

    const double gemm = 2.0 * 512 * 768 * 2304;
    EXPECT_EQ(qkv->tensor_flops, 2 * gemm); // exactly the analytic 2·M·N·K per launch
    EXPECT_EQ(qkv->fp32_flops, 2 * 2e3);
    EXPECT_EQ(qkv->dram_bytes, 3e6);
    EXPECT_DOUBLE_EQ(qkv->compute_floor_s(), 2 * gemm / 1e15 + 4e3 / 1e14);
    EXPECT_DOUBLE_EQ(qkv->tensor_ceiling_tflops(), 1000);
    EXPECT_STREQ(qkv->bound(), "compute");
    EXPECT_DOUBLE_EQ(qkv->tflops(), (2 * gemm + 4e3) / 22e-6 / 1e12);

    EXPECT_EQ(r.total.kernels, 4);
    EXPECT_EQ(r.total.time_ns, 27000);
    EXPECT_EQ(r.total.dram_bytes, 15e6);
    EXPECT_DOUBLE_EQ(r.total.tflops(), r.total.flops() / 27e-6 / 1e12);

    // Per kernel: one row per (name, sub-block, phase), longest first.
    ASSERT_EQ(r.per_kernel.size(), 2u);
    EXPECT_EQ(r.per_kernel[0].kernel, "sm90_xmma_gemm_bf16bf16");
    EXPECT_EQ(r.per_kernel[0].kernels, 2);
    EXPECT_EQ(r.per_kernel[0].time_ns, 22000);
}

// The counted step is joined to the last traced step: the kernels that started inside its span, edges included.
TEST(ProfilerCounters, LastStepKernelsAreThoseThatStartedInTheLastStep) {
    ProfileRecords rec;
    EXPECT_TRUE(last_step_kernels(rec).empty());
    rec.steps = {{1, 0, 1000, 0}, {2, 1000, 2000, 0}};
    uint32_t corr = 0;
    for (uint64_t start : {10, 999, 1000, 1500, 2000, 2001}) {
        KernelRecord k = traced("k", corr++, SubBlock::qkv, Phase::fwd, 0);
        k.start_ns = start, k.end_ns = start + 5;
        rec.kernels.push_back(k);
    }
    std::vector<uint32_t> got;
    for (const KernelRecord& k : last_step_kernels(rec)) got.push_back(k.correlation);
    EXPECT_EQ(got, (std::vector<uint32_t>{2, 3, 4}));
}

// The summary table puts the analytic GEMM FLOPs next to the counted tensor FLOPs (equal: both 2·M·N·K).
TEST(ProfilerCounters, MeasuredVsAnalyticTable) {
    CounterReport r;
    r.collected = true;
    r.kernels = counted_step();
    ASSERT_EQ(join_by_launch_order(traced_step(), r.kernels), "");
    aggregate_counters(r);
    CostTable costs{};
    costs[(int)SubBlock::qkv][(int)Phase::fwd] = {2 * 2.0 * 512 * 768 * 2304, 0, 2.5e6};
    std::string t = measured_vs_analytic(r, costs, true);
    EXPECT_NE(t.find("Measured vs analytic"), std::string::npos);
    const std::string gflop = strprintf("%.3f", 2 * 2.0 * 512 * 768 * 2304 / 1e9);
    size_t qkv = t.find("  qkv ");
    ASSERT_NE(qkv, std::string::npos) << t;
    std::string row = t.substr(qkv, t.find('\n', qkv) - qkv);
    // subblock phase kern ms gemm_an tensor_hw ...: the analytic and the counted GFLOP side by side.
    std::istringstream cells(row);
    std::vector<std::string> c{std::istream_iterator<std::string>(cells), {}};
    ASSERT_GE(c.size(), 6u) << row;
    EXPECT_EQ(c[4], gflop) << row;
    EXPECT_EQ(c[5], gflop) << row;
    // The same rows in counters.csv and profile.json, unscaled.
    Report rep;
    rep.counters = r;
    rep.costs = costs;
    rep.has_model = true;
    const std::string csv = counters_csv(rep);
    EXPECT_EQ(csv.substr(0, csv.find('\n')),
              "subblock,phase,kernels,time_us,gemm_flops_analytic,tensor_flops_counted,elementwise_flops_analytic,"
              "fp32_flops_counted,dram_bytes_analytic,dram_bytes_counted,l2_bytes_counted,tflops,intensity,"
              "pct_of_roofline,bound");
    const nlohmann::json j = nlohmann::json::parse(profile_json(rep));
    const nlohmann::json& rows = j["counters"]["subblocks"];
    ASSERT_EQ(rows.size(), r.subblocks.size() + 1) << rows; // and the total
    EXPECT_EQ(rows.back()["subblock"], "total");
    bool seen = false;
    for (const auto& x : rows)
        if (x["subblock"] == "qkv" && x["phase"] == "fwd") {
            seen = true;
            EXPECT_EQ(x["gemm_flops_analytic"].get<double>(), 2 * 2.0 * 512 * 768 * 2304);
            EXPECT_EQ(x["tensor_flops_counted"].get<double>(), find_counter_row(r, (int)SubBlock::qkv, (int)Phase::fwd)->tensor_flops);
        }
    EXPECT_TRUE(seen) << rows;
    CounterReport none;
    none.note = "no permission to read GPU performance counters";
    EXPECT_NE(measured_vs_analytic(none, costs, true).find("counters: no permission"), std::string::npos);
}

// Counted figures come from kernel replay (each kernel alone, memory saved and restored, L2 disturbed): the
// summary's table, roofline.csv's columns and kernel rows, and profile.json say so.
TEST(ProfilerCounters, ReplayFiguresAreLabelledAsSuch) {
    Report rep;
    rep.counters.collected = true;
    rep.counters.kernels = counted_step();
    ASSERT_EQ(join_by_launch_order(traced_step(), rep.counters.kernels), "");
    aggregate_counters(rep.counters);
    const std::string table = measured_vs_analytic(rep.counters, CostTable{}, false);
    EXPECT_NE(table.find("== Measured vs analytic (hardware counters of one extra step under kernel replay;"),
              std::string::npos)
        << table;
    EXPECT_NE(table.find(std::string("  ") + REPLAY_NOTE + "\n"), std::string::npos) << table;
    const std::string roof = roofline_csv(rep);
    EXPECT_NE(roof.substr(0, roof.find('\n')).find(",replay_flops,replay_bytes"), std::string::npos) << roof;
    EXPECT_NE(roof.find("\nkernel_replay,qkv,fwd,"), std::string::npos) << roof;
    const nlohmann::json j = nlohmann::json::parse(profile_json(rep));
    EXPECT_EQ(j["counters"]["method"], REPLAY_NOTE);
    EXPECT_EQ(j["counters"]["kernels"], rep.counters.kernels.size());
}

// The activity records are read as the structs of the CUPTI headers built against: another API version at run
// time is refused with one line naming both, and the build line names both.
TEST(ProfilerCounters, CuptiVersionMismatchIsRefused) {
    EXPECT_EQ(cupti_version_mismatch(130000, 130000), "");
    const std::string why = cupti_version_mismatch(130100, 130000);
    EXPECT_NE(why.find("API version 130100, this program was built for 130000"), std::string::npos) << why;
    EXPECT_EQ(why.find('\n'), std::string::npos) << why;
    EXPECT_NE(cupti_version_mismatch(120000, 130000), "");
    EXPECT_EQ(cupti_version_text(130000, 130000), "CUPTI API 130000");
    EXPECT_EQ(cupti_version_text(130100, 130000), "CUPTI API 130100 (built for 130000)");
}

// Kernels the join could not attribute land in one "(none)" row, after the attributed ones.
TEST(ProfilerCounters, UnattributedKernelsGoLast) {
    CounterReport r;
    r.kernels = counted_step();
    r.kernels[0].where = {(int)SubBlock::ln1, (int)Phase::fwd, 0, 0};
    aggregate_counters(r);
    ASSERT_EQ(r.subblocks.size(), 2u);
    EXPECT_EQ(r.subblocks[0].subblock, (int)SubBlock::ln1);
    EXPECT_EQ(r.subblocks[1].subblock, -1);
    EXPECT_EQ(r.subblocks[1].kernels, 3);
}

} // namespace
