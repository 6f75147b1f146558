/*
 * Datasheet ceilings by GPU name: dense bf16 tensor-core TFLOP/s (fp32 accumulate) and DRAM bandwidth.
 * Used for MFU in the step line and "% of peak" in the kernel benchmarks; the profiler measures its own.
 */
#pragma once
#include <cstring>

namespace llmc {

struct DeviceSpec {
    const char* name_fragment;
    double bf16_tflops;
    double dram_gbps;
};

// The first entry whose fragment occurs in the device name; null for an unknown device.
inline const DeviceSpec* lookup_device_spec(const char* device_name) {
    static const DeviceSpec table[] = {
        {"H200", 989, 4800},          {"H100 80GB HBM3", 989, 3350}, {"H100 PCIe", 756, 2000}, {"H100", 989, 3350},
        {"A100-SXM4-80GB", 312, 2039}, {"A100", 312, 1555},           {"L40S", 362, 864},       {"RTX 4090", 165, 1008},
        {"A10", 125, 600}};
    for (const DeviceSpec& s : table)
        if (strstr(device_name, s.name_fragment)) return &s;
    return nullptr;
}

// Model FLOPs per trained token (forward + backward): 6 per parameter, plus attention's 12·L·C·T
// (llm.c's and PaLM's convention, causal masking not discounted).
inline double gpt2_flops_per_token(size_t num_params, int L, int C, int T) {
    return 6.0 * (double)num_params + 12.0 * L * C * (double)T;
}

} // namespace llmc
