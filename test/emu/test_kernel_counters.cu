/*
 * The emulated memory counters (test/emu/counters.h) on our own kernels (suite EmuKernelCounters): the access
 * patterns doc/gpu_trainer.md reports, each against the count its model predicts. Access counts on the host,
 * labelled emulated; not timings. Built only against the emulator, whose plain build is instrumented.
 */
#include <cstdio>
#include <gtest/gtest.h>
#include <vector>

#include "llmc/adamw.cuh"
#include "llmc/bias_backward.cuh"
#include "test/emu/counters.h"
#include "test/gpu/gpu_test_util.cuh"

using gputest::DeviceBuffer;
using llmc::floatX;

namespace {

void print(const emu::count::Launch& c) {
    printf("emulated counters, %s: %llu blocks; global ld %llu requests %llu sectors, st %llu requests %llu sectors; "
           "shared ld %llu requests %llu wavefronts %llu conflicts, st %llu requests %llu wavefronts %llu conflicts; "
           "DRAM bounds %llu..%llu read sectors, %llu..%llu written\n",
           c.kernel.c_str(), (unsigned long long)c.blocks, (unsigned long long)c.ld_requests,
           (unsigned long long)c.ld_sectors, (unsigned long long)c.st_requests, (unsigned long long)c.st_sectors,
           (unsigned long long)c.shared_ld_requests, (unsigned long long)c.shared_ld_wavefronts,
           (unsigned long long)c.shared_ld_conflicts, (unsigned long long)c.shared_st_requests,
           (unsigned long long)c.shared_st_wavefronts, (unsigned long long)c.shared_st_conflicts,
           (unsigned long long)c.unique_read_sectors, (unsigned long long)c.ld_sectors,
           (unsigned long long)c.unique_write_sectors, (unsigned long long)c.st_sectors);
}

} // namespace

/*
 * AdamW (llmc/adamw.cuh), a warp's 256 values, each lane 4 at 4 * lane and 4 at 128 + 4 * lane: per half, the
 * bf16 gradient is one 8-byte load a lane over 256 contiguous bytes (8 sectors, the ideal) and each fp32 stream
 * (master, m, v) one 16-byte load a lane over 512 contiguous bytes (16 sectors, the ideal); the step's three
 * scalars are one sector each. Stores alike, with the bf16 parameters. Every sector is used once, so the DRAM
 * lower bound is the tensors' bytes. (With 8 consecutive values a lane, each fp32 request took 32 sectors.)
 */
TEST(EmuKernelCounters, AdamWStreamsAreCoalesced) {
    REQUIRE_INSTRUMENTATION();
    const size_t n = 8 * llmc::ADAMW_THREADS * 4; // four blocks of whole warps
    DeviceBuffer<floatX> params(n), grads(n);
    DeviceBuffer<float> master(n), m(n), v(n);
    for (auto* b : {&master, &m, &v}) CUDA_CHECK(cudaMemset(b->ptr, 0, n * sizeof(float)));
    CUDA_CHECK(cudaMemset(grads.ptr, 0, n * sizeof(floatX)));
    DeviceBuffer<llmc::AdamWStep> step(std::vector<llmc::AdamWStep>{llmc::adamw_step(1e-3f, 0.9f, 0.95f, 1)});
    emu::count::start();
    llmc::adamw_update(params, master, grads, m, v, n, step, 0.9f, 0.95f, 1e-8f, 0.1f, nullptr, 0.0f, nullptr);
    CUDA_CHECK(cudaDeviceSynchronize());
    const std::vector<emu::count::Launch> c = emu::count::stop();
    ASSERT_EQ(c.size(), 1u);
    print(c[0]);
    const uint64_t warps = n / 8 / 32;
    EXPECT_EQ(c[0].ld_requests, warps * (2 * (1 + 3) + 3));
    EXPECT_EQ(c[0].ld_sectors, warps * (2 * (8 + 3 * 16) + 3));
    EXPECT_EQ(c[0].ld_ideal_sectors, c[0].ld_sectors) << "every load request takes the ideal sectors";
    EXPECT_EQ(c[0].st_requests, warps * 2 * (1 + 3));
    EXPECT_EQ(c[0].st_sectors, warps * 2 * (8 + 3 * 16));
    EXPECT_EQ(c[0].st_ideal_sectors, c[0].st_sectors);
    EXPECT_EQ(c[0].unique_read_sectors, n * 2 / 32 + 3 * n * 4 / 32 + 1);
    EXPECT_EQ(c[0].unique_write_sectors, n * 2 / 32 + 3 * n * 4 / 32);
}

// bias_backward (llmc/bias_backward.cuh) at GPT-2's OC = 768 and BT = 256: no bank conflicts on any shared access
// (the row threads' sums are 16-byte stores, the quarter pass reads the two padded halves in different banks;
// before, 2.65 conflicts per store request and 0.81 per load).
TEST(EmuKernelCounters, BiasBackwardSharedMemoryIsConflictFree) {
    REQUIRE_INSTRUMENTATION();
    const int BT = 256, OC = 768;
    DeviceBuffer<floatX> dout(gputest::to_bf16(gputest::random_normal((size_t)BT * OC))), dbias(OC);
    CUDA_CHECK(cudaMemset(dbias.ptr, 0, OC * sizeof(floatX)));
    DeviceBuffer<float> scratch(llmc::bias_backward_scratch_floats(OC));
    emu::count::start();
    llmc::bias_backward(dbias, scratch, dout, BT, OC, nullptr);
    CUDA_CHECK(cudaDeviceSynchronize());
    const std::vector<emu::count::Launch> c = emu::count::stop();
    ASSERT_EQ(c.size(), 1u);
    print(c[0]);
    ASSERT_GT(c[0].shared_st_requests, 0u);
    ASSERT_GT(c[0].shared_ld_requests, 0u);
    printf("bias_backward: shared stores %.2f wavefronts per request (%.2f conflicts), loads %.2f (%.2f)\n",
           (double)c[0].shared_st_wavefronts / c[0].shared_st_requests,
           (double)c[0].shared_st_conflicts / c[0].shared_st_requests,
           (double)c[0].shared_ld_wavefronts / c[0].shared_ld_requests,
           (double)c[0].shared_ld_conflicts / c[0].shared_ld_requests);
    EXPECT_EQ(c[0].shared_st_conflicts, 0u);
    EXPECT_EQ(c[0].shared_ld_conflicts, 0u);
}
