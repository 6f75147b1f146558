// NVML power sampling on a real GPU (llmc/profiler/nvml_sampler.h): samples taken while a kernel keeps the GPU busy
// have positive power and clocks, in CUPTI's timebase. Skipped without a GPU.
#include <chrono>
#include <gtest/gtest.h>
#include <thread>

#include "llmc/profiler/cupti_collector.cuh"
#include "llmc/profiler/nvml_sampler.h"
#include "llmc/profiler/report.h"
#include "test/gpu/gpu_test_util.cuh"

using namespace llmc;
using namespace llmc::prof;

namespace {

// Spins every thread for `cycles` clock ticks: keeps the SMs busy without memory traffic.
__global__ void spin_kernel(long long cycles, int* sink) {
    long long start = clock64();
    int x = threadIdx.x;
    while (clock64() - start < cycles) x = x * 1664525 + 1013904223;
    if (x == 42) *sink = x; // never true in practice; keeps the loop alive
}

} // namespace

TEST(ProfilerPowerGpu, SamplesDuringABusyLoopHavePositivePower) {
    REQUIRE_GPU();
    int device = 0;
    char bus_id[32] = {};
    CUDA_CHECK(cudaGetDevice(&device));
    CUDA_CHECK(cudaDeviceGetPCIBusId(bus_id, sizeof(bus_id), device));
    PowerSampler power(CuptiCollector::timestamp, 20, bus_id);
    if (!power.available()) GTEST_SKIP() << "power: " << power.status();
    int sms = 0, khz = 0;
    CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
    CUDA_CHECK(cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, device));
    int* sink = nullptr;
    CUDA_CHECK(cudaMalloc(&sink, sizeof(int)));

    // t0 before the sampler starts and t1 after it stops: every sample falls between them.
    const uint64_t t0 = CuptiCollector::timestamp();
    ASSERT_TRUE(power.start());
    power.mark();
    // ~0.5 s of spinning at the GPU's clock rate (kHz), over every SM.
    for (int i = 0; i < 5; i++) spin_kernel<<<sms * 4, 256>>>(khz * 100LL, sink);
    CUDA_CHECK(cudaDeviceSynchronize());
    power.mark();
    power.stop();
    const uint64_t t1 = CuptiCollector::timestamp();
    CUDA_CHECK(cudaFree(sink));

    ProfileRecords r;
    power.take_into(r);
    ASSERT_GE(r.power.size(), 5u); // 20 ms interval over >= 0.3 s
    for (const PowerSample& s : r.power) {
        EXPECT_GT(s.power_w, 0);
        EXPECT_GT(s.sm_clock_mhz, 0);
        EXPECT_GE(s.t_ns, t0);
        EXPECT_LE(s.t_ns, t1);
    }
    StepRecord st;
    st.start_ns = t0, st.end_ns = t1, st.tokens = 1000;
    r.steps = {st};
    Report rep = build_report(r, ProfileContext{});
    EXPECT_GT(rep.steps[0].energy_j, 0);
    EXPECT_GT(rep.steps[0].avg_power_w, 10); // a busy datacenter GPU draws far more than 10 W
    printf("power: %zu samples (%s), %.1f J over %.3f s (%.0f W, energy from %s), SM clock %d MHz of max %d MHz\n",
           r.power.size(), power.instant_power() ? "instantaneous" : "1 s average", rep.steps[0].energy_j, (t1 - t0) / 1e9, rep.steps[0].avg_power_w,
           energy_source_name(rep.steps[0].energy_source), r.power.back().sm_clock_mhz, r.max_sm_clock_mhz);
}
