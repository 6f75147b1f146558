// Profiler aggregation, roofline model and writers (llmc/profiler/roofline.h, report.h, writers.h),
// from synthetic records: no GPU needed. Times below are in nanoseconds unless a name says otherwise.
#include <algorithm>
#include <climits>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <gtest/gtest.h>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "llmc/profiler/findings.h"
#include "llmc/profiler/writers.h"
#include "test/test_util.h"

using namespace llmc;
using namespace llmc::prof;
using nlohmann::json;

namespace {

constexpr uint64_t US = 1000, MS = 1000000;

Attribution at(SubBlock s, Phase p, int layer = -1, int step = 0) { return {(int)s, (int)p, layer, step}; }

KernelRecord kernel(const std::string& name, uint64_t start, uint64_t end, Attribution w, uint32_t stream = 7,
                    uint32_t corr = 0) {
    KernelRecord k;
    k.name = name, k.start_ns = start, k.end_ns = end, k.stream = stream, k.correlation = corr, k.where = w;
    k.grid[0] = 128, k.grid[1] = 2, k.grid[2] = 1, k.block[0] = 256, k.block[1] = k.block[2] = 1;
    k.registers_per_thread = 40, k.static_smem = 1024, k.dynamic_smem = 4096;
    return k;
}
ApiRecord api(const std::string& name, uint64_t start, uint64_t end, uint32_t corr = 0) {
    ApiRecord a;
    a.name = name, a.start_ns = start, a.end_ns = end, a.thread = 11, a.correlation = corr;
    return a;
}
StepRecord step(int n, uint64_t start, uint64_t end, long tokens) {
    StepRecord s;
    s.step = n, s.start_ns = start, s.end_ns = end, s.tokens = tokens;
    return s;
}
RangeRecord range(const std::string& name, uint64_t start, uint64_t end, int depth, Attribution w = {}) {
    RangeRecord r;
    r.name = name, r.start_ns = start, r.end_ns = end, r.thread = 11, r.depth = depth, r.where = w;
    return r;
}

// GPT-2 124M at B=16, T=1024, the shape every roofline test below works out by hand.
ProfileContext gpt2_124m_context() {
    ProfileContext c;
    c.program = "test";
    c.device = "Test GPU";
    GPT2Config g = gpt2_config_for_depth(12);
    c.model = g;
    c.num_parameters = num_parameters(g);
    c.B = 16, c.T = 1024, c.grad_accum = 1;
    c.ceilings = {798, 0, 3000, "given"};
    return c;
}

/*
 * Two steps of 10 ms. Each: an H2D token copy, a qkv GEMM (stream 7) overlapping a layernorm on stream 8,
 * attention, a memset outside any range, an AdamW kernel, a D2H copy, with the launches (correlated) and a
 * cudaEventSynchronize on the CPU, ranges on thread 11, and power samples.
 */
ProfileRecords two_steps() {
    ProfileRecords r;
    for (int s = 0; s < 2; s++) {
        uint64_t t = 1 * MS + s * 10 * MS; // step start
        uint32_t c = 100 * (s + 1);
        r.steps.push_back(step(s, t, t + 10 * MS, 16384));
        r.ranges.push_back(range("step", t, t + 10 * MS, 0, {-1, -1, -1, s}));
        r.ranges.push_back(range("forward", t + 10 * US, t + 3 * MS, 1, {-1, (int)Phase::fwd, -1, s}));
        r.ranges.push_back(range("qkv", t + 20 * US, t + 40 * US, 2, at(SubBlock::qkv, Phase::fwd, 0, s)));
        // An inner range ending 1 ns after its parent (timer jitter): the trace must still nest.
        r.ranges.push_back(
            range("attention", t + 40 * US, t + 3 * MS + 1, 2, at(SubBlock::attention, Phase::fwd, 0, s)));
        r.api.push_back(api("cudaMemcpyAsync", t + 5 * US, t + 8 * US, c + 1));
        r.api.push_back(api("cudaLaunchKernel", t + 20 * US, t + 25 * US, c + 2));
        r.api.push_back(api("cudaLaunchKernel", t + 30 * US, t + 35 * US, c + 3));
        r.api.push_back(api("cudaLaunchKernel", t + 40 * US, t + 45 * US, c + 4));
        r.api.push_back(api("cudaMemsetAsync", t + 3 * MS + 10 * US, t + 3 * MS + 15 * US, c + 5));
        r.api.push_back(api("cudaLaunchKernel", t + 3 * MS + 20 * US, t + 3 * MS + 25 * US, c + 6));
        r.api.push_back(api("cudaMemcpyAsync", t + 3 * MS + 30 * US, t + 3 * MS + 35 * US, c + 7));
        r.api.push_back(api("cudaEventSynchronize", t + 3 * MS + 40 * US, t + 9 * MS, 0));
        MemcpyRecord h2d;
        h2d.kind = CopyKind::HtoD, h2d.bytes = 131072, h2d.start_ns = t + 10 * US, h2d.end_ns = t + 20 * US;
        h2d.stream = 7, h2d.correlation = c + 1;
        r.memcpys.push_back(h2d);
        r.kernels.push_back(kernel("nvjet_hsh_256x128_64x4_2x1_v_bz_coopA_NTN", t + 100 * US, t + 1100 * US,
                                   at(SubBlock::qkv, Phase::fwd, 0, s), 7, c + 2));
        r.kernels.push_back(kernel("void llmc::layernorm_forward_kernel<true>(__nv_bfloat16*, float*, int, int)",
                                   t + 600 * US, t + 1600 * US, at(SubBlock::ln2, Phase::fwd, 0, s), 8, c + 3));
        r.kernels.push_back(kernel("void llmc::attention_detail::attention_forward_kernel<64, 64>(__nv_bfloat16*, int)",
                                   t + 1600 * US, t + 3600 * US, at(SubBlock::attention, Phase::fwd, 0, s), 7, c + 4));
        MemsetRecord ms;
        ms.bytes = 4096, ms.start_ns = t + 3600 * US, ms.end_ns = t + 3700 * US, ms.stream = 7, ms.correlation = c + 5;
        r.memsets.push_back(ms);
        r.kernels.push_back(kernel("void llmc::adamw_kernel(__nv_bfloat16*, float*)", t + 3700 * US, t + 8700 * US,
                                   at(SubBlock::optimizer, Phase::opt, -1, s), 7, c + 6));
        MemcpyRecord d2h;
        d2h.kind = CopyKind::DtoH, d2h.bytes = 8, d2h.start_ns = t + 8700 * US, d2h.end_ns = t + 8800 * US;
        d2h.stream = 7, d2h.correlation = c + 7;
        r.memcpys.push_back(d2h);
        SyncRecord sy;
        sy.type = "event", sy.start_ns = t + 3 * MS + 50 * US, sy.end_ns = t + 8 * MS + 850 * US;
        r.syncs.push_back(sy);
    }
    // Outside the window: set-up work that must not count.
    r.api.push_back(api("cudaMalloc", 100 * US, 900 * US));
    r.kernels.push_back(kernel("void llmc::copy_float_to_bf16_kernel(__nv_bfloat16*, float const*, unsigned long)",
                               200 * US, 300 * US, {}, 7, 0));
    for (uint64_t t = 0; t <= 22 * MS; t += 1 * MS) {
        PowerSample p;
        p.t_ns = t, p.power_w = 300, p.sm_clock_mhz = 1980, p.mem_clock_mhz = 2619, p.temperature_c = 50;
        r.power.push_back(p);
    }
    r.power[5].power_w = 400; // a peak inside step 0
    return r;
}

std::string first_line(const std::string& path) {
    std::ifstream f(path);
    std::string line;
    std::getline(f, line);
    return line;
}

const KernelRow* find_kernel(const Report& r, const std::string& fragment, int subblock) {
    for (const KernelRow& k : r.kernels)
        if (k.name.find(fragment) != std::string::npos && k.subblock == subblock) return &k;
    return nullptr;
}
const SubBlockRow* find_cell(const Report& r, SubBlock s, Phase p) {
    for (const SubBlockRow& b : r.subblocks)
        if (b.subblock == (int)s && b.phase == (int)p) return &b;
    return nullptr;
}

} // namespace

// ---------------------------------------------------------------------------------------------------------
// Attribution
// ---------------------------------------------------------------------------------------------------------

TEST(ProfilerAttribution, PackUnpackRoundTrip) {
    std::vector<Attribution> cases = {{},
                                      {(int)SubBlock::qkv, (int)Phase::fwd, 11, 0},
                                      {(int)SubBlock::grad_norm, (int)Phase::opt, -1, 3},
                                      {-1, (int)Phase::bwd, 47, 0xFFFFFE},
                                      {0, 0, 0xFFFE, 0}};
    for (const Attribution& a : cases) {
        Attribution b = unpack_range_id(pack_range_id(a));
        EXPECT_EQ(b.subblock, a.subblock);
        EXPECT_EQ(b.phase, a.phase);
        EXPECT_EQ(b.layer, a.layer);
        EXPECT_EQ(b.step, a.step);
    }
    // The layout of doc/profiling.md ("Attribution"): step (24 bits) | layer (16) | phase (8) | subblock (8).
    EXPECT_EQ(pack_range_id({(int)SubBlock::qkv, (int)Phase::bwd, 5, 2}),
              (2ull << 32) | (5ull << 16) | (1ull << 8) | 2ull);
    EXPECT_EQ(pack_range_id({}), 0xFFFFFFFFFFFFFFull); // 56 bits, all "none"
}

// As the collector does: each Range pushes its id, a launch takes the innermost one, and the kernel record
// carries its decoded fields. The report then files the kernel under the innermost sub-block and layer.
TEST(ProfilerAttribution, KernelsCarryTheInnermostRange) {
    std::vector<uint64_t> stack;
    stack.push_back(pack_range_id({-1, -1, -1, 1}));                                 // step
    stack.push_back(pack_range_id({-1, (int)Phase::bwd, -1, 1}));                    // backward
    stack.push_back(pack_range_id({-1, (int)Phase::bwd, 4, 1}));                     // layer 4
    stack.push_back(pack_range_id({(int)SubBlock::fc_proj, (int)Phase::bwd, 4, 1})); // fc_proj
    ProfileRecords rec;
    rec.steps.push_back(step(1, 0, 10 * MS, 1024));
    rec.kernels.push_back(kernel("nvjet_dgelu", 1 * MS, 2 * MS, unpack_range_id(stack.back())));
    stack.pop_back(); // back in "layer 4": a launch there has the layer but no sub-block
    rec.kernels.push_back(kernel("stray_kernel", 3 * MS, 4 * MS, unpack_range_id(stack.back())));
    EXPECT_EQ(rec.kernels[0].where.layer, 4);
    EXPECT_EQ(rec.kernels[0].where.step, 1);
    EXPECT_EQ(rec.kernels[1].where.subblock, -1);
    EXPECT_EQ(rec.kernels[1].where.layer, 4);

    Report r = build_report(rec, gpt2_124m_context());
    const SubBlockRow* fc_proj = find_cell(r, SubBlock::fc_proj, Phase::bwd);
    ASSERT_NE(fc_proj, nullptr);
    EXPECT_EQ(fc_proj->calls, 1);
    EXPECT_DOUBLE_EQ(fc_proj->time_us, 1000);
    bool none_bwd = false;
    for (const SubBlockRow& b : r.subblocks)
        if (b.subblock == -1 && b.phase == (int)Phase::bwd) none_bwd = b.calls == 1 && b.time_us == 1000;
    EXPECT_TRUE(none_bwd) << "the kernel outside a sub-block is reported as (none) bwd";
}

// ---------------------------------------------------------------------------------------------------------
// Aggregation
// ---------------------------------------------------------------------------------------------------------

TEST(ProfilerReport, CategoriesFromKernelNames) {
    EXPECT_STREQ(category_name(kernel_category("nvjet_hsh_128x256_64x4_2x1_v_bz_coopA_NTT")), "gemm");
    EXPECT_STREQ(category_name(kernel_category("void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64>(Params)")),
              "gemm");
    EXPECT_STREQ(category_name(kernel_category("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64")), "gemm");
    EXPECT_STREQ(category_name(kernel_category("void llmc::attention_detail::attention_backward_dq_kernel<64, 64>(int)")), "attention");
    EXPECT_STREQ(category_name(kernel_category("void llmc::layernorm_backward_final_kernel(__nv_bfloat16*)")), "norm");
    EXPECT_STREQ(category_name(kernel_category("void llmc::global_norm_partial_kernel(float*)")), "reduction");
    EXPECT_STREQ(category_name(kernel_category("void llmc::bias_backward_partial_kernel(float*)")), "reduction");
    EXPECT_STREQ(category_name(kernel_category("void llmc::accumulate_loss_kernel(float*, float const*, int, float)")), "reduction");
    EXPECT_STREQ(category_name(kernel_category("void llmc::encoder_backward_wte_kernel(__nv_bfloat16*)")), "reduction");
    EXPECT_STREQ(category_name(kernel_category("void cub::CUB_200700_900_NS::DeviceRadixSortOnesweepKernel<Policy>(int)")), "reduction");
    EXPECT_STREQ(category_name(kernel_category("void cub::CUB_200700_900_NS::DeviceScanKernel<Policy>(int)")), "reduction");
    EXPECT_STREQ(category_name(kernel_category("void llmc::fused_classifier_kernel(__nv_bfloat16*)")), "reduction");
    EXPECT_STREQ(category_name(kernel_category("void llmc::encoder_forward_kernel(__nv_bfloat16*)")), "elementwise");
    EXPECT_STREQ(category_name(kernel_category("void llmc::gelu_forward_kernel(__nv_bfloat16*)")), "elementwise");
    EXPECT_STREQ(category_name(kernel_category("void llmc::copy_float_to_bf16_kernel(__nv_bfloat16*)")), "elementwise");
    EXPECT_STREQ(category_name(kernel_category("void llmc::adamw_kernel(__nv_bfloat16*)")), "optimizer");
    EXPECT_STREQ(category_name(kernel_category("mystery")), "other");
    EXPECT_EQ(short_kernel_name("void llmc::k<true>(float*, void (*)(int))"), "k<true>");
    EXPECT_EQ(short_kernel_name("void cub::NS::detail::Kernel<cub::Policy, 4>(int)"), "Kernel<cub::Policy, 4>");
    EXPECT_EQ(short_kernel_name("nvjet_hsh_256x128"), "nvjet_hsh_256x128");
}

TEST(ProfilerReport, TablesSumToTheTotal) {
    Report r = build_report(two_steps(), gpt2_124m_context());
    // Per step: memcpy 10 + qkv 1000 + ln 1000 + attention 2000 + memset 100 + adamw 5000 + memcpy 100 us.
    // The set-up kernel before the first step is outside the window.
    EXPECT_DOUBLE_EQ(r.gpu_time_us, 2 * 9210.0);
    EXPECT_DOUBLE_EQ(r.kernel_time_us, 2 * 9000.0);
    double kernels = 0, kernel_pct = 0, cells = 0;
    long calls = 0;
    for (const KernelRow& k : r.kernels) kernels += k.total_us, kernel_pct += k.pct, calls += k.calls;
    for (const SubBlockRow& b : r.subblocks) cells += b.time_us;
    EXPECT_DOUBLE_EQ(kernels, r.gpu_time_us);
    EXPECT_DOUBLE_EQ(cells, r.gpu_time_us);
    EXPECT_DOUBLE_EQ(r.total.time_us, r.gpu_time_us);
    EXPECT_NEAR(kernel_pct, 100.0, 1e-9);
    EXPECT_EQ(calls, 14);
    EXPECT_EQ(r.total.calls, 14);
    for (size_t i = 1; i < r.kernels.size(); i++) EXPECT_GE(r.kernels[i - 1].total_us, r.kernels[i].total_us);

    ASSERT_STREQ(category_name(r.kernels[0].category), "optimizer");
    EXPECT_EQ(r.kernels[0].calls, 2);
    EXPECT_DOUBLE_EQ(r.kernels[0].avg_us, 5000);
    EXPECT_NEAR(r.kernels[0].pct, 100 * 10000.0 / 18420.0, 1e-9);
    const KernelRow* ln = find_kernel(r, "layernorm_forward_kernel", (int)SubBlock::ln2);
    ASSERT_NE(ln, nullptr);
    EXPECT_STREQ(category_name(ln->category), "norm");
    const KernelRow* memset = find_kernel(r, "[memset]", -1);
    ASSERT_NE(memset, nullptr);
    EXPECT_STREQ(category_name(memset->category), "memset");
    EXPECT_DOUBLE_EQ(memset->total_us, 200);
    EXPECT_NE(find_kernel(r, "[memcpy HtoD]", -1), nullptr);
    EXPECT_EQ(find_kernel(r, "copy_float_to_bf16", -1), nullptr);

    // Roofline of a cell against its time per step: qkv fwd took 1000 us per step.
    const SubBlockRow* qkv = find_cell(r, SubBlock::qkv, Phase::fwd);
    ASSERT_NE(qkv, nullptr);
    EXPECT_DOUBLE_EQ(qkv->roof.time_s, 1e-3);
    EXPECT_NEAR(qkv->roof.tflops, 695784701952.0 / 1e-3 / 1e12, 1e-9);
    // Modelled cells without kernels in this window are listed with no time.
    const SubBlockRow* fc = find_cell(r, SubBlock::fc, Phase::bwd);
    ASSERT_NE(fc, nullptr);
    EXPECT_EQ(fc->calls, 0);
    EXPECT_TRUE(std::isnan(fc->roof.tflops));
    EXPECT_EQ(find_cell(r, SubBlock::gelu, Phase::fwd), nullptr) << "gelu is fused into fc on the GPU";
}

TEST(ProfilerReport, BusyIsTheUnionOfOverlappingStreams) {
    ProfileRecords rec;
    rec.steps.push_back(step(0, 0, 1000 * US, 100));
    rec.kernels.push_back(kernel("a", 100 * US, 300 * US, at(SubBlock::qkv, Phase::fwd), 7));
    rec.kernels.push_back(kernel("b", 400 * US, 500 * US, at(SubBlock::qkv, Phase::bwd), 7));
    rec.kernels.push_back(kernel("c", 250 * US, 450 * US, at(SubBlock::optimizer, Phase::opt), 8));
    rec.kernels.push_back(kernel("d", 900 * US, 1200 * US, {}, 8)); // runs past the step's end: clipped
    Report r = build_report(rec, ProfileContext{});
    ASSERT_EQ(r.steps.size(), 1u);
    const StepRow& s = r.steps[0];
    EXPECT_DOUBLE_EQ(s.wall_ms, 1.0);
    EXPECT_DOUBLE_EQ(s.gpu_busy_ms, 0.4 + 0.1); // [100, 500) and [900, 1000)
    EXPECT_DOUBLE_EQ(s.idle_ms, 0.5);
    EXPECT_DOUBLE_EQ(s.fwd_ms, 0.2);
    EXPECT_DOUBLE_EQ(s.bwd_ms, 0.1);
    EXPECT_DOUBLE_EQ(s.opt_ms, 0.2);
    EXPECT_DOUBLE_EQ(s.other_ms, 0.3);
    EXPECT_DOUBLE_EQ(s.tok_s, 100 / 1e-3);
    EXPECT_EQ(s.gaps, 2); // [0, 100) and [500, 900)
    EXPECT_EQ(r.idle_gaps, 2);
    EXPECT_DOUBLE_EQ(r.idle_us, 500);
    EXPECT_TRUE(std::isnan(s.energy_j)) << "no power samples";
}

TEST(ProfilerReport, IdleGapsNameTheCpuCall) {
    ProfileRecords rec;
    rec.steps.push_back(step(3, 0, 10 * MS, 1000));
    rec.ranges.push_back(range("step", 0, 10 * MS, 0));
    rec.ranges.push_back(range("forward", 1 * MS, 6 * MS, 1));
    rec.kernels.push_back(kernel("k0", 0, 2 * MS, {}));
    rec.kernels.push_back(kernel("k1", 5 * MS, 9 * MS, {}));
    rec.kernels.push_back(kernel("k2", 9 * MS + 5 * US, 10 * MS, {}));
    rec.api.push_back(api("cudaStreamSynchronize", 1500 * US, 4 * MS));
    rec.api.push_back(api("cudaLaunchKernel", 4500 * US, 4600 * US));
    rec.api.push_back(api("cuLaunchKernel", 4510 * US, 4590 * US)); // the driver call inside the runtime call
    Report r = build_report(rec, ProfileContext{});
    // Gaps: [2 ms, 5 ms) and [9 ms, 9.005 ms).
    EXPECT_EQ(r.idle_gaps, 2);
    EXPECT_DOUBLE_EQ(r.idle_us, 3005);
    ASSERT_EQ(r.largest_gaps.size(), 2u);
    const IdleGap& g = r.largest_gaps[0];
    EXPECT_EQ(g.step, 3);
    EXPECT_DOUBLE_EQ(g.offset_us, 2000);
    EXPECT_DOUBLE_EQ(g.dur_us, 3000);
    EXPECT_EQ(g.api, "cudaStreamSynchronize");
    EXPECT_DOUBLE_EQ(g.api_us, 2000);
    EXPECT_DOUBLE_EQ(g.outside_api_us, 900); // 3 ms less the sync's 2 ms and the launch's 0.1 ms
    EXPECT_EQ(g.range, "forward");           // innermost range around 3.5 ms
    EXPECT_EQ(r.largest_gaps[1].api, "");
    EXPECT_EQ(r.largest_gaps[1].range, "step");
    // Idle time by CPU activity: sync 2 ms, launch 0.1 ms, the rest (0.9 + 0.005 ms) outside CUDA calls.
    std::map<std::string, double> by;
    for (const NamedTime& n : r.idle_by_cpu) by[n.name] = n.total_us;
    EXPECT_DOUBLE_EQ(by["cudaStreamSynchronize"], 2000);
    EXPECT_DOUBLE_EQ(by["cudaLaunchKernel"], 100);
    EXPECT_DOUBLE_EQ(by["(no CUDA call)"], 905);
    EXPECT_EQ(by.count("cuLaunchKernel"), 0u) << "nested time goes to the outermost call only";
    EXPECT_EQ(r.idle_by_cpu[0].name, "cudaStreamSynchronize");
    EXPECT_NEAR(r.idle_by_cpu[0].pct, 100 * 2000 / 3005.0, 1e-9);
    // Gap sizes: one under 10 us, one of 3 ms.
    EXPECT_EQ(r.gap_sizes[0].calls, 1);
    EXPECT_DOUBLE_EQ(r.gap_sizes[0].total_us, 5);
    EXPECT_EQ(r.gap_sizes[2].calls, 1);
    // CPU shares: each name counts its own calls; the overall share counts nested time once (2.5 + 0.1 ms).
    ASSERT_EQ(r.api.size(), 3u);
    EXPECT_EQ(r.api[2].name, "cuLaunchKernel");
    EXPECT_DOUBLE_EQ(r.api[2].total_us, 80);
    EXPECT_NEAR(r.api_pct, 26.0, 1e-9);
}

TEST(ProfilerReport, ApiAndSyncSharesOfCpuTime) {
    Report r = build_report(two_steps(), gpt2_124m_context());
    std::map<std::string, NamedTime> by;
    for (const NamedTime& a : r.api) by[a.name] = a;
    EXPECT_EQ(by.count("cudaMalloc"), 0u) << "before the first step: outside the window";
    EXPECT_EQ(by["cudaLaunchKernel"].calls, 8);
    EXPECT_DOUBLE_EQ(by["cudaLaunchKernel"].total_us, 40);
    EXPECT_DOUBLE_EQ(by["cudaLaunchKernel"].avg_us, 5);
    EXPECT_NEAR(by["cudaLaunchKernel"].pct, 100 * 40 / 20000.0, 1e-12); // window: 2 steps of 10 ms
    EXPECT_NEAR(by["cudaEventSynchronize"].pct, 100 * 2 * 5960 / 20000.0, 1e-12);
    EXPECT_EQ(r.api[0].name, "cudaEventSynchronize");
    ASSERT_EQ(r.syncs.size(), 1u);
    EXPECT_EQ(r.syncs[0].name, "event");
    EXPECT_EQ(r.syncs[0].calls, 2);
    EXPECT_NEAR(r.syncs[0].pct, 100 * 2 * 5800 / 20000.0, 1e-12);
    EXPECT_NEAR(r.sync_pct, 58.0, 1e-12);
    EXPECT_NEAR(r.api_pct, 100 * (2 * (3 + 5 + 5 + 5 + 5 + 5 + 5 + 5960)) / 20000.0, 1e-12);
}

TEST(ProfilerReport, ThroughputAndMfu) {
    Report r = build_report(two_steps(), gpt2_124m_context());
    EXPECT_EQ(r.num_steps, 2);
    EXPECT_EQ(r.tokens, 32768);
    EXPECT_DOUBLE_EQ(r.wall_s, 0.02);
    EXPECT_DOUBLE_EQ(r.tokens_per_s, 32768 / 0.02);
    // 6N + 12·L·C·T = 6·124,475,904 + 12·12·768·1024
    EXPECT_DOUBLE_EQ(r.flops_per_token, 860101632.0);
    EXPECT_NEAR(r.model_tflops, 1638400.0 * 860101632.0 / 1e12, 1e-9);
    // These synthetic steps run 1409 model TFLOP/s, 177% of the given 798: the ceiling is raised to that and
    // MFU reads 100% of it (RaisedCeilings below).
    EXPECT_NEAR(r.ceiling_raise.compute, 1638400.0 * 860101632.0 / 798e12, 1e-6);
    EXPECT_EQ(r.ceiling_raise.compute_by, "MFU");
    EXPECT_NEAR(r.mfu, 100, 1e-6);
    EXPECT_LE(r.mfu, 100);
}

// Sub-blocks that beat the ceilings (a calibration on a busy machine measured them low): the report raises
// each ceiling to the fastest rate measured against it, says so, and no row shows more than 100%.
TEST(ProfilerReport, RaisedCeilings) {
    ProfileContext ctx = gpt2_124m_context();
    ctx.ceilings = {100, 50, 1000, "calibrated"};
    ProfileRecords rec = two_steps();
    for (StepRecord& s : rec.steps) s.tokens = 64; // MFU stays far below every ceiling here
    Report r = build_report(rec, ctx);
    const CeilingRaise& up = r.ceiling_raise;
    ASSERT_TRUE(up.raised());
    // qkv fwd, 1 ms per step: 12 GEMMs of 2·16384·2304·768 FLOPs (695.8 TFLOP/s) reading 16384 x 768 and
    // 2304 x 768 (+ bias) and writing 16384 x 2304 bf16 (1250.5 GB/s). It is the fastest row against both.
    const double qkv_tflops = 12 * 2.0 * 16384 * 2304 * 768 / 1e-3 / 1e12;
    const double qkv_gbps = 12 * 2.0 * (16384 * 768 + 2304 * 768 + 2304 + 16384 * 2304) / 1e-3 / 1e9;
    EXPECT_EQ(up.compute_by, "qkv fwd");
    EXPECT_EQ(up.memory_by, "qkv fwd");
    EXPECT_NEAR(up.compute, qkv_tflops / 100, 1e-6);
    EXPECT_NEAR(up.memory, qkv_gbps / 1000, 1e-6);
    EXPECT_EQ(up.before.bf16_tflops, 100);
    EXPECT_EQ(up.before.dram_gbps, 1000);
    EXPECT_NEAR(r.context.ceilings.bf16_tflops, qkv_tflops, 1e-3);
    EXPECT_NEAR(r.context.ceilings.fp32_tflops, 50 * up.compute, 1e-3); // both compute ceilings scale together
    EXPECT_NEAR(r.context.ceilings.dram_gbps, qkv_gbps, 1e-3);
    EXPECT_NE(r.context.ceilings.source.find("raised"), std::string::npos);
    for (const SubBlockRow& b : r.subblocks) {
        if (std::isfinite(b.roof.pct_of_roofline)) {
            EXPECT_LE(b.roof.pct_of_roofline, 100) << subblock_label(b.subblock);
        }
    }
    EXPECT_NEAR(find_cell(r, SubBlock::qkv, Phase::fwd)->roof.pct_of_roofline, 100, 1e-6);
    EXPECT_LE(r.total.roof.pct_of_roofline, 100);
    EXPECT_LE(r.mfu, 100);

    // The summary says so; the JSON keeps the measured ceilings; no %roof cell above 100.
    std::string s = format_summary(r);
    EXPECT_NE(s.find("  raised    this profile beat the measured ceilings"), std::string::npos) << s;
    EXPECT_NE(s.find("compute x6.958 (qkv fwd beat it), bandwidth x1.250 (qkv fwd beat it); measured: bf16 100, "
                     "fp32 50 TFLOP/s, DRAM 1000 GB/s"),
              std::string::npos)
        << s;
    json j = json::parse(profile_json(r));
    const json& raised = j["context"]["ceilings"]["raised"];
    ASSERT_TRUE(raised.is_object());
    EXPECT_EQ(raised["compute_by"], "qkv fwd");
    EXPECT_EQ(raised["measured"]["bf16_tflops"], 100.0);
    EXPECT_NEAR(raised["memory_factor"].get<double>(), up.memory, 1e-9);
    for (const json& b : j["subblocks"]) {
        if (!b["roofline"]["pct_of_roofline"].is_null()) {
            EXPECT_LE(b["roofline"]["pct_of_roofline"].get<double>(), 100);
        }
    }
    EXPECT_LE(j["throughput"]["mfu_pct"].get<double>(), 100);

    // Bandwidth nobody beat stays exactly as measured while the compute ceilings rise.
    ctx.ceilings = {100, 50, 1e6, "calibrated"};
    Report compute_only = build_report(rec, ctx);
    EXPECT_EQ(compute_only.ceiling_raise.memory, 1.0);
    EXPECT_EQ(compute_only.ceiling_raise.memory_by, "");
    EXPECT_EQ(compute_only.context.ceilings.dram_gbps, 1e6);
    EXPECT_NE(format_summary(compute_only).find("bandwidth x1 (not beaten)"), std::string::npos);

    // Ceilings nothing beat stay as measured, and the JSON says null.
    ctx.ceilings = {1e6, 1e6, 1e6, "calibrated"};
    Report fast = build_report(rec, ctx);
    EXPECT_FALSE(fast.ceiling_raise.raised());
    EXPECT_EQ(fast.context.ceilings.bf16_tflops, 1e6);
    EXPECT_EQ(format_summary(fast).find("  raised "), std::string::npos);
    EXPECT_TRUE(json::parse(profile_json(fast))["context"]["ceilings"]["raised"].is_null());
}

// ---------------------------------------------------------------------------------------------------------
// Roofline, worked out by hand for GPT-2 124M (L=12, C=768, NH=12, Vp=50304), B=16, T=1024: BT = 16384
// ---------------------------------------------------------------------------------------------------------

TEST(ProfilerRoofline, QkvForwardByHand) {
    CostTable c = analytic_costs(gpt2_config_for_depth(12), 16, 1024, 1);
    const OpCost& qkv = c[(int)SubBlock::qkv][(int)Phase::fwd];
    // 2·(B·T)·(3C)·C per layer, 12 layers.
    EXPECT_EQ(qkv.gemm_flops, 12.0 * 2 * 16384 * 2304 * 768);
    EXPECT_EQ(qkv.gemm_flops, 695784701952.0);
    EXPECT_EQ(qkv.other_flops, 0.0) << "the bias epilogue is not counted";
    double per_layer = 16384.0 * 768 * 2     // ln1 output read (bf16)
                       + 2304.0 * 768 * 2    // qkv weight read
                       + 2304.0 * 2          // qkv bias read
                       + 16384.0 * 2304 * 2; // qkv written
    EXPECT_EQ(per_layer, 104206848.0);
    EXPECT_EQ(qkv.bytes, 12 * per_layer);

    Ceilings ceil{798, 0, 3000, "given"};
    RooflinePoint p = roofline_point(qkv, 1.2e-3, ceil);
    EXPECT_DOUBLE_EQ(p.intensity, 695784701952.0 / 1250482176.0); // ~556 FLOP/B, past the ridge at 266
    EXPECT_DOUBLE_EQ(p.compute_floor_s, 695784701952.0 / 798e12);
    EXPECT_DOUBLE_EQ(p.memory_floor_s, 1250482176.0 / 3000e9);
    EXPECT_STREQ(p.bound, "compute");
    EXPECT_DOUBLE_EQ(p.floor_s, p.compute_floor_s);
    EXPECT_DOUBLE_EQ(p.tflops, 695784701952.0 / 1.2e-3 / 1e12);
    EXPECT_DOUBLE_EQ(p.gbps, 1250482176.0 / 1.2e-3 / 1e9);
    EXPECT_NEAR(p.pct_of_roofline, 100 * p.tflops / 798, 1e-9) << "for a pure GEMM: achieved / bf16 ceiling";
    // Against a slow memory the same op is memory bound.
    EXPECT_STREQ(roofline_point(qkv, 1.2e-3, Ceilings{798, 0, 1000, ""}).bound, "memory");
}

TEST(ProfilerRoofline, FusedOpsByHand) {
    CostTable c = analytic_costs(gpt2_config_for_depth(12), 16, 1024, 1);
    const double BTC = 16384.0 * 768;
    // ln2 fwd = residual1 + LayerNorm in one kernel: reads residual and attn_proj out, weight and bias;
    // writes the residual, the normed output and fp32 mean and rstd. 8 FLOPs per element + 1 for the add.
    double ln2 = BTC * 2 * 2 + 2 * 768 * 2 + BTC * 2 * 2 + 2 * 16384 * 4;
    EXPECT_EQ(c[(int)SubBlock::ln2][(int)Phase::fwd].bytes, 12 * ln2);
    EXPECT_EQ(c[(int)SubBlock::ln2][(int)Phase::fwd].other_flops, 12 * 9 * BTC);
    // ln1 fwd: layer 0 normalises the embeddings alone, layers 1..11 fuse residual2.
    double ln1_plain = BTC * 2 + 2 * 768 * 2 + BTC * 2 + 2 * 16384 * 4;
    EXPECT_EQ(c[(int)SubBlock::ln1][(int)Phase::fwd].bytes, ln1_plain + 11 * ln2);
    EXPECT_EQ(c[(int)SubBlock::lnf][(int)Phase::fwd].bytes, ln2);
    // fc fwd writes the pre-GELU and the GELU output.
    double fc = BTC * 2 + 3072.0 * 768 * 2 + 3072 * 2 + 16384.0 * 3072 * 2 * 2;
    EXPECT_EQ(c[(int)SubBlock::fc][(int)Phase::fwd].bytes, 12 * fc);
    EXPECT_EQ(c[(int)SubBlock::fc][(int)Phase::fwd].gemm_flops, 12 * 2 * 16384.0 * 3072 * 768);
    EXPECT_EQ(c[(int)SubBlock::fc][(int)Phase::fwd].other_flops, 12 * 9 * 16384.0 * 3072);
    // fc_proj bwd: dinp GEMM with the DGELU epilogue (reads the pre-GELU), dweight GEMM (+=), bias gradient.
    double dinp = BTC * 2 + 768.0 * 3072 * 2 + 16384.0 * 3072 * 2 + 16384.0 * 3072 * 2;
    double dweight = 16384.0 * 3072 * 2 + BTC * 2 + 2 * 768.0 * 3072 * 2;
    double dbias = BTC * 2 + 2 * 768 * 2;
    const OpCost& fcp = c[(int)SubBlock::fc_proj][(int)Phase::bwd];
    EXPECT_EQ(fcp.bytes, 12 * (dinp + dweight + dbias));
    EXPECT_EQ(fcp.gemm_flops, 12 * 2 * (2 * 16384.0 * 768 * 3072));
    EXPECT_EQ(fcp.other_flops, 12 * (18 * 16384.0 * 3072 + BTC));
    // Causal attention forward: QKᵀ and PV over the T(T+1)/2 unmasked pairs of each of B·NH heads.
    double pairs = 16.0 * 12 * (1024.0 * 1025 / 2);
    const OpCost& att = c[(int)SubBlock::attention][(int)Phase::fwd];
    EXPECT_EQ(att.gemm_flops, 12 * 2 * (2 * 64 * pairs));
    EXPECT_EQ(att.bytes, 12 * (16384.0 * 2304 * 2 + BTC * 2 + 16.0 * 12 * 1024 * 4));
    // Classifier forward: logits GEMM over Vp, fused softmax/loss/dlogits, loss accumulation.
    double cls =
        (BTC * 2 + 50304.0 * 768 * 2 + 16384.0 * 50304 * 2)                   // GEMM
        + (16384.0 * 50257 * 2 + 16384 * 4 + 16384 * 4 + 16384.0 * 50304 * 2) // logits, targets -> losses, dlogits
        + (16384 * 4 + 8);                                                    // losses -> the loss scalar
    EXPECT_EQ(c[(int)SubBlock::classifier][(int)Phase::fwd].bytes, cls);
    EXPECT_EQ(c[(int)SubBlock::classifier][(int)Phase::fwd].gemm_flops, 2 * 16384.0 * 50304 * 768);
    // No kernels of their own on the GPU.
    for (SubBlock s : {SubBlock::residual1, SubBlock::residual2, SubBlock::gelu})
        for (int p = 0; p < NUM_PHASES; p++) EXPECT_EQ(c[(int)s][p].flops() + c[(int)s][p].bytes, 0.0);
    // Optimizer: grad (bf16), master, m, v (fp32) read; master, m, v and the bf16 parameter written.
    const double N = 124475904;
    EXPECT_EQ(c[(int)SubBlock::optimizer][(int)Phase::opt].bytes, N * (2 + 12 + 12 + 2));
    EXPECT_EQ(c[(int)SubBlock::grad_norm][(int)Phase::opt].bytes, N * 2);
    // LayerNorm forward is memory bound on any GPU (about 1 FLOP per byte).
    EXPECT_STREQ(roofline_point(c[(int)SubBlock::ln2][(int)Phase::fwd], 1e-3, Ceilings{798, 60, 3000, ""}).bound,
                 "memory");
}

TEST(ProfilerRoofline, GradAccumScalesForwardAndBackwardOnly) {
    GPT2Config g = gpt2_config_for_depth(12);
    CostTable one = analytic_costs(g, 16, 1024, 1), four = analytic_costs(g, 16, 1024, 4);
    for (int s = 0; s < NUM_SUBBLOCKS; s++) {
        for (int p : {(int)Phase::fwd, (int)Phase::bwd}) {
            EXPECT_EQ(four[s][p].flops(), 4 * one[s][p].flops());
            EXPECT_EQ(four[s][p].bytes, 4 * one[s][p].bytes);
        }
        EXPECT_EQ(four[s][(int)Phase::opt].bytes, one[s][(int)Phase::opt].bytes);
    }
}

TEST(ProfilerRoofline, PointArithmetic) {
    OpCost elementwise{0, 1e9, 1e9};
    RooflinePoint p = roofline_point(elementwise, 1e-3, Ceilings{800, 50, 2000, ""});
    EXPECT_DOUBLE_EQ(p.compute_floor_s, 1e9 / 50e12); // fp32 ceiling for CUDA-core FLOPs
    EXPECT_DOUBLE_EQ(p.memory_floor_s, 1e9 / 2000e9);
    EXPECT_STREQ(p.bound, "memory");
    EXPECT_DOUBLE_EQ(p.gbps, 1000);
    EXPECT_DOUBLE_EQ(p.pct_of_roofline, 50);
    // Without an fp32 ceiling the bf16 one stands in; mixed costs add their compute terms.
    OpCost mixed{8e11, 1e10, 1e8};
    RooflinePoint q = roofline_point(mixed, 2e-3, Ceilings{800, 0, 2000, ""});
    EXPECT_DOUBLE_EQ(q.compute_floor_s, 8e11 / 800e12 + 1e10 / 800e12);
    EXPECT_STREQ(q.bound, "compute");
    EXPECT_DOUBLE_EQ(q.tflops, 8.1e11 / 2e-3 / 1e12);
    // No ceilings: achieved rates still, but no floor and no verdict.
    RooflinePoint n = roofline_point(mixed, 2e-3, Ceilings{});
    EXPECT_STREQ(n.bound, "");
    EXPECT_TRUE(std::isnan(n.floor_s));
    EXPECT_DOUBLE_EQ(n.gbps, 1e8 / 2e-3 / 1e9);
}

// ---------------------------------------------------------------------------------------------------------
// Power
// ---------------------------------------------------------------------------------------------------------

TEST(ProfilerPower, EnergyOfConstantAndRampTraces) {
    std::vector<PowerSample> flat, ramp;
    for (uint64_t t = 0; t <= 100 * MS; t += 10 * MS) {
        flat.push_back({t, 250.0});
        ramp.push_back({t, 100.0 + 1000.0 * (t / 1e9)}); // 100 W rising 1 W per ms
    }
    EXPECT_NEAR(energy_joules(flat, 15 * MS, 55 * MS), 250 * 0.040, 1e-12);
    // ∫ (100 + 1000 t) dt from 0.015 to 0.055 s = 100·0.04 + 500·(0.055² - 0.015²) = 4 + 1.4
    EXPECT_NEAR(energy_joules(ramp, 15 * MS, 55 * MS), 5.4, 1e-12);
    // Outside the samples the power is held: 30 ms before the first sample at 100 W.
    EXPECT_NEAR(energy_joules(std::vector<PowerSample>{{50 * MS, 100.0}}, 0, 30 * MS), 3.0, 1e-12);
    EXPECT_TRUE(std::isnan(energy_joules({}, 0, MS)));

    ProfileRecords rec;
    rec.steps.push_back(step(0, 15 * MS, 55 * MS, 4000));
    rec.power = ramp;
    std::reverse(rec.power.begin(), rec.power.end()); // any order
    Report r = build_report(rec, ProfileContext{});
    EXPECT_NEAR(r.steps[0].energy_j, 5.4, 1e-12);
    EXPECT_NEAR(r.steps[0].avg_power_w, 5.4 / 0.040, 1e-9);
    EXPECT_NEAR(r.power.energy_j, 5.4, 1e-12);
    EXPECT_NEAR(r.power.joules_per_token, 5.4 / 4000, 1e-15);
    EXPECT_EQ(r.power.samples, 4u); // 20, 30, 40, 50 ms
    EXPECT_DOUBLE_EQ(r.power.peak_w, 150);
}

// ---------------------------------------------------------------------------------------------------------
// Writers
// ---------------------------------------------------------------------------------------------------------

TEST(ProfilerWriters, CsvHeadersStartWithTheDocumentedColumns) {
    testutil::TempDir tmp;
    ProfileRecords rec = two_steps();
    Report r = build_report(rec, gpt2_124m_context());
    std::string dir = tmp / "profile/nested";
    write_profile_dir(dir, r, rec);
    auto starts = [&](const std::string& file, const std::string& cols) {
        std::string line = first_line(dir + "/" + file);
        EXPECT_EQ(line.substr(0, cols.size()), cols) << file;
        EXPECT_TRUE(line.size() == cols.size() || line[cols.size()] == ',') << file;
    };
    starts("kernels.csv", "kernel,subblock,phase,category,calls,total_us,avg_us,pct");
    starts("subblocks.csv", "subblock,phase,calls,time_us,pct,flops,bytes,tflops,gbps,intensity,bound");
    starts("steps.csv", "step,wall_ms,gpu_busy_ms,fwd_ms,bwd_ms,opt_ms,other_ms,tok_s,energy_j,avg_power_w");
    starts("api.csv", "api,calls,total_us,avg_us,pct_of_cpu_time");
    std::string roof = first_line(dir + "/roofline.csv");
    EXPECT_NE(roof.find("replay_flops,replay_bytes"), std::string::npos);
    for (const char* f : {"summary.txt", "trace.json", "profile.json"}) EXPECT_TRUE(file_exists(dir + "/" + f)) << f;
    EXPECT_FALSE(file_exists(dir + "/kernels.csv.tmp"));

    // Names with commas are quoted; values are the report's.
    std::string kernels = testutil::slurp(dir + "/kernels.csv");
    const char* ln_row = "\"void llmc::layernorm_forward_kernel<true>(__nv_bfloat16*, float*, int, int)\","
                         "ln2,fwd,norm,2,2000.000,1000.000,";
    EXPECT_NE(kernels.find(ln_row), std::string::npos);
    std::string steps = testutil::slurp(dir + "/steps.csv");
    EXPECT_NE(steps.find("\n0,10.000000,"), std::string::npos);
    std::string sub = testutil::slurp(dir + "/subblocks.csv");
    EXPECT_NE(sub.find("\nqkv,fwd,2,2000.000,"), std::string::npos);
    EXPECT_NE(sub.find(",695784701952,1250482176,695.785,1250.48,"), std::string::npos);
}

namespace {
// A report with an inference profile's tables: a row of `phase` (4 steps, 8 tokens) and the decode bucket `b`.
Report with_inference_tables(Report r, Phase phase, DecodeBucket b) {
    PhaseRow p;
    p.phase = (int)phase, p.steps = 4, p.tokens = 8;
    r.phases.push_back(p);
    r.decode_buckets.push_back(b);
    return r;
}
} // namespace

// A training profile written where an inference profile was: the inference tables go (a reader would take
// them for this profile's), every other file is this profile's, and files the profiler does not write stay.
TEST(ProfilerWriters, ATrainingProfileRemovesAnInferenceProfilesTables) {
    testutil::TempDir tmp;
    ProfileRecords rec = two_steps();
    Report inference = with_inference_tables(build_report(rec, gpt2_124m_context()), Phase::prefill, DecodeBucket{});
    Report training = build_report(rec, gpt2_124m_context());
    // The names it returns are the directory's files, whatever was there before.
    auto files_in_dir = [&] {
        std::set<std::string> names;
        for (const auto& e : std::filesystem::directory_iterator(tmp.path)) names.insert(e.path().filename().string());
        return names;
    };
    auto as_set = [](const std::vector<std::string>& v) { return std::set<std::string>(v.begin(), v.end()); };
    std::vector<std::string> written = write_profile_dir(tmp.path, training, rec);
    ASSERT_TRUE(file_exists(tmp / "outside_steps.csv")); // a training profile's table
    EXPECT_EQ(as_set(written), files_in_dir());
    EXPECT_EQ(written.size(), as_set(written).size());
    written = write_profile_dir(tmp.path, inference, rec);
    for (const char* f : {"phases.csv", "decode_buckets.csv"}) ASSERT_TRUE(file_exists(tmp / f)) << f;
    EXPECT_FALSE(file_exists(tmp / "outside_steps.csv"));
    EXPECT_EQ(as_set(written), files_in_dir());
    std::ofstream(tmp / "notes.txt") << "mine\n";

    write_profile_dir(tmp.path, training, rec);
    for (const char* f : {"phases.csv", "decode_buckets.csv"}) EXPECT_FALSE(file_exists(tmp / f)) << f;
    EXPECT_EQ(testutil::slurp(tmp / "subblocks.csv"), subblocks_csv(training));
    EXPECT_EQ(testutil::slurp(tmp / "profile.json"), profile_json(training));
    EXPECT_EQ(testutil::slurp(tmp / "notes.txt"), "mine\n");
}

// A validation and a checkpoint after step 0 and a validation after step 1 of two_steps' 20 ms window: rows of
// their own in outside_steps.csv and profile.json, totals by kind, and the summary's line with the share.
TEST(ProfilerWriters, WorkOutsideTheStepsHasItsOwnRows) {
    ProfileRecords rec = two_steps();
    rec.outside_steps = {{"val", 0, 2.5}, {"checkpoint", 0, 1.5}, {"val", 1, 0.5}};
    Report r = build_report(rec, gpt2_124m_context());
    EXPECT_EQ(steps_csv(r), steps_csv(build_report(two_steps(), gpt2_124m_context()))); // the steps unchanged
    EXPECT_EQ(outside_steps_csv(r), "kind,after_step,wall_ms\nval,0,2.500\ncheckpoint,0,1.500\nval,1,0.500\n");
    json o = json::parse(profile_json(r))["outside_steps"];
    EXPECT_DOUBLE_EQ(o["total_ms"].get<double>(), 4.5);
    EXPECT_DOUBLE_EQ(o["window_ms"].get<double>(), 20);
    EXPECT_DOUBLE_EQ(o["pct_of_window"].get<double>(), 22.5);
    ASSERT_EQ(o["by_kind"].size(), 2u);
    EXPECT_EQ(o["by_kind"][0]["kind"], "val");
    EXPECT_EQ(o["by_kind"][0]["count"], 2);
    EXPECT_DOUBLE_EQ(o["by_kind"][0]["total_ms"].get<double>(), 3);
    EXPECT_DOUBLE_EQ(o["by_kind"][0]["avg_ms"].get<double>(), 1.5);
    EXPECT_DOUBLE_EQ(o["by_kind"][0]["pct_of_window"].get<double>(), 15);
    EXPECT_EQ(o["by_kind"][1]["kind"], "checkpoint");
    EXPECT_EQ(o["rows"][2], json::parse(R"({"kind": "val", "after_step": 1, "wall_ms": 0.5})"));
    const std::string s = format_summary(r);
    EXPECT_NE(s.find("  time outside the training steps: 4.500 ms, 22.5% of the window's wall time (20.000 ms, "),
              std::string::npos)
        << s;
    EXPECT_NE(s.find("  kind        count  total_ms  avg_ms  %window\n"
                     "  val             2     3.000   1.500     15.0\n"
                     "  checkpoint      1     1.500   1.500      7.5\n"),
              std::string::npos)
        << s;
    EXPECT_NE(format_summary(build_report(two_steps(), gpt2_124m_context()))
                  .find("  time outside the training steps: none "),
              std::string::npos);
}

// Every column of kernels.csv, steps.csv, api.csv and decode_buckets.csv is in profile.json's rows of the same
// table under the same name, with the same value (the CSV's rounded; an empty cell is null).
TEST(ProfilerWriters, CsvColumnsAreInProfileJsonUnderTheSameNames) {
    testutil::TempDir tmp;
    ProfileRecords rec = two_steps();
    Report r = with_inference_tables(build_report(rec, gpt2_124m_context()), Phase::decode, DecodeBucket{5, 8, 4, 8, 10, 6});
    write_profile_dir(tmp.path, r, rec);
    json j = json::parse(testutil::slurp(tmp / "profile.json"));
    auto same = [&](const std::string& file, const json& rows) {
        auto csv = testutil::read_csv(file);
        ASSERT_EQ(csv.size(), rows.size()) << file;
        ASSERT_FALSE(csv.empty()) << file;
        for (size_t i = 0; i < csv.size(); i++)
            for (auto& [name, cell] : csv[i]) {
                ASSERT_TRUE(rows[i].contains(name)) << file << " " << name;
                const json& v = rows[i][name];
                if (v.is_null()) EXPECT_EQ(cell, "") << file << " " << name;
                else if (v.is_boolean()) EXPECT_EQ(cell, v.get<bool>() ? "1" : "0") << file << " " << name;
                else if (v.is_string()) EXPECT_EQ(cell, v.get<std::string>()) << file << " " << name;
                else EXPECT_NEAR(std::stod(cell), v.get<double>(), 1e-3 + 1e-5 * std::fabs(v.get<double>())) << file << " " << name;
            }
    };
    same(tmp / "kernels.csv", j["kernels"]);
    same(tmp / "steps.csv", j["steps"]);
    json calls = j["api"];
    for (const json& x : j["syncs"]) calls.push_back(x);
    same(tmp / "api.csv", calls);
    same(tmp / "decode_buckets.csv", j["inference"]["decode_buckets"]);
    EXPECT_DOUBLE_EQ(j["inference"]["decode_buckets"][0]["ms_per_step"].get<double>(), 2.5);
    EXPECT_DOUBLE_EQ(j["inference"]["decode_buckets"][0]["tok_s"].get<double>(), 800);
    EXPECT_GT(j["api"][0]["pct_of_cpu_time"].get<double>(), 0);

    // The counted step's table (the committed sample profile has one, dev/sample_profile.cpp).
    const std::string sample = "test/data/sample_profile";
    const json s = json::parse(testutil::slurp(sample + "/profile.json"));
    same(sample + "/counters.csv", s["counters"]["subblocks"]);
    EXPECT_EQ(s["counters"]["subblocks"].back()["subblock"], "total");
}

TEST(ProfilerWriters, TraceJsonIsAValidNestedTrace) {
    testutil::TempDir tmp;
    ProfileRecords rec = two_steps();
    Report r = build_report(rec, gpt2_124m_context());
    write_profile_dir(tmp.path, r, rec);
    const std::string text = testutil::slurp(tmp / "trace.json");
    json j = json::parse(text);
    EXPECT_EQ(j["displayTimeUnit"], "ns");
    ASSERT_TRUE(j["traceEvents"].is_array());
    // Kineto's top-level fields, which Holistic Trace Analysis reads: one rank of one, the device's properties.
    EXPECT_EQ(j["distributedInfo"], json({{"backend", "none"}, {"rank", 0}, {"world_size", 1}}));
    EXPECT_TRUE(testutil::has(text, "\"rank\": 0")) << "HTA finds the rank by matching `\"rank\": N`";
    ASSERT_EQ(j["deviceProperties"].size(), 1u);
    EXPECT_EQ(j["deviceProperties"][0]["id"], 0);

    struct Slice {
        long long start, end;
    };
    std::map<std::pair<int, long long>, std::vector<Slice>> tracks;
    std::map<long long, json> flow_s, flow_f;
    std::set<std::string> names, phases;
    std::map<std::string, std::set<std::string>> cats; // cat -> names
    long long min_ts = LLONG_MAX;
    int kernels = 0, counters = 0;
    auto ns = [](const json& v) { return std::llround(v.get<double>() * 1000); };
    for (const json& e : j["traceEvents"]) {
        for (const char* k : {"name", "ph", "ts", "pid", "tid"}) ASSERT_TRUE(e.contains(k)) << k << " in " << e.dump();
        std::string ph = e["ph"];
        phases.insert(ph);
        if (ph != "M") min_ts = std::min(min_ts, ns(e["ts"]));
        if (ph == "X") {
            ASSERT_TRUE(e.contains("dur")) << e.dump();
            tracks[{e["pid"].get<int>(), e["tid"].get<long long>()}].push_back(
                {ns(e["ts"]), ns(e["ts"]) + ns(e["dur"])});
            names.insert(e["name"].get<std::string>());
            cats[e["cat"].get<std::string>()].insert(e["name"].get<std::string>());
            const json& a = e["args"];
            if (e["pid"] != 0) { // GPU work: stream and device as Kineto gives them, the launch's correlation
                EXPECT_EQ(a["stream"], e["tid"]) << e.dump();
                EXPECT_EQ(a["device"], 0) << e.dump();
                EXPECT_TRUE(a.contains("correlation")) << e.dump();
            }
            if (e["cat"] == "kernel") {
                kernels++;
                for (const char* k :
                     {"grid", "block", "registers", "static_smem", "dynamic_smem", "subblock", "phase", "layer"})
                    EXPECT_TRUE(a.contains(k)) << k;
                if (e["name"] == "nvjet_hsh_256x128_64x4_2x1_v_bz_coopA_NTN") {
                    EXPECT_EQ(a["subblock"], "qkv");
                    EXPECT_EQ(a["phase"], "fwd");
                    EXPECT_EQ(a["layer"], 0);
                    EXPECT_EQ(a["grid"], json({128, 2, 1}));
                    EXPECT_EQ(a["registers"], 40);
                }
            }
        }
        if (ph == "s") flow_s[e["id"].get<long long>()] = e;
        if (ph == "f") {
            EXPECT_EQ(e["bp"], "e");
            flow_f[e["id"].get<long long>()] = e;
        }
        if (ph == "C") counters++;
    }
    EXPECT_EQ(min_ts, 0) << "timestamps are relative to the earliest record";
    EXPECT_EQ(kernels, 8) << "the 4 kernels of each step; not the set-up kernel before the window";
    EXPECT_GT(counters, 0) << "power counter track";
    // Names and categories as Kineto writes them: HTA numbers steps by "ProfilerStep#N", finds device work by
    // category and tells copies from compute by the "Memcpy"/"Memset" prefixes; kernels keep their full name.
    EXPECT_EQ(cats["user_annotation"].count("ProfilerStep#0") + cats["user_annotation"].count("ProfilerStep#1"), 2u);
    for (const char* n : {"step", "forward", "qkv"}) EXPECT_TRUE(cats["user_annotation"].count(n)) << n;
    EXPECT_EQ(cats["cuda_runtime"].count("cudaLaunchKernel"), 1u);
    EXPECT_EQ(cats["gpu_memcpy"], std::set<std::string>({"Memcpy HtoD", "Memcpy DtoH"}));
    EXPECT_EQ(cats["gpu_memset"], std::set<std::string>({"Memset"}));
    EXPECT_EQ(cats["kernel"].count("void llmc::adamw_kernel(__nv_bfloat16*, float*)"), 1u);

    // Slices on one track nest: any two are disjoint or one contains the other.
    for (auto& [track, v] : tracks) {
        std::sort(v.begin(), v.end(), [](const Slice& a, const Slice& b) {
            return a.start < b.start || (a.start == b.start && a.end > b.end);
        });
        std::vector<long long> open;
        for (const Slice& s : v) {
            while (!open.empty() && open.back() <= s.start) open.pop_back();
            if (!open.empty()) {
                EXPECT_LE(s.end, open.back()) << "partial overlap on pid " << track.first << " tid " << track.second;
            }
            open.push_back(s.end);
        }
    }
    // Every launch flow starts on an API slice and ends on a GPU slice: 7 per step.
    EXPECT_EQ(flow_s.size(), 14u);
    for (auto& [id, s] : flow_s) {
        ASSERT_TRUE(flow_f.count(id)) << "flow " << id << " has no end";
        EXPECT_EQ(s["pid"], 0);
        EXPECT_GE(flow_f[id]["pid"].get<int>(), 1);
        auto inside = [&](const json& e) {
            for (const Slice& x : tracks[{e["pid"].get<int>(), e["tid"].get<long long>()}])
                if (x.start <= ns(e["ts"]) && ns(e["ts"]) <= x.end) return true;
            return false;
        };
        EXPECT_TRUE(inside(s));
        EXPECT_TRUE(inside(flow_f[id]));
    }
    for (auto& [id, f] : flow_f) EXPECT_TRUE(flow_s.count(id)) << "flow " << id << " has no start";
    EXPECT_TRUE(phases.count("M"));
}

TEST(ProfilerWriters, SummaryAndProfileJson) {
    testutil::TempDir tmp;
    ProfileRecords rec = two_steps();
    ProfileContext ctx = gpt2_124m_context();
    ctx.peak_memory_bytes = 3ull << 30;
    Report r = build_report(rec, ctx);
    std::string s = format_summary(r, 3);
    // These synthetic steps run 1409 model TFLOP/s: the 798 given is raised to that (RaisedCeilings).
    for (const char* h : {"llmc profile: test", "ceilings  bf16 1409.2 TFLOP/s", "compute x1.766 (MFU beat it)",
                          "== Throughput ==", "== Top 3 kernels",
                          "== Sub-blocks and roofline", "== Steps", "== GPU idle ==", "largest gaps:", "== CUDA API",
                          "== Synchronisation", "== Power ==", "== Findings ==", "MFU", "peak GPU memory 3.00 GiB"})
        EXPECT_NE(s.find(h), std::string::npos) << h;
    EXPECT_NE(s.find("adamw_kernel"), std::string::npos);
    EXPECT_EQ(s.find("copy_float_to_bf16"), std::string::npos);
    EXPECT_NE(s.find("compute"), std::string::npos);
    EXPECT_NE(s.find("cudaEventSynchronize"), std::string::npos);
    EXPECT_NE(s.find("1638400 tokens/s"), std::string::npos);

    write_profile_dir(tmp.path, r, rec);
    EXPECT_EQ(testutil::slurp(tmp / "summary.txt"), format_summary(r));
    json j = json::parse(testutil::slurp(tmp / "profile.json"));
    EXPECT_EQ(j["context"]["device"], "Test GPU");
    EXPECT_EQ(j["context"]["model"]["num_parameters"], 124475904);
    EXPECT_EQ(j["context"]["ceilings"]["raised"]["measured"]["bf16_tflops"], 798.0);
    EXPECT_EQ(j["kernels"].size(), r.kernels.size());
    EXPECT_EQ(j["subblocks"].size(), r.subblocks.size());
    EXPECT_EQ(j["steps"].size(), 2u);
    EXPECT_DOUBLE_EQ(j["throughput"]["tokens_per_s"].get<double>(), 1638400.0);
    EXPECT_DOUBLE_EQ(j["gpu_idle"]["idle_us"].get<double>(), r.idle_us);
    // Energy: 300 W throughout, except a peak to 400 W at 5 ms inside step 0 (a 2 ms triangle: +0.1 J).
    EXPECT_NEAR(j["steps"][0]["energy_j"].get<double>(), 3.1, 1e-9);
    EXPECT_NEAR(j["steps"][1]["energy_j"].get<double>(), 3.0, 1e-9);
    bool unmodelled_null = false;
    for (const json& b : j["subblocks"])
        if (b["subblock"] == "(none)") unmodelled_null = b["roofline"]["floor_s"].is_null();
    EXPECT_TRUE(unmodelled_null) << "unknown values are null";
}

// The cuBLASLt plans' algorithms (llmc/matmul.cuh's autotune) go to profile.json's gemm_algorithms as they came:
// random times, the chosen index, untimed candidates as null; a context without plans gives an empty list.
TEST(ProfilerWriters, ProfileJsonListsTheGemmAlgorithms) {
    std::mt19937_64 rng(std::random_device{}());
    std::uniform_real_distribution<double> us(1, 500);
    ProfileContext ctx = gpt2_124m_context();
    EXPECT_TRUE(json::parse(profile_json(build_report(two_steps(), ctx)))["gemm_algorithms"].empty());
    GemmTuning tuned;
    tuned.m = 2304, tuned.n = 16384, tuned.k = 768, tuned.trans_a = true, tuned.epilogue = "BIAS";
    tuned.autotuned = true;
    const int a[5] = {256, 256, 128, 2, 256};
    std::copy(a, a + 5, tuned.align);
    for (int i = 0; i < 5; i++) tuned.candidates.push_back({i, 10 + i, 20 + i, 1 + i % 2, 30 + i, us(rng)});
    tuned.chosen = (int)(std::min_element(tuned.candidates.begin(), tuned.candidates.end(),
                                          [](auto& x, auto& y) { return x.us < y.us; }) -
                         tuned.candidates.begin());
    GemmTuning first; // LLMC_GEMM_AUTOTUNE=0, the GELU epilogue left to the kernel
    first.m = 768, first.n = 16384, first.k = 3072, first.trans_b = true, first.accumulate = true;
    first.epilogue = "DGELU", first.gelu_kernel = true;
    first.candidates.push_back({0, 7, -1, 1, -1, -1});
    ctx.gemm_algorithms = {tuned, first};
    json j = json::parse(profile_json(build_report(two_steps(), ctx)));
    const json& g = j["gemm_algorithms"];
    ASSERT_EQ(g.size(), 2u);
    EXPECT_EQ(g[0]["m"], 2304);
    EXPECT_EQ(g[0]["n"], 16384);
    EXPECT_EQ(g[0]["k"], 768);
    EXPECT_EQ(g[0]["trans_a"], true);
    EXPECT_EQ(g[0]["trans_b"], false);
    EXPECT_EQ(g[0]["epilogue"], "BIAS");
    EXPECT_EQ(g[0]["accumulate"], false);
    EXPECT_EQ(g[0]["autotuned"], true);
    EXPECT_EQ(g[0]["alignment_bytes"]["d"], 128);
    EXPECT_EQ(g[0]["alignment_bytes"]["bias"], 2);
    EXPECT_EQ(g[0]["chosen"], tuned.chosen);
    ASSERT_EQ(g[0]["candidates"].size(), 5u);
    for (int i = 0; i < 5; i++) {
        EXPECT_EQ(g[0]["candidates"][i]["index"], i);
        EXPECT_EQ(g[0]["candidates"][i]["algo_id"], 10 + i);
        EXPECT_EQ(g[0]["candidates"][i]["tile_id"], 20 + i);
        EXPECT_EQ(g[0]["candidates"][i]["splitk"], 1 + i % 2);
        EXPECT_EQ(g[0]["candidates"][i]["stages_id"], 30 + i);
        EXPECT_DOUBLE_EQ(g[0]["candidates"][i]["us"].get<double>(), tuned.candidates[i].us);
    }
    EXPECT_EQ(g[1]["epilogue"], "DGELU");
    EXPECT_EQ(g[1]["gelu_kernel"], true);
    EXPECT_EQ(g[1]["accumulate"], true);
    EXPECT_EQ(g[1]["autotuned"], false);
    EXPECT_EQ(g[1]["chosen"], 0);
    EXPECT_TRUE(g[1]["candidates"][0]["us"].is_null());
    EXPECT_EQ(g[1]["candidates"][0]["tile_id"], -1);
}

namespace {
// The k-th smallest value (0-based) by counting, independent of step_spread's sort.
double kth_smallest(const std::vector<double>& v, size_t k) {
    for (double x : v) {
        size_t below = 0, equal = 0;
        for (double y : v) below += y < x, equal += y == x;
        if (below <= k && k < below + equal) return x;
    }
    return NAN;
}
} // namespace

// A sub-block's spread across the profiled steps, from random kernel durations: each step's time is the sum of
// its kernels there (0 in a step without one), the median of an even count the mean of the middle two; kernels
// outside every step are not counted. Checked against a median found by counting, on 1 to 8 steps.
TEST(ProfilerReport, SubBlockSpreadAcrossSteps) {
    std::mt19937 g(std::random_device{}());
    std::uniform_int_distribution<int> dur_us(1, 4000);
    auto expect_spread = [](const StepSpread& sp, const std::vector<double>& ms, const char* what) {
        const size_t n = ms.size();
        double median = n % 2 ? kth_smallest(ms, n / 2) : 0.5 * (kth_smallest(ms, n / 2 - 1) + kth_smallest(ms, n / 2));
        EXPECT_NEAR(sp.median_ms, median, 1e-9) << what << " over " << n;
        EXPECT_NEAR(sp.min_ms, kth_smallest(ms, 0), 1e-9) << what;
        EXPECT_NEAR(sp.max_ms, kth_smallest(ms, n - 1), 1e-9) << what;
    };
    for (int nsteps = 1; nsteps <= 8; nsteps++) {
        ProfileRecords rec;
        std::vector<double> qkv_ms(nsteps), attn_ms(nsteps, 0.0), total_ms(nsteps);
        for (int s = 0; s < nsteps; s++) {
            uint64_t t = (uint64_t)s * 10 * MS, a = dur_us(g) * US, b = dur_us(g) * US;
            rec.steps.push_back(step(s + 1, t, t + 10 * MS, 100));
            rec.kernels.push_back(kernel("gemm_a", t + 10 * US, t + 10 * US + a, at(SubBlock::qkv, Phase::fwd)));
            rec.kernels.push_back(kernel("gemm_b", t + 5 * MS, t + 5 * MS + b, at(SubBlock::qkv, Phase::fwd)));
            qkv_ms[s] = (a + b) / 1e6;
            if (s % 2 == 0) { // attention runs in every other step only
                uint64_t c = dur_us(g) * US;
                rec.kernels.push_back(kernel("attention_fwd", t + 4 * MS, t + 4 * MS + c,
                                             at(SubBlock::attention, Phase::fwd)));
                attn_ms[s] = c / 1e6;
            }
            total_ms[s] = qkv_ms[s] + attn_ms[s];
        }
        uint64_t after = (uint64_t)nsteps * 10 * MS + MS; // outside every step: left out
        rec.kernels.push_back(kernel("gemm_a", after, after + 9 * MS, at(SubBlock::qkv, Phase::fwd)));
        Report r = build_report(rec, ProfileContext{});
        std::map<int, const SubBlockRow*> rows;
        for (const SubBlockRow& row : r.subblocks) rows[row.subblock] = &row;
        ASSERT_TRUE(rows.count((int)SubBlock::qkv) && rows.count((int)SubBlock::attention));
        expect_spread(rows[(int)SubBlock::qkv]->per_step, qkv_ms, "qkv");
        expect_spread(rows[(int)SubBlock::attention]->per_step, attn_ms, "attention");
        expect_spread(r.total.per_step, total_ms, "total");

        // The CSV carries the spread in microseconds, the summary as "median [min, max]" in ms.
        testutil::TempDir tmp;
        std::ofstream(tmp / "subblocks.csv") << subblocks_csv(r);
        auto csv = testutil::read_csv(tmp / "subblocks.csv");
        const StepSpread& q = rows[(int)SubBlock::qkv]->per_step;
        for (auto& row : csv)
            if (row["subblock"] == "qkv") {
                EXPECT_NEAR(std::stod(row["step_median_us"]), q.median_ms * 1e3, 1e-3);
                EXPECT_NEAR(std::stod(row["step_min_us"]), q.min_ms * 1e3, 1e-3);
                EXPECT_NEAR(std::stod(row["step_max_us"]), q.max_ms * 1e3, 1e-3);
            }
        std::string summary = format_summary(r);
        EXPECT_NE(summary.find("median [min, max]"), std::string::npos);
        EXPECT_NE(summary.find(strprintf("%.3f [%.3f, %.3f]", q.median_ms, q.min_ms, q.max_ms)), std::string::npos)
            << summary;
        json j = json::parse(profile_json(r));
        EXPECT_NEAR(j["total"]["per_step_ms"]["median"].get<double>(), r.total.per_step.median_ms, 1e-12);
    }
    // Without steps there is no spread.
    ProfileRecords none;
    none.kernels.push_back(kernel("gemm_a", 0, MS, at(SubBlock::qkv, Phase::fwd)));
    Report r = build_report(none, ProfileContext{});
    EXPECT_TRUE(std::isnan(r.total.per_step.median_ms));
    std::string summary = format_summary(r);
    size_t row = summary.find("\n  qkv ");
    ASSERT_NE(row, std::string::npos) << summary;
    EXPECT_EQ(summary.substr(row + 1, summary.find('\n', row + 1) - row - 1).find('['), std::string::npos) << summary;
}

// The lines a run ends with: where the summary is, the throughput, and the first findings, one line each.
TEST(ProfilerWriters, OutcomeNamesTheSummaryAndTheTopFindings) {
    Report r = build_report(two_steps(), gpt2_124m_context());
    r.findings.clear();
    for (int i = 0; i < 5; i++)
        r.findings.push_back({"rule" + std::to_string(i), "limit " + std::to_string(i), "evidence " + std::to_string(i),
                              "next " + std::to_string(i), 5.0 - i});
    std::string o = format_outcome(r, "out/prof");
    EXPECT_EQ(o.rfind("profile: out/prof/summary.txt: 1638400 tokens/s over 2 steps, MFU ", 0), 0u) << o;
    EXPECT_NE(o.find("profile: top 3 of 5 findings"), std::string::npos) << o;
    EXPECT_NE(o.find("  1. [rule0] limit 0 (~5.000 ms per step at stake)\n"), std::string::npos) << o;
    EXPECT_NE(o.find("  3. [rule2] limit 2"), std::string::npos) << o;
    EXPECT_EQ(o.find("rule3"), std::string::npos) << o;
    EXPECT_EQ(o.find("evidence 0"), std::string::npos) << o; // the evidence stays in the summary
    EXPECT_EQ(std::count(o.begin(), o.end(), '\n'), 5) << o;
    r.findings.clear();
    r.mfu = NAN;
    o = format_outcome(r, "p");
    EXPECT_EQ(o, "profile: p/summary.txt: 1638400 tokens/s over 2 steps\nprofile: no finding: no rule found time at "
                 "stake\n");
}
