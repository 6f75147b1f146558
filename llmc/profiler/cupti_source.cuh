/*
 * The GPU's event source: CUPTI activity tracing (llmc/profiler/cupti_collector.cuh) behind the session
 * interface (llmc/profiler/session.h), with NVML power in CUPTI's timebase, and the GPU's profile context
 * (the device, its per-SM limits and the build). Used by train_gpt2cu --profile and infer_gpt2cu --profile
 * through make_gpu_profile_session (llmc/profiler/gpu_session.h), and by profile_gpt2cu.
 */
#pragma once
#include <cublasLt.h>
#include <memory>
#include <string>

#include "llmc/profiler/calibrate.cuh"
#include "llmc/profiler/cupti_collector.cuh"
#include "llmc/profiler/cupti_version.h"
#include "llmc/profiler/session.h"

namespace llmc::prof {

// The device's per-SM limits for theoretical occupancy.
inline SmLimits sm_limits(const cudaDeviceProp& p) {
    SmLimits sm;
    sm.regs = p.regsPerMultiprocessor;
    sm.threads = p.maxThreadsPerMultiProcessor;
    sm.blocks = p.maxBlocksPerMultiProcessor;
    sm.smem = (int)p.sharedMemPerMultiprocessor;
    sm.smem_reserved_per_block = (int)p.reservedSharedMemPerBlock;
    return sm;
}

// The toolchain and libraries: "nvcc 13.0, CUDA runtime 13.0, driver 13.0, cuBLASLt 130000, CUPTI API 130000"
// (the CUPTI part names the version built for too where it differs). Needs no device.
inline std::string toolchain_versions() {
    int runtime = 0, driver = 0;
    uint32_t cupti = 0;
    CUDA_CHECK(cudaRuntimeGetVersion(&runtime));
    CUDA_CHECK(cudaDriverGetVersion(&driver)); // 0 without a driver
    CUPTI_CHECK(cuptiGetVersion(&cupti));
    return strprintf("nvcc %d.%d, CUDA runtime %d.%d, driver %d.%d, cuBLASLt %zu, %s", __CUDACC_VER_MAJOR__,
                     __CUDACC_VER_MINOR__, runtime / 1000, runtime % 1000 / 10, driver / 1000, driver % 1000 / 10,
                     cublasLtGetVersion(), cupti_version_text(cupti, CUPTI_API_VERSION).c_str());
}

// What only the GPU knows: its name and limits, the build, the device memory in use, and the cuBLASLt algorithm
// of every matmul plan (llmc/matmul.cuh). Everything is allocated up front, so the memory in use when this is
// called is the run's peak.
inline void complete_gpu_context(ProfileContext& ctx) {
    int dev = 0;
    cudaDeviceProp p;
    CUDA_CHECK(cudaGetDevice(&dev));
    CUDA_CHECK(cudaGetDeviceProperties(&p, dev));
    ctx.device_kind = DeviceKind::GPU;
    ctx.device = p.name;
    ctx.sm = sm_limits(p);
    ctx.build = strprintf("%s, sm_%d%d", toolchain_versions().c_str(), p.major, p.minor);
    size_t free_b = 0, total_b = 0;
    CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
    ctx.peak_memory_bytes = total_b - free_b;
    ctx.gemm_algorithms = gemm_tunings();
}

class CuptiEventSource : public EventSource {
public:
    bool start() override {
        collector_ = std::make_unique<CuptiCollector>();
        if (collector_->start()) return true;
        collector_.reset();
        return false;
    }
    bool slow_start() const override { return true; }
    void begin_step(int index) override { collector_->begin_step(index); }
    void end_step(long tokens) override { collector_->end_step(tokens); }
    bool flush() override {
        collector_->flush();
        return true;
    }
    void stop() override { collector_->stop(); }
    ProfileRecords take() override {
        ProfileRecords r = collector_->take();
        collector_.reset();
        return r;
    }
    void complete_context(ProfileContext& ctx) override { complete_gpu_context(ctx); }
    std::function<uint64_t()> power_clock() const override { return CuptiCollector::timestamp; }
    std::string pci_bus_id() const override {
        int device = 0;
        char bus_id[32] = {};
        if (cudaGetDevice(&device) != cudaSuccess || cudaDeviceGetPCIBusId(bus_id, sizeof(bus_id), device) != cudaSuccess)
            return "";
        return bus_id;
    }
    std::unique_ptr<EnergyCounter> energy_counter() const override { return nvml_energy_counter(pci_bus_id()); }

private:
    std::unique_ptr<CuptiCollector> collector_;
};

} // namespace llmc::prof
