// The GPU programs' profile session (llmc/profiler/gpu_session.h).
#include "llmc/profiler/gpu_session.h"

#include <cstdio>

#include "llmc/profiler/cupti_source.cuh"

namespace llmc::prof {

std::unique_ptr<ProfileSession> make_gpu_profile_session(const SessionOptions& so, ProfileContext ctx) {
    auto source = std::make_unique<CuptiEventSource>();
    // Refused before the ceilings are measured.
    std::unique_ptr<EnergyCounter> energy = so.energy ? energy_counter_for(*source) : nullptr;
    if (so.measure_ceilings) {
        ctx.ceilings = measure_ceilings(true);
    } else {
        cudaDeviceProp p;
        CUDA_CHECK(cudaGetDeviceProperties(&p, 0));
        ctx.ceilings = spec_ceilings(p.name);
    }
    printf("profile: %s into %s/; ceilings bf16 %.0f TFLOP/s, DRAM %.0f GB/s (%s)\n",
           ProfileSchedule(so.first_step, so.steps).window().c_str(), so.dir.c_str(), ctx.ceilings.bf16_tflops,
           ctx.ceilings.dram_gbps, ctx.ceilings.source.c_str());
    return std::make_unique<ProfileSession>(so, std::move(ctx), std::move(source), std::move(energy));
}

} // namespace llmc::prof
