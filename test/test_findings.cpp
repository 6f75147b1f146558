// The findings engine (llmc/profiler/findings.h) on synthetic records: each rule fires on a run built to
// trigger it and stays silent on its near twin built not to; ranking by time at stake. Times in ns.
#include <cmath>
#include <gtest/gtest.h>
#include <string>
#include <vector>

#include "llmc/profiler/findings.h"
#include "llmc/profiler/writers.h"
#include "test/test_util.h"

using testutil::has;

using namespace llmc;
using namespace llmc::prof;

namespace {

constexpr uint64_t US = 1000, MS = 1000000;
// An H100's per-SM limits (cudaDeviceProp of sm_90): the occupancy tests' device.
const SmLimits H100{65536, 2048, 32, 228 * 1024, 1024, 256};

// `n` steps of 10 ms, step s starting at s * 10 ms, 1000 tokens each.
ProfileRecords steps(int n) {
    ProfileRecords r;
    for (int s = 0; s < n; s++) {
        StepRecord st;
        st.step = s, st.start_ns = s * 10 * MS, st.end_ns = (s + 1) * 10 * MS, st.tokens = 1000;
        r.steps.push_back(st);
    }
    return r;
}
void add_kernel(ProfileRecords& r, uint64_t start, uint64_t end, const std::string& name = "void llmc::work_kernel(float*)",
                int regs = 32, int threads = 256, int smem = 0, Attribution where = {}, uint32_t stream = 7) {
    KernelRecord k;
    k.name = name, k.start_ns = start, k.end_ns = end, k.stream = stream, k.where = where;
    k.grid[0] = 132, k.grid[1] = k.grid[2] = 1, k.block[0] = threads, k.block[1] = k.block[2] = 1;
    k.registers_per_thread = regs, k.static_smem = smem;
    r.kernels.push_back(k);
}
void add_api(ProfileRecords& r, const std::string& name, uint64_t start, uint64_t end) {
    ApiRecord a;
    a.name = name, a.start_ns = start, a.end_ns = end, a.thread = 1;
    r.api.push_back(a);
}
void add_copy(ProfileRecords& r, CopyKind kind, uint64_t start, uint64_t end, uint32_t stream = 7) {
    MemcpyRecord m;
    m.kind = kind, m.bytes = 1 << 20, m.start_ns = start, m.end_ns = end, m.stream = stream;
    r.memcpys.push_back(m);
}
std::vector<Finding> findings(const ProfileRecords& r, ProfileContext c = {}) {
    if (!c.sm.known()) c.sm = H100;
    return build_report(r, c).findings;
}
const Finding* rule(const std::vector<Finding>& f, const std::string& name) {
    for (const Finding& x : f)
        if (x.rule == name) return &x;
    return nullptr;
}

} // namespace

TEST(ProfilerFindings, OccupancyArithmetic) {
    // 128 regs x 512 threads: 4096 regs per warp, 16 warps by registers = 1 block of 16 warps: 25%.
    Occupancy o = theoretical_occupancy(128, 512, 0, H100);
    EXPECT_EQ(o.blocks, 1);
    EXPECT_DOUBLE_EQ(o.occupancy, 0.25);
    EXPECT_STREQ(o.limit, "registers");
    EXPECT_DOUBLE_EQ(o.without_registers, 1.0); // 4 blocks by threads
    // 255 regs round up to 8192 per warp: 8 warps, 2 blocks of 4 warps: 12.5%.
    o = theoretical_occupancy(255, 128, 0, H100);
    EXPECT_EQ(o.blocks, 2);
    EXPECT_DOUBLE_EQ(o.occupancy, 0.125);
    // 100 KB of shared memory (+1 KB reserved) per block: 2 blocks of 2 warps.
    o = theoretical_occupancy(32, 64, 100 * 1024, H100);
    EXPECT_EQ(o.blocks, 2);
    EXPECT_STREQ(o.limit, "shared memory");
    EXPECT_DOUBLE_EQ(o.occupancy, 4.0 / 64);
    // 32 regs x 256 threads: 8 blocks by threads and by registers alike; not register-limited.
    o = theoretical_occupancy(32, 256, 0, H100);
    EXPECT_EQ(o.blocks, 8);
    EXPECT_DOUBLE_EQ(o.occupancy, 1.0);
    EXPECT_STRNE(o.limit, "registers");
    // 32 threads: the 32-blocks-per-SM limit gives 32 warps of 64.
    o = theoretical_occupancy(16, 32, 0, H100);
    EXPECT_EQ(o.blocks, 32);
    EXPECT_STREQ(o.limit, "blocks");
    EXPECT_DOUBLE_EQ(o.occupancy, 0.5);
}

TEST(ProfilerFindings, RooflineFiresForASubBlockFarBelowItsCeiling) {
    ProfileContext c;
    GPT2Config g = gpt2_config_for_depth(12);
    c.model = g;
    c.B = 16, c.T = 1024;
    c.ceilings = {798, 0, 3000, "given"};
    // qkv forward: 695.78 GFLOP per step, a compute floor of 0.8719 ms at 798 TFLOP/s.
    const double floor_ms = 695784701952.0 / 798e12 * 1e3;
    const Attribution qkv{(int)SubBlock::qkv, (int)Phase::fwd, 0, 0};
    ProfileRecords slow = steps(1), fast = steps(1);
    add_kernel(slow, 0, 9 * MS, "nvjet_gemm", 32, 256, 0, qkv);
    add_kernel(fast, 0, 1 * MS, "nvjet_gemm", 32, 256, 0, qkv);
    add_kernel(fast, 1 * MS, 9 * MS); // unmodelled work fills the step

    std::vector<Finding> f = findings(slow, c);
    const Finding* x = rule(f, "roofline");
    ASSERT_NE(x, nullptr);
    EXPECT_NEAR(x->ms_per_step, 9 - floor_ms, 1e-9);
    EXPECT_TRUE(has(x->what, "qkv fwd runs at 10% of its compute roofline")) << x->what;
    EXPECT_TRUE(has(x->evidence, "9.000 ms per step against a floor of 0.872 ms")) << x->evidence;
    EXPECT_TRUE(has(x->next_step, "GEMM"));
    EXPECT_EQ(rule(findings(fast, c), "roofline"), nullptr) << "87% of roofline is not a finding";
    c.device_kind = DeviceKind::CPU; // the CPU trainer's profile: CPU advice, not cuBLASLt's
    f = findings(slow, c);
    x = rule(f, "roofline");
    ASSERT_NE(x, nullptr);
    EXPECT_TRUE(has(x->next_step, "on the CPU")) << x->next_step;
    EXPECT_FALSE(has(x->next_step, "cuBLASLt")) << x->next_step;
    // One profile runs one thread count: nothing in it says more threads would be faster.
    EXPECT_FALSE(has(x->next_step, "more OpenMP threads")) << x->next_step;
}

// 100 kernels of 60 us per step with 40 us gaps between them; in `launch` the CPU is inside
// cudaLaunchKernel during every gap, in the twin it does CPU work (no CUDA call).
TEST(ProfilerFindings, LaunchBoundNeedsSmallGapsInLaunchCalls) {
    ProfileRecords launch = steps(2), cpu_work = steps(2);
    for (int s = 0; s < 2; s++)
        for (int i = 0; i < 100; i++) {
            uint64_t t = s * 10 * MS + i * 100 * US;
            add_kernel(launch, t + 40 * US, t + 100 * US);
            add_kernel(cpu_work, t + 40 * US, t + 100 * US);
            add_api(launch, "cudaLaunchKernel", t, t + 40 * US);
        }
    std::vector<Finding> f = findings(launch);
    const Finding* x = rule(f, "launch_bound");
    ASSERT_NE(x, nullptr);
    EXPECT_NEAR(x->ms_per_step, 4.0, 1e-9); // 100 gaps of 40 us
    EXPECT_TRUE(has(x->evidence, "100 gaps < 100 us per step; 4.000 ms per step idle with the CPU in kernel launch "
                                 "calls (200 gaps); 100 kernels per step averaging 60.0 us"))
        << x->evidence;
    EXPECT_TRUE(has(x->next_step, "CUDA graph"));
    EXPECT_EQ(f.size(), 1u);
    EXPECT_TRUE(findings(cpu_work).empty());
}

TEST(ProfilerFindings, SyncStallNeedsTheGpuIdleDuringTheWait) {
    ProfileRecords stall = steps(1), busy = steps(1);
    add_kernel(stall, 0, 5 * MS);
    add_api(stall, "cudaStreamSynchronize", 4 * MS, 9500 * US); // GPU idle 5..9.5 ms during the wait
    add_kernel(busy, 0, 9500 * US);
    add_api(busy, "cudaStreamSynchronize", 4 * MS, 9500 * US); // waits, but the GPU works throughout
    add_kernel(busy, 9500 * US, 10 * MS);
    const Finding* x = nullptr;
    std::vector<Finding> f = findings(stall);
    ASSERT_NE(x = rule(f, "sync_stall"), nullptr);
    EXPECT_NEAR(x->ms_per_step, 4.5, 1e-9);
    EXPECT_TRUE(has(x->evidence, "4.500 ms per step idle with the CPU in cudaStreamSynchronize (1 gaps)"))
        << x->evidence;
    EXPECT_TRUE(findings(busy).empty());

    // Waiting through a full queue: 5 us launch-latency gaps between 95 us kernels are not a stall.
    ProfileRecords queued = steps(1);
    for (int i = 0; i < 100; i++) add_kernel(queued, i * 100 * US + 5 * US, (i + 1) * 100 * US);
    add_api(queued, "cudaEventSynchronize", 0, 10 * MS);
    EXPECT_TRUE(findings(queued).empty());
}

TEST(ProfilerFindings, MemcpyOnTheCriticalPathOnlyWhenExposed) {
    ProfileRecords exposed = steps(1), hidden = steps(1);
    add_copy(exposed, CopyKind::HtoD, 0, 2 * MS);
    add_kernel(exposed, 2 * MS, 10 * MS);
    add_copy(hidden, CopyKind::HtoD, 0, 2 * MS, 8); // on a side stream under the compute
    add_kernel(hidden, 0, 10 * MS);
    std::vector<Finding> f = findings(exposed);
    const Finding* x = rule(f, "memcpy");
    ASSERT_NE(x, nullptr);
    EXPECT_NEAR(x->ms_per_step, 2.0, 1e-9);
    EXPECT_TRUE(has(x->evidence, "1 HtoD/DtoH copies per step (1048.6 KB, 2.000 ms), 2.000 ms of it alone on the GPU"))
        << x->evidence;
    EXPECT_TRUE(findings(hidden).empty());

    // A synchronous copy call holding the CPU while the GPU idles counts too.
    ProfileRecords sync_copy = steps(1);
    add_kernel(sync_copy, 0, 7 * MS);
    add_api(sync_copy, "cudaMemcpy", 7 * MS, 10 * MS);
    f = findings(sync_copy);
    ASSERT_NE(x = rule(f, "memcpy"), nullptr);
    EXPECT_NEAR(x->ms_per_step, 3.0, 1e-9);
}

TEST(ProfilerFindings, OccupancyLimitedByRegisters) {
    ProfileRecords heavy = steps(1), light = steps(1), library = steps(1);
    add_kernel(heavy, 0, 4 * MS, "void llmc::fused_kernel(float*)", 128, 512);
    add_kernel(heavy, 4 * MS, 10 * MS);
    add_kernel(light, 0, 4 * MS, "void llmc::fused_kernel(float*)", 32, 512);
    add_kernel(light, 4 * MS, 10 * MS);
    add_kernel(library, 0, 4 * MS, "sm90_xmma_gemm_bf16bf16_bf16f32", 128, 512); // cuBLAS: by design
    add_kernel(library, 4 * MS, 10 * MS);
    std::vector<Finding> f = findings(heavy);
    const Finding* x = rule(f, "occupancy");
    ASSERT_NE(x, nullptr);
    EXPECT_NEAR(x->ms_per_step, 4.0 * (1 - 0.25) / 2, 1e-9);
    EXPECT_TRUE(has(x->what, "fused_kernel: occupancy 25% limited by registers")) << x->what;
    EXPECT_TRUE(has(x->evidence, "128 registers/thread x 512 threads/block -> 1 blocks/SM (100% without the register "
                                 "limit); 4.000 ms per step, 40% of GPU time"))
        << x->evidence;
    EXPECT_TRUE(has(x->next_step, "__launch_bounds__"));
    EXPECT_TRUE(findings(light).empty());
    EXPECT_TRUE(findings(library).empty());

    // A register-limited kernel below 5% of GPU time is not worth a finding.
    ProfileRecords small = steps(1);
    add_kernel(small, 0, 400 * US, "void llmc::fused_kernel(float*)", 128, 512);
    add_kernel(small, 400 * US, 10 * MS);
    EXPECT_TRUE(findings(small).empty());
}

TEST(ProfilerFindings, ThrottleFromReasonBitsOrLowClocks) {
    auto run = [](uint64_t reasons, int sm_mhz) {
        ProfileRecords r = steps(1);
        add_kernel(r, 0, 10 * MS);
        for (uint64_t t = 0; t < 10 * MS; t += MS) {
            PowerSample p;
            p.t_ns = t, p.power_w = 700, p.sm_clock_mhz = sm_mhz, p.temperature_c = 88, p.throttle_reasons = reasons;
            r.power.push_back(p);
        }
        r.max_sm_clock_mhz = 1980;
        return r;
    };
    std::vector<Finding> f = findings(run(0x4 | 0x40, 1485));
    const Finding* x = rule(f, "throttle");
    ASSERT_NE(x, nullptr);
    EXPECT_EQ(x->what, "the GPU throttles (SW power cap, HW thermal)");
    EXPECT_NEAR(x->ms_per_step, 10 * (1 - 1485.0 / 1980), 1e-9);
    EXPECT_TRUE(has(x->evidence, "10 of 10 samples throttled; SM clock 1485 MHz on average of 1980 MHz (75%)"))
        << x->evidence;
    // Low clocks without a reason bit still fire; idle (0x1) and application clocks (0x2) are not throttling.
    f = findings(run(0, 1500));
    ASSERT_NE(x = rule(f, "throttle"), nullptr);
    EXPECT_EQ(x->what, "SM clocks well below the maximum");
    EXPECT_TRUE(findings(run(0x1 | 0x2, 1980)).empty());
    EXPECT_EQ(throttle_names(0x8 | 0x20 | 0x80), "HW slowdown, SW thermal, HW power brake");
}

// A run with three limits: a sync stall (5 ms), an exposed copy (2 ms), dropped records (always first).
TEST(ProfilerFindings, RankedByTimeAtStake) {
    ProfileRecords r = steps(2);
    for (int s = 0; s < 2; s++) {
        uint64_t t = s * 10 * MS;
        add_copy(r, CopyKind::HtoD, t, t + 2 * MS);
        add_kernel(r, t + 2 * MS, t + 5 * MS);
        add_api(r, "cudaDeviceSynchronize", t + 5 * MS, t + 10 * MS);
    }
    std::vector<Finding> f = findings(r);
    ASSERT_EQ(f.size(), 2u);
    EXPECT_EQ(f[0].rule, "sync_stall");
    EXPECT_NEAR(f[0].ms_per_step, 5.0, 1e-9);
    EXPECT_EQ(f[1].rule, "memcpy");
    EXPECT_NEAR(f[1].ms_per_step, 2.0, 1e-9);

    r.dropped_records = 42;
    Report rep = build_report(r, {});
    ASSERT_EQ(rep.findings.size(), 3u);
    EXPECT_EQ(rep.findings[0].rule, "records");
    EXPECT_EQ(rep.findings[1].rule, "sync_stall");
    std::string s = format_summary(rep);
    EXPECT_TRUE(has(s, "== Findings ==\n  1. [records] activity records were dropped"));
    EXPECT_TRUE(has(s, "  2. [sync_stall] sync stalls: the GPU idles while the CPU waits on it (~5.000 ms per step at "
                       "stake)\n     evidence: 5.000 ms per step idle with the CPU in cudaDeviceSynchronize"))
        << s;
    EXPECT_TRUE(has(s, "     next: queue the next step's work before waiting"));
    std::string j = profile_json(rep);
    EXPECT_TRUE(has(j, "\"rule\": \"memcpy\"")) << j.substr(0, 200);
}

// Each rule on its own, from a report and its records: the engine is the list of rules and nothing more.
TEST(ProfilerFindings, EachRuleRunsAlone) {
    EXPECT_EQ(ranked_rules().size(), 8u);
    ProfileRecords quiet = steps(2);
    add_kernel(quiet, 0, 10 * MS);
    add_kernel(quiet, 10 * MS, 20 * MS);
    Report rep = build_report(quiet, {});
    const FindingInput in(rep, quiet);
    for (Rule rule : ranked_rules()) EXPECT_TRUE(rule(in).empty());
    EXPECT_TRUE(records_rule(in).empty());

    rep.dropped_records = 3;
    std::vector<Finding> dropped = records_rule(FindingInput(rep, quiet));
    ASSERT_EQ(dropped.size(), 1u);
    EXPECT_EQ(dropped[0].rule, "records");
    EXPECT_TRUE(has(dropped[0].evidence, "3 CUPTI records lost")) << dropped[0].evidence;
}

// Occupancy is judged against the device's own limits; without them (the CPU trainer) there is no finding.
TEST(ProfilerFindings, OccupancyNeedsTheDevicesLimits) {
    ProfileRecords r = steps(1);
    add_kernel(r, 0, 9 * MS, "void llmc::fused_kernel(float*)", 128, 512);
    ProfileContext c;
    EXPECT_TRUE(occupancy_rule(FindingInput(build_report(r, c), r)).empty());
    EXPECT_EQ(theoretical_occupancy(128, 512, 0, SmLimits{}).blocks, 0);
    c.sm = H100;
    Report rep = build_report(r, c);
    std::vector<Finding> f = occupancy_rule(FindingInput(rep, r));
    ASSERT_EQ(f.size(), 1u);
    EXPECT_TRUE(has(f[0].what, "fused_kernel: occupancy 25% limited by registers")) << f[0].what;
    // A device with half the registers per SM: the same kernel fits half the warps.
    SmLimits small = H100;
    small.regs = 32768;
    EXPECT_DOUBLE_EQ(theoretical_occupancy(128, 512, 0, small).occupancy, 0.0);
    EXPECT_DOUBLE_EQ(theoretical_occupancy(128, 256, 0, small).occupancy, 0.125);
}
