/*
 * Hardware counters per kernel with CUPTI's range profiler (cupti_range_profiler.h + cupti_profiler_host.h).
 *
 * Host half, no GPU needed: MetricConfig turns a metric list and a chip name ("GH100") into the config image
 * the profiler schedules its passes from, and evaluates counter data back into metric values.
 *
 * Device half: collect_counters() runs one callable (a training step) under the range profiler with auto
 * range (one range per kernel, named by its index) and kernel replay (CUPTI replays each kernel once per pass,
 * saving and restoring its memory, so one call of the step collects every pass), and returns one
 * KernelCounters per kernel in launch order. Activity tracing (llmc/profiler/cupti_collector.cuh) must be stopped
 * first: it would record the replays. Joining to sub-blocks: llmc/profiler/counter_records.h.
 *
 * Compiled once (cupti_counters.cu), in the GPU programs and the nvcc build's tests.
 *
 * Metric sets (pass counts observed for chip GH100 with CUPTI 2025.3.1, test/test_counters.cpp):
 *   COUNTER_METRICS  time, DRAM read/write, L2 bytes, bf16 tensor ops, and the peaks and clocks for the
 *                    per-kernel ceilings: 1 pass;
 *   FP32_METRICS     fadd, fmul, ffma thread instructions: 1 pass on their own;
 *   both             2 passes (the FP32 instruction counters do not fit beside the first set). The counted
 *                    step uses both in one config; kernel replay runs the two passes per kernel.
 */
#pragma once
#include <cupti.h>
#include <cupti_profiler_host.h>
#include <functional>
#include <string>
#include <vector>

#include "llmc/profiler/counter_records.h"
#include "llmc/util/utils.h"

namespace llmc::prof {

inline const std::vector<std::string> COUNTER_METRICS = {
    "gpu__time_duration.sum",
    "dram__bytes_read.sum",
    "dram__bytes_write.sum",
    "lts__t_bytes.sum",
    "sm__ops_path_tensor_src_bf16_dst_fp32.sum",
    // Ceilings: peak per cycle x the clock the kernel ran at (cycles elapsed / duration).
    "sm__ops_path_tensor_src_bf16_dst_fp32.sum.peak_sustained",
    "smsp__sass_thread_inst_executed_op_ffma_pred_on.sum.peak_sustained",
    "sm__cycles_elapsed.avg.per_second",
    "dram__bytes.sum.peak_sustained",
    "dram__cycles_elapsed.avg.per_second",
};
inline const std::vector<std::string> FP32_METRICS = {
    "smsp__sass_thread_inst_executed_op_fadd_pred_on.sum",
    "smsp__sass_thread_inst_executed_op_fmul_pred_on.sum",
    "smsp__sass_thread_inst_executed_op_ffma_pred_on.sum",
};

// Thrown for CUPTI failures of the counter path; `code` lets callers tell a permission problem apart.
struct CounterError : Error {
    CUptiResult code;
    CounterError(CUptiResult c, const std::string& what);
};

/*
 * A host object for one chip and one metric list: the config image (what to program in each pass) and the
 * evaluation of counter data. `counter_availability` (from the device) may be empty: then every counter is
 * assumed available, which is what a CI machine without a GPU can do.
 */
class MetricConfig {
public:
    MetricConfig(const std::string& chip, const std::vector<std::string>& metrics,
                 const std::vector<uint8_t>& counter_availability = {});
    ~MetricConfig() { release(); }
    MetricConfig(const MetricConfig&) = delete;
    MetricConfig& operator=(const MetricConfig&) = delete;

    const std::vector<uint8_t>& config_image() const { return image_; }
    const std::vector<std::string>& metrics() const { return metrics_; }

    // Replays each kernel needs to collect every metric.
    size_t num_passes() const;

    // Values of metrics() for range `range` of a decoded counter-data image, in metrics() order.
    std::vector<double> evaluate(const std::vector<uint8_t>& counter_data, size_t range) const;

private:
    void release() noexcept;
    std::vector<std::string> metrics_;
    CUpti_Profiler_Host_Object* host_ = nullptr;
    std::vector<uint8_t> image_;
};

// All metrics a counted step collects: COUNTER_METRICS then FP32_METRICS.
std::vector<std::string> all_counter_metrics();

// One evaluated range (values in all_counter_metrics() order) as a KernelCounters.
KernelCounters kernel_counters_from(const std::string& name, const std::vector<double>& v);

/*
 * Runs `step` once under the range profiler on the current device and returns its kernels' counters in
 * launch order (names demangled by `demangle_name`). Never throws for a CUPTI failure: the report says
 * why in `note` and `collected` stays false, so the rest of the profile is still written. `max_kernels`
 * sizes the counter-data image; launches beyond it are dropped (and counted in the note). The caller joins
 * the kernels to sub-blocks (join_by_launch_order) and aggregates them (aggregate_counters).
 */
CounterReport collect_counters(const std::function<void()>& step, size_t max_kernels,
                               const std::function<std::string(const char*)>& demangle_name);

} // namespace llmc::prof
