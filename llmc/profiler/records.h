/*
 * Profiler records: what the collection layer (CUPTI activity buffers, llmc/profiler/cupti_collector.cuh) produces and
 * the aggregation and writer layers consume. Plain C++ with no CUDA types, so aggregation, roofline and
 * writers are testable from synthetic records on machines without a GPU.
 *
 * Times are nanoseconds in one timebase (CUPTI's, cuptiGetTimestamp), for CPU ranges and GPU activity alike.
 * Attribution: every Range (llmc/nvtx.h) pushes an external correlation id that encodes its sub-block, phase,
 * layer and step (pack_range_id); CUPTI links each API call's correlation id to the innermost pushed id, and
 * the collector copies the decoded fields onto the kernel, memcpy and memset records (attribute_activities).
 * Work replayed from a CUDA graph was launched by one cudaGraphLaunch: it carries its graph node's id, and takes
 * the Range open when that node was captured.
 */
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "llmc/profiler/gemm_tuning.h"
#include "llmc/model/gpt2_config.h"
#include "llmc/model/memory_plan.h"
#include "llmc/model/subblocks.h"

namespace llmc::prof {

// Where an activity belongs. -1 = outside any such range.
struct Attribution {
    int subblock = -1; // (int)SubBlock
    int phase = -1;    // (int)Phase
    int layer = -1;
    int step = -1;     // the profiled step: its number in the run, from 1 as the step lines print it
};

// External correlation id layout: step (24 bits) | layer (16) | phase (8) | subblock (8); 0xFF/0xFFFF = none.
// Step numbers past 2^24 - 2 wrap here; the report places activities in steps by time, not by this field.
inline uint64_t pack_range_id(const Attribution& a) {
    auto field = [](int v, uint64_t none) { return v < 0 ? none : (uint64_t)v; };
    return field(a.step, 0xFFFFFF) << 32 | field(a.layer, 0xFFFF) << 16 | field(a.phase, 0xFF) << 8 |
           field(a.subblock, 0xFF);
}
inline Attribution unpack_range_id(uint64_t id) {
    auto field = [](uint64_t v, uint64_t none) { return v == none ? -1 : (int)v; };
    return {field(id & 0xFF, 0xFF), field((id >> 8) & 0xFF, 0xFF), field((id >> 16) & 0xFFFF, 0xFFFF),
            field((id >> 32) & 0xFFFFFF, 0xFFFFFF)};
}

struct KernelRecord {
    std::string name; // demangled
    uint64_t start_ns = 0, end_ns = 0;
    uint32_t device = 0, stream = 0;
    uint32_t correlation = 0; // launch's correlation id (links to its ApiRecord)
    int grid[3] = {0, 0, 0}, block[3] = {0, 0, 0};
    int registers_per_thread = 0;
    int static_smem = 0, dynamic_smem = 0; // bytes per block
    uint64_t graph_node = 0;               // the CUDA graph node it was replayed from; 0: launched directly
    Attribution where;
};

enum class CopyKind { HtoD, DtoH, DtoD, HtoH, Other, COUNT };
inline const char* copy_kind_name(CopyKind k) {
    static constexpr const char* names[] = {"HtoD", "DtoH", "DtoD", "HtoH", "other"};
    return enum_table<CopyKind>(names)[(int)k];
}
struct MemcpyRecord {
    CopyKind kind = CopyKind::Other;
    uint64_t bytes = 0;
    uint64_t start_ns = 0, end_ns = 0;
    uint32_t device = 0, stream = 0, correlation = 0;
    uint64_t graph_node = 0;
    Attribution where;
};
struct MemsetRecord {
    uint64_t bytes = 0;
    uint64_t start_ns = 0, end_ns = 0;
    uint32_t device = 0, stream = 0, correlation = 0;
    uint64_t graph_node = 0;
    Attribution where;
};

// A CUDA runtime (or driver) API call on a CPU thread.
struct ApiRecord {
    std::string name; // "cudaLaunchKernel", "cudaMemcpyAsync", ...
    uint64_t start_ns = 0, end_ns = 0;
    uint32_t thread = 0, correlation = 0;
};

// Time a CPU thread spent blocked in a synchronisation call (CUPTI synchronization activity).
struct SyncRecord {
    std::string type; // "event", "stream", "context", "stream_wait_event"
    uint64_t start_ns = 0, end_ns = 0;
    uint32_t stream = 0, correlation = 0;
};

// A CPU-side Range (llmc/nvtx.h), recorded by the profiler's hook.
struct RangeRecord {
    std::string name;
    uint64_t start_ns = 0, end_ns = 0;
    uint32_t thread = 0;
    int depth = 0; // nesting depth on its thread, 0 = outermost
    Attribution where;
    // The CPU trainer's phase ranges: the correlation id its sub-block executions carry, as a CUDA call's
    // links it to its kernels (trace analysers find device work through the CPU event it came from). 0: none.
    uint32_t correlation = 0;
};

// One training step of the profiled window: its number in the run (as the step lines print it), its wall
// interval on the CPU and the tokens it trained.
struct StepRecord {
    int step = 0;
    uint64_t start_ns = 0, end_ns = 0;
    long tokens = 0;
};

// Work of a training run between two profiled steps that is not a step: a validation, a sample or a checkpoint
// write (what the trainer reports "at step N", after step N). Timed by the run on its own clock; only its length
// is kept.
struct OutsideStepRecord {
    std::string kind; // "val", "sample" or "checkpoint"
    int after_step = 0; // the step it came after, as the step lines print it
    double wall_ms = 0;
};

// A power/clock sample (NVML, filled by the power sampler; empty without NVML).
struct PowerSample {
    uint64_t t_ns = 0;
    double power_w = 0;
    int sm_clock_mhz = 0, mem_clock_mhz = 0, temperature_c = 0;
    uint64_t throttle_reasons = 0; // NVML clocks event reasons (bit mask, see llmc/profiler/findings.h)
};

// A cumulative energy counter read at a step boundary: NVML's (llmc/profiler/nvml_sampler.h) or the CPU's
// RAPL counter (llmc/profiler/rapl.h).
struct EnergyReading {
    uint64_t t_ns = 0;
    double joules = 0; // since the driver loaded
};

// Measured or datasheet ceilings the roofline is drawn against.
struct Ceilings {
    double bf16_tflops = 0; // dense tensor-core bf16 with fp32 accumulate
    double fp32_tflops = 0; // CUDA-core fp32 (0 = unknown)
    double dram_gbps = 0;   // DRAM bandwidth, bytes read + written
    std::string source;     // "calibrated (cached ...)", "calibrated", "spec table", "none"
};

/*
 * Per-SM limits of the device for theoretical occupancy, from cudaDeviceProp (regsPerMultiprocessor,
 * maxThreadsPerMultiProcessor, maxBlocksPerMultiProcessor, sharedMemPerMultiprocessor,
 * reservedSharedMemPerBlock). All zero: unknown (the CPU trainer, synthetic records), and no occupancy finding.
 */
struct SmLimits {
    int regs = 0, threads = 0, blocks = 0;
    int smem = 0;                    // shared memory per SM, bytes
    int smem_reserved_per_block = 0; // the runtime's reservation per block, bytes
    int reg_alloc_unit = 256;        // registers are allocated per warp in units of 256 (every sm_80+ GPU)
    bool known() const { return regs > 0 && threads > 0 && blocks > 0; }
};

// What ran the profiled steps: a GPU (kernels, CUDA calls, device memory) or the CPU trainer, whose
// "kernels" are sub-block executions on the CPU.
enum class DeviceKind { GPU, CPU, COUNT };
inline const char* device_kind_name(DeviceKind k) {
    static constexpr const char* names[] = {"GPU", "CPU"};
    return enum_table<DeviceKind>(names)[(int)k];
}

/*
 * What an inference run (infer_gpt2) processed, for the prefill and decode phases' costs and tables: step 0 of
 * its profile is the prefill of every prompt, each later step one decode step (one token per running
 * sequence). Empty (prompt_tokens == 0) for training.
 */
struct InferenceShape {
    long sequences = 0;         // B
    long prompt_tokens = 0;     // prefill rows, every sequence's prompt
    double prompt_pairs = 0;    // causal (query, key) pairs of the prefill: sum over prompts of n(n+1)/2
    long decode_steps = 0;      // decode calls; each reads every weight once
    long decode_tokens = 0;     // decode rows, one per running sequence per step
    double decode_context = 0;  // keys attended over all decode rows: the KV cache positions read
    size_t kv_cache_bytes = 0;  // the KV cache as allocated
    int elem_bytes = 4;         // bytes per weight, activation and cache element (4: fp32, 2: bf16)
    bool active() const { return prompt_tokens > 0; }
};

// What was profiled: the model, the batch, the device and the build. Fills the report's header and profile.json.
struct ProfileContext {
    std::string program;      // "profile_gpt2cu", "train_gpt2cu", "train_gpt2"
    std::string device;       // GPU name, or the CPU model for the CPU trainer
    DeviceKind device_kind = DeviceKind::GPU;
    std::string build;        // compiler / CUDA / git describe, free text
    GPT2Config model{};       // num_layers == 0: no model (no analytic costs)
    size_t num_parameters = 0; // 0: counted from `model`
    int B = 0, T = 0, grad_accum = 1; // micro-batch, sequence length, micro-batches per step
    Ceilings ceilings;
    SmLimits sm;              // the GPU's per-SM limits (occupancy)
    size_t peak_memory_bytes = 0;
    InferenceShape inference; // inference runs only; B is then the sequences, T the longest prompt
    int rank = 0, world_size = 1; // data-parallel rank of the process profiled, of how many (trace.json distributedInfo)
    MemoryPlan memory;        // the program's allocations and tensors (llmc/model/memory_plan.h); empty: not known
    std::vector<GemmTuning> gemm_algorithms; // GPU: every cuBLASLt matmul plan's algorithm and autotune times
};

// --energy (llmc/profiler/energy.h): each target replayed in repeated measurements of the device's energy counter.
// part: one (sub-block, phase) of the step, all its layers; step: the whole step; idle: nothing queued.
enum class EnergyKind { part, step, idle };
// One measurement: the counter's advance over `seconds` between two of its updates, while `replays` replays ran
// (idle: waits); the SM clock and temperature read after it (0: unknown).
struct EnergyRun {
    double joules = 0, seconds = 0;
    long replays = 0;
    int sm_clock_mhz = 0, temperature_c = 0;
};
struct EnergyTargetRecord {
    std::string subblock, phase, layers; // layers: "0-11" for the per-layer sub-blocks, "-" otherwise
    EnergyKind kind = EnergyKind::part;
    std::vector<EnergyRun> runs;         // one per repetition, in the order measured
    double seconds_spent = 0;            // its calibration and measurements, all told
};
struct EnergyRecords {
    bool requested = false;    // --energy was given
    std::string source;        // "NVML total energy counter", "RAPL package counters", "synthetic (scripted counter)"
    bool synthetic = false;    // a scripted counter (the sample profile, tests), not a device
    std::string status;        // why nothing was measured ("" when it was)
    double counter_period_s = 0, window_s = 0, budget_s = 0;
    std::vector<EnergyTargetRecord> targets; // idle first, then the parts in step order, then the whole step
};

struct ProfileRecords {
    std::vector<KernelRecord> kernels;
    std::vector<MemcpyRecord> memcpys;
    std::vector<MemsetRecord> memsets;
    std::vector<ApiRecord> api;
    std::vector<SyncRecord> syncs;
    std::vector<RangeRecord> ranges;
    std::vector<StepRecord> steps;
    std::vector<PowerSample> power;
    std::vector<EnergyReading> energy;
    std::vector<OutsideStepRecord> outside_steps; // between the first and the last profiled step
    std::string power_reading; // "instantaneous" or "1 s average": what NVML's power samples are
    std::string power_status;  // why there is no power data ("NVML not available (...)"), "" when there is
    std::string energy_counter = "NVML energy counter"; // what the energy readings count
    int max_sm_clock_mhz = 0;  // the GPU's maximum SM clock (NVML), 0 = unknown
    EnergyRecords energy_replays;  // --energy: measured after the window (llmc/profiler/energy.h)
    uint64_t dropped_records = 0;  // CUPTI records lost to full buffers
    double cupti_overhead_ns = 0;  // CUPTI's own overhead records, summed
};

} // namespace llmc::prof
